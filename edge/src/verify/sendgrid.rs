//! SendGrid's signed event webhook: `X-Twilio-Email-Event-Webhook-Signature: <base64>`,
//! an ECDSA P-256 / SHA-256 signature (DER) over `{timestamp}{body}`, the timestamp from
//! `X-Twilio-Email-Event-Webhook-Timestamp`. The route holds the verification key that
//! SendGrid's mail settings show: base64 of the DER public key (PEM armour allowed).

use std::time::Duration;

use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1, ParsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;

use super::signed_head::{Signatures, SignedHead, VerifyError, timestamp_and_body};

pub(super) const SIGNATURE_HEADER: &str = "x-twilio-email-event-webhook-signature";
pub(super) const TIMESTAMP_HEADER: &str = "x-twilio-email-event-webhook-timestamp";

pub(super) fn read_head(
    headers: &HeaderMap,
    tolerance: Duration,
) -> Result<SignedHead, VerifyError> {
    let signatures = Signatures::ecdsa_p256_der(SIGNATURE_HEADER);
    timestamp_and_body(headers, signatures, TIMESTAMP_HEADER, tolerance, |value| {
        STANDARD.decode(value).ok()
    })
}

/// A route's key: the verification key as SendGrid shows it, base64 of a DER
/// `SubjectPublicKeyInfo` for P-256, with or without PEM's armour lines; `None` when it
/// is not one.
pub fn decode_public_key(key: &str) -> Option<Vec<u8>> {
    let der = super::public_key::pem_der(key).or_else(|| STANDARD.decode(key.trim()).ok())?;
    ParsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &der)
        .is_ok()
        .then_some(der)
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};

    use super::*;
    use crate::verify::test_support::{assert_malformed, headers};
    use crate::verify::{Scheme, Verifier};

    const TOL: Duration = Duration::from_secs(300);

    fn key_pair() -> EcdsaKeyPair {
        EcdsaKeyPair::generate(&ECDSA_P256_SHA256_ASN1_SIGNING).unwrap()
    }

    fn verification_key(pair: &EcdsaKeyPair) -> String {
        STANDARD.encode(pair.public_key().as_der().unwrap().as_ref())
    }

    fn verify(
        pair: &EcdsaKeyPair,
        route_keys: &[&EcdsaKeyPair],
        signed: (&str, &[u8]),
        body: &[u8],
        now: u64,
    ) -> Result<usize, VerifyError> {
        let message = [signed.0.as_bytes(), signed.1].concat();
        let signature = pair.sign(&SystemRandom::new(), &message).unwrap();
        let keys = route_keys
            .iter()
            .map(|pair| decode_public_key(&verification_key(pair)).unwrap())
            .collect();
        let verifier = Verifier::new(Scheme::Sendgrid { tolerance: TOL }, keys);
        let headers = headers(&[
            (SIGNATURE_HEADER, &STANDARD.encode(signature.as_ref())),
            (TIMESTAMP_HEADER, signed.0),
        ]);
        let at = UNIX_EPOCH + Duration::from_secs(now);
        verifier.verify(&headers, body, at).map(|v| v.key())
    }

    #[test]
    fn an_ecdsa_signature_over_timestamp_and_body_verifies_with_the_verification_key() {
        let body = br#"[{"email":"a@example.com","event":"delivered","sg_event_id":"e1"}]"#;
        let (old, new) = (key_pair(), key_pair());
        let signed = ("1700000000", &body[..]);
        assert_eq!(
            verify(&new, &[&old, &new], signed, body, 1_700_000_005),
            Ok(1)
        );
        let mut flipped = body.to_vec();
        flipped[5] ^= 1;
        assert_eq!(
            verify(&new, &[&old, &new], signed, &flipped, 1_700_000_005),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&key_pair(), &[&old, &new], signed, body, 1_700_000_005),
            Err(VerifyError::Mismatch),
            "a key the route does not hold"
        );
        assert_eq!(
            verify(&new, &[&new], signed, body, 1_700_000_000 + 301),
            Err(VerifyError::StaleTimestamp)
        );
    }

    #[test]
    fn a_signature_that_is_not_base64_der_of_a_plausible_length_is_a_malformed_header() {
        let pair = key_pair();
        let verifier = Verifier::new(
            Scheme::Sendgrid { tolerance: TOL },
            vec![decode_public_key(&verification_key(&pair)).unwrap()],
        );
        let too_long = STANDARD.encode([0x30; 73]);
        assert_malformed(
            &verifier,
            SIGNATURE_HEADER,
            &["!!", "AAAA", &too_long],
            &[(TIMESTAMP_HEADER, "1")],
        );
    }

    #[test]
    fn verification_keys_are_p256_public_keys_in_base64_der_with_or_without_armour() {
        let key = verification_key(&key_pair());
        let der = STANDARD.decode(&key).unwrap();
        assert_eq!(decode_public_key(&key), Some(der.clone()));
        let pem = format!("-----BEGIN PUBLIC KEY-----\n{key}\n-----END PUBLIC KEY-----\n");
        assert_eq!(decode_public_key(&pem), Some(der));
        assert_eq!(decode_public_key("not base64"), None);
        assert_eq!(decode_public_key(&STANDARD.encode([1u8; 91])), None);
        let ed25519 = "MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=";
        assert_eq!(decode_public_key(ed25519), None, "not a P-256 key");
    }
}
