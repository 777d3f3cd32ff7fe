//! The binary's standard output equals `expected/ch37-train-on-text.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) = golden::check_binary(env!("CARGO_BIN_EXE_ch37-train-on-text"), "ch37-train-on-text") {
        panic!("{message}");
    }
}
