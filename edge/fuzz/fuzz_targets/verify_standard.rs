#![no_main]
use edge::verify::Scheme;
use edge_fuzz::TOLERANCE;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    edge_fuzz::verify(
        Scheme::Standard {
            tolerance: TOLERANCE,
        },
        data,
    )
});
