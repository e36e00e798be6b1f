//! The HTTP/1.1 head deadline's clock: when the request head now being received began.
//! The byte stream (the server's `DeadlineIo`) sees the bytes and enforces the deadline;
//! the request path sees complete heads and the end of their handling.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// When the HTTP/1.1 request head now being received began, shared by the byte stream
/// (which sees the bytes) and the request handler (which sees complete heads). Off until
/// [`HeadClock::start`]: TLS handshakes and HTTP/2 connections have no head deadline.
#[derive(Debug, Default)]
pub(crate) struct HeadClock(Mutex<HeadState>);

#[derive(Debug, Default)]
struct HeadState {
    on: bool,
    /// When the head being received started; `None` while none is.
    since: Option<Instant>,
    /// Requests whose head is complete and whose handling has not finished: bytes read
    /// meanwhile are their bodies, or the next request pipelined behind them.
    handling: u32,
}

impl HeadClock {
    /// The connection is ready for its first request: the head deadline runs from now.
    pub(crate) fn start(&self) {
        let mut state = self.state();
        state.on = true;
        state.since = Some(Instant::now());
    }

    /// A complete head arrived: no deadline until the request has been handled and a
    /// byte of the next one arrives.
    pub(crate) fn request_started(self: &Arc<Self>) -> RequestHandling {
        let mut state = self.state();
        state.since = None;
        state.handling += 1;
        RequestHandling(Arc::clone(self))
    }

    /// Bytes arrived at `now`: the head deadline starts if they begin a head.
    pub(crate) fn bytes_read(&self, now: Instant) {
        let mut state = self.state();
        if state.on && state.handling == 0 && state.since.is_none() {
            state.since = Some(now);
        }
    }

    /// When the head being received must be complete, for a head deadline of `limit`.
    pub(crate) fn deadline(&self, limit: Duration) -> Option<Instant> {
        self.state().since.map(|since| since + limit)
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, HeadState> {
        self.0.lock()
    }
}

/// Held while a request is handled (see [`HeadClock::request_started`]).
pub(crate) struct RequestHandling(Arc<HeadClock>);

impl Drop for RequestHandling {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.handling = state.handling.saturating_sub(1);
    }
}
