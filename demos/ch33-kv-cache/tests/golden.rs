//! The binary's standard output equals `expected/ch33-kv-cache.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) = golden::check_binary(env!("CARGO_BIN_EXE_ch33-kv-cache"), "ch33-kv-cache") {
        panic!("{message}");
    }
}
