//! The origin a PoP delivers to, NATS JetStream or HTTP, behind one face.

use super::error::DeliveryError;
use super::metrics::BackhaulMetrics;
use super::{http, nats};
use crate::admission::ledger::ShedShipper;
use crate::config::{BackhaulSettings, SinkSettings};
use crate::spool::record::Record;

/// Where events go.
pub enum Sink {
    /// JetStream: publish, ack with the stream's sequence.
    Nats(Box<nats::NatsSink>),
    /// An HTTP endpoint: POST, a 2xx is the ack.
    Http(http::HttpSink),
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

    /// Delivers one record; `Ok` once the origin acknowledged it.
    /// Publishes `record`, de-duplicated at the origin by `origin_key`
    /// (`Spool::origin_key`).
    pub async fn deliver(&self, record: &Record, origin_key: &str) -> Result<(), DeliveryError> {
        match self {
            Sink::Nats(sink) => sink.deliver(record, origin_key).await,
            Sink::Http(sink) => sink.deliver(record, origin_key).await,
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
