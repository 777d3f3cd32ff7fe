//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure PATH` also draws the chapter's figure; `--help` lists every flag.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch33-kv-cache",
        "Chapter 33, the KV cache: prefill and decode, chunked prefill, sliding windows with a rolling cache.",
        ch33_kv_cache::learner_evidence,
        ch33_kv_cache::render_report,
        demo_support::cli::Drawings { figure: ch33_kv_cache::render_svg, thumbnail: ch33_kv_cache::render_thumbnail },
    )
}
