//! `checks:` what the agent runs each round to decide whether this PoP may announce.

use std::path::PathBuf;
use std::time::Duration;

use edge_kit::config_file::FieldErrors;
use serde::Deserialize;

/// One health check, validated.
#[derive(Clone, Debug)]
pub struct CheckSettings {
    /// The check's name in logs, metrics and `/status`.
    pub name: String,
    /// What it does.
    pub kind: CheckKind,
    /// A check that has not answered within this failed.
    pub timeout: Duration,
    /// How often this check runs; the agent's `interval` when unset. Every check runs at
    /// `fast_interval` while a change is pending.
    pub interval: Option<Duration>,
    /// What a failure means.
    pub class: CheckClass,
}

/// What a check does.
#[derive(Clone, Debug)]
pub enum CheckKind {
    /// GET the URL; healthy on 2xx.
    Http {
        /// The URL.
        url: String,
    },
    /// Healthy when a TCP connection opens.
    Tcp {
        /// `host:port`.
        address: String,
    },
    /// Healthy when the command exits 0.
    Exec {
        /// The program and its arguments, run without a shell.
        command: Vec<String>,
    },
    /// Maintenance switch: unhealthy while the file exists.
    File {
        /// The switch file.
        path: PathBuf,
    },
    /// Healthy while an XDP program is attached to the interface.
    Xdp {
        /// The interface.
        interface: String,
    },
    /// GET a Prometheus text page; healthy while every sample of `metric` (any labels)
    /// is at most `max`. A page without the metric fails.
    Metric {
        /// The page.
        url: String,
        /// The metric's name.
        metric: String,
        /// The highest healthy value.
        max: f64,
    },
}

/// What a check's failure means for the route.
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

/// A check as written: one flat map, so unknown keys can be refused (serde cannot refuse
/// them through a flattened enum).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawCheck {
    /// Required: the check's name in logs, metrics and `/status`.
    name: Option<String>,
    /// Required: what the check does; it names the fields it needs.
    kind: Option<RawKind>,
    url: Option<String>,
    address: Option<String>,
    command: Option<Vec<String>>,
    path: Option<PathBuf>,
    interface: Option<String>,
    metric: Option<String>,
    max: Option<f64>,
    /// A check that has not answered within this failed. Default 300ms.
    #[serde(with = "humantime_serde")]
    timeout: Duration,
    /// Default: the agent's `interval`.
    #[serde(with = "humantime_serde")]
    interval: Option<Duration>,
    /// Default `local`.
    class: CheckClass,
}

impl Default for RawCheck {
    fn default() -> Self {
        Self {
            name: None,
            kind: None,
            url: None,
            address: None,
            command: None,
            path: None,
            interface: None,
            metric: None,
            max: None,
            timeout: Duration::from_millis(300),
            interval: None,
            class: CheckClass::default(),
        }
    }
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawKind {
    Http,
    Tcp,
    Exec,
    File,
    Xdp,
    Metric,
}

/// Every check of `raw`; each one missing a field its kind needs is named
/// (`checks[1]: this kind needs `address``).
pub(super) fn validate(raw: Vec<RawCheck>, errors: &mut FieldErrors) -> Vec<CheckSettings> {
    raw.into_iter()
        .enumerate()
        .filter_map(|(i, check)| {
            check
                .validate()
                .map_err(|message| errors.add(format!("checks[{i}]"), message))
                .ok()
        })
        .collect()
}

impl RawCheck {
    fn validate(self) -> Result<CheckSettings, String> {
        let need = |value: Option<String>, field: &str| {
            value.ok_or_else(|| format!("this kind needs `{field}`"))
        };
        let name = self.name.ok_or("needs a `name`")?;
        let kind = match self.kind.ok_or("needs a `kind`")? {
            RawKind::Http => CheckKind::Http {
                url: need(self.url, "url")?,
            },
            RawKind::Tcp => CheckKind::Tcp {
                address: need(self.address, "address")?,
            },
            RawKind::Exec => match self.command {
                Some(command) if !command.is_empty() => CheckKind::Exec { command },
                _ => return Err("this kind needs a non-empty `command`".into()),
            },
            RawKind::File => CheckKind::File {
                path: self.path.ok_or("this kind needs `path`")?,
            },
            RawKind::Xdp => CheckKind::Xdp {
                interface: need(self.interface, "interface")?,
            },
            RawKind::Metric => CheckKind::Metric {
                url: need(self.url, "url")?,
                metric: need(self.metric, "metric")?,
                max: self.max.ok_or("this kind needs `max`")?,
            },
        };
        Ok(CheckSettings {
            name,
            kind,
            timeout: self.timeout,
            interval: self.interval,
            class: self.class,
        })
    }
}
