//! The binary prints what the library renders, and keeps the command-line manners every binary
//! shares.
//!
//! The 800-step report itself is checked against `expected/ch37-train-on-text.txt` (and the figure
//! against its committed copy) by the `golden` crate, through the same functions the binary calls
//! (`Run::start`, `Run::train_until`, `evidence_of`, `render_report`), on every kernel target
//! `.ci/run` forces. Training the 800 steps again here would take as long again and could catch
//! nothing more than the binary's glue, which a short run checks as well.

use ch37_train_on_text::{Corpus, Run, evidence_of, render_report};

const TRAIN: &str = env!("CARGO_BIN_EXE_ch37-train-on-text");

#[test]
fn the_binary_prints_the_report_the_library_renders() {
    let out = std::process::Command::new(TRAIN).args(["--quiet", "--steps", "3"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let corpus = Corpus::new(ch37_train_on_text::CORPUS).unwrap();
    let mut run = Run::start(&corpus).unwrap();
    run.train_until(&corpus, 3, |_| {}).unwrap();
    let want = render_report(&evidence_of(&run, &corpus).unwrap());
    let got = String::from_utf8(out.stdout).unwrap();
    assert!(got == want, "{}", golden::line_diff(&want, &got, 12));
}

#[test]
fn the_command_line_keeps_the_shared_manners() {
    let writes = ["--quiet", "--steps", "1"];
    if let Err(message) = golden::check_command_line_manners(TRAIN, "ch37-train-on-text", &writes) {
        panic!("{message}");
    }
}
