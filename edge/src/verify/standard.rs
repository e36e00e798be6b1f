//! Standard Webhooks (and Svix): `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64> [v1,<base64> …]`, HMAC-SHA256 of `"{id}.{ts}.{body}"`
//! keyed with the base64 part of a `whsec_…` secret; or, the specification's asymmetric
//! version, `v1a,<base64>` Ed25519 signatures of the same bytes, checked with `whpk_…`
//! public keys.

use std::time::Duration;

use aws_lc_rs::signature::{ED25519, ParsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http::HeaderMap;

use super::signed_head::{
    Digest, Signatures, SignedHead, SignedTimestamp, VerifyError, required_header,
};

pub(super) const ID_HEADER: &str = "webhook-id";
pub(super) const TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub(super) const SIGNATURE_HEADER: &str = "webhook-signature";
const ED25519_PUBLIC_KEY_LEN: usize = 32;

/// The key bytes of a `whsec_<base64>` secret; `None` when it is not of that form.
pub fn decode_secret(secret: &str) -> Option<Vec<u8>> {
    let encoded = secret.strip_prefix("whsec_")?;
    BASE64.decode(encoded).ok().filter(|key| !key.is_empty())
}

/// The Ed25519 key of a `whpk_<base64>` public key, or of a PEM `PUBLIC KEY`; `None`
/// when it is neither.
pub fn decode_public_key(key: &str) -> Option<Vec<u8>> {
    let raw = match key.strip_prefix("whpk_") {
        Some(encoded) => BASE64.decode(encoded).ok()?,
        None => super::public_key::ed25519_from_pem(key)?,
    };
    (raw.len() == ED25519_PUBLIC_KEY_LEN && ParsedPublicKey::new(&ED25519, &raw).is_ok())
        .then_some(raw)
}

/// Which signatures a route checks: `v1` HMACs, or `v1a` Ed25519 signatures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Version {
    V1,
    V1a,
}

pub(super) fn read_head(
    headers: &HeaderMap,
    tolerance: Duration,
    checked: Version,
) -> Result<SignedHead, VerifyError> {
    let id = required_header(headers, ID_HEADER)?;
    let timestamp = required_header(headers, TIMESTAMP_HEADER)?;
    let value = required_header(headers, SIGNATURE_HEADER)?;
    let (mut signatures, wanted) = match checked {
        Version::V1 => (Signatures::new(Digest::Sha256, SIGNATURE_HEADER), "v1"),
        Version::V1a => (Signatures::ed25519(SIGNATURE_HEADER), "v1a"),
    };
    for entry in value.split_whitespace() {
        let (version, sig) = entry
            .split_once(',')
            .ok_or(VerifyError::MalformedHeader(SIGNATURE_HEADER))?;
        // The other version is for routes with the other kind of key; skip it.
        if version == wanted {
            signatures.push(BASE64.decode(sig).ok())?;
        }
    }
    let prefix = [id.as_bytes(), b".", timestamp.as_bytes(), b"."].concat();
    let signed_at = SignedTimestamp {
        raw: timestamp.to_owned(),
        header: TIMESTAMP_HEADER,
        tolerance,
    };
    signatures.into_head(prefix, Some(signed_at))
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;
    use crate::verify::test_support::{headers, verdict};
    use crate::verify::{MAX_SIGNATURES, Scheme, Verifier};

    fn verify(
        secrets: &[Vec<u8>],
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
        tolerance: Duration,
    ) -> Result<(), VerifyError> {
        verdict(Scheme::Standard { tolerance }, secrets, headers, body, now)
    }

    // The Standard Webhooks specification's published test vector.
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TS: &str = "1614265330";
    const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SPEC_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    const TOL: Duration = Duration::from_secs(300);

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn spec_headers(sig: &str, ts: &str) -> HeaderMap {
        headers(&[
            ("webhook-id", SPEC_ID),
            ("webhook-timestamp", ts),
            ("webhook-signature", sig),
        ])
    }

    fn key() -> Vec<Vec<u8>> {
        vec![decode_secret(SPEC_SECRET).unwrap()]
    }

    #[test]
    fn accepts_the_spec_vector() {
        assert_eq!(
            verify(
                &key(),
                &spec_headers(SPEC_SIG, SPEC_TS),
                SPEC_BODY,
                at(1_614_265_330),
                TOL
            ),
            Ok(())
        );
    }

    #[test]
    fn several_signatures_and_unknown_versions() {
        let sig = format!("v1a,AAAA v1,{} {SPEC_SIG}", BASE64.encode([0u8; 32]));
        assert_eq!(
            verify(
                &key(),
                &spec_headers(&sig, SPEC_TS),
                SPEC_BODY,
                at(1_614_265_330),
                TOL
            ),
            Ok(())
        );
        let mut rotated = vec![b"another key".to_vec()];
        rotated.extend(key());
        assert_eq!(
            verify(
                &rotated,
                &spec_headers(SPEC_SIG, SPEC_TS),
                SPEC_BODY,
                at(1_614_265_330),
                TOL
            ),
            Ok(())
        );
    }

    #[test]
    fn id_and_timestamp_are_signed() {
        let h = headers(&[
            ("webhook-id", "msg_other"),
            ("webhook-timestamp", SPEC_TS),
            ("webhook-signature", SPEC_SIG),
        ]);
        assert_eq!(
            verify(&key(), &h, SPEC_BODY, at(1_614_265_330), TOL),
            Err(VerifyError::Mismatch)
        );
        let h = spec_headers(SPEC_SIG, "1614265331");
        assert_eq!(
            verify(&key(), &h, SPEC_BODY, at(1_614_265_330), TOL),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn tolerance_both_sides() {
        let h = spec_headers(SPEC_SIG, SPEC_TS);
        assert_eq!(
            verify(&key(), &h, SPEC_BODY, at(1_614_265_631), TOL),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(
            verify(&key(), &h, SPEC_BODY, at(1_614_265_029), TOL),
            Err(VerifyError::FutureTimestamp)
        );
    }

    #[test]
    fn malformed_headers_and_secrets() {
        let now = at(1_614_265_330);
        let short = format!("v1,{}", BASE64.encode([0u8; 31]));
        for bad in ["", "v1", "v1,!!!", "v2,AAAA", "v1,", "v1,AAAA", &short] {
            assert_eq!(
                verify(&key(), &spec_headers(bad, SPEC_TS), SPEC_BODY, now, TOL),
                Err(VerifyError::MalformedHeader(SIGNATURE_HEADER)),
                "{bad:?}"
            );
        }
        let h = headers(&[
            ("webhook-timestamp", SPEC_TS),
            ("webhook-signature", SPEC_SIG),
        ]);
        assert_eq!(
            verify(&key(), &h, SPEC_BODY, now, TOL),
            Err(VerifyError::MissingHeader(ID_HEADER))
        );
        assert_eq!(decode_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), None);
        assert_eq!(decode_secret("whsec_***"), None);
        assert_eq!(decode_secret("whsec_"), None);
    }

    /// The `standardwebhooks` reference accepts a valid `v1` beside one that cannot be
    /// a MAC; so does the edge.
    #[test]
    fn a_malformed_candidate_beside_a_valid_one_is_skipped() {
        let now = at(1_614_265_330);
        for header in [
            format!("v1,AAAA {SPEC_SIG}"),
            format!("v1,!!! {SPEC_SIG}"),
            format!("v1, {SPEC_SIG}"),
        ] {
            assert_eq!(
                verify(&key(), &spec_headers(&header, SPEC_TS), SPEC_BODY, now, TOL),
                Ok(()),
                "{header}"
            );
        }
    }

    #[test]
    fn v1a_ed25519_signatures_verify_with_whpk_public_keys() {
        use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};

        let pair = Ed25519KeyPair::from_seed_unchecked(&[5; 32]).unwrap();
        let whpk = format!("whpk_{}", BASE64.encode(pair.public_key().as_ref()));
        let public = decode_public_key(&whpk).unwrap();
        let verifier = Verifier::new(Scheme::StandardEd25519 { tolerance: TOL }, vec![public]);
        let signed = [
            SPEC_ID.as_bytes(),
            b".",
            SPEC_TS.as_bytes(),
            b".",
            SPEC_BODY,
        ]
        .concat();
        let v1a = format!("v1a,{}", BASE64.encode(pair.sign(&signed).as_ref()));
        let now = at(1_614_265_330);
        let check = |signature: &str, body: &[u8]| {
            verifier
                .verify(&spec_headers(signature, SPEC_TS), body, now)
                .map(|_| ())
        };
        assert_eq!(check(&format!("{SPEC_SIG} {v1a}"), SPEC_BODY), Ok(()));
        assert_eq!(
            check(&v1a, br#"{"test": 2432232315}"#),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            check(SPEC_SIG, SPEC_BODY),
            Err(VerifyError::MalformedHeader(SIGNATURE_HEADER)),
            "a v1 HMAC is no signature for a public-key route"
        );
        assert_eq!(decode_public_key(&whpk[..whpk.len() - 4]), None);
        assert_eq!(decode_public_key(SPEC_SECRET), None);
    }

    #[test]
    fn signature_floods_are_malformed_not_computed() {
        let now = at(1_614_265_330);
        let flood = vec!["v1,"; 3500].join(" ");
        let over_cap = format!(
            "{} {SPEC_SIG}",
            vec![format!("v1,{}", BASE64.encode([7u8; 32])); MAX_SIGNATURES].join(" ")
        );
        for bad in [flood, over_cap] {
            assert_eq!(
                verify(&key(), &spec_headers(&bad, SPEC_TS), SPEC_BODY, now, TOL),
                Err(VerifyError::MalformedHeader(SIGNATURE_HEADER))
            );
        }
    }
}
