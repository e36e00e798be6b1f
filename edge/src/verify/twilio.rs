//! Twilio: `X-Twilio-Signature: <base64>`, an HMAC of the URL Twilio requested followed
//! by every form parameter's name and value, sorted by name then value (a pair repeated
//! counts once), as Twilio's own `RequestValidator` computes it. HMAC-SHA1 under the
//! account's auth token; HMAC-SHA256 when `X-Twilio-Webhooks-Signature-Settings` says
//! `algorithm=HMAC_SHA256` (shared-key signing). A JSON body is covered instead by a
//! `bodySHA256=<hex>` parameter in the signed URL's query.
//!
//! The URL is `https://` (the edge terminates TLS), the request's authority (`Host`, or
//! HTTP/2's `:authority`) and its path and query. Twilio's libraries accept it with and
//! without the scheme's default port, because Twilio's signing is inconsistent there;
//! both are tried, so a request costs two MACs per secret. The parameters are sorted
//! only once the body is in, so it is kept whole (`max_body` bounds it), and at most
//! [`MAX_FORM_PARAMS`] of them are read.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::uri::Authority;
use http::{HeaderMap, Uri};
use sha2::{Digest as _, Sha256};

use super::signed_head::{Digest, Signatures, SignedHead, VerifyError, required_header};

/// What the head says: the signature, its digest, and the two spellings of the URL.
pub(super) struct Head {
    digest: Digest,
    signature: Vec<u8>,
    urls: [String; 2],
    body_sha256: Option<String>,
}

/// Reads the signature, the digest the settings name and the URL signed.
pub(super) fn read_head(uri: &Uri, headers: &HeaderMap) -> Result<Head, VerifyError> {
    let digest = match headers.get(SETTINGS_HEADER) {
        None => Digest::Sha1,
        Some(value) => settings_digest(value.to_str().unwrap_or_default())
            .ok_or(VerifyError::MalformedHeader(SETTINGS_HEADER))?,
    };
    let value = required_header(headers, SIGNATURE_HEADER)?;
    let signature = BASE64
        .decode(value.trim())
        .ok()
        .filter(|mac| mac.len() == digest.mac_len())
        .ok_or(VerifyError::MalformedHeader(SIGNATURE_HEADER))?;
    let authority = match uri.authority() {
        Some(authority) => authority.clone(),
        None => required_header(headers, "host")?
            .parse::<Authority>()
            .map_err(|_| VerifyError::MalformedHeader("host"))?,
    };
    let target = uri.path_and_query().map_or("/", |target| target.as_str());
    let host = authority.host();
    let port = authority.port_u16().unwrap_or(DEFAULT_PORT);
    let body_sha256 = uri.query().and_then(|query| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(name, _)| name == BODY_SHA256_PARAM)
            .map(|(_, value)| value.into_owned())
    });
    Ok(Head {
        digest,
        signature,
        urls: [
            format!("https://{host}{target}"),
            format!("https://{host}:{port}{target}"),
        ],
        body_sha256,
    })
}

impl Head {
    /// What is signed under each spelling of the URL, once the whole body is in.
    pub(super) fn signed_heads(self, body: &[u8]) -> Result<Vec<SignedHead>, VerifyError> {
        let params = match &self.body_sha256 {
            Some(expected) => {
                // The body is not a form: its digest, in the signed URL, covers it.
                if const_hex::encode(Sha256::digest(body)) != *expected {
                    return Err(VerifyError::Mismatch);
                }
                Vec::new()
            }
            None => sorted_params(body)?,
        };
        self.urls
            .into_iter()
            .map(|url| {
                let mut signatures = Signatures::new(self.digest, SIGNATURE_HEADER);
                signatures.push(Some(self.signature.clone()))?;
                signatures.into_head([url.into_bytes(), params.clone()].concat(), None)
            })
            .collect()
    }
}

/// The digest `X-Twilio-Webhooks-Signature-Settings` names (`key=…,algorithm=…`): SHA-1
/// when it names none, `None` for one Twilio does not sign with.
fn settings_digest(settings: &str) -> Option<Digest> {
    let algorithm = settings.split(',').find_map(|part| {
        let (name, value) = part.split_once('=')?;
        (name.trim() == "algorithm" && !value.trim().is_empty()).then_some(value.trim())
    });
    match algorithm {
        None => Some(Digest::Sha1),
        Some(name) if name.eq_ignore_ascii_case("HMAC_SHA1") => Some(Digest::Sha1),
        Some(name) if name.eq_ignore_ascii_case("HMAC_SHA256") => Some(Digest::Sha256),
        Some(_) => None,
    }
}

/// The form's parameters as Twilio signs them: `name value name value …`, sorted, each
/// distinct pair once.
fn sorted_params(body: &[u8]) -> Result<Vec<u8>, VerifyError> {
    let mut pairs = Vec::new();
    for pair in form_urlencoded::parse(body) {
        if pairs.len() == MAX_FORM_PARAMS {
            return Err(VerifyError::MalformedBody("form: too many parameters"));
        }
        pairs.push(pair);
    }
    pairs.sort_unstable();
    pairs.dedup();
    Ok(pairs
        .iter()
        .flat_map(|(name, value)| [name.as_bytes(), value.as_bytes()])
        .flatten()
        .copied()
        .collect())
}

pub(super) const SIGNATURE_HEADER: &str = "x-twilio-signature";
const SETTINGS_HEADER: &str = "x-twilio-webhooks-signature-settings";
const BODY_SHA256_PARAM: &str = "bodySHA256";
const DEFAULT_PORT: u16 = 443;
/// Twilio's callbacks carry a few dozen parameters; more is not Twilio.
const MAX_FORM_PARAMS: usize = 1024;

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use hmac::{Hmac, Mac};
    use sha1::Sha1;

    use super::*;
    use crate::verify::test_support::headers;
    use crate::verify::{Scheme, Verifier};

    const TOKEN: &[u8] = b"12345";
    /// Twilio's documented example (its webhook security page): this URL and form,
    /// signed with the auth token `12345`.
    const URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";
    const FORM: &str = "CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212";
    const EXPECTED: &str = "0/KCTR6DLpKmkAf8muzZqo1nDgQ=";

    fn verify(url: &str, pairs: &[(&str, &str)], body: &[u8]) -> Result<usize, VerifyError> {
        let verifier = Verifier::new(Scheme::Twilio, vec![b"other".to_vec(), TOKEN.to_vec()]);
        let uri: Uri = url.parse().unwrap();
        let mut verification = verifier.start(&uri, &headers(pairs))?;
        verification.update(body);
        verification.finish(SystemTime::now()).map(|v| v.key())
    }

    fn sign(digest: Digest, url: &str, params: &str) -> String {
        let message = [url.as_bytes(), params.as_bytes()].concat();
        match digest {
            Digest::Sha1 => BASE64.encode(mac::<Hmac<Sha1>>(&message)),
            _ => BASE64.encode(mac::<Hmac<Sha256>>(&message)),
        }
    }

    fn mac<M: Mac + hmac::digest::KeyInit>(message: &[u8]) -> Vec<u8> {
        let mut mac = <M as Mac>::new_from_slice(TOKEN).unwrap();
        mac.update(message);
        mac.finalize().into_bytes().to_vec()
    }

    #[test]
    fn twilios_documented_example_verifies_with_and_without_the_port() {
        assert_eq!(
            verify(URL, &[("X-Twilio-Signature", EXPECTED)], FORM.as_bytes()),
            Ok(1)
        );
        let with_port = "https://mycompany.com:443/myapp.php?foo=1&bar=2";
        assert_eq!(
            verify(
                with_port,
                &[("X-Twilio-Signature", EXPECTED)],
                FORM.as_bytes()
            ),
            Ok(1)
        );
        let origin_form = [("X-Twilio-Signature", EXPECTED), ("Host", "mycompany.com")];
        let uri: Uri = "/myapp.php?foo=1&bar=2".parse().unwrap();
        let verifier = Verifier::new(Scheme::Twilio, vec![TOKEN.to_vec()]);
        let mut verification = verifier.start(&uri, &headers(&origin_form)).unwrap();
        verification.update(FORM.as_bytes());
        assert!(verification.finish(SystemTime::now()).is_ok());
    }

    #[test]
    fn parameter_order_in_the_body_does_not_matter_but_every_byte_does() {
        let shuffled = "To=%2B18005551212&Digits=1234&CallSid=CA1234567890ABCDE&From=%2B12349013030&Caller=%2B12349013030";
        let header = [("X-Twilio-Signature", EXPECTED)];
        assert_eq!(verify(URL, &header, shuffled.as_bytes()), Ok(1));
        let changed = FORM.replace("Digits=1234", "Digits=1235");
        assert_eq!(
            verify(URL, &header, changed.as_bytes()),
            Err(VerifyError::Mismatch)
        );
        let other_path = "https://mycompany.com/other.php?foo=1&bar=2";
        assert_eq!(
            verify(other_path, &header, FORM.as_bytes()),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn a_json_body_is_covered_by_its_digest_in_the_signed_url() {
        let body = br#"{"event":"delivered"}"#;
        let url = format!(
            "https://hooks.example.com/twilio?bodySHA256={}",
            const_hex::encode(Sha256::digest(body))
        );
        let header = sign(Digest::Sha1, &url, "");
        let pairs = [("X-Twilio-Signature", header.as_str())];
        assert_eq!(verify(&url, &pairs, body), Ok(1));
        assert_eq!(
            verify(&url, &pairs, br#"{"event":"failed"}"#),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn the_settings_header_selects_sha256_and_refuses_unknown_algorithms() {
        let header = sign(Digest::Sha256, URL, "CallSidCA1");
        let settings = "key=webhooks_sharedkey_1,algorithm=HMAC_SHA256";
        let pairs = [
            ("X-Twilio-Signature", header.as_str()),
            ("X-Twilio-Webhooks-Signature-Settings", settings),
        ];
        assert_eq!(verify(URL, &pairs, b"CallSid=CA1"), Ok(1));
        let unknown = [
            ("X-Twilio-Signature", header.as_str()),
            ("X-Twilio-Webhooks-Signature-Settings", "algorithm=HMAC_MD5"),
        ];
        assert_eq!(
            verify(URL, &unknown, b"CallSid=CA1"),
            Err(VerifyError::MalformedHeader(SETTINGS_HEADER))
        );
        // A SHA-256 MAC where the settings name none (SHA-1) has the wrong length.
        assert_eq!(
            verify(URL, &pairs[..1], b"CallSid=CA1"),
            Err(VerifyError::MalformedHeader(SIGNATURE_HEADER))
        );
    }

    #[test]
    fn repeated_pairs_count_once_and_too_many_parameters_are_refused() {
        let header = sign(Digest::Sha1, URL, "Aa1Ab2");
        let pairs = [("X-Twilio-Signature", header.as_str())];
        assert_eq!(verify(URL, &pairs, b"A=b2&A=a1&A=b2"), Ok(1));
        let many = vec!["a=1"; MAX_FORM_PARAMS + 1].join("&");
        assert_eq!(
            verify(URL, &pairs, many.as_bytes()),
            Err(VerifyError::MalformedBody("form: too many parameters"))
        );
    }

    #[test]
    fn missing_or_malformed_headers_are_named() {
        assert_eq!(
            verify(URL, &[], FORM.as_bytes()),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER))
        );
        assert_eq!(
            verify(
                URL,
                &[("X-Twilio-Signature", "not base64!")],
                FORM.as_bytes()
            ),
            Err(VerifyError::MalformedHeader(SIGNATURE_HEADER))
        );
        let verifier = Verifier::new(Scheme::Twilio, vec![TOKEN.to_vec()]);
        let no_host = verifier.start(
            &"/myapp.php".parse().unwrap(),
            &headers(&[("X-Twilio-Signature", EXPECTED)]),
        );
        assert_eq!(no_host.map(|_| ()), Err(VerifyError::MissingHeader("host")));
    }
}
