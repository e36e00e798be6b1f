//! What every request handler shares: the application state and the route table, made
//! from `Settings` at start and at each reload.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;

use super::metrics::HttpMetrics;
use crate::admission::Admission;
use crate::config::{Route, Settings};
use crate::spool::Spool;

/// Everything a request handler needs, shared by all connections.
pub(crate) struct App {
    /// Sent back as `Edge-Pop` so a sender (or an operator with curl) sees which PoP the
    /// anycast address landed on.
    pub pop: http::HeaderValue,
    pub routes: HashMap<String, Arc<RouteEntry>>,
    pub body_rate: crate::admission::body_rate::BodyRate,
    pub request_timeout: std::time::Duration,
    /// The request-head limits, enforced here so a 431 is an answer like any other (the
    /// rest of the body discarded) rather than hyper closing the connection on it.
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub slow_body_log: edge_kit::log_throttle::LogThrottle,
    pub too_early_log: edge_kit::log_throttle::LogThrottle,
    pub shed_log: edge_kit::log_throttle::LogThrottle,
    pub head_log: edge_kit::log_throttle::LogThrottle,
    pub verify_log: edge_kit::log_throttle::LogThrottle,
    pub challenge_log: edge_kit::log_throttle::LogThrottle,
    /// Lives across reloads: the adaptive limit and the queue are the process's.
    pub admission: Arc<Admission>,
    pub spool: Arc<Spool>,
    pub metrics: HttpMetrics,
}

/// A route plus its name as a shared string (spool records and metrics use it per request).
pub(crate) struct RouteEntry {
    pub route: Route,
    pub name: Arc<str>,
    /// `edge_requests_total` for this route's acknowledgement status, the answer to
    /// nearly every request it gets.
    pub acknowledged: Counter,
}

impl App {
    pub(crate) fn new(
        settings: &Settings,
        spool: Arc<Spool>,
        metrics: HttpMetrics,
        admission: Arc<Admission>,
    ) -> Self {
        let routes = settings
            .routes
            .iter()
            .map(|route| {
                let entry = RouteEntry {
                    route: route.clone(),
                    name: Arc::from(route.name.as_str()),
                    acknowledged: metrics.requests_answered(&route.name, route.ack_status),
                };
                (route.path.clone(), Arc::new(entry))
            })
            .collect();
        Self {
            pop: http::HeaderValue::from_str(&settings.pop)
                .unwrap_or(http::HeaderValue::from_static("invalid")),
            routes,
            body_rate: settings.http.body_rate,
            request_timeout: settings.http.request_timeout,
            max_header_bytes: settings.http.max_header_bytes,
            max_headers: settings.http.max_headers,
            slow_body_log: Default::default(),
            too_early_log: Default::default(),
            shed_log: Default::default(),
            head_log: Default::default(),
            verify_log: Default::default(),
            challenge_log: Default::default(),
            admission,
            spool,
            metrics,
        }
    }
}
