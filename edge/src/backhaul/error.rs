//! How one delivery can end other than delivered: the sinks answer with it, the
//! delivery loop decides on it (retry, or keep as a dead letter).

use std::time::Duration;

/// Why one delivery did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// Worth retrying (origin down, timeout, overload); `after` is the origin's own hint.
    #[error("{reason}")]
    Retry {
        /// The `reason` label of the retry metric.
        reason: &'static str,
        /// What happened, for the log.
        detail: String,
        /// How long the origin asked to wait, if it did.
        after: Option<Duration>,
    },
    /// The origin refused this event for good: keep it in the dead-letter store.
    #[error("rejected: {0}")]
    Rejected(String),
}
