//! `--figure loss.svg`: training and validation loss against steps, beside the unigram baseline
//! and the uniform guess, drawn with the chapters' shared SVG module.

use demo_support::chart::{Area, Axis, Corner, LineChart, Series};
use demo_support::svg::{Svg, TextStyle};

use crate::EvalPoint;

/// The figure's title.
pub const TITLE: &str = "Chapter 37 — a character-level model learns Cicero: loss against steps";

/// The SVG of `history` beside the `unigram` baseline (if known) and the uniform guess `ln V`.
pub fn loss_svg(history: &[EvalPoint], unigram: Option<f64>, vocabulary: usize) -> String {
    let mut svg = Svg::new(800.0, 470.0, TITLE);
    let last = history.iter().map(|p| p.step).max().unwrap_or(0).max(1) as f64;
    let curve = |loss: fn(&EvalPoint) -> f64| history.iter().map(|p| (p.step as f64, loss(p))).collect();
    let flat = |value: f64| vec![(0.0, value), (last, value)];
    let uniform = (vocabulary.max(1) as f64).ln();
    // two nats of headroom above the highest line keep the legend clear of it
    let highest = history.iter().map(|p| p.train_loss.max(p.validation_loss)).fold(uniform, f64::max);
    let top = if highest.is_finite() { highest.ceil() + 2.0 } else { 1.0 };
    let mut series = vec![
        Series::new("training windows", 0, curve(|p| p.train_loss)),
        Series::new("validation (last 10 %, never trained on)", 1, curve(|p| p.validation_loss)),
        Series { markers: false, ..Series::new(&format!("uniform guess ln {vocabulary}"), 7, flat(uniform)).dashed() },
    ];
    if let Some(u) = unigram.filter(|u| u.is_finite()) {
        series.push(Series {
            markers: false,
            ..Series::new("unigram baseline (character frequencies)", 2, flat(u)).dashed()
        });
    }
    LineChart {
        area: Area { x: 80.0, y: 60.0, width: 690.0, height: 300.0 },
        x: Axis::linear("optimiser step", 0.0, last, 8, 0),
        y: Axis::linear("cross-entropy (nats per character)", 0.0, top, top as usize, 0),
        series,
    }
    .draw_with_legend(&mut svg, Corner::TopRight);
    let caption = [
        "Each point is the mean loss over fixed windows of the text; below the unigram line the model",
        "predicts more than how often each character occurs: it has learnt spelling and short words.",
    ];
    svg.text_lines(20.0, 420.0, 18.0, TextStyle::label(), &caption);
    svg.finish()
}

#[cfg(test)]
mod tests {
    use demo_support::check::check_chapter_figure;

    use super::*;

    fn point(step: usize, train_loss: f64, validation_loss: f64) -> EvalPoint {
        EvalPoint { step, lr: 0.0, train_loss, validation_loss }
    }

    /// Well formed, titled, deterministic, and changed by each change of the data it draws.
    #[test]
    fn the_figure_is_well_formed_titled_deterministic_and_follows_the_data() -> Result<(), Box<dyn std::error::Error>> {
        type Data = (Vec<EvalPoint>, Option<f64>);
        let data: Data = (vec![point(0, 4.1, 4.1), point(100, 2.5, 2.6), point(200, 2.0, 2.2)], Some(2.9));
        let render = |(history, unigram): &Data| loss_svg(history, *unigram, 57);
        check_chapter_figure(
            &data,
            render,
            TITLE,
            &[&|d: &mut Data| d.0[1].validation_loss = 3.0, &|d: &mut Data| d.1 = Some(3.5)],
        )?;
        assert!(render(&data).contains("unigram baseline"));
        Ok(())
    }
}
