//! The binary's standard output equals `expected/ch29-rotary-position-embedding.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) =
        golden::check_binary(env!("CARGO_BIN_EXE_ch29-rotary-position-embedding"), "ch29-rotary-position-embedding")
    {
        panic!("{message}");
    }
}
