//! Prometheus metrics of the agent; every series carries the `pop` label.

use edge_kit::admin::AdminMetrics;
use edge_kit::metrics::ResultLabel;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PrefixLabel {
    pub prefix: String,
}

/// A BGP neighbor's address.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PeerLabel {
    pub peer: String,
}

/// 1 while the speaker's session with `peer` is established.
pub(crate) type Sessions = Family<PeerLabel, Gauge>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CheckLabel {
    pub check: String,
    pub class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CheckResultLabel {
    pub check: String,
    pub class: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ChangeLabel {
    pub change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SpeakerLabel {
    pub speaker: &'static str,
}

pub(crate) struct Metrics {
    registry: Registry,
    pub announced: Family<PrefixLabel, Gauge>,
    pub sessions: Sessions,
    pub transitions: Family<ChangeLabel, Counter>,
    pub last_change_timestamp_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub check_results: Family<CheckResultLabel, Counter>,
    pub check_seconds: Family<CheckLabel, Histogram>,
    pub penalty: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub suppressed: Gauge,
    pub drained: Gauge,
    pub graceful_shutdown: Gauge,
    pub degraded: Gauge,
    pub guard_blocked: Counter,
    pub guard_veto_expired: Counter,
    pub guard_peers_unknown: Gauge,
    pub speaker_seconds: Family<SpeakerLabel, Histogram>,
    pub speaker_errors: Family<SpeakerLabel, Counter>,
    pub config_reloads: Family<ResultLabel, Counter>,
    pub admin: AdminMetrics,
}

impl Metrics {
    pub(crate) fn new(pop: &str) -> Self {
        let mut registry = Registry::with_prefix_and_labels(
            "bgp_agent",
            [("pop".into(), pop.to_owned().into())].into_iter(),
        );
        let m = Self {
            registry: Registry::default(),
            announced: Family::default(),
            sessions: Family::default(),
            transitions: Family::default(),
            last_change_timestamp_seconds: Gauge::default(),
            check_results: Family::default(),
            check_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 14))
            }),
            penalty: Gauge::default(),
            suppressed: Gauge::default(),
            drained: Gauge::default(),
            graceful_shutdown: Gauge::default(),
            degraded: Gauge::default(),
            guard_blocked: Counter::default(),
            guard_veto_expired: Counter::default(),
            guard_peers_unknown: Gauge::default(),
            speaker_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 14))
            }),
            speaker_errors: Family::default(),
            config_reloads: Family::default(),
            admin: AdminMetrics::default(),
        };
        edge_kit::register_fields!(&mut registry, m, {
            announced: "1 while the prefix is announced",
            sessions as "session_up": "1 while the speaker's BGP session with the peer is established (ExaBGP: with neighbor-changes in its api block)",
            transitions: "Route changes, by change",
            last_change_timestamp_seconds: "Unix time of the last route change this agent decided (0: none yet)",
            check_results: "Check results, by check, class and result",
            check_seconds: "Check durations",
            penalty: "Flap-dampening penalty",
            suppressed: "1 while re-announcing is suppressed by dampening",
            drained: "1 while drained by an operator",
            graceful_shutdown: "1 while the prefixes are announced with GRACEFUL_SHUTDOWN (65535:0) before a withdraw",
            degraded: "1 while the route is announced less preferred because a degrade check fails",
            guard_blocked: "Withdraws the peer guard refused",
            guard_veto_expired: "Vetoes that outlived guard.max_veto, after which the agent withdrew anyway",
            guard_peers_unknown: "Peers that did not answer the guard's last question in time",
            speaker_seconds: "Decision to speaker acknowledgement",
            speaker_errors: "Speaker failures",
            config_reloads: "Config reloads on SIGHUP, by result (ok, failed: the running config was kept)",
        });
        let admin = AdminMetrics::register(&mut registry);
        edge_kit::metrics::register_build_info(&mut registry, env!("CARGO_PKG_VERSION"));
        Self {
            registry,
            admin,
            ..m
        }
    }

    pub(crate) fn encode(&self) -> String {
        edge_kit::metrics::encode(&self.registry)
    }
}
