//! Benchmark: spool → JetStream throughput with acks, side by side in one run with a
//! minimal async-nats publisher sending the same payloads with acks and the same number
//! in flight (the raw ceiling). Rounds alternate; medians and the ratio are printed.
//! Then end-to-end latency at a moderate rate: from the moment an event is durable (when
//! the edge would answer 2xx) to its arrival at a subscriber of the stream's subject.
//!
//! Needs nats-server on PATH: `cargo bench -p edge --bench backhaul_nats`.
//! EVENTS, ROUNDS and RATE adjust it.

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark stops at the line that failed"
)]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use edge::config::{BackhaulSettings, NatsSettings, SinkSettings, SpoolSettings};
use edge::metrics::Metrics;
use edge::spool::{NewEvent, Spool};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

const IN_FLIGHT: usize = 256;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events: usize = env("EVENTS", 20_000);
    let rounds: usize = env("ROUNDS", 3);
    let rate: u64 = env("RATE", 500);
    let nats = NatsServer::start();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let stream_config = async_nats::jetstream::stream::Config {
        name: "WEBHOOKS".into(),
        subjects: vec!["webhooks.>".into()],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    let mut stream = js.get_or_create_stream(stream_config).await.unwrap();
    let body = Bytes::from(vec![b'x'; 1024]);

    let mut raw = Vec::new();
    let mut edge = Vec::new();
    for round in 0..rounds {
        for contender in if round % 2 == 0 {
            ["raw", "edge"]
        } else {
            ["edge", "raw"]
        } {
            stream.purge().await.unwrap();
            let rate = if contender == "raw" {
                raw_publish(&js, events, &body, &format!("raw-{round}")).await
            } else {
                edge_backhaul(&nats, events, &body, &format!("edge-{round}"), &mut stream).await
            };
            println!("round {round}: {contender:<4} {rate:>9.0} msgs/s");
            if contender == "raw" {
                raw.push(rate)
            } else {
                edge.push(rate)
            }
        }
    }
    let (raw_median, edge_median) = (median(&raw), median(&edge));
    println!(
        "\nspool -> JetStream with PubAcks, {events} x 1 KiB, {IN_FLIGHT} in flight, medians of {rounds}:"
    );
    println!("raw async-nats publisher {raw_median:>9.0} msgs/s");
    println!("edge backhaul            {edge_median:>9.0} msgs/s");
    println!("ratio edge/raw           {:>9.2}", edge_median / raw_median);

    stream.purge().await.unwrap();
    let (p50, p99, n) = latency(&nats, &client, rate, &body).await;
    println!(
        "\nend-to-end at {rate} events/s: durable (2xx) -> at the origin stream: p50 {p50:.2} ms, p99 {p99:.2} ms (n={n})"
    );
}

async fn raw_publish(
    js: &async_nats::jetstream::Context,
    events: usize,
    body: &Bytes,
    prefix: &str,
) -> f64 {
    let started = Instant::now();
    let mut acks = FuturesUnordered::new();
    for i in 0..events {
        // The same message the edge sends: id, the edge's own headers, the kept ones.
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            format!("{prefix}-{i}").as_str(),
        );
        headers.insert("Edge-Pop", "bench");
        headers.insert("Edge-Route", "bench");
        headers.insert("Edge-Seq", (i + 1).to_string().as_str());
        headers.insert("Edge-Received-Ms", "1796000000000");
        headers.insert("Edge-Early", "0");
        headers.insert("content-type", "application/json");
        acks.push(
            js.publish_with_headers("webhooks.bench.bench", headers, body.clone())
                .await
                .unwrap()
                .into_future(),
        );
        if acks.len() >= IN_FLIGHT {
            acks.next().await.unwrap().unwrap();
        }
    }
    while let Some(ack) = acks.next().await {
        ack.unwrap();
    }
    events as f64 / started.elapsed().as_secs_f64()
}

/// Fills a fresh spool, then times the backhaul until the stream holds every event.
async fn edge_backhaul(
    nats: &NatsServer,
    events: usize,
    body: &Bytes,
    prefix: &str,
    stream: &mut async_nats::jetstream::stream::Stream,
) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let (spool, metrics) = open_spool(dir.path());
    let mut appends = FuturesUnordered::new();
    for i in 0..events {
        appends.push(spool.append(event(&format!("{prefix}-{i}"), body)));
        if appends.len() >= 512 {
            appends.next().await.unwrap().unwrap();
        }
    }
    while let Some(done) = appends.next().await {
        done.unwrap();
    }
    let settings = backhaul_settings(nats);
    let sink = Arc::new(
        edge::backhaul::Sink::connect(&settings, "bench", metrics.backhaul.clone())
            .await
            .unwrap(),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let task = tokio::spawn(edge::backhaul::run(
        Arc::clone(&spool),
        sink,
        settings,
        metrics.backhaul.clone(),
        stopped,
    ));
    // Completion by the backhaul's own PubAck count: polling the stream would load the
    // server during the measurement.
    while (metrics.backhaul.acks.get() as usize) < events {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = events as f64 / started.elapsed().as_secs_f64();
    assert_eq!(stream.info().await.unwrap().state.messages as usize, events);
    stop.send(true).unwrap();
    task.await.unwrap();
    spool.close().await;
    rate
}

/// Appends at `rate`/s while the backhaul runs; measures durable → arrival at a
/// subscriber of the stream's subjects.
async fn latency(
    nats: &NatsServer,
    client: &async_nats::Client,
    rate: u64,
    body: &Bytes,
) -> (f64, f64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let (spool, metrics) = open_spool(dir.path());
    let settings = backhaul_settings(nats);
    let sink = Arc::new(
        edge::backhaul::Sink::connect(&settings, "bench", metrics.backhaul.clone())
            .await
            .unwrap(),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(edge::backhaul::run(
        Arc::clone(&spool),
        sink,
        settings,
        metrics.backhaul.clone(),
        stopped,
    ));
    let mut subscriber = client.subscribe("webhooks.>").await.unwrap();
    let count = (rate * 5) as usize;
    let arrivals = tokio::spawn(async move {
        let mut seen = HashMap::new();
        while seen.len() < count {
            let Ok(Some(message)) =
                tokio::time::timeout(Duration::from_secs(10), subscriber.next()).await
            else {
                break;
            };
            let id = message
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                .map(|v| v.to_string());
            if let Some(id) = id {
                seen.entry(id).or_insert_with(Instant::now);
            }
        }
        seen
    });
    let mut durable_at = HashMap::new();
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    for i in 0..count {
        ticker.tick().await;
        let id = format!("lat-{i}");
        spool.append(event(&id, body)).await.unwrap();
        durable_at.insert(id, Instant::now());
    }
    let seen = arrivals.await.unwrap();
    stop.send(true).unwrap();
    task.await.unwrap();
    spool.close().await;
    let mut ms: Vec<f64> = seen
        .iter()
        .filter_map(|(id, at)| {
            durable_at
                .get(id)
                .map(|d| at.saturating_duration_since(*d).as_secs_f64() * 1e3)
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    let pick = |q: f64| ms[((ms.len() as f64 - 1.0) * q) as usize];
    (pick(0.5), pick(0.99), ms.len())
}

fn open_spool(dir: &std::path::Path) -> (Arc<Spool>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new("bench"));
    let (spool, _) = Spool::open(
        &spool_settings(dir),
        "bench",
        HashMap::new(),
        metrics.spool.clone(),
    )
    .unwrap();
    (Arc::new(spool), metrics)
}

fn event(id: &str, body: &Bytes) -> NewEvent {
    NewEvent {
        received_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
        early: false,
        route: Arc::from("bench"),
        event_id: id.to_owned(),
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: body.clone(),
        resend: false,
    }
}

fn spool_settings(dir: &std::path::Path) -> SpoolSettings {
    SpoolSettings {
        dir: dir.to_owned(),
        max_bytes: 4 << 30,
        segment_bytes: 64 << 20,
        max_batch_delay: Duration::from_millis(1),
        high_water: 0.9,
        preallocate: false,
        stall_timeout: Duration::from_secs(5),
        max_queued_bytes: 64 << 20,
        sync_delay: Duration::ZERO,
        retain_delivered: Duration::ZERO,
    }
}

fn backhaul_settings(nats: &NatsServer) -> BackhaulSettings {
    BackhaulSettings {
        sink: SinkSettings::Nats(NatsSettings {
            servers: vec![nats.url()],
            stream: "WEBHOOKS".into(),
            create: false,
            replicas: 1,
            duplicate_window: Duration::from_secs(120),
            subject: "webhooks.{pop}.{route}".into(),
            inbox_prefix: "_INBOX.{pop}".into(),
            credentials: None,
            token: None,
            nkey: None,
            tls: None,
            publish_timeout: Duration::from_secs(5),
            reconnect_max: Duration::from_secs(1),
        }),
        max_in_flight: IN_FLIGHT,
        retry_base: Duration::from_millis(50),
        retry_max: Duration::from_secs(1),
        breaker_failures: 5,
        breaker_open_for: Duration::from_secs(1),
        max_rate: None,
    }
}

struct NatsServer {
    child: Child,
    port: u16,
    _store: tempfile::TempDir,
}

impl NatsServer {
    fn start() -> NatsServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let store = tempfile::tempdir_in("/var/tmp").unwrap();
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server on PATH");
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            std::thread::sleep(Duration::from_millis(20));
        }
        NatsServer {
            child,
            port,
            _store: store,
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
