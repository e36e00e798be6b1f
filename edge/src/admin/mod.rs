//! The admin listener (plain HTTP, bind it to a management address): `/healthz` (the
//! process is alive), `/readyz` (this PoP can accept and store events: the BGP agent
//! withdraws the prefix when it fails) and `/metrics`; [`metrics`] holds every family
//! the process registers.

pub mod metrics;

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use edge_kit::admin::Answer;
use edge_kit::service::Services;
use http::StatusCode;
use tokio::net::TcpListener;

use crate::spool::Spool;
use metrics::Metrics;

/// Process-level readiness: the listeners' and the drain's flags, and the services that
/// must run as long as the process (a PoP whose spool writer, backhaul, shed ledger or
/// reload watcher is gone must withdraw).
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    pub listening: AtomicBool,
    pub draining: AtomicBool,
    pub services: Arc<Services>,
}

pub(crate) struct Admin {
    pub readiness: Arc<Readiness>,
    pub spool: Arc<Spool>,
    pub metrics: Arc<Metrics>,
}

impl Admin {
    /// Serves `/healthz`, `/readyz` and `/metrics` for the life of the process.
    pub(crate) async fn serve(self: Arc<Self>, listener: TcpListener) {
        let metrics = self.metrics.admin.clone();
        edge_kit::admin::serve(listener, metrics, move |path| self.answer(path)).await;
    }

    fn answer(&self, path: &str) -> Answer {
        match path {
            "/healthz" => Answer::new(StatusCode::OK, "text/plain", "ok\n"),
            "/readyz" => match self.unready_reason() {
                None => Answer::new(StatusCode::OK, "text/plain", "ready\n"),
                Some(reason) => Answer::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("not ready: {reason}\n"),
                ),
            },
            "/metrics" => {
                let ready = self.unready_reason().is_none();
                self.metrics.ready.set(i64::from(ready));
                Answer::openmetrics(self.metrics.encode())
            }
            _ => Answer::not_found("/healthz /readyz /metrics"),
        }
    }

    pub(crate) fn unready_reason(&self) -> Option<Cow<'static, str>> {
        if self.readiness.draining.load(Ordering::Acquire) {
            Some("draining".into())
        } else if !self.readiness.listening.load(Ordering::Acquire) {
            Some("listeners not up".into())
        } else if let Some(service) = self.readiness.services.ended() {
            Some(format!("{service} stopped").into())
        } else {
            self.spool.unready_reason().map(Cow::Borrowed)
        }
    }
}
