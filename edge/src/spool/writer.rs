//! The spool's only writer: one thread that turns concurrent appends into group commits.
//! It takes every queued append, writes them with one `pwrite`, makes them durable with
//! one `fdatasync`, and only then answers each caller. Owning all mutable spool state in
//! one place also makes de-duplication race-free.
//!
//! Appends arrive in per-thread batches (`thread_batches`), each answered with one
//! completion. The writer has a thread (and a small runtime for its linger timer) of its
//! own and does its file I/O there: a batch crosses threads once each way, and a stalled
//! disk holds only this thread, never a worker's.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use edge_kit::metrics::Reason;
use nix::fcntl::Flock;
use tokio::sync::{mpsc, oneshot};

use super::append::{AppendError, Appended, NewEvent};
use super::group_commit::{GroupCommit, MAX_BATCH_RECORDS, Next};
use super::lag::LagBytes;
use super::metrics::SpoolMetrics;
use super::recent_ids::{KeyPrint, Lookup, RecentIds};
use super::record::{RecordView, SegmentFormat};
use super::recovery::Recovered;
use super::rotation::{SegmentMeta, create_segment, release_cached, remove_delivered};
use super::segments::segment_path;
use super::shared::Shared;
use super::spare::{self, Spare};
use super::{checkpoint, reserve, retained};
use crate::config::SpoolSettings;
use crate::event::mac_of_key;
use edge_kit::clock::unix_ms;
use edge_kit::log_throttle::LogThrottle;

pub(super) enum Command {
    /// A thread's batch of appends (`thread_batches`), answered in their order.
    Append(
        Vec<NewEvent>,
        oneshot::Sender<Vec<Result<Appended, AppendError>>>,
    ),
    Checkpoint(u64, oneshot::Sender<std::io::Result<()>>),
    /// Each route's de-duplication window after a reload (routes added or resized).
    Windows(HashMap<String, usize>),
    Shutdown,
}

pub(super) struct Writer {
    dir: PathBuf,
    pop: String,
    segment_bytes: u64,
    max_bytes: u64,
    group: GroupCommit,
    sync_delay: Duration,
    retain_delivered: Duration,
    segments: BTreeMap<u64, SegmentMeta>,
    active: File,
    /// The active segment is zero-filled to its full size, so appends overwrite.
    active_preallocated: bool,
    /// The next segment, made ahead (`spool.preallocate`).
    spare: Option<Spare>,
    next_seq: u64,
    /// The first sequence number not yet durable: `next_seq` once a batch is flushed.
    durable_next_seq: u64,
    checkpoint: u64,
    total_bytes: u64,
    recent: HashMap<String, RecentIds>,
    lag: LagBytes,
    failure: Option<String>,
    batch_buf: Vec<u8>,
    frame_buf: Vec<u8>,
    shared: Arc<Shared>,
    metrics: SpoolMetrics,
    conflict_log: LogThrottle,
    replay_log: LogThrottle,
    /// When `shared.kept` was last measured from the directories.
    kept_measured: Instant,
    _lock: Flock<File>,
}

impl Writer {
    pub(super) fn new(
        settings: &SpoolSettings,
        pop: &str,
        recovered: Recovered,
        shared: Arc<Shared>,
        metrics: SpoolMetrics,
    ) -> Self {
        let mut writer = Self {
            dir: settings.dir.clone(),
            pop: pop.to_owned(),
            segment_bytes: settings.segment_bytes,
            max_bytes: settings.max_bytes,
            group: GroupCommit::new(settings.max_batch_delay),
            sync_delay: settings.sync_delay,
            retain_delivered: settings.retain_delivered,
            segments: recovered.segments,
            active: recovered.active,
            active_preallocated: recovered.active_preallocated,
            spare: spare::prepare(settings),
            next_seq: recovered.next_seq,
            durable_next_seq: recovered.next_seq,
            checkpoint: recovered.checkpoint,
            total_bytes: recovered.total_bytes,
            recent: recovered.recent,
            lag: recovered.lag,
            failure: None,
            batch_buf: Vec::new(),
            frame_buf: Vec::new(),
            shared,
            metrics,
            conflict_log: LogThrottle::default(),
            replay_log: LogThrottle::default(),
            kept_measured: Instant::now(),
            _lock: recovered.lock,
        };
        writer.prune_retained();
        writer.publish_gauges();
        writer
    }

    /// Starts the writer on its own thread; the task returned (on the caller's runtime)
    /// ends when the writer does.
    pub(super) fn spawn(
        self,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let (ended_tx, ended) = oneshot::channel();
        let span = tracing::Span::current();
        std::thread::Builder::new()
            .name("edge-spool-writer".to_owned())
            .spawn(move || {
                runtime.block_on(tracing::Instrument::instrument(self.run(commands), span));
                let _ = ended_tx.send(());
            })?;
        Ok(tokio::spawn(async move {
            let _ = ended.await;
        }))
    }

    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut queued = Vec::new();
        loop {
            if commands.recv_many(&mut queued, MAX_BATCH_RECORDS).await == 0 {
                break;
            }
            self.linger(&mut commands, &mut queued).await;
            let mut events = Vec::new();
            let mut replies = Vec::new();
            let mut checkpoints = Vec::new();
            let mut shutdown = false;
            for command in queued.drain(..) {
                match command {
                    Command::Append(batch, reply) => {
                        replies.push((reply, batch.len()));
                        events.extend(batch);
                    }
                    Command::Checkpoint(seq, reply) => checkpoints.push((seq, reply)),
                    Command::Windows(windows) => self.set_windows(windows),
                    Command::Shutdown => shutdown = true,
                }
            }
            let batch_body_bytes: u64 = events.iter().map(|e| e.body.len() as u64).sum();
            let outcomes = if events.is_empty() {
                Vec::new()
            } else {
                self.commit(&events)
            };
            let checkpointed: Vec<_> = checkpoints
                .iter()
                .map(|&(seq, _)| self.checkpoint_through(seq))
                .collect();
            self.shared
                .queued_bytes
                .fetch_sub(batch_body_bytes, Ordering::AcqRel);
            let mut outcomes = outcomes.into_iter();
            for (reply, appends) in replies {
                let _ = reply.send(outcomes.by_ref().take(appends).collect());
            }
            for ((_, reply), result) in checkpoints.into_iter().zip(checkpointed) {
                let _ = reply.send(result);
            }
            if shutdown {
                break;
            }
        }
        tracing::info!(durable_seq = self.next_seq - 1, "spool writer stopped");
    }

    /// Takes more commands while the group-commit policy says the batch should grow.
    async fn linger(
        &self,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        queued: &mut Vec<Command>,
    ) {
        let started = Instant::now();
        let mut appends = appends_in(queued);
        while let Next::Wait { until, room } = self.group.next(appends, started, Instant::now()) {
            let until = tokio::time::Instant::from_std(until);
            let taken = queued.len();
            match tokio::time::timeout_at(until, commands.recv_many(queued, room)).await {
                Ok(0) | Err(_) => return,
                Ok(_) => appends += appends_in(&queued[taken..]),
            }
        }
    }

    fn commit(&mut self, appends: &[NewEvent]) -> Vec<Result<Appended, AppendError>> {
        self.group.committed(appends.len());
        if !self.shared.has_room() {
            return self.refuse_all(appends.len(), AppendError::DiskFull);
        }
        let mut outcomes: Vec<Result<Appended, AppendError>> = Vec::with_capacity(appends.len());
        let mut batch_ids: BatchIds<'_> = HashMap::default();
        let mut batch_macs: BatchMacs<'_> = HashMap::default();
        // Reused across batches: large short-lived buffers make glibc malloc consolidate.
        let mut buf = std::mem::take(&mut self.batch_buf);
        let mut frame = std::mem::take(&mut self.frame_buf);
        buf.clear();
        let mut batch_bytes = 0u64;
        let mut io_result: std::io::Result<()> = Ok(());
        for event in appends {
            if let Some(failure) = &self.failure {
                outcomes.push(Err(AppendError::Failed(failure.clone())));
                continue;
            }
            let key = (&*event.route, event.event_id.as_str());
            let seen = self.recent.get(key.0).map(|window| window.look_up(key.1));
            let mac = mac_of_key(key.1).map(|mac| (key.0, mac));
            if !event.resend {
                if let Some(known) = self.known(key, seen.as_ref(), mac, &batch_ids, &batch_macs) {
                    outcomes.push(Ok(known));
                    continue;
                }
                if seen.as_ref().is_some_and(|seen| seen.conflicts) {
                    self.id_conflict(key);
                }
            }
            let seq = self.next_seq;
            frame.clear();
            let Ok(len) = self
                .view(event, seq)
                .encode_frame(&self.active_format(), &mut frame)
            else {
                outcomes.push(Err(AppendError::TooLarge));
                continue;
            };
            let len = len as u64;
            if self.total_bytes + self.shared.kept.total() + batch_bytes + len > self.max_bytes {
                outcomes.push(Err(AppendError::Full));
                continue;
            }
            match self.roll_if_due(event, seq, len, &mut buf, &mut frame) {
                Ok(header_bytes) => batch_bytes += header_bytes,
                Err(e) => {
                    io_result = Err(e);
                    break;
                }
            }
            buf.extend_from_slice(&frame);
            batch_bytes += len;
            self.next_seq += 1;
            batch_ids.insert(key, (seq, seen.map(|seen| seen.print)));
            if let Some(mac) = mac {
                batch_macs.insert(mac, seq);
            }
            outcomes.push(Ok(Appended::Stored { seq }));
        }
        if io_result.is_ok() {
            io_result = self.flush(&mut buf);
        }
        self.settle(
            io_result,
            &mut outcomes,
            appends.len(),
            batch_ids,
            batch_bytes,
        );
        self.batch_buf = buf;
        self.frame_buf = frame;
        self.metrics.batch_records.observe(appends.len() as f64);
        for outcome in &outcomes {
            self.metrics.append(outcome);
        }
        self.publish_gauges();
        outcomes
    }

    /// Refuses a batch of `count` appends with `error`, counted.
    fn refuse_all(&self, count: usize, error: AppendError) -> Vec<Result<Appended, AppendError>> {
        let refused = vec![Err(error); count];
        for outcome in &refused {
            self.metrics.append(outcome);
        }
        refused
    }

    /// Moves to a new segment when the frame of `len` bytes in `frame` does not fit in
    /// the active one (or its spare is waiting), once the batch so far in `buf` is
    /// written to the old one; the frame is encoded again, since each segment checks its
    /// frames under a seed of its own. Returns the new segment's header bytes.
    fn roll_if_due(
        &mut self,
        event: &NewEvent,
        seq: u64,
        len: u64,
        buf: &mut Vec<u8>,
        frame: &mut Vec<u8>,
    ) -> std::io::Result<u64> {
        let segment_len = self.active_len() + buf.len() as u64;
        let full = segment_len + len > self.segment_bytes;
        let header_len = self.active_format().header_len() as u64;
        if !(full || self.spare_waits()) || segment_len <= header_len {
            return Ok(0);
        }
        self.flush(buf)?;
        self.roll(seq)?;
        frame.clear();
        let _ = self
            .view(event, seq)
            .encode_frame(&self.active_format(), frame);
        Ok(self.active_format().header_len() as u64)
    }

    /// What an event already known is answered, or `None` to store it: a duplicate when
    /// its key is stored (in the window or earlier in this batch), a replay when its
    /// signed body is stored under another unsigned id.
    fn known(
        &self,
        key: (&str, &str),
        seen: Option<&Lookup>,
        mac: Option<(&str, &str)>,
        batch_ids: &BatchIds<'_>,
        batch_macs: &BatchMacs<'_>,
    ) -> Option<Appended> {
        let stored = seen.and_then(|seen| seen.stored_as);
        if let Some(seq) = stored.or_else(|| batch_ids.get(&key).map(|&(seq, _)| seq)) {
            return Some(Appended::Duplicate { seq });
        }
        let replayed = seen.and_then(|seen| seen.replay_of);
        let seq = replayed.or_else(|| batch_macs.get(&mac?).copied())?;
        if self.replay_log.allow() {
            tracing::warn!(
                route = key.0,
                key = key.1,
                stored_as = seq,
                "a signed body already stored arrived under a fresh unsigned id: a replay, acknowledged and not stored (logged at most once a second)"
            );
        }
        Some(Appended::Replay { seq })
    }

    /// A known delivery id arrived with another validly signed body: it is stored as its
    /// own event, counted and logged.
    fn id_conflict(&self, key: (&str, &str)) {
        self.metrics.id_conflicts.inc();
        if self.conflict_log.allow() {
            tracing::warn!(
                route = key.0,
                key = key.1,
                "a known delivery id arrived with another validly signed body: stored as its own event (logged at most once a second)"
            );
        }
    }

    /// After the batch's write and fsync: what is durable is remembered for
    /// de-duplication, counted and announced to the waiters; if the I/O failed, every
    /// append not yet durable is refused.
    fn settle(
        &mut self,
        io_result: std::io::Result<()>,
        outcomes: &mut Vec<Result<Appended, AppendError>>,
        appends: usize,
        batch_ids: BatchIds<'_>,
        batch_bytes: u64,
    ) {
        let durable = self.durable_next_seq;
        let failed = io_result.is_err();
        if let Err(e) = io_result {
            let refusal = self.refuse_after(&e);
            for outcome in outcomes.iter_mut() {
                if matches!(outcome, Ok(Appended::Stored { seq }) if *seq >= durable) {
                    *outcome = Err(refusal.clone());
                }
            }
            outcomes.resize_with(appends, || Err(refusal.clone()));
        }
        for ((route, _), (seq, print)) in batch_ids {
            if seq < durable
                && let Some(print) = print
                && let Some(window) = self.recent.get_mut(route)
            {
                window.remember(print, seq);
            }
        }
        // After a failure only part of the batch is on disk: count what the segments hold.
        let stored = if failed {
            self.segments.values().map(|m| m.bytes).sum()
        } else {
            self.total_bytes + batch_bytes
        };
        if stored > self.total_bytes {
            self.lag.appended(durable - 1, stored - self.total_bytes);
        }
        self.total_bytes = stored;
        if durable - 1 > self.shared.durable_seq.load(Ordering::Acquire) {
            self.shared
                .durable_seq
                .store(durable - 1, Ordering::Release);
            self.shared.durable.notify_waiters();
        }
    }

    fn set_windows(&mut self, windows: HashMap<String, usize>) {
        for (route, capacity) in windows {
            self.recent
                .entry(route)
                .and_modify(|ids| ids.set_capacity(capacity))
                .or_insert_with(|| RecentIds::new(capacity));
        }
    }

    /// After a failed write: puts the files and counters back to what is durable and
    /// says what the refused appends are told. A full disk (ENOSPC, EDQUOT) on a write
    /// passes once space is freed; any other failure, a failed fsync above all (the page
    /// cache can no longer be trusted), refuses every append, and the edge stops so that
    /// its restart recovers from what is really on disk (`Spool::failed`).
    fn refuse_after(&mut self, error: &std::io::Error) -> AppendError {
        self.next_seq = self.durable_next_seq;
        let durable_len = self.active_len();
        let _ = self.active.set_len(durable_len);
        self.active_preallocated = false;
        if !is_disk_full(error) {
            let failure = error.to_string();
            tracing::error!(error = %error, dir = %self.dir.display(), "spool write failed; refusing appends until restart");
            self.failure = Some(failure.clone());
            self.shared.failed.store(true, Ordering::Release);
            self.shared.failure.notify_waiters();
            return AppendError::Failed(failure);
        }
        if self.shared.disk_filled() {
            tracing::error!(error = %error, dir = %self.dir.display(), "spool disk full: answering 503 and failing /readyz until space is freed");
        }
        AppendError::DiskFull
    }

    /// A spare is ready while the active segment is not preallocated (a fresh spool, or
    /// one whose spare was not ready at the last roll): move onto it before it is full.
    fn spare_waits(&mut self) -> bool {
        !self.active_preallocated && self.spare.as_mut().is_some_and(Spare::is_ready)
    }

    fn view<'e>(&'e self, event: &'e NewEvent, seq: u64) -> RecordView<'e> {
        RecordView {
            seq,
            received_ms: event.received_ms,
            early: event.early,
            pop: &self.pop,
            route: &event.route,
            event_id: &event.event_id,
            headers: event
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_slice()))
                .collect(),
            body: &event.body,
        }
    }

    /// How frames of the active segment are checked.
    fn active_format(&self) -> SegmentFormat {
        self.segments
            .last_key_value()
            .map_or(SegmentFormat::V1, |(_, meta)| meta.format)
    }

    fn active_len(&self) -> u64 {
        self.segments
            .last_key_value()
            .map_or(0, |(_, meta)| meta.bytes)
    }

    /// Writes `buf` at the end of the active segment and makes it durable.
    fn flush(&mut self, buf: &mut Vec<u8>) -> std::io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let offset = self.active_len();
        let started = Instant::now();
        self.shared.io_started(started);
        let written = self.write_and_sync(buf, offset);
        self.shared.io_done();
        written?;
        let took = started.elapsed();
        self.group.synced(took);
        self.metrics.fsync_seconds.observe(took.as_secs_f64());
        let written = buf.len() as u64;
        #[expect(
            clippy::expect_used,
            reason = "recovery opens an active segment and rotation replaces it before closing"
        )]
        let meta = self
            .segments
            .last_entry()
            .expect("the spool always has an active segment")
            .into_mut();
        meta.bytes += written;
        let durable_len = meta.bytes;
        self.durable_next_seq = self.next_seq;
        if let Some((&first, _)) = self.segments.last_key_value() {
            self.shared.set_durable_end(first, durable_len);
        }
        buf.clear();
        Ok(())
    }

    fn write_and_sync(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.active.write_all_at(buf, offset)?;
        // Whatever it says, a failed fdatasync is no full disk to wait out: the pages it
        // was to write may be gone from the cache already, and a retry would "succeed".
        self.active
            .sync_data()
            .map_err(|e| std::io::Error::other(format!("fdatasync failed: {e}")))?;
        if !self.sync_delay.is_zero() {
            std::thread::sleep(self.sync_delay);
        }
        Ok(())
    }

    /// Seals the active segment and moves to a new one that starts at `first_seq`: the
    /// spare if it is ready, else a file made here.
    fn roll(&mut self, first_seq: u64) -> std::io::Result<()> {
        // A sealed segment ends at its last record, where the reader moves on: no zeros
        // after it, preallocated or left by a run with a larger segment_bytes.
        self.active.set_len(self.active_len())?;
        self.active_preallocated = false;
        let spare = match &mut self.spare {
            Some(spare) => spare.take(first_seq)?,
            None => None,
        };
        let preallocated = spare.is_some();
        let (active, format) = match spare {
            Some(made) => made,
            None => create_segment(&self.dir, first_seq).inspect_err(|_| {
                // Half made (no room for its header): recovery must not find it.
                let _ = std::fs::remove_file(segment_path(&self.dir, first_seq));
            })?,
        };
        self.active = active;
        self.active_preallocated = preallocated;
        let reason = if preallocated {
            "preallocated"
        } else {
            "grown"
        };
        self.metrics.rolls.get_or_create(&Reason { reason }).inc();
        self.segments.insert(
            first_seq,
            SegmentMeta {
                bytes: format.header_len() as u64,
                format,
                damaged: false,
            },
        );
        self.shared
            .set_durable_end(first_seq, format.header_len() as u64);
        if let Some(&older) = self.segments.keys().rev().nth(2) {
            release_cached(&self.dir, older);
        }
        if !self.retain_delivered.is_zero() {
            // Undelivered events grew by a segment: retained ones may have to make room.
            self.prune_retained();
        }
        Ok(())
    }

    fn checkpoint_through(&mut self, seq: u64) -> std::io::Result<()> {
        let seq = seq.min(self.next_seq - 1);
        if seq <= self.checkpoint {
            return Ok(());
        }
        checkpoint::write(&self.dir, seq).or_else(|e| {
            if !is_disk_full(&e) {
                return Err(e);
            }
            // No room even for the checkpoint, so nothing delivered could ever be
            // deleted: spend the reserve on it, and put the reserve back after.
            reserve::release(&self.dir);
            checkpoint::write(&self.dir, seq)
        })?;
        self.checkpoint = seq;
        self.lag.delivered_through(seq);
        self.shared.checkpoint.store(seq, Ordering::Release);
        for first in self.shared.take_damaged() {
            if let Some(meta) = self.segments.get_mut(&first) {
                meta.damaged = true;
            }
        }
        let freed = remove_delivered(
            &self.dir,
            &mut self.segments,
            seq,
            !self.retain_delivered.is_zero(),
        )?;
        self.total_bytes -= freed;
        reserve::ensure(&self.dir);
        // A delivered segment went to quarantine or was retained; an operator may have
        // emptied a directory; retained segments age. Not on every checkpoint: under
        // load those come every 100 ms.
        if freed > 0 || self.kept_measured.elapsed() >= REMEASURE_KEPT {
            self.shared.kept.remeasure(&self.dir);
            self.kept_measured = Instant::now();
            self.prune_retained();
        }
        self.publish_gauges();
        Ok(())
    }

    /// Retained delivered segments past `spool.retain_delivered`, or in the room that
    /// undelivered events and kept files need, go (oldest first). Two segments of room
    /// stay free, so the writer never waits on retention.
    fn prune_retained(&mut self) {
        let held = self.total_bytes + self.shared.kept.total();
        let room = self
            .max_bytes
            .saturating_sub(held)
            .saturating_sub(2 * self.segment_bytes);
        match retained::prune(&self.dir, self.retain_delivered, room, unix_ms()) {
            Ok(bytes) => {
                self.metrics.retained_bytes.set(bytes as i64);
            }
            Err(e) => tracing::warn!(error = %e, "cannot prune delivered segments kept for replay"),
        }
    }

    fn publish_gauges(&self) {
        self.shared.bytes.store(self.total_bytes, Ordering::Release);
        self.metrics.bytes.set(self.total_bytes as i64);
        let kept = &self.shared.kept;
        self.metrics
            .fill_ratio
            .set((self.total_bytes + kept.total()) as f64 / self.max_bytes as f64);
        self.metrics
            .dead_letter_bytes
            .set(kept.dead_letter() as i64);
        self.metrics.quarantine_bytes.set(kept.quarantine() as i64);
        self.metrics.segments.set(self.segments.len() as i64);
        self.metrics
            .backlog_records
            .set((self.next_seq - 1 - self.checkpoint) as i64);
        self.shared
            .unconfirmed_bytes
            .store(self.lag.lag(), Ordering::Release);
    }
}

fn is_disk_full(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// How many appends the commands carry.
fn appends_in(commands: &[Command]) -> usize {
    commands
        .iter()
        .map(|command| match command {
            Command::Append(batch, _) => batch.len(),
            _ => 0,
        })
        .sum()
}

/// One batch's stored keys, (route, key): the sequence number and the window's print
/// of the key, remembered once the batch is durable.
type BatchIds<'a> = HashMap<(&'a str, &'a str), (u64, Option<KeyPrint>), BatchHasher>;
/// A batch's signed bodies (route, MAC) so far, with the sequence numbers they take.
type BatchMacs<'a> = HashMap<(&'a str, &'a str), u64, BatchHasher>;
/// A batch's routes and keys come from verified deliveries: a cheap seeded hash does.
type BatchHasher = foldhash::fast::RandomState;

/// How often a checkpoint measures `dead-letter/` and `quarantine/` again and prunes
/// the retained delivered segments.
const REMEASURE_KEPT: Duration = Duration::from_secs(10);
