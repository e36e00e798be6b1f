//! The spool: the PoP's durable queue on local disk. Every acknowledged webhook is a
//! record here, fsynced before the 2xx leaves. Segmented append-only files, one writer
//! thread doing group commit (one fdatasync per batch of concurrent appends), recovery
//! at start, a checkpoint the backhaul advances, and a reader for the backhaul.

pub mod checkpoint;
mod reader;
pub mod recent_ids;
pub mod record;
mod recovery;
pub mod scan;
mod writer;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use bytes::Bytes;
use tokio::sync::{Notify, oneshot};

pub use reader::SpoolReader;
pub use recovery::RecoveryReport;

use crate::config::SpoolSettings;
use crate::metrics::Metrics;

/// A webhook ready to be stored: verified, with its event id.
#[derive(Debug)]
pub struct NewEvent {
    pub received_ms: u64,
    pub early: bool,
    pub route: Arc<str>,
    pub event_id: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Bytes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Stored under this sequence number and durable.
    Stored { seq: u64 },
    /// The route's recent window already holds this event id, durable under `seq`.
    Duplicate { seq: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    #[error("spool is over its max_bytes")]
    Full,
    /// A write or fsync failed. After a failed fsync the page cache cannot be trusted,
    /// so the spool refuses every later append until the process restarts.
    #[error("spool failed: {0}")]
    Failed(String),
    #[error("spool is shut down")]
    Closed,
}

/// Handle to the spool; cheap to share behind an `Arc`.
pub struct Spool {
    commands: mpsc::Sender<writer::Command>,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// State the writer thread publishes to everyone else.
#[derive(Debug)]
pub(crate) struct Shared {
    dir: PathBuf,
    /// Every record with a sequence number up to this one is durable.
    durable_seq: AtomicU64,
    checkpoint: AtomicU64,
    bytes: AtomicU64,
    high_water_bytes: u64,
    failed: AtomicBool,
    durable: Notify,
}

impl Spool {
    /// Opens (and recovers) the spool in `settings.dir`, then starts the writer thread.
    /// `windows` is each route's de-duplication window.
    pub fn open(
        settings: &SpoolSettings,
        pop: &str,
        windows: HashMap<String, usize>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<(Spool, RecoveryReport)> {
        let recovered = recovery::recover(settings, windows)?;
        let report = recovered.report.clone();
        let shared = Arc::new(Shared {
            dir: settings.dir.clone(),
            durable_seq: AtomicU64::new(recovered.next_seq - 1),
            checkpoint: AtomicU64::new(recovered.checkpoint),
            bytes: AtomicU64::new(recovered.total_bytes),
            high_water_bytes: (settings.max_bytes as f64 * settings.high_water) as u64,
            failed: AtomicBool::new(false),
            durable: Notify::new(),
        });
        let (commands, rx) = mpsc::channel();
        let writer = writer::Writer::new(settings, pop, recovered, Arc::clone(&shared), metrics);
        let thread = std::thread::Builder::new()
            .name("spool-writer".into())
            .spawn(move || writer.run(rx))?;
        Ok((
            Spool {
                commands,
                shared,
                thread: Mutex::new(Some(thread)),
            },
            report,
        ))
    }

    /// Stores the event; resolves once it is durable (or known to be a duplicate of a
    /// durable one).
    pub async fn append(&self, event: NewEvent) -> Result<Appended, AppendError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(writer::Command::Append(event, reply))
            .map_err(|_| AppendError::Closed)?;
        answer.await.map_err(|_| AppendError::Closed)?
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

    /// A reader positioned after the checkpoint: it yields every record the origin has
    /// not confirmed, in order.
    pub fn reader(&self) -> SpoolReader {
        SpoolReader::new(Arc::clone(&self.shared))
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

    /// Why the spool cannot take new events, if it cannot (for readiness).
    pub fn unready_reason(&self) -> Option<&'static str> {
        if self.shared.failed.load(Ordering::Acquire) {
            Some("spool failed (write or fsync error)")
        } else if self.shared.bytes.load(Ordering::Acquire) >= self.shared.high_water_bytes {
            Some("spool over its high-water mark")
        } else {
            None
        }
    }

    pub fn durable_seq(&self) -> u64 {
        self.shared.durable_seq.load(Ordering::Acquire)
    }

    /// Stops the writer after it has finished (and synced) everything queued.
    pub fn close(&self) {
        let _ = self.commands.send(writer::Command::Shutdown);
        let thread = self.thread.lock().expect("spool thread lock").take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

fn segment_path(dir: &std::path::Path, first_seq: u64) -> PathBuf {
    dir.join(format!("{first_seq:020}.seg"))
}

/// Segment files in `dir` as (first sequence number, path), oldest first.
fn list_segments(dir: &std::path::Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let first = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".seg"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(first) = first {
            segments.push((first, path));
        }
    }
    segments.sort();
    Ok(segments)
}

/// Every whole record in the spool directory, oldest first, without locking or changing
/// anything (for inspection and tests).
pub fn dump(dir: &std::path::Path) -> std::io::Result<Vec<record::Record>> {
    let mut records = Vec::new();
    for (_, path) in list_segments(dir)? {
        let bytes = std::fs::read(&path)?;
        records.extend(
            scan::scan_segment(&bytes)
                .records
                .iter()
                .map(record::RecordView::to_owned_record),
        );
    }
    Ok(records)
}
