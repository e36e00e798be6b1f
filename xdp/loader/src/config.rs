//! The loader's YAML configuration. Unknown keys are errors; errors name the file and
//! the field.

use std::net::SocketAddr;
use std::path::Path;

use edge_kit::config_file::FieldErrors;
pub use edge_kit::config_file::{ConfigErrors, FieldError};
use ipnet::IpNet;
use serde::Deserialize;
use xdp_common::{MAX_BURST, MAX_PROTECTED, MAX_RATE};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub pop: String,
    /// The PoP's public interface.
    pub interface: String,
    #[serde(default)]
    pub mode: Mode,
    pub metrics_listen: SocketAddr,
    /// The anycast prefixes: only traffic to these is filtered.
    pub protected: Vec<IpNet>,
    #[serde(default = "default_tcp_ports")]
    pub tcp_ports: Vec<u16>,
    /// UDP ports served on the protected prefixes (none today; QUIC later).
    #[serde(default)]
    pub udp_ports: Vec<u16>,
    /// Sources always passed: management, BGP peers, provider egress ranges.
    #[serde(default)]
    pub allowlist: Vec<IpNet>,
    #[serde(default)]
    pub blocklist: Vec<IpNet>,
    #[serde(default = "default_syn_rate")]
    pub syn_rate: Rate,
    #[serde(default = "default_icmp_rate")]
    pub icmp_rate: Rate,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Driver mode, falling back to skb (generic) mode with a warning.
    #[default]
    Auto,
    Driver,
    Skb,
}

/// A token bucket: `per_second` sustained, `burst` at once; 0 disables the limit.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    pub per_second: u64,
    pub burst: u64,
}

impl Settings {
    pub fn load(path: &Path) -> Result<Settings, ConfigErrors> {
        edge_kit::config_file::load(path, Self::parse)
    }

    /// Parses and validates YAML text; errors are every `(field path, message)` found.
    pub fn parse(text: &str) -> Result<Settings, Vec<FieldError>> {
        let config: Settings = edge_kit::config_file::parse_yaml(text)?;
        let mut errors = FieldErrors::default();
        if config.protected.is_empty() {
            errors.add("protected", "must list the anycast prefixes");
        }
        for v6 in [false, true] {
            let family = config
                .protected
                .iter()
                .filter(|p| matches!(p, IpNet::V6(_)) == v6)
                .count();
            if family > MAX_PROTECTED as usize {
                errors.add(
                    "protected",
                    format!("at most {MAX_PROTECTED} prefixes per address family"),
                );
            }
        }
        for (field, rate) in [
            ("syn_rate", config.syn_rate),
            ("icmp_rate", config.icmp_rate),
        ] {
            if rate.per_second > MAX_RATE || rate.burst > MAX_BURST {
                errors.add(
                    field,
                    format!("per_second at most {MAX_RATE}, burst at most {MAX_BURST}"),
                );
            }
        }
        errors.into_result(|| config)
    }
}

fn default_tcp_ports() -> Vec<u16> {
    vec![80, 443]
}
fn default_syn_rate() -> Rate {
    Rate {
        per_second: 200,
        burst: 400,
    }
}
fn default_icmp_rate() -> Rate {
    Rate {
        per_second: 1000,
        burst: 2000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_errors() {
        let c = Settings::parse("pop: fra1\ninterface: eth0\nmetrics_listen: 127.0.0.1:9182\nprotected: [192.0.2.0/24]\n").unwrap();
        assert_eq!((c.mode, c.tcp_ports.clone()), (Mode::Auto, vec![80, 443]));
        let errors = Settings::parse(
            "pop: a\ninterface: e\nmetrics_listen: 127.0.0.1:1\nprotected: [192.0.2.0/33]\n",
        )
        .unwrap_err();
        assert_eq!(errors[0].field, "protected[0]");
        let errors = Settings::parse("pop: a\ninterface: e\nmetrics_listen: 127.0.0.1:1\nprotected: [192.0.2.0/24]\nmod: skb\n").unwrap_err();
        assert!(
            errors[0].message.contains("unknown field `mod`"),
            "{errors:?}"
        );
    }

    #[test]
    fn every_bad_field_is_named_at_once() {
        let errors = Settings::parse(
            "pop: a\ninterface: e\nmetrics_listen: 127.0.0.1:1\nprotected: []\n\
             syn_rate: { per_second: 1000000000, burst: 1 }\n\
             icmp_rate: { per_second: 1, burst: 2000000000 }\n",
        )
        .unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["protected", "syn_rate", "icmp_rate"]);
    }
}
