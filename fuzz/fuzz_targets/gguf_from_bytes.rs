//! Reads GGUF files from raw or mutated bytes, maps what parses onto a decoder and runs what
//! loads; any panic or abort is a bug (see `llm_from_scratch::fuzzing`). Run with
//! `cargo +nightly fuzz run gguf_from_bytes`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = llm_from_scratch::fuzzing::run_gguf_from_bytes(data);
});
