//! The binary's standard output equals `expected/ch35-latent-attention.txt` byte for byte.

#[test]
fn report_matches_golden_file() {
    if let Err(message) = golden::check_binary(env!("CARGO_BIN_EXE_ch35-latent-attention"), "ch35-latent-attention") {
        panic!("{message}");
    }
}
