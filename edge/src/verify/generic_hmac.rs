//! Generic HMAC for providers without a scheme of their own: a configured header holds
//! `<prefix><hex or base64 of HMAC-SHA256/512(raw body)>`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::{HeaderMap, HeaderName};

use super::signed_head::{Digest, Signatures, SignedHead, VerifyError};

/// How a signature is written in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Hexadecimal.
    Hex,
    /// Base64.
    Base64,
}

/// A generic HMAC signature: a header holding the digest of the body.
#[derive(Clone, Debug)]
pub struct HmacSpec {
    /// The header that carries the signature.
    pub header: HeaderName,
    /// The digest.
    pub digest: Digest,
    /// How it is encoded.
    pub encoding: Encoding,
    /// Text before the signature in the header (`sha256=`), removed before decoding.
    pub prefix: String,
}

pub(super) fn read_head(spec: &HmacSpec, headers: &HeaderMap) -> Result<SignedHead, VerifyError> {
    let value = headers
        .get(&spec.header)
        .ok_or(VerifyError::MissingHeader(LABEL))?;
    let value = value
        .to_str()
        .map_err(|_| VerifyError::MalformedHeader(LABEL))?
        .trim();
    let encoded = value
        .strip_prefix(spec.prefix.as_str())
        .ok_or(VerifyError::MalformedHeader(LABEL))?;
    let decoded = match spec.encoding {
        Encoding::Hex => hex::decode(encoded).ok(),
        Encoding::Base64 => BASE64.decode(encoded).ok(),
    };
    let mut signatures = Signatures::new(spec.digest, LABEL);
    signatures.push(decoded)?;
    signatures.into_head(Vec::new(), None)
}

/// The header name is configured, so errors name it by a fixed label.
const LABEL: &str = "configured signature header";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::test_support::headers;
    use crate::verify::{Scheme, Verifier};

    fn verify(
        spec: &HmacSpec,
        secrets: &[Vec<u8>],
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), VerifyError> {
        Verifier::new(Scheme::Hmac(spec.clone()), secrets.to_vec())
            .verify(headers, body, std::time::SystemTime::now())
            .map(|_| ())
    }

    fn spec(digest: Digest, encoding: Encoding, prefix: &str) -> HmacSpec {
        HmacSpec {
            header: HeaderName::from_static("x-signature"),
            digest,
            encoding,
            prefix: prefix.into(),
        }
    }

    // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
    const RFC_KEY: &[u8] = b"Jefe";
    const RFC_DATA: &[u8] = b"what do ya want for nothing?";
    const RFC_SHA256: &str = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
    const RFC_SHA512: &str = "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737";

    #[test]
    fn rfc4231_vectors_in_hex_with_prefix() {
        let s = spec(Digest::Sha256, Encoding::Hex, "sha256=");
        let h = headers(&[("x-signature", &format!("sha256={RFC_SHA256}"))]);
        assert_eq!(verify(&s, &[RFC_KEY.to_vec()], &h, RFC_DATA), Ok(()));

        let s = spec(Digest::Sha512, Encoding::Hex, "");
        let h = headers(&[("x-signature", RFC_SHA512)]);
        assert_eq!(
            verify(&s, &[b"x".to_vec(), RFC_KEY.to_vec()], &h, RFC_DATA),
            Ok(())
        );
        assert_eq!(
            verify(&s, &[b"x".to_vec()], &h, RFC_DATA),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn base64_encoding() {
        let s = spec(Digest::Sha256, Encoding::Base64, "");
        let b64 = BASE64.encode(hex::decode(RFC_SHA256).unwrap());
        let h = headers(&[("x-signature", &b64)]);
        assert_eq!(verify(&s, &[RFC_KEY.to_vec()], &h, RFC_DATA), Ok(()));
        assert_eq!(
            verify(&s, &[RFC_KEY.to_vec()], &h, b"other"),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn missing_prefix_or_bad_encoding_is_malformed() {
        let s = spec(Digest::Sha256, Encoding::Hex, "sha256=");
        let k = [RFC_KEY.to_vec()];
        assert!(matches!(
            verify(&s, &k, &headers(&[]), RFC_DATA),
            Err(VerifyError::MissingHeader(_))
        ));
        let h = headers(&[("x-signature", RFC_SHA256)]);
        assert!(matches!(
            verify(&s, &k, &h, RFC_DATA),
            Err(VerifyError::MalformedHeader(_))
        ));
        for bad in [
            "sha256=nothex",
            "sha256=abcd",
            &format!("sha256={RFC_SHA512}"),
        ] {
            let h = headers(&[("x-signature", bad)]);
            assert!(
                matches!(
                    verify(&s, &k, &h, RFC_DATA),
                    Err(VerifyError::MalformedHeader(_))
                ),
                "{bad}"
            );
        }
    }
}
