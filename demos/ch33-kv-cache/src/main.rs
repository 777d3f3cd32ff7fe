//! Prints the chapter report (see the library for the evidence it is built from).

fn main() -> std::process::ExitCode {
    llm_from_scratch::report::print_chapter(ch33_kv_cache::learner_evidence(), ch33_kv_cache::render_report)
}
