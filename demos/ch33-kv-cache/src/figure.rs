//! The chapter's figure: the cache call by call — which absolute positions it holds after the
//! prefill and each decode, how the rolling window drops the oldest, how generation past the
//! capacity resets it — and the cache's length against the tokens seen.

use demo_support::chart::{Area, Axis, LegendEntry, LineChart, Series, Swatch, draw_legend};
use demo_support::svg::{Stroke, Svg, TextStyle};

use crate::{CacheStep, Evidence, GENERATION_CAPACITY, PROMPT, TOKENS};

/// The figure's title.
pub const TITLE: &str = "Chapter 33 — the KV cache: prefill once, then decode token by token";

/// Fill of a position stored by the call itself.
const NEW: &str = "#e69f00";
/// Fill of a position stored by an earlier call.
const KEPT: &str = "#8fbce6";
/// Fill of a position seen but no longer stored.
const DROPPED: &str = "#d9d9d9";

const CELL_W: f64 = 40.0;
const CELL_H: f64 = 28.0;
const LABEL_W: f64 = 95.0;

/// One row per call, one column per absolute position `0..positions`.
fn cache_grid(svg: &mut Svg, x: f64, y: f64, title: &str, steps: &[CacheStep], positions: usize) {
    svg.text(x, y + 14.0, TextStyle::heading(14.0), title);
    let gx = x + LABEL_W;
    for p in 0..positions {
        svg.text(gx + (p as f64 + 0.5) * CELL_W, y + 36.0, TextStyle::centered().size(12.0), &format!("p{p}"));
    }
    let mut decode = 0;
    for (i, step) in steps.iter().enumerate() {
        let cy = y + 44.0 + i as f64 * CELL_H;
        let label = match (i, step.reset) {
            (_, true) => "reset, prefill".to_string(),
            (0, _) if step.tokens > 1 => format!("prefill {}", step.tokens),
            _ => {
                decode += 1;
                format!("{} {decode}", if step.tokens > 1 { "chunk" } else { "decode" })
            }
        };
        svg.text(gx - 8.0, cy + CELL_H / 2.0 + 4.0, TextStyle::right().size(12.0), &label);
        let seen = step.input_positions.iter().max().map_or(0, |m| m + 1);
        for p in 0..positions {
            let fill = if step.positions.contains(&p) {
                if step.input_positions.contains(&p) { NEW } else { KEPT }
            } else if p < seen {
                DROPPED
            } else {
                "white"
            };
            let cx = gx + p as f64 * CELL_W;
            svg.rect(cx, cy, CELL_W, CELL_H, fill, Some(Stroke::solid("#bbbbbb", 1.0)));
            if step.input_positions.contains(&p) && !step.positions.contains(&p) {
                // fed in the call but already outside the window: used, then not kept
                svg.text(cx + CELL_W / 2.0, cy + CELL_H / 2.0 + 4.0, TextStyle::centered().size(11.0), "used");
            }
        }
        svg.text(
            gx + positions as f64 * CELL_W + 6.0,
            cy + CELL_H / 2.0 + 4.0,
            TextStyle::label().size(11.0),
            &format!("len {}", step.key_shape[2]),
        );
    }
}

/// `(tokens seen, cached positions)` after each call.
fn lengths(steps: &[CacheStep]) -> Vec<(f64, f64)> {
    steps.iter().map(|s| (s.next_position as f64, s.key_shape[2] as f64)).collect()
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 700.0, TITLE);
    cache_grid(&mut svg, 20.0, 50.0, &format!("No window: prefill {PROMPT}, decode 1, 1, 1"), &e.decode_steps, TOKENS);
    cache_grid(&mut svg, 400.0, 50.0, "Window inclusive(2): token by token", &e.window_steps, TOKENS);
    let legend = [
        ("stored by this call", NEW),
        ("stored earlier", KEPT),
        ("seen, dropped by the window", DROPPED),
        ("not seen yet", "white"),
    ]
    .map(|(name, color)| LegendEntry { name: name.to_string(), color: color.to_string(), swatch: Swatch::Square });
    draw_legend(&mut svg, 40.0, 230.0, &legend);
    svg.text_lines(
        330.0,
        285.0,
        18.0,
        TextStyle::label().size(12.0),
        &[
            format!("decode equals the full pass within 1e-12: {}", e.decode_within),
            format!("windowed decode equals the windowed full pass: {}", e.window_decode_within),
            "the window keeps 2 positions: the query's own key".to_string(),
            "arrives with it, so 3 keys are visible".to_string(),
        ],
    );
    cache_grid(
        &mut svg,
        20.0,
        370.0,
        &format!("Generation past capacity {GENERATION_CAPACITY}, window inclusive(2)"),
        &e.generation.steps,
        GENERATION_CAPACITY,
    );
    LineChart {
        area: Area { x: 520.0, y: 400.0, width: 250.0, height: 220.0 },
        x: Axis::linear("tokens seen (next_position)", 0.0, TOKENS as f64, TOKENS, 0),
        y: Axis::linear("positions in the cache", 0.0, TOKENS as f64, TOKENS, 0),
        series: vec![
            Series::new("no window", 0, lengths(&e.decode_steps)),
            Series::new("window (2)", 1, lengths(&e.window_steps)).dashed(),
        ],
    }
    .draw_with_legend(&mut svg, demo_support::chart::Corner::TopLeft);
    svg.text(470.0, 385.0, TextStyle::heading(14.0), "Cache length");
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
            |e: &mut Evidence| e.window_steps[3].positions = vec![0, 3],
            |e: &mut Evidence| e.generation.steps[4].reset = false,
        ]
    );
}
