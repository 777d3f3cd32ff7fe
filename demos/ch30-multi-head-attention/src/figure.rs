//! The chapter's figure: a 34-line text trace of the worked example and an SVG drawn from it
//! (with the shared primitives of `demo_support`).
//!
//! The trace is the figure's data, line by line (`CONFIG|…`, `SHAPE|…`, `PARTITION|…`,
//! `WEIGHTS|…`, `HEAD_OUTPUT|…`, `MERGED|…`, `OUTPUT_MAP|…`, `OUTPUT|…`, `PREFIX_PROOF|…`), so a
//! test can check what the picture shows without parsing the picture.

use demo_support::chart::{LegendEntry, Swatch, draw_legend};
use demo_support::heat::{HeatMap, MASKED, Shading, draw_colour_scale, labels};
use demo_support::svg::{Stroke, Svg, TextStyle};
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

/// The figure's title.
pub const TITLE: &str = "Chapter 30 — multi-head attention: two heads side by side";

/// Colours of the two heads' frames (head 1's frame is also dashed).
const HEAD_COLORS: [&str; 2] = ["#1f5fbf", "#c0392b"];
/// Outline of a diagonal cell (a token attending to itself).
const DIAGONAL: &str = "#e67e22";

/// Head `h`'s frame: solid for head 0, dashed for head 1.
fn head_stroke(h: usize, width: f64) -> Stroke<'static> {
    Stroke { color: HEAD_COLORS[h % 2], width, dashed: h % 2 == 1 }
}

/// A signed `[T, width]` table with six decimals, rows `t0‥`, columns numbered from `first`.
fn values_map(x: f64, y: f64, title: &str, rows: &[Vec<f64>], first: usize) -> HeatMap {
    let width = rows.first().map_or(0, Vec::len);
    let flat: Vec<f64> = rows.concat();
    HeatMap {
        cell_width: 78.0,
        cell_height: 30.0,
        decimals: 6,
        shading: Shading::Diverging { limit: 1.2 },
        row_labels: labels("t", rows.len()),
        col_labels: (first..first + width).map(|c| format!("c{c}")).collect(),
        ..HeatMap::probabilities(x, y, title, &flat, width)
    }
}

/// The rows of a `[1, T, d]` tensor.
fn token_rows(t: &llm_from_scratch::Tensor) -> Vec<Vec<f64>> {
    t.as_slice().chunks(MODEL_WIDTH).map(<[f64]>::to_vec).collect()
}

/// Frames each group of `d_h` columns of a map's grid in the style of the head
/// `head_of_group(group)`.
fn frame_groups(svg: &mut Svg, map: &HeatMap, head_of_group: impl Fn(usize) -> usize) {
    let d_h = MODEL_WIDTH / HEADS;
    let columns = map.cells.first().map_or(0, Vec::len);
    let height = map.cells.len() as f64 * map.cell_height;
    for group in 0..columns / d_h {
        let x = map.grid_x() + (group * d_h) as f64 * map.cell_width;
        let stroke = head_stroke(head_of_group(group), 2.5);
        svg.rect(x + 1.5, map.grid_y() + 1.5, d_h as f64 * map.cell_width - 3.0, height - 3.0, "none", Some(stroke));
    }
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let f = &e.forward;
    let d_h = MODEL_WIDTH / HEADS;
    let mut svg = Svg::new(800.0, 760.0, TITLE);
    svg.text(
        20.0,
        52.0,
        TextStyle::label(),
        &format!(
            "B = 1, T = {TOKENS}, d_model = {MODEL_WIDTH}, h = {HEADS}, d_h = {d_h}, RoPE base {}; causal mask",
            fmt_f64(ROPE_BASE).trim_end_matches('0').trim_end_matches('.')
        ),
    );
    // 1. the two causal probability tables
    for h in 0..HEADS {
        let (x0, y0) = (30.0 + h as f64 * 390.0, 75.0);
        let weights = head_rows(&f.weights, h);
        let cells: Vec<Vec<Option<f64>>> = weights
            .iter()
            .enumerate()
            .map(|(q, row)| row.iter().enumerate().map(|(k, &p)| (k <= q).then_some(p)).collect())
            .collect();
        let map = HeatMap {
            cell_width: 88.0,
            cell_height: 44.0,
            decimals: 6,
            cells,
            ..HeatMap::probabilities(x0, y0, &format!("head {h}: weights, row = query"), &weights.concat(), TOKENS)
        };
        svg.rect(x0 - 12.0, y0 - 8.0, map.width() + 24.0, map.height() + 20.0, "none", Some(head_stroke(h, 3.0)));
        map.draw(&mut svg);
        for q in 0..TOKENS {
            let (cx, cy) = (map.grid_x() + q as f64 * map.cell_width, map.grid_y() + q as f64 * map.cell_height);
            svg.rect(
                cx + 2.0,
                cy + 2.0,
                map.cell_width - 4.0,
                map.cell_height - 4.0,
                "none",
                Some(Stroke::solid(DIAGONAL, 4.0)),
            );
        }
    }
    // 2. head outputs
    for h in 0..HEADS {
        let rows = head_rows(&f.head_outputs, h);
        let map =
            values_map(30.0 + h as f64 * 390.0, 290.0, &format!("head {h} outputs = weights · V"), &rows, h * d_h);
        map.draw(&mut svg);
        frame_groups(&mut svg, &map, |_| h);
    }
    // 3. concatenated rows before and after W_O
    let merged = values_map(30.0, 440.0, "merged = [head 0 | head 1]", &token_rows(&f.merged), 0);
    merged.draw(&mut svg);
    frame_groups(&mut svg, &merged, |group| group);
    svg.arrow(30.0 + merged.width() + 8.0, 512.0, 30.0 + merged.width() + 40.0, 512.0, Stroke::solid("#444444", 2.0));
    svg.text(30.0 + merged.width() + 24.0, 500.0, TextStyle::centered().size(12.0), "· W_O");
    let output_x = 30.0 + merged.width() + 48.0;
    let output = values_map(output_x, 440.0, "output = merged · W_O (swaps the groups)", &token_rows(&f.output), 0);
    output.draw(&mut svg);
    frame_groups(&mut svg, &output, |group| (group + 1) % HEADS);
    // legend
    let legend = [
        LegendEntry {
            name: "masked key (future token, weight exactly 0)".into(),
            color: MASKED.into(),
            swatch: Swatch::Square,
        },
        LegendEntry {
            name: "diagonal: a token attending to itself".into(),
            color: DIAGONAL.into(),
            swatch: Swatch::Square,
        },
        LegendEntry {
            name: "head 0 (frames, columns)".into(),
            color: HEAD_COLORS[0].into(),
            swatch: Swatch::Line { dashed: false },
        },
        LegendEntry {
            name: "head 1 (frames, columns)".into(),
            color: HEAD_COLORS[1].into(),
            swatch: Swatch::Line { dashed: true },
        },
    ];
    draw_legend(&mut svg, 30.0, 600.0, &legend);
    let shading = Shading::Diverging { limit: 1.2 };
    draw_colour_scale(&mut svg, 460.0, 620.0, 100.0, shading, 1, "outputs: signed values");
    svg.text_lines(
        30.0,
        720.0,
        20.0,
        TextStyle::label().size(12.0),
        &[
            "weights: white 0 → dark blue 1".to_string(),
            format!(
                "changing token 2: rows 0, 1 {}, row 2 {}",
                if e.prefix_rows_bitwise_equal { "bitwise unchanged" } else { "differ" },
                if e.last_row_changed { "changed" } else { "unchanged" }
            ),
        ],
    );
    svg.finish()
}
