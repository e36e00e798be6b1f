//! Accepting client connections: the accept loop (with EMFILE back-off), the connection
//! caps and evictions (`conn_limits`), the byte-stream deadlines (`deadline_io`), the TLS
//! handshake under a deadline; then the connection is handed to `http` to be served, all
//! stoppable for a graceful shutdown. What a reload may change ([`Live`]) is swapped atomically: a new
//! connection takes the TLS config in force when it arrives, a request the routes in
//! force when it starts, and both keep theirs to the end.

pub(crate) mod conn_limits;
mod deadline_io;
pub(crate) mod liveness;
mod metrics;
pub(crate) mod sockets;
mod workers;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use metrics::ConnectionMetrics;
pub(crate) use workers::{Accepting, Placement};

use crate::config::Settings;
use crate::http::{App, ConnUsage, Handover, Host, HttpMetrics, Serving};
use crate::tls::TlsMetrics;
use crate::tls::stream::TlsStream;

use conn_limits::{Admitted, ConnId, ConnTable};
use deadline_io::DeadlineIo;
use sockets::is_fd_exhaustion;

/// The metrics a connection touches, from accept to the last response.
pub(crate) struct ServerMetrics {
    pub connections: ConnectionMetrics,
    pub tls: TlsMetrics,
    pub http: HttpMetrics,
}

pub(crate) struct Server {
    pub live: ArcSwap<Live>,
    pub metrics: ServerMetrics,
    /// What serves a connection once its handshake is done.
    pub http: Serving,
    pub deadlines: crate::config::Deadlines,
    /// Connection caps, checked before any TLS work.
    pub connections: Mutex<ConnTable>,
    pub eviction_log: edge_kit::log_throttle::LogThrottle,
    /// What the connection table's idle times are measured from.
    clock_origin: tokio::time::Instant,
}

/// The settings a reload replaces: routes and request limits, certificates and TLS.
pub(crate) struct Live {
    pub app: Arc<App>,
    pub tls: Arc<rustls::ServerConfig>,
    pub handshake_timeout: Duration,
}

impl Server {
    pub(crate) fn new(live: Live, settings: &Settings, metrics: ServerMetrics) -> Self {
        let http = Serving::new(
            &settings.http,
            metrics.http.clone(),
            metrics.connections.idle_connections.clone(),
        );
        Self {
            live: ArcSwap::from_pointee(live),
            metrics,
            http,
            deadlines: settings.http.deadlines,
            connections: Mutex::new(ConnTable::new(settings.connections.clone())),
            eviction_log: Default::default(),
            clock_origin: tokio::time::Instant::now(),
        }
    }

    /// The connection table's clock: milliseconds since the server started.
    fn now_ms(&self) -> u64 {
        self.clock_origin.elapsed().as_millis() as u64
    }

    async fn accept_loop(
        self: Arc<Self>,
        listener: TcpListener,
        mut stop: watch::Receiver<bool>,
        connections: Connections,
    ) {
        let mut backoff = MIN_ACCEPT_BACKOFF;
        loop {
            let accepted = tokio::select! {
                _ = stop.wait_for(|stopped| *stopped) => return,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff = MIN_ACCEPT_BACKOFF;
                    let (admitted, handshake_timeout) = {
                        let mut table = self.connections.lock();
                        let admitted = table.admit(
                            peer.ip(),
                            connections.closing.child_token(),
                            self.now_ms(),
                        );
                        (
                            admitted,
                            table.handshake_timeout(self.live.load().handshake_timeout),
                        )
                    };
                    match admitted {
                        Ok(Admitted { id, usage, evicted }) => {
                            if let Some((kind, _)) = evicted {
                                self.metrics.connections.evicted(kind.reason());
                                if self.eviction_log.allow() {
                                    tracing::info!(%peer, evicted = kind.reason(), "a connection cap was reached: the least useful connection was closed to let this one in (logged at most once a second)");
                                }
                            }
                            let _ = stream.set_nodelay(true);
                            let accepted = Accepted {
                                peer,
                                id,
                                usage,
                                handshake_timeout,
                            };
                            connections
                                .tasks
                                .spawn(Arc::clone(&self).connection(stream, accepted));
                        }
                        Err(refusal) => {
                            // Closed before the handshake: an over-cap source costs one accept.
                            drop(stream);
                            self.metrics.connections.refused(refusal.reason());
                            if self.http.refusal_log.allow() {
                                tracing::warn!(%peer, reason = refusal.reason(), "connection over its cap, closed before TLS (logged at most once a second)");
                            }
                        }
                    }
                }
                Err(e) if is_fd_exhaustion(&e) => {
                    self.metrics.connections.accept_error("fd_exhausted");
                    tracing::warn!(error = %e, backoff_ms = backoff.as_millis() as u64, "out of file descriptors; backing off accept");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
                }
                Err(e) => {
                    self.metrics.connections.accept_error("other");
                    tracing::debug!(error = %e, "accept failed");
                }
            }
        }
    }

    async fn connection(self: Arc<Self>, stream: tokio::net::TcpStream, accepted: Accepted) {
        let Accepted {
            peer,
            id,
            usage,
            handshake_timeout,
        } = accepted;
        let metrics = &self.metrics.connections;
        metrics.open_connections.inc();
        if sockets::syn_carried_data(&stream) {
            metrics.tfo_accepted.inc();
        }
        let _open = scopeguard(|| {
            metrics.open_connections.dec();
            self.connections.lock().release(id);
        });
        let stream = DeadlineIo::new(stream, self.deadlines);
        let expired = stream.report();
        let head_clock = stream.head_clock();
        let _limits = scopeguard(|| {
            if let Some(expired) = expired.get() {
                self.metrics.http.reject(expired.reason());
                if self.http.refusal_log.allow() {
                    tracing::info!(%peer, reason = expired.reason(), "connection ended by a time limit (logged at most once a second)");
                }
            }
        });
        // Boxed, like what serves the connection, so that the task of a connection
        // that is open for hours is not sized for every stage it has been through.
        let accepting = Box::pin(self.handshake(stream, peer, handshake_timeout));
        let Some((tls, http2)) = accepting.await else {
            return;
        };
        self.connections.lock().handshake_done(id, self.now_ms());
        let handover = Handover {
            tls,
            http2,
            peer,
            usage,
            head_clock,
        };
        Box::pin(self.http.serve(Arc::clone(&self), handover)).await;
    }

    /// The TLS handshake under `deadline` (the one in force, shortened by handshake
    /// pressure); counted by version and resumption. Also whether the client chose HTTP/2.
    async fn handshake(
        &self,
        stream: DeadlineIo<tokio::net::TcpStream>,
        peer: std::net::SocketAddr,
        deadline: Duration,
    ) -> Option<(TlsStream<DeadlineIo<tokio::net::TcpStream>>, bool)> {
        let live = self.live.load_full();
        let accepting = crate::tls::stream::accept(stream, Arc::clone(&live.tls));
        let mut tls = match tokio::time::timeout(deadline, accepting).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                self.metrics.tls.handshake_failure("error");
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return None;
            }
            Err(_) => {
                self.metrics.tls.handshake_failure("timeout");
                tracing::debug!(%peer, "TLS handshake deadline passed");
                return None;
            }
        };
        let session = tls.connection();
        let version = match session.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "1.2",
            _ => "other",
        };
        let resumed = session.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
        let http2 = session.alpn_protocol() == Some(b"h2");
        self.metrics.tls.handshake(version, resumed);
        if tls.accepted_early_data() {
            self.metrics.tls.early_data_connections.inc();
        }
        Some((tls, http2))
    }
}

/// A connection let in by the table, on its way to its own task.
struct Accepted {
    peer: std::net::SocketAddr,
    id: ConnId,
    usage: Arc<ConnUsage>,
    /// Its TLS handshake deadline, set by the handshake pressure when it arrived.
    handshake_timeout: Duration,
}

/// The client connections being served, each asked to close at shutdown.
#[derive(Clone, Default)]
pub(crate) struct Connections {
    tasks: TaskTracker,
    closing: CancellationToken,
}

impl Connections {
    pub(crate) fn open(&self) -> usize {
        self.tasks.len()
    }

    /// Asks every connection to finish the request in progress and close, and returns
    /// once all have.
    pub(crate) async fn close(self) {
        self.closing.cancel();
        self.tasks.close();
        self.finished().await;
    }

    /// Returns once the connections were asked to close and all have.
    async fn finished(&self) {
        self.tasks.wait().await;
    }
}

impl Host for Server {
    fn app(&self) -> Arc<App> {
        Arc::clone(&self.live.load().app)
    }

    fn now_ms(&self) -> u64 {
        Server::now_ms(self)
    }
}

/// Runs `f` when dropped, however the connection task ends.
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

const MIN_ACCEPT_BACKOFF: Duration = Duration::from_millis(5);
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
