//! The HTTP side of the edge: shared application state, the route table, and the hyper
//! connection settings. The webhook path itself is in [`webhook`]; HTTP/1.1 keep-alive
//! without idle buffers in [`keep_alive`].

pub mod keep_alive;
mod metrics;
pub mod webhook;

use std::collections::HashMap;
use std::sync::Arc;

use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioTimer};

pub use metrics::HttpMetrics;

use crate::admission::Admission;
use crate::config::{HttpSettings, Route, Settings};
use crate::spool::Spool;

/// Everything a request handler needs, shared by all connections.
pub struct App {
    /// Sent back as `Edge-Pop` so a sender (or an operator with curl) sees which PoP the
    /// anycast address landed on.
    pub pop: http::HeaderValue,
    pub routes: HashMap<String, Arc<RouteEntry>>,
    pub body_rate: crate::body_rate::BodyRate,
    pub request_timeout: std::time::Duration,
    /// The request-head limits, enforced here so a 431 is an answer like any other (the
    /// rest of the body discarded) rather than hyper closing the connection on it.
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub slow_body_log: edge_kit::log_throttle::LogThrottle,
    pub too_early_log: edge_kit::log_throttle::LogThrottle,
    pub shed_log: edge_kit::log_throttle::LogThrottle,
    pub head_log: edge_kit::log_throttle::LogThrottle,
    pub verify_log: edge_kit::log_throttle::LogThrottle,
    /// Lives across reloads: the adaptive limit and the queue are the process's.
    pub admission: Arc<Admission>,
    pub spool: Arc<Spool>,
    pub metrics: HttpMetrics,
}

/// A route plus its name as a shared string (spool records and metrics use it per request).
pub struct RouteEntry {
    pub route: Route,
    pub name: Arc<str>,
}

impl App {
    pub fn new(
        settings: &Settings,
        spool: Arc<Spool>,
        metrics: HttpMetrics,
        admission: Arc<Admission>,
    ) -> Self {
        let routes = settings
            .routes
            .iter()
            .map(|route| {
                let entry = RouteEntry {
                    route: route.clone(),
                    name: Arc::from(route.name.as_str()),
                };
                (route.path.clone(), Arc::new(entry))
            })
            .collect();
        Self {
            pop: http::HeaderValue::from_str(&settings.pop)
                .unwrap_or(http::HeaderValue::from_static("invalid")),
            routes,
            body_rate: settings.http.body_rate,
            request_timeout: settings.http.request_timeout,
            max_header_bytes: settings.http.max_header_bytes,
            max_headers: settings.http.max_headers,
            slow_body_log: Default::default(),
            too_early_log: Default::default(),
            shed_log: Default::default(),
            head_log: Default::default(),
            verify_log: Default::default(),
            admission,
            spool,
            metrics,
        }
    }
}

/// hyper's HTTP/1.1 and HTTP/2 servers, from config; a connection gets the one its TLS
/// handshake chose by ALPN (hyper-util's auto-detection pre-reads 24 bytes, which makes
/// hyper double its HTTP/1.1 read buffer to 16 KiB on every connection).
pub struct ConnectionBuilders {
    pub http1: http1::Builder,
    pub http2: http2::Builder<TokioExecutor>,
}

/// hyper parses request heads up to twice the configured limits, so that the request
/// path answers a head over them with a 431 its sender reads (hyper's own 431 closes the
/// connection while a client may still be sending, and curl then loses it); beyond
/// twice, hyper refuses by itself.
pub fn connection_builders(settings: &HttpSettings) -> ConnectionBuilders {
    let mut http1 = http1::Builder::new();
    // The head deadline is `DeadlineIo`'s: hyper's would also end idle keep-alives.
    http1
        .header_read_timeout(None)
        .max_buf_size((settings.max_header_bytes * HEAD_PARSE_FACTOR).max(8192))
        .max_headers(settings.max_headers * HEAD_PARSE_FACTOR);
    let mut http2 = http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.h2_max_concurrent_streams)
        .initial_stream_window_size(settings.h2_stream_window)
        .keep_alive_interval(Some(settings.h2_keepalive_interval))
        .keep_alive_timeout(settings.h2_keepalive_timeout)
        .max_header_list_size(
            u32::try_from(settings.max_header_bytes * HEAD_PARSE_FACTOR).unwrap_or(u32::MAX),
        )
        .max_pending_accept_reset_streams(64)
        .max_local_error_reset_streams(256);
    ConnectionBuilders { http1, http2 }
}

/// How far past the configured head limits hyper parses (see [`connection_builders`]).
const HEAD_PARSE_FACTOR: usize = 2;
