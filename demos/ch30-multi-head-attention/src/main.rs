//! Prints the chapter report. `--trace` prints the 34-line figure trace instead;
//! `--figure PATH` also draws the SVG figure; `--help` lists every flag.

use std::process::ExitCode;

use ch30_multi_head_attention::{learner_evidence, render_diagram_trace, render_report, render_svg, render_thumbnail};
use demo_support::cli::{self, ChapterArgs};

/// Chapter 30, multi-head attention: heads side by side, split and merge, the output projection.
/// Prints the chapter's report on standard output.
#[derive(clap::Parser)]
struct Cli {
    /// Print the 34-line trace the figure is drawn from instead of the report
    #[arg(long, conflicts_with_all = ["figure", "thumbnail"])]
    trace: bool,
    #[command(flatten)]
    chapter: ChapterArgs,
}

fn main() -> ExitCode {
    cli::finish((|| {
        let args: Cli = cli::parse("ch30-multi-head-attention")?;
        args.chapter.run.apply()?;
        let evidence = cli::on_pool(|| Ok(learner_evidence()?))?;
        if args.trace {
            return cli::print(
                &render_diagram_trace(&evidence).iter().map(|line| format!("{line}\n")).collect::<String>(),
            );
        }
        args.chapter.draw(&evidence, render_svg, render_thumbnail)?;
        cli::print(&render_report(&evidence))
    })())
}
