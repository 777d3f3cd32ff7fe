//! The binary's standard output equals `expected/ch34-efficient-attention.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) =
        golden::check_binary(env!("CARGO_BIN_EXE_ch34-efficient-attention"), "ch34-efficient-attention")
    {
        panic!("{message}");
    }
}
