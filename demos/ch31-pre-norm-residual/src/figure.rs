//! The chapter's figure: the residual stream before and after the block — `x`, its normalised
//! copy, the attention branch and `x + branch` — and the size (root mean square) of every token
//! through the block, pre-norm against post-norm.

use ch30_multi_head_attention::{MODEL_WIDTH, TOKENS};
use demo_support::chart::{Area, Axis, BarChart, BarSeries, draw_legend};
use demo_support::fmt::fixed;
use demo_support::heat::{HeatMap, Shading, draw_colour_scale, labels};
use demo_support::svg::{Stroke, Svg, TextStyle};
use llm_from_scratch::Tensor;

use crate::Evidence;

/// The figure's title.
pub const TITLE: &str = "Chapter 31 — the pre-norm residual block: out = x + MHA(RMSNorm(x))";

/// A `[1, T, d]` tensor as a map with rows `t0‥` and columns `d0‥`.
fn stream_map(x: f64, y: f64, title: &str, t: &Tensor, shading: Shading) -> HeatMap {
    HeatMap {
        cell_width: 44.0,
        cell_height: 36.0,
        shading,
        row_labels: labels("t", TOKENS),
        col_labels: labels("d", MODEL_WIDTH),
        ..HeatMap::probabilities(x, y, title, t.as_slice(), MODEL_WIDTH)
    }
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
    stream_map(20.0, 75.0, "stream x (input)", &e.input, shading).draw(&mut svg);
    svg.arrow(226.0, 170.0, 284.0, 170.0, gray);
    svg.text(255.0, 160.0, TextStyle::centered().size(12.0), "RMSNorm");
    stream_map(290.0, 75.0, "RMSNorm(x)", &e.normalized, shading).draw(&mut svg);
    svg.arrow(496.0, 170.0, 554.0, 170.0, gray);
    svg.text(525.0, 160.0, TextStyle::centered().size(12.0), "MHA");
    stream_map(560.0, 75.0, "branch MHA(RMSNorm(x))", &e.branch, shading).draw(&mut svg);
    // 2. the residual sum
    svg.arrow(672.0, 230.0, 672.0, 272.0, gray);
    svg.text(682.0, 256.0, TextStyle::label().size(16.0), "+");
    stream_map(560.0, 280.0, "out = x + branch", &e.output, shading).draw(&mut svg);
    let identity = Stroke::solid("#009e73", 3.0);
    svg.line(116.0, 230.0, 116.0, 374.0, identity);
    svg.arrow(116.0, 374.0, 552.0, 374.0, identity);
    svg.text(126.0, 364.0, TextStyle::label().color("#00704f"), "identity path: x reaches the output unchanged");
    svg.text_lines(
        126.0,
        400.0,
        18.0,
        TextStyle::label().size(12.0),
        &[
            "∂out/∂x = I + ∂branch/∂x: the upstream adjoint".to_string(),
            format!(
                "reaches x along the identity ({}),",
                if e.identity_path_bitwise { "bitwise upstream + branch gradient" } else { "NOT exact" }
            ),
            "whatever the branch does.".to_string(),
        ],
    );
    let decimals = 1;
    draw_colour_scale(&mut svg, 420.0, 250.0, 90.0, shading, decimals, "value");
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
        categories: labels("token t", TOKENS),
        x_label: "token".to_string(),
        y: Axis::linear("root mean square", 0.0, (largest_rms * 2.0).ceil() / 2.0, 4, 2),
        series: series.iter().map(|(name, v, c)| BarSeries::new(name, *c, v.to_vec(), rms(v))).collect(),
    };
    chart.draw_without_legend(&mut svg);
    draw_legend(&mut svg, 525.0, 510.0, &chart.legend());
    let grows = format!(
        "token 0 grows from {} to {} as",
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
}
