//! The chapter's figure: the score matrix cut into query and key blocks and the order in which a
//! query block visits its key blocks; the hand example's two blocks merged with the rescale
//! factor `e^(m_old − m_new)`; the running sum `ℓ` key by key, rescaled each time the maximum
//! grows; and the memory of the explicit `[T, T]` scores against the tiled kernel's.

use demo_support::chart::{Area, Axis, Corner, LegendEntry, LineChart, Series, Swatch, draw_legend_row};
use demo_support::fmt::{bytes, fixed};
use demo_support::svg::{Stroke, Svg, TextStyle, color};
use llm_from_scratch::attention::block_size;

use crate::{BLOCK_A, BLOCK_B, Evidence, MEMORY_LENGTHS};

/// The figure's title.
pub const TITLE: &str = "Chapter 34 — efficient attention: online softmax and tiling";

/// Bytes in a MiB.
const MIB: f64 = 1024.0 * 1024.0;
/// Sequence length of the tiling diagram.
const TILED_LENGTH: usize = 256;
/// The query block whose visits the tiling diagram numbers.
const SHOWN_QUERY_BLOCK: usize = 2;
/// Fill of the earlier keys' part of `ℓ` and of the current key's.
const EARLIER: usize = 0;
/// See [`EARLIER`].
const CURRENT: usize = 4;

/// A state value (score, maximum, sum, factor): always two decimals.
fn num(value: f64) -> String {
    fixed(value, 2)
}

/// The four scores of the hand example, block A then block B.
fn scores() -> Vec<f64> {
    BLOCK_A.0.iter().chain(&BLOCK_B.0).copied().collect()
}

/// The score matrix of [`TILED_LENGTH`] tokens in the library's blocks, causal: hidden blocks
/// skipped, and query block [`SHOWN_QUERY_BLOCK`]'s key blocks numbered in the order visited.
fn tiling_panel(svg: &mut Svg, x: f64, y: f64) {
    let block = block_size(TILED_LENGTH);
    let n = TILED_LENGTH.div_ceil(block);
    let cell = 64.0;
    let range = |i: usize| format!("{}–{}", i * block, ((i + 1) * block).min(TILED_LENGTH) - 1);
    svg.text(x, y, TextStyle::heading(15.0), &format!("Scores of {TILED_LENGTH} tokens in blocks of {block}"));
    let (gx, gy) = (x + 110.0, y + 58.0);
    svg.text(gx + cell * n as f64 / 2.0, gy - 30.0, TextStyle::centered(), "keys");
    svg.vertical_text(x + 10.0, gy + cell * n as f64 / 2.0, TextStyle::centered(), "queries");
    for i in 0..n {
        let mid = gy + (i as f64 + 0.5) * cell;
        svg.text(gx + (i as f64 + 0.5) * cell, gy - 10.0, TextStyle::centered().size(12.0), &range(i));
        svg.text(gx - 8.0, mid + 4.0, TextStyle::right().size(12.0), &range(i));
        for j in 0..n {
            let (cx, cy) = (gx + j as f64 * cell, gy + i as f64 * cell);
            let shown = i == SHOWN_QUERY_BLOCK;
            let fill = if j > i {
                "#eeeeee"
            } else if shown {
                "#f6c667"
            } else {
                "#c6dbef"
            };
            svg.rect(cx, cy, cell, cell, fill, Some(Stroke::solid("white", 2.0)));
            if j == i {
                // a diagonal block is computed whole; its upper half is masked inside it
                svg.polygon(
                    &[(cx + 1.0, cy + 1.0), (cx + cell - 1.0, cy + 1.0), (cx + cell - 1.0, cy + cell - 1.0)],
                    "#eeeeee",
                );
            }
            if j > i {
                svg.text(
                    cx + cell / 2.0,
                    cy + cell / 2.0 + 4.0,
                    TextStyle::centered().size(12.0).color("#888888"),
                    "skipped",
                );
            } else if shown {
                let style = TextStyle::heading(18.0).color("#222222");
                svg.text(cx + cell / 2.0 - 5.0, cy + cell / 2.0 + 12.0, style, &(j + 1).to_string());
            }
        }
    }
    // the walk of the shown row, block after block
    let row_y = gy + (SHOWN_QUERY_BLOCK as f64 + 0.5) * cell;
    for j in 0..SHOWN_QUERY_BLOCK {
        let from = gx + (j as f64 + 0.5) * cell + 14.0;
        svg.arrow(from, row_y - 14.0, from + cell - 28.0, row_y - 14.0, Stroke::solid("#444444", 1.5));
    }
    let bottom = gy + n as f64 * cell;
    svg.text_lines(
        x,
        bottom + 24.0,
        18.0,
        TextStyle::label(),
        &[
            format!("Queries {} visit key blocks 1, 2, 3 in order,", range(SHOWN_QUERY_BLOCK)),
            "keeping only m, ℓ and n per query row. Blocks".to_string(),
            "above the diagonal are never computed.".to_string(),
        ],
    );
}

/// A box with a bold first line and a plain second line.
fn state_box(svg: &mut Svg, area: Area, fill: &str, head: &str, body: &str) {
    svg.rect(area.x, area.y, area.width, area.height, fill, Some(Stroke::solid("#666666", 1.0)));
    svg.text(area.center_x(), area.y + 20.0, TextStyle { bold: true, ..TextStyle::centered() }, head);
    svg.text(area.center_x(), area.y + 39.0, TextStyle::centered(), body);
}

/// The hand example: one query row's four scores in two key blocks, each block's state, and
/// their merge with each block's rescale factor written on its arrow.
fn merge_panel(svg: &mut Svg, e: &Evidence, x: f64, y: f64) {
    let o = &e.online;
    svg.text(x, y, TextStyle::heading(15.0), "One query row, two key blocks, merged");
    let cell = 70.0;
    let strip_y = y + 36.0;
    for (j, s) in scores().iter().enumerate() {
        let cx = x + 10.0 + j as f64 * cell + if j >= 2 { 20.0 } else { 0.0 };
        svg.rect(cx, strip_y, cell, 32.0, "#f7f7f7", Some(Stroke::solid("#999999", 1.0)));
        svg.text(cx + cell / 2.0, strip_y + 21.0, TextStyle::centered(), &format!("s = {}", num(*s)));
    }
    svg.text(x + 10.0 + cell, strip_y + 50.0, TextStyle::centered(), "block A");
    svg.text(x + 30.0 + 3.0 * cell, strip_y + 50.0, TextStyle::centered(), "block B");
    let (ra, rb) = o.rescale;
    let boxes_y = strip_y + 66.0;
    let a = Area { x, y: boxes_y, width: 165.0, height: 50.0 };
    let b = Area { x: x + 185.0, y: boxes_y, width: 165.0, height: 50.0 };
    let state =
        |s: &llm_from_scratch::attention::OnlineSoftmax| format!("m = {}, ℓ = {}", num(s.max), num(s.normaliser));
    state_box(svg, a, "#deebf7", "block A alone", &state(&o.block_a));
    state_box(svg, b, "#deebf7", "block B alone", &state(&o.block_b));
    let merged = Area { x, y: boxes_y + 130.0, width: 350.0, height: 50.0 };
    let exponent = |m: f64| format!("× e^({} − {})", num(m), num(o.merged.max));
    // A's arrow near its right edge with its factor to the left, B's near its left edge with its
    // factor to the right
    for (area, m, factor, arrow_x) in [(a, o.block_a.max, ra, a.right() - 20.0), (b, o.block_b.max, rb, b.x + 20.0)] {
        svg.arrow(arrow_x, area.bottom(), arrow_x, merged.y - 2.0, Stroke::solid("#444444", 1.5));
        let (dx, base) =
            if arrow_x < merged.center_x() { (-8.0, TextStyle::right()) } else { (8.0, TextStyle::label()) };
        let style = if factor < 1.0 { TextStyle { bold: true, ..base.color(color(1)) } } else { base };
        svg.text(arrow_x + dx, area.bottom() + 32.0, style, &exponent(m));
        svg.text(arrow_x + dx, area.bottom() + 50.0, style, &format!("= {}", num(factor)));
    }
    let sum = format!(
        "ℓ = {} × {} + {} × {} = {}",
        num(o.block_a.normaliser),
        num(ra),
        num(o.block_b.normaliser),
        num(rb),
        num(o.merged.normaliser)
    );
    state_box(svg, merged, "#fdd0a2", &format!("merged: m = max = {}", num(o.merged.max)), &sum);
    let out: Vec<String> = o.merged.output().iter().map(|v| num(*v)).collect();
    svg.text_lines(
        x,
        merged.bottom() + 24.0,
        18.0,
        TextStyle::label(),
        &[
            format!("Block A's sum was taken against its own max {};", num(o.block_a.max)),
            "the factor moves it to the merged max.".to_string(),
            format!("Output n / ℓ = [{}].", out.join(", ")),
        ],
    );
}

/// Sizes of the running-sum panel's texts: the full figure and the thumbnail.
#[derive(Clone, Copy)]
struct RunningText {
    size: f64,
    /// Write the whole factor `e^(m_old − m_new) = r` (else only `× r`) and `ℓ` above each bar.
    full: bool,
}

/// The running sum `ℓ` after each key, as stacked bars: the earlier keys' sum rescaled to the
/// new maximum, and the current key's `e^(s − m)`; a dashed outline shows the earlier sum before
/// its rescale wherever the maximum grew.
fn running_panel(svg: &mut Svg, e: &Evidence, area: Area, text: RunningText) {
    let states = &e.online.running;
    let s = scores();
    let top = 2.5;
    let py = |v: f64| area.bottom() - (v / top).clamp(0.0, 1.0) * area.height;
    for tick in [0.0, 1.0, 2.0] {
        svg.line(area.x, py(tick), area.right(), py(tick), Stroke::solid("#dddddd", 1.0));
        svg.text(area.x - 6.0, py(tick) + text.size / 3.0, TextStyle::right().size(text.size), &num(tick));
    }
    svg.line(area.x, area.bottom(), area.right(), area.bottom(), Stroke::solid("#444444", 1.5));
    let group = area.width / states.len().max(1) as f64;
    let bar = group.min(120.0) * 0.42;
    let mut previous: Option<(f64, f64)> = None; // (max, sum) before this key
    for (k, state) in states.iter().enumerate() {
        let mid = area.x + (k as f64 + 0.5) * group;
        let (m, sum) = (state.max, state.normaliser);
        let (carried, factor, before) = match previous {
            Some((m_old, l_old)) => ((m_old - m).exp() * l_old, (m_old - m).exp(), l_old),
            None => (0.0, 1.0, 0.0),
        };
        let left = mid - bar / 2.0;
        svg.rect(left, py(carried), bar, area.bottom() - py(carried), color(EARLIER), None);
        svg.rect(left, py(sum), bar, py(carried) - py(sum), color(CURRENT), None);
        let mut label_y = py(sum) - 6.0;
        if text.full {
            svg.text(mid, label_y, TextStyle::centered().size(text.size), &format!("ℓ = {}", num(sum)));
            label_y -= text.size + 4.0;
        }
        if factor < 1.0 {
            svg.rect(left, py(before), bar, area.bottom() - py(before), "none", Some(Stroke::dashed("#222222", 1.5)));
            svg.arrow(left + bar + 6.0, py(before), left + bar + 6.0, py(carried), Stroke::solid(color(1), 2.0));
            let y = label_y.min(py(before) - 6.0);
            let style = TextStyle { bold: true, ..TextStyle::centered().size(text.size).color(color(1)) };
            if text.full {
                let m_old = previous.map_or(m, |p| p.0);
                svg.text(mid, y - text.size - 3.0, style, &format!("× e^({} − {})", num(m_old), num(m)));
                svg.text(mid, y, style, &format!("= {}", num(factor)));
            } else {
                svg.text(mid, y, style, &format!("× {}", num(factor)));
            }
        }
        let category = TextStyle::centered().size(text.size);
        let (first, second) = if text.full {
            (format!("key {}: s = {}", k + 1, num(s[k])), format!("m = {}", num(m)))
        } else {
            (num(s[k]), num(m))
        };
        svg.text(mid, area.bottom() + text.size + 5.0, category, &first);
        svg.text(mid, area.bottom() + 2.0 * text.size + 9.0, category.color("#555555"), &second);
        previous = Some((m, sum));
    }
    if !text.full {
        // the rows of numbers under the bars say what they are at their left
        let style = TextStyle::right().size(text.size);
        svg.text(area.x - 6.0, area.bottom() + text.size + 5.0, style, "s");
        svg.text(area.x - 6.0, area.bottom() + 2.0 * text.size + 9.0, style.color("#555555"), "m");
    }
    // the boundary between the blocks
    let boundary = area.x + BLOCK_A.0.len() as f64 * group;
    svg.line(boundary, area.y, boundary, area.bottom() + 2.0 * text.size + 12.0, Stroke::dashed("#888888", 1.0));
}

/// The running-sum panel's legend entries.
fn running_legend() -> Vec<LegendEntry> {
    let entry =
        |name: &str, color: &str, swatch| LegendEntry { name: name.to_string(), color: color.to_string(), swatch };
    vec![
        entry("earlier keys, rescaled", color(EARLIER), Swatch::Square),
        entry("this key: e^(s − m)", color(CURRENT), Swatch::Square),
        entry("earlier keys before the rescale", "#222222", Swatch::Line { dashed: true }),
    ]
}

/// The explicit scores' memory against the tiled kernel's, on log axes labelled in bytes.
fn memory_panel(svg: &mut Svg, e: &Evidence, y: f64) {
    svg.text(
        20.0,
        y,
        TextStyle::heading(15.0),
        "Memory of the scores: explicit [T, T] against tiled (one layer, 8 heads, f64)",
    );
    let t_axis = Axis::log10(
        "sequence length T (tokens)",
        MEMORY_LENGTHS[0] as f64 / 1.5,
        *MEMORY_LENGTHS.last().unwrap_or(&1) as f64 * 1.5,
    )
    .with_ticks(e.memory.iter().map(|&(t, _, _)| (t as f64, t.to_string())).collect());
    let tick_bytes = [16_u128 << 10, 1 << 20, 64 << 20, 4 << 30];
    let memory_axis = Axis::log10("memory (log scale)", 0.005, 2e5)
        .with_ticks(tick_bytes.iter().map(|&b| (b as f64 / MIB, bytes(b))).collect());
    let points = |pick: fn(&(usize, u128, u128)) -> u128| -> Vec<(f64, f64)> {
        e.memory.iter().map(|m| (m.0 as f64, pick(m) as f64 / MIB)).collect()
    };
    let area = Area { x: 100.0, y: y + 25.0, width: 420.0, height: 220.0 };
    LineChart {
        area,
        x: t_axis.clone(),
        y: memory_axis.clone(),
        series: vec![
            Series::new("explicit: every score", 1, points(|m| m.1)),
            Series::new("tiled: one block of scores", 0, points(|m| m.2)).dashed(),
        ],
    }
    .draw_with_legend(svg, Corner::TopLeft);
    for &(t, explicit, tiled) in &e.memory {
        let x = area.x + t_axis.fraction(t as f64) * area.width;
        let y = area.bottom() - memory_axis.fraction(explicit as f64 / MIB) * area.height;
        svg.text(x + 6.0, y + 16.0, TextStyle::label().size(11.0), &bytes(explicit));
        let y = area.bottom() - memory_axis.fraction(tiled as f64 / MIB) * area.height;
        svg.text(x, y - 8.0, TextStyle::centered().size(11.0), &bytes(tiled));
    }
    let last = e.memory.last().copied().unwrap_or((0, 0, 0));
    svg.text_lines(
        545.0,
        y + 60.0,
        20.0,
        TextStyle::label().size(12.0),
        &[
            "×4 in T: explicit ×16, tiled ×4.".to_string(),
            format!("T = {}: {} against {}.", last.0, bytes(last.1), bytes(last.2)),
            "The tiled kernel never stores the".to_string(),
            "[T, T] matrix, only (m, ℓ, n) per row.".to_string(),
        ],
    );
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 1130.0, TITLE);
    tiling_panel(&mut svg, 20.0, 62.0);
    merge_panel(&mut svg, e, 430.0, 62.0);
    svg.text(20.0, 480.0, TextStyle::heading(15.0), "The same row key by key: ℓ is rescaled each time the max m grows");
    svg.text_lines(
        20.0,
        502.0,
        18.0,
        TextStyle::label(),
        &[
            "ℓ = Σ e^(s − m) is measured against the largest score m so far; when a larger score arrives,",
            "the sum of the earlier keys is multiplied by e^(m_old − m_new) before the new key's term is added.",
        ],
    );
    let area = Area { x: 70.0, y: 550.0, width: 710.0, height: 180.0 };
    running_panel(&mut svg, e, area, RunningText { size: 13.0, full: true });
    svg.vertical_text(30.0, area.center_y(), TextStyle::centered(), "running sum ℓ");
    draw_legend_row(&mut svg, 70.0, 790.0, &running_legend(), 13.0);
    memory_panel(&mut svg, e, 840.0);
    svg.finish()
}

/// The thumbnail: the running sum key by key, with its rescale factors, 300 px wide.
pub fn render_thumbnail(e: &Evidence) -> String {
    let (mut svg, top) = Svg::thumbnail(350.0, TITLE);
    svg.text(10.0, top + 4.0, TextStyle::label(), "running sum ℓ, key by key");
    let area = Area { x: 44.0, y: top + 30.0, width: 246.0, height: 170.0 };
    running_panel(&mut svg, e, area, RunningText { size: 13.0, full: false });
    let legend = running_legend();
    draw_legend_row(&mut svg, 10.0, area.bottom() + 60.0, &legend[..1], 13.0);
    draw_legend_row(&mut svg, 10.0, area.bottom() + 80.0, &legend[1..2], 13.0);
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
            |e: &mut Evidence| e.online.running[1].normaliser = 2.5,
            |e: &mut Evidence| e.online.block_b.normaliser = 1.5,
            |e: &mut Evidence| e.online.rescale.0 = 0.5,
            |e: &mut Evidence| e.memory[0].1 *= 2,
        ]
    );

    demo_support::chapter_thumbnail_test!(
        crate::learner_evidence(),
        render_thumbnail,
        TITLE,
        [|e: &mut Evidence| e.online.running[1].normaliser = 2.5, |e: &mut Evidence| e.online.running[2].max = 4.0]
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
