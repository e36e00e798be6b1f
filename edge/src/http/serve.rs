//! One client connection served, from the end of its TLS handshake to its close: HTTP/1.1
//! through [`keep_alive`] (no hyper buffers while idle), HTTP/2 in hyper with its
//! control frames budgeted and an idle limit on the connection, every request through
//! [`webhook::handle`]. The server hands a connection over with [`Serving::serve`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use edge_kit::log_throttle::LogThrottle;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulConnection;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite};

use super::head_clock::HeadClock;
use super::keep_alive::{self, Activity, RequestBody};
use super::webhook::{self, Arrival};
use super::{App, BudgetedIo, ConnUsage, ConnectionBuilders, HttpMetrics, connection_builders};
use crate::config::HttpSettings;
use crate::tls::stream::TlsStream;

/// What serves connections needs of the process that accepted them.
pub(crate) trait Host: Send + Sync + 'static {
    /// The routes in force now (a reload replaces them; a request keeps the ones it
    /// started with).
    fn app(&self) -> Arc<App>;
    /// The clock the connection table measures idle times on, in milliseconds.
    fn now_ms(&self) -> u64;
}

/// A connection whose TLS handshake is done, handed over by the server.
pub(crate) struct Handover<IO> {
    pub tls: TlsStream<IO>,
    /// The client chose HTTP/2 by ALPN.
    pub http2: bool,
    pub peer: SocketAddr,
    pub usage: Arc<ConnUsage>,
    /// The HTTP/1.1 head deadline's clock, shared with the byte stream below the TLS.
    pub head_clock: Arc<HeadClock>,
}

/// The HTTP settings and metrics every connection is served with, made once.
pub(crate) struct Serving {
    builders: ConnectionBuilders,
    metrics: HttpMetrics,
    idle_connections: Gauge,
    /// An HTTP/2 connection with no stream open this long is closed.
    h2_idle: Duration,
    /// Refusals and limits are logged at most once a second, the server's included.
    pub refusal_log: LogThrottle,
}

impl Serving {
    pub(crate) fn new(
        settings: &HttpSettings,
        metrics: HttpMetrics,
        idle_connections: Gauge,
    ) -> Self {
        Self {
            builders: connection_builders(settings),
            metrics,
            idle_connections,
            h2_idle: settings.deadlines.idle,
            refusal_log: LogThrottle::default(),
        }
    }

    /// Serves `conn` until the client, a limit or `conn.usage`'s closing ends it.
    pub(crate) async fn serve<H, IO>(&self, host: Arc<H>, conn: Handover<IO>)
    where
        H: Host,
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Handover {
            mut tls,
            http2,
            peer,
            usage,
            head_clock,
        } = conn;
        if !http2 {
            head_clock.start();
        }
        // HTTP/2 stays in hyper: its streams multiplex on one connection state.
        let activity = (!http2).then(|| Activity::new(!tls.accepted_early_data()));
        let handshake = tls.handshake();
        let clock = Arc::clone(&host);
        let requests = activity.clone();
        let in_flight = Arc::clone(&usage);
        let service = service_fn(move |request: http::Request<Incoming>| {
            let handling = (
                head_clock.request_started(),
                requests.as_ref().map(|a| a.request_started()),
                InFlight::start(&in_flight, &host),
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
            let response = webhook::handle(host.app(), arrival, request);
            // Boxed: taking an HTTP/1.1 connection out of hyper needs an `Unpin` future.
            Box::pin(async move {
                let response = response.await;
                drop(handling);
                response
            })
        });
        let served = match activity {
            Some(activity) => {
                // The TLS state boxed too: it moves between hyper connections.
                let tls = Box::new(tls);
                Box::pin(keep_alive::serve(
                    &self.builders.http1,
                    tls,
                    activity,
                    service,
                    usage.closing(),
                    &self.idle_connections,
                ))
                .await
            }
            None => {
                let (tls, calmed) =
                    BudgetedIo::new(tls, self.builders.h2_control_frames_per_second);
                let conn = self
                    .builders
                    .http2
                    .serve_connection(TokioIo::new(tls), service);
                let (served, idled) = Box::pin(self.serve_h2(conn, &usage, &*clock)).await;
                if self.h2_cut_off(idled, calmed.load(Ordering::Relaxed), peer) {
                    return;
                }
                served
            }
        };
        if let Err(e) = served {
            self.connection_failed(e, peer);
        }
    }

    /// Counts an HTTP/2 connection closed for idling (`idled`) or for a control-frame
    /// flood (`calmed`); true for the flood, whose connection error is no news.
    fn h2_cut_off(&self, idled: bool, calmed: bool, peer: SocketAddr) -> bool {
        if idled {
            self.metrics.reject("idle");
        }
        if calmed {
            self.metrics.reject("h2_control_flood");
            if self.refusal_log.allow() {
                tracing::warn!(%peer, "HTTP/2 frames that advance no request over http.h2_control_frames_per_second: GOAWAY(ENHANCE_YOUR_CALM) and closed (logged at most once a second)");
            }
        }
        calmed
    }

    /// Drives an HTTP/2 connection until it ends, is told to close, or has had no
    /// request in progress for the idle timeout, whatever PINGs pass (they keep the
    /// byte stream busy, not the connection useful). Closing sends GOAWAY and lets
    /// what is in progress finish; a connection with nothing in progress gets
    /// [`IDLE_GOAWAY_GRACE`] to end. Also says whether it was closed for being idle.
    async fn serve_h2<C: GracefulConnection>(
        &self,
        conn: C,
        usage: &ConnUsage,
        clock: &impl Host,
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
                    let now_ms = clock.now_ms();
                    let due_ms = match usage.idle_since() {
                        Some(since) if now_ms >= since + idle_ms => break true,
                        Some(since) => since + idle_ms,
                        None => now_ms + idle_ms,
                    };
                    check
                        .as_mut()
                        .reset(tokio::time::Instant::now() + Duration::from_millis(due_ms - now_ms));
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

    /// Counts and logs why hyper gave up on a connection (a limit, or a broken client).
    fn connection_failed(&self, error: hyper::Error, peer: SocketAddr) {
        if error.is_parse_too_large() {
            self.metrics.reject("header_too_large");
            if self.refusal_log.allow() {
                tracing::info!(%peer, "request head past what hyper parses (twice http.max_header_bytes, or more fields than twice http.max_headers, at most 100 below 100): answered 431 and closed (logged at most once a second)");
            }
        } else if error.is_timeout() {
            // hyper's only timer: the HTTP/2 PING answer (the head deadline is DeadlineIo's).
            self.metrics.reject("h2_keepalive_timeout");
            if self.refusal_log.allow() {
                tracing::info!(%peer, "no answer to an HTTP/2 PING within http.h2_keepalive_timeout: closed (logged at most once a second)");
            }
        } else {
            tracing::debug!(%peer, error = ?error, "connection ended with an error");
        }
    }
}

/// A request in progress on a connection, for the connection table's idle times.
struct InFlight<H: Host> {
    usage: Arc<ConnUsage>,
    clock: Arc<H>,
}

impl<H: Host> InFlight<H> {
    fn start(usage: &Arc<ConnUsage>, clock: &Arc<H>) -> Self {
        usage.request_started();
        Self {
            usage: Arc::clone(usage),
            clock: Arc::clone(clock),
        }
    }
}

impl<H: Host> Drop for InFlight<H> {
    fn drop(&mut self) {
        self.usage.request_ended(self.clock.now_ms());
    }
}

/// How long a connection closed for being idle may take to finish after its GOAWAY.
const IDLE_GOAWAY_GRACE: Duration = Duration::from_secs(5);
