//! The whole appliance in the lab topology (network namespaces, as root): real BIRD
//! and ExaBGP, a NATS JetStream cluster, the edge, bgp-agent and edge-xdp on each PoP, Prometheus
//! watching them. Each scenario prints one result line; together they prove that
//! senders land on the anycast PoPs, that failures move traffic and raise the right
//! alerts, and that nothing acknowledged is lost.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::collections::{BTreeSet, HashMap};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use lab::dashboard::{Dashboard, instantiate};
use lab::prometheus::Alert;
use lab::sender::Outcome;
use testkit::e2e::{
    LabCli, MAX_REHASHED_PER_CHANGE, POP_A_ADDR, POP_B_ADDR, POPS, RouterWatch, VIP, VIP6,
    failures, now_ms, router_next_hops, url,
};

/// Runs every scenario (or those whose name contains an argument:
/// `cargo test -p lab --test scenarios -- drain flap`) on one lab, each reported on its
/// own, so a failure does not hide the scenarios after it; then the lab-wide checks.
fn main() -> ExitCode {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let scenarios: Vec<(&str, Scenario)> = SCENARIOS
        .iter()
        .copied()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .collect();
    let filtered_out = SCENARIOS.len() - scenarios.len();
    if !lab::has_root("lab scenarios", NEEDS_ROOT) {
        // Reported as libtest reports #[ignore]d tests, so they count as skipped.
        for (name, _) in &scenarios {
            println!("test {name} ... ignored, needs root ({NEEDS_ROOT})");
        }
        println!(
            "\ntest result: ok. 0 passed; 0 failed; {} ignored; 0 measured; {filtered_out} filtered out",
            scenarios.len() + LAB_WIDE_CHECKS
        );
        return ExitCode::SUCCESS;
    }
    let lab = LabCli::up();
    let mut results: Vec<(&str, bool)> = scenarios
        .into_iter()
        .map(|(name, scenario)| {
            let ok = passes(name, || scenario(&lab));
            if !ok {
                lab.start_stopped_services();
            }
            (name, ok)
        })
        .collect();
    results.push((
        "every_ack_at_the_origin",
        passes("every_ack_at_the_origin", || {
            lab.verify_origin_has_every_ack()
        }),
    ));
    results.push((
        "down_leaves_nothing",
        passes("down_leaves_nothing", || lab.down_leaves_nothing()),
    ));
    let failed: Vec<&str> = results
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(name, _)| *name)
        .collect();
    let passed = results.len() - failed.len();
    if !failed.is_empty() {
        println!("\nfailures: {}", failed.join(", "));
    }
    // The summary line libtest prints, which lab/test.sh counts.
    println!(
        "\ntest result: {}. {passed} passed; {} failed; 0 ignored; 0 measured; {filtered_out} filtered out",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

type Scenario = fn(&LabCli);

const NEEDS_ROOT: &str = "the lab network namespaces";
/// `every_ack_at_the_origin` and `down_leaves_nothing`, run after the scenarios.
const LAB_WIDE_CHECKS: usize = 2;

/// In the order they run: each leaves the lab as it found it.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("alerts_quiet", alerts_quiet),
    ("reach", |lab| reach(lab, V4)),
    ("reach_v6", |lab| reach(lab, V6)),
    ("origin_permissions", origin_permissions),
    ("pop_failure", |lab| pop_failure(lab, V4)),
    ("pop_failure_v6", |lab| pop_failure(lab, V6)),
    ("alerts_pop_failure", alerts_pop_failure),
    ("drain", drain),
    ("undrain_resilient_ecmp", undrain_resilient_ecmp),
    ("degrade", degrade),
    ("agent_crash", agent_crash),
    ("guard", guard),
    ("link_failure_hold_timer", |lab| {
        link_failure(lab, "pop-a", "the BGP hold timer (3 s)")
    }),
    ("link_failure_bfd", |lab| {
        link_failure(lab, "pop-b", "BFD (300 ms x 3)")
    }),
    ("attack", attack),
    ("under_attack", under_attack),
    ("origin_outage", origin_outage),
    ("alerts_backhaul_lag", alerts_backhaul_lag),
    ("origin_node_loss", origin_node_loss),
    ("flap", flap),
    ("dashboard", dashboard),
];

/// The peer guard cannot be turned against the fleet: with pop-b's agent admin flooded
/// by 2,000 half-sent request heads from the attacker, pop-a's failing edge is withdrawn
/// as fast as without the flood (pop-b still answers); and when pop-b is really
/// withdrawn, pop-a's failure is vetoed (the last PoP stays announced), visible in its
/// `/status`, counted and alerted (WebhookEdgeGuardVetoing).
fn guard(lab: &LabCli) {
    let metric = |name: &str| -> f64 {
        lab.run(&[
            "exec",
            "client",
            "--",
            "curl",
            "-s",
            "http://10.0.1.2:9181/metrics",
        ])
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
    };
    let flood = Command::new("ip")
        .args([
            "netns",
            "exec",
            "lab-attacker",
            "python3",
            "-c",
            HALF_HEAD_FLOOD,
            POP_B_ADDR,
            "9181",
            "2000",
            "8",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    lab.run(&["stop", "pop-a", "edge", "--kill"]);
    let withdrawn = lab.wait_next_hops_exactly(&[POP_B_ADDR], Duration::from_secs(5));
    let unknown = metric("bgp_agent_guard_peers_unknown");
    let flood = String::from_utf8(flood.wait_with_output().unwrap().stdout).unwrap();
    assert!(
        withdrawn < Duration::from_secs(3),
        "pop-a withdrawn {withdrawn:?} after its edge died while pop-b's admin was flooded"
    );
    assert_eq!(
        unknown, 0.0,
        "pop-b's agent did not answer the guard under the flood"
    );
    lab.run(&["start", "pop-a", "edge"]);
    lab.wait_next_hops(2, Duration::from_secs(30));

    let vetoes_before = metric("bgp_agent_guard_blocked_total");
    lab.run(&["stop", "pop-b", "edge", "--kill"]);
    lab.wait_next_hops_exactly(&[POP_A_ADDR], Duration::from_secs(5));
    lab.run(&["stop", "pop-a", "edge", "--kill"]);
    let alerted = lab.wait_alerts(
        "WebhookEdgeGuardVetoing firing for pop-a",
        Duration::from_secs(30),
        |alerts| {
            alerts.iter().any(|a| {
                a.firing() && a.name() == "WebhookEdgeGuardVetoing" && a.label("pop") == "pop-a"
            })
        },
    );
    let status: serde_json::Value = serde_json::from_str(&lab.run(&[
        "exec",
        "client",
        "--",
        "curl",
        "-s",
        "http://10.0.1.2:9181/status",
    ]))
    .unwrap();
    let hops = router_next_hops();
    let vetoes = metric("bgp_agent_guard_blocked_total") - vetoes_before;
    lab.run(&["start", "pop-b", "edge"]);
    lab.run(&["start", "pop-a", "edge"]);
    lab.wait_next_hops(2, Duration::from_secs(30));
    assert_eq!(hops, [POP_A_ADDR], "the last PoP was withdrawn");
    assert_eq!(status["guard_vetoing"], true, "{status}");
    assert!(vetoes >= 1.0, "no veto counted");
    println!(
        "scenario guard: pop-b's admin flooded ({}): pop-a withdrawn {} ms after its edge died, 0 peers unknown; pop-b withdrawn, then pop-a's edge killed: pop-a stays announced, /status guard_vetoing=true, {vetoes} vetoes counted, WebhookEdgeGuardVetoing firing {} ms after the kill",
        flood.trim(),
        withdrawn.as_millis(),
        alerted.as_millis()
    );
}

/// argv: host port count seconds. Opens `count` connections that each send half a
/// request head, holds them `seconds`, and says how many the server had closed by then.
const HALF_HEAD_FLOOD: &str = "import socket, sys, time
host, port, count, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
held = []
for _ in range(count):
    s = socket.create_connection((host, port))
    s.sendall(b'GET /status HTTP/1.1\\r\\nHost: pop\\r\\n')
    s.setblocking(False)
    held.append(s)
time.sleep(hold)
closed = 0
for s in held:
    try:
        closed += s.recv(1) == b''
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print(f'{count} half-sent heads held {hold:.0f} s, {closed} closed by the server')";

/// The origin as production runs it: each edge delivers over TLS as its own user, and
/// that user may look the stream up but not publish as another PoP nor delete the
/// stream; the edges deliver as before after the tries.
fn origin_permissions(lab: &LabCli) {
    let mut report = Vec::new();
    for (pop, subject, other) in [
        ("pop-a", "webhooks.pop-b.github", "pop-b"),
        ("pop-a", "webhooks.shed.pop-b", "pop-b"),
        ("pop-b", "webhooks.pop-a.github", "pop-a"),
    ] {
        let probe = lab.origin_probe(pop, subject, other);
        assert!(
            probe.stream_info.is_ok(),
            "{pop} cannot look the stream up: {probe:?}"
        );
        assert!(
            probe.publish.is_err(),
            "{pop} published to {subject}: {probe:?}"
        );
        assert!(
            !matches!(probe.delete_stream, Ok(true)),
            "{pop} deleted the stream: {probe:?}"
        );
        assert!(
            probe.reads_own_inbox,
            "{pop} cannot read its replies: {probe:?}"
        );
        assert!(
            !probe.reads_other_inbox,
            "{pop} read {other}'s replies: {probe:?}"
        );
        report.push(format!(
            "{pop} → {subject}: publish refused ({}), delete refused ({}), {other}'s inbox unreadable",
            probe.publish.unwrap_err(),
            probe
                .delete_stream
                .err()
                .unwrap_or_else(|| "not deleted".into())
        ));
    }
    let outcomes = lab
        .load("origin-permissions", 20, Duration::from_secs(2))
        .finish(lab);
    lab.assert_all_acked_and_at_origin(&outcomes, Duration::from_secs(20));
    println!(
        "scenario origin-permissions: {}; then {} webhooks acked and at the origin over TLS",
        report.join("; "),
        outcomes.len()
    );
}

/// Runs one check, printing `test NAME ... ok|FAILED` as libtest does.
fn passes(name: &str, check: impl FnOnce()) -> bool {
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).is_ok();
    println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
    ok
}

/// Scrape targets whose last scrape worked.
fn targets_up(lab: &LabCli) -> usize {
    lab.query("count(up == 1)")
        .ok()
        .and_then(|data| data["result"][0]["value"][1].as_str()?.parse().ok())
        .unwrap_or(0)
}

/// An anycast address the PoPs announce, and how its scenarios name it.
#[derive(Clone, Copy)]
struct Anycast {
    vip: &'static str,
    /// Appended to scenario names and delivery ids.
    tag: &'static str,
}

const V4: Anycast = Anycast { vip: VIP, tag: "" };
const V6: Anycast = Anycast {
    vip: VIP6,
    tag: "-v6",
};

/// Every PoP's edge, agent, XDP loader and node exporter.
const SCRAPE_TARGETS: usize = 8;

/// How long a quiet lab must go without a firing alert: longer than the lab rules'
/// `for:` of the alerts a starting lab may hold pending.
const QUIET_WATCH: Duration = Duration::from_secs(25);

/// How long a restarted origin cluster may take to deliver what waited: its meta and
/// stream leaders are elected first (measured 12-33 s).
const CLUSTER_RESTART: Duration = Duration::from_secs(120);

/// Dashboard panels that must show both PoPs after the scenarios.
const CORE_PANELS: &[&str] = &[
    "Requests by status",
    "Spool backlog",
    "Spool fill and high-water mark",
    "Oldest undelivered event",
    "Breaker state (0 closed, 1 open, 2 half-open)",
    "Announced",
    "BGP sessions up",
    "XDP drops by reason",
    "XDP attached",
];

/// Datagrams `reach` sends to a port no PoP serves.
const JUNK_DATAGRAMS: u32 = 20;

/// Signed webhooks to the VIP land on both PoPs (ECMP) and each 2xx is at the origin
/// once; junk to the VIP dies in XDP.
fn reach(lab: &LabCli, anycast: Anycast) {
    let outcomes = lab
        .load_to(
            &url(anycast.vip),
            &format!("reach{}", anycast.tag),
            50,
            Duration::from_secs(4),
        )
        .finish(lab);
    let acked = outcomes.iter().filter(|o| o.acked()).count();
    let mut by_pop: HashMap<String, usize> = HashMap::new();
    for outcome in &outcomes {
        *by_pop
            .entry(outcome.pop.clone().unwrap_or_default())
            .or_default() += 1;
    }
    assert_eq!(acked, outcomes.len(), "{:?}", failures(&outcomes));
    for pop in ["pop-a", "pop-b"] {
        assert!(
            by_pop.get(pop).copied().unwrap_or(0) >= outcomes.len() / 5,
            "ECMP should spread senders: {by_pop:?}"
        );
    }
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(15));
    // XDP guards the address: UDP to a port not served is dropped at the PoPs' NICs.
    let drops_before = lab.xdp_drops();
    let junk = format!(
        "for n in $(seq {JUNK_DATAGRAMS}); do echo junk > /dev/udp/{}/9; done",
        anycast.vip
    );
    lab.run(&["exec", "client", "--", "bash", "-c", &junk]);
    let dropped = lab.xdp_drops() - drops_before;
    assert!(
        dropped >= f64::from(JUNK_DATAGRAMS),
        "XDP dropped {dropped} of {JUNK_DATAGRAMS} junk datagrams to {}",
        anycast.vip
    );
    println!(
        "scenario reach{}: {acked}/{} acked to {}, pop-a {} pop-b {}, at the origin exactly once: {acked}; XDP dropped {dropped} of {JUNK_DATAGRAMS} UDP datagrams to port 9",
        anycast.tag,
        outcomes.len(),
        anycast.vip,
        by_pop["pop-a"],
        by_pop["pop-b"]
    );
}

/// kill -9 of pop-a's edge under load: its agent withdraws, traffic moves to pop-b.
fn pop_failure(lab: &LabCli, anycast: Anycast) {
    let load = lab.load_to(
        &url(anycast.vip),
        &format!("popfail{}", anycast.tag),
        50,
        Duration::from_secs(10),
    );
    std::thread::sleep(Duration::from_secs(3));
    let killed_ms = now_ms();
    lab.run(&["stop", "pop-a", "edge", "--kill"]);
    let withdrawn = lab.wait_next_hops_for(anycast.vip, 1, Duration::from_secs(10));
    let outcomes = load.finish(lab);
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.acked()).collect();
    let last_failure = failed
        .iter()
        .map(|o| o.sent_ms.saturating_sub(killed_ms))
        .max()
        .unwrap_or(0);
    assert!(
        failed.iter().all(|o| o.sent_ms + 100 >= killed_ms),
        "failures before the kill: {:?}",
        failures(&outcomes)
    );
    assert!(
        last_failure < 3000,
        "senders failed for {last_failure} ms after the kill"
    );
    // The acked events of the dead edge are in its spool: they arrive once it is back.
    lab.run(&["start", "pop-a", "edge"]);
    lab.wait_next_hops_for(anycast.vip, 2, Duration::from_secs(30));
    lab.wait_next_hops(2, Duration::from_secs(30));
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    println!(
        "scenario pop-failure{}: withdrawn at the router {} ms after kill -9, last failed request sent {last_failure} ms after it, {} of {} requests failed, 0 acked events missing at the origin",
        anycast.tag,
        withdrawn.as_millis(),
        failed.len(),
        outcomes.len()
    );
}

/// The lab as it comes up: Prometheus scrapes every target, and with nothing wrong no
/// alert fires.
fn alerts_quiet(lab: &LabCli) {
    let started = Instant::now();
    while targets_up(lab) < SCRAPE_TARGETS {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "scrape targets not all up: {:?}",
            lab.query("up")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let all_up = started.elapsed();
    let mut pending = BTreeSet::new();
    let watch = Instant::now();
    while watch.elapsed() < QUIET_WATCH {
        let alerts = lab.alerts();
        let firing: Vec<String> = alerts
            .iter()
            .filter(|a| a.firing())
            .map(ToString::to_string)
            .collect();
        assert!(firing.is_empty(), "firing in a quiet lab: {firing:#?}");
        pending.extend(alerts.iter().map(|a| a.name().to_owned()));
        std::thread::sleep(Duration::from_secs(1));
    }
    println!(
        "scenario alerts-quiet: all {SCRAPE_TARGETS} scrape targets up after {} ms, then {} s without a firing alert (pending on the way: {pending:?})",
        all_up.as_millis(),
        QUIET_WATCH.as_secs()
    );
}

/// kill -9 of pop-a's edge: the lab's Prometheus fires WebhookEdgeTargetDown for it
/// within 30 s and nothing else, and it resolves once the edge is back.
fn alerts_pop_failure(lab: &LabCli) {
    let edge_down = |a: &Alert| {
        a.name() == "WebhookEdgeTargetDown" && a.label("pop") == "pop-a" && a.label("job") == "edge"
    };
    lab.run(&["stop", "pop-a", "edge", "--kill"]);
    let fired = lab.wait_alerts(
        "TargetDown firing for pop-a's edge",
        Duration::from_secs(30),
        |alerts| alerts.iter().any(|a| a.firing() && edge_down(a)),
    );
    let others: Vec<String> = lab
        .alerts()
        .iter()
        .filter(|a| a.firing() && !edge_down(a))
        .map(ToString::to_string)
        .collect();
    lab.run(&["start", "pop-a", "edge"]);
    let resolved = lab.wait_no_alert_firing(Duration::from_secs(60));
    lab.wait_next_hops(2, Duration::from_secs(30));
    assert!(others.is_empty(), "firing beside TargetDown: {others:#?}");
    println!(
        "scenario alerts-pop-failure: kill -9 of pop-a's edge -> WebhookEdgeTargetDown{{pop=pop-a, job=edge}} firing after {} ms, nothing else; resolved {} ms after the restart",
        fired.as_millis(),
        resolved.as_millis()
    );
}

/// Drain pop-a, restart its edge, undrain: no failed request but those the router's
/// ECMP changes rehash mid-connection. The drain first re-announces with
/// GRACEFUL_SHUTDOWN, so the router moves traffic to pop-b while pop-a's path is still
/// there; the withdraw follows after the agent's wait.
fn drain(lab: &LabCli) {
    let router = RouterWatch::start();
    let load = lab.load("drain", 50, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let mut drain = std::process::Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(["exec", "pop-a", "--", "/usr/local/bin/bgp-agent", "drain"])
        .args(["--config", "/etc/edge/agent.yaml"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut moved = None;
    while moved.is_none() && started.elapsed() < Duration::from_secs(2) {
        if router_next_hops().len() == 1 && lab.router_has_graceful_shutdown_path() {
            moved = Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(drain.wait().unwrap().success(), "bgp-agent drain failed");
    let drained = started.elapsed();
    let moved =
        moved.expect("the router never used pop-b alone while pop-a's path was tagged 65535:0");
    lab.wait_next_hops(1, Duration::from_secs(5));
    // In-flight senders on pop-a finish within the edge's drain grace.
    lab.run(&["stop", "pop-a", "edge"]);
    lab.run(&["start", "pop-a", "edge"]);
    lab.run(&[
        "exec",
        "pop-a",
        "--",
        "/usr/local/bin/bgp-agent",
        "undrain",
        "--config",
        "/etc/edge/agent.yaml",
    ]);
    let back = lab.wait_next_hops(2, Duration::from_secs(30));
    let outcomes = load.finish(lab);
    let router = router.stop();
    let (rehashed, other): (Vec<&Outcome>, Vec<&Outcome>) = outcomes
        .iter()
        .filter(|o| !o.acked())
        .partition(|o| router.rehashed(o));
    assert!(other.is_empty(), "{:?}", failures(&outcomes));
    assert!(
        rehashed.len() <= MAX_REHASHED_PER_CHANGE * router.changes().len(),
        "{:?}",
        failures(&outcomes)
    );
    let failed = rehashed.len();
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(15));
    println!(
        "scenario drain: traffic moved to pop-b {} ms after `drain` (65535:0), withdrawn {} ms after it, edge restarted, re-announced {} ms after undrain; {failed} of {} requests failed (each in flight across a change of the router's ECMP set)",
        moved.as_millis(),
        drained.as_millis(),
        back.as_millis(),
        outcomes.len()
    );
}

/// A PoP back in the router's ECMP set under long-lived flows (40 keep-alive
/// connections): with the kernel's hash-threshold ECMP (what BIRD installs) the router
/// hands part of the live flows to the returning PoP, which resets them; with resilient
/// nexthop groups (`lab/rtr/resilient-ecmp.sh`) only idle buckets move, so no live flow
/// breaks, and new connections still reach the returning PoP. Two rounds of each,
/// alternating.
fn undrain_resilient_ecmp(lab: &LabCli) {
    let mut reset: HashMap<bool, Vec<usize>> = HashMap::new();
    let mut sent = 0;
    let mut new_flows_to_pop_b = Vec::new();
    for round in 0..2 {
        for resilient in [false, true] {
            if resilient {
                lab.run(&["start", "rtr", "resilient-ecmp"]);
            }
            let hashing = if resilient {
                "resilient"
            } else {
                "hash-threshold"
            };
            let prefix = format!("undrain-{hashing}-{round}");
            let (failed, total) = pop_b_returns_under_kept_alive_load(lab, &prefix);
            sent += total;
            reset.entry(resilient).or_default().push(failed);
            if resilient {
                let share = new_connections_to_pop_b(lab, &format!("{prefix}-new"));
                new_flows_to_pop_b.push(share);
                lab.run(&["stop", "rtr", "resilient-ecmp"]);
            }
        }
    }
    let (plain, resilient) = (&reset[&false], &reset[&true]);
    assert!(
        resilient.iter().all(|&n| n == 0),
        "resilient groups reset live flows: {resilient:?} per return"
    );
    assert!(
        plain.iter().sum::<usize>() > 0,
        "hash-threshold ECMP reset no live flow in {} returns: the test moved nothing",
        plain.len()
    );
    assert!(
        new_flows_to_pop_b.iter().all(|&share| share >= 0.2),
        "new connections did not reach the returning PoP: {new_flows_to_pop_b:?}"
    );
    println!(
        "scenario undrain-resilient-ecmp: pop-b back in the router's ECMP set under 40 keep-alive flows at 50 webhooks/s ({sent} sent) -> live flows reset per return: hash-threshold {plain:?}, resilient nexthop groups {resilient:?}; new connections right after the return answered by pop-b under resilient groups: {:?} %",
        new_flows_to_pop_b
            .iter()
            .map(|share| (share * 100.0).round() as u32)
            .collect::<Vec<_>>()
    );
}

/// Takes pop-b out of the router's ECMP set (its session at the router disabled: the
/// same change at the router as a drain, without feeding the agent's flap dampening,
/// which four drains in a minute would trip), starts 40 keep-alive flows (all on
/// pop-a), brings pop-b back 3 s later and keeps sending until 12 s; returns the webhooks
/// that failed (each a reset flow: the sender reconnects after one) and all that were
/// sent.
fn pop_b_returns_under_kept_alive_load(lab: &LabCli, prefix: &str) -> (usize, usize) {
    let session = |command: &str| {
        lab.run(&[
            "exec",
            "rtr",
            "--",
            "birdc",
            "-s",
            "/run/bird.ctl",
            command,
            "pop_b",
        ])
    };
    session("disable");
    lab.wait_next_hops_exactly(&[POP_A_ADDR], Duration::from_secs(10));
    let load = lab.load_kept_alive(prefix, 50, 40, Duration::from_secs(12));
    std::thread::sleep(Duration::from_secs(3));
    session("enable");
    // pop-b's BIRD waits out its error wait (1 s, doubling to 5 s over these returns in
    // a row) before the session is up again.
    lab.wait_next_hops(2, Duration::from_secs(9));
    let outcomes = load.finish(lab);
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.acked()).collect();
    assert!(
        failed.iter().all(|o| o.status.is_none()),
        "failures other than resets: {:?}",
        failures(&outcomes)
    );
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(15));
    (failed.len(), outcomes.len())
}

/// The share of 2 s of new connections (50/s) that pop-b answered.
fn new_connections_to_pop_b(lab: &LabCli, prefix: &str) -> f64 {
    let outcomes = lab.load(prefix, 50, Duration::from_secs(2)).finish(lab);
    assert!(
        outcomes.iter().all(Outcome::acked),
        "{:?}",
        failures(&outcomes)
    );
    let to_pop_b = outcomes
        .iter()
        .filter(|o| o.pop.as_deref() == Some("pop-b"))
        .count();
    to_pop_b as f64 / outcomes.len() as f64
}

/// Soft drain: pop-a degraded (its soft-drain switch) stays announced with a longer AS
/// path, so the router sends every flow to pop-b and keeps pop-a as a backup; when
/// pop-b's edge dies, traffic returns to pop-a without waiting for it to undegrade.
fn degrade(lab: &LabCli) {
    let router = RouterWatch::start();
    let load = lab.load("degrade", 50, Duration::from_secs(16));
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    lab.run(&["exec", "pop-a", "--", "touch", "/etc/edge/soft-drain"]);
    lab.wait_next_hops(1, Duration::from_secs(3));
    let moved = started.elapsed();
    let moved_ms = now_ms();
    assert_eq!(
        router_next_hops(),
        [POP_B_ADDR],
        "pop-b should carry everything"
    );
    assert!(
        lab.router_has_path_via(POP_A_ADDR),
        "pop-a should stay a backup"
    );
    std::thread::sleep(Duration::from_secs(3));

    let killed_ms = now_ms();
    lab.run(&["stop", "pop-b", "edge", "--kill"]);
    let failover = lab.wait_next_hops_exactly(&[POP_A_ADDR], Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(2));
    lab.run(&["start", "pop-b", "edge"]);
    lab.run(&["exec", "pop-a", "--", "rm", "-f", "/etc/edge/soft-drain"]);
    lab.wait_next_hops(2, Duration::from_secs(30));
    let outcomes = load.finish(lab);
    let router = router.stop();

    // While degraded and pop-b up, no new flow went to pop-a (a flow open before the
    // move may finish there).
    let to_pop_a = outcomes
        .iter()
        .filter(|o| o.sent_ms > moved_ms + 100 && o.done_ms < killed_ms)
        .filter(|o| o.pop.as_deref() == Some("pop-a"))
        .count();
    assert_eq!(to_pop_a, 0, "pop-a got new flows while degraded");
    // Failed: what was in flight on pop-b as it died, and what the router's ECMP
    // changes rehashed mid-connection (see the rolling deploy test).
    let failed: Vec<Outcome> = outcomes.iter().filter(|o| !o.acked()).cloned().collect();
    let (died, other): (Vec<Outcome>, Vec<Outcome>) = failed
        .iter()
        .cloned()
        .partition(|o| o.sent_ms + 100 >= killed_ms && o.sent_ms < killed_ms + 3000);
    let (rehashed, other): (Vec<Outcome>, Vec<Outcome>) =
        other.into_iter().partition(|o| router.rehashed(o));
    assert!(
        other.is_empty(),
        "failures outside pop-b's death: {:?}",
        failures(&other)
    );
    assert!(
        rehashed.len() <= MAX_REHASHED_PER_CHANGE * router.changes().len(),
        "{:?}",
        failures(&rehashed)
    );
    let served_by_a_after = outcomes
        .iter()
        .filter(|o| o.sent_ms > killed_ms + 3000 && o.pop.as_deref() == Some("pop-a"))
        .count();
    assert!(served_by_a_after > 0, "traffic never returned to pop-a");
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    println!(
        "scenario degrade: pop-a degraded, router on pop-b alone after {} ms with pop-a kept as a backup; kill -9 of pop-b's edge → pop-a alone after {} ms; {} of {} requests failed ({} in flight on pop-b as it died, {} rehashed by the router)",
        moved.as_millis(),
        failover.as_millis(),
        failed.len(),
        outcomes.len(),
        died.len(),
        rehashed.len()
    );
}

/// kill -9 of pop-b's agent (BIRD speaker) under load: its supervisor runs `bgp-agent
/// withdraw`, so the route leaves the router within a second although the edge is fine,
/// and the restarted agent announces again after its rise.
fn agent_crash(lab: &LabCli) {
    let supervisor = lab.service_pid("pop-b", "bgp-agent");
    let children = lab.run(&[
        "exec",
        "pop-b",
        "--",
        "pgrep",
        "-P",
        &supervisor.to_string(),
    ]);
    let agent: i32 = children.trim().parse().expect("one supervised agent");
    let load = lab.load("agentkill", 50, Duration::from_secs(8));
    std::thread::sleep(Duration::from_secs(2));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let withdrawn = lab.wait_next_hops(1, Duration::from_secs(5));
    assert!(
        withdrawn < Duration::from_secs(1),
        "route still at the router {withdrawn:?} after the agent died"
    );
    let back = lab.wait_next_hops(2, Duration::from_secs(20));
    let outcomes = load.finish(lab);
    let failed = outcomes.iter().filter(|o| !o.acked()).count();
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(15));
    println!(
        "scenario agent-crash: kill -9 of pop-b's agent -> withdrawn at the router after {} ms, announced again {} ms later; {failed} of {} requests failed",
        withdrawn.as_millis(),
        back.as_millis(),
        outcomes.len()
    );
}

/// Cut a PoP's uplink with nftables (everything in and out dropped): the router's BGP
/// hold timer (pop-a, ExaBGP) or BFD (pop-b, BIRD) notices and traffic moves.
fn link_failure(lab: &LabCli, pop: &str, detector: &str) {
    let load = lab.load(&format!("cut-{pop}"), 50, Duration::from_secs(12));
    std::thread::sleep(Duration::from_secs(2));
    let cut_ms = now_ms();
    lab.run(&["exec", pop, "--", "nft", "add", "table", "inet", "lab_cut"]);
    for (chain, hook) in [("in", "input"), ("out", "output")] {
        lab.run(&[
            "exec",
            pop,
            "--",
            "nft",
            "add",
            "chain",
            "inet",
            "lab_cut",
            chain,
            &format!("{{ type filter hook {hook} priority -300 ; policy drop ; }}"),
        ]);
    }
    let detected = lab.wait_next_hops(1, Duration::from_secs(10));
    let outcomes = load.finish(lab);
    lab.run(&[
        "exec", pop, "--", "nft", "delete", "table", "inet", "lab_cut",
    ]);
    let after_detection: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.sent_ms > cut_ms + detected.as_millis() as u64 + 200)
        .collect();
    let failed = outcomes.iter().filter(|o| !o.acked()).count();
    assert!(!after_detection.is_empty());
    assert!(
        after_detection.iter().all(|o| o.acked()),
        "requests failed after the route moved: {:?}",
        failures(&outcomes)
    );
    lab.wait_next_hops(2, Duration::from_secs(30));
    // Acked on the cut PoP before the cut, delivered once its link is back.
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    println!(
        "scenario link-failure {pop}: detected by {detector} after {} ms, {failed} of {} requests failed (all sent before the route moved), 0 acked events missing",
        detected.as_millis(),
        outcomes.len()
    );
}

/// hping3's SYN flood from the attacker at the VIP's port 443, 5,000 a second, `packets`
/// in all (it ends by itself).
fn syn_flood(lab: &LabCli, packets: u32) -> std::process::Child {
    let count = packets.to_string();
    lab.spawn(&[
        "exec",
        "attacker",
        "--",
        "hping3",
        "-S",
        "-p",
        "443",
        "-i",
        "u200",
        "-c",
        &count,
        "-q",
        "192.0.2.10",
    ])
}

/// A SYN flood and slowloris from the attacker at the VIP: real senders keep working.
fn attack(lab: &LabCli) {
    let drops_before = lab.xdp_drops();
    // Both attacks end by themselves (packet count, test length).
    let mut flood = syn_flood(lab, 40000);
    let mut slowloris = lab.spawn(&[
        "exec",
        "attacker",
        "--",
        "slowhttptest",
        "-H",
        "-c",
        "1000",
        "-r",
        "200",
        "-i",
        "5",
        "-l",
        "10",
        "-u",
        "https://192.0.2.10/hooks/github",
    ]);
    let outcomes = lab.load("attack", 50, Duration::from_secs(10)).finish(lab);
    flood.wait().unwrap();
    slowloris.wait().unwrap();
    let acked = outcomes.iter().filter(|o| o.acked()).count();
    let drops = lab.xdp_drops() - drops_before;
    assert!(
        acked * 100 >= outcomes.len() * 99,
        "{acked}/{}: {:?}",
        outcomes.len(),
        failures(&outcomes)
    );
    assert!(drops > 1000.0, "XDP dropped only {drops} packets");
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    println!(
        "scenario attack: SYN flood + slowloris from the attacker; {acked}/{} legitimate requests acked ({:.1}%), all at the origin once, XDP dropped {drops} packets on the PoPs",
        outcomes.len(),
        acked as f64 * 100.0 / outcomes.len() as f64
    );
}

/// Under-attack mode at the NIC: both PoPs fetch the lab's fake provider's list (the
/// client's subnet) with `edge ranges update` and are set to `auto`; the attacker's SYN
/// flood raises the shield on both; the client, inside the provider's range, keeps 99 %
/// or more acknowledged while the attacker's own HTTPS requests are dropped at XDP and
/// counted (`under_attack`); once the flood ends and the hold passes, the attacker
/// reaches the edge again.
fn under_attack(lab: &LabCli) {
    lab.run(&["start", "origin", "provider"]);
    let listening = Instant::now();
    while lab
        .try_run(&[
            "exec",
            "pop-a",
            "--",
            "curl",
            "-sf",
            "-o",
            "/dev/null",
            PROVIDER_URL,
        ])
        .is_err()
    {
        assert!(
            listening.elapsed() < Duration::from_secs(10),
            "the fake provider never answered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for pop in POPS {
        let stored = fetch_provider_list(lab, pop);
        assert!(stored.contains(r#""outcome":"stored""#), "{pop}: {stored}");
        set_under_attack(lab, pop, "auto");
    }
    lab.run(&["stop", "origin", "provider"]);
    for pop in POPS {
        wait_for_xdp(lab, pop, r#"why="calm"} 0"#);
    }
    let dropped_before = lab.xdp_packets(r#"reason="under_attack""#);
    let mut flood = syn_flood(lab, 50000);
    for pop in POPS {
        wait_for_xdp(lab, pop, r#"why="syn_rate"} 1"#);
    }
    let load = lab.load("under-attack", 50, Duration::from_secs(5));
    let attacker = attacker_reaches_the_edge(lab);
    let outcomes = load.finish(lab);
    flood.wait().unwrap();
    let dropped = lab.xdp_packets(r#"reason="under_attack""#) - dropped_before;
    for pop in POPS {
        wait_for_xdp(lab, pop, r#"why="calm"} 0"#);
    }
    let after = attacker_reaches_the_edge(lab);
    for pop in POPS {
        set_under_attack(lab, pop, "clear");
    }
    let acked = outcomes.iter().filter(|o| o.acked()).count();
    assert!(
        acked * 100 >= outcomes.len() * 99,
        "{acked}/{}: {:?}",
        outcomes.len(),
        failures(&outcomes)
    );
    assert!(!attacker, "the attacker's request got through under attack");
    assert!(
        dropped > 1000.0,
        "XDP dropped only {dropped} packets as under_attack"
    );
    assert!(after, "the attacker did not reach the edge once calm");
    lab.assert_at_origin_once(&outcomes, Duration::from_secs(20));
    println!(
        "scenario under-attack: provider list fetched by both PoPs; SYN flood raised the shield on both; the client (in the provider's range) {acked}/{} acked ({:.1}%), the attacker's request dropped at XDP ({dropped} packets counted under_attack), answered again once calm",
        outcomes.len(),
        acked as f64 * 100.0 / outcomes.len() as f64
    );
}

/// `edge ranges update` on `pop`: its JSON line.
fn fetch_provider_list(lab: &LabCli, pop: &str) -> String {
    lab.try_run(&[
        "exec",
        pop,
        "--",
        "/usr/local/bin/edge",
        "ranges",
        "update",
        "--config",
        "/etc/edge/edge.yaml",
    ])
    .unwrap_or_else(|e| panic!("{pop}: edge ranges update: {e}"))
}

/// `edge-xdp under-attack SET` on `pop`.
fn set_under_attack(lab: &LabCli, pop: &str, set: &str) {
    let config = "/etc/edge/xdp.yaml";
    lab.run(&[
        "exec",
        pop,
        "--",
        "/usr/local/bin/edge-xdp",
        "under-attack",
        set,
        "--config",
        config,
    ]);
}

/// The lab's fake provider's list (`lab/provider/meta.json`, served by the origin node).
const PROVIDER_URL: &str = "http://10.0.3.2:8080/meta.json";

/// Whether an HTTPS request from the attacker gets any answer from the edge in 2 s.
fn attacker_reaches_the_edge(lab: &LabCli) -> bool {
    let code = lab
        .try_run(&[
            "exec",
            "attacker",
            "--",
            "curl",
            "-sk",
            "-m",
            "2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "https://192.0.2.10/hooks/github",
        ])
        .unwrap_or_else(|e| e);
    code.trim() != "000" && !code.trim().is_empty()
}

/// Waits (15 s at most) until `pop`'s `xdp_under_attack` line ends with `tail`.
fn wait_for_xdp(lab: &LabCli, pop: &str, tail: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let metrics = lab.xdp_metrics(pop);
        let line = metrics.lines().find(|l| l.starts_with("xdp_under_attack{"));
        if line.is_some_and(|l| l.ends_with(tail)) {
            return;
        }
        assert!(Instant::now() < deadline, "{pop}: never …{tail}: {line:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The whole origin cluster stopped for 30 s under load: both PoPs stay announced, senders get 2xx,
/// everything arrives after the origin is back.
fn origin_outage(lab: &LabCli) {
    let load = lab.load("outage", 20, Duration::from_secs(34));
    std::thread::sleep(Duration::from_secs(2));
    lab.stop_origin();
    let outage = Instant::now();
    let mut min_hops = 2;
    while outage.elapsed() < Duration::from_secs(30) {
        min_hops = min_hops.min(lab.next_hops().len());
        std::thread::sleep(Duration::from_millis(500));
    }
    lab.start_origin();
    let returned = Instant::now();
    let outcomes = load.finish(lab);
    let acked = outcomes.iter().filter(|o| o.acked()).count();
    assert_eq!(min_hops, 2, "a PoP was withdrawn during the origin outage");
    assert_eq!(acked, outcomes.len(), "{:?}", failures(&outcomes));
    lab.assert_at_origin_once(&outcomes, CLUSTER_RESTART);
    let caught_up = returned.elapsed();
    println!(
        "scenario origin-outage: 30 s without the origin cluster, both PoPs announced throughout, {acked}/{} acked, all at the origin {} ms after it returned, 0 lost",
        outcomes.len(),
        caught_up.as_millis()
    );
}

/// kill -9 of the origin stream's leader (one of three NATS servers) under 50 webhooks/s:
/// no request fails, the stream elects another leader, every acked event arrives once,
/// and the restarted server catches up.
fn origin_node_loss(lab: &LabCli) {
    let load = lab.load("nodeloss", 50, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(4));
    let victim = lab.origin_replication().unwrap().leader;
    lab.run(&["stop", "origin", &victim, "--kill"]);
    let killed = Instant::now();
    let new_leader = loop {
        match lab.origin_replication() {
            Ok(r) if !r.leader.is_empty() && r.leader != victim => break r.leader,
            last => assert!(
                killed.elapsed() < Duration::from_secs(15),
                "no new stream leader 15 s after {victim} was killed; last answer: {last:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let elected = killed.elapsed();
    std::thread::sleep(Duration::from_secs(10).saturating_sub(killed.elapsed()));
    lab.run(&["start", "origin", &victim]);
    let restarted = Instant::now();
    let outcomes = load.finish(lab);
    lab.assert_all_acked_and_at_origin(&outcomes, Duration::from_secs(60));
    let caught_up = loop {
        let replication = lab.origin_replication();
        if replication.as_ref().is_ok_and(|r| {
            r.peers.len() == 2
                && r.peers
                    .iter()
                    .all(|p| p.current && !p.offline && p.lag == 0)
        }) {
            break restarted.elapsed();
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(60),
            "{victim} not caught up 60 s after its restart: {replication:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    println!(
        "scenario origin-node-loss: kill -9 of stream leader {victim} under 50 req/s -> {new_leader} leads {} ms later (the PoPs hold and retry meanwhile), {}/{} acked, all at the origin exactly once; {victim} current again {} ms after its restart",
        elected.as_millis(),
        outcomes.len(),
        outcomes.len(),
        caught_up.as_millis()
    );
}

/// The origin stopped with events in the PoPs' spools: WebhookEdgeBackhaulLagging fires
/// (oldest undelivered over 30 s for the lab's 20 s) and resolves once the origin is
/// back and the spools have delivered.
fn alerts_backhaul_lag(lab: &LabCli) {
    lab.stop_origin();
    let stopped = Instant::now();
    let outcomes = lab.load("lag", 5, Duration::from_secs(3)).finish(lab);
    let lagging = |alerts: &[Alert]| {
        alerts
            .iter()
            .any(|a| a.firing() && a.name() == "WebhookEdgeBackhaulLagging")
    };
    let fired = lab.wait_alerts("BackhaulLagging firing", Duration::from_secs(120), lagging);
    let fired_after_stop = stopped.elapsed();
    lab.start_origin();
    let resolved = lab.wait_no_alert_firing(CLUSTER_RESTART);
    lab.assert_all_acked_and_at_origin(&outcomes, CLUSTER_RESTART);
    println!(
        "scenario alerts-backhaul-lag: origin stopped, {} events acked into the spools -> WebhookEdgeBackhaulLagging firing {} ms after the stop ({} ms of waiting); resolved {} ms after the origin returned, 0 lost",
        outcomes.len(),
        fired_after_stop.as_millis(),
        fired.as_millis(),
        resolved.as_millis()
    );
}

/// pop-a's readiness flaps at a jittered 1 Hz, 50 % down, for 60 s: the router sees at
/// most 2 route changes from it.
fn flap(lab: &LabCli) {
    let before = lab.route_changes_from_pop_a();
    let maintenance = "/etc/edge/maintenance";
    let mut seed = 0x9e37_79b9_u32;
    let mut down = true;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        let command: &[&str] = if down { &["touch"] } else { &["rm", "-f"] };
        lab.run(&[&["exec", "pop-a", "--"], command, &[maintenance]].concat());
        down = !down;
        // Half-periods of 0.25-0.75 s (xorshift): jittered, because strictly periodic
        // flapping aliases with check intervals and proves nothing.
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        std::thread::sleep(Duration::from_millis(250 + u64::from(seed % 500)));
    }
    lab.run(&["exec", "pop-a", "--", "rm", "-f", maintenance]);
    let changes = lab.route_changes_from_pop_a() - before;
    assert!(changes <= 2, "{changes} route changes in 60 s of flapping");
    lab.wait_next_hops(2, Duration::from_secs(60));
    println!(
        "scenario flap: 60 s of jittered 1 Hz readiness flapping on pop-a -> {changes} route changes at the router"
    );
}

/// Every query of the fleet's dashboard is valid at the lab's Prometheus with both PoPs
/// selected, and the core panels show data from both PoPs.
fn dashboard(lab: &LabCli) {
    let dashboard = Dashboard::load(&Dashboard::file()).unwrap();
    let series = |expr: &str| -> Vec<serde_json::Value> {
        let data = lab
            .query(&instantiate(expr, "pop-a|pop-b"))
            .unwrap_or_else(|e| panic!("{expr}: {e}"));
        data["result"].as_array().cloned().unwrap_or_default()
    };
    let mut empty = Vec::new();
    for panel in &dashboard.panels {
        let results: Vec<Vec<serde_json::Value>> = panel.exprs.iter().map(|e| series(e)).collect();
        if results.iter().all(Vec::is_empty) {
            empty.push(panel.title.as_str());
        }
        if CORE_PANELS.contains(&panel.title.as_str()) {
            for (expr, result) in panel.exprs.iter().zip(&results) {
                let pops: BTreeSet<&str> = result
                    .iter()
                    .filter_map(|s| s["metric"]["pop"].as_str())
                    .collect();
                assert_eq!(
                    pops,
                    BTreeSet::from(["pop-a", "pop-b"]),
                    "{}: {expr}",
                    panel.title
                );
            }
        }
    }
    for expr in &dashboard.annotations {
        series(expr);
    }
    println!(
        "scenario dashboard: {} panels, {} queries valid at the lab's Prometheus, the {} core panels show both PoPs; no data (nothing of theirs happened): {empty:?}",
        dashboard.panels.len(),
        dashboard.exprs().count(),
        CORE_PANELS.len()
    );
}
