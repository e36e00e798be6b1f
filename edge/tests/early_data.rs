//! TLS 1.3 0-RTT with a client nobody here wrote (`openssl s_client -early_data`): an
//! early POST to an `accept` route is stored once and marked early, to a `reject` route
//! it gets 425; replaying the same session gets its early data refused (single-use
//! tickets) and nothing is processed twice; a proxy's `Early-Data: 1` header counts as
//! early.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::path::Path;
use std::time::{Duration, Instant};

use testkit::edge::*;

const EARLY_ROUTE: &str = "  - path: /hooks/early
    name: early
    provider: github
    secrets: [\"gh-secret\"]
    early_data: accept
";

#[test]
fn early_data_is_guarded_per_route_and_single_use() {
    let edge = Edge::start("", &EARLY_ROUTE.replace("gh-secret", GITHUB_SECRET))
        .reconfigure(|text| text.replacen("tls:\n", "tls:\n  early_data: { enabled: true }\n", 1));
    let dir = tempfile::tempdir().unwrap();

    // An early POST on the accept route: answered 202, stored once, marked early.
    let session = dir.path().join("s1.pem");
    let full = s_client(&edge, &session, None);
    assert!(full.contains("New, TLSv1.3"), "{full}");
    assert!(full.contains("Max Early Data: 16384"), "{full}");
    let request = dir.path().join("early.txt");
    std::fs::write(&request, signed_request("/hooks/early", "early-1")).unwrap();
    let early = s_client(&edge, &session, Some(&request));
    assert!(early.contains("Reused, TLSv1.3"), "{early}");
    assert!(early.contains("Early data was accepted"), "{early}");
    assert!(early.contains("HTTP/1.1 202"), "{early}");

    // The same session again (a replay of the ticket): early data refused, full handshake.
    let replay = s_client(&edge, &session, Some(&request));
    assert!(replay.contains("Early data was rejected"), "{replay}");
    assert!(replay.contains("New, TLSv1.3"), "{replay}");
    assert!(!replay.contains("HTTP/1.1 2"), "{replay}");

    let stored: Vec<_> = edge::spool::dump(&edge.spool_dir())
        .unwrap()
        .into_iter()
        .filter(|r| edge::event::id_of_key(&r.event_id) == "early-1")
        .collect();
    assert_eq!(stored.len(), 1, "stored exactly once");
    assert!(stored[0].early, "marked early in the spool");

    // An early POST on a reject route: 425 and the connection closes.
    let session = dir.path().join("s2.pem");
    s_client(&edge, &session, None);
    let request = dir.path().join("reject.txt");
    std::fs::write(&request, signed_request("/hooks/github", "early-2")).unwrap();
    let rejected = s_client(&edge, &session, Some(&request));
    assert!(rejected.contains("Early data was accepted"), "{rejected}");
    assert!(rejected.contains("HTTP/1.1 425 Too Early"), "{rejected}");

    // A proxy in front of us marks the request as early: same answer.
    let client = client(&edge, false);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let status = runtime.block_on(async {
        github_post(&client, &edge, "early-3", &delivery_body("early-3"))
            .header("Early-Data", "1")
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status.as_u16(), 425);
    // Without early data or the header the same route accepts the event.
    let status = runtime.block_on(async {
        github_post(&client, &edge, "early-2", &delivery_body("early-2"))
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status.as_u16(), 202);

    let ids: Vec<String> = edge::spool::dump(&edge.spool_dir())
        .unwrap()
        .into_iter()
        .map(|r| edge::event::id_of_key(&r.event_id).to_owned())
        .collect();
    assert_eq!(ids.iter().filter(|id| *id == "early-2").count(), 1);
    assert!(!ids.iter().any(|id| id == "early-3"), "{ids:?}");

    let metrics = edge.metrics();
    assert!(
        metrics.contains(r#"edge_early_requests_total{pop="test",reason="accepted"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"edge_early_requests_total{pop="test",reason="too_early"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"edge_tls_early_data_connections_total{pop="test"} 2"#),
        "{metrics}"
    );
}

#[test]
fn early_data_stays_off_unless_enabled() {
    let edge = Edge::start("", "");
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("s.pem");
    let full = s_client(&edge, &session, None);
    assert!(!full.contains("Max Early Data: 16384"), "{full}");
    let request = dir.path().join("req.txt");
    std::fs::write(&request, signed_request("/hooks/github", "late-1")).unwrap();
    let resumed = s_client(&edge, &session, Some(&request));
    assert!(resumed.contains("Reused, TLSv1.3"), "{resumed}");
    assert!(!resumed.contains("Early data was accepted"), "{resumed}");
}

/// Runs s_client once: without `early` it only fetches a session into `session`; with
/// it, it resumes `session` and sends the file as early data. Returns what s_client
/// printed (its summary and the server's answer).
fn s_client(edge: &Edge, session: &Path, early: Option<&Path>) -> String {
    let mut command = s_client_command(edge.port);
    match early {
        None => command.arg("-sess_out").arg(session),
        Some(request) => command
            .arg("-sess_in")
            .arg(session)
            .arg("-early_data")
            .arg(request),
    };
    let mut child = command.spawn().unwrap();
    // A request closes the connection when answered; a bare session fetch (or a
    // refused early request) ends when its input does, once the tickets have arrived.
    let input = child.stdin.take();
    let deadline = Instant::now() + Duration::from_secs(if early.is_some() { 3 } else { 1 });
    while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(input);
    let output = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn signed_request(path: &str, delivery: &str) -> String {
    let body = format!(r#"{{"zen":"early","delivery":"{delivery}"}}"#);
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nX-GitHub-Event: push\r\n\
         X-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: {signature}\r\n\
         Content-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n{body}",
        signature = github_signature(GITHUB_SECRET, body.as_bytes()),
        len = body.len(),
    )
}
