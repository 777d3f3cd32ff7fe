//! Every demo's report equals its golden file byte for byte (through the library, without
//! spawning a process; each demo's own test runs its binary). `UPDATE_EXPECTED=1 cargo test -p
//! golden` rewrites the files on purpose.

type Render = fn() -> Result<String, String>;

fn report<E, F: Fn() -> Result<E, Box<dyn std::error::Error>>>(
    evidence: F,
    render: fn(&E) -> String,
) -> Result<String, String> {
    evidence().map(|e| render(&e)).map_err(|e| e.to_string())
}

const DEMOS: &[(&str, Render)] = &[
    ("ch27-scaled-dot-product-attention", || {
        report(ch27_scaled_dot_product_attention::learner_evidence, ch27_scaled_dot_product_attention::render_report)
    }),
    ("ch28-causal-masking", || report(ch28_causal_masking::learner_evidence, ch28_causal_masking::render_report)),
    ("ch29-rotary-position-embedding", || {
        report(ch29_rotary_position_embedding::learner_evidence, ch29_rotary_position_embedding::render_report)
    }),
    ("ch30-multi-head-attention", || {
        report(ch30_multi_head_attention::learner_evidence, ch30_multi_head_attention::render_report)
    }),
    ("ch31-pre-norm-residual", || {
        report(ch31_pre_norm_residual::learner_evidence, ch31_pre_norm_residual::render_report)
    }),
    ("ch32-grouped-query-attention", || {
        report(ch32_grouped_query_attention::learner_evidence, ch32_grouped_query_attention::render_report)
    }),
    ("ch33-kv-cache", || report(ch33_kv_cache::learner_evidence, ch33_kv_cache::render_report)),
    ("ch34-efficient-attention", || {
        report(ch34_efficient_attention::learner_evidence, ch34_efficient_attention::render_report)
    }),
    ("ch35-latent-attention", || report(ch35_latent_attention::learner_evidence, ch35_latent_attention::render_report)),
    ("ch36-tiny-decoder", || report(ch36_tiny_decoder::learner_evidence, ch36_tiny_decoder::render_report)),
    ("ch37-train-on-text", || report(ch37_train_on_text::learner_evidence, ch37_train_on_text::render_report)),
];

/// Every report, computed once for all the tests of this file (chapters 36 and 37 train models).
fn rendered() -> &'static [(&'static str, Result<String, String>)] {
    static REPORTS: std::sync::OnceLock<Vec<(&'static str, Result<String, String>)>> = std::sync::OnceLock::new();
    REPORTS.get_or_init(|| DEMOS.iter().map(|(name, render)| (*name, render())).collect())
}

#[test]
fn every_demo_is_registered_and_has_a_golden_file() {
    let registered: Vec<&str> = DEMOS.iter().map(|(name, _)| *name).collect();
    for name in golden::demo_names() {
        assert!(registered.contains(&name.as_str()), "demo {name} is not registered in tests/tests/golden.rs");
        assert!(golden::expected_path(&name).is_file(), "demo {name} has no expected/{name}.txt");
    }
}

#[test]
fn every_report_matches_its_golden_file() {
    let failures: Vec<String> = rendered()
        .iter()
        .filter_map(|(name, text)| text.clone().and_then(|text| golden::check(name, &text)).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn reports_end_with_a_newline_and_print_no_negative_zero() {
    for (name, text) in rendered() {
        let text = text.as_ref().unwrap();
        assert!(text.ends_with('\n'), "{name}");
        assert!(!text.contains("-0.000000"), "{name} prints a negative zero");
    }
}
