//! The binary's standard output equals `expected/ch31-pre-norm-residual.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) = golden::check_binary(env!("CARGO_BIN_EXE_ch31-pre-norm-residual"), "ch31-pre-norm-residual") {
        panic!("{message}");
    }
}
