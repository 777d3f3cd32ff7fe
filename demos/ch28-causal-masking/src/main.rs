//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure PATH` also draws the chapter's figure; `--help` lists every flag.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch28-causal-masking",
        "Chapter 28, causal masking: hiding the future with −∞; a fully masked row gives zeros, not NaN.",
        ch28_causal_masking::learner_evidence,
        ch28_causal_masking::render_report,
        demo_support::cli::Drawings {
            figure: ch28_causal_masking::render_svg,
            thumbnail: ch28_causal_masking::render_thumbnail,
        },
    )
}
