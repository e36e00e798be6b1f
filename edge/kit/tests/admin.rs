//! The admin server under a flood of connections that never finish a request head: each
//! is closed within the header timeout, the oldest makes room when the server is full,
//! and a monitor's request beside the flood is answered at once.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::time::{Duration, Instant};

use edge_kit::admin::{AdminMetrics, Answer, HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_heads_are_closed_and_a_monitor_still_gets_in() {
    let mut registry = edge_kit::metrics::registry_for_pop("test");
    let metrics = AdminMetrics::register(&mut registry);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(edge_kit::admin::serve(listener, metrics, |path| {
        Answer::new(http::StatusCode::OK, "text/plain", format!("{path}\n"))
    }));

    let flood_size = MAX_CONNECTIONS + 144;
    let started = Instant::now();
    let mut flood = Vec::with_capacity(flood_size);
    for _ in 0..flood_size {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: pop\r\n")
            .await
            .unwrap();
        flood.push(stream);
    }

    let asked = Instant::now();
    let answer = get(addr, "/status").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "the monitor waited {:?} behind the flood",
        asked.elapsed()
    );

    let bound = HEADER_READ_TIMEOUT + Duration::from_secs(2);
    for (i, stream) in flood.iter_mut().enumerate() {
        let left = bound.saturating_sub(started.elapsed());
        let mut rest = Vec::new();
        let read = tokio::time::timeout(left, stream.read_to_end(&mut rest)).await;
        assert!(
            read.is_ok(),
            "connection {i} still open {:?} after it sent half a head",
            started.elapsed()
        );
    }

    let text = edge_kit::metrics::encode(&registry);
    let evicted = counter(&text, "evicted");
    let timed_out = counter(&text, "header_timeout");
    assert!(
        evicted >= (flood_size - MAX_CONNECTIONS) as u64,
        "evicted {evicted}:\n{text}"
    );
    assert!(
        evicted + timed_out >= flood_size as u64,
        "evicted {evicted} + header timeouts {timed_out} < {flood_size}:\n{text}"
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_within_the_header_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(edge_kit::admin::serve(
        listener,
        AdminMetrics::default(),
        |_| Answer::new(http::StatusCode::OK, "text/plain", "ok\n"),
    ));
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: pop\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let idle = Instant::now();
    let read = tokio::time::timeout(
        HEADER_READ_TIMEOUT + Duration::from_secs(2),
        stream.read(&mut buf),
    )
    .await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "an idle connection was still open {:?} after its answer",
        idle.elapsed()
    );
}

async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: pop\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut out))
        .await
        .expect("answer within 2 s")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

fn counter(text: &str, reason: &str) -> u64 {
    text.lines()
        .find(|line| {
            line.starts_with("admin_connections_closed_total")
                && line.contains(&format!("reason=\"{reason}\""))
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}
