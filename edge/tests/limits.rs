//! Connection caps on the real binary: over its per-source cap a connection is closed
//! before any TLS work, other sources are unaffected, trusted CIDRs get a higher cap,
//! and closed connections free their slots; idle connections end by the idle timeout;
//! providers' published lists, kept by `edge ranges update`, are trusted while current.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use testkit::edge::provider_ranges::RangesEndpoint;
use testkit::edge::*;

/// A raw TCP connection from `source` to the edge.
fn connect_from(source: &str, edge: &Edge) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&format!("{source}:0").parse::<SocketAddr>().unwrap().into())
        .unwrap();
    socket
        .connect(
            &format!("127.0.0.1:{}", edge.port)
                .parse::<SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    stream
}

/// True when the edge closed the connection without a word (EOF before any TLS).
fn closed_by_edge(mut stream: TcpStream) -> bool {
    let mut buf = [0u8; 16];
    matches!(stream.read(&mut buf), Ok(0))
}

#[tokio::test(flavor = "multi_thread")]
async fn per_source_caps_close_before_tls() {
    let edge = Edge::start("", "").with_section(
        "connections: { max: 100, per_source: 3, trusted: [127.0.0.3/32], per_trusted_source: 6 }\n",
    );
    let held: Vec<TcpStream> = (0..3).map(|_| connect_from("127.0.0.1", &edge)).collect();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        closed_by_edge(connect_from("127.0.0.1", &edge)),
        "the 4th connection from one source is closed"
    );

    // Another source is unaffected: a full signed webhook over TLS.
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&edge.cert_pem()).unwrap())
        .local_address(Some("127.0.0.2".parse().unwrap()))
        .build()
        .unwrap();
    let r = github_post(
        &client,
        &edge,
        "other-source",
        &delivery_body("other-source"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 202);

    // A trusted CIDR (many senders behind one egress) gets its higher cap.
    let trusted: Vec<TcpStream> = (0..6).map(|_| connect_from("127.0.0.3", &edge)).collect();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        closed_by_edge(connect_from("127.0.0.3", &edge)),
        "the 7th trusted connection is closed"
    );

    // Closing connections frees their slots.
    drop(held);
    drop(trusted);
    std::thread::sleep(Duration::from_millis(300));
    let again = connect_from("127.0.0.1", &edge);
    assert!(
        !closed_by_edge(again),
        "a freed slot admits a new connection"
    );

    let metrics = edge.metrics();
    assert!(
        metrics.contains(r#"edge_connections_refused_total{pop="test",reason="per_source"} 2"#),
        "{metrics}"
    );
    assert!(
        edge.log_text().contains("connection over its cap"),
        "refusals are logged"
    );
}

/// A provider's published list, fetched by `edge ranges update` from a fake provider on
/// loopback, lifts the per-source cap for its addresses in the running edge; a list that
/// would trust too much, or a failed fetch, keeps the last good one (exit 1, said why);
/// when the provider drops an address, the edge applies the cap again within
/// `reload_every`.
#[test]
fn provider_lists_lift_the_cap_while_they_list_the_sender() {
    let provider = RangesEndpoint::start();
    provider.answer(200, r#"{"hooks":["127.0.0.5/32","192.30.252.0/22"]}"#);
    let mut edge = Edge::create("", "");
    let ranges = edge.dir.path().join("ranges");
    edge.edit_config(|text| {
        format!(
            "{text}connections: {{ max: 100, per_source: 2, trusted_ranges: [github] }}\n\
             ranges:\n  dir: {}\n  reload_every: 200ms\n  sources:\n    \
             github: {{ url: \"{}\", pointer: /hooks }}\n",
            ranges.display(),
            provider.url("/meta")
        )
    });
    let update = |edge: &Edge| {
        let output = std::process::Command::new(edge_bin())
            .args(["ranges", "update", "--config"])
            .arg(&edge.config)
            .output()
            .unwrap();
        let line: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        (output.status.code(), line)
    };
    let (code, line) = update(&edge);
    assert_eq!(code, Some(0), "{line}");
    assert_eq!(
        (&line["outcome"], &line["entries"]),
        (&"stored".into(), &2.into())
    );
    let stored = std::fs::read_to_string(ranges.join("github.txt")).unwrap();
    assert!(stored.contains("127.0.0.5/32\n"), "{stored}");

    edge.spawn();
    let trusted: Vec<TcpStream> = (0..4).map(|_| connect_from("127.0.0.5", &edge)).collect();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        trusted.into_iter().all(|stream| !closed_by_edge(stream)),
        "a listed sender holds more than per_source"
    );
    assert_eq!(
        edge.metric(r#"edge_provider_ranges_entries{pop="test",source="github"}"#),
        2.0
    );
    assert_eq!(
        edge.metric(r#"edge_provider_ranges_stale{pop="test",source="github"}"#),
        0.0
    );

    for (status, body, why) in [
        (200, r#"{"hooks":["0.0.0.0/0"]}"#, "broader than"),
        (
            200,
            r#"{"message":"API rate limit exceeded"}"#,
            "nothing at /hooks",
        ),
        (503, "", "answered 503"),
    ] {
        provider.answer(status, body);
        let (code, line) = update(&edge);
        assert_eq!(code, Some(1), "{line}");
        assert_eq!(line["outcome"], "kept_last_good", "{line}");
        assert!(line["error"].as_str().unwrap().contains(why), "{line}");
        assert_eq!(
            line["last_good_age_seconds"].as_u64().map(|age| age < 60),
            Some(true)
        );
        assert_eq!(
            std::fs::read_to_string(ranges.join("github.txt")).unwrap(),
            stored
        );
    }

    provider.answer(200, r#"{"hooks":["192.30.252.0/22"]}"#);
    let (code, line) = update(&edge);
    assert_eq!((code, &line["removed"]), (Some(0), &1.into()), "{line}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while edge.metric(r#"edge_provider_ranges_entries{pop="test",source="github"}"#) != 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the edge re-read the list"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let held: Vec<TcpStream> = (0..2).map(|_| connect_from("127.0.0.5", &edge)).collect();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        closed_by_edge(connect_from("127.0.0.5", &edge)),
        "no longer listed: the ordinary cap"
    );
    drop(held);
}

#[test]
fn a_body_below_the_minimum_rate_gets_408() {
    let edge = Edge::start("", "")
        .with_section("http: { min_body_rate: 1KiB, body_rate_grace: 1s, body_timeout: 20s }\n");
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(&body, vec![b'x'; 20 * 1024]).unwrap();
    let started = std::time::Instant::now();
    let output = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--limit-rate",
            "200",
            "--http1.1",
            "--cacert",
        ])
        .arg(edge.dir.path().join("cert.pem"))
        .args([
            "-H",
            "X-GitHub-Delivery: slow",
            "-H",
            // Well-formed, so the head passes and the body's pace is what is judged.
            &format!("X-Hub-Signature-256: sha256={}", "00".repeat(32)),
        ])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg(edge.url("/hooks/github"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "408");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "cut after the grace, not at the end: {:?}",
        started.elapsed()
    );
    assert!(
        edge.metrics()
            .contains(r#"edge_rejected_total{pop="test",reason="slow_body"} 1"#)
    );
    assert!(edge.log_text().contains("below the minimum rate"));
}

#[test]
fn idle_connections_are_closed() {
    let edge = Edge::start("", "").with_section("http: { idle_timeout: 1s }\n");
    let mut stream = connect_from("127.0.0.1", &edge);
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let closed = match stream.read(&mut buf) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    };
    assert!(closed, "the edge closed the silent connection");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "closed after {waited:?}"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        edge.metrics()
            .contains(r#"edge_rejected_total{pop="test",reason="idle"} 1"#),
        "{}",
        edge.metrics()
    );
}

#[tokio::test]
async fn a_keep_alive_connection_lasts_the_idle_timeout_not_the_head_deadline() {
    let edge = Edge::start("", "").with_section("http: { header_timeout: 1s, idle_timeout: 3s }\n");
    let client = client(&edge, false);
    let response = github_post(
        &client,
        &edge,
        "keep-alive-1",
        &delivery_body("keep-alive-1"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    let idle_since = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(
        edge.metric("edge_open_connections"),
        1.0,
        "still open past the head deadline: {}",
        edge.metrics()
    );
    while edge.metric("edge_open_connections") > 0.0
        && idle_since.elapsed() < Duration::from_secs(6)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let closed_after = idle_since.elapsed();
    assert!(
        closed_after >= Duration::from_millis(2900) && closed_after < Duration::from_secs(4),
        "closed by the idle timeout after {closed_after:?}"
    );
    assert_eq!(
        edge.metric(r#"edge_rejected_total{pop="test",reason="idle"}"#),
        1.0
    );
    assert_eq!(
        edge.metric(r#"edge_rejected_total{pop="test",reason="header_timeout"}"#),
        0.0
    );
}
