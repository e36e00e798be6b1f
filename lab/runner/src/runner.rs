//! The topology brought up as network namespaces: `up` builds nodes, links, addresses
//! and routes, copies each node's binds into its directory (container paths rewritten),
//! starts its services with pidfiles and waits for BGP; `down` undoes all of it and is
//! safe to run at any time, also after a crash.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::netns::{self, namespace};
use crate::topology::{PathMap, Service, TEMPLATE_SUFFIX, Topology, render};

/// A topology run as network namespaces: where its files and state are.
pub struct Lab {
    /// The parsed topology file.
    pub topology: Topology,
    /// The directory of the topology file: bind sources are relative to it.
    pub source_dir: PathBuf,
    /// Per-node directories, pidfiles and logs.
    pub state_dir: PathBuf,
    /// The workspace's release binaries (/usr/local/bin in the nodes).
    pub bin_dir: PathBuf,
}

impl Lab {
    /// Reads `topology_file`; state goes under `state_dir`, binaries come from `bin_dir`.
    pub fn load(topology_file: &Path, state_dir: &Path, bin_dir: &Path) -> anyhow::Result<Lab> {
        let text = std::fs::read_to_string(topology_file)
            .with_context(|| format!("reading {}", topology_file.display()))?;
        let topology =
            Topology::parse(&text).with_context(|| format!("{}", topology_file.display()))?;
        Ok(Lab {
            topology,
            source_dir: topology_file
                .parent()
                .unwrap_or(Path::new("."))
                .to_path_buf(),
            state_dir: state_dir.to_path_buf(),
            bin_dir: bin_dir.to_path_buf(),
        })
    }

    /// Builds everything and starts every service; a previous lab is removed first.
    /// `machines` are nodes whose services a booted machine runs instead (the Ansible
    /// test's PoPs join their namespaces): they get links, addresses and routes only,
    /// and BGP is not awaited.
    pub fn up(&self, machines: &[String]) -> anyhow::Result<()> {
        for machine in machines {
            self.topology.node(machine)?;
        }
        self.down();
        let bare = |name: &String| machines.contains(name);
        for (name, node) in self.topology.nodes() {
            netns::create(&namespace(name))?;
            let map = self.paths(name);
            for bind in node.binds()?.into_iter().filter(|_| !bare(name)) {
                let source = self.source_dir.join(&bind.source);
                let mut text = std::fs::read_to_string(&source)
                    .with_context(|| format!("{name}: bind {}", source.display()))?;
                let mut target = bind.target.as_str();
                if let Some(rendered) = bind.target.strip_suffix(TEMPLATE_SUFFIX) {
                    text = render(&text, &node.env)
                        .with_context(|| format!("{name}: template {}", source.display()))?;
                    target = rendered;
                }
                let target = PathBuf::from(map.host_path(target));
                std::fs::create_dir_all(target.parent().context("bind target")?)?;
                std::fs::write(&target, map.rewrite(&text))?;
            }
            for dir in ["etc", "var/lib", "run"] {
                std::fs::create_dir_all(Path::new(&map.node_root).join(dir))?;
            }
        }
        for link in &self.topology.topology.links {
            let [a, b] = self.topology.endpoints(link)?;
            netns::veth(
                (&namespace(&a.node), &a.interface),
                (&namespace(&b.node), &b.interface),
            )?;
        }
        for (name, node) in self.topology.nodes() {
            let map = self.paths(name);
            for command in &node.exec {
                netns::run_ok(&namespace(name), &map.rewrite(command))?;
            }
        }
        for (name, node) in self.topology.nodes().filter(|(name, _)| !bare(name)) {
            for service in node.services()? {
                self.start_service(name, &service)?;
            }
        }
        self.make_origin_stream(Duration::from_secs(120))?;
        if machines.is_empty() {
            self.wait_for_bgp(Duration::from_secs(60))?;
        }
        Ok(())
    }

    /// Makes the origin's stream as its administrator (`edge create-stream`, what the
    /// controller runs in production: the PoPs' users may only publish), once the
    /// cluster has a quorum; from the origin's own node, which every topology has.
    /// A cluster that still cannot place it after [`ORIGIN_STUCK`] is restarted once.
    fn make_origin_stream(&self, timeout: Duration) -> anyhow::Result<()> {
        let command = format!(
            "{} create-stream --servers {} --stream WEBHOOKS --replicas 3 --ca {} --nkey-seed-file {}",
            self.bin_dir.join("edge").display(),
            crate::ORIGIN_SERVERS,
            self.source_dir.join("origin/tls/ca.pem").display(),
            self.source_dir.join("origin/admin.nk").display(),
        );
        let started = Instant::now();
        let deadline = started + timeout;
        let mut restarted = false;
        loop {
            match netns::run_ok(&namespace("origin"), &command) {
                Ok(_) => return Ok(()),
                Err(e) if !restarted && started.elapsed() > ORIGIN_STUCK => {
                    // nats-server 2.10.27 once elected a metadata leader and then
                    // refused placement for 2 minutes ("no suitable peers for
                    // placement", CI 2026-12-05; not reproduced in 16 bring-ups since).
                    // What an operator would do: restart the cluster.
                    eprintln!(
                        "lab: the origin's stream not made in {ORIGIN_STUCK:?} ({:#}); restarting its servers",
                        e.root_cause()
                    );
                    self.restart_services("origin")?;
                    restarted = true;
                }
                Err(e) if Instant::now() > deadline => {
                    let logs = self.state_dir.join("origin/logs");
                    let tails: Vec<String> = ["nats-1", "nats-2", "nats-3"]
                        .iter()
                        .map(|server| {
                            let log = std::fs::read_to_string(logs.join(format!("{server}.log")))
                                .unwrap_or_default();
                            let tail: Vec<&str> = log.lines().rev().take(15).collect();
                            format!(
                                "{server}:\n{}",
                                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                            )
                        })
                        .collect();
                    return Err(e.context(format!(
                        "the origin's stream was not made in {timeout:?}; the servers' last lines:\n{}",
                        tails.join("\n")
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }

    /// Stops every service and removes every namespace and the state directory.
    pub fn down(&self) {
        for node in netns::lab_nodes() {
            for pid in pidfiles(&self.state_dir.join(&node).join("pids")) {
                stop_pid(pid.1);
            }
        }
        for node in netns::lab_nodes() {
            netns::delete(&namespace(&node));
        }
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }

    /// Stops every service of `node` (SIGTERM), then starts them again.
    fn restart_services(&self, node: &str) -> anyhow::Result<()> {
        let services = self.topology.node(node)?.services()?;
        for service in &services {
            self.stop_service(node, &service.name, Signal::SIGTERM)?;
        }
        for service in &services {
            self.start_service(node, service)?;
        }
        Ok(())
    }

    /// Starts one of a node's services in its namespace, logging to its log file.
    pub fn start_service(&self, node: &str, service: &Service) -> anyhow::Result<u32> {
        let dir = self.state_dir.join(node);
        std::fs::create_dir_all(dir.join("pids"))?;
        std::fs::create_dir_all(dir.join("logs"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("logs").join(format!("{}.log", service.name)))?;
        let child = netns::command(
            &namespace(node),
            &self.paths(node).rewrite(&service.command),
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("{node}: starting {}", service.name))?;
        let pid = child.id();
        std::fs::write(self.pidfile(node, &service.name), pid.to_string())?;
        Ok(pid)
    }

    /// Stops a service (SIGTERM, then SIGKILL after 10 s) and removes its pidfile.
    pub fn stop_service(&self, node: &str, service: &str, signal: Signal) -> anyhow::Result<()> {
        let pidfile = self.pidfile(node, service);
        let pid = read_pid(&pidfile).with_context(|| format!("{node}: {service} not running"))?;
        if signal == Signal::SIGKILL {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            wait_gone(pid, Duration::from_secs(5));
        } else {
            let _ = kill(Pid::from_raw(pid), signal);
            if !wait_gone(pid, Duration::from_secs(10)) {
                stop_pid(pid);
            }
        }
        let _ = std::fs::remove_file(pidfile);
        Ok(())
    }

    /// Each node's services and whether they run, BGP sessions and the anycast routes
    /// as the router sees them.
    pub fn status(&self) -> anyhow::Result<String> {
        let mut out = String::new();
        for (name, node) in self.topology.nodes() {
            let up = netns::exists(&namespace(name));
            out.push_str(&format!("{name:<9} {}", if up { "up  " } else { "down" }));
            for service in node.services()? {
                let state = match read_pid(&self.pidfile(name, &service.name)) {
                    Some(pid) if alive(pid) => format!("{}({pid})", service.name),
                    _ => format!("{}(stopped)", service.name),
                };
                out.push_str(&format!(" {state}"));
            }
            out.push('\n');
        }
        for (name, node) in self.topology.nodes() {
            if node.services()?.iter().any(|s| s.name == "bird") && netns::exists(&namespace(name))
            {
                // A stopped BIRD (or one left to a machine) is a status, not an error.
                let sessions = self
                    .bgp_sessions(name)
                    .unwrap_or_else(|e| format!("{e:#}\n"));
                out.push_str(&format!("\n{name}: BGP\n{sessions}"));
            }
        }
        Ok(out)
    }

    /// `birdc show protocols` on a node running BIRD.
    pub fn bgp_sessions(&self, node: &str) -> anyhow::Result<String> {
        let socket = self.paths(node).host_path("/run/bird.ctl");
        netns::run_ok(
            &namespace(node),
            &format!("birdc -s {socket} show protocols"),
        )
    }

    /// The router's kernel route to `prefix`: its next hops (one per PoP under ECMP).
    pub fn next_hops(&self, router: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
        let family = if prefix.contains(':') { "-6" } else { "-4" };
        let routes = netns::run_ok(
            &namespace(router),
            &format!("ip {family} route show {prefix}"),
        )?;
        Ok(next_hops_in(&routes))
    }

    /// How `node`'s container paths map onto the host.
    pub fn paths(&self, node: &str) -> PathMap {
        PathMap {
            node_root: self.state_dir.join(node).join("root").display().to_string(),
            bin_dir: self.bin_dir.display().to_string(),
        }
    }

    /// The log file of `service` on `node`.
    pub fn log(&self, node: &str, service: &str) -> PathBuf {
        self.state_dir
            .join(node)
            .join("logs")
            .join(format!("{service}.log"))
    }

    fn pidfile(&self, node: &str, service: &str) -> PathBuf {
        self.state_dir
            .join(node)
            .join("pids")
            .join(format!("{service}.pid"))
    }

    fn wait_for_bgp(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let routers: Vec<&String> = self
            .topology
            .nodes()
            .filter(|(_, node)| {
                node.services()
                    .is_ok_and(|s| s.iter().any(|s| s.name == "bird"))
            })
            .map(|(name, _)| name)
            .collect();
        loop {
            let mut waiting = Vec::new();
            for router in &routers {
                let sessions = self.bgp_sessions(router).unwrap_or_default();
                let bgp: Vec<&str> = sessions.lines().filter(|l| l.contains(" BGP ")).collect();
                if bgp.is_empty() || bgp.iter().any(|l| !l.contains("Established")) {
                    waiting.push(format!("{router}:\n{sessions}"));
                }
            }
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "BGP sessions not Established after {timeout:?}:\n{}",
                    waiting.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The next hops (`via ADDRESS`) in `ip route show`'s output.
pub fn next_hops_in(routes: &str) -> Vec<String> {
    routes
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "via")
        .map(|w| w[1].to_owned())
        .collect()
}

fn pidfiles(dir: &Path) -> Vec<(PathBuf, i32)> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| {
                    let path = e.ok()?.path();
                    let pid = read_pid(&path)?;
                    Some((path, pid))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0); its /proc state says Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z")
        })
        .unwrap_or(false)
}

fn wait_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// SIGTERM, a few seconds, then SIGKILL.
fn stop_pid(pid: i32) {
    if !alive(pid) {
        return;
    }
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    if !wait_gone(pid, Duration::from_secs(5)) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        wait_gone(pid, Duration::from_secs(2));
    }
}

/// How long the origin's cluster may fail to place the stream before `up` restarts it.
const ORIGIN_STUCK: Duration = Duration::from_secs(30);
