//! What the fuzz targets share: fuzz bytes turned into a request (header values and a
//! body), and a fixed clock, so every scheme's parser sees arbitrary header text.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use edge::verify::{Scheme, Verifier};
use http::{HeaderMap, HeaderName, HeaderValue};

/// The fuzz input as a request: `0xFF` splits it into header values (for [`HEADERS`], in
/// order; an empty or invalid value leaves that header out) and, last, the body.
pub fn request(data: &[u8]) -> (HeaderMap, &[u8]) {
    let mut parts = data.splitn(HEADERS.len() + 1, |&b| b == 0xFF);
    let mut headers = HeaderMap::new();
    let mut body: &[u8] = &[];
    for (i, part) in parts.by_ref().enumerate() {
        if i == HEADERS.len() {
            body = part;
            break;
        }
        if let Ok(value) = HeaderValue::from_bytes(part)
            && !part.is_empty()
        {
            headers.insert(HeaderName::from_static(HEADERS[i]), value);
        }
    }
    (headers, body)
}

/// Verifies the fuzz request under `scheme` with two secrets: it must answer, never panic.
pub fn verify(scheme: Scheme, data: &[u8]) {
    let (headers, body) = request(data);
    let verifier = Verifier::new(scheme, vec![SECRET.to_vec(), OLD_SECRET.to_vec()]);
    let _ = verifier.verify(&headers, body, now());
}

/// The clock every target runs at: seeds carry timestamps near it.
pub fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW_UNIX)
}

pub const TOLERANCE: Duration = Duration::from_secs(300);
pub const SECRET: &[u8] = b"fuzz-secret";
pub const OLD_SECRET: &[u8] = b"old-fuzz-secret";
pub const NOW_UNIX: u64 = 1_700_000_000;

/// Every header any scheme or event-id rule reads, in the order the input fills them.
pub const HEADERS: &[&str] = &[
    "x-hub-signature-256",
    "x-github-delivery",
    "stripe-signature",
    "x-shopify-hmac-sha256",
    "x-shopify-webhook-id",
    "x-slack-signature",
    "x-slack-request-timestamp",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-signature",
    "x-event-id",
];
