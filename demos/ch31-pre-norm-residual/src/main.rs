//! Prints the chapter report (see the library for the evidence it is built from).

fn main() -> std::process::ExitCode {
    llm_from_scratch::report::print_chapter(
        ch31_pre_norm_residual::learner_evidence(),
        ch31_pre_norm_residual::render_report,
    )
}
