//! Discord webhook events: `X-Signature-Ed25519: <hex>`, an Ed25519 signature by the
//! application's key over `{timestamp}{body}`, the timestamp from
//! `X-Signature-Timestamp`. The route holds the application's public key (64 hex digits,
//! from the developer portal), not a shared secret. Discord sends a `PING` (`"type":0`)
//! to a new endpoint and counts only 204 as delivered ([`is_ping`]).

use std::time::Duration;

use aws_lc_rs::signature::{ED25519, ParsedPublicKey};
use http::HeaderMap;

use super::signed_head::{Signatures, SignedHead, VerifyError, timestamp_and_body};

pub(super) const SIGNATURE_HEADER: &str = "x-signature-ed25519";
pub(super) const TIMESTAMP_HEADER: &str = "x-signature-timestamp";

pub(super) fn read_head(
    headers: &HeaderMap,
    tolerance: Duration,
) -> Result<SignedHead, VerifyError> {
    let signatures = Signatures::ed25519(SIGNATURE_HEADER);
    timestamp_and_body(headers, signatures, TIMESTAMP_HEADER, tolerance, |value| {
        super::hex_bytes(value)
    })
}

/// A route's key: the application's Ed25519 public key, as the developer portal shows it
/// (hex), or as a PEM `PUBLIC KEY`.
pub fn decode_public_key(key: &str) -> Option<Vec<u8>> {
    super::hex_bytes(key.trim())
        .or_else(|| super::public_key::ed25519_from_pem(key))
        .filter(|key| key.len() == PUBLIC_KEY_LEN && ParsedPublicKey::new(&ED25519, key).is_ok())
}

/// Whether `body` is Discord's `PING` (`{"type":0,…}`): answered 204, not stored (call
/// only after verification).
pub(super) fn is_ping(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(rename = "type")]
        kind: Option<u64>,
    }
    serde_json::from_slice::<Probe>(body).is_ok_and(|probe| probe.kind == Some(0))
}

const PUBLIC_KEY_LEN: usize = 32;

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};

    use super::*;
    use crate::verify::test_support::{assert_malformed, headers};
    use crate::verify::{Scheme, Verifier};

    const TOL: Duration = Duration::from_secs(300);

    fn key_pair(seed: u8) -> Ed25519KeyPair {
        Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).unwrap()
    }

    fn verify(
        pair: &Ed25519KeyPair,
        signed_ts: &str,
        signed_body: &[u8],
        body: &[u8],
        now: u64,
    ) -> Result<usize, VerifyError> {
        let message = [signed_ts.as_bytes(), signed_body].concat();
        let signature = const_hex::encode(pair.sign(&message).as_ref());
        let keys = vec![
            key_pair(9).public_key().as_ref().to_vec(),
            key_pair(1).public_key().as_ref().to_vec(),
        ];
        let verifier = Verifier::new(Scheme::Discord { tolerance: TOL }, keys);
        let headers = headers(&[
            (SIGNATURE_HEADER, &signature),
            (TIMESTAMP_HEADER, signed_ts),
        ]);
        let at = UNIX_EPOCH + Duration::from_secs(now);
        verifier.verify(&headers, body, at).map(|v| v.key())
    }

    #[test]
    fn an_ed25519_signature_over_timestamp_and_body_verifies_with_the_public_key() {
        let body =
            br#"{"version":1,"application_id":"1","type":1,"event":{"type":"ENTITLEMENT_CREATE"}}"#;
        let pair = key_pair(1);
        assert_eq!(
            verify(&pair, "1700000000", body, body, 1_700_000_005),
            Ok(1)
        );
        let mut flipped = body.to_vec();
        flipped[5] ^= 1;
        assert_eq!(
            verify(&pair, "1700000000", body, &flipped, 1_700_000_005),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&key_pair(2), "1700000000", body, body, 1_700_000_005),
            Err(VerifyError::Mismatch),
            "a key the route does not hold"
        );
        assert_eq!(
            verify(&pair, "1700000000", body, body, 1_700_000_000 + 301),
            Err(VerifyError::StaleTimestamp)
        );
    }

    #[test]
    fn a_signature_that_is_not_64_bytes_of_hex_is_a_malformed_header() {
        let verifier = Verifier::new(
            Scheme::Discord { tolerance: TOL },
            vec![key_pair(1).public_key().as_ref().to_vec()],
        );
        let too_long = "ab".repeat(65);
        assert_malformed(
            &verifier,
            SIGNATURE_HEADER,
            &["zz", "abcd", &too_long],
            &[(TIMESTAMP_HEADER, "1")],
        );
    }

    #[test]
    fn public_keys_are_64_hex_digits_and_pings_are_type_0() {
        assert_eq!(decode_public_key(&"ab".repeat(32)), Some(vec![0xab; 32]));
        assert_eq!(decode_public_key(&"ab".repeat(31)), None);
        assert_eq!(decode_public_key("not hex"), None);
        assert!(is_ping(br#"{"version":1,"application_id":"1","type":0}"#));
        assert!(!is_ping(br#"{"version":1,"type":1,"event":{}}"#));
        assert!(!is_ping(b"not json"));
    }
}
