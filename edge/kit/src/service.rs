//! A daemon's long-lived tasks ("services"), kept in the order they started. Each is
//! watched while the daemon runs — readiness names the first that ended, since a daemon
//! missing one of them must not say it is ready — and the ones that take a stop signal
//! are stopped in reverse order of start, so what a service relies on outlives it.

use std::future::Future;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::Instrument;

/// The services of one daemon; share it behind an `Arc` with whatever reports readiness.
#[derive(Debug, Default)]
pub struct Services {
    started: Mutex<Vec<Service>>,
}

/// What a stoppable service is handed: it becomes `true` when the service must stop.
pub type Stopping = watch::Receiver<bool>;

impl Services {
    /// Runs `task` (in the current span) for the life of the process: it ends with the
    /// runtime, and should not end before.
    pub fn spawn(&self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(task.in_current_span());
        self.push(name, Run::Watched(handle.abort_handle()));
    }

    /// Runs the task `start` makes; [`Services::stop`] tells it to stop and waits for it.
    pub fn spawn_stoppable<F>(&self, name: &'static str, start: impl FnOnce(Stopping) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (stop, stopping) = watch::channel(false);
        let handle = tokio::spawn(start(stopping).in_current_span());
        self.push(name, Run::Stoppable { stop, handle });
    }

    /// Watches `task`, which something else started and stops (a spool's writer).
    pub fn watch(&self, name: &'static str, task: AbortHandle) {
        self.push(name, Run::Watched(task));
    }

    /// The name of the first service, in order of start, that has ended.
    pub fn ended(&self) -> Option<&'static str> {
        self.started
            .lock()
            .iter()
            .find(|service| service.run.is_finished())
            .map(|service| service.name)
    }

    /// Stops the stoppable services, last started first, each waited for before the
    /// next is told; the others are left to end with the runtime.
    pub async fn stop(&self) {
        let started = std::mem::take(&mut *self.started.lock());
        for service in started.into_iter().rev() {
            if let Run::Stoppable { stop, handle } = service.run {
                let _ = stop.send(true);
                if let Err(e) = handle.await {
                    tracing::error!(service = service.name, error = %e, "service ended badly while stopping");
                }
            }
        }
    }

    fn push(&self, name: &'static str, run: Run) {
        self.started.lock().push(Service { name, run });
    }
}

#[derive(Debug)]
struct Service {
    name: &'static str,
    run: Run,
}

#[derive(Debug)]
enum Run {
    Watched(AbortHandle),
    Stoppable {
        stop: watch::Sender<bool>,
        handle: JoinHandle<()>,
    },
}

impl Run {
    fn is_finished(&self) -> bool {
        match self {
            Run::Watched(task) => task.is_finished(),
            Run::Stoppable { handle, .. } => handle.is_finished(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn ended_names_the_first_service_that_stopped() {
        let services = Services::default();
        let (end, ended) = tokio::sync::oneshot::channel::<()>();
        services.spawn("forever", std::future::pending());
        services.spawn("until told", async move {
            let _ = ended.await;
        });
        tokio::task::yield_now().await;
        assert_eq!(services.ended(), None);
        end.send(()).unwrap();
        for _ in 0..100 {
            if services.ended().is_some() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(services.ended(), Some("until told"));
    }

    #[tokio::test]
    async fn stop_stops_the_stoppable_last_started_first_and_waits_for_each() {
        let services = Services::default();
        let order = Arc::new(Mutex::new(Vec::new()));
        for name in ["first", "second"] {
            let order = Arc::clone(&order);
            services.spawn_stoppable(name, move |mut stopping| async move {
                let _ = stopping.wait_for(|stop| *stop).await;
                // Yield once: a stop that did not wait would let the next one in first.
                tokio::task::yield_now().await;
                order.lock().push(name);
            });
        }
        services.spawn("left to the runtime", std::future::pending());
        services.stop().await;
        assert_eq!(*order.lock(), ["second", "first"]);
        assert_eq!(
            services.ended(),
            None,
            "stopped services are no longer watched"
        );
    }
}
