//! The filter on a real interface: a veth pair between a sender namespace and a victim
//! namespace (the PoP), the loader attached in driver mode and in skb mode. Scapy sends
//! each kind of junk; a legitimate HTTP client keeps working; the counters match what was
//! sent; SIGHUP swaps the blocklist without detaching. Root.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::time::{Duration, Instant, SystemTime};

use testkit::xdp::Lab;

fn junk_counts_match(mode: &str, tag: &str) {
    let mut lab = Lab::new(tag);
    serve_http(&mut lab);
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

/// Under-attack mode on a real interface. Forced on, the listed sender keeps being served
/// and another address of the same host is dropped and counted; the operator's `off`
/// lifts it within a second; in `auto` a SYN flood raises it and calm lowers it after the
/// hold; a provider list older than `max_age` fails open.
#[test]
fn under_attack_mode_keeps_only_the_provider_ranges() {
    testkit::require_root!("XDP on a veth in network namespaces");
    let mut lab = Lab::new("u");
    serve_http(&mut lab);
    // A second sender address, in no provider's range.
    lab.run_ok(&lab.sender, "ip addr add 10.99.0.1/32 dev lo");
    lab.run_ok(&lab.victim, "ip route add 10.99.0.1/32 via 198.18.0.1");
    let list = lab.dir.path().join("github.txt");
    write_list(&list, SystemTime::now());
    let config = lab.config_with(
        "skb",
        "203.0.113.0/24",
        &format!(
            "under_attack: {{ mode: on, ranges: [{}], syn_on: 300, syn_off: 50, hold: 4s, override_file: {} }}\n",
            list.display(),
            lab.dir.path().join("override").display()
        ),
    );
    lab.start_loader(&config);
    wait_for_shield(&lab, 1, "forced");
    assert_eq!(
        lab.legit_requests(3),
        3,
        "a provider's sender, under attack"
    );
    assert_eq!(
        lab.requests_from("10.99.0.1", 1),
        0,
        "anyone else, under attack"
    );
    let dropped = lab.counters()["under_attack"];
    assert!(dropped >= 1, "counted at the NIC: {dropped}");

    under_attack(&config, "off");
    wait_for_shield(&lab, 0, "off");
    assert_eq!(
        lab.requests_from("10.99.0.1", 2),
        2,
        "everyone, once lifted"
    );

    under_attack(&config, "auto");
    wait_for_shield(&lab, 0, "calm");
    lab.scapy(
        "send(IP(src=RandIP('100.64.0.0/16'), dst=VIP)/TCP(sport=RandShort(), dport=443, flags='S'), count=3000)",
    );
    wait_for_shield(&lab, 1, "syn_rate");
    let before = lab.counters()["under_attack"];
    lab.scapy("send(IP(src='10.99.0.7', dst=VIP)/TCP(dport=443, flags='S'), count=5)");
    assert_eq!(
        lab.legit_requests(2),
        2,
        "a provider's sender, during the flood's hold"
    );
    assert_eq!(
        lab.counters()["under_attack"],
        before + 5,
        "the outsider's SYNs"
    );
    wait_for_shield(&lab, 0, "calm");
    assert_eq!(lab.requests_from("10.99.0.1", 1), 1, "calm again: everyone");

    under_attack(&config, "clear");
    wait_for_shield(&lab, 1, "forced");
    write_list(
        &list,
        SystemTime::now() - Duration::from_secs(4 * 24 * 3600),
    );
    wait_for_shield(&lab, 0, "fail_open");
    assert_eq!(
        lab.requests_from("10.99.0.1", 1),
        1,
        "with no current provider list the shield stays down"
    );
}

/// Starts an HTTP server on the VIP in the victim and waits until it listens.
fn serve_http(lab: &mut Lab) {
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
}

/// A provider list as `edge ranges update` stores it, holding the legitimate sender.
fn write_list(path: &std::path::Path, fetched: SystemTime) {
    let list = edge_kit::ranges::parse(b"198.18.0.1\n", None, 16, fetched).unwrap();
    std::fs::write(path, list.render("the test")).unwrap();
}

/// `edge-xdp under-attack SET --config CONFIG`.
fn under_attack(config: &std::path::Path, set: &str) {
    let status = std::process::Command::new(testkit::built_binary("edge-xdp"))
        .args(["under-attack", set, "--config"])
        .arg(config)
        .status()
        .unwrap();
    assert!(status.success(), "edge-xdp under-attack {set}");
}

/// Waits (10 s at most) until `xdp_under_attack` is `up` for `why`.
fn wait_for_shield(lab: &Lab, up: u8, why: &str) {
    let want = format!("xdp_under_attack{{pop=\"test\",why=\"{why}\"}} {up}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = lab.metrics();
        if metrics.lines().any(|line| line == want) {
            return;
        }
        assert!(Instant::now() < deadline, "never {want}: {metrics}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
