//! The agent's YAML configuration, parsed once into typed [`Settings`]. Unknown keys are
//! errors; every error names the file and the field.
//!
//! As the edge's: the file as written (`Raw…`, each default stated once in its
//! `impl Default`) is validated into settings, and every rule it breaks is reported
//! at once. One module per list-like section (`checks`, `speaker`).

mod checks;
mod speaker;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use edge_kit::config_file::FieldErrors;
pub use edge_kit::config_file::{ConfigErrors, FieldError};
use ipnet::IpNet;
use serde::Deserialize;

pub use checks::{CheckClass, CheckKind, CheckSettings};
pub use speaker::{BirdSettings, DegradedAttributes, ExabgpSettings, SpeakerSettings};

use crate::hysteresis::{Dampening, Policy};

/// Validated settings, ready to use.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The PoP's name, in logs, metrics and `/status`.
    pub pop: String,
    /// The anycast prefixes announced.
    pub prefixes: Vec<IpNet>,
    /// Holds the drain flag, so a drain survives restarts.
    pub state_dir: PathBuf,
    /// Where `/status`, `/metrics` and the drain endpoints listen.
    pub admin_listen: SocketAddr,
    /// How often the checks run.
    pub interval: Duration,
    /// Re-check interval while a change is pending (a failure while announced, a
    /// success while withdrawn).
    pub fast_interval: Duration,
    /// Rise, fall, hold-down and dampening: what the hysteresis decides with.
    pub policy: Policy,
    /// Withdraw when the agent stops.
    pub withdraw_on_exit: bool,
    /// RFC 8326: before a drain or exit withdraws, announce with GRACEFUL_SHUTDOWN
    /// (65535:0) so upstreams move traffic away first. `None`: withdraw at once.
    pub graceful_shutdown: Option<GracefulShutdown>,
    /// What decides whether this PoP may announce.
    pub checks: Vec<CheckSettings>,
    /// How the route is announced and withdrawn.
    pub speaker: SpeakerSettings,
    /// Asks other PoPs before a health withdraw; `None`: never asks.
    pub guard: Option<GuardSettings>,
}

/// RFC 8326 graceful shutdown: how long, and for which withdraws.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GracefulShutdown {
    /// How long the route stays announced with 65535:0 before the withdraw. Default 5s.
    #[serde(with = "humantime_serde")]
    pub wait: Duration,
    /// Also for health withdraws. Default off: a failing edge is an emergency, and
    /// traffic should leave it now.
    pub on_health_withdraw: bool,
}

impl Default for GracefulShutdown {
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(5),
            on_health_withdraw: false,
        }
    }
}

/// The peer guard, validated.
#[derive(Clone, Debug)]
pub struct GuardSettings {
    /// Other PoPs' agent `/status` URLs.
    pub peers: Vec<String>,
    /// Veto a health withdraw only while the peers known to be withdrawn leave fewer
    /// than this many that announce or did not answer.
    pub min_other_pops_announcing: usize,
    /// A peer that has not answered within this is unknown.
    pub timeout: Duration,
    /// The longest a veto holds a failing PoP announced; then it withdraws anyway.
    pub max_veto: Duration,
}

impl Settings {
    /// Reads and validates the file at `path`; every error names the file and field.
    pub fn load(path: &Path) -> Result<Settings, ConfigErrors> {
        edge_kit::config_file::load(path, Self::parse)
    }

    /// Parses and validates YAML text: the first error that stops parsing, or every
    /// rule the parsed file breaks.
    pub fn parse(text: &str) -> Result<Settings, Vec<FieldError>> {
        edge_kit::config_file::parse_yaml(text, RawSettings::validate)
    }

    /// The file whose presence means "drained" (written by `bgp-agent drain`).
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
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawSettings {
    /// Required: the PoP's name, in logs, metrics and `/status`.
    pop: Option<String>,
    /// Required: the anycast prefixes announced.
    prefixes: Vec<IpNet>,
    /// Required.
    state_dir: Option<PathBuf>,
    /// Required: where `/status`, `/metrics` and the drain endpoints listen.
    admin_listen: Option<SocketAddr>,
    /// How often the checks run. Default 500ms.
    #[serde(with = "humantime_serde")]
    interval: Duration,
    /// Default 100ms.
    #[serde(with = "humantime_serde")]
    fast_interval: Duration,
    /// Passing rounds in a row before a withdrawn route returns. Default 10.
    rise: u32,
    /// Failing rounds in a row before an announced route is withdrawn. Default 3.
    fall: u32,
    /// After a withdraw, the shortest time before the route may return. Default 5s.
    #[serde(with = "humantime_serde")]
    hold_down: Duration,
    /// RFC 2439-style flap dampening; `null` turns it off. Default on, with the
    /// values of [`RawDampening`]'s defaults.
    dampening: Option<RawDampening>,
    /// Withdraw when the agent stops. Default true.
    withdraw_on_exit: bool,
    /// `null`: withdraw at once. Default on, with [`GracefulShutdown`]'s defaults.
    graceful_shutdown: Option<GracefulShutdown>,
    /// Required: at least one `local` check.
    checks: Vec<checks::RawCheck>,
    /// Required.
    speaker: Option<speaker::RawSpeaker>,
    /// Default: no guard.
    guard: Option<RawGuard>,
}

impl Default for RawSettings {
    fn default() -> Self {
        Self {
            pop: None,
            prefixes: Vec::new(),
            state_dir: None,
            admin_listen: None,
            interval: Duration::from_millis(500),
            fast_interval: Duration::from_millis(100),
            rise: 10,
            fall: 3,
            hold_down: Duration::from_secs(5),
            dampening: Some(RawDampening::default()),
            withdraw_on_exit: true,
            graceful_shutdown: Some(GracefulShutdown::default()),
            checks: Vec::new(),
            speaker: None,
            guard: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDampening {
    /// Added at each withdraw. Default 1000.
    penalty: f64,
    /// Default 30s.
    #[serde(with = "humantime_serde")]
    half_life: Duration,
    /// Above this the route stays withdrawn. Default 2500.
    suppress: f64,
    /// Below this it may return. Default 750.
    reuse: f64,
    /// The longest a route stays suppressed. Default 5m.
    #[serde(with = "humantime_serde")]
    max_suppress: Duration,
}

impl Default for RawDampening {
    fn default() -> Self {
        Self {
            penalty: 1000.0,
            half_life: Duration::from_secs(30),
            suppress: 2500.0,
            reuse: 750.0,
            max_suppress: Duration::from_secs(300),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawGuard {
    /// Required: other PoPs' agent `/status` URLs.
    peers: Vec<String>,
    /// Required.
    min_other_pops_announcing: Option<usize>,
    /// Default 300ms.
    #[serde(with = "humantime_serde")]
    timeout: Duration,
    /// Default 5m.
    #[serde(with = "humantime_serde")]
    max_veto: Duration,
}

impl Default for RawGuard {
    fn default() -> Self {
        Self {
            peers: Vec::new(),
            min_other_pops_announcing: None,
            timeout: Duration::from_millis(300),
            max_veto: Duration::from_secs(300),
        }
    }
}

impl RawSettings {
    fn validate(self) -> Result<Settings, Vec<FieldError>> {
        let mut errors = FieldErrors::default();
        self.check_timing(&mut errors);
        let pop = errors.required("pop", self.pop);
        let state_dir = errors.required("state_dir", self.state_dir);
        let admin_listen = errors.required("admin_listen", self.admin_listen);
        let speaker = errors.required("speaker", self.speaker);
        if self.prefixes.is_empty() {
            errors.add("prefixes", "must list at least one prefix");
        }
        let checks = checks::validate(self.checks, &mut errors);
        let degrades = checks.iter().any(|c| c.class == CheckClass::Degrade);
        let speaker = speaker.map(|raw| raw.validate(degrades, &mut errors));
        if !checks.iter().any(|c| c.class == CheckClass::Local) {
            errors.add(
                "checks",
                "needs at least one local check (shared checks never withdraw)",
            );
        }
        let guard = self.guard.and_then(|raw| raw.validate(&mut errors));
        let (Some(pop), Some(state_dir), Some(admin_listen), Some(speaker)) =
            (pop, state_dir, admin_listen, speaker)
        else {
            return Err(errors.into_errors());
        };
        errors.into_result(|| Settings {
            pop,
            prefixes: self.prefixes,
            state_dir,
            admin_listen,
            interval: self.interval,
            fast_interval: self.fast_interval,
            policy: Policy {
                rise: self.rise,
                fall: self.fall,
                hold_down: self.hold_down,
                dampening: self.dampening.map(|d| Dampening {
                    penalty: d.penalty,
                    half_life: d.half_life,
                    suppress: d.suppress,
                    reuse: d.reuse,
                    max_suppress: d.max_suppress,
                }),
            },
            withdraw_on_exit: self.withdraw_on_exit,
            graceful_shutdown: self.graceful_shutdown,
            checks,
            speaker,
            guard,
        })
    }

    /// The round's counts and intervals, dampening and the graceful-shutdown wait.
    fn check_timing(&self, errors: &mut FieldErrors) {
        if self.rise == 0 {
            errors.add("rise", "must be at least 1");
        }
        if self.fall == 0 {
            errors.add("fall", "must be at least 1");
        }
        if self.interval.is_zero() {
            errors.add("interval", "must be positive");
        }
        if self.fast_interval.is_zero() || self.fast_interval > self.interval {
            errors.add(
                "fast_interval",
                "must be positive and not longer than interval",
            );
        }
        if let Some(d) = &self.dampening
            && !(d.reuse < d.suppress && d.penalty > 0.0 && !d.half_life.is_zero())
        {
            errors.add(
                "dampening",
                "needs reuse < suppress, a positive penalty and half_life",
            );
        }
        if let Some(g) = &self.graceful_shutdown
            && (g.wait.is_zero() || g.wait > MAX_GRACEFUL_WAIT)
        {
            errors.add(
                "graceful_shutdown.wait",
                "must be positive and at most 1m (use `graceful_shutdown: null` to withdraw at once)",
            );
        }
    }
}

impl RawGuard {
    fn validate(self, errors: &mut FieldErrors) -> Option<GuardSettings> {
        let minimum = errors.required(
            "guard.min_other_pops_announcing",
            self.min_other_pops_announcing,
        )?;
        if self.peers.len() < minimum {
            errors.add(
                "guard.min_other_pops_announcing",
                "is larger than the number of peers",
            );
        }
        Some(GuardSettings {
            peers: self.peers,
            min_other_pops_announcing: minimum,
            timeout: self.timeout,
            max_veto: self.max_veto,
        })
    }
}

/// A drain or a stop waits this long at most: within systemd's 90 s stop timeout.
const MAX_GRACEFUL_WAIT: Duration = Duration::from_secs(60);

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
            (c.policy.rise, c.policy.fall, c.interval),
            (10, 3, Duration::from_millis(500))
        );
        assert!(c.policy.dampening.is_some());
        assert_eq!(c.checks[1].class, CheckClass::Shared);
        assert!(matches!(c.speaker, SpeakerSettings::Bird(_)));
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
    fn required_fields_and_the_speaker_s_fields_are_named() {
        let fields = |text: &str| -> Vec<String> {
            Settings::parse(text)
                .unwrap_err()
                .into_iter()
                .map(|e| e.field)
                .collect()
        };
        let bare = GOOD
            .replace("pop: fra1\n", "")
            .replace("admin_listen: 127.0.0.1:9181\n", "");
        assert_eq!(fields(&bare), ["pop", "admin_listen"]);
        let no_socket = GOOD.replace(", socket: /run/bird/bird.ctl", "");
        assert_eq!(fields(&no_socket), ["speaker.socket"]);
        let typo = GOOD.replace("socket: /run", "sockett: /run");
        // serde buffers a tagged enum's map, so the path stops at the enum; the message
        // names the key.
        let refused = Settings::parse(&typo).unwrap_err();
        assert_eq!(refused[0].field, "speaker");
        assert!(refused[0].message.contains("unknown field `sockett`"));
        let guard = GOOD.replace("pop: fra1", "pop: fra1\nguard: { peers: [a] }");
        assert_eq!(fields(&guard), ["guard.min_other_pops_announcing"]);
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
