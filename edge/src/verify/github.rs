//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the raw body.

use http::HeaderMap;

use super::signed_head::{Digest, Signatures, SignedHead, VerifyError, required_header};

pub(super) const SIGNATURE_HEADER: &str = "x-hub-signature-256";

pub(super) fn read_head(headers: &HeaderMap) -> Result<SignedHead, VerifyError> {
    let value = required_header(headers, SIGNATURE_HEADER)?;
    let hex_sig = value
        .strip_prefix("sha256=")
        .ok_or(VerifyError::MalformedHeader(SIGNATURE_HEADER))?;
    let mut signatures = Signatures::new(Digest::Sha256, SIGNATURE_HEADER);
    signatures.push(hex::decode(hex_sig).ok())?;
    signatures.into_head(Vec::new(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::test_support::headers;
    use crate::verify::{Scheme, Verifier};

    fn verify(secrets: &[Vec<u8>], headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        Verifier::new(Scheme::Github, secrets.to_vec())
            .verify(headers, body, std::time::SystemTime::now())
            .map(|_| ())
    }

    // Published in GitHub's "Validating webhook deliveries" documentation.
    const DOC_SECRET: &[u8] = b"It's a Secret to Everybody";
    const DOC_BODY: &[u8] = b"Hello, World!";
    const DOC_SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn accepts_the_documented_vector() {
        let h = headers(&[("X-Hub-Signature-256", DOC_SIGNATURE)]);
        assert_eq!(verify(&[DOC_SECRET.to_vec()], &h, DOC_BODY), Ok(()));
    }

    #[test]
    fn any_rotated_secret_may_match() {
        let h = headers(&[("X-Hub-Signature-256", DOC_SIGNATURE)]);
        let secrets = vec![b"new-secret".to_vec(), DOC_SECRET.to_vec()];
        assert_eq!(verify(&secrets, &h, DOC_BODY), Ok(()));
        assert_eq!(
            verify(&[b"other".to_vec()], &h, DOC_BODY),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn a_changed_body_fails() {
        let h = headers(&[("X-Hub-Signature-256", DOC_SIGNATURE)]);
        assert_eq!(
            verify(&[DOC_SECRET.to_vec()], &h, b"Hello, World?"),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_named() {
        let secrets = [DOC_SECRET.to_vec()];
        assert_eq!(
            verify(&secrets, &headers(&[]), DOC_BODY),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER))
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
                verify(&secrets, &h, DOC_BODY),
                Err(VerifyError::MalformedHeader(SIGNATURE_HEADER)),
                "{bad}"
            );
        }
    }
}
