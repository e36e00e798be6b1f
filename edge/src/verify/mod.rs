//! Webhook signature schemes. Each scheme reads the request head only: the bytes the
//! provider signed before the body (`t.` for Stripe, `v0:ts:` for Slack, `id.ts.` for
//! Standard Webhooks), the signatures offered and the signed timestamp; the HMAC
//! schemes that differ only in where those are are data (`generic_hmac.rs`), the rest
//! have a file each.
//! This module turns that into a [`Verification`]: one MAC per configured secret, fed the
//! body as it arrives and compared at the end with every offered signature in constant
//! time. Pure: headers, body chunks and the clock in, a verdict out.
//!
//! What verification costs is therefore set by the route's configuration, not by the
//! sender: one MAC pass over the body per secret (at most [`MAX_SECRETS`]), however many
//! signatures a header carries (at most [`MAX_SIGNATURES`], each of the scheme's MAC
//! length, or the header is malformed), and spread over the upload instead of spent in
//! one go once the body is in.

mod challenge;
mod discord;
mod generic_hmac;
mod mailgun;
mod public_key;
mod sendgrid;
mod signed_head;
mod slack;
mod standard;
mod twilio;
mod zoom;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1, ED25519, ParsedPublicKey, VerificationAlgorithm,
};
use hmac::{Hmac, Mac};
use http::{HeaderMap, Uri};
use sha1::Sha1;
use sha2::{Sha256, Sha512};
use subtle::{Choice, ConstantTimeEq};

pub use challenge::{Answer as ChallengeAnswer, Challenge, ChallengeError};
pub use discord::decode_public_key as decode_discord_public_key;
pub use generic_hmac::{
    Encoding, HmacSpec, Labels, Piece, TemplateError, TimestampSource, TimestampSpec,
    parse_template, preset,
};
pub use sendgrid::decode_public_key as decode_sendgrid_public_key;
pub use signed_head::{Digest, MAX_SIGNATURES, VerifyError};
pub use standard::{
    decode_public_key as decode_standard_public_key, decode_secret as decode_standard_secret,
};

use signed_head::{SignedHead, SignedTimestamp, check_timestamp};

/// Most secrets a route may hold (rotation needs two or three): each costs a MAC pass
/// over every body.
pub const MAX_SECRETS: usize = 8;

/// The provider a route receives webhooks from; decides the signature scheme, the
/// event id and the headers worth keeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// GitHub (`X-Hub-Signature-256`).
    Github,
    /// Stripe (`Stripe-Signature`, timestamped).
    Stripe,
    /// Shopify (`X-Shopify-Hmac-Sha256`).
    Shopify,
    /// Slack (`X-Slack-Signature`, timestamped).
    Slack,
    /// Standard Webhooks (`webhook-signature`, timestamped).
    Standard,
    /// Zoom (`x-zm-signature`, timestamped).
    Zoom,
    /// Discord webhook events (`X-Signature-Ed25519`, timestamped; public keys).
    Discord,
    /// SendGrid's signed event webhook (ECDSA P-256, timestamped; public keys).
    Sendgrid,
    /// Paddle Billing (`Paddle-Signature: ts=…;h1=…`; an HMAC preset).
    Paddle,
    /// PagerDuty v3 webhooks (`X-PagerDuty-Signature: v1=…`; an HMAC preset).
    Pagerduty,
    /// Linear (`Linear-Signature`; an HMAC preset).
    Linear,
    /// Intercom (`X-Hub-Signature: sha1=…`; an HMAC preset).
    Intercom,
    /// Mailgun (the signature in the JSON body, over its timestamp and token).
    Mailgun,
    /// Twilio (`X-Twilio-Signature`, over the URL and the sorted form parameters).
    Twilio,
    /// Any other HMAC over the body, as the route configures it.
    Hmac,
}

impl Provider {
    /// The provider's name, as in the config file and the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Github => "github",
            Provider::Stripe => "stripe",
            Provider::Shopify => "shopify",
            Provider::Slack => "slack",
            Provider::Standard => "standard",
            Provider::Zoom => "zoom",
            Provider::Discord => "discord",
            Provider::Sendgrid => "sendgrid",
            Provider::Paddle => "paddle",
            Provider::Pagerduty => "pagerduty",
            Provider::Linear => "linear",
            Provider::Intercom => "intercom",
            Provider::Mailgun => "mailgun",
            Provider::Twilio => "twilio",
            Provider::Hmac => "hmac",
        }
    }
}

/// A route's verifier: its scheme plus every key currently accepted (rotation: any
/// may match). Its `Debug` shows how many keys, never their bytes.
#[derive(Clone)]
pub struct Verifier {
    scheme: Scheme,
    keys: Keys,
}

/// A route's keys, as its scheme uses them.
#[derive(Clone)]
enum Keys {
    /// Each secret's MAC keyed once, here: a request clones it instead of hashing the
    /// key's padded blocks again.
    Hmac(Vec<PreparedKey>),
    /// Public keys (Ed25519, ECDSA P-256), parsed once and shared with each request's
    /// verification.
    Public(Arc<[ParsedPublicKey]>),
}

impl Keys {
    fn len(&self) -> usize {
        match self {
            Keys::Hmac(keys) => keys.len(),
            Keys::Public(keys) => keys.len(),
        }
    }
}

/// How a route's signatures are checked.
#[derive(Clone, Debug)]
pub enum Scheme {
    /// Ed25519 of `id.timestamp.body`, base64 (`v1a`), with `whpk_` public keys.
    StandardEd25519 {
        /// The largest age (or lead) of the signed timestamp accepted.
        tolerance: Duration,
    },
    /// HMAC-SHA256 of `id.timestamp.body`, base64.
    Standard {
        /// The largest age (or lead) of the signed timestamp accepted.
        tolerance: Duration,
    },
    /// Ed25519 over `timestamp` + body, with public keys.
    Discord {
        /// The largest age (or lead) of the signed timestamp accepted.
        tolerance: Duration,
    },
    /// ECDSA P-256 with SHA-256 over `timestamp` + body, DER signatures, public keys.
    Sendgrid {
        /// The largest age (or lead) of the signed timestamp accepted.
        tolerance: Duration,
    },
    /// HMAC-SHA256 of `timestamp` + `token`, all three in the JSON body.
    Mailgun {
        /// The largest age (or lead) of the signed timestamp accepted.
        tolerance: Duration,
    },
    /// HMAC-SHA1 (or -SHA256) of the URL and the sorted form parameters, base64.
    Twilio,
    /// A configured HMAC.
    Hmac(HmacSpec),
}

impl Scheme {
    /// The signature algorithm of a scheme whose keys are public keys; `None` for HMAC.
    fn public_key_algorithm(&self) -> Option<&'static dyn VerificationAlgorithm> {
        match self {
            Scheme::Discord { .. } | Scheme::StandardEd25519 { .. } => Some(&ED25519),
            Scheme::Sendgrid { .. } => Some(&ECDSA_P256_SHA256_ASN1),
            _ => None,
        }
    }
}

impl Verifier {
    /// `secrets` are the key bytes as the scheme uses them (Standard Webhooks secrets
    /// already base64-decoded from `whsec_…`, public keys from hex or base64 as the
    /// config's checks left them). A public key that does not parse (the config refuses
    /// those) verifies nothing.
    pub fn new(scheme: Scheme, secrets: Vec<Vec<u8>>) -> Self {
        let keys = match scheme.public_key_algorithm() {
            Some(algorithm) => Keys::Public(
                secrets
                    .iter()
                    .filter_map(|key| ParsedPublicKey::new(algorithm, key).ok())
                    .collect(),
            ),
            None => Keys::Hmac(
                secrets
                    .iter()
                    .map(|secret| PreparedKey::new(secret))
                    .collect(),
            ),
        };
        Self { scheme, keys }
    }

    /// The scheme this verifier checks.
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// Reads the request head (`uri` is its target, for the schemes that sign the URL).
    /// An error here can be answered before the body is read; otherwise feed the body to
    /// the returned [`Verification`] as it arrives.
    pub fn start(&self, uri: &Uri, headers: &HeaderMap) -> Result<Verification, VerifyError> {
        let head = match &self.scheme {
            Scheme::Mailgun { tolerance } => {
                let reader = BodyReader::Mailgun(*tolerance);
                return Ok(Verification::in_body(self.keys.clone(), reader));
            }
            Scheme::Twilio => {
                let reader = BodyReader::Twilio(twilio::read_head(uri, headers)?);
                return Ok(Verification::in_body(self.keys.clone(), reader));
            }
            Scheme::Standard { tolerance } => {
                standard::read_head(headers, *tolerance, standard::Version::V1)?
            }
            Scheme::StandardEd25519 { tolerance } => {
                standard::read_head(headers, *tolerance, standard::Version::V1a)?
            }
            Scheme::Discord { tolerance } => discord::read_head(headers, *tolerance)?,
            Scheme::Sendgrid { tolerance } => sendgrid::read_head(headers, *tolerance)?,
            Scheme::Hmac(spec) => generic_hmac::read_head(spec, headers)?,
        };
        Ok(Verification::new(&self.keys, head))
    }

    /// The answer when a verified `body` is `provider`'s own handshake rather than an
    /// event (Slack `url_verification`, Zoom `endpoint.url_validation`, Discord `PING`):
    /// answered, never stored.
    pub fn handshake(
        &self,
        provider: Provider,
        body: &[u8],
        verified: &Verified,
    ) -> Option<ChallengeAnswer> {
        match provider {
            Provider::Slack => slack::url_verification_challenge(body).map(ChallengeAnswer::text),
            Provider::Zoom => {
                let plain = zoom::url_validation_token(body)?;
                // The token's HMAC under the secret that verified the request, so that
                // it holds mid-rotation.
                let encrypted = self.sign_with(verified.key(), plain.as_bytes())?;
                Some(ChallengeAnswer::json(&serde_json::json!({
                    "plainToken": plain,
                    "encryptedToken": const_hex::encode(encrypted),
                })))
            }
            Provider::Discord => discord::is_ping(body).then(ChallengeAnswer::no_content),
            _ => None,
        }
    }

    /// HMAC-SHA256 of `message` under the secret a verification matched.
    fn sign_with(&self, key: usize, message: &[u8]) -> Option<Vec<u8>> {
        let Keys::Hmac(keys) = &self.keys else {
            return None;
        };
        let mut mac = keys.get(key)?.start(Digest::Sha256);
        mac.update(message);
        Some(mac.finalize())
    }

    /// Verifies a request for `/` whose whole body is at hand (a scheme that signs the
    /// URL needs [`Verifier::start`] with the request's target).
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Verified, VerifyError> {
        let mut verification = self.start(&Uri::default(), headers)?;
        verification.update(body);
        verification.finish(now)
    }
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("scheme", &self.scheme)
            .field("keys", &format_args!("<{} redacted>", self.keys.len()))
            .finish()
    }
}

/// One request's verification in progress: a MAC per secret, already fed what the
/// provider signs before the body; or, for public keys, the signed message gathered.
pub struct Verification {
    check: Check,
    signatures: Vec<Vec<u8>>,
    timestamp: Option<SignedTimestamp>,
}

enum Check {
    Macs(Vec<MacState>),
    /// A public-key check takes the whole message at once (Ed25519 hashes it twice), so
    /// the body is kept here as it arrives; the route's `max_body` bounds it.
    Signature {
        keys: Arc<[ParsedPublicKey]>,
        message: Vec<u8>,
    },
    /// What is signed can only be read from the whole body (Mailgun's signature is in
    /// it, Twilio signs its sorted parameters): it is kept as it arrives and read once it
    /// is in; `max_body` bounds it.
    InBody {
        keys: Keys,
        body: Vec<u8>,
        reader: BodyReader,
    },
}

/// How a scheme that reads the whole body finds what was signed in it.
enum BodyReader {
    /// The signature, timestamp and token in the JSON body; the tolerance for it.
    Mailgun(Duration),
    /// The head already read; the body gives the parameters.
    Twilio(twilio::Head),
}

impl BodyReader {
    /// What was signed, one head per way the provider may have spelled it.
    fn signed_heads(self, body: &[u8]) -> Result<Vec<SignedHead>, VerifyError> {
        match self {
            BodyReader::Mailgun(tolerance) => Ok(vec![mailgun::read_body(body, tolerance)?]),
            BodyReader::Twilio(head) => head.signed_heads(body),
        }
    }
}

impl Verification {
    fn new(keys: &Keys, head: SignedHead) -> Self {
        let check = match keys {
            Keys::Hmac(keys) => Check::Macs(
                keys.iter()
                    .map(|key| {
                        let mut mac = key.start(head.digest);
                        mac.update(&head.prefix);
                        mac
                    })
                    .collect(),
            ),
            Keys::Public(keys) => Check::Signature {
                keys: Arc::clone(keys),
                message: head.prefix,
            },
        };
        Self {
            check,
            signatures: head.signatures,
            timestamp: head.timestamp,
        }
    }

    fn in_body(keys: Keys, reader: BodyReader) -> Self {
        Self {
            check: Check::InBody {
                keys,
                body: Vec::new(),
                reader,
            },
            signatures: Vec::new(),
            timestamp: None,
        }
    }

    /// The next bytes of the body.
    pub fn update(&mut self, chunk: &[u8]) {
        match &mut self.check {
            Check::Macs(macs) => {
                for mac in macs {
                    mac.update(chunk);
                }
            }
            Check::Signature { message, .. } | Check::InBody { body: message, .. } => {
                message.extend_from_slice(chunk)
            }
        }
    }

    /// The verdict once the whole body was fed: every secret's MAC against every
    /// offered signature (all pairs, so the time taken does not say which matched), then
    /// the signed timestamp against `now`.
    pub fn finish(self, now: SystemTime) -> Result<Verified, VerifyError> {
        let (key, mac) = match self.check {
            Check::InBody { keys, body, reader } => {
                let mut verdict = Err(VerifyError::Mismatch);
                for head in reader.signed_heads(&body)? {
                    verdict = Verification::new(&keys, head).finish(now);
                    if verdict.is_ok() {
                        break;
                    }
                }
                return verdict;
            }
            Check::Macs(macs) => matching_mac(macs, &self.signatures),
            Check::Signature { keys, message } => {
                matching_signature(&keys, &message, self.signatures)
            }
        }
        .ok_or(VerifyError::Mismatch)?;
        if let Some(t) = self.timestamp {
            check_timestamp(&t.raw, t.header, now, t.tolerance)?;
        }
        Ok(Verified { mac, key })
    }
}

/// Hex digits as bytes, strictly: `const_hex::decode` also takes a `0x` prefix, which
/// no provider sends and a signature header must not gain.
fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    if !const_hex::check_raw(text) {
        return None;
    }
    const_hex::decode(text).ok()
}

/// Which secret's MAC is one of `signatures`, and that MAC.
fn matching_mac(macs: Vec<MacState>, signatures: &[Vec<u8>]) -> Option<(usize, Vec<u8>)> {
    let mut matched = None;
    for (key, mac) in macs.into_iter().enumerate() {
        let tag = mac.finalize();
        let mut any = Choice::from(0);
        for signature in signatures {
            any |= tag.as_slice().ct_eq(signature);
        }
        // Which of our secrets matched is no secret; the bytes compared stay so.
        if bool::from(any) && matched.is_none() {
            matched = Some((key, tag));
        }
    }
    matched
}

/// Which public key signed `message` with one of `signatures`, and that signature. Each
/// pair is one signature check: keys and candidates are both capped.
fn matching_signature(
    keys: &[ParsedPublicKey],
    message: &[u8],
    signatures: Vec<Vec<u8>>,
) -> Option<(usize, Vec<u8>)> {
    keys.iter().enumerate().find_map(|(key, public)| {
        signatures
            .iter()
            .find(|signature| public.verify_sig(message, signature).is_ok())
            .map(|signature| (key, signature.clone()))
    })
}

/// A request whose signature matched.
#[derive(Debug, PartialEq, Eq)]
pub struct Verified {
    mac: Vec<u8>,
    key: usize,
}

impl Verified {
    /// The signature that matched: the provider's MAC (or Ed25519 signature) of what it
    /// signed, which keys an event whose id is not signed (`crate::event`).
    pub fn mac(&self) -> &[u8] {
        &self.mac
    }

    /// Which of the route's secrets matched (its place in the list).
    pub fn key(&self) -> usize {
        self.key
    }
}

/// One secret as a keyed MAC for each digest a scheme may name (the digest is read
/// from the request head).
#[derive(Clone)]
struct PreparedKey {
    sha1: Hmac<Sha1>,
    sha256: Hmac<Sha256>,
    sha512: Hmac<Sha512>,
}

impl PreparedKey {
    #[expect(clippy::expect_used, reason = "HMAC takes keys of any length")]
    fn new(secret: &[u8]) -> Self {
        Self {
            sha1: Hmac::new_from_slice(secret).expect("HMAC takes keys of any length"),
            sha256: Hmac::new_from_slice(secret).expect("HMAC takes keys of any length"),
            sha512: Hmac::new_from_slice(secret).expect("HMAC takes keys of any length"),
        }
    }

    fn start(&self, digest: Digest) -> MacState {
        match digest {
            Digest::Sha1 => MacState::Sha1(self.sha1.clone()),
            Digest::Sha256 => MacState::Sha256(self.sha256.clone()),
            Digest::Sha512 => MacState::Sha512(self.sha512.clone()),
        }
    }
}

/// One secret's MAC over the signed bytes, as they arrive.
enum MacState {
    Sha1(Hmac<Sha1>),
    Sha256(Hmac<Sha256>),
    Sha512(Hmac<Sha512>),
}

impl MacState {
    fn update(&mut self, bytes: &[u8]) {
        match self {
            MacState::Sha1(mac) => mac.update(bytes),
            MacState::Sha256(mac) => mac.update(bytes),
            MacState::Sha512(mac) => mac.update(bytes),
        }
    }

    fn finalize(self) -> Vec<u8> {
        match self {
            MacState::Sha1(mac) => mac.finalize().into_bytes().to_vec(),
            MacState::Sha256(mac) => mac.finalize().into_bytes().to_vec(),
            MacState::Sha512(mac) => mac.finalize().into_bytes().to_vec(),
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use http::{HeaderMap, HeaderName, HeaderValue};

    pub(crate) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    /// What `scheme` with `secrets` says of a request for `/`, at `now`.
    pub(crate) fn verdict(
        scheme: super::Scheme,
        secrets: &[Vec<u8>],
        headers: &HeaderMap,
        body: &[u8],
        now: std::time::SystemTime,
    ) -> Result<(), super::VerifyError> {
        super::Verifier::new(scheme, secrets.to_vec())
            .verify(headers, body, now)
            .map(|_| ())
    }

    /// Each of `values` in `header` (beside the `others`) is a malformed header for
    /// `verifier`, refused before any key is tried.
    pub(crate) fn assert_malformed(
        verifier: &super::Verifier,
        header: &'static str,
        values: &[&str],
        others: &[(&str, &str)],
    ) {
        for value in values {
            let mut pairs = vec![(header, *value)];
            pairs.extend_from_slice(others);
            assert_eq!(
                verifier
                    .verify(&headers(&pairs), b"{}", std::time::SystemTime::now())
                    .map(|_| ()),
                Err(super::VerifyError::MalformedHeader(header)),
                "{value}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::headers;
    use super::*;

    #[test]
    fn hex_is_read_strictly() {
        assert_eq!(hex_bytes("00aBff"), Some(vec![0, 0xab, 0xff]));
        assert_eq!(hex_bytes(""), Some(Vec::new()));
        for refused in ["0x00ab", "0X00ab", "abc", "zz", " 00", "00 ", "é0"] {
            assert_eq!(hex_bytes(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn a_body_fed_in_chunks_verifies_like_the_whole() {
        let secret = b"chunked".to_vec();
        let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut mac = Hmac::<Sha256>::new_from_slice(&secret).unwrap();
        mac.update(&body);
        let signature_bytes = mac.finalize().into_bytes().to_vec();
        let signature = format!("sha256={}", const_hex::encode(&signature_bytes));
        let verifier = Verifier::new(github(), vec![secret]);
        for chunk_len in [1, 7, 16_384, body.len()] {
            let mut verification = verifier
                .start(&Uri::default(), &github_head(&signature))
                .unwrap();
            for chunk in body.chunks(chunk_len) {
                verification.update(chunk);
            }
            let verified = verification.finish(SystemTime::now()).unwrap();
            assert_eq!(verified.mac(), &signature_bytes[..], "{chunk_len}");
        }
        let mut short = verifier
            .start(&Uri::default(), &github_head(&signature))
            .unwrap();
        short.update(&body[1..]);
        assert_eq!(short.finish(SystemTime::now()), Err(VerifyError::Mismatch));
    }

    /// The work a request costs is one MAC per configured secret, whatever it offers.
    #[test]
    fn one_mac_per_secret_however_many_signatures_are_offered() {
        let secrets: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 16]).collect();
        let stripe = preset(Provider::Stripe, Duration::from_secs(300)).unwrap();
        let verifier = Verifier::new(Scheme::Hmac(stripe), secrets);
        let many = format!(
            "t=1,{}",
            vec![format!("v1={}", "ab".repeat(32)); 8].join(",")
        );
        let verification = verifier
            .start(&Uri::default(), &headers(&[("Stripe-Signature", &many)]))
            .unwrap();
        let Check::Macs(macs) = &verification.check else {
            panic!("a secret's route computes MACs");
        };
        assert_eq!((macs.len(), verification.signatures.len()), (3, 8));
    }

    #[test]
    fn a_verifiers_debug_hides_its_secrets() {
        let secret = b"hunter2-secret".to_vec();
        let as_bytes = format!("{secret:?}");
        let verifier = Verifier::new(github(), vec![secret]);
        let shown = format!("{verifier:?}");
        assert!(!shown.contains(&as_bytes[1..as_bytes.len() - 1]), "{shown}");
        assert!(shown.contains("<1 redacted>"), "{shown}");
    }

    fn github() -> Scheme {
        Scheme::Hmac(preset(Provider::Github, Duration::from_secs(300)).unwrap())
    }

    fn github_head(signature: &str) -> HeaderMap {
        headers(&[("X-Hub-Signature-256", signature)])
    }
}
