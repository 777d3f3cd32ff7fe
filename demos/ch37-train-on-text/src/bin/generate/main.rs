//! Writes text with any model the book has, token by token as it is produced (with a KV cache;
//! past the model's positions the context slides):
//!
//! - a training state saved by `ch37-train-on-text --save PATH`: `generate PATH`, one character
//!   a token ([`characters`]);
//! - a pretrained LLaMA-family GGUF file (`scripts/fetch-model` fetches SmolLM2-135M-Instruct):
//!   `generate --model FILE`, or `LLM_MODEL`, byte-level BPE tokens ([`pretrained`]); `--chat`
//!   wraps the prompt in the file's ChatML turns and stops at the end of the assistant's turn.
//!
//! ```text
//! generate [STATE] [--model FILE] [--prompt TEXT | --prompt-file FILE] [--chat] [--max-tokens N]
//!          [--temperature T] [--top-k K] [--top-p P] [--seed N] [--json] [--kernels TARGET] [--threads N]
//! ```
//!
//! The text goes to standard output as it comes; the prefill and decode rates to standard error.
//! `--json` prints one JSON object per line instead: the prompt's ids, then each new token's id,
//! text and five most likely (id, logit) pairs, logits in full precision. Every bad input (a
//! missing or corrupt file, a temperature below 0, a top-p outside (0, 1], a prompt the model
//! cannot read, an unknown flag) ends with a message on standard error and a non-zero exit code:
//! 2 for a bad command line, 1 for anything else. A reader that goes away (`| head -1`) ends it
//! quietly with status 141.

mod characters;
mod pretrained;

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use demo_support::cli::{self, Failure, RunArgs};
use llm_from_scratch::gguf::{MODEL_ENV, model_path_from_env};
use llm_from_scratch::model::{Decoding, Generator, Overflow, Sampling};
use llm_from_scratch::nn::SplitMix64;

/// Writes text with a model saved by `ch37-train-on-text --save PATH`, or with a pretrained GGUF
/// model (`--model FILE`), token by token as it is produced.
#[derive(clap::Parser)]
struct Cli {
    /// A training state written by `ch37-train-on-text --save PATH` [default: the GGUF model of
    /// --model]
    #[arg(value_name = "STATE", conflicts_with = "model")]
    state: Option<PathBuf>,
    /// A LLaMA-family GGUF file, such as the one scripts/fetch-model fetches [default:
    /// $LLM_MODEL, else the fetch script's cache]
    #[arg(long, value_name = "FILE")]
    model: Option<PathBuf>,
    /// The beginning of the text [default: "Non eram nescius" for a training state, "The
    /// capital of France is" for a GGUF model]
    #[arg(long, value_name = "TEXT", value_parser = prompt, conflicts_with = "prompt_file")]
    prompt: Option<String>,
    /// Read the prompt from FILE (any bytes: a GGUF model's tokenizer reads bytes that are not
    /// UTF-8 too) [default: --prompt]
    #[arg(long, value_name = "FILE")]
    prompt_file: Option<PathBuf>,
    /// The prompt is a user's turn of a chat: wrap it in the file's ChatML turns and stop at the
    /// end of the assistant's turn (GGUF models)
    #[arg(long)]
    chat: bool,
    /// Tokens to write after the prompt (characters, for a training state); nothing is reserved
    /// for them, so any number works
    #[arg(long, visible_alias = "chars", value_name = "N", default_value_t = 400)]
    max_tokens: u64,
    /// 0 chooses the most likely token; above 1 flattens the distribution
    #[arg(long, value_name = "T", default_value_t = 0.8, value_parser = temperature, allow_negative_numbers = true)]
    temperature: f64,
    /// Sample among the K most likely tokens [default: all]
    #[arg(long, value_name = "K", value_parser = top_k)]
    top_k: Option<usize>,
    /// Sample among the fewest tokens whose probability reaches P, 0 < P <= 1
    #[arg(long, value_name = "P", default_value_t = 0.9, value_parser = top_p)]
    top_p: f64,
    /// Seed of the sampler
    #[arg(long, value_name = "N", default_value_t = 7)]
    seed: u64,
    /// One JSON object per line instead of the text: the prompt's ids, then each new token's id,
    /// text and top five (id, logit) pairs
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    run: RunArgs,
}

impl Cli {
    /// The sampling rule the flags ask for.
    fn sampling(&self) -> Sampling {
        let (temperature, k, p) = (self.temperature, self.top_k.unwrap_or(usize::MAX), self.top_p);
        if temperature == 0.0 { Sampling::Greedy } else { Sampling::TopP { temperature, k, p } }
    }

    /// `--max-tokens` as a count of steps (more than the address space is as endless).
    fn steps(&self) -> usize {
        usize::try_from(self.max_tokens).unwrap_or(usize::MAX)
    }

    /// The prompt's bytes: `--prompt-file`, `--prompt`, or `default`.
    fn prompt_bytes(&self, default: &str) -> Result<Vec<u8>, Failure> {
        match (&self.prompt_file, &self.prompt) {
            (Some(path), _) => Ok(std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?),
            (None, Some(text)) => Ok(text.clone().into_bytes()),
            (None, None) => Ok(default.as_bytes().to_vec()),
        }
    }
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

/// Times a generation: the prompt's prefill ends with the first token, decoding takes the rest.
struct Clock {
    start: Instant,
    first: Option<Duration>,
    tokens: usize,
}

impl Clock {
    fn start() -> Self {
        Self { start: Instant::now(), first: None, tokens: 0 }
    }

    /// Counts one generated token.
    fn tick(&mut self) {
        self.tokens += 1;
        self.first.get_or_insert_with(|| self.start.elapsed());
    }

    /// `prefill: N tokens in S s (R tokens/s); decode: M tokens in S s (R tokens/s)` on standard
    /// error.
    fn report(&self, prompt_tokens: usize) {
        let Some(first) = self.first else { return };
        let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
        let decode = self.start.elapsed().saturating_sub(first);
        let decoded = self.tokens - 1;
        cli::note(format!(
            "prefill: {prompt_tokens} tokens in {:.3} s ({:.1} tokens/s); decode: {decoded} tokens in {:.3} s ({:.1} tokens/s)",
            first.as_secs_f64(),
            rate(prompt_tokens, first),
            decode.as_secs_f64(),
            rate(decoded, decode),
        ));
    }
}

/// Prints `text` unless an earlier print failed, keeping the first failure.
fn emit(written: &mut Result<(), Failure>, text: &str) {
    if written.is_ok() {
        *written = cli::print(text);
    }
}

/// `[1,2,3]`.
fn json_ids(ids: &[usize]) -> String {
    format!("[{}]", ids.iter().map(usize::to_string).collect::<Vec<_>>().join(","))
}

/// One `--json` line: the token's id and text, and the five largest logits (ties by id), each in
/// full precision (the shortest decimal that reads back to the same `f64`; `null` if not finite).
fn json_line(id: usize, text: &str, logits: &[f64]) -> String {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let number = |x: f64| if x.is_finite() { format!("{x:?}") } else { "null".to_string() };
    let top: Vec<String> = order.iter().take(5).map(|&i| format!("[{i},{}]", number(logits[i]))).collect();
    let text = serde_json::to_string(text).unwrap_or_else(|_| "null".to_string());
    format!("{{\"id\":{id},\"text\":{text},\"top\":[{}]}}\n", top.join(","))
}

/// Generates after the prompt `ids` and writes what `args` asks for: the text (`piece` turns each
/// id into the text it completes, and `None`, at the end, into what is left) or JSON lines
/// (`spell` gives one token's text). Stops early where `stop` holds for a generated id (the end
/// of a chat turn, not printed). The rates go to standard error.
fn write_tokens<M: Generator<Error: std::error::Error + 'static>>(
    args: &Cli,
    model: &M,
    ids: &[usize],
    mut piece: impl FnMut(Option<usize>) -> String,
    spell: impl Fn(usize) -> String,
    stop: impl Fn(usize) -> bool,
) -> Result<(), Failure> {
    let mut written = Ok(());
    if args.json {
        emit(&mut written, &format!("{{\"prompt_ids\":{}}}\n", json_ids(ids)));
    }
    let mut clock = Clock::start();
    let mut rng = SplitMix64::new(args.seed);
    let (sampling, steps) = (args.sampling(), args.steps());
    model.generate_streaming(ids, steps, sampling, Decoding::KvCache, Overflow::Slide, &mut rng, |id, logits| {
        clock.tick();
        if stop(id) || written.is_err() {
            return ControlFlow::Break(());
        }
        let text = if args.json { json_line(id, &spell(id), logits) } else { piece(Some(id)) };
        emit(&mut written, &text);
        if written.is_ok() { ControlFlow::Continue(()) } else { ControlFlow::Break(()) }
    })?;
    if !args.json {
        emit(&mut written, &piece(None));
    }
    written?;
    clock.report(ids.len());
    Ok(())
}

fn run(args: &Cli) -> Result<(), Failure> {
    match (&args.state, &args.model) {
        (Some(state), _) => characters::generate(args, state),
        (None, Some(model)) => pretrained::generate(args, model),
        (None, None) => match model_path_from_env() {
            Some(model) => pretrained::generate(args, &model),
            None => Err(format!(
                "no model: give a training state (ch37-train-on-text --save PATH), or a GGUF file with --model or \
                 {MODEL_ENV} (scripts/fetch-model fetches one)"
            )
            .into()),
        },
    }
}

fn main() -> ExitCode {
    cli::finish((|| {
        let args: Cli = cli::parse("generate")?;
        args.run.apply()?;
        cli::on_pool(|| run(&args))
    })())
}
