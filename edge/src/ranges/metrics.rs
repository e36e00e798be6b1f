//! The stored lists as the running edge sees them, under `edge_provider_ranges_*`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Per source: entries in force, age of the list, and whether it is stale.
#[derive(Clone, Debug, Default)]
pub struct RangesMetrics {
    pub(super) entries: Family<SourceLabel, Gauge>,
    pub(super) age_seconds: Family<SourceLabel, Gauge>,
    pub(super) stale: Family<SourceLabel, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SourceLabel {
    pub(super) source: String,
}

impl RangesMetrics {
    /// Creates the metrics and registers them into `registry` (the `edge_` one).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "provider_ranges_entries",
            "Entries of a provider's egress list in force (0: no good list yet)",
            metrics.entries.clone(),
        );
        registry.register(
            "provider_ranges_age_seconds",
            "Seconds since the list in force was fetched",
            metrics.age_seconds.clone(),
        );
        registry.register(
            "provider_ranges_stale",
            "1 when the list in force is older than ranges.max_age, or there is none",
            metrics.stale.clone(),
        );
        metrics
    }
}
