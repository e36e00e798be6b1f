//! Admission control in the real binary, against a slow disk (each fsync takes 30 ms more
//! than on the tmpfs the spool is on, so that the disk is exactly that slow):
//! with more senders than the disk can serve, low-priority routes are answered 503 +
//! Retry-After before their bodies are read, the overload flag rises, and every high-priority delivery is
//! still acknowledged; a per-source rate limit answers 429 + Retry-After.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use testkit::edge::*;

const SLOW_DISK: &str = "  sync_delay: 30ms\n";
const ROUTES: &str = r#"  - path: /hooks/bulk
    provider: github
    secrets: ["gh-secret"]
    priority: low
  - path: /hooks/ops
    provider: github
    secrets: ["gh-secret"]
    priority: default
  - path: /hooks/limited
    provider: github
    secrets: ["gh-secret"]
    rate_limit: { per_second: 2, burst: 3 }
"#;
const ADMISSION: &str =
    "admission: { initial_limit: 4, min_limit: 2, max_limit: 8, max_wait: 2s, max_queue: 256 }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_slow_disk_low_priority_is_shed_fast_and_high_priority_is_kept() {
    let edge = Edge::start_in_memory(SLOW_DISK, ROUTES).with_section(ADMISSION);
    let overloaded_seen = Arc::new(AtomicBool::new(false));
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (port, seen, watching) = (
            edge.admin_port,
            Arc::clone(&overloaded_seen),
            Arc::clone(&watching),
        );
        std::thread::spawn(move || {
            while watching.load(Ordering::Acquire) {
                let metrics = admin_get(port, "/metrics")
                    .map(|(_, b)| b)
                    .unwrap_or_default();
                if metrics.contains("webhook_ingress_overloaded{pop=\"test\"} 1") {
                    seen.store(true, Ordering::Release);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };

    // 600 requests from 96 concurrent senders: a third per priority.
    let client = client(&edge, false);
    let permits = Arc::new(tokio::sync::Semaphore::new(96));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..600 {
        let path = ["/hooks/github", "/hooks/ops", "/hooks/bulk"][i % 3];
        let permit = Arc::clone(&permits).acquire_owned().await.unwrap();
        let body = format!(r#"{{"n":{i}}}"#);
        let request = signed_github(
            client.post(edge.url(path)),
            &format!("d-{i}"),
            body.as_bytes(),
        );
        tasks.spawn(async move {
            let _permit = permit;
            let started = Instant::now();
            let response = request.send().await.unwrap();
            let retry_after = response.headers().get("retry-after").is_some();
            (
                path,
                response.status().as_u16(),
                retry_after,
                started.elapsed(),
            )
        });
    }
    let mut answers = Vec::new();
    while let Some(answer) = tasks.join_next().await {
        answers.push(answer.unwrap());
    }
    watching.store(false, Ordering::Release);
    watcher.join().unwrap();

    let of = |path: &'static str| answers.iter().filter(move |a| a.0 == path);
    let high_failed: Vec<_> = of("/hooks/github").filter(|a| a.1 != 202).collect();
    assert!(
        high_failed.is_empty(),
        "high priority refused: {high_failed:?}"
    );
    let low_shed: Vec<_> = of("/hooks/bulk").filter(|a| a.1 == 503).collect();
    assert!(
        low_shed.len() >= 50,
        "only {} low-priority requests shed",
        low_shed.len()
    );
    assert!(low_shed.iter().all(|a| a.2), "503 without Retry-After");
    // Refused at the check before the body, never after waiting for a slot.
    assert_eq!(
        edge.metric(r#"webhook_ingress_shed_total{pop="test",priority="low",reason="no_slot"}"#),
        low_shed.len() as f64
    );
    let mut shed_times: Vec<Duration> = low_shed.iter().map(|a| a.3).collect();
    shed_times.sort();
    let p90 = shed_times[shed_times.len() * 9 / 10];
    assert!(
        of("/hooks/bulk")
            .chain(of("/hooks/ops"))
            .all(|a| a.1 == 202 || a.1 == 503),
        "{answers:?}"
    );
    assert!(
        overloaded_seen.load(Ordering::Acquire),
        "the overload flag never rose"
    );
    let shed_low = edge.metric(r#"webhook_ingress_shed_total{pop="test",priority="low""#);
    assert_eq!(shed_low, low_shed.len() as f64);
    assert!(edge.metric("webhook_ingress_concurrency_limit{") >= 2.0);
    println!(
        "slow disk: high 200/200 acked, default {} acked, low {} shed (p90 {} ms to the 503)",
        of("/hooks/ops").filter(|a| a.1 == 202).count(),
        low_shed.len(),
        p90.as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_over_its_rate_gets_429_with_retry_after() {
    let edge = Edge::start("", ROUTES);
    let client = client(&edge, false);
    let mut statuses = Vec::new();
    for i in 0..8 {
        let body = format!(r#"{{"n":{i}}}"#);
        let response = signed_github(
            client.post(edge.url("/hooks/limited")),
            &format!("r-{i}"),
            body.as_bytes(),
        )
        .send()
        .await
        .unwrap();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
        statuses.push((response.status().as_u16(), retry_after));
    }
    assert_eq!(&statuses[..3], &[(202, None); 3], "{statuses:?}");
    assert!(
        statuses[3..].iter().all(|s| s.0 == 429 && s.1 >= Some(1)),
        "{statuses:?}"
    );
    assert_eq!(
        edge.metric(
            r#"webhook_ingress_shed_total{pop="test",priority="high",reason="rate_limited"}"#
        ),
        5.0
    );
    // Other routes are not limited.
    let body = br#"{"other":1}"#;
    let other = github_post(&client, &edge, "other-1", body)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 202);
}

/// Over HTTP/2 a shed answer ends its stream: the sender reads the 429, its Retry-After
/// and its JSON, then the stream is reset with NO_ERROR instead of the edge reading on
/// (it would otherwise wait up to 5 s for the rest), so the edge receives no more of a
/// shed body than one stream window. The connection goes on: an admitted body four
/// windows long is then stored through window updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_a_shed_stream_is_answered_then_reset_not_read_on() {
    const WINDOW: usize = 16 * 1024;
    let edge =
        Edge::start("", ROUTES).with_section(&format!("http: {{ h2_stream_window: {WINDOW} }}\n"));
    // The route's burst of 3, spent from this source (127.0.0.1) over HTTP/1.1.
    let spender = client(&edge, false);
    for i in 0..3 {
        let spent = signed_github(
            spender.post(edge.url("/hooks/limited")),
            &format!("b-{i}"),
            &delivery_body(&format!("b-{i}")),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(spent.status(), 202);
    }
    let (mut send, connection) = h2::client::handshake(h2_tls(&edge).await).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });

    let body = vec![b'x'; 4 * WINDOW];
    let signed = github_signature(GITHUB_SECRET, &body);
    let post = |path: &str, delivery: &str| {
        http::Request::post(format!("https://localhost{path}"))
            .header("content-length", body.len().to_string())
            .header("x-github-event", "push")
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", &signed)
            .body(())
            .unwrap()
    };
    send = send.ready().await.unwrap();
    let (response, mut upload) = send
        .send_request(post("/hooks/limited", "shed-1"), false)
        .unwrap();
    // The edge may have answered and reset the stream already: then this send fails.
    let _ = upload.send_data(bytes::Bytes::copy_from_slice(&body[..WINDOW]), false);
    let response = response.await.unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));
    let mut answer = response.into_body();
    let mut text = Vec::new();
    while let Some(data) = answer.data().await {
        let data = data.unwrap();
        let _ = answer.flow_control().release_capacity(data.len());
        text.extend_from_slice(&data);
    }
    assert!(
        String::from_utf8_lossy(&text).contains(r#""reason":"rate_limited""#),
        "{}",
        String::from_utf8_lossy(&text)
    );
    let reset = tokio::time::timeout(
        Duration::from_secs(2),
        std::future::poll_fn(|cx| upload.poll_reset(cx)),
    )
    .await
    .expect("the stream is reset at once, not read on");
    assert_eq!(reset.unwrap(), h2::Reason::NO_ERROR);

    send = send.ready().await.unwrap();
    let (response, mut upload) = send
        .send_request(post("/hooks/github", "kept-1"), false)
        .unwrap();
    upload
        .send_data(bytes::Bytes::from(body.clone()), true)
        .unwrap();
    assert_eq!(response.await.unwrap().status(), 202);
    let stored =
        edge.metric(r#"edge_requests_total{pop="test",route="hooks_github",status="202"}"#);
    assert_eq!(stored, 1.0);
}
