//! `routes:` one webhook endpoint each: its path, provider and secrets, its limits, what
//! it does with 0-RTT, and its admission priority and rate limit.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytesize::ByteSize;
use edge_kit::config_file::FieldErrors;
use http::{HeaderName, StatusCode};
use serde::Deserialize;

use crate::admission::limiter::Priority;
use crate::admission::rate_limit::Rate;
use crate::event::ConfiguredId;
use crate::verify::{
    self, Challenge, Digest, Encoding, HmacSpec, Labels, Provider, Scheme, TimestampSource,
    TimestampSpec, Verifier,
};

/// One webhook endpoint.
#[derive(Clone, Debug)]
pub struct Route {
    /// Label for metrics, logs and spool records.
    pub name: String,
    /// The URL path served.
    pub path: String,
    /// The provider, which decides the signature scheme and the event id.
    pub provider: Provider,
    /// Checks signatures with the route's secrets.
    pub verifier: Verifier,
    /// Where a generic route's event id is (`hmac.id_header` or `hmac.id_pointer`).
    pub configured_id: Option<ConfiguredId>,
    /// Largest body accepted; past it, 413.
    pub max_body: u64,
    /// The status answered once the event is stored.
    pub ack_status: StatusCode,
    /// How many recent event ids are remembered to answer a redelivery as a duplicate.
    pub dedupe_window: usize,
    /// What 0-RTT requests may do on this route.
    pub early_data: EarlyDataPolicy,
    /// Who is shed first under overload (by default from how the provider retries).
    pub priority: Priority,
    /// Per-source request rate (429 beyond it); `None`: no limit.
    pub rate_limit: Option<Rate>,
    /// The endpoint handshake the provider sends before any event, answered here.
    pub challenge: Option<Challenge>,
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
pub(super) struct RawRoute {
    path: String,
    /// Default: the path without its first `/`, other `/` as `_`.
    name: Option<String>,
    provider: Provider,
    /// Every secret is tried: rotate by adding the new one first. At most 8.
    #[serde(default)]
    secrets: Vec<String>,
    /// Or: a file with one secret per line (blank lines and `#` comments skipped), so
    /// the config itself holds none. Read at start and at every reload. A relative path
    /// is taken under `$CREDENTIALS_DIRECTORY` when systemd set it (`LoadCredential=`),
    /// under the config file's directory otherwise.
    secrets_file: Option<PathBuf>,
    /// Default 1MiB.
    max_body: Option<ByteSize>,
    /// Default 202 (200 for Shopify, Zoom, Paddle, Linear, Intercom, Mailgun and Twilio,
    /// 204 for Discord).
    ack_status: Option<u16>,
    /// Signed timestamps older or newer than this are refused. Default 300s.
    #[serde(default, with = "humantime_serde")]
    tolerance: Option<Duration>,
    hmac: Option<RawHmac>,
    /// Event ids remembered to acknowledge a redelivery without storing it again.
    /// Default 65536.
    dedupe_window: Option<usize>,
    #[serde(default)]
    early_data: EarlyDataPolicy,
    /// Default by provider: [`default_priority`].
    priority: Option<Priority>,
    rate_limit: Option<RawRate>,
    /// The provider's endpoint handshake to answer: dropbox, okta or microsoft_graph.
    challenge: Option<Challenge>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRate {
    per_second: f64,
    burst: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHmac {
    header: String,
    /// Default sha256.
    algorithm: Option<Digest>,
    /// Default hex.
    encoding: Option<Encoding>,
    #[serde(default)]
    prefix: String,
    /// A header carrying the event id (not signed: keyed with the signature).
    id_header: Option<String>,
    /// A JSON pointer to the event id in the signed body (e.g. `/event/id`).
    id_pointer: Option<String>,
    /// Splits the header into parts (several signatures, or signature and timestamp
    /// fields); default: the whole value is one signature.
    separator: Option<char>,
    /// Where the signed timestamp is; default: none is signed.
    timestamp: Option<RawTimestamp>,
    /// What is signed, ending in `{body}`. Default `{body}`.
    signed: Option<String>,
}

/// A signed timestamp's place: `header: NAME`, or `field: TEXT` (the part of the
/// signature header after TEXT, with `separator`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimestamp {
    header: Option<String>,
    field: Option<String>,
}

/// Validates every route; paths and names must be unique.
pub(super) fn validate(
    raw: Vec<RawRoute>,
    segment_bytes: u64,
    files: &SecretFiles,
    errors: &mut FieldErrors,
) -> Vec<Route> {
    if raw.is_empty() {
        errors.add("routes", "must list at least one route");
    }
    let mut paths = HashSet::new();
    let mut names = HashSet::new();
    let mut routes = Vec::new();
    for (i, raw) in raw.into_iter().enumerate() {
        let at = |field: &str| format!("routes[{i}].{field}");
        if !paths.insert(raw.path.clone()) {
            errors.add(at("path"), "duplicates an earlier route's path");
        }
        let name = raw
            .name
            .clone()
            .unwrap_or_else(|| raw.path.trim_start_matches('/').replace('/', "_"));
        if !names.insert(name.clone()) {
            errors.add(at("name"), "duplicates an earlier route's name");
        }
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            errors.add(
                at("name"),
                format!("must be 1-{MAX_NAME_LEN} bytes (it is stored with every event)"),
            );
        }
        if let Some(route) = raw.validate(name, &at, segment_bytes, files, errors) {
            routes.push(route);
        }
    }
    routes
}

impl RawRoute {
    fn validate(
        self,
        name: String,
        at: &dyn Fn(&str) -> String,
        segment_bytes: u64,
        files: &SecretFiles,
        errors: &mut FieldErrors,
    ) -> Option<Route> {
        if !self.path.starts_with('/') || self.path.contains('?') {
            errors.add(at("path"), "must start with / and have no query");
        }
        let keys = self.keys(files, at, errors);
        let max_body = self.max_body.unwrap_or(DEFAULT_MAX_BODY).as_u64();
        if max_body == 0 {
            errors.add(at("max_body"), "must be greater than zero");
        } else if max_body.saturating_add(MAX_RECORD_OVERHEAD) > segment_bytes {
            errors.add(
                at("max_body"),
                "must leave room for the record in one spool.segment_bytes",
            );
        }
        let ack_status = match StatusCode::from_u16(
            self.ack_status
                .unwrap_or_else(|| default_ack_status(self.provider)),
        ) {
            Ok(status) if status.is_success() => status,
            _ => {
                errors.add(at("ack_status"), "must be a 2xx status");
                StatusCode::ACCEPTED
            }
        };
        let tolerance = self.tolerance.unwrap_or(DEFAULT_TOLERANCE);
        if tolerance.is_zero() {
            errors.add(at("tolerance"), "must be greater than zero");
        }
        let dedupe_window = self.dedupe_window.unwrap_or(DEFAULT_DEDUPE_WINDOW);
        if dedupe_window == 0 {
            errors.add(at("dedupe_window"), "must be positive");
        }
        let (scheme, configured_id) =
            scheme(self.provider, self.hmac, tolerance, keys.public, at, errors)?;
        let rate_limit = self.rate_limit.map(|rate| {
            if !(rate.per_second > 0.0 && rate.burst >= 1.0) {
                errors.add(at("rate_limit"), "needs per_second > 0 and burst >= 1");
            }
            Rate {
                per_second: rate.per_second,
                burst: rate.burst,
            }
        });
        Some(Route {
            name,
            path: self.path,
            provider: self.provider,
            verifier: Verifier::new(scheme, keys.keys),
            configured_id,
            max_body,
            ack_status,
            dedupe_window,
            early_data: self.early_data,
            priority: self
                .priority
                .unwrap_or_else(|| default_priority(self.provider)),
            rate_limit,
            challenge: self.challenge,
        })
    }

    /// The route's keys, from `secrets` or from the file `secrets_file` names.
    fn keys(
        &self,
        files: &SecretFiles,
        at: &dyn Fn(&str) -> String,
        errors: &mut FieldErrors,
    ) -> RouteKeys {
        match (&self.secrets_file, self.secrets.is_empty()) {
            (None, _) => secret_keys(self.provider, &self.secrets, "secrets", at, errors),
            (Some(file), true) => match files.read(file) {
                Ok(secrets) => secret_keys(self.provider, &secrets, "secrets_file", at, errors),
                Err(e) => {
                    errors.add(at("secrets_file"), e);
                    RouteKeys::default()
                }
            },
            (Some(_), false) => {
                errors.add(
                    at("secrets_file"),
                    "set either secrets or secrets_file, not both",
                );
                RouteKeys::default()
            }
        }
    }
}

/// The status a provider counts as delivered: Shopify and Zoom count only 200 (Zoom
/// also 204), Discord only 204; Paddle, Linear, Intercom, Mailgun and Twilio document
/// a 200.
fn default_ack_status(provider: Provider) -> u16 {
    match provider {
        Provider::Shopify
        | Provider::Zoom
        | Provider::Paddle
        | Provider::Linear
        | Provider::Intercom
        | Provider::Mailgun
        | Provider::Twilio => 200,
        Provider::Discord => 204,
        _ => 202,
    }
}

/// Where a route's `secrets_file` is looked for (see [`RawRoute`]'s field).
#[derive(Clone, Debug, Default)]
pub struct SecretFiles {
    /// `$CREDENTIALS_DIRECTORY`, when systemd set it.
    pub credentials_dir: Option<PathBuf>,
    /// The directory of the config file.
    pub config_dir: Option<PathBuf>,
}

impl SecretFiles {
    /// For a config file at `config`, in this process's environment.
    pub fn for_config(config: Option<&Path>) -> Self {
        Self {
            credentials_dir: std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from),
            config_dir: config.and_then(Path::parent).map(Path::to_owned),
        }
    }

    /// The secrets in `file`, one a line (`#` comments), or a PEM block a key (public
    /// keys as providers' consoles export them). The error names the file, never its
    /// content.
    fn read(&self, file: &Path) -> Result<Vec<String>, String> {
        let path = match (&self.credentials_dir, &self.config_dir) {
            _ if file.is_absolute() => file.to_owned(),
            (Some(credentials), _) => credentials.join(file),
            (None, Some(config)) => config.join(file),
            (None, None) => file.to_owned(),
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut secrets = Vec::new();
        let mut pem: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if let Some(block) = pem.as_mut() {
                block.push('\n');
                block.push_str(line);
                if line.starts_with("-----END") {
                    secrets.extend(pem.take());
                }
            } else if line.starts_with("-----BEGIN") {
                pem = Some(line.to_owned());
            } else if !line.is_empty() && !line.starts_with('#') {
                secrets.push(line.to_owned());
            }
        }
        // An unfinished block is kept, so that its key is refused by name.
        secrets.extend(pem);
        Ok(secrets)
    }
}

/// The keys behind a route's secrets (Standard Webhooks secrets are `whsec_` + base64,
/// its public keys `whpk_` + base64); `field` is where they came from, for errors.
fn secret_keys(
    provider: Provider,
    secrets: &[String],
    field: &str,
    at: &dyn Fn(&str) -> String,
    errors: &mut FieldErrors,
) -> RouteKeys {
    if secrets.is_empty() {
        errors.add(at(field), "must not be empty");
    } else if secrets.len() > verify::MAX_SECRETS {
        errors.add(
            at(field),
            format!(
                "at most {} secrets (each costs a MAC over every body)",
                verify::MAX_SECRETS
            ),
        );
    }
    let mut keys = Vec::new();
    let mut public_keys = 0;
    for (j, secret) in secrets.iter().enumerate() {
        let key = match provider {
            _ if secret.is_empty() => Err("must not be empty"),
            Provider::Discord => verify::decode_discord_public_key(secret)
                .ok_or("must be the application's public key: 64 hex digits or a PEM PUBLIC KEY"),
            Provider::Sendgrid => verify::decode_sendgrid_public_key(secret)
                .ok_or("must be SendGrid's verification key: base64 of a P-256 public key"),
            Provider::Standard => match verify::decode_standard_public_key(secret) {
                Some(key) => {
                    public_keys += 1;
                    Ok(key)
                }
                None => verify::decode_standard_secret(secret).ok_or(
                    "must be whsec_ (a secret) or whpk_ (a public key) followed by base64, or a PEM PUBLIC KEY",
                ),
            },
            _ => Ok(secret.as_bytes().to_vec()),
        };
        match key {
            Ok(key) => keys.push(key),
            Err(problem) => errors.add(at(&format!("{field}[{j}]")), problem),
        }
    }
    if public_keys > 0 && public_keys < secrets.len() {
        errors.add(
            at(field),
            "mixes whsec_ secrets with whpk_ public keys (a route checks one kind)",
        );
    }
    RouteKeys {
        keys,
        public: public_keys > 0,
    }
}

/// A route's decoded keys, and whether they are Standard Webhooks public keys (`whpk_`,
/// checked as `v1a` Ed25519 signatures) rather than secrets.
#[derive(Default)]
struct RouteKeys {
    keys: Vec<Vec<u8>>,
    public: bool,
}

/// The signature scheme, and the event-id header of a generic HMAC route; `public_keys`:
/// the route holds public keys where its provider allows either. `None` when the `hmac`
/// block is missing, misplaced or wrong (an error was added).
fn scheme(
    provider: Provider,
    hmac: Option<RawHmac>,
    tolerance: Duration,
    public_keys: bool,
    at: &dyn Fn(&str) -> String,
    errors: &mut FieldErrors,
) -> Option<(Scheme, Option<ConfiguredId>)> {
    let scheme = match (provider, hmac) {
        (Provider::Hmac, Some(hmac)) => return generic_hmac(hmac, tolerance, at, errors),
        (Provider::Hmac, None) => {
            errors.add(
                at("hmac"),
                "required when provider is hmac (header, algorithm, encoding, prefix, separator, timestamp, signed, id_header or id_pointer)",
            );
            return None;
        }
        (_, Some(_)) => {
            errors.add(at("hmac"), "only allowed when provider is hmac");
            return None;
        }
        (Provider::Standard, None) if public_keys => Scheme::StandardEd25519 { tolerance },
        (Provider::Standard, None) => Scheme::Standard { tolerance },
        (Provider::Discord, None) => Scheme::Discord { tolerance },
        (Provider::Sendgrid, None) => Scheme::Sendgrid { tolerance },
        (Provider::Mailgun, None) => Scheme::Mailgun { tolerance },
        (Provider::Twilio, None) => Scheme::Twilio,
        (
            Provider::Github
            | Provider::Stripe
            | Provider::Slack
            | Provider::Zoom
            | Provider::Shopify
            | Provider::Paddle
            | Provider::Pagerduty
            | Provider::Linear
            | Provider::Intercom,
            None,
        ) => Scheme::Hmac(verify::preset(provider, tolerance)?),
    };
    Some((scheme, None))
}

/// A generic HMAC route's scheme (its `hmac` block), and the id it configures.
fn generic_hmac(
    hmac: RawHmac,
    tolerance: Duration,
    at: &dyn Fn(&str) -> String,
    errors: &mut FieldErrors,
) -> Option<(Scheme, Option<ConfiguredId>)> {
    let header = header_name(&hmac.header, "hmac.header", at, errors);
    let id_header = hmac
        .id_header
        .and_then(|name| header_name(&name, "hmac.id_header", at, errors));
    let timestamp = hmac
        .timestamp
        .and_then(|raw| timestamp_spec(raw, hmac.separator.is_some(), tolerance, at, errors));
    let template = hmac.signed.as_deref().unwrap_or("{body}");
    let signed = verify::parse_template(template, timestamp.is_some(), id_header.as_ref())
        .map_err(|error| errors.add(at("hmac.signed"), error.to_string()))
        .ok();
    let spec = HmacSpec {
        labels: Labels::CONFIGURED,
        header: header?,
        digest: hmac.algorithm.unwrap_or(Digest::Sha256),
        encoding: hmac.encoding.unwrap_or(Encoding::Hex),
        prefix: hmac.prefix,
        separator: hmac.separator,
        timestamp,
        signed: signed?,
    };
    let configured_id = configured_id(id_header, hmac.id_pointer, at, errors);
    Some((Scheme::Hmac(spec), configured_id))
}

/// Where a generic HMAC route's timestamp is (`hmac.timestamp`), checked within
/// `tolerance`; a field needs the block's `separator`.
fn timestamp_spec(
    raw: RawTimestamp,
    has_separator: bool,
    tolerance: Duration,
    at: &dyn Fn(&str) -> String,
    errors: &mut FieldErrors,
) -> Option<TimestampSpec> {
    let source = match (raw.header, raw.field) {
        (Some(name), None) => {
            TimestampSource::Header(header_name(&name, "hmac.timestamp.header", at, errors)?)
        }
        (None, Some(field)) if has_separator && !field.is_empty() => TimestampSource::Field(field),
        (None, Some(_)) => {
            errors.add(
                at("hmac.timestamp.field"),
                "needs hmac.separator and some text",
            );
            return None;
        }
        _ => {
            errors.add(at("hmac.timestamp"), "needs one of header or field");
            return None;
        }
    };
    Some(TimestampSpec { source, tolerance })
}

/// A generic HMAC route's event id: from a header or a JSON pointer into the body.
fn configured_id(
    id_header: Option<HeaderName>,
    id_pointer: Option<String>,
    at: &dyn Fn(&str) -> String,
    errors: &mut FieldErrors,
) -> Option<ConfiguredId> {
    match (id_header, id_pointer) {
        (Some(_), Some(_)) => {
            errors.add(
                at("hmac.id_pointer"),
                "set id_header or id_pointer, not both",
            );
            None
        }
        (Some(name), None) => Some(ConfiguredId::Header(name)),
        (None, Some(pointer)) if pointer.starts_with('/') => Some(ConfiguredId::Pointer(pointer)),
        (None, Some(_)) => {
            errors.add(
                at("hmac.id_pointer"),
                "must be a JSON pointer into the body (starts with /)",
            );
            None
        }
        (None, None) => None,
    }
}

/// A configured header name, or `None` with an error at `field`.
fn header_name(
    name: &str,
    field: &str,
    at: &dyn Fn(&str) -> String,
    errors: &mut FieldErrors,
) -> Option<HeaderName> {
    HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| errors.add(at(field), "is not a valid header name"))
        .ok()
}

const DEFAULT_MAX_BODY: ByteSize = ByteSize::mib(1);
const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
const DEFAULT_DEDUPE_WINDOW: usize = 65_536;
/// Room a spool record needs beyond its body: a head of up to 60KiB (`http`'s bound),
/// the key, pop and route name, framing.
const MAX_RECORD_OVERHEAD: u64 = 72 * 1024;
/// Longest route name (also a metric label).
const MAX_NAME_LEN: usize = 128;
