//! Prints the chapter report (see the library for the evidence it is built from);
//! `--figure PATH` also draws the chapter's figure; `--help` lists every flag.

fn main() -> std::process::ExitCode {
    demo_support::cli::run_chapter(
        "ch27-scaled-dot-product-attention",
        "Chapter 27, scaled dot-product attention: scores q·kᵀ/√d_h, softmax over keys, weighted values, and why √d_h.",
        ch27_scaled_dot_product_attention::learner_evidence,
        ch27_scaled_dot_product_attention::render_report,
        demo_support::cli::Drawings {
            figure: ch27_scaled_dot_product_attention::render_svg,
            thumbnail: ch27_scaled_dot_product_attention::render_thumbnail,
        },
    )
}
