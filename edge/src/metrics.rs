//! Prometheus metrics of the edge. Every series carries the `pop` label (set once on the
//! registry); every limit the edge enforces has a counter here.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::admission::AdmissionMetrics;
use crate::spool::{AppendError, Appended};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteStatus {
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteReason {
    pub route: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Handshake {
    pub version: &'static str,
    pub resumed: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

pub struct Metrics {
    registry: Registry,
    /// Owned by admission control, registered here under `webhook_ingress_*`.
    pub admission: AdmissionMetrics,
    pub config_reloads: Family<ResultLabel, Counter>,
    /// 1 at start, +1 per applied reload: which config a PoP runs, at a glance.
    pub config_generation: Gauge,
    pub requests: Family<RouteStatus, Counter>,
    pub verify_failures: Family<RouteReason, Counter>,
    pub duplicates: Family<RouteLabel, Counter>,
    /// Requests refused by a limit before reaching a route (header size, unknown path…).
    pub rejected: Family<Reason, Counter>,
    pub spool_appends: Family<Reason, Counter>,
    pub spool_bytes: Gauge,
    pub spool_segments: Gauge,
    pub spool_backlog_records: Gauge,
    pub spool_fsync_seconds: Histogram,
    pub spool_batch_records: Histogram,
    pub open_connections: Gauge,
    pub tls_handshakes: Family<Handshake, Counter>,
    pub tls_handshake_failures: Family<Reason, Counter>,
    pub accept_errors: Family<Reason, Counter>,
    pub connections_refused: Family<Reason, Counter>,
    pub tfo_accepted: Counter,
    pub early_data_connections: Counter,
    pub early_requests: Family<Reason, Counter>,
    pub backhaul_dials: Counter,
    pub backhaul_ready_connections: Gauge,
    pub backhaul_acks: Counter,
    pub backhaul_duplicates: Counter,
    pub backhaul_retries: Family<Reason, Counter>,
    pub backhaul_dead_letters: Counter,
    pub backhaul_publish_seconds: Histogram,
    pub backhaul_delivery_seconds: Histogram,
    pub backhaul_lag_records: Gauge,
    pub backhaul_lag_bytes: Gauge,
    pub backhaul_oldest_undelivered_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub backhaul_breaker_state: Gauge,
}

impl Metrics {
    pub fn new(pop: &str) -> Self {
        let mut root = Registry::with_labels([("pop".into(), pop.to_owned().into())].into_iter());
        let registry = root.sub_registry_with_prefix("edge");
        let m = Self {
            admission: AdmissionMetrics::default(),
            config_reloads: Family::default(),
            config_generation: Gauge::default(),
            requests: Family::default(),
            verify_failures: Family::default(),
            duplicates: Family::default(),
            rejected: Family::default(),
            spool_appends: Family::default(),
            spool_bytes: Gauge::default(),
            spool_segments: Gauge::default(),
            spool_backlog_records: Gauge::default(),
            spool_fsync_seconds: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            spool_batch_records: Histogram::new(exponential_buckets(1.0, 2.0, 13)),
            open_connections: Gauge::default(),
            tls_handshakes: Family::default(),
            tls_handshake_failures: Family::default(),
            accept_errors: Family::default(),
            connections_refused: Family::default(),
            tfo_accepted: Counter::default(),
            early_data_connections: Counter::default(),
            early_requests: Family::default(),
            backhaul_dials: Counter::default(),
            backhaul_ready_connections: Gauge::default(),
            backhaul_acks: Counter::default(),
            backhaul_duplicates: Counter::default(),
            backhaul_retries: Family::default(),
            backhaul_dead_letters: Counter::default(),
            backhaul_publish_seconds: Histogram::new(exponential_buckets(0.000_1, 2.0, 16)),
            backhaul_delivery_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 20)),
            backhaul_lag_records: Gauge::default(),
            backhaul_lag_bytes: Gauge::default(),
            backhaul_oldest_undelivered_seconds: Gauge::default(),
            backhaul_breaker_state: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "requests",
            "Webhook requests answered, by route and status",
            m.requests.clone(),
        );
        registry.register(
            "verify_failures",
            "Signature verification failures, by route and reason",
            m.verify_failures.clone(),
        );
        registry.register(
            "duplicates",
            "Verified redeliveries acknowledged without storing again, by route",
            m.duplicates.clone(),
        );
        registry.register(
            "rejected",
            "Requests refused before routing, by reason",
            m.rejected.clone(),
        );
        registry.register(
            "spool_appends",
            "Spool appends, by result",
            m.spool_appends.clone(),
        );
        registry.register(
            "spool_bytes",
            "Bytes held in spool segments",
            m.spool_bytes.clone(),
        );
        registry.register(
            "spool_segments",
            "Spool segment files",
            m.spool_segments.clone(),
        );
        registry.register(
            "spool_backlog_records",
            "Records stored but not yet confirmed by the origin",
            m.spool_backlog_records.clone(),
        );
        registry.register(
            "spool_fsync_seconds",
            "Duration of each spool fdatasync",
            m.spool_fsync_seconds.clone(),
        );
        registry.register(
            "spool_batch_records",
            "Appends per group commit",
            m.spool_batch_records.clone(),
        );
        registry.register(
            "open_connections",
            "Client connections open",
            m.open_connections.clone(),
        );
        registry.register(
            "tls_handshakes",
            "Completed TLS handshakes, by version and resumption",
            m.tls_handshakes.clone(),
        );
        registry.register(
            "tls_handshake_failures",
            "Failed TLS handshakes, by reason",
            m.tls_handshake_failures.clone(),
        );
        registry.register(
            "accept_errors",
            "accept() failures, by reason",
            m.accept_errors.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed before TLS because a cap was reached, by cap",
            m.connections_refused.clone(),
        );
        registry.register(
            "tfo_accepted",
            "Accepted connections whose SYN carried data (TCP Fast Open)",
            m.tfo_accepted.clone(),
        );
        registry.register(
            "tls_early_data_connections",
            "TLS connections whose 0-RTT early data was accepted",
            m.early_data_connections.clone(),
        );
        registry.register(
            "early_requests",
            "Requests seen before the handshake completed (or marked Early-Data: 1), by outcome",
            m.early_requests.clone(),
        );
        registry.register(
            "backhaul_dials",
            "Connections established to the origin",
            m.backhaul_dials.clone(),
        );
        registry.register(
            "backhaul_ready_connections",
            "Origin connections open and ready",
            m.backhaul_ready_connections.clone(),
        );
        registry.register(
            "backhaul_acks",
            "Events the origin acknowledged",
            m.backhaul_acks.clone(),
        );
        registry.register(
            "backhaul_duplicates",
            "Acknowledged events the origin already had (dropped by event id)",
            m.backhaul_duplicates.clone(),
        );
        registry.register(
            "backhaul_retries",
            "Delivery retries, by reason",
            m.backhaul_retries.clone(),
        );
        registry.register(
            "backhaul_dead_letters",
            "Events the origin refused for good, kept in the dead-letter store",
            m.backhaul_dead_letters.clone(),
        );
        registry.register(
            "backhaul_publish_seconds",
            "Publish to acknowledgement, per attempt",
            m.backhaul_publish_seconds.clone(),
        );
        registry.register(
            "backhaul_delivery_seconds",
            "Receive (2xx) to origin acknowledgement",
            m.backhaul_delivery_seconds.clone(),
        );
        registry.register(
            "backhaul_lag_records",
            "Durable records the origin has not confirmed",
            m.backhaul_lag_records.clone(),
        );
        registry.register(
            "backhaul_lag_bytes",
            "Spool bytes the origin has not confirmed (errs high by under 1 MiB)",
            m.backhaul_lag_bytes.clone(),
        );
        registry.register(
            "backhaul_oldest_undelivered_seconds",
            "Age of the oldest record read but not confirmed",
            m.backhaul_oldest_undelivered_seconds.clone(),
        );
        registry.register(
            "backhaul_breaker_state",
            "Origin circuit breaker: 0 closed, 1 open, 2 half-open",
            m.backhaul_breaker_state.clone(),
        );
        registry.register(
            "config_reloads",
            "Config reloads (SIGHUP), by result: ok, or failed (the running config kept)",
            m.config_reloads.clone(),
        );
        registry.register(
            "config_generation",
            "Config generation: 1 at start, +1 per applied reload",
            m.config_generation.clone(),
        );
        m.admission.register(&mut root);
        Self {
            registry: root,
            ..m
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    pub fn request(&self, route: &str, status: http::StatusCode) {
        self.requests
            .get_or_create(&RouteStatus {
                route: route.to_owned(),
                status: status.as_u16(),
            })
            .inc();
    }

    pub fn reject(&self, reason: &'static str) {
        self.rejected.get_or_create(&Reason { reason }).inc();
    }

    pub fn spool_append(&self, outcome: &Result<Appended, AppendError>) {
        let reason = match outcome {
            Ok(Appended::Stored { .. }) => "stored",
            Ok(Appended::Duplicate { .. }) => "duplicate",
            Err(AppendError::Full) => "full",
            Err(AppendError::DiskFull) => "disk_full",
            Err(AppendError::Failed(_)) => "failed",
            Err(AppendError::Closed) => "closed",
        };
        self.spool_appends.get_or_create(&Reason { reason }).inc();
    }
}
