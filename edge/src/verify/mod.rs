//! Webhook signature schemes. Each provider's file reads the request head only: the
//! bytes the provider signed before the body (`t.` for Stripe, `v0:ts:` for Slack,
//! `id.ts.` for Standard Webhooks), the signatures offered and the signed timestamp.
//! This module turns that into a [`Verification`]: one MAC per configured secret, fed the
//! body as it arrives and compared at the end with every offered signature in constant
//! time. Pure: headers, body chunks and the clock in, a verdict out.
//!
//! What verification costs is therefore set by the route's configuration, not by the
//! sender: one MAC pass over the body per secret (at most [`MAX_SECRETS`]), however many
//! signatures a header carries (at most [`MAX_SIGNATURES`], each of the scheme's MAC
//! length, or the header is malformed), and spread over the upload instead of spent in
//! one go once the body is in.

mod generic_hmac;
mod github;
mod shopify;
mod slack;
mod standard;
mod stripe;

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::{Sha256, Sha512};
use subtle::{Choice, ConstantTimeEq};

pub use generic_hmac::{Digest, Encoding, HmacSpec};
pub use slack::url_verification_challenge;
pub use standard::decode_secret as decode_standard_secret;

/// Most secrets a route may hold (rotation needs two or three): each costs a MAC pass
/// over every body.
pub const MAX_SECRETS: usize = 8;
/// Most signatures one request may offer; more makes its header malformed.
pub const MAX_SIGNATURES: usize = 8;

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
/// may match). Its `Debug` shows how many secrets, never their bytes.
#[derive(Clone)]
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

    /// Reads the request head. An error here can be answered before the body is read;
    /// otherwise feed the body to the returned [`Verification`] as it arrives.
    pub fn start(&self, headers: &HeaderMap) -> Result<Verification, VerifyError> {
        let head = match &self.scheme {
            Scheme::Github => github::read_head(headers)?,
            Scheme::Stripe { tolerance } => stripe::read_head(headers, *tolerance)?,
            Scheme::Shopify => shopify::read_head(headers)?,
            Scheme::Slack { tolerance } => slack::read_head(headers, *tolerance)?,
            Scheme::Standard { tolerance } => standard::read_head(headers, *tolerance)?,
            Scheme::Hmac(spec) => generic_hmac::read_head(spec, headers)?,
        };
        Ok(Verification::new(&self.secrets, head))
    }

    /// Verifies a request whose whole body is at hand.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Verified, VerifyError> {
        let mut verification = self.start(headers)?;
        verification.update(body);
        verification.finish(now)
    }
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("scheme", &self.scheme)
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .finish()
    }
}

/// One request's verification in progress: a MAC per secret, already fed what the
/// provider signs before the body.
pub struct Verification {
    macs: Vec<MacState>,
    signatures: Vec<Vec<u8>>,
    timestamp: Option<SignedTimestamp>,
}

impl Verification {
    fn new(secrets: &[Vec<u8>], head: SignedHead) -> Self {
        let macs = secrets
            .iter()
            .map(|secret| {
                let mut mac = MacState::new(head.digest, secret);
                mac.update(&head.prefix);
                mac
            })
            .collect();
        Self {
            macs,
            signatures: head.signatures,
            timestamp: head.timestamp,
        }
    }

    /// The next bytes of the body.
    pub fn update(&mut self, chunk: &[u8]) {
        for mac in &mut self.macs {
            mac.update(chunk);
        }
    }

    /// The verdict once the whole body was fed: every secret's MAC against every
    /// offered signature (all pairs, so the time taken does not say which matched), then
    /// the signed timestamp against `now`.
    pub fn finish(self, now: SystemTime) -> Result<Verified, VerifyError> {
        let mut matched = None;
        for mac in self.macs {
            let tag = mac.finalize();
            let mut any = Choice::from(0);
            for signature in &self.signatures {
                any |= tag.as_slice().ct_eq(signature);
            }
            // Which of our secrets matched is no secret; the bytes compared stay so.
            if bool::from(any) && matched.is_none() {
                matched = Some(tag);
            }
        }
        let mac = matched.ok_or(VerifyError::Mismatch)?;
        if let Some(t) = self.timestamp {
            check_timestamp(&t.raw, t.header, now, t.tolerance)?;
        }
        Ok(Verified { mac })
    }
}

/// A request whose signature matched.
#[derive(Debug, PartialEq, Eq)]
pub struct Verified {
    mac: Vec<u8>,
}

impl Verified {
    /// The signature that matched: the provider's MAC of what it signed, which keys an
    /// event whose id is not signed (`crate::event`).
    pub fn mac(&self) -> &[u8] {
        &self.mac
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

/// What a scheme reads from the request head.
struct SignedHead {
    digest: Digest,
    /// What the provider signs before the body.
    prefix: Vec<u8>,
    /// The signatures offered, decoded, each of the digest's length.
    signatures: Vec<Vec<u8>>,
    timestamp: Option<SignedTimestamp>,
}

/// A timestamp the provider signed, checked once the signature matched.
struct SignedTimestamp {
    raw: String,
    header: &'static str,
    tolerance: Duration,
}

/// Collects the signatures a header offers, enforcing the scheme's MAC length and
/// [`MAX_SIGNATURES`].
struct Signatures {
    digest: Digest,
    header: &'static str,
    decoded: Vec<Vec<u8>>,
}

impl Signatures {
    fn new(digest: Digest, header: &'static str) -> Self {
        Self {
            digest,
            header,
            decoded: Vec::new(),
        }
    }

    /// Adds one signature as the header's encoding decoded it (`None`: bad encoding).
    fn push(&mut self, decoded: Option<Vec<u8>>) -> Result<(), VerifyError> {
        match decoded {
            Some(signature)
                if signature.len() == self.digest.mac_len()
                    && self.decoded.len() < MAX_SIGNATURES =>
            {
                self.decoded.push(signature);
                Ok(())
            }
            _ => Err(VerifyError::MalformedHeader(self.header)),
        }
    }

    /// The signatures, or a malformed header when it offered none.
    fn into_head(
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
    if signed_at.saturating_add(tolerance) < now {
        Err(VerifyError::StaleTimestamp)
    } else if signed_at > now.saturating_add(tolerance) {
        Err(VerifyError::FutureTimestamp)
    } else {
        Ok(())
    }
}

/// One secret's MAC over the signed bytes, as they arrive.
#[derive(Clone)]
enum MacState {
    Sha256(Hmac<Sha256>),
    Sha512(Hmac<Sha512>),
}

impl MacState {
    fn new(digest: Digest, secret: &[u8]) -> Self {
        match digest {
            Digest::Sha256 => MacState::Sha256(
                Hmac::new_from_slice(secret).expect("HMAC takes keys of any length"),
            ),
            Digest::Sha512 => MacState::Sha512(
                Hmac::new_from_slice(secret).expect("HMAC takes keys of any length"),
            ),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            MacState::Sha256(mac) => mac.update(bytes),
            MacState::Sha512(mac) => mac.update(bytes),
        }
    }

    fn finalize(self) -> Vec<u8> {
        match self {
            MacState::Sha256(mac) => mac.finalize().into_bytes().to_vec(),
            MacState::Sha512(mac) => mac.finalize().into_bytes().to_vec(),
        }
    }
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
    use super::test_support::headers;
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

    fn github_head(signature: &str) -> HeaderMap {
        headers(&[("X-Hub-Signature-256", signature)])
    }

    #[test]
    fn a_body_fed_in_chunks_verifies_like_the_whole() {
        let secret = b"chunked".to_vec();
        let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut mac = Hmac::<Sha256>::new_from_slice(&secret).unwrap();
        mac.update(&body);
        let signature_bytes = mac.finalize().into_bytes().to_vec();
        let signature = format!("sha256={}", hex::encode(&signature_bytes));
        let verifier = Verifier::new(Scheme::Github, vec![secret]);
        for chunk_len in [1, 7, 16_384, body.len()] {
            let mut verification = verifier.start(&github_head(&signature)).unwrap();
            for chunk in body.chunks(chunk_len) {
                verification.update(chunk);
            }
            let verified = verification.finish(SystemTime::now()).unwrap();
            assert_eq!(verified.mac(), &signature_bytes[..], "{chunk_len}");
        }
        let mut short = verifier.start(&github_head(&signature)).unwrap();
        short.update(&body[1..]);
        assert_eq!(short.finish(SystemTime::now()), Err(VerifyError::Mismatch));
    }

    /// The work a request costs is one MAC per configured secret, whatever it offers.
    #[test]
    fn one_mac_per_secret_however_many_signatures_are_offered() {
        let secrets: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 16]).collect();
        let verifier = Verifier::new(
            Scheme::Stripe {
                tolerance: Duration::from_secs(300),
            },
            secrets,
        );
        let many = format!(
            "t=1,{}",
            vec![format!("v1={}", "ab".repeat(32)); 8].join(",")
        );
        let verification = verifier
            .start(&headers(&[("Stripe-Signature", &many)]))
            .unwrap();
        assert_eq!(
            (verification.macs.len(), verification.signatures.len()),
            (3, 8)
        );
    }

    #[test]
    fn a_verifiers_debug_hides_its_secrets() {
        let secret = b"hunter2-secret".to_vec();
        let as_bytes = format!("{secret:?}");
        let verifier = Verifier::new(Scheme::Github, vec![secret]);
        let shown = format!("{verifier:?}");
        assert!(!shown.contains(&as_bytes[1..as_bytes.len() - 1]), "{shown}");
        assert!(shown.contains("<1 redacted>"), "{shown}");
    }
}
