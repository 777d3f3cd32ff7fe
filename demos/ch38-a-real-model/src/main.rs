//! Loads SmolLM2-135M-Instruct and prints the chapter report. Without the model file it prints
//! one line saying how to get it, and exits with status 1.
//!
//! `--model PATH` names the file (default: `LLM_MODEL`, else where `scripts/fetch-model` puts it);
//! `--figure PATH` also draws the chapter's figure; `--prompt TEXT [--tokens N]` prints the tokens,
//! next tokens and greedy continuation of a text of your own instead; `--help` lists every flag.

use std::path::PathBuf;
use std::process::ExitCode;

use ch38_a_real_model::{
    CONTINUATION, evidence_from, load_quantized, model_path, render_prompt, render_report, render_svg,
    render_thumbnail, run_prompt,
};
use demo_support::cli::{self, ChapterArgs};

/// Chapter 38, a real model: SmolLM2-135M-Instruct read from its GGUF file — its tokens, next
/// tokens and greedy continuations, both RoPE layouts, and the attention sink it learnt. Prints the
/// chapter's report on standard output.
#[derive(clap::Parser)]
struct Cli {
    /// The GGUF file of SmolLM2-135M-Instruct (scripts/fetch-model downloads it)
    /// [default: $LLM_MODEL, else the file scripts/fetch-model writes]
    #[arg(long, value_name = "PATH")]
    model: Option<PathBuf>,
    /// Instead of the report, print the tokens of TEXT, its five most likely next tokens and a
    /// greedy continuation (ChatML tokens such as <|im_start|> are read as such) [default: the report]
    #[arg(long, value_name = "TEXT", conflicts_with_all = ["figure", "thumbnail"])]
    prompt: Option<String>,
    /// Tokens of the --prompt continuation at most; it stops after <|im_end|>
    #[arg(long, value_name = "N", requires = "prompt", default_value_t = CONTINUATION, value_parser = tokens)]
    tokens: usize,
    #[command(flatten)]
    chapter: ChapterArgs,
}

/// A whole number of tokens, 0 to 1 000.
fn tokens(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n <= 1000 => Ok(n),
        _ => Err("expected a whole number from 0 to 1000".to_string()),
    }
}

fn main() -> ExitCode {
    cli::finish((|| {
        let args: Cli = cli::parse("ch38-a-real-model")?;
        args.chapter.run.apply()?;
        let path = model_path(args.model.as_deref())?;
        if let Some(text) = args.prompt {
            let run = cli::on_pool(|| {
                let (tokenizer, model) = load_quantized(&path)?;
                Ok(run_prompt(&model, &tokenizer, "user", text, args.tokens)?)
            })?;
            return cli::print(&render_prompt(&run));
        }
        let evidence = cli::on_pool(|| Ok(evidence_from(&path)?))?;
        args.chapter.draw(&evidence, render_svg, render_thumbnail)?;
        cli::print(&render_report(&evidence))
    })())
}
