//! A sender namespace and a victim namespace (the PoP) joined by a veth pair, for the
//! XDP tests and benchmarks. Created here, removed on drop; processes stopped by PID.

use std::process::Command;

use ::lab::netns;

/// A sender namespace and a victim namespace joined by a veth pair.
pub struct Lab {
    /// The sender's namespace.
    pub sender: String,
    /// The victim's namespace (the PoP).
    pub victim: String,
    /// The victim's end of the veth.
    pub veth: String,
    /// The sender's end.
    pub peer: String,
    /// Configs and logs.
    pub dir: tempfile::TempDir,
    net: netns::VethPair,
}

impl Lab {
    /// Creates both namespaces and the veth; `tag` keeps parallel tests apart.
    pub fn new(tag: &str) -> Lab {
        let id = std::process::id() % 100_000;
        let (sender, victim) = (format!("xs-{tag}-{id}"), format!("xv-{tag}-{id}"));
        let (veth, peer) = (format!("v{tag}{id}"), format!("s{tag}{id}"));
        let net = netns::VethPair::new(
            (&sender, &peer, "198.18.0.1/30"),
            (&victim, &veth, "198.18.0.2/30"),
        )
        .unwrap();
        for (ns, command) in [
            (&sender, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1"),
            (&victim, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1"),
            (&victim, "ip addr add 192.0.2.10/32 dev lo"),
            (&sender, "ip route add 192.0.2.10/32 via 198.18.0.2"),
        ] {
            netns::run_ok(ns, command).unwrap();
        }
        Lab {
            sender,
            victim,
            veth,
            peer,
            dir: tempfile::tempdir().unwrap(),
            net,
        }
    }

    /// Starts `args` in namespace `ns`, logging to `log`; returns its PID.
    pub fn spawn(&mut self, ns: &str, args: &[&str], log: &str) -> u32 {
        let log = self.dir.path().join(log);
        self.net.spawn(ns, args, &log)
    }

    /// Starts `edge-xdp run` in the victim namespace with `config` and waits until its
    /// metrics answer; returns its PID.
    pub fn start_loader(&mut self, config: &std::path::Path) -> u32 {
        let victim = self.victim.clone();
        let loader = self.spawn(
            &victim,
            &[
                crate::built_binary("edge-xdp"),
                "run",
                "--config",
                config.to_str().unwrap(),
            ],
            "xdp.log",
        );
        let started = std::time::Instant::now();
        while self.counters().is_empty() {
            let log = std::fs::read_to_string(self.dir.path().join("xdp.log")).unwrap_or_default();
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "edge-xdp not up: {log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        loader
    }

    /// Runs the shell `command` in namespace `ns`; panics if it fails.
    pub fn run_ok(&self, ns: &str, command: &str) {
        netns::run_ok(ns, command).unwrap_or_else(|e| panic!("{ns}: {command}: {e:#}"));
    }

    /// Runs `args` in namespace `ns` and returns its stdout.
    pub fn exec(&self, ns: &str, args: &[&str]) -> String {
        netns::output(ns, args)
    }

    /// Writes an edge-xdp config for the victim's veth in `mode` with `blocklist`; returns its path.
    pub fn config(&self, mode: &str, blocklist: &str) -> std::path::PathBuf {
        self.config_with(mode, blocklist, "")
    }

    /// As [`Lab::config`], with `extra` (top-level YAML) appended.
    pub fn config_with(&self, mode: &str, blocklist: &str, extra: &str) -> std::path::PathBuf {
        let path = self.dir.path().join("xdp.yaml");
        std::fs::write(
            &path,
            format!(
                "pop: test\ninterface: {}\nmode: {mode}\nmetrics_listen: 127.0.0.1:19182\nprotected: [192.0.2.10/32]\n\
                 tcp_ports: [80, 443]\nblocklist: [{blocklist}]\nsyn_rate: {{ per_second: 1, burst: 5 }}\n{extra}",
                self.veth
            ),
        )
        .unwrap();
        path
    }

    /// The loader's `/metrics` page.
    pub fn metrics(&self) -> String {
        self.exec(&self.victim, &["curl", "-s", "127.0.0.1:19182/metrics"])
    }

    /// The filter's counters, by reason.
    pub fn counters(&self) -> std::collections::HashMap<String, u64> {
        let text = self.metrics();
        text.lines()
            .filter(|l| l.starts_with("xdp_packets_total"))
            .filter_map(|l| {
                let reason = l.split("reason=\"").nth(1)?.split('"').next()?.to_owned();
                Some((reason, l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    /// Sends `n` HTTP requests from the sender to the VIP; how many were answered.
    pub fn legit_requests(&self, n: usize) -> usize {
        self.requests_from("198.18.0.1", n)
    }

    /// Sends `n` HTTP requests to the VIP from the sender's address `source`; how many
    /// were answered.
    pub fn requests_from(&self, source: &str, n: usize) -> usize {
        (0..n)
            .filter(|_| {
                self.exec(
                    &self.sender,
                    &[
                        "curl",
                        "-s",
                        "-m",
                        "3",
                        "--interface",
                        source,
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code}",
                        "http://192.0.2.10/",
                    ],
                ) == "200"
            })
            .count()
    }

    /// Runs a scapy script in the sender namespace.
    pub fn scapy(&self, script: &str) {
        let path = self.dir.path().join("junk.py");
        std::fs::write(
            &path,
            format!("from scapy.all import *\nconf.verb = 0\nVIP = '192.0.2.10'\n{script}\n"),
        )
        .unwrap();
        let out = Command::new("ip")
            .args(["netns", "exec", &self.sender, "/usr/bin/python3"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scapy: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The id of the XDP program attached to the victim's veth.
    pub fn xdp_prog_id(&self) -> String {
        let out = self.exec(&self.victim, &["ip", "-d", "link", "show", &self.veth]);
        out.split("prog/xdp id ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or("")
            .to_owned()
    }
}
