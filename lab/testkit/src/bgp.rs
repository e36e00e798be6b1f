//! Network namespaces with real BIRD and ExaBGP for the agent's integration tests:
//! an upstream router `up` (BIRD, AS 65000) and a PoP `pop` (AS 65001) joined by a veth
//! pair. Everything is created here and removed on drop; processes are stopped by PID.

use std::path::{Path, PathBuf};
use std::process::Command;

use ::lab::netns;
use std::time::{Duration, Instant};

/// The anycast prefix the agent announces.
pub const VIP: &str = "192.0.2.10/32";
/// The upstream router's address on the veth.
pub const UP_ADDR: &str = "198.51.100.1";
/// The PoP's address on the veth.
pub const POP_ADDR: &str = "198.51.100.2";

/// An upstream namespace and a PoP namespace, with their files in a temporary directory.
pub struct Lab {
    /// The upstream namespace's name.
    pub up: String,
    /// The PoP namespace's name.
    pub pop: String,
    /// Configs and logs.
    pub dir: tempfile::TempDir,
    net: netns::VethPair,
}

/// The `bgp-agent` binary.
pub fn agent_bin() -> &'static str {
    crate::built_binary("bgp-agent")
}

impl Lab {
    /// Two namespaces, a veth between them, and BIRD running in `up`.
    pub fn new(tag: &str) -> Lab {
        let id = std::process::id() % 100_000;
        let (up, pop) = (format!("bga-up-{tag}-{id}"), format!("bga-pop-{tag}-{id}"));
        let (veth_up, veth_pop) = (format!("u{tag}{id}"), format!("p{tag}{id}"));
        let net = netns::VethPair::new(
            (&up, &veth_up, &format!("{UP_ADDR}/30")),
            (&pop, &veth_pop, &format!("{POP_ADDR}/30")),
        )
        .unwrap();
        Lab {
            up,
            pop,
            dir: tempfile::tempdir().unwrap(),
            net,
        }
    }

    /// A file in the lab's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts a process inside a namespace, logging to `log`.
    pub fn spawn(&mut self, ns: &str, args: &[&str], log: &str) -> u32 {
        let log = self.path(log);
        self.net.spawn(ns, args, &log)
    }

    /// BIRD in the upstream namespace: AS 65000, importing what the PoP announces into the kernel table.
    pub fn start_upstream_bird(&mut self) {
        let conf = self.path("up-bird.conf");
        std::fs::write(
            &conf,
            format!(
                "router id {UP_ADDR};\n\
                 protocol device {{ scan time 10; }}\n\
                 protocol kernel {{ ipv4 {{ import none; export all; }}; }}\n\
                 protocol bgp pop {{\n  local {UP_ADDR} as 65000; neighbor {POP_ADDR} as 65001;\n  {TIMERS}\n  ipv4 {{ import filter {{ {HONOUR_GRACEFUL_SHUTDOWN} accept; }}; export none; }};\n}}\n"
            ),
        )
        .unwrap();
        let ns = self.up.clone();
        self.spawn_bird(&ns, &conf, "up-bird");
    }

    /// BIRD as the PoP's speaker: a static route for the VIP, exported only while the
    /// agent's include file lists it (tagged 65535:0 while its GSHUT set does). The
    /// include starts as `withdrawn`: what the agent writes with nothing announced.
    pub fn start_pop_bird(&mut self, include: &Path, withdrawn: &str) -> PathBuf {
        std::fs::write(include, withdrawn).unwrap();
        let conf = self.path("pop-bird.conf");
        std::fs::write(
            &conf,
            format!(
                "router id {POP_ADDR};\n\
                 include \"{}\";\n\
                 protocol device {{ scan time 10; }}\n\
                 protocol static anycast {{ ipv4; route {VIP} blackhole; }}\n\
                 protocol bgp up {{\n  local {POP_ADDR} as 65001; neighbor {UP_ADDR} as 65000;\n  {TIMERS}\n  ipv4 {{ import none; export filter {{ if net ~ ANYCAST_V4_GSHUT then bgp_community.add((65535, 0)); if net ~ ANYCAST_V4_DEGRADED then {{ bgp_path.prepend(65001); bgp_path.prepend(65001); }} if net ~ ANYCAST_V4 then accept; reject; }}; }};\n}}\n",
                include.display()
            ),
        )
        .unwrap();
        let ns = self.pop.clone();
        self.spawn_bird(&ns, &conf, "pop-bird")
    }

    /// BIRD in `ns` with `conf`, its socket `NAME.ctl` and its log `NAME.log`; returns
    /// the socket.
    fn spawn_bird(&mut self, ns: &str, conf: &Path, name: &str) -> PathBuf {
        let sock = self.path(&format!("{name}.ctl"));
        let args = [
            "bird",
            "-f",
            "-c",
            conf.to_str().unwrap(),
            "-s",
            sock.to_str().unwrap(),
        ];
        self.spawn(ns, &args, &format!("{name}.log"));
        sock
    }

    /// ExaBGP in the PoP namespace, peering with the upstream, running `process` (a
    /// command line) as its API process. Returns ExaBGP's PID.
    pub fn start_exabgp(&mut self, process: &str, log: &str) -> u32 {
        let conf = self.path("exabgp.conf");
        std::fs::write(
            &conf,
            format!(
                "process speaker {{\n  run {process};\n  encoder text;\n}}\n\
                 neighbor {UP_ADDR} {{\n  router-id {POP_ADDR};\n  local-address {POP_ADDR};\n  local-as 65001;\n  peer-as 65000;\n  hold-time 9;\n  api {{ processes [ speaker ]; neighbor-changes; }}\n}}\n"
            ),
        )
        .unwrap();
        let pop = self.pop.clone();
        self.spawn(
            &pop,
            &[
                "env",
                "exabgp.daemon.user=root",
                "exabgp.api.cli=false",
                "exabgp.log.destination=stdout",
                "exabgp",
                conf.to_str().unwrap(),
            ],
            log,
        )
    }

    /// BGP UPDATE messages (announcements plus withdrawals) the upstream received.
    pub fn upstream_updates(&self) -> u64 {
        let out = Command::new("birdc")
            .args([
                "-s",
                self.path("up-bird.ctl").to_str().unwrap(),
                "show",
                "protocols",
                "all",
                "pop",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let received = |line: &str| {
            line.split_whitespace()
                .nth(2)
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        text.lines()
            .map(str::trim)
            .filter(|l| l.starts_with("Import updates:") || l.starts_with("Import withdraws:"))
            .map(received)
            .sum()
    }

    /// A stand-in for the edge's admin listener: `/metrics` serves
    /// `edge_spool_fill_ratio` as written in the file `fill` beside `flag` (0.1 when
    /// absent); every other path is `/readyz`, 200 while `flag` exists, 503 otherwise.
    pub fn start_fake_edge(&mut self, port: u16, flag: &Path) {
        let script = self.path("fake_edge.py");
        std::fs::write(
            &script,
            r#"import http.server, os, sys
flag = sys.argv[2]
fill = os.path.join(os.path.dirname(flag), "fill")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/metrics":
            value = open(fill).read().strip() if os.path.exists(fill) else "0.1"
            self.send_response(200)
            self.end_headers()
            self.wfile.write(("edge_spool_fill_ratio{pop=\"test\"} %s\n" % value).encode())
            return
        ok = os.path.exists(flag)
        self.send_response(200 if ok else 503)
        self.end_headers()
        self.wfile.write(b"ready\n" if ok else b"not ready\n")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#,
        )
        .unwrap();
        let ns = self.pop.clone();
        self.spawn(
            &ns,
            &[
                "/usr/bin/python3",
                script.to_str().unwrap(),
                &port.to_string(),
                flag.to_str().unwrap(),
            ],
            "fake-edge.log",
        );
    }

    /// True when the upstream's BIRD holds the VIP tagged GRACEFUL_SHUTDOWN (65535:0).
    pub fn upstream_sees_graceful_shutdown(&self) -> bool {
        let out = Command::new("birdc")
            .args(["-s", self.path("up-bird.ctl").to_str().unwrap()])
            .args(["show", "route", VIP, "all"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("(65535,0)")
    }

    /// The AS path of the upstream's route to the VIP (empty without one).
    pub fn upstream_as_path(&self) -> Vec<u32> {
        let out = Command::new("birdc")
            .args(["-s", self.path("up-bird.ctl").to_str().unwrap()])
            .args(["show", "route", VIP, "all"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|line| line.trim().strip_prefix("BGP.as_path:"))
            .map(|path| {
                path.split_whitespace()
                    .filter_map(|asn| asn.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// True when the upstream's kernel table holds the VIP (learned over BGP).
    pub fn upstream_has_vip(&self) -> bool {
        let out = Command::new("ip")
            .args(["-n", &self.up, "route", "show", VIP])
            .output()
            .unwrap();
        !String::from_utf8_lossy(&out.stdout).trim().is_empty()
    }

    /// Waits until the upstream's FIB has (or lacks) the VIP; returns how long it took.
    pub fn wait_vip(&self, present: bool, limit: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if self.upstream_has_vip() == present {
                return Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Runs a command in the PoP namespace and returns its stdout.
    pub fn pop_exec(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.pop])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The PID of `parent`'s only child (a supervised process); panics if it has none.
    pub fn child_of(&self, parent: u32) -> u32 {
        let started = Instant::now();
        loop {
            let out = Command::new("pgrep")
                .args(["-P", &parent.to_string()])
                .output()
                .unwrap();
            if let Some(pid) = String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .and_then(|l| l.trim().parse().ok())
            {
                return pid;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{parent} has no child"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the log `name` contains `needle`; returns the log from there on.
    pub fn wait_log(&self, name: &str, needle: &str, limit: Duration) -> String {
        let started = Instant::now();
        loop {
            let log = self.log(name);
            if let Some(at) = log.find(needle) {
                return log[at..].to_owned();
            }
            assert!(
                started.elapsed() < limit,
                "{name} never said {needle:?}:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The text of the log file `name`.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// Sends `signal` to `pid`.
    pub fn kill(&mut self, pid: u32, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
    }

    /// Waits up to `limit` for `pid` to exit; whether it did.
    pub fn wait_exit(&mut self, pid: u32, limit: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit {
            if self.net.exited(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

/// What an upstream does with RFC 8326's community (the lab router does the same).
const HONOUR_GRACEFUL_SHUTDOWN: &str = "if (65535, 0) ~ bgp_community then bgp_local_pref = 0;";
const TIMERS: &str = "hold time 9; keepalive time 3; connect retry time 2; connect delay time 1; error wait time 1,5;";

/// How long the tests' agents announce with 65535:0 before a drain's or a stop's withdraw.
pub const GRACEFUL_WAIT_MS: u64 = 1000;

/// The agent's config for these tests: fast rounds, small rise/fall, a short hold-down,
/// no dampening (the unit tests cover it), a 1 s graceful shutdown, and a soft drain
/// while the (fake) edge's spool is over half full.
pub fn agent_config(lab: &Lab, admin_port: u16, edge_port: u16, speaker: &str) -> PathBuf {
    let path = lab.path("agent.yaml");
    std::fs::write(
        &path,
        format!(
            "pop: test\nprefixes: [\"{VIP}\"]\nstate_dir: {state}\nadmin_listen: 127.0.0.1:{admin_port}\n\
             interval: 100ms\nfast_interval: 50ms\nrise: 3\nfall: 2\nhold_down: 2s\ndampening: null\n\
             graceful_shutdown: {{ wait: {GRACEFUL_WAIT_MS}ms }}\n\
             checks:\n  - {{ name: edge, kind: http, url: \"http://127.0.0.1:{edge_port}/readyz\", timeout: 200ms }}\n\
             \x20 - {{ name: spool, kind: metric, url: \"http://127.0.0.1:{edge_port}/metrics\", metric: edge_spool_fill_ratio, max: 0.5, class: degrade, timeout: 200ms }}\n\
             speaker: {speaker}\n",
            state = lab.path("state").display(),
        ),
    )
    .unwrap();
    path
}
