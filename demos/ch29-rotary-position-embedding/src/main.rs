//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure PATH` also draws the chapter's figure; `--help` lists every flag.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch29-rotary-position-embedding",
        "Chapter 29, rotary position embedding: rotating coordinate pairs by p·θ_i, relative positions, both pair layouts.",
        ch29_rotary_position_embedding::learner_evidence,
        ch29_rotary_position_embedding::render_report,
        demo_support::cli::Drawings {
            figure: ch29_rotary_position_embedding::render_svg,
            thumbnail: ch29_rotary_position_embedding::render_thumbnail,
        },
    )
}
