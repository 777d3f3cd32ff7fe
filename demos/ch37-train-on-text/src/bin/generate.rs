//! Writes text with a model saved by `ch37-train-on-text --save PATH`, one character at a time as
//! it is produced (with a KV cache; past the model's 64 positions the context slides).
//!
//! ```text
//! generate PATH [--prompt TEXT] [--chars N] [--temperature T] [--top-k K] [--top-p P] [--seed N]
//! ```
//!
//! Every bad input (a missing or corrupt file, a temperature below 0, a top-p outside (0, 1], a
//! prompt character the model has never seen, an unknown flag) ends with a message on standard
//! error and a non-zero exit code: 2 for a bad command line, 1 for anything else. A reader that
//! goes away (`| head -1`) ends it quietly with status 141.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

use ch37_train_on_text::{VOCABULARY_NOTE, stream};
use demo_support::cli::{self, Failure, RunArgs};
use llm_from_scratch::model::{CharTokenizer, Sampling, load_train_state};

/// Writes text with a model saved by `ch37-train-on-text --save PATH`, one character at a time as
/// it is produced; past the model's 64 positions the context slides.
#[derive(clap::Parser)]
struct Cli {
    /// A training state written by `ch37-train-on-text --save PATH`
    #[arg(value_name = "PATH")]
    path: PathBuf,
    /// The beginning of the text
    #[arg(long, value_name = "TEXT", default_value = "Non eram nescius", value_parser = prompt)]
    prompt: String,
    /// Characters to write after the prompt
    #[arg(long, value_name = "N", default_value_t = 400)]
    chars: usize,
    /// 0 chooses the most likely character; above 1 flattens the distribution
    #[arg(long, value_name = "T", default_value_t = 0.8, value_parser = temperature, allow_negative_numbers = true)]
    temperature: f64,
    /// Sample among the K most likely characters [default: all]
    #[arg(long, value_name = "K", value_parser = top_k)]
    top_k: Option<usize>,
    /// Sample among the fewest characters whose probability reaches P, 0 < P <= 1
    #[arg(long, value_name = "P", default_value_t = 0.9, value_parser = top_p)]
    top_p: f64,
    /// Seed of the sampler
    #[arg(long, value_name = "N", default_value_t = 7)]
    seed: u64,
    #[command(flatten)]
    run: RunArgs,
}

/// A prompt of at least one character.
fn prompt(text: &str) -> Result<String, String> {
    if text.is_empty() { Err("expected at least one character".to_string()) } else { Ok(text.to_string()) }
}

/// A finite temperature of at least 0.
fn temperature(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err("expected a finite number of at least 0".to_string()),
    }
}

/// A whole number of candidates, at least 1.
fn top_k(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(k) if k >= 1 => Ok(k),
        _ => Err("expected a whole number of at least 1".to_string()),
    }
}

/// A probability mass `0 < p <= 1`.
fn top_p(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err("expected a number p with 0 < p <= 1".to_string()),
    }
}

fn run(options: &Cli) -> Result<(), Failure> {
    let k = options.top_k.unwrap_or(usize::MAX);
    let (temperature, p) = (options.temperature, options.top_p);
    let sampling = if temperature == 0.0 { Sampling::Greedy } else { Sampling::TopP { temperature, k, p } };
    let state = load_train_state(&options.path)?;
    let vocabulary = state
        .notes
        .get(VOCABULARY_NOTE)
        .ok_or_else(|| format!("{}: no vocabulary is saved with this model", options.path.display()))?;
    let tokenizer = CharTokenizer::from_chars(vocabulary.chars())?;
    if tokenizer.vocab_size() != state.model.config().vocab_size {
        return Err(format!("{}: the saved vocabulary does not fit the model", options.path.display()).into());
    }
    tokenizer.encode(&options.prompt)?; // refuse an unknown character before printing anything
    let mut written = cli::print(&options.prompt);
    stream(&state.model, &tokenizer, &options.prompt, options.chars, sampling, options.seed, |c| {
        written = cli::print(c.encode_utf8(&mut [0; 4]));
        if written.is_ok() { ControlFlow::Continue(()) } else { ControlFlow::Break(()) }
    })?;
    written.and_then(|()| cli::print("\n"))
}

fn main() -> ExitCode {
    cli::finish((|| {
        let args: Cli = cli::parse("generate")?;
        args.run.apply()?;
        run(&args)
    })())
}
