//! The edge's YAML configuration, parsed once into typed [`Settings`]. Unknown keys are
//! errors, and every error names the file and the field (`routes[2].secrets: …`).
//!
//! One module per section of the file; each holds its raw (as written) type, the
//! defaults (documented on the fields, in one `impl Default` or one constant each) and
//! the validation that turns it into the section's settings.

mod admission;
mod backhaul;
mod connections;
mod http;
mod listener;
mod ranges;
mod routes;
mod spool;
mod tls;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

pub use backhaul::{BackhaulSettings, ClientTls, HttpSinkSettings, NatsSettings, SinkSettings};
pub use connections::Caps;
use edge_kit::config_file::FieldErrors;
pub use edge_kit::config_file::{ConfigErrors, FieldError};
pub use http::{Deadlines, HttpSettings};
pub use listener::ListenerSettings;
pub use ranges::{Location, RangeSource, RangesSettings};
pub use routes::{EarlyDataPolicy, Route, SecretFiles, default_priority};
pub use spool::SpoolSettings;
pub use tls::{Identity, SessionTickets, SniCert, TlsSettings, TlsVersion};

use crate::admission::AdmissionSettings;

/// Validated settings, ready to use.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The PoP's name, on every metric and log line.
    pub pop: String,
    /// Where webhooks are served (TLS).
    pub listen: Vec<SocketAddr>,
    /// Where `/healthz`, `/readyz` and `/metrics` listen.
    pub admin_listen: SocketAddr,
    /// Listening socket options.
    pub listener: ListenerSettings,
    /// Certificates, versions, session resumption and 0-RTT.
    pub tls: TlsSettings,
    /// The durable queue.
    pub spool: SpoolSettings,
    /// Per-connection and per-request HTTP limits.
    pub http: HttpSettings,
    /// Connection caps, overall and per source.
    pub connections: Caps,
    /// `connections.trusted_ranges`: the `ranges` lists whose addresses are trusted as
    /// `connections.trusted` is, as each list is now.
    pub trusted_ranges: Vec<String>,
    /// Providers' published egress ranges.
    pub ranges: RangesSettings,
    /// Load shedding.
    pub admission: AdmissionSettings,
    /// After SIGTERM, how long `/readyz` fails while requests are still served.
    pub drain_grace: Duration,
    /// Then, how long in-flight requests may take before connections close.
    pub shutdown_timeout: Duration,
    /// The webhook routes.
    pub routes: Vec<Route>,
    /// Where spooled events go; `None` keeps them in the spool only.
    pub backhaul: Option<BackhaulSettings>,
}

impl Settings {
    /// Each route's de-duplication window, by route name (what the spool keys ids by).
    pub fn dedupe_windows(&self) -> HashMap<String, usize> {
        self.routes
            .iter()
            .map(|r| (r.name.clone(), r.dedupe_window))
            .collect()
    }
}

/// Reads and validates the config file at `path`; every error names the file and the field.
pub fn load(path: &Path) -> Result<Settings, ConfigErrors> {
    let files = SecretFiles::for_config(Some(path));
    edge_kit::config_file::load(path, |text| parse_with(text, &files))
}

/// Parses and validates YAML text; errors are `(field path, message)` pairs. A relative
/// `secrets_file` is read under `$CREDENTIALS_DIRECTORY` or the working directory.
pub fn parse(text: &str) -> Result<Settings, Vec<FieldError>> {
    parse_with(text, &SecretFiles::for_config(None))
}

/// [`parse`], with `secrets_file`s looked for where `files` says.
pub fn parse_with(text: &str, files: &SecretFiles) -> Result<Settings, Vec<FieldError>> {
    edge_kit::config_file::parse_yaml(text, |raw: RawConfig| raw.validate(files))
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
    "ranges",
    "drain_grace",
    "shutdown_timeout",
    "tls.session_tickets",
    "tls.session_cache",
    "http.max_header_bytes",
    "http.max_headers",
    "http.header_timeout",
    "http.h2_max_concurrent_streams",
    "http.h2_stream_window",
    "http.h2_keepalive_interval",
    "http.h2_keepalive_timeout",
    "http.write_stall_timeout",
    "http.idle_timeout",
    "http.max_connection_lifetime",
];

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    pop: String,
    listen: Vec<SocketAddr>,
    admin_listen: SocketAddr,
    #[serde(default)]
    listener: listener::RawListener,
    tls: tls::RawTls,
    spool: spool::RawSpool,
    #[serde(default)]
    http: http::RawHttp,
    #[serde(default)]
    connections: connections::RawConnections,
    #[serde(default)]
    admission: admission::RawAdmission,
    #[serde(default)]
    ranges: ranges::RawRanges,
    /// After SIGTERM, how long `/readyz` fails (so the route is withdrawn) while
    /// requests are still served. Default [`DEFAULT_DRAIN_GRACE`].
    #[serde(default, with = "humantime_serde")]
    drain_grace: Option<Duration>,
    /// Then, how long in-flight requests may take before connections are closed.
    /// Default [`DEFAULT_SHUTDOWN_TIMEOUT`].
    #[serde(default, with = "humantime_serde")]
    shutdown_timeout: Option<Duration>,
    routes: Vec<routes::RawRoute>,
    backhaul: Option<backhaul::RawBackhaul>,
}

impl RawConfig {
    fn validate(self, files: &SecretFiles) -> Result<Settings, Vec<FieldError>> {
        let mut errors = FieldErrors::default();
        let pop_ok = !self.pop.is_empty()
            && self.pop.len() <= 64
            && self
                .pop
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !pop_ok {
            errors.add("pop", "must be 1-64 characters of [A-Za-z0-9-_.]");
        }
        if self.listen.is_empty() {
            errors.add("listen", "must list at least one address");
        }
        let listener = self.listener.validate(&mut errors);
        let tls = self.tls.validate(&mut errors);
        let spool = self.spool.validate(&mut errors);
        let http = self.http.validate(&mut errors);
        let mut raw_connections = self.connections;
        let trusted_ranges = std::mem::take(&mut raw_connections.trusted_ranges);
        let connections = raw_connections.validate(&mut errors);
        let ranges = self.ranges.validate(&mut errors);
        for name in &trusted_ranges {
            if !ranges.sources.iter().any(|source| &source.name == name) {
                errors.add(
                    "connections.trusted_ranges",
                    format!("{name:?} is not a source under ranges.sources"),
                );
            }
        }
        let routes = routes::validate(self.routes, spool.segment_bytes, files, &mut errors);
        let largest_body = routes.iter().map(|r| r.max_body).max().unwrap_or(0);
        let admission = self
            .admission
            .validate(&connections.trusted, largest_body, &mut errors);
        let backhaul = self.backhaul.and_then(|raw| raw.validate(&mut errors));
        let Some(tls) = tls else {
            return Err(errors.into_errors());
        };
        errors.into_result(|| Settings {
            pop: self.pop,
            listen: self.listen,
            admin_listen: self.admin_listen,
            listener,
            tls,
            spool,
            http,
            connections,
            trusted_ranges,
            ranges,
            admission,
            drain_grace: self.drain_grace.unwrap_or(DEFAULT_DRAIN_GRACE),
            shutdown_timeout: self.shutdown_timeout.unwrap_or(DEFAULT_SHUTDOWN_TIMEOUT),
            routes,
            backhaul,
        })
    }
}

const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(5);
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use ::http::StatusCode;

    use super::*;
    use crate::verify::Scheme;

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

    fn errors_of(text: &str) -> Vec<FieldError> {
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
    fn stream_replicas_stay_within_jetstream_limits() {
        let with = |replicas: &str| with_nats(&format!(", create: true{replicas}"));
        assert_eq!(nats_of(&with("")).replicas, 1);
        assert_eq!(nats_of(&with(", replicas: 3")).replicas, 3);
        for bad in [", replicas: 0", ", replicas: 6"] {
            let errors = errors_of(&with(bad));
            assert_eq!(errors[0].field, "backhaul.nats.replicas", "{errors:?}");
        }
    }

    #[test]
    fn resends_are_dropped_for_an_hour_unless_told_otherwise() {
        let window = |extra: &str| nats_of(&with_nats(extra)).duplicate_window;
        assert_eq!(window(""), Duration::from_secs(3600));
        assert_eq!(
            window(", duplicate_window: 6h"),
            Duration::from_secs(6 * 3600)
        );
        let errors = errors_of(&with_nats(", duplicate_window: 500ms"));
        assert_eq!(
            errors[0].field, "backhaul.nats.duplicate_window",
            "{errors:?}"
        );
    }

    #[test]
    fn each_pop_reads_replies_in_an_inbox_of_its_own() {
        assert_eq!(nats_of(&with_nats("")).inbox_prefix, "_INBOX.{pop}");
        let custom = with_nats(", inbox_prefix: _R.fra1");
        assert_eq!(nats_of(&custom).inbox_prefix, "_R.fra1");
        for bad in ["_INBOX.>", "_INBOX.*.x", "_INBOX..x", "_INBOX.", "a b", ""] {
            let errors = errors_of(&with_nats(&format!(", inbox_prefix: \"{bad}\"")));
            assert_eq!(
                errors[0].field, "backhaul.nats.inbox_prefix",
                "{bad}: {errors:?}"
            );
        }
    }

    /// The test config with a NATS backhaul, `extra` added to its `nats` mapping.
    fn with_nats(extra: &str) -> String {
        format!(
            "{GOOD}backhaul:\n  sink: nats\n  nats: {{ servers: [\"nats://127.0.0.1:4222\"], stream: S{extra} }}\n"
        )
    }

    fn nats_of(text: &str) -> NatsSettings {
        match parse(text).unwrap().backhaul.unwrap().sink {
            SinkSettings::Nats(nats) => nats,
            SinkSettings::Http(_) => unreachable!("a nats sink"),
        }
    }

    #[test]
    fn max_rate_zero_or_absent_is_no_limit_and_a_typo_sized_one_is_named() {
        let rate = |extra: &str| {
            parse(&format!("{}{extra}", with_nats(""))).map(|s| s.backhaul.unwrap().max_rate)
        };
        assert_eq!(rate("").unwrap(), None);
        assert_eq!(rate("  max_rate: 0\n").unwrap(), None);
        assert_eq!(rate("  max_rate: 200\n").unwrap(), Some(200));
        let errors = rate("  max_rate: 50000000\n").unwrap_err();
        assert_eq!(errors[0].field, "backhaul.max_rate", "{errors:?}");
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
            matches!(s.routes[1].verifier.scheme(), Scheme::Hmac(spec) if spec.timestamp.as_ref().is_some_and(|t| t.tolerance.as_secs() == 300))
        );
    }

    #[test]
    fn unknown_keys_are_errors_with_their_path() {
        let text = GOOD.replace(
            "    max_body: 1MiB",
            "    max_body: 1MiB\n    max_bdy: 2MiB",
        );
        let errors = errors_of(&text);
        assert_eq!(errors[0].field, "routes[0].max_bdy");
        assert!(
            errors[0].message.contains("unknown field `max_bdy`"),
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
        let fields: Vec<String> = errors_of(&text).into_iter().map(|e| e.field).collect();
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
    fn provider_lists_are_named_sources_and_trusted_only_by_name() {
        let ranges = r#"
ranges:
  dir: /var/lib/edge/ranges
  sources:
    github: { url: "https://api.github.com/meta", pointer: /hooks }
    partners: { file: /etc/edge/partners.txt }
connections:
  trusted_ranges: [github]
"#;
        let settings = parse(&format!("{GOOD}{ranges}")).unwrap();
        assert_eq!(settings.trusted_ranges, ["github"]);
        assert_eq!(settings.ranges.sources.len(), 2);
        assert_eq!(
            settings.ranges.sources[0].location,
            Location::Url("https://api.github.com/meta".into())
        );
        for (bad, field) in [
            ("trusted_ranges: [github]", "connections.trusted_ranges"),
            (
                "sources: { Git Hub: { file: /x } }",
                "ranges.sources.Git Hub",
            ),
            (
                "sources: { github: { url: ftp://x } }",
                "ranges.sources.github.url",
            ),
            (
                "sources: { github: { url: https://x, file: /x } }",
                "ranges.sources.github",
            ),
            (
                "sources: { github: { url: https://x, pointer: hooks } }",
                "ranges.sources.github.pointer",
            ),
        ] {
            let text = if bad.starts_with("trusted") {
                format!("{GOOD}connections:\n  {bad}\n")
            } else {
                format!("{GOOD}ranges:\n  {bad}\n")
            };
            let errors = errors_of(&text);
            assert_eq!(errors[0].field, field, "{bad}: {errors:?}");
        }
    }

    /// Every head the limits let through fits a spool record (64KiB per field) and,
    /// forwarded, JetStream's 64KiB of headers.
    #[test]
    fn head_limits_stay_within_what_a_spool_record_holds() {
        let with = |http: &str| GOOD.replace("routes:", &format!("http: {{ {http} }}\nroutes:"));
        assert!(parse(&with("max_header_bytes: 60KiB, max_headers: 256")).is_ok());
        for (bad, field) in [
            ("max_header_bytes: 61KiB", "http.max_header_bytes"),
            ("max_header_bytes: 512B", "http.max_header_bytes"),
            ("max_headers: 257", "http.max_headers"),
            ("max_headers: 0", "http.max_headers"),
        ] {
            let errors = errors_of(&with(bad));
            assert_eq!(errors[0].field, field, "{bad}: {errors:?}");
        }
        let long_name = GOOD.replace(
            "    provider: shopify",
            &format!("    provider: shopify\n    name: {}", "n".repeat(129)),
        );
        assert_eq!(errors_of(&long_name)[0].field, "routes[2].name");
    }

    #[test]
    fn a_route_holds_at_most_eight_secrets() {
        let secrets = |n: usize| {
            let list: Vec<String> = (0..n).map(|i| format!("\"s{i}\"")).collect();
            GOOD.replace(
                r#"["s3cret", "old-s3cret"]"#,
                &format!("[{}]", list.join(", ")),
            )
        };
        assert!(parse(&secrets(8)).is_ok());
        let errors = errors_of(&secrets(9));
        assert_eq!(errors[0].field, "routes[0].secrets", "{errors:?}");
        assert!(errors[0].message.contains("at most 8"), "{errors:?}");
    }

    #[test]
    fn secrets_can_come_from_a_file_named_relative_to_the_credentials_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("github"),
            "# rotated 2026-12\nnew-secret\n\nold-secret\n",
        )
        .unwrap();
        let text = GOOD.replace(
            r#"secrets: ["s3cret", "old-s3cret"]"#,
            "secrets_file: github",
        );
        let from = |credentials: Option<&Path>, config: Option<&Path>| SecretFiles {
            credentials_dir: credentials.map(Path::to_owned),
            config_dir: config.map(Path::to_owned),
        };
        let settings = parse_with(&text, &from(Some(dir.path()), None)).unwrap();
        let shown = format!("{:?}", settings.routes[0].verifier);
        assert!(shown.contains("<2 redacted>"), "{shown}");
        assert!(parse_with(&text, &from(None, Some(dir.path()))).is_ok());

        let errors = parse_with(&text, &from(Some(Path::new("/nonexistent")), None)).unwrap_err();
        assert_eq!(errors[0].field, "routes[0].secrets_file", "{errors:?}");
        assert!(
            errors[0].message.contains("/nonexistent/github"),
            "{errors:?}"
        );
        std::fs::write(dir.path().join("empty"), "# none yet\n").unwrap();
        let empty = text.replace("secrets_file: github", "secrets_file: empty");
        let errors = parse_with(&empty, &from(Some(dir.path()), None)).unwrap_err();
        assert_eq!(errors[0].field, "routes[0].secrets_file", "{errors:?}");
        let both = text.replace(
            "secrets_file: github",
            "secrets_file: github\n    secrets: [x]",
        );
        let errors = parse_with(&both, &from(Some(dir.path()), None)).unwrap_err();
        assert_eq!(errors[0].field, "routes[0].secrets_file", "{errors:?}");
    }

    /// Public keys as a console exports them: PEM blocks in a `secrets_file`, one key a
    /// block (RFC 8410's Ed25519 example), beside a hex one; a block left open is named.
    #[test]
    fn public_keys_can_be_pem_blocks_in_a_secrets_file() {
        let dir = tempfile::tempdir().unwrap();
        let pem = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
        std::fs::write(
            dir.path().join("discord"),
            format!(
                "# the application's keys\n{pem}{}\n",
                "ab".repeat(16) + &"19".repeat(16)
            ),
        )
        .unwrap();
        std::fs::write(dir.path().join("open"), &pem[..pem.len() - 26]).unwrap();
        let files = SecretFiles {
            credentials_dir: Some(dir.path().to_owned()),
            config_dir: None,
        };
        let route = |file: &str| {
            GOOD.replace(
                "routes:\n",
                &format!("routes:\n  - path: /hooks/discord\n    provider: discord\n    secrets_file: {file}\n"),
            )
        };
        let settings = parse_with(&route("discord"), &files).unwrap();
        let shown = format!("{:?}", settings.routes[0].verifier);
        assert!(shown.contains("<2 redacted>"), "{shown}");
        let errors = parse_with(&route("open"), &files).unwrap_err();
        assert_eq!(errors[0].field, "routes[0].secrets_file[0]", "{errors:?}");
    }

    #[test]
    fn a_secret_of_the_wrong_type_is_named_not_echoed() {
        let text = GOOD.replace(r#"["s3cret", "old-s3cret"]"#, r#""hunter2-in-the-log""#);
        let errors = errors_of(&text);
        assert_eq!(errors[0].field, "routes[0].secrets", "{errors:?}");
        assert!(!errors[0].message.contains("hunter2"), "{errors:?}");
    }

    #[test]
    fn type_errors_name_the_field() {
        let errors = errors_of(&GOOD.replace("max_bytes: 8GiB", "max_bytes: lots"));
        assert_eq!(errors[0].field, "spool.max_bytes");
        let errors = errors_of(&GOOD.replace("provider: shopify", "provider: paypal"));
        assert_eq!(errors[0].field, "routes[2].provider");
        let errors = errors_of(&GOOD.replace("max_batch_delay: 1ms", "max_batch_delay: soon"));
        assert_eq!(errors[0].field, "spool.max_batch_delay");
    }

    #[test]
    fn the_h2_stream_window_defaults_to_hypers_and_must_be_a_window_http2_allows() {
        assert_eq!(parse(GOOD).unwrap().http.h2_stream_window, 1 << 20);
        let with = |window: &str| {
            GOOD.replace(
                "routes:",
                &format!("http:\n  h2_stream_window: {window}\nroutes:"),
            )
        };
        assert_eq!(parse(&with("16KiB")).unwrap().http.h2_stream_window, 16384);
        for bad in ["1KiB", "2GiB"] {
            let errors = errors_of(&with(bad));
            assert_eq!(
                errors[0].field, "http.h2_stream_window",
                "{bad}: {errors:?}"
            );
        }
    }

    /// Sizes near u64::MAX are field errors, not an overflow (found by the config fuzzer).
    #[test]
    fn huge_sizes_are_named_not_overflowed() {
        let huge = u64::MAX;
        let errors =
            errors_of(&GOOD.replace("segment_bytes: 64MiB", &format!("segment_bytes: {huge}")));
        assert!(
            errors.iter().any(|e| e.field == "spool.max_bytes"),
            "{errors:?}"
        );
        let errors = errors_of(&GOOD.replace("max_body: 1MiB", &format!("max_body: {huge}")));
        assert!(
            errors.iter().any(|e| e.field == "routes[0].max_body"),
            "{errors:?}"
        );
    }

    #[test]
    fn tls_identity_rules() {
        let errors = errors_of(&GOOD.replace("  self_signed: true\n", ""));
        assert_eq!(errors[0].field, "tls.cert");
        let errors = errors_of(&GOOD.replace(
            "  self_signed: true\n",
            "  self_signed: true\n  cert: /a.pem\n",
        ));
        assert_eq!(errors[0].field, "tls.self_signed");
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
        assert_eq!(errors[0].field, "tls.early_data.enabled");
        assert!(errors[0].message.contains("single-use"), "{errors:?}");

        let errors = errors_of(&on.replace("max_bytes: 32KiB", "max_bytes: 0B"));
        assert_eq!(errors[0].field, "tls.early_data.max_bytes");
        let errors = errors_of(&on.replace("early_data: accept", "early_data: maybe"));
        assert_eq!(errors[0].field, "routes[0].early_data");
    }

    #[test]
    fn hmac_block_rules_and_ack_status() {
        let errors = errors_of(&GOOD.replace(
            r#"    hmac: { header: X-Signature, algorithm: sha512, encoding: base64, prefix: "sha512=" }"#,
            "",
        ));
        assert_eq!(errors[0].field, "routes[4].hmac");
        let errors = errors_of(&GOOD.replace(
            "    max_body: 1MiB",
            "    max_body: 1MiB\n    ack_status: 302",
        ));
        assert_eq!(errors[0].field, "routes[0].ack_status");
        let errors = errors_of(&GOOD.replace("max_body: 1MiB", "max_body: 64MiB"));
        assert_eq!(errors[0].field, "routes[0].max_body");
    }

    #[test]
    fn a_generic_routes_id_is_a_header_or_a_pointer_into_the_body() {
        let with = |id: &str| {
            GOOD.replace(
                r#"prefix: "sha512=" }"#,
                &format!(r#"prefix: "sha512=", {id} }}"#),
            )
        };
        let settings = parse(&with("id_pointer: /data/id")).unwrap();
        assert_eq!(
            settings.routes[4].configured_id,
            Some(crate::event::ConfiguredId::Pointer("/data/id".into()))
        );
        for bad in ["id_pointer: data.id", "id_header: X-Id, id_pointer: /id"] {
            let errors = errors_of(&with(bad));
            assert_eq!(
                errors[0].field, "routes[4].hmac.id_pointer",
                "{bad}: {errors:?}"
            );
        }
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
