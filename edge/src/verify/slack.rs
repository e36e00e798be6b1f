//! Slack: `X-Slack-Signature: v0=<hex>`, HMAC-SHA256 of `"v0:{ts}:{body}"` where `ts` is
//! `X-Slack-Request-Timestamp`; requests older than the tolerance are replays. The
//! signature is a preset of the scheme language (`generic_hmac.rs`, which Zoom shares
//! under its own header names); this file answers Slack's `url_verification` handshake
//! and holds the preset's vectors.

/// Slack's Events API confirms a Request URL by sending
/// `{"type":"url_verification","challenge":"…"}` and expecting the challenge back.
/// Returns the challenge when `body` is such a request (call only after verification).
pub(super) fn url_verification_challenge(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(rename = "type")]
        kind: String,
        challenge: Option<String>,
    }
    let probe: Probe = serde_json::from_slice(body).ok()?;
    (probe.kind == "url_verification").then_some(probe.challenge?)
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use std::time::Duration;

    use http::HeaderMap;

    use super::*;
    use crate::verify::test_support::{headers, verdict};
    use crate::verify::{Provider, Scheme, VerifyError, preset};

    const SIGNATURE_HEADER: &str = "x-slack-signature";
    const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";

    fn verify(
        secrets: &[Vec<u8>],
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
        tolerance: Duration,
    ) -> Result<(), VerifyError> {
        let slack = preset(Provider::Slack, tolerance).unwrap();
        verdict(Scheme::Hmac(slack), secrets, headers, body, now)
    }

    // The worked example in Slack's "Verifying requests from Slack" documentation.
    const DOC_SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";
    const DOC_TS: &str = "1531420618";
    const DOC_BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const DOC_SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    const TOL: Duration = Duration::from_secs(300);

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn doc_headers() -> HeaderMap {
        headers(&[
            ("X-Slack-Signature", DOC_SIG),
            ("X-Slack-Request-Timestamp", DOC_TS),
        ])
    }

    #[test]
    fn accepts_the_documented_example() {
        let s = [DOC_SECRET.to_vec()];
        assert_eq!(
            verify(&s, &doc_headers(), DOC_BODY, at(1_531_420_618), TOL),
            Ok(())
        );
        let rotated = [b"new".to_vec(), DOC_SECRET.to_vec()];
        assert_eq!(
            verify(&rotated, &doc_headers(), DOC_BODY, at(1_531_420_618), TOL),
            Ok(())
        );
    }

    #[test]
    fn rejects_replays_and_clock_skew() {
        let s = [DOC_SECRET.to_vec()];
        let h = doc_headers();
        assert_eq!(verify(&s, &h, DOC_BODY, at(1_531_420_918), TOL), Ok(()));
        assert_eq!(
            verify(&s, &h, DOC_BODY, at(1_531_420_919), TOL),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(
            verify(&s, &h, DOC_BODY, at(1_531_420_317), TOL),
            Err(VerifyError::FutureTimestamp)
        );
    }

    #[test]
    fn timestamp_is_signed() {
        let h = headers(&[
            ("X-Slack-Signature", DOC_SIG),
            ("X-Slack-Request-Timestamp", "1531420619"),
        ]);
        let got = verify(&[DOC_SECRET.to_vec()], &h, DOC_BODY, at(1_531_420_618), TOL);
        assert_eq!(got, Err(VerifyError::Mismatch));
    }

    #[test]
    fn missing_and_malformed() {
        let s = [DOC_SECRET.to_vec()];
        let now = at(1_531_420_618);
        let h = headers(&[("X-Slack-Signature", DOC_SIG)]);
        assert_eq!(
            verify(&s, &h, DOC_BODY, now, TOL),
            Err(VerifyError::MissingHeader(TIMESTAMP_HEADER))
        );
        let h = headers(&[("X-Slack-Request-Timestamp", DOC_TS)]);
        assert_eq!(
            verify(&s, &h, DOC_BODY, now, TOL),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER))
        );
        for bad in ["a2114d57", "v1=a2114d57", "v0=xyz", "v0=a2114d57", "v0="] {
            let h = headers(&[
                ("X-Slack-Signature", bad),
                ("X-Slack-Request-Timestamp", DOC_TS),
            ]);
            assert_eq!(
                verify(&s, &h, DOC_BODY, now, TOL),
                Err(VerifyError::MalformedHeader(SIGNATURE_HEADER)),
                "{bad}"
            );
        }
    }

    #[test]
    fn url_verification_is_recognised_only_with_a_challenge() {
        let probe = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        assert_eq!(
            url_verification_challenge(probe).as_deref(),
            Some("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")
        );
        assert_eq!(
            url_verification_challenge(br#"{"type":"event_callback","event_id":"Ev1"}"#),
            None
        );
        assert_eq!(
            url_verification_challenge(br#"{"type":"url_verification"}"#),
            None
        );
        assert_eq!(url_verification_challenge(DOC_BODY), None);
    }
}
