//! The backhaul's metrics, registered under `edge_backhaul_*`.

use std::sync::atomic::AtomicU64;

use edge_kit::metrics::Reason;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Cheap to clone: every field is a shared handle.
#[derive(Clone, Debug)]
pub struct BackhaulMetrics {
    /// Connections dialled to the origin.
    pub dials: Counter,
    /// Connections to the origin ready to publish.
    pub ready_connections: Gauge,
    /// Events the origin acknowledged.
    pub acks: Counter,
    /// Of those, events the origin already had (a redelivery).
    pub duplicates: Counter,
    /// Failed deliveries that will be retried, by reason.
    pub retries: Family<Reason, Counter>,
    /// Events the origin refused for good, kept in the dead-letter store.
    pub dead_letters: Counter,
    /// Time from publish to the origin's ack.
    pub publish_seconds: Histogram,
    /// Time from receipt at the edge to the origin's ack.
    pub delivery_seconds: Histogram,
    /// Stored events the origin has not acknowledged.
    pub lag_records: Gauge,
    /// Their bytes.
    pub lag_bytes: Gauge,
    /// Age of the oldest of them.
    pub oldest_undelivered_seconds: Gauge<f64, AtomicU64>,
    /// The circuit breaker: 0 closed, 1 open, 2 half-open.
    pub breaker_state: Gauge,
    /// 1 while an operator's pause holds (`edge backhaul pause`).
    pub paused: Gauge,
}

impl BackhaulMetrics {
    /// Creates the metrics and registers them into `registry` (the `edge_` one).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            dials: Counter::default(),
            ready_connections: Gauge::default(),
            acks: Counter::default(),
            duplicates: Counter::default(),
            retries: Family::default(),
            dead_letters: Counter::default(),
            publish_seconds: Histogram::new(exponential_buckets(0.000_1, 2.0, 16)),
            delivery_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 20)),
            lag_records: Gauge::default(),
            lag_bytes: Gauge::default(),
            oldest_undelivered_seconds: Gauge::default(),
            breaker_state: Gauge::default(),
            paused: Gauge::default(),
        };
        let backhaul = registry.sub_registry_with_prefix("backhaul");
        edge_kit::register_fields!(backhaul, metrics, {
            dials: "Connections established to the origin",
            ready_connections: "Origin connections open and ready",
            acks: "Events the origin acknowledged",
            duplicates: "Acknowledged events the origin already had (dropped by event id)",
            retries: "Delivery retries, by reason",
            dead_letters: "Events the origin refused for good, kept in the dead-letter store",
            publish_seconds: "Publish to acknowledgement, per attempt",
            delivery_seconds: "Receive (2xx) to origin acknowledgement",
            lag_records: "Durable records the origin has not confirmed",
            lag_bytes: "Spool bytes the origin has not confirmed (errs high by under 1 MiB)",
            oldest_undelivered_seconds: "Age of the oldest record read but not confirmed",
            breaker_state: "Origin circuit breaker: 0 closed, 1 open, 2 half-open",
            paused: "1 while an operator's pause holds (edge backhaul pause): events are stored, none delivered",
        });
        metrics
    }

    /// Counts one retry by its reason.
    pub fn retry(&self, reason: &'static str) {
        self.retries.get_or_create(&Reason { reason }).inc();
    }
}
