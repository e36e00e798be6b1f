//! `spool:` where and how events are stored before they are acknowledged.

use std::path::PathBuf;
use std::time::Duration;

use bytesize::ByteSize;
use edge_kit::config_file::FieldErrors;
use serde::Deserialize;

/// The `spool` section, validated.
#[derive(Clone, Debug)]
pub struct SpoolSettings {
    /// The spool's directory.
    pub dir: PathBuf,
    /// Past this, appends are refused with 503.
    pub max_bytes: u64,
    /// Size of one segment file.
    pub segment_bytes: u64,
    /// Longest an append waits for others to share its fsync.
    pub max_batch_delay: Duration,
    /// Fraction of `max_bytes` above which `/readyz` fails.
    pub high_water: f64,
    /// Zero-fill the next segment ahead of need (see `spool::spare`).
    pub preallocate: bool,
    /// A write or fsync that has not returned after this fails `/readyz`: the disk is
    /// failing, and the PoP withdraws until it answers again.
    pub stall_timeout: Duration,
    /// Bodies waiting for the writer past this are refused (503) before the next body
    /// is read: memory stays bounded while the disk is slow.
    pub max_queued_bytes: u64,
    /// Testing only: a pause after each fsync, to rehearse a slow disk.
    pub sync_delay: Duration,
    /// How long delivered segments are kept for `edge replay` (zero: deleted at once).
    pub retain_delivered: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawSpool {
    /// Required: the spool's directory, on a filesystem of its own.
    dir: Option<PathBuf>,
    /// Past this, appends are refused with 503. Default 8GiB.
    max_bytes: ByteSize,
    /// Size of one segment file (a record never spans two). Default 64MiB.
    segment_bytes: ByteSize,
    /// Longest an append waits for others to share its fsync, and never more than half
    /// the last fdatasync took (`spool::group_commit`). Default 1ms; 0s: a batch is what
    /// arrived while the previous fdatasync ran.
    #[serde(with = "humantime_serde")]
    max_batch_delay: Duration,
    /// Fraction of `max_bytes` above which `/readyz` fails (the PoP withdraws).
    /// Default 0.9.
    high_water: f64,
    /// Zero-fill each segment ahead of need, so an append's fdatasync flushes data only
    /// (it costs writing every segment twice). Default false.
    preallocate: bool,
    /// A write or fsync that has not returned after this fails `/readyz` (the PoP
    /// withdraws) until the disk answers again. Default 5s.
    #[serde(with = "humantime_serde")]
    stall_timeout: Duration,
    /// Bodies waiting for the writer past this are refused (503) before the next body
    /// is read. Default 64MiB.
    max_queued_bytes: ByteSize,
    /// Testing only: a pause after each fsync. Default 0.
    #[serde(with = "humantime_serde")]
    sync_delay: Duration,
    /// Keep delivered segments this long for `edge replay`, in the room undelivered
    /// events leave under `max_bytes` (the oldest go first). Default 0: off.
    #[serde(with = "humantime_serde")]
    retain_delivered: Duration,
}

impl Default for RawSpool {
    fn default() -> Self {
        Self {
            dir: None,
            max_bytes: ByteSize::gib(8),
            segment_bytes: ByteSize::mib(64),
            max_batch_delay: Duration::from_millis(1),
            high_water: 0.9,
            preallocate: false,
            stall_timeout: Duration::from_secs(5),
            max_queued_bytes: ByteSize::mib(64),
            sync_delay: Duration::ZERO,
            retain_delivered: Duration::ZERO,
        }
    }
}

impl RawSpool {
    pub(super) fn validate(self, errors: &mut FieldErrors) -> SpoolSettings {
        if self.dir.is_none() {
            errors.add("spool.dir", "required");
        }
        if self.segment_bytes.as_u64() < 1 << 20 {
            errors.add("spool.segment_bytes", "must be at least 1MiB");
        }
        if self.max_bytes.as_u64() < self.segment_bytes.as_u64().saturating_mul(2) {
            errors.add(
                "spool.max_bytes",
                "must be at least twice spool.segment_bytes",
            );
        }
        if !(0.1..=1.0).contains(&self.high_water) {
            errors.add("spool.high_water", "must be a fraction between 0.1 and 1.0");
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(600)).contains(&self.stall_timeout) {
            errors.add("spool.stall_timeout", "must be between 100ms and 10m");
        }
        if self.max_queued_bytes.as_u64() < 1 << 20 {
            errors.add("spool.max_queued_bytes", "must be at least 1MiB");
        }
        if self.retain_delivered > MAX_RETAIN_DELIVERED {
            errors.add("spool.retain_delivered", "must be at most 90d");
        }
        SpoolSettings {
            dir: self.dir.unwrap_or_default(),
            max_bytes: self.max_bytes.as_u64(),
            segment_bytes: self.segment_bytes.as_u64(),
            max_batch_delay: self.max_batch_delay,
            high_water: self.high_water,
            preallocate: self.preallocate,
            stall_timeout: self.stall_timeout,
            max_queued_bytes: self.max_queued_bytes.as_u64(),
            sync_delay: self.sync_delay,
            retain_delivered: self.retain_delivered,
        }
    }
}

/// Replay is for an origin's bad day or week, not an archive.
const MAX_RETAIN_DELIVERED: Duration = Duration::from_secs(90 * 24 * 3600);
