//! The connection-level metrics of the server, under `edge_*`.

use edge_kit::metrics::Reason;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Connection-level metrics, registered under `edge_*`. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    pub(super) open_connections: Gauge,
    pub(super) idle_connections: Gauge,
    pub(super) accept_errors: Family<Reason, Counter>,
    pub(super) connections_refused: Family<Reason, Counter>,
    pub(super) evicted: Family<Reason, Counter>,
    pub(super) tfo_accepted: Counter,
}

impl ConnectionMetrics {
    /// Creates the metrics and registers them into `registry` (the `edge_` one).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "open_connections",
            "Client connections open",
            metrics.open_connections.clone(),
        );
        registry.register(
            "idle_connections",
            "HTTP/1.1 connections waiting for a request with no HTTP buffers (of edge_open_connections)",
            metrics.idle_connections.clone(),
        );
        registry.register(
            "accept_errors",
            "accept() failures, by reason",
            metrics.accept_errors.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed before TLS because a cap was reached, by cap",
            metrics.connections_refused.clone(),
        );
        registry.register(
            "connections_evicted",
            "Connections closed at a connection cap to let a new one in, by what they were doing (handshake, trickling_body, idle)",
            metrics.evicted.clone(),
        );
        registry.register(
            "tfo_accepted",
            "Accepted connections whose SYN carried data (TCP Fast Open)",
            metrics.tfo_accepted.clone(),
        );
        metrics
    }

    pub(super) fn refused(&self, reason: &'static str) {
        self.connections_refused
            .get_or_create(&Reason { reason })
            .inc();
    }

    pub(super) fn evicted(&self, reason: &'static str) {
        self.evicted.get_or_create(&Reason { reason }).inc();
    }

    pub(super) fn accept_error(&self, reason: &'static str) {
        self.accept_errors.get_or_create(&Reason { reason }).inc();
    }
}
