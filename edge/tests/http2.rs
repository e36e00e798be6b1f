//! HTTP/2 abuse: Rapid Reset (CVE-2023-44487), a client that opens streams and cancels
//! them in a loop, is cut off with GOAWAY while a legitimate HTTP/2 client on another
//! connection keeps working; a peer that stops answering PINGs is closed.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::time::Duration;

use testkit::edge::*;

async fn h2_connection(edge: &Edge) -> h2::client::SendRequest<bytes::Bytes> {
    let (send, connection) = h2::client::handshake(h2_tls(edge).await).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    send
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peer_that_stops_answering_pings_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let edge = Edge::start("", "").with_section(
        "http: { h2_keepalive_interval: 500ms, h2_keepalive_timeout: 500ms, idle_timeout: 30s }\n",
    );
    let mut tls = h2_tls(&edge).await;
    // The client preface and an empty SETTINGS frame, then silence: nothing read,
    // nothing acknowledged, so the edge's PINGs go unanswered.
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    let started = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the edge kept a silent HTTP/2 peer open");
    assert!(started.elapsed() < Duration::from_secs(8));
    assert_eq!(
        edge.metric(r#"edge_rejected_total{pop="test",reason="h2_keepalive_timeout"}"#),
        1.0,
        "{}",
        edge.metrics()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn open_and_cancel_in_a_loop_is_cut_off_with_goaway() {
    let edge = Edge::start("", "");
    let mut attacker = h2_connection(&edge).await;
    let mut cut_off = None;
    for i in 0..20_000 {
        let ready = tokio::time::timeout(Duration::from_secs(5), attacker.clone().ready()).await;
        let mut send = match ready {
            Ok(Ok(send)) => send,
            Ok(Err(e)) => {
                cut_off = Some((i, e));
                break;
            }
            Err(_) => panic!("the attacking connection stalled instead of being cut off"),
        };
        let request = http::Request::post(edge.url("/hooks/github"))
            .body(())
            .unwrap();
        match send.send_request(request, false) {
            // Dropping the stream handles resets the stream: open, then cancel at once.
            Ok((response, stream)) => drop((response, stream)),
            Err(e) => {
                cut_off = Some((i, e));
                break;
            }
        }
        attacker = send;
    }
    let (after, error) = cut_off.expect("20,000 open-and-cancel streams were never cut off");
    // The server sends GOAWAY (ENHANCE_YOUR_CALM) and closes; a client still writing
    // may see the closed socket before it reads the GOAWAY.
    let goaway = error.is_go_away() && error.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM);
    assert!(
        goaway || error.is_io(),
        "cut off after {after} streams by something else: {error:?}"
    );
    assert!(after < 10_000, "cut off only after {after} streams");

    // Another client, another connection: still served.
    let client = client(&edge, true);
    let r = github_post(
        &client,
        &edge,
        "after-rapid-reset",
        &delivery_body("after-rapid-reset"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
}
