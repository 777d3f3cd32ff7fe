//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure PATH` also draws the chapter's figure; `--help` lists every flag.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch34-efficient-attention",
        "Chapter 34, efficient attention: online softmax, tiled attention equal to the explicit one, memory as T grows, attention sinks.",
        ch34_efficient_attention::learner_evidence,
        ch34_efficient_attention::render_report,
        demo_support::cli::Drawings {
            figure: ch34_efficient_attention::render_svg,
            thumbnail: ch34_efficient_attention::render_thumbnail,
        },
    )
}
