//! Crash test: 2,000 signed webhooks sent concurrently, `kill -9` of the edge midway,
//! restart. Every event that got a 2xx must be in the spool exactly once, and recovery
//! must report the torn tail it cut; with segments that grow and with preallocated ones.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use testkit::edge::*;

const EVENTS: usize = 2000;
const CONCURRENCY: usize = 64;
const KILL_AFTER_ACKS: usize = 800;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_midway_loses_no_acknowledged_event() {
    kill_9_midway(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_midway_with_preallocated_segments_loses_no_acknowledged_event() {
    kill_9_midway(true).await;
}

async fn kill_9_midway(preallocate: bool) {
    let mut edge = Edge::start(&format!("  preallocate: {preallocate}\n"), "");
    let client = client(&edge, false);
    let acked = Arc::new(Mutex::new(Vec::new()));
    let ack_count = Arc::new(AtomicUsize::new(0));
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let url = edge.url("/hooks/github");
    if preallocate {
        // The first segment is a plain one; appends move onto the spare once it is
        // written, which a slow disk can make take longer than the load below.
        let rolled = r#"edge_spool_rolls_total{pop="test",reason="preallocated"}"#;
        for n in 0..200 {
            if edge.metric(rolled) >= 1.0 {
                break;
            }
            let delivery = format!("warm-{n}");
            let _ = signed_github(client.post(&url), &delivery, &delivery_body(&delivery))
                .send()
                .await;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(
            edge.metric(rolled) >= 1.0,
            "appends moved onto a preallocated segment"
        );
    }

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..EVENTS {
        let permit = Arc::clone(&permits).acquire_owned().await.unwrap();
        if ack_count.load(Ordering::Acquire) >= KILL_AFTER_ACKS && edge.child.is_some() {
            edge.kill9();
        }
        let (client, acked, ack_count, url) = (
            client.clone(),
            Arc::clone(&acked),
            Arc::clone(&ack_count),
            url.clone(),
        );
        tasks.spawn(async move {
            let _permit = permit;
            let delivery = format!("crash-{i:05}");
            let body = event_body(i);
            let sent = signed_github(client.post(url), &delivery, body.as_bytes())
                .send()
                .await;
            if let Ok(response) = sent
                && response.status() == 202
            {
                acked.lock().unwrap().push(delivery);
                ack_count.fetch_add(1, Ordering::AcqRel);
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    assert!(edge.child.is_none(), "the edge was killed midway");
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= KILL_AFTER_ACKS && acked.len() < EVENTS,
        "acked {} of {EVENTS}",
        acked.len()
    );

    // A crash inside a write leaves half a frame: make sure the newest segment ends with one.
    let newest = std::fs::read_dir(edge.spool_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .max()
        .unwrap();
    let newest_bytes = std::fs::read(&newest).unwrap();
    let scan = edge::spool::scan::scan_segment(&newest_bytes);
    let format = scan.format.unwrap();
    let mut torn = Vec::new();
    edge::spool::record::Record {
        seq: u64::MAX,
        received_ms: 0,
        early: false,
        pop: "test".into(),
        route: "hooks_github".into(),
        event_id: "never-acknowledged".into(),
        headers: vec![],
        body: vec![b't'; 300],
    }
    .view()
    .encode_frame(&format, &mut torn)
    .unwrap();
    // Where the records end: in a preallocated segment, zeros follow.
    let records_end = scan.end;
    assert_eq!(newest_bytes.len() > records_end, preallocate);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap()
        .write_all_at(&torn[..torn.len() / 2], records_end as u64)
        .unwrap();

    edge.spawn();
    let log = edge.log_text();
    assert!(
        log.contains("spool recovery cut a write that never finished"),
        "recovery did not report the torn tail:\n{log}"
    );
    assert!(
        !log.contains("ERROR"),
        "a torn write is not damage to an acknowledged record:\n{log}"
    );
    let kept = std::fs::read_dir(edge.spool_dir().join("quarantine"))
        .unwrap()
        .count();
    assert_eq!(kept, 2, "the cut bytes and their .why are kept");

    let records = edge::spool::dump(&edge.spool_dir()).unwrap();
    let mut copies: HashMap<&str, usize> = HashMap::new();
    for record in &records {
        *copies
            .entry(edge::event::id_of_key(&record.event_id))
            .or_default() += 1;
    }
    assert!(!copies.contains_key("never-acknowledged"));
    for delivery in &acked {
        assert_eq!(
            copies.get(delivery.as_str()),
            Some(&1),
            "{delivery} acknowledged but stored {:?} times",
            copies.get(delivery.as_str())
        );
    }
    assert!(copies.values().all(|n| *n == 1), "no event is stored twice");
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "sequence numbers increase"
    );

    // The restarted edge still knows what it stored: a redelivery (same id, same body)
    // is acknowledged as a duplicate and not stored again, and new events follow on.
    let client = testkit::edge::client(&edge, false);
    let first: usize = acked[0].trim_start_matches("crash-").parse().unwrap();
    let again = github_post(&client, &edge, &acked[0], event_body(first).as_bytes())
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 202);
    let body: serde_json::Value = again.json().await.unwrap();
    assert_eq!(body["duplicate"], true);
    assert_eq!(
        github_post(
            &client,
            &edge,
            "after-restart",
            &delivery_body("after-restart")
        )
        .send()
        .await
        .unwrap()
        .status(),
        202
    );
    let after = edge::spool::dump(&edge.spool_dir()).unwrap();
    assert_eq!(after.len(), records.len() + 1);
    assert!(after.last().unwrap().seq > *seqs.last().unwrap());
}

/// The body of the crash run's event `i`: sizes vary so frames straddle pages.
fn event_body(i: usize) -> String {
    format!(r#"{{"n":{i},"pad":"{}"}}"#, "p".repeat(i % 700))
}
