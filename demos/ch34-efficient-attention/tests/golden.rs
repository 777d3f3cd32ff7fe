//! With `--figure out.svg` the binary's standard output still equals its golden file byte for byte,
//! the file is a well-formed SVG document; the binary keeps the command-line manners every binary
//! shares (`--help`, `--version`, wrong flags and values, a closed pipe, a full disk).

#[test]
fn report_matches_golden_file_with_the_figure_flag() {
    if let Err(message) =
        golden::check_binary_with_figure(env!("CARGO_BIN_EXE_ch34-efficient-attention"), "ch34-efficient-attention")
    {
        panic!("{message}");
    }
}

#[test]
fn the_command_line_keeps_the_shared_manners() {
    if let Err(message) = golden::check_command_line_manners(
        env!("CARGO_BIN_EXE_ch34-efficient-attention"),
        "ch34-efficient-attention",
        &[],
    ) {
        panic!("{message}");
    }
}
