//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure out.svg` also writes the chapter's figure to `out.svg`.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch29-rotary-position-embedding",
        ch29_rotary_position_embedding::learner_evidence,
        ch29_rotary_position_embedding::render_report,
        ch29_rotary_position_embedding::render_svg,
    )
}
