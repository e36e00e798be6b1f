//! What reached the origin: every message in the JetStream stream, by event id
//! (`Nats-Msg-Id`) and the PoP that delivered it (`Edge-Pop`); how the stream is
//! replicated across the origin's cluster; and what a PoP's own identity may not do
//! there. The lab reaches its origin as production does: TLS (the lab's CA) and an nkey
//! per user (`lab/origin/`: the lab's own, published with the source).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

/// How to reach an origin: its servers, the CA of its certificate (TLS then required),
/// whose nkey seed, and where its replies come (a PoP's own inbox; NATS's `_INBOX`
/// when `None`).
#[derive(Clone, Debug)]
pub struct OriginAccess {
    /// The origin's servers.
    pub servers: Vec<String>,
    /// The CA that signed their certificates.
    pub ca: Option<PathBuf>,
    /// The nkey seed file of the identity used.
    pub seed_file: Option<PathBuf>,
    /// The inbox prefix replies come to.
    pub inbox_prefix: Option<String>,
}

impl OriginAccess {
    /// The lab's origin as its administrator, with the CA and seed under `lab_dir`.
    pub fn admin(lab_dir: &Path, servers: Vec<String>) -> Self {
        Self {
            servers,
            ca: Some(lab_dir.join("origin/tls/ca.pem")),
            seed_file: Some(lab_dir.join("origin/admin.nk")),
            inbox_prefix: None,
        }
    }

    /// A test's own NATS server: plain, anyone may do anything.
    pub fn open(servers: Vec<String>) -> Self {
        Self {
            servers,
            ca: None,
            seed_file: None,
            inbox_prefix: None,
        }
    }

    async fn connect(&self, request_timeout: Duration) -> anyhow::Result<async_nats::Client> {
        let mut options = async_nats::ConnectOptions::new().request_timeout(Some(request_timeout));
        if let Some(path) = &self.seed_file {
            options = options.nkey(std::fs::read_to_string(path)?.trim().to_owned());
        }
        if let Some(ca) = &self.ca {
            options = options.require_tls(true).add_root_certificates(ca.clone());
        }
        if let Some(prefix) = &self.inbox_prefix {
            options = options.custom_inbox_prefix(prefix);
        }
        Ok(options.connect(self.servers.as_slice()).await?)
    }
}

/// What one identity could do at the origin.
#[derive(Debug, Serialize, Deserialize)]
pub struct Probe {
    /// Looking the stream up (every PoP may).
    pub stream_info: Result<u64, String>,
    /// A JetStream publish to the subject asked for.
    pub publish: Result<u64, String>,
    /// Deleting the stream.
    pub delete_stream: Result<bool, String>,
    /// A message the administrator sends into the identity's own inbox reached it.
    pub reads_own_inbox: bool,
    /// A message the administrator sends into another inbox (another PoP's PubAcks)
    /// reached it.
    pub reads_other_inbox: bool,
}

/// One event as it reached the origin's stream.
#[derive(Debug, Serialize, Deserialize)]
pub struct Arrival {
    /// Its event id.
    pub id: String,
    /// The PoP that delivered it.
    pub pop: String,
    /// Its sequence number in the stream.
    pub seq: u64,
}

/// The stream's replication, as its leader reports it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Replication {
    /// The replica that leads the stream.
    pub leader: String,
    /// Every replica but the leader.
    pub peers: Vec<Peer>,
}

/// One replica of the stream.
#[derive(Debug, Serialize, Deserialize)]
pub struct Peer {
    /// Its server's name.
    pub name: String,
    /// Caught up with the leader.
    pub current: bool,
    /// The leader reports it offline.
    pub offline: bool,
    /// Operations behind the leader.
    pub lag: u64,
}

/// Asks the stream's leader how its replicas stand.
pub async fn replication(access: &OriginAccess, stream: &str) -> anyhow::Result<Replication> {
    // Short, so that a caller polling through a leader election sees its end promptly:
    // a request that reached the dead leader waits out this timeout, not the client's
    // 10 s default (the JetStream context's own timeout bounds only publishes).
    let client = access.connect(Duration::from_secs(1)).await?;
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

/// Every event in the stream, oldest first.
pub async fn arrivals(access: &OriginAccess, stream: &str) -> anyhow::Result<Vec<Arrival>> {
    use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
    let client = access.connect(Duration::from_secs(10)).await?;
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
            let seq = message
                .info()
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .stream_sequence;
            arrivals.push(Arrival {
                id: header(async_nats::HeaderName::from_static("Edge-Event-Id")),
                pop: header(async_nats::HeaderName::from_static("Edge-Pop")),
                seq,
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

/// Tries, as `access`'s identity, to look `stream` up, to publish to `subject`, to
/// delete `stream`, and to read what `admin` sends into its own inbox and into
/// `other_inbox`; each answer or refusal as it came.
pub async fn probe(
    access: &OriginAccess,
    admin: &OriginAccess,
    stream: &str,
    subject: &str,
    other_inbox: &str,
) -> anyhow::Result<Probe> {
    let client = access.connect(Duration::from_secs(2)).await?;
    let admin = admin.connect(Duration::from_secs(2)).await?;
    let own_inbox = access.inbox_prefix.as_deref().unwrap_or("_INBOX");
    let reads_own_inbox = receives(&client, &admin, &format!("{own_inbox}.probe")).await?;
    let reads_other_inbox = receives(&client, &admin, &format!("{other_inbox}.probe")).await?;
    let mut jetstream = async_nats::jetstream::new(client);
    jetstream.set_timeout(Duration::from_secs(2));
    let stream_info = match jetstream.get_stream(stream).await {
        Ok(mut found) => found
            .info()
            .await
            .map(|info| info.state.messages)
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let publish = match jetstream.publish(subject.to_owned(), "probe".into()).await {
        Ok(ack) => ack.await.map(|ack| ack.sequence).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let delete_stream = jetstream
        .delete_stream(stream)
        .await
        .map(|status| status.success)
        .map_err(|e| e.to_string());
    Ok(Probe {
        stream_info,
        publish,
        delete_stream,
        reads_own_inbox,
        reads_other_inbox,
    })
}

/// Whether `reader`, subscribed to `subject`, gets what `admin` then sends there. A
/// subscription the origin refuses is dropped by the server, so nothing arrives. The
/// administrator sends again every few milliseconds until it arrives or `INBOX_WAIT`
/// ends: the reader's interest reaches the other servers of the cluster a little later.
async fn receives(
    reader: &async_nats::Client,
    admin: &async_nats::Client,
    subject: &str,
) -> anyhow::Result<bool> {
    let mut subscription = reader.subscribe(subject.to_owned()).await?;
    reader.flush().await?;
    let deadline = tokio::time::Instant::now() + INBOX_WAIT;
    while tokio::time::Instant::now() < deadline {
        admin.publish(subject.to_owned(), "probe".into()).await?;
        admin.flush().await?;
        if let Ok(arrived) = tokio::time::timeout(INBOX_RESEND, subscription.next()).await {
            return Ok(arrived.is_some());
        }
    }
    Ok(false)
}

const BATCH: usize = 1000;
/// How long a probe waits for the administrator's message, and how often it is sent.
const INBOX_WAIT: Duration = Duration::from_secs(3);
const INBOX_RESEND: Duration = Duration::from_millis(50);
