//! Prints the chapter report (see the library for the evidence it is built from).

fn main() -> std::process::ExitCode {
    llm_from_scratch::report::print_chapter(
        ch27_scaled_dot_product_attention::learner_evidence(),
        ch27_scaled_dot_product_attention::render_report,
    )
}
