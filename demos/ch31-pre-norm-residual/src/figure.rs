//! The chapter's figure: the residual stream before and after the block — `x`, its normalised
//! copy, the attention branch and `x + branch` — and the size (root mean square) of every token
//! through the block, pre-norm against post-norm.

use ch30_multi_head_attention::{MODEL_WIDTH, TOKENS};
use demo_support::chart::{Area, Axis, BarChart, BarSeries, draw_legend};
use demo_support::fmt::fixed;
use demo_support::heat::{HeatMap, Shading, draw_colour_scale, labels};
use demo_support::svg::{Stroke, Svg, THUMBNAIL_TEXT, TextStyle};
use llm_from_scratch::Tensor;

use crate::Evidence;

/// The figure's title.
pub const TITLE: &str = "Chapter 31 — the pre-norm residual block: out = x + MHA(RMSNorm(x))";

/// A `[1, T, d]` tensor as a map with rows `position 0‥` and columns `dim 0‥`.
fn stream_map(x: f64, y: f64, title: &str, t: &Tensor, shading: Shading) -> HeatMap {
    HeatMap {
        cell_width: 38.0,
        cell_height: 36.0,
        shading,
        row_labels: labels("position ", TOKENS),
        col_labels: labels("dim ", MODEL_WIDTH),
        ..HeatMap::probabilities(x, y, title, t.as_slice(), MODEL_WIDTH)
    }
}

/// The thumbnail: the block as a diagram, the identity path beside the branch, and how much
/// the first token grows through it, 300 px wide.
pub fn render_thumbnail(e: &Evidence) -> String {
    let (mut svg, top) = Svg::thumbnail(350.0, TITLE);
    let size = THUMBNAIL_TEXT;
    let boxed = |svg: &mut Svg, y: f64, label: &str, fill: &str| {
        svg.rect(30.0, y, 150.0, 34.0, fill, Some(Stroke::solid("#666666", 1.0)));
        svg.text(105.0, y + 22.0, TextStyle::centered().size(size), label);
    };
    let gray = Stroke::solid("#444444", 1.5);
    boxed(&mut svg, top + 4.0, "out = x + branch", "#f0f0f0");
    svg.arrow(105.0, top + 78.0, 105.0, top + 40.0, gray);
    svg.text(113.0, top + 64.0, TextStyle::label().size(16.0), "+");
    boxed(&mut svg, top + 78.0, "MHA", "#deebf7");
    svg.arrow(105.0, top + 142.0, 105.0, top + 114.0, gray);
    boxed(&mut svg, top + 142.0, "RMSNorm", "#deebf7");
    svg.arrow(105.0, top + 206.0, 105.0, top + 178.0, gray);
    boxed(&mut svg, top + 206.0, "stream x", "#f0f0f0");
    // the identity path: from x straight to the sum, around the branch
    let identity = Stroke::solid("#009e73", 3.0);
    svg.line(180.0, top + 223.0, 215.0, top + 223.0, identity);
    svg.line(215.0, top + 223.0, 215.0, top + 21.0, identity);
    svg.arrow(215.0, top + 21.0, 182.0, top + 21.0, identity);
    svg.text_lines(222.0, top + 110.0, 17.0, TextStyle::label().size(size).color("#00704f"), &["identity", "path"]);
    let grows = format!(
        "position 0's size: {} → {}",
        fixed(e.mean_square.first().map_or(0.0, |m| m.sqrt()), 2),
        fixed(e.output_rms.first().copied().unwrap_or(0.0), 2)
    );
    svg.text(10.0, top + 270.0, TextStyle::label().size(size), &grows);
    svg.finish()
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 790.0, TITLE);
    let all = [&e.input, &e.normalized, &e.branch, &e.output];
    let largest = all.iter().flat_map(|t| t.as_slice()).fold(1.0_f64, |m, v| m.max(v.abs()));
    let shading = Shading::Diverging { limit: (largest * 2.0).ceil() / 2.0 };
    let gray = Stroke::solid("#444444", 2.0);
    svg.text(
        20.0,
        52.0,
        TextStyle::label(),
        "chapter 30's example: 3 tokens, d_model = 4, two heads; W_Q = W_K = W_V = I, W_O swaps the heads",
    );
    // 1. the branch
    let input = stream_map(20.0, 75.0, "stream x (input)", &e.input, shading);
    input.draw(&mut svg);
    let right = |m: &HeatMap| m.x + m.width();
    svg.arrow(right(&input) + 4.0, 170.0, 284.0, 170.0, gray);
    svg.text(271.0, 150.0, TextStyle::centered().size(12.0), "RMSNorm");
    let normed = stream_map(290.0, 75.0, "RMSNorm(x)", &e.normalized, shading);
    normed.draw(&mut svg);
    svg.arrow(right(&normed) + 4.0, 170.0, 554.0, 170.0, gray);
    svg.text(541.0, 150.0, TextStyle::centered().size(12.0), "MHA");
    let branch = stream_map(560.0, 75.0, "branch MHA(RMSNorm(x))", &e.branch, shading);
    branch.draw(&mut svg);
    // 2. the residual sum
    let down = branch.grid_x() + 2.0 * branch.cell_width;
    svg.arrow(down, 230.0, down, 272.0, gray);
    svg.text(down + 10.0, 256.0, TextStyle::label().size(16.0), "+");
    stream_map(560.0, 280.0, "out = x + branch", &e.output, shading).draw(&mut svg);
    let identity = Stroke::solid("#009e73", 3.0);
    let up = input.grid_x() + 2.0 * input.cell_width;
    svg.line(up, 230.0, up, 374.0, identity);
    svg.arrow(up, 374.0, 552.0, 374.0, identity);
    svg.text(126.0, 364.0, TextStyle::label().color("#00704f"), "identity path: x reaches the output unchanged");
    svg.text_lines(
        126.0,
        400.0,
        18.0,
        TextStyle::label().size(12.0),
        &[
            "∂out/∂x = I + ∂branch/∂x: the upstream adjoint",
            "reaches x along the identity, whatever the",
            "branch does.",
        ],
    );
    draw_colour_scale(&mut svg, 420.0, 250.0, 90.0, shading, 2, "value");
    // 3. sizes of the tokens
    svg.text(20.0, 490.0, TextStyle::heading(15.0), "Root mean square of each token through the block");
    let rms = |values: &[f64]| values.iter().map(|v| fixed(*v, 2)).collect::<Vec<_>>();
    let series = [
        ("x", &e.mean_square.iter().map(|m| m.sqrt()).collect::<Vec<_>>(), 7),
        ("RMSNorm(x)", &e.normalized_rms, 5),
        ("pre-norm: x + branch", &e.output_rms, 0),
        ("post-norm: RMSNorm(x+MHA(x))", &e.post_norm.1, 1),
    ];
    let largest_rms = series.iter().flat_map(|s| s.1.iter()).fold(1.0_f64, |m, v| m.max(*v));
    let chart = BarChart {
        area: Area { x: 90.0, y: 510.0, width: 420.0, height: 210.0 },
        categories: labels("position ", TOKENS),
        x_label: "token".to_string(),
        y: Axis::linear("root mean square", 0.0, (largest_rms * 2.0).ceil() / 2.0, 4, 2),
        series: series.iter().map(|(name, v, c)| BarSeries::new(name, *c, v.to_vec(), rms(v))).collect(),
    };
    chart.draw_without_legend(&mut svg);
    draw_legend(&mut svg, 525.0, 510.0, &chart.legend());
    let grows = format!(
        "position 0 grows from {} to {} as",
        fixed(e.mean_square[0].sqrt(), 2),
        fixed(e.output_rms.first().copied().unwrap_or(0.0), 2)
    );
    svg.text_lines(
        525.0,
        625.0,
        18.0,
        TextStyle::label().size(12.0),
        &[
            "Pre-norm leaves the stream alone:",
            &grows,
            "the branch adds to it; only the",
            "branch's input is normalised.",
            "",
            "Post-norm rescales the stream to 1",
            "after every block, so the identity",
            "path passes through a norm each time.",
        ],
    );
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    demo_support::chapter_figure_test!(
        crate::learner_evidence(),
        render_svg,
        TITLE,
        [|e: &mut Evidence| e.output_rms[0] = 0.25, |e: &mut Evidence| e.branch = e.input.clone(),]
    );

    demo_support::chapter_thumbnail_test!(
        crate::learner_evidence(),
        render_thumbnail,
        TITLE,
        [|e: &mut Evidence| e.output_rms[0] = 0.25]
    );
}
