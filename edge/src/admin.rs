//! The admin listener (plain HTTP, bind it to a management address): `/healthz` (the
//! process is alive), `/readyz` (this PoP can accept and store events: the BGP agent
//! withdraws the prefix when it fails) and `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use edge_kit::admin::Answer;
use http::StatusCode;
use tokio::net::TcpListener;

use crate::metrics::Metrics;
use crate::spool::Spool;

/// Process-level readiness flags.
#[derive(Debug, Default)]
pub struct Readiness {
    pub listening: AtomicBool,
    pub draining: AtomicBool,
}

pub struct Admin {
    pub readiness: Arc<Readiness>,
    pub spool: Arc<Spool>,
    pub metrics: Arc<Metrics>,
}

impl Admin {
    /// Serves `/healthz`, `/readyz` and `/metrics` for the life of the process.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        edge_kit::admin::serve(listener, move |path| self.answer(path)).await;
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

    pub fn unready_reason(&self) -> Option<&'static str> {
        if self.readiness.draining.load(Ordering::Acquire) {
            Some("draining")
        } else if !self.readiness.listening.load(Ordering::Acquire) {
            Some("listeners not up")
        } else {
            self.spool.unready_reason()
        }
    }
}
