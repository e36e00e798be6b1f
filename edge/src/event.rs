//! What the edge takes from a verified request besides its body: the key it is
//! de-duplicated by (here and at the origin) and the headers worth keeping.
//!
//! The key is the provider's event id where the signature covers that id (Stripe's and
//! Slack's are in the signed body, Standard Webhooks signs `webhook-id`). GitHub's
//! `X-GitHub-Delivery`, Shopify's `X-Shopify-Webhook-Id` and a generic route's
//! `id_header` are not signed: anyone holding one signed delivery could resend its body
//! under the id of a delivery still to come, which would then be acknowledged as a
//! duplicate and dropped. Their key is therefore the id together with the signature
//! that matched (`<id>#mac:<its first 128 bits, hex>`): the provider's MAC of the body,
//! a digest of it that costs nothing more to have. A retry of the same delivery still
//! collapses; a different body under the same id is stored as its own event.

use http::{HeaderMap, HeaderName};
use sha2::{Digest as _, Sha256};

use crate::verify::Provider;

/// Longest provider event id accepted; provider ids are far shorter, so a longer one
/// is malformed.
pub const MAX_EVENT_ID_LEN: usize = 256;
/// Longest de-duplication key: an id with its signature appended.
pub const MAX_EVENT_KEY_LEN: usize = MAX_EVENT_ID_LEN + MAC_SUFFIX.len() + MAC_HEX_LEN;

/// Why a request's event id cannot be found.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum EventIdError {
    /// The header that should carry it is missing.
    #[error("missing event id: header {0}")]
    MissingHeader(String),
    /// The body field that should carry it (a JSON pointer) is missing.
    #[error("missing event id: the JSON body has no string at `{0}`")]
    MissingBodyField(String),
    /// It is empty, too long or not printable ASCII.
    #[error("event id longer than {MAX_EVENT_ID_LEN} bytes or not visible ASCII")]
    Invalid,
}

/// Where a generic (`hmac`) route's configuration says its event id is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfiguredId {
    /// A header (`hmac.id_header`), which the signature does not cover.
    Header(HeaderName),
    /// A JSON pointer into the signed body (`hmac.id_pointer`).
    Pointer(String),
}

/// The de-duplication key of a verified request (see the module's documentation).
/// `configured` is a generic route's id source; where a provider sends no id, or a
/// generic route's id is absent, the key is the SHA-256 of the body, so identical
/// redeliveries still collapse. `mac` is the signature that verified the request.
pub fn event_id(
    provider: Provider,
    configured: Option<&ConfiguredId>,
    headers: &HeaderMap,
    body: &[u8],
    mac: &[u8],
) -> Result<String, EventIdError> {
    let source = IdSource::of(provider, configured);
    let id = match source {
        IdSource::Header(name) | IdSource::SignedHeader(name) => {
            header_id(headers, name)?.ok_or_else(|| EventIdError::MissingHeader(name.to_owned()))?
        }
        IdSource::HeaderOrDigest(name) => match header_id(headers, name)? {
            Some(id) => id,
            None => return Ok(body_digest(body)),
        },
        IdSource::BodyField(pointer) => body_field(body, pointer)
            .ok_or_else(|| EventIdError::MissingBodyField(pointer.to_owned()))?,
        IdSource::BodyFieldOrDigest(pointer) => {
            body_field(body, pointer).unwrap_or_else(|| body_digest(body))
        }
        IdSource::BodyDigest => body_digest(body),
    };
    let visible = id.bytes().all(|b| b.is_ascii_graphic());
    if id.is_empty() || id.len() > MAX_EVENT_ID_LEN || !visible {
        return Err(EventIdError::Invalid);
    }
    if source.is_signed() {
        Ok(id)
    } else {
        let mac = &mac[..mac.len().min(MAC_HEX_LEN / 2)];
        let mut key = id;
        key.reserve_exact(MAC_SUFFIX.len() + 2 * mac.len());
        key.push_str(MAC_SUFFIX);
        key.push_str(&const_hex::encode(mac));
        Ok(key)
    }
}

/// The provider's id inside a key made by [`event_id`]: the key itself where the id is
/// signed, the part before the signature otherwise.
pub fn id_of_key(key: &str) -> &str {
    split_key(key).map_or(key, |(id, _)| id)
}

/// The signature part of a key made by [`event_id`] for an unsigned id (hex), the
/// same for every delivery of the same signed body; `None` where the id is signed.
pub fn mac_of_key(key: &str) -> Option<&str> {
    split_key(key).map(|(_, mac)| mac)
}

/// The signature is the key's fixed-length tail, so it is found where it must be rather
/// than searched for: a key is split once or more per request.
fn split_key(key: &str) -> Option<(&str, &str)> {
    let at = key.len().checked_sub(MAC_SUFFIX.len() + MAC_HEX_LEN)?;
    let hex = key.get(at..)?.strip_prefix(MAC_SUFFIX)?;
    let id = key.get(..at)?;
    hex.bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then_some((id, hex))
}

/// The key the origin de-duplicates an event by (`Nats-Msg-Id`, `Idempotency-Key`):
/// its route and its de-duplication key, hashed together unambiguously (the route's
/// length first), so that a sender who can sign on one route cannot pick ids that equal
/// another route's and make the origin drop that route's events. 128 bits of SHA-256,
/// hex, after [`ORIGIN_KEY_PREFIX`].
pub fn origin_key(route: &str, key: &str) -> String {
    let digest = Sha256::new()
        .chain_update((route.len() as u64).to_le_bytes())
        .chain_update(route.as_bytes())
        .chain_update(key.as_bytes())
        .finalize();
    format!("{ORIGIN_KEY_PREFIX}{}", const_hex::encode(&digest[..16]))
}

/// What every route-scoped origin key starts with (a version, should the scheme change).
pub const ORIGIN_KEY_PREFIX: &str = "r1-";

/// The delivery id a request claims in a header, before anything is verified: what a
/// refused request is logged (and can be redelivered) by. Stripe and Slack put their ids
/// only in the body, which a refused request never has read.
pub fn claimed_id(
    provider: Provider,
    configured: Option<&ConfiguredId>,
    headers: &HeaderMap,
) -> Option<String> {
    let value = match IdSource::of(provider, configured) {
        IdSource::Header(name) | IdSource::SignedHeader(name) | IdSource::HeaderOrDigest(name) => {
            headers.get(name)
        }
        IdSource::BodyField(_) | IdSource::BodyFieldOrDigest(_) | IdSource::BodyDigest => None,
    }?;
    let id = value.to_str().ok()?.trim();
    let visible = id.bytes().all(|b| b.is_ascii_graphic());
    (!id.is_empty() && id.len() <= MAX_EVENT_ID_LEN && visible).then(|| id.to_owned())
}

/// The request headers stored with the event and forwarded to the origin: content
/// type, user agent, and every header of the provider's own families (including the
/// signature, so the origin can verify again).
pub fn kept_headers(provider: Provider, headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    let families: &[&str] = match provider {
        Provider::Github => &["x-github-", "x-hub-signature"],
        Provider::Stripe => &["stripe-"],
        Provider::Shopify => &["x-shopify-"],
        Provider::Slack => &["x-slack-"],
        Provider::Standard => &["webhook-"],
        Provider::Zoom => &["x-zm-"],
        Provider::Discord => &["x-signature-"],
        Provider::Sendgrid => &["x-twilio-email-event-webhook-"],
        Provider::Paddle => &["paddle-"],
        Provider::Pagerduty => &["x-pagerduty-"],
        Provider::Linear => &["linear-"],
        Provider::Intercom => &["x-hub-signature", "x-intercom-"],
        Provider::Twilio => &["x-twilio-", "i-twilio-"],
        Provider::Mailgun | Provider::Hmac => &[],
    };
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            name == "content-type"
                || name == "user-agent"
                || families.iter().any(|family| name.starts_with(family))
        })
        .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
        .collect()
}

/// Where a provider's event id is, and whether its signature covers it: the one table
/// [`event_id`] and [`claimed_id`] read. Body fields are JSON pointers.
#[derive(Clone, Copy)]
enum IdSource<'a> {
    /// A header the signature does not cover: the key is the id with that signature.
    Header(&'a str),
    /// A configured header, not covered either; without it, the body's digest.
    HeaderOrDigest(&'a str),
    /// A header the signature covers (Standard Webhooks signs `webhook-id`).
    SignedHeader(&'a str),
    /// A string in the signed JSON body.
    BodyField(&'a str),
    /// A string in the signed JSON body, else the body's digest (Slack's slash commands
    /// and interactions have no event id; a generic route's body may lack its field).
    BodyFieldOrDigest(&'a str),
    /// No id at all: the signed body's SHA-256.
    BodyDigest,
}

impl<'a> IdSource<'a> {
    fn of(provider: Provider, configured: Option<&'a ConfiguredId>) -> Self {
        match provider {
            Provider::Github => IdSource::Header("x-github-delivery"),
            Provider::Shopify => IdSource::Header("x-shopify-webhook-id"),
            Provider::Linear => IdSource::Header("linear-delivery"),
            Provider::Standard => IdSource::SignedHeader("webhook-id"),
            Provider::Stripe | Provider::Intercom => IdSource::BodyField("/id"),
            Provider::Paddle => IdSource::BodyField("/event_id"),
            // The delivery's random token, signed with the timestamp (`verify::mailgun`).
            Provider::Mailgun => IdSource::BodyField("/signature/token"),
            Provider::Slack => IdSource::BodyFieldOrDigest("/event_id"),
            Provider::Zoom
            | Provider::Discord
            | Provider::Sendgrid
            | Provider::Pagerduty
            | Provider::Twilio => IdSource::BodyDigest,
            Provider::Hmac => match configured {
                Some(ConfiguredId::Header(name)) => IdSource::HeaderOrDigest(name.as_str()),
                Some(ConfiguredId::Pointer(pointer)) => IdSource::BodyFieldOrDigest(pointer),
                None => IdSource::BodyDigest,
            },
        }
    }

    /// Whether a matching signature vouches for the id as well as the body.
    fn is_signed(self) -> bool {
        !matches!(self, IdSource::Header(_) | IdSource::HeaderOrDigest(_))
    }
}

/// The header's value, trimmed; `None` when it is absent.
fn header_id(headers: &HeaderMap, name: &str) -> Result<Option<String>, EventIdError> {
    headers
        .get(name)
        .map(|value| {
            value
                .to_str()
                .map(|id| id.trim().to_owned())
                .map_err(|_| EventIdError::Invalid)
        })
        .transpose()
}

fn body_field(body: &[u8], pointer: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.pointer(pointer)?.as_str().map(str::to_owned)
}

fn body_digest(body: &[u8]) -> String {
    format!("sha256:{}", const_hex::encode(Sha256::digest(body)))
}

/// Between an unsigned id and its signature in a key.
const MAC_SUFFIX: &str = "#mac:";
/// The signature in a key: its first 128 bits, in hex.
const MAC_HEX_LEN: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_id_comes_from_the_providers_header_and_is_sanitised() {
        let mut headers = HeaderMap::new();
        headers.insert("x-github-delivery", "72d3162e".parse().unwrap());
        headers.insert("webhook-id", "msg 1".parse().unwrap());
        assert_eq!(
            claimed_id(Provider::Github, None, &headers).as_deref(),
            Some("72d3162e")
        );
        assert_eq!(claimed_id(Provider::Standard, None, &headers), None);
        assert_eq!(claimed_id(Provider::Stripe, None, &headers), None);
        let custom = HeaderName::from_static("x-request-id");
        headers.insert(&custom, "req-9".parse().unwrap());
        assert_eq!(
            claimed_id(
                Provider::Hmac,
                Some(&ConfiguredId::Header(custom)),
                &headers
            )
            .as_deref(),
            Some("req-9")
        );
        let pointer = ConfiguredId::Pointer("/id".into());
        assert_eq!(claimed_id(Provider::Hmac, Some(&pointer), &headers), None);
    }
    use crate::verify::test_support::headers;

    #[test]
    fn ids_per_provider() {
        let h = headers(&[("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")]);
        assert_eq!(
            event_id(Provider::Github, None, &h, b"{}", MAC).unwrap(),
            format!("72d3162e-cc78-11e3-81ab-4c9367dc0958{MAC_IN_KEY}")
        );
        let h = headers(&[(
            "X-Shopify-Webhook-Id",
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        )]);
        assert_eq!(
            event_id(Provider::Shopify, None, &h, b"{}", MAC).unwrap(),
            format!("b54557e4-bdd9-4b37-8a5f-bf7d70bcd043{MAC_IN_KEY}")
        );
        let h = headers(&[("webhook-id", "msg_1")]);
        assert_eq!(
            event_id(Provider::Standard, None, &h, b"{}", MAC).unwrap(),
            "msg_1"
        );
        let body = br#"{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event"}"#;
        assert_eq!(
            event_id(Provider::Stripe, None, &headers(&[]), body, MAC).unwrap(),
            "evt_1NG8Du2eZvKYlo2CUI79vXWy"
        );
        let body = br#"{"type":"event_callback","event_id":"Ev08MFMKH6"}"#;
        assert_eq!(
            event_id(Provider::Slack, None, &headers(&[]), body, MAC).unwrap(),
            "Ev08MFMKH6"
        );
    }

    #[test]
    fn missing_ids_are_errors_where_the_provider_always_sends_one() {
        let none = headers(&[]);
        assert_eq!(
            event_id(Provider::Github, None, &none, b"{}", MAC),
            Err(EventIdError::MissingHeader("x-github-delivery".into()))
        );
        assert_eq!(
            event_id(Provider::Stripe, None, &none, b"{}", MAC),
            Err(EventIdError::MissingBodyField("/id".into()))
        );
        assert_eq!(
            event_id(Provider::Stripe, None, &none, b"not json", MAC),
            Err(EventIdError::MissingBodyField("/id".into()))
        );
        assert_eq!(
            event_id(Provider::Stripe, None, &none, br#"{"id":7}"#, MAC),
            Err(EventIdError::MissingBodyField("/id".into()))
        );
    }

    /// One id on two routes gives two origin keys; the route's length is hashed first,
    /// so moving characters between route and key gives another key too.
    #[test]
    fn origin_keys_are_scoped_to_the_route() {
        let a = origin_key("partner", "msg_1");
        assert!(a.starts_with(ORIGIN_KEY_PREFIX) && a.len() == 3 + 32, "{a}");
        assert_eq!(a, origin_key("partner", "msg_1"), "stable across PoPs");
        assert_ne!(a, origin_key("payments", "msg_1"));
        assert_ne!(origin_key("a", "b:x"), origin_key("a:b", "x"));
        assert_ne!(origin_key("ab", "c"), origin_key("a", "bc"));
    }

    #[test]
    fn a_key_splits_as_at_its_last_mac_suffix() {
        let hex = "0123456789abcdefABCDEF0123456789";
        let mut keys = vec![String::new(), hex.to_owned(), format!("{MAC_SUFFIX}{hex}")];
        for id in ["d-1", "é", "a#mac:", "#mac:#mac:", "ü#mac:"] {
            keys.push(format!("{id}{MAC_SUFFIX}{hex}"));
            keys.push(format!("{id}{MAC_SUFFIX}{}", &hex[1..]));
            keys.push(format!("{id}{MAC_SUFFIX}{hex}0"));
            keys.push(format!("{id}{MAC_SUFFIX}{}g", &hex[1..]));
            keys.push(format!("{id}{MAC_SUFFIX}{hex}{MAC_SUFFIX}{hex}"));
            keys.push(format!("{id}{MAC_SUFFIX}{}é", &hex[2..]));
            keys.push(id.to_owned());
        }
        for key in &keys {
            let searched = key.rsplit_once(MAC_SUFFIX).filter(|(_, tail)| {
                tail.len() == MAC_HEX_LEN && tail.bytes().all(|b| b.is_ascii_hexdigit())
            });
            assert_eq!(split_key(key), searched, "{key:?}");
        }
    }

    #[test]
    fn mac_of_key_is_the_signature_beside_an_unsigned_id() {
        let h = headers(&[("x-github-delivery", "d-1")]);
        let key = event_id(Provider::Github, None, &h, b"{}", MAC).unwrap();
        assert_eq!(
            mac_of_key(&key),
            Some(const_hex::encode(&MAC[..16]).as_str())
        );
        assert_eq!(mac_of_key("evt_1"), None);
        assert_eq!(mac_of_key("d#mac:nothex"), None);
    }

    #[test]
    fn body_digest_where_no_id_is_sent() {
        let none = headers(&[]);
        let slash_command = b"token=x&command=%2Fdeploy";
        let id = event_id(Provider::Slack, None, &none, slash_command, MAC).unwrap();
        assert!(id.starts_with("sha256:") && id.len() == 7 + 64, "{id}");
        assert_eq!(
            event_id(Provider::Hmac, None, &none, slash_command, MAC).unwrap(),
            id
        );
        let name = ConfiguredId::Header(HeaderName::from_static("x-request-id"));
        let h = headers(&[("x-request-id", "r-1")]);
        assert_eq!(
            event_id(Provider::Hmac, Some(&name), &h, b"", MAC).unwrap(),
            format!("r-1{MAC_IN_KEY}")
        );
        assert_eq!(
            event_id(Provider::Hmac, Some(&name), &none, slash_command, MAC).unwrap(),
            id
        );
    }

    #[test]
    fn mailguns_key_is_its_signed_token() {
        let body = br#"{"signature":{"timestamp":"1","token":"tok-5a1f","signature":"ab"},"event-data":{}}"#;
        assert_eq!(
            event_id(Provider::Mailgun, None, &headers(&[]), body, MAC).unwrap(),
            "tok-5a1f"
        );
    }

    /// A generic route's id in its signed body, by JSON pointer: kept as it is (signed);
    /// a body without it is keyed by its digest, as a route without an id is.
    #[test]
    fn a_configured_pointer_takes_a_signed_id_from_the_body() {
        let none = headers(&[]);
        let pointer = ConfiguredId::Pointer("/event/id".into());
        let body = br#"{"event":{"id":"ev_42","type":"paid"}}"#;
        assert_eq!(
            event_id(Provider::Hmac, Some(&pointer), &none, body, MAC).unwrap(),
            "ev_42"
        );
        let without = br#"{"event":{"type":"paid"}}"#;
        assert_eq!(
            event_id(Provider::Hmac, Some(&pointer), &none, without, MAC).unwrap(),
            event_id(Provider::Hmac, None, &none, without, MAC).unwrap()
        );
    }

    #[test]
    fn oversized_or_invisible_ids_are_invalid() {
        let long = "a".repeat(MAX_EVENT_ID_LEN + 1);
        let h = headers(&[("webhook-id", &long)]);
        assert_eq!(
            event_id(Provider::Standard, None, &h, b"", MAC),
            Err(EventIdError::Invalid)
        );
        let h = headers(&[("webhook-id", "a b")]);
        assert_eq!(
            event_id(Provider::Standard, None, &h, b"", MAC),
            Err(EventIdError::Invalid)
        );
        let h = headers(&[("webhook-id", "")]);
        assert_eq!(
            event_id(Provider::Standard, None, &h, b"", MAC),
            Err(EventIdError::Invalid)
        );
    }

    #[test]
    fn keeps_provider_headers_only() {
        let h = headers(&[
            ("Content-Type", "application/json"),
            ("X-GitHub-Event", "push"),
            ("X-Hub-Signature-256", "sha256=00"),
            ("Authorization", "Bearer secret"),
            ("Cookie", "a=b"),
        ]);
        let kept: Vec<_> = kept_headers(Provider::Github, &h)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            kept,
            ["content-type", "x-github-event", "x-hub-signature-256"]
        );
    }

    /// A verified request's MAC, and what of it a key carries.
    const MAC: &[u8] = &[0xab; 32];
    const MAC_IN_KEY: &str = "#mac:abababababababababababababababab";

    /// A captured delivery resent under another id cannot take that id's place: the
    /// key follows the signed body wherever the id is not signed.
    #[test]
    fn an_unsigned_id_is_keyed_with_the_signature_of_its_body() {
        let h = headers(&[("X-GitHub-Delivery", "future-id")]);
        let genuine = event_id(Provider::Github, None, &h, b"genuine", &[1; 32]).unwrap();
        let replayed = event_id(Provider::Github, None, &h, b"captured", &[2; 32]).unwrap();
        assert_ne!(genuine, replayed);
        assert_eq!(
            event_id(Provider::Github, None, &h, b"genuine", &[1; 32]).unwrap(),
            genuine,
            "a retry of the same delivery keeps its key"
        );
        assert_eq!(
            (id_of_key(&genuine), id_of_key(&replayed)),
            ("future-id", "future-id")
        );
        let long = "x".repeat(MAX_EVENT_ID_LEN);
        let h = headers(&[("X-GitHub-Delivery", &long)]);
        let sha512_mac = [7u8; 64];
        let key = event_id(Provider::Github, None, &h, b"{}", &sha512_mac).unwrap();
        assert_eq!(
            (key.len(), id_of_key(&key)),
            (MAX_EVENT_KEY_LEN, long.as_str())
        );
    }

    #[test]
    fn signed_ids_are_keys_as_they_are() {
        assert_eq!(id_of_key("msg_1"), "msg_1");
        assert_eq!(id_of_key("evt#mac:short"), "evt#mac:short");
        let h = headers(&[("webhook-id", "msg_2")]);
        assert_eq!(
            event_id(Provider::Standard, None, &h, b"any", MAC).unwrap(),
            "msg_2"
        );
    }
}
