//! Writes text with a model saved by `ch37-train-on-text --save PATH`, one character at a time as
//! it is produced (with a KV cache; past the model's 64 positions the context slides).
//!
//! ```text
//! generate PATH [--prompt TEXT] [--chars N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
//! ```
//!
//! Every bad input (a missing or corrupt file, a temperature below 0, a top-p outside (0, 1], a
//! prompt character the model has never seen, an unknown flag) ends with one line on standard
//! error and a non-zero exit code: 2 for a bad command line, 1 for anything else.

use std::io::Write;
use std::ops::ControlFlow;
use std::process::ExitCode;

use ch37_train_on_text::{VOCABULARY_NOTE, stream};
use llm_from_scratch::model::{CharTokenizer, Sampling, load_train_state};

const USAGE: &str =
    "usage: generate PATH [--prompt TEXT] [--chars N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
  PATH             a training state written by ch37-train-on-text --save
  --prompt TEXT    the beginning of the text (default: \"Non eram nescius\")
  --chars N        characters to write after it (default: 400)
  --temperature T  0 chooses the most likely character; above 1 flattens (default: 0.8)
  --top-k K        sample among the K most likely characters (default: all)
  --top-p P        sample among the fewest characters whose probability reaches P, 0 < P <= 1 (default: 0.9)
  --seed S         seed of the sampler (default: 7)";

#[derive(Debug)]
struct Options {
    path: String,
    prompt: String,
    chars: usize,
    sampling: Sampling,
    seed: u64,
}

fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("{flag} {text:?}: not a valid number"))
}

fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let (mut path, mut prompt, mut chars, mut seed) = (None, "Non eram nescius".to_string(), 400, 7);
    let (mut temperature, mut k, mut p) = (0.8f64, usize::MAX, 0.9f64);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().cloned().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--help" | "-h" => return Ok(None),
            "--prompt" => prompt = value()?,
            "--chars" => chars = number(arg, &value()?)?,
            "--temperature" => temperature = number(arg, &value()?)?,
            "--top-k" => k = number(arg, &value()?)?,
            "--top-p" => p = number(arg, &value()?)?,
            "--seed" => seed = number(arg, &value()?)?,
            flag if flag.starts_with('-') => return Err(format!("unknown flag {flag:?} (see --help)")),
            file if path.is_none() => path = Some(file.to_string()),
            extra => return Err(format!("unexpected argument {extra:?}: only one checkpoint path")),
        }
    }
    let path = path.ok_or("missing the checkpoint path (see --help)")?;
    if !(temperature >= 0.0 && temperature.is_finite()) {
        return Err(format!("--temperature {temperature}: must be finite and at least 0"));
    }
    if !(p > 0.0 && p <= 1.0) {
        return Err(format!("--top-p {p}: must satisfy 0 < p <= 1"));
    }
    if k == 0 {
        return Err("--top-k 0: needs at least one candidate".to_string());
    }
    if prompt.is_empty() {
        return Err("--prompt: needs at least one character".to_string());
    }
    let sampling = if temperature == 0.0 { Sampling::Greedy } else { Sampling::TopP { temperature, k, p } };
    Ok(Some(Options { path, prompt, chars, sampling, seed }))
}

fn run(options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let state = load_train_state(&options.path)?;
    let vocabulary = state
        .notes
        .get(VOCABULARY_NOTE)
        .ok_or_else(|| format!("{}: no vocabulary is saved with this model", options.path))?;
    let tokenizer = CharTokenizer::from_chars(vocabulary.chars())?;
    if tokenizer.vocab_size() != state.model.config().vocab_size {
        return Err(format!("{}: the saved vocabulary does not fit the model", options.path).into());
    }
    tokenizer.encode(&options.prompt)?; // refuse an unknown character before printing anything
    let mut out = std::io::stdout().lock();
    let mut written = write!(out, "{}", options.prompt).and_then(|()| out.flush());
    stream(&state.model, &tokenizer, &options.prompt, options.chars, options.sampling, options.seed, |c| {
        written = write!(out, "{c}").and_then(|()| out.flush());
        if written.is_ok() { ControlFlow::Continue(()) } else { ControlFlow::Break(()) }
    })?;
    match written.and_then(|()| writeln!(out)) {
        // a closed pipe (`| head`) is the reader's choice, not an error
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    demo_support::cli::main_with_options(&args, USAGE, parse, run)
}
