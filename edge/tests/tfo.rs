//! TCP Fast Open proof: the edge in a network namespace with `net.ipv4.tcp_fastopen=3`,
//! `curl --tcp-fastopen` twice (the first fetches a cookie, the second puts its
//! ClientHello in the SYN): the kernel's TcpExtTCPFastOpenPassive moves and the edge's
//! `edge_tfo_accepted_total` counts it. Root.

use std::process::Command;
use std::time::{Duration, Instant};

use testkit::edge::*;
use testkit::netns;

fn in_ns(ns: &str, args: &[&str]) -> String {
    netns::output(ns, args)
}

fn passive_tfo(ns: &str) -> u64 {
    in_ns(ns, &["nstat", "-az", "TcpExtTCPFastOpenPassive"])
        .lines()
        .find(|l| l.starts_with("TcpExtTCPFastOpenPassive"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn second_curl_uses_fast_open_and_the_edge_counts_it() {
    testkit::require_root!("network namespaces");
    let ns = netns::Netns::create(format!("edge-tfo-{}", std::process::id())).unwrap();
    in_ns(ns.name(), &["sysctl", "-qw", "net.ipv4.tcp_fastopen=3"]);

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.yaml");
    std::fs::write(
        &config,
        testkit::edge::config(dir.path(), 8443, 9180, "", ""),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("edge.log")).unwrap();
    let mut edge = Command::new("ip")
        .args(["netns", "exec", ns.name(), edge_bin(), "run", "--config"])
        .arg(&config)
        .stderr(log)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while in_ns(ns.name(), &["curl", "-s", "127.0.0.1:9180/readyz"]) != "ready\n" {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "edge not ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let before = passive_tfo(ns.name());
    let body = r#"{"tfo":true}"#;
    let signature = github_signature(GITHUB_SECRET, body.as_bytes());
    for i in 0..2 {
        let status = in_ns(
            ns.name(),
            &[
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--tcp-fastopen",
                "--cacert",
                dir.path().join("cert.pem").to_str().unwrap(),
                "-H",
                &format!("X-GitHub-Delivery: tfo-{i}"),
                "-H",
                &format!("X-Hub-Signature-256: {signature}"),
                "--data-binary",
                body,
                "https://localhost:8443/hooks/github",
            ],
        );
        assert_eq!(status, "202", "request {i}");
    }
    assert!(
        passive_tfo(ns.name()) > before,
        "the kernel accepted a Fast Open SYN"
    );
    let metrics = in_ns(ns.name(), &["curl", "-s", "127.0.0.1:9180/metrics"]);
    let counted = metrics
        .lines()
        .find(|l| l.starts_with("edge_tfo_accepted_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(counted >= 1, "edge_tfo_accepted_total: {metrics}");
    edge.kill().unwrap();
    edge.wait().unwrap();
}
