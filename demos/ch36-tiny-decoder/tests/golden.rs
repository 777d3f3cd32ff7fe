//! The binary's standard output equals `expected/ch36-tiny-decoder.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) = golden::check_binary(env!("CARGO_BIN_EXE_ch36-tiny-decoder"), "ch36-tiny-decoder") {
        panic!("{message}");
    }
}
