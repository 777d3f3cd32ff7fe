//! The binary's standard output equals `expected/ch28-causal-masking.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) = golden::check_binary(env!("CARGO_BIN_EXE_ch28-causal-masking"), "ch28-causal-masking") {
        panic!("{message}");
    }
}
