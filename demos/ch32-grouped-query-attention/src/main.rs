//! Prints the chapter report (see the library for the evidence it is built from).

fn main() -> std::process::ExitCode {
    llm_from_scratch::report::print_chapter(
        ch32_grouped_query_attention::learner_evidence(),
        ch32_grouped_query_attention::render_report,
    )
}
