//! The binary's standard output equals `expected/ch27-scaled-dot-product-attention.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) = golden::check_binary(
        env!("CARGO_BIN_EXE_ch27-scaled-dot-product-attention"),
        "ch27-scaled-dot-product-attention",
    ) {
        panic!("{message}");
    }
}
