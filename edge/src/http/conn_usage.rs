//! What one client connection is doing, as its request path reports it (requests in
//! progress, bodies at a trickle, abuse) and as the server's connection table reads it
//! to choose whom to evict.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;

/// What one connection is doing, shared between its task (which reports) and the table
/// (which picks whom to evict).
#[derive(Debug)]
pub(crate) struct ConnUsage {
    in_flight: AtomicU32,
    /// Request bodies of this connection now arriving at a trickle.
    trickling: AtomicU32,
    /// Clock reading since which no request has been in progress; [`NOT_SERVING`]
    /// until the handshake is done.
    idle_since_ms: AtomicU64,
    /// Cancelled when the connection must close: evicted, or the process shuts down.
    closing: CancellationToken,
    /// Cancelled when the peer abused the protocol: the connection is dropped at once.
    abandoned: CancellationToken,
}

impl ConnUsage {
    pub(crate) fn new(closing: CancellationToken) -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            trickling: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(NOT_SERVING),
            closing,
            abandoned: CancellationToken::new(),
        }
    }

    /// The handshake is done at `now_ms`: idle from then until a request starts.
    pub(crate) fn serving(&self, now_ms: u64) {
        self.idle_since_ms.store(now_ms, Ordering::Relaxed);
    }

    pub(crate) fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn request_ended(&self, now_ms: u64) {
        if self.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.idle_since_ms.store(now_ms, Ordering::Relaxed);
        }
    }

    /// A request body of this connection starts (`true`) or stops (`false`) arriving
    /// at a trickle; calls come in pairs.
    pub(crate) fn trickling(&self, trickling: bool) {
        if trickling {
            self.trickling.fetch_add(1, Ordering::Relaxed);
        } else {
            self.trickling.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Since when the connection has had nothing to do; `None` while a request is in
    /// progress or its handshake is not done.
    pub(crate) fn idle_since(&self) -> Option<u64> {
        let since = self.idle_since_ms.load(Ordering::Relaxed);
        (self.in_flight.load(Ordering::Relaxed) == 0 && since != NOT_SERVING).then_some(since)
    }

    /// Fires when the connection must finish what it is doing and close.
    pub(crate) fn closing(&self) -> &CancellationToken {
        &self.closing
    }

    /// The peer abused the protocol (a body in tiny pieces): drop the connection now,
    /// unread bytes and all, rather than parse what it still sends.
    pub(crate) fn abandon(&self) {
        self.abandoned.cancel();
    }

    /// Fires once [`ConnUsage::abandon`] was called.
    pub(crate) fn abandoned(&self) -> &CancellationToken {
        &self.abandoned
    }

    pub(crate) fn is_trickling(&self) -> bool {
        self.trickling.load(Ordering::Relaxed) > 0
    }
}

/// `idle_since_ms` before the handshake is done.
const NOT_SERVING: u64 = u64::MAX;
