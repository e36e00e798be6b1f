//! Prometheus plumbing every binary uses the same way: the registry that puts the `pop`
//! label on every series, the text encoding for `/metrics`, and the label sets that
//! several subsystems share. Each subsystem owns its own metrics and registers them into
//! a sub-registry of this one.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A registry whose every series carries `pop="<pop>"`.
pub fn registry_for_pop(pop: &str) -> Registry {
    Registry::with_labels([("pop".into(), pop.to_owned().into())].into_iter())
}

/// `build_info{version="…"} 1` under `registry`'s prefix: which build a process runs,
/// the same series on every binary, so a fleet view sees a rollout's progress.
pub fn register_build_info(registry: &mut Registry, version: &'static str) {
    let info = Family::<Version, Gauge>::default();
    info.get_or_create(&Version { version }).set(1);
    registry.register("build_info", "The running build, by version", info);
}

/// Registers fields of `$metrics` into `$registry` (a `&mut Registry`), each under its
/// own name (or the one after `as`) with its help text:
/// `register_fields!(registry, metrics, { acks: "Events acknowledged", sessions as "session_up": "…" })`.
/// The series' names are the fields' names, so the two cannot drift apart.
#[macro_export]
macro_rules! register_fields {
    ($registry:expr, $metrics:expr, { $($field:ident $(as $name:literal)? : $help:expr),* $(,)? }) => {{
        let registry: &mut ::prometheus_client::registry::Registry = $registry;
        $(registry.register($crate::register_fields!(@name $field $($name)?), $help, $metrics.$field.clone());)*
    }};
    (@name $field:ident) => { stringify!($field) };
    (@name $field:ident $name:literal) => { $name };
}

/// The Prometheus text exposition of `registry`.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    #[expect(clippy::expect_used, reason = "writing to a String cannot fail")]
    prometheus_client::encoding::text::encode(&mut out, registry).expect("writes to a String");
    out
}

/// `reason="…"`: why something was refused, failed or retried.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    /// A stable, lower_snake_case word.
    pub reason: &'static str,
}

/// `result="…"`: how an operation ended (`ok`, `failed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `ok` or `failed`.
    pub result: &'static str,
}

/// `version="…"`: a build's version.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Version {
    version: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct TwoCounters {
        acks: prometheus_client::metrics::counter::Counter,
        sessions: Gauge,
    }

    #[test]
    fn register_fields_names_series_after_fields_or_as_told() {
        let metrics = TwoCounters::default();
        let mut registry = registry_for_pop("fra1");
        crate::register_fields!(registry.sub_registry_with_prefix("agent"), metrics, {
            acks: "Events acknowledged",
            sessions as "session_up": "Sessions established",
        });
        metrics.acks.inc();
        metrics.sessions.set(2);
        let text = encode(&registry);
        assert!(
            text.contains("# HELP agent_acks Events acknowledged."),
            "{text}"
        );
        assert!(text.contains(r#"agent_acks_total{pop="fra1"} 1"#), "{text}");
        assert!(text.contains(r#"agent_session_up{pop="fra1"} 2"#), "{text}");
    }

    #[test]
    fn build_info_carries_the_prefix_the_pop_and_the_version() {
        let mut registry = registry_for_pop("fra1");
        register_build_info(registry.sub_registry_with_prefix("bgp_agent"), "1.2.3");
        let text = encode(&registry);
        assert!(
            text.contains(r#"bgp_agent_build_info{pop="fra1",version="1.2.3"} 1"#),
            "{text}"
        );
    }
}
