//! `--figure loss.svg`: training and validation loss against steps, as a plain SVG document.
//!
//! Self-contained on purpose (no plotting crate): a frame, ticks, two polylines, the unigram
//! baseline as a dashed line, a title, axis labels and a legend. Coordinates are printed with two
//! decimals, so the same history always gives the same bytes.

use crate::EvalPoint;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 52.0;

/// The SVG of `history` (and of the `unigram` baseline, if known).
pub fn loss_svg(history: &[EvalPoint], unigram: Option<f64>) -> String {
    let max_step = history.iter().map(|p| p.step).max().unwrap_or(0).max(1) as f64;
    let losses = history.iter().flat_map(|p| [p.train_loss, p.validation_loss]).chain(unigram);
    let finite: Vec<f64> = losses.filter(|v| v.is_finite()).collect();
    let top = finite.iter().copied().fold(1.0f64, f64::max).ceil();
    let bottom = finite.iter().copied().fold(top, f64::min).floor().max(0.0).min(top - 1.0);
    let x = |step: f64| LEFT + step / max_step * (WIDTH - LEFT - RIGHT);
    let y = |loss: f64| TOP + (top - loss.clamp(bottom, top)) / (top - bottom) * (HEIGHT - TOP - BOTTOM);
    let polyline = |value: fn(&EvalPoint) -> f64, colour: &str| {
        let points: Vec<String> =
            history.iter().map(|p| format!("{:.2},{:.2}", x(p.step as f64), y(value(p)))).collect();
        format!(r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#, points.join(" "))
    };
    let mut svg = vec![
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        ),
        format!(r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#),
        format!(
            r#"<text x="{:.2}" y="22" text-anchor="middle" font-size="15">Chapter 37: character-level loss on Cicero, De finibus I</text>"#,
            WIDTH / 2.0
        ),
        format!(
            r#"<rect x="{LEFT}" y="{TOP}" width="{:.2}" height="{:.2}" fill="none" stroke="black"/>"#,
            WIDTH - LEFT - RIGHT,
            HEIGHT - TOP - BOTTOM
        ),
    ];
    // five step ticks, one loss tick per nat
    for i in 0..=4 {
        let step = (max_step * f64::from(i) / 4.0).round();
        let px = x(step);
        svg.push(format!(
            r#"<line x1="{px:.2}" y1="{:.2}" x2="{px:.2}" y2="{:.2}" stroke="black"/><text x="{px:.2}" y="{:.2}" text-anchor="middle">{step}</text>"#,
            HEIGHT - BOTTOM,
            HEIGHT - BOTTOM + 5.0,
            HEIGHT - BOTTOM + 18.0
        ));
    }
    let mut loss = bottom;
    while loss <= top {
        let py = y(loss);
        svg.push(format!(
            r##"<line x1="{:.2}" y1="{py:.2}" x2="{LEFT}" y2="{py:.2}" stroke="black"/><line x1="{LEFT}" y1="{py:.2}" x2="{:.2}" y2="{py:.2}" stroke="#dddddd"/><text x="{:.2}" y="{:.2}" text-anchor="end">{loss}</text>"##,
            LEFT - 5.0,
            WIDTH - RIGHT,
            LEFT - 8.0,
            py + 4.0
        ));
        loss += 1.0;
    }
    svg.push(format!(
        r#"<text x="{:.2}" y="{:.2}" text-anchor="middle">optimiser step</text>"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        HEIGHT - 12.0
    ));
    svg.push(format!(
        r#"<text x="16" y="{:.2}" text-anchor="middle" transform="rotate(-90 16 {:.2})">cross-entropy (nats per character)</text>"#,
        TOP + (HEIGHT - TOP - BOTTOM) / 2.0,
        TOP + (HEIGHT - TOP - BOTTOM) / 2.0
    ));
    let mut legend = vec![("#1f77b4", "train (fixed windows)", ""), ("#d62728", "validation (last 10 %)", "")];
    if let Some(u) = unigram {
        let py = y(u);
        svg.push(format!(
            r##"<line x1="{LEFT}" y1="{py:.2}" x2="{:.2}" y2="{py:.2}" stroke="#7f7f7f" stroke-dasharray="6 4"/>"##,
            WIDTH - RIGHT
        ));
        legend.push(("#7f7f7f", "unigram baseline", r#" stroke-dasharray="6 4""#));
    }
    svg.push(polyline(|p| p.train_loss, "#1f77b4"));
    svg.push(polyline(|p| p.validation_loss, "#d62728"));
    for (i, (colour, label, dash)) in legend.iter().enumerate() {
        let (lx, ly) = (WIDTH - RIGHT - 190.0, TOP + 18.0 + 18.0 * i as f64);
        svg.push(format!(
            r#"<line x1="{lx:.2}" y1="{ly:.2}" x2="{:.2}" y2="{ly:.2}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.2}" y="{:.2}">{label}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0
        ));
    }
    svg.push("</svg>".to_string());
    svg.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figure_is_deterministic_and_labelled() {
        let point = |step, train_loss, validation_loss| EvalPoint { step, lr: 0.0, train_loss, validation_loss };
        let history = [point(0, 4.1, 4.1), point(100, 2.5, 2.6), point(200, 2.0, 2.2)];
        let svg = loss_svg(&history, Some(2.9));
        assert_eq!(svg, loss_svg(&history, Some(2.9)));
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
        for label in ["Chapter 37", "optimiser step", "nats per character", "validation (last 10 %)", "unigram"] {
            assert!(svg.contains(label), "{label}");
        }
        assert_eq!(svg.matches("<polyline").count(), 2);
        // no history, no baseline: still a valid (empty) frame
        assert!(loss_svg(&[], None).contains("</svg>"));
    }
}
