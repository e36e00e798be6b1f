//! One runtime per core: each worker is a thread with a single-threaded tokio runtime,
//! pinned to a CPU, with a socket of its own on every listen address (an SO_REUSEPORT
//! group), and it serves the connections it accepts from the handshake to the last
//! response. No connection moves between threads and no runtime steals work: the wake-ups
//! and cross-core hand-offs of a work-stealing scheduler cost more than a webhook's
//! own work. What the workers share (connection caps, admission, the spool) is behind
//! locks or channels, so caps stay exact across cores.

use std::sync::Arc;

use anyhow::Context;
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

use super::liveness::{self, Heartbeats};
use super::{Connections, Server};

/// Where each worker runs: the CPU it is pinned to, round-robin over the CPUs the
/// process may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    cpus: Vec<usize>,
}

impl Placement {
    /// `workers` workers (`None`: one per CPU in `allowed`) over the `allowed` CPUs.
    pub(crate) fn new(workers: Option<usize>, allowed: &[usize]) -> Self {
        let allowed = if allowed.is_empty() {
            &[0][..]
        } else {
            allowed
        };
        let count = workers.unwrap_or(allowed.len()).max(1);
        Self {
            cpus: allowed.iter().copied().cycle().take(count).collect(),
        }
    }

    /// How many workers, so how many sockets per listen address.
    pub(crate) fn workers(&self) -> usize {
        self.cpus.len()
    }
}

/// The workers' accept loops, running until the stop signal.
pub(crate) struct Accepting {
    ended: Vec<oneshot::Receiver<()>>,
    connections: Connections,
    heartbeats: Arc<Heartbeats>,
}

impl Accepting {
    /// The workers' heartbeats, each beating while its runtime turns.
    pub(crate) fn heartbeats(&self) -> Arc<Heartbeats> {
        Arc::clone(&self.heartbeats)
    }

    /// Waits until every worker has stopped accepting, and returns the connections
    /// still open (their workers run until the last one ends).
    pub(crate) async fn stopped(self) -> Connections {
        for ended in self.ended {
            let _ = ended.await;
        }
        self.connections
    }
}

impl Server {
    /// Starts one worker per entry of `placement`; `listeners` holds, for each listen
    /// address, one socket per worker. Returns once every worker accepts.
    pub(crate) fn start(
        self: &Arc<Self>,
        placement: &Placement,
        listeners: Vec<Vec<std::net::TcpListener>>,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<Accepting> {
        let connections = Connections::default();
        let heartbeats = Arc::new(Heartbeats::new(
            placement.workers(),
            std::time::Instant::now(),
        ));
        let mut per_worker: Vec<Vec<std::net::TcpListener>> =
            (0..placement.workers()).map(|_| Vec::new()).collect();
        for group in listeners {
            anyhow::ensure!(
                group.len() == placement.workers(),
                "one socket per worker and address"
            );
            for (sockets, socket) in per_worker.iter_mut().zip(group) {
                sockets.push(socket);
            }
        }
        let ended = placement
            .cpus
            .iter()
            .zip(per_worker)
            .enumerate()
            .map(|(index, (cpu, sockets))| {
                let worker = Worker {
                    index,
                    cpu: *cpu,
                    server: Arc::clone(self),
                    stop: stop.clone(),
                    connections: connections.clone(),
                    heartbeats: Arc::clone(&heartbeats),
                };
                worker
                    .spawn(sockets)
                    .with_context(|| format!("worker {index} (CPU {cpu})"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Accepting {
            ended,
            connections,
            heartbeats,
        })
    }
}

/// One worker thread and what it needs.
struct Worker {
    index: usize,
    cpu: usize,
    server: Arc<Server>,
    stop: watch::Receiver<bool>,
    connections: Connections,
    heartbeats: Arc<Heartbeats>,
}

impl Worker {
    /// Starts the thread; returns once its runtime holds its sockets, with what says
    /// when it has stopped accepting.
    fn spawn(self, sockets: Vec<std::net::TcpListener>) -> anyhow::Result<oneshot::Receiver<()>> {
        let (started_tx, started) = std::sync::mpsc::sync_channel(1);
        let (ended_tx, ended) = oneshot::channel();
        let span = tracing::Span::current();
        std::thread::Builder::new()
            .name(format!("edge-worker-{}", self.index))
            .spawn(move || {
                let _span = span.clone().entered();
                let prepared = self.prepare(sockets);
                let (runtime, listeners) = match prepared {
                    Ok(prepared) => {
                        let _ = started_tx.send(Ok(()));
                        prepared
                    }
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(self.serve(listeners, ended_tx).instrument(span));
            })
            .context("thread")?;
        started.recv().context("the worker thread ended")??;
        Ok(ended)
    }

    fn prepare(
        &self,
        sockets: Vec<std::net::TcpListener>,
    ) -> anyhow::Result<(tokio::runtime::Runtime, Vec<tokio::net::TcpListener>)> {
        if let Err(e) = super::sockets::pin_current_thread(self.cpu) {
            tracing::warn!(worker = self.index, cpu = self.cpu, error = %e, "cannot pin the worker to its CPU; it runs where the scheduler puts it");
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("runtime")?;
        let entered = runtime.enter();
        let listeners = sockets
            .into_iter()
            .map(|socket| {
                socket.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(socket)
            })
            .collect::<std::io::Result<Vec<_>>>()
            .context("listening socket")?;
        drop(entered);
        Ok((runtime, listeners))
    }

    /// Accepts until the stop signal, says so, then serves its connections to the end;
    /// beats its heartbeat all along.
    async fn serve(self, listeners: Vec<tokio::net::TcpListener>, ended: oneshot::Sender<()>) {
        tokio::spawn(liveness::beat(Arc::clone(&self.heartbeats), self.index));
        let mut loops = tokio::task::JoinSet::new();
        for listener in listeners {
            loops.spawn(Arc::clone(&self.server).accept_loop(
                listener,
                self.stop.clone(),
                self.connections.clone(),
            ));
        }
        while loops.join_next().await.is_some() {}
        let _ = ended.send(());
        self.connections.finished().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_per_allowed_cpu_unless_told() {
        assert_eq!(Placement::new(None, &[0, 1]).cpus, [0, 1]);
        assert_eq!(Placement::new(None, &[3]).cpus, [3]);
        assert_eq!(Placement::new(Some(1), &[2, 3]).cpus, [2]);
        assert_eq!(
            Placement::new(Some(5), &[0, 1]).cpus,
            [0, 1, 0, 1, 0],
            "more workers than CPUs share them round-robin"
        );
        assert_eq!(Placement::new(None, &[]).cpus, [0]);
    }
}
