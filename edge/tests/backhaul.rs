//! The backhaul against a real nats-server with JetStream (from Debian), started here on
//! a loopback port with its store in a temp dir, stopped by PID.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::edge::nats::Nats;
use testkit::edge::*;

fn backhaul_config(nats: &Nats) -> String {
    format!(
        "backhaul:\n  sink: nats\n  nats: {{ servers: [\"{}\"], stream: WEBHOOKS, create: true }}\n  max_in_flight: 64\n  retry: {{ base: 50ms, max: 500ms }}\n",
        nats.url()
    )
}

/// Every message in the stream: provider event id (`Edge-Event-Id`) → (body, headers).
async fn stream_messages(nats: &Nats) -> HashMap<String, (Vec<u8>, async_nats::HeaderMap)> {
    let js = nats.jetstream().await;
    let mut stream = js.get_stream("WEBHOOKS").await.unwrap();
    let last = stream.info().await.unwrap().state.last_sequence;
    let mut out = HashMap::new();
    for seq in 1..=last {
        let Ok(message) = stream.get_raw_message(seq).await else {
            continue;
        };
        let headers = message.headers.clone();
        // Events carry the provider's id; shed-ledger entries only their Nats-Msg-Id.
        let id = headers
            .get("Edge-Event-Id")
            .or_else(|| headers.get(async_nats::header::NATS_MESSAGE_ID))
            .unwrap_or_else(|| panic!("no Edge-Event-Id nor Nats-Msg-Id in {headers:?}"))
            .to_string();
        assert!(
            out.insert(id.clone(), (message.payload.to_vec(), headers))
                .is_none(),
            "{id} is in the stream twice"
        );
    }
    out
}

async fn wait_for_count(nats: &Nats, count: u64, limit: Duration) -> u64 {
    let js = nats.jetstream().await;
    let started = Instant::now();
    loop {
        let seen = match js.get_stream("WEBHOOKS").await {
            Ok(mut stream) => stream.info().await.map(|i| i.state.messages).unwrap_or(0),
            Err(_) => 0,
        };
        if seen >= count || started.elapsed() > limit {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Posts `ids` with bounded concurrency; returns the ids that got a 202.
async fn post_all(edge: &Edge, ids: Vec<String>) -> Vec<String> {
    let client = client(edge, false);
    let permits = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    for id in ids {
        let permit = Arc::clone(&permits).acquire_owned().await.unwrap();
        let request = github_post(&client, edge, &id, body_for(&id).as_bytes());
        tasks.spawn(async move {
            let _permit = permit;
            match request.send().await {
                Ok(r) if r.status() == 202 => Some(id),
                _ => None,
            }
        });
    }
    let mut acked = Vec::new();
    while let Some(result) = tasks.join_next().await {
        acked.extend(result.unwrap());
    }
    acked
}

fn body_for(id: &str) -> String {
    format!(
        r#"{{"delivery":"{id}","pad":"{}"}}"#,
        "b".repeat(id.len() * 7 % 300)
    )
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:05}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_reaches_jetstream_once_through_outages_and_crashes() {
    let mut nats = Nats::start();
    let mut edge = Edge::start("", &format!("{}\n", "")).with_section(&backhaul_config(&nats));

    // 1,000 events: exactly 1,000 messages, bodies byte-identical, headers carried.
    let acked = post_all(&edge, ids("first", 1000)).await;
    assert_eq!(acked.len(), 1000);
    assert_eq!(
        wait_for_count(&nats, 1000, Duration::from_secs(30)).await,
        1000
    );
    let messages = stream_messages(&nats).await;
    assert_eq!(messages.len(), 1000);
    for id in &acked {
        let (body, headers) = &messages[id];
        assert_eq!(
            body,
            body_for(id).as_bytes(),
            "{id}: body changed on the way"
        );
        assert_eq!(headers.get("Edge-Pop").unwrap().as_str(), "test");
        assert_eq!(headers.get("x-github-event").unwrap().as_str(), "push");
    }

    // Warm: after an idle period the next event goes over the same connection.
    let dials = edge.metric("edge_backhaul_dials_total");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(post_all(&edge, vec!["warm-1".into()]).await.len(), 1);
    assert_eq!(
        wait_for_count(&nats, 1001, Duration::from_secs(10)).await,
        1001
    );
    assert_eq!(
        edge.metric("edge_backhaul_dials_total"),
        dials,
        "no new dial for an event after idling"
    );

    // Origin outage: the PoP keeps acknowledging (and stays ready); all arrive later.
    nats.stop();
    let during = post_all(&edge, ids("outage", 200)).await;
    assert_eq!(
        during.len(),
        200,
        "an origin outage must not refuse senders"
    );
    assert_eq!(
        edge.readyz(),
        Some(200),
        "an origin outage is not a reason to withdraw"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        edge.metric("edge_backhaul_lag_records") >= 200.0,
        "lag shows the backlog"
    );
    assert!(
        edge.metric("edge_backhaul_lag_bytes") >= 200.0 * 100.0,
        "lag bytes show the backlog"
    );
    nats.spawn();
    assert_eq!(
        wait_for_count(&nats, 1201, Duration::from_secs(30)).await,
        1201
    );

    // kill -9 during delivery: after a restart every acknowledged event is there, once
    // (what was published but not yet checkpointed is sent again and dropped by id).
    let before_crash = post_all(&edge, ids("crash", 300)).await;
    edge.kill9();
    edge.spawn();
    let expected = 1201 + before_crash.len() as u64;
    assert_eq!(
        wait_for_count(&nats, expected, Duration::from_secs(30)).await,
        expected
    );
    let messages = stream_messages(&nats).await;
    for id in before_crash.iter().chain(&during).chain(&acked) {
        assert!(
            messages.contains_key(id),
            "{id} acknowledged but not at the origin"
        );
    }
    assert_eq!(messages.len() as u64, expected);

    // Two PoPs sharing one stream: the same event through both is one message.
    let other = Edge::start("", "").with_section(&backhaul_config(&nats));
    assert_eq!(post_all(&edge, vec!["both-pops".into()]).await.len(), 1);
    assert_eq!(post_all(&other, vec!["both-pops".into()]).await.len(), 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        wait_for_count(&nats, expected + 1, Duration::from_secs(10)).await,
        expected + 1
    );
    let messages = stream_messages(&nats).await;
    assert_eq!(
        messages.len() as u64,
        expected + 1,
        "one message for the event both PoPs took"
    );
    let pops: HashSet<String> = messages
        .values()
        .map(|(_, h)| h.get("Edge-Pop").unwrap().to_string())
        .collect();
    assert_eq!(pops.len(), 1, "both edges use pop label test here");
}

/// An event JetStream refuses for good (over the stream's maximum message size) is kept
/// as a dead letter, and delivery goes on past it instead of retrying it forever. Once
/// the stream takes larger messages, the operator retries it with `edge dead-letter
/// retry` beside the running edge, and it arrives under its own id; the one they purge
/// never does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_event_is_a_dead_letter_not_a_stall_and_an_operator_retries_it() {
    let nats = Nats::start();
    let js = nats.jetstream().await;
    let mut stream_config = async_nats::jetstream::stream::Config {
        name: "WEBHOOKS".into(),
        subjects: vec!["webhooks.>".into()],
        max_message_size: 4096,
        ..Default::default()
    };
    js.create_stream(stream_config.clone()).await.unwrap();
    let edge = Edge::start("", "").with_section(&format!(
        "backhaul:\n  sink: nats\n  nats: {{ servers: [\"{}\"], stream: WEBHOOKS }}\n  retry: {{ base: 50ms, max: 500ms }}\n",
        nats.url()
    ));
    let client = client(&edge, false);
    for id in ["too-big", "too-big-given-up"] {
        let big = format!(r#"{{"id":"{id}","pad":"{}"}}"#, "p".repeat(8192));
        let sent = github_post(&client, &edge, id, big.as_bytes()).send().await;
        assert_eq!(sent.unwrap().status(), 202);
    }
    let after = post_all(&edge, ids("after", 20)).await;
    assert_eq!(after.len(), 20);
    assert_eq!(wait_for_count(&nats, 20, Duration::from_secs(10)).await, 20);
    let started = Instant::now();
    while edge.metric("edge_backhaul_dead_letters_total") < 2.0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            edge.metrics()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let started = Instant::now();
    while edge.metric("edge_backhaul_lag_records") > 0.0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            edge.metrics()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let spool = edge.spool_dir().to_str().unwrap().to_owned();
    let listed = dead_letter(&["list", "--dir", &spool]);
    assert!(listed.status.success(), "{listed:?}");
    let letters: Vec<serde_json::Value> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(letters.len(), 2, "{letters:?}");
    let seq_of = |id: &str| {
        let letter = letters.iter().find(|l| l["delivery_id"] == id).unwrap();
        letter["seq"].as_u64().unwrap().to_string()
    };
    let (retried, given_up) = (seq_of("too-big"), seq_of("too-big-given-up"));
    let shown = dead_letter(&["show", "--dir", &spool, &retried]);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains(r#"\"id\":\"too-big\""#),
        "{shown:?}"
    );
    let unnamed = dead_letter(&["retry", "--dir", &spool]);
    assert!(
        !unnamed.status.success() && String::from_utf8_lossy(&unnamed.stderr).contains("--all"),
        "retry with no selection acts on nothing: {unnamed:?}"
    );

    stream_config.max_message_size = 64 << 10;
    js.update_stream(&stream_config).await.unwrap();
    let queued = dead_letter(&["retry", "--dir", &spool, &retried]);
    assert!(queued.status.success(), "{queued:?}");
    assert!(
        String::from_utf8_lossy(&queued.stderr).contains("the edge running on this spool"),
        "{queued:?}"
    );
    let purged = dead_letter(&["purge", "--dir", &spool, &given_up]);
    assert!(purged.status.success(), "{purged:?}");
    assert_eq!(wait_for_count(&nats, 21, Duration::from_secs(10)).await, 21);
    let messages = stream_messages(&nats).await;
    assert!(messages.contains_key("too-big"), "{:?}", messages.keys());
    assert!(!messages.contains_key("too-big-given-up"));
    assert_eq!(edge.metric("edge_spool_dead_letters_resent_total"), 1.0);
    let left = dead_letter(&["list", "--dir", &spool]);
    assert!(left.stdout.is_empty(), "{left:?}");
    // Sent again under the same origin key: JetStream drops a second retry's copy.
    assert_eq!(edge.metric("edge_backhaul_dead_letters_total"), 2.0);
}

/// An operator pauses the backhaul (`edge backhaul pause`): the PoP keeps storing and
/// acknowledging, stays ready, and delivers nothing until `resume`; then the backlog goes
/// out at `backhaul.max_rate`, not as fast as the origin takes it. A pause `--for` a
/// while ends by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_backhaul_holds_deliveries_and_a_resumed_one_keeps_its_pace() {
    let nats = Nats::start();
    let edge =
        Edge::start("", "").with_section(&format!("{}  max_rate: 50\n", backhaul_config(&nats)));
    let spool = edge.spool_dir().to_str().unwrap().to_owned();
    let paused = backhaul(&["pause", "--dir", &spool, "--reason", "origin deploy"]);
    assert!(paused.status.success(), "{paused:?}");
    let started = Instant::now();
    while edge.metric("edge_backhaul_paused") < 1.0 {
        assert!(started.elapsed() < Duration::from_secs(3), "never paused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(post_all(&edge, ids("held", 60)).await.len(), 60);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(wait_for_count(&nats, 1, Duration::ZERO).await, 0);
    assert_eq!(edge.readyz(), Some(200), "a pause is not a PoP failure");
    let status: serde_json::Value =
        serde_json::from_slice(&backhaul(&["status", "--dir", &spool]).stdout).unwrap();
    assert_eq!(
        (
            &status["paused"],
            &status["edge_running"],
            &status["reason"]
        ),
        (&true.into(), &true.into(), &"origin deploy".into()),
        "{status}"
    );

    assert!(backhaul(&["resume", "--dir", &spool]).status.success());
    assert!(wait_for_count(&nats, 1, Duration::from_secs(3)).await >= 1);
    let first_arrived = Instant::now();
    assert_eq!(wait_for_count(&nats, 60, Duration::from_secs(10)).await, 60);
    let drained_in = first_arrived.elapsed();
    // 59 more at 50/s, less a tenth of a second's burst: over a second.
    assert!(
        drained_in >= Duration::from_millis(900),
        "60 held events at 50/s went out in {drained_in:?}"
    );
    assert_eq!(edge.metric("edge_backhaul_paused"), 0.0);

    let timed = backhaul(&["pause", "--dir", &spool, "--for", "2s"]);
    assert!(timed.status.success(), "{timed:?}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(post_all(&edge, ids("timed", 5)).await.len(), 5);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        wait_for_count(&nats, 61, Duration::ZERO).await,
        60,
        "still paused"
    );
    assert_eq!(wait_for_count(&nats, 65, Duration::from_secs(5)).await, 65);
    println!(
        "backhaul pause: 60 events held 1.5 s, the last delivered {drained_in:?} after the first at max_rate 50/s"
    );
}

/// The origin lost a time range (its stream purged): `edge replay` on the PoP, which
/// keeps delivered segments (`spool.retain_delivered`), counts the range first (dry run,
/// a narrower id prefix), then sends exactly that range again, marked `Edge-Replay:
/// true`; what came after the range is not sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_range_the_origin_lost_is_replayed_and_the_counts_match() {
    let nats = Nats::start();
    let js = nats.jetstream().await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "WEBHOOKS".into(),
        subjects: vec!["webhooks.>".into()],
        duplicate_window: Duration::from_secs(1),
        ..Default::default()
    })
    .await
    .unwrap();
    let edge = Edge::start("  segment_bytes: 1MiB\n  retain_delivered: 1h\n", "").with_section(
        &format!(
            "backhaul:\n  sink: nats\n  nats: {{ servers: [\"{}\"], stream: WEBHOOKS }}\n  retry: {{ base: 50ms, max: 500ms }}\n",
            nats.url()
        ),
    );
    let since = std::time::SystemTime::now();
    // 16 KB each: more than a segment, so delivered segments are retained.
    let lost = post_padded(&edge, ids("lost", 80)).await;
    assert!(lost.iter().all(|(_, status, _)| *status == 202), "{lost:?}");
    assert_eq!(wait_for_count(&nats, 80, Duration::from_secs(10)).await, 80);
    let until = std::time::SystemTime::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(post_all(&edge, ids("kept", 20)).await.len(), 20);
    assert_eq!(
        wait_for_count(&nats, 100, Duration::from_secs(10)).await,
        100
    );
    let stream = js.get_stream("WEBHOOKS").await.unwrap();
    stream.purge().sequence(81).await.unwrap();
    assert_eq!(wait_for_count(&nats, 21, Duration::ZERO).await, 20);
    // The checkpoint (every 100 ms) passes what the origin acknowledged; then the
    // delivered segments are retained.
    let started = Instant::now();
    while edge.metric("edge_spool_backlog_records") > 0.0
        || edge.metric("edge_spool_retained_bytes") < 1e6
    {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{}",
            edge.metrics()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Past the origin's de-duplication window, as a real replay (of yesterday) is.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let spool = edge.spool_dir().to_str().unwrap().to_owned();
    let format = |at| humantime_serde::re::humantime::format_rfc3339_millis(at).to_string();
    let (since, until) = (format(since), format(until));
    let range = ["--dir", &spool, "--since", &since, "--until", &until];
    let counted = |extra: &[&str]| {
        let out = edge_command("replay", &[&range[..], extra].concat());
        assert!(out.status.success(), "{out:?}");
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        line
    };
    let dry = counted(&["--dry-run", "--route", "hooks_github"]);
    assert_eq!(
        (&dry["events"], &dry["files"]),
        (&80.into(), &serde_json::json!([])),
        "{dry}"
    );
    assert_eq!(
        counted(&["--dry-run", "--id-prefix", "lost-0001"])["events"],
        10
    );
    assert_eq!(counted(&["--dry-run", "--route", "stripe"])["events"], 0);
    let sent = counted(&["--route", "hooks_github"]);
    assert_eq!(
        (&sent["events"], &sent["edge_running"]),
        (&80.into(), &true.into()),
        "{sent}"
    );

    assert_eq!(
        wait_for_count(&nats, 100, Duration::from_secs(10)).await,
        100
    );
    let messages = stream_messages(&nats).await;
    for id in ids("lost", 80) {
        let (body, headers) = &messages[&id];
        let start = format!(r#"{{"delivery":"{id}","pad":"ffff"#);
        assert!(
            body.starts_with(start.as_bytes()) && body.len() > 16_000,
            "{id}"
        );
        assert_eq!(
            headers.get("Edge-Replay").map(|v| v.as_str()),
            Some("true"),
            "{id}"
        );
    }
    for id in ids("kept", 20) {
        assert!(messages[&id].1.get("Edge-Replay").is_none(), "{id}");
    }
    assert_eq!(edge.metric("edge_spool_replayed_total"), 80.0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        wait_for_count(&nats, 101, Duration::ZERO).await,
        100,
        "nothing more"
    );
    println!("replay: 80 of 100 delivered events purged at the origin, 80 counted and replayed");
}

/// Runs `edge dead-letter ARGS`.
fn dead_letter(args: &[&str]) -> std::process::Output {
    edge_command("dead-letter", args)
}

/// Runs `edge backhaul ARGS`.
fn backhaul(args: &[&str]) -> std::process::Output {
    edge_command("backhaul", args)
}

fn edge_command(command: &str, args: &[&str]) -> std::process::Output {
    Command::new(edge_bin())
        .arg(command)
        .args(args)
        .output()
        .unwrap()
}

/// A stream deleted at the origin while the edge runs: with `create: true` the next
/// publish that finds no stream makes the edge look for it again and make it, and
/// delivery goes on (the sink once remembered "stream exists" for its whole life).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_deleted_at_the_origin_is_made_again() {
    let nats = Nats::start();
    let edge = Edge::start("", "").with_section(&backhaul_config(&nats));
    assert_eq!(post_all(&edge, ids("before", 10)).await.len(), 10);
    assert_eq!(wait_for_count(&nats, 10, Duration::from_secs(10)).await, 10);
    let js = nats.jetstream().await;
    js.delete_stream("WEBHOOKS").await.unwrap();
    let after = post_all(&edge, ids("after-delete", 10)).await;
    assert_eq!(after.len(), 10);
    assert_eq!(wait_for_count(&nats, 10, Duration::from_secs(10)).await, 10);
    let in_stream = stream_messages(&nats).await;
    assert!(
        after.iter().all(|id| in_stream.contains_key(id)),
        "{:?}",
        in_stream.keys()
    );
}

/// The spool's filesystem fills up (a 12 MiB tmpfs made here, the origin down): appends
/// get 503 + Retry-After and /readyz fails; nothing acknowledged is lost or torn; once
/// the origin is back the backhaul delivers, segments are deleted, and the edge takes
/// events again by itself.
/// A disk whose fsync does not return (here: 3 s of `sync_delay`) fails /readyz once
/// `stall_timeout` has passed, so the agent withdraws the PoP; once the fsync returns the
/// waiting webhook is acknowledged and the PoP is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_disk_fails_readiness_until_it_answers() {
    let edge = Edge::start(
        "  sync_delay: 3s
  stall_timeout: 500ms
",
        "",
    );
    let client = client(&edge, false);
    let id = "stalled-1";
    let request = github_post(&client, &edge, id, body_for(id).as_bytes());
    let sent = Instant::now();
    let waiting = tokio::spawn(async move { request.send().await.map(|r| r.status()) });
    while edge.readyz() != Some(503) {
        assert!(
            sent.elapsed() < Duration::from_millis(2500),
            "/readyz still ready with an fsync waiting"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unready_after = sent.elapsed();
    let (_, why) = admin_get(edge.admin_port, "/readyz").unwrap();
    assert!(why.contains("spool disk stalled"), "{why}");
    assert_eq!(waiting.await.unwrap().unwrap(), 202);
    assert_eq!(
        edge.readyz(),
        Some(200),
        "ready again once the fsync returned"
    );
    println!(
        "stalled disk: /readyz failed {unready_after:?} after the request (stall_timeout 500ms), 202 after {:?}",
        sent.elapsed()
    );
}

/// systemd's side of a stalled disk, through a notify socket made here as systemd makes
/// one: the edge says READY=1 once it serves, pings WATCHDOG=1 several times per
/// `WatchdogSec` while it makes progress, stops while an fsync has not returned past
/// `stall_timeout` (systemd would restart it if that lasted), and pings again once the
/// fsync returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_disk_stops_the_watchdog_pings_until_it_answers() {
    let notify_dir = tempfile::tempdir().unwrap();
    let notify_path = notify_dir.path().join("notify");
    let socket = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    let started = Instant::now();
    let (messages_tx, messages) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok(n) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            if messages_tx.send((started.elapsed(), text)).is_err() {
                return;
            }
        }
    });
    let mut edge = Edge::create("  sync_delay: 4s\n  stall_timeout: 500ms\n", "");
    edge.set_env("NOTIFY_SOCKET", notify_path.to_str().unwrap());
    edge.set_env("WATCHDOG_USEC", "2000000");
    edge.spawn();
    let next = |within: Duration| messages.recv_timeout(within).ok();
    let (_, first) = next(Duration::from_secs(5)).expect("a notification");
    assert!(first.contains("READY=1"), "the first notification: {first}");
    let mut pings = Vec::new();
    while pings.len() < 3 {
        let (at, text) = next(Duration::from_secs(2)).expect("a ping while idle");
        assert!(text.contains("WATCHDOG=1"), "{text}");
        pings.push(at);
    }
    let healthy_gap = gaps(&pings).max().unwrap();
    assert!(
        healthy_gap <= Duration::from_millis(1500),
        "idle pings {healthy_gap:?} apart"
    );

    let client = client(&edge, false);
    let id = "watchdog-stall-1";
    let request = github_post(&client, &edge, id, body_for(id).as_bytes());
    let sent = started.elapsed();
    let status = request.send().await.unwrap().status();
    let done = started.elapsed();
    assert_eq!(status, 202);
    let mut during = vec![sent];
    while let Some((at, text)) = next(Duration::from_secs(3)) {
        if text.contains("WATCHDOG=1") && at > sent {
            during.push(at);
        }
        if at > done + Duration::from_secs(1) {
            break;
        }
    }
    let stalled_gap = gaps(&during).max().unwrap();
    assert!(
        stalled_gap >= Duration::from_millis(2500),
        "pings went on while the fsync waited 4s: largest gap {stalled_gap:?} (request {sent:?}..{done:?}, pings {during:?})"
    );
    assert!(
        during.iter().any(|at| *at > done),
        "no ping after the fsync returned: {during:?}, done {done:?}"
    );
    assert!(
        edge.log_text().contains("the edge is hung"),
        "the stall is logged: {}",
        edge.log_text()
    );
    println!(
        "watchdog: idle pings at most {healthy_gap:?} apart (WatchdogSec 2s); none for {stalled_gap:?} while an fsync waited 4s (stall_timeout 500ms); pings again once it returned"
    );
}

fn gaps(times: &[Duration]) -> impl Iterator<Item = Duration> + '_ {
    times.windows(2).map(|pair| pair[1] - pair[0])
}

/// While the disk is slow, bodies waiting for the writer are bounded: past
/// `spool.max_queued_bytes` the next request gets 503 + Retry-After before its body is
/// read; the waiting ones are acknowledged once the fsync returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_disk_bounds_the_bodies_waiting_for_it() {
    let big_route = format!(
        "  - path: /hooks/big\n    provider: github\n    secrets: [\"{GITHUB_SECRET}\"]\n    max_body: 1MiB\n"
    );
    let edge = Edge::start("  sync_delay: 2s\n  max_queued_bytes: 1MiB\n", &big_route);
    let client = client(&edge, false);
    let big = |id: &str| {
        let body = format!(r#"{{"delivery":"{id}","pad":"{}"}}"#, "q".repeat(700_000));
        signed_github(client.post(edge.url("/hooks/big")), id, body.as_bytes())
    };
    let waiting: Vec<_> = ["queued-1", "queued-2"]
        .into_iter()
        .map(|id| {
            let request = big(id);
            tokio::spawn(async move { request.send().await.map(|r| r.status()) })
        })
        .collect();
    // Both bodies are in (1.4 MB over loopback) and waiting for the writer.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let refused = big("over").send().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    assert!(refused.text().await.unwrap().contains("spool_queue"));
    for request in waiting {
        assert_eq!(request.await.unwrap().unwrap(), 202);
    }
    let metrics = edge.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("webhook_ingress_shed_total")
                && l.contains(r#"reason="spool_queue""#)
                && l.ends_with(" 1")),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("shed"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(big("after").send().await.unwrap().status(), 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_disk_answers_503_and_recovers_by_itself() {
    full_spool_disk(false).await;
}

/// The same with preallocated segments: the spare that finds no room is given up, the
/// writer falls back to growing segments, and the reader crosses both kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_disk_with_preallocated_segments_answers_503_and_recovers_by_itself() {
    full_spool_disk(true).await;
}

async fn full_spool_disk(preallocate: bool) {
    testkit::require_root!("mounting a filesystem");
    let mut nats = Nats::start();
    let mut edge = Edge::start(
        &format!("  segment_bytes: 1MiB\n  max_bytes: 1GiB\n  preallocate: {preallocate}\n"),
        "",
    );
    edge.kill9();
    let _disk = Tmpfs::mount(&edge.spool_dir(), "12m");
    let mut edge = edge.with_section(&backhaul_config(&nats));
    nats.stop();

    let mut acked = Vec::new();
    let mut refused = Vec::new();
    for round in 0..40 {
        let answers = post_padded(&edge, ids(&format!("fill{round}"), 50)).await;
        for (id, status, retry_after) in answers {
            match status {
                202 => acked.push(id),
                503 => refused.push((id, retry_after)),
                other => panic!("{id}: {other} while filling the disk"),
            }
        }
        if refused.len() >= 50 {
            break;
        }
    }
    assert!(refused.len() >= 50, "the 12 MiB disk never filled");
    assert!(
        acked.len() > 100,
        "only {} acked before the disk filled",
        acked.len()
    );
    assert!(
        refused.iter().all(|(_, retry)| retry.is_some()),
        "503 without Retry-After"
    );
    assert_eq!(
        edge.readyz(),
        Some(503),
        "a full spool disk must fail /readyz"
    );
    let (_, why) = admin_get(edge.admin_port, "/readyz").unwrap();
    assert!(why.contains("spool disk full"), "{why}");
    assert!(edge.metric(r#"edge_spool_appends_total{pop="test",reason="disk_full"}"#) >= 50.0);
    let preallocated_rolls =
        edge.metric(r#"edge_spool_rolls_total{pop="test",reason="preallocated"}"#);
    let grown_rolls = edge.metric(r#"edge_spool_rolls_total{pop="test",reason="grown"}"#);
    assert_eq!(
        preallocated_rolls > 0.0,
        preallocate,
        "{preallocated_rolls}"
    );

    // What is on disk is exactly what was acknowledged: nothing torn, nothing extra.
    let on_disk: HashSet<String> = edge::spool::dump(&edge.spool_dir())
        .unwrap()
        .into_iter()
        .map(|r| edge::event::id_of_key(&r.event_id).to_owned())
        .collect();
    assert_eq!(on_disk, acked.iter().cloned().collect::<HashSet<_>>());

    // The origin returns: delivery frees the disk and the edge recovers on its own.
    nats.spawn();
    assert_eq!(
        wait_for_count(&nats, acked.len() as u64, Duration::from_secs(60)).await,
        acked.len() as u64
    );
    let started = Instant::now();
    while edge.readyz() != Some(200) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "still not ready after delivery freed the disk"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = post_padded(&edge, ids("after", 50)).await;
    assert!(
        after.iter().all(|(_, status, _)| *status == 202),
        "{after:?}"
    );
    let expected = acked.len() as u64 + 50;
    assert_eq!(
        wait_for_count(&nats, expected, Duration::from_secs(30)).await,
        expected
    );
    let messages = stream_messages(&nats).await;
    for id in acked.iter().chain(after.iter().map(|(id, _, _)| id)) {
        assert!(
            messages.contains_key(id),
            "{id} acknowledged but not at the origin"
        );
    }

    // A restart finds no torn tail to cut.
    edge.kill9();
    edge.spawn();
    assert!(
        !edge.log_text().contains("spool recovery cut"),
        "{}",
        edge.log_text()
    );
    println!(
        "full disk (preallocate: {preallocate}; rolls: {preallocated_rolls} preallocated, {grown_rolls} grown): {} acked, then {} refused with 503 + Retry-After; all delivered and ready again {} ms after the origin returned",
        acked.len(),
        refused.len(),
        started.elapsed().as_millis()
    );
}

/// Posts each id with a 16 KiB body; (id, status, Retry-After).
async fn post_padded(edge: &Edge, ids: Vec<String>) -> Vec<(String, u16, Option<String>)> {
    let client = client(edge, false);
    let mut tasks = tokio::task::JoinSet::new();
    for id in ids {
        let body = format!(r#"{{"delivery":"{id}","pad":"{}"}}"#, "f".repeat(16_000));
        let request = github_post(&client, edge, &id, body.as_bytes());
        tasks.spawn(async move {
            let response = request.send().await.unwrap();
            let retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            (id, response.status().as_u16(), retry_after)
        });
    }
    let mut answers = Vec::new();
    while let Some(answer) = tasks.join_next().await {
        answers.push(answer.unwrap());
    }
    answers
}

/// Low-priority GitHub deliveries shed on a slow disk are kept in the shed ledger with
/// the delivery ids they claimed (listed by `edge shed-ledger`), unverified, and reach
/// the origin on their own subject so a job there can ask GitHub to redeliver them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shed_deliveries_are_in_the_ledger_and_reach_the_origin() {
    let nats = Nats::start();
    let bulk = "  - path: /hooks/bulk\n    provider: github\n    secrets: [\"gh-secret\"]\n    priority: low\n";
    let edge = Edge::start("  sync_delay: 30ms\n", bulk).with_section(&format!(
        "{}admission: {{ initial_limit: 2, min_limit: 1, max_limit: 2 }}\n",
        backhaul_config(&nats)
    ));
    let client = client(&edge, false);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let id = format!("bulk-{i}");
        let request = signed_github(
            client.post(edge.url("/hooks/bulk")),
            &id,
            body_for(&id).as_bytes(),
        );
        tasks.spawn(async move { (id, request.send().await.unwrap().status().as_u16()) });
    }
    let mut shed = HashSet::new();
    while let Some(answer) = tasks.join_next().await {
        let (id, status) = answer.unwrap();
        if status == 503 {
            shed.insert(id);
        }
    }
    assert!(shed.len() >= 10, "only {} of 40 shed", shed.len());

    let started = Instant::now();
    let listed = loop {
        let out = Command::new(edge_bin())
            .args(["shed-ledger", "--dir"])
            .arg(edge.spool_dir())
            .output()
            .unwrap();
        let entries: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let ids: HashSet<String> = entries
            .iter()
            .map(|e| e["claimed_id"].as_str().unwrap().to_owned())
            .collect();
        if ids.is_superset(&shed) || started.elapsed() > Duration::from_secs(5) {
            assert!(entries.iter().all(|e| e["verified"] == false
                && e["status"] == 503
                && e["route"] == "hooks_bulk"));
            break ids;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        listed.is_superset(&shed),
        "ledger {listed:?} lacks some of {shed:?}"
    );

    let started = Instant::now();
    loop {
        let at_origin: HashSet<String> = stream_messages(&nats)
            .await
            .into_iter()
            .filter(|(id, _)| id.starts_with("shed-"))
            .map(|(_, (payload, _))| {
                let entry: serde_json::Value = serde_json::from_slice(&payload).unwrap();
                entry["claimed_id"].as_str().unwrap().to_owned()
            })
            .collect();
        if at_origin.is_superset(&shed) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "shed ids at the origin: {at_origin:?}, shed: {shed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
