//! Opening the spool after a start or a crash: take the directory lock, scan every
//! segment, cut a torn or corrupt tail off the last one, drop delivered segments, and
//! rebuild the de-duplication windows from what is on disk.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};

use super::lag::LagBytes;
use super::recent_ids::RecentIds;
use super::record::SEGMENT_MAGIC;
use super::scan::{ScanError, scan_segment};
use super::{checkpoint, list_segments, segment_path};
use crate::config::SpoolSettings;

/// What recovery found and did, for the start-up log.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub segments: usize,
    pub records: u64,
    pub checkpoint: u64,
    pub next_seq: u64,
    pub cut: Vec<CutTail>,
}

/// Bytes removed from the end of a segment because they did not hold a whole record.
#[derive(Clone, Debug)]
pub struct CutTail {
    pub path: PathBuf,
    pub offset: usize,
    pub bytes: usize,
    pub reason: ScanError,
}

#[derive(Debug)]
pub(super) struct SegmentMeta {
    pub bytes: u64,
    pub last_seq: Option<u64>,
}

pub(super) struct Recovered {
    pub report: RecoveryReport,
    pub checkpoint: u64,
    pub next_seq: u64,
    pub total_bytes: u64,
    pub segments: BTreeMap<u64, SegmentMeta>,
    pub active: File,
    /// The active segment is zero-filled to `segment_bytes` (appends overwrite).
    pub active_preallocated: bool,
    pub recent: HashMap<String, RecentIds>,
    pub lag: LagBytes,
    pub lock: Flock<File>,
}

pub(super) fn recover(
    settings: &SpoolSettings,
    windows: HashMap<String, usize>,
) -> anyhow::Result<Recovered> {
    let dir = &settings.dir;
    let lock = lock_dir(dir)?;
    let checkpoint = checkpoint::read(dir)?.unwrap_or(0);
    let mut replay = Replay {
        checkpoint,
        last_seq: checkpoint,
        recent: windows
            .into_iter()
            .map(|(route, window)| (route, RecentIds::new(window)))
            .collect(),
        lag: LagBytes::default(),
        report: RecoveryReport {
            checkpoint,
            ..Default::default()
        },
    };
    let mut segments = BTreeMap::new();
    let listed = list_segments(dir)?;
    for (index, (first, path)) in listed.iter().enumerate() {
        let is_last = index + 1 == listed.len();
        segments.insert(*first, replay.segment(path, is_last)?);
    }
    remove_delivered(dir, &mut segments, checkpoint)?;

    let next_seq = replay.last_seq + 1;
    let (active, active_preallocated) =
        open_active(dir, &mut segments, next_seq, settings.segment_bytes)?;
    let mut report = replay.report;
    report.segments = segments.len();
    report.next_seq = next_seq;
    let total_bytes = segments.values().map(|m| m.bytes).sum();
    Ok(Recovered {
        report,
        checkpoint,
        next_seq,
        total_bytes,
        segments,
        active,
        active_preallocated,
        recent: replay.recent,
        lag: replay.lag,
        lock,
    })
}

/// What reading the segments back rebuilds: the de-duplication windows, the bytes the
/// origin has not confirmed, the last sequence number, and the report.
struct Replay {
    checkpoint: u64,
    last_seq: u64,
    recent: HashMap<String, RecentIds>,
    lag: LagBytes,
    report: RecoveryReport,
}

impl Replay {
    /// Reads one segment back. An incomplete tail of the last segment (a crash
    /// mid-append) is cut, its preallocated zeros are kept for the appends to come;
    /// damage before the end of an older one is reported and the records after it
    /// cannot be read.
    fn segment(&mut self, path: &Path, is_last: bool) -> anyhow::Result<SegmentMeta> {
        let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let scan = scan_segment(&bytes);
        let mut segment_last = None;
        for (record, frame_len) in scan.records.iter().zip(&scan.frame_lens) {
            if record.seq > self.checkpoint {
                self.lag.appended(record.seq, *frame_len as u64);
            }
            if let Some(window) = self.recent.get_mut(record.route) {
                window.insert(record.event_id, record.seq);
            }
            segment_last = Some(record.seq);
            self.last_seq = self.last_seq.max(record.seq);
        }
        self.report.records += scan.records.len() as u64;
        let mut kept_len = scan.valid_len;
        match scan.stop {
            None if scan.valid_len < bytes.len() && !is_last => {
                // Preallocated room a roll had cut off, lost in a crash: a sealed segment
                // ends at its last record, which is where the reader moves on.
                cut_tail(path, scan.valid_len)?;
            }
            None => {}
            Some(stop) if is_last => {
                cut_tail(path, scan.valid_len)?;
                kept_len = scan.valid_len.max(SEGMENT_MAGIC.len());
                let cut = CutTail {
                    path: path.to_owned(),
                    offset: stop.offset,
                    bytes: bytes.len() - scan.valid_len,
                    reason: stop.error,
                };
                tracing::warn!(segment = %path.display(), offset = cut.offset, cut_bytes = cut.bytes, reason = %cut.reason, "spool recovery cut an incomplete tail");
                self.report.cut.push(cut);
            }
            Some(stop) => {
                kept_len = bytes.len();
                tracing::error!(segment = %path.display(), offset = stop.offset, reason = %stop.error, kept = scan.records.len(), "spool segment is damaged before its end; records after the damage cannot be read");
            }
        }
        Ok(SegmentMeta {
            bytes: kept_len as u64,
            last_seq: segment_last,
        })
    }
}

/// Creates the spool directory and takes its lock: two processes on one spool would
/// interleave their appends.
fn lock_dir(dir: &Path) -> anyhow::Result<Flock<File>> {
    fs::create_dir_all(dir)
        .with_context(|| format!("spool.dir {}: cannot create", dir.display()))?;
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("LOCK"))
        .with_context(|| format!("spool.dir {}: cannot open LOCK", dir.display()))?;
    Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        anyhow::anyhow!(
            "spool.dir {}: locked by another process ({errno})",
            dir.display()
        )
    })
}

/// The segment new records go to: the newest one, or a fresh one from `next_seq`; and
/// whether it is preallocated (beyond its records it holds only zeros, after recovery).
fn open_active(
    dir: &Path,
    segments: &mut BTreeMap<u64, SegmentMeta>,
    next_seq: u64,
    segment_bytes: u64,
) -> anyhow::Result<(File, bool)> {
    if let Some((&first, _)) = segments.last_key_value() {
        let file = OpenOptions::new()
            .write(true)
            .open(segment_path(dir, first))?;
        let preallocated = file.metadata()?.len() >= segment_bytes;
        return Ok((file, preallocated));
    }
    let file = create_segment(dir, next_seq)?;
    segments.insert(
        next_seq,
        SegmentMeta {
            bytes: SEGMENT_MAGIC.len() as u64,
            last_seq: None,
        },
    );
    Ok((file, false))
}

/// Creates a new, empty segment durably (file and directory entry).
pub(super) fn create_segment(dir: &std::path::Path, first_seq: u64) -> std::io::Result<File> {
    let path = segment_path(dir, first_seq);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    file.write_all_at(SEGMENT_MAGIC, 0)?;
    file.sync_all()?;
    checkpoint::sync_dir(dir)?;
    Ok(file)
}

/// Deletes every segment except the newest whose records are all at or below the
/// checkpoint.
pub(super) fn remove_delivered(
    dir: &std::path::Path,
    segments: &mut BTreeMap<u64, SegmentMeta>,
    checkpoint: u64,
) -> std::io::Result<u64> {
    let newest = segments.last_key_value().map(|(&first, _)| first);
    let delivered: Vec<u64> = segments
        .iter()
        .filter(|(first, meta)| {
            Some(**first) != newest && meta.last_seq.is_none_or(|last| last <= checkpoint)
        })
        .map(|(first, _)| *first)
        .collect();
    let mut freed = 0;
    for first in &delivered {
        fs::remove_file(segment_path(dir, *first))?;
        freed += segments.remove(first).map_or(0, |m| m.bytes);
    }
    if !delivered.is_empty() {
        checkpoint::sync_dir(dir)?;
    }
    Ok(freed)
}

fn cut_tail(path: &std::path::Path, valid_len: usize) -> std::io::Result<()> {
    let file = OpenOptions::new().write(true).open(path)?;
    if valid_len < SEGMENT_MAGIC.len() {
        file.set_len(0)?;
        file.write_all_at(SEGMENT_MAGIC, 0)?;
    } else {
        file.set_len(valid_len as u64)?;
    }
    file.sync_all()
}
