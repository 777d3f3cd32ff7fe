//! The chapter's figure: each coordinate pair of `[1,2,3,4]` drawn as an arrow at positions
//! 0‥3 (pair 0 turns a radian per position, pair 1 a tenth of one), and the score of a rotated
//! query and key at several position pairs: equal whenever the distance is equal.

use demo_support::chart::{Area, Axis, BarChart, BarSeries, Corner, LegendEntry, Swatch, draw_legend};
use demo_support::fmt::fixed;
use demo_support::svg::{Stroke, Svg, TextStyle, color};

use crate::{Evidence, HEAD_WIDTH, KEY, QUERY, VECTOR};

/// The figure's title.
pub const TITLE: &str = "Chapter 29 — rotary position embedding: position as a rotation";

/// The arrows of coordinate pair `pair` of every rotated row, in a square panel.
fn pair_panel(svg: &mut Svg, e: &Evidence, pair: usize, area: Area) {
    let (cx, cy) = (area.x + area.width / 2.0, area.y + area.height / 2.0);
    let rows: Vec<(f64, f64)> =
        e.rotated.as_slice().chunks(HEAD_WIDTH).map(|row| (row[2 * pair], row[2 * pair + 1])).collect();
    let radius = (VECTOR[2 * pair].powi(2) + VECTOR[2 * pair + 1].powi(2)).sqrt();
    let scale = area.width / 2.0 / (radius * 1.25);
    svg.rect(area.x, area.y, area.width, area.height, "#fbfbfb", Some(Stroke::solid("#bbbbbb", 1.0)));
    svg.line(area.x, cy, area.x + area.width, cy, Stroke::solid("#999999", 1.0));
    svg.line(cx, area.y, cx, area.y + area.height, Stroke::solid("#999999", 1.0));
    let (a, b) = (2 * pair, 2 * pair + 1);
    svg.text(area.x + area.width - 6.0, cy - 6.0, TextStyle::right().size(12.0), &format!("x{a}"));
    svg.text(cx + 6.0, area.y + 16.0, TextStyle::label().size(12.0), &format!("x{b}"));
    // the circle every rotation stays on, as a 72-gon
    let circle: Vec<(f64, f64)> = (0..=72)
        .map(|i| {
            let t = i as f64 * std::f64::consts::TAU / 72.0;
            (cx + radius * scale * t.cos(), cy - radius * scale * t.sin())
        })
        .collect();
    svg.polyline(&circle, Stroke::dashed("#aaaaaa", 1.0));
    for (p, &(x, y)) in rows.iter().enumerate() {
        svg.arrow(cx, cy, cx + x * scale, cy - y * scale, Stroke::solid(color(p), 2.5));
    }
    let theta = e.thetas.get(pair).copied().unwrap_or(0.0);
    svg.text(
        area.x,
        area.y - 28.0,
        TextStyle::heading(14.0),
        &format!("pair {pair}: (x{a}, x{b}) = ({}, {}) turns by p·θ{pair}", VECTOR[a], VECTOR[b]),
    );
    svg.text(
        area.x,
        area.y - 10.0,
        TextStyle::label().size(12.0),
        &format!("θ{pair} = {} rad per position; length stays {}", fixed(theta, 2), fixed(radius, 3)),
    );
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 820.0, TITLE);
    svg.text(
        20.0,
        52.0,
        TextStyle::label(),
        &format!("x = {VECTOR:?} rotated at positions p = 0‥3 (d_h = {HEAD_WIDTH}, base 100): one arrow per position"),
    );
    pair_panel(&mut svg, e, 0, Area { x: 30.0, y: 110.0, width: 300.0, height: 300.0 });
    pair_panel(&mut svg, e, 1, Area { x: 370.0, y: 110.0, width: 300.0, height: 300.0 });
    let positions: Vec<LegendEntry> = (0..e.rotated.shape()[0])
        .map(|p| LegendEntry {
            name: format!("p = {p}"),
            color: color(p).to_string(),
            swatch: Swatch::Line { dashed: false },
        })
        .collect();
    draw_legend(&mut svg, 690.0, 110.0, &positions);
    let norms: Vec<String> = e.norms.iter().map(|n| fixed(*n, 6)).collect();
    svg.text(30.0, 440.0, TextStyle::label(), &format!("‖R_p x‖ = {} at every position", norms.join(", ")));
    // relative position
    svg.text(
        30.0,
        490.0,
        TextStyle::heading(15.0),
        "The score depends only on the distance: (R_m q)·(R_n k) = qᵀ R_(n−m) k",
    );
    svg.text(
        30.0,
        510.0,
        TextStyle::label().size(12.0),
        &format!("q = {QUERY:?}, k = {KEY:?} (orthogonal before rotation: q·k = 0)"),
    );
    let categories: Vec<String> =
        e.relative_dots.iter().map(|(m, n, _)| format!("({m}, {n}): {}", *n as i64 - *m as i64)).collect();
    let dots: Vec<f64> = e.relative_dots.iter().map(|d| d.2).collect();
    let limit = dots.iter().fold(1.0_f64, |m, d| m.max(d.abs())).ceil();
    BarChart {
        area: Area { x: 90.0, y: 530.0, width: 680.0, height: 200.0 },
        categories,
        x_label: "(query position m, key position n): distance n − m".to_string(),
        y: Axis::linear("score (R_m q)·(R_n k)", -limit, limit, 4, 1),
        series: vec![BarSeries::new("score", 0, dots.clone(), dots.iter().map(|d| fixed(*d, 6)).collect())],
    }
    .draw(&mut svg, Corner::BottomLeft);
    svg.text(
        30.0,
        805.0,
        TextStyle::label().size(12.0),
        &format!(
            "random q, k at every (m, n) and every shift that fits: {} comparisons, {}",
            e.shift_comparisons,
            if e.shift_invariant { "all equal within 1e-12" } else { "NOT all equal" }
        ),
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
        [|e: &mut Evidence| e.relative_dots[0].2 = 0.5, |e: &mut Evidence| e.rotated = e.adjacent.clone(),]
    );
}
