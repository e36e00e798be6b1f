//! The spool: the PoP's durable queue on local disk. Every acknowledged webhook is a
//! record here, fsynced before the 2xx leaves. Segmented append-only files, one writer
//! task doing group commit (one fdatasync per batch of concurrent appends), recovery
//! at start, a checkpoint the backhaul advances, and a reader for the backhaul.

mod append;
pub mod backhaul_pause;
mod blocking;
pub(crate) mod checkpoint;
pub mod dead_letters;
pub(crate) mod durable;
mod group_commit;
mod inspect;
mod kept;
mod lag;
pub(crate) mod metrics;
mod origin_keys;
pub mod quarantine;
mod reader;
pub(crate) mod recent_ids;
pub mod record;
mod recovery;
pub mod replay;
pub mod resend;
mod reserve;
mod retained;
mod rotation;
pub mod scan;
mod segments;
mod shared;
mod spare;
mod thread_batches;
mod writer;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::Context as _;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

pub use append::{AppendError, Appended, NewEvent};
pub use inspect::{DamagedRegion, Inspection, UnreadableSegment, dump, inspect};
pub use metrics::SpoolMetrics;
pub use reader::{Batch, SpoolReader};
pub use recovery::{RecoveryReport, in_use};

use shared::Shared;
use thread_batches::ThreadBatches;

use crate::admission::ledger::LedgerFiles;
use crate::config::SpoolSettings;

/// The shed ledger's files in the spool directory `dir`: the spool names them, the
/// ledger writes them (best effort, unsynced: they are hints, not events).
pub fn shed_ledger_files(dir: &std::path::Path) -> LedgerFiles {
    LedgerFiles {
        lines: dir.join("shed-ledger.jsonl"),
        shipped_offset: dir.join("shed-ledger.offset"),
    }
}

/// Handle to the spool; cheap to share behind an `Arc`.
pub struct Spool {
    commands: mpsc::UnboundedSender<writer::Command>,
    batches: Arc<ThreadBatches>,
    shared: Arc<Shared>,
    /// The first record whose origin key is scoped to its route (`origin_keys`).
    scoped_keys_from: u64,
    metrics: SpoolMetrics,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Spool {
    /// Opens (and recovers) the spool in `settings.dir`, then starts the writer task on
    /// the current tokio runtime.
    /// `windows` is each route's de-duplication window.
    pub fn open(
        settings: &SpoolSettings,
        pop: &str,
        windows: HashMap<String, usize>,
        metrics: SpoolMetrics,
    ) -> anyhow::Result<(Spool, RecoveryReport)> {
        let recovered = recovery::recover(settings, windows)?;
        let scoped_keys_from = origin_keys::scoped_from(&settings.dir, recovered.next_seq)
            .with_context(|| format!("{}: origin key note", settings.dir.display()))?;
        reserve::ensure(&settings.dir);
        metrics.high_water_ratio.set(settings.high_water);
        let report = recovered.report.clone();
        let shared = Arc::new(Shared {
            dir: settings.dir.clone(),
            durable_seq: AtomicU64::new(recovered.next_seq - 1),
            checkpoint: AtomicU64::new(recovered.checkpoint),
            bytes: AtomicU64::new(recovered.total_bytes),
            unconfirmed_bytes: AtomicU64::new(0),
            high_water_bytes: (settings.max_bytes as f64 * settings.high_water) as u64,
            max_bytes: settings.max_bytes,
            failed: AtomicBool::new(false),
            failure: Notify::new(),
            disk_full: AtomicBool::new(false),
            resume_at_free: AtomicU64::new(0),
            room_to_resume: settings.segment_bytes,
            durable: Notify::new(),
            durable_end: Mutex::new(active_end(&recovered)),
            damaged_segments: Mutex::new(BTreeSet::new()),
            io_since: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            stall_timeout: settings.stall_timeout,
            stall_logged: AtomicBool::new(false),
            kept: kept::KeptBytes::measure(&settings.dir),
            queued_bytes: AtomicU64::new(0),
            max_queued_bytes: settings.max_queued_bytes,
        });
        let (commands, rx) = mpsc::unbounded_channel();
        let writer = writer::Writer::new(
            settings,
            pop,
            recovered,
            Arc::clone(&shared),
            metrics.clone(),
        );
        let task = writer.spawn(rx).context("starting the spool writer")?;
        let spool = Spool {
            batches: Arc::new(ThreadBatches::new(commands.clone(), Arc::clone(&shared))),
            commands,
            shared,
            scoped_keys_from,
            metrics,
            task: Mutex::new(Some(task)),
        };
        Ok((spool, report))
    }

    /// The key the origin de-duplicates `record` by: scoped to its route, or the bare
    /// event key for a record stored before route-scoped keys (see `origin_keys`).
    pub fn origin_key(&self, record: &record::Record) -> String {
        if record.seq >= self.scoped_keys_from {
            crate::event::origin_key(&record.route, &record.event_id)
        } else {
            record.event_id.clone()
        }
    }

    /// Stores the event; resolves once it is durable (or known to be a duplicate of a
    /// durable one).
    pub async fn append(&self, event: NewEvent) -> Result<Appended, AppendError> {
        self.batches.append(event).await
    }

    /// Whether the bodies waiting for the writer (its queue and the batch on disk) hold
    /// `spool.max_queued_bytes`: a slow or stalled disk. The next request is refused
    /// before its body is read, so memory stays bounded.
    pub fn queue_full(&self) -> bool {
        self.shared.queued_bytes.load(Ordering::Acquire) >= self.shared.max_queued_bytes
    }

    /// Records that the origin has every event up to `seq`; deletes segments that hold
    /// nothing newer.
    pub async fn advance_checkpoint(&self, seq: u64) -> std::io::Result<()> {
        let (reply, answer) = oneshot::channel();
        let closed = || std::io::Error::other("spool is shut down");
        self.commands
            .send(writer::Command::Checkpoint(seq, reply))
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Sets each route's de-duplication window (a reload added or resized routes); ids
    /// already remembered are kept.
    pub fn set_windows(&self, windows: HashMap<String, usize>) {
        let _ = self.commands.send(writer::Command::Windows(windows));
    }

    /// A reader positioned after the checkpoint: it yields every record the origin has
    /// not confirmed, in order.
    pub fn reader(&self) -> SpoolReader {
        SpoolReader::new(Arc::clone(&self.shared), self.metrics.clone())
    }

    /// Waits until a record newer than `seq` is durable.
    pub async fn wait_durable_after(&self, seq: u64) {
        loop {
            let notified = self.shared.durable.notified();
            if self.shared.durable_seq.load(Ordering::Acquire) > seq {
                return;
            }
            notified.await;
        }
    }

    /// How full the spool is, as a fraction of `max_bytes` (admission sheds by it):
    /// its segments, dead letters and quarantine.
    pub fn fill(&self) -> f64 {
        self.shared.held_bytes() as f64 / self.shared.max_bytes as f64
    }

    /// Keeps `record`, which the origin refused for good, as a dead letter, durably: it
    /// counts toward `max_bytes` from now on. Returns its file.
    pub async fn store_dead_letter(
        &self,
        record: record::Record,
    ) -> std::io::Result<std::path::PathBuf> {
        let dir = self.shared.dir.clone();
        #[expect(
            clippy::expect_used,
            reason = "a panic ends the process (edge_kit::panic), so the join cannot fail"
        )]
        let (path, bytes) = tokio::task::spawn_blocking(move || dead_letters::store(&dir, &record))
            .await
            .expect("dead-letter task")?;
        self.shared.kept.add_dead_letter(bytes);
        Ok(path)
    }

    /// The operator's pause of the backhaul set in the spool directory, if any (read on
    /// the blocking pool: a stalled disk must not hold a runtime thread).
    pub async fn backhaul_pause(&self) -> std::io::Result<Option<backhaul_pause::BackhaulPause>> {
        let dir = self.shared.dir.clone();
        tokio::task::spawn_blocking(move || backhaul_pause::read(&dir))
            .await
            .map_err(std::io::Error::other)?
    }

    /// Where the shed ledger of this spool's directory keeps its lines.
    pub fn shed_ledger_files(&self) -> LedgerFiles {
        shed_ledger_files(&self.shared.dir)
    }

    /// The writer task, which runs until [`Spool::close`].
    pub fn writer_task(&self) -> Option<tokio::task::AbortHandle> {
        let task = self.task.lock();
        task.as_ref().map(JoinHandle::abort_handle)
    }

    /// Returns once a write or fsync has failed: from then on the spool refuses every
    /// append, and only a restart (whose recovery reads what is really on disk) brings
    /// it back.
    pub async fn failed(&self) {
        loop {
            let notified = self.shared.failure.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shared.failed.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    /// Why the spool cannot take new events, if it cannot (for readiness).
    pub fn unready_reason(&self) -> Option<&'static str> {
        if self.disk_stalled() {
            Some("spool disk stalled (a write or fsync has not returned)")
        } else if self.shared.failed.load(Ordering::Acquire) {
            Some("spool failed (write or fsync error)")
        } else if !self.shared.has_room() {
            Some("spool disk full")
        } else if self.shared.held_bytes() >= self.shared.high_water_bytes {
            Some("spool over its high-water mark")
        } else {
            None
        }
    }

    /// How long the writer's write or fsync in progress has waited at `now`, if past
    /// `spool.stall_timeout`.
    pub fn disk_stalled_for(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        self.shared.stalled(now)
    }

    /// Whether the writer's write or fsync in progress has waited past
    /// `spool.stall_timeout`; logs the start and the end of a stall once each.
    fn disk_stalled(&self) -> bool {
        let stalled = self.disk_stalled_for(std::time::Instant::now());
        let logged = self
            .shared
            .stall_logged
            .swap(stalled.is_some(), Ordering::AcqRel);
        match stalled {
            Some(waited) if !logged => {
                tracing::error!(dir = %self.shared.dir.display(), waited = ?waited, "spool disk stalled: a write or fsync has not returned; failing /readyz (the PoP withdraws) until it does");
            }
            None if logged => {
                tracing::info!(dir = %self.shared.dir.display(), "spool disk answers again; /readyz no longer fails for it");
            }
            _ => {}
        }
        stalled.is_some()
    }

    /// The sequence number of the newest record known to be on disk.
    pub fn durable_seq(&self) -> u64 {
        self.shared.durable_seq.load(Ordering::Acquire)
    }

    /// Bytes of the spool the origin has not confirmed; errs high by under 1 MiB.
    pub fn unconfirmed_bytes(&self) -> u64 {
        self.shared.unconfirmed_bytes.load(Ordering::Acquire)
    }

    /// Stops the writer after it has finished (and synced) everything queued before.
    pub async fn close(&self) {
        let _ = self.commands.send(writer::Command::Shutdown);
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// The active segment and where its durable bytes end, after recovery.
fn active_end(recovered: &recovery::Recovered) -> (u64, u64) {
    recovered
        .segments
        .last_key_value()
        .map_or((0, 0), |(&first, meta)| (first, meta.bytes))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use std::path::PathBuf;

    use bytes::Bytes;

    use super::reader::UNREADABLE_AFTER;
    use super::segments::{list_segments, segment_path};
    use super::*;

    fn settings(dir: &std::path::Path) -> SpoolSettings {
        SpoolSettings {
            dir: dir.to_owned(),
            max_bytes: 1 << 20,
            segment_bytes: 4096,
            max_batch_delay: Duration::from_millis(1),
            high_water: 0.9,
            stall_timeout: Duration::from_secs(5),
            max_queued_bytes: 64 << 20,
            sync_delay: Duration::ZERO,
            retain_delivered: Duration::ZERO,
            preallocate: true,
        }
    }

    fn open(dir: &std::path::Path) -> (Spool, RecoveryReport) {
        open_with(
            &settings(dir),
            SpoolMetrics::register(&mut Default::default()),
        )
    }

    fn open_with(settings: &SpoolSettings, metrics: SpoolMetrics) -> (Spool, RecoveryReport) {
        let windows = HashMap::from([("r".to_owned(), 100)]);
        Spool::open(settings, "pop1", windows, metrics).unwrap()
    }

    fn rolls(metrics: &SpoolMetrics, reason: &'static str) -> u64 {
        metrics
            .rolls
            .get_or_create(&edge_kit::metrics::Reason { reason })
            .get()
    }

    fn dumped_seqs(dir: &std::path::Path) -> Vec<u64> {
        dump(dir).unwrap().iter().map(|r| r.seq).collect()
    }

    /// (file length, length of its records) of each segment, oldest first.
    fn segment_extents(dir: &std::path::Path) -> Vec<(usize, usize)> {
        segment_files(dir)
            .iter()
            .map(|path| {
                let bytes = std::fs::read(path).unwrap();
                let scan = scan::scan_segment(&bytes);
                assert!(
                    scan.tail.is_none() && scan.damaged.is_empty(),
                    "{}",
                    path.display()
                );
                (bytes.len(), scan.end)
            })
            .collect()
    }

    fn event(id: &str, body_len: usize) -> NewEvent {
        NewEvent {
            received_ms: 1,
            early: false,
            route: Arc::from("r"),
            event_id: id.to_owned(),
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            body: Bytes::from(vec![b'b'; body_len]),
            resend: false,
        }
    }

    fn segment_files(dir: &std::path::Path) -> Vec<PathBuf> {
        list_segments(dir)
            .unwrap()
            .into_iter()
            .map(|(_, p)| p)
            .collect()
    }

    /// Flips one bit of the byte `from_end` bytes before the end of the records in `path`
    /// (preallocated zeros may follow them).
    fn flip_byte(path: &std::path::Path, from_end: usize) {
        let mut bytes = std::fs::read(path).unwrap();
        let at = scan::scan_segment(&bytes).end - from_end;
        bytes[at] ^= 0x10;
        std::fs::write(path, &bytes).unwrap();
    }

    /// A spool an older release wrote has no note of when origin keys became scoped:
    /// its records keep their bare keys (the origin may hold them under those), and
    /// what this release stores after them is scoped to its route.
    #[tokio::test]
    async fn records_an_older_release_stored_keep_their_bare_origin_key() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = open(dir.path());
        spool.append(event("old-1", 10)).await.unwrap();
        spool.append(event("old-2", 10)).await.unwrap();
        spool.close().await;
        std::fs::remove_file(dir.path().join("origin-keys-scoped-from")).unwrap();

        let (spool, _) = open(dir.path());
        spool.append(event("new-3", 10)).await.unwrap();
        let records = spool.reader().read_batch(10).unwrap().records;
        let keys: Vec<String> = records.iter().map(|r| spool.origin_key(r)).collect();
        assert_eq!(keys[..2], ["old-1", "old-2"]);
        assert_eq!(keys[2], crate::event::origin_key("r", "new-3"));
        spool.close().await;

        let (spool, _) = open(dir.path());
        let records = spool.reader().read_batch(10).unwrap().records;
        assert_eq!(spool.origin_key(&records[0]), "old-1", "the note is kept");
        spool.close().await;
    }

    #[tokio::test]
    async fn append_read_checkpoint_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, report) = open(dir.path());
        assert_eq!(
            (report.next_seq, report.checkpoint),
            (1, 0),
            "no checkpoint yet: start at 1"
        );
        for i in 0..20 {
            assert_eq!(
                spool.append(event(&format!("e{i}"), 700)).await,
                Ok(Appended::Stored { seq: i + 1 })
            );
        }
        assert_eq!(
            spool.append(event("e3", 700)).await,
            Ok(Appended::Duplicate { seq: 4 })
        );
        assert!(segment_files(dir.path()).len() > 2, "4 KiB segments roll");

        let mut reader = spool.reader();
        let first = reader.read_batch(7).unwrap().records;
        assert_eq!(
            first.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (1..=7).collect::<Vec<_>>()
        );
        let rest = reader.read_batch(100).unwrap().records;
        assert_eq!(
            rest.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (8..=20).collect::<Vec<_>>()
        );
        assert!(
            reader.read_batch(100).unwrap().records.is_empty(),
            "caught up"
        );
        assert_eq!(
            (rest[0].pop.as_str(), rest[0].event_id.as_str()),
            ("pop1", "e7")
        );

        let before = segment_files(dir.path()).len();
        spool.advance_checkpoint(12).await.unwrap();
        let after = segment_files(dir.path());
        assert!(after.len() < before, "delivered segments are deleted");
        assert!(
            spool
                .reader()
                .read_batch(100)
                .unwrap()
                .records
                .iter()
                .all(|r| r.seq > 12)
        );
        assert_eq!(spool.reader().read_batch(1).unwrap().records[0].seq, 13);

        let waiter = spool.wait_durable_after(20);
        let appended = spool.append(event("e20", 10));
        let (_, stored) = tokio::join!(waiter, appended);
        assert_eq!(stored, Ok(Appended::Stored { seq: 21 }));
        spool.close().await;

        let (spool, report) = open(dir.path());
        assert_eq!((report.checkpoint, report.next_seq), (12, 22));
        assert_eq!(
            spool.append(event("e19", 1)).await,
            Ok(Appended::Duplicate { seq: 20 }),
            "window rebuilt"
        );
        assert_eq!(
            spool.append(event("new", 1)).await,
            Ok(Appended::Stored { seq: 22 })
        );
        let unread = spool.reader().read_batch(100).unwrap().records;
        assert_eq!(unread.first().map(|r| r.seq), Some(13));
        assert_eq!(unread.last().map(|r| r.seq), Some(22));
        spool.close().await;
    }

    /// The reader keeps pace with a writer that rolls a segment every few records:
    /// every record comes out once, in order, none skipped at a roll.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_beside_a_rolling_writer_sees_every_record_in_order() {
        const COUNT: usize = 800;
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = open(dir.path());
        let spool = Arc::new(spool);
        let mut reader = spool.reader();
        let reading = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let started = std::time::Instant::now();
            while seen.len() < COUNT && started.elapsed() < Duration::from_secs(20) {
                if let Ok(batch) = reader.read_batch(3) {
                    assert!(batch.lost.is_empty(), "{:?}", batch.lost);
                    seen.extend(batch.records.into_iter().map(|r| r.seq));
                }
            }
            seen
        });
        for wave in 0..COUNT / 8 {
            let appends: Vec<_> = (0..8)
                .map(|i| {
                    let spool = Arc::clone(&spool);
                    tokio::spawn(
                        async move { spool.append(event(&format!("e{wave}-{i}"), 300)).await },
                    )
                })
                .collect();
            for append in appends {
                assert!(append.await.unwrap().is_ok());
            }
        }
        let seen = reading.join().unwrap();
        assert_eq!(seen, (1..=COUNT as u64).collect::<Vec<_>>());
        assert!(
            segment_files(dir.path()).len() > 20,
            "the writer rolled often"
        );
    }

    /// A record damaged while the edge runs does not stall the reader: it is skipped,
    /// reported lost and counted, and every record after it is read.
    #[tokio::test]
    async fn a_damaged_record_is_skipped_counted_and_the_rest_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = SpoolMetrics::register(&mut Default::default());
        let (spool, _) = open_with(&settings(dir.path()), metrics.clone());
        for i in 0..20 {
            spool.append(event(&format!("h{i}"), 700)).await.unwrap();
        }
        let segments = list_segments(dir.path()).unwrap();
        // The last record of the third segment: the one before the fourth's first.
        let damaged = segments[3].0 - 1;
        flip_byte(&segments[2].1, 1);

        let mut reader = spool.reader();
        let batch = reader.read_batch(100).unwrap();
        let read: Vec<u64> = batch.records.iter().map(|r| r.seq).collect();
        let expected: Vec<u64> = (1..=20).filter(|&seq| seq != damaged).collect();
        assert_eq!(read, expected);
        assert_eq!(batch.lost, vec![damaged..=damaged]);
        assert_eq!(metrics.damaged_records.get(), 1);
        assert!(metrics.damaged_bytes.get() > 700);
        assert_eq!(reader.next_seq(), 21);
        spool.close().await;
    }

    /// A sealed segment the disk will not read (here a directory in its place: every
    /// read fails, as on a bad sector) is retried, then given up: its records are
    /// reported lost and counted, every record after it is read, and once the checkpoint
    /// passes it the file goes to quarantine, not away.
    #[tokio::test]
    async fn an_unreadable_segment_is_given_up_after_retries_and_quarantined() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = SpoolMetrics::register(&mut Default::default());
        let (spool, _) = open_with(&settings(dir.path()), metrics.clone());
        for i in 0..20 {
            spool.append(event(&format!("u{i}"), 700)).await.unwrap();
        }
        let segments = list_segments(dir.path()).unwrap();
        assert!(segments.len() >= 4, "{segments:?}");
        let (unreadable, next) = (segments[1].0, segments[2].0);
        std::fs::remove_file(&segments[1].1).unwrap();
        std::fs::create_dir(&segments[1].1).unwrap();

        let mut reader = spool.reader();
        let before = reader.read_batch(100).unwrap();
        assert_eq!(
            before.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (1..unreadable).collect::<Vec<_>>()
        );
        for _ in 1..UNREADABLE_AFTER {
            assert!(reader.read_batch(100).is_err(), "retried, not given up yet");
        }
        let after = reader.read_batch(100).unwrap();
        assert_eq!(after.lost, vec![unreadable..=next - 1]);
        assert_eq!(metrics.damaged_records.get(), next - unreadable);
        let rest = reader.read_batch(100).unwrap();
        assert_eq!(
            after
                .records
                .iter()
                .chain(&rest.records)
                .map(|r| r.seq)
                .collect::<Vec<_>>(),
            (next..=20).collect::<Vec<_>>()
        );

        spool.advance_checkpoint(20).await.unwrap();
        let kept = quarantine::list(dir.path()).unwrap();
        assert!(
            kept.iter()
                .any(|(path, _)| path.ends_with(segments[1].1.file_name().unwrap())),
            "{kept:?}"
        );
        spool.close().await;
    }

    /// A spool an older release wrote (segments of version 1) is read, and appends go on
    /// in its active segment until it is sealed; new segments are version 2.
    #[tokio::test]
    async fn segments_of_the_previous_format_are_read_and_appended_to() {
        use record::{Record, SegmentFormat};
        let dir = tempfile::tempdir().unwrap();
        for (first, seqs) in [(1, 1..=3), (4, 4..=5)] {
            let mut bytes = SegmentFormat::V1.header();
            for seq in seqs {
                let record = Record {
                    seq,
                    received_ms: 1,
                    early: false,
                    pop: "old".into(),
                    route: "r".into(),
                    event_id: format!("v1-{seq}"),
                    headers: Vec::new(),
                    body: vec![b'o'; 500],
                };
                record
                    .view()
                    .encode_frame(&SegmentFormat::V1, &mut bytes)
                    .unwrap();
            }
            std::fs::write(segment_path(dir.path(), first), bytes).unwrap();
        }
        let (spool, report) = open(dir.path());
        assert_eq!((report.records, report.next_seq), (5, 6));
        assert_eq!(
            spool.append(event("v1-5", 10)).await,
            Ok(Appended::Duplicate { seq: 5 }),
            "the old records' ids are known"
        );
        for i in 6..=20 {
            spool.append(event(&format!("new-{i}"), 700)).await.unwrap();
        }
        let read = spool.reader().read_batch(100).unwrap();
        assert_eq!(
            read.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (1..=20).collect::<Vec<_>>()
        );
        spool.close().await;
        let formats: Vec<SegmentFormat> = segment_files(dir.path())
            .iter()
            .map(|path| SegmentFormat::read(&std::fs::read(path).unwrap()).unwrap())
            .collect();
        assert_eq!(formats[..2], [SegmentFormat::V1, SegmentFormat::V1]);
        assert!(
            formats[2..]
                .iter()
                .all(|f| matches!(f, SegmentFormat::V2 { .. })),
            "{formats:?}"
        );
    }

    /// Damage in the middle of a sealed segment, and a segment whose header cannot be
    /// read: recovery keeps every record around the damage and moves the unreadable
    /// segment to quarantine; no segment is deleted before its records are delivered.
    #[tokio::test]
    async fn recovery_keeps_what_damage_spared_and_quarantines_what_it_cannot_read() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = open(dir.path());
        for i in 0..24 {
            spool.append(event(&format!("d{i}"), 700)).await.unwrap();
        }
        spool.close().await;
        let all = list_segments(dir.path()).unwrap();
        // A segment rolls early when its spare is ready before it is full, so which
        // segment has a record in its middle depends on timing: damage the first.
        let (first, middle) = (0..all.len() - 2)
            .find_map(|i| {
                let bytes = std::fs::read(&all[i].1).unwrap();
                let records = scan::scan_segment(&bytes).records;
                (records.len() >= 3).then(|| (i, records[1].offset + 40))
            })
            .expect("a sealed segment with three records");
        let segments = &all[first..];
        let mut bytes = std::fs::read(&segments[0].1).unwrap();
        bytes[middle] ^= 0x01;
        std::fs::write(&segments[0].1, &bytes).unwrap();
        let mut bytes = std::fs::read(&segments[1].1).unwrap();
        bytes.fill(0xee);
        std::fs::write(&segments[1].1, &bytes).unwrap();
        let unreadable = segments[1].0..segments[2].0;

        let (spool, report) = open(dir.path());
        assert_eq!((report.damaged, report.quarantined), (1, 1));
        let quarantined = quarantine::list(dir.path()).unwrap();
        assert_eq!(quarantined.len(), 1);
        assert!(
            quarantined[0].1.contains("cannot be read"),
            "{quarantined:?}"
        );
        let batch = spool.reader().read_batch(100).unwrap();
        let damaged = segments[0].0 + 1;
        let expected: Vec<u64> = (1..=24)
            .filter(|seq| *seq != damaged && !unreadable.contains(seq))
            .collect();
        assert_eq!(
            batch.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            expected
        );
        assert_eq!(
            batch.lost,
            vec![damaged..=damaged, unreadable.start..=unreadable.end - 1]
        );
        // Delivered through the damaged segment: it goes to quarantine, not away.
        spool.advance_checkpoint(segments[2].0).await.unwrap();
        assert!(all[..=first].iter().all(|(_, path)| !path.exists()));
        assert_eq!(quarantine::list(dir.path()).unwrap().len(), 2);
        spool.close().await;
    }

    #[tokio::test]
    async fn a_second_process_cannot_open_the_same_spool() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = open(dir.path());
        let windows = HashMap::new();
        let second = Spool::open(
            &settings(dir.path()),
            "p",
            windows,
            SpoolMetrics::register(&mut Default::default()),
        );
        assert!(
            second
                .err()
                .unwrap()
                .to_string()
                .contains("locked by another process")
        );
        spool.close().await;
    }

    #[tokio::test]
    async fn full_spool_refuses_whole_records_only() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = open(dir.path());
        let mut stored = 0;
        let mut refused = 0;
        for i in 0..400 {
            match spool.append(event(&format!("f{i}"), 3000)).await {
                Ok(Appended::Stored { .. }) => stored += 1,
                Err(AppendError::Full) => refused += 1,
                other => panic!("{other:?}"),
            }
        }
        assert!(
            stored > 200 && refused > 0,
            "stored {stored} refused {refused}"
        );
        assert_eq!(
            spool.unready_reason(),
            Some("spool over its high-water mark")
        );
        let on_disk: u64 = segment_files(dir.path())
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        assert!(on_disk <= 1 << 20, "{on_disk} bytes on disk");
        spool.close().await;
        assert_eq!(dump(dir.path()).unwrap().len(), stored);
    }

    /// With preallocation (the default) the writer moves onto zero-filled segments made
    /// ahead: appends overwrite the zeros, a sealed segment ends at its last record, and
    /// the reader and a reopen see every record once, nothing cut.
    /// Each sealed segment leaves the page cache at the roll after the one that sealed
    /// it; the newest sealed segment, which the backhaul may still be reading, stays.
    #[tokio::test]
    async fn segments_sealed_two_rolls_ago_leave_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = SpoolMetrics::register(&mut Default::default());
        let settings = SpoolSettings {
            segment_bytes: 8 * PAGE,
            ..settings(dir.path())
        };
        let (spool, _) = open_with(&settings, metrics.clone());
        let appended = append_until_preallocated_rolls(&spool, &metrics, 4, 1000).await;
        let files = segment_files(dir.path());
        let resident: Vec<u64> = files.iter().map(|f| resident_bytes(f)).collect();
        let [released @ .., newest_sealed, active] = &resident[..] else {
            panic!("{appended} appends made {} segments", files.len());
        };
        // Sealing cuts the segment's last page, which leaves that page dirty until the
        // kernel writes it back: only it may stay.
        assert!(
            released.len() >= 2 && released.iter().all(|&r| r <= PAGE),
            "{resident:?}"
        );
        let sealed_len = std::fs::metadata(&files[files.len() - 2]).unwrap().len();
        assert!(
            *newest_sealed >= sealed_len - PAGE && *active > 0,
            "{resident:?}"
        );
        let read = spool.reader().read_batch(5000).unwrap();
        assert_eq!(
            read.records.len() as u64,
            appended,
            "read back from the disk"
        );
        spool.close().await;
    }

    const PAGE: u64 = 4096;

    /// Appends events of `body_len` until the writer has rolled onto `count` spares (at
    /// most 2,000); how many were appended, each stored in turn.
    async fn append_until_preallocated_rolls(
        spool: &Spool,
        metrics: &SpoolMetrics,
        count: u64,
        body_len: usize,
    ) -> u64 {
        let mut appended = 0;
        while rolls(metrics, "preallocated") < count && appended < 2000 {
            appended += 1;
            let stored = spool.append(event(&format!("e{appended}"), body_len)).await;
            assert_eq!(stored, Ok(Appended::Stored { seq: appended }));
            // Room for the spare's thread on a single-threaded test runtime.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        appended
    }

    /// Bytes of `path` in the page cache, as util-linux's `fincore` counts them.
    fn resident_bytes(path: &std::path::Path) -> u64 {
        let out = std::process::Command::new("fincore")
            .args(["--bytes", "--noheadings", "--output", "RES"])
            .arg(path)
            .output()
            .expect("fincore (util-linux) runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    #[tokio::test]
    async fn appends_go_into_preallocated_segments_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let settings = settings(dir.path());
        let metrics = SpoolMetrics::register(&mut Default::default());
        let (spool, _) = open_with(&settings, metrics.clone());
        let appended = append_until_preallocated_rolls(&spool, &metrics, 3, 300).await;
        assert!(rolls(&metrics, "preallocated") >= 3, "{appended} appends");
        let extents = segment_extents(dir.path());
        let (active, sealed) = extents.split_last().unwrap();
        assert!(
            sealed.iter().all(|(len, records)| len == records),
            "{sealed:?}"
        );
        assert_eq!(active.0, 4096, "the active segment is preallocated");
        assert!(active.1 > 32 && active.1 < 4096, "{active:?}");
        let read = spool.reader().read_batch(5000).unwrap();
        assert_eq!(
            read.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (1..=appended).collect::<Vec<_>>()
        );
        spool.close().await;

        // A crash after a roll can leave a sealed segment with its zeros (the cut had
        // not reached the disk): recovery cuts them, silently, records intact.
        let sealed_path = &segment_files(dir.path())[0];
        let sealed_len = std::fs::metadata(sealed_path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(sealed_path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let (spool, report) = open_with(&settings, metrics.clone());
        assert!(report.cut.is_empty(), "{:?}", report.cut);
        assert_eq!(report.next_seq, appended + 1);
        assert_eq!(std::fs::metadata(sealed_path).unwrap().len(), sealed_len);
        let active_before = *segment_extents(dir.path()).last().unwrap();
        assert_eq!(active_before.0, 4096, "still preallocated after a reopen");
        assert_eq!(
            spool.append(event("after", 10)).await,
            Ok(Appended::Stored { seq: appended + 1 })
        );
        let active_after = *segment_extents(dir.path()).last().unwrap();
        assert_eq!(active_after.0, 4096);
        assert!(
            active_after.1 > active_before.1,
            "written where the records end"
        );
        spool.close().await;
        assert_eq!(
            dumped_seqs(dir.path()),
            (1..=appended + 1).collect::<Vec<_>>()
        );
    }

    /// `preallocate: false`: segments grow as they are written, and a spare an earlier
    /// run left is removed.
    #[tokio::test]
    async fn without_preallocation_segments_grow_and_no_spare_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("next-segment.tmp"), b"left").unwrap();
        let settings = SpoolSettings {
            preallocate: false,
            ..settings(dir.path())
        };
        let metrics = SpoolMetrics::register(&mut Default::default());
        let (spool, _) = open_with(&settings, metrics.clone());
        for i in 0..40 {
            spool.append(event(&format!("n{i}"), 300)).await.unwrap();
        }
        spool.close().await;
        assert!(!dir.path().join("next-segment.tmp").exists());
        assert_eq!(rolls(&metrics, "preallocated"), 0);
        assert!(rolls(&metrics, "grown") >= 3);
        let extents = segment_extents(dir.path());
        assert!(
            extents.iter().all(|(len, records)| len == records),
            "{extents:?}"
        );
    }

    /// A last record written whole that fails its check may have been acknowledged: its
    /// bytes go to quarantine before the cut, its number is not reused, and the reader
    /// reports it lost and counts it.
    #[tokio::test]
    async fn recovery_repairs_an_empty_newest_segment_and_counts_a_flipped_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = open(dir.path());
        for i in 0..3 {
            spool.append(event(&format!("g{i}"), 100)).await.unwrap();
        }
        spool.close().await;
        // Flip a byte in the middle of the last record.
        flip_byte(&segment_files(dir.path()).pop().unwrap(), 60);
        let metrics = SpoolMetrics::register(&mut Default::default());
        let (spool, report) = open_with(&settings(dir.path()), metrics.clone());
        assert_eq!((report.cut.len(), report.damaged), (1, 1));
        assert!(!report.cut[0].unfinished);
        assert_eq!(report.records, 2);
        let kept = quarantine::list(dir.path()).unwrap();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(
            kept[0].1.contains("lost") && kept[0].1.contains("g2"),
            "{kept:?}"
        );
        let batch = spool.reader().read_batch(10).unwrap();
        assert_eq!(batch.lost, vec![3..=3]);
        assert_eq!(metrics.damaged_records.get(), 1);
        assert_eq!(
            spool.append(event("g2", 100)).await,
            Ok(Appended::Stored { seq: 4 }),
            "a new number: 3 is named lost"
        );
        spool.close().await;

        // A crash right after creating a segment leaves an empty file as the newest:
        // nothing is in it, and it goes.
        std::fs::File::create(segment_path(dir.path(), 5)).unwrap();
        let (spool, report) = open(dir.path());
        assert_eq!((report.cut.len(), report.quarantined), (0, 0));
        assert!(!segment_path(dir.path(), 5).exists());
        assert_eq!(
            spool.append(event("g3", 100)).await,
            Ok(Appended::Stored { seq: 5 })
        );
        spool.close().await;
        assert_eq!(dumped_seqs(dir.path()), vec![1, 2, 4, 5]);
    }

    /// One flipped bit in the newest frame's length (it then points 64 KiB past the end)
    /// costs nothing: the payload's own length passes the frame's check, recovery writes
    /// it back, and every acknowledged record is delivered.
    #[tokio::test]
    async fn a_flipped_bit_in_the_newest_frames_length_is_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = open(dir.path());
        for i in 0..3 {
            spool.append(event(&format!("l{i}"), 100)).await.unwrap();
        }
        spool.close().await;
        let path = segment_files(dir.path()).pop().unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let last = scan::scan_segment(&bytes).records.last().unwrap().offset;
        bytes[last + 2] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(inspect(dir.path()).unwrap().repairable.len(), 1);

        let metrics = SpoolMetrics::register(&mut Default::default());
        let (spool, report) = open_with(&settings(dir.path()), metrics.clone());
        assert_eq!((report.repaired, report.records), (1, 3));
        assert!(report.cut.is_empty(), "{:?}", report.cut);
        let batch = spool.reader().read_batch(10).unwrap();
        let ids: Vec<&str> = batch.records.iter().map(|r| r.event_id.as_str()).collect();
        assert_eq!((ids, batch.lost.len()), (vec!["l0", "l1", "l2"], 0));
        assert_eq!(metrics.damaged_records.get(), 0);
        spool.close().await;
        let found = inspect(dir.path()).unwrap();
        assert!(!found.is_damaged(), "written back: {found:?}");
    }

    /// A dead letter queued for retry is stored again under its id, though the route's
    /// window still holds that id, and its file goes only once it is durable; a queued
    /// file that cannot be read goes to quarantine, never away.
    #[tokio::test]
    async fn a_retried_dead_letter_is_stored_again_and_a_damaged_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = SpoolMetrics::register(&mut Default::default());
        let (spool, _) = open_with(&settings(dir.path()), metrics.clone());
        let spool = Arc::new(spool);
        assert_eq!(
            spool.append(event("refused", 10)).await,
            Ok(Appended::Stored { seq: 1 })
        );
        let refused = dump(dir.path()).unwrap().remove(0);
        spool.store_dead_letter(refused.clone()).await.unwrap();
        let mut damaged = record::tests::sample(40, "evt-damaged");
        damaged.route = "r".into();
        let damaged_path = spool.store_dead_letter(damaged).await.unwrap();
        let mut bytes = std::fs::read(&damaged_path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&damaged_path, bytes).unwrap();
        for letter in dead_letters::list(dir.path()).unwrap() {
            std::fs::create_dir_all(dir.path().join("dead-letter/retry")).unwrap();
            std::fs::rename(
                &letter.path,
                dir.path()
                    .join("dead-letter/retry")
                    .join(letter.path.file_name().unwrap()),
            )
            .unwrap();
        }

        let resending = tokio::spawn(resend::resend_queued(
            Arc::clone(&spool),
            Duration::from_millis(10),
        ));
        let started = std::time::Instant::now();
        while metrics.dead_letters_resent.get() < 1 {
            assert!(started.elapsed() < Duration::from_secs(5), "never resent");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let stored = dump(dir.path()).unwrap();
        assert_eq!(stored.len(), 2, "stored again: {stored:?}");
        assert_eq!(
            (stored[1].seq, &stored[1].event_id, &stored[1].body),
            (2, &refused.event_id, &refused.body)
        );
        assert_eq!(stored[1].received_ms, refused.received_ms, "as it arrived");
        assert!(dead_letters::list(dir.path()).unwrap().is_empty());
        let kept = quarantine::list(dir.path()).unwrap();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(kept[0].1.contains("evt-damaged"), "{kept:?}");
        spool.close().await;
        resending.await.unwrap();
    }

    /// With `retain_delivered`, delivered segments move to `delivered/` instead of away;
    /// a replay queues what its filter selects among delivered records (retained or
    /// still live, never undelivered ones), and the running edge stores each again with
    /// its id, marked. Retention turned off deletes what was kept.
    #[tokio::test]
    async fn delivered_segments_are_kept_and_a_replay_stores_the_selected_ones_again() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = SpoolMetrics::register(&mut Default::default());
        let retaining = SpoolSettings {
            retain_delivered: Duration::from_secs(3600),
            ..settings(dir.path())
        };
        let (spool, _) = open_with(&retaining, metrics.clone());
        let spool = Arc::new(spool);
        for i in 0..40 {
            spool.append(event(&format!("e{i}"), 300)).await.unwrap();
        }
        // e0..e29 are delivered (seq 1..30).
        spool.advance_checkpoint(30).await.unwrap();
        let retained = list_segments(&dir.path().join(retained::DIR)).unwrap();
        assert!(retained.len() >= 2, "{retained:?}");
        assert!(metrics.retained_bytes.get() > 0);

        let by_prefix = |prefix: &str| replay::ReplayFilter {
            id_prefix: Some(prefix.into()),
            ..Default::default()
        };
        let dry = replay::queue(dir.path(), &by_prefix("e1"), true).unwrap();
        assert_eq!((dry.events, dry.files.len()), (11, 0), "e1, e10..e19");
        let undelivered_left_out = replay::queue(dir.path(), &by_prefix("e3"), true).unwrap();
        assert_eq!(
            undelivered_left_out.events, 1,
            "e3; e30..e39 are undelivered"
        );
        let queued = replay::queue(dir.path(), &by_prefix("e1"), false).unwrap();
        assert_eq!((queued.events, queued.files.len()), (11, 1));

        let resending = tokio::spawn(resend::resend_queued(
            Arc::clone(&spool),
            Duration::from_millis(10),
        ));
        let started = std::time::Instant::now();
        while metrics.replayed.get() < 11 {
            assert!(started.elapsed() < Duration::from_secs(5), "never replayed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let stored = dump(dir.path()).unwrap();
        let again: Vec<_> = stored.iter().filter(|r| r.seq > 40).collect();
        let ids: Vec<_> = again.iter().map(|r| r.event_id.as_str()).collect();
        let mut wanted = vec!["e1".to_owned()];
        wanted.extend((10..20).map(|i| format!("e{i}")));
        assert_eq!(ids, wanted);
        assert!(again.iter().all(|r| {
            r.headers
                .iter()
                .any(|(name, value)| name == replay::MARK_HEADER && value.as_slice() == b"true")
        }));
        assert!(
            !dir.path()
                .join(replay::DIR)
                .join(queued.files[0].file_name().unwrap())
                .exists()
        );
        spool.close().await;
        resending.await.unwrap();

        let (spool, _) = open_with(&settings(dir.path()), metrics.clone());
        assert!(
            list_segments(&dir.path().join(retained::DIR))
                .unwrap()
                .is_empty()
        );
        assert_eq!(metrics.retained_bytes.get(), 0);
        spool.close().await;
    }

    /// Dead letters and quarantine count toward `max_bytes`: kept files alone can take
    /// the spool past its high-water mark (the PoP withdraws) and refuse appends.
    #[tokio::test]
    async fn kept_files_count_toward_max_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = SpoolMetrics::register(&mut Default::default());
        let (spool, _) = open_with(&settings(dir.path()), metrics.clone());
        assert!(spool.unready_reason().is_none());
        std::fs::create_dir(dir.path().join(dead_letters::DIR)).unwrap();
        std::fs::write(
            dir.path().join(dead_letters::DIR).join("1.rec"),
            vec![1; 600_000],
        )
        .unwrap();
        spool.shared.kept.add_dead_letter(600_000);
        quarantine::keep(dir.path(), "tail-1", &vec![1; 400_000], "test").unwrap();
        spool.close().await;

        let (spool, _) = open_with(&settings(dir.path()), metrics.clone());
        assert!(spool.fill() > 0.9, "{}", spool.fill());
        assert_eq!(
            spool.unready_reason(),
            Some("spool over its high-water mark")
        );
        assert_eq!(
            spool.append(event("over", 100_000)).await,
            Err(AppendError::Full)
        );
        spool.close().await;
    }

    /// `spool-verify` sees a segment file gone: the numbers between its neighbours are
    /// in no file.
    #[tokio::test]
    async fn a_missing_segment_is_a_gap_spool_verify_reports() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = open(dir.path());
        for i in 0..20 {
            spool.append(event(&format!("m{i}"), 700)).await.unwrap();
        }
        spool.close().await;
        assert!(!inspect(dir.path()).unwrap().is_damaged());
        let segments = list_segments(dir.path()).unwrap();
        let (gone, next) = (segments[2].0, segments[3].0);
        std::fs::remove_file(&segments[2].1).unwrap();
        let found = inspect(dir.path()).unwrap();
        assert_eq!(found.missing, vec![gone..=next - 1]);
        assert!(found.is_damaged());
    }
}
