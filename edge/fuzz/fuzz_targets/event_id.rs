#![no_main]
use edge::event::{ConfiguredId, MAX_EVENT_KEY_LEN, event_id};
use edge::verify::Provider;

// Every provider's key rule over the same request: a key, when there is one, is short
// and visible ASCII (it names the event at the origin and in logs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (headers, body) = edge_fuzz::request(data);
    let configured = [
        ConfiguredId::Header(http::HeaderName::from_static("x-event-id")),
        ConfiguredId::Pointer("/event/id".into()),
    ];
    for provider in [
        Provider::Github,
        Provider::Stripe,
        Provider::Shopify,
        Provider::Slack,
        Provider::Standard,
        Provider::Zoom,
        Provider::Discord,
        Provider::Sendgrid,
        Provider::Paddle,
        Provider::Pagerduty,
        Provider::Linear,
        Provider::Intercom,
        Provider::Mailgun,
        Provider::Twilio,
        Provider::Hmac,
    ] {
        for configured in &configured {
            if let Ok(id) = event_id(provider, Some(configured), &headers, body, &[0xab; 32]) {
                assert!(!id.is_empty() && id.len() <= MAX_EVENT_KEY_LEN);
                assert!(id.bytes().all(|b| b.is_ascii_graphic()), "{id:?}");
            }
        }
    }
});
