//! Admission control under an open-loop overload (a constant arrival rate, not a fixed
//! number of connections: a closed loop slows down with the server and hides overload).
//!
//! Measures the edge's capacity (closed loop), its unloaded p99, then offers 3x that
//! capacity for 30 s, 20 % to a high, 40 % to a default and 40 % to a low priority route, once
//! with admission control on and once off (same build, `admission.enabled: false`), and
//! prints a table: success per priority (a 2xx within GitHub's 10 s deadline), p99 of
//! admitted requests against the unloaded p99, p99 of shed answers (as the load's own
//! senders see them, and as a probe sees them: a small low-priority request every 20 ms
//! on a connection and a thread of its own, which measures what shedding costs the edge rather than
//! how long an answer waits behind 60 KiB uploads on a shared connection), peak RSS.
//!
//!     cargo bench -p edge --bench admission   (OVERLOAD_SECONDS=30, FACTOR=3, H2_WINDOW=16KiB,
//!                                              RATE: a fixed offered rate instead of FACTOR,
//!                                              OFF_ROW=0: no admission-off row,
//!                                              ADMISSION, SPOOL: extra config keys)

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark stops at the line that failed"
)]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::edge::*;

const ROUTES: &str = "  - path: /hooks/ops\n    provider: github\n    secrets: [\"gh-secret\"]\n    priority: default\n  - path: /hooks/bulk\n    provider: github\n    secrets: [\"gh-secret\"]\n    priority: low\n";
const PATHS: [&str; 3] = ["/hooks/github", "/hooks/ops", "/hooks/bulk"];
const DEADLINE: Duration = Duration::from_secs(10);
/// The priority mix, as indexes into PATHS: 20 % high (a provider that does not retry,
/// GitHub), 40 % default, 40 % low.
const MIX: [usize; 5] = [0, 1, 1, 2, 2];
/// Warm connections (HTTP/2, up to 128 streams each), for both loops.
const CONNECTIONS: usize = 32;
/// Closed-loop senders, each waiting for its answer before the next request.
const SENDERS: usize = 512;
/// The client's share of its one CPU above which its own queueing shows in the figures.
const CLIENT_SATURATED: f64 = 0.9;

fn main() {
    raise_open_files();
    let seconds: u64 = env_or("OVERLOAD_SECONDS", 30);
    let factor: f64 = env_or("FACTOR", 3.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let body_bytes: usize = env_or("BODY_BYTES", 60_000);
    let body = Arc::new(SignedBody::github(&format!(
        r#"{{"pad":"{}"}}"#,
        "x".repeat(body_bytes)
    )));
    // The edge gets CPU 0 and this client CPU 1: a 64 KiB body costs the edge an HMAC
    // over it, the client (its shared part signed once) a copy and its TLS encryption.
    // Whether the client still kept up shows in each row.
    pin_to_cpu(1);

    let capacity = {
        let edge = start(false);
        runtime.block_on(closed_loop(&edge, &body, SENDERS, Duration::from_secs(5)))
    };
    let unloaded_p99 = {
        let edge = start(true);
        let rate = capacity * 0.3;
        let (run, _) = runtime.block_on(open_loop(&edge, &body, rate, Duration::from_secs(5)));
        quantile(&latencies(&run, 202), 0.99)
    };
    // RATE=req/s offers the same load to every build of an A/B run, whatever capacity
    // each measured.
    let rate = env_or("RATE", capacity * factor);
    println!(
        "capacity (closed loop, {SENDERS} senders over {CONNECTIONS} HTTP/2 connections): {capacity:.0} req/s; unloaded p99 {:.1} ms; offering {rate:.0} req/s ({:.1}x) for {seconds} s; h2_stream_window {}",
        ms(unloaded_p99),
        rate / capacity,
        h2_window()
    );
    println!(
        "| admission | offered | client CPU | high ok | default ok | low ok | admitted p99 | (x unloaded) | shed p99 | shed p99 (probe) | peak RSS |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    // OFF_ROW=0 leaves the admission-off row out, for A/B runs of builds that differ only
    // with admission on.
    let rows: &[bool] = if env_or("OFF_ROW", 1) == 0 {
        &[true]
    } else {
        &[true, false]
    };
    for &enabled in rows {
        let edge = start(enabled);
        let probe = probe(client(&edge, true), edge.url(PATHS[2]), seconds);
        let (run, load) =
            runtime.block_on(open_loop(&edge, &body, rate, Duration::from_secs(seconds)));
        let probe = probe.join().unwrap();
        let ok = |path: &str| {
            let of: Vec<&Outcome> = run.iter().filter(|r| r.path == path).collect();
            100.0 * of.iter().filter(|r| r.status == Some(202)).count() as f64 / of.len() as f64
        };
        let admitted = quantile(&latencies(&run, 202), 0.99);
        let shed = quantile(&latencies(&run, 503), 0.99);
        let probe_shed = latencies(&probe, 503);
        let or_dash = |d: Duration| {
            if d.is_zero() {
                "-".to_owned()
            } else {
                format!("{:.1} ms", ms(d))
            }
        };
        println!(
            "| {} | {:.0} req/s | {:.0} % | {:.1} % | {:.1} % | {:.1} % | {:.1} ms | {:.1}x | {} | {} | {} MB |",
            if enabled { "on" } else { "off" },
            load.offered,
            load.client_cpu * 100.0,
            ok(PATHS[0]),
            ok(PATHS[1]),
            ok(PATHS[2]),
            ms(admitted),
            ms(admitted) / ms(unloaded_p99),
            or_dash(shed),
            or_dash(quantile(&probe_shed, 0.99)),
            peak_rss_kib(edge.pid()) / 1024
        );
        if load.client_cpu > CLIENT_SATURATED || load.offered < rate * 0.95 {
            eprintln!(
                "  the client used {:.0} % of its CPU and sent {:.0} of {rate:.0} req/s: this row measures the client as much as the edge",
                load.client_cpu * 100.0,
                load.offered
            );
        }
        let spread: Vec<String> = [0.5, 0.9, 0.99, 1.0]
            .iter()
            .map(|&q| format!("{:.1}", ms(quantile(&probe_shed, q))))
            .collect();
        eprintln!(
            "  probe: {} answers, {} shed; shed p50/p90/p99/max {} ms",
            probe.len(),
            probe_shed.len(),
            spread.join("/")
        );
        let high: Vec<&Outcome> = run.iter().filter(|r| r.path == PATHS[0]).collect();
        let mut statuses = std::collections::BTreeMap::new();
        for r in &high {
            *statuses.entry(r.status).or_insert(0) += 1;
        }
        let shed: Vec<String> = edge
            .metrics()
            .lines()
            .filter(|l| l.starts_with("webhook_ingress_shed_") && !l.contains("ledger"))
            .map(str::to_owned)
            .collect();
        eprintln!(
            "  high priority answers {statuses:?}; limit at the end {}; {}",
            edge.metric("webhook_ingress_concurrency_limit{"),
            shed.join("; ")
        );
    }
}

struct Outcome {
    path: &'static str,
    /// `None`: no answer within the deadline, or the connection failed.
    status: Option<u16>,
    latency: Duration,
}

fn start(admission: bool) -> Edge {
    // ADMISSION="max_wait: 50ms, ..." tries other limiter settings.
    let tuning = std::env::var("ADMISSION")
        .map(|extra| format!(", {extra}"))
        .unwrap_or_default();
    // SPOOL="sync_delay: 20ms" models a slower disk (each fdatasync 20 ms longer).
    let spool = std::env::var("SPOOL")
        .map(|extra| format!("  {extra}\n"))
        .unwrap_or_default();
    let edge = Edge::start(&spool, ROUTES).with_section(&format!(
        "connections: {{ max: 60000, per_source: 60000, per_trusted_source: 60000 }}\nadmission: {{ enabled: {admission}{tuning} }}\nhttp: {{ h2_stream_window: {} }}\n",
        h2_window()
    ));
    let pinned = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", "0", &edge.pid().to_string()])
        .output()
        .unwrap();
    assert!(pinned.status.success(), "taskset: {pinned:?}");
    edge
}

/// `http.h2_stream_window` (H2_WINDOW, default 16KiB): the most of a shed body the edge
/// receives, where the edge's default (1MiB) lets these 60 KiB bodies arrive whole.
fn h2_window() -> String {
    std::env::var("H2_WINDOW").unwrap_or_else(|_| "16KiB".to_owned())
}

fn pin_to_cpu(cpu: usize) {
    let pinned = std::process::Command::new("taskset")
        .args([
            "-a",
            "-p",
            "-c",
            &cpu.to_string(),
            &std::process::id().to_string(),
        ])
        .output()
        .unwrap();
    assert!(pinned.status.success(), "taskset: {pinned:?}");
}

/// Completed requests per second with `senders` senders, each waiting for its answer.
async fn closed_loop(edge: &Edge, body: &Arc<SignedBody>, senders: usize, length: Duration) -> f64 {
    let clients: Vec<reqwest::Client> = (0..CONNECTIONS).map(|_| client(edge, true)).collect();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for sender in 0..senders {
        let client = clients[sender % CONNECTIONS].clone();
        let (url, body) = (edge.url(PATHS[0]), Arc::clone(body));
        tasks.spawn(async move {
            let mut done = 0u64;
            while started.elapsed() < length {
                let delivery = format!("cap-{sender}-{done}");
                let sent = body.request(client.post(&url), &delivery).send().await;
                done += u64::from(sent.is_ok_and(|r| r.status() == 202));
            }
            done
        });
    }
    let mut done = 0;
    while let Some(count) = tasks.join_next().await {
        done += count.unwrap();
    }
    done as f64 / started.elapsed().as_secs_f64()
}

/// `rate` requests a second for `length`, whatever the answers take, in the MIX of
/// priorities, round-robin over warm HTTP/2 connections. Latency counts from when a
/// request was due, so a client that falls behind shows in it; `Load` says whether it
/// did (the rate it achieved, its CPU).
async fn open_loop(
    edge: &Edge,
    body: &Arc<SignedBody>,
    rate: f64,
    length: Duration,
) -> (Vec<Outcome>, Load) {
    // Warm connections, as senders keep them: HTTP/2, each its own pool and connection.
    let clients: Vec<reqwest::Client> = (0..CONNECTIONS).map(|_| client(edge, true)).collect();
    let interval = Duration::from_secs_f64(1.0 / rate);
    let cpu_before = cpu_time();
    let started = tokio::time::Instant::now();
    let total = (rate * length.as_secs_f64()) as u64;
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..total {
        let due = started + interval.mul_f64(n as f64);
        tokio::time::sleep_until(due).await;
        let path = PATHS[MIX[n as usize % MIX.len()]];
        let request = body.request(
            clients[n as usize % CONNECTIONS].post(edge.url(path)),
            &format!("open-{}-{n}", edge.port),
        );
        tasks.spawn(async move {
            let status = match tokio::time::timeout(DEADLINE, request.send()).await {
                Ok(Ok(response)) => Some(response.status().as_u16()),
                _ => None,
            };
            Outcome {
                path,
                status,
                latency: due.elapsed(),
            }
        });
    }
    let offered = total as f64 / started.elapsed().as_secs_f64();
    let mut outcomes = Vec::new();
    while let Some(outcome) = tasks.join_next().await {
        outcomes.push(outcome.unwrap());
    }
    let client_cpu = (cpu_time() - cpu_before).as_secs_f64() / started.elapsed().as_secs_f64();
    (
        outcomes,
        Load {
            offered,
            client_cpu,
        },
    )
}

/// What the open loop's client managed.
struct Load {
    /// Requests per second it sent (below the rate asked when it could not keep up).
    offered: f64,
    /// Its CPU time over the run's wall time: near 1.0, its one CPU was the limit.
    client_cpu: f64,
}

/// This process's user + system CPU time.
fn cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let micros = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    micros(usage.user_time()) + micros(usage.system_time())
}

/// A small low-priority request every 20 ms for `seconds`, on its own connection and
/// its own thread and runtime, the thread real-time (`SCHED_FIFO`): a task of the
/// load's runtime would wait behind thousands of others, and a plain thread behind the
/// load's threads on the client's saturated CPU, where a real sender has a machine of
/// its own. So the figure is the edge's, not the busy client's.
fn probe(
    client: reqwest::Client,
    url: String,
    seconds: u64,
) -> std::thread::JoinHandle<Vec<Outcome>> {
    std::thread::spawn(move || {
        let realtime = libc::sched_param { sched_priority: 1 };
        // SAFETY: sets the calling thread's (pid 0) policy from a valid parameter.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &realtime) } != 0 {
            eprintln!(
                "  probe stays SCHED_OTHER ({}): its figures include the client's own queueing",
                std::io::Error::last_os_error()
            );
        }
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(probe_requests(client, url, seconds))
    })
}

async fn probe_requests(client: reqwest::Client, url: String, seconds: u64) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    for n in 0..seconds * 50 {
        tick.tick().await;
        let request = signed_github(
            client.post(&url),
            &format!("probe-{n}"),
            &delivery_body(&format!("probe-{n}")),
        );
        let sent = Instant::now();
        let status = match tokio::time::timeout(DEADLINE, request.send()).await {
            Ok(Ok(response)) => Some(response.status().as_u16()),
            _ => None,
        };
        outcomes.push(Outcome {
            path: PATHS[2],
            status,
            latency: sent.elapsed(),
        });
    }
    outcomes
}

/// The latencies of the outcomes answered `status`, sorted.
fn latencies(outcomes: &[Outcome], status: u16) -> Vec<Duration> {
    let mut of: Vec<Duration> = outcomes
        .iter()
        .filter(|r| r.status == Some(status))
        .map(|r| r.latency)
        .collect();
    of.sort();
    of
}

/// The `q` quantile of sorted `values` (zero when there are none).
fn quantile(values: &[Duration], q: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values[((values.len() - 1) as f64 * q) as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn peak_rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

fn raise_open_files() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
