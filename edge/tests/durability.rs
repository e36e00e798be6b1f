//! Durability past kill -9: the spool on a file system that forgets what was not synced
//! (`lab/powercut`, FUSE: a power cut at chosen operations, torn writes, fsyncs that fail
//! with EIO), and on a disk that returns damaged bytes, with a real JetStream origin.
//!
//! - Power cuts: 50 seeded cut points under 200 concurrent senders (inside segment
//!   writes, rolls, checkpoint writes, deletions after delivery, directory syncs), each
//!   followed by a restart on what survived: every event answered 2xx is in the spool or
//!   at the origin, none is at the origin twice, the edge is ready within 5 s, and
//!   `edge spool-verify` finds no damage (a torn write is an unfinished one, never
//!   acknowledged, not a damaged record).
//! - EIO on fsync: the batch is answered 503, the edge stops, and its restart has every
//!   event acknowledged before.
//! - A sealed segment whose every read fails (EIO, a bad sector): given up after a few
//!   attempts, its records named lost and counted, every other record delivered, the
//!   file in quarantine.
//! - Bit rot: 200 flipped bytes and 50 zeroed 4 KiB blocks over the sealed and active
//!   segments of 600 records: every record the damage did not touch reaches the origin, nothing is
//!   deleted, new events go through within 5 s, `edge spool-verify` names exactly the
//!   damaged records.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use powercut::{Op, PowerCut, Trigger};
use testkit::edge::nats::Nats;
use testkit::edge::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_at_seeded_points_lose_no_acknowledged_event() {
    let mut rig = Rig::new(false).await;
    let mut rng = Rng(CAMPAIGN_SEED);
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut fired = HashMap::<&str, u32>::new();
    let mut slowest_ready = Duration::ZERO;
    let mut torn_tails = 0;
    for cut in 0..CUTS {
        let (label, trigger) = pick_trigger(&mut rng);
        rig.fs.arm(trigger);
        let triggered = load_until_cut(&rig, &acked, cut).await;
        if triggered {
            *fired.entry(label).or_default() += 1;
        }
        rig.edge.kill9();
        let tear = rng.next().is_multiple_of(2).then(|| rng.next());
        rig.fs.cut(tear);
        // A torn write was never acknowledged (an ack follows the batch's fdatasync):
        // told apart from damage, it is no finding.
        let verify = std::process::Command::new(edge_bin())
            .args(["spool-verify", "--dir"])
            .arg(rig.edge.spool_dir())
            .output()
            .unwrap();
        assert!(
            verify.status.success(),
            "cut {cut} (tear {tear:?}): spool-verify found damage: {}",
            String::from_utf8_lossy(&verify.stdout)
        );
        torn_tails += usize::from(String::from_utf8_lossy(&verify.stdout).contains("open_tail"));
        let started = Instant::now();
        rig.edge.spawn();
        let ready = started.elapsed();
        slowest_ready = slowest_ready.max(ready);
        assert!(
            ready < Duration::from_secs(5),
            "cut {cut}: ready after {ready:?}"
        );
        let acked_so_far = acked.lock().unwrap().clone();
        rig.assert_every_ack_kept(&acked_so_far, cut).await;
    }
    let acked = acked.lock().unwrap().clone();
    rig.assert_all_delivered_once(&acked).await;
    println!(
        "durability power-cut: {CUTS} cuts ({fired:?} at their trigger, the rest mid-load), {} events acknowledged, all in the spool or at the origin after every cut, each at the origin once; {torn_tails} torn tails, each told apart from damage (spool-verify clean); slowest restart to ready {slowest_ready:?}",
        acked.len()
    );
    assert!(fired.values().sum::<u32>() >= CUTS / 2, "{fired:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_is_answered_503_and_the_edge_restarts_from_the_disk() {
    let mut rig = Rig::new(true).await;
    let client = client(&rig.edge, false);
    let mut before = Vec::new();
    for i in 0..50 {
        let id = format!("before-eio-{i}");
        let sent = github_post(&client, &rig.edge, &id, &delivery_body(&id))
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), 202);
        before.push(id);
    }
    rig.fs.fail_fsyncs(1);
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..20 {
        let request = github_post(
            &client,
            &rig.edge,
            &format!("during-eio-{i}"),
            &delivery_body(&format!("during-eio-{i}")),
        );
        burst.spawn(async move { request.send().await.map(|r| r.status().as_u16()) });
    }
    let mut statuses = Vec::new();
    while let Some(sent) = burst.join_next().await {
        statuses.push(sent.unwrap().unwrap_or(0));
    }
    assert!(statuses.iter().all(|s| *s != 202), "{statuses:?}");
    assert!(statuses.contains(&503), "{statuses:?}");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = rig.edge.child.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the edge did not stop"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!status.success(), "{status}");
    assert!(
        rig.edge
            .log_text()
            .contains("spool failed a write or fsync")
    );
    rig.edge.child = None;
    rig.edge.spawn();
    rig.assert_every_ack_kept(&before, 0).await;
    println!(
        "durability fsync-eio: 20 requests during a failed fsync: {} answered 503, none 202; the edge stopped ({status}) and came back with all 50 acknowledged before",
        statuses.iter().filter(|s| **s == 503).count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bit_rot_costs_only_the_damaged_records_and_never_stalls_delivery() {
    let mut nats = Nats::start();
    nats.stop();
    let mut edge = Edge::create("  segment_bytes: 1MiB\n  preallocate: true\n", "");
    edge.edit_config(|text| format!("{text}{}", backhaul(&nats)));
    edge.spawn();
    let client = client(&edge, false);
    let ids = post_stored(&client, &edge, "rot", ROT_EVENTS, |i| 10_000 + i * 7 % 900).await;
    edge.kill9();

    let segments = segment_files(&edge.spool_dir());
    let original: Vec<Vec<u8>> = segments.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let mut rng = Rng(ROT_SEED);
    let mut damaged = original.clone();
    for _ in 0..200 {
        let file = &mut damaged[rng.next() as usize % segments.len()];
        let end = written_len(file);
        let at = rng.next() as usize % end;
        file[at] ^= 1 << (rng.next() % 8);
    }
    for _ in 0..50 {
        let file = &mut damaged[rng.next() as usize % segments.len()];
        let blocks = written_len(file).div_ceil(4096);
        let at = (rng.next() as usize % blocks) * 4096;
        let end = (at + 4096).min(file.len());
        file[at..end].fill(0);
    }
    for (path, bytes) in segments.iter().zip(&damaged) {
        std::fs::write(path, bytes).unwrap();
    }
    let touched = touched_records(&original, &damaged);
    let (reported, unreadable) = spool_verify(&edge.spool_dir(), *ids.keys().max().unwrap());
    // A segment whose header and all but one of its frames are damaged cannot tell its
    // seed from a damaged frame's: it goes to quarantine whole, its intact records too.
    let quarantined_whole = records_of(&segments, &original, &unreadable);
    let lost: BTreeSet<u64> = touched.union(&quarantined_whole).copied().collect();
    assert_eq!(
        reported, lost,
        "spool-verify names exactly the damaged records"
    );

    nats.spawn();
    edge.spawn();
    let intact: BTreeSet<&String> = ids
        .iter()
        .filter(|(seq, _)| !lost.contains(seq))
        .map(|(_, id)| id)
        .collect();
    // New events may land in a damaged segment, and go to quarantine with it.
    let after_ids = post_stored(&client, &edge, "after-rot", 20, |_| 100).await;
    let started = Instant::now();
    let at_origin = wait_until_at_origin(&nats, after_ids.values(), Duration::from_secs(5)).await;
    let new_delivered_in = started.elapsed();
    let at_origin = wait_until_at_origin(&nats, intact.iter().copied(), Duration::from_secs(30))
        .await
        .union(&at_origin)
        .cloned()
        .collect::<HashSet<String>>();
    for (seq, id) in &ids {
        assert_eq!(
            at_origin.contains(id),
            !lost.contains(seq),
            "{id} (seq {seq})"
        );
    }
    // Segments move to quarantine as the checkpoint (every 100 ms) passes them: let it
    // pass everything before counting files.
    let settled = Instant::now();
    while edge.metric("edge_spool_backlog_records") > 0.0 {
        assert!(
            settled.elapsed() < Duration::from_secs(5),
            "{}",
            edge.metrics()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kept = segments
        .iter()
        .filter(|path| {
            path.exists()
                || edge
                    .spool_dir()
                    .join("quarantine")
                    .join(path.file_name().unwrap())
                    .exists()
        })
        .count();
    let metrics = edge.metrics();
    println!(
        "durability bit-rot: {ROT_EVENTS} records in {} segments, 200 flipped bytes and 50 zeroed 4 KiB blocks: {} records touched and {} intact ones quarantined with their segment, named by spool-verify; the other {} at the origin; 20 new events delivered {new_delivered_in:?} after the restart; {kept} of {} segment files kept (spool or quarantine); edge_spool_damaged_records_total {}",
        segments.len(),
        touched.len(),
        quarantined_whole.difference(&touched).count(),
        intact.len(),
        segments.len(),
        metric_value(&metrics, "edge_spool_damaged_records_total"),
    );
    assert!(new_delivered_in < Duration::from_secs(5));
    assert_eq!(
        kept,
        segments.len(),
        "nothing deleted that held undelivered records"
    );
    let sent: HashMap<u64, String> = ids.into_iter().chain(after_ids).collect();
    quarantine_tells_only_the_truth(&edge.spool_dir(), &sent, &touched);
}

/// `edge quarantine list` names every kept file, and each record `edge quarantine
/// export` gives is one a sender sent (`sent`: by sequence number), untouched by the
/// damage.
fn quarantine_tells_only_the_truth(
    spool: &Path,
    sent: &HashMap<u64, String>,
    touched: &BTreeSet<u64>,
) {
    let kept_files = std::fs::read_dir(spool.join("quarantine")).map_or(0, |dir| {
        dir.map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_none_or(|x| x != "why"))
            .count()
    });
    assert_eq!(edge_json_lines(spool, "list").len(), kept_files);
    let exported = edge_json_lines(spool, "export");
    for record in &exported {
        let seq = record["seq"].as_u64().unwrap();
        assert!(!touched.contains(&seq), "{record}");
        let id = &sent[&seq];
        assert_eq!(record["delivery_id"], id.as_str(), "{record}");
        let n: u64 = id.rsplit('-').next().unwrap().parse().unwrap();
        let body: serde_json::Value =
            serde_json::from_str(record["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["n"], n, "{record}");
    }
    println!(
        "durability bit-rot: quarantine holds {kept_files} files; edge quarantine export gave {} whole records, each as sent",
        exported.len()
    );
}

/// The JSON lines `edge quarantine ACTION --dir SPOOL` prints.
fn edge_json_lines(spool: &Path, action: &str) -> Vec<serde_json::Value> {
    let out = std::process::Command::new(edge_bin())
        .args(["quarantine", action, "--dir"])
        .arg(spool)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A sealed segment the disk will not read while the edge runs (every read of it EIO, as
/// under a bad sector): the backhaul retries, then gives it up. Its records are lost,
/// counted and logged; every other record reaches the origin, the ones after it too; and
/// once delivery passes it the file goes to quarantine, not away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_segment_costs_only_its_records_and_delivery_goes_on() {
    let mut nats = Nats::start();
    nats.stop();
    let dirs = tempfile::tempdir().unwrap();
    let (backing, mount) = (dirs.path().join("backing"), dirs.path().join("mnt"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mount).unwrap();
    let fs = PowerCut::mount(&backing, &mount).expect("FUSE mount (lab/setup.sh installs fuse3)");
    let mut edge = Edge::create("  segment_bytes: 1MiB\n  preallocate: false\n", "");
    edge.move_spool(&mount.join("spool"));
    // Two deliveries in flight, waiting for the origin: the reader stops there, so the
    // later records are read from the disk once the origin is back.
    edge.edit_config(|text| format!("{text}{}  max_in_flight: 2\n", backhaul(&nats)));
    edge.spawn();
    let client = client(&edge, false);
    let ids = post_stored(&client, &edge, "eio", 50, |_| 60_000).await;
    let segments = segment_files(&edge.spool_dir());
    assert!(
        segments.len() >= 3,
        "a sealed segment between two: {segments:?}"
    );
    let first_of = |path: &std::path::PathBuf| -> u64 {
        path.file_stem().unwrap().to_str().unwrap().parse().unwrap()
    };
    let bad_name = segments[1]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let bad = first_of(&segments[1])..first_of(&segments[2]);
    fs.fail_reads(Some(&bad_name));
    nats.spawn();

    let intact: Vec<&String> = ids
        .iter()
        .filter(|(seq, _)| !bad.contains(seq))
        .map(|(_, id)| id)
        .collect();
    let started = Instant::now();
    let at_origin =
        wait_until_at_origin(&nats, intact.iter().copied(), Duration::from_secs(30)).await;
    let delivered_in = started.elapsed();
    for (seq, id) in &ids {
        assert_eq!(
            at_origin.contains(id),
            !bad.contains(seq),
            "{id} (seq {seq}; unreadable segment {bad:?})"
        );
    }
    let quarantined = edge.spool_dir().join("quarantine").join(&bad_name);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !quarantined.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let damaged = metric_value(&edge.metrics(), "edge_spool_damaged_records_total");
    fs.fail_reads(None);
    assert!(
        quarantined.exists(),
        "the unreadable segment is kept in quarantine: {:?}",
        std::fs::read_dir(edge.spool_dir())
            .unwrap()
            .collect::<Vec<_>>()
    );
    assert_eq!(
        damaged as u64,
        bad.end - bad.start,
        "its records counted lost"
    );
    assert!(
        edge.log_text().contains("spool segment unreadable"),
        "{}",
        edge.log_text()
    );
    println!(
        "durability unreadable-segment: 50 records in {} segments, every read of the second (seqs {bad:?}) EIO: given up after retries, {} records counted lost (edge_spool_damaged_records_total {damaged}), the other {} at the origin {delivered_in:?} after it came back, the segment in quarantine",
        segments.len(),
        bad.end - bad.start,
        intact.len(),
    );
}

/// A rolling upgrade: a segment the previous release wrote (`fixtures/spool-v1/`, three
/// GitHub events stored by the edge at 8adfbe3, format "EDGSPL01") is delivered by this
/// one, which appends after it in its own format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_the_previous_release_wrote_is_delivered() {
    let nats = Nats::start();
    let mut edge = Edge::create("", "");
    edge.edit_config(|text| format!("{text}{}", backhaul(&nats)));
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spool-v1");
    std::fs::create_dir_all(edge.spool_dir()).unwrap();
    for entry in std::fs::read_dir(&fixture).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, edge.spool_dir().join(path.file_name().unwrap())).unwrap();
    }
    edge.spawn();
    let client = client(&edge, false);
    let sent = github_post(
        &client,
        &edge,
        "after-upgrade",
        &delivery_body("after-upgrade"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(sent.status(), 202);
    let answer: serde_json::Value = sent.json().await.unwrap();
    assert_eq!(answer["seq"], 4, "numbered after the old segment's records");
    let expected: Vec<String> = [
        "v1-fixture-1",
        "v1-fixture-2",
        "v1-fixture-3",
        "after-upgrade",
    ]
    .map(String::from)
    .to_vec();
    let at_origin = wait_until_at_origin(&nats, expected.iter(), Duration::from_secs(10)).await;
    assert!(
        expected.iter().all(|id| at_origin.contains(id)),
        "{at_origin:?}"
    );
}

/// An edge whose spool is on a power-cut file system, backhauling to a real JetStream.
/// Fields drop in order: the edge stops before its file system is unmounted.
struct Rig {
    edge: Edge,
    fs: PowerCut,
    nats: Nats,
    _dirs: tempfile::TempDir,
}

impl Rig {
    /// `quiet`: no backhaul and no preallocation, so the only fsyncs are the writer's.
    async fn new(quiet: bool) -> Rig {
        let nats = Nats::start();
        let js = nats.jetstream().await;
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "WEBHOOKS".into(),
            subjects: vec!["webhooks.>".into()],
            duplicate_window: Duration::from_secs(1800),
            ..Default::default()
        })
        .await
        .unwrap();
        let dirs = tempfile::tempdir().unwrap();
        let (backing, mount) = (dirs.path().join("backing"), dirs.path().join("mnt"));
        std::fs::create_dir_all(&backing).unwrap();
        std::fs::create_dir_all(&mount).unwrap();
        let fs =
            PowerCut::mount(&backing, &mount).expect("FUSE mount (lab/setup.sh installs fuse3)");
        let spool = if quiet {
            "  segment_bytes: 1MiB\n  preallocate: false\n"
        } else {
            "  segment_bytes: 1MiB\n  preallocate: true\n"
        };
        let mut edge = Edge::create(spool, "");
        edge.move_spool(&mount.join("spool"));
        if !quiet {
            edge.edit_config(|text| format!("{text}{}", backhaul(&nats)));
        }
        edge.spawn();
        Rig {
            edge,
            fs,
            nats,
            _dirs: dirs,
        }
    }

    /// Every acknowledged event is in the spool (as the power cut left it) or at the
    /// origin, and none is at the origin twice.
    async fn assert_every_ack_kept(&self, acked: &[String], cut: u32) {
        let in_spool: HashSet<String> = edge::spool::dump(&self.edge.spool_dir())
            .unwrap()
            .into_iter()
            .map(|r| edge::event::id_of_key(&r.event_id).to_owned())
            .collect();
        let at_origin = origin_counts(&self.nats).await;
        let twice: Vec<_> = at_origin.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "cut {cut}: at the origin twice: {twice:?}"
        );
        let lost: Vec<&String> = acked
            .iter()
            .filter(|id| !in_spool.contains(*id) && !at_origin.contains_key(*id))
            .collect();
        assert!(
            lost.is_empty(),
            "cut {cut}: {} acknowledged events lost: {lost:?}",
            lost.len()
        );
    }

    /// Once the backhaul has caught up: every acknowledged event at the origin, once.
    async fn assert_all_delivered_once(&self, acked: &[String]) {
        let started = Instant::now();
        loop {
            let at_origin = origin_counts(&self.nats).await;
            let missing = acked
                .iter()
                .filter(|id| !at_origin.contains_key(*id))
                .count();
            if missing == 0 {
                assert!(at_origin.values().all(|n| *n == 1));
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{missing} acknowledged events never reached the origin"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Sends from 200 concurrent senders until the armed cut fires (or 3 s pass); returns
/// whether it fired. Acknowledged ids are added to `acked`.
async fn load_until_cut(rig: &Rig, acked: &Arc<Mutex<Vec<String>>>, cut: u32) -> bool {
    let clients = [client(&rig.edge, false), client(&rig.edge, true)];
    let url = rig.edge.url("/hooks/github");
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut senders = tokio::task::JoinSet::new();
    for sender in 0..SENDERS {
        let (client, url, acked) = (clients[sender % 2].clone(), url.clone(), Arc::clone(acked));
        senders.spawn(async move {
            for n in 0.. {
                if Instant::now() > deadline {
                    return;
                }
                let id = format!("cut{cut}-s{sender}-{n}");
                let body = format!(
                    r#"{{"cut":{cut},"sender":{sender},"n":{n},"pad":"{}"}}"#,
                    "p".repeat(n % 3 * 400)
                );
                let sent = signed_github(client.post(&url), &id, body.as_bytes())
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status() == 202 => acked.lock().unwrap().push(id),
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        });
    }
    let fired = loop {
        if rig.fs.fired() {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    senders.abort_all();
    while senders.join_next().await.is_some() {}
    fired
}

/// A cut point: an operation on the spool's files, at a seeded count.
fn pick_trigger(rng: &mut Rng) -> (&'static str, Trigger) {
    const CHOICES: &[(&str, Op, &str, u64)] = &[
        ("segment write", Op::Write, ".seg", 200),
        ("segment fsync", Op::Fsync, ".seg", 200),
        ("segment roll", Op::Rename, "next-segment", 3),
        ("segment create", Op::Create, "next-segment", 3),
        ("checkpoint write", Op::Rename, "checkpoint", 10),
        ("checkpoint fsync", Op::Fsync, "checkpoint", 10),
        ("deletion after delivery", Op::Unlink, ".seg", 3),
        ("directory sync", Op::FsyncDir, "", 20),
    ];
    let (label, op, name, most) = CHOICES[rng.next() as usize % CHOICES.len()];
    let trigger = Trigger {
        op,
        name_contains: name.to_owned(),
        nth: 1 + rng.next() % most,
    };
    (label, trigger)
}

/// Posts `count` GitHub events one after another, the `i`th padded to about `pad(i)`
/// bytes, each answered 202; returns their ids by the sequence number each is stored under.
async fn post_stored(
    client: &reqwest::Client,
    edge: &Edge,
    prefix: &str,
    count: usize,
    pad: impl Fn(usize) -> usize,
) -> HashMap<u64, String> {
    let mut ids = HashMap::new();
    for i in 0..count {
        let id = format!("{prefix}-{i:04}");
        let body = format!(r#"{{"n":{i},"pad":"{}"}}"#, "p".repeat(pad(i)));
        let sent = github_post(client, edge, &id, body.as_bytes())
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), 202);
        let answer: serde_json::Value = sent.json().await.unwrap();
        ids.insert(answer["seq"].as_u64().unwrap(), id);
    }
    ids
}

fn backhaul(nats: &Nats) -> String {
    format!(
        "backhaul:\n  sink: nats\n  nats: {{ servers: [\"{}\"], stream: WEBHOOKS, create: true }}\n  retry: {{ base: 50ms, max: 500ms }}\n",
        nats.url()
    )
}

/// How many times each webhook's event id is in the stream.
async fn origin_counts(nats: &Nats) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    if let Ok(arrivals) = testkit::origin::arrivals(
        &testkit::origin::OriginAccess::open(vec![nats.url()]),
        "WEBHOOKS",
    )
    .await
    {
        // Shed-ledger summaries share the stream and carry no event id.
        for arrival in arrivals.into_iter().filter(|a| !a.id.is_empty()) {
            *counts.entry(arrival.id).or_default() += 1;
        }
    }
    counts
}

/// Waits until every id in `ids` is at the origin (or `limit` passes); returns what is.
async fn wait_until_at_origin<'a>(
    nats: &Nats,
    ids: impl Iterator<Item = &'a String> + Clone,
    limit: Duration,
) -> HashSet<String> {
    let started = Instant::now();
    loop {
        let at_origin: HashSet<String> = origin_counts(nats).await.into_keys().collect();
        if ids.clone().all(|id| at_origin.contains(id)) || started.elapsed() > limit {
            return at_origin;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    files.sort();
    files
}

/// Where a segment's written bytes end (preallocated zeros after).
fn written_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(64, |last| last + 1)
}

/// The sequence numbers of every record in the `wanted` segments.
fn records_of(
    segments: &[std::path::PathBuf],
    original: &[Vec<u8>],
    wanted: &[std::path::PathBuf],
) -> BTreeSet<u64> {
    segments
        .iter()
        .zip(original)
        .filter(|(path, _)| wanted.contains(path))
        .flat_map(|(_, bytes)| {
            edge::spool::scan::scan_segment(bytes)
                .records
                .iter()
                .map(|r| r.record.seq)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The sequence numbers of records that a changed byte falls in.
fn touched_records(original: &[Vec<u8>], damaged: &[Vec<u8>]) -> BTreeSet<u64> {
    let mut touched = BTreeSet::new();
    for (before, after) in original.iter().zip(damaged) {
        let scan = edge::spool::scan::scan_segment(before);
        for record in &scan.records {
            let frame = record.offset..record.offset + record.len;
            if before[frame.clone()] != after[frame] {
                touched.insert(record.record.seq);
            }
        }
    }
    touched
}

/// What `edge spool-verify` says was lost: the sequence numbers of its damaged regions
/// and unreadable segments, and whatever was written after the newest segment's last
/// whole record, up to `last_seq` (records damaged at the very end, or zeroed away
/// entirely, which no reader can tell from room never written); and the unreadable
/// segments.
fn spool_verify(dir: &Path, last_seq: u64) -> (BTreeSet<u64>, Vec<std::path::PathBuf>) {
    let out = std::process::Command::new(edge_bin())
        .args(["spool-verify", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "damage found: exit 1");
    let mut lost = BTreeSet::new();
    let mut unreadable = Vec::new();
    let mut last_good = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let finding: serde_json::Value = serde_json::from_str(line).unwrap();
        if let (Some(from), Some(to)) = (finding["lost_from"].as_u64(), finding["lost_to"].as_u64())
        {
            lost.extend(from..=to);
        }
        if let Some(path) = finding["unreadable"].as_str() {
            unreadable.push(path.into());
        }
        if finding.get("newest").is_some() {
            last_good = finding["last_seq"].as_u64();
        }
    }
    let last_good = last_good.or(lost.last().copied()).unwrap_or(0);
    lost.extend(last_good + 1..=last_seq);
    (lost, unreadable)
}

fn metric_value(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

/// xorshift64*: a seeded sequence, so a failing case is the same case again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

const CUTS: u32 = 50;
const SENDERS: usize = 200;
const CAMPAIGN_SEED: u64 = 0x5eed_cafe_f00d_0001;
const ROT_SEED: u64 = 0x5eed_cafe_f00d_0002;
const ROT_EVENTS: usize = 600;
