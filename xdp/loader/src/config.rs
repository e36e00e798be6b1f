//! The loader's YAML configuration, parsed once into typed [`Settings`]: the file as
//! written (defaults once, in `RawSettings`' `impl Default`), validated. Unknown keys are
//! errors; errors name the file and the field.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use edge_kit::config_file::FieldErrors;
pub use edge_kit::config_file::{ConfigErrors, FieldError};
use ipnet::IpNet;
use serde::Deserialize;
use xdp_common::{MAX_BURST, MAX_PROTECTED, MAX_RATE};

use crate::under_attack::shield::Mode as ShieldMode;

/// Validated settings, ready to use.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The PoP's name, a label on every metric.
    pub pop: String,
    /// The PoP's public interface.
    pub interface: String,
    /// How the program is attached.
    pub mode: Mode,
    /// Where `/metrics` listens.
    pub metrics_listen: SocketAddr,
    /// The anycast prefixes: only traffic to these is filtered.
    pub protected: Vec<IpNet>,
    /// TCP ports served on the protected prefixes; other TCP to them is dropped.
    pub tcp_ports: Vec<u16>,
    /// UDP ports served on the protected prefixes (none today; QUIC later).
    pub udp_ports: Vec<u16>,
    /// Sources always passed: management, BGP peers, provider egress ranges.
    pub allowlist: Vec<IpNet>,
    /// Sources always dropped, whatever the destination.
    pub blocklist: Vec<IpNet>,
    /// New SYNs per source /32 (IPv6 /64).
    pub syn_rate: Rate,
    /// ICMP, all sources together.
    pub icmp_rate: Rate,
    /// Under-attack mode (`crate::under_attack`).
    pub under_attack: UnderAttack,
}

/// When only the open ranges reach the served ports, and which ranges those are.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UnderAttack {
    /// `off` (default), `on`, or `auto` (by the SYN rate); `edge-xdp under-attack`
    /// overrides it until cleared.
    pub mode: ShieldMode,
    /// The providers' lists `edge ranges update` stores (`/var/lib/edge/ranges/NAME.txt`).
    pub ranges: Vec<PathBuf>,
    /// Also open: management and health-check ranges. Default none.
    pub also_open: Vec<IpNet>,
    /// A list older than this is not used; with none usable the mode fails open.
    /// Default 3d.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
    /// `auto` rises at this many new SYNs/s to the served ports. Default 20000.
    pub syn_on: u64,
    /// ... and falls after `hold` under this many. Default 2000.
    pub syn_off: u64,
    /// Default 60s.
    #[serde(with = "humantime_serde")]
    pub hold: Duration,
    /// Where `edge-xdp under-attack` leaves the operator's choice. Default
    /// /run/edge-xdp/under-attack.
    pub override_file: PathBuf,
}

impl Default for UnderAttack {
    fn default() -> Self {
        Self {
            mode: ShieldMode::Off,
            ranges: Vec::new(),
            also_open: Vec::new(),
            max_age: Duration::from_secs(3 * 24 * 3600),
            syn_on: 20_000,
            syn_off: 2_000,
            hold: Duration::from_secs(60),
            override_file: PathBuf::from("/run/edge-xdp/under-attack"),
        }
    }
}

/// How the XDP program is attached to the interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Driver mode, falling back to skb (generic) mode with a warning.
    #[default]
    Auto,
    /// In the driver, before an sk_buff exists; fails where the driver cannot.
    Driver,
    /// Generic mode, after the kernel built an sk_buff: works everywhere, costs more.
    Skb,
}

/// A token bucket: `per_second` sustained, `burst` at once; 0 disables the limit.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Tokens added per second.
    pub per_second: u64,
    /// The bucket's size.
    pub burst: u64,
}

impl Settings {
    /// Reads and validates the file at `path`; every error names the file and field.
    pub fn load(path: &Path) -> Result<Settings, ConfigErrors> {
        edge_kit::config_file::load(path, Self::parse)
    }

    /// Parses and validates YAML text; errors are every field found wrong.
    pub fn parse(text: &str) -> Result<Settings, Vec<FieldError>> {
        edge_kit::config_file::parse_yaml(text, RawSettings::validate)
    }
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawSettings {
    /// Required: the PoP's name, a label on every metric.
    pop: Option<String>,
    /// Required.
    interface: Option<String>,
    /// Default `auto`.
    mode: Mode,
    /// Required: where `/metrics` listens.
    metrics_listen: Option<SocketAddr>,
    /// Required: at least one prefix.
    protected: Vec<IpNet>,
    /// Default 80 and 443.
    tcp_ports: Vec<u16>,
    /// Default: none.
    udp_ports: Vec<u16>,
    /// Default: none.
    allowlist: Vec<IpNet>,
    /// Default: none.
    blocklist: Vec<IpNet>,
    /// New SYNs per source /32 (IPv6 /64). Default 200/s, burst 400.
    syn_rate: Rate,
    /// ICMP, all sources together. Default 1000/s, burst 2000.
    icmp_rate: Rate,
    /// Under-attack mode. Default off.
    under_attack: UnderAttack,
}

impl Default for RawSettings {
    fn default() -> Self {
        Self {
            pop: None,
            interface: None,
            mode: Mode::default(),
            metrics_listen: None,
            protected: Vec::new(),
            tcp_ports: vec![80, 443],
            udp_ports: Vec::new(),
            allowlist: Vec::new(),
            blocklist: Vec::new(),
            syn_rate: Rate {
                per_second: 200,
                burst: 400,
            },
            icmp_rate: Rate {
                per_second: 1000,
                burst: 2000,
            },
            under_attack: UnderAttack::default(),
        }
    }
}

impl RawSettings {
    fn validate(self) -> Result<Settings, Vec<FieldError>> {
        let mut errors = FieldErrors::default();
        let pop = errors.required("pop", self.pop);
        let interface = errors.required("interface", self.interface);
        let metrics_listen = errors.required("metrics_listen", self.metrics_listen);
        if self.protected.is_empty() {
            errors.add("protected", "must list the anycast prefixes");
        }
        for v6 in [false, true] {
            let family = self
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
        for (field, rate) in [("syn_rate", self.syn_rate), ("icmp_rate", self.icmp_rate)] {
            if rate.per_second > MAX_RATE || rate.burst > MAX_BURST {
                errors.add(
                    field,
                    format!("per_second at most {MAX_RATE}, burst at most {MAX_BURST}"),
                );
            }
        }
        let shield = &self.under_attack;
        if shield.syn_off >= shield.syn_on {
            errors.add(
                "under_attack.syn_off",
                "must be less than under_attack.syn_on",
            );
        }
        if shield.mode != ShieldMode::Off && shield.ranges.is_empty() {
            errors.add(
                "under_attack.ranges",
                "must name the provider lists to keep open when mode is on or auto",
            );
        }
        let (Some(pop), Some(interface), Some(metrics_listen)) = (pop, interface, metrics_listen)
        else {
            return Err(errors.into_errors());
        };
        errors.into_result(|| Settings {
            pop,
            interface,
            mode: self.mode,
            metrics_listen,
            protected: self.protected,
            tcp_ports: self.tcp_ports,
            udp_ports: self.udp_ports,
            allowlist: self.allowlist,
            blocklist: self.blocklist,
            syn_rate: self.syn_rate,
            icmp_rate: self.icmp_rate,
            under_attack: self.under_attack,
        })
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
    fn required_fields_are_named() {
        let errors = Settings::parse("interface: e\nprotected: [192.0.2.0/24]\n").unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["pop", "metrics_listen"]);
        assert_eq!(errors[0].message, "required");
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
