//! What every signature scheme reads from a request head, and how it can fail: the
//! signed prefix, the signatures offered (bounded in number and length), the signed
//! timestamp and its check.

use std::ops::RangeInclusive;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

/// The hash a scheme's HMAC uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Digest {
    /// SHA-1 (Intercom; still sound as an HMAC).
    Sha1,
    /// SHA-256.
    Sha256,
    /// SHA-512.
    Sha512,
}

impl Digest {
    /// The length of this digest's MAC, in bytes.
    pub fn mac_len(self) -> usize {
        match self {
            Digest::Sha1 => 20,
            Digest::Sha256 => 32,
            Digest::Sha512 => 64,
        }
    }
}

/// Why a request failed verification. The reason is safe to show the sender and to use
/// as a metric label: it never contains secret material.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The header is missing.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// The header cannot be parsed.
    #[error("malformed header {0}")]
    MalformedHeader(&'static str),
    /// The body does not hold the signature where the scheme puts it.
    #[error("malformed {0}")]
    MalformedBody(&'static str),
    /// The signed timestamp is older than the tolerance.
    #[error("timestamp outside the tolerance (too old)")]
    StaleTimestamp,
    /// The signed timestamp is further ahead than the tolerance.
    #[error("timestamp outside the tolerance (in the future)")]
    FutureTimestamp,
    /// No secret gives this signature.
    #[error("no signature matches any configured secret")]
    Mismatch,
}

impl VerifyError {
    /// The `reason` label of the verification-failure metric.
    pub fn reason(&self) -> &'static str {
        match self {
            VerifyError::MissingHeader(_) => "missing_header",
            VerifyError::MalformedHeader(_) => "malformed_header",
            VerifyError::MalformedBody(_) => "malformed_body",
            VerifyError::StaleTimestamp => "stale_timestamp",
            VerifyError::FutureTimestamp => "future_timestamp",
            VerifyError::Mismatch => "mismatch",
        }
    }
}

/// What a scheme reads from the request head.
pub(super) struct SignedHead {
    /// The HMAC's hash (a route with public keys checks Ed25519 signatures instead).
    pub(super) digest: Digest,
    /// What the provider signs before the body.
    pub(super) prefix: Vec<u8>,
    /// The signatures offered, decoded, each of the digest's length.
    pub(super) signatures: Vec<Vec<u8>>,
    pub(super) timestamp: Option<SignedTimestamp>,
}

/// A timestamp the provider signed, checked once the signature matched.
pub(super) struct SignedTimestamp {
    pub(super) raw: String,
    pub(super) header: &'static str,
    pub(super) tolerance: Duration,
}

/// Collects the signatures a header offers, enforcing [`MAX_SIGNATURES`]. A candidate
/// that cannot be a MAC (bad encoding, wrong length) is skipped, as the providers' own
/// libraries do: it costs nothing to skip, and refusing the whole header for it would
/// refuse deliveries those libraries accept.
pub(super) struct Signatures {
    digest: Digest,
    /// Of each usable candidate, in bytes.
    len: RangeInclusive<usize>,
    header: &'static str,
    offered: usize,
    decoded: Vec<Vec<u8>>,
}

impl Signatures {
    pub(super) fn new(digest: Digest, header: &'static str) -> Self {
        Self {
            digest,
            len: digest.mac_len()..=digest.mac_len(),
            header,
            offered: 0,
            decoded: Vec::new(),
        }
    }

    /// Ed25519 signatures (64 bytes).
    pub(super) fn ed25519(header: &'static str) -> Self {
        Self {
            len: ED25519_SIGNATURE_LEN..=ED25519_SIGNATURE_LEN,
            ..Self::new(Digest::Sha512, header)
        }
    }

    /// ECDSA P-256 signatures, DER-encoded (their length varies with the integers').
    pub(super) fn ecdsa_p256_der(header: &'static str) -> Self {
        Self {
            len: ECDSA_P256_DER_MIN_LEN..=ECDSA_P256_DER_MAX_LEN,
            ..Self::new(Digest::Sha256, header)
        }
    }

    /// Adds one candidate as the header's encoding decoded it (`None`: bad encoding).
    /// Every candidate counts toward the cap, usable or not, so a flood of junk
    /// candidates is refused as a malformed header before any MAC is computed.
    pub(super) fn push(&mut self, decoded: Option<Vec<u8>>) -> Result<(), VerifyError> {
        self.offered += 1;
        if self.offered > MAX_SIGNATURES {
            return Err(VerifyError::MalformedHeader(self.header));
        }
        if let Some(signature) = decoded.filter(|s| self.len.contains(&s.len())) {
            self.decoded.push(signature);
        }
        Ok(())
    }

    /// The signatures, or a malformed header when it offered none usable.
    pub(super) fn into_head(
        self,
        prefix: Vec<u8>,
        timestamp: Option<SignedTimestamp>,
    ) -> Result<SignedHead, VerifyError> {
        if self.decoded.is_empty() {
            return Err(VerifyError::MalformedHeader(self.header));
        }
        Ok(SignedHead {
            digest: self.digest,
            prefix,
            signatures: self.decoded,
            timestamp,
        })
    }
}

/// The head of a scheme that signs `{timestamp}{body}` with one signature in the
/// `signatures`' header (`decode`d from its trimmed value) and the timestamp in
/// `timestamp_header`, accepted within `tolerance`.
pub(super) fn timestamp_and_body(
    headers: &HeaderMap,
    mut signatures: Signatures,
    timestamp_header: &'static str,
    tolerance: Duration,
    decode: impl FnOnce(&str) -> Option<Vec<u8>>,
) -> Result<SignedHead, VerifyError> {
    let value = required_header(headers, signatures.header)?;
    let timestamp = required_header(headers, timestamp_header)?;
    signatures.push(decode(value.trim()))?;
    let signed_at = SignedTimestamp {
        raw: timestamp.to_owned(),
        header: timestamp_header,
        tolerance,
    };
    signatures.into_head(timestamp.as_bytes().to_vec(), Some(signed_at))
}

/// The value of a header that must be present and ASCII.
pub(super) fn required_header<'h>(
    headers: &'h HeaderMap,
    name: &'static str,
) -> Result<&'h str, VerifyError> {
    let value = headers.get(name).ok_or(VerifyError::MissingHeader(name))?;
    value
        .to_str()
        .map_err(|_| VerifyError::MalformedHeader(name))
}

/// Checks a unix-seconds timestamp header value against `now` ± `tolerance`.
pub(super) fn check_timestamp(
    raw: &str,
    header: &'static str,
    now: SystemTime,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    let signed_at: u64 = raw
        .trim()
        .parse()
        .map_err(|_| VerifyError::MalformedHeader(header))?;
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let tolerance = tolerance.as_secs();
    if signed_at.saturating_add(tolerance) < now {
        Err(VerifyError::StaleTimestamp)
    } else if signed_at > now.saturating_add(tolerance) {
        Err(VerifyError::FutureTimestamp)
    } else {
        Ok(())
    }
}

const ED25519_SIGNATURE_LEN: usize = 64;
/// `SEQUENCE { INTEGER r, INTEGER s }`: 2 + 2 × (2 + 1..=33) bytes.
const ECDSA_P256_DER_MIN_LEN: usize = 8;
const ECDSA_P256_DER_MAX_LEN: usize = 72;

/// Most signature candidates one request may offer, usable or not; more makes its
/// header malformed.
pub const MAX_SIGNATURES: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_tolerance_is_inclusive_on_both_sides() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let tol = Duration::from_secs(300);
        assert_eq!(check_timestamp("999700", "t", now, tol), Ok(()));
        assert_eq!(check_timestamp("1000300", "t", now, tol), Ok(()));
        assert_eq!(
            check_timestamp("999699", "t", now, tol),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(
            check_timestamp("1000301", "t", now, tol),
            Err(VerifyError::FutureTimestamp)
        );
        assert_eq!(
            check_timestamp("-5", "t", now, tol),
            Err(VerifyError::MalformedHeader("t"))
        );
        assert_eq!(
            check_timestamp("", "t", now, tol),
            Err(VerifyError::MalformedHeader("t"))
        );
    }

    #[test]
    fn timestamps_and_tolerances_at_the_ends_of_u64_do_not_overflow() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let huge = Duration::from_secs(u64::MAX);
        assert_eq!(
            check_timestamp(&u64::MAX.to_string(), "t", now, huge),
            Ok(())
        );
        assert_eq!(
            check_timestamp(&u64::MAX.to_string(), "t", now, Duration::from_secs(300)),
            Err(VerifyError::FutureTimestamp)
        );
    }

    #[test]
    fn reasons_are_stable_metric_labels() {
        assert_eq!(VerifyError::Mismatch.reason(), "mismatch");
        assert_eq!(VerifyError::MissingHeader("x").reason(), "missing_header");
    }
}
