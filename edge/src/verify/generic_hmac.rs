//! HMAC schemes as data: where the signatures are (a header, whole or split into parts,
//! each after a prefix), what the provider MACs before the body (a template over the
//! signed timestamp and the delivery id), the hash and the encoding. A route with
//! `provider: hmac` writes one in its `hmac:` block; the presets (GitHub, Shopify,
//! Paddle, PagerDuty, Linear, Intercom) are written in it too ([`preset`]).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::{HeaderMap, HeaderName};

use super::Provider;
use super::signed_head::{Digest, Signatures, SignedHead, SignedTimestamp, VerifyError};

/// How a signature is written in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Hexadecimal.
    Hex,
    /// Base64.
    Base64,
}

/// An HMAC scheme: the signature header, what is signed, the hash and the encoding.
#[derive(Clone, Debug)]
pub struct HmacSpec {
    /// The header that carries the signatures.
    pub header: HeaderName,
    /// The digest.
    pub digest: Digest,
    /// How each signature is encoded.
    pub encoding: Encoding,
    /// Text before each signature (`sha256=`, `v1=`), removed before decoding.
    pub prefix: String,
    /// Splits the header into parts (`,` for several signatures, `;` for Paddle's
    /// `ts=…;h1=…`); a part after `prefix` is a signature, any other is skipped unless it
    /// is the timestamp field. `None`: the whole value is one signature.
    pub separator: Option<char>,
    /// Where the signed timestamp is, when the provider signs one.
    pub timestamp: Option<TimestampSpec>,
    /// What the provider MACs before the body (the body always comes last).
    pub signed: Vec<Piece>,
    /// What errors call the places it reads (a preset names its headers).
    pub labels: Labels,
}

/// What a scheme's errors call its signature, timestamp and id: the provider's header
/// names for a preset, fixed words for a configured scheme (whose names are not
/// `'static`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Labels {
    /// The signature header.
    pub signature: &'static str,
    /// The signed timestamp.
    pub timestamp: &'static str,
    /// The id header in the signed template.
    pub id: &'static str,
}

impl Labels {
    /// A scheme written in a route's `hmac:` block.
    pub const CONFIGURED: Labels = Labels {
        signature: "configured signature header",
        timestamp: "configured timestamp",
        id: "configured id header",
    };

    /// A preset whose signature (and any timestamp field) is in `header`.
    const fn preset(header: &'static str) -> Labels {
        Labels {
            signature: header,
            timestamp: header,
            id: Labels::CONFIGURED.id,
        }
    }
}

/// Where a signed timestamp is, and how far from now it may be.
#[derive(Clone, Debug)]
pub struct TimestampSpec {
    /// Its header, or its field in the signature header.
    pub source: TimestampSource,
    /// The largest age (or lead) accepted.
    pub tolerance: Duration,
}

/// Where a signed timestamp is.
#[derive(Clone, Debug)]
pub enum TimestampSource {
    /// A header of its own (Unix seconds).
    Header(HeaderName),
    /// The part of the signature header after this text (`ts=`, `t=`).
    Field(String),
}

/// One piece of what is signed before the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Literal text.
    Text(String),
    /// The signed timestamp, as sent.
    Timestamp,
    /// A header's value as sent (the delivery id).
    Header(HeaderName),
}

/// Why a `signed` template cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// It does not end in `{body}`, or names it twice.
    #[error("must end with {{body}}, once (the body is signed as it arrives)")]
    BodyNotLast,
    /// `{timestamp}` without a timestamp source.
    #[error("{{timestamp}} needs hmac.timestamp")]
    NoTimestamp,
    /// `{id}` without an id header.
    #[error("{{id}} needs hmac.id_header")]
    NoIdHeader,
    /// A `{…}` that is not one of the above, or an unclosed brace.
    #[error("knows only {{timestamp}}, {{id}} and {{body}}")]
    UnknownPlaceholder,
}

/// Reads a `signed` template: text with `{timestamp}` and `{id}` (the `id_header`'s
/// value), ending in `{body}`; `has_timestamp` says whether the scheme has a timestamp.
pub fn parse_template(
    template: &str,
    has_timestamp: bool,
    id_header: Option<&HeaderName>,
) -> Result<Vec<Piece>, TemplateError> {
    let head = template
        .strip_suffix("{body}")
        .filter(|head| !head.contains("{body}"))
        .ok_or(TemplateError::BodyNotLast)?;
    let mut pieces = Vec::new();
    let mut rest = head;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_owned()));
        }
        let close = rest[open..]
            .find('}')
            .ok_or(TemplateError::UnknownPlaceholder)?;
        pieces.push(match &rest[open + 1..open + close] {
            "timestamp" if has_timestamp => Piece::Timestamp,
            "timestamp" => return Err(TemplateError::NoTimestamp),
            "id" => Piece::Header(id_header.cloned().ok_or(TemplateError::NoIdHeader)?),
            _ => return Err(TemplateError::UnknownPlaceholder),
        });
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    Ok(pieces)
}

/// The scheme of a provider written as a preset of this language; `None` for providers
/// with a scheme of their own. `tolerance` is the route's, for signed timestamps.
pub fn preset(provider: Provider, tolerance: Duration) -> Option<HmacSpec> {
    let spec = match provider {
        // `X-Hub-Signature-256: sha256=<hex>` over the body.
        Provider::Github => body_signature("x-hub-signature-256", Digest::Sha256, "sha256="),
        // `X-Shopify-Hmac-Sha256: <base64>` over the body.
        Provider::Shopify => HmacSpec {
            encoding: Encoding::Base64,
            ..body_signature("x-shopify-hmac-sha256", Digest::Sha256, "")
        },
        // `X-Slack-Signature: v0=<hex>` over `v0:{X-Slack-Request-Timestamp}:{body}`.
        Provider::Slack => {
            v0_signature("x-slack-signature", "x-slack-request-timestamp", tolerance)
        }
        // Slack's construction under Zoom's header names.
        Provider::Zoom => v0_signature("x-zm-signature", "x-zm-request-timestamp", tolerance),
        // `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…][,v0=…]` over `t.body`; several
        // `v1` while Stripe rolls a secret, `v0` (test mode's legacy) ignored.
        Provider::Stripe => HmacSpec {
            header: HeaderName::from_static("stripe-signature"),
            digest: Digest::Sha256,
            encoding: Encoding::Hex,
            prefix: "v1=".into(),
            separator: Some(','),
            timestamp: Some(TimestampSpec {
                source: TimestampSource::Field("t=".into()),
                tolerance,
            }),
            signed: vec![Piece::Timestamp, Piece::Text(".".into())],
            labels: Labels::preset("stripe-signature"),
        },
        // `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=…]` over `ts:body`.
        Provider::Paddle => HmacSpec {
            header: HeaderName::from_static("paddle-signature"),
            digest: Digest::Sha256,
            encoding: Encoding::Hex,
            prefix: "h1=".into(),
            separator: Some(';'),
            timestamp: Some(TimestampSpec {
                source: TimestampSource::Field("ts=".into()),
                tolerance,
            }),
            signed: vec![Piece::Timestamp, Piece::Text(":".into())],
            labels: Labels::preset("paddle-signature"),
        },
        // `X-PagerDuty-Signature: v1=<hex>[,v1=<hex>]` (one per active secret) over the body.
        Provider::Pagerduty => HmacSpec {
            separator: Some(','),
            ..body_signature("x-pagerduty-signature", Digest::Sha256, "v1=")
        },
        // `Linear-Signature: <hex>` over the body.
        Provider::Linear => body_signature("linear-signature", Digest::Sha256, ""),
        // `X-Hub-Signature: sha1=<hex>` over the body, keyed by the app's client secret.
        Provider::Intercom => body_signature("x-hub-signature", Digest::Sha1, "sha1="),
        _ => return None,
    };
    Some(spec)
}

pub(super) fn read_head(spec: &HmacSpec, headers: &HeaderMap) -> Result<SignedHead, VerifyError> {
    let value = configured_header(headers, &spec.header, spec.labels.signature)?;
    let field = match &spec.timestamp {
        Some(TimestampSpec {
            source: TimestampSource::Field(field),
            ..
        }) => Some(field.as_str()),
        _ => None,
    };
    let mut signatures = Signatures::new(spec.digest, spec.labels.signature);
    let mut field_timestamp = None;
    match spec.separator {
        None => {
            let encoded = value
                .strip_prefix(spec.prefix.as_str())
                .ok_or(VerifyError::MalformedHeader(spec.labels.signature))?;
            signatures.push(decode(spec.encoding, encoded))?;
        }
        Some(separator) => {
            for part in value.split(separator).map(str::trim) {
                if let Some(raw) = field.and_then(|field| part.strip_prefix(field)) {
                    // Two signed timestamps: which one was signed is anyone's guess.
                    if field_timestamp.replace(raw).is_some() {
                        return Err(VerifyError::MalformedHeader(spec.labels.timestamp));
                    }
                } else if let Some(encoded) = part.strip_prefix(spec.prefix.as_str()) {
                    signatures.push(decode(spec.encoding, encoded))?;
                }
            }
        }
    }
    let timestamp = match &spec.timestamp {
        None => None,
        Some(t) => {
            let raw = match &t.source {
                TimestampSource::Header(name) => {
                    configured_header(headers, name, spec.labels.timestamp)?
                }
                TimestampSource::Field(_) => {
                    field_timestamp.ok_or(VerifyError::MalformedHeader(spec.labels.timestamp))?
                }
            };
            Some(SignedTimestamp {
                raw: raw.to_owned(),
                header: spec.labels.timestamp,
                tolerance: t.tolerance,
            })
        }
    };
    let mut prefix = Vec::new();
    for piece in &spec.signed {
        match piece {
            Piece::Text(text) => prefix.extend_from_slice(text.as_bytes()),
            Piece::Timestamp => {
                let raw = timestamp.as_ref().map(|t| t.raw.as_bytes());
                prefix.extend_from_slice(raw.unwrap_or_default());
            }
            Piece::Header(name) => {
                prefix.extend_from_slice(
                    configured_header(headers, name, spec.labels.id)?.as_bytes(),
                );
            }
        }
    }
    signatures.into_head(prefix, timestamp)
}

/// `{header}: v0=<hex>` over `v0:{timestamp}:{body}`, the timestamp in a header of its own
/// (Slack's construction, which Zoom reuses).
fn v0_signature(header: &'static str, timestamp: &'static str, tolerance: Duration) -> HmacSpec {
    HmacSpec {
        header: HeaderName::from_static(header),
        digest: Digest::Sha256,
        encoding: Encoding::Hex,
        prefix: "v0=".into(),
        separator: None,
        timestamp: Some(TimestampSpec {
            source: TimestampSource::Header(HeaderName::from_static(timestamp)),
            tolerance,
        }),
        signed: vec![
            Piece::Text("v0:".into()),
            Piece::Timestamp,
            Piece::Text(":".into()),
        ],
        labels: Labels {
            signature: header,
            timestamp,
            id: Labels::CONFIGURED.id,
        },
    }
}

/// A preset's one signature of the body alone, whole in `header` after `prefix`.
fn body_signature(header: &'static str, digest: Digest, prefix: &str) -> HmacSpec {
    HmacSpec {
        header: HeaderName::from_static(header),
        digest,
        encoding: Encoding::Hex,
        prefix: prefix.into(),
        separator: None,
        timestamp: None,
        signed: Vec::new(),
        labels: Labels::preset(header),
    }
}

fn decode(encoding: Encoding, encoded: &str) -> Option<Vec<u8>> {
    match encoding {
        Encoding::Hex => super::hex_bytes(encoded),
        Encoding::Base64 => BASE64.decode(encoded).ok(),
    }
}

/// A header's trimmed ASCII value; errors name it by `label`.
fn configured_header<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
    label: &'static str,
) -> Result<&'h str, VerifyError> {
    let value = headers.get(name).ok_or(VerifyError::MissingHeader(label))?;
    value
        .to_str()
        .map(str::trim)
        .map_err(|_| VerifyError::MalformedHeader(label))
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    use super::*;
    use crate::verify::test_support::headers;
    use crate::verify::{Scheme, Verifier};

    fn verify_at(
        spec: &HmacSpec,
        secrets: &[&[u8]],
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let secrets = secrets.iter().map(|s| s.to_vec()).collect();
        Verifier::new(Scheme::Hmac(spec.clone()), secrets)
            .verify(headers, body, now)
            .map(|_| ())
    }

    fn verify(
        spec: &HmacSpec,
        secrets: &[&[u8]],
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), VerifyError> {
        verify_at(spec, secrets, headers, body, SystemTime::now())
    }

    /// A scheme as a route's `hmac:` block would write it.
    fn spec(digest: Digest, encoding: Encoding, prefix: &str) -> HmacSpec {
        HmacSpec {
            encoding,
            labels: Labels::CONFIGURED,
            ..body_signature("x-signature", digest, prefix)
        }
    }

    fn hmac_sha256_hex(key: &[u8], message: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
        mac.update(message);
        const_hex::encode(mac.finalize().into_bytes())
    }

    // RFC 4231 test case 2 and RFC 2202 test case 2: key "Jefe", data "what do ya want
    // for nothing?".
    const RFC_KEY: &[u8] = b"Jefe";
    const RFC_DATA: &[u8] = b"what do ya want for nothing?";
    const RFC_SHA1: &str = "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79";
    const RFC_SHA256: &str = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
    const RFC_SHA512: &str = "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737";

    #[test]
    fn rfc_vectors_for_each_digest_in_hex_with_prefix() {
        let s = spec(Digest::Sha256, Encoding::Hex, "sha256=");
        let h = headers(&[("x-signature", &format!("sha256={RFC_SHA256}"))]);
        assert_eq!(verify(&s, &[RFC_KEY], &h, RFC_DATA), Ok(()));

        let s = spec(Digest::Sha512, Encoding::Hex, "");
        let h = headers(&[("x-signature", RFC_SHA512)]);
        assert_eq!(verify(&s, &[b"x", RFC_KEY], &h, RFC_DATA), Ok(()));
        assert_eq!(
            verify(&s, &[b"x"], &h, RFC_DATA),
            Err(VerifyError::Mismatch)
        );

        let s = spec(Digest::Sha1, Encoding::Hex, "sha1=");
        let h = headers(&[("x-signature", &format!("sha1={RFC_SHA1}"))]);
        assert_eq!(verify(&s, &[RFC_KEY], &h, RFC_DATA), Ok(()));
        assert_eq!(
            verify(&s, &[RFC_KEY], &h, b"other"),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn base64_encoding() {
        let s = spec(Digest::Sha256, Encoding::Base64, "");
        let b64 = BASE64.encode(const_hex::decode(RFC_SHA256).unwrap());
        let h = headers(&[("x-signature", &b64)]);
        assert_eq!(verify(&s, &[RFC_KEY], &h, RFC_DATA), Ok(()));
        assert_eq!(
            verify(&s, &[RFC_KEY], &h, b"other"),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn missing_prefix_or_bad_encoding_is_malformed() {
        let s = spec(Digest::Sha256, Encoding::Hex, "sha256=");
        let k: &[&[u8]] = &[RFC_KEY];
        assert_eq!(
            verify(&s, k, &headers(&[]), RFC_DATA),
            Err(VerifyError::MissingHeader(Labels::CONFIGURED.signature))
        );
        for bad in [
            RFC_SHA256,
            "sha256=nothex",
            "sha256=abcd",
            &format!("sha256={RFC_SHA512}"),
        ] {
            let h = headers(&[("x-signature", bad)]);
            assert_eq!(
                verify(&s, k, &h, RFC_DATA),
                Err(VerifyError::MalformedHeader(Labels::CONFIGURED.signature)),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_split_header_offers_every_prefixed_part_and_skips_the_rest() {
        let s = preset(Provider::Pagerduty, TOL).unwrap();
        let good = hmac_sha256_hex(b"new", RFC_DATA);
        let old = hmac_sha256_hex(b"old", RFC_DATA);
        let h = headers(&[("x-pagerduty-signature", &format!("v1={old}, v1={good}"))]);
        assert_eq!(verify(&s, &[b"new"], &h, RFC_DATA), Ok(()));
        assert_eq!(verify(&s, &[b"old"], &h, RFC_DATA), Ok(()));
        let h = headers(&[("x-pagerduty-signature", &format!("v0=zz,v1=xyz,v1={good}"))]);
        assert_eq!(verify(&s, &[b"new"], &h, RFC_DATA), Ok(()));
        let h = headers(&[("x-pagerduty-signature", &format!("v2={good}"))]);
        assert_eq!(
            verify(&s, &[b"new"], &h, RFC_DATA),
            Err(VerifyError::MalformedHeader("x-pagerduty-signature")),
            "no part is a signature"
        );
        let many = vec![format!("v1={old}"); 9].join(",");
        let h = headers(&[("x-pagerduty-signature", &many)]);
        assert_eq!(
            verify(&s, &[b"new"], &h, RFC_DATA),
            Err(VerifyError::MalformedHeader("x-pagerduty-signature")),
            "candidates are capped"
        );
    }

    #[test]
    fn paddle_signs_its_timestamp_field_and_the_body() {
        let s = preset(Provider::Paddle, TOL).unwrap();
        let body = br#"{"event_id":"evt_01","event_type":"transaction.completed","data":{}}"#;
        let ts = "1700000000";
        let h1 = hmac_sha256_hex(b"pdl_ntfset_secret", &[ts.as_bytes(), b":", body].concat());
        let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
        let h = headers(&[("paddle-signature", &format!("ts={ts};h1={h1}"))]);
        let key: &[&[u8]] = &[b"pdl_ntfset_secret"];
        assert_eq!(verify_at(&s, key, &h, body, at(1_700_000_004)), Ok(()));
        assert_eq!(
            verify_at(&s, key, &h, b"{}", at(1_700_000_004)),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify_at(&s, key, &h, body, at(1_700_000_301)),
            Err(VerifyError::StaleTimestamp)
        );
        let other_ts = headers(&[("paddle-signature", &format!("ts=1700000001;h1={h1}"))]);
        assert_eq!(
            verify_at(&s, key, &other_ts, body, at(1_700_000_004)),
            Err(VerifyError::Mismatch),
            "the timestamp is signed"
        );
        let no_ts = headers(&[("paddle-signature", &format!("h1={h1}"))]);
        assert_eq!(
            verify_at(&s, key, &no_ts, body, at(1_700_000_004)),
            Err(VerifyError::MalformedHeader("paddle-signature"))
        );
    }

    #[test]
    fn a_template_with_id_and_timestamp_headers_is_signed_as_written() {
        let id = HeaderName::from_static("x-id");
        let s = HmacSpec {
            timestamp: Some(TimestampSpec {
                source: TimestampSource::Header(HeaderName::from_static("x-ts")),
                tolerance: TOL,
            }),
            signed: parse_template("{id}.{timestamp}.{body}", true, Some(&id)).unwrap(),
            ..spec(Digest::Sha256, Encoding::Hex, "")
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .to_string();
        let mac = hmac_sha256_hex(b"k", format!("msg_1.{now}.hello").as_bytes());
        let h = headers(&[("x-signature", &mac), ("x-id", "msg_1"), ("x-ts", &now)]);
        assert_eq!(verify(&s, &[b"k"], &h, b"hello"), Ok(()));
        let h = headers(&[("x-signature", &mac), ("x-id", "msg_2"), ("x-ts", &now)]);
        assert_eq!(
            verify(&s, &[b"k"], &h, b"hello"),
            Err(VerifyError::Mismatch)
        );
        let h = headers(&[("x-signature", &mac), ("x-ts", &now)]);
        assert_eq!(
            verify(&s, &[b"k"], &h, b"hello"),
            Err(VerifyError::MissingHeader(Labels::CONFIGURED.id))
        );
    }

    #[test]
    fn templates_end_in_the_body_and_name_only_what_the_scheme_has() {
        let id = HeaderName::from_static("x-id");
        assert_eq!(parse_template("{body}", false, None), Ok(vec![]));
        assert_eq!(
            parse_template("v0:{timestamp}:{body}", true, None),
            Ok(vec![
                Piece::Text("v0:".into()),
                Piece::Timestamp,
                Piece::Text(":".into())
            ])
        );
        assert_eq!(
            parse_template("{id}{body}", false, Some(&id)),
            Ok(vec![Piece::Header(id.clone())])
        );
        for (template, error) in [
            ("{body}.{timestamp}", TemplateError::BodyNotLast),
            ("{body}{body}", TemplateError::BodyNotLast),
            ("", TemplateError::BodyNotLast),
            ("{timestamp}{body}", TemplateError::NoTimestamp),
            ("{id}{body}", TemplateError::NoIdHeader),
            ("{url}{body}", TemplateError::UnknownPlaceholder),
            ("{oops{body}", TemplateError::UnknownPlaceholder),
        ] {
            assert_eq!(
                parse_template(template, false, None),
                Err(error),
                "{template}"
            );
        }
    }

    // Published in GitHub's "Validating webhook deliveries" documentation.
    const GITHUB_SECRET: &[u8] = b"It's a Secret to Everybody";
    const GITHUB_BODY: &[u8] = b"Hello, World!";
    const GITHUB_SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn github_accepts_its_documented_vector_and_names_its_header() {
        let s = preset(Provider::Github, TOL).unwrap();
        let h = headers(&[("X-Hub-Signature-256", GITHUB_SIGNATURE)]);
        assert_eq!(
            verify(&s, &[b"new", GITHUB_SECRET], &h, GITHUB_BODY),
            Ok(())
        );
        assert_eq!(
            verify(&s, &[GITHUB_SECRET], &h, b"Hello, World?"),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&s, &[GITHUB_SECRET], &headers(&[]), GITHUB_BODY),
            Err(VerifyError::MissingHeader("x-hub-signature-256"))
        );
        // Hex of any length but a SHA-256 MAC's can never match: malformed, like bad hex.
        for bad in [
            "757107ea",
            "sha1=757107ea",
            "sha256=zz",
            "sha256=abc",
            "sha256=abcd",
            "sha256=",
        ] {
            let h = headers(&[("X-Hub-Signature-256", bad)]);
            assert_eq!(
                verify(&s, &[GITHUB_SECRET], &h, GITHUB_BODY),
                Err(VerifyError::MalformedHeader("x-hub-signature-256")),
                "{bad}"
            );
        }
    }

    #[test]
    fn shopify_accepts_an_openssl_computed_signature_and_names_its_header() {
        // `printf '{"id":1}' | openssl dgst -sha256 -hmac shpss_secret -binary | base64`
        let (secret, body) = (b"shpss_secret", br#"{"id":1}"#);
        let s = preset(Provider::Shopify, TOL).unwrap();
        let h = headers(&[(
            "X-Shopify-Hmac-Sha256",
            "xocA3LkeJ/RvNrkxep1EUtFHuj7rIoIqZYaLU26LyPQ=",
        )]);
        assert_eq!(verify(&s, &[b"new", secret], &h, body), Ok(()));
        assert_eq!(
            verify(&s, &[secret], &h, br#"{"id":2}"#),
            Err(VerifyError::Mismatch)
        );
        for bad in ["not*base64", "AAAA", ""] {
            let h = headers(&[("X-Shopify-Hmac-Sha256", bad)]);
            assert_eq!(
                verify(&s, &[secret], &h, body),
                Err(VerifyError::MalformedHeader("x-shopify-hmac-sha256")),
                "{bad}"
            );
        }
    }

    const TOL: Duration = Duration::from_secs(300);

    /// The Stripe preset against Stripe's documented construction, its libraries'
    /// leniencies and the floods the cap refuses.
    mod stripe {
        use std::time::{Duration, SystemTime, UNIX_EPOCH};

        use hmac::{Hmac, Mac};
        use http::HeaderMap;
        use sha2::Sha256;

        use crate::verify::test_support::{headers, verdict};
        use crate::verify::{MAX_SIGNATURES, Provider, Scheme, VerifyError, preset};

        fn verify(
            secrets: &[Vec<u8>],
            headers: &HeaderMap,
            body: &[u8],
            now: SystemTime,
            tolerance: Duration,
        ) -> Result<(), VerifyError> {
            let stripe = preset(Provider::Stripe, tolerance).unwrap();
            verdict(Scheme::Hmac(stripe), secrets, headers, body, now)
        }

        const SIGNATURE_HEADER: &str = "stripe-signature";
        const SECRET: &[u8] = b"whsec_test_secret";
        const BODY: &[u8] = br#"{"id":"evt_1","object":"event"}"#;
        const T: u64 = 1_700_000_000;
        const TOL: Duration = Duration::from_secs(300);

        fn sign(secret: &[u8], t: u64, body: &[u8]) -> String {
            let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
            mac.update(format!("{t}.").as_bytes());
            mac.update(body);
            const_hex::encode(mac.finalize().into_bytes())
        }

        fn at(secs: u64) -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(secs)
        }

        // Cross-checked with `printf '1700000000.{"id":"evt_1","object":"event"}' |
        // openssl dgst -sha256 -hmac whsec_test_secret`.
        const OPENSSL_SIGNATURE: &str =
            "0c8670ed117751cc551a20e35839447075c42800ea3cf3e8a2fbda99cd1e6edd";

        #[test]
        fn matches_an_independent_implementation() {
            assert_eq!(sign(SECRET, T, BODY), OPENSSL_SIGNATURE);
        }

        #[test]
        fn accepts_a_fresh_signature_and_any_of_several_v1() {
            let good = sign(SECRET, T, BODY);
            let h = headers(&[("Stripe-Signature", &format!("t={T},v1={good}"))]);
            assert_eq!(
                verify(&[SECRET.to_vec()], &h, BODY, at(T + 10), TOL),
                Ok(())
            );

            let rolled = format!("t={T},v1={},v1={good},v0=00", "ab".repeat(32));
            let h = headers(&[("Stripe-Signature", &rolled)]);
            assert_eq!(verify(&[SECRET.to_vec()], &h, BODY, at(T), TOL), Ok(()));
        }

        /// stripe-python's `verify_header` accepts a valid `v1` beside one that cannot be a
        /// MAC; so does the edge.
        #[test]
        fn a_malformed_candidate_beside_a_valid_one_is_skipped() {
            let good = sign(SECRET, T, BODY);
            for header in [
                format!("t={T},v1=deadbeef,v1={good}"),
                format!("t={T},v1=zz,v1={good}"),
                format!("t={T},v1=,v1={good}"),
            ] {
                let h = headers(&[("Stripe-Signature", &header)]);
                assert_eq!(
                    verify(&[SECRET.to_vec()], &h, BODY, at(T), TOL),
                    Ok(()),
                    "{header}"
                );
            }
        }

        #[test]
        fn rotated_secret_on_our_side() {
            let good = sign(b"old", T, BODY);
            let h = headers(&[("Stripe-Signature", &format!("t={T},v1={good}"))]);
            let secrets = vec![b"new".to_vec(), b"old".to_vec()];
            assert_eq!(verify(&secrets, &h, BODY, at(T), TOL), Ok(()));
            assert_eq!(
                verify(&secrets[..1], &h, BODY, at(T), TOL),
                Err(VerifyError::Mismatch)
            );
        }

        #[test]
        fn tolerance_both_sides() {
            let good = sign(SECRET, T, BODY);
            let h = headers(&[("Stripe-Signature", &format!("t={T},v1={good}"))]);
            let s = [SECRET.to_vec()];
            assert_eq!(verify(&s, &h, BODY, at(T + 300), TOL), Ok(()));
            assert_eq!(
                verify(&s, &h, BODY, at(T + 301), TOL),
                Err(VerifyError::StaleTimestamp)
            );
            assert_eq!(
                verify(&s, &h, BODY, at(T - 301), TOL),
                Err(VerifyError::FutureTimestamp)
            );
        }

        #[test]
        fn timestamp_is_covered_by_the_signature() {
            let good = sign(SECRET, T, BODY);
            let h = headers(&[("Stripe-Signature", &format!("t={},v1={good}", T + 1))]);
            assert_eq!(
                verify(&[SECRET.to_vec()], &h, BODY, at(T), TOL),
                Err(VerifyError::Mismatch)
            );
        }

        #[test]
        fn malformed_headers() {
            let s = [SECRET.to_vec()];
            let malformed = Err(VerifyError::MalformedHeader(SIGNATURE_HEADER));
            assert_eq!(
                verify(&s, &headers(&[]), BODY, at(T), TOL),
                Err(VerifyError::MissingHeader(SIGNATURE_HEADER))
            );
            let short = "ab".repeat(31);
            for bad in [
                "",
                "t=1",
                "v1=00",
                "t=1,t=2,v1=00",
                "t=1,v1=zz",
                "garbage",
                "t=1,v1=",
                &format!("t=1,v1={short}"),
            ] {
                let h = headers(&[("Stripe-Signature", bad)]);
                assert_eq!(verify(&s, &h, BODY, at(T), TOL), malformed, "{bad}");
            }
            // A non-numeric timestamp cannot have been signed by the secret holder.
            let h = headers(&[("Stripe-Signature", &format!("t=abc,v1={}", "00".repeat(32)))]);
            assert_eq!(verify(&s, &h, BODY, at(T), TOL), Err(VerifyError::Mismatch));
        }

        /// The flood that cost 2.4 s a request: more candidates than the cap, empty or
        /// real-looking, make the header malformed before any MAC is computed.
        #[test]
        fn signature_floods_are_malformed_not_computed() {
            let s = [SECRET.to_vec()];
            let good = sign(SECRET, T, BODY);
            let empties = format!("t={T},{}", vec!["v1="; 3500].join(","));
            let over_cap = format!(
                "t={T},{},v1={good}",
                vec![format!("v1={}", "ab".repeat(32)); MAX_SIGNATURES].join(",")
            );
            for flood in [empties, over_cap] {
                let h = headers(&[("Stripe-Signature", &flood)]);
                assert_eq!(
                    verify(&s, &h, BODY, at(T), TOL),
                    Err(VerifyError::MalformedHeader(SIGNATURE_HEADER))
                );
            }
            let at_cap = format!(
                "t={T},{},v1={good}",
                vec![format!("v1={}", "ab".repeat(32)); MAX_SIGNATURES - 1].join(",")
            );
            let h = headers(&[("Stripe-Signature", &at_cap)]);
            assert_eq!(verify(&s, &h, BODY, at(T), TOL), Ok(()));
        }
    }
}
