//! Prints the chapter report (see the library for the evidence it is built from).

fn main() -> std::process::ExitCode {
    llm_from_scratch::report::print_chapter(
        ch29_rotary_position_embedding::learner_evidence(),
        ch29_rotary_position_embedding::render_report,
    )
}
