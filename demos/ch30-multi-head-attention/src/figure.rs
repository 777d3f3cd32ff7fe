//! The chapter's figure: a 34-line text trace of the worked example and an SVG drawn from it.
//!
//! The trace is the figure's data, line by line (`CONFIG|…`, `SHAPE|…`, `PARTITION|…`,
//! `WEIGHTS|…`, `HEAD_OUTPUT|…`, `MERGED|…`, `OUTPUT_MAP|…`, `OUTPUT|…`, `PREFIX_PROOF|…`), so a
//! test can check what the picture shows without parsing the picture.

use std::fmt::Write as _;

use llm_from_scratch::fmt_shape;
use llm_from_scratch::report::{fmt_f64, fmt_values};

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

const HEAD_STYLE: [(&str, &str); 2] = [("#1f5fbf", ""), ("#c0392b", " stroke-dasharray=\"8 4\"")];

fn text(svg: &mut String, x: f64, y: f64, size: u32, content: &str) {
    let _ = writeln!(svg, r#"<text x="{x}" y="{y}" font-size="{size}" font-family="monospace">{content}</text>"#);
}

/// A row of numbers in boxes; `color_of(column)` frames each box.
fn number_row(svg: &mut String, x: f64, y: f64, values: &[f64], color_of: impl Fn(usize) -> usize) {
    for (j, v) in values.iter().enumerate() {
        let (stroke, dash) = HEAD_STYLE[color_of(j)];
        let bx = x + j as f64 * 78.0;
        let _ =
            writeln!(svg, r#"<rect x="{bx}" y="{y}" width="74" height="24" fill="white" stroke="{stroke}"{dash}/>"#);
        text(svg, bx + 4.0, y + 16.0, 12, &fmt_f64(*v));
    }
}

/// The figure as a standalone SVG document.
pub fn render_svg(e: &Evidence) -> String {
    let f = &e.forward;
    let d_h = MODEL_WIDTH / HEADS;
    let mut svg = String::new();
    let _ = writeln!(svg, r#"<svg xmlns="http://www.w3.org/2000/svg" width="980" height="700" viewBox="0 0 980 700">"#);
    let _ = writeln!(svg, r#"<rect width="980" height="700" fill="white"/>"#);
    text(
        &mut svg,
        20.0,
        30.0,
        18,
        "Chapter 30 — multi-head attention (B=1, T=3, d_model=4, h=2, d_h=2, RoPE base 100)",
    );
    // 1. the two causal probability tables
    for (h, &(stroke, dash)) in HEAD_STYLE.iter().enumerate().take(HEADS) {
        let (x0, y0) = (40.0 + h as f64 * 470.0, 70.0);
        let _ = writeln!(
            svg,
            r#"<rect x="{}" y="{}" width="420" height="250" fill="none" stroke="{stroke}" stroke-width="3"{dash}/>"#,
            x0 - 20.0,
            y0 - 20.0
        );
        text(&mut svg, x0, y0, 14, &format!("head {h}: weights (row = query, column = key)"));
        for k in 0..TOKENS {
            text(&mut svg, x0 + 100.0 + k as f64 * 100.0, y0 + 24.0, 12, &format!("k{k}"));
        }
        let w = head_rows(&f.weights, h);
        for (q, row) in w.iter().enumerate() {
            for (k, &p) in row.iter().enumerate() {
                let (cx, cy) = (x0 + 60.0 + k as f64 * 100.0, y0 + 32.0 + q as f64 * 60.0);
                if k > q {
                    let _ = writeln!(
                        svg,
                        r##"<rect x="{cx}" y="{cy}" width="96" height="56" fill="#d9d9d9" stroke="#999999"/>"##
                    );
                    text(&mut svg, cx + 18.0, cy + 33.0, 12, "masked");
                } else {
                    let (border, width) = if k == q { ("#e67e22", 4) } else { ("#555555", 1) };
                    let _ = writeln!(
                        svg,
                        r#"<rect x="{cx}" y="{cy}" width="96" height="56" fill="{stroke}" fill-opacity="{:.3}" stroke="{border}" stroke-width="{width}"/>"#,
                        0.1 + 0.6 * p
                    );
                    text(&mut svg, cx + 12.0, cy + 33.0, 13, &fmt_f64(p));
                }
            }
            text(&mut svg, x0, y0 + 62.0 + q as f64 * 60.0, 12, &format!("q{q}"));
        }
    }
    // 2. head outputs
    let y_heads = 360.0;
    for h in 0..HEADS {
        let x0 = 40.0 + h as f64 * 470.0;
        text(
            &mut svg,
            x0,
            y_heads,
            14,
            &format!("head {h} outputs = weights · V (columns {}..{})", h * d_h, (h + 1) * d_h),
        );
        for (t, row) in head_rows(&f.head_outputs, h).iter().enumerate() {
            number_row(&mut svg, x0, y_heads + 10.0 + t as f64 * 28.0, row, |_| h);
        }
    }
    // 3. concatenated rows before and after W_O
    let y_rows = 500.0;
    text(&mut svg, 40.0, y_rows, 14, "merged = [head 0 | head 1]");
    text(&mut svg, 510.0, y_rows, 14, "output = merged · W_O  (W_O swaps the head groups)");
    for t in 0..TOKENS {
        let merged = &f.merged.as_slice()[t * MODEL_WIDTH..(t + 1) * MODEL_WIDTH];
        let output = &f.output.as_slice()[t * MODEL_WIDTH..(t + 1) * MODEL_WIDTH];
        let y = y_rows + 10.0 + t as f64 * 28.0;
        number_row(&mut svg, 40.0, y, merged, |j| j / d_h);
        text(&mut svg, 370.0, y + 16.0, 14, "→ · W_O →");
        number_row(&mut svg, 510.0, y, output, |j| 1 - j / d_h);
    }
    // legend
    let y_legend = 640.0;
    let _ =
        writeln!(svg, r##"<rect x="40" y="{}" width="20" height="14" fill="#d9d9d9" stroke="#999999"/>"##, y_legend);
    text(&mut svg, 66.0, y_legend + 12.0, 12, "masked key (future token, weight exactly 0)");
    let _ = writeln!(
        svg,
        r##"<rect x="420" y="{}" width="20" height="14" fill="white" stroke="#e67e22" stroke-width="4"/>"##,
        y_legend
    );
    text(&mut svg, 446.0, y_legend + 12.0, 12, "diagonal (a token attending to itself)");
    text(
        &mut svg,
        40.0,
        y_legend + 40.0,
        12,
        "solid blue frame: head 0 · dashed red frame: head 1 · shading: probability of an available key",
    );
    svg.push_str("</svg>\n");
    svg
}
