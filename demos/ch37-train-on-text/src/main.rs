//! Trains the decoder on Cicero and prints the chapter report. A progress bar (steps, loss,
//! tokens/s, ETA) is drawn on standard error only when it is a terminal and `--quiet` is not given,
//! so standard output stays the golden report.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ch37_train_on_text::{BATCH, CONTEXT, Corpus, Run, STEPS, evidence_of, render_report, render_svg};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use llm_from_scratch::model::{StepReport, load_train_state};

const USAGE: &str = "usage: ch37-train-on-text [--quiet] [--steps N] [--save PATH] [--resume PATH] [--figure PATH]
  --steps N       stop after step N of the 800-step schedule (default: all of it)
  --save PATH     write the model, the optimiser state and the step to PATH (safetensors)
  --resume PATH   continue a run saved with --save (bitwise the same as not stopping)
  --figure PATH   draw train and validation loss against steps as an SVG file
  --quiet         no progress bar (it is also hidden when standard error is not a terminal)";

#[derive(Debug, Default)]
struct Options {
    quiet: bool,
    steps: Option<usize>,
    save: Option<PathBuf>,
    resume: Option<PathBuf>,
    figure: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut options = Options::default();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--quiet" | "-q" => options.quiet = true,
            "--steps" => {
                let text = value()?;
                let n: usize = text.parse().map_err(|_| format!("--steps {text}: not a whole number"))?;
                if n == 0 || n > STEPS {
                    return Err(format!("--steps {n}: must be between 1 and {STEPS}"));
                }
                options.steps = Some(n);
            }
            "--save" => options.save = Some(value()?.into()),
            "--resume" => options.resume = Some(value()?.into()),
            "--figure" => options.figure = Some(value()?.into()),
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(Some(options))
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

fn run(options: &Options) -> Result<String, Box<dyn std::error::Error>> {
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
    if let Some(path) = &options.figure {
        let svg = render_svg(&evidence);
        std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(render_report(&evidence))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    demo_support::cli::main_with_options(&args, USAGE, parse, |options| {
        print!("{}", run(options)?);
        Ok(())
    })
}
