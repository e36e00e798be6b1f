//! Webhook signature schemes. Each provider's scheme is a pure function in its own file:
//! it sees only the request headers, the raw body bytes and the current time, so it is
//! tested without any I/O. Comparisons are constant-time (`Mac::verify_slice`).

mod generic_hmac;
mod github;
mod shopify;
mod slack;
mod standard;
mod stripe;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::{Sha256, Sha512};

pub use generic_hmac::{Digest, Encoding, HmacSpec};
pub use slack::url_verification_challenge;
pub use standard::decode_secret as decode_standard_secret;

/// The provider a route receives webhooks from; decides the signature scheme, the
/// event id and the headers worth keeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Github,
    Stripe,
    Shopify,
    Slack,
    Standard,
    Hmac,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Github => "github",
            Provider::Stripe => "stripe",
            Provider::Shopify => "shopify",
            Provider::Slack => "slack",
            Provider::Standard => "standard",
            Provider::Hmac => "hmac",
        }
    }
}

/// A route's verifier: its scheme plus every secret currently accepted (rotation: any
/// may match).
#[derive(Clone, Debug)]
pub struct Verifier {
    scheme: Scheme,
    secrets: Vec<Vec<u8>>,
}

#[derive(Clone, Debug)]
pub enum Scheme {
    Github,
    Stripe { tolerance: Duration },
    Shopify,
    Slack { tolerance: Duration },
    Standard { tolerance: Duration },
    Hmac(HmacSpec),
}

impl Verifier {
    /// `secrets` are the key bytes as the scheme uses them (Standard Webhooks secrets
    /// already base64-decoded from `whsec_…`).
    pub fn new(scheme: Scheme, secrets: Vec<Vec<u8>>) -> Self {
        Self { scheme, secrets }
    }

    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let secrets = &self.secrets;
        match &self.scheme {
            Scheme::Github => github::verify(secrets, headers, body),
            Scheme::Stripe { tolerance } => stripe::verify(secrets, headers, body, now, *tolerance),
            Scheme::Shopify => shopify::verify(secrets, headers, body),
            Scheme::Slack { tolerance } => slack::verify(secrets, headers, body, now, *tolerance),
            Scheme::Standard { tolerance } => {
                standard::verify(secrets, headers, body, now, *tolerance)
            }
            Scheme::Hmac(spec) => generic_hmac::verify(spec, secrets, headers, body),
        }
    }
}

/// Why a request failed verification. The reason is safe to show the sender and to use
/// as a metric label: it never contains secret material.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    #[error("malformed header {0}")]
    MalformedHeader(&'static str),
    #[error("timestamp outside the tolerance (too old)")]
    StaleTimestamp,
    #[error("timestamp outside the tolerance (in the future)")]
    FutureTimestamp,
    #[error("no signature matches any configured secret")]
    Mismatch,
}

impl VerifyError {
    pub fn reason(&self) -> &'static str {
        match self {
            VerifyError::MissingHeader(_) => "missing_header",
            VerifyError::MalformedHeader(_) => "malformed_header",
            VerifyError::StaleTimestamp => "stale_timestamp",
            VerifyError::FutureTimestamp => "future_timestamp",
            VerifyError::Mismatch => "mismatch",
        }
    }
}

/// The value of a header that must be present and ASCII.
fn required_header<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, VerifyError> {
    let value = headers.get(name).ok_or(VerifyError::MissingHeader(name))?;
    value
        .to_str()
        .map_err(|_| VerifyError::MalformedHeader(name))
}

/// Checks a unix-seconds timestamp header value against `now` ± `tolerance`.
fn check_timestamp(
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
    if signed_at + tolerance < now {
        Err(VerifyError::StaleTimestamp)
    } else if signed_at > now + tolerance {
        Err(VerifyError::FutureTimestamp)
    } else {
        Ok(())
    }
}

/// True when HMAC-SHA256(secret, parts…) equals `expected`, compared in constant time.
fn hmac_sha256_matches(secret: &[u8], parts: &[&[u8]], expected: &[u8]) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.verify_slice(expected).is_ok()
}

fn hmac_sha512_matches(secret: &[u8], parts: &[&[u8]], expected: &[u8]) -> bool {
    let mut mac = Hmac::<Sha512>::new_from_slice(secret).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.verify_slice(expected).is_ok()
}

/// True when any secret signs `parts` to any of the `candidates` (rotation on both sides:
/// several secrets here, several signatures in the header). Every pair is checked so the
/// time taken does not depend on which one matched.
fn any_sha256_match(secrets: &[Vec<u8>], parts: &[&[u8]], candidates: &[Vec<u8>]) -> bool {
    let mut matched = false;
    for secret in secrets {
        for candidate in candidates {
            matched |= hmac_sha256_matches(secret, parts, candidate);
        }
    }
    matched
}

#[cfg(test)]
pub(crate) mod test_support {
    use http::{HeaderMap, HeaderName, HeaderValue};

    pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }
}

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
    fn reasons_are_stable_metric_labels() {
        assert_eq!(VerifyError::Mismatch.reason(), "mismatch");
        assert_eq!(VerifyError::MissingHeader("x").reason(), "missing_header");
    }
}
