//! Accepting client connections: the accept loop (with EMFILE back-off), the TLS
//! handshake under a deadline, and one hyper connection per client, all stoppable for a
//! graceful shutdown. What a reload may change ([`Live`]) is swapped atomically: a new
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
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulConnection;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use metrics::ConnectionMetrics;
pub(crate) use workers::{Accepting, Placement};

use crate::config::Settings;
use crate::http::keep_alive::{self, Activity, RequestBody};
use crate::http::webhook::{self, Arrival};
use crate::http::{
    App, BudgetedIo, ConnUsage, ConnectionBuilders, HttpMetrics, connection_builders,
};
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
    pub http: ConnectionBuilders,
    pub deadlines: crate::config::Deadlines,
    /// Connection caps, checked before any TLS work.
    pub connections: Mutex<ConnTable>,
    pub refusal_log: edge_kit::log_throttle::LogThrottle,
    pub eviction_log: edge_kit::log_throttle::LogThrottle,
    /// An HTTP/2 connection with no stream open this long is closed.
    h2_idle: Duration,
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
        Self {
            live: ArcSwap::from_pointee(live),
            metrics,
            http: connection_builders(&settings.http),
            deadlines: settings.http.deadlines,
            connections: Mutex::new(ConnTable::new(settings.connections.clone())),
            refusal_log: Default::default(),
            eviction_log: Default::default(),
            h2_idle: settings.http.deadlines.idle,
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
                            if self.refusal_log.allow() {
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
                if self.refusal_log.allow() {
                    tracing::info!(%peer, reason = expired.reason(), "connection ended by a time limit (logged at most once a second)");
                }
            }
        });
        // Boxed, like what serves the connection, so that the task of a connection
        // that is open for hours is not sized for every stage it has been through.
        let accepting = Box::pin(self.handshake(stream, peer, handshake_timeout));
        let Some((mut tls, http2)) = accepting.await else {
            return;
        };
        if !http2 {
            head_clock.start();
        }
        self.connections.lock().handshake_done(id, self.now_ms());
        // HTTP/2 stays in hyper: its streams multiplex on one connection state.
        let activity = (!http2).then(|| Activity::new(!tls.accepted_early_data()));
        let server = Arc::clone(&self);
        let handshake = tls.handshake();
        let requests = activity.clone();
        let in_flight = Arc::clone(&usage);
        let service = service_fn(move |request: http::Request<Incoming>| {
            let handling = (
                head_clock.request_started(),
                requests.as_ref().map(|a| a.request_started()),
                InFlight::start(&in_flight, &server),
            );
            let request = request.map(|body| match &requests {
                Some(activity) => activity.body(body),
                None => RequestBody::untracked(body),
            });
            // Before the client's Finished, nothing proves the request is not a replay.
            let arrival = Arrival {
                early: !handshake.is_done(),
                source: peer.ip(),
                connection: Arc::clone(&in_flight),
            };
            let response = webhook::handle(Arc::clone(&server.live.load().app), arrival, request);
            // Boxed: taking an HTTP/1.1 connection out of hyper needs an `Unpin` future.
            Box::pin(async move {
                let response = response.await;
                drop(handling);
                response
            })
        });
        let served = match activity {
            Some(activity) => {
                let idle = &self.metrics.connections.idle_connections;
                // The TLS state boxed too: it moves between hyper connections.
                let tls = Box::new(tls);
                Box::pin(keep_alive::serve(
                    &self.http.http1,
                    tls,
                    activity,
                    service,
                    usage.closing(),
                    idle,
                ))
                .await
            }
            None => {
                let (tls, calmed) = BudgetedIo::new(tls, self.http.h2_control_frames_per_second);
                let conn = self.http.http2.serve_connection(TokioIo::new(tls), service);
                let (served, idled) = Box::pin(self.serve_h2(conn, &usage)).await;
                if idled {
                    self.metrics.http.reject("idle");
                }
                if calmed.load(std::sync::atomic::Ordering::Relaxed) {
                    self.metrics.http.reject("h2_control_flood");
                    if self.refusal_log.allow() {
                        tracing::warn!(%peer, "HTTP/2 frames that advance no request over http.h2_control_frames_per_second: GOAWAY(ENHANCE_YOUR_CALM) and closed (logged at most once a second)");
                    }
                    return;
                }
                served
            }
        };
        if let Err(e) = served {
            self.connection_failed(e, peer);
        }
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

    /// Counts and logs why hyper gave up on a connection (a limit, or a broken client).
    fn connection_failed(&self, error: hyper::Error, peer: std::net::SocketAddr) {
        if error.is_parse_too_large() {
            self.metrics.http.reject("header_too_large");
            if self.refusal_log.allow() {
                tracing::info!(%peer, "request head past what hyper parses (twice http.max_header_bytes, or more fields than twice http.max_headers, at most 100 below 100): answered 431 and closed (logged at most once a second)");
            }
        } else if error.is_timeout() {
            // hyper's only timer: the HTTP/2 PING answer (the head deadline is DeadlineIo's).
            self.metrics.http.reject("h2_keepalive_timeout");
            if self.refusal_log.allow() {
                tracing::info!(%peer, "no answer to an HTTP/2 PING within http.h2_keepalive_timeout: closed (logged at most once a second)");
            }
        } else {
            tracing::debug!(%peer, error = ?error, "connection ended with an error");
        }
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

impl Server {
    /// Drives an HTTP/2 connection until it ends, is told to close, or has had no
    /// request in progress for the idle timeout, whatever PINGs pass (they keep the
    /// byte stream busy, not the connection useful). Closing sends GOAWAY and lets
    /// what is in progress finish; a connection with nothing in progress gets
    /// [`IDLE_GOAWAY_GRACE`] to end. Also says whether it was closed for being idle.
    async fn serve_h2<C: GracefulConnection>(
        &self,
        conn: C,
        usage: &ConnUsage,
    ) -> (Result<(), C::Error>, bool) {
        let mut conn = std::pin::pin!(conn);
        let idle_ms = self.h2_idle.as_millis() as u64;
        let mut check = std::pin::pin!(tokio::time::sleep(self.h2_idle));
        let idled = loop {
            tokio::select! {
                served = conn.as_mut() => return (served, false),
                () = usage.abandoned().cancelled() => return (Ok(()), false),
                () = usage.closing().cancelled() => break false,
                () = check.as_mut() => {
                    let due_ms = match usage.idle_since() {
                        Some(since) if self.now_ms() >= since + idle_ms => break true,
                        Some(since) => since + idle_ms,
                        None => self.now_ms() + idle_ms,
                    };
                    check.as_mut().reset(self.clock_origin + Duration::from_millis(due_ms));
                }
            }
        };
        conn.as_mut().graceful_shutdown();
        // Requests in progress finish (a shutdown bounds them by shutdown_timeout); with
        // none, a peer that does not finish the GOAWAY exchange is not waited for.
        if usage.idle_since().is_none() {
            return (conn.await, idled);
        }
        match tokio::time::timeout(IDLE_GOAWAY_GRACE, conn.as_mut()).await {
            Ok(served) => (served, idled),
            Err(_) => (Ok(()), idled),
        }
    }
}

/// A request in progress on a connection, for the connection table's idle times.
struct InFlight {
    usage: Arc<ConnUsage>,
    server: Arc<Server>,
}

impl InFlight {
    fn start(usage: &Arc<ConnUsage>, server: &Arc<Server>) -> Self {
        usage.request_started();
        Self {
            usage: Arc::clone(usage),
            server: Arc::clone(server),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.usage.request_ended(self.server.now_ms());
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
/// How long a connection closed for being idle may take to finish after its GOAWAY.
const IDLE_GOAWAY_GRACE: Duration = Duration::from_secs(5);
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
