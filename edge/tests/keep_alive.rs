//! HTTP/1.1 keep-alive on the real binary while idle connections are held outside hyper:
//! requests apart in time, pipelined, split across pauses, or answered before their
//! body ended all get their answers, in order, on one connection.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use testkit::edge::*;

#[tokio::test]
async fn requests_apart_in_time_are_served_on_one_connection_held_outside_hyper() {
    let edge = Edge::start("", "");
    let mut tls = tls_with_alpn(&edge, b"http/1.1").await;
    wait_for_metric(&edge, "edge_idle_connections", 1.0).await;
    let mut answers = Answers::default();
    for n in 0..3 {
        tls.write_all(&signed_post(&format!("apart-{n}")))
            .await
            .unwrap();
        assert_eq!(answers.next(&mut tls).await, 202, "request {n}");
        wait_for_metric(&edge, "edge_idle_connections", 1.0).await;
    }
    tls.write_all(&signed_post("apart-3")).await.unwrap();
    assert_eq!(answers.next(&mut tls).await, 202);
    assert_eq!(edge.metric("edge_open_connections"), 1.0);
    assert_eq!(stored(&edge), 4.0);
    drop(tls);
    wait_for_metric(&edge, "edge_idle_connections", 0.0).await;
    wait_for_metric(&edge, "edge_open_connections", 0.0).await;
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let edge = Edge::start("", "");
    let mut tls = tls_with_alpn(&edge, b"http/1.1").await;
    let mut burst = signed_post("pipelined-1");
    burst.extend_from_slice(b"GET /nowhere HTTP/1.1\r\nHost: localhost\r\n\r\n");
    burst.extend_from_slice(&signed_post("pipelined-2"));
    tls.write_all(&burst).await.unwrap();
    let mut answers = Answers::default();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(answers.next(&mut tls).await);
    }
    assert_eq!(statuses, [202, 404, 202]);
    assert_eq!(stored(&edge), 2.0);
}

#[tokio::test]
async fn heads_and_bodies_split_across_pauses_are_served() {
    let edge = Edge::start("", "");
    let mut tls = tls_with_alpn(&edge, b"http/1.1").await;
    let mut answers = Answers::default();
    for (n, split) in [20, 200].into_iter().enumerate() {
        let request = signed_post(&format!("split-{n}"));
        let (first, rest) = request.split_at(request.len() - split);
        tls.write_all(first).await.unwrap();
        tls.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        tls.write_all(rest).await.unwrap();
        assert_eq!(
            answers.next(&mut tls).await,
            202,
            "split {split} bytes from the end"
        );
    }
    assert_eq!(stored(&edge), 2.0);
}

#[tokio::test]
async fn an_answer_before_the_body_ended_keeps_the_connection_for_the_next_request() {
    let edge = Edge::start("", "");
    let mut tls = tls_with_alpn(&edge, b"http/1.1").await;
    let body = vec![b'x'; 4096];
    let head = format!(
        "POST /nowhere HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body[..1024]).await.unwrap();
    let mut answers = Answers::default();
    assert_eq!(
        answers.next(&mut tls).await,
        404,
        "answered before the body ended"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    tls.write_all(&body[1024..]).await.unwrap();
    tls.write_all(&signed_post("after-early-answer"))
        .await
        .unwrap();
    assert_eq!(answers.next(&mut tls).await, 202);
    assert_eq!(stored(&edge), 1.0);
}

#[tokio::test]
async fn an_idle_connection_is_closed_at_shutdown_without_waiting_for_the_timeout() {
    let mut edge = Edge::start("", "");
    let mut tls = tls_with_alpn(&edge, b"http/1.1").await;
    tls.write_all(&signed_post("before-shutdown"))
        .await
        .unwrap();
    assert_eq!(Answers::default().next(&mut tls).await, 202);
    wait_for_metric(&edge, "edge_idle_connections", 1.0).await;
    let stopping = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(edge.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "still open 5 s after SIGTERM");
    assert!(rest.is_empty(), "nothing but a close: {rest:?}");
    let status = edge.child.take().unwrap().wait().unwrap();
    assert!(status.success(), "exit status {status}");
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "stopped after {:?} (drain_grace is 1 s)",
        stopping.elapsed()
    );
}

/// An HTTP/1.1 POST of a signed GitHub delivery, as bytes.
fn signed_post(delivery: &str) -> Vec<u8> {
    let body = &delivery_body(delivery);
    let mut request = format!(
        "POST /hooks/github HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         X-GitHub-Event: push\r\nX-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: {}\r\n\
         Content-Length: {}\r\n\r\n",
        github_signature(GITHUB_SECRET, body),
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// Reads answers one after another off one connection (heads with a Content-Length).
#[derive(Default)]
struct Answers {
    buffered: Vec<u8>,
}

impl Answers {
    /// The status of the next answer.
    async fn next(&mut self, tls: &mut (impl AsyncReadExt + Unpin)) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(end) = self.buffered.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buffered[..end]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if self.buffered.len() >= end + 4 + length {
                    let status = head[9..12].parse().unwrap();
                    self.buffered.drain(..end + 4 + length);
                    return status;
                }
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout_at(deadline.into(), tls.read(&mut chunk))
                .await
                .expect("an answer within 5 s")
                .unwrap();
            assert!(n > 0, "connection closed before the answer");
            self.buffered.extend_from_slice(&chunk[..n]);
        }
    }
}

fn stored(edge: &Edge) -> f64 {
    edge.metric(r#"edge_spool_appends_total{pop="test",reason="stored"}"#)
}

async fn wait_for_metric(edge: &Edge, name: &str, value: f64) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while edge.metric(name) != value {
        assert!(
            Instant::now() < deadline,
            "{name} never became {value}: {}",
            edge.metrics()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
