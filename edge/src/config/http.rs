//! `http:` request-head limits, HTTP/2 settings and the slow-client deadlines.

use std::time::Duration;

use bytesize::ByteSize;
use edge_kit::config_file::FieldErrors;
use serde::Deserialize;

use crate::admission::body_rate::BodyRate;

/// The time limits on one client connection (enforced on its byte stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// A write that makes no progress this long fails (a client that stopped reading).
    pub write_stall: Duration,
    /// A connection with nothing to read or write this long closes.
    pub idle: Duration,
    /// An HTTP/1.1 request head must arrive this soon after its first byte.
    pub head: Duration,
    /// After this, reads see end-of-stream: the connection finishes and closes.
    pub lifetime: Duration,
}

/// The `http` section, validated: per-connection and per-request limits.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// Largest request head; past it, 431.
    pub max_header_bytes: usize,
    /// Most header fields in a request; past it, 431.
    pub max_headers: usize,
    /// Time for a whole request head to arrive; past it, 408.
    pub header_timeout: Duration,
    /// HTTP/2 streams one connection may have open at once.
    pub h2_max_concurrent_streams: u32,
    /// HTTP/2 stream receive window: how much of a body a sender may send before the
    /// edge asks for more, so also the most it receives of a body it sheds.
    pub h2_stream_window: u32,
    /// HTTP/2 PING every `interval` on a quiet connection; no answer within `timeout` closes it.
    pub h2_keepalive_interval: Duration,
    /// No PING answer within this closes the connection.
    pub h2_keepalive_timeout: Duration,
    /// HTTP/2 frames that advance no request (SETTINGS, PING, WINDOW_UPDATE, …) a
    /// connection may send per second, with a burst of ten seconds' worth; past it,
    /// GOAWAY(ENHANCE_YOUR_CALM) and close.
    pub h2_control_frames_per_second: u32,
    /// Whole request, from dispatch to answer (body, verification, spool); past it, 503.
    pub request_timeout: Duration,
    /// Slow-body rule: minimum average rate after a grace period, and a body deadline.
    pub body_rate: BodyRate,
    /// Write stall, keep-alive idle and connection lifetime limits.
    pub deadlines: Deadlines,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawHttp {
    /// Request head size (name + value + 32 per field, as HTTP/2 counts); 431 past it.
    /// Default 16KiB.
    max_header_bytes: ByteSize,
    /// Header fields per request; 431 past it. Default 64.
    max_headers: usize,
    /// An HTTP/1.1 request head must arrive within this. Default 10s.
    #[serde(with = "humantime_serde")]
    header_timeout: Duration,
    /// Default 128.
    h2_max_concurrent_streams: u32,
    /// A stream's receive window: a sender sends this much of a body before it must
    /// wait for the edge to ask for more. Default 1MiB.
    h2_stream_window: ByteSize,
    /// PING a quiet HTTP/2 connection this often. Default 20s.
    #[serde(with = "humantime_serde")]
    h2_keepalive_interval: Duration,
    /// Close it when the PING is not answered within this. Default 10s.
    #[serde(with = "humantime_serde")]
    h2_keepalive_timeout: Duration,
    /// Frames that advance no request one HTTP/2 connection may send per second (ten
    /// seconds' worth at once, four more per request); past it the connection is
    /// closed with GOAWAY(ENHANCE_YOUR_CALM). Default 100.
    h2_control_frames_per_second: u32,
    /// Whole request, dispatch to answer; 503 past it. Default 45s.
    #[serde(with = "humantime_serde")]
    request_timeout: Duration,
    /// A body must average at least this per second once `body_rate_grace` has
    /// passed; 408 otherwise. Default 1KiB.
    min_body_rate: ByteSize,
    /// Default 5s.
    #[serde(with = "humantime_serde")]
    body_rate_grace: Duration,
    /// The whole body must arrive within this; 408 otherwise. Default 30s.
    #[serde(with = "humantime_serde")]
    body_timeout: Duration,
    /// A client that reads none of our answer for this long is dropped. Default 10s.
    #[serde(with = "humantime_serde")]
    write_stall_timeout: Duration,
    /// A keep-alive connection with no request for this long is closed. Default 60s.
    #[serde(with = "humantime_serde")]
    idle_timeout: Duration,
    /// Any connection is closed (gracefully) after this. Default 1h.
    #[serde(with = "humantime_serde")]
    max_connection_lifetime: Duration,
}

impl Default for RawHttp {
    fn default() -> Self {
        Self {
            max_header_bytes: ByteSize::kib(16),
            max_headers: 64,
            header_timeout: Duration::from_secs(10),
            h2_max_concurrent_streams: 128,
            h2_stream_window: ByteSize::mib(1),
            h2_keepalive_interval: Duration::from_secs(20),
            h2_keepalive_timeout: Duration::from_secs(10),
            h2_control_frames_per_second: 100,
            request_timeout: Duration::from_secs(45),
            min_body_rate: ByteSize::kib(1),
            body_rate_grace: Duration::from_secs(5),
            body_timeout: Duration::from_secs(30),
            write_stall_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connection_lifetime: Duration::from_secs(3600),
        }
    }
}

impl RawHttp {
    pub(super) fn validate(self, errors: &mut FieldErrors) -> HttpSettings {
        if !(1024..=MAX_HEADER_BYTES).contains(&self.max_header_bytes.as_u64()) {
            errors.add(
                "http.max_header_bytes",
                "must be between 1KiB and 60KiB (what is kept of it must fit the 64KiB of headers JetStream takes, beside the edge's own)",
            );
        }
        for (field, value) in [
            ("http.write_stall_timeout", self.write_stall_timeout),
            ("http.idle_timeout", self.idle_timeout),
            ("http.max_connection_lifetime", self.max_connection_lifetime),
            ("http.h2_keepalive_interval", self.h2_keepalive_interval),
            ("http.h2_keepalive_timeout", self.h2_keepalive_timeout),
        ] {
            if value.is_zero() {
                errors.add(field, "must be greater than zero");
            }
        }
        if self.body_timeout.is_zero() {
            errors.add("http.body_timeout", "must be greater than zero");
        }
        if self.request_timeout <= self.body_timeout {
            errors.add(
                "http.request_timeout",
                "must be longer than http.body_timeout (a slow body is answered 408 first)",
            );
        }
        let h2_stream_window = u32::try_from(self.h2_stream_window.as_u64())
            .ok()
            .filter(|w| (H2_MIN_WINDOW..=H2_MAX_WINDOW).contains(w));
        if h2_stream_window.is_none() {
            errors.add(
                "http.h2_stream_window",
                "must be between 16KiB and 2GiB - 1 byte (HTTP/2's largest window)",
            );
        }
        if self.h2_control_frames_per_second == 0 {
            errors.add("http.h2_control_frames_per_second", "must be positive");
        }
        if !(1..=MAX_HEADERS).contains(&self.max_headers) {
            errors.add(
                "http.max_headers",
                format!("must be between 1 and {MAX_HEADERS}"),
            );
        }
        HttpSettings {
            max_header_bytes: self.max_header_bytes.as_u64() as usize,
            max_headers: self.max_headers,
            header_timeout: self.header_timeout,
            h2_max_concurrent_streams: self.h2_max_concurrent_streams,
            h2_stream_window: h2_stream_window.unwrap_or(H2_MAX_WINDOW),
            h2_keepalive_interval: self.h2_keepalive_interval,
            h2_keepalive_timeout: self.h2_keepalive_timeout,
            h2_control_frames_per_second: self.h2_control_frames_per_second,
            request_timeout: self.request_timeout,
            body_rate: BodyRate {
                min_bytes_per_second: self.min_body_rate.as_u64(),
                grace: self.body_rate_grace,
                deadline: self.body_timeout,
            },
            deadlines: Deadlines {
                write_stall: self.write_stall_timeout,
                idle: self.idle_timeout,
                head: self.header_timeout,
                lifetime: self.max_connection_lifetime,
            },
        }
    }
}

/// HTTP/2's largest flow-control window (RFC 9113, 6.9.1).
const H2_MAX_WINDOW: u32 = (1 << 31) - 1;
/// Below one maximum-size frame a window only adds round trips.
const H2_MIN_WINDOW: u32 = 16 * 1024;
/// The largest request head accepted. The provider headers kept with an event are
/// forwarded to the origin, and JetStream refuses a message whose headers pass 64KiB:
/// this leaves room for the edge's own (`Nats-Msg-Id`, `Edge-*`: under 1KiB). A spool
/// record holds header values of up to 64KiB.
const MAX_HEADER_BYTES: u64 = 60 * 1024;
/// hyper parses up to twice this many fields (see `crate::http`); a request with more
/// is no webhook.
const MAX_HEADERS: usize = 256;
