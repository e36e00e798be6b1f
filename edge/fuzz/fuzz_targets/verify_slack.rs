#![no_main]
use edge::verify::{Provider, Scheme, preset};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some(spec) = preset(Provider::Slack, edge_fuzz::TOLERANCE) else {
        unreachable!("slack is a preset");
    };
    edge_fuzz::verify(Scheme::Hmac(spec), data)
});
