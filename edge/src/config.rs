//! The edge's YAML configuration, parsed once into typed [`Settings`]. Unknown keys are
//! errors, and every error names the file and the field (`routes[2].secrets: …`).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{HeaderName, StatusCode};
use serde::Deserialize;

use crate::admission::AdmissionSettings;
use crate::admission::limiter::{self, Priority};
use crate::admission::rate_limit::Rate;
use crate::verify::{self, Digest, Encoding, HmacSpec, Provider, Scheme, Verifier};

/// Validated settings, ready to use.
#[derive(Clone, Debug)]
pub struct Settings {
    pub pop: String,
    pub listen: Vec<SocketAddr>,
    pub admin_listen: SocketAddr,
    pub listener: ListenerSettings,
    pub tls: TlsSettings,
    pub spool: SpoolSettings,
    pub http: HttpSettings,
    pub connections: crate::conn_limits::Caps,
    pub admission: AdmissionSettings,
    pub drain_grace: Duration,
    pub shutdown_timeout: Duration,
    pub routes: Vec<Route>,
    /// Where spooled events go; `None` keeps them in the spool only.
    pub backhaul: Option<BackhaulSettings>,
}

#[derive(Clone, Debug)]
pub struct BackhaulSettings {
    pub sink: SinkSettings,
    pub max_in_flight: usize,
    pub retry_base: Duration,
    pub retry_max: Duration,
    pub breaker_failures: u32,
    pub breaker_open_for: Duration,
}

#[derive(Clone, Debug)]
pub enum SinkSettings {
    Nats(NatsSettings),
    Http(HttpSinkSettings),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSinkSettings {
    pub url: String,
    /// Warm HTTP/2 connections kept open to the origin.
    #[serde(default = "default_connections")]
    pub connections: usize,
    pub tls: Option<ClientTls>,
    #[serde(default = "default_publish_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSettings {
    pub servers: Vec<String>,
    pub stream: String,
    /// Create the stream (subjects `webhooks.>`) when it does not exist.
    #[serde(default)]
    pub create: bool,
    #[serde(default = "default_subject")]
    pub subject: String,
    pub credentials: Option<PathBuf>,
    pub token: Option<String>,
    pub nkey: Option<String>,
    pub tls: Option<ClientTls>,
    #[serde(default = "default_publish_timeout", with = "humantime_serde")]
    pub publish_timeout: Duration,
    /// Longest pause between reconnect attempts (exponential from 100ms, full jitter).
    #[serde(default = "default_reconnect_max", with = "humantime_serde")]
    pub reconnect_max: Duration,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientTls {
    pub ca: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct ListenerSettings {
    pub backlog: i32,
    pub tcp_fastopen_queue: u32,
}

#[derive(Clone, Debug)]
pub struct TlsSettings {
    pub identity: Identity,
    pub sni: Vec<SniCert>,
    pub min_version: TlsVersion,
    pub handshake_timeout: Duration,
    pub session_tickets: SessionTickets,
    /// TLS 1.3 0-RTT: at most this many early bytes per connection; `None` = off.
    pub early_data: Option<u32>,
    /// Sessions kept for stateful resumption (each ticket is single-use).
    pub session_cache: usize,
}

/// How sessions resume.
#[derive(Clone, Debug, PartialEq)]
pub enum SessionTickets {
    /// Sessions kept in this process (resumption only here; the mode 0-RTT needs).
    Stateful,
    /// Tickets encrypted with keys every PoP holds: resumption at any PoP, never 0-RTT.
    Shared {
        key_file: PathBuf,
        lifetime: Duration,
    },
}

#[derive(Clone, Debug)]
pub enum Identity {
    Files {
        cert: PathBuf,
        key: PathBuf,
    },
    /// Generated at start, for a dev box only.
    SelfSigned,
}

#[derive(Clone, Debug)]
pub struct SniCert {
    pub server_name: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum TlsVersion {
    #[serde(rename = "1.2")]
    Tls12,
    #[serde(rename = "1.3")]
    Tls13,
}

#[derive(Clone, Debug)]
pub struct SpoolSettings {
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub segment_bytes: u64,
    pub max_batch_delay: Duration,
    /// Fraction of `max_bytes` above which `/readyz` fails.
    pub high_water: f64,
    /// Testing only: a pause after each fsync, to rehearse a slow disk.
    pub sync_delay: Duration,
}

#[derive(Clone, Debug)]
pub struct HttpSettings {
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub header_timeout: Duration,
    pub h2_max_concurrent_streams: u32,
    /// HTTP/2 PING every `interval` on a quiet connection; no answer within `timeout` closes it.
    pub h2_keepalive_interval: Duration,
    pub h2_keepalive_timeout: Duration,
    /// Whole request, from dispatch to answer (body, verification, spool); past it, 503.
    pub request_timeout: Duration,
    /// Slow-body rule: minimum average rate after a grace period, and a body deadline.
    pub body_rate: crate::body_rate::BodyRate,
    /// Write stall, keep-alive idle and connection lifetime limits.
    pub deadlines: crate::deadline_io::Deadlines,
}

/// One webhook endpoint.
#[derive(Clone, Debug)]
pub struct Route {
    /// Label for metrics, logs and spool records.
    pub name: String,
    pub path: String,
    pub provider: Provider,
    pub verifier: Verifier,
    pub id_header: Option<HeaderName>,
    pub max_body: u64,
    pub ack_status: StatusCode,
    pub dedupe_window: usize,
    pub early_data: EarlyDataPolicy,
    /// Who is shed first under overload (by default from how the provider retries).
    pub priority: Priority,
    /// Per-source request rate (429 beyond it); `None`: no limit.
    pub rate_limit: Option<Rate>,
}

/// What a route does with a request that arrived as replayable 0-RTT early data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EarlyDataPolicy {
    /// 425 Too Early: the sender retries after the handshake.
    #[default]
    Reject,
    /// Stored (marked early); the event id de-duplicates a replay.
    Accept,
}

pub use edge_kit::config_file::ConfigErrors;

pub fn load(path: &Path) -> Result<Settings, ConfigErrors> {
    edge_kit::config_file::load(path, parse)
}

/// Parses and validates YAML text; errors are `(field path, message)` pairs.
pub fn parse(text: &str) -> Result<Settings, Vec<(String, String)>> {
    let deserializer = serde_yaml::Deserializer::from_str(text);
    let raw: RawConfig = serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." {
            "(top level)".to_owned()
        } else {
            field
        };
        vec![(field, e.into_inner().to_string())]
    })?;
    raw.validate()
}

/// The settings of `new` (a config file as YAML) that differ from `running` and change
/// only at a restart: sockets, the spool, the backhaul, connection caps, session
/// resumption and the per-connection HTTP limits. Routes, secrets, certificates, TLS
/// versions, 0-RTT, body-rate and request limits change live.
pub fn restart_only_changes(
    running: &serde_yaml::Value,
    new: &serde_yaml::Value,
) -> Vec<&'static str> {
    let at = |yaml: &serde_yaml::Value, path: &str| {
        path.split('.')
            .try_fold(yaml, |value, key| value.get(key))
            .cloned()
    };
    RESTART_ONLY
        .iter()
        .copied()
        .filter(|path| at(running, path) != at(new, path))
        .collect()
}

const RESTART_ONLY: &[&str] = &[
    "pop",
    "listen",
    "admin_listen",
    "listener",
    "spool",
    "backhaul",
    "connections",
    "drain_grace",
    "shutdown_timeout",
    "tls.session_tickets",
    "tls.session_cache",
    "http.max_header_bytes",
    "http.max_headers",
    "http.header_timeout",
    "http.h2_max_concurrent_streams",
    "http.h2_keepalive_interval",
    "http.h2_keepalive_timeout",
    "http.write_stall_timeout",
    "http.idle_timeout",
    "http.max_connection_lifetime",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    pop: String,
    listen: Vec<SocketAddr>,
    admin_listen: SocketAddr,
    #[serde(default)]
    listener: RawListener,
    tls: RawTls,
    spool: RawSpool,
    #[serde(default)]
    http: RawHttp,
    #[serde(default)]
    connections: RawConnections,
    #[serde(default)]
    admission: RawAdmission,
    #[serde(default = "default_drain_grace", with = "humantime_serde")]
    drain_grace: Duration,
    #[serde(default = "default_shutdown_timeout", with = "humantime_serde")]
    shutdown_timeout: Duration,
    routes: Vec<RawRoute>,
    backhaul: Option<RawBackhaul>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackhaul {
    sink: SinkKind,
    nats: Option<NatsSettings>,
    http: Option<HttpSinkSettings>,
    #[serde(default = "default_max_in_flight")]
    max_in_flight: usize,
    #[serde(default)]
    retry: RawRetry,
    #[serde(default)]
    breaker: RawBreaker,
}

#[derive(Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum SinkKind {
    Nats,
    Http,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    #[serde(default = "default_retry_base", with = "humantime_serde")]
    base: Duration,
    #[serde(default = "default_retry_max", with = "humantime_serde")]
    max: Duration,
}

impl Default for RawRetry {
    fn default() -> Self {
        Self {
            base: default_retry_base(),
            max: default_retry_max(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBreaker {
    #[serde(default = "default_breaker_failures")]
    failures: u32,
    #[serde(default = "default_breaker_open_for", with = "humantime_serde")]
    open_for: Duration,
}

impl Default for RawBreaker {
    fn default() -> Self {
        Self {
            failures: default_breaker_failures(),
            open_for: default_breaker_open_for(),
        }
    }
}

/// Connection caps, enforced before the TLS handshake.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnections {
    #[serde(default = "default_max_connections")]
    max: usize,
    #[serde(default = "default_per_source")]
    per_source: usize,
    /// CIDRs where many senders share addresses (provider egress ranges).
    #[serde(default)]
    trusted: Vec<ipnet::IpNet>,
    #[serde(default = "default_per_trusted_source")]
    per_trusted_source: usize,
}

impl Default for RawConnections {
    fn default() -> Self {
        Self {
            max: default_max_connections(),
            per_source: default_per_source(),
            trusted: Vec::new(),
            per_trusted_source: default_per_trusted_source(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListener {
    #[serde(default = "default_backlog")]
    backlog: i32,
    #[serde(default = "default_tfo_queue")]
    tcp_fastopen_queue: u32,
}

impl Default for RawListener {
    fn default() -> Self {
        Self {
            backlog: default_backlog(),
            tcp_fastopen_queue: default_tfo_queue(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    #[serde(default)]
    self_signed: bool,
    #[serde(default = "default_min_version")]
    min_version: TlsVersion,
    #[serde(default)]
    sni: Vec<RawSni>,
    #[serde(default = "default_handshake_timeout", with = "humantime_serde")]
    handshake_timeout: Duration,
    session_tickets: Option<RawTickets>,
    #[serde(default)]
    early_data: RawEarlyData,
    #[serde(default = "default_session_cache")]
    session_cache: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEarlyData {
    #[serde(default)]
    enabled: bool,
    #[serde(default = "default_early_data_bytes")]
    max_bytes: bytesize::ByteSize,
}

impl Default for RawEarlyData {
    fn default() -> Self {
        Self {
            enabled: false,
            max_bytes: default_early_data_bytes(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTickets {
    mode: TicketMode,
    key_file: Option<PathBuf>,
    #[serde(default = "default_ticket_lifetime", with = "humantime_serde")]
    lifetime: Duration,
}

#[derive(Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum TicketMode {
    Stateful,
    Shared,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSni {
    server_name: String,
    cert: PathBuf,
    key: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpool {
    dir: PathBuf,
    #[serde(default = "default_max_bytes")]
    max_bytes: bytesize::ByteSize,
    #[serde(default = "default_segment_bytes")]
    segment_bytes: bytesize::ByteSize,
    #[serde(default = "default_batch_delay", with = "humantime_serde")]
    max_batch_delay: Duration,
    #[serde(default = "default_high_water")]
    high_water: f64,
    #[serde(default, with = "humantime_serde")]
    sync_delay: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    #[serde(default = "default_max_header_bytes")]
    max_header_bytes: bytesize::ByteSize,
    #[serde(default = "default_max_headers")]
    max_headers: usize,
    #[serde(default = "default_header_timeout", with = "humantime_serde")]
    header_timeout: Duration,
    #[serde(default = "default_h2_streams")]
    h2_max_concurrent_streams: u32,
    #[serde(default = "default_h2_keepalive_interval", with = "humantime_serde")]
    h2_keepalive_interval: Duration,
    #[serde(default = "default_h2_keepalive_timeout", with = "humantime_serde")]
    h2_keepalive_timeout: Duration,
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    request_timeout: Duration,
    #[serde(default = "default_min_body_rate")]
    min_body_rate: bytesize::ByteSize,
    #[serde(default = "default_body_rate_grace", with = "humantime_serde")]
    body_rate_grace: Duration,
    #[serde(default = "default_body_timeout", with = "humantime_serde")]
    body_timeout: Duration,
    #[serde(default = "default_write_stall", with = "humantime_serde")]
    write_stall_timeout: Duration,
    #[serde(default = "default_idle", with = "humantime_serde")]
    idle_timeout: Duration,
    #[serde(default = "default_lifetime", with = "humantime_serde")]
    max_connection_lifetime: Duration,
}

impl Default for RawHttp {
    fn default() -> Self {
        Self {
            max_header_bytes: default_max_header_bytes(),
            max_headers: default_max_headers(),
            header_timeout: default_header_timeout(),
            h2_max_concurrent_streams: default_h2_streams(),
            h2_keepalive_interval: default_h2_keepalive_interval(),
            h2_keepalive_timeout: default_h2_keepalive_timeout(),
            request_timeout: default_request_timeout(),
            min_body_rate: default_min_body_rate(),
            body_rate_grace: default_body_rate_grace(),
            body_timeout: default_body_timeout(),
            write_stall_timeout: default_write_stall(),
            idle_timeout: default_idle(),
            max_connection_lifetime: default_lifetime(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    path: String,
    name: Option<String>,
    provider: Provider,
    secrets: Vec<String>,
    #[serde(default = "default_max_body")]
    max_body: bytesize::ByteSize,
    ack_status: Option<u16>,
    #[serde(default = "default_tolerance", with = "humantime_serde")]
    tolerance: Duration,
    hmac: Option<RawHmac>,
    #[serde(default = "default_dedupe_window")]
    dedupe_window: usize,
    #[serde(default)]
    early_data: EarlyDataPolicy,
    priority: Option<Priority>,
    rate_limit: Option<RawRate>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRate {
    per_second: f64,
    burst: f64,
}

/// Admission control; every field documented with its default.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawAdmission {
    /// false: admit everything (for comparison runs).
    enabled: bool,
    /// Concurrency limit to start from; it adapts between min and max.
    initial_limit: u32,
    min_limit: u32,
    max_limit: u32,
    /// CoDel: a minimum wait for a slot above this, for a whole interval, is overload.
    #[serde(with = "humantime_serde")]
    target_delay: Duration,
    #[serde(with = "humantime_serde")]
    interval: Duration,
    /// Longest wait for a slot before 503.
    #[serde(with = "humantime_serde")]
    max_wait: Duration,
    max_queue: usize,
    /// Fraction of spool.max_bytes above which low-priority routes are shed.
    spool_shed_low_above: f64,
    /// Fraction above which only high-priority routes are admitted.
    spool_high_only_above: f64,
}

impl Default for RawAdmission {
    fn default() -> Self {
        let limiter = limiter::Settings::default();
        Self {
            enabled: true,
            initial_limit: limiter.initial_limit as u32,
            min_limit: limiter.min_limit as u32,
            max_limit: limiter.max_limit as u32,
            target_delay: limiter.target_delay,
            interval: limiter.interval,
            max_wait: limiter.max_wait,
            max_queue: limiter.max_queue,
            spool_shed_low_above: 0.6,
            spool_high_only_above: 0.8,
        }
    }
}

impl RawAdmission {
    fn validate(
        self,
        trusted: &[ipnet::IpNet],
        err: &mut impl FnMut(String, &str),
    ) -> AdmissionSettings {
        let at = |field: &str| format!("admission.{field}");
        if !(1 <= self.min_limit
            && self.min_limit <= self.initial_limit
            && self.initial_limit <= self.max_limit)
        {
            err(
                at("initial_limit"),
                "needs 1 <= min_limit <= initial_limit <= max_limit",
            );
        }
        if self.target_delay.is_zero() || self.interval < self.target_delay {
            err(at("interval"), "needs 0 < target_delay <= interval");
        }
        if self.max_wait.is_zero() {
            err(at("max_wait"), "must be positive");
        }
        if !(0.0 < self.spool_shed_low_above
            && self.spool_shed_low_above <= self.spool_high_only_above
            && self.spool_high_only_above <= 1.0)
        {
            err(
                at("spool_shed_low_above"),
                "needs 0 < spool_shed_low_above <= spool_high_only_above <= 1",
            );
        }
        AdmissionSettings {
            enabled: self.enabled,
            limiter: limiter::Settings {
                initial_limit: f64::from(self.initial_limit),
                min_limit: f64::from(self.min_limit),
                max_limit: f64::from(self.max_limit),
                target_delay: self.target_delay,
                interval: self.interval,
                max_wait: self.max_wait,
                max_queue: self.max_queue,
                ..limiter::Settings::default()
            },
            spool_shed_low_above: self.spool_shed_low_above,
            spool_high_only_above: self.spool_high_only_above,
            trusted: trusted.to_vec(),
        }
    }
}

/// Priority by how a provider retries: GitHub does not redeliver, so its deliveries are
/// shed last; Stripe, Shopify, Slack and Standard Webhooks senders retry for hours.
pub fn default_priority(provider: Provider) -> Priority {
    match provider {
        Provider::Github => Priority::High,
        _ => Priority::Default,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHmac {
    header: String,
    #[serde(default = "default_digest")]
    algorithm: Digest,
    #[serde(default = "default_encoding")]
    encoding: Encoding,
    #[serde(default)]
    prefix: String,
    id_header: Option<String>,
}

impl RawConfig {
    fn validate(self) -> Result<Settings, Vec<(String, String)>> {
        let mut errors = Vec::new();
        let mut err = |field: String, message: &str| errors.push((field, message.to_owned()));

        let pop_ok = !self.pop.is_empty()
            && self.pop.len() <= 64
            && self
                .pop
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !pop_ok {
            err("pop".into(), "must be 1-64 characters of [A-Za-z0-9-_.]");
        }
        if self.listen.is_empty() {
            err("listen".into(), "must list at least one address");
        }
        if self.listener.backlog <= 0 {
            err("listener.backlog".into(), "must be positive");
        }

        let identity = match (&self.tls.cert, &self.tls.key, self.tls.self_signed) {
            (Some(cert), Some(key), false) => Some(Identity::Files {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None, true) => Some(Identity::SelfSigned),
            (_, _, true) => {
                err(
                    "tls.self_signed".into(),
                    "cannot be combined with tls.cert/tls.key",
                );
                None
            }
            (None, _, false) => {
                err(
                    "tls.cert".into(),
                    "required (or set tls.self_signed: true on a dev box)",
                );
                None
            }
            (Some(_), None, false) => {
                err("tls.key".into(), "required with tls.cert");
                None
            }
        };
        let session_tickets = match self.tls.session_tickets {
            None => SessionTickets::Stateful,
            Some(RawTickets {
                mode: TicketMode::Stateful,
                ..
            }) => SessionTickets::Stateful,
            Some(RawTickets {
                mode: TicketMode::Shared,
                key_file: Some(key_file),
                lifetime,
            }) => {
                if lifetime.is_zero() || lifetime > Duration::from_secs(7 * 24 * 3600) {
                    err(
                        "tls.session_tickets.lifetime".into(),
                        "must be between 1s and 7 days (RFC 8446)",
                    );
                }
                SessionTickets::Shared { key_file, lifetime }
            }
            Some(RawTickets {
                mode: TicketMode::Shared,
                key_file: None,
                ..
            }) => {
                err(
                    "tls.session_tickets.key_file".into(),
                    "required in shared mode (the same file on every PoP)",
                );
                SessionTickets::Stateful
            }
        };
        let early_data = self.tls.early_data.enabled.then(|| {
            if matches!(session_tickets, SessionTickets::Shared { .. }) {
                err(
                    "tls.early_data.enabled".into(),
                    "cannot be combined with tls.session_tickets.mode: shared. 0-RTT is only \
                     safe with single-use tickets kept in this process (stateful); shared \
                     tickets resume at any PoP but could be replayed there. Choose \
                     resumption anywhere (shared, no 0-RTT) or 0-RTT on the same PoP (stateful)",
                );
            }
            let bytes = self.tls.early_data.max_bytes.as_u64();
            if !(1..=MAX_EARLY_DATA).contains(&bytes) {
                err(
                    "tls.early_data.max_bytes".into(),
                    "must be between 1B and 1MiB",
                );
            }
            bytes.clamp(1, MAX_EARLY_DATA) as u32
        });
        if self.tls.session_cache == 0 {
            err("tls.session_cache".into(), "must be positive");
        }
        if self.tls.handshake_timeout.is_zero() {
            err("tls.handshake_timeout".into(), "must be greater than zero");
        }

        let spool = &self.spool;
        if spool.segment_bytes.as_u64() < 1 << 20 {
            err("spool.segment_bytes".into(), "must be at least 1MiB");
        }
        if spool.max_bytes.as_u64() < 2 * spool.segment_bytes.as_u64() {
            err(
                "spool.max_bytes".into(),
                "must be at least twice spool.segment_bytes",
            );
        }
        if !(0.1..=1.0).contains(&spool.high_water) {
            err(
                "spool.high_water".into(),
                "must be a fraction between 0.1 and 1.0",
            );
        }
        if self.http.max_header_bytes.as_u64() < 1024 {
            err("http.max_header_bytes".into(), "must be at least 1KiB");
        }
        for (field, value) in [
            ("http.write_stall_timeout", self.http.write_stall_timeout),
            ("http.idle_timeout", self.http.idle_timeout),
            (
                "http.max_connection_lifetime",
                self.http.max_connection_lifetime,
            ),
            (
                "http.h2_keepalive_interval",
                self.http.h2_keepalive_interval,
            ),
            ("http.h2_keepalive_timeout", self.http.h2_keepalive_timeout),
        ] {
            if value.is_zero() {
                err(field.into(), "must be greater than zero");
            }
        }
        if self.http.body_timeout.is_zero() {
            err("http.body_timeout".into(), "must be greater than zero");
        }
        if self.http.request_timeout <= self.http.body_timeout {
            err(
                "http.request_timeout".into(),
                "must be longer than http.body_timeout (a slow body is answered 408 first)",
            );
        }
        if self.http.max_headers == 0 {
            err("http.max_headers".into(), "must be positive");
        }

        if self.connections.max == 0 || self.connections.per_source == 0 {
            err("connections".into(), "max and per_source must be positive");
        }
        if self.connections.per_trusted_source < self.connections.per_source {
            err(
                "connections.per_trusted_source".into(),
                "must be at least connections.per_source",
            );
        }
        if self.routes.is_empty() {
            err("routes".into(), "must list at least one route");
        }
        let mut paths = HashSet::new();
        let mut names = HashSet::new();
        let mut routes = Vec::new();
        for (i, raw) in self.routes.into_iter().enumerate() {
            let at = |field: &str| format!("routes[{i}].{field}");
            if !raw.path.starts_with('/') || raw.path.contains('?') {
                err(at("path"), "must start with / and have no query");
            }
            if !paths.insert(raw.path.clone()) {
                err(at("path"), "duplicates an earlier route's path");
            }
            let name = raw
                .name
                .clone()
                .unwrap_or_else(|| raw.path.trim_start_matches('/').replace('/', "_"));
            if !names.insert(name.clone()) {
                err(at("name"), "duplicates an earlier route's name");
            }
            if raw.secrets.is_empty() {
                err(at("secrets"), "must not be empty");
            }
            let mut keys = Vec::new();
            for (j, secret) in raw.secrets.iter().enumerate() {
                if secret.is_empty() {
                    err(format!("routes[{i}].secrets[{j}]"), "must not be empty");
                } else if raw.provider == Provider::Standard {
                    match verify::decode_standard_secret(secret) {
                        Some(key) => keys.push(key),
                        None => err(
                            format!("routes[{i}].secrets[{j}]"),
                            "must be whsec_ followed by base64",
                        ),
                    }
                } else {
                    keys.push(secret.as_bytes().to_vec());
                }
            }
            let max_body = raw.max_body.as_u64();
            if max_body == 0 {
                err(at("max_body"), "must be greater than zero");
            } else if max_body + MAX_RECORD_OVERHEAD > spool.segment_bytes.as_u64() {
                err(
                    at("max_body"),
                    "must leave room for the record in one spool.segment_bytes",
                );
            }
            let default_ack = if raw.provider == Provider::Shopify {
                200
            } else {
                202
            };
            let ack_status = match StatusCode::from_u16(raw.ack_status.unwrap_or(default_ack)) {
                Ok(status) if status.is_success() => status,
                _ => {
                    err(at("ack_status"), "must be a 2xx status");
                    StatusCode::ACCEPTED
                }
            };
            if raw.tolerance.is_zero() {
                err(at("tolerance"), "must be greater than zero");
            }
            if raw.dedupe_window == 0 {
                err(at("dedupe_window"), "must be positive");
            }
            let (scheme, id_header) = match (raw.provider, raw.hmac) {
                (Provider::Hmac, Some(hmac)) => {
                    let header =
                        HeaderName::from_bytes(hmac.header.as_bytes()).unwrap_or_else(|_| {
                            err(at("hmac.header"), "is not a valid header name");
                            HeaderName::from_static("invalid")
                        });
                    let id_header = hmac.id_header.and_then(|name| {
                        HeaderName::from_bytes(name.as_bytes())
                            .map_err(|_| err(at("hmac.id_header"), "is not a valid header name"))
                            .ok()
                    });
                    let spec = HmacSpec {
                        header,
                        digest: hmac.algorithm,
                        encoding: hmac.encoding,
                        prefix: hmac.prefix,
                    };
                    (Scheme::Hmac(spec), id_header)
                }
                (Provider::Hmac, None) => {
                    err(
                        at("hmac"),
                        "required when provider is hmac (header, algorithm, encoding, prefix)",
                    );
                    continue;
                }
                (_, Some(_)) => {
                    err(at("hmac"), "only allowed when provider is hmac");
                    continue;
                }
                (Provider::Github, None) => (Scheme::Github, None),
                (Provider::Shopify, None) => (Scheme::Shopify, None),
                (Provider::Stripe, None) => (
                    Scheme::Stripe {
                        tolerance: raw.tolerance,
                    },
                    None,
                ),
                (Provider::Slack, None) => (
                    Scheme::Slack {
                        tolerance: raw.tolerance,
                    },
                    None,
                ),
                (Provider::Standard, None) => (
                    Scheme::Standard {
                        tolerance: raw.tolerance,
                    },
                    None,
                ),
            };
            let rate_limit = raw.rate_limit.map(|rate| {
                if !(rate.per_second > 0.0 && rate.burst >= 1.0) {
                    err(at("rate_limit"), "needs per_second > 0 and burst >= 1");
                }
                Rate {
                    per_second: rate.per_second,
                    burst: rate.burst,
                }
            });
            routes.push(Route {
                name,
                path: raw.path,
                provider: raw.provider,
                verifier: Verifier::new(scheme, keys),
                id_header,
                max_body,
                ack_status,
                dedupe_window: raw.dedupe_window,
                early_data: raw.early_data,
                priority: raw.priority.unwrap_or(default_priority(raw.provider)),
                rate_limit,
            });
        }

        let admission = self.admission.validate(&self.connections.trusted, &mut err);
        let backhaul = self.backhaul.and_then(|raw| {
            if raw.max_in_flight == 0 {
                err("backhaul.max_in_flight".into(), "must be positive");
            }
            if raw.retry.base.is_zero() || raw.retry.max < raw.retry.base {
                err("backhaul.retry".into(), "needs 0 < base <= max");
            }
            let sink = match (raw.sink, raw.nats, raw.http) {
                (SinkKind::Http, _, Some(http)) => {
                    if !(http.url.starts_with("http://") || http.url.starts_with("https://")) {
                        err(
                            "backhaul.http.url".into(),
                            "must be an http:// or https:// URL",
                        );
                    }
                    if http.connections == 0 {
                        err("backhaul.http.connections".into(), "must be at least 1");
                    }
                    if http.url.starts_with("https://")
                        && http.tls.as_ref().and_then(|t| t.ca.as_ref()).is_none()
                    {
                        err(
                            "backhaul.http.tls.ca".into(),
                            "required for an https:// origin",
                        );
                    }
                    SinkSettings::Http(http)
                }
                (SinkKind::Http, _, None) => {
                    err(
                        "backhaul.http".into(),
                        "required when backhaul.sink is http",
                    );
                    return None;
                }
                (SinkKind::Nats, Some(nats), _) => {
                    if nats.servers.is_empty() {
                        err(
                            "backhaul.nats.servers".into(),
                            "must list at least one server",
                        );
                    }
                    if nats.stream.is_empty() {
                        err("backhaul.nats.stream".into(), "must not be empty");
                    }
                    if nats.reconnect_max < Duration::from_millis(100) {
                        err(
                            "backhaul.nats.reconnect_max".into(),
                            "must be at least 100ms (it caps a backoff that starts there)",
                        );
                    }
                    let auth = [
                        nats.credentials.is_some(),
                        nats.token.is_some(),
                        nats.nkey.is_some(),
                    ];
                    if auth.iter().filter(|a| **a).count() > 1 {
                        err(
                            "backhaul.nats".into(),
                            "set at most one of credentials, token, nkey",
                        );
                    }
                    SinkSettings::Nats(nats)
                }
                (SinkKind::Nats, None, _) => {
                    err(
                        "backhaul.nats".into(),
                        "required when backhaul.sink is nats",
                    );
                    return None;
                }
            };
            Some(BackhaulSettings {
                sink,
                max_in_flight: raw.max_in_flight,
                retry_base: raw.retry.base,
                retry_max: raw.retry.max,
                breaker_failures: raw.breaker.failures,
                breaker_open_for: raw.breaker.open_for,
            })
        });

        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Settings {
            pop: self.pop,
            listen: self.listen,
            admin_listen: self.admin_listen,
            listener: ListenerSettings {
                backlog: self.listener.backlog,
                tcp_fastopen_queue: self.listener.tcp_fastopen_queue,
            },
            tls: TlsSettings {
                identity: identity.expect("checked above"),
                sni: self
                    .tls
                    .sni
                    .into_iter()
                    .map(|s| SniCert {
                        server_name: s.server_name.to_ascii_lowercase(),
                        cert: s.cert,
                        key: s.key,
                    })
                    .collect(),
                min_version: self.tls.min_version,
                handshake_timeout: self.tls.handshake_timeout,
                session_tickets,
                early_data,
                session_cache: self.tls.session_cache,
            },
            spool: SpoolSettings {
                dir: self.spool.dir,
                max_bytes: self.spool.max_bytes.as_u64(),
                segment_bytes: self.spool.segment_bytes.as_u64(),
                max_batch_delay: self.spool.max_batch_delay,
                high_water: self.spool.high_water,
                sync_delay: self.spool.sync_delay,
            },
            http: HttpSettings {
                max_header_bytes: self.http.max_header_bytes.as_u64() as usize,
                max_headers: self.http.max_headers,
                header_timeout: self.http.header_timeout,
                h2_max_concurrent_streams: self.http.h2_max_concurrent_streams,
                h2_keepalive_interval: self.http.h2_keepalive_interval,
                h2_keepalive_timeout: self.http.h2_keepalive_timeout,
                request_timeout: self.http.request_timeout,
                body_rate: crate::body_rate::BodyRate {
                    min_bytes_per_second: self.http.min_body_rate.as_u64(),
                    grace: self.http.body_rate_grace,
                    deadline: self.http.body_timeout,
                },
                deadlines: crate::deadline_io::Deadlines {
                    write_stall: self.http.write_stall_timeout,
                    idle: self.http.idle_timeout,
                    lifetime: self.http.max_connection_lifetime,
                },
            },
            admission,
            connections: crate::conn_limits::Caps {
                max_total: self.connections.max,
                max_per_source: self.connections.per_source,
                trusted: self.connections.trusted,
                max_per_trusted_source: self.connections.per_trusted_source,
            },
            drain_grace: self.drain_grace,
            shutdown_timeout: self.shutdown_timeout,
            routes,
            backhaul,
        })
    }
}

/// Room a spool record needs beyond its body (ids, headers, framing).
const MAX_RECORD_OVERHEAD: u64 = 64 * 1024;
/// Early data beyond a webhook or two only widens what a replay could carry.
const MAX_EARLY_DATA: u64 = 1 << 20;

fn default_max_connections() -> usize {
    20_000
}
fn default_per_source() -> usize {
    256
}
fn default_per_trusted_source() -> usize {
    8192
}
fn default_drain_grace() -> Duration {
    Duration::from_secs(5)
}
fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_backlog() -> i32 {
    4096
}
fn default_tfo_queue() -> u32 {
    256
}
fn default_min_version() -> TlsVersion {
    TlsVersion::Tls12
}
fn default_ticket_lifetime() -> Duration {
    Duration::from_secs(12 * 3600)
}
fn default_handshake_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_max_bytes() -> bytesize::ByteSize {
    bytesize::ByteSize::gib(8)
}
fn default_segment_bytes() -> bytesize::ByteSize {
    bytesize::ByteSize::mib(64)
}
fn default_batch_delay() -> Duration {
    Duration::from_millis(1)
}
fn default_high_water() -> f64 {
    0.9
}
fn default_max_header_bytes() -> bytesize::ByteSize {
    bytesize::ByteSize::kib(16)
}
fn default_max_headers() -> usize {
    64
}
fn default_header_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_h2_streams() -> u32 {
    128
}
fn default_reconnect_max() -> Duration {
    // async-nats' own default grows to 4 s: a recovered origin waits up to that long.
    Duration::from_secs(2)
}
fn default_h2_keepalive_interval() -> Duration {
    Duration::from_secs(20)
}
fn default_h2_keepalive_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_request_timeout() -> Duration {
    Duration::from_secs(45)
}
fn default_write_stall() -> Duration {
    Duration::from_secs(10)
}
fn default_idle() -> Duration {
    Duration::from_secs(60)
}
fn default_lifetime() -> Duration {
    Duration::from_secs(3600)
}
fn default_min_body_rate() -> bytesize::ByteSize {
    bytesize::ByteSize::kib(1)
}
fn default_body_rate_grace() -> Duration {
    Duration::from_secs(5)
}
fn default_body_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_max_body() -> bytesize::ByteSize {
    bytesize::ByteSize::mib(1)
}
fn default_tolerance() -> Duration {
    Duration::from_secs(300)
}
fn default_early_data_bytes() -> bytesize::ByteSize {
    bytesize::ByteSize::kib(16)
}

fn default_session_cache() -> usize {
    // ~200 bytes each: 50k resumable senders in ~10 MB.
    50_000
}

fn default_dedupe_window() -> usize {
    65_536
}
fn default_subject() -> String {
    "webhooks.{pop}.{route}".into()
}
fn default_publish_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_connections() -> usize {
    4
}
fn default_max_in_flight() -> usize {
    256
}
fn default_retry_base() -> Duration {
    Duration::from_millis(200)
}
fn default_retry_max() -> Duration {
    Duration::from_secs(30)
}
fn default_breaker_failures() -> u32 {
    5
}
fn default_breaker_open_for() -> Duration {
    Duration::from_secs(5)
}
fn default_digest() -> Digest {
    Digest::Sha256
}
fn default_encoding() -> Encoding {
    Encoding::Hex
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
pop: fra1
listen: ["127.0.0.1:8443", "[::1]:8443"]
admin_listen: 127.0.0.1:9180
tls:
  self_signed: true
  min_version: "1.3"
spool:
  dir: /tmp/spool
  max_bytes: 8GiB
  segment_bytes: 64MiB
  max_batch_delay: 1ms
routes:
  - path: /hooks/github
    provider: github
    secrets: ["s3cret", "old-s3cret"]
    max_body: 1MiB
  - path: /hooks/stripe
    provider: stripe
    secrets: ["whsec_abc"]
    tolerance: 300s
  - path: /hooks/shopify
    provider: shopify
    secrets: ["x"]
  - path: /hooks/std
    provider: standard
    secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
  - path: /hooks/custom
    provider: hmac
    secrets: ["k"]
    hmac: { header: X-Signature, algorithm: sha512, encoding: base64, prefix: "sha512=" }
"#;

    fn errors_of(text: &str) -> Vec<(String, String)> {
        parse(text).expect_err("config should be rejected")
    }

    #[test]
    fn reload_reports_only_what_needs_a_restart() {
        let yaml = |text: &str| serde_yaml::from_str::<serde_yaml::Value>(text).unwrap();
        let running = yaml(GOOD);
        let live = GOOD
            .replace("\"old-s3cret\"", "\"new-s3cret\"")
            .replace("min_version: \"1.3\"", "min_version: \"1.2\"")
            .replace("max_body: 1MiB", "max_body: 2MiB");
        assert!(restart_only_changes(&running, &yaml(&live)).is_empty());
        let moved = GOOD
            .replace("dir: /tmp/spool", "dir: /tmp/other")
            .replace("127.0.0.1:9180", "127.0.0.1:9181")
            .replace(
                "min_version: \"1.3\"",
                "min_version: \"1.3\"\n  session_cache: 10",
            );
        assert_eq!(
            restart_only_changes(&running, &yaml(&moved)),
            ["admin_listen", "spool", "tls.session_cache"]
        );
    }

    #[test]
    fn the_documented_shape_parses() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.pop, "fra1");
        assert_eq!(s.listen.len(), 2);
        assert_eq!(s.spool.max_bytes, 8 << 30);
        assert_eq!(s.spool.segment_bytes, 64 << 20);
        assert_eq!(s.spool.max_batch_delay, Duration::from_millis(1));
        assert_eq!(s.tls.min_version, TlsVersion::Tls13);
        assert_eq!(s.routes[0].max_body, 1 << 20);
        assert_eq!(s.routes[0].name, "hooks_github");
        assert_eq!(s.routes[0].ack_status, StatusCode::ACCEPTED);
        assert_eq!(
            s.routes[2].ack_status,
            StatusCode::OK,
            "shopify defaults to 200"
        );
        assert!(
            matches!(s.routes[1].verifier.scheme(), Scheme::Stripe { tolerance } if tolerance.as_secs() == 300)
        );
    }

    #[test]
    fn unknown_keys_are_errors_with_their_path() {
        let text = GOOD.replace(
            "    max_body: 1MiB",
            "    max_body: 1MiB\n    max_bdy: 2MiB",
        );
        let errors = errors_of(&text);
        assert_eq!(errors[0].0, "routes[0].max_bdy");
        assert!(
            errors[0].1.contains("unknown field `max_bdy`"),
            "{errors:?}"
        );
    }

    #[test]
    fn semantic_errors_name_every_field() {
        let text = GOOD
            .replace(r#"secrets: ["whsec_abc"]"#, "secrets: []")
            .replace(
                r#"["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]"#,
                r#"["not-whsec"]"#,
            )
            .replace("path: /hooks/shopify", "path: /hooks/github");
        let fields: Vec<String> = errors_of(&text).into_iter().map(|(f, _)| f).collect();
        assert!(
            fields.contains(&"routes[1].secrets".to_owned()),
            "{fields:?}"
        );
        assert!(
            fields.contains(&"routes[3].secrets[0]".to_owned()),
            "{fields:?}"
        );
        assert!(fields.contains(&"routes[2].path".to_owned()), "{fields:?}");
    }

    #[test]
    fn type_errors_name_the_field() {
        let errors = errors_of(&GOOD.replace("max_bytes: 8GiB", "max_bytes: lots"));
        assert_eq!(errors[0].0, "spool.max_bytes");
        let errors = errors_of(&GOOD.replace("provider: shopify", "provider: paypal"));
        assert_eq!(errors[0].0, "routes[2].provider");
        let errors = errors_of(&GOOD.replace("max_batch_delay: 1ms", "max_batch_delay: soon"));
        assert_eq!(errors[0].0, "spool.max_batch_delay");
    }

    #[test]
    fn tls_identity_rules() {
        let errors = errors_of(&GOOD.replace("  self_signed: true\n", ""));
        assert_eq!(errors[0].0, "tls.cert");
        let errors = errors_of(&GOOD.replace(
            "  self_signed: true\n",
            "  self_signed: true\n  cert: /a.pem\n",
        ));
        assert_eq!(errors[0].0, "tls.self_signed");
    }

    #[test]
    fn early_data_is_off_by_default_and_never_with_shared_tickets() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.tls.early_data, None);
        assert_eq!(s.routes[0].early_data, EarlyDataPolicy::Reject);

        let on = GOOD
            .replace(
                "  min_version: \"1.3\"\n",
                "  min_version: \"1.3\"\n  early_data: { enabled: true, max_bytes: 32KiB }\n",
            )
            .replace(
                "    max_body: 1MiB\n",
                "    max_body: 1MiB\n    early_data: accept\n",
            );
        let s = parse(&on).unwrap();
        assert_eq!(s.tls.early_data, Some(32 * 1024));
        assert_eq!(s.routes[0].early_data, EarlyDataPolicy::Accept);
        assert_eq!(s.routes[1].early_data, EarlyDataPolicy::Reject);

        let shared = on.replacen(
            "  early_data:",
            "  session_tickets: { mode: shared, key_file: /k }\n  early_data:",
            1,
        );
        let errors = errors_of(&shared);
        assert_eq!(errors[0].0, "tls.early_data.enabled");
        assert!(errors[0].1.contains("single-use"), "{errors:?}");

        let errors = errors_of(&on.replace("max_bytes: 32KiB", "max_bytes: 0B"));
        assert_eq!(errors[0].0, "tls.early_data.max_bytes");
        let errors = errors_of(&on.replace("early_data: accept", "early_data: maybe"));
        assert_eq!(errors[0].0, "routes[0].early_data");
    }

    #[test]
    fn hmac_block_rules_and_ack_status() {
        let errors = errors_of(&GOOD.replace(
            r#"    hmac: { header: X-Signature, algorithm: sha512, encoding: base64, prefix: "sha512=" }"#,
            "",
        ));
        assert_eq!(errors[0].0, "routes[4].hmac");
        let errors = errors_of(&GOOD.replace(
            "    max_body: 1MiB",
            "    max_body: 1MiB\n    ack_status: 302",
        ));
        assert_eq!(errors[0].0, "routes[0].ack_status");
        let errors = errors_of(&GOOD.replace("max_body: 1MiB", "max_body: 64MiB"));
        assert_eq!(errors[0].0, "routes[0].max_body");
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("edge.yaml");
        std::fs::write(&path, GOOD.replace("pop: fra1", "pop: \"\"")).unwrap();
        let message = load(&path).unwrap_err().to_string();
        assert!(
            message.starts_with(&format!("{}: pop: ", path.display())),
            "{message}"
        );
    }
}
