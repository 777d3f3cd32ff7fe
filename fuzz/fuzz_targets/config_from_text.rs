//! Reads Hugging Face `config.json` texts, raw or with hostile numbers, and builds the small
//! models they describe; any panic or abort is a bug (see `llm_from_scratch::fuzzing`). Run with
//! `cargo +nightly fuzz run config_from_text`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = llm_from_scratch::fuzzing::run_config_from_text(data);
});
