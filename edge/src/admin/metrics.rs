//! The edge's Prometheus registry. Each subsystem owns its metrics and registers them
//! here under `edge_*` (admission under `webhook_ingress_*`); every series carries the
//! `pop` label, and every limit the edge enforces has a counter in its subsystem.

use edge_kit::admin::AdminMetrics;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::admission::AdmissionMetrics;
use crate::backhaul::BackhaulMetrics;
use crate::http::HttpMetrics;
use crate::ranges::RangesMetrics;
use crate::reload::ReloadMetrics;
use crate::server::ConnectionMetrics;
use crate::spool::SpoolMetrics;
use crate::tls::TlsMetrics;

/// Every metric of the edge, in one registry with the `pop` label.
pub struct Metrics {
    registry: Registry,
    /// 1 while `/readyz` would answer 200; set at each scrape.
    pub ready: Gauge,
    /// Admin connections closed for a limit.
    pub admin: AdminMetrics,
    /// Admission control.
    pub admission: AdmissionMetrics,
    /// Delivery to the origin.
    pub backhaul: BackhaulMetrics,
    /// Connections and their limits.
    pub connections: ConnectionMetrics,
    /// Requests and answers.
    pub http: HttpMetrics,
    /// Providers' egress lists.
    pub ranges: RangesMetrics,
    /// Config reloads.
    pub reload: ReloadMetrics,
    /// The spool.
    pub spool: SpoolMetrics,
    /// TLS handshakes and resumption.
    pub tls: TlsMetrics,
}

impl Metrics {
    /// The edge's metrics for `pop`, registered.
    pub fn new(pop: &str) -> Self {
        let mut registry = edge_kit::metrics::registry_for_pop(pop);
        let edge = registry.sub_registry_with_prefix("edge");
        let http = HttpMetrics::register(edge);
        let spool = SpoolMetrics::register(edge);
        let connections = ConnectionMetrics::register(edge);
        let tls = TlsMetrics::register(edge);
        let backhaul = BackhaulMetrics::register(edge);
        let reload = ReloadMetrics::register(edge);
        let ranges = RangesMetrics::register(edge);
        let admin = AdminMetrics::register(edge);
        let ready = Gauge::default();
        edge.register(
            "ready",
            "1 while this PoP can accept and store events (/readyz answers 200)",
            ready.clone(),
        );
        edge_kit::metrics::register_build_info(edge, env!("CARGO_PKG_VERSION"));
        let admission = AdmissionMetrics::register(&mut registry);
        Self {
            registry,
            ready,
            admin,
            admission,
            backhaul,
            connections,
            http,
            ranges,
            reload,
            spool,
            tls,
        }
    }

    /// The text exposition for `/metrics`.
    pub fn encode(&self) -> String {
        edge_kit::metrics::encode(&self.registry)
    }
}
