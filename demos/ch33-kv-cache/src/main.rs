//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure out.svg` also writes the chapter's figure to `out.svg`.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch33-kv-cache",
        ch33_kv_cache::learner_evidence,
        ch33_kv_cache::render_report,
        ch33_kv_cache::render_svg,
    )
}
