//! The chapter's figure: each coordinate pair of `[1,2,3,4]` drawn as an arrow at positions
//! 0‥3 (pair 0 turns a radian per position, pair 1 a tenth of one), and the score of a rotated
//! query and key at several position pairs: equal whenever the distance is equal.

use demo_support::chart::{Area, Axis, BarChart, BarSeries, LegendEntry, Swatch, draw_legend_row};
use demo_support::fmt::fixed;
use demo_support::heat::{HeatMap, Shading, draw_colour_scale};
use demo_support::svg::{Stroke, Svg, TextStyle, color};

use crate::{Evidence, HEAD_WIDTH, KEY, QUERY, VECTOR};

/// The figure's title.
pub const TITLE: &str = "Chapter 29 — rotary position embedding: position as a rotation";

/// The arrows of coordinate pair `pair` of every rotated row, in a square panel.
fn pair_panel(svg: &mut Svg, e: &Evidence, pair: usize, area: Area, axis_labels: bool) {
    let (cx, cy) = (area.x + area.width / 2.0, area.y + area.height / 2.0);
    let rows: Vec<(f64, f64)> =
        e.rotated.as_slice().chunks(HEAD_WIDTH).map(|row| (row[2 * pair], row[2 * pair + 1])).collect();
    let radius = (VECTOR[2 * pair].powi(2) + VECTOR[2 * pair + 1].powi(2)).sqrt();
    let scale = area.width / 2.0 / (radius * 1.25);
    svg.rect(area.x, area.y, area.width, area.height, "#fbfbfb", Some(Stroke::solid("#bbbbbb", 1.0)));
    svg.line(area.x, cy, area.x + area.width, cy, Stroke::solid("#999999", 1.0));
    svg.line(cx, area.y, cx, area.y + area.height, Stroke::solid("#999999", 1.0));
    let (a, b) = (2 * pair, 2 * pair + 1);
    if axis_labels {
        svg.text(area.x + area.width - 6.0, cy - 6.0, TextStyle::right().size(12.0), &format!("coordinate {a}"));
        svg.text(cx + 6.0, area.y + 16.0, TextStyle::label().size(12.0), &format!("coordinate {b}"));
    }
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
}

/// The heading of pair `pair`'s panel above `area`.
fn pair_heading(svg: &mut Svg, e: &Evidence, pair: usize, area: Area) {
    let (a, b) = (2 * pair, 2 * pair + 1);
    let radius = (VECTOR[a].powi(2) + VECTOR[b].powi(2)).sqrt();
    let theta = e.thetas.get(pair).copied().unwrap_or(0.0);
    svg.text(
        area.x,
        area.y - 28.0,
        TextStyle::heading(14.0),
        &format!("pair {pair}: ({}, {}), coordinates {a} and {b}", fixed(VECTOR[a], 2), fixed(VECTOR[b], 2)),
    );
    svg.text(
        area.x,
        area.y - 10.0,
        TextStyle::label().size(12.0),
        &format!("turns {} rad per position; its length stays {}", fixed(theta, 2), fixed(radius, 2)),
    );
}

/// The legend of the positions' colours.
fn positions_legend(e: &Evidence) -> Vec<LegendEntry> {
    (0..e.rotated.shape()[0])
        .map(|p| LegendEntry {
            name: format!("position {p}"),
            color: color(p).to_string(),
            swatch: Swatch::Line { dashed: false },
        })
        .collect()
}

/// The angle `p·θ_i` of every position and pair as a heat map, with its colour key.
fn angle_panel(svg: &mut Svg, e: &Evidence, x: f64, y: f64) {
    let [positions, pairs] = [e.angles.shape()[0], e.angles.shape()[1]];
    // one row per pair, one column per position
    let cells: Vec<Vec<Option<f64>>> =
        (0..pairs).map(|i| (0..positions).map(|p| Some(e.angles.as_slice()[p * pairs + i])).collect()).collect();
    let top = e.angles.as_slice().iter().copied().fold(0.0_f64, f64::max).ceil().max(1.0);
    let shading = Shading::Sequential { min: 0.0, max: top };
    let map = HeatMap {
        x,
        y,
        cell_width: 64.0,
        cell_height: 40.0,
        title: "The angle p·θ of each pair (rows) at each position p (columns), in radians".to_string(),
        row_labels: e.thetas.iter().enumerate().map(|(i, t)| format!("pair {i}, θ = {}", fixed(*t, 2))).collect(),
        col_labels: (0..positions).map(|p| format!("p = {p}")).collect(),
        cells,
        shading,
        decimals: 2,
        masked_label: String::new(),
        cell_labels: true,
    };
    map.draw(svg);
    let right = map.x + map.width();
    draw_colour_scale(svg, right + 24.0, map.grid_y(), 80.0, shading, 2, "radians");
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 870.0, TITLE);
    let values: Vec<String> = VECTOR.iter().map(|v| fixed(*v, 2)).collect();
    svg.text(
        20.0,
        52.0,
        TextStyle::label(),
        &format!(
            "x = [{}] rotated at positions 0 to 3 (d_h = {HEAD_WIDTH}, base 100): one arrow per position",
            values.join(", ")
        ),
    );
    for (pair, left) in [(0, 30.0), (1, 370.0)] {
        let area = Area { x: left, y: 110.0, width: 300.0, height: 300.0 };
        pair_panel(&mut svg, e, pair, area, true);
        pair_heading(&mut svg, e, pair, area);
    }
    draw_legend_row(&mut svg, 30.0, 436.0, &positions_legend(e), 13.0);
    angle_panel(&mut svg, e, 30.0, 458.0);
    // relative position
    svg.text(
        30.0,
        618.0,
        TextStyle::heading(15.0),
        "The score depends only on the distance: (R_m q)·(R_n k) = qᵀ R_(n−m) k",
    );
    let (q, k): (Vec<String>, Vec<String>) =
        (QUERY.iter().map(|v| fixed(*v, 2)).collect(), KEY.iter().map(|v| fixed(*v, 2)).collect());
    svg.text(
        30.0,
        638.0,
        TextStyle::label().size(12.0),
        &format!("q = [{}], k = [{}]: orthogonal before rotation (q·k = 0)", q.join(", "), k.join(", ")),
    );
    let categories: Vec<String> =
        e.relative_dots.iter().map(|(m, n, _)| format!("m = {m}, n = {n}: {}", *n as i64 - *m as i64)).collect();
    let dots: Vec<f64> = e.relative_dots.iter().map(|d| d.2).collect();
    let limit = dots.iter().fold(1.0_f64, |m, d| m.max(d.abs())).ceil();
    BarChart {
        area: Area { x: 90.0, y: 658.0, width: 680.0, height: 150.0 },
        categories,
        x_label: "query position m, key position n: distance n − m".to_string(),
        y: Axis::linear("score", -limit, limit, 4, 2),
        series: vec![BarSeries::new("score", 0, dots.clone(), dots.iter().map(|d| fixed(*d, 2)).collect())],
    }
    .draw_without_legend(&mut svg);
    svg.finish()
}

/// The thumbnail: pair 0 turning a radian per position, 300 px wide.
pub fn render_thumbnail(e: &Evidence) -> String {
    let (mut svg, top) = Svg::thumbnail(320.0, TITLE);
    svg.text(10.0, top + 2.0, TextStyle::label(), "one pair of x at positions 0 to 3");
    let area = Area { x: 10.0, y: top + 14.0, width: 180.0, height: 180.0 };
    pair_panel(&mut svg, e, 0, area, false);
    let legend = positions_legend(e);
    for (i, entry) in legend.iter().enumerate() {
        draw_legend_row(&mut svg, 200.0, area.y + 20.0 + i as f64 * 22.0, std::slice::from_ref(entry), 13.0);
    }
    let theta = e.thetas.first().copied().unwrap_or(0.0);
    svg.text_lines(
        10.0,
        area.bottom() + 22.0,
        18.0,
        TextStyle::label(),
        &[format!("position p turns it by p × {} rad;", fixed(theta, 2)), "its length never changes".to_string()],
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
        [
            |e: &mut Evidence| e.relative_dots[0].2 = 0.5,
            |e: &mut Evidence| e.rotated = e.adjacent.clone(),
            |e: &mut Evidence| e.angles = e.unit_rotations.clone(),
        ]
    );

    demo_support::chapter_thumbnail_test!(
        crate::learner_evidence(),
        render_thumbnail,
        TITLE,
        [|e: &mut Evidence| e.rotated = e.adjacent.clone(), |e: &mut Evidence| e.thetas[0] = 0.5]
    );
}
