//! `backhaul:` where spooled events go (NATS JetStream or an HTTP origin), and how
//! deliveries are retried behind a circuit breaker.

use std::path::PathBuf;
use std::time::Duration;

use edge_kit::config_file::FieldErrors;
use edge_kit::secret::Secret;
use serde::Deserialize;

/// The `backhaul` section, validated.
#[derive(Clone, Debug)]
pub struct BackhaulSettings {
    /// Where events go.
    pub sink: SinkSettings,
    /// Deliveries in flight at once.
    pub max_in_flight: usize,
    /// The first retry's delay; it doubles up to `retry_max`, with jitter.
    pub retry_base: Duration,
    /// The longest delay between retries.
    pub retry_max: Duration,
    /// Failures in a row that open the circuit breaker.
    pub breaker_failures: u32,
    /// How long the breaker stays open before one probe.
    pub breaker_open_for: Duration,
    /// Deliveries started per second at most (a backlog drained after an origin outage
    /// at a pace the origin can take); `None`: as fast as the origin acknowledges.
    pub max_rate: Option<u32>,
}

/// The origin the backhaul delivers to.
#[derive(Clone, Debug)]
pub enum SinkSettings {
    /// A NATS JetStream stream.
    Nats(NatsSettings),
    /// An HTTP endpoint.
    Http(HttpSinkSettings),
}

/// An HTTP sink, validated.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSinkSettings {
    /// The URL events are POSTed to.
    pub url: String,
    /// Warm HTTP/2 connections kept open to the origin. Default 4.
    #[serde(default = "HttpSinkSettings::default_connections")]
    pub connections: usize,
    /// TLS to the endpoint; `None`: the system roots.
    pub tls: Option<ClientTls>,
    /// One delivery attempt. Default 5s.
    #[serde(default = "default_publish_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

/// A NATS JetStream sink, validated.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSettings {
    /// The origin's servers (`nats://` or `tls://` URLs).
    pub servers: Vec<String>,
    /// The JetStream stream events go to.
    pub stream: String,
    /// Create the stream (subjects `webhooks.>`) when it does not exist. Default false.
    #[serde(default)]
    pub create: bool,
    /// Replicas of the stream `create` makes: 3 (or 5) on a JetStream cluster, so that
    /// losing a server loses no acknowledged event. Default 1.
    #[serde(default = "NatsSettings::default_replicas")]
    pub replicas: usize,
    /// How long the stream `create` makes still drops a resend of a message (by
    /// `Nats-Msg-Id`). A publish in flight when the origin went down is sent again once
    /// it is back: within the window it is dropped, after it the origin holds the
    /// event twice. Default 1h, against JetStream's 2 minutes, so an origin outage of up
    /// to an hour costs no duplicate; JetStream keeps every id of the window in memory.
    #[serde(
        default = "NatsSettings::default_duplicate_window",
        with = "humantime_serde"
    )]
    pub duplicate_window: Duration,
    /// `{pop}` and `{route}` are replaced. Default `webhooks.{pop}.{route}`.
    #[serde(default = "NatsSettings::default_subject")]
    pub subject: String,
    /// Prefix of the inboxes PubAcks come back to; `{pop}` is replaced. Default
    /// `_INBOX.{pop}`: the origin can then let each PoP read only its own replies
    /// (`subscribe: _INBOX.<pop>.>`), not every PoP's.
    #[serde(default = "NatsSettings::default_inbox_prefix")]
    pub inbox_prefix: String,
    /// A NATS credentials file (JWT and seed).
    pub credentials: Option<PathBuf>,
    /// A NATS token.
    pub token: Option<Secret<String>>,
    /// An nkey seed.
    pub nkey: Option<Secret<String>>,
    /// TLS to the servers; `None`: plain unless the URL says `tls://`.
    pub tls: Option<ClientTls>,
    /// Publish to PubAck, and the stream look-up, per attempt. Default 5s.
    #[serde(default = "default_publish_timeout", with = "humantime_serde")]
    pub publish_timeout: Duration,
    /// Longest pause between reconnect attempts (exponential from 100ms, full jitter).
    /// Default 2s: async-nats' own grows to 4s, which a recovered origin would wait.
    #[serde(
        default = "NatsSettings::default_reconnect_max",
        with = "humantime_serde"
    )]
    pub reconnect_max: Duration,
}

/// TLS client settings for the origin.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientTls {
    /// The CA that signed the origin's certificate; `None`: the system roots.
    pub ca: Option<PathBuf>,
    /// A client certificate, for mutual TLS.
    pub client_cert: Option<PathBuf>,
    /// Its key.
    pub client_key: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackhaul {
    sink: SinkKind,
    nats: Option<NatsSettings>,
    http: Option<HttpSinkSettings>,
    /// Deliveries outstanding at once. Default [`DEFAULT_MAX_IN_FLIGHT`].
    max_in_flight: Option<usize>,
    #[serde(default)]
    retry: RawRetry,
    #[serde(default)]
    breaker: RawBreaker,
    /// Deliveries per second at most; 0 (the default): no limit.
    #[serde(default)]
    max_rate: u32,
}

#[derive(Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum SinkKind {
    Nats,
    Http,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRetry {
    /// First pause after a failed delivery (exponential, full jitter). Default 200ms.
    #[serde(with = "humantime_serde")]
    base: Duration,
    /// Longest pause. Default 30s.
    #[serde(with = "humantime_serde")]
    max: Duration,
}

impl Default for RawRetry {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(200),
            max: Duration::from_secs(30),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawBreaker {
    /// Consecutive failures that open the breaker. Default 5.
    failures: u32,
    /// How long it stays open before one trial delivery. Default 5s.
    #[serde(with = "humantime_serde")]
    open_for: Duration,
}

impl Default for RawBreaker {
    fn default() -> Self {
        Self {
            failures: 5,
            open_for: Duration::from_secs(5),
        }
    }
}

impl RawBackhaul {
    /// `None` when the chosen sink has no section (an error was added).
    pub(super) fn validate(self, errors: &mut FieldErrors) -> Option<BackhaulSettings> {
        let max_in_flight = self.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT);
        if max_in_flight == 0 {
            errors.add("backhaul.max_in_flight", "must be positive");
        }
        if self.max_rate > MAX_RATE_LIMIT {
            errors.add(
                "backhaul.max_rate",
                format!("at most {MAX_RATE_LIMIT} deliveries per second (0: no limit)"),
            );
        }
        if self.retry.base.is_zero() || self.retry.max < self.retry.base {
            errors.add("backhaul.retry", "needs 0 < base <= max");
        }
        let sink = match (self.sink, self.nats, self.http) {
            (SinkKind::Http, _, Some(http)) => SinkSettings::Http(http.validate(errors)),
            (SinkKind::Nats, Some(nats), _) => SinkSettings::Nats(nats.validate(errors)),
            (SinkKind::Http, _, None) => {
                errors.add("backhaul.http", "required when backhaul.sink is http");
                return None;
            }
            (SinkKind::Nats, None, _) => {
                errors.add("backhaul.nats", "required when backhaul.sink is nats");
                return None;
            }
        };
        Some(BackhaulSettings {
            sink,
            max_in_flight,
            retry_base: self.retry.base,
            retry_max: self.retry.max,
            breaker_failures: self.breaker.failures,
            breaker_open_for: self.breaker.open_for,
            max_rate: (self.max_rate > 0).then_some(self.max_rate),
        })
    }
}

impl HttpSinkSettings {
    fn default_connections() -> usize {
        4
    }

    fn validate(self, errors: &mut FieldErrors) -> Self {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            errors.add("backhaul.http.url", "must be an http:// or https:// URL");
        }
        if self.connections == 0 {
            errors.add("backhaul.http.connections", "must be at least 1");
        }
        if self.url.starts_with("https://")
            && self.tls.as_ref().and_then(|t| t.ca.as_ref()).is_none()
        {
            errors.add("backhaul.http.tls.ca", "required for an https:// origin");
        }
        self
    }
}

impl NatsSettings {
    fn default_subject() -> String {
        "webhooks.{pop}.{route}".into()
    }

    fn default_inbox_prefix() -> String {
        "_INBOX.{pop}".into()
    }

    fn default_reconnect_max() -> Duration {
        Duration::from_secs(2)
    }

    fn default_replicas() -> usize {
        1
    }

    fn default_duplicate_window() -> Duration {
        Duration::from_secs(3600)
    }

    fn validate(self, errors: &mut FieldErrors) -> Self {
        if self.servers.is_empty() {
            errors.add("backhaul.nats.servers", "must list at least one server");
        }
        if self.stream.is_empty() {
            errors.add("backhaul.nats.stream", "must not be empty");
        }
        if !is_literal_subject(&self.inbox_prefix) {
            errors.add(
                "backhaul.nats.inbox_prefix",
                "must be a subject without wildcards, spaces or empty tokens",
            );
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            errors.add(
                "backhaul.nats.replicas",
                format!("must be 1 to {MAX_REPLICAS} (JetStream's limit)"),
            );
        }
        if self.duplicate_window < Duration::from_secs(1) {
            errors.add(
                "backhaul.nats.duplicate_window",
                "must be at least 1s (resends are dropped only inside it)",
            );
        }
        if self.reconnect_max < Duration::from_millis(100) {
            errors.add(
                "backhaul.nats.reconnect_max",
                "must be at least 100ms (it caps a backoff that starts there)",
            );
        }
        let auth = [
            self.credentials.is_some(),
            self.token.is_some(),
            self.nkey.is_some(),
        ];
        if auth.iter().filter(|a| **a).count() > 1 {
            errors.add(
                "backhaul.nats",
                "set at most one of credentials, token, nkey",
            );
        }
        self
    }
}

fn default_publish_timeout() -> Duration {
    Duration::from_secs(5)
}

/// A NATS subject that names one subject, not a pattern.
fn is_literal_subject(subject: &str) -> bool {
    subject.split('.').all(|token| {
        !token.is_empty()
            && !token
                .chars()
                .any(|c| c == '*' || c == '>' || c.is_whitespace())
    })
}

const DEFAULT_MAX_IN_FLIGHT: usize = 256;
/// `backhaul.max_rate` above this is a typo, not a pace.
const MAX_RATE_LIMIT: u32 = 1_000_000;
const MAX_REPLICAS: usize = 5;
