//! With the model file (`scripts/fetch-model`), the binary's standard output equals its golden
//! file byte for byte, also with `--figure`, and it keeps the command-line manners every binary
//! shares. Without it, each test says so on one line and passes.

use std::io::Write;

const BINARY: &str = env!("CARGO_BIN_EXE_ch38-a-real-model");

/// Whether the model is there; if not, says so on standard error (straight to the stream: the
/// harness swallows `eprintln!` of a passing test).
fn model_present(test: &str) -> bool {
    let present = llm_from_scratch::gguf::model_path_from_env().is_some();
    if !present {
        let line = format!("{test}: skipped, {}\n", ch38_a_real_model::NO_MODEL);
        std::io::stderr().write_all(line.as_bytes()).ok();
    }
    present
}

#[test]
fn report_matches_golden_file_with_the_figure_flag() {
    if !model_present("report_matches_golden_file_with_the_figure_flag") {
        return;
    }
    if let Err(message) = golden::check_binary_with_figure(BINARY, "ch38-a-real-model") {
        panic!("{message}");
    }
}

#[test]
fn the_command_line_keeps_the_shared_manners() {
    if !model_present("the_command_line_keeps_the_shared_manners") {
        return;
    }
    // one prompt and one token: a second or two, where the full report would take two runs of it
    let writes = ["--prompt", "The capital of France is", "--tokens", "1"];
    if let Err(message) = golden::check_command_line_manners(BINARY, "ch38-a-real-model", &writes) {
        panic!("{message}");
    }
}

#[test]
fn without_the_model_the_binary_says_how_to_get_it() {
    let out = std::process::Command::new(BINARY)
        .env_remove("LLM_MODEL")
        .env_remove("LLM_CACHE_DIR")
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", "/nonexistent-home")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(String::from_utf8_lossy(&out.stderr), format!("error: {}\n", ch38_a_real_model::NO_MODEL));
}
