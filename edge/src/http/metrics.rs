//! The HTTP layer's metrics: answers by route and status, verification failures,
//! redeliveries, and every request refused by a limit. Registered under `edge_*`.

use edge_kit::metrics::Reason;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Cheap to clone: every field is a shared handle.
#[derive(Clone, Debug, Default)]
pub struct HttpMetrics {
    requests: Family<RouteStatus, Counter>,
    verify_failures: Family<RouteReason, Counter>,
    duplicates: Family<RouteLabel, Counter>,
    replays: Family<RouteLabel, Counter>,
    /// Requests refused by a limit before reaching a route (header size, unknown path…).
    rejected: Family<Reason, Counter>,
    early_requests: Family<Reason, Counter>,
    challenges: Family<RouteChallenge, Counter>,
}

impl HttpMetrics {
    /// Creates the metrics and registers them into `registry` (the `edge_` one).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "requests",
            "Webhook requests answered, by route and status",
            metrics.requests.clone(),
        );
        registry.register(
            "verify_failures",
            "Signature verification failures, by route and reason",
            metrics.verify_failures.clone(),
        );
        registry.register(
            "duplicates",
            "Verified redeliveries acknowledged without storing again, by route",
            metrics.duplicates.clone(),
        );
        registry.register(
            "replays",
            "Signed bodies already stored that came again under a fresh unsigned id, acknowledged and not stored, by route",
            metrics.replays.clone(),
        );
        registry.register(
            "rejected",
            "Requests refused before routing, by reason",
            metrics.rejected.clone(),
        );
        registry.register(
            "early_requests",
            "Requests seen before the handshake completed (or marked Early-Data: 1), by outcome",
            metrics.early_requests.clone(),
        );
        registry.register(
            "challenges",
            "Provider endpoint handshakes (not events) by route, challenge and outcome",
            metrics.challenges.clone(),
        );
        metrics
    }

    /// The counter of `route`'s answers with `status`, resolved once: a route's
    /// acknowledgements are counted through it without building a label per request.
    pub fn requests_answered(&self, route: &str, status: http::StatusCode) -> Counter {
        self.requests
            .get_or_create(&RouteStatus {
                route: route.to_owned(),
                status: status.as_u16(),
            })
            .clone()
    }

    /// Counts one answer of `route` with `status` (the acknowledgement goes through the
    /// route's own counter, see [`HttpMetrics::requests_answered`]).
    pub fn request(&self, route: &str, status: http::StatusCode) {
        self.requests_answered(route, status).inc();
    }

    pub fn reject(&self, reason: &'static str) {
        self.rejected.get_or_create(&Reason { reason }).inc();
    }

    pub fn verify_failure(&self, route: &str, reason: &'static str) {
        self.verify_failures
            .get_or_create(&RouteReason {
                route: route.to_owned(),
                reason,
            })
            .inc();
    }

    pub fn replay(&self, route: &str) {
        self.replays
            .get_or_create(&RouteLabel {
                route: route.to_owned(),
            })
            .inc();
    }

    pub fn duplicate(&self, route: &str) {
        self.duplicates
            .get_or_create(&RouteLabel {
                route: route.to_owned(),
            })
            .inc();
    }

    /// A provider's endpoint handshake: answered, or why not.
    pub fn challenge(&self, route: &str, challenge: &'static str, outcome: &'static str) {
        self.challenges
            .get_or_create(&RouteChallenge {
                route: route.to_owned(),
                challenge,
                outcome,
            })
            .inc();
    }

    /// An early (0-RTT) request, by what its route's policy did with it.
    pub fn early_request(&self, outcome: &'static str) {
        self.early_requests
            .get_or_create(&Reason { reason: outcome })
            .inc();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteChallenge {
    route: String,
    challenge: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteReason {
    route: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}
