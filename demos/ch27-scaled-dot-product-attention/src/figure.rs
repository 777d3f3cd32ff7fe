//! The chapter's figure: the worked example's scores, scaled scores and weights as heat maps, the
//! weights the same scores would give without `1/√d_h`, and what the scale does at `d_h = 64`.

use demo_support::chart::{Area, Axis, BarChart, BarSeries, Corner};
use demo_support::fmt::fixed;
use demo_support::heat::{self, HeatMap, Shading, draw_colour_scale, draw_colour_scale_with_text};
use demo_support::svg::{Stroke, Svg, THUMBNAIL_TEXT, TextStyle};

use crate::{Evidence, HEAD_WIDTH, SATURATION_KEYS, SPREAD_SAMPLES, SPREAD_WIDTHS, TOKEN_COUNT};

/// The figure's title.
pub const TITLE: &str = "Chapter 27 — scaled dot-product attention: scores, ÷√d_h, softmax";

/// An arrow between two maps with its caption above it.
fn step_arrow(svg: &mut Svg, x1: f64, x2: f64, y: f64, caption: &str) {
    svg.arrow(x1, y, x2, y, Stroke::solid("#444444", 2.0));
    svg.text((x1 + x2) / 2.0, y - 10.0, TextStyle::centered().size(12.0), caption);
}

/// A map of weights over the worked example's positions: rows are queries, columns keys.
fn weights(x: f64, y: f64, title: &str, values: &[f64]) -> HeatMap {
    let map = HeatMap::probabilities(x, y, title, values, TOKEN_COUNT);
    HeatMap {
        cell_width: 50.0,
        row_labels: heat::labels("query ", TOKEN_COUNT),
        col_labels: heat::labels("key ", TOKEN_COUNT),
        ..map
    }
}

/// The thumbnail: the worked example's weights with their colour key, 300 px wide.
pub fn render_thumbnail(e: &Evidence) -> String {
    let (mut svg, top) = Svg::thumbnail(260.0, TITLE);
    let map = HeatMap {
        cell_width: 52.0,
        ..weights(10.0, top - 6.0, "weights softmax(Q·Kᵀ/√d_h)", e.weights.as_slice())
    };
    map.draw_with_text(&mut svg, THUMBNAIL_TEXT);
    let right = map.grid_x_with_text(THUMBNAIL_TEXT) + 3.0 * map.cell_width;
    draw_colour_scale_with_text(&mut svg, right + 8.0, map.grid_y(), 120.0, map.shading, 2, "", THUMBNAIL_TEXT);
    svg.finish()
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 780.0, TITLE);
    let n = TOKEN_COUNT;
    svg.text(
        20.0,
        52.0,
        TextStyle::label(),
        "positions 0, 1, 2 hold [1, 0], [0, 1], [1, 1]: each is its own query, key and value (d_h = 2, no mask)",
    );
    // 1. raw scores → scaled scores → weights
    let score_max = e.raw_scores.as_slice().iter().copied().fold(0.0, f64::max);
    let score_shading = Shading::Sequential { min: 0.0, max: score_max };
    let scores =
        |x: f64, title: &str, values: &[f64]| HeatMap { shading: score_shading, ..weights(x, 75.0, title, values) };
    scores(20.0, "scores Q·Kᵀ", e.raw_scores.as_slice()).draw(&mut svg);
    step_arrow(&mut svg, 234.0, 266.0, 175.0, &format!("÷√{HEAD_WIDTH}"));
    let scaled = scores(270.0, "scaled scores S", e.scores.as_slice());
    scaled.draw(&mut svg);
    draw_colour_scale(&mut svg, scaled.x + scaled.width() + 8.0, scaled.grid_y(), 120.0, score_shading, 2, "score");
    step_arrow(&mut svg, 550.0, 580.0, 175.0, "softmax");
    weights(585.0, 75.0, "weights P (rows sum to 1)", e.weights.as_slice()).draw(&mut svg);
    svg.text(
        20.0,
        265.0,
        TextStyle::label(),
        &format!(
            "Position 2 matches itself best (score 2.00 against 1.00), so it keeps {} of its attention for itself.",
            fixed(e.weights.as_slice()[n * n - 1], 2)
        ),
    );
    // 2. the same scores without the scale
    svg.text(20.0, 310.0, TextStyle::heading(15.0), "Without ÷√d_h");
    let unscaled = weights(20.0, 325.0, "softmax(Q·Kᵀ), no scale", e.unscaled_weights.as_slice());
    unscaled.draw(&mut svg);
    let key_x = unscaled.x + unscaled.width() + 20.0;
    draw_colour_scale(&mut svg, key_x, unscaled.grid_y(), 120.0, unscaled.shading, 2, "weight");
    let top_row = |w: &[f64]| fixed(w[n * n - 1], 2);
    svg.text_lines(
        20.0,
        510.0,
        18.0,
        TextStyle::label(),
        &[
            format!("at d_h = 2 the effect is small: position 2 keeps {}", top_row(e.unscaled_weights.as_slice())),
            format!("instead of {}. Unscaled q·k spreads like √d_h,", top_row(e.weights.as_slice())),
            "so wide heads saturate the softmax (right).".to_string(),
        ],
    );
    // 3. spread of the scores, and saturation at d_h = 64
    let widths: Vec<String> = SPREAD_WIDTHS.iter().map(|d| format!("d_h = {d}")).collect();
    let labels = |values: &[f64]| values.iter().map(|v| fixed(*v, 2)).collect::<Vec<_>>();
    svg.text(380.0, 310.0, TextStyle::heading(15.0), &format!("Std of scores over {SPREAD_SAMPLES} random q, k"));
    BarChart {
        area: Area { x: 380.0, y: 330.0, width: 400.0, height: 170.0 },
        categories: widths,
        x_label: "head width".to_string(),
        y: Axis::linear("std of score", 0.0, 10.0, 5, 0),
        series: vec![
            BarSeries::new("q·k (unscaled)", 1, e.spread_unscaled.clone(), labels(&e.spread_unscaled)),
            BarSeries::new("q·k/√d_h (scaled)", 0, e.spread_scaled.clone(), labels(&e.spread_scaled)),
            BarSeries::new("√d_h (predicted)", 7, e.spread_formula.clone(), labels(&e.spread_formula)),
        ],
    }
    .draw(&mut svg, Corner::TopLeft);
    svg.text(
        380.0,
        600.0,
        TextStyle::heading(15.0),
        &format!("Largest weight of {SATURATION_KEYS} keys, d_h = {}", SPREAD_WIDTHS[1]),
    );
    let uniform = 1.0 / SATURATION_KEYS as f64;
    let tops = [e.top_weight_unscaled, e.top_weight_scaled, uniform];
    BarChart {
        area: Area { x: 380.0, y: 615.0, width: 400.0, height: 110.0 },
        categories: vec!["unscaled".into(), "scaled".into(), format!("uniform 1/{SATURATION_KEYS}")],
        x_label: "scores fed to the softmax".to_string(),
        y: Axis::linear("largest weight", 0.0, 1.0, 2, 2),
        series: vec![BarSeries::new("mean largest weight", 4, tops.to_vec(), labels(&tops))],
    }
    .draw(&mut svg, Corner::TopRight);
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    demo_support::chapter_figure_test!(
        crate::learner_evidence(),
        render_svg,
        TITLE,
        [|e: &mut Evidence| e.top_weight_unscaled = 0.5, |e: &mut Evidence| e.weights = e.unscaled_weights.clone(),]
    );

    demo_support::chapter_thumbnail_test!(
        crate::learner_evidence(),
        render_thumbnail,
        TITLE,
        [|e: &mut Evidence| e.weights = e.unscaled_weights.clone()]
    );
}
