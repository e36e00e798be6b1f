//! Shopify: `X-Shopify-Hmac-Sha256: <base64>`, HMAC-SHA256 of the raw body.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::HeaderMap;

use super::signed_head::{Digest, Signatures, SignedHead, VerifyError, required_header};

pub(super) const SIGNATURE_HEADER: &str = "x-shopify-hmac-sha256";

pub(super) fn read_head(headers: &HeaderMap) -> Result<SignedHead, VerifyError> {
    let value = required_header(headers, SIGNATURE_HEADER)?;
    let mut signatures = Signatures::new(Digest::Sha256, SIGNATURE_HEADER);
    signatures.push(BASE64.decode(value.trim()).ok())?;
    signatures.into_head(Vec::new(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::test_support::headers;
    use crate::verify::{Scheme, Verifier};

    fn verify(secrets: &[Vec<u8>], headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        Verifier::new(Scheme::Shopify, secrets.to_vec())
            .verify(headers, body, std::time::SystemTime::now())
            .map(|_| ())
    }

    // `printf '{"id":1}' | openssl dgst -sha256 -hmac shpss_secret -binary | base64`
    const SECRET: &[u8] = b"shpss_secret";
    const BODY: &[u8] = br#"{"id":1}"#;
    const SIGNATURE: &str = "xocA3LkeJ/RvNrkxep1EUtFHuj7rIoIqZYaLU26LyPQ=";

    #[test]
    fn accepts_an_openssl_computed_signature() {
        let h = headers(&[("X-Shopify-Hmac-Sha256", SIGNATURE)]);
        assert_eq!(verify(&[SECRET.to_vec()], &h, BODY), Ok(()));
    }

    #[test]
    fn rotation_and_mismatch() {
        let h = headers(&[("X-Shopify-Hmac-Sha256", SIGNATURE)]);
        assert_eq!(
            verify(&[b"new".to_vec(), SECRET.to_vec()], &h, BODY),
            Ok(())
        );
        assert_eq!(
            verify(&[b"new".to_vec()], &h, BODY),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&[SECRET.to_vec()], &h, b"{\"id\":2}"),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn missing_and_malformed() {
        let s = [SECRET.to_vec()];
        assert_eq!(
            verify(&s, &headers(&[]), BODY),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER))
        );
        for bad in ["not*base64", "AAAA", ""] {
            let h = headers(&[("X-Shopify-Hmac-Sha256", bad)]);
            assert_eq!(
                verify(&s, &h, BODY),
                Err(VerifyError::MalformedHeader(SIGNATURE_HEADER)),
                "{bad}"
            );
        }
    }
}
