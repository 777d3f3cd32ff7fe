//! The figure's data as a 34-line text trace of the worked example (`--trace`), line by line
//! (`CONFIG|…`, `SHAPE|…`, `PARTITION|…`, `WEIGHTS|…`, `HEAD_OUTPUT|…`, `MERGED|…`, `OUTPUT_MAP|…`,
//! `OUTPUT|…`, `PREFIX_PROOF|…`), with every value's six decimals, so a test can check what the
//! picture shows without parsing the picture.

use demo_support::report::{fmt_f64, fmt_values};
use llm_from_scratch::fmt_shape;

use crate::{Evidence, HEADS, MAX_POSITIONS, MODEL_WIDTH, ROPE_BASE, TOKENS, head_rows};

/// One cell of a head's probability table.
fn cell(weights: &[Vec<f64>], query: usize, key: usize) -> String {
    if key > query {
        "masked".to_string()
    } else if key == query {
        format!("*{}", fmt_f64(weights[query][key]))
    } else {
        fmt_f64(weights[query][key])
    }
}

/// The 34 trace lines.
pub fn render_diagram_trace(e: &Evidence) -> Vec<String> {
    let f = &e.forward;
    let d_h = MODEL_WIDTH / HEADS;
    let mut lines = vec![format!(
        "CONFIG|B=1|T={TOKENS}|d_model={MODEL_WIDTH}|heads={HEADS}|d_h={d_h}|rope_base={}|max_positions={MAX_POSITIONS}|offset=0",
        fmt_f64(ROPE_BASE)
    )];
    for (name, shape) in [
        ("input", e.input.shape()),
        ("projected_qkv", f.merged.shape()),
        ("split_heads", f.query_heads.shape()),
        ("rotated_query_key", f.rotated_query_heads.shape()),
        ("attention_weights", f.weights.shape()),
        ("head_outputs", f.head_outputs.shape()),
        ("merged", f.merged.shape()),
        ("output", f.output.shape()),
    ] {
        lines.push(format!("SHAPE|{name}|{}", fmt_shape(shape)));
    }
    for h in 0..HEADS {
        lines.push(format!("PARTITION|head={h}|columns={}..{}", h * d_h, (h + 1) * d_h));
    }
    for h in 0..HEADS {
        let w = head_rows(&f.weights, h);
        for q in 0..TOKENS {
            let cells: Vec<String> = (0..TOKENS).map(|k| cell(&w, q, k)).collect();
            lines.push(format!("WEIGHTS|head={h}|query={q}|{}", cells.join(",")));
        }
    }
    for h in 0..HEADS {
        for (t, row) in head_rows(&f.head_outputs, h).iter().enumerate() {
            lines.push(format!("HEAD_OUTPUT|head={h}|token={t}|{}", fmt_values(row)));
        }
    }
    for (t, row) in f.merged.as_slice().chunks(MODEL_WIDTH).enumerate() {
        lines.push(format!("MERGED|token={t}|{}", fmt_values(row)));
    }
    for (r, row) in e.output_weight.as_slice().chunks(MODEL_WIDTH).enumerate() {
        lines.push(format!("OUTPUT_MAP|row={r}|{}", fmt_values(row)));
    }
    for (t, row) in f.output.as_slice().chunks(MODEL_WIDTH).enumerate() {
        lines.push(format!("OUTPUT|token={t}|{}", fmt_values(row)));
    }
    lines.push(format!(
        "PREFIX_PROOF|changed_token=2|rows_0_1={}|row_2={}",
        if e.prefix_rows_bitwise_equal { "bitwise_unchanged" } else { "differ" },
        if e.last_row_changed { "changed" } else { "unchanged" }
    ));
    lines
}
