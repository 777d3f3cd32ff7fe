//! The chapter's figure: the training loss of every step with the held-out loss and accuracy at
//! each evaluation, and the trained model's attention on a held-out sequence — every head of both
//! layers, with the cell each query of the reversed half must copy outlined.

use demo_support::chart::{Area, Axis, Corner, LineChart, Series};
use demo_support::fmt::fixed;
use demo_support::heat::{HeatMap, Shading};
use demo_support::svg::{Stroke, Svg, TextStyle};

use crate::{BATCH, Checkpoint, Evidence, HELD_OUT, LENGTH, SEPARATOR, STEPS, TrainingFigure, VOCAB};

/// The figure's title.
pub const TITLE: &str = "Chapter 36 — a tiny decoder learns to reverse: loss and attention";

/// Width and height of an attention cell.
const CELL: f64 = 14.0;

/// A token as the maps label it: its symbol, `|` for the separator.
fn token_label(token: usize) -> String {
    if token == SEPARATOR { "|".to_string() } else { token.to_string() }
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    render_figure(&e.checkpoints, &e.figure)
}

/// The figure drawn from the evaluation checkpoints and the figure's own data.
pub fn render_figure(checkpoints: &[Checkpoint], figure: &TrainingFigure) -> String {
    let mut svg = Svg::new(800.0, 880.0, TITLE);
    // 1. loss
    svg.text(
        20.0,
        58.0,
        TextStyle::heading(15.0),
        &format!("Cross-entropy of the reversed half ({STEPS} steps × {BATCH} fresh sequences)"),
    );
    let steps: Vec<(f64, f64)> = figure.step_losses.iter().enumerate().map(|(i, l)| ((i + 1) as f64, *l)).collect();
    let held_out: Vec<(f64, f64)> = checkpoints.iter().map(|c| (c.step as f64, c.held_out.loss)).collect();
    let uniform = (VOCAB as f64).ln();
    let loss_ticks = [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0].iter().map(|&v| (v, format!("{v}"))).collect();
    LineChart {
        area: Area { x: 80.0, y: 80.0, width: 420.0, height: 220.0 },
        x: Axis::linear("optimiser step", 0.0, STEPS as f64, 6, 0),
        y: Axis::log10("loss (nats, log scale)", 5e-5, 10.0).with_ticks(loss_ticks),
        series: vec![
            Series { markers: false, ..Series::new("training batch", 5, steps) },
            Series::new(&format!("held-out ({HELD_OUT} sequences)"), 1, held_out),
            Series {
                markers: false,
                ..Series::new("uniform guess ln 16", 7, vec![(0.0, uniform), (STEPS as f64, uniform)]).dashed()
            },
        ],
    }
    .draw_with_legend(&mut svg, Corner::BottomLeft);
    // accuracy
    let accuracy = |f: fn(&Checkpoint) -> f64| checkpoints.iter().map(|c| (c.step as f64, f(c))).collect();
    LineChart {
        area: Area { x: 590.0, y: 80.0, width: 190.0, height: 220.0 },
        x: Axis::linear("optimiser step", 0.0, STEPS as f64, 3, 0),
        y: Axis::linear("held-out accuracy", 0.0, 1.0, 4, 2),
        series: vec![
            Series::new("tokens", 0, accuracy(|c| c.held_out.token_accuracy())),
            Series::new("sequences", 2, accuracy(|c| c.held_out.sequence_accuracy())).dashed(),
        ],
    }
    .draw_with_legend(&mut svg, Corner::BottomRight);
    // 2. attention maps
    let tokens = &figure.attention_tokens;
    let labels: Vec<String> = tokens.iter().map(|&t| token_label(t)).collect();
    let shown: Vec<String> = labels.iter().map(String::as_str).map(str::to_string).collect();
    svg.text(
        20.0,
        372.0,
        TextStyle::heading(15.0),
        &format!("Attention of the trained model on the held-out sequence {}", shown.join(" ")),
    );
    let n = tokens.len();
    for (layer, map) in figure.attention_maps.iter().enumerate() {
        let heads = map.shape().get(1).copied().unwrap_or(0);
        for (head, weights) in map.as_slice().chunks(n * n).enumerate().take(heads) {
            let (x, y) = (25.0 + head as f64 * 195.0, 385.0 + layer as f64 * 215.0);
            // query q (from the separator on) predicts the symbol at position 2L − 1 − q
            let targets: Vec<(usize, usize)> = (LENGTH..(2 * LENGTH).min(n)).map(|q| (q, 2 * LENGTH - 1 - q)).collect();
            let on_target = targets.iter().map(|&(q, k)| weights[q * n + k]).sum::<f64>() / targets.len().max(1) as f64;
            let heat = HeatMap {
                cell_width: CELL,
                cell_height: CELL,
                row_labels: labels.clone(),
                col_labels: labels.clone(),
                cell_labels: false,
                shading: Shading::Sequential { min: 0.0, max: 1.0 },
                ..HeatMap::probabilities(
                    x,
                    y,
                    &format!("layer {layer}, head {head}: {}", fixed(on_target, 2)),
                    weights,
                    n,
                )
            };
            heat.draw(&mut svg);
            for &(q, key) in &targets {
                let (cx, cy) = (heat.grid_x() + key as f64 * CELL, heat.grid_y() + q as f64 * CELL);
                svg.rect(cx, cy, CELL, CELL, "none", Some(Stroke::solid("#d55e00", 2.0)));
            }
        }
    }
    svg.text_lines(20.0, 822.0, 18.0, TextStyle::label().size(12.0), &[
        "Rows: query token; columns: key token (dark = weight near 1). Orange: where the symbol that each query of the"
            .to_string(),
        "reversed half must write next sits (the separator writes the last symbol); after each head's name, its mean"
            .to_string(),
        format!(
            "weight on those cells. Final held-out loss {}.",
            checkpoints.last().map_or_else(|| "-".to_string(), |c| fixed(c.held_out.loss, 6))
        ),
    ]);
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use demo_support::check::check_chapter_figure;
    use llm_from_scratch::Tensor;
    use llm_from_scratch::model::Evaluation;

    /// A figure's data without training: two checkpoints and one layer of uniform causal maps.
    fn sample() -> Result<(Vec<Checkpoint>, TrainingFigure), Box<dyn std::error::Error>> {
        let eval =
            |loss, correct| Evaluation { loss, scored: 10, correct, sequences: 2, sequences_correct: correct / 5 };
        let checkpoint = |step, loss, correct| Checkpoint {
            step,
            lr: 0.0,
            train_loss: None,
            max_grad_norm: None,
            held_out: eval(loss, correct),
        };
        let n = 2 * LENGTH + 1;
        let causal: Vec<f64> =
            (0..2 * n * n).map(|i| if i % n <= (i / n) % n { 1.0 / ((i / n) % n + 1) as f64 } else { 0.0 }).collect();
        let figure = TrainingFigure {
            step_losses: (1..=STEPS).map(|s| 3.0 / s as f64).collect(),
            attention_tokens: [vec![1, 2, 3, 4, 5, SEPARATOR], vec![5, 4, 3, 2, 1]].concat(),
            attention_maps: vec![Tensor::new(&[1, 2, n, n], causal)?],
        };
        Ok((vec![checkpoint(0, 2.8, 1), checkpoint(STEPS, 0.01, 10)], figure))
    }

    /// Well formed, titled, deterministic, and changed by each change of the data it draws.
    #[test]
    fn the_figure_is_well_formed_titled_deterministic_and_follows_the_data() -> Result<(), Box<dyn std::error::Error>> {
        type Data = (Vec<Checkpoint>, TrainingFigure);
        let render = |(checkpoints, figure): &Data| render_figure(checkpoints, figure);
        check_chapter_figure(
            &sample()?,
            render,
            TITLE,
            &[&|d: &mut Data| d.1.step_losses[10] = 0.5, &|d: &mut Data| d.0[1].held_out.loss = 0.5],
        )?;
        assert!(render(&sample()?).contains(">layer 0, head 1: "));
        Ok(())
    }
}
