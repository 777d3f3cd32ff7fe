//! With `--figure out.svg` the binary's standard output still equals its golden file byte for byte,
//! the file is a well-formed SVG document, and a bad argument prints the usage line and exits 2.

#[test]
fn report_matches_golden_file_with_the_figure_flag() {
    if let Err(message) =
        golden::check_binary_with_figure(env!("CARGO_BIN_EXE_ch30-multi-head-attention"), "ch30-multi-head-attention")
    {
        panic!("{message}");
    }
}
