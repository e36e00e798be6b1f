//! The admin listener (plain HTTP, bind it to a management address): `/healthz` (the
//! process is alive), `/readyz` (this PoP can accept and store events: the BGP agent
//! withdraws the prefix when it fails) and `/metrics`; [`metrics`] holds every family
//! the process registers.

pub mod metrics;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use edge_kit::admin::Answer;
use http::StatusCode;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::task::AbortHandle;

use crate::spool::Spool;
use metrics::Metrics;

/// Process-level readiness: flags, and the tasks that must run as long as the process.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    pub listening: AtomicBool,
    pub draining: AtomicBool,
    long_lived: Mutex<Vec<(&'static str, AbortHandle)>>,
}

impl Readiness {
    /// From now on `/readyz` fails with `stopped` once `task` has ended: a PoP whose
    /// spool writer, backhaul, shed ledger or reload watcher is gone must withdraw.
    pub(crate) fn watch(&self, task: AbortHandle, stopped: &'static str) {
        self.tasks().push((stopped, task));
    }

    /// What the first long-lived task found stopped says.
    pub(crate) fn stopped_task(&self) -> Option<&'static str> {
        self.tasks()
            .iter()
            .find(|(_, task)| task.is_finished())
            .map(|(stopped, _)| *stopped)
    }

    fn tasks(&self) -> parking_lot::MutexGuard<'_, Vec<(&'static str, AbortHandle)>> {
        // Plain data: consistent whatever a panicking holder did.
        self.long_lived.lock()
    }
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

    pub(crate) fn unready_reason(&self) -> Option<&'static str> {
        if self.readiness.draining.load(Ordering::Acquire) {
            Some("draining")
        } else if !self.readiness.listening.load(Ordering::Acquire) {
            Some("listeners not up")
        } else {
            self.readiness
                .stopped_task()
                .or_else(|| self.spool.unready_reason())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readiness_names_the_first_long_lived_task_that_stopped() {
        let readiness = Readiness::default();
        let forever = tokio::spawn(std::future::pending::<()>());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let until_told = tokio::spawn(async move {
            let _ = stopped.await;
        });
        readiness.watch(forever.abort_handle(), "spool writer stopped");
        readiness.watch(until_told.abort_handle(), "backhaul stopped");
        assert_eq!(readiness.stopped_task(), None);
        drop(stop);
        until_told.await.unwrap();
        assert_eq!(readiness.stopped_task(), Some("backhaul stopped"));
        forever.abort();
        let _ = forever.await;
        assert_eq!(readiness.stopped_task(), Some("spool writer stopped"));
    }
}
