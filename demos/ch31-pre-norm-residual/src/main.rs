//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure PATH` also draws the chapter's figure; `--help` lists every flag.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch31-pre-norm-residual",
        "Chapter 31, the pre-norm residual branch x + MHA(RMSNorm(x)): the attention half of a transformer block.",
        ch31_pre_norm_residual::learner_evidence,
        ch31_pre_norm_residual::render_report,
        demo_support::cli::Drawings {
            figure: ch31_pre_norm_residual::render_svg,
            thumbnail: ch31_pre_norm_residual::render_thumbnail,
        },
    )
}
