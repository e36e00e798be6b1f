//! Prometheus plumbing every binary uses the same way: the registry that puts the `pop`
//! label on every series, the text encoding for `/metrics`, and the label sets that
//! several subsystems share. Each subsystem owns its own metrics and registers them into
//! a sub-registry of this one.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::registry::Registry;

/// A registry whose every series carries `pop="<pop>"`.
pub fn registry_for_pop(pop: &str) -> Registry {
    Registry::with_labels([("pop".into(), pop.to_owned().into())].into_iter())
}

/// The Prometheus text exposition of `registry`.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing to a String cannot fail");
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
