//! `tls:` the server identity, protocol versions, session resumption and 0-RTT.

use std::path::PathBuf;
use std::time::Duration;

use bytesize::ByteSize;
use edge_kit::config_file::FieldErrors;
use serde::Deserialize;

/// The `tls` section, validated.
#[derive(Clone, Debug)]
pub struct TlsSettings {
    /// The default certificate.
    pub identity: Identity,
    /// Certificates chosen by SNI name.
    pub sni: Vec<SniCert>,
    /// The oldest TLS version accepted.
    pub min_version: TlsVersion,
    /// Time for a TLS handshake to finish.
    pub handshake_timeout: Duration,
    /// How sessions are resumed.
    pub session_tickets: SessionTickets,
    /// TLS 1.3 0-RTT: at most this many early bytes per connection; `None` = off.
    pub early_data: Option<u32>,
    /// Sessions kept for stateful resumption (each ticket is single-use).
    pub session_cache: usize,
}

/// How sessions resume.
#[derive(Clone, Debug, PartialEq)]
pub enum SessionTickets {
    /// Sessions kept in this process (resumption only here; the mode 0-RTT needs).
    Stateful,
    /// Tickets encrypted with keys every PoP holds: resumption at any PoP, never 0-RTT.
    Shared {
        /// The file of shared ticket keys (the first one encrypts).
        key_file: PathBuf,
        /// How long a ticket is valid.
        lifetime: Duration,
    },
}

/// The certificate the edge presents.
#[derive(Clone, Debug)]
pub enum Identity {
    /// A certificate chain and its key, from PEM files.
    Files {
        /// The chain.
        cert: PathBuf,
        /// The key.
        key: PathBuf,
    },
    /// Generated at start, for a dev box only.
    SelfSigned,
}

/// A certificate for one SNI name.
#[derive(Clone, Debug)]
pub struct SniCert {
    /// The name clients ask for.
    pub server_name: String,
    /// The chain's PEM file.
    pub cert: PathBuf,
    /// The key's PEM file.
    pub key: PathBuf,
}

/// A TLS protocol version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum TlsVersion {
    /// TLS 1.2.
    #[serde(rename = "1.2")]
    Tls12,
    /// TLS 1.3.
    #[serde(rename = "1.3")]
    Tls13,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawTls {
    /// PEM certificate chain and key; required unless `self_signed`.
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    /// Generate a certificate at start (a dev box only). Default false.
    self_signed: bool,
    /// "1.2" or "1.3". Default "1.2".
    min_version: TlsVersion,
    /// Extra certificates by server name.
    sni: Vec<RawSni>,
    /// A handshake must complete within this. Default 10s.
    #[serde(with = "humantime_serde")]
    handshake_timeout: Duration,
    /// Default stateful.
    session_tickets: Option<RawTickets>,
    early_data: RawEarlyData,
    /// Sessions kept for stateful resumption (~200 bytes each: 50k senders in ~10 MB).
    /// Default 50000.
    session_cache: usize,
}

impl Default for RawTls {
    fn default() -> Self {
        Self {
            cert: None,
            key: None,
            self_signed: false,
            min_version: TlsVersion::Tls12,
            sni: Vec::new(),
            handshake_timeout: Duration::from_secs(10),
            session_tickets: None,
            early_data: RawEarlyData::default(),
            session_cache: 50_000,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawEarlyData {
    /// Default false.
    enabled: bool,
    /// Early bytes accepted per connection. Default 16KiB.
    max_bytes: ByteSize,
}

impl Default for RawEarlyData {
    fn default() -> Self {
        Self {
            enabled: false,
            max_bytes: ByteSize::kib(16),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTickets {
    mode: TicketMode,
    /// Shared mode: the key file, the same on every PoP.
    key_file: Option<PathBuf>,
    /// Shared mode: how long a ticket is honoured. Default [`DEFAULT_TICKET_LIFETIME`].
    #[serde(default, with = "humantime_serde")]
    lifetime: Option<Duration>,
}

#[derive(Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum TicketMode {
    Stateful,
    Shared,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSni {
    server_name: String,
    cert: PathBuf,
    key: PathBuf,
}

impl RawTls {
    /// `None` when the identity is invalid (an error was added).
    pub(super) fn validate(self, errors: &mut FieldErrors) -> Option<TlsSettings> {
        let identity = identity(self.cert, self.key, self.self_signed, errors);
        let session_tickets = session_tickets(self.session_tickets, errors);
        let early_data = self.early_data.enabled.then(|| {
            if matches!(session_tickets, SessionTickets::Shared { .. }) {
                errors.add(
                    "tls.early_data.enabled",
                    "cannot be combined with tls.session_tickets.mode: shared. 0-RTT is only \
                     safe with single-use tickets kept in this process (stateful); shared \
                     tickets resume at any PoP but could be replayed there. Choose \
                     resumption anywhere (shared, no 0-RTT) or 0-RTT on the same PoP (stateful)",
                );
            }
            let bytes = self.early_data.max_bytes.as_u64();
            if !(1..=MAX_EARLY_DATA).contains(&bytes) {
                errors.add("tls.early_data.max_bytes", "must be between 1B and 1MiB");
            }
            bytes.clamp(1, MAX_EARLY_DATA) as u32
        });
        if self.session_cache == 0 {
            errors.add("tls.session_cache", "must be positive");
        }
        if self.handshake_timeout.is_zero() {
            errors.add("tls.handshake_timeout", "must be greater than zero");
        }
        Some(TlsSettings {
            identity: identity?,
            sni: self
                .sni
                .into_iter()
                .map(|s| SniCert {
                    server_name: s.server_name.to_ascii_lowercase(),
                    cert: s.cert,
                    key: s.key,
                })
                .collect(),
            min_version: self.min_version,
            handshake_timeout: self.handshake_timeout,
            session_tickets,
            early_data,
            session_cache: self.session_cache,
        })
    }
}

fn identity(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    self_signed: bool,
    errors: &mut FieldErrors,
) -> Option<Identity> {
    match (cert, key, self_signed) {
        (Some(cert), Some(key), false) => Some(Identity::Files { cert, key }),
        (None, None, true) => Some(Identity::SelfSigned),
        (_, _, true) => {
            errors.add(
                "tls.self_signed",
                "cannot be combined with tls.cert/tls.key",
            );
            None
        }
        (None, _, false) => {
            errors.add(
                "tls.cert",
                "required (or set tls.self_signed: true on a dev box)",
            );
            None
        }
        (Some(_), None, false) => {
            errors.add("tls.key", "required with tls.cert");
            None
        }
    }
}

fn session_tickets(raw: Option<RawTickets>, errors: &mut FieldErrors) -> SessionTickets {
    let Some(raw) = raw else {
        return SessionTickets::Stateful;
    };
    match (raw.mode, raw.key_file) {
        (TicketMode::Stateful, _) => SessionTickets::Stateful,
        (TicketMode::Shared, Some(key_file)) => {
            let lifetime = raw.lifetime.unwrap_or(DEFAULT_TICKET_LIFETIME);
            if lifetime.is_zero() || lifetime > MAX_TICKET_LIFETIME {
                errors.add(
                    "tls.session_tickets.lifetime",
                    "must be between 1s and 7 days (RFC 8446)",
                );
            }
            SessionTickets::Shared { key_file, lifetime }
        }
        (TicketMode::Shared, None) => {
            errors.add(
                "tls.session_tickets.key_file",
                "required in shared mode (the same file on every PoP)",
            );
            SessionTickets::Stateful
        }
    }
}

const DEFAULT_TICKET_LIFETIME: Duration = Duration::from_secs(12 * 3600);
const MAX_TICKET_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// Early data beyond a webhook or two only widens what a replay could carry.
const MAX_EARLY_DATA: u64 = 1 << 20;
