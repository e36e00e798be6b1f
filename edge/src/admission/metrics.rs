//! Admission control's metrics, under the names the ingress literature uses
//! (`webhook_ingress_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::limiter::{Priority, ShedReason};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShedLabel {
    priority: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PriorityLabel {
    priority: &'static str,
}

/// The admission metrics, under the names the ingress literature uses
/// (`webhook_ingress_*`). Clones share the same series.
#[derive(Clone, Debug)]
pub struct AdmissionMetrics {
    pub(super) limit: Gauge,
    pub(super) inflight: Gauge,
    shed: Family<ShedLabel, Counter>,
    shed_after_body: Family<PriorityLabel, Counter>,
    pub(super) queue_delay: Histogram,
    pub(super) overloaded: Gauge,
    /// Request body bytes held in the edge-wide budget.
    pub(super) body_bytes: Gauge,
    /// Shed-ledger entries lost (hand-off full, file full of unshipped lines, write error).
    pub ledger_dropped: Counter,
}

impl Default for AdmissionMetrics {
    fn default() -> Self {
        Self {
            limit: Gauge::default(),
            inflight: Gauge::default(),
            shed: Family::default(),
            shed_after_body: Family::default(),
            // 0.25 ms to about 4 s.
            queue_delay: Histogram::new(exponential_buckets(0.000_25, 2.0, 15)),
            overloaded: Gauge::default(),
            body_bytes: Gauge::default(),
            ledger_dropped: Counter::default(),
        }
    }
}

impl AdmissionMetrics {
    /// The admission metrics, registered (unregistered ones, for tests: `default()`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let ingress = registry.sub_registry_with_prefix("webhook_ingress");
        ingress.register(
            "concurrency_limit",
            "Adaptive concurrency limit (slots for verify + spool append + fsync)",
            metrics.limit.clone(),
        );
        ingress.register(
            "inflight_requests",
            "Requests holding a slot",
            metrics.inflight.clone(),
        );
        ingress.register(
            "shed",
            "Requests refused by admission control, by priority and reason (rate_limited is a 429, the rest 503)",
            metrics.shed.clone(),
        );
        ingress.register(
            "shed_after_body",
            "Of those, refused only after their body was read (no slot then, or shed from the queue): bytes received for nothing",
            metrics.shed_after_body.clone(),
        );
        ingress.register(
            "queue_delay_seconds",
            "Time spent waiting for a slot",
            metrics.queue_delay.clone(),
        );
        ingress.register(
            "shed_ledger_dropped",
            "Refused requests with a delivery id that the shed ledger could not keep",
            metrics.ledger_dropped.clone(),
        );
        ingress.register(
            "body_bytes",
            "Request body bytes held (being read, verified or stored) against admission.max_body_bytes",
            metrics.body_bytes.clone(),
        );
        ingress.register(
            "overloaded",
            "1 while the minimum wait for a slot stays above the target (CoDel)",
            metrics.overloaded.clone(),
        );
        metrics
    }

    pub(super) fn shed(&self, priority: Priority, reason: &'static str) {
        self.shed
            .get_or_create(&ShedLabel {
                priority: priority.as_str(),
                reason,
            })
            .inc();
    }

    /// Refusals of `priority` that came only once the body was in.
    #[cfg(test)]
    pub(super) fn shed_after_body_count(&self, priority: Priority) -> u64 {
        self.shed_after_body
            .get_or_create(&PriorityLabel {
                priority: priority.as_str(),
            })
            .get()
    }

    /// A shed decided by [`super::Admission::acquire`], which runs once the body is in.
    pub(super) fn shed_after_body(&self, priority: Priority, reason: ShedReason) {
        self.shed(priority, reason.as_str());
        self.shed_after_body
            .get_or_create(&PriorityLabel {
                priority: priority.as_str(),
            })
            .inc();
    }
}
