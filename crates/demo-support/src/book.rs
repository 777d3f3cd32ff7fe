//! The chapters as a book in the browser: `cargo doc` renders each demo crate's opening prose,
//! and [`chapter_page!`](crate::chapter_page) adds the rest of the page — the figure inline, the
//! golden report, the library items the chapter uses and the way to the previous and next
//! chapter. The page compiles from the same files the tests compare (`docs/figures/`,
//! `expected/`), so it cannot drift from them.

/// The end of a chapter's page in the book, as a doc string for the demo crate's root:
///
/// ```ignore
/// #![doc = demo_support::chapter_page!(
///     "ch28-causal-masking",
///     "[`Mask`](../llm_from_scratch/tensor/struct.Mask.html)",
///     ("chapter 27", "ch27_scaled_dot_product_attention"),
///     ("chapter 29", "ch29_rotary_position_embedding")
/// )]
/// ```
///
/// The first argument is the package name (its figure is `docs/figures/<package>.svg`, its
/// report `expected/<package>.txt`), the second the library items as Markdown links relative to
/// the chapter's page (`../llm_from_scratch/…html`: rustdoc leaves intra-doc paths in a doc string
/// that a macro builds unresolved, so the pages name the files; `scripts/check-book` checks that
/// each exists), then the previous and the next page: a label and a crate name (`llm_book` for the
/// list of chapters).
#[macro_export]
macro_rules! chapter_page {
    ($package:literal, $items:literal, ($previous:literal, $previous_crate:literal), ($next:literal, $next_crate:literal)) => {
        concat!(
            "\n\n## The figure\n\n",
            "<div class=\"chapter-figure\" style=\"max-width: 100%; overflow-x: auto\">\n",
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/figures/", $package, ".svg")),
            "\n</div>\n\n",
            "Drawn from the chapter's own numbers by `cargo run -p ",
            $package,
            " -- --figure PATH`.\n\n",
            "## The report\n\n",
            "What `cargo run -p ",
            $package,
            "` prints, byte for byte (the golden file `expected/",
            $package,
            ".txt`, which the tests compare):\n\n",
            "```text\n",
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../expected/", $package, ".txt")),
            "```\n\n",
            "## The library\n\n",
            "This chapter uses ",
            $items,
            ".\n\n",
            "---\n\n",
            "[← ",
            $previous,
            "](../",
            $previous_crate,
            "/index.html) · [all chapters](../llm_book/index.html) · [",
            $next,
            " →](../",
            $next_crate,
            "/index.html)\n"
        )
    };
}
