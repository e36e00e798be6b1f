//! The HTTP/2 sink against an origin written here (hyper, HTTP/2 prior knowledge on a
//! loopback port) whose answers depend on the event id: slow, 503 + Retry-After once,
//! 400 (dead letter), 401 twice (retried: the origin's credential, not the event), 500
//! while "down" (circuit breaker).

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use testkit::edge::*;

#[derive(Default)]
struct Origin {
    /// Event id → arrival times of every attempt.
    attempts: Mutex<HashMap<String, Vec<Instant>>>,
    /// Event id → body of the delivery that was accepted.
    delivered: Mutex<HashMap<String, Vec<u8>>>,
    down: AtomicBool,
}

impl Origin {
    async fn serve() -> (Arc<Origin>, u16) {
        let origin = Arc::new(Origin::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::clone(&origin);
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    let service = service_fn(move |request| Arc::clone(&state).answer(request));
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (origin, port)
    }

    async fn answer(
        self: Arc<Self>,
        request: http::Request<hyper::body::Incoming>,
    ) -> Result<http::Response<Full<Bytes>>, Infallible> {
        let id = request
            .headers()
            .get("edge-event-id")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = request
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap();
            let list = attempts.entry(id.clone()).or_default();
            list.push(Instant::now());
            list.len()
        };
        let status = if id.starts_with("slow-") {
            tokio::time::sleep(Duration::from_millis(300)).await;
            200
        } else if id.starts_with("retry-") && attempt == 1 {
            return Ok(http::Response::builder()
                .status(503)
                .header("retry-after", "1")
                .body(Full::default())
                .unwrap());
        } else if id.starts_with("bad-") {
            400
        } else if id.starts_with("unauthorized-") && attempt <= 2 {
            // A rotated credential, fixed at the origin after two attempts.
            401
        } else if id.starts_with("down-") && self.down.load(Ordering::SeqCst) {
            500
        } else {
            200
        };
        if status == 200 {
            self.delivered.lock().unwrap().insert(id, body);
        }
        Ok(http::Response::builder()
            .status(status)
            .body(Full::default())
            .unwrap())
    }

    async fn wait_delivered(&self, ids: &[&str], limit: Duration) {
        let started = Instant::now();
        loop {
            let missing: Vec<&str> = {
                let delivered = self.delivered.lock().unwrap();
                ids.iter()
                    .copied()
                    .filter(|id| !delivered.contains_key(*id))
                    .collect()
            };
            if missing.is_empty() {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "not delivered after {limit:?}: {missing:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn post(edge: &Edge, id: &str) {
    let response = github_post(
        &client(edge, false),
        edge,
        id,
        format!(r#"{{"id":"{id}"}}"#).as_bytes(),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 202, "{id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_origin_retries_dead_letters_breaks_and_stays_warm() {
    let (origin, port) = Origin::serve().await;
    let section = format!(
        "backhaul:\n  sink: http\n  http: {{ url: \"http://127.0.0.1:{port}/ingest\", connections: 2, timeout: 2s }}\n  retry: {{ base: 50ms, max: 400ms }}\n  breaker: {{ failures: 3, open_for: 1s }}\n"
    );
    let edge = Edge::start("", "").with_section(&section);

    let ok: Vec<String> = (0..50).map(|i| format!("ok-{i}")).collect();
    for id in &ok {
        post(&edge, id).await;
    }
    let ok_refs: Vec<&str> = ok.iter().map(String::as_str).collect();
    origin
        .wait_delivered(&ok_refs, Duration::from_secs(10))
        .await;
    assert_eq!(
        origin.delivered.lock().unwrap()["ok-7"],
        br#"{"id":"ok-7"}"#,
        "raw body forwarded byte for byte"
    );

    // A slow origin still gets everything.
    for i in 0..3 {
        post(&edge, &format!("slow-{i}")).await;
    }
    origin
        .wait_delivered(&["slow-0", "slow-1", "slow-2"], Duration::from_secs(10))
        .await;

    // 503 + Retry-After: 1 is honoured.
    post(&edge, "retry-1").await;
    origin
        .wait_delivered(&["retry-1"], Duration::from_secs(10))
        .await;
    let attempts = origin.attempts.lock().unwrap()["retry-1"].clone();
    assert_eq!(attempts.len(), 2);
    let gap = attempts[1] - attempts[0];
    assert!(
        gap >= Duration::from_millis(990),
        "retried after {gap:?}, before Retry-After"
    );

    // 400: kept as a dead letter, not retried, and the checkpoint moves past it.
    post(&edge, "bad-1").await;
    post(&edge, "ok-after-bad").await;
    origin
        .wait_delivered(&["ok-after-bad"], Duration::from_secs(10))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        origin.attempts.lock().unwrap()["bad-1"].len(),
        1,
        "a 400 is not retried"
    );
    let dead: Vec<_> = std::fs::read_dir(edge.spool_dir().join("dead-letter"))
        .unwrap()
        .collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(edge.metric("edge_backhaul_dead_letters_total"), 1.0);
    assert_eq!(edge.metric("edge_backhaul_lag_records"), 0.0);
    assert_eq!(
        edge.metric("edge_backhaul_lag_bytes"),
        0.0,
        "caught up: no bytes owed"
    );

    // 401: the origin's credential, not the event: retried until the origin takes it,
    // never a dead letter.
    post(&edge, "unauthorized-1").await;
    origin
        .wait_delivered(&["unauthorized-1"], Duration::from_secs(10))
        .await;
    assert_eq!(origin.attempts.lock().unwrap()["unauthorized-1"].len(), 3);
    assert_eq!(edge.metric("edge_backhaul_dead_letters_total"), 1.0);

    // A failing origin opens the breaker; once it recovers everything arrives.
    origin.down.store(true, Ordering::SeqCst);
    for i in 0..5 {
        post(&edge, &format!("down-{i}")).await;
    }
    let started = Instant::now();
    while edge.metric("edge_backhaul_breaker_state") != 1.0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "breaker never opened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let attempts_while_open: usize = origin
        .attempts
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("down-"))
        .map(|(_, v)| v.len())
        .sum();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let attempts_later: usize = origin
        .attempts
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("down-"))
        .map(|(_, v)| v.len())
        .sum();
    assert!(
        attempts_later <= attempts_while_open + 1,
        "an open breaker stops hammering ({attempts_while_open} → {attempts_later})"
    );
    origin.down.store(false, Ordering::SeqCst);
    origin
        .wait_delivered(
            &["down-0", "down-1", "down-2", "down-3", "down-4"],
            Duration::from_secs(15),
        )
        .await;
    assert_eq!(edge.metric("edge_backhaul_breaker_state"), 0.0);

    // Warm: an idle PoP does not pay a handshake on the next event.
    let dials = edge.metric("edge_backhaul_dials_total");
    assert_eq!(edge.metric("edge_backhaul_ready_connections"), 2.0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    post(&edge, "ok-after-idle").await;
    origin
        .wait_delivered(&["ok-after-idle"], Duration::from_secs(5))
        .await;
    assert_eq!(edge.metric("edge_backhaul_dials_total"), dials);
}
