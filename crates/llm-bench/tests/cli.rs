//! `llm-bench` keeps the command-line manners every binary of the workspace shares: `--help`,
//! `--version`, what a wrong flag or value gets, and a closed pipe or a full disk at its first line.

#[test]
fn the_command_line_keeps_the_shared_manners() {
    // the machine line is written before any measurement, so these runs stop at once
    if let Err(message) = golden::check_command_line_manners(env!("CARGO_BIN_EXE_llm-bench"), "llm-bench", &["gemm"]) {
        panic!("{message}");
    }
}
