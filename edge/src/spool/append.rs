//! What an append carries and how it ends: the request path hands the spool a
//! [`NewEvent`] and waits for [`Appended`] (durable) or an [`AppendError`].

use std::sync::Arc;

use bytes::Bytes;

/// A webhook ready to be stored: verified, with its event id.
#[derive(Debug)]
pub struct NewEvent {
    pub received_ms: u64,
    pub early: bool,
    pub route: Arc<str>,
    pub event_id: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Bytes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Stored under this sequence number and durable.
    Stored { seq: u64 },
    /// The route's recent window already holds this event id, durable under `seq`.
    Duplicate { seq: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
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
