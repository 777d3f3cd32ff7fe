//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure out.svg` also writes the chapter's figure to `out.svg`.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch31-pre-norm-residual",
        ch31_pre_norm_residual::learner_evidence,
        ch31_pre_norm_residual::render_report,
        ch31_pre_norm_residual::render_svg,
    )
}
