//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure out.svg` also writes the chapter's figure to `out.svg`.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch35-latent-attention",
        ch35_latent_attention::learner_evidence,
        ch35_latent_attention::render_report,
        ch35_latent_attention::render_svg,
    )
}
