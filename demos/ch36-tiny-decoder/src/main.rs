//! Trains the tiny decoder on the reversal task and prints the chapter report. A progress bar
//! (step, loss, tokens/s, ETA) is drawn on standard error only when it is a terminal and `--quiet`
//! is not given, so standard output stays the golden report.
//!
//! `--figure PATH` also draws the chapter's figure (loss curve and attention maps); `--help` lists
//! every flag.
//! `--text FILE [--steps N]` trains a character-level model on a text file instead and prints a
//! continuation of its beginning.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ch36_tiny_decoder::text::{CONTEXT, TEXT_BATCH, render_text_run, train_on_text};
use ch36_tiny_decoder::{
    BATCH, STEPS, TOKENS, learner_evidence_with_progress, render_report, render_svg, render_thumbnail,
};
use demo_support::cli::{self, ChapterArgs};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use llm_from_scratch::model::StepReport;

/// Chapter 36, a tiny decoder: a LLaMA-style decoder trained to reverse sequences, then cached
/// generation. Prints the chapter's report on standard output; the progress bar goes to standard
/// error.
#[derive(clap::Parser)]
struct Cli {
    /// No progress bar (it is also hidden when standard error is not a terminal)
    #[arg(long, short)]
    quiet: bool,
    /// Train a character-level model on the text of FILE instead, and print a continuation of its
    /// beginning [default: the reversal task]
    #[arg(long, value_name = "FILE", conflicts_with_all = ["figure", "thumbnail"])]
    text: Option<PathBuf>,
    /// Steps of a --text run
    #[arg(long, value_name = "N", requires = "text", default_value_t = TEXT_STEPS, value_parser = steps)]
    steps: usize,
    #[command(flatten)]
    chapter: ChapterArgs,
}

/// Steps of a text run unless `--steps` says otherwise.
const TEXT_STEPS: usize = 500;

/// A whole number of steps, 1 to 100 000.
fn steps(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=100_000).contains(&n) => Ok(n),
        _ => Err("expected a whole number from 1 to 100000".to_string()),
    }
}

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

fn main() -> ExitCode {
    let start = Instant::now();
    cli::finish((|| {
        let args: Cli = cli::parse("ch36-tiny-decoder")?;
        args.chapter.run.apply()?;
        let report = cli::on_pool(|| match &args.text {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let progress = progress(args.steps, TEXT_BATCH * CONTEXT, args.quiet);
                Ok(render_text_run(&train_on_text(&text, args.steps, progress)?))
            }
            None => {
                let evidence = learner_evidence_with_progress(progress(STEPS, BATCH * TOKENS, args.quiet))?;
                args.chapter.draw(&evidence, render_svg, render_thumbnail)?;
                Ok(render_report(&evidence))
            }
        })?;
        cli::print(&report)?;
        if !args.quiet && std::io::stderr().is_terminal() {
            cli::note(format!("done in {:.1} s", start.elapsed().as_secs_f64()));
        }
        Ok(())
    })())
}
