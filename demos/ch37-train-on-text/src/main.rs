//! Trains the decoder on Cicero and prints the chapter report. A progress bar (steps, loss,
//! tokens/s, ETA) is drawn on standard error only when it is a terminal and `--quiet` is not given,
//! so standard output stays the golden report.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ch37_train_on_text::{
    BATCH, CONTEXT, Corpus, Run, STEPS, evidence_of, render_report, render_svg, render_thumbnail,
};
use demo_support::cli::{self, ChapterArgs, Failure};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use llm_from_scratch::model::{StepReport, load_train_state};

/// Chapter 37, training on real text: the chapter-36 decoder learns Cicero's De finibus I one
/// character at a time. Prints the chapter's report on standard output; the progress bar goes to
/// standard error.
#[derive(clap::Parser)]
struct Cli {
    /// No progress bar (it is also hidden when standard error is not a terminal)
    #[arg(long, short)]
    quiet: bool,
    /// Stop after step N of the 800-step schedule [default: all of it]
    #[arg(long, value_name = "N", value_parser = steps)]
    steps: Option<usize>,
    /// Write the model, the optimiser state and the step to PATH (safetensors); `generate PATH`
    /// writes text with it [default: not saved]
    #[arg(long, value_name = "PATH")]
    save: Option<PathBuf>,
    /// Continue a run saved with --save (bitwise the same as not stopping) [default: a new run]
    #[arg(long, value_name = "PATH")]
    resume: Option<PathBuf>,
    #[command(flatten)]
    chapter: ChapterArgs,
}

/// A step of the schedule, 1 to [`STEPS`].
fn steps(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=STEPS).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from 1 to {STEPS}")),
    }
}

/// A progress bar over `steps` steps starting at `from`, hidden with `quiet` or without a terminal.
fn progress_bar(from: usize, steps: usize, quiet: bool) -> ProgressBar {
    let target = if quiet { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    let bar = ProgressBar::with_draw_target(Some(steps as u64), target);
    let style = ProgressStyle::with_template("{bar:20} step {pos}/{len} {msg} ETA {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_position(from as u64);
    bar.reset_eta();
    bar
}

fn run(options: &Cli) -> Result<String, Failure> {
    let corpus = Corpus::new(ch37_train_on_text::CORPUS)?;
    let mut run = match &options.resume {
        Some(path) => Run::resume(load_train_state(path)?, &corpus)?,
        None => Run::start(&corpus)?,
    };
    let until = options.steps.unwrap_or(STEPS);
    let from = run.trainer.steps_taken();
    if from > until {
        return Err(format!("the saved run is at step {from}, past --steps {until}").into());
    }
    let bar = progress_bar(from, until, options.quiet);
    let start = Instant::now();
    run.train_until(&corpus, until, |r: &StepReport| {
        let tokens = (r.step + 1 - from) * BATCH * CONTEXT;
        let rate = tokens as f64 / start.elapsed().as_secs_f64().max(1e-9);
        bar.set_message(format!("loss {:.4} tokens/s {rate:.0}", r.loss));
        bar.set_position(r.step as u64 + 1);
    })?;
    bar.finish_and_clear();
    if let Some(path) = &options.save {
        run.save(&corpus, path)?;
    }
    let evidence = evidence_of(&run, &corpus)?;
    options.chapter.draw(&evidence, render_svg, render_thumbnail)?;
    Ok(render_report(&evidence))
}

fn main() -> ExitCode {
    cli::finish((|| {
        let args: Cli = cli::parse("ch37-train-on-text")?;
        args.chapter.run.apply()?;
        // 800 steps each free and allocate the same few-MiB buffers: keep the freed memory for
        // the next step instead of handing it back to the system and faulting it in again (a
        // sixth of a run went to page faults; no number changes)
        llm_from_scratch::kernels::allocator::keep_freed_memory();
        cli::print(&cli::on_pool(|| run(&args))?)
    })())
}
