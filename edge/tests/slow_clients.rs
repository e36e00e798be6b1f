//! Slow-client attacks with a real tool (slowhttptest): slowloris (`-H`), slow body
//! (`-B`) and slow read (`-X`), each with 2,000 connections from 127.0.0.1, while a
//! legitimate sender on 127.0.0.2 posts signed webhooks on a new TLS connection every
//! 50 ms. The per-source cap is raised so the attack is admitted and the deadlines must
//! do the work: legitimate requests keep succeeding, descriptors and memory stay
//! bounded, and the attack's connections are closed by the limits (counted by reason).
//! Once more with the open-files limit at 1,024: accept backs off on EMFILE and recovers.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use testkit::edge::*;

#[tokio::test(flavor = "multi_thread")]
async fn slowloris_is_cut_by_the_header_deadline() {
    let report = under_attack(Attack::Slowloris, None, LIMITS).await;
    report.assert_legitimate_served(0.99);
    report.assert_bounded();
    assert!(
        report.closed_by("header_timeout") >= ATTACK_CONNECTIONS as f64 * 0.95,
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_bodies_get_408() {
    let report = under_attack(Attack::SlowBody, None, LIMITS).await;
    report.assert_legitimate_served(0.99);
    report.assert_bounded();
    assert!(
        report.closed_by("slow_body") >= ATTACK_CONNECTIONS as f64 * 0.95,
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_readers_are_closed() {
    let report = under_attack(Attack::SlowRead, None, LIMITS).await;
    report.assert_legitimate_served(0.99);
    report.assert_bounded();
    // Answers here are small, so they fit the socket buffer: a slow reader is left
    // holding an idle keep-alive connection, which the deadlines end.
    let closed = ["header_timeout", "idle", "write_stall"]
        .iter()
        .map(|reason| report.closed_by(reason))
        .sum::<f64>();
    assert!(closed >= ATTACK_CONNECTIONS as f64 * 0.95, "{report:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn out_of_descriptors_accept_backs_off_and_recovers() {
    // A longer head deadline lets the attack pile up past the descriptor limit.
    let limits = LIMITS.replace("header_timeout: 3s", "header_timeout: 10s");
    let report = under_attack(Attack::Slowloris, Some(1024), &limits).await;
    assert!(
        report
            .edge
            .metric(r#"edge_accept_errors_total{pop="test",reason="fd_exhausted"}"#)
            > 0.0,
        "the attack exhausted the descriptors: {report:?}"
    );
    assert!(report.peak_fds <= 1024, "{report:?}");
    // Senders retry; what matters is that the edge kept serving and came back whole.
    report.assert_legitimate_served(0.9);
    let client = legitimate_client(&report.edge);
    for i in 0..20 {
        let response = github_post(
            &client,
            &report.edge,
            &format!("after-{i}"),
            &delivery_body(&format!("after-{i}")),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(response.status().as_u16(), 202);
    }
}

#[derive(Clone, Copy, Debug)]
enum Attack {
    Slowloris,
    SlowBody,
    SlowRead,
}

impl Attack {
    /// Where the attack is aimed. A head that fails verification is answered 401 before
    /// its body is read, so slow bodies go where slowhttptest can send a well-formed
    /// signature: a generic route keyed on `Content-Type`, which `-f` sets.
    fn path(self) -> &'static str {
        match self {
            Attack::SlowBody => "/hooks/slow",
            Attack::Slowloris | Attack::SlowRead => "/hooks/github",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Attack::Slowloris => &["-H", "-i", "5"],
            Attack::SlowBody => &["-B", "-i", "5", "-s", "8192", "-f", SLOW_BODY_SIGNATURE],
            Attack::SlowRead => &[
                "-X", "-w", "10", "-y", "20", "-n", "5", "-z", "32", "-k", "3",
            ],
        }
    }
}

#[derive(Debug)]
struct Report {
    attack: Attack,
    legitimate_sent: usize,
    legitimate_ok: usize,
    legitimate_p99: Duration,
    peak_fds: usize,
    peak_rss_kib: u64,
    handshakes: f64,
    edge: Edge,
}

impl Report {
    fn assert_legitimate_served(&self, share: f64) {
        assert!(self.legitimate_sent >= LEGITIMATE_MIN_SENT, "{self:?}");
        assert!(
            self.legitimate_ok as f64 >= share * self.legitimate_sent as f64,
            "{self:?}"
        );
    }

    /// The attack really opened its connections, and the edge stayed within bounds.
    fn assert_bounded(&self) {
        assert!(
            self.handshakes >= ATTACK_CONNECTIONS as f64 * 0.98 + self.legitimate_ok as f64,
            "slowhttptest opened fewer connections than asked: {self:?}"
        );
        assert!(self.peak_fds < ATTACK_CONNECTIONS, "{self:?}");
        assert!(self.peak_rss_kib < 150 * 1024, "{self:?}");
    }

    /// Every `edge_rejected_total` sample and every TLS handshake failure, so a failed
    /// count says where the other connections went.
    fn closures(&self) -> Vec<String> {
        self.edge
            .metrics()
            .lines()
            .filter(|l| {
                l.starts_with("edge_rejected_total") || l.starts_with("edge_tls_handshake_failures")
            })
            .map(str::to_owned)
            .collect()
    }

    fn closed_by(&self, reason: &str) -> f64 {
        self.edge.metric(&format!(
            r#"edge_rejected_total{{pop="test",reason="{reason}"}}"#
        ))
    }
}

/// Runs one attack against a fresh edge while the legitimate sender works, and waits
/// until the edge has closed every attack connection.
async fn under_attack(attack: Attack, fd_limit: Option<u64>, limits: &str) -> Report {
    // One attack at a time: two cores cannot host two of them and still mean anything.
    let _turn = ONE_ATTACK_AT_A_TIME.lock().await;
    // The spool in memory: these attacks are about connection slots and descriptors, and
    // a disk stall (this machine's fsyncs take seconds beside a large writeback) would
    // slow the legitimate sender for reasons that are not the attack's.
    let mut edge = Edge::start_in_memory("", SLOW_BODY_ROUTE).with_section(limits);
    if let Some(limit) = fd_limit {
        edge.set_fd_limit(limit);
    }
    let attacker = start_attack(&edge, attack);
    let attack_running = Arc::new(AtomicBool::new(true));
    let sender = tokio::spawn(legitimate_sender(
        legitimate_client(&edge),
        edge.url("/hooks/github"),
        Arc::clone(&attack_running),
    ));

    let mut peak_fds = 0;
    let mut peak_rss_kib = 0;
    let attacker = tokio::task::spawn_blocking(move || finish(attacker));
    while !attacker.is_finished() {
        peak_fds = peak_fds.max(open_fds(edge.pid()));
        peak_rss_kib = peak_rss_kib.max(rss_kib(edge.pid()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    attacker.await.unwrap();
    attack_running.store(false, Ordering::Release);
    let (legitimate_sent, legitimate_ok, legitimate_p99) = sender.await.unwrap();

    let settle = Instant::now() + Duration::from_secs(15);
    while edge.metric("edge_open_connections") > 0.0 && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let report = Report {
        attack,
        legitimate_sent,
        legitimate_ok,
        legitimate_p99,
        peak_fds,
        peak_rss_kib,
        handshakes: edge.metric("edge_tls_handshakes_total"),
        edge,
    };
    println!(
        "{:?}: legitimate {}/{} ok, p99 {:?}; peak fds {}, peak RSS {} MiB, {} TLS handshakes; closed by {:?}",
        report.attack,
        report.legitimate_ok,
        report.legitimate_sent,
        report.legitimate_p99,
        report.peak_fds,
        report.peak_rss_kib / 1024,
        report.handshakes,
        report.closures()
    );
    assert_eq!(
        report.edge.metric("edge_open_connections"),
        0.0,
        "the limits closed every attack connection: {report:?}"
    );
    report
}

fn start_attack(edge: &Edge, attack: Attack) -> Child {
    Command::new("slowhttptest")
        .args([
            "-c",
            &ATTACK_CONNECTIONS.to_string(),
            "-r",
            "400",
            "-l",
            &ATTACK_SECONDS.to_string(),
        ])
        .args([
            "-p",
            "3",
            "-u",
            &format!("https://127.0.0.1:{}{}", edge.port, attack.path()),
        ])
        .args(attack.args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("slowhttptest (lab/setup.sh installs it)")
}

/// Waits for slowhttptest, killing it if it overruns its own test length by far.
fn finish(mut attacker: Child) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while attacker.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = attacker.kill();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A client on another loopback source that dials a new TLS connection per request.
fn legitimate_client(edge: &Edge) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&edge.cert_pem()).unwrap())
        .local_address(Some("127.0.0.2".parse().unwrap()))
        .pool_max_idle_per_host(0)
        .http1_only()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// Posts a signed webhook every 50 ms while the attack runs, and on after it until
/// [`LEGITIMATE_MIN_SENT`] were sent (a few sends that wait out their timeout while the
/// edge is out of descriptors must not leave the share measured on a handful): (sent,
/// ok, p99 latency).
async fn legitimate_sender(
    client: reqwest::Client,
    url: String,
    running: Arc<AtomicBool>,
) -> (usize, usize, Duration) {
    let mut latencies = Vec::new();
    let mut sent = 0;
    let mut ok = 0;
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    while running.load(Ordering::Acquire) || sent < LEGITIMATE_MIN_SENT {
        ticks.tick().await;
        let body = format!(r#"{{"n":{sent}}}"#);
        let started = Instant::now();
        let response = signed_github(client.post(&url), &format!("legit-{sent}"), body.as_bytes())
            .send()
            .await;
        sent += 1;
        if response.is_ok_and(|r| r.status().as_u16() == 202) {
            ok += 1;
            latencies.push(started.elapsed());
        }
    }
    latencies.sort();
    let p99 = latencies
        .get(latencies.len() * 99 / 100)
        .copied()
        .unwrap_or_default();
    (sent, ok, p99)
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count())
}

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

static ONE_ATTACK_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ATTACK_CONNECTIONS: usize = 2000;
/// The legitimate requests each report rests on, at the least.
const LEGITIMATE_MIN_SENT: usize = 100;

/// slowhttptest's run. It opens its connections well below `-r` while it shares two cores
/// with the edge (~200/s: 2,000 take ~10 s), and it closes what is still open when the
/// run ends; the last connections need the longest deadline (5 s) before that, or the
/// count of connections the limits closed comes out short.
const ATTACK_SECONDS: u64 = 20;

/// Tight deadlines so the attack is visibly cut; caps high enough to admit it.
const LIMITS: &str = "http:
  header_timeout: 3s
  body_rate_grace: 2s
  body_timeout: 5s
  write_stall_timeout: 3s
  idle_timeout: 5s
connections: { max: 10000, per_source: 5000 }
";

/// The route slow bodies are sent to (see [`Attack::path`]); high priority like GitHub's,
/// so admission control lets every head in and the body deadlines do the work.
const SLOW_BODY_ROUTE: &str = r#"  - path: /hooks/slow
    provider: hmac
    secrets: ["slow-route-secret"]
    hmac: { header: Content-Type, prefix: "sha256=" }
    priority: high
"#;
/// A well-formed (wrong) SHA-256 MAC, as `Content-Type`.
const SLOW_BODY_SIGNATURE: &str =
    "sha256=0000000000000000000000000000000000000000000000000000000000000000";
