//! The chapter's figure: the absorbed path against the direct one (every output coordinate, and
//! the largest gaps against the tolerance, with the RoPE trap for contrast), and the cache per
//! token of MHA, GQA and MLA at DeepSeek-like sizes.

use demo_support::chart::{Area, Axis, BarChart, BarSeries, Corner, LineChart, Series};
use demo_support::fmt::{bytes, fixed};
use demo_support::svg::{Stroke, Svg, TextStyle};

use crate::{CACHE_TOKENS, Evidence, TOLERANCE};

/// The figure's title.
pub const TITLE: &str = "Chapter 35 — multi-head latent attention: cache a latent, absorb the rest";

/// A gap in scientific notation, `0` when exactly zero.
fn sci(value: f64) -> String {
    if value == 0.0 { "0 (exact)".to_string() } else { format!("{value:.1e}") }
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 800.0, TITLE);
    // 1. absorbed against direct, coordinate by coordinate
    svg.text(20.0, 58.0, TextStyle::heading(15.0), "Absorbed = direct: (q·Aᵀ)·Cᵀ and (P·C)·(B·W_O)");
    let (direct, absorbed) = (&e.outputs.0, &e.outputs.1);
    let points: Vec<(f64, f64)> = direct.as_slice().iter().copied().zip(absorbed.as_slice().iter().copied()).collect();
    let limit = points.iter().fold(0.1_f64, |m, (a, b)| m.max(a.abs()).max(b.abs()));
    let limit = (limit * 10.0).ceil() / 10.0;
    LineChart {
        area: Area { x: 80.0, y: 80.0, width: 280.0, height: 250.0 },
        x: Axis::linear("direct output", -limit, limit, 4, 1),
        y: Axis::linear("absorbed output", -limit, limit, 4, 1),
        series: vec![
            Series { markers: false, ..Series::new("y = x", 7, vec![(-limit, -limit), (limit, limit)]).dashed() },
            Series::new(&format!("{} outputs", points.len()), 0, points).dots(),
        ],
    }
    .draw_with_legend(&mut svg, Corner::BottomRight);
    // the gaps against the tolerance, on a log scale
    let gaps = [e.gaps.0, e.gaps.1, e.rope_gap];
    let gap_axis = Axis::log10("max |absorbed − direct|", 1e-18, 10.0)
        .with_ticks([1e-18, 1e-15, 1e-12, 1e-9, 1e-6, 1e-3, 1.0].iter().map(|&v| (v, format!("{v:.0e}"))).collect());
    let area = Area { x: 490.0, y: 80.0, width: 290.0, height: 250.0 };
    BarChart {
        area,
        categories: vec!["outputs".into(), "weights".into(), "RoPE key rebuilt".into()],
        x_label: "what is compared".to_string(),
        y: gap_axis.clone(),
        series: vec![BarSeries::new("largest gap", 1, gaps.to_vec(), gaps.iter().map(|g| sci(*g)).collect())],
    }
    .draw_without_legend(&mut svg);
    let tolerance_y = area.bottom() - gap_axis.fraction(TOLERANCE) * area.height;
    svg.line(area.x, tolerance_y, area.right(), tolerance_y, Stroke::dashed("#c00000", 1.5));
    svg.text(area.x + 6.0, tolerance_y - 5.0, TextStyle::label().size(11.0).color("#c00000"), "tolerance 1e-12");
    let matched = e.gradients_match.iter().filter(|(_, ok)| *ok).count();
    svg.text_lines(
        20.0,
        400.0,
        19.0,
        TextStyle::label().size(12.0),
        &[
            format!(
                "outputs within 1e-12: {}; weights: {}; gradients: {matched} of {} inputs match",
                e.outputs_match,
                e.weights_match,
                e.gradients_match.len()
            ),
            "RoPE on the rebuilt key cannot be absorbed: (R_m q)·(R_n Aᵀc_n) needs R_(n−m) between q and c,"
                .to_string(),
            "so MLA rotates a separate shared key k_R and caches it beside the latent c.".to_string(),
        ],
    );
    // 2. cache per token
    svg.text(
        20.0,
        480.0,
        TextStyle::heading(15.0),
        &format!("Cache per token and layer (numbers; bytes at {CACHE_TOKENS} tokens, fp16)"),
    );
    let per_token: Vec<f64> = e.per_token.iter().map(|p| p.1 as f64).collect();
    BarChart {
        area: Area { x: 90.0, y: 510.0, width: 430.0, height: 210.0 },
        categories: e.per_token.iter().map(|p| p.0.to_string()).collect(),
        x_label: "cache layout".to_string(),
        y: Axis::log10("numbers per token (log scale)", 100.0, 1e5),
        series: vec![BarSeries::new(
            "numbers per token",
            2,
            per_token,
            e.per_token.iter().map(|p| format!("{} = {}", p.1, bytes(p.2))).collect(),
        )],
    }
    .draw_without_legend(&mut svg);
    let mla = e.per_token.first().map_or(1, |p| p.1.max(1)) as f64;
    let mut lines: Vec<String> =
        e.per_token.iter().skip(1).map(|p| format!("{} / mla = {}", p.0, fixed(p.1 as f64 / mla, 1))).collect();
    lines.push(String::new());
    lines.push("The small layer of this chapter".to_string());
    lines.push(format!("stores {} numbers for 2×6 tokens;", e.decodes.first().map_or(0, |d| d.3)));
    lines.push(format!("an MHA cache would store {}.", e.mha_stored));
    svg.text_lines(545.0, 540.0, 19.0, TextStyle::label().size(12.0), &lines);
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    demo_support::chapter_figure_test!(
        crate::learner_evidence(),
        render_svg,
        TITLE,
        [|e: &mut Evidence| e.gaps.0 = 1e-3, |e: &mut Evidence| e.per_token[0].1 = 1024,]
    );
}
