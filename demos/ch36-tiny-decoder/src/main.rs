//! Trains the tiny decoder on the reversal task and prints the chapter report. A progress bar
//! (step, loss, tokens/s, ETA) is drawn on standard error only when it is a terminal and `--quiet`
//! is not given, so standard output stays the golden report.
//!
//! `--figure out.svg` also writes the chapter's figure (loss curve and attention maps) to `out.svg`.
//! `--text FILE [--steps N]` trains a character-level model on a text file instead and prints a
//! continuation of its beginning.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use ch36_tiny_decoder::text::{CONTEXT, TEXT_BATCH, render_text_run, train_on_text};
use ch36_tiny_decoder::{BATCH, STEPS, TOKENS, learner_evidence_with_progress, render_report, render_svg};
use demo_support::cli::{Command, parse_args, write_figure};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use llm_from_scratch::model::StepReport;

/// The command line.
const USAGE: &str = "usage: ch36-tiny-decoder [--quiet] [--figure out.svg | --text FILE [--steps N]]";

/// Steps of a text run unless `--steps` says otherwise.
const TEXT_STEPS: usize = 500;

/// A progress bar for runs of `steps` steps of `tokens_per_step` tokens (hidden when `quiet`, and
/// by indicatif itself when standard error is not a terminal), finished after the last step.
fn progress(steps: usize, tokens_per_step: usize, quiet: bool) -> impl FnMut(&StepReport) {
    let target = if quiet { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    let bar = ProgressBar::with_draw_target(Some(steps as u64), target);
    let style = ProgressStyle::with_template("{bar:20} step {pos}/{len} {msg} ETA {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    let start = Instant::now();
    move |r: &StepReport| {
        let done = r.step + 1;
        let rate = (done * tokens_per_step) as f64 / start.elapsed().as_secs_f64().max(1e-9);
        bar.set_message(format!("loss {:.4} tokens/s {rate:.0}", r.loss));
        bar.set_position(done as u64);
        if done >= steps {
            bar.finish_and_clear();
        }
    }
}

/// The arguments are one of the accepted shapes.
fn accepted(args: &[&str]) -> bool {
    let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    parse_args(&owned).is_ok() || matches!(args, ["--text", _] | ["--text", _, "--steps", _])
}

fn run(args: &[&str], quiet: bool) -> Result<String, Box<dyn std::error::Error>> {
    match args {
        [] => Ok(render_report(&learner_evidence_with_progress(progress(STEPS, BATCH * TOKENS, quiet))?)),
        ["--figure", _] => {
            let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            let Ok(Command::Figure(path)) = parse_args(&owned) else { return Err(USAGE.into()) };
            let evidence = learner_evidence_with_progress(progress(STEPS, BATCH * TOKENS, quiet))?;
            write_figure(&path, &render_svg(&evidence))?;
            eprintln!("figure written to {}", path.display());
            Ok(render_report(&evidence))
        }
        ["--text", path] | ["--text", path, "--steps", _] => {
            let steps = match args {
                [_, _, _, n] => n.parse().map_err(|e| format!("--steps {n}: {e}"))?,
                _ => TEXT_STEPS,
            };
            let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
            Ok(render_text_run(&train_on_text(&text, steps, progress(steps, TEXT_BATCH * CONTEXT, quiet))?))
        }
        _ => Err(USAGE.into()),
    }
}

fn main() -> ExitCode {
    if let Some(code) = demo_support::cli::refuse_bad_kernels() {
        return code;
    }
    let start = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quiet = args.iter().any(|a| a == "--quiet");
    let args: Vec<&str> = args.iter().map(String::as_str).filter(|&a| a != "--quiet").collect();
    if !accepted(&args) {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    match run(&args, quiet) {
        Ok(report) => {
            print!("{report}");
            if !quiet && std::io::stderr().is_terminal() {
                eprintln!("done in {:.1} s", start.elapsed().as_secs_f64());
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
