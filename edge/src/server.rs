//! Accepting client connections: the accept loop (with EMFILE back-off), the TLS
//! handshake under a deadline, and one hyper connection per client, all stoppable for a
//! graceful shutdown. What a reload may change ([`Live`]) is swapped atomically: a new
//! connection takes the TLS config in force when it arrives, a request the routes in
//! force when it starts, and both keep theirs to the end.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

use edge_kit::metrics::Reason;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::conn_limits::{ConnTable, Source};
use crate::http::App;
use crate::http::HttpMetrics;
use crate::http::webhook::{self, Arrival};
use crate::sockets::is_fd_exhaustion;
use crate::tls::TlsMetrics;

pub struct Server {
    pub live: ArcSwap<Live>,
    pub metrics: ConnectionMetrics,
    pub tls_metrics: TlsMetrics,
    pub http_metrics: HttpMetrics,
    pub http: Arc<auto::Builder<TokioExecutor>>,
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
    /// Accepts on every listener until `stop` turns true, then returns the graceful
    /// shutdown handle that tracks the connections still open.
    pub async fn run(
        self: Arc<Self>,
        listeners: Vec<TcpListener>,
        stop: watch::Receiver<bool>,
    ) -> GracefulShutdown {
        let graceful = Arc::new(GracefulShutdown::new());
        let mut loops = tokio::task::JoinSet::new();
        for listener in listeners {
            loops.spawn(Arc::clone(&self).accept_loop(
                listener,
                stop.clone(),
                Arc::clone(&graceful),
            ));
        }
        while loops.join_next().await.is_some() {}
        Arc::into_inner(graceful).expect("accept loops have ended")
    }

    async fn accept_loop(
        self: Arc<Self>,
        listener: TcpListener,
        mut stop: watch::Receiver<bool>,
        graceful: Arc<GracefulShutdown>,
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
                            let watcher = graceful.watcher();
                            tokio::spawn(
                                Arc::clone(&self).connection(stream, peer, source, watcher),
                            );
                        }
                        Err(refusal) => {
                            // Closed before the handshake: an over-cap source costs one accept.
                            drop(stream);
                            self.metrics.refused(refusal.reason());
                            if self.refusal_log.allow() {
                                tracing::warn!(%peer, reason = refusal.reason(), "connection over its cap, closed before TLS (logged at most once a second)");
                            }
                        }
                    }
                }
                Err(e) if is_fd_exhaustion(&e) => {
                    self.metrics.accept_error("fd_exhausted");
                    tracing::warn!(error = %e, backoff_ms = backoff.as_millis() as u64, "out of file descriptors; backing off accept");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
                }
                Err(e) => {
                    self.metrics.accept_error("other");
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
        watcher: hyper_util::server::graceful::Watcher,
    ) {
        let metrics = &self.metrics;
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
        let stream = crate::deadline_io::DeadlineIo::new(stream, self.deadlines);
        let expired = stream.report();
        let _limits = scopeguard(|| {
            if let Some(expired) = expired.get() {
                self.http_metrics.reject(expired.reason());
                if self.refusal_log.allow() {
                    tracing::info!(%peer, reason = expired.reason(), "connection ended by a time limit (logged at most once a second)");
                }
            }
        });
        let live = self.live.load_full();
        let accepting = crate::tls::stream::accept(stream, Arc::clone(&live.tls));
        let mut tls = match tokio::time::timeout(live.handshake_timeout, accepting).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                self.tls_metrics.handshake_failure("error");
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                self.tls_metrics.handshake_failure("timeout");
                tracing::debug!(%peer, "TLS handshake deadline passed");
                return;
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
        self.tls_metrics.handshake(version, resumed);
        if tls.accepted_early_data() {
            self.tls_metrics.early_data_connections.inc();
        }

        drop(live);
        let server = Arc::clone(&self);
        let handshake = tls.handshake();
        let service = service_fn(move |request| {
            // Before the client's Finished, nothing proves the request is not a replay.
            let arrival = Arrival {
                early: !handshake.is_done(),
                source: peer.ip(),
            };
            webhook::handle(Arc::clone(&server.live.load().app), arrival, request)
        });
        let connection = self
            .http
            .serve_connection(TokioIo::new(tls), service)
            .into_owned();
        if let Err(e) = watcher.watch(connection).await {
            let hyper_error = e.downcast_ref::<hyper::Error>();
            if hyper_error.is_some_and(|e| e.is_parse_too_large()) {
                self.http_metrics.reject("header_too_large");
                tracing::info!(%peer, "request head over http.max_header_bytes/max_headers: answered 431");
            } else if hyper_error.is_some_and(|e| e.is_timeout()) {
                // hyper's only timers: the HTTP/1 head deadline, the HTTP/2 PING answer.
                let (reason, what) = if http2 {
                    (
                        "h2_keepalive_timeout",
                        "no answer to an HTTP/2 PING within http.h2_keepalive_timeout",
                    )
                } else {
                    (
                        "header_timeout",
                        "request head not received within http.header_timeout",
                    )
                };
                self.http_metrics.reject(reason);
                if self.refusal_log.allow() {
                    tracing::info!(%peer, "{what}: closed (logged at most once a second)");
                }
            } else {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        }
    }
}

/// Connection-level metrics, registered under `edge_*`. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    open_connections: Gauge,
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
