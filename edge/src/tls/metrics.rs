//! TLS metrics: handshakes by version and resumption, failures, accepted 0-RTT, and
//! when each served certificate expires. Registered under `edge_tls_*`.

use edge_kit::metrics::Reason;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Cheap to clone: every field is a shared handle.
#[derive(Clone, Debug, Default)]
pub struct TlsMetrics {
    handshakes: Family<Handshake, Counter>,
    handshake_failures: Family<Reason, Counter>,
    pub early_data_connections: Counter,
    certificate_not_after: Family<Certificate, Gauge>,
    ticket_keys_changed: Gauge,
}

impl TlsMetrics {
    /// Creates the metrics and registers them into `registry` (the `edge_` one).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let tls = registry.sub_registry_with_prefix("tls");
        tls.register(
            "handshakes",
            "Completed TLS handshakes, by version and resumption",
            metrics.handshakes.clone(),
        );
        tls.register(
            "handshake_failures",
            "Failed TLS handshakes, by reason",
            metrics.handshake_failures.clone(),
        );
        tls.register(
            "early_data_connections",
            "TLS connections whose 0-RTT early data was accepted",
            metrics.early_data_connections.clone(),
        );
        tls.register(
            "certificate_not_after_timestamp_seconds",
            "When each served certificate expires (its notAfter, Unix time), by certificate (default or the SNI name)",
            metrics.certificate_not_after.clone(),
        );
        tls.register(
            "ticket_keys_changed_timestamp_seconds",
            "When the shared session-ticket key file last changed (its mtime, Unix time): every rotation step rewrites it, so now minus this is the newest key's age",
            metrics.ticket_keys_changed.clone(),
        );
        metrics
    }

    pub fn ticket_keys_changed(&self, unix_secs: i64) {
        self.ticket_keys_changed.set(unix_secs);
    }

    pub fn handshake(&self, version: &'static str, resumed: bool) {
        self.handshakes
            .get_or_create(&Handshake { version, resumed })
            .inc();
    }

    /// The certificates now served, with their notAfter: replaces the previous set, so
    /// a certificate a reload dropped leaves the metric.
    pub fn served_certificates(&self, expiry: &[(String, i64)]) {
        self.certificate_not_after.clear();
        for (certificate, not_after) in expiry {
            self.certificate_not_after
                .get_or_create(&Certificate {
                    certificate: certificate.clone(),
                })
                .set(*not_after);
        }
    }

    pub fn handshake_failure(&self, reason: &'static str) {
        self.handshake_failures
            .get_or_create(&Reason { reason })
            .inc();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Handshake {
    version: &'static str,
    resumed: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Certificate {
    certificate: String,
}
