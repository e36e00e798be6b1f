//! The attack suite: what one sender on the open internet can try against a PoP's port
//! 443, each attack with a legitimate signed sender beside it (127.0.0.2, HTTP/1.1 and
//! HTTP/2). For every attack: every legitimate request is answered 2xx with p99 within
//! 500 ms, the edge stays under 128 MiB, each attack request is answered (or its
//! connection closed) within 1 s, and the edge's CPU per attack request is printed
//! beside a valid request's.
//!
//! The tests of this file take turns (one lock): they measure latency and CPU. Their
//! edges spool in memory, so that the disk's stalls are not counted as the attacker's.

use std::sync::Arc;
use std::time::{Duration, Instant};

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
/// cut off within a second; SETTINGS and PING floods cost less per byte than requests;
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
        let request = github_post(&h2_client, &edge, &format!("cpu-{i}"), b"{}");
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

    // SETTINGS and PING floods, read as they are answered.
    for (name, unit, answered) in [
        (
            "SETTINGS",
            h2_raw::settings(&[(0x3, 100)]),
            (|s: &h2_raw::Seen| s.settings_acks) as fn(&h2_raw::Seen) -> usize,
        ),
        (
            "PING",
            h2_raw::frame(h2_raw::PING, 0, 0, &[7; 8]),
            |s: &h2_raw::Seen| s.ping_acks,
        ),
    ] {
        let tls = h2_tls(&edge).await;
        let (mut reader, mut writer) = tokio::io::split(tls);
        let mut frames = h2_raw::preface();
        for _ in 0..FLOOD_FRAMES {
            frames.extend_from_slice(&unit);
        }
        let clock = CpuClock::start(&edge);
        let started = Instant::now();
        let reading =
            tokio::spawn(
                async move { h2_raw::read_frames(&mut reader, Duration::from_secs(10)).await },
            );
        writer.write_all(&frames).await.unwrap();
        let sent = started.elapsed();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        writer.shutdown().await.ok();
        let seen = reading.await.unwrap();
        let cpu = clock.elapsed();
        let per_mb = cpu.as_secs_f64() * 1e3 / (frames.len() as f64 / 1e6);
        let valid_per_mb = valid.as_secs_f64() * 1e3 / (VALID_REQUEST_BYTES / 1e6);
        lines.push(format!(
            "{name} flood: {FLOOD_FRAMES} frames sent in {sent:?}, {} answered; {per_mb:.1} ms CPU per MB against {valid_per_mb:.1} for valid requests",
            answered(&seen)
        ));
        assert!(
            answered(&seen) >= FLOOD_FRAMES || seen.goaway,
            "{name} flood neither answered within a second nor cut off: {seen:?}"
        );
        assert!(
            per_mb <= 2.0 * valid_per_mb,
            "{name} flood: {per_mb:.1} ms per MB"
        );
    }

    // A body in 1-byte DATA frames, priced against a valid request of as many bytes:
    // each frame of one byte is ten on the wire.
    let wire_sized = cpu_per_request(&edge, CPU_ROUNDS, |i| {
        let body = vec![b'w'; 10 * 16 * 1024];
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
    assert!(
        ratio(cpu, wire_sized) <= 2.0,
        "1-byte DATA frames cost {cpu:?}"
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
        let request = github_post(&client, &edge, &format!("cpu-{i}"), b"{}");
        async move { assert_eq!(request.send().await.unwrap().status(), 202) }
    })
    .await;
    let oversized = cpu_per_request(&edge, CPU_ROUNDS, |_| {
        let request = (0..60).fold(github_post(&client, &edge, "huge", b"{}"), |r, i| {
            r.header(format!("x-huge-{i}"), "h".repeat(2000))
        });
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

/// The fields of a signed GitHub delivery of `{}` whose head counts `bytes` as the edge
/// counts it (name + value + 32 a field), a `x-github-filler` field making up the rest.
fn head_of_bytes(delivery: &str, http2: bool, bytes: usize) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = [
        ("content-length", "2".to_owned()),
        ("x-github-event", "push".to_owned()),
        ("x-github-delivery", delivery.to_owned()),
        (
            "x-hub-signature-256",
            github_signature(GITHUB_SECRET, b"{}"),
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
        body.send_data(bytes::Bytes::from_static(b"{}"), true)
            .unwrap();
        return response.await.unwrap().status().as_u16();
    }
    let mut tls = tls_with_alpn(edge, b"http/1.1").await;
    let mut raw = "POST /hooks/github HTTP/1.1\r\n".to_owned();
    for (name, value) in head {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    raw.push_str("\r\n{}");
    tls.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 12];
    tls.read_exact(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer[9..12]).parse().unwrap()
}

/// A captured, validly signed GitHub delivery resent under another id: under a fresh id
/// it is stored as its own event (its body is genuine); under the id of a delivery still
/// to come, the genuine delivery is stored all the same, and the conflict counted. Both
/// reach the origin; a retry of the genuine one is still a duplicate.
#[tokio::test(flavor = "multi_thread")]
async fn a_captured_delivery_under_another_id_cannot_poison_de_duplication() {
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
        (status.as_u16(), body["duplicate"].as_bool())
    };
    assert_eq!(
        stored(post("d-1", captured).await.unwrap()).await,
        (202, Some(false))
    );
    assert_eq!(
        stored(post("d-fresh", captured).await.unwrap()).await,
        (202, Some(false)),
        "a replay under a fresh id is a new event"
    );
    assert_eq!(
        stored(post("d-2", captured).await.unwrap()).await,
        (202, Some(false)),
        "the attacker takes the next id first"
    );
    assert_eq!(
        stored(post("d-2", genuine).await.unwrap()).await,
        (202, Some(false)),
        "the genuine delivery is stored all the same"
    );
    assert_eq!(
        stored(post("d-2", genuine).await.unwrap()).await,
        (202, Some(true)),
        "its retry is a duplicate"
    );
    assert_eq!(edge.metric("edge_dedupe_id_conflicts_total"), 1.0);
    let at_origin = wait_for_stream(&nats, "REPLAY", "d-", 4).await;
    let genuine_there = at_origin.iter().any(|m| {
        m.payload.as_ref() == genuine
            && m.headers.get("Edge-Event-Id").map(|v| v.as_str()) == Some("d-2")
    });
    assert!(genuine_there, "the genuine d-2 is not at the origin");
    let served = legit.finish().await;
    served.assert_served("delivery replayed under another id");
    println!(
        "attack replayed-delivery: a captured delivery under a fresh id and under the next id: the genuine delivery stored and delivered, 1 conflict counted; legitimate {}/{} 2xx, p99 {:?}",
        served.ok, served.sent, served.p99
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
                hex::encode(hmac_sha256(
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
/// A GitHub route for bodies past the harness route's 64 KiB.
const BIG_GITHUB_ROUTE: &str = r#"  - path: /hooks/big
    provider: github
    secrets: ["gh-secret"]
    max_body: 1MiB
"#;
/// Requests per CPU measurement: enough for the edge's CPU time to be read well.
const CPU_ROUNDS: usize = 30;
const HOARDERS: usize = 100;
const FLOOD_FRAMES: usize = 20_000;
/// The wire size of a valid signed GitHub request of `{}` with its answer (head, TLS).
const VALID_REQUEST_BYTES: f64 = 600.0;
