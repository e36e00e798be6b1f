#![no_main]

// The config loader on any text: settings or field-named errors, never a panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Err(errors) = edge::config::parse(text)
    {
        assert!(!errors.is_empty());
    }
});
