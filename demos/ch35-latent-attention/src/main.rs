//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure PATH` also draws the chapter's figure; `--help` lists every flag.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch35-latent-attention",
        "Chapter 35, multi-head latent attention: a latent KV cache, absorbed equal to direct, and why RoPE needs a decoupled branch.",
        ch35_latent_attention::learner_evidence,
        ch35_latent_attention::render_report,
        demo_support::cli::Drawings {
            figure: ch35_latent_attention::render_svg,
            thumbnail: ch35_latent_attention::render_thumbnail,
        },
    )
}
