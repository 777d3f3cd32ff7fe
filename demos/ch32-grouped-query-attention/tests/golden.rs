//! The binary's standard output equals `expected/ch32-grouped-query-attention.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) =
        golden::check_binary(env!("CARGO_BIN_EXE_ch32-grouped-query-attention"), "ch32-grouped-query-attention")
    {
        panic!("{message}");
    }
}
