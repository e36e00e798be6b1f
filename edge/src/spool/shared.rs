//! What the writer task publishes to the spool's handle and reader: how far records are
//! durable, the checkpoint, sizes, and the failure and disk-full states.
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::kept::KeptBytes;

/// State the writer publishes to everyone else.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(super) dir: PathBuf,
    /// Every record with a sequence number up to this one is durable.
    pub(super) durable_seq: AtomicU64,
    pub(super) checkpoint: AtomicU64,
    pub(super) bytes: AtomicU64,
    /// Spool bytes the origin has not confirmed (see `lag`).
    pub(super) unconfirmed_bytes: AtomicU64,
    pub(super) high_water_bytes: u64,
    pub(super) max_bytes: u64,
    pub(super) failed: AtomicBool,
    /// Woken when `failed` turns true.
    pub(super) failure: Notify,
    /// Set by the writer on ENOSPC; cleared once `resume_at_free` bytes are free.
    pub(super) disk_full: AtomicBool,
    /// Free bytes that end the disk-full state: what was free right after the failed
    /// write was undone, plus a segment. Without that margin the space the undone write
    /// gave back lets the next small batch in, and the PoP flaps between ready and full.
    pub(super) resume_at_free: AtomicU64,
    /// The margin: one segment.
    pub(super) room_to_resume: u64,
    pub(super) durable: Notify,
    /// The active segment (its first sequence number) and where its durable bytes end:
    /// the reader reads no further, so a write in progress is never taken for damage.
    pub(super) durable_end: Mutex<(u64, u64)>,
    /// Segments the reader found damage in: quarantined, not deleted, once delivered.
    pub(super) damaged_segments: Mutex<BTreeSet<u64>>,
    /// When the writer's write or fsync in progress began, in ms after `epoch` plus one
    /// (0: none in progress).
    pub(super) io_since: AtomicU64,
    pub(super) epoch: Instant,
    /// An I/O in progress longer than this is a stalled disk.
    pub(super) stall_timeout: Duration,
    /// A stall has been logged and not yet its end.
    pub(super) stall_logged: AtomicBool,
    /// Bytes in `dead-letter/` and `quarantine/`, which count toward `max_bytes`.
    pub(super) kept: KeptBytes,
    /// Body bytes of appends sent to the writer and not yet answered.
    pub(super) queued_bytes: AtomicU64,
    pub(super) max_queued_bytes: u64,
}

impl Shared {
    /// Bytes that count toward `max_bytes`: the segments, dead letters and quarantine.
    pub(super) fn held_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire) + self.kept.total()
    }

    pub(super) fn durable_end(&self) -> (u64, u64) {
        *self.durable_end.lock()
    }

    pub(super) fn set_durable_end(&self, active_first: u64, len: u64) {
        *self.durable_end.lock() = (active_first, len);
    }

    /// The writer starts a write or fsync.
    pub(super) fn io_started(&self, now: Instant) {
        let since = now.saturating_duration_since(self.epoch).as_millis() as u64 + 1;
        self.io_since.store(since, Ordering::Release);
    }

    /// The writer's write or fsync returned.
    pub(super) fn io_done(&self) {
        self.io_since.store(0, Ordering::Release);
    }

    /// How long the write or fsync in progress has waited, if longer than
    /// `stall_timeout` at `now`.
    pub(super) fn stalled(&self, now: Instant) -> Option<Duration> {
        let since = self.io_since.load(Ordering::Acquire).checked_sub(1)?;
        let waited = now
            .saturating_duration_since(self.epoch)
            .saturating_sub(Duration::from_millis(since));
        (waited > self.stall_timeout).then_some(waited)
    }

    pub(super) fn mark_damaged(&self, first: u64) {
        self.damaged_segments.lock().insert(first);
    }

    pub(super) fn take_damaged(&self) -> BTreeSet<u64> {
        std::mem::take(&mut *self.damaged_segments.lock())
    }

    /// Whether appends may go to disk: not while the disk is full. While it is, the
    /// filesystem is asked, since with no traffic (the route withdrawn) no append would
    /// find out that space came back (the backhaul delivered, or an operator freed some);
    /// ends the disk-full state, and says so, once there is room again.
    pub(super) fn has_room(&self) -> bool {
        if !self.disk_full.load(Ordering::Acquire) {
            return true;
        }
        let room = free_bytes(&self.dir);
        if room < self.resume_at_free.load(Ordering::Acquire) {
            return false;
        }
        if self.disk_full.swap(false, Ordering::AcqRel) {
            tracing::info!(dir = %self.dir.display(), free_bytes = room, "spool disk has room again; taking appends");
        }
        true
    }

    /// Enters the disk-full state, to be left once a segment more than now is free.
    pub(super) fn disk_filled(&self) -> bool {
        let resume_at = free_bytes(&self.dir) + self.room_to_resume;
        self.resume_at_free.store(resume_at, Ordering::Release);
        !self.disk_full.swap(true, Ordering::AcqRel)
    }
}

/// Free bytes on the filesystem under `dir` (0 when it cannot be asked).
fn free_bytes(dir: &std::path::Path) -> u64 {
    nix::sys::statvfs::statvfs(dir)
        .map(|fs| fs.blocks_available() * fs.fragment_size())
        .unwrap_or(0)
}
