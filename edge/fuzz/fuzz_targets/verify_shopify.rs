#![no_main]
use edge::verify::Scheme;

libfuzzer_sys::fuzz_target!(|data: &[u8]| edge_fuzz::verify(Scheme::Shopify, data));
