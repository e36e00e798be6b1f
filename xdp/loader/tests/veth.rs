//! The filter on a real interface: a veth pair between a sender namespace and a victim
//! namespace (the PoP), the loader attached in driver mode and in skb mode. Scapy sends
//! each kind of junk; a legitimate HTTP client keeps working; the counters match what was
//! sent; SIGHUP swaps the blocklist without detaching. Root.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Lab {
    sender: String,
    victim: String,
    veth: String,
    dir: tempfile::TempDir,
    children: Vec<Child>,
}

fn sh(args: &[&str]) {
    let status = Command::new(args[0])
        .args(&args[1..])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{args:?}");
}

impl Lab {
    fn new(tag: &str) -> Lab {
        let id = std::process::id() % 100_000;
        let lab = Lab {
            sender: format!("xs-{tag}-{id}"),
            victim: format!("xv-{tag}-{id}"),
            veth: format!("v{tag}{id}"),
            dir: tempfile::tempdir().unwrap(),
            children: Vec::new(),
        };
        let peer = format!("s{tag}{id}");
        for ns in [&lab.sender, &lab.victim] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            sh(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
            ]);
        }
        sh(&[
            "ip",
            "link",
            "add",
            &peer,
            "netns",
            &lab.sender,
            "type",
            "veth",
            "peer",
            "name",
            &lab.veth,
            "netns",
            &lab.victim,
        ]);
        sh(&[
            "ip",
            "-n",
            &lab.sender,
            "addr",
            "add",
            "198.18.0.1/30",
            "dev",
            &peer,
        ]);
        sh(&[
            "ip",
            "-n",
            &lab.victim,
            "addr",
            "add",
            "198.18.0.2/30",
            "dev",
            &lab.veth,
        ]);
        sh(&[
            "ip",
            "-n",
            &lab.victim,
            "addr",
            "add",
            "192.0.2.10/32",
            "dev",
            "lo",
        ]);
        sh(&["ip", "-n", &lab.sender, "link", "set", &peer, "up"]);
        sh(&["ip", "-n", &lab.victim, "link", "set", &lab.veth, "up"]);
        sh(&[
            "ip",
            "-n",
            &lab.sender,
            "route",
            "add",
            "192.0.2.10/32",
            "via",
            "198.18.0.2",
        ]);
        lab
    }

    fn spawn(&mut self, ns: &str, args: &[&str], log: &str) -> u32 {
        let out = std::fs::File::create(self.dir.path().join(log)).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let pid = child.id();
        self.children.push(child);
        pid
    }

    fn exec(&self, ns: &str, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn config(&self, mode: &str, blocklist: &str) -> std::path::PathBuf {
        let path = self.dir.path().join("xdp.yaml");
        std::fs::write(
            &path,
            format!(
                "pop: test\ninterface: {}\nmode: {mode}\nmetrics_listen: 127.0.0.1:19182\nprotected: [192.0.2.10/32]\n\
                 tcp_ports: [80, 443]\nblocklist: [{blocklist}]\nsyn_rate: {{ per_second: 1, burst: 5 }}\n",
                self.veth
            ),
        )
        .unwrap();
        path
    }

    fn counters(&self) -> std::collections::HashMap<String, u64> {
        let text = self.exec(&self.victim, &["curl", "-s", "127.0.0.1:19182/metrics"]);
        text.lines()
            .filter(|l| l.starts_with("xdp_packets_total"))
            .filter_map(|l| {
                let reason = l.split("reason=\"").nth(1)?.split('"').next()?.to_owned();
                Some((reason, l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    fn legit_requests(&self, n: usize) -> usize {
        (0..n)
            .filter(|_| {
                self.exec(
                    &self.sender,
                    &[
                        "curl",
                        "-s",
                        "-m",
                        "3",
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

    fn scapy(&self, script: &str) {
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

    fn xdp_prog_id(&self) -> String {
        let out = self.exec(&self.victim, &["ip", "-d", "link", "show", &self.veth]);
        out.split("prog/xdp id ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or("")
            .to_owned()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in [&self.sender, &self.victim] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn junk_counts_match(mode: &str, tag: &str) {
    let mut lab = Lab::new(tag);
    let victim = lab.victim.clone();
    lab.spawn(
        &victim,
        &[
            "/usr/bin/python3",
            "-m",
            "http.server",
            "80",
            "--bind",
            "192.0.2.10",
        ],
        "http.log",
    );
    let config = lab.config(mode, "203.0.113.0/24");
    let loader = lab.spawn(
        &victim,
        &[
            env!("CARGO_BIN_EXE_edge-xdp"),
            "run",
            "--config",
            config.to_str().unwrap(),
        ],
        "xdp.log",
    );
    let started = Instant::now();
    while lab.counters().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "loader not up: {}",
            std::fs::read_to_string(lab.dir.path().join("xdp.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(lab.dir.path().join("xdp.log")).unwrap();
    assert!(
        log.contains(&format!("mode=\"{mode}\"")) || log.contains(&format!("mode={mode}")),
        "{log}"
    );
    assert_eq!(
        lab.legit_requests(3),
        3,
        "legitimate client before the junk"
    );

    lab.scapy(
        "send(IP(dst=VIP)/TCP(dport=443, flags='SF'), count=20)\n\
         send(IP(dst=VIP, flags='MF')/TCP(dport=443, flags='A'), count=10)\n\
         send(IP(dst=VIP)/UDP(dport=53)/Raw(b'x' * 32), count=15)\n\
         send(IP(dst=VIP)/TCP(dport=22, flags='S'), count=12)\n\
         send(IP(src='203.0.113.5', dst=VIP)/TCP(dport=443, flags='S'), count=8)\n\
         send(IP(src='100.64.77.1', dst=VIP)/TCP(sport=RandShort(), dport=443, flags='S'), count=30)",
    );
    std::thread::sleep(Duration::from_millis(200));
    let c = lab.counters();
    assert_eq!(c["tcp_flags"], 20, "{c:?}");
    assert_eq!(c["fragment"], 10, "{c:?}");
    assert_eq!(c["protocol"], 15, "{c:?}");
    assert_eq!(c["port"], 12, "{c:?}");
    assert_eq!(c["blocklist"], 8, "{c:?}");
    assert!(
        (24..=25).contains(&c["syn_rate"]),
        "30 SYNs at burst 5, 1/s: {c:?}"
    );
    assert_eq!(c["malformed"], 0, "{c:?}");
    assert_eq!(lab.legit_requests(3), 3, "legitimate client after the junk");

    // SIGHUP swaps the blocklist; the program stays attached, connections keep working.
    let prog = lab.xdp_prog_id();
    assert!(!prog.is_empty(), "an XDP program is attached");
    lab.config(mode, "100.64.88.0/24");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(loader as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    lab.scapy("send(IP(src='100.64.88.1', dst=VIP)/TCP(dport=443, flags='S'), count=7)\nsend(IP(src='203.0.113.5', dst=VIP)/TCP(dport=443, flags='A'), count=4)");
    std::thread::sleep(Duration::from_millis(200));
    let after = lab.counters();
    assert_eq!(
        after["blocklist"],
        8 + 7,
        "the new blocklist applies, the old one is gone: {after:?}"
    );
    assert_eq!(
        lab.xdp_prog_id(),
        prog,
        "reload did not detach or replace the program"
    );
    assert_eq!(
        lab.legit_requests(2),
        2,
        "legitimate client after the reload"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(loader as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let started = Instant::now();
    while !lab.xdp_prog_id().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "SIGTERM did not detach"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn veth_driver_mode() {
    junk_counts_match("driver", "d");
}

#[test]
fn veth_skb_mode() {
    junk_counts_match("skb", "s");
}
