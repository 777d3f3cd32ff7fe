//! The binary's standard output equals `expected/ch30-multi-head-attention.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) =
        golden::check_binary(env!("CARGO_BIN_EXE_ch30-multi-head-attention"), "ch30-multi-head-attention")
    {
        panic!("{message}");
    }
}
