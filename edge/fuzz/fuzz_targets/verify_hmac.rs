#![no_main]
use std::time::Duration;

use edge::verify::{
    Digest, Encoding, HmacSpec, Labels, Scheme, TimestampSource, TimestampSpec, parse_template,
};
use http::HeaderName;

// The first input byte picks the digest, the encoding, the prefix and the shape of the
// scheme (one signature of the body; several in a split header; Paddle's fields and
// template; timestamp and id headers in the template); the rest is the request.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let id = HeaderName::from_static("x-id");
    let timestamp = |source| {
        Some(TimestampSpec {
            source,
            tolerance: Duration::from_secs(300),
        })
    };
    let (separator, timestamp, template) = match (choice >> 4) & 3 {
        0 => (None, None, "{body}"),
        1 => (Some(','), None, "{body}"),
        2 => (
            Some(';'),
            timestamp(TimestampSource::Field("ts=".into())),
            "{timestamp}:{body}",
        ),
        _ => (
            None,
            timestamp(TimestampSource::Header(HeaderName::from_static("x-ts"))),
            "{id}.{timestamp}.{body}",
        ),
    };
    let Ok(signed) = parse_template(template, timestamp.is_some(), Some(&id)) else {
        unreachable!("the templates above are valid");
    };
    let spec = HmacSpec {
        header: HeaderName::from_static("x-signature"),
        digest: match choice & 3 {
            0 => Digest::Sha256,
            1 => Digest::Sha512,
            _ => Digest::Sha1,
        },
        encoding: if choice & 4 == 0 {
            Encoding::Hex
        } else {
            Encoding::Base64
        },
        prefix: if choice & 8 == 0 {
            String::new()
        } else {
            "v1=".into()
        },
        separator,
        timestamp,
        signed,
        labels: Labels::CONFIGURED,
    };
    edge_fuzz::verify(Scheme::Hmac(spec), rest)
});
