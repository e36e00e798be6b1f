//! Benchmark, side by side with ExaBGP's own healthcheck in one harness (network
//! namespaces, an upstream BIRD, `ip monitor route` there):
//!
//! - health down → upstream FIB delete (withdraw latency), median;
//! - 60 s of each flapping pattern, FIB changes and BGP UPDATEs the upstream received:
//!   jittered 1 Hz / 50 % (half-periods 0.25–0.75 s), and irregular (failures of
//!   0.1–1.5 s between healthy stretches of 1–4 s, as a struggling edge looks);
//! - for our agent, decision → upstream FIB change (from its log), median.
//!
//! Run as root: `cargo bench -p bgp-agent --bench route_flap` (about 12 minutes).
//! FLAP_SECONDS and REPS shorten it.

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark stops at the line that failed"
)]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use testkit::bgp::*;

const EDGE_PORT: u16 = 19180;
const ADMIN_PORT: u16 = 19181;

#[derive(Clone, Copy)]
enum Contender {
    AgentExabgp,
    AgentBird,
    Healthcheck { interval: u32, rise: u32, fall: u32 },
}

impl Contender {
    fn name(self) -> String {
        match self {
            Contender::AgentExabgp => "bgp-agent + ExaBGP (defaults)".into(),
            Contender::AgentBird => "bgp-agent + BIRD (defaults)".into(),
            Contender::Healthcheck {
                interval,
                rise,
                fall,
            } => {
                format!("exabgp healthcheck {interval}s rise {rise} fall {fall}")
            }
        }
    }
}

/// FIB events for the VIP at the upstream: (when, present after the event).
struct Monitor {
    events: Arc<Mutex<Vec<(SystemTime, bool)>>>,
    child: std::process::Child,
}

impl Monitor {
    fn start(lab: &Lab) -> Monitor {
        let mut child = Command::new("ip")
            .args(["-n", &lab.up, "monitor", "route"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("192.0.2.10") {
                    sink.lock()
                        .unwrap()
                        .push((SystemTime::now(), !line.starts_with("Deleted")));
                }
            }
        });
        Monitor { events, child }
    }

    fn count_between(&self, from: SystemTime, to: SystemTime) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .count()
    }

    fn first_after(&self, from: SystemTime, present: bool) -> Option<SystemTime> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .find(|(t, p)| *t >= from && *p == present)
            .map(|(t, _)| *t)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How readiness flaps: the lengths of its down and up stretches.
#[derive(Clone, Copy)]
enum Pattern {
    Jittered,
    Irregular,
}

impl Pattern {
    const ALL: [Pattern; 2] = [Pattern::Jittered, Pattern::Irregular];

    fn name(self) -> &'static str {
        match self {
            Pattern::Jittered => "jittered",
            Pattern::Irregular => "irregular",
        }
    }

    /// (shortest, longest) stretch in ms while up and while down.
    fn stretches(self, up: bool) -> (u64, u64) {
        match (self, up) {
            (Pattern::Jittered, _) => (250, 750),
            (Pattern::Irregular, true) => (1_000, 4_000),
            (Pattern::Irregular, false) => (100, 1_500),
        }
    }
}

struct Row {
    name: String,
    withdraw_ms: Vec<f64>,
    /// Per pattern: FIB changes and UPDATEs.
    flaps: Vec<(usize, u64)>,
    decision_to_fib_ms: Vec<f64>,
}

fn main() {
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let flap_seconds: u64 = std::env::var("FLAP_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let contenders = [
        Contender::AgentExabgp,
        Contender::AgentBird,
        Contender::Healthcheck {
            interval: 5,
            rise: 3,
            fall: 3,
        },
        Contender::Healthcheck {
            interval: 1,
            rise: 1,
            fall: 1,
        },
    ];
    let mut rows = Vec::new();
    for (i, contender) in contenders.into_iter().enumerate() {
        let slow_anchor = matches!(contender, Contender::Healthcheck { interval: 5, .. });
        let reps = if slow_anchor { reps.min(3) } else { reps };
        let row = run(
            contender,
            &format!("{i}"),
            reps,
            Duration::from_secs(flap_seconds),
        );
        let flaps: Vec<String> = Pattern::ALL
            .iter()
            .zip(&row.flaps)
            .map(|(pattern, (changes, updates))| {
                format!(
                    "{}: {changes} FIB changes, {updates} UPDATEs",
                    pattern.name()
                )
            })
            .collect();
        println!(
            "{:<40} withdraw median {:>7.0} ms (n={})  flap {}s {}  decision->FIB median {}",
            row.name,
            median(&row.withdraw_ms),
            row.withdraw_ms.len(),
            flap_seconds,
            flaps.join("; "),
            if row.decision_to_fib_ms.is_empty() {
                "n/a".into()
            } else {
                format!(
                    "{:.1} ms (n={})",
                    median(&row.decision_to_fib_ms),
                    row.decision_to_fib_ms.len()
                )
            },
        );
        rows.push(row);
    }
}

fn run(contender: Contender, tag: &str, reps: usize, flap_length: Duration) -> Row {
    let mut lab = Lab::new(&format!("f{tag}"));
    lab.start_upstream_bird();
    let flag = lab.path("ready");
    std::fs::write(&flag, "").unwrap();
    lab.start_fake_edge(EDGE_PORT, &flag);
    let monitor = Monitor::start(&lab);

    // Withdraw latency: dampening and hold-down only delay the way back, so they are
    // relaxed here to keep repetitions short; the flapping minute uses the defaults.
    let (pid, log) = start(&mut lab, contender, "dampening: null\nhold_down: 1s\n", "a");
    lab.wait_vip(true, Duration::from_secs(60))
        .expect("announced");
    let mut withdraw_ms = Vec::new();
    for _ in 0..reps {
        let t0 = SystemTime::now();
        std::fs::remove_file(&flag).unwrap();
        lab.wait_vip(false, Duration::from_secs(60))
            .expect("withdrawn");
        let t1 = monitor
            .first_after(t0, false)
            .unwrap_or_else(SystemTime::now);
        withdraw_ms.push(t1.duration_since(t0).unwrap().as_secs_f64() * 1e3);
        std::fs::write(&flag, "").unwrap();
        lab.wait_vip(true, Duration::from_secs(60))
            .expect("re-announced");
        std::thread::sleep(Duration::from_millis(300));
    }
    let decision_to_fib_ms = decision_latencies(&lab, &log, &monitor);
    stop(&mut lab, pid);
    lab.wait_vip(false, Duration::from_secs(15));

    // Each pattern starts from a fresh process with the defaults (no flap history).
    let mut flaps = Vec::new();
    for (i, pattern) in Pattern::ALL.into_iter().enumerate() {
        let (pid, _) = start(&mut lab, contender, "", &format!("flap{i}"));
        lab.wait_vip(true, Duration::from_secs(60))
            .expect("announced with defaults");
        std::thread::sleep(Duration::from_secs(2));
        flaps.push(flap(&lab, &monitor, &flag, pattern, flap_length));
        stop(&mut lab, pid);
        std::fs::write(&flag, "").unwrap();
        lab.wait_vip(false, Duration::from_secs(15));
    }
    Row {
        name: contender.name(),
        withdraw_ms,
        flaps,
        decision_to_fib_ms,
    }
}

/// Flaps readiness in `pattern` for `length`: the FIB changes and UPDATEs upstream.
fn flap(
    lab: &Lab,
    monitor: &Monitor,
    flag: &Path,
    pattern: Pattern,
    length: Duration,
) -> (usize, u64) {
    let updates_before = lab.upstream_updates();
    let start_at = SystemTime::now();
    let mut rng = 0x9E3779B97F4A7C15u64
        ^ start_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
    let mut up = true;
    while start_at.elapsed().unwrap() < length {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        up = !up;
        if up {
            std::fs::write(flag, "").unwrap()
        } else {
            std::fs::remove_file(flag).unwrap()
        }
        let (shortest, longest) = pattern.stretches(up);
        std::thread::sleep(Duration::from_millis(
            shortest + rng % (longest - shortest + 1),
        ));
    }
    let end_at = SystemTime::now();
    let updates = lab.upstream_updates() - updates_before;
    // Let the last BGP change reach the kernel before counting FIB events.
    std::thread::sleep(Duration::from_millis(200));
    let changes = monitor.count_between(start_at, end_at + Duration::from_millis(200));
    (changes, updates)
}

/// Starts the contender; returns the PID to stop and the log that holds the agent's lines.
fn start(lab: &mut Lab, contender: Contender, extra: &str, run: &str) -> (u32, String) {
    let check = format!("curl -sf -m 1 -o /dev/null http://127.0.0.1:{EDGE_PORT}/readyz");
    match contender {
        Contender::Healthcheck {
            interval,
            rise,
            fall,
        } => {
            // Its own fast-interval default (1 s) applies while a change is pending.
            let process = format!(
                "/usr/bin/python3 -m exabgp.application.healthcheck --no-syslog --no-ip-setup --withdraw-on-down \
                 --ip 192.0.2.10/32 --interval {interval} --rise {rise} --fall {fall} --cmd \"{check}\""
            );
            let log = format!("exabgp-{run}.log");
            (lab.start_exabgp(&process, &log), log)
        }
        Contender::AgentExabgp | Contender::AgentBird => {
            let speaker = if matches!(contender, Contender::AgentExabgp) {
                "{ kind: exabgp }".to_owned()
            } else {
                let include = lab.path("anycast.conf");
                if !include.exists() {
                    lab.start_pop_bird(&include, &withdrawn_include());
                }
                format!(
                    "{{ kind: bird, include_file: {}, socket: {} }}",
                    include.display(),
                    lab.path("pop-bird.ctl").display()
                )
            };
            let config = lab.path(&format!("agent-{run}.yaml"));
            std::fs::write(
                &config,
                format!(
                    "pop: bench\nprefixes: [\"192.0.2.10/32\"]\nstate_dir: {}\nadmin_listen: 127.0.0.1:{ADMIN_PORT}\n{extra}\
                     checks:\n  - {{ name: edge, kind: http, url: \"http://127.0.0.1:{EDGE_PORT}/readyz\" }}\nspeaker: {speaker}\n",
                    lab.path("state").display()
                ),
            )
            .unwrap();
            let command = format!("{} run --config {}", agent_bin(), config.display());
            if matches!(contender, Contender::AgentExabgp) {
                let log = format!("exabgp-{run}.log");
                (lab.start_exabgp(&command, &log), log)
            } else {
                let log = format!("agent-{run}.log");
                let pop = lab.pop.clone();
                (
                    lab.spawn(
                        &pop,
                        &[agent_bin(), "run", "--config", config.to_str().unwrap()],
                        &log,
                    ),
                    log,
                )
            }
        }
    }
}

fn stop(lab: &mut Lab, pid: u32) {
    lab.kill(pid, nix::sys::signal::Signal::SIGTERM);
    lab.wait_exit(pid, Duration::from_secs(10));
}

/// For each "route change" our agent logged, the time until the upstream FIB changed.
fn decision_latencies(lab: &Lab, log: &str, monitor: &Monitor) -> Vec<f64> {
    let mut out = Vec::new();
    for line in lab.log(log).lines().filter(|l| l.contains("route change")) {
        let Some(stamp) = line
            .split_whitespace()
            .find(|w| w.ends_with('Z') && w.contains('T'))
        else {
            continue;
        };
        let Ok(decided) = humantime::parse_rfc3339(stamp) else {
            continue;
        };
        let present = line.contains("\"announce\"");
        if let Some(fib) = monitor.first_after(decided, present) {
            out.push(
                fib.duration_since(decided)
                    .unwrap_or_default()
                    .as_secs_f64()
                    * 1e3,
            );
        }
    }
    out
}

fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The agent's BIRD include with nothing announced: what BIRD starts with.
fn withdrawn_include() -> String {
    bgp_agent::bird_include(
        "ANYCAST_V4",
        "ANYCAST_V6",
        &[],
        bgp_agent::Advert::Withdrawn,
    )
}
