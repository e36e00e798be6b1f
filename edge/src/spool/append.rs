//! What an append carries and how it ends: the request path hands the spool a
//! [`NewEvent`] and waits for [`Appended`] (durable) or an [`AppendError`].

use std::sync::Arc;

use bytes::Bytes;

/// A webhook ready to be stored: verified, with its event id.
#[derive(Debug)]
pub struct NewEvent {
    /// Unix time in milliseconds when the request arrived.
    pub received_ms: u64,
    /// Whether it came as TLS early data (0-RTT).
    pub early: bool,
    /// The route's name.
    pub route: Arc<str>,
    /// The event id (the delivery id, or a digest of the body).
    pub event_id: String,
    /// The headers kept with the event.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body as received.
    pub body: Bytes,
    /// Sent again by an operator (a dead letter retried, a replay): stored even when
    /// the route's window already holds its id, so that it goes to the origin once more
    /// (a retried dead letter keeps its id, so the origin still drops a copy it has).
    pub resend: bool,
}

impl NewEvent {
    /// A stored event, to be stored again as it arrived (an operator's retry or
    /// replay): duplicate checks do not drop it.
    pub(crate) fn again(record: super::record::Record) -> Self {
        Self {
            received_ms: record.received_ms,
            early: record.early,
            route: record.route.into(),
            event_id: record.event_id,
            headers: record.headers,
            body: record.body.into(),
            resend: true,
        }
    }
}

/// What an append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Stored and durable.
    Stored {
        /// Its sequence number.
        seq: u64,
    },
    /// The route's recent window already holds this event id: a redelivery, not stored
    /// again.
    Duplicate {
        /// The sequence number it is durable under.
        seq: u64,
    },
    /// A signed body the route's recent window already holds under another unsigned
    /// id: a captured delivery sent again under a fresh id, not stored.
    Replay {
        /// The sequence number the body is durable under.
        seq: u64,
    },
}

/// Why an append was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    /// The spool is at `max_bytes`.
    #[error("spool is over its max_bytes")]
    Full,
    /// The filesystem under the spool has no room (ENOSPC, EDQUOT); passes by itself
    /// once the backhaul delivers and segments are deleted.
    #[error("spool disk is full")]
    DiskFull,
    /// A write or fsync failed. After a failed fsync the page cache cannot be trusted,
    /// so the spool refuses every later append until the process restarts.
    #[error("spool failed: {0}")]
    Failed(String),
    /// The spool is shutting down.
    #[error("spool is shut down")]
    Closed,
    /// The record has a field over the format's limits (the config's head limits
    /// prevent it); the request is refused, nothing is stored.
    #[error("request head over the spool record's limits")]
    TooLarge,
}

impl AppendError {
    /// The `reason` label of the error in metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::DiskFull => "disk_full",
            Self::Failed(_) => "failed",
            Self::Closed => "closed",
            Self::TooLarge => "too_large",
        }
    }
}
