//! The chapter's figure: the cache call by call — which absolute positions it holds after the
//! prefill and each decode, how the rolling window drops the oldest, how generation past the
//! capacity resets it — and the cache's length against the tokens seen.

use demo_support::chart::{Area, Axis, LegendEntry, LineChart, Series, Swatch, draw_legend, draw_legend_row};
use demo_support::svg::{Stroke, Svg, TextStyle};
use llm_from_scratch::attention::SlidingWindow;

use crate::{CacheStep, Evidence, GENERATION_CAPACITY, PROMPT, TOKENS, WINDOW};

/// The figure's title.
pub const TITLE: &str = "Chapter 33 — the KV cache: prefill once, then decode token by token";

/// Fill of a position stored by the call itself.
const NEW: &str = "#e69f00";
/// Fill of a position stored by an earlier call.
const KEPT: &str = "#8fbce6";
/// Fill of a position seen but no longer stored.
const DROPPED: &str = "#d9d9d9";

/// Cell sizes and text size of a cache grid.
#[derive(Clone, Copy)]
struct GridStyle {
    cell_w: f64,
    cell_h: f64,
    label_w: f64,
    size: f64,
}

/// The full figure's grids.
const FIGURE: GridStyle = GridStyle { cell_w: 34.0, cell_h: 28.0, label_w: 140.0, size: 12.0 };
/// The thumbnail's grid.
const THUMB: GridStyle = GridStyle { cell_w: 30.0, cell_h: 30.0, label_w: 100.0, size: 13.0 };

/// The window in words.
fn window_words() -> String {
    let before = match WINDOW {
        SlidingWindow::Inclusive(w) => w,
        SlidingWindow::Exclusive(w) => w.saturating_sub(1),
    };
    format!("each query sees itself and the {before} positions before it")
}

/// What call `step` did, in words (`decode` counts the decodes so far).
fn call_words(i: usize, step: &CacheStep) -> String {
    let first = step.input_positions.iter().min().copied().unwrap_or(0);
    let last = step.input_positions.iter().max().copied().unwrap_or(0);
    match (i, step.reset, step.tokens) {
        (_, true, _) => format!("reset, prefill {first}–{last}"),
        (_, _, 1) => format!("decode position {first}"),
        _ => format!("prefill {first}–{last}"),
    }
}

/// One row per call, one column per absolute position `0..positions`.
fn cache_grid(svg: &mut Svg, x: f64, y: f64, title: &str, steps: &[CacheStep], positions: usize, g: GridStyle) {
    if !title.is_empty() {
        svg.text(x, y + 14.0, TextStyle::heading(14.0), title);
    }
    let gx = x + g.label_w;
    svg.text(gx - 8.0, y + 36.0, TextStyle::right().size(g.size).color("#555555"), "position");
    for p in 0..positions {
        svg.text(gx + (p as f64 + 0.5) * g.cell_w, y + 36.0, TextStyle::centered().size(g.size), &p.to_string());
    }
    for (i, step) in steps.iter().enumerate() {
        let cy = y + 44.0 + i as f64 * g.cell_h;
        let label =
            if g.size > FIGURE.size { call_words(i, step).replace(" position", "") } else { call_words(i, step) };
        svg.text(gx - 8.0, cy + g.cell_h / 2.0 + g.size / 3.0, TextStyle::right().size(g.size), &label);
        let seen = step.input_positions.iter().max().map_or(0, |m| m + 1);
        for p in 0..positions {
            let fill = if step.positions.contains(&p) {
                if step.input_positions.contains(&p) { NEW } else { KEPT }
            } else if p < seen {
                DROPPED
            } else {
                "white"
            };
            let cx = gx + p as f64 * g.cell_w;
            svg.rect(cx, cy, g.cell_w, g.cell_h, fill, Some(Stroke::solid("#bbbbbb", 1.0)));
            if step.input_positions.contains(&p) && !step.positions.contains(&p) {
                // fed in the call but already outside the window: used, then not kept
                svg.text(cx + g.cell_w / 2.0, cy + g.cell_h / 2.0 + 4.0, TextStyle::centered().size(11.0), "used");
            }
        }
        if g.size <= FIGURE.size {
            svg.text(
                gx + positions as f64 * g.cell_w + 6.0,
                cy + g.cell_h / 2.0 + 4.0,
                TextStyle::label().size(11.0),
                &format!("{} kept", step.key_shape[2]),
            );
        }
    }
}

/// `(tokens seen, cached positions)` after each call.
fn lengths(steps: &[CacheStep]) -> Vec<(f64, f64)> {
    steps.iter().map(|s| (s.next_position as f64, s.key_shape[2] as f64)).collect()
}

/// The legend of the grids' fills (the first `n` entries).
fn legend(n: usize) -> Vec<LegendEntry> {
    [
        ("stored by this call", NEW),
        ("stored earlier", KEPT),
        ("seen, dropped by the window", DROPPED),
        ("not seen yet", "white"),
    ]
    .into_iter()
    .take(n)
    .map(|(name, color)| LegendEntry { name: name.to_string(), color: color.to_string(), swatch: Swatch::Square })
    .collect()
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 720.0, TITLE);
    let no_window = format!("No window: prefill {PROMPT}, then decode");
    cache_grid(&mut svg, 20.0, 50.0, &no_window, &e.decode_steps, TOKENS, FIGURE);
    cache_grid(&mut svg, 410.0, 50.0, "A window, fed token by token", &e.window_steps, TOKENS, FIGURE);
    draw_legend(&mut svg, 40.0, 230.0, &legend(4));
    svg.text_lines(
        330.0,
        290.0,
        18.0,
        TextStyle::label().size(12.0),
        &[
            format!("Window: {}.", window_words()),
            "The cache keeps 2 positions: the query's own key".to_string(),
            "arrives with it, so 3 keys are visible.".to_string(),
        ],
    );
    cache_grid(
        &mut svg,
        20.0,
        370.0,
        &format!("Generation past the capacity of {GENERATION_CAPACITY} positions, with the window"),
        &e.generation.steps,
        GENERATION_CAPACITY,
        FIGURE,
    );
    LineChart {
        area: Area { x: 530.0, y: 420.0, width: 240.0, height: 220.0 },
        x: Axis::linear("tokens seen (the next position)", 0.0, TOKENS as f64, TOKENS, 0),
        y: Axis::linear("positions in the cache", 0.0, TOKENS as f64, TOKENS, 0),
        series: vec![
            Series::new("no window", 0, lengths(&e.decode_steps)),
            Series::new("with the window", 1, lengths(&e.window_steps)).dashed(),
        ],
    }
    .draw_with_legend(&mut svg, demo_support::chart::Corner::TopLeft);
    svg.text(480.0, 405.0, TextStyle::heading(14.0), "Cache length");
    svg.finish()
}

/// The thumbnail: prefill, then decode, position by position, 300 px wide.
pub fn render_thumbnail(e: &Evidence) -> String {
    let (mut svg, top) = Svg::thumbnail(260.0, TITLE);
    cache_grid(&mut svg, 0.0, top - 14.0, "", &e.decode_steps, TOKENS, THUMB);
    let bottom = top + 30.0 + e.decode_steps.len() as f64 * THUMB.cell_h;
    let entries = legend(2);
    draw_legend_row(&mut svg, 10.0, bottom + 24.0, &entries[..1], THUMB.size);
    draw_legend_row(&mut svg, 10.0, bottom + 46.0, &entries[1..], THUMB.size);
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

    demo_support::chapter_thumbnail_test!(
        crate::learner_evidence(),
        render_thumbnail,
        TITLE,
        [|e: &mut Evidence| e.decode_steps[2].positions = vec![0, 4]]
    );
}
