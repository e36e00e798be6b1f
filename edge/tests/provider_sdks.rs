//! The providers' own libraries sign (Standard Webhooks, Slack, Stripe, Discord, Twilio;
//! from PyPI) or verify what is signed as documented (SendGrid, Paddle, Mailgun), and the real `edge`
//! must accept it, and refuse the same delivery with one body byte flipped, signed too
//! long ago, or signed with another secret or key.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::time::{SystemTime, UNIX_EPOCH};

use testkit::edge::nats::Nats;
use testkit::edge::provider_sdk::{public_key, signed_headers, twilio_signed};
use testkit::edge::*;

const ROUTES: &str = r#"  - path: /hooks/std
    provider: standard
    secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
  - path: /hooks/slack
    provider: slack
    secrets: ["8f742231b10e8888abcd99yyyzzz85a5"]
  - path: /hooks/stripe
    provider: stripe
    secrets: ["whsec_stripe_sdk"]
  - path: /hooks/paddle
    provider: paddle
    secrets: ["pdl_ntfset_01hsdk_paddle"]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn what_the_providers_libraries_sign_is_accepted_and_nothing_else() {
    let edge = Edge::start("", ROUTES);
    let c = client(&edge, false);
    let now = unix_now();
    let cases = [
        (
            "standard",
            "/hooks/std",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_dGhlIG90aGVyIG9uZQ==",
            202,
        ),
        (
            "slack",
            "/hooks/slack",
            "8f742231b10e8888abcd99yyyzzz85a5",
            "another-signing-secret",
            202,
        ),
        (
            "stripe",
            "/hooks/stripe",
            "whsec_stripe_sdk",
            "whsec_another",
            202,
        ),
        (
            "paddle",
            "/hooks/paddle",
            "pdl_ntfset_01hsdk_paddle",
            "pdl_ntfset_another",
            200,
        ),
    ];
    for &(provider, path, secret, wrong_secret, ack) in &cases {
        let body =
            format!(r#"{{"id":"evt_{provider}","type":"sdk.test","event_id":"Ev_{provider}"}}"#);
        let id = format!("msg_{provider}");
        let send = |headers: Vec<(String, String)>, body: String| {
            let mut request = c.post(edge.url(path)).body(body);
            for (name, value) in headers {
                request = request.header(name, value);
            }
            request.send()
        };

        let signed = signed_headers(provider, secret, &body, now, &id);
        let r = send(signed.clone(), body.clone()).await.unwrap();
        assert_eq!(r.status(), ack, "{provider}: {}", r.text().await.unwrap());

        let flipped = body.replacen("sdk.test", "sdk.tesu", 1);
        let r = send(signed, flipped).await.unwrap();
        assert_eq!(r.status(), 401, "{provider}: a flipped byte");

        let stale = signed_headers(provider, secret, &body, now - 301, &id);
        let r = send(stale, body.clone()).await.unwrap();
        assert_eq!(r.status(), 401, "{provider}: signed 301 s ago");
        assert!(r.text().await.unwrap().contains("too old"), "{provider}");

        let wrong = signed_headers(provider, wrong_secret, &body, now, &id);
        let r = send(wrong, body.clone()).await.unwrap();
        assert_eq!(r.status(), 401, "{provider}: another secret");
    }
    let metrics = edge.metrics();
    for (_, path, _, _, ack) in cases {
        let route = path.trim_start_matches('/').replace('/', "_");
        assert!(
            metrics.contains(&format!(
                r#"edge_requests_total{{pop="test",route="{route}",status="{ack}"}} 1"#
            )),
            "{route}: one delivery stored\n{metrics}"
        );
    }
}

/// Discord's webhook events, signed with Ed25519 by PyNaCl (the library Discord's own
/// documentation verifies with): the route holds public keys only. An event is stored
/// and answered 204, its `PING` answered 204 and not stored; a flipped byte, a stale
/// timestamp or a key the route does not hold gets a 401.
#[tokio::test(flavor = "multi_thread")]
async fn discord_events_signed_with_pynacl_are_stored_and_its_ping_answered() {
    let seed = "0101010101010101010101010101010101010101010101010101010101010101";
    let other_seed = "0202020202020202020202020202020202020202020202020202020202020202";
    let routes = route(
        "/hooks/discord",
        "discord",
        &["ab".repeat(32), public_key("discord", seed)],
    );
    let edge = Edge::start("", &routes);
    let c = client(&edge, false);
    let now = unix_now();
    let url = edge.url("/hooks/discord");
    let send =
        |seed, body, signed_body, at| post_signed(&c, &url, "discord", seed, body, signed_body, at);
    let event = r#"{"version":1,"application_id":"1234","type":1,"event":{"type":"APPLICATION_AUTHORIZED","timestamp":"2026-12-07T05:00:00Z","data":{"user":{"id":"42"}}}}"#;
    let ping = r#"{"version":1,"application_id":"1234","type":0}"#;

    assert_eq!(send(seed, event, event, now).await, 204);
    assert_eq!(send(seed, ping, ping, now).await, 204);
    let flipped = event.replacen("AUTHORIZED", "AUTHORIZEE", 1);
    assert_eq!(send(seed, &flipped, event, now).await, 401);
    assert_eq!(send(seed, event, event, now - 301).await, 401);
    assert_eq!(send(other_seed, event, event, now).await, 401);

    // The PING is answered, not stored.
    assert_only_stored(&edge, event, "x-signature-ed25519");
}

/// SendGrid's signed event webhook: ECDSA P-256 signatures that SendGrid's own verifier
/// (PyPI `sendgrid`) accepts, checked against the verification key the route holds (a
/// second, unrelated key beside it, as during a rotation). The event batch is stored
/// with its signature headers; a flipped byte, a stale timestamp or another key's
/// signature gets a 401.
#[tokio::test(flavor = "multi_thread")]
async fn sendgrid_events_signed_with_ecdsa_are_stored_and_nothing_else() {
    let scalar = "5ee7f1e1d5c0a3b2c4d6e8f00112233445566778899aabbccddeeff001122334";
    let other = "1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d";
    let routes = route(
        "/hooks/sendgrid",
        "sendgrid",
        &[
            public_key("sendgrid", other),
            public_key("sendgrid", scalar),
        ],
    );
    let edge = Edge::start("", &routes);
    let c = client(&edge, false);
    let now = unix_now();
    let url = edge.url("/hooks/sendgrid");
    let send = |scalar, body, signed_body, at| {
        post_signed(&c, &url, "sendgrid", scalar, body, signed_body, at)
    };
    let events = r#"[{"email":"ops@example.com","timestamp":1765090000,"event":"delivered","sg_event_id":"c2VuZGdyaWQ","sg_message_id":"m1"}]"#;

    assert_eq!(send(scalar, events, events, now).await, 202);
    let flipped = events.replacen("delivered", "deliverex", 1);
    assert_eq!(send(scalar, &flipped, events, now).await, 401);
    assert_eq!(send(scalar, events, events, now - 301).await, 401);
    let unheld = "3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a";
    assert_eq!(send(unheld, events, events, now).await, 401);

    assert_only_stored(&edge, events, "x-twilio-email-event-webhook-signature");
}

/// Posts `body` with the headers `provider`'s library makes for `signed_body`, signed by
/// `secret` at `at`; the answer's status.
async fn post_signed(
    c: &reqwest::Client,
    url: &str,
    provider: &str,
    secret: &str,
    body: &str,
    signed_body: &str,
    at: u64,
) -> u16 {
    let mut request = c.post(url).body(body.to_owned());
    for (name, value) in signed_headers(provider, secret, signed_body, at, "") {
        request = request.header(name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

/// The spool holds `body` and nothing else, with its `signature_header` kept for the
/// origin to verify again.
fn assert_only_stored(edge: &Edge, body: &str, signature_header: &str) {
    let records = edge::spool::dump(&edge.spool_dir()).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].body, body.as_bytes());
    assert!(
        records[0]
            .headers
            .iter()
            .any(|(name, _)| name == signature_header),
        "{signature_header} kept"
    );
}

/// Mailgun's signature travels in the JSON body and covers only its timestamp and token,
/// as the `mailgun` SDK checks it: what it accepts is stored; a stale timestamp, another
/// key or a changed token gets a 401; and since the event data is not signed, the same
/// signed token with other event data (a captured signature reused) is a duplicate,
/// answered and not stored.
#[tokio::test(flavor = "multi_thread")]
async fn mailgun_signatures_in_the_body_are_checked_and_a_token_is_stored_once() {
    let routes = route("/hooks/mailgun", "mailgun", &["key-mailgun-sdk".to_owned()]);
    let edge = Edge::start("", &routes);
    let c = client(&edge, false);
    let now = unix_now();
    let signed_body = |key: &str, event: &str, at: u64, token: &str| {
        signed_headers("mailgun", key, event, at, token)
            .into_iter()
            .find(|(name, _)| name == "signed-body")
            .map(|(_, body)| body)
            .unwrap()
    };
    let send = |body: String| {
        let request = c.post(edge.url("/hooks/mailgun")).body(body);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let event =
        r#"{"event":"delivered","id":"CPgfbmQMTCKtHW6uIWtuVe","recipient":"ops@example.com"}"#;
    let body = signed_body("key-mailgun-sdk", event, now, "tok-5a1f");

    assert_eq!(send(body.clone()).await, 200);
    let forged = body.replacen("ops@example.com", "evil@example.com", 1);
    assert_eq!(send(forged).await, 200, "answered as the duplicate it is");
    assert_eq!(
        send(signed_body("key-mailgun-sdk", event, now - 301, "tok-2")).await,
        401
    );
    assert_eq!(
        send(signed_body("key-another", event, now, "tok-3")).await,
        401
    );
    assert_eq!(send(body.replacen("tok-5a1f", "tok-5a1e", 1)).await, 401);
    assert_eq!(send(event.to_owned()).await, 401, "no signature object");

    let records = edge::spool::dump(&edge.spool_dir()).unwrap();
    assert_eq!(records.len(), 1, "the reused token stored nothing");
    assert_eq!(records[0].body, body.as_bytes());
}

/// Twilio signs the URL it requested and the sorted form parameters (or, for a JSON body,
/// the URL carrying the body's digest), as its `RequestValidator` does: what it signs for
/// the edge's own URL is stored; a changed parameter, a query the signature did not cover,
/// another auth token or a changed JSON body gets a 401.
#[tokio::test(flavor = "multi_thread")]
async fn twilio_signatures_over_the_url_and_the_form_are_checked() {
    let token = "twilio-auth-token-sdk";
    let routes = route("/hooks/twilio", "twilio", &[token.to_owned()]);
    let edge = Edge::start("", &routes);
    let c = client(&edge, false);
    let send = |url: String, body: &str, signature: String| {
        let request = c
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-twilio-signature", signature)
            .body(body.to_owned());
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let form = "MessageSid=SM5b1e&MessageStatus=delivered&To=%2B15005550006&Body=on+call+%26+paged";
    let (url, signature) = twilio_signed(token, &edge.url("/hooks/twilio"), form);
    assert_eq!(send(url.clone(), form, signature.clone()).await, 200);

    let changed = form.replace("delivered", "undelivered");
    assert_eq!(send(url.clone(), &changed, signature.clone()).await, 401);
    let unsigned_query = format!("{url}?to=elsewhere");
    assert_eq!(send(unsigned_query, form, signature.clone()).await, 401);
    let (_, by_another) = twilio_signed("another-token", &url, form);
    assert_eq!(send(url.clone(), form, by_another).await, 401);

    let json = r#"{"event_type":"com.twilio.messaging.message.delivered","sid":"SM5b1f"}"#;
    let (json_url, json_signature) = twilio_signed(token, &url, json);
    assert_ne!(json_url, url, "bodySHA256 is in the signed URL");
    assert_eq!(
        send(json_url.clone(), json, json_signature.clone()).await,
        200
    );
    let tampered = json.replace("SM5b1f", "SM5b1e");
    assert_eq!(send(json_url, &tampered, json_signature).await, 401);

    let records = edge::spool::dump(&edge.spool_dir()).unwrap();
    let bodies: Vec<&[u8]> = records.iter().map(|r| &r.body[..]).collect();
    assert_eq!(bodies, [form.as_bytes(), json.as_bytes()]);
    assert!(
        records[0]
            .headers
            .iter()
            .any(|(name, _)| name == "x-twilio-signature"),
        "the signature kept for the origin"
    );
}

/// The issue's end to end: a Discord-style Ed25519 delivery, a SendGrid-style ECDSA
/// delivery and a Mailgun-style body-signed delivery, signed by the providers' code,
/// go through the spool to a real nats-server's JetStream, each once, with the bytes
/// and the signature the provider sent, so the origin can verify them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_key_and_body_signed_deliveries_reach_the_origin_as_sent() {
    let discord_seed = "0303030303030303030303030303030303030303030303030303030303030303";
    let sendgrid_scalar = "2b7e151628aed2a6abf7158809cf4f3c762e7160f38b4da56a784d9045190cfe";
    let routes = [
        route(
            "/hooks/discord",
            "discord",
            &[public_key("discord", discord_seed)],
        ),
        route(
            "/hooks/sendgrid",
            "sendgrid",
            &[public_key("sendgrid", sendgrid_scalar)],
        ),
        route("/hooks/mailgun", "mailgun", &["key-origin".to_owned()]),
    ]
    .concat();
    let nats = Nats::start();
    let edge = Edge::start("", &routes).with_section(&format!(
        "backhaul:\n  sink: nats\n  nats: {{ servers: [\"{}\"], stream: WEBHOOKS, create: true }}\n",
        nats.url()
    ));
    let c = client(&edge, false);
    let now = unix_now();
    let discord =
        r#"{"version":1,"application_id":"9","type":1,"event":{"type":"ENTITLEMENT_CREATE"}}"#;
    let sendgrid = r#"[{"email":"a@example.com","event":"open","sg_event_id":"origin-1"}]"#;
    let mailgun = signed_headers(
        "mailgun",
        "key-origin",
        r#"{"event":"opened","id":"origin-2"}"#,
        now,
        "tok-origin",
    )
    .into_iter()
    .find(|(name, _)| name == "signed-body")
    .map(|(_, body)| body)
    .unwrap();
    let sent = [
        (
            "discord",
            discord_seed,
            "/hooks/discord",
            discord.to_owned(),
            204,
            "x-signature-ed25519",
        ),
        (
            "sendgrid",
            sendgrid_scalar,
            "/hooks/sendgrid",
            sendgrid.to_owned(),
            202,
            "x-twilio-email-event-webhook-signature",
        ),
    ];
    for (provider, secret, path, body, ack, _) in &sent {
        let url = edge.url(path);
        assert_eq!(
            post_signed(&c, &url, provider, secret, body, body, now).await,
            *ack,
            "{provider}"
        );
    }
    let response = c.post(edge.url("/hooks/mailgun")).body(mailgun.clone());
    assert_eq!(response.send().await.unwrap().status(), 200);

    let js = nats.jetstream().await;
    let started = std::time::Instant::now();
    let mut messages = Vec::new();
    while messages.len() < 3 && started.elapsed() < std::time::Duration::from_secs(10) {
        messages.clear();
        if let Ok(mut stream) = js.get_stream("WEBHOOKS").await {
            let last = stream.info().await.unwrap().state.last_sequence;
            for seq in 1..=last {
                if let Ok(message) = stream.get_raw_message(seq).await {
                    messages.push(message);
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(messages.len(), 3, "each delivery once at the origin");
    for (provider, _, _, body, _, signature_header) in &sent {
        let message = messages
            .iter()
            .find(|m| m.payload.as_ref() == body.as_bytes())
            .unwrap_or_else(|| panic!("{provider}'s body at the origin"));
        assert!(
            message.headers.get(*signature_header).is_some(),
            "{provider}: {signature_header} forwarded, {:?}",
            message.headers
        );
    }
    assert!(
        messages
            .iter()
            .any(|m| m.payload.as_ref() == mailgun.as_bytes()),
        "Mailgun's body, its signature inside, at the origin"
    );
}

/// Standard Webhooks' asymmetric version: a route holding a `whpk_` public key checks
/// `v1a` Ed25519 signatures (made with PyNaCl as the specification describes them) over
/// `id.timestamp.body`: what they sign is stored; a flipped byte, a stale timestamp,
/// another key, or a `v1` HMAC alone gets a 401.
#[tokio::test(flavor = "multi_thread")]
async fn standard_webhooks_v1a_signatures_verify_with_public_keys() {
    let seed = "0404040404040404040404040404040404040404040404040404040404040404";
    let other = "0505050505050505050505050505050505050505050505050505050505050505";
    let routes = route(
        "/hooks/std-v1a",
        "standard",
        &[public_key("standard-v1a", seed)],
    );
    let edge = Edge::start("", &routes);
    let c = client(&edge, false);
    let now = unix_now();
    let url = edge.url("/hooks/std-v1a");
    let send = |secret: &str, body: &str, signed: &str, at: u64, id: &str| {
        let mut request = c.post(&url).body(body.to_owned());
        for (name, value) in signed_headers("standard-v1a", secret, signed, at, id) {
            request = request.header(name, value);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let body = r#"{"type":"invoice.paid","data":{"id":"in_1"}}"#;
    assert_eq!(send(seed, body, body, now, "msg_v1a_1").await, 202);
    let flipped = body.replacen("paid", "pain", 1);
    assert_eq!(send(seed, &flipped, body, now, "msg_v1a_2").await, 401);
    assert_eq!(send(seed, body, body, now - 301, "msg_v1a_3").await, 401);
    assert_eq!(send(other, body, body, now, "msg_v1a_4").await, 401);
    let hmac_only = signed_headers(
        "standard",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        body,
        now,
        "msg_v1a_5",
    );
    let mut request = c.post(&url).body(body.to_owned());
    for (name, value) in hmac_only {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 401);
    assert_only_stored(&edge, body, "webhook-signature");
}

/// A route's YAML for `provider` at `path` holding `keys`.
fn route(path: &str, provider: &str, keys: &[String]) -> String {
    let keys: Vec<String> = keys.iter().map(|key| format!("\"{key}\"")).collect();
    format!(
        "  - path: {path}\n    provider: {provider}\n    secrets: [{}]\n",
        keys.join(", ")
    )
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
