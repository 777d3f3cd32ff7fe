//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure out.svg` also writes the chapter's figure to `out.svg`.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch34-efficient-attention",
        ch34_efficient_attention::learner_evidence,
        ch34_efficient_attention::render_report,
        ch34_efficient_attention::render_svg,
    )
}
