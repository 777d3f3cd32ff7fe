//! With `--figure out.svg` the binary's standard output still equals its golden file byte for byte,
//! the file is a well-formed SVG document; the binary keeps the command-line manners every binary
//! shares (`--help`, `--version`, wrong flags and values, a closed pipe, a full disk).

#[test]
fn report_matches_golden_file_with_the_figure_flag() {
    if let Err(message) = golden::check_binary_with_figure(env!("CARGO_BIN_EXE_ch36-tiny-decoder"), "ch36-tiny-decoder")
    {
        panic!("{message}");
    }
}

#[test]
fn the_command_line_keeps_the_shared_manners() {
    let text = std::env::temp_dir().join(format!("ch36-manners-{}.txt", std::process::id()));
    std::fs::write(&text, "abcabcabc abcabc abc ".repeat(20)).unwrap();
    let writes = ["--quiet", "--text", text.to_str().unwrap(), "--steps", "1"];
    let checked =
        golden::check_command_line_manners(env!("CARGO_BIN_EXE_ch36-tiny-decoder"), "ch36-tiny-decoder", &writes);
    std::fs::remove_file(&text).ok();
    if let Err(message) = checked {
        panic!("{message}");
    }
}
