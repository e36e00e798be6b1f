//! Reload metrics, under `edge_config_*`.

use edge_kit::metrics::ResultLabel;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Reload metrics, registered under `edge_config_*`. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct ReloadMetrics {
    reloads: Family<ResultLabel, Counter>,
    /// 1 at start, +1 per applied reload: which config a PoP runs, at a glance.
    pub generation: Gauge,
}

impl ReloadMetrics {
    /// Creates the metrics and registers them into `registry` (the `edge_` one).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "config_reloads",
            "Config reloads (SIGHUP), by result: ok, or failed (the running config kept)",
            metrics.reloads.clone(),
        );
        registry.register(
            "config_generation",
            "Config generation: 1 at start, +1 per applied reload",
            metrics.generation.clone(),
        );
        metrics
    }

    pub(super) fn reloaded(&self, result: &'static str) {
        self.reloads.get_or_create(&ResultLabel { result }).inc();
    }
}
