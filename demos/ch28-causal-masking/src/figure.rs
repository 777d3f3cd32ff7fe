//! The chapter's figure: scores, the causal mask's `−∞` and the weights it leaves; the padding
//! mask whose first row has no visible key and gets zeros; the prefix that a changed last token
//! cannot touch.

use demo_support::fmt::fixed;
use demo_support::heat::{HeatMap, Shading, labels};
use demo_support::svg::{Stroke, Svg, TextStyle};
use llm_from_scratch::{Mask, Tensor};

use crate::{CHANGED_LAST_TOKEN, Evidence, HEAD_WIDTH, TOKEN_COUNT};

/// The figure's title.
pub const TITLE: &str = "Chapter 28 — causal masking: no token reads the future";

/// `values` in rows of `columns`, hidden where `mask` is true.
fn masked_cells(values: &Tensor, mask: &Mask, columns: usize) -> Vec<Vec<Option<f64>>> {
    let visible = values.as_slice().iter().zip(mask.as_slice()).map(|(&v, &hidden)| (!hidden).then_some(v));
    visible.collect::<Vec<_>>().chunks(columns).map(<[Option<f64>]>::to_vec).collect()
}

/// A `[T, d_h]` output as a signed map with rows `t0, t1, …` and columns `c0, c1`.
fn output_map(x: f64, y: f64, title: &str, output: &Tensor) -> HeatMap {
    HeatMap {
        shading: Shading::Diverging { limit: 5.0 },
        row_labels: labels("t", TOKEN_COUNT),
        col_labels: labels("c", HEAD_WIDTH),
        ..HeatMap::probabilities(x, y, title, output.as_slice(), HEAD_WIDTH)
    }
}

/// The largest magnitude of `values`, at least `floor`.
fn limit(values: &[f64], floor: f64) -> f64 {
    values.iter().filter(|v| v.is_finite()).fold(floor, |m, v| m.max(v.abs()))
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 820.0, TITLE);
    let n = TOKEN_COUNT;
    let arrow = |svg: &mut Svg, x1: f64, x2: f64, caption: &str| {
        svg.arrow(x1, 165.0, x2, 165.0, Stroke::solid("#444444", 2.0));
        svg.text((x1 + x2) / 2.0, 155.0, TextStyle::centered().size(12.0), caption);
    };
    svg.text(
        20.0,
        52.0,
        TextStyle::label(),
        "tokens x0=[1,0], x1=[0,1], x2=[1,1], x3=[−1,1]; query i may read keys j ≤ i",
    );
    // 1. scores → −∞ above the diagonal → weights
    let score_shading = Shading::Diverging { limit: limit(e.scores.as_slice(), 1.0) };
    let cell = |map: HeatMap| HeatMap { cell_width: 48.0, ..map };
    cell(HeatMap { shading: score_shading, ..HeatMap::probabilities(20.0, 75.0, "scores S", e.scores.as_slice(), n) })
        .draw(&mut svg);
    arrow(&mut svg, 242.0, 284.0, "j > i");
    cell(HeatMap {
        shading: score_shading,
        cells: masked_cells(&e.scores, &e.causal_mask, n),
        masked_label: "−∞".into(),
        ..HeatMap::probabilities(290.0, 75.0, "masked_fill(−∞)", e.scores.as_slice(), n)
    })
    .draw(&mut svg);
    arrow(&mut svg, 512.0, 554.0, "softmax");
    cell(HeatMap {
        cells: masked_cells(&e.weights, &e.causal_mask, n),
        masked_label: "0".into(),
        ..HeatMap::probabilities(560.0, 75.0, "weights P", e.weights.as_slice(), n)
    })
    .draw(&mut svg);
    let (zeros, masked) = e.masked_zeros;
    svg.text(
        20.0,
        290.0,
        TextStyle::label(),
        &format!("grey = hidden key: e^(−∞) = 0, so {zeros} of {masked} hidden weights are exactly 0.0 and every row still sums to 1"),
    );
    // 2. a fully masked row
    svg.text(20.0, 335.0, TextStyle::heading(15.0), "Padding: token 0 is a pad, hidden as a key for every query");
    cell(HeatMap {
        cells: masked_cells(&e.padded_weights, &e.padding_mask, n),
        masked_label: "0".into(),
        ..HeatMap::probabilities(20.0, 350.0, "padded weights", e.padded_weights.as_slice(), n)
    })
    .draw(&mut svg);
    svg.arrow(242.0, 440.0, 284.0, 440.0, Stroke::solid("#444444", 2.0));
    output_map(290.0, 350.0, "output P·V", &e.padded_output).draw(&mut svg);
    svg.rect(290.0 + 24.0 - 3.0, 387.0, 126.0, 46.0, "none", Some(Stroke::solid("#d55e00", 3.0)));
    svg.rect(20.0 + 24.0 - 3.0, 387.0, 4.0 * 48.0 + 6.0, 46.0, "none", Some(Stroke::solid("#d55e00", 3.0)));
    svg.text_lines(
        470.0,
        400.0,
        20.0,
        TextStyle::label(),
        &[
            "Row q0 has no visible key at all.".to_string(),
            "The bare formula would give 0/0 = NaN;".to_string(),
            format!(
                "the library gives weights {}, output [{}, {}].",
                fixed(e.padded_weights.as_slice()[..n].iter().sum(), 0),
                fixed(e.padded_output.as_slice()[0], 0),
                fixed(e.padded_output.as_slice()[1], 0)
            ),
        ],
    );
    // 3. the prefix does not move
    let changed = format!("[{}, {}]", fixed(CHANGED_LAST_TOKEN[0], 0), fixed(CHANGED_LAST_TOKEN[1], 0));
    svg.text(20.0, 580.0, TextStyle::heading(15.0), &format!("Changing the last token x3 to {changed}"));
    output_map(20.0, 595.0, "causal output", &e.output).draw(&mut svg);
    output_map(200.0, 595.0, "after the change", &e.changed_output).draw(&mut svg);
    let unchanged: Vec<String> = e.unchanged_rows.iter().map(|r| format!("t{r}")).collect();
    let (before, after) = &e.unmasked_row0;
    let pair = |v: &[f64]| format!("[{}]", v.iter().map(|x| fixed(*x, 2)).collect::<Vec<_>>().join(", "));
    svg.text_lines(
        400.0,
        650.0,
        20.0,
        TextStyle::label(),
        &[
            format!("rows {} are bitwise unchanged:", unchanged.join(", ")),
            "their hidden weight on x3 is exactly 0.0,".to_string(),
            "and 0.0 · v adds exactly nothing.".to_string(),
            String::new(),
            "Without the mask, row t0 would move".to_string(),
            format!("from {} to {}.", pair(before), pair(after)),
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

    #[test]
    fn the_figure_shows_six_hidden_scores() -> Result<(), Box<dyn std::error::Error>> {
        let svg = render_svg(&crate::learner_evidence()?);
        assert_eq!(svg.matches(">−∞</text>").count(), 6);
        Ok(())
    }
}
