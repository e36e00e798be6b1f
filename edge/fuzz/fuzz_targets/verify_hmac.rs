#![no_main]
use edge::verify::{Digest, Encoding, HmacSpec, Scheme};

// The first input byte picks the digest and encoding; the rest is the request.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let spec = HmacSpec {
        header: http::HeaderName::from_static("x-signature"),
        digest: if choice & 1 == 0 {
            Digest::Sha256
        } else {
            Digest::Sha512
        },
        encoding: if choice & 2 == 0 {
            Encoding::Hex
        } else {
            Encoding::Base64
        },
        prefix: if choice & 4 == 0 {
            String::new()
        } else {
            "sha256=".into()
        },
    };
    edge_fuzz::verify(Scheme::Hmac(spec), rest)
});
