//! The chapter's figure (`--figure`) and its thumbnail, drawn with the shared primitives of
//! `demo_support`: the two heads' causal weights, what each head writes, and how the output
//! projection mixes the heads' columns.

use demo_support::chart::{LegendEntry, Swatch, draw_legend};
use demo_support::fmt::fixed;
use demo_support::heat::{HeatMap, MASKED, Shading, draw_colour_scale, draw_inline_key};
use demo_support::svg::{Stroke, Svg, TextStyle};
use llm_from_scratch::Tensor;

use crate::{Evidence, HEADS, MODEL_WIDTH, ROPE_BASE, TOKENS, head_rows};

/// The figure's title.
pub const TITLE: &str = "Chapter 30 — multi-head attention: two heads side by side";
/// The thumbnail's title (short enough for its 300 px).
pub const THUMBNAIL_TITLE: &str = "Chapter 30 — two heads";

/// Colours of the two heads' frames (head 1's frame is also dashed).
const HEAD_COLORS: [&str; 2] = ["#1f5fbf", "#c0392b"];
/// Outline of a diagonal cell (a token attending to itself).
const DIAGONAL: &str = "#e67e22";
/// Every weight and every value is written with two decimals.
const DECIMALS: usize = 2;
/// How the weights are shaded: white 0 to dark blue 1.
const WEIGHTS: Shading = Shading::Sequential { min: 0.0, max: 1.0 };
/// How the head outputs and the output are shaded (signed values).
const VALUES: Shading = Shading::Diverging { limit: 1.2 };

/// Head `h`'s frame: solid for head 0, dashed for head 1.
fn head_stroke(h: usize, width: f64) -> Stroke<'static> {
    Stroke { color: HEAD_COLORS[h % 2], width, dashed: h % 2 == 1 }
}

/// `token 0, token 1, …`: the example's tokens are vectors without words, so they are named by
/// position.
fn token_names() -> Vec<String> {
    (0..TOKENS).map(|t| format!("token {t}")).collect()
}

/// Head `h`'s weights with the future (masked) keys hidden.
fn causal_cells(weights: &Tensor, h: usize) -> Vec<Vec<Option<f64>>> {
    head_rows(weights, h)
        .iter()
        .enumerate()
        .map(|(q, row)| row.iter().enumerate().map(|(k, &p)| (k <= q).then_some(p)).collect())
        .collect()
}

/// A signed `[T, width]` table with two decimals, rows named by token, columns numbered from
/// `first` (the model-width feature each column is).
fn values_map(x: f64, y: f64, title: &str, rows: &[Vec<f64>], first: usize) -> HeatMap {
    let width = rows.first().map_or(0, Vec::len);
    HeatMap {
        cell_width: 62.0,
        cell_height: 30.0,
        decimals: DECIMALS,
        shading: VALUES,
        row_labels: token_names(),
        col_labels: (first..first + width).map(|c| format!("feature {c}")).collect(),
        ..HeatMap::probabilities(x, y, title, &rows.concat(), width)
    }
}

/// The rows of a `[1, T, d]` tensor.
fn token_rows(t: &Tensor) -> Vec<Vec<f64>> {
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

/// Outlines the diagonal cells of `map` (a token attending to itself).
fn outline_diagonal(svg: &mut Svg, map: &HeatMap, width: f64) {
    for q in 0..map.cells.len() {
        let (cx, cy) = (map.grid_x() + q as f64 * map.cell_width, map.grid_y() + q as f64 * map.cell_height);
        let inset = width / 2.0;
        let (w, h) = (map.cell_width - width, map.cell_height - width);
        svg.rect(cx + inset, cy + inset, w, h, "none", Some(Stroke::solid(DIAGONAL, width)));
    }
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let f = &e.forward;
    let d_h = MODEL_WIDTH / HEADS;
    let mut svg = Svg::new(800.0, 720.0, TITLE);
    svg.text_lines(
        20.0,
        52.0,
        17.0,
        TextStyle::label(),
        &[
            format!(
                "{TOKENS} tokens, model width {MODEL_WIDTH}, {HEADS} heads of width {d_h}, rotary positions (base {}), \
             causal mask.",
                fixed(ROPE_BASE, 0)
            ),
            "Each head has its own table of weights: one row per query token, one column per key token.".to_string(),
        ],
    );
    // 1. the two causal weight tables
    for h in 0..HEADS {
        let (x0, y0) = (40.0 + h as f64 * 330.0, 95.0);
        let map = HeatMap {
            cell_width: 70.0,
            cell_height: 40.0,
            cells: causal_cells(&f.weights, h),
            row_labels: token_names(),
            col_labels: token_names(),
            ..HeatMap::probabilities(x0, y0, &format!("head {h}: attention weights"), &[], TOKENS)
        };
        svg.rect(x0 - 12.0, y0 - 8.0, map.width() + 24.0, map.height() + 20.0, "none", Some(head_stroke(h, 3.0)));
        map.draw(&mut svg);
        outline_diagonal(&mut svg, &map, 4.0);
    }
    draw_colour_scale(&mut svg, 700.0, 140.0, 120.0, WEIGHTS, DECIMALS, "weight");
    // 2. what each head writes: its weights times its value rows
    for h in 0..HEADS {
        let rows = head_rows(&f.head_outputs, h);
        let title = format!("head {h} output = weights × its values");
        let map = values_map(40.0 + h as f64 * 330.0, 300.0, &title, &rows, h * d_h);
        map.draw(&mut svg);
        frame_groups(&mut svg, &map, |_| h);
    }
    // 3. the heads side by side, then the output projection
    let merged = values_map(30.0, 450.0, "both heads side by side", &token_rows(&f.merged), 0);
    merged.draw(&mut svg);
    frame_groups(&mut svg, &merged, |group| group);
    let (ax, ay) = (30.0 + merged.width(), merged.grid_y() + 1.5 * merged.cell_height);
    svg.arrow(ax + 10.0, ay, ax + 60.0, ay, Stroke::solid("#444444", 2.0));
    svg.text(ax + 35.0, ay - 10.0, TextStyle::centered().size(12.0), "output");
    svg.text(ax + 35.0, ay + 22.0, TextStyle::centered().size(12.0), "projection");
    let output = values_map(ax + 70.0, 450.0, "output (the projection swaps the heads)", &token_rows(&f.output), 0);
    output.draw(&mut svg);
    frame_groups(&mut svg, &output, |group| (group + 1) % HEADS);
    draw_colour_scale(&mut svg, 735.0, 500.0, 90.0, VALUES, DECIMALS, "value");
    // legend and what it shows
    let entry = |name: &str, color: &str, swatch| LegendEntry { name: name.into(), color: color.into(), swatch };
    let legend = [
        entry("masked: a later token, weight exactly 0", MASKED, Swatch::Square),
        entry("a token attending to itself", DIAGONAL, Swatch::Square),
        entry("head 0 and its columns", HEAD_COLORS[0], Swatch::Line { dashed: false }),
        entry("head 1 and its columns", HEAD_COLORS[1], Swatch::Line { dashed: true }),
    ];
    draw_legend(&mut svg, 30.0, 600.0, &legend);
    svg.text_lines(
        400.0,
        618.0,
        18.0,
        TextStyle::label(),
        &[
            "Head 0 spreads each query evenly over what it",
            "may see; head 1 leans towards the token itself.",
            "Each head writes its own two features; the",
            "projection then mixes all four.",
        ],
    );
    svg.finish()
}

/// The thumbnail: the two heads' weight tables side by side, 300 px wide, text of 13 px.
pub fn render_thumbnail(e: &Evidence) -> String {
    let mut svg = Svg::new(300.0, 268.0, THUMBNAIL_TITLE);
    svg.text(20.0, 52.0, TextStyle::label().color("#555555"), "multi-head attention, causal");
    let (cell_w, cell_h, top) = (36.0, 34.0, 110.0);
    for h in 0..HEADS {
        let x = 46.0 + h as f64 * (TOKENS as f64 * cell_w + 14.0);
        let map = HeatMap {
            x,
            y: top - 40.0,
            cell_width: cell_w,
            cell_height: cell_h,
            title: String::new(),
            row_labels: Vec::new(),
            col_labels: Vec::new(),
            cells: causal_cells(&e.forward.weights, h),
            shading: WEIGHTS,
            decimals: DECIMALS,
            masked_label: String::new(),
            cell_labels: true,
        };
        // the map's own labels are 12 px: these are drawn at 13 px instead
        let gx = map.grid_x();
        map.draw(&mut svg);
        outline_diagonal(&mut svg, &map, 2.5);
        let middle = gx + TOKENS as f64 * cell_w / 2.0;
        svg.text(middle, top - 26.0, TextStyle::centered().color(HEAD_COLORS[h % 2]), &format!("head {h}"));
        for k in 0..TOKENS {
            svg.text(gx + (k as f64 + 0.5) * cell_w, top - 7.0, TextStyle::centered(), &k.to_string());
        }
    }
    for q in 0..TOKENS {
        svg.text(48.0, top + (q as f64 + 0.5) * cell_h + 5.0, TextStyle::right(), &q.to_string());
    }
    let bottom = top + TOKENS as f64 * cell_h;
    draw_inline_key(&mut svg, (60.0, bottom + 14.0), 110.0, WEIGHTS, DECIMALS, "weight");
    svg.text(20.0, bottom + 50.0, TextStyle::label().color("#555555"), "rows: query token · columns: key");
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use demo_support::check::check_chapter_figure;

    /// Adds `delta` to element `index` of a tensor.
    fn nudge(t: &mut Tensor, index: usize, delta: f64) {
        t.as_mut_slice()[index] += delta;
    }

    /// Well formed, titled, deterministic, and changed by each change of the data it draws.
    #[test]
    fn the_figure_is_well_formed_titled_deterministic_and_follows_the_data() -> Result<(), Box<dyn std::error::Error>> {
        check_chapter_figure(
            &crate::learner_evidence()?,
            render_svg,
            TITLE,
            &[
                &|e: &mut Evidence| nudge(&mut e.forward.weights, 12, 0.1), // head 1, query 1, key 0
                &|e: &mut Evidence| nudge(&mut e.forward.head_outputs, 7, 0.1),
                &|e: &mut Evidence| nudge(&mut e.forward.merged, 2, 0.1),
                &|e: &mut Evidence| nudge(&mut e.forward.output, 11, 0.1),
            ],
        )?;
        Ok(())
    }

    /// The thumbnail: well formed, titled, deterministic, and drawn from both heads' weights.
    #[test]
    fn the_thumbnail_is_well_formed_titled_deterministic_and_follows_the_data() -> Result<(), Box<dyn std::error::Error>>
    {
        check_chapter_figure(
            &crate::learner_evidence()?,
            render_thumbnail,
            THUMBNAIL_TITLE,
            &[
                &|e: &mut Evidence| nudge(&mut e.forward.weights, 4, 0.1), // head 0, query 1, key 1
                &|e: &mut Evidence| nudge(&mut e.forward.weights, 17, 0.1), // head 1, query 2, key 2
            ],
        )?;
        let svg = render_thumbnail(&crate::learner_evidence()?);
        assert!(svg.contains(r#"width="300.0""#) && svg.contains(">0.79</text>"), "{svg}");
        assert!(!svg.contains(r#"font-size="12.0""#), "no text under 13 px in the thumbnail");
        Ok(())
    }
}
