//! What reached the origin: every message in the JetStream stream, by event id
//! (`Nats-Msg-Id`) and the PoP that delivered it (`Edge-Pop`); and how the stream is
//! replicated across the origin's cluster.

use futures::StreamExt;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
pub struct Arrival {
    pub id: String,
    pub pop: String,
}

/// The stream's replication, as its leader reports it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Replication {
    pub leader: String,
    /// Every replica but the leader.
    pub peers: Vec<Peer>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Peer {
    pub name: String,
    /// Caught up with the leader.
    pub current: bool,
    pub offline: bool,
    /// Operations behind the leader.
    pub lag: u64,
}

pub async fn replication(servers: &[String], stream: &str) -> anyhow::Result<Replication> {
    // Short, so that a caller polling through a leader election sees its end promptly:
    // a request that reached the dead leader waits out this timeout, not the client's
    // 10 s default (the JetStream context's own timeout bounds only publishes).
    let client = async_nats::ConnectOptions::new()
        .request_timeout(Some(std::time::Duration::from_secs(1)))
        .connect(servers)
        .await?;
    let jetstream = async_nats::jetstream::new(client);
    let mut stream = jetstream.get_stream(stream).await?;
    let cluster = stream
        .info()
        .await?
        .cluster
        .clone()
        .ok_or_else(|| anyhow::anyhow!("the stream is not clustered"))?;
    Ok(Replication {
        leader: cluster.leader.unwrap_or_default(),
        peers: cluster
            .replicas
            .into_iter()
            .map(|peer| Peer {
                name: peer.name,
                current: peer.current,
                offline: peer.offline,
                lag: peer.lag.unwrap_or(0),
            })
            .collect(),
    })
}

pub async fn arrivals(servers: &[String], stream: &str) -> anyhow::Result<Vec<Arrival>> {
    use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
    let client = async_nats::connect(servers).await?;
    let jetstream = async_nats::jetstream::new(client);
    let mut stream = jetstream.get_stream(stream).await?;
    let total = stream.info().await?.state.messages as usize;
    let consumer = stream
        .create_consumer(pull::Config {
            ack_policy: AckPolicy::None,
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await?;
    let mut arrivals = Vec::with_capacity(total);
    while arrivals.len() < total {
        let mut batch = consumer
            .batch()
            .max_messages(BATCH.min(total - arrivals.len()))
            .expires(std::time::Duration::from_secs(2))
            .messages()
            .await?;
        let before = arrivals.len();
        while let Some(message) = batch.next().await {
            let message = message.map_err(|e| anyhow::anyhow!("{e}"))?;
            let header = |name: async_nats::HeaderName| {
                message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_owned())
                    .unwrap_or_default()
            };
            arrivals.push(Arrival {
                id: header(async_nats::HeaderName::from_static("Edge-Event-Id")),
                pop: header(async_nats::HeaderName::from_static("Edge-Pop")),
            });
        }
        anyhow::ensure!(
            arrivals.len() > before,
            "stream said {total} messages, read {}",
            arrivals.len()
        );
    }
    Ok(arrivals)
}

const BATCH: usize = 1000;
