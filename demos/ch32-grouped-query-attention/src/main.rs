//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure PATH` also draws the chapter's figure; `--help` lists every flag.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch32-grouped-query-attention",
        "Chapter 32, grouped-query attention: H query heads over G key/value heads, repeat-interleave, parameter and cache sizes.",
        ch32_grouped_query_attention::learner_evidence,
        ch32_grouped_query_attention::render_report,
        demo_support::cli::Drawings {
            figure: ch32_grouped_query_attention::render_svg,
            thumbnail: ch32_grouped_query_attention::render_thumbnail,
        },
    )
}
