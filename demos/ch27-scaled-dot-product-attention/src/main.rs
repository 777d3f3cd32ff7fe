//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure out.svg` also writes the chapter's figure to `out.svg`.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch27-scaled-dot-product-attention",
        ch27_scaled_dot_product_attention::learner_evidence,
        ch27_scaled_dot_product_attention::render_report,
        ch27_scaled_dot_product_attention::render_svg,
    )
}
