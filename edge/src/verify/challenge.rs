//! Handshakes a provider sends to a new endpoint before it sends any event, and expects
//! answered with a value it chose: Dropbox (`GET ?challenge=`), Okta event hooks (`GET`
//! with `x-okta-verification-challenge`) and Microsoft Graph subscriptions
//! (`POST ?validationToken=`). A route answers only the one its config names
//! (`challenge:`); nothing answered here is stored. Slack's `url_verification`, Zoom's
//! `endpoint.url_validation` and Discord's `PING` are signed event bodies, answered after
//! verification instead (`Verifier::handshake`). Pure: the request head in, an answer
//! out.
//!
//! These requests carry no signature, so the answer echoes what anyone may send: it is
//! bounded in length, printable ASCII only, and served as `text/plain` (or JSON) that a
//! browser is told not to sniff.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};

/// A provider's endpoint handshake, as a route's config names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Challenge {
    /// `GET ?challenge=X`: answered `X` as text.
    Dropbox,
    /// `GET` with `x-okta-verification-challenge: X`: answered `{"verification":"X"}`.
    Okta,
    /// `POST ?validationToken=X` (URL-encoded): answered `X`, decoded, as text.
    MicrosoftGraph,
}

/// What the edge answers a handshake with, unsigned here or signed
/// ([`crate::verify::Verifier::handshake`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    /// 200, or 204 with no body.
    pub status: StatusCode,
    /// `text/plain` or `application/json`; `None` with no body.
    pub content_type: Option<&'static str>,
    /// The provider's value, as it expects it back.
    pub body: Bytes,
}

impl Answer {
    /// `value` as text.
    pub(super) fn text(value: String) -> Self {
        Self {
            status: StatusCode::OK,
            content_type: Some("text/plain; charset=utf-8"),
            body: value.into(),
        }
    }

    /// `value` as JSON.
    pub(super) fn json(value: &serde_json::Value) -> Self {
        Self {
            status: StatusCode::OK,
            content_type: Some("application/json"),
            body: value.to_string().into(),
        }
    }

    /// 204, nothing to say.
    pub(super) fn no_content() -> Self {
        Self {
            status: StatusCode::NO_CONTENT,
            content_type: None,
            body: Bytes::new(),
        }
    }
}

/// Why a request that is a handshake gets a 400 instead of its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeError {
    /// Nothing to echo.
    #[error("challenge value is empty")]
    Empty,
    /// Over 1024 bytes.
    #[error("challenge value is longer than 1024 bytes")]
    TooLong,
    /// A control character or anything outside ASCII.
    #[error("challenge value holds bytes other than printable ASCII")]
    NotPrintable,
}

impl ChallengeError {
    /// The `outcome` label of the refusal in metrics.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::TooLong => "too_long",
            Self::NotPrintable => "not_printable",
        }
    }
}

impl Challenge {
    /// The name used in config, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dropbox => "dropbox",
            Self::Okta => "okta",
            Self::MicrosoftGraph => "microsoft_graph",
        }
    }

    /// The answer if `method`, `query` and `headers` are this provider's handshake;
    /// `None` if they are not (an event, verified like any other).
    pub fn answer(
        self,
        method: &Method,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Option<Result<Answer, ChallengeError>> {
        match self {
            Self::Dropbox if method == Method::GET => {
                let value = query_value(query?, "challenge")?;
                Some(checked(&value).map(|value| Answer::text(value.to_owned())))
            }
            Self::Okta if method == Method::GET => {
                let value = headers.get(OKTA_HEADER)?.as_bytes();
                Some(
                    checked(&String::from_utf8_lossy(value))
                        .map(|value| Answer::json(&serde_json::json!({ "verification": value }))),
                )
            }
            Self::MicrosoftGraph if method == Method::POST => {
                let value = query_value(query?, "validationToken")?;
                Some(checked(&value).map(|value| Answer::text(value.to_owned())))
            }
            _ => None,
        }
    }
}

/// The first value of `name` in a URL query, decoded.
fn query_value(query: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

fn checked(value: &str) -> Result<&str, ChallengeError> {
    if value.is_empty() {
        return Err(ChallengeError::Empty);
    }
    if value.len() > MAX_VALUE {
        return Err(ChallengeError::TooLong);
    }
    if !value.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return Err(ChallengeError::NotPrintable);
    }
    Ok(value)
}

const OKTA_HEADER: &str = "x-okta-verification-challenge";
/// Providers send 32–200 characters; the bound keeps an echo cheap.
const MAX_VALUE: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(
        challenge: Challenge,
        method: Method,
        query: Option<&str>,
        headers: &[(&'static str, &str)],
    ) -> Option<Result<Answer, ChallengeError>> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, value.parse().unwrap());
        }
        challenge.answer(&method, query, &map)
    }

    fn body(outcome: Option<Result<Answer, ChallengeError>>) -> String {
        String::from_utf8(outcome.unwrap().unwrap().body.to_vec()).unwrap()
    }

    #[test]
    fn dropbox_is_answered_with_its_challenge_as_text() {
        let outcome = answer(
            Challenge::Dropbox,
            Method::GET,
            Some("challenge=f3a1%2Bz-9"),
            &[],
        );
        let answer = outcome.unwrap().unwrap();
        assert_eq!(answer.content_type, Some("text/plain; charset=utf-8"));
        assert_eq!(answer.body, "f3a1+z-9");
    }

    #[test]
    fn okta_is_answered_with_json_naming_the_value() {
        let outcome = answer(
            Challenge::Okta,
            Method::GET,
            None,
            &[(OKTA_HEADER, r#"a"b\c"#)],
        );
        let answer = outcome.unwrap().unwrap();
        assert_eq!(answer.content_type, Some("application/json"));
        let json: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(json, serde_json::json!({ "verification": r#"a"b\c"# }));
    }

    #[test]
    fn microsoft_graph_is_answered_with_its_token_decoded() {
        let token =
            "Validation: Testing client application reachability for subscription Request-Id: 2a7e";
        let query = format!(
            "validationToken={}",
            form_urlencoded::byte_serialize(token.as_bytes()).collect::<String>()
        );
        let outcome = answer(Challenge::MicrosoftGraph, Method::POST, Some(&query), &[]);
        assert_eq!(body(outcome), token);
    }

    #[test]
    fn only_the_configured_handshake_in_its_own_shape_is_one() {
        let cases = [
            (Challenge::Dropbox, Method::POST, Some("challenge=x"), None),
            (Challenge::Dropbox, Method::GET, None, None),
            (Challenge::Dropbox, Method::GET, Some("other=x"), None),
            (
                Challenge::Dropbox,
                Method::GET,
                Some("validationToken=x"),
                None,
            ),
            (Challenge::Okta, Method::GET, Some("challenge=x"), None),
            (Challenge::Okta, Method::POST, None, Some("x")),
            (
                Challenge::MicrosoftGraph,
                Method::GET,
                Some("validationToken=x"),
                None,
            ),
            (
                Challenge::MicrosoftGraph,
                Method::POST,
                Some("challenge=x"),
                None,
            ),
            (Challenge::MicrosoftGraph, Method::POST, None, None),
        ];
        for (challenge, method, query, okta) in cases {
            let headers: Vec<_> = okta.map(|v| (OKTA_HEADER, v)).into_iter().collect();
            assert_eq!(
                answer(challenge, method.clone(), query, &headers),
                None,
                "{challenge:?} {method} {query:?}"
            );
        }
    }

    #[test]
    fn values_that_are_empty_long_or_unprintable_are_refused() {
        let long = "a".repeat(MAX_VALUE + 1);
        let cases = [
            ("challenge=".to_owned(), ChallengeError::Empty),
            (format!("challenge={long}"), ChallengeError::TooLong),
            ("challenge=a%0Ab".to_owned(), ChallengeError::NotPrintable),
            ("challenge=%C3%A9".to_owned(), ChallengeError::NotPrintable),
            ("challenge=%FF".to_owned(), ChallengeError::NotPrintable),
        ];
        for (query, error) in cases {
            assert_eq!(
                answer(Challenge::Dropbox, Method::GET, Some(&query), &[]),
                Some(Err(error)),
                "{query}"
            );
        }
        let longest = "a".repeat(MAX_VALUE);
        let outcome = answer(
            Challenge::Dropbox,
            Method::GET,
            Some(&format!("challenge={longest}")),
            &[],
        );
        assert_eq!(body(outcome), longest);
        assert_eq!(
            answer(Challenge::Okta, Method::GET, None, &[(OKTA_HEADER, "")]),
            Some(Err(ChallengeError::Empty))
        );
    }
}
