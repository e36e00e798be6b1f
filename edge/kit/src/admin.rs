//! The small plain-HTTP server each binary runs on its admin address (`/metrics`,
//! health, status). Answers depend only on the path. An accept error (out of file
//! descriptors, mostly) backs off instead of spinning.
//!
//! A management port is reachable by more than Prometheus, so no connection may hold a
//! slot it does not use: a request head must arrive within [`HEADER_READ_TIMEOUT`], a
//! connection lives at most [`MAX_CONNECTION_AGE`], and at [`MAX_CONNECTIONS`] the
//! oldest connection is closed for the newcomer. Every close for a limit is counted in
//! `admin_connections_closed_total{reason}` and logged (at most once a second).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::log_throttle::LogThrottle;
use crate::metrics::Reason;

/// One answer of the admin server.
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The `Content-Type` header.
    pub content_type: &'static str,
    /// The whole body.
    pub body: String,
}

impl Answer {
    /// Any answer.
    pub fn new(status: StatusCode, content_type: &'static str, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type,
            body: body.into(),
        }
    }

    /// `/metrics` as [`crate::metrics::encode`] writes it (OpenMetrics text).
    pub fn openmetrics(body: String) -> Self {
        Self::new(StatusCode::OK, OPENMETRICS, body)
    }

    /// 404, naming the paths that exist.
    pub fn not_found(paths: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "text/plain",
            format!("not found; try {paths}\n"),
        )
    }
}

/// Connections the admin server closed because of a limit, by reason
/// (`header_timeout`, `max_age`, `evicted`).
#[derive(Clone, Debug, Default)]
pub struct AdminMetrics {
    closed: Family<Reason, Counter>,
}

impl AdminMetrics {
    /// Registers `admin_connections_closed_total` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "admin_connections_closed",
            "Admin connections closed for a limit, by reason (header_timeout, max_age, evicted)",
            metrics.closed.clone(),
        );
        metrics
    }

    fn closed(&self, reason: &'static str) {
        self.closed.get_or_create(&Reason { reason }).inc();
    }
}

/// Serves HTTP/1.1 on `listener` for the life of the process, `answer` mapping a
/// request path to its answer.
pub async fn serve<F>(listener: TcpListener, metrics: AdminMetrics, answer: F)
where
    F: Fn(&str) -> Answer + Send + Sync + 'static,
{
    let answer = Arc::new(answer);
    let slots = Arc::new(Slots::default());
    let close_log = Arc::new(LogThrottle::default());
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let mut backoff = MIN_BACKOFF;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = MIN_BACKOFF;
                stream
            }
            Err(e) => {
                tracing::warn!(error = %e, backoff_ms = backoff.as_millis() as u64, "admin accept failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let (id, evict) = slots.take();
        if let Some(oldest) = evict {
            oldest.notify_one();
        }
        let answer = Arc::clone(&answer);
        let slots = Arc::clone(&slots);
        let close_log = Arc::clone(&close_log);
        let metrics = metrics.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let response = respond(answer(request.uri().path()));
                async move { Ok::<_, Infallible>(response) }
            });
            let evicted = slots.eviction(id);
            let mut connection = Box::pin(builder.serve_connection(TokioIo::new(stream), service));
            let closed_for = tokio::select! {
                result = &mut connection => match result {
                    Err(e) if e.is_timeout() => Some("header_timeout"),
                    _ => None,
                },
                _ = evicted.notified() => Some("evicted"),
                _ = tokio::time::sleep(MAX_CONNECTION_AGE) => Some("max_age"),
            };
            slots.give_back(id);
            if let Some(reason) = closed_for {
                metrics.closed(reason);
                if close_log.allow() {
                    tracing::warn!(
                        reason,
                        "admin connection closed for a limit (each one counted in admin_connections_closed_total)"
                    );
                }
            }
            // Counted before the socket closes, so whoever sees the close sees the count.
            drop(connection);
        });
    }
}

fn respond(answer: Answer) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(answer.body)));
    *response.status_mut() = answer.status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(answer.content_type),
    );
    response
}

/// The open admin connections, oldest first, each with the bell that closes it.
#[derive(Default)]
struct Slots {
    open: Mutex<VecDeque<(u64, Arc<Notify>)>>,
    next_id: AtomicU64,
}

impl Slots {
    /// A slot for a new connection, and the oldest connection's bell when the server is
    /// full.
    fn take(&self) -> (u64, Option<Arc<Notify>>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut open = self.lock();
        let evict = if open.len() >= MAX_CONNECTIONS {
            open.pop_front().map(|(_, bell)| bell)
        } else {
            None
        };
        open.push_back((id, Arc::new(Notify::new())));
        (id, evict)
    }

    /// The bell that rings when connection `id` must make room.
    fn eviction(&self, id: u64) -> Arc<Notify> {
        self.lock()
            .iter()
            .find(|(open, _)| *open == id)
            .map(|(_, bell)| Arc::clone(bell))
            // Already evicted before its task ran: ring at once.
            .unwrap_or_else(|| {
                let bell = Arc::new(Notify::new());
                bell.notify_one();
                bell
            })
    }

    fn give_back(&self, id: u64) {
        self.lock().retain(|(open, _)| *open != id);
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, VecDeque<(u64, Arc<Notify>)>> {
        // Plain data: consistent whatever a panicking holder did.
        self.open.lock()
    }
}

/// A request head (Prometheus, curl, a peer's guard) is a few hundred bytes.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A scrape or status read takes milliseconds; keep-alive between scrapes is allowed
/// this long, then the client reconnects.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(60);
/// Far more than a PoP's monitors and peers use at once.
pub const MAX_CONNECTIONS: usize = 256;
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const MIN_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
