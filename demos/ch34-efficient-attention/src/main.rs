//! Prints the chapter report (see the library for the evidence it is built from).

fn main() -> std::process::ExitCode {
    llm_from_scratch::report::print_chapter(
        ch34_efficient_attention::learner_evidence(),
        ch34_efficient_attention::render_report,
    )
}
