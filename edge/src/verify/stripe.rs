//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`, HMAC-SHA256 of
//! `"{t}.{body}"`. Several `v1` entries appear while Stripe rolls a secret.

use std::time::Duration;

use http::HeaderMap;

use super::signed_head::{
    Digest, Signatures, SignedHead, SignedTimestamp, VerifyError, required_header,
};

pub(super) const SIGNATURE_HEADER: &str = "stripe-signature";

pub(super) fn read_head(
    headers: &HeaderMap,
    tolerance: Duration,
) -> Result<SignedHead, VerifyError> {
    let value = required_header(headers, SIGNATURE_HEADER)?;
    let malformed = VerifyError::MalformedHeader(SIGNATURE_HEADER);
    let mut timestamp = None;
    let mut signatures = Signatures::new(Digest::Sha256, SIGNATURE_HEADER);
    for item in value.split(',') {
        let (key, val) = item.trim().split_once('=').ok_or(malformed.clone())?;
        match key {
            "t" if timestamp.is_none() => timestamp = Some(val),
            "t" => return Err(malformed),
            "v1" => signatures.push(hex::decode(val).ok())?,
            // v0 (test-mode legacy) and future schemes are ignored, as Stripe's libraries do.
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(malformed)?;
    let prefix = [timestamp.as_bytes(), b"."].concat();
    let signed_at = SignedTimestamp {
        raw: timestamp.to_owned(),
        header: SIGNATURE_HEADER,
        tolerance,
    };
    signatures.into_head(prefix, Some(signed_at))
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    use super::*;
    use crate::verify::test_support::headers;
    use crate::verify::{MAX_SIGNATURES, Scheme, Verifier};

    fn verify(
        secrets: &[Vec<u8>],
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
        tolerance: Duration,
    ) -> Result<(), VerifyError> {
        Verifier::new(Scheme::Stripe { tolerance }, secrets.to_vec())
            .verify(headers, body, now)
            .map(|_| ())
    }

    const SECRET: &[u8] = b"whsec_test_secret";
    const BODY: &[u8] = br#"{"id":"evt_1","object":"event"}"#;
    const T: u64 = 1_700_000_000;
    const TOL: Duration = Duration::from_secs(300);

    fn sign(secret: &[u8], t: u64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        hex::encode(mac.finalize().into_bytes())
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
