//! The agent's YAML configuration, parsed once into typed settings. Unknown keys are
//! errors; every error names the file and the field.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use crate::hysteresis::{Dampening, Policy};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub pop: String,
    pub prefixes: Vec<IpNet>,
    /// Holds the drain flag, so a drain survives restarts.
    pub state_dir: PathBuf,
    pub admin_listen: SocketAddr,
    #[serde(default = "default_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// Re-check interval while a change is pending (a failure while announced, a
    /// success while withdrawn).
    #[serde(default = "default_fast_interval", with = "humantime_serde")]
    pub fast_interval: Duration,
    #[serde(default = "default_rise")]
    pub rise: u32,
    #[serde(default = "default_fall")]
    pub fall: u32,
    #[serde(default = "default_hold_down", with = "humantime_serde")]
    pub hold_down: Duration,
    #[serde(default = "default_dampening")]
    pub dampening: Option<DampeningSettings>,
    #[serde(default = "default_true")]
    pub withdraw_on_exit: bool,
    /// RFC 8326: before a drain or exit withdraws, announce with GRACEFUL_SHUTDOWN
    /// (65535:0) so upstreams move traffic away first. `null`: withdraw at once.
    #[serde(default = "default_graceful_shutdown")]
    pub graceful_shutdown: Option<GracefulShutdown>,
    pub checks: Vec<CheckSettings>,
    pub speaker: SpeakerSettings,
    pub guard: Option<GuardSettings>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DampeningSettings {
    #[serde(default = "default_penalty")]
    pub penalty: f64,
    #[serde(default = "default_half_life", with = "humantime_serde")]
    pub half_life: Duration,
    #[serde(default = "default_suppress")]
    pub suppress: f64,
    #[serde(default = "default_reuse")]
    pub reuse: f64,
    #[serde(default = "default_max_suppress", with = "humantime_serde")]
    pub max_suppress: Duration,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GracefulShutdown {
    /// How long the route stays announced with 65535:0 before the withdraw.
    #[serde(default = "default_graceful_wait", with = "humantime_serde")]
    pub wait: Duration,
    /// Also for health withdraws. Off by default: a failing edge is an emergency, and
    /// traffic should leave it now.
    #[serde(default)]
    pub on_health_withdraw: bool,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawCheck")]
pub struct CheckSettings {
    pub name: String,
    pub kind: CheckKind,
    pub timeout: Duration,
    /// How often this check runs; the agent's `interval` when unset. Every check runs at
    /// `fast_interval` while a change is pending.
    pub interval: Option<Duration>,
    pub class: CheckClass,
}

#[derive(Clone, Debug)]
pub enum CheckKind {
    /// GET the URL; healthy on 2xx.
    Http { url: String },
    /// Healthy when a TCP connection opens.
    Tcp { address: String },
    /// Healthy when the command exits 0.
    Exec { command: Vec<String> },
    /// Maintenance switch: unhealthy while the file exists.
    File { path: PathBuf },
    /// Healthy while an XDP program is attached to the interface.
    Xdp { interface: String },
    /// GET a Prometheus text page; healthy while every sample of `metric` (any labels)
    /// is at most `max`. A page without the metric fails.
    Metric {
        url: String,
        metric: String,
        max: f64,
    },
}

/// A check as written: one flat map, so unknown keys can be refused (serde cannot refuse
/// them through a flattened enum).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    name: String,
    kind: RawKind,
    url: Option<String>,
    address: Option<String>,
    command: Option<Vec<String>>,
    path: Option<PathBuf>,
    interface: Option<String>,
    metric: Option<String>,
    max: Option<f64>,
    #[serde(default = "default_check_timeout", with = "humantime_serde")]
    timeout: Duration,
    #[serde(default, with = "humantime_serde")]
    interval: Option<Duration>,
    #[serde(default)]
    class: CheckClass,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawKind {
    Http,
    Tcp,
    Exec,
    File,
    Xdp,
    Metric,
}

impl TryFrom<RawCheck> for CheckSettings {
    type Error = String;

    fn try_from(raw: RawCheck) -> Result<Self, String> {
        let need = |value: Option<String>, field: &str| {
            value.ok_or_else(|| format!("this kind needs `{field}`"))
        };
        let kind = match raw.kind {
            RawKind::Http => CheckKind::Http {
                url: need(raw.url, "url")?,
            },
            RawKind::Tcp => CheckKind::Tcp {
                address: need(raw.address, "address")?,
            },
            RawKind::Exec => match raw.command {
                Some(command) if !command.is_empty() => CheckKind::Exec { command },
                _ => return Err("this kind needs a non-empty `command`".into()),
            },
            RawKind::File => CheckKind::File {
                path: raw.path.ok_or("this kind needs `path`")?,
            },
            RawKind::Xdp => CheckKind::Xdp {
                interface: need(raw.interface, "interface")?,
            },
            RawKind::Metric => CheckKind::Metric {
                url: need(raw.url, "url")?,
                metric: need(raw.metric, "metric")?,
                max: raw.max.ok_or("this kind needs `max`")?,
            },
        };
        Ok(CheckSettings {
            name: raw.name,
            kind,
            timeout: raw.timeout,
            interval: raw.interval,
            class: raw.class,
        })
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckClass {
    /// Failure means this PoP cannot serve: may withdraw.
    #[default]
    Local,
    /// A dependency every PoP shares (the origin): reported, never a reason to withdraw.
    Shared,
    /// Failure makes this PoP less preferred (announced with the speaker's degraded
    /// attributes: a longer AS path, a higher MED) and never withdraws: a soft drain.
    Degrade,
}

impl CheckClass {
    /// The `class` label of the check metrics.
    pub fn label(self) -> &'static str {
        match self {
            CheckClass::Local => "local",
            CheckClass::Shared => "shared",
            CheckClass::Degrade => "degrade",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum SpeakerSettings {
    Exabgp {
        #[serde(default)]
        communities: Vec<String>,
        med: Option<u32>,
        #[serde(default)]
        as_path_prepend: u32,
        /// The agent's own AS, prepended `as_path_prepend` times.
        local_as: Option<u32>,
        /// Instead of `med` and `as_path_prepend` while a `degrade` check fails.
        #[serde(default)]
        degraded: DegradedAttributes,
        #[serde(default = "default_ack_timeout", with = "humantime_serde")]
        ack_timeout: Duration,
    },
    Bird {
        include_file: PathBuf,
        socket: PathBuf,
        #[serde(default = "default_birdc")]
        birdc: PathBuf,
        #[serde(default = "default_define")]
        define_v4: String,
        #[serde(default = "default_define_v6")]
        define_v6: String,
        #[serde(default = "default_birdc_timeout", with = "humantime_serde")]
        timeout: Duration,
    },
}

/// What a degraded PoP announces with ExaBGP (BIRD: its export filter decides).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DegradedAttributes {
    pub med: Option<u32>,
    /// Times `local_as` is prepended.
    #[serde(default)]
    pub as_path_prepend: u32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardSettings {
    /// Other PoPs' agent `/status` URLs.
    pub peers: Vec<String>,
    /// Veto a health withdraw only while the peers known to be withdrawn leave fewer
    /// than this many that announce or did not answer.
    pub min_other_pops_announcing: usize,
    /// A peer that has not answered within this is unknown.
    #[serde(default = "default_check_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The longest a veto holds a failing PoP announced; then it withdraws anyway.
    #[serde(default = "default_max_veto", with = "humantime_serde")]
    pub max_veto: Duration,
}

use edge_kit::config_file::FieldErrors;
pub use edge_kit::config_file::{ConfigErrors, FieldError};

impl Settings {
    pub fn load(path: &Path) -> Result<Settings, ConfigErrors> {
        edge_kit::config_file::load(path, Self::parse)
    }

    /// Parses and validates YAML text; errors are `(field path, message)` pairs: the
    /// first that stops parsing, or every rule the parsed file breaks.
    pub fn parse(text: &str) -> Result<Settings, Vec<FieldError>> {
        let config: Settings = edge_kit::config_file::parse_yaml(text)?;
        config.validate().into_result(|| config)
    }

    pub fn policy(&self) -> Policy {
        Policy {
            rise: self.rise,
            fall: self.fall,
            hold_down: self.hold_down,
            dampening: self.dampening.as_ref().map(|d| Dampening {
                penalty: d.penalty,
                half_life: d.half_life,
                suppress: d.suppress,
                reuse: d.reuse,
                max_suppress: d.max_suppress,
            }),
        }
    }

    pub fn drain_flag(&self) -> PathBuf {
        self.state_dir.join("drain")
    }

    /// The fields of `self` that differ from `running` and only take effect at a restart
    /// (the listener, the speaker and what it announces).
    pub fn needs_restart(&self, running: &Settings) -> Vec<&'static str> {
        let mut fields = Vec::new();
        if self.pop != running.pop {
            fields.push("pop");
        }
        if self.prefixes != running.prefixes {
            fields.push("prefixes");
        }
        if self.state_dir != running.state_dir {
            fields.push("state_dir");
        }
        if self.admin_listen != running.admin_listen {
            fields.push("admin_listen");
        }
        if self.speaker != running.speaker {
            fields.push("speaker");
        }
        fields
    }

    fn validate(&self) -> FieldErrors {
        let mut errors = FieldErrors::default();
        let mut fail = |field: &str, message: &str| errors.add(field, message);
        if self.prefixes.is_empty() {
            fail("prefixes", "must list at least one prefix");
        }
        if self.rise == 0 {
            fail("rise", "must be at least 1");
        }
        if self.fall == 0 {
            fail("fall", "must be at least 1");
        }
        if self.interval.is_zero() {
            fail("interval", "must be positive");
        }
        if self.fast_interval.is_zero() || self.fast_interval > self.interval {
            fail(
                "fast_interval",
                "must be positive and not longer than interval",
            );
        }
        if let Some(d) = &self.dampening
            && !(d.reuse < d.suppress && d.penalty > 0.0 && !d.half_life.is_zero())
        {
            fail(
                "dampening",
                "needs reuse < suppress, a positive penalty and half_life",
            );
        }
        if let Some(g) = &self.graceful_shutdown
            && (g.wait.is_zero() || g.wait > MAX_GRACEFUL_WAIT)
        {
            fail(
                "graceful_shutdown.wait",
                "must be positive and at most 1m (use `graceful_shutdown: null` to withdraw at once)",
            );
        }
        if let SpeakerSettings::Exabgp {
            local_as,
            as_path_prepend,
            degraded,
            ..
        } = &self.speaker
        {
            if (*as_path_prepend > 0 || degraded.as_path_prepend > 0) && local_as.is_none() {
                fail("speaker.local_as", "is needed to prepend the AS path");
            }
            let degrades = self.checks.iter().any(|c| c.class == CheckClass::Degrade);
            if degrades && degraded.med.is_none() && degraded.as_path_prepend == 0 {
                fail(
                    "speaker.degraded",
                    "must set med or as_path_prepend for the degrade checks to change anything",
                );
            }
        }
        if !self.checks.iter().any(|c| c.class == CheckClass::Local) {
            fail(
                "checks",
                "needs at least one local check (shared checks never withdraw)",
            );
        }
        if let Some(guard) = &self.guard
            && guard.peers.len() < guard.min_other_pops_announcing
        {
            fail(
                "guard.min_other_pops_announcing",
                "is larger than the number of peers",
            );
        }
        errors
    }
}

fn default_interval() -> Duration {
    Duration::from_millis(500)
}
fn default_fast_interval() -> Duration {
    Duration::from_millis(100)
}
fn default_rise() -> u32 {
    10
}
fn default_fall() -> u32 {
    3
}
fn default_hold_down() -> Duration {
    Duration::from_secs(5)
}
fn default_dampening() -> Option<DampeningSettings> {
    Some(DampeningSettings {
        penalty: default_penalty(),
        half_life: default_half_life(),
        suppress: default_suppress(),
        reuse: default_reuse(),
        max_suppress: default_max_suppress(),
    })
}
fn default_penalty() -> f64 {
    1000.0
}
fn default_half_life() -> Duration {
    Duration::from_secs(30)
}
fn default_suppress() -> f64 {
    2500.0
}
fn default_reuse() -> f64 {
    750.0
}
fn default_max_suppress() -> Duration {
    Duration::from_secs(300)
}
fn default_graceful_shutdown() -> Option<GracefulShutdown> {
    Some(GracefulShutdown {
        wait: default_graceful_wait(),
        on_health_withdraw: false,
    })
}
fn default_graceful_wait() -> Duration {
    Duration::from_secs(5)
}
/// A drain or a stop waits this long at most: within systemd's 90 s stop timeout.
const MAX_GRACEFUL_WAIT: Duration = Duration::from_secs(60);
fn default_true() -> bool {
    true
}
fn default_max_veto() -> Duration {
    Duration::from_secs(300)
}
fn default_check_timeout() -> Duration {
    Duration::from_millis(300)
}
fn default_ack_timeout() -> Duration {
    Duration::from_secs(2)
}
fn default_birdc() -> PathBuf {
    PathBuf::from("birdc")
}
fn default_define() -> String {
    "ANYCAST_V4".into()
}
fn default_define_v6() -> String {
    "ANYCAST_V6".into()
}
fn default_birdc_timeout() -> Duration {
    Duration::from_secs(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
pop: fra1
prefixes: ["192.0.2.10/32", "2001:db8::10/128"]
state_dir: /var/lib/bgp-agent
admin_listen: 127.0.0.1:9181
checks:
  - { name: edge, kind: http, url: "http://127.0.0.1:9180/readyz" }
  - { name: origin, kind: tcp, address: "127.0.0.1:4222", class: shared }
  - { name: maintenance, kind: file, path: /etc/edge/maintenance }
speaker: { kind: bird, include_file: /run/bgp-agent/anycast.conf, socket: /run/bird/bird.ctl }
"#;

    #[test]
    fn parses_with_defaults() {
        let c = Settings::parse(GOOD).unwrap();
        assert_eq!(
            (c.rise, c.fall, c.interval),
            (10, 3, Duration::from_millis(500))
        );
        assert!(c.dampening.is_some());
        assert_eq!(c.checks[1].class, CheckClass::Shared);
        assert!(matches!(c.speaker, SpeakerSettings::Bird { .. }));
    }

    #[test]
    fn errors_name_the_field() {
        let first = |text: &str| Settings::parse(text).unwrap_err().remove(0);
        let FieldError { field, message } =
            first(&GOOD.replace("pop: fra1", "pop: fra1\nrisee: 3"));
        assert_eq!(field, "risee");
        assert!(message.contains("unknown field `risee`"), "{message}");
        let FieldError { field, .. } = first(&GOOD.replace("192.0.2.10/32", "192.0.2.300/32"));
        assert_eq!(field, "prefixes[0]");
        let FieldError { field, .. } = first(&GOOD.replace("class: shared", "class: global"));
        assert_eq!(field, "checks[1].class");
        let FieldError { field, .. } = first(&GOOD.replace("kind: tcp,", "kind: tcp, urll: x,"));
        assert_eq!(field, "checks[1].urll");
        let no_address = GOOD.replace("kind: tcp, address: \"127.0.0.1:4222\",", "kind: tcp,");
        let FieldError { field, message } = first(&no_address);
        assert_eq!(field, "checks[1]");
        assert!(message.contains("this kind needs `address`"), "{message}");
        let only_shared = GOOD
            .replace(
                "url: \"http://127.0.0.1:9180/readyz\" }",
                "url: \"http://x/\", class: shared }",
            )
            .replace(
                "  - { name: maintenance, kind: file, path: /etc/edge/maintenance }\n",
                "",
            );
        assert_eq!(first(&only_shared).field, "checks");
    }

    #[test]
    fn degrade_checks_and_graceful_shutdown_rules() {
        let errors = |text: &str| Settings::parse(text).unwrap_err();
        let c = Settings::parse(GOOD).unwrap();
        let graceful = c.graceful_shutdown.expect("on by default");
        assert_eq!(graceful.wait, Duration::from_secs(5));
        assert!(!graceful.on_health_withdraw);
        let metric = "  - { name: fill, kind: metric, url: \"http://127.0.0.1:9180/metrics\", metric: edge_spool_fill_ratio, max: 0.5, class: degrade }\n";
        let degrading = GOOD.replacen("checks:\n", &format!("checks:\n{metric}"), 1);
        let c = Settings::parse(&degrading).unwrap();
        assert!(matches!(&c.checks[0].kind, CheckKind::Metric { max, .. } if *max == 0.5));
        assert_eq!(c.checks[0].class, CheckClass::Degrade);
        // ExaBGP must be told how to degrade, and prepending needs the AS.
        let exabgp = degrading.replace(
            "speaker: { kind: bird, include_file: /run/bgp-agent/anycast.conf, socket: /run/bird/bird.ctl }",
            "speaker: { kind: exabgp }",
        );
        assert_eq!(errors(&exabgp)[0].field, "speaker.degraded");
        let no_as = exabgp.replace(
            "{ kind: exabgp }",
            "{ kind: exabgp, degraded: { as_path_prepend: 2 } }",
        );
        assert_eq!(errors(&no_as)[0].field, "speaker.local_as");
        let fine = exabgp.replace(
            "{ kind: exabgp }",
            "{ kind: exabgp, local_as: 65001, degraded: { as_path_prepend: 2 } }",
        );
        assert!(Settings::parse(&fine).is_ok());
        let no_max = degrading.replace(", max: 0.5", "");
        assert!(errors(&no_max)[0].message.contains("this kind needs `max`"));
        let slow = GOOD.replace("pop: fra1", "pop: fra1\ngraceful_shutdown: { wait: 2m }");
        assert_eq!(errors(&slow)[0].field, "graceful_shutdown.wait");
        let off = GOOD.replace("pop: fra1", "pop: fra1\ngraceful_shutdown: null");
        assert!(Settings::parse(&off).unwrap().graceful_shutdown.is_none());
    }

    #[test]
    fn every_broken_rule_is_named_at_once() {
        let bad = GOOD.replace(
            "pop: fra1",
            "pop: fra1\nrise: 0\nfall: 0\nfast_interval: 2s",
        );
        let fields: Vec<String> = Settings::parse(&bad)
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(fields, ["rise", "fall", "fast_interval"]);
    }

    #[test]
    fn restart_only_fields_are_reported() {
        let running = Settings::parse(GOOD).unwrap();
        let live = Settings::parse(&GOOD.replace("pop: fra1", "pop: fra1\nrise: 4")).unwrap();
        assert!(live.needs_restart(&running).is_empty());
        let moved = Settings::parse(
            &GOOD
                .replace("9181", "9182")
                .replace("/run/bird/bird.ctl", "/run/bird/other.ctl"),
        )
        .unwrap();
        assert_eq!(moved.needs_restart(&running), ["admin_listen", "speaker"]);
    }
}
