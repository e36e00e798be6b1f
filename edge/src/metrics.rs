//! The edge's Prometheus registry. Each subsystem owns its metrics and registers them
//! here under `edge_*` (admission under `webhook_ingress_*`); every series carries the
//! `pop` label, and every limit the edge enforces has a counter in its subsystem.

use prometheus_client::registry::Registry;

use crate::admission::AdmissionMetrics;
use crate::backhaul::BackhaulMetrics;
use crate::http::HttpMetrics;
use crate::reload::ReloadMetrics;
use crate::server::ConnectionMetrics;
use crate::spool::SpoolMetrics;
use crate::tls::TlsMetrics;

pub struct Metrics {
    registry: Registry,
    pub admission: AdmissionMetrics,
    pub backhaul: BackhaulMetrics,
    pub connections: ConnectionMetrics,
    pub http: HttpMetrics,
    pub reload: ReloadMetrics,
    pub spool: SpoolMetrics,
    pub tls: TlsMetrics,
}

impl Metrics {
    pub fn new(pop: &str) -> Self {
        let mut registry = edge_kit::metrics::registry_for_pop(pop);
        let edge = registry.sub_registry_with_prefix("edge");
        let http = HttpMetrics::register(edge);
        let spool = SpoolMetrics::register(edge);
        let connections = ConnectionMetrics::register(edge);
        let tls = TlsMetrics::register(edge);
        let backhaul = BackhaulMetrics::register(edge);
        let reload = ReloadMetrics::register(edge);
        let admission = AdmissionMetrics::default();
        admission.register(&mut registry);
        Self {
            registry,
            admission,
            backhaul,
            connections,
            http,
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
