//! `connections:` caps enforced before the TLS handshake (by the server's connection table).

use edge_kit::config_file::FieldErrors;
use serde::Deserialize;

/// The `connections` section, validated: the caps the connection table enforces.
#[derive(Clone, Debug, PartialEq)]
pub struct Caps {
    /// Client connections open at once (`connections.max`).
    pub max_total: usize,
    /// Connections in their TLS handshake at once (at most `max_total`).
    pub max_handshakes: usize,
    /// Connections from one IPv4 address or IPv6 /64.
    pub max_per_source: usize,
    /// `connections.trusted`: sources with a higher per-source cap and a reserve.
    pub trusted: Vec<ipnet::IpNet>,
    /// Connections from one trusted address or /64.
    pub max_per_trusted_source: usize,
    /// Slots of `max_total` only trusted sources may take (0 when `trusted` is empty).
    pub trusted_reserve: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawConnections {
    /// Client connections open at once. Default 20000.
    max: usize,
    /// Connections of `max` still in their TLS handshake. Default: a quarter of `max`.
    max_handshakes: Option<usize>,
    /// Connections from one IPv4 address or IPv6 /64. Default 256.
    per_source: usize,
    /// CIDRs where many senders share addresses (provider egress ranges); also exempt
    /// from per-source rate limits. Default none.
    pub(super) trusted: Vec<ipnet::IpNet>,
    /// Lists under `ranges.sources` whose addresses are trusted as `trusted` is, as
    /// each list is now (re-read while running). Default none.
    pub(super) trusted_ranges: Vec<String>,
    /// Connections from one source inside `trusted`. Default 8192.
    per_trusted_source: usize,
    /// Slots of `max` that only `trusted` sources may take (none when `trusted` is
    /// empty). Default: a twentieth of `max`.
    trusted_reserve: Option<usize>,
}

impl Default for RawConnections {
    fn default() -> Self {
        Self {
            max: 20_000,
            max_handshakes: None,
            per_source: 256,
            trusted: Vec::new(),
            trusted_ranges: Vec::new(),
            per_trusted_source: 8192,
            trusted_reserve: None,
        }
    }
}

impl RawConnections {
    pub(super) fn validate(self, errors: &mut FieldErrors) -> Caps {
        if self.max == 0 || self.per_source == 0 {
            errors.add("connections", "max and per_source must be positive");
        }
        if self.per_trusted_source < self.per_source {
            errors.add(
                "connections.per_trusted_source",
                "must be at least connections.per_source",
            );
        }
        let max_handshakes = self.max_handshakes.unwrap_or((self.max / 4).max(1));
        if max_handshakes == 0 || max_handshakes > self.max {
            errors.add(
                "connections.max_handshakes",
                "must be positive and at most connections.max",
            );
        }
        let trusted_reserve = self.trusted_reserve.unwrap_or(self.max / 20);
        if !self.trusted.is_empty() && trusted_reserve >= self.max {
            errors.add(
                "connections.trusted_reserve",
                "must be less than connections.max",
            );
        }
        Caps {
            max_total: self.max,
            max_handshakes,
            max_per_source: self.per_source,
            trusted: self.trusted,
            max_per_trusted_source: self.per_trusted_source,
            trusted_reserve,
        }
    }
}
