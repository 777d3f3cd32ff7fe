//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure out.svg` also writes the chapter's figure to `out.svg`.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch28-causal-masking",
        ch28_causal_masking::learner_evidence,
        ch28_causal_masking::render_report,
        ch28_causal_masking::render_svg,
    )
}
