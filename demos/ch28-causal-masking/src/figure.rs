//! The chapter's figure: scores, the causal mask's `−∞` and the weights it leaves; the padding
//! mask whose first row has no visible key and gets zeros; the prefix that a changed last token
//! cannot touch.

use demo_support::fmt::fixed;
use demo_support::heat::{HeatMap, Shading, draw_colour_bar, draw_colour_scale, labels};
use demo_support::svg::{Stroke, Svg, THUMBNAIL_TEXT, TextStyle};
use llm_from_scratch::{Mask, Tensor};

use crate::{CHANGED_LAST_TOKEN, Evidence, HEAD_WIDTH, TOKEN_COUNT};

/// The figure's title.
pub const TITLE: &str = "Chapter 28 — causal masking: no token reads the future";

/// `values` in rows of `columns`, hidden where `mask` is true.
fn masked_cells(values: &Tensor, mask: &Mask, columns: usize) -> Vec<Vec<Option<f64>>> {
    let visible = values.as_slice().iter().zip(mask.as_slice()).map(|(&v, &hidden)| (!hidden).then_some(v));
    visible.collect::<Vec<_>>().chunks(columns).map(<[Option<f64>]>::to_vec).collect()
}

/// A `[T, d_h]` output as a signed map with rows `position 0, …` and columns `dim 0, dim 1`.
fn output_map(x: f64, y: f64, title: &str, output: &Tensor) -> HeatMap {
    HeatMap {
        shading: Shading::Diverging { limit: 5.0 },
        row_labels: labels("position ", TOKEN_COUNT),
        col_labels: labels("dim ", HEAD_WIDTH),
        ..HeatMap::probabilities(x, y, title, output.as_slice(), HEAD_WIDTH)
    }
}

/// The largest magnitude of `values`, at least `floor`.
fn limit(values: &[f64], floor: f64) -> f64 {
    values.iter().filter(|v| v.is_finite()).fold(floor, |m, v| m.max(v.abs()))
}

/// The thumbnail: the causal weights, hidden keys grey, with their colour key, 300 px wide.
pub fn render_thumbnail(e: &Evidence) -> String {
    let n = TOKEN_COUNT;
    let (mut svg, top) = Svg::thumbnail(290.0, TITLE);
    let map = HeatMap {
        cell_width: 52.0,
        row_labels: labels("query ", n),
        col_labels: labels("key ", n),
        cells: masked_cells(&e.weights, &e.causal_mask, n),
        masked_label: "0.00".into(),
        ..HeatMap::probabilities(10.0, top - 6.0, "weights: grey keys are hidden", e.weights.as_slice(), n)
    };
    map.draw_with_text(&mut svg, THUMBNAIL_TEXT);
    let left = map.grid_x_with_text(THUMBNAIL_TEXT);
    let bottom = map.grid_y() + n as f64 * map.cell_height;
    draw_colour_bar(&mut svg, left + 8.0, bottom + 12.0, 4.0 * 52.0 - 16.0, map.shading, 2, "", THUMBNAIL_TEXT);
    svg.finish()
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 870.0, TITLE);
    let n = TOKEN_COUNT;
    let arrow = |svg: &mut Svg, x1: f64, x2: f64, caption: &str| {
        svg.arrow(x1, 165.0, x2, 165.0, Stroke::solid("#444444", 2.0));
        svg.text((x1 + x2) / 2.0, 155.0, TextStyle::centered().size(12.0), caption);
    };
    svg.text(
        20.0,
        52.0,
        TextStyle::label(),
        "positions 0–3 hold [1, 0], [0, 1], [1, 1], [−1, 1]; the query at position i may read keys j ≤ i",
    );
    // 1. scores → −∞ above the diagonal → weights
    let score_shading = Shading::Diverging { limit: limit(e.scores.as_slice(), 1.0) };
    let cell = |map: HeatMap| HeatMap {
        cell_width: 44.0,
        row_labels: labels("query ", n),
        col_labels: labels("key ", n),
        ..map
    };
    cell(HeatMap { shading: score_shading, ..HeatMap::probabilities(20.0, 75.0, "scores S", e.scores.as_slice(), n) })
        .draw(&mut svg);
    arrow(&mut svg, 258.0, 284.0, "j > i");
    cell(HeatMap {
        shading: score_shading,
        cells: masked_cells(&e.scores, &e.causal_mask, n),
        masked_label: "−∞".into(),
        ..HeatMap::probabilities(288.0, 75.0, "hidden keys set to −∞", e.scores.as_slice(), n)
    })
    .draw(&mut svg);
    arrow(&mut svg, 526.0, 554.0, "softmax");
    cell(HeatMap {
        cells: masked_cells(&e.weights, &e.causal_mask, n),
        masked_label: "0.00".into(),
        ..HeatMap::probabilities(556.0, 75.0, "weights P", e.weights.as_slice(), n)
    })
    .draw(&mut svg);
    let weight_shading = Shading::Sequential { min: 0.0, max: 1.0 };
    draw_colour_bar(&mut svg, 80.0, 288.0, 176.0, score_shading, 2, "score", 12.0);
    draw_colour_bar(&mut svg, 616.0, 288.0, 166.0, weight_shading, 2, "weight", 12.0);
    let (zeros, masked) = e.masked_zeros;
    svg.text(
        20.0,
        340.0,
        TextStyle::label(),
        &format!("grey = hidden key: e^(−∞) = 0, so {zeros} of {masked} hidden weights are exactly 0 and every row still sums to 1"),
    );
    // 2. a fully masked row
    svg.text(20.0, 385.0, TextStyle::heading(15.0), "Padding: position 0 is a pad, hidden as a key for every query");
    cell(HeatMap {
        cells: masked_cells(&e.padded_weights, &e.padding_mask, n),
        masked_label: "0.00".into(),
        ..HeatMap::probabilities(20.0, 400.0, "padded weights", e.padded_weights.as_slice(), n)
    })
    .draw(&mut svg);
    svg.arrow(258.0, 490.0, 284.0, 490.0, Stroke::solid("#444444", 2.0));
    let padded_out = output_map(290.0, 400.0, "output P·V", &e.padded_output);
    padded_out.draw(&mut svg);
    let out_shading = padded_out.shading;
    draw_colour_scale(
        &mut svg,
        padded_out.x + padded_out.width() + 12.0,
        padded_out.grid_y(),
        160.0,
        out_shading,
        2,
        "value",
    );
    svg.rect(padded_out.grid_x() - 3.0, 437.0, 126.0, 46.0, "none", Some(Stroke::solid("#d55e00", 3.0)));
    svg.rect(80.4 - 3.0, 437.0, 4.0 * 44.0 + 6.0, 46.0, "none", Some(Stroke::solid("#d55e00", 3.0)));
    svg.text_lines(
        560.0,
        450.0,
        20.0,
        TextStyle::label(),
        &[
            "Query 0 has no visible key at all.".to_string(),
            "The bare formula would give".to_string(),
            "0/0 = NaN; the library gives".to_string(),
            format!(
                "weights {}, output [{}, {}].",
                fixed(e.padded_weights.as_slice()[..n].iter().sum(), 2),
                fixed(e.padded_output.as_slice()[0], 2),
                fixed(e.padded_output.as_slice()[1], 2)
            ),
        ],
    );
    // 3. the prefix does not move
    let changed = format!("[{}, {}]", fixed(CHANGED_LAST_TOKEN[0], 0), fixed(CHANGED_LAST_TOKEN[1], 0));
    svg.text(20.0, 630.0, TextStyle::heading(15.0), &format!("Changing the last position's vector to {changed}"));
    output_map(20.0, 645.0, "causal output", &e.output).draw(&mut svg);
    output_map(230.0, 645.0, "after the change", &e.changed_output).draw(&mut svg);
    let unchanged: Vec<String> = e.unchanged_rows.iter().map(usize::to_string).collect();
    let (before, after) = &e.unmasked_row0;
    let scale_x = 230.0 + padded_out.width() + 12.0;
    draw_colour_scale(&mut svg, scale_x, 685.0, 160.0, out_shading, 2, "value");
    let pair = |v: &[f64]| format!("[{}]", v.iter().map(|x| fixed(*x, 2)).collect::<Vec<_>>().join(", "));
    svg.text_lines(
        520.0,
        700.0,
        20.0,
        TextStyle::label(),
        &[
            format!("Positions {} do not change at all:", unchanged.join(", ")),
            "their hidden weight on position 3 is".to_string(),
            "exactly 0, and 0 · v adds nothing.".to_string(),
            String::new(),
            "Without the mask, position 0".to_string(),
            format!("would move from {}", pair(before)),
            format!("to {}.", pair(after)),
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
        [|e: &mut Evidence| e.padded_output = e.output.clone(), |e: &mut Evidence| e.unchanged_rows = vec![0, 1],]
    );

    demo_support::chapter_thumbnail_test!(
        crate::learner_evidence(),
        render_thumbnail,
        TITLE,
        [|e: &mut Evidence| e.weights = e.padded_weights.clone()]
    );

    #[test]
    fn the_figure_shows_six_hidden_scores() -> Result<(), Box<dyn std::error::Error>> {
        let svg = render_svg(&crate::learner_evidence()?);
        assert_eq!(svg.matches(">−∞</text>").count(), 6);
        Ok(())
    }
}
