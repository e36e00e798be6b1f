//! Zoom: `x-zm-signature: v0=<hex>`, HMAC-SHA256 of `"v0:{ts}:{body}"` where `ts` is
//! `x-zm-request-timestamp` (Slack's construction under Zoom's names, a preset of the
//! scheme language). Zoom validates an endpoint with a signed `endpoint.url_validation`
//! event whose `plainToken` must come back with its HMAC under the same secret
//! ([`url_validation_token`]).

/// The `plainToken` when `body` is Zoom's
/// `{"event":"endpoint.url_validation","payload":{"plainToken":"…"}}` (call only after
/// verification: the answer is the token's HMAC under the secret that verified it).
pub(super) fn url_validation_token(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Probe {
        event: String,
        payload: Option<Payload>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Payload {
        plain_token: Option<String>,
    }
    let probe: Probe = serde_json::from_slice(body).ok()?;
    (probe.event == "endpoint.url_validation").then_some(probe.payload?.plain_token?)
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    use std::time::Duration;

    use super::*;
    use crate::verify::test_support::headers;
    use crate::verify::{Provider, Scheme, Verifier, VerifyError, preset};

    const SIGNATURE_HEADER: &str = "x-zm-signature";
    const TIMESTAMP_HEADER: &str = "x-zm-request-timestamp";

    const TOL: Duration = Duration::from_secs(300);
    const TS: &str = "1700000000";

    fn zoom() -> Scheme {
        Scheme::Hmac(preset(Provider::Zoom, TOL).unwrap())
    }

    fn signature(secret: &[u8], ts: &str, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(format!("v0:{ts}:").as_bytes());
        mac.update(body);
        format!("v0={}", const_hex::encode(mac.finalize().into_bytes()))
    }

    fn verify(signature: &str, body: &[u8], now: u64) -> Result<usize, VerifyError> {
        let verifier = Verifier::new(zoom(), vec![b"old-token".to_vec(), b"zoom-token".to_vec()]);
        let headers = headers(&[(SIGNATURE_HEADER, signature), (TIMESTAMP_HEADER, TS)]);
        let at = UNIX_EPOCH + Duration::from_secs(now);
        verifier.verify(&headers, body, at).map(|v| v.key())
    }

    #[test]
    fn a_zoom_signature_verifies_under_zoom_headers_only() {
        let body = br#"{"event":"meeting.started","event_ts":1700000000000}"#;
        let good = signature(b"zoom-token", TS, body);
        assert_eq!(
            verify(&good, body, 1_700_000_010),
            Ok(1),
            "the second secret"
        );
        assert_eq!(
            verify(&good, br#"{"event":"meeting.ended"}"#, 1_700_000_010),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&good, body, 1_700_000_000 + 301),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(
            verify(&good.replace("v0=", "v1="), body, 1_700_000_010),
            Err(VerifyError::MalformedHeader(SIGNATURE_HEADER))
        );
        let slack_named = headers(&[
            ("x-slack-signature", &good),
            ("x-slack-request-timestamp", TS),
        ]);
        let verifier = Verifier::new(zoom(), vec![b"zoom-token".to_vec()]);
        assert_eq!(
            verifier
                .verify(&slack_named, body, SystemTime::now())
                .map(|_| ()),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER))
        );
    }

    #[test]
    fn url_validation_is_recognised_only_with_a_token() {
        let probe = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
        assert_eq!(
            url_validation_token(probe).as_deref(),
            Some("qgg8vlvZRS6UYooatFL8Aw")
        );
        for other in [
            br#"{"event":"meeting.started","payload":{"plainToken":"x"}}"#.as_slice(),
            br#"{"event":"endpoint.url_validation","payload":{}}"#,
            br#"{"event":"endpoint.url_validation"}"#,
            b"not json",
        ] {
            assert_eq!(url_validation_token(other), None);
        }
    }
}
