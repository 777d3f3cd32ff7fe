//! The chapter's figure: the training loss of every step with the held-out loss and accuracy at
//! each evaluation; the trained model's attention on a held-out sequence, every head of both
//! layers with the cell each query of the reversed half must copy outlined; and the two-hop
//! circuit that does the copying ([`crate::circuit`]): layer 1's map times layer 0's, beside the
//! same measure for every pair of heads. [`render_thumbnail`] draws the two-hop map alone.

use demo_support::chart::{Area, Axis, Corner, LineChart, Series};
use demo_support::fmt::fixed;
use demo_support::heat::{HeatMap, Shading, draw_colour_scale, draw_inline_key, grid};
use demo_support::svg::{Stroke, Svg, TextStyle};

use crate::circuit::{Circuit, copy_targets, token_label};
use crate::{BATCH, Checkpoint, Evidence, HELD_OUT, STEPS, TrainingFigure, VOCAB};

/// The figure's title.
pub const TITLE: &str = "Chapter 36 — a tiny decoder learns to reverse: loss and attention";
/// The thumbnail's title (short enough for its 300 px).
pub const THUMBNAIL_TITLE: &str = "Chapter 36 — tiny decoder";

/// Attention weights: white 0 to dark blue 1, written with two decimals.
const WEIGHTS: Shading = Shading::Sequential { min: 0.0, max: 1.0 };
/// Decimals of every attention weight.
const DECIMALS: usize = 2;
/// Outline of a cell to copy.
const TARGET: &str = "#d55e00";

/// Draws the `n × n` map `values` with its grid's top left corner at `(gx, gy)`, cells of `cell`
/// pixels, the tokens `labels` on both axes at `size` pixels, and the cells to copy outlined.
fn token_map(svg: &mut Svg, (gx, gy): (f64, f64), cell: f64, values: &[f64], labels: &[String], size: f64) {
    let n = labels.len();
    let map = HeatMap {
        x: gx - 10.0, // an empty row label takes 10 px
        y: gy - 40.0,
        cell_width: cell,
        cell_height: cell,
        title: String::new(),
        row_labels: Vec::new(),
        col_labels: Vec::new(),
        cells: grid(values, n),
        shading: WEIGHTS,
        decimals: DECIMALS,
        masked_label: String::new(),
        cell_labels: false,
    };
    map.draw(svg);
    for (i, label) in labels.iter().enumerate() {
        let middle = (i as f64 + 0.5) * cell;
        svg.text(gx + middle, gy - 4.0, TextStyle::centered().size(size), label);
        svg.text(gx - 4.0, gy + middle + size * 0.35, TextStyle::right().size(size), label);
    }
    for (q, k) in copy_targets(n) {
        let stroke = Stroke::solid(TARGET, if cell > 14.0 { 2.5 } else { 2.0 });
        svg.rect(gx + k as f64 * cell, gy + q as f64 * cell, cell, cell, "none", Some(stroke));
    }
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    render_figure(&e.checkpoints, &e.figure)
}

/// The loss and accuracy charts, 80 to 260 px down.
fn draw_training(svg: &mut Svg, checkpoints: &[Checkpoint], figure: &TrainingFigure) {
    let heading = format!("Cross-entropy of the reversed half ({STEPS} steps × {BATCH} fresh sequences)");
    svg.text(20.0, 58.0, TextStyle::heading(15.0), &heading);
    let steps: Vec<(f64, f64)> = figure.step_losses.iter().enumerate().map(|(i, l)| ((i + 1) as f64, *l)).collect();
    let held_out: Vec<(f64, f64)> = checkpoints.iter().map(|c| (c.step as f64, c.held_out.loss)).collect();
    let uniform = (VOCAB as f64).ln();
    let loss_ticks = [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0].iter().map(|&v| (v, format!("{v}"))).collect();
    LineChart {
        area: Area { x: 80.0, y: 80.0, width: 420.0, height: 180.0 },
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
    .draw_with_legend(svg, Corner::BottomLeft);
    let accuracy = |f: fn(&Checkpoint) -> f64| checkpoints.iter().map(|c| (c.step as f64, f(c))).collect();
    LineChart {
        area: Area { x: 590.0, y: 80.0, width: 190.0, height: 180.0 },
        x: Axis::linear("optimiser step", 0.0, STEPS as f64, 3, 0),
        y: Axis::linear("held-out accuracy", 0.0, 1.0, 4, 2),
        series: vec![
            Series::new("tokens", 0, accuracy(|c| c.held_out.token_accuracy())),
            Series::new("sequences", 2, accuracy(|c| c.held_out.sequence_accuracy())).dashed(),
        ],
    }
    .draw_with_legend(svg, Corner::BottomRight);
}

/// The figure drawn from the evaluation checkpoints and the figure's own data.
pub fn render_figure(checkpoints: &[Checkpoint], figure: &TrainingFigure) -> String {
    let mut svg = Svg::new(800.0, 1125.0, TITLE);
    draw_training(&mut svg, checkpoints, figure);
    let circuit = Circuit::of(figure);
    let labels: Vec<String> = figure.attention_tokens.iter().map(|&t| token_label(t)).collect();
    // 1. every head
    svg.text(
        20.0,
        345.0,
        TextStyle::heading(15.0),
        &format!("Where each head looks on the held-out sequence {}", labels.join(" ")),
    );
    svg.text_lines(20.0, 366.0, 17.0, TextStyle::label(), &[
        "Rows: the query token; columns: the key token it reads. Orange: the symbol each query of the reversed half",
        "must write next (the separator writes the last symbol). After each head: its mean weight on those cells.",
    ]);
    let cell = 12.0;
    for (layer, heads) in circuit.heads.iter().enumerate() {
        let top = 395.0 + layer as f64 * 190.0;
        svg.vertical_text(24.0, top + 90.0, TextStyle::heading(14.0), &format!("layer {layer}"));
        for (head, map) in heads.iter().enumerate() {
            let gx = 58.0 + head as f64 * 165.0;
            let score = circuit.single.get(layer).and_then(|s| s.get(head)).copied().unwrap_or(0.0);
            svg.text(
                gx - 14.0,
                top + 14.0,
                TextStyle::heading(14.0),
                &format!("head {head}: {}", fixed(score, DECIMALS)),
            );
            token_map(&mut svg, (gx, top + 40.0), cell, map, &labels, 10.0);
        }
    }
    draw_colour_scale(&mut svg, 725.0, 445.0, 250.0, WEIGHTS, DECIMALS, "weight");
    // 2. two hops
    let top = 805.0;
    svg.text(20.0, top, TextStyle::heading(15.0), "Two hops: layer 1 reads positions that layer 0 has filled");
    let (h1, h0) = circuit.best;
    svg.text(
        20.0,
        top + 26.0,
        TextStyle::heading(14.0),
        &format!("layer 1 × layer 0: {}", fixed(circuit.best_pair(), 2)),
    );
    svg.text(20.0, top + 44.0, TextStyle::label().size(12.0), &format!("head {h1} after head {h0}"));
    token_map(&mut svg, (44.0, top + 70.0), 17.0, &circuit.composed, &labels, 12.0);
    draw_colour_scale(&mut svg, 240.0, top + 80.0, 160.0, WEIGHTS, DECIMALS, "weight");
    // every pair
    let pairs = HeatMap {
        cell_width: 52.0,
        cell_height: 30.0,
        row_labels: (0..circuit.pairs.len()).map(|h| format!("head {h}")).collect(),
        col_labels: (0..circuit.pairs.first().map_or(0, Vec::len)).map(|h| format!("head {h}")).collect(),
        cells: circuit.pairs.iter().map(|row| row.iter().copied().map(Some).collect()).collect(),
        ..HeatMap::probabilities(330.0, top + 10.0, "Every pair: weight on the cells to copy", &[], 1)
    };
    pairs.draw(&mut svg);
    let (px, py) = (pairs.grid_x() + h0 as f64 * pairs.cell_width, pairs.grid_y() + h1 as f64 * pairs.cell_height);
    svg.rect(px, py, pairs.cell_width, pairs.cell_height, "none", Some(Stroke::solid(TARGET, 2.5)));
    let note = TextStyle::label().size(12.0).color("#555555");
    svg.text(pairs.grid_x(), pairs.grid_y() + pairs.height() - 20.0, note, "columns: layer 0 · rows: layer 1");
    svg.text_lines(
        330.0,
        top + 225.0,
        18.0,
        TextStyle::label(),
        &[
            format!("No single head does the copying: the best puts {} of its weight", fixed(circuit.best_single(), 2)),
            "there. The symbol to write lies 1, 3, 5, 7, 9 tokens back, further".to_string(),
            "at every step, and a layer-0 head sees only symbols and relative".to_string(),
            "offsets, not which step its query is at. So layer 0 copies symbols".to_string(),
            "into later positions, and layer 1 reads those positions: the".to_string(),
            format!("product of two maps follows both hops, and reaches {}.", fixed(circuit.best_pair(), 2)),
        ],
    );
    svg.finish()
}

/// The thumbnail: the two-hop map (layer 1 × layer 0) with the cells to copy outlined, 300 px
/// wide, text of 13 px.
pub fn render_thumbnail(e: &Evidence) -> String {
    thumbnail(&e.figure)
}

/// [`render_thumbnail`] from the figure's data.
fn thumbnail(figure: &TrainingFigure) -> String {
    let circuit = Circuit::of(figure);
    let labels: Vec<String> = figure.attention_tokens.iter().map(|&t| token_label(t)).collect();
    let cell = 19.0;
    let (gx, gy) = (60.0, 100.0);
    let bottom = gy + labels.len() as f64 * cell;
    let mut svg = Svg::new(300.0, bottom + 62.0, THUMBNAIL_TITLE);
    let lines = [
        "two hops, layer 1 × layer 0:".to_string(),
        format!("{} on the symbols to copy (orange)", fixed(circuit.best_pair(), DECIMALS)),
    ];
    svg.text_lines(20.0, 52.0, 17.0, TextStyle::label().color("#555555"), &lines);
    token_map(&mut svg, (gx, gy), cell, &circuit.composed, &labels, 13.0);
    draw_inline_key(&mut svg, (60.0, bottom + 14.0), 110.0, WEIGHTS, DECIMALS, "weight");
    svg.text(20.0, bottom + 48.0, TextStyle::label().color("#555555"), "rows: query · columns: key");
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use demo_support::check::check_chapter_figure;
    use llm_from_scratch::Tensor;
    use llm_from_scratch::model::Evaluation;

    use crate::{LENGTH, SEPARATOR};

    type Data = (Vec<Checkpoint>, TrainingFigure);

    /// A figure's data without training: two checkpoints and two layers of two heads, one
    /// uniform causal, one reading the previous token.
    fn sample() -> Result<Data, Box<dyn std::error::Error>> {
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
        let causal = (0..n * n).map(|i| if i % n <= i / n { 1.0 / (i / n + 1) as f64 } else { 0.0 });
        let previous = (0..n * n).map(|i| if i % n + 1 == (i / n).max(1) { 1.0 } else { 0.0 });
        let layer = Tensor::new(&[1, 2, n, n], causal.chain(previous).collect())?;
        let figure = TrainingFigure {
            step_losses: (1..=STEPS).map(|s| 3.0 / s as f64).collect(),
            attention_tokens: [vec![1, 2, 3, 4, 5, SEPARATOR], vec![5, 4, 3, 2, 1]].concat(),
            attention_maps: vec![layer.clone(), layer],
        };
        Ok((vec![checkpoint(0, 2.8, 1), checkpoint(STEPS, 0.01, 10)], figure))
    }

    /// Adds 0.5 to element `index` of layer `layer`'s maps.
    fn nudge(d: &mut Data, layer: usize, index: usize) {
        d.1.attention_maps[layer].as_mut_slice()[index] += 0.5;
    }

    /// Well formed, titled, deterministic, and changed by each change of the data it draws.
    #[test]
    fn the_figure_is_well_formed_titled_deterministic_and_follows_the_data() -> Result<(), Box<dyn std::error::Error>> {
        let render = |(checkpoints, figure): &Data| render_figure(checkpoints, figure);
        check_chapter_figure(
            &sample()?,
            render,
            TITLE,
            &[
                &|d: &mut Data| d.1.step_losses[10] = 0.5,
                &|d: &mut Data| d.0[1].held_out.loss = 0.5,
                &|d: &mut Data| nudge(d, 0, 3),   // layer 0, head 0, an off-target cell
                &|d: &mut Data| nudge(d, 1, 200), // layer 1, head 1
                &|d: &mut Data| d.1.attention_tokens[2] = 9,
            ],
        )?;
        let svg = render(&sample()?);
        assert!(svg.contains(">head 1: ") && svg.contains(">layer 1 × layer 0: "), "{svg}");
        Ok(())
    }

    /// The thumbnail: well formed, titled, deterministic, drawn from both layers, no text under 13 px.
    #[test]
    fn the_thumbnail_is_well_formed_titled_deterministic_and_follows_the_data() -> Result<(), Box<dyn std::error::Error>>
    {
        let render = |(_, figure): &Data| thumbnail(figure);
        check_chapter_figure(
            &sample()?,
            render,
            THUMBNAIL_TITLE,
            &[
                &|d: &mut Data| nudge(d, 0, 5 * (2 * LENGTH + 1) + 4), // layer 0, query 5, key 4
                &|d: &mut Data| nudge(d, 1, 5 * (2 * LENGTH + 1) + 2),
                &|d: &mut Data| d.1.attention_tokens[0] = 9,
            ],
        )?;
        let svg = render(&sample()?);
        assert!(svg.contains(r#"width="300.0""#), "{svg}");
        assert!(!svg.contains(r#"font-size="12.0""#), "no text under 13 px");
        Ok(())
    }
}
