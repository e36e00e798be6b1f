//! The HTTP side of the edge: a connection handed over by the server after its TLS
//! handshake is served here to its end ([`Serving::serve`]). Inside: the hyper settings
//! (below), shared application state and the route table in [`app`], the webhook path in
//! [`webhook`], HTTP/1.1 keep-alive without idle buffers in [`keep_alive`], HTTP/2's
//! control-frame budget in [`h2_budget`].

mod app;
mod body;
mod conn_usage;
mod h2_budget;
mod head_clock;
mod keep_alive;
mod metrics;
mod serve;
mod webhook;

use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioTimer};

pub(crate) use app::App;
pub(crate) use conn_usage::ConnUsage;
use h2_budget::io::BudgetedIo;
pub(crate) use head_clock::HeadClock;
pub(crate) use metrics::HttpMetrics;
pub(crate) use serve::{Handover, Host, Serving};

use crate::config::HttpSettings;

/// hyper's HTTP/1.1 and HTTP/2 servers, from config; a connection gets the one its TLS
/// handshake chose by ALPN (hyper-util's auto-detection pre-reads 24 bytes, which makes
/// hyper double its HTTP/1.1 read buffer to 16 KiB on every connection).
struct ConnectionBuilders {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    /// The budget of HTTP/2 frames that advance no request (see [`BudgetedIo`]).
    h2_control_frames_per_second: u32,
}

/// hyper parses request heads up to twice the configured limits (fields: see
/// [`parsed_headers`]), so that the request path answers a head over them with a 431 its
/// sender reads (hyper's own 431 closes the connection while a client may still be
/// sending, and curl then loses it); beyond that, hyper refuses by itself.
fn connection_builders(settings: &HttpSettings) -> ConnectionBuilders {
    let mut http1 = http1::Builder::new();
    // The head deadline is `DeadlineIo`'s: hyper's would also end idle keep-alives.
    http1
        .header_read_timeout(None)
        .max_buf_size((settings.max_header_bytes * HEAD_PARSE_FACTOR).max(8192))
        .max_headers(parsed_headers(settings.max_headers));
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
    ConnectionBuilders {
        http1,
        http2,
        h2_control_frames_per_second: settings.h2_control_frames_per_second,
    }
}

/// How many fields hyper parses in an HTTP/1.1 head: twice `http.max_headers`, but no
/// more than hyper keeps on the stack when the limit fits there (past it, hyper takes two
/// heap arrays for every request's head). A head over that still gets a 431, hyper's.
fn parsed_headers(max_headers: usize) -> usize {
    let parsed = max_headers * HEAD_PARSE_FACTOR;
    if max_headers <= HYPER_INLINE_HEADERS {
        parsed.min(HYPER_INLINE_HEADERS)
    } else {
        parsed
    }
}

/// How far past the configured head limits hyper parses (see [`connection_builders`]).
const HEAD_PARSE_FACTOR: usize = 2;

/// The head fields hyper 1.x parses into arrays on the stack (`DEFAULT_MAX_HEADERS`).
const HYPER_INLINE_HEADERS: usize = 100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyper_parses_twice_the_field_limit_but_stays_on_the_stack_below_it() {
        assert_eq!(parsed_headers(40), 80);
        assert_eq!(parsed_headers(50), 100);
        assert_eq!(parsed_headers(64), 100, "65..=100 fields still get our 431");
        assert_eq!(parsed_headers(100), 100);
        assert_eq!(parsed_headers(101), 202);
        assert_eq!(parsed_headers(256), 512);
    }
}
