//! The filter on a real interface: a veth pair between a sender namespace and a victim
//! namespace (the PoP), the loader attached in driver mode and in skb mode. Scapy sends
//! each kind of junk; a legitimate HTTP client keeps working; the counters match what was
//! sent; SIGHUP swaps the blocklist without detaching. Root.

use std::time::{Duration, Instant};

use testkit::xdp::Lab;

fn junk_counts_match(mode: &str, tag: &str) {
    let mut lab = Lab::new(tag);
    let victim = lab.victim.clone();
    lab.spawn(
        &victim,
        &[
            "/usr/bin/python3",
            "-u",
            "-m",
            "http.server",
            "80",
            "--bind",
            "192.0.2.10",
        ],
        "http.log",
    );
    // The loader can be ready before python listens: a refused curl is not a drop.
    let serving = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(lab.dir.path().join("http.log"))
        .unwrap_or_default()
        .contains("Serving HTTP")
    {
        assert!(
            Instant::now() < serving,
            "http.server not listening in 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let config = lab.config(mode, "203.0.113.0/24");
    let loader = lab.start_loader(&config);
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
    testkit::require_root!("XDP on a veth in network namespaces");
    junk_counts_match("driver", "d");
}

#[test]
fn veth_skb_mode() {
    testkit::require_root!("XDP on a veth in network namespaces");
    junk_counts_match("skb", "s");
}
