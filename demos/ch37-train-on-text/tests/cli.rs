//! The two binaries run as a user runs them: save, resume, generate, and every bad input refused
//! with one line on standard error and a non-zero exit code (never a panic).

use std::path::PathBuf;
use std::process::{Command, Output};

const TRAIN: &str = env!("CARGO_BIN_EXE_ch37-train-on-text");
const GENERATE: &str = env!("CARGO_BIN_EXE_generate");

fn run(binary: &str, args: &[&str]) -> Output {
    Command::new(binary).args(args).output().unwrap()
}

/// The pretrained model `scripts/fetch-model` fetches, or `None` after one line on standard error
/// naming `test` (written to the stream: the harness swallows `eprintln!` of passing tests).
fn pretrained(test: &str) -> Option<PathBuf> {
    let path = llm_from_scratch::gguf::model_path_from_env();
    if path.is_none() {
        let line =
            format!("cli::{test}: skipped, no model file (run scripts/fetch-model, then set LLM_MODEL=<path>)\n");
        std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes()).ok();
    }
    path
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ch37-cli-{name}-{}.safetensors", std::process::id()))
}

/// Exit code and the first line on stderr (the only one, unless it is a usage error, where clap
/// adds how to get help); the process must not have panicked.
fn refused(out: &Output) -> (i32, String) {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let code = out.status.code().unwrap_or(-1);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(code == 2 || stderr.lines().count() == 1, "{stderr}");
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    (code, stderr.lines().next().unwrap_or_default().to_string())
}

#[test]
fn stopping_saving_and_resuming_prints_what_one_run_prints() {
    let (half, straight, continued) = (temp("half"), temp("straight"), temp("continued"));
    let half_path = half.to_str().unwrap();
    let first = run(TRAIN, &["--quiet", "--steps", "6", "--save", half_path]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let resumed =
        run(TRAIN, &["--quiet", "--steps", "12", "--resume", half_path, "--save", continued.to_str().unwrap()]);
    let whole = run(TRAIN, &["--quiet", "--steps", "12", "--save", straight.to_str().unwrap()]);
    assert!(resumed.status.success() && whole.status.success());
    assert_eq!(String::from_utf8(resumed.stdout).unwrap(), String::from_utf8(whole.stdout).unwrap());
    // and the same bits: weights and moments (a resumed run on another attention kernel than the
    // chapter's would print the same losses to six places, not save the same file)
    assert!(std::fs::read(&continued).unwrap() == std::fs::read(&straight).unwrap(), "the resumed state differs");
    std::fs::remove_file(&continued).ok();
    // a state past the requested step is refused
    let (code, line) = refused(&run(TRAIN, &["--steps", "3", "--resume", half_path]));
    assert_eq!((code, line.as_str()), (1, "error: the saved run is at step 6, past --steps 3"));

    // generation from the saved state streams the prompt and then the characters
    let out = run(GENERATE, &[straight.to_str().unwrap(), "--prompt", "Non ", "--chars", "150", "--seed", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("Non ") && text.ends_with('\n'));
    assert_eq!(text.trim_end_matches('\n').chars().count(), 4 + 150, "{text:?}");
    let again = run(GENERATE, &[straight.to_str().unwrap(), "--prompt", "Non ", "--chars", "150", "--seed", "3"]);
    assert_eq!(String::from_utf8(again.stdout).unwrap(), text);
    let greedy = run(GENERATE, &[straight.to_str().unwrap(), "--temperature", "0", "--top-k", "3", "--chars", "5"]);
    assert!(greedy.status.success());
    // no tokens at all: the prompt alone; 10^12 tokens reserve nothing (a closed pipe ends them)
    let none = run(GENERATE, &[straight.to_str().unwrap(), "--prompt", "Non ", "--max-tokens", "0"]);
    assert!(none.status.success() && none.stdout == b"Non \n", "{none:?}");
    let (reader, writer) = std::io::pipe().unwrap();
    let mut endless = Command::new(GENERATE)
        .args([straight.to_str().unwrap(), "--max-tokens", "1000000000000"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    std::io::Read::read_exact(&mut { reader }, &mut first).unwrap(); // 64 bytes came, then the reader goes
    assert_eq!(endless.wait().unwrap().code(), Some(141));
    // a prompt file that is not UTF-8: a character model cannot read it, and says where
    let bad = temp("not-utf8");
    std::fs::write(&bad, b"Non \xff").unwrap();
    let (code, line) = refused(&run(GENERATE, &[straight.to_str().unwrap(), "--prompt-file", bad.to_str().unwrap()]));
    assert_eq!((code, line.as_str()), (1, "error: the prompt is not UTF-8 (at byte 4)"));
    std::fs::remove_file(&bad).ok();

    // bad inputs of generate
    let path = straight.to_str().unwrap();
    let cases: [(&[&str], i32, &str); 10] = [
        (
            &["--temperature", "-1", path],
            2,
            "error: invalid value '-1' for '--temperature <T>': expected a finite number of at least 0",
        ),
        (&[path, "--top-p", "0"], 2, "error: invalid value '0' for '--top-p <P>': expected a number p with 0 < p <= 1"),
        (
            &[path, "--top-p", "1.5"],
            2,
            "error: invalid value '1.5' for '--top-p <P>': expected a number p with 0 < p <= 1",
        ),
        (
            &[path, "--top-k", "0"],
            2,
            "error: invalid value '0' for '--top-k <K>': expected a whole number of at least 1",
        ),
        (
            &[path, "--chars", "many"],
            2,
            "error: invalid value 'many' for '--max-tokens <N>': invalid digit found in string",
        ),
        (&[path, "--verbose"], 2, "error: unexpected argument '--verbose' found"),
        (&[path, "--seed"], 2, "error: a value is required for '--seed <N>' but none was supplied"),
        (&[path, "--prompt", ""], 2, "error: invalid value '' for '--prompt <TEXT>': expected at least one character"),
        (&[path, "--chat"], 1, "error: --chat needs a model with a chat template: a GGUF file (--model)"),
        (&[path, "--prompt", "Jupiter"], 1, "error: tokenizer: character 'J' at index 0 is not in the vocabulary"),
    ];
    for (args, code, message) in cases {
        assert_eq!(refused(&run(GENERATE, args)), (code, message.to_string()), "{args:?}");
    }
    if let Err(message) = golden::check_command_line_manners(GENERATE, "generate", &[path, "--chars", "20"]) {
        panic!("{message}");
    }
    // a missing file, and a corrupt one (the state cut in half)
    let (code, line) = refused(&run(GENERATE, &["/nonexistent/model.safetensors"]));
    assert!(
        code == 1 && line.starts_with("error: train state file: cannot read /nonexistent/model.safetensors"),
        "{line}"
    );
    let bytes = std::fs::read(&straight).unwrap();
    let corrupt = temp("corrupt");
    std::fs::write(&corrupt, &bytes[..bytes.len() / 2]).unwrap();
    let (code, line) = refused(&run(GENERATE, &[corrupt.to_str().unwrap()]));
    assert!(code == 1 && line.starts_with("error: train state header: "), "{line}");
    // the training binary refuses a corrupt state too
    let (code, line) = refused(&run(TRAIN, &["--resume", corrupt.to_str().unwrap()]));
    assert!(code == 1 && line.starts_with("error: train state header: "), "{line}");
    for file in [half, straight, corrupt] {
        std::fs::remove_file(file).ok();
    }
}

#[test]
fn bad_command_lines_of_the_trainer_are_refused() {
    let cases: [(&[&str], &str); 4] = [
        (&["--steps", "0"], "error: invalid value '0' for '--steps <N>': expected a whole number from 1 to 800"),
        (&["--steps", "801"], "error: invalid value '801' for '--steps <N>': expected a whole number from 1 to 800"),
        (&["--steps"], "error: a value is required for '--steps <N>' but none was supplied"),
        (&["--fast"], "error: unexpected argument '--fast' found"),
    ];
    for (args, message) in cases {
        assert_eq!(refused(&run(TRAIN, args)), (2, message.to_string()), "{args:?}");
    }
    for binary in [TRAIN, GENERATE] {
        let help = run(binary, &["--help"]);
        assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("\nUsage: "));
    }
}

#[test]
fn the_figure_is_written() {
    let svg = std::env::temp_dir().join(format!("ch37-cli-loss-{}.svg", std::process::id()));
    let out = run(TRAIN, &["--quiet", "--steps", "2", "--figure", svg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_file(&svg).ok();
    assert!(text.starts_with("<svg ") && text.contains("validation (last 10 %, never trained on)"));
    let (code, line) = refused(&run(TRAIN, &["--quiet", "--steps", "1", "--figure", "/nonexistent/dir/loss.svg"]));
    assert!(code == 1 && line.starts_with("error: cannot write /nonexistent/dir/loss.svg"), "{line}");
}

#[test]
fn generate_without_a_model_or_with_a_file_that_is_no_model_says_so() {
    let no_model = Command::new(GENERATE).env_remove("LLM_MODEL").env("HOME", "/nonexistent").output().unwrap();
    let (code, line) = refused(&no_model);
    assert!(code == 1 && line.starts_with("error: no model: give a training state"), "{line}");
    // a GGUF file without a tokenizer (the library's tiny test model)
    let tiny =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../crates/llm-from-scratch/tests/fixtures/gguf/tiny-llama.gguf");
    let (code, line) = refused(&run(GENERATE, &["--model", tiny]));
    assert_eq!((code, line.as_str()), (1, "error: gguf metadata: tokenizer.ggml.pre is missing"));
    let (code, line) = refused(&run(GENERATE, &["--model", "/nonexistent.gguf"]));
    assert!(code == 1 && line.starts_with("error: cannot read /nonexistent.gguf"), "{line}");
}

#[test]
fn generate_writes_with_the_pretrained_model() {
    let Some(model) = pretrained("generate_writes_with_the_pretrained_model") else { return };
    let model = model.to_str().unwrap();
    // greedy: the prompt, then the model's words
    let out = run(GENERATE, &["--model", model, "--temperature", "0", "--max-tokens", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "The capital of France is Paris.\n");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("prefill: 5 tokens in ") && stderr.contains("; decode: 1 tokens in "), "{stderr}");
    // JSON lines: the prompt's ids, then each token with its five best logits
    let out = run(GENERATE, &["--model", model, "--temperature", "0", "--max-tokens", "1", "--json"]);
    let lines: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect();
    assert_eq!(lines[0], r#"{"prompt_ids":[504,3575,282,4649,314]}"#);
    let token: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!((token["id"].as_u64(), token["text"].as_str()), (Some(7042), Some(" Paris")));
    assert_eq!(token["top"].as_array().unwrap().len(), 5);
    assert_eq!(token["top"][0][0].as_u64(), Some(7042));
    // a chat turn ends at <|im_end|>, long before the 100 tokens allowed
    let out = run(
        GENERATE,
        &["--model", model, "--chat", "--prompt", "What is 2+2?", "--temperature", "0", "--max-tokens", "100"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "The answer to this classic math problem is 4.\n");
    // a prompt file with bytes that are not UTF-8: byte-level BPE reads any bytes
    let bytes = temp("bytes");
    std::fs::write(&bytes, b"Caf\xe9 au lait").unwrap();
    let out =
        run(GENERATE, &["--model", model, "--prompt-file", bytes.to_str().unwrap(), "--max-tokens", "1", "--json"]);
    std::fs::remove_file(&bytes).ok();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8(out.stdout).unwrap().starts_with(r#"{"prompt_ids":["#));
}
