//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure out.svg` also writes the chapter's figure to `out.svg`.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch32-grouped-query-attention",
        ch32_grouped_query_attention::learner_evidence,
        ch32_grouped_query_attention::render_report,
        ch32_grouped_query_attention::render_svg,
    )
}
