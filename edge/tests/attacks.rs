//! The attack suite: what one sender on the open internet can try against a PoP's port
//! 443, each attack with a legitimate signed sender beside it (127.0.0.2, HTTP/1.1 and
//! HTTP/2). For every attack: every legitimate request is answered 2xx with p99 within
//! 500 ms, the edge stays under 128 MiB, each attack request is answered (or its
//! connection closed) within 1 s, and the edge's CPU per attack request is printed
//! beside a valid request's.
//!
//! The tests of this file take turns (one lock): they measure latency and CPU. Their
//! edges spool in memory, so that the disk's stalls are not counted as the attacker's.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use testkit::edge::attack::{CpuClock, Legit, PeakRss, cpu_per_request};
use testkit::edge::h2_raw;
use testkit::edge::*;
use tokio::io::AsyncWriteExt;

/// Stripe and Standard Webhooks floods: thousands of signature candidates on 1 MiB
/// bodies from 8 parallel senders. One malformed candidate refuses the header before
/// the body (401); well-formed wrong candidates cost one MAC per secret, like a valid
/// request; neither costs more than twice a valid request of the same size.
#[tokio::test(flavor = "multi_thread")]
async fn signature_candidate_floods_cost_no_more_than_a_valid_request() {
    let _turn = SERIAL.lock().await;
    let edge = Edge::start_in_memory("", ROUTES);
    let rss = PeakRss::watch(&edge);
    let legit = Legit::start(&edge, false);
    let body = Arc::new(one_mib_event("evt_flood"));
    let mut senders = tokio::task::JoinSet::new();
    for sender in 0..8 {
        let (client, url, body) = (client(&edge, sender >= 4), edge.url(""), Arc::clone(&body));
        senders.spawn(async move {
            let mut slowest = Duration::ZERO;
            for round in 0..4 {
                let flood = if (sender + round) % 2 == 0 {
                    stripe_flood(&client, &url, &body)
                } else {
                    standard_flood(&client, &url, &body)
                };
                let started = Instant::now();
                let status = flood.send().await.unwrap().status();
                assert_eq!(status, 401);
                slowest = slowest.max(started.elapsed());
            }
            slowest
        });
    }
    let mut slowest = Duration::ZERO;
    while let Some(sender) = senders.join_next().await {
        slowest = slowest.max(sender.unwrap());
    }
    let served = legit.finish().await;
    served.assert_served("signature flood");
    let rss = rss.assert_bounded("signature flood");
    assert!(
        slowest < Duration::from_secs(1),
        "a flood request took {slowest:?}"
    );

    // CPU per request, one request at a time: valid, malformed flood, wrong candidates.
    let client = client(&edge, false);
    let url = edge.url("");
    let valid = cpu_per_request(&edge, CPU_ROUNDS, |i| {
        let body = one_mib_event(&format!("evt_valid_{i}"));
        let request = stripe_signed(&client, &url, &body, &[STRIPE_SECRET]);
        async move { assert_eq!(request.send().await.unwrap().status(), 202) }
    })
    .await;
    let flood = cpu_per_request(&edge, CPU_ROUNDS, |_| {
        let request = stripe_flood(&client, &url, &body);
        async move { assert_eq!(request.send().await.unwrap().status(), 401) }
    })
    .await;
    let wrong = cpu_per_request(&edge, CPU_ROUNDS, |_| {
        let wrong: Vec<String> = (0..8).map(|k| format!("wrong-secret-{k}")).collect();
        let wrong: Vec<&str> = wrong.iter().map(String::as_str).collect();
        let request = stripe_signed(&client, &url, &body, &wrong);
        async move { assert_eq!(request.send().await.unwrap().status(), 401) }
    })
    .await;
    println!(
        "attack signature-flood: legitimate {}/{} 2xx, p99 {:?}; edge RSS peak {rss} MiB; slowest flood answer {slowest:?}; CPU per 1 MiB request: valid {valid:?}, 3,500 empty candidates {flood:?} ({:.2}x), 8 wrong candidates {wrong:?} ({:.2}x)",
        served.ok,
        served.sent,
        served.p99,
        ratio(flood, valid),
        ratio(wrong, valid)
    );
    assert!(ratio(flood, valid) <= 2.0 && ratio(wrong, valid) <= 2.0);
}

/// A candidate that cannot be a MAC beside a valid one, as the providers' own libraries
/// accept (stripe-python's `verify_header`, the `standardwebhooks` reference): stored.
#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_candidate_beside_a_valid_one_is_skipped() {
    let _turn = SERIAL.lock().await;
    let edge = Edge::start_in_memory("", ROUTES);
    let client = client(&edge, false);
    let body = br#"{"id":"evt_skip_candidate","object":"event"}"#;
    let t = unix_now();
    let mac = hmac_sha256(
        STRIPE_SECRET.as_bytes(),
        &[format!("{t}.").as_bytes(), body],
    );
    let stripe = client
        .post(edge.url("/hooks/stripe"))
        .header(
            "Stripe-Signature",
            format!("t={t},v1=deadbeef,v1={}", const_hex::encode(mac)),
        )
        .body(body.to_vec());
    assert_eq!(stripe.send().await.unwrap().status(), 202);
    let key = edge::verify::decode_standard_secret(STANDARD_SECRET).unwrap();
    let ts = t.to_string();
    let body = br#"{"type":"skip.candidate"}"#;
    let mac = hmac_sha256(&key, &[b"msg_skip.", ts.as_bytes(), b".", body]);
    let standard = client
        .post(edge.url("/hooks/std"))
        .header("webhook-id", "msg_skip")
        .header("webhook-timestamp", ts)
        .header(
            "webhook-signature",
            format!(
                "v1,AAAA v1,{}",
                base64::engine::general_purpose::STANDARD.encode(mac)
            ),
        )
        .body(body.to_vec());
    assert_eq!(standard.send().await.unwrap().status(), 202);
}

/// HTTP/2 connections that only answer the edge's PINGs, more than `connections.max` of
/// them over time, while a sender opens a fresh TLS connection for every request: each
/// hoarder is closed by the idle timeout (or evicted for a newcomer), and the sender is
/// never locked out.
#[tokio::test(flavor = "multi_thread")]
async fn h2_connections_that_only_answer_pings_do_not_hold_their_slots() {
    let _turn = SERIAL.lock().await;
    let edge = Edge::start_in_memory("", "").with_section(
        "connections: { max: 40, per_source: 1000 }\nhttp: { idle_timeout: 2s, h2_keepalive_interval: 300ms, h2_keepalive_timeout: 2s }\n",
    );
    let rss = PeakRss::watch(&edge);
    let legit = Legit::start(&edge, true);
    let clock = CpuClock::start(&edge);
    let mut hoarders = tokio::task::JoinSet::new();
    for _ in 0..HOARDERS {
        let connecting =
            tokio::time::timeout(Duration::from_secs(2), try_tls_with_alpn(&edge, b"h2"));
        let Ok(Ok(tls)) = connecting.await else {
            continue;
        };
        hoarders.spawn(async move {
            let opened = Instant::now();
            let Ok((send, connection)) = h2::client::handshake(tls).await else {
                return Duration::ZERO;
            };
            // Driving the connection answers every PING; no request is ever sent.
            let _ = tokio::time::timeout(Duration::from_secs(30), connection).await;
            drop(send);
            opened.elapsed()
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut longest = Duration::ZERO;
    while let Some(held) = hoarders.join_next().await {
        longest = longest.max(held.unwrap());
    }
    let cpu = clock.elapsed();
    let served = legit.finish().await;
    served.assert_served("PING-answering idle connections");
    let rss = rss.assert_bounded("PING-answering idle connections");
    let evicted = edge.metric("edge_connections_evicted_total");
    let idle = edge.metric(r#"edge_rejected_total{pop="test",reason="idle"}"#);
    println!(
        "attack h2-idle-pings: {HOARDERS} hoarding connections (connections.max 40): {evicted} evicted, {idle} closed idle, longest held {longest:?}; legitimate {}/{} 2xx on fresh connections, p99 {:?}; edge RSS peak {rss} MiB; edge CPU {cpu:?} in all",
        served.ok, served.sent, served.p99
    );
    assert!(
        longest < Duration::from_secs(4),
        "a connection that only answered PINGs was held {longest:?} (idle_timeout 2s)"
    );
    assert!(
        evicted + idle >= HOARDERS as f64 * 0.9,
        "{}",
        edge.metrics()
    );
}

/// HTTP/2 written frame by frame: a CONTINUATION flood and open-and-reset in a loop are
/// cut off within a second; so are SETTINGS, PING and WINDOW_UPDATE floods, each for
/// under half a second of the edge's CPU;
/// a body in 1-byte DATA frames (or HTTP/1.1 chunks) is refused early and costs no more
/// than a valid request of as many bytes; a reader that opens no window gets its
/// answers' heads and its connection closed once idle.
#[tokio::test(flavor = "multi_thread")]
async fn h2_frame_abuse_is_cut_off_or_costs_less_than_requests() {
    let _turn = SERIAL.lock().await;
    let edge = Edge::start_in_memory("", BIG_GITHUB_ROUTE).with_section(
        "http: { idle_timeout: 2s, h2_keepalive_interval: 1s, h2_keepalive_timeout: 2s }\n",
    );
    let rss = PeakRss::watch(&edge);
    let legit = Legit::start(&edge, false);
    let h2_client = client(&edge, true);
    let valid = cpu_per_request(&edge, CPU_ROUNDS, |i| {
        let request = github_post(
            &h2_client,
            &edge,
            &format!("cpu-{i}"),
            &delivery_body(&format!("cpu-{i}")),
        );
        async move { assert_eq!(request.send().await.unwrap().status(), 202) }
    })
    .await;
    let mut lines = Vec::new();

    // A header block that never ends.
    let mut tls = h2_tls(&edge).await;
    let started = Instant::now();
    let mut flood = h2_raw::preface();
    flood.extend(h2_raw::frame(
        h2_raw::HEADERS,
        0,
        1,
        &h2_raw::post_block("/hooks/github", &[]),
    ));
    let junk = h2_raw::frame(h2_raw::CONTINUATION, 0, 1, &[0x40, 0x7f, 0x7f]);
    for _ in 0..20_000 {
        flood.extend_from_slice(&junk);
    }
    let _ = tls.write_all(&flood).await;
    let seen = h2_raw::read_frames(&mut tls, Duration::from_secs(5)).await;
    let cut = started.elapsed();
    assert!(
        seen.closed || seen.goaway,
        "CONTINUATION flood not cut off: {seen:?}"
    );
    assert!(
        cut < Duration::from_secs(1),
        "CONTINUATION flood cut off after {cut:?}"
    );
    lines.push(format!("CONTINUATION flood cut off after {cut:?}"));

    // Open a stream and reset it, 10,000 times in one write.
    let mut tls = h2_tls(&edge).await;
    let started = Instant::now();
    let mut resets = h2_raw::preface();
    let block = h2_raw::post_block("/hooks/github", &[]);
    for i in 0..10_000u32 {
        let stream = 2 * i + 1;
        resets.extend(h2_raw::frame(
            h2_raw::HEADERS,
            h2_raw::END_HEADERS,
            stream,
            &block,
        ));
        resets.extend(h2_raw::frame(
            h2_raw::RST_STREAM,
            0,
            stream,
            &8u32.to_be_bytes(),
        ));
    }
    let _ = tls.write_all(&resets).await;
    let seen = h2_raw::read_frames(&mut tls, Duration::from_secs(5)).await;
    let cut = started.elapsed();
    assert!(seen.goaway, "rapid reset not cut off: {seen:?}");
    assert!(
        cut < Duration::from_secs(1),
        "rapid reset cut off after {cut:?}"
    );
    lines.push(format!(
        "rapid reset cut off after {cut:?} ({} answers first)",
        seen.headers
    ));

    // Frames that advance no request, sent as fast as the client can: each flood is
    // ended with GOAWAY(ENHANCE_YOUR_CALM) once the connection's budget runs dry.
    for (name, flood) in control_floods() {
        let tls = h2_tls(&edge).await;
        let clock = CpuClock::start(&edge);
        let (seen, cut, sent) = control_flood(tls, &flood).await;
        let cpu = clock.elapsed();
        lines.push(format!(
            "{name} flood: {sent} bytes sent, GOAWAY {:?} after {cut:?}, {cpu:?} of edge CPU",
            seen.goaway_code
        ));
        assert_eq!(
            seen.goaway_code,
            Some(ENHANCE_YOUR_CALM),
            "{name}: {seen:?}"
        );
        assert!(seen.closed, "{name} flood: connection left open: {seen:?}");
        assert!(
            cut < Duration::from_secs(1),
            "{name} flood cut off after {cut:?}"
        );
        assert!(
            cpu < Duration::from_millis(500),
            "{name} flood cost the edge {cpu:?}"
        );
    }

    // A body in 1-byte DATA frames, priced against a valid request of as many bytes:
    // each frame of one byte is ten on the wire.
    let wire_sized = cpu_per_request(&edge, CPU_ROUNDS, |i| {
        // A body of its own each: one body under fresh ids would be a replay, which is
        // acknowledged without being stored and so is not what a valid request costs.
        let mut body = vec![b'w'; 10 * 16 * 1024];
        body[..8].copy_from_slice(format!("{i:08}").as_bytes());
        let request = signed_github(
            h2_client.post(edge.url("/hooks/big")),
            &format!("wire-{i}"),
            &body,
        );
        async move { assert_eq!(request.send().await.unwrap().status(), 202) }
    })
    .await;
    let body = vec![b'x'; 16 * 1024];
    let signature = github_signature(GITHUB_SECRET, &body);
    let mut dribble = h2_raw::preface();
    dribble.extend(h2_raw::frame(
        h2_raw::HEADERS,
        h2_raw::END_HEADERS,
        1,
        &h2_raw::post_block(
            "/hooks/github",
            &[
                ("x-github-delivery", "dribble"),
                ("x-hub-signature-256", &signature),
            ],
        ),
    ));
    for (i, byte) in body.iter().enumerate() {
        let flags = if i + 1 == body.len() {
            h2_raw::END_STREAM
        } else {
            0
        };
        dribble.extend(h2_raw::frame(h2_raw::DATA, flags, 1, &[*byte]));
    }
    // Priced as the valid requests are, over as many rounds: one sample of a millisecond
    // would price whatever else the edge did meanwhile (the legitimate sender beside it
    // made single samples 1.0 to 3.4 ms). Each on a connection opened beforehand: a
    // handshake is not the attack.
    let mut connections = Vec::new();
    for _ in 0..CPU_ROUNDS {
        connections.push(Some(h2_tls(&edge).await));
    }
    let dribble = Arc::new(dribble);
    let outcomes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let cpu = cpu_per_request(&edge, CPU_ROUNDS, |i| {
        let mut tls = connections[i].take().unwrap();
        let (dribble, outcomes) = (Arc::clone(&dribble), Arc::clone(&outcomes));
        async move {
            let started = Instant::now();
            let _ = tls.write_all(&dribble).await;
            let seen = h2_raw::read_frames(&mut tls, Duration::from_secs(3)).await;
            outcomes.lock().unwrap().push((seen, started.elapsed()));
        }
    })
    .await;
    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    let answered = outcomes.iter().map(|(_, t)| *t).max().unwrap();
    let (seen, _) = &outcomes[0];
    lines.push(format!(
        "16 KiB body in 1-byte DATA frames (164 KB), {CPU_ROUNDS} times: cut off (GOAWAY {:?}, closed {}) after {answered:?} at most, {cpu:?} CPU each ({:.2}x a valid 160 KiB request, {wire_sized:?})",
        seen.goaway_code,
        seen.closed,
        ratio(cpu, wire_sized)
    ));
    assert!(
        outcomes.iter().all(|(seen, _)| seen.goaway || seen.closed),
        "1-byte DATA frames not cut off: {outcomes:?}"
    );
    assert!(answered < Duration::from_secs(1), "{answered:?}");
    // 1.6-1.8x on a quiet machine; the bound leaves room for a shared host's noise (CI
    // once measured 2.0x) and still fails a path that reads such frames unbounded.
    assert!(
        ratio(cpu, wire_sized) <= 2.5,
        "1-byte DATA frames cost {cpu:?} against {wire_sized:?} for a valid request"
    );

    // The same body in 1-byte HTTP/1.1 chunks.
    let mut tls = tls_with_alpn(&edge, b"http/1.1").await;
    let mut chunked = format!(
        "POST /hooks/github HTTP/1.1\r\nhost: localhost\r\ntransfer-encoding: chunked\r\nx-github-delivery: chunks\r\nx-hub-signature-256: {signature}\r\n\r\n"
    )
    .into_bytes();
    for byte in &body {
        chunked.extend_from_slice(b"1\r\n");
        chunked.push(*byte);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let clock = CpuClock::start(&edge);
    let started = Instant::now();
    let _ = tls.write_all(&chunked).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut answer),
    )
    .await;
    let answered = started.elapsed();
    let cpu = clock.elapsed();
    let status = String::from_utf8_lossy(answer.get(9..12).unwrap_or_default()).into_owned();
    lines.push(format!(
        "16 KiB body in 1-byte HTTP/1.1 chunks (96 KB): {status} and closed after {answered:?}, {cpu:?} CPU ({:.2}x a valid 160 KiB request)",
        ratio(cpu, wire_sized)
    ));
    assert_eq!(status, "400");
    assert!(answered < Duration::from_secs(1), "{answered:?}");
    assert!(ratio(cpu, wire_sized) <= 2.0, "1-byte chunks cost {cpu:?}");

    // A reader that opens no window: the answers' heads come, their bodies cannot.
    let mut tls = h2_tls(&edge).await;
    let started = Instant::now();
    let mut greedy = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    greedy.extend(h2_raw::settings(&[(
        h2_raw::SETTINGS_INITIAL_WINDOW_SIZE,
        0,
    )]));
    for i in 0..50u32 {
        let body = format!(r#"{{"zero_window":{i}}}"#);
        let signature = github_signature(GITHUB_SECRET, body.as_bytes());
        let delivery = format!("zero-window-{i}");
        let block = h2_raw::post_block(
            "/hooks/github",
            &[
                ("x-github-delivery", &delivery),
                ("x-hub-signature-256", &signature),
            ],
        );
        greedy.extend(h2_raw::frame(
            h2_raw::HEADERS,
            h2_raw::END_HEADERS,
            2 * i + 1,
            &block,
        ));
        greedy.extend(h2_raw::frame(
            h2_raw::DATA,
            h2_raw::END_STREAM,
            2 * i + 1,
            body.as_bytes(),
        ));
    }
    tls.write_all(&greedy).await.unwrap();
    let seen = h2_raw::read_frames(&mut tls, Duration::from_secs(10)).await;
    let closed = started.elapsed();
    lines.push(format!(
        "zero-window reader: {} answer heads, closed after {closed:?}",
        seen.headers
    ));
    assert_eq!(seen.headers, 50, "{seen:?}");
    assert!(
        seen.closed && closed < Duration::from_secs(9),
        "{seen:?} after {closed:?}"
    );

    let served = legit.finish().await;
    served.assert_served("HTTP/2 frame abuse");
    let rss = rss.assert_bounded("HTTP/2 frame abuse");
    println!(
        "attack h2-frames: legitimate {}/{} 2xx, p99 {:?}; edge RSS peak {rss} MiB; valid request {valid:?} CPU; {}",
        served.ok,
        served.sent,
        served.p99,
        lines.join("; ")
    );
}

/// Four attackers that send only frames advancing no request, each opening a new
/// connection every [`FLOOD_RECONNECT`] once cut off, beside a keep-alive sender: every
/// flood connection ends with GOAWAY(ENHANCE_YOUR_CALM) within a second for under half
/// a second of the edge's CPU, and the sender's median is printed against its median
/// with no attack (goal: within 20 %; the test's bound is looser, as the attackers' own
/// TLS work shares the machine's two cores). Unpaced reconnects are a handshake flood,
/// priced by the handshake benchmark.
#[tokio::test(flavor = "multi_thread")]
async fn control_frame_floods_on_four_connections_leave_senders_their_latency() {
    let _turn = SERIAL.lock().await;
    let edge = Edge::start_in_memory("", "");
    let quiet = Legit::start(&edge, false).finish().await;
    quiet.assert_served("no attack");
    let rss = PeakRss::watch(&edge);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // On a thread and runtime of their own: the attackers' TLS work must not delay the
    // legitimate sender's tasks inside this process.
    let (port, cert, stopping) = (edge.port, edge.cert_pem(), Arc::clone(&stop));
    let attackers = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut attackers = tokio::task::JoinSet::new();
            for attacker in 0..4 {
                let (cert, stop) = (cert.clone(), Arc::clone(&stopping));
                attackers.spawn(async move {
                    let floods = control_floods();
                    let (mut connections, mut calmed, mut slowest) = (0, 0, Duration::ZERO);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) && connections < 2000 {
                        let Ok(tls) = h2_tls_to(port, &cert).await else {
                            continue;
                        };
                        let (_, flood) = &floods[(attacker + connections) % floods.len()];
                        let (seen, cut, _) = control_flood(tls, flood).await;
                        tokio::time::sleep(FLOOD_RECONNECT).await;
                        connections += 1;
                        calmed += usize::from(seen.goaway_code == Some(ENHANCE_YOUR_CALM));
                        slowest = slowest.max(cut);
                    }
                    (connections, calmed, slowest)
                });
            }
            let (mut connections, mut calmed, mut slowest) = (0, 0, Duration::ZERO);
            while let Some(attacker) = attackers.join_next().await {
                let (c, k, s) = attacker.unwrap();
                (connections, calmed, slowest) = (connections + c, calmed + k, slowest.max(s));
            }
            (connections, calmed, slowest)
        })
    });
    let clock = CpuClock::start(&edge);
    let started = Instant::now();
    let served = Legit::start(&edge, false).finish().await;
    let elapsed = started.elapsed();
    let cpu = clock.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (connections, calmed, slowest) = attackers.join().unwrap();
    served.assert_served("control-frame floods on four connections");
    let rss = rss.assert_bounded("control-frame floods");
    let median_ratio = served.median.as_secs_f64() / quiet.median.as_secs_f64();
    println!(
        "attack h2-control-floods: legitimate {}/{} 2xx, median {:?} against {:?} with no attack ({median_ratio:.2}x), p99 {:?}; {connections} flood connections over {elapsed:?}, {calmed} ended by GOAWAY(ENHANCE_YOUR_CALM), slowest cut {slowest:?}; edge CPU {cpu:?} ({:?} per flood connection); RSS peak {rss} MiB",
        served.ok,
        served.sent,
        served.median,
        quiet.median,
        served.p99,
        cpu / connections.max(1) as u32,
    );
    assert!(
        connections > 0 && calmed * 10 >= connections * 9,
        "{calmed} of {connections}"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a flood was cut after {slowest:?}"
    );
    assert!(
        cpu / connections.max(1) as u32 <= Duration::from_millis(500),
        "{cpu:?} for {connections} flood connections"
    );
    assert!(median_ratio < 2.0, "legitimate median {median_ratio:.2}x");
}

/// 500 uploaders of 1 MiB bodies from five addresses, each sending all but the last
/// byte at once and then waiting (within the body rate for a while), against
/// `admission.max_body_bytes: 64MiB`: each address holds at most its eighth of the
/// budget, the rest are answered 503 before their bodies are read, the edge's memory
/// stays under the budget + 64 MiB, and a sender beside them is served.
#[tokio::test(flavor = "multi_thread")]
async fn slow_uploaders_of_large_bodies_cannot_take_the_edges_memory() {
    let _turn = SERIAL.lock().await;
    let edge = Edge::start_in_memory("", BIG_GITHUB_ROUTE)
        .with_section("admission: { max_body_bytes: 64MiB }\n");
    let rss = PeakRss::watch(&edge);
    let legit = Legit::start(&edge, false);
    let body = vec![b'u'; 1 << 20];
    let signature = github_signature(GITHUB_SECRET, &body);
    let mut uploaders = tokio::task::JoinSet::new();
    for i in 0..500 {
        let source: std::net::IpAddr = format!("127.0.0.{}", 21 + i % 5).parse().unwrap();
        let (port, cert) = (edge.port, edge.cert_pem());
        let head = format!(
            "POST /hooks/big HTTP/1.1\r\nhost: localhost\r\ncontent-length: {}\r\nx-github-delivery: upload-{i}\r\nx-hub-signature-256: {signature}\r\n\r\n",
            body.len()
        );
        let most = body[..body.len() - 1].to_vec();
        uploaders.spawn(async move {
            let tls = tls_from(source, port, &cert, b"http/1.1").await.ok()?;
            let (mut reader, mut writer) = tokio::io::split(tls);
            writer.write_all(head.as_bytes()).await.ok()?;
            let mut answer = [0u8; 12];
            // A refusal comes before the body is read; a held upload answers nothing.
            let refused = tokio::select! {
                _ = writer.write_all(&most) => false,
                read = tokio::io::AsyncReadExt::read_exact(&mut reader, &mut answer) => read.is_ok(),
            };
            let answered = refused || {
                let read = tokio::io::AsyncReadExt::read_exact(&mut reader, &mut answer);
                matches!(tokio::time::timeout(Duration::from_secs(4), read).await, Ok(Ok(_)))
            };
            let status = if answered {
                String::from_utf8_lossy(&answer[9..12]).into_owned()
            } else {
                "held".to_owned()
            };
            Some((status, (reader, writer)))
        });
    }
    let mut statuses = std::collections::BTreeMap::new();
    let mut held_open = Vec::new();
    while let Some(uploader) = uploaders.join_next().await {
        if let Some((status, connection)) = uploader.unwrap() {
            *statuses.entry(status).or_insert(0) += 1;
            held_open.push(connection);
        }
    }
    let held_bytes = edge.metric(r#"webhook_ingress_body_bytes{pop="test"}"#);
    let served = legit.finish().await;
    let rss = rss.assert_bounded("slow uploaders of 1 MiB bodies");
    println!(
        "attack body-memory: 500 uploaders of 1 MiB from 5 addresses, admission.max_body_bytes 64 MiB: answers {statuses:?}, {:.1} MiB held; edge RSS peak {rss} MiB; legitimate {}/{} 2xx, p99 {:?}",
        held_bytes / 1048576.0,
        served.ok,
        served.sent,
        served.p99
    );
    served.assert_served("slow uploaders of large bodies");
    assert!(held_bytes <= 64.0 * 1048576.0, "{held_bytes} bytes held");
    assert_eq!(
        statuses.get("held").copied().unwrap_or(0),
        40,
        "{statuses:?}: 5 x an eighth of 64 MiB"
    );
    assert_eq!(
        statuses.get("503").copied().unwrap_or(0),
        460,
        "{statuses:?}"
    );
    assert!(rss < 64 + 64, "RSS {rss} MiB");
    drop(held_open);
}

/// The lock-out measured before handshake slots: `connections: { max: 300, per_source:
/// 64 }`, and from five addresses 64 connections each that never send a ClientHello,
/// re-opened as soon as the edge closes them. A sender opening a new TLS connection per
/// webhook, outside `trusted`, gets 95 % answered 2xx with p99 within a second (it got
/// 0 of 87 before); the hoarders' handshakes are what make room.
#[tokio::test(flavor = "multi_thread")]
async fn handshakes_that_never_finish_do_not_lock_senders_out() {
    let _turn = SERIAL.lock().await;
    let edge =
        Edge::start_in_memory("", "").with_section("connections: { max: 300, per_source: 64 }\n");
    let rss = PeakRss::watch(&edge);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut hoarders = tokio::task::JoinSet::new();
    for address in 0..5 {
        let source: std::net::IpAddr = format!("127.0.0.{}", 11 + address).parse().unwrap();
        for _ in 0..64 {
            let (port, stop, opened) = (edge.port, Arc::clone(&stop), Arc::clone(&opened));
            hoarders.spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let socket = tokio::net::TcpSocket::new_v4().unwrap();
                    socket.bind((source, 0).into()).unwrap();
                    let Ok(Ok(mut held)) = tokio::time::timeout(
                        Duration::from_secs(1),
                        socket.connect(([127, 0, 0, 1], port).into()),
                    )
                    .await
                    else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    // Never a ClientHello: wait for the edge to close it, then again.
                    let mut byte = [0u8; 1];
                    let _ = tokio::time::timeout(
                        Duration::from_secs(15),
                        tokio::io::AsyncReadExt::read(&mut held, &mut byte),
                    )
                    .await;
                }
            });
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let served = Legit::start(&edge, true).finish().await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    hoarders.abort_all();
    let evicted = edge.metric(r#"edge_connections_evicted_total{pop="test",reason="handshake"}"#);
    let refused = edge.metric(r#"edge_connections_refused_total{pop="test",reason="handshakes"}"#);
    let rss = rss.assert_bounded("handshake hoarding");
    println!(
        "attack handshake-hoarding: legitimate {}/{} 2xx, p99 {:?}; {} hoarding connections opened, {evicted} handshakes evicted, {refused} refused at the handshake cap; RSS peak {rss} MiB",
        served.ok,
        served.sent,
        served.p99,
        opened.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(
        served.ok * 100 >= served.sent * 95,
        "legitimate sender locked out: {served:?}"
    );
    assert!(served.p99 <= Duration::from_secs(1), "{served:?}");
    assert!(evicted > 0.0, "the hoarders' handshakes made room");
}

/// A head exactly at `http.max_header_bytes` is stored and reaches the origin with its
/// headers; one byte over is a 431, answered at once, over HTTP/1.1 and HTTP/2; so is
/// one field over `max_headers`; and a head far past every limit costs no more than a
/// valid request.
#[tokio::test(flavor = "multi_thread")]
async fn heads_at_the_limits_round_trip_and_past_them_get_431() {
    let _turn = SERIAL.lock().await;
    let nats = testkit::edge::nats::Nats::start();
    let edge = Edge::start_in_memory("", "").with_section(&format!(
        "http: {{ max_header_bytes: 60KiB, max_headers: 64 }}\nbackhaul:\n  sink: nats\n  nats: {{ servers: [\"{}\"], stream: LIMITS, create: true }}\n",
        nats.url()
    ));
    let rss = PeakRss::watch(&edge);
    let legit = Legit::start(&edge, false);
    let mut slowest = Duration::ZERO;
    for http2 in [false, true] {
        for (delivery, extra, expected) in [
            (format!("at-limit-{http2}"), 0, 202),
            (format!("over-limit-{http2}"), 1, 431),
        ] {
            let head = head_of_bytes(&delivery, http2, 60 * 1024 + extra);
            let started = Instant::now();
            assert_eq!(send_head(&edge, http2, &head).await, expected, "{delivery}");
            slowest = slowest.max(started.elapsed());
        }
        let mut many = head_of_bytes("many", http2, 2048);
        many.extend((many.len()..=64).map(|i| (format!("x-github-f{i}"), "v".to_owned())));
        assert_eq!(send_head(&edge, http2, &many).await, 431, "http2={http2}");
    }
    let at_origin = wait_for_stream(&nats, "LIMITS", "at-limit", 2).await;
    assert_eq!(at_origin.len(), 2);
    for message in &at_origin {
        let filler = message
            .headers
            .get("x-github-filler")
            .map(|f| f.as_str().len());
        assert!(
            filler.is_some_and(|f| f > 60_000),
            "{:?}",
            message.headers.get("Edge-Event-Id")
        );
    }
    let client = client(&edge, false);
    let valid = cpu_per_request(&edge, CPU_ROUNDS, |i| {
        let request = github_post(
            &client,
            &edge,
            &format!("cpu-{i}"),
            &delivery_body(&format!("cpu-{i}")),
        );
        async move { assert_eq!(request.send().await.unwrap().status(), 202) }
    })
    .await;
    let oversized = cpu_per_request(&edge, CPU_ROUNDS, |_| {
        let request = (0..60).fold(
            github_post(&client, &edge, "huge", &delivery_body("huge")),
            |r, i| r.header(format!("x-huge-{i}"), "h".repeat(2000)),
        );
        async move { assert_eq!(request.send().await.unwrap().status(), 431) }
    })
    .await;
    let served = legit.finish().await;
    served.assert_served("heads at the limits");
    let rss = rss.assert_bounded("heads at the limits");
    println!(
        "attack header-limits: a 60 KiB head stored and delivered over HTTP/1.1 and HTTP/2, one byte more 431, slowest answer {slowest:?}; CPU per request: valid {valid:?}, 120 KB head {oversized:?} ({:.2}x); legitimate {}/{} 2xx, p99 {:?}; edge RSS peak {rss} MiB",
        ratio(oversized, valid),
        served.ok,
        served.sent,
        served.p99
    );
    assert!(slowest < Duration::from_secs(1));
    assert!(ratio(oversized, valid) <= 2.0);
}

/// The fields of a signed GitHub delivery of [`head_body`] whose head counts `bytes` as the edge
/// counts it (name + value + 32 a field), a `x-github-filler` field making up the rest.
fn head_of_bytes(delivery: &str, http2: bool, bytes: usize) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = [
        ("content-length", "2".to_owned()),
        ("x-github-event", "push".to_owned()),
        ("x-github-delivery", delivery.to_owned()),
        (
            "x-hub-signature-256",
            github_signature(GITHUB_SECRET, head_body(http2)),
        ),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect();
    if !http2 {
        fields.push(("host".to_owned(), "localhost".to_owned()));
    }
    let used: usize = fields.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
    let filler = bytes - used - ("x-github-filler".len() + 32);
    fields.push(("x-github-filler".to_owned(), "f".repeat(filler)));
    fields
}

/// The 2-byte body [`head_of_bytes`] signs: one per protocol, so the two deliveries are
/// distinct bodies, not one body under two ids (a replay).
fn head_body(http2: bool) -> &'static [u8] {
    if http2 { b"[]" } else { b"{}" }
}

/// Posts `{}` with exactly `head`'s fields (raw HTTP/1.1, or the h2 crate, which add
/// none of their own) and returns the answer's status.
async fn send_head(edge: &Edge, http2: bool, head: &[(String, String)]) -> u16 {
    use tokio::io::AsyncReadExt;
    if http2 {
        let (send, connection) = h2::client::handshake(h2_tls(edge).await).await.unwrap();
        tokio::spawn(connection);
        let mut request = http::Request::post(edge.url("/hooks/github"));
        for (name, value) in head.iter().filter(|(n, _)| n != "host") {
            request = request.header(name, value);
        }
        let mut send = send.ready().await.unwrap();
        let (response, mut body) = send.send_request(request.body(()).unwrap(), false).unwrap();
        body.send_data(bytes::Bytes::from_static(head_body(true)), true)
            .unwrap();
        return response.await.unwrap().status().as_u16();
    }
    let mut tls = tls_with_alpn(edge, b"http/1.1").await;
    let mut raw = "POST /hooks/github HTTP/1.1\r\n".to_owned();
    for (name, value) in head {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    raw.push_str("\r\n");
    raw.push_str(std::str::from_utf8(head_body(false)).unwrap());
    tls.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 12];
    tls.read_exact(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer[9..12]).parse().unwrap()
}

/// A captured, validly signed GitHub delivery resent under other ids: under a fresh id,
/// and under the id of a delivery still to come, it is a replay (answered 202 as a
/// duplicate, counted in `edge_replays_total`, stored nothing), so the genuine delivery
/// under that id is stored and reaches the origin; its retry is still a duplicate, and
/// the origin holds each body once.
#[tokio::test(flavor = "multi_thread")]
async fn a_captured_delivery_under_other_ids_is_a_replay_and_stores_nothing() {
    let _turn = SERIAL.lock().await;
    let nats = testkit::edge::nats::Nats::start();
    let edge = Edge::start_in_memory("", "").with_section(&format!(
        "backhaul:\n  sink: nats\n  nats: {{ servers: [\"{}\"], stream: REPLAY, create: true }}\n",
        nats.url()
    ));
    let legit = Legit::start(&edge, false);
    let client = client(&edge, true);
    let captured = br#"{"action":"opened","n":1}"#;
    let genuine = br#"{"action":"closed","n":2}"#;
    let post = |id: &str, body: &'static [u8]| github_post(&client, &edge, id, body).send();
    let stored = |r: reqwest::Response| async move {
        let status = r.status();
        let body: serde_json::Value = r.json().await.unwrap();
        (
            status.as_u16(),
            body["duplicate"].as_bool(),
            body["seq"].as_u64(),
        )
    };
    let (status, duplicate, first_seq) = stored(post("d-1", captured).await.unwrap()).await;
    assert_eq!((status, duplicate), (202, Some(false)));
    for replay_id in ["d-fresh", "d-2"] {
        assert_eq!(
            stored(post(replay_id, captured).await.unwrap()).await,
            (202, Some(true), first_seq),
            "{replay_id}: a replay is answered as the body it repeats"
        );
    }
    let (status, duplicate, _) = stored(post("d-2", genuine).await.unwrap()).await;
    assert_eq!(
        (status, duplicate),
        (202, Some(false)),
        "the genuine d-2 is stored"
    );
    let (_, duplicate, _) = stored(post("d-2", genuine).await.unwrap()).await;
    assert_eq!(
        duplicate,
        Some(true),
        "the genuine delivery's retry is a duplicate"
    );
    assert_eq!(
        edge.metric(r#"edge_replays_total{pop="test",route="hooks_github"}"#),
        2.0
    );
    assert_eq!(edge.metric("edge_dedupe_id_conflicts_total"), 0.0);
    let at_origin = wait_for_stream(&nats, "REPLAY", "d-", 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let at_origin_later = wait_for_stream(&nats, "REPLAY", "d-", 2).await;
    let ids: Vec<&str> = at_origin_later
        .iter()
        .filter_map(|m| m.headers.get("Edge-Event-Id").map(|v| v.as_str()))
        .collect();
    assert_eq!(at_origin.len(), 2);
    assert_eq!(ids, ["d-1", "d-2"], "each body once, under its own id");
    let genuine_there = at_origin_later
        .iter()
        .any(|m| m.payload.as_ref() == genuine);
    assert!(genuine_there, "the genuine d-2 is not at the origin");
    let served = legit.finish().await;
    served.assert_served("delivery replayed under other ids");
    println!(
        "attack replayed-delivery: a captured delivery under a fresh id and under the next id: 2 replays acknowledged and not stored, the genuine delivery stored and delivered; legitimate {}/{} 2xx, p99 {:?}",
        served.ok, served.sent, served.p99
    );
}

/// A sender who can sign on one route (a partner's Standard Webhooks route) picks the
/// `webhook-id` of another route's event: both are answered 2xx, and both reach the
/// origin, because its de-duplication key (`Nats-Msg-Id`) is scoped to the route; a
/// redelivery on either route is still dropped there.
#[tokio::test(flavor = "multi_thread")]
async fn one_route_cannot_pick_ids_that_drop_another_routes_events_at_the_origin() {
    let _turn = SERIAL.lock().await;
    let nats = testkit::edge::nats::Nats::start();
    let partner_secret = "whsec_cGFydG5lci1zZWNyZXQ=";
    let edge = Edge::start_in_memory("", &format!(
        "{ROUTES}  - path: /hooks/partner\n    provider: standard\n    secrets: [\"{partner_secret}\"]\n"
    ))
    .with_section(&format!(
        "backhaul:\n  sink: nats\n  nats: {{ servers: [\"{}\"], stream: SCOPED, create: true }}\n",
        nats.url()
    ));
    let client = client(&edge, false);
    let send = |path: &str, secret: &str, body: &[u8]| {
        let key = edge::verify::decode_standard_secret(secret).unwrap();
        let ts = unix_now().to_string();
        let mac = hmac_sha256(&key, &[b"msg_shared.", ts.as_bytes(), b".", body]);
        let signature = base64::engine::general_purpose::STANDARD.encode(mac);
        client
            .post(edge.url(path))
            .header("webhook-id", "msg_shared")
            .header("webhook-timestamp", ts)
            .header("webhook-signature", format!("v1,{signature}"))
            .body(body.to_vec())
            .send()
    };
    let payments = send(
        "/hooks/std",
        STANDARD_SECRET,
        br#"{"type":"payment.succeeded"}"#,
    );
    assert_eq!(payments.await.unwrap().status(), 202);
    let forged = send(
        "/hooks/partner",
        partner_secret,
        br#"{"type":"partner.noise"}"#,
    );
    assert_eq!(forged.await.unwrap().status(), 202);
    let redelivered = send(
        "/hooks/std",
        STANDARD_SECRET,
        br#"{"type":"payment.succeeded"}"#,
    );
    assert_eq!(redelivered.await.unwrap().status(), 202);
    let at_origin = wait_for_stream(&nats, "SCOPED", "msg_shared", 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let at_origin_later = wait_for_stream(&nats, "SCOPED", "msg_shared", 2).await;
    let routes: Vec<&str> = at_origin_later
        .iter()
        .filter_map(|m| m.headers.get("Edge-Route").map(|v| v.as_str()))
        .collect();
    println!(
        "attack cross-route-ids: one webhook-id on two routes: {} messages at the origin (routes {routes:?})",
        at_origin.len()
    );
    assert_eq!(
        routes,
        ["hooks_std", "hooks_partner"],
        "each route's event once"
    );
    let msg_ids: Vec<&str> = at_origin_later
        .iter()
        .filter_map(|m| m.headers.get("Nats-Msg-Id").map(|v| v.as_str()))
        .collect();
    assert!(
        msg_ids
            .iter()
            .all(|id| id.starts_with(edge::event::ORIGIN_KEY_PREFIX))
    );
}

/// The messages in `stream` whose `Edge-Event-Id` starts with `prefix`, once there are
/// `count` of them (20 s at most).
async fn wait_for_stream(
    nats: &testkit::edge::nats::Nats,
    stream: &str,
    prefix: &str,
    count: usize,
) -> Vec<async_nats::jetstream::message::StreamMessage> {
    let js = nats.jetstream().await;
    let started = Instant::now();
    loop {
        let mut messages = Vec::new();
        if let Ok(mut s) = js.get_stream(stream).await
            && let Ok(info) = s.info().await
        {
            for seq in 1..=info.state.last_sequence {
                if let Ok(message) = s.get_raw_message(seq).await
                    && message
                        .headers
                        .get("Edge-Event-Id")
                        .is_some_and(|id| id.as_str().starts_with(prefix))
                {
                    messages.push(message);
                }
            }
        }
        if messages.len() >= count || started.elapsed() > Duration::from_secs(20) {
            return messages;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Stripe event of just over 1 MiB.
fn one_mib_event(id: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"{id}","object":"event","pad":"{}"}}"#,
        "p".repeat(1 << 20)
    )
    .into_bytes()
}

/// A Stripe delivery of `body`, one `v1` per secret.
fn stripe_signed(
    client: &reqwest::Client,
    base: &str,
    body: &[u8],
    secrets: &[&str],
) -> reqwest::RequestBuilder {
    let t = unix_now();
    let signatures: Vec<String> = secrets
        .iter()
        .map(|s| {
            format!(
                "v1={}",
                const_hex::encode(hmac_sha256(
                    s.as_bytes(),
                    &[format!("{t}.").as_bytes(), body]
                ))
            )
        })
        .collect();
    client
        .post(format!("{base}/hooks/stripe"))
        .header(
            "Stripe-Signature",
            format!("t={t},{}", signatures.join(",")),
        )
        .body(body.to_vec())
}

/// `t=<now>` and 3,500 empty `v1=` entries (14 KB of header) on `body`.
fn stripe_flood(
    client: &reqwest::Client,
    base: &str,
    body: &Arc<Vec<u8>>,
) -> reqwest::RequestBuilder {
    let header = format!("t={},{}", unix_now(), vec!["v1="; 3500].join(","));
    client
        .post(format!("{base}/hooks/stripe"))
        .header("Stripe-Signature", header)
        .body(body.as_ref().clone())
}

/// Standard Webhooks with 3,500 `v1,` entries on `body`.
fn standard_flood(
    client: &reqwest::Client,
    base: &str,
    body: &Arc<Vec<u8>>,
) -> reqwest::RequestBuilder {
    client
        .post(format!("{base}/hooks/std"))
        .header("webhook-id", "msg_flood")
        .header("webhook-timestamp", unix_now().to_string())
        .header("webhook-signature", vec!["v1,"; 3500].join(" "))
        .body(body.as_ref().clone())
}

/// The floods of frames that advance no request, by name: the preface, then
/// [`FLOOD_FRAMES`] copies of one frame.
fn control_floods() -> Vec<(&'static str, Arc<Vec<u8>>)> {
    [
        ("SETTINGS", h2_raw::frame(h2_raw::SETTINGS, 0, 0, &[])),
        (
            "WINDOW_UPDATE",
            h2_raw::frame(h2_raw::WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()),
        ),
        ("PING", h2_raw::frame(h2_raw::PING, 0, 0, &[7; 8])),
    ]
    .into_iter()
    .map(|(name, unit)| {
        let mut flood = h2_raw::preface();
        for _ in 0..FLOOD_FRAMES {
            flood.extend_from_slice(&unit);
        }
        (name, Arc::new(flood))
    })
    .collect()
}

/// Sends `flood` while reading what comes back: what was seen, when the connection was
/// cut off, and how many bytes went out.
async fn control_flood<S>(tls: S, flood: &[u8]) -> (h2_raw::Seen, Duration, usize)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(tls);
    let started = Instant::now();
    let reading = tokio::spawn(async move {
        let seen = h2_raw::read_frames(&mut reader, Duration::from_secs(5)).await;
        (seen, started.elapsed())
    });
    let mut sent = 0;
    for chunk in flood.chunks(16 * 1024) {
        if writer.write_all(chunk).await.is_err() || reading.is_finished() {
            break;
        }
        sent += chunk.len();
    }
    let (seen, cut) = reading.await.unwrap();
    (seen, cut, sent)
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ROUTES: &str = r#"  - path: /hooks/stripe
    provider: stripe
    secrets: ["whsec_attack_stripe"]
    max_body: 2MiB
  - path: /hooks/std
    provider: standard
    secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
    max_body: 2MiB
"#;
const STRIPE_SECRET: &str = "whsec_attack_stripe";
const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// A GitHub route for bodies past the harness route's 64 KiB.
const BIG_GITHUB_ROUTE: &str = r#"  - path: /hooks/big
    provider: github
    secrets: ["gh-secret"]
    max_body: 1MiB
"#;
/// Requests per CPU measurement: enough for the edge's CPU time to be read well.
const CPU_ROUNDS: usize = 30;
const HOARDERS: usize = 100;
/// Frames in one flood: 200,000 (about 2 MB), far past any connection's budget.
const FLOOD_FRAMES: usize = 200_000;
/// How long a flood attacker waits after its connection is cut off before the next.
const FLOOD_RECONNECT: Duration = Duration::from_millis(25);
/// GOAWAY's error code for a peer that sends too much of what costs us (RFC 9113, 7).
const ENHANCE_YOUR_CALM: u32 = 0xb;
