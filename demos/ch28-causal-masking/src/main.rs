//! Prints the chapter report (see the library for the evidence it is built from).

fn main() -> std::process::ExitCode {
    llm_from_scratch::report::print_chapter(ch28_causal_masking::learner_evidence(), ch28_causal_masking::render_report)
}
