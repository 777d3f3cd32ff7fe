//! Builds attention layers from raw bytes and runs them; any panic is a bug (see
//! `llm_from_scratch::fuzzing`). Run with `cargo +nightly fuzz run layer_from_bytes`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = llm_from_scratch::fuzzing::run_layer_from_bytes(data);
});
