//! The chapter's figure: the online softmax's running maximum and sum as the keys of two blocks
//! arrive (one at a time and block by block), and the memory of the explicit `[T, T]` scores
//! against the tiled kernel's as `T` grows.

use demo_support::chart::{Area, Axis, Corner, LineChart, Series, draw_legend};
use demo_support::fmt::{bytes, fixed};
use demo_support::svg::{Stroke, Svg, TextStyle};

use crate::{BLOCK_A, BLOCK_B, Evidence, MEMORY_LENGTHS, SHIFT};

/// The figure's title.
pub const TITLE: &str = "Chapter 34 — efficient attention: online softmax and tiling";

/// Bytes in a MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 780.0, TITLE);
    let o = &e.online;
    // 1. running max and sum
    svg.text(
        20.0,
        58.0,
        TextStyle::heading(15.0),
        "One query over two blocks of two keys: the state (m, ℓ) after each key",
    );
    let scores: Vec<f64> = BLOCK_A.0.iter().chain(&BLOCK_B.0).copied().collect();
    let at = |values: Vec<f64>| values.into_iter().enumerate().map(|(j, v)| ((j + 1) as f64, v)).collect();
    let area = Area { x: 80.0, y: 80.0, width: 400.0, height: 250.0 };
    let top = scores.iter().chain(o.running.iter().map(|s| &s.normaliser)).fold(1.0_f64, |m, v| m.max(*v)).ceil();
    let chart = LineChart {
        area,
        x: Axis::linear("keys seen", 0.0, scores.len() as f64, scores.len(), 0),
        y: Axis::linear("value", 0.0, top, top as usize * 2, 1),
        series: vec![
            Series::new("running max m", 1, at(o.running.iter().map(|s| s.max).collect())),
            Series::new("running sum ℓ = Σ e^(s − m)", 0, at(o.running.iter().map(|s| s.normaliser).collect())),
            Series::new("ℓ of A, then of A ⊕ B", 2, vec![(2.0, o.block_a.normaliser), (4.0, o.merged.normaliser)])
                .dashed(),
            Series::new("score s_j of each key", 7, at(scores.clone())).dots(),
        ],
    };
    chart.draw_without_legend(&mut svg);
    draw_legend(&mut svg, 505.0, 290.0, &chart.legend());
    // the boundary between the blocks
    let boundary = area.x + chart.x.fraction(2.5) * area.width;
    svg.line(boundary, area.y, boundary, area.bottom(), Stroke::dashed("#888888", 1.0));
    svg.text(boundary - 8.0, area.bottom() - 8.0, TextStyle::right().size(12.0), "block A");
    svg.text(boundary + 8.0, area.bottom() - 8.0, TextStyle::label().size(12.0), "block B");
    let (ra, rb) = o.rescale;
    let out = o.merged.output();
    let pair = |v: &[f64]| format!("[{}]", v.iter().map(|x| fixed(*x, 3)).collect::<Vec<_>>().join(", "));
    svg.text_lines(
        505.0,
        95.0,
        20.0,
        TextStyle::label().size(12.0),
        &[
            format!("A: m = {}, ℓ = {}", fixed(o.block_a.max, 0), fixed(o.block_a.normaliser, 3)),
            format!("B: m = {}, ℓ = {}", fixed(o.block_b.max, 0), fixed(o.block_b.normaliser, 3)),
            format!("merge: M = max = {}", fixed(o.merged.max, 0)),
            format!(
                "ℓ = {}·{} + {}·{}",
                fixed(o.block_a.normaliser, 3),
                fixed(ra, 3),
                fixed(o.block_b.normaliser, 3),
                fixed(rb, 3)
            ),
            format!("  = {} (rescale by e^(m − M))", fixed(o.merged.normaliser, 3)),
            format!("output n/ℓ = {}", pair(&out)),
            format!("one-pass softmax: {}", pair(&o.one_pass_output)),
            format!("equal within 1e-12: {}", o.merged_equals_one_pass),
            format!("scores + {}: the bare Σ e^s = {}", fixed(SHIFT, 0), o.naive_shifted_sum),
            format!("online output bitwise unchanged: {}", o.online_shifted_bitwise),
        ],
    );
    // 2. memory
    svg.text(
        20.0,
        420.0,
        TextStyle::heading(15.0),
        "Memory of the scores: explicit [T, T] against tiled (B = 1, H = 8, f64)",
    );
    let t_axis = Axis::log10(
        "sequence length T",
        MEMORY_LENGTHS[0] as f64 / 1.5,
        *MEMORY_LENGTHS.last().unwrap_or(&1) as f64 * 1.5,
    )
    .with_ticks(e.memory.iter().map(|&(t, _, _)| (t as f64, t.to_string())).collect());
    let mib_axis = Axis::log10("MiB (log scale)", 0.005, 2e5).with_ticks(
        [0.01, 1.0, 100.0, 10_000.0].iter().map(|&v| (v, if v < 1.0 { fixed(v, 2) } else { fixed(v, 0) })).collect(),
    );
    let points = |pick: fn(&(usize, u128, u128)) -> u128| -> Vec<(f64, f64)> {
        e.memory.iter().map(|m| (m.0 as f64, pick(m) as f64 / MIB)).collect()
    };
    let area = Area { x: 100.0, y: 445.0, width: 420.0, height: 260.0 };
    LineChart {
        area,
        x: t_axis.clone(),
        y: mib_axis.clone(),
        series: vec![
            Series::new("explicit: B·H·T² scores", 1, points(|m| m.1)),
            Series::new("tiled: one block of scores", 0, points(|m| m.2)).dashed(),
        ],
    }
    .draw_with_legend(&mut svg, Corner::TopLeft);
    for &(t, explicit, tiled) in &e.memory {
        let x = area.x + t_axis.fraction(t as f64) * area.width;
        let y = area.bottom() - mib_axis.fraction(explicit as f64 / MIB) * area.height;
        svg.text(x + 6.0, y + 16.0, TextStyle::label().size(11.0), &bytes(explicit));
        let y = area.bottom() - mib_axis.fraction(tiled as f64 / MIB) * area.height;
        svg.text(x, y - 8.0, TextStyle::centered().size(11.0), &bytes(tiled));
    }
    svg.text_lines(
        545.0,
        480.0,
        20.0,
        TextStyle::label().size(12.0),
        &[
            "×4 in T: explicit ×16, tiled ×4.".to_string(),
            format!(
                "T = {}: {} against {}",
                e.memory.last().map_or(0, |m| m.0),
                bytes(e.memory.last().map_or(0, |m| m.1)),
                bytes(e.memory.last().map_or(0, |m| m.2))
            ),
            "The tiled kernel never stores the".to_string(),
            "[T, T] matrix, only (m, ℓ, n) per row.".to_string(),
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
        [|e: &mut Evidence| e.online.running[1].normaliser = 2.5, |e: &mut Evidence| e.memory[0].1 *= 2,]
    );

    #[test]
    fn the_running_state_ends_at_the_merge() -> Result<(), Box<dyn std::error::Error>> {
        let o = crate::learner_evidence()?.online;
        let last = o.running.last().ok_or("no running state")?;
        assert_eq!(last.max, o.merged.max);
        assert!((last.normaliser - o.merged.normaliser).abs() < 1e-12);
        Ok(())
    }
}
