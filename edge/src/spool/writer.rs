//! The spool's only writer: one thread that turns concurrent appends into group commits.
//! It drains every queued append, writes them with one `write`, makes them durable with
//! one `fdatasync`, and only then answers each caller. Owning all mutable spool state on
//! one thread also makes de-duplication race-free.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use nix::fcntl::Flock;
use tokio::sync::oneshot;

use super::recent_ids::RecentIds;
use super::record::{RecordView, SEGMENT_MAGIC};
use super::recovery::{Recovered, SegmentMeta, create_segment, remove_delivered};
use super::{AppendError, Appended, NewEvent, Shared, checkpoint};
use crate::config::SpoolSettings;
use crate::metrics::Metrics;

pub(super) enum Command {
    Append(NewEvent, oneshot::Sender<Result<Appended, AppendError>>),
    Checkpoint(u64, oneshot::Sender<std::io::Result<()>>),
    Shutdown,
}

pub(super) struct Writer {
    dir: PathBuf,
    pop: String,
    segment_bytes: u64,
    max_bytes: u64,
    max_batch_delay: Duration,
    segments: BTreeMap<u64, SegmentMeta>,
    active: File,
    next_seq: u64,
    checkpoint: u64,
    total_bytes: u64,
    recent: HashMap<String, RecentIds>,
    failure: Option<String>,
    last_batch_len: usize,
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    _lock: Flock<File>,
}

type Reply = oneshot::Sender<Result<Appended, AppendError>>;

impl Writer {
    pub(super) fn new(
        settings: &SpoolSettings,
        pop: &str,
        recovered: Recovered,
        shared: Arc<Shared>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let writer = Self {
            dir: settings.dir.clone(),
            pop: pop.to_owned(),
            segment_bytes: settings.segment_bytes,
            max_bytes: settings.max_bytes,
            max_batch_delay: settings.max_batch_delay,
            segments: recovered.segments,
            active: recovered.active,
            next_seq: recovered.next_seq,
            checkpoint: recovered.checkpoint,
            total_bytes: recovered.total_bytes,
            recent: recovered.recent,
            failure: None,
            last_batch_len: 0,
            shared,
            metrics,
            _lock: recovered.lock,
        };
        writer.publish_gauges();
        writer
    }

    pub(super) fn run(mut self, commands: mpsc::Receiver<Command>) {
        while let Ok(first) = commands.recv() {
            let (appends, others, shutdown) = self.collect_batch(first, &commands);
            if !appends.is_empty() {
                self.commit(appends);
            }
            for command in others {
                if let Command::Checkpoint(seq, reply) = command {
                    let _ = reply.send(self.checkpoint_through(seq));
                }
            }
            if shutdown {
                break;
            }
        }
        tracing::info!(durable_seq = self.next_seq - 1, "spool writer stopped");
    }

    /// Gathers the first command and everything queued behind it. When the previous
    /// batch had company (concurrent senders), lingers up to `max_batch_delay` for more,
    /// but only until this batch is as large as the previous one: a lone sender is never
    /// delayed, and a steady set of senders that are all here already is not either.
    fn collect_batch(
        &self,
        first: Command,
        commands: &mpsc::Receiver<Command>,
    ) -> (Vec<(NewEvent, Reply)>, Vec<Command>, bool) {
        let mut appends = Vec::new();
        let mut others = Vec::new();
        let mut shutdown = false;
        let linger_until = (self.last_batch_len > 1).then(|| Instant::now() + self.max_batch_delay);
        let mut next = Some(first);
        while let Some(command) = next.take() {
            match command {
                Command::Append(event, reply) => appends.push((event, reply)),
                Command::Shutdown => shutdown = true,
                other => others.push(other),
            }
            if shutdown || appends.len() >= MAX_BATCH_RECORDS {
                break;
            }
            next = match commands.try_recv() {
                Ok(command) => Some(command),
                Err(_) => match linger_until {
                    Some(until) if appends.len() < self.last_batch_len => until
                        .checked_duration_since(Instant::now())
                        .and_then(|left| commands.recv_timeout(left).ok()),
                    _ => None,
                },
            };
        }
        (appends, others, shutdown)
    }

    fn commit(&mut self, appends: Vec<(NewEvent, Reply)>) {
        self.last_batch_len = appends.len();
        let mut outcomes: Vec<Result<Appended, AppendError>> = Vec::with_capacity(appends.len());
        let mut batch_ids: HashMap<(&str, &str), u64> = HashMap::new();
        let mut buf = Vec::with_capacity(appends.len() * 1536);
        let mut frame = Vec::new();
        let mut batch_bytes = 0u64;
        let mut io_result = Ok(());
        for (event, _) in &appends {
            if let Some(failure) = &self.failure {
                outcomes.push(Err(AppendError::Failed(failure.clone())));
                continue;
            }
            let key = (&*event.route, event.event_id.as_str());
            let known = self.recent.get(key.0).and_then(|window| window.get(key.1));
            if let Some(seq) = known.or_else(|| batch_ids.get(&key).copied()) {
                outcomes.push(Ok(Appended::Duplicate { seq }));
                continue;
            }
            let seq = self.next_seq;
            frame.clear();
            let len = self.view(event, seq).encode_frame(&mut frame) as u64;
            if self.total_bytes + batch_bytes + len > self.max_bytes {
                outcomes.push(Err(AppendError::Full));
                continue;
            }
            let segment_len = self.active_len() + buf.len() as u64;
            if segment_len + len > self.segment_bytes && segment_len > SEGMENT_MAGIC.len() as u64 {
                if let Err(e) = self.flush(&mut buf).and_then(|()| self.roll(seq)) {
                    io_result = Err(e);
                    break;
                }
                batch_bytes += SEGMENT_MAGIC.len() as u64;
            }
            buf.extend_from_slice(&frame);
            batch_bytes += len;
            self.next_seq += 1;
            batch_ids.insert(key, seq);
            outcomes.push(Ok(Appended::Stored { seq }));
        }
        if io_result.is_ok() {
            io_result = self.flush(&mut buf);
        }
        match io_result {
            Ok(()) => {
                for ((route, id), seq) in batch_ids {
                    if let Some(window) = self.recent.get_mut(route) {
                        window.insert(id, seq);
                    }
                }
                self.total_bytes += batch_bytes;
                self.shared
                    .durable_seq
                    .store(self.next_seq - 1, Ordering::Release);
                self.shared.durable.notify_waiters();
            }
            Err(e) => {
                let failure = e.to_string();
                tracing::error!(error = %e, dir = %self.dir.display(), "spool write failed; refusing appends until restart");
                self.failure = Some(failure.clone());
                self.shared.failed.store(true, Ordering::Release);
                outcomes.resize_with(appends.len(), || Err(AppendError::Failed(failure.clone())));
                for outcome in &mut outcomes {
                    if matches!(outcome, Ok(Appended::Stored { .. })) {
                        *outcome = Err(AppendError::Failed(failure.clone()));
                    }
                }
            }
        }
        self.metrics
            .spool_batch_records
            .observe(appends.len() as f64);
        for ((_, reply), outcome) in appends.into_iter().zip(outcomes) {
            self.metrics.spool_append(&outcome);
            let _ = reply.send(outcome);
        }
        self.publish_gauges();
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
        self.active.write_all_at(buf, offset)?;
        let started = Instant::now();
        self.active.sync_data()?;
        self.metrics
            .spool_fsync_seconds
            .observe(started.elapsed().as_secs_f64());
        let written = buf.len() as u64;
        let meta = self
            .segments
            .last_entry()
            .expect("the spool always has an active segment")
            .into_mut();
        meta.bytes += written;
        meta.last_seq = Some(self.next_seq - 1);
        buf.clear();
        Ok(())
    }

    fn roll(&mut self, first_seq: u64) -> std::io::Result<()> {
        self.active = create_segment(&self.dir, first_seq)?;
        self.segments.insert(
            first_seq,
            SegmentMeta {
                bytes: SEGMENT_MAGIC.len() as u64,
                last_seq: None,
            },
        );
        Ok(())
    }

    fn checkpoint_through(&mut self, seq: u64) -> std::io::Result<()> {
        let seq = seq.min(self.next_seq - 1);
        if seq <= self.checkpoint {
            return Ok(());
        }
        checkpoint::write(&self.dir, seq)?;
        self.checkpoint = seq;
        self.shared.checkpoint.store(seq, Ordering::Release);
        let freed = remove_delivered(&self.dir, &mut self.segments, seq)?;
        self.total_bytes -= freed;
        self.publish_gauges();
        Ok(())
    }

    fn publish_gauges(&self) {
        self.shared.bytes.store(self.total_bytes, Ordering::Release);
        self.metrics.spool_bytes.set(self.total_bytes as i64);
        self.metrics.spool_segments.set(self.segments.len() as i64);
        self.metrics
            .spool_backlog_records
            .set((self.next_seq - 1 - self.checkpoint) as i64);
    }
}

const MAX_BATCH_RECORDS: usize = 4096;
