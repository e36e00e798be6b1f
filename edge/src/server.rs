//! Accepting client connections: the accept loop (with EMFILE back-off), the TLS
//! handshake under a deadline, and one hyper connection per client, all stoppable for a
//! graceful shutdown. What a reload may change ([`Live`]) is swapped atomically: a new
//! connection takes the TLS config in force when it arrives, a request the routes in
//! force when it starts, and both keep theirs to the end.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulConnection;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use edge_kit::metrics::Reason;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::config::Settings;
use crate::conn_limits::{ConnTable, Source};
use crate::deadline_io::DeadlineIo;
use crate::http::keep_alive::{self, Activity, RequestBody};
use crate::http::webhook::{self, Arrival};
use crate::http::{App, ConnectionBuilders, HttpMetrics, connection_builders};
use crate::sockets::is_fd_exhaustion;
use crate::tls::TlsMetrics;
use crate::tls::stream::TlsStream;

/// The metrics a connection touches, from accept to the last response.
pub struct ServerMetrics {
    pub connections: ConnectionMetrics,
    pub tls: TlsMetrics,
    pub http: HttpMetrics,
}

pub struct Server {
    pub live: ArcSwap<Live>,
    pub metrics: ServerMetrics,
    pub http: ConnectionBuilders,
    pub deadlines: crate::deadline_io::Deadlines,
    /// Connection caps, checked before any TLS work.
    pub connections: Mutex<ConnTable>,
    pub refusal_log: crate::log_throttle::LogThrottle,
}

/// The settings a reload replaces: routes and request limits, certificates and TLS.
pub struct Live {
    pub app: Arc<App>,
    pub tls: Arc<rustls::ServerConfig>,
    pub handshake_timeout: Duration,
}

impl Server {
    pub fn new(live: Live, settings: &Settings, metrics: ServerMetrics) -> Self {
        Self {
            live: ArcSwap::from_pointee(live),
            metrics,
            http: connection_builders(&settings.http),
            deadlines: settings.http.deadlines,
            connections: Mutex::new(ConnTable::new(settings.connections.clone())),
            refusal_log: Default::default(),
        }
    }

    /// Accepts on every listener until `stop` turns true, then returns the connections
    /// still open.
    pub async fn run(
        self: Arc<Self>,
        listeners: Vec<TcpListener>,
        stop: watch::Receiver<bool>,
    ) -> Connections {
        let connections = Connections::default();
        let mut loops = tokio::task::JoinSet::new();
        for listener in listeners {
            loops.spawn(Arc::clone(&self).accept_loop(listener, stop.clone(), connections.clone()));
        }
        while loops.join_next().await.is_some() {}
        connections
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
                    let admitted = self
                        .connections
                        .lock()
                        .expect("connection table")
                        .admit(peer.ip());
                    match admitted {
                        Ok(source) => {
                            let _ = stream.set_nodelay(true);
                            connections.tasks.spawn(Arc::clone(&self).connection(
                                stream,
                                peer,
                                source,
                                connections.closing.clone(),
                            ));
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

    async fn connection(
        self: Arc<Self>,
        stream: tokio::net::TcpStream,
        peer: std::net::SocketAddr,
        source: Source,
        closing: CancellationToken,
    ) {
        let metrics = &self.metrics.connections;
        metrics.open_connections.inc();
        if crate::sockets::syn_carried_data(&stream) {
            metrics.tfo_accepted.inc();
        }
        let _open = scopeguard(|| {
            metrics.open_connections.dec();
            self.connections
                .lock()
                .expect("connection table")
                .release(source);
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
        let accepting = Box::pin(self.handshake(stream, peer));
        let Some((mut tls, http2)) = accepting.await else {
            return;
        };
        if !http2 {
            head_clock.start();
        }
        // HTTP/2 stays in hyper: its streams multiplex on one connection state.
        let activity = (!http2).then(|| Activity::new(!tls.accepted_early_data()));
        let server = Arc::clone(&self);
        let handshake = tls.handshake();
        let requests = activity.clone();
        let service = service_fn(move |request: http::Request<Incoming>| {
            let handling = (
                head_clock.request_started(),
                requests.as_ref().map(|a| a.request_started()),
            );
            let request = request.map(|body| match &requests {
                Some(activity) => activity.body(body),
                None => RequestBody::untracked(body),
            });
            // Before the client's Finished, nothing proves the request is not a replay.
            let arrival = Arrival {
                early: !handshake.is_done(),
                source: peer.ip(),
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
                    &closing,
                    idle,
                ))
                .await
            }
            None => {
                let conn = self.http.http2.serve_connection(TokioIo::new(tls), service);
                Box::pin(until_closed(conn, &closing)).await
            }
        };
        if let Err(e) = served {
            self.connection_failed(e, peer);
        }
    }

    /// The TLS handshake under the deadline in force; counted by version and resumption.
    /// Also whether the client chose HTTP/2.
    async fn handshake(
        &self,
        stream: DeadlineIo<tokio::net::TcpStream>,
        peer: std::net::SocketAddr,
    ) -> Option<(TlsStream<DeadlineIo<tokio::net::TcpStream>>, bool)> {
        let live = self.live.load_full();
        let accepting = crate::tls::stream::accept(stream, Arc::clone(&live.tls));
        let mut tls = match tokio::time::timeout(live.handshake_timeout, accepting).await {
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
            tracing::info!(%peer, "request head over http.max_header_bytes/max_headers: answered 431");
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

/// The client connections being served, each asked to close at shutdown.
#[derive(Clone, Default)]
pub struct Connections {
    tasks: TaskTracker,
    closing: CancellationToken,
}

impl Connections {
    pub fn open(&self) -> usize {
        self.tasks.len()
    }

    /// Asks every connection to finish the request in progress and close, and returns
    /// once all have.
    pub async fn close(self) {
        self.closing.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// Drives a hyper connection; once `closing` fires, lets it finish what it is doing and
/// close.
async fn until_closed<C: GracefulConnection>(
    conn: C,
    closing: &CancellationToken,
) -> Result<(), C::Error> {
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => return served,
        () = closing.cancelled() => {}
    }
    conn.as_mut().graceful_shutdown();
    conn.await
}

/// Connection-level metrics, registered under `edge_*`. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    open_connections: Gauge,
    idle_connections: Gauge,
    accept_errors: Family<Reason, Counter>,
    connections_refused: Family<Reason, Counter>,
    tfo_accepted: Counter,
}

impl ConnectionMetrics {
    /// Creates the metrics and registers them into `registry` (the `edge_` one).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "open_connections",
            "Client connections open",
            metrics.open_connections.clone(),
        );
        registry.register(
            "idle_connections",
            "HTTP/1.1 connections waiting for a request with no HTTP buffers (of edge_open_connections)",
            metrics.idle_connections.clone(),
        );
        registry.register(
            "accept_errors",
            "accept() failures, by reason",
            metrics.accept_errors.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed before TLS because a cap was reached, by cap",
            metrics.connections_refused.clone(),
        );
        registry.register(
            "tfo_accepted",
            "Accepted connections whose SYN carried data (TCP Fast Open)",
            metrics.tfo_accepted.clone(),
        );
        metrics
    }

    fn refused(&self, reason: &'static str) {
        self.connections_refused
            .get_or_create(&Reason { reason })
            .inc();
    }

    fn accept_error(&self, reason: &'static str) {
        self.accept_errors.get_or_create(&Reason { reason }).inc();
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
