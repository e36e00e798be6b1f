//! The backhaul: moves spooled events to the origin over connections kept open ahead of
//! time. It reads the spool in order from the checkpoint, keeps up to `max_in_flight`
//! deliveries outstanding, retries with backoff and jitter behind a circuit breaker, and
//! advances the checkpoint only through the contiguous prefix the origin acknowledged.
//! At-least-once: after a crash the unacknowledged tail is sent again, and the event id
//! travels with each message so the origin drops the duplicates.

mod ack_window;
mod breaker;
mod dead_letter;
mod delivery;
mod http;
mod metrics;
mod nats;
mod retry;

use std::time::Duration;

pub use delivery::run;
pub use metrics::BackhaulMetrics;
pub use nats::create_stream;

use crate::admission::ledger::ShedShipper;
use crate::config::{BackhaulSettings, SinkSettings};
use crate::spool::record::Record;

/// Where events go.
pub enum Sink {
    Nats(Box<nats::NatsSink>),
    Http(http::HttpSink),
}

/// Why one delivery did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// Worth retrying (origin down, timeout, overload); `after` is the origin's own hint.
    #[error("{reason}")]
    Retry {
        reason: &'static str,
        detail: String,
        after: Option<Duration>,
    },
    /// The origin refused this event for good: keep it in the dead-letter store.
    #[error("rejected: {0}")]
    Rejected(String),
}

impl Sink {
    /// Connects (in the background when the origin is not reachable yet).
    pub async fn connect(
        settings: &BackhaulSettings,
        pop: &str,
        metrics: BackhaulMetrics,
    ) -> anyhow::Result<Sink> {
        match &settings.sink {
            SinkSettings::Nats(nats) => {
                let sink = nats::NatsSink::connect(nats, pop, metrics).await?;
                Ok(Sink::Nats(Box::new(sink)))
            }
            SinkSettings::Http(http) => {
                Ok(Sink::Http(http::HttpSink::connect(http, metrics).await?))
            }
        }
    }

    /// Notified each time a connection to the origin is established (after an outage the
    /// deliveries waiting on backoff go at once).
    pub fn origin_back(&self) -> std::sync::Arc<tokio::sync::Notify> {
        match self {
            Sink::Nats(sink) => std::sync::Arc::clone(&sink.origin_back),
            Sink::Http(sink) => std::sync::Arc::clone(&sink.origin_back),
        }
    }

    pub async fn deliver(&self, record: &Record) -> Result<(), DeliveryError> {
        match self {
            Sink::Nats(sink) => sink.deliver(record).await,
            Sink::Http(sink) => sink.deliver(record).await,
        }
    }
}

/// The shed ledger ships over NATS only: the HTTP origin API has no place for it, so
/// there it stays in the local file.
impl ShedShipper for Sink {
    async fn ship(&self, entry: &[u8], id: &str) -> bool {
        match self {
            Sink::Nats(sink) => sink.publish_shed(entry, id).await.is_ok(),
            Sink::Http(_) => false,
        }
    }
}
