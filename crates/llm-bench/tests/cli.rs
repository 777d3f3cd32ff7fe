//! `llm-bench` keeps the command-line manners every binary of the workspace shares: `--help`,
//! `--version`, what a wrong flag or value gets, and a closed pipe or a full disk at its first line.

#[test]
fn the_command_line_keeps_the_shared_manners() {
    // the machine line is written before any measurement, so these runs stop at once
    if let Err(message) = golden::check_command_line_manners(env!("CARGO_BIN_EXE_llm-bench"), "llm-bench", &["gemm"]) {
        panic!("{message}");
    }
}

/// The three bad inputs, as a user types them: each is refused with status 2 before
/// anything is measured (nothing on standard output), and the message says what is accepted.
#[test]
fn bad_input_is_a_usage_error_with_status_2_and_the_choices() {
    let run = |args: &[&str], model_env: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_llm-bench"));
        command.args(args).env_remove("LLM_MODEL").env_remove("LLM_KERNELS");
        if let Some(path) = model_env {
            command.env("LLM_MODEL", path);
        }
        command.output().expect("llm-bench runs")
    };
    for (args, model_env, needle) in [
        (&["--threads", "0", "gemm"][..], None, "expected a whole number from 1 to 1024"),
        (&["real-decode", "--model", "/nonexistent/model.gguf"][..], None, "expected the path of a GGUF model file"),
        (&["real-prefill", "--model", "/"][..], None, "expected the path of a GGUF model file"),
        (&["real-decode"][..], Some("/"), "LLM_MODEL=/: expected the path of a GGUF model file"),
        // the list itself is pinned by the unit test of `main.rs`
        (&["no-such-workload"][..], None, "invalid value 'no-such-workload' for '<WORKLOAD>'"),
        (&["no-such-workload"][..], None, "[possible values: gemm, "),
    ] {
        let output = run(args, model_env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} measured something");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
