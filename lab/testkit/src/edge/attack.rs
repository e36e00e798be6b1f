//! What every attack test measures beside its attack: a legitimate signed sender on
//! another source address (127.0.0.2), over HTTP/1.1 and HTTP/2, and the edge's peak
//! memory and CPU time.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Edge;

/// A sender posting signed GitHub webhooks every 20 ms, alternating HTTP/1.1 and
/// HTTP/2, each answer timed.
pub struct Legit {
    started: tokio::time::Instant,
    stop: Arc<AtomicBool>,
    results: tokio::sync::oneshot::Receiver<Vec<Result<Duration, String>>>,
}

impl Legit {
    /// Starts sending. `fresh`: a new TLS connection per request (what idle connections
    /// must not lock out), instead of keep-alive.
    pub fn start(edge: &Edge, fresh: bool) -> Legit {
        let clients = [false, true].map(|http2| legit_client(edge, http2, fresh));
        let url = edge.url("/hooks/github");
        // Each sender's deliveries its own, however many run against one edge: a
        // repeated one would be answered as a duplicate, cheaper than a stored one.
        let run = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let (report, results) = tokio::sync::oneshot::channel();
        // Its own thread and runtime: the attack's tasks in this process (hundreds of
        // clients encrypting megabytes) must not delay the sender's own polling, or the
        // test would time itself instead of the edge.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("legitimate sender's runtime");
            let _ = report.send(runtime.block_on(send_until_stopped(clients, url, run, stopped)));
        });
        Legit {
            started: tokio::time::Instant::now(),
            stop,
            results,
        }
    }

    /// Stops once at least [`MIN_LEGIT_SENT`] requests were sent, and reports.
    pub async fn finish(self) -> LegitReport {
        tokio::time::sleep_until(self.started + LEGIT_INTERVAL * MIN_LEGIT_SENT as u32).await;
        self.stop.store(true, Ordering::Release);
        let results = self.results.await.expect("legitimate sender's thread");
        let mut latencies: Vec<Duration> = results.iter().filter_map(|r| r.clone().ok()).collect();
        latencies.sort();
        LegitReport {
            sent: results.len(),
            ok: latencies.len(),
            median: percentile(&latencies, 0.5),
            p99: percentile(&latencies, 0.99),
            max: latencies.last().copied().unwrap_or_default(),
            failures: results
                .into_iter()
                .filter_map(Result::err)
                .take(5)
                .collect(),
        }
    }
}

/// How the legitimate sender beside an attack fared.
#[derive(Debug)]
pub struct LegitReport {
    /// Requests sent.
    pub sent: usize,
    /// Requests answered 2xx.
    pub ok: usize,
    /// Median latency.
    pub median: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Slowest latency.
    pub max: Duration,
    /// The first few failures.
    pub failures: Vec<String>,
}

impl LegitReport {
    /// Every legitimate request answered 2xx, p99 within [`LEGIT_P99_BOUND`].
    pub fn assert_served(&self, attack: &str) {
        assert!(self.sent >= MIN_LEGIT_SENT - 1, "{attack}: {self:?}");
        assert_eq!(
            self.ok, self.sent,
            "{attack}: legitimate requests failed: {self:?}"
        );
        assert!(
            self.p99 <= LEGIT_P99_BOUND,
            "{attack}: legitimate p99 {:?}: {self:?}",
            self.p99
        );
    }
}

/// The edge's peak resident memory while it runs, sampled every 50 ms.
pub struct PeakRss {
    pid: i32,
    peak_kib: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl PeakRss {
    /// Starts sampling `edge`'s resident memory.
    pub fn watch(edge: &Edge) -> PeakRss {
        let pid = edge.pid();
        let peak_kib = Arc::new(AtomicU64::new(rss_kib(pid)));
        let peak = Arc::clone(&peak_kib);
        let task = tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        PeakRss {
            pid,
            peak_kib,
            task,
        }
    }

    /// The peak so far, in MiB; asserts it stayed under the suite's bound.
    pub fn assert_bounded(&self, attack: &str) -> u64 {
        self.peak_kib
            .fetch_max(rss_kib(self.pid), Ordering::Relaxed);
        let mib = self.peak_kib.load(Ordering::Relaxed) / 1024;
        assert!(mib < MAX_RSS_MIB, "{attack}: edge RSS peaked at {mib} MiB");
        mib
    }
}

impl Drop for PeakRss {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// CPU time the edge's threads have used, per thread, to take differences of.
pub struct CpuClock {
    pid: i32,
    start: HashMap<String, u64>,
}

impl CpuClock {
    /// Reads `edge`'s per-thread CPU time now.
    pub fn start(edge: &Edge) -> CpuClock {
        CpuClock {
            pid: edge.pid(),
            start: thread_runtimes(edge.pid()),
        }
    }

    /// CPU time used since [`CpuClock::start`] by threads alive now.
    pub fn elapsed(&self) -> Duration {
        let now = thread_runtimes(self.pid);
        let ns: u64 = now
            .iter()
            .map(|(tid, ns)| ns.saturating_sub(self.start.get(tid).copied().unwrap_or(0)))
            .sum();
        Duration::from_nanos(ns)
    }
}

/// Runs `requests` one after another and returns the edge's CPU time per request.
pub async fn cpu_per_request<F, Fut>(edge: &Edge, requests: usize, mut send: F) -> Duration
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // Let the edge settle (answers flushed, discarded bodies read) before and after.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let clock = CpuClock::start(edge);
    for i in 0..requests {
        send(i).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    clock.elapsed() / requests as u32
}

fn legit_client(edge: &Edge, http2: bool, fresh: bool) -> reqwest::Client {
    let cert = reqwest::Certificate::from_pem(&edge.cert_pem()).unwrap();
    let builder = reqwest::Client::builder()
        .add_root_certificate(cert)
        .local_address(Some(LEGIT_SOURCE.parse().unwrap()))
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(if fresh { 0 } else { 8 });
    let builder = if http2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    builder.build().unwrap()
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Sends one signed delivery every [`LEGIT_INTERVAL`], alternating the two clients,
/// until `stopped`; every answer's latency or failure.
async fn send_until_stopped(
    clients: [reqwest::Client; 2],
    url: String,
    run: u64,
    stopped: Arc<AtomicBool>,
) -> Vec<Result<Duration, String>> {
    let mut sends = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(LEGIT_INTERVAL);
    for i in 0usize.. {
        tick.tick().await;
        if stopped.load(Ordering::Acquire) {
            break;
        }
        let request = super::signed_github(
            clients[i % 2].post(&url),
            &format!("legit-{run}-{i}"),
            format!(r#"{{"legit":{i},"run":{run}}}"#).as_bytes(),
        );
        sends.spawn(async move {
            let started = Instant::now();
            match request.send().await {
                Ok(r) if r.status().is_success() => Ok(started.elapsed()),
                Ok(r) => Err(format!("status {}", r.status())),
                Err(e) => Err(format!("{e:?}")),
            }
        });
    }
    let mut results = Vec::new();
    while let Some(result) = sends.join_next().await {
        results.push(result.unwrap());
    }
    results
}

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Each thread's time on a CPU in ns (`/proc/PID/task/TID/schedstat`, first field).
fn thread_runtimes(pid: i32) -> HashMap<String, u64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return HashMap::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            let ns = stat.split_whitespace().next()?.parse().ok()?;
            Some((task.file_name().to_string_lossy().into_owned(), ns))
        })
        .collect()
}

/// Numbers each [`Legit`] sender of this process.
static NEXT_RUN: AtomicU64 = AtomicU64::new(0);
/// The legitimate sender's address; attacks come from 127.0.0.1.
pub const LEGIT_SOURCE: &str = "127.0.0.2";
const LEGIT_INTERVAL: Duration = Duration::from_millis(20);
/// What an attack may make the legitimate sender's p99. The attacks these tests guard
/// against cost seconds when they work (a slot held until `idle_timeout`, a flood's
/// seconds of CPU, a sender that times out). The disk's stalls are kept out (the edges
/// spool in memory: [`Edge::start_in_memory`]); a shared 2-core machine's scheduling is
/// not. The p99 is printed for the README; speed is judged by the benchmarks.
const LEGIT_P99_BOUND: Duration = Duration::from_millis(500);
/// Legitimate requests sent at the least, however short the attack.
const MIN_LEGIT_SENT: usize = 100;
/// The suite's memory bound for the edge.
const MAX_RSS_MIB: u64 = 128;
