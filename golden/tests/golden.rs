//! Every demo's report equals its golden file byte for byte, and its figure equals the committed
//! `docs/figures/<demo>.svg` (through the library, without spawning a process; each demo's own
//! test runs its binary). The evidence of every demo is computed once and shared by the tests
//! (chapters 36 and 37 train models). `UPDATE_EXPECTED=1 cargo test -p golden` rewrites the reports on
//! purpose; `scripts/figures.sh` redraws the figures.
//!
//! Chapter 38 needs the pretrained model (`scripts/fetch-model`); without it, it is skipped with one
//! line on standard error.

use std::io::Write;
use std::sync::OnceLock;

/// A demo's report, figure and thumbnail, or `None` for a demo skipped because its model file is
/// missing.
type Rendered = Result<Option<Drawn>, String>;
type Render = fn() -> Rendered;

#[derive(Clone)]
struct Drawn {
    report: String,
    figure: String,
    thumbnail: String,
}

fn render<E, F: Fn() -> Result<E, Box<dyn std::error::Error>>>(
    evidence: F,
    report: fn(&E) -> String,
    figure: fn(&E) -> String,
    thumbnail: fn(&E) -> String,
) -> Rendered {
    evidence()
        .map(|e| Some(Drawn { report: report(&e), figure: figure(&e), thumbnail: thumbnail(&e) }))
        .map_err(|e| e.to_string())
}

const DEMOS: &[(&str, Render)] = &[
    ("ch27-scaled-dot-product-attention", || {
        use ch27_scaled_dot_product_attention as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch28-causal-masking", || {
        use ch28_causal_masking as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch29-rotary-position-embedding", || {
        use ch29_rotary_position_embedding as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch30-multi-head-attention", || {
        use ch30_multi_head_attention as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch31-pre-norm-residual", || {
        use ch31_pre_norm_residual as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch32-grouped-query-attention", || {
        use ch32_grouped_query_attention as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch33-kv-cache", || {
        use ch33_kv_cache as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch34-efficient-attention", || {
        use ch34_efficient_attention as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch35-latent-attention", || {
        use ch35_latent_attention as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch36-tiny-decoder", || {
        use ch36_tiny_decoder as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch37-train-on-text", || {
        use ch37_train_on_text as demo;
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
    ("ch38-a-real-model", || {
        use ch38_a_real_model as demo;
        if llm_from_scratch::gguf::model_path_from_env().is_none() {
            // straight to the stream: the test harness captures `eprintln!` of a passing test
            let line = format!("golden ch38-a-real-model: skipped, {}\n", demo::NO_MODEL);
            std::io::stderr().write_all(line.as_bytes()).ok();
            return Ok(None);
        }
        render(demo::learner_evidence, demo::render_report, demo::render_svg, demo::render_thumbnail)
    }),
];

/// Every demo rendered once per test binary, in the order of [`DEMOS`].
fn rendered() -> &'static [(&'static str, Rendered)] {
    static ALL: OnceLock<Vec<(&'static str, Rendered)>> = OnceLock::new();
    ALL.get_or_init(|| DEMOS.iter().map(|(name, render)| (*name, render())).collect())
}

#[test]
fn every_demo_is_registered_and_has_a_golden_file_and_a_figure() {
    let registered: Vec<&str> = DEMOS.iter().map(|(name, _)| *name).collect();
    for name in golden::demo_names() {
        assert!(registered.contains(&name.as_str()), "demo {name} is not registered in golden/tests/golden.rs");
        assert!(golden::expected_path(&name).is_file(), "demo {name} has no expected/{name}.txt");
        assert!(
            golden::figure_path(&name).is_file(),
            "demo {name} has no docs/figures/{name}.svg (scripts/figures.sh)"
        );
        assert!(
            golden::thumbnail_path(&name).is_file(),
            "demo {name} has no docs/figures/thumbnails/{name}.svg (scripts/figures.sh)"
        );
    }
}

#[test]
fn every_report_matches_its_golden_file() {
    let failures: Vec<String> = rendered()
        .iter()
        .filter_map(|(name, r)| r.clone().and_then(|r| r.map_or(Ok(()), |d| golden::check(name, &d.report))).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_figure_matches_its_committed_copy() {
    let failures: Vec<String> = rendered()
        .iter()
        .filter_map(|(name, r)| {
            r.clone().and_then(|r| r.map_or(Ok(()), |d| golden::check_figure(name, &d.figure))).err()
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_thumbnail_matches_its_committed_copy() {
    let failures: Vec<String> = rendered()
        .iter()
        .filter_map(|(name, r)| {
            r.clone().and_then(|r| r.map_or(Ok(()), |d| golden::check_thumbnail(name, &d.thumbnail))).err()
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_figure_is_a_well_formed_svg_document() {
    for (name, r) in rendered() {
        let Some(drawn) = r.as_ref().unwrap() else { continue };
        for svg in [&drawn.figure, &drawn.thumbnail] {
            if let Err(error) = demo_support::xml::check_well_formed(svg) {
                panic!("{name}: {error}");
            }
        }
    }
}

#[test]
fn reports_end_with_a_newline_and_print_no_negative_zero() {
    for (name, r) in rendered() {
        let Some(Drawn { report: text, .. }) = r.as_ref().unwrap() else { continue };
        assert!(text.ends_with('\n'), "{name}");
        assert!(!text.contains("-0.000000"), "{name} prints a negative zero");
    }
}
