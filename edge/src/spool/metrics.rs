//! The spool's metrics, registered under `edge_spool_*`.

use std::sync::atomic::AtomicU64;

use edge_kit::metrics::Reason;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::append::{AppendError, Appended};

/// Cheap to clone: every field is a shared handle.
#[derive(Clone, Debug)]
pub struct SpoolMetrics {
    /// Appends, by result.
    pub appends: Family<Reason, Counter>,
    /// Bytes on disk.
    pub bytes: Gauge,
    /// `bytes` as a fraction of `spool.max_bytes`.
    pub fill_ratio: Gauge<f64, AtomicU64>,
    /// `spool.high_water`: above it `/readyz` fails.
    pub high_water_ratio: Gauge<f64, AtomicU64>,
    /// Segment files.
    pub segments: Gauge,
    /// Stored records the backhaul has not confirmed.
    pub backlog_records: Gauge,
    /// Time each fsync took.
    pub fsync_seconds: Histogram,
    /// Records per committed batch.
    pub batch_records: Histogram,
    /// Segments the writer moved to, by how they were made.
    pub rolls: Family<Reason, Counter>,
    /// Events whose unsigned delivery id was already stored with another body.
    pub id_conflicts: Counter,
    /// Records the backhaul found lost to damage (or in a quarantined segment) and
    /// skipped, and the damaged bytes it skipped.
    pub damaged_records: Counter,
    /// Bytes skipped with them.
    pub damaged_bytes: Counter,
    /// Bytes in `dead-letter/` (counted toward `spool.max_bytes`).
    pub dead_letter_bytes: Gauge,
    /// Bytes in `quarantine/` (counted toward `spool.max_bytes`).
    pub quarantine_bytes: Gauge,
    /// Dead letters an operator queued for retry, stored again.
    pub dead_letters_resent: Counter,
    /// Bytes of delivered segments kept for replay (`spool.retain_delivered`).
    pub retained_bytes: Gauge,
    /// Delivered events an operator's `edge replay` stored again for delivery.
    pub replayed: Counter,
}

impl SpoolMetrics {
    /// Creates the metrics and registers them into `registry` (the `edge_` one).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            appends: Family::default(),
            bytes: Gauge::default(),
            fill_ratio: Gauge::default(),
            high_water_ratio: Gauge::default(),
            segments: Gauge::default(),
            backlog_records: Gauge::default(),
            fsync_seconds: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            batch_records: Histogram::new(exponential_buckets(1.0, 2.0, 13)),
            rolls: Family::default(),
            id_conflicts: Counter::default(),
            damaged_records: Counter::default(),
            damaged_bytes: Counter::default(),
            dead_letter_bytes: Gauge::default(),
            quarantine_bytes: Gauge::default(),
            dead_letters_resent: Counter::default(),
            retained_bytes: Gauge::default(),
            replayed: Counter::default(),
        };
        edge_kit::register_fields!(registry, metrics, {
            id_conflicts as "dedupe_id_conflicts": "Verified events whose unsigned delivery id (GitHub, Shopify, generic id_header) was already stored with another body; stored as their own events",
        });
        let spool = registry.sub_registry_with_prefix("spool");
        edge_kit::register_fields!(spool, metrics, {
            appends: "Spool appends, by result",
            bytes: "Bytes held in spool segments",
            dead_letter_bytes: "Bytes in <spool.dir>/dead-letter/ (they count toward spool.max_bytes; the edge never deletes them)",
            quarantine_bytes: "Bytes in <spool.dir>/quarantine/ (they count toward spool.max_bytes; the edge never deletes them)",
            dead_letters_resent: "Dead letters queued by `edge dead-letter retry` and stored in the spool again for delivery",
            retained_bytes: "Bytes of delivered segments kept in <spool.dir>/delivered/ for edge replay (spool.retain_delivered); they give way to undelivered events under spool.max_bytes",
            replayed: "Delivered events queued by `edge replay` and stored in the spool again for delivery, marked Edge-Replay: true",
            fill_ratio: "Bytes held as a fraction of spool.max_bytes (the bgp-agent's degrade check reads it)",
            high_water_ratio: "spool.high_water: past this fill ratio /readyz fails and the PoP withdraws",
            segments: "Spool segment files",
            backlog_records: "Records stored but not yet confirmed by the origin",
            fsync_seconds: "Duration of each spool fdatasync",
            batch_records: "Appends per group commit",
            damaged_records: "Records lost to damage on disk (or in a segment moved to quarantine), skipped by the backhaul so delivery goes on; edge spool-verify names them",
            damaged_bytes: "Damaged spool bytes the backhaul skipped",
            rolls: "Segments the writer moved to: preallocated (zero-filled ahead, appends overwrite) or grown (no spare was ready)",
        });
        metrics
    }

    /// Counts one append by its outcome.
    pub fn append(&self, outcome: &Result<Appended, AppendError>) {
        let reason = match outcome {
            Ok(Appended::Stored { .. }) => "stored",
            Ok(Appended::Duplicate { .. }) => "duplicate",
            Ok(Appended::Replay { .. }) => "replay",
            Err(e) => e.reason(),
        };
        self.appends.get_or_create(&Reason { reason }).inc();
    }
}
