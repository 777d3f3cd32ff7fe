//! Loads SmolLM2-135M-Instruct and prints the chapter report. Without the model file it prints
//! one line saying how to get it, and exits with status 1.
//!
//! `--model PATH` names the file (default: `LLM_MODEL`, else where `scripts/fetch-model` puts it);
//! `--figure PATH` also draws the chapter's figure; `--help` lists every flag.

use std::path::PathBuf;
use std::process::ExitCode;

use ch38_a_real_model::{evidence_from, model_path, render_report, render_svg};
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
    #[command(flatten)]
    chapter: ChapterArgs,
}

fn main() -> ExitCode {
    cli::finish((|| {
        let args: Cli = cli::parse("ch38-a-real-model")?;
        args.chapter.run.apply()?;
        let evidence = evidence_from(&model_path(args.model.as_deref())?)?;
        if let Some(path) = &args.chapter.figure {
            cli::write_figure(path, &render_svg(&evidence))?;
        }
        cli::print(&render_report(&evidence))
    })())
}
