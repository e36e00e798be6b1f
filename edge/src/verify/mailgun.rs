//! Mailgun: the signature is in the JSON body, not in a header:
//! `{"signature": {"timestamp": "…", "token": "…", "signature": "<hex>"}, "event-data": …}`,
//! HMAC-SHA256 of `{timestamp}{token}` under the webhook signing key. The event data is
//! not covered by it: a captured signature fits any body while its timestamp is within
//! the tolerance, so the token (random per delivery, signed) is the event's key, and a
//! token seen again is a duplicate whatever the body (`crate::event`).

use std::time::Duration;

use serde::Deserialize;

use super::signed_head::{Digest, Signatures, SignedHead, SignedTimestamp, VerifyError};

/// The signed head, read from a complete body: the timestamp and token as what is
/// signed, the signature offered, the timestamp to check.
pub(super) fn read_body(body: &[u8], tolerance: Duration) -> Result<SignedHead, VerifyError> {
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|_| VerifyError::MalformedBody(SIGNATURE_FIELD))?;
    let signed = envelope.signature;
    let mut signatures = Signatures::new(Digest::Sha256, SIGNATURE_FIELD);
    let timestamp = SignedTimestamp {
        raw: signed.timestamp.clone(),
        header: TIMESTAMP_FIELD,
        tolerance,
    };
    let prefix = [signed.timestamp.as_bytes(), signed.token.as_bytes()].concat();
    signatures
        .push(super::hex_bytes(signed.signature.trim()))
        .and_then(|()| signatures.into_head(prefix, Some(timestamp)))
        .map_err(|error| match error {
            VerifyError::MalformedHeader(field) => VerifyError::MalformedBody(field),
            other => other,
        })
}

#[derive(Deserialize)]
struct Envelope {
    signature: Signed,
}

#[derive(Deserialize)]
struct Signed {
    timestamp: String,
    token: String,
    signature: String,
}

const SIGNATURE_FIELD: &str = "signature in the body";
const TIMESTAMP_FIELD: &str = "signature.timestamp";

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    use super::*;
    use crate::verify::{Scheme, Verifier};

    const TOL: Duration = Duration::from_secs(300);

    fn body(key: &[u8], timestamp: &str, token: &str, event: &str) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
        mac.update(format!("{timestamp}{token}").as_bytes());
        let signature = const_hex::encode(mac.finalize().into_bytes());
        format!(
            r#"{{"signature":{{"timestamp":"{timestamp}","token":"{token}","signature":"{signature}"}},"event-data":{event}}}"#
        )
        .into_bytes()
    }

    fn verify(keys: &[&[u8]], body: &[u8], now: u64) -> Result<usize, VerifyError> {
        let keys = keys.iter().map(|k| k.to_vec()).collect();
        let verifier = Verifier::new(Scheme::Mailgun { tolerance: TOL }, keys);
        let at = UNIX_EPOCH + Duration::from_secs(now);
        verifier
            .verify(&http::HeaderMap::new(), body, at)
            .map(|v| v.key())
    }

    #[test]
    fn the_signature_in_the_body_covers_timestamp_and_token() {
        let event = r#"{"event":"delivered","id":"ev1"}"#;
        let signed = body(b"key-new", "1700000000", "tok1", event);
        assert_eq!(
            verify(&[b"key-old", b"key-new"], &signed, 1_700_000_009),
            Ok(1)
        );
        assert_eq!(
            verify(&[b"key-old"], &signed, 1_700_000_009),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&[b"key-new"], &signed, 1_700_000_301),
            Err(VerifyError::StaleTimestamp)
        );
        let other_token = String::from_utf8(signed.clone())
            .unwrap()
            .replacen("tok1", "tok2", 1);
        assert_eq!(
            verify(&[b"key-new"], other_token.as_bytes(), 1_700_000_009),
            Err(VerifyError::Mismatch),
            "the token is signed"
        );
    }

    #[test]
    fn a_body_without_the_signature_object_is_malformed() {
        for bad in [
            &b"not json"[..],
            br#"{"event-data":{}}"#,
            br#"{"signature":{"timestamp":"1","token":"t"}}"#,
            br#"{"signature":{"timestamp":1,"token":"t","signature":"ab"}}"#,
        ] {
            assert_eq!(
                verify(&[b"k"], bad, 1),
                Err(VerifyError::MalformedBody(SIGNATURE_FIELD)),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            verify(
                &[b"k"],
                br#"{"signature":{"timestamp":"1","token":"t","signature":"zz"}}"#,
                1
            ),
            Err(VerifyError::MalformedBody(SIGNATURE_FIELD)),
            "a signature that is not hex"
        );
    }
}
