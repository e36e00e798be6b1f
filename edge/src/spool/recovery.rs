//! Opening the spool after a start or a crash: take the directory lock, read every
//! segment back, write back frame lengths found damaged (the frames' checks confirm the
//! repair), cut a tail off the newest one, keep every whole record before and after
//! damage, move unreadable segments to `quarantine/`, drop delivered segments, and
//! rebuild the de-duplication windows from what is on disk.
//!
//! Nothing undelivered is deleted: a segment goes only once the next one starts at or
//! below the checkpoint (segments hold consecutive sequence numbers, named by the
//! first), and one that held damage goes to `quarantine/` instead. A tail is cut off the
//! newest segment only after its bytes are in `quarantine/`: a write that never finished
//! (never acknowledged) says so there; a frame written whole but failing its check may
//! have been acknowledged, so its records are named, logged as lost and counted (their
//! sequence numbers are not reused: the reader reports them lost).

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};

use super::lag::LagBytes;
use super::recent_ids::RecentIds;
use super::record::{FRAME_HEADER_LEN, FrameError, HeaderError, SegmentFormat};
use super::rotation::{SegmentMeta, create_segment, remove_delivered};
use super::scan::{Damage, Scanned, highest_seq_named, scan_segment};
use super::segments::{list_segments, segment_path};
use super::{checkpoint, durable, quarantine};
use crate::config::SpoolSettings;

/// What recovery found and did, for the start-up log.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    /// Segment files read.
    pub segments: usize,
    /// Whole records found.
    pub records: u64,
    /// The checkpoint: every record up to it was delivered.
    pub checkpoint: u64,
    /// The next append's sequence number.
    pub next_seq: u64,
    /// Tails cut off the newest segment (kept in `quarantine/`).
    pub cut: Vec<CutTail>,
    /// Frames whose damaged length field was written back from their payload.
    pub repaired: usize,
    /// Damaged regions kept in place (the records around them are read).
    pub damaged: usize,
    /// Segments moved to `quarantine/`, unreadable.
    pub quarantined: usize,
}

/// Bytes removed from the end of the newest segment because they did not hold a whole
/// record.
#[derive(Clone, Debug)]
pub struct CutTail {
    pub path: PathBuf,
    pub offset: usize,
    pub bytes: usize,
    pub reason: FrameError,
    /// A write that never finished, rather than damage to a frame written whole.
    pub unfinished: bool,
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
        dir: dir.clone(),
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
        if let Some(meta) = replay.segment(*first, path, is_last)? {
            segments.insert(*first, meta);
        }
    }
    remove_delivered(
        dir,
        &mut segments,
        checkpoint,
        !settings.retain_delivered.is_zero(),
    )?;

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
    dir: PathBuf,
    checkpoint: u64,
    last_seq: u64,
    recent: HashMap<String, RecentIds>,
    lag: LagBytes,
    report: RecoveryReport,
}

impl Replay {
    /// Reads one segment back; `None` when it went to quarantine. Damage is logged and
    /// kept; a tail of the newest segment (a write that never finished, or damage with
    /// no record after it) is cut, and kept in quarantine when it was a whole frame.
    fn segment(
        &mut self,
        first: u64,
        path: &Path,
        is_last: bool,
    ) -> anyhow::Result<Option<SegmentMeta>> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.quarantine(path, &format!("cannot be read: {e}"))?;
                return Ok(None);
            }
        };
        let scan = scan_segment(&bytes);
        let format = match scan.format {
            Ok(format) => format,
            // Made but its header never written (a crash at the roll): nothing is in it.
            Err(HeaderError::Torn) if is_last => {
                fs::remove_file(path)?;
                durable::sync_dir(&self.dir)?;
                return Ok(None);
            }
            Err(error) => {
                if is_last {
                    let highest = highest_seq_named(&bytes, first).unwrap_or(first);
                    self.last_seq = self.last_seq.max(highest);
                }
                self.quarantine(path, &format!("{error}; its records cannot be read"))?;
                return Ok(None);
            }
        };
        if scan.header_recovered {
            tracing::error!(segment = %path.display(), "spool segment header damaged: its seed was found again from its frames; no record lost to it");
        }
        self.remember(&scan.records);
        self.repair_lengths(path, &scan.records)?;
        self.report.records += scan.records.len() as u64;
        for damage in &scan.damaged {
            log_damage(path, first, damage);
        }
        self.report.damaged += scan.damaged.len();
        let mut damaged = !scan.damaged.is_empty();
        let mut kept = scan.end;
        match &scan.tail {
            Some(tail) if is_last => {
                self.cut_newest_tail(path, first, &bytes, scan.end, format, tail)?
            }
            Some(tail) => {
                // A sealed segment's last records are damaged: kept, and its bytes too.
                log_damage(path, first, tail);
                self.report.damaged += 1;
                damaged = true;
                kept = bytes.len();
            }
            // Preallocated room a roll had cut off, lost in a crash: a sealed segment
            // ends at its last record, which is where the reader moves on.
            None if scan.end < bytes.len() && !is_last => cut_tail(path, scan.end, format)?,
            None => {}
        }
        if is_last && scan.tail.is_none() {
            kept = scan.end;
        }
        Ok(Some(SegmentMeta {
            bytes: kept as u64,
            format,
            damaged,
        }))
    }

    /// Counts the records read back toward the backhaul's lag and remembers their ids
    /// for de-duplication.
    fn remember(&mut self, records: &[Scanned<'_>]) {
        for scanned in records {
            let record = &scanned.record;
            if record.seq > self.checkpoint {
                self.lag.appended(record.seq, scanned.len as u64);
            }
            if let Some(window) = self.recent.get_mut(record.route) {
                window.insert(record.event_id, record.seq);
            }
            self.last_seq = self.last_seq.max(record.seq);
        }
    }

    /// Cuts the newest segment (`bytes`, read from `path`) at `end`, its `tail` kept in
    /// quarantine: a write that never finished (never acknowledged) or damaged records,
    /// which are named.
    fn cut_newest_tail(
        &mut self,
        path: &Path,
        first: u64,
        bytes: &[u8],
        end: usize,
        format: SegmentFormat,
        tail: &Damage,
    ) -> anyhow::Result<()> {
        self.keep_cut_bytes(path, &bytes[tail.offset..tail.offset + tail.len], tail)?;
        cut_tail(path, end, format)?;
        let cut = CutTail {
            path: path.to_owned(),
            offset: tail.offset,
            bytes: bytes.len() - end,
            reason: tail.error,
            unfinished: tail.unfinished,
        };
        if tail.unfinished {
            tracing::warn!(segment = %path.display(), offset = cut.offset, cut_bytes = cut.bytes, reason = %cut.reason, "spool recovery cut a write that never finished (never acknowledged); its bytes are in quarantine");
        } else {
            log_damage(path, first, tail);
            self.report.damaged += 1;
            self.last_seq = self.last_seq.max(tail.last_seq_held(first));
        }
        self.report.cut.push(cut);
        Ok(())
    }

    fn quarantine(&mut self, path: &Path, why: &str) -> anyhow::Result<()> {
        tracing::error!(segment = %path.display(), why, "spool segment moved to quarantine: its records are not delivered; nothing was deleted");
        quarantine::move_in(&self.dir, path, why)
            .with_context(|| format!("moving {} to quarantine", path.display()))?;
        self.report.quarantined += 1;
        Ok(())
    }

    /// Writes back the stored length of each record read at its payload's own length, so
    /// that every later reader finds its frame whole.
    fn repair_lengths(&mut self, path: &Path, records: &[Scanned<'_>]) -> anyhow::Result<()> {
        let repaired: Vec<&Scanned<'_>> = records.iter().filter(|r| r.repaired).collect();
        if repaired.is_empty() {
            return Ok(());
        }
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("repairing {}", path.display()))?;
        for scanned in &repaired {
            let payload_len = (scanned.len - FRAME_HEADER_LEN) as u32;
            file.write_all_at(&payload_len.to_le_bytes(), scanned.offset as u64)
                .with_context(|| format!("repairing {}", path.display()))?;
            tracing::error!(segment = %path.display(), offset = scanned.offset, seq = scanned.record.seq, event_id = scanned.record.event_id, "spool frame's length field damaged: read at its payload's own length, which its check confirms, and written back; no record lost");
        }
        file.sync_all()
            .with_context(|| format!("repairing {}", path.display()))?;
        self.report.repaired += repaired.len();
        Ok(())
    }

    /// Keeps the bytes of a tail about to be cut off the newest segment.
    fn keep_cut_bytes(&self, path: &Path, cut: &[u8], tail: &Damage) -> anyhow::Result<()> {
        let name = format!(
            "{}{}{}",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("segment"),
            quarantine::TAIL_MARK,
            tail.offset
        );
        let what = if tail.unfinished {
            "a write that never finished, so never acknowledged"
        } else {
            "frames written whole that fail their check: their records are lost, named here and in the log"
        };
        let why = format!(
            "cut off the end of {} at offset {}: {} ({what}); names: {:?}",
            path.display(),
            tail.offset,
            tail.error,
            tail.named
        );
        quarantine::keep(&self.dir, &name, cut, &why)
            .with_context(|| format!("keeping the cut tail of {}", path.display()))
    }
}

/// One log line per damaged region: where it is and what it cost.
fn log_damage(path: &Path, first: u64, damage: &Damage) {
    let lost_from = damage.after_seq.map_or(first, |seq| seq + 1);
    let lost_to = damage.before_seq.map(|seq| seq - 1);
    tracing::error!(
        segment = %path.display(),
        offset = damage.offset,
        bytes = damage.len,
        error = %damage.error,
        lost_from,
        lost_to = ?lost_to,
        names = ?damage.named,
        "spool segment damaged: the records in this region are lost, those around it are kept"
    );
}

/// Creates the spool directory and takes its lock: two processes on one spool would
/// interleave their appends.
fn lock_dir(dir: &Path) -> anyhow::Result<Flock<File>> {
    durable::create_dir_durably(dir)
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

/// Whether a process (a running edge) holds `dir`'s lock. For commands that act beside
/// it, to say when their work will be picked up.
pub fn in_use(dir: &Path) -> io::Result<bool> {
    let lock_file = match File::open(dir.join("LOCK")) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match Flock::lock(lock_file, FlockArg::LockSharedNonblock) {
        Ok(_) => Ok(false),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(true),
        Err((_, errno)) => Err(errno.into()),
    }
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
    let (file, format) = create_segment(dir, next_seq)?;
    segments.insert(
        next_seq,
        SegmentMeta {
            bytes: format.header_len() as u64,
            format,
            damaged: false,
        },
    );
    Ok((file, false))
}

fn cut_tail(path: &Path, valid_len: usize, format: SegmentFormat) -> std::io::Result<()> {
    let file = OpenOptions::new().write(true).open(path)?;
    if valid_len < format.header_len() {
        file.set_len(0)?;
        file.write_all_at(&format.header(), 0)?;
    } else {
        file.set_len(valid_len as u64)?;
    }
    file.sync_all()
}
