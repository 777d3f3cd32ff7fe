//! Trains the tiny decoder on the reversal task and prints the chapter report. Progress (step,
//! loss, tokens/s) goes to standard error, so standard output stays the golden report.
//!
//! `--figure out.svg` also writes the chapter's figure (loss curve and attention maps) to `out.svg`.
//! `--text FILE [--steps N]` trains a character-level model on a text file instead and prints a
//! continuation of its beginning.

use std::process::ExitCode;
use std::time::Instant;

use ch36_tiny_decoder::text::{CONTEXT, TEXT_BATCH, render_text_run, train_on_text};
use ch36_tiny_decoder::{BATCH, STEPS, TOKENS, learner_evidence_with_progress, render_report, render_svg};
use demo_support::cli::{Command, parse_args, write_figure};
use llm_from_scratch::model::StepReport;

/// The command line.
const USAGE: &str = "usage: ch36-tiny-decoder [--figure out.svg | --text FILE [--steps N]]";

/// Steps between two progress lines.
const PROGRESS_EVERY: usize = 50;
/// Steps of a text run unless `--steps` says otherwise.
const TEXT_STEPS: usize = 500;

/// A progress printer for runs of `steps` steps of `tokens_per_step` tokens.
fn progress(steps: usize, tokens_per_step: usize) -> impl FnMut(&StepReport) {
    let start = Instant::now();
    move |r: &StepReport| {
        let done = r.step + 1;
        if done.is_multiple_of(PROGRESS_EVERY) || done == steps {
            let seconds = start.elapsed().as_secs_f64().max(1e-9);
            eprintln!(
                "step {done}/{steps} loss {:.4} lr {:.5} grad_norm {:.3} tokens/s {:.0}",
                r.loss,
                r.lr,
                r.grad_norm,
                (done * tokens_per_step) as f64 / seconds
            );
        }
    }
}

/// The arguments are one of the accepted shapes.
fn accepted(args: &[&str]) -> bool {
    let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    parse_args(&owned).is_ok() || matches!(args, ["--text", _] | ["--text", _, "--steps", _])
}

fn run(args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    match args {
        [] => Ok(render_report(&learner_evidence_with_progress(progress(STEPS, BATCH * TOKENS))?)),
        ["--figure", _] => {
            let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            let Ok(Command::Figure(path)) = parse_args(&owned) else { return Err(USAGE.into()) };
            let evidence = learner_evidence_with_progress(progress(STEPS, BATCH * TOKENS))?;
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
            Ok(render_text_run(&train_on_text(&text, steps, progress(steps, TEXT_BATCH * CONTEXT))?))
        }
        _ => Err(USAGE.into()),
    }
}

fn main() -> ExitCode {
    let start = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if !accepted(&args) {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(report) => {
            print!("{report}");
            eprintln!("done in {:.1} s", start.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
