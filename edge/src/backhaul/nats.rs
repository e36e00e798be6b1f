//! NATS JetStream sink. The client connects at start and keeps the connection warm
//! (PINGs, reconnects with backoff in the background). Each event is published with
//! `Nats-Msg-Id` = its origin key (its route and de-duplication key hashed together:
//! `crate::event::origin_key`), so the stream drops duplicates from retries, replays
//! and other PoPs inside its duplicate window, and no route's ids can drop another's;
//! `Edge-Event-Id` = the provider's own id; the publish counts only once JetStream's
//! PubAck arrives.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use async_nats::HeaderMap;
use async_nats::jetstream;
use tokio::sync::Notify;

use super::error::DeliveryError;
use super::metrics::BackhaulMetrics;
use super::retry::{Backoff, unit_random};
use crate::config::NatsSettings;
use crate::event::id_of_key;
use crate::spool::record::Record;

/// Makes the stream as the edges expect it (`edge create-stream`), connecting as
/// `settings` say (with the origin administrator's identity, not a PoP's: a PoP's user
/// may only publish). A stream that exists is left as it is. Returns `created …` or
/// `exists …` with its summary.
pub async fn create_stream(settings: &NatsSettings) -> anyhow::Result<String> {
    let client = connect_options(settings)
        .await?
        .request_timeout(Some(settings.publish_timeout))
        .connection_timeout(Duration::from_secs(5))
        .connect(settings.servers.clone())
        .await
        .context("backhaul.nats.servers")?;
    let jetstream = jetstream::new(client);
    let (verb, mut stream) = match jetstream.get_stream(&settings.stream).await {
        Ok(stream) => ("exists", stream),
        Err(e)
            if matches!(
                e.kind(),
                jetstream::context::GetStreamErrorKind::JetStream(js)
                    if js.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
            ) =>
        {
            let created = jetstream
                .create_stream(stream_config(settings))
                .await
                .with_context(|| format!("creating stream {}", settings.stream))?;
            ("created", created)
        }
        Err(e) => return Err(e).with_context(|| format!("stream {}", settings.stream)),
    };
    let info = stream.info().await.context("stream info")?;
    Ok(format!(
        "{verb}: stream {}, subjects {:?}, {} replicas, duplicates dropped within {}, {} messages",
        info.config.name,
        info.config.subjects,
        info.config.num_replicas,
        humantime_serde::re::humantime::format_duration(info.config.duplicate_window),
        info.state.messages
    ))
}

pub struct NatsSink {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    settings: NatsSettings,
    /// The stream was found (or made). Forgotten when a publish finds no stream: one
    /// deleted at the origin is looked for (and, with `create`, made) again.
    stream_known: AtomicBool,
    /// One look-up (or creation) at a time, as many deliveries find the stream unknown
    /// at once: the others wait for its answer instead of asking JetStream together.
    stream_lookup: tokio::sync::Mutex<()>,
    /// `webhooks.shed.<pop>`: where the shed ledger goes.
    shed_subject: String,
    metrics: BackhaulMetrics,
    pub(super) origin_back: Arc<Notify>,
}

impl NatsSink {
    pub async fn connect(
        settings: &NatsSettings,
        pop: &str,
        metrics: BackhaulMetrics,
    ) -> anyhow::Result<Self> {
        let options = connect_options(settings).await?;
        let events_metrics = metrics.clone();
        let origin_back = Arc::new(Notify::new());
        let reconnected = Arc::clone(&origin_back);
        let client = options
            .name(format!("edge-{pop}"))
            .custom_inbox_prefix(settings.inbox_prefix.replace("{pop}", &token(pop)))
            .ping_interval(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(5))
            // Bounds the stream look-up as publishes are bounded: async-nats' 10 s
            // default would hold delivery that long through an origin leader election.
            .request_timeout(Some(settings.publish_timeout))
            .retry_on_initial_connect()
            .reconnect_delay_callback(reconnect_delay(settings.reconnect_max))
            .event_callback(move |event| {
                let metrics = events_metrics.clone();
                let reconnected = Arc::clone(&reconnected);
                async move {
                    match event {
                        async_nats::Event::Connected => {
                            metrics.dials.inc();
                            metrics.ready_connections.set(1);
                            reconnected.notify_waiters();
                            tracing::info!("backhaul: connected to NATS");
                        }
                        async_nats::Event::Disconnected => {
                            metrics.ready_connections.set(0);
                            tracing::warn!(
                                "backhaul: disconnected from NATS; reconnecting in the background"
                            );
                        }
                        other => tracing::info!(event = %other, "backhaul: NATS event"),
                    }
                }
            })
            .connect(settings.servers.clone())
            .await
            .context("backhaul.nats.servers")?;
        let mut jetstream = jetstream::new(client.clone());
        // JetStream's own ack timeout bounds each publish (no timer per message here).
        jetstream.set_timeout(settings.publish_timeout);
        // Dial before the edge reports ready, but never wait long: an origin outage must
        // not keep a PoP out of service.
        let started = Instant::now();
        while client.connection_state() != async_nats::connection::State::Connected
            && started.elapsed() < INITIAL_DIAL_WAIT
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self {
            client,
            jetstream,
            settings: settings.clone(),
            stream_known: AtomicBool::new(false),
            stream_lookup: tokio::sync::Mutex::new(()),
            shed_subject: format!("webhooks.shed.{}", token(pop)),
            metrics,
            origin_back,
        })
    }

    pub async fn deliver(&self, record: &Record, origin_key: &str) -> Result<(), DeliveryError> {
        if self.client.connection_state() != async_nats::connection::State::Connected {
            return Err(retry("not_connected", "no connection to NATS".into()));
        }
        self.ensure_stream().await?;
        let subject = self.subject(record);
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, origin_key);
        headers.insert("Edge-Event-Id", id_of_key(&record.event_id));
        headers.insert("Edge-Pop", record.pop.as_str());
        headers.insert("Edge-Route", record.route.as_str());
        headers.insert("Edge-Seq", record.seq.to_string().as_str());
        headers.insert("Edge-Received-Ms", record.received_ms.to_string().as_str());
        headers.insert("Edge-Early", if record.early { "1" } else { "0" });
        for (name, value) in &record.headers {
            if let Ok(value) = std::str::from_utf8(value) {
                headers.append(name.as_str(), value);
            }
        }
        let ack = self
            .jetstream
            .publish_with_headers(subject, headers, record.body.clone().into())
            .await
            .map_err(|e| retry("publish", e.to_string()))?
            .await
            .map_err(|e| self.puback_error(e))?;
        if ack.duplicate {
            self.metrics.duplicates.inc();
        }
        Ok(())
    }

    pub async fn publish_shed(&self, entry: &[u8], id: &str) -> Result<(), DeliveryError> {
        if self.client.connection_state() != async_nats::connection::State::Connected {
            return Err(retry("not_connected", "no connection to NATS".into()));
        }
        self.ensure_stream().await?;
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
        self.jetstream
            .publish_with_headers(self.shed_subject.clone(), headers, entry.to_vec().into())
            .await
            .map_err(|e| retry("publish", e.to_string()))?
            .await
            .map_err(|e| self.puback_error(e))?;
        Ok(())
    }

    /// A publish not acknowledged: when no stream answered, the stream is looked for
    /// again before the next one.
    fn puback_error(&self, error: jetstream::context::PublishError) -> DeliveryError {
        if error.kind() == jetstream::context::PublishErrorKind::StreamNotFound {
            self.stream_known.store(false, Ordering::Release);
        }
        puback_refusal(error)
    }

    fn subject(&self, record: &Record) -> String {
        self.settings
            .subject
            .replace("{pop}", &token(&record.pop))
            .replace("{route}", &token(&record.route))
    }

    /// Finds the stream (or makes it, with `create`) unless it is known to be there.
    async fn ensure_stream(&self) -> Result<(), DeliveryError> {
        if self.stream_known.load(Ordering::Acquire) {
            return Ok(());
        }
        let _lookup = self.stream_lookup.lock().await;
        if self.stream_known.load(Ordering::Acquire) {
            return Ok(());
        }
        let name = &self.settings.stream;
        let found = if self.settings.create {
            self.jetstream
                .get_or_create_stream(stream_config(&self.settings))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        } else {
            self.jetstream
                .get_stream(name)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        found.map_err(|e| {
            self.metrics.retry("stream");
            retry("stream", format!("stream {name}: {e}"))
        })?;
        self.stream_known.store(true, Ordering::Release);
        Ok(())
    }
}

/// The pause before reconnect attempt `attempts` (1-based): at once, then exponential
/// with full jitter up to `max`, so PoPs do not reconnect to a recovered origin together.
fn reconnect_delay(max: Duration) -> impl Fn(usize) -> Duration + Send + Sync + 'static {
    let backoff = Backoff {
        base: RECONNECT_BASE,
        max,
    };
    move |attempts| match attempts {
        0 | 1 => Duration::ZERO,
        n => backoff.delay(u32::try_from(n - 2).unwrap_or(u32::MAX), unit_random()),
    }
}

/// Why a publish was not acknowledged. JetStream refusing the message itself (over the
/// stream's maximum size, headers over 64KiB) is for good: retrying it would hold
/// delivery behind it forever, so it goes to the dead letters. Anything else (no
/// stream leader, timeout, store failures) is worth retrying.
fn puback_refusal(error: jetstream::context::PublishError) -> DeliveryError {
    use async_nats::jetstream::ErrorCode;
    let refused = std::error::Error::source(&error)
        .and_then(|source| source.downcast_ref::<jetstream::Error>())
        .is_some_and(|api| {
            [
                ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
                ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM,
            ]
            .contains(&api.error_code())
        });
    if refused {
        DeliveryError::Rejected(error.to_string())
    } else {
        retry("puback", error.to_string())
    }
}

fn retry(reason: &'static str, detail: String) -> DeliveryError {
    DeliveryError::Retry {
        reason,
        detail,
        after: None,
    }
}

/// A subject token: NATS separates tokens with `.` and reserves `*` and `>`.
fn token(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Credentials and TLS as `settings` say: what every connection to the origin starts from.
async fn connect_options(settings: &NatsSettings) -> anyhow::Result<async_nats::ConnectOptions> {
    let mut options = match &settings.credentials {
        Some(path) => async_nats::ConnectOptions::with_credentials_file(path)
            .await
            .with_context(|| format!("backhaul.nats.credentials {}", path.display()))?,
        None => async_nats::ConnectOptions::new(),
    };
    if let Some(token) = &settings.token {
        options = options.token(token.expose().clone());
    }
    if let Some(seed) = &settings.nkey {
        options = options.nkey(seed.expose().clone());
    }
    if let Some(tls) = &settings.tls {
        options = options.require_tls(true);
        if let Some(ca) = &tls.ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&tls.client_cert, &tls.client_key) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
    }
    Ok(options)
}

/// The stream every PoP publishes into: all `webhooks.>` subjects, duplicates (by
/// `Nats-Msg-Id`) dropped within `duplicate_window`, `replicas` copies.
fn stream_config(settings: &NatsSettings) -> jetstream::stream::Config {
    jetstream::stream::Config {
        name: settings.stream.clone(),
        subjects: vec!["webhooks.>".into()],
        duplicate_window: settings.duplicate_window,
        num_replicas: settings.replicas,
        ..Default::default()
    }
}

const INITIAL_DIAL_WAIT: Duration = Duration::from_secs(2);
const RECONNECT_BASE: Duration = Duration::from_millis(100);
