//! The chapter's figure: one token through the latent path at DeepSeek-V2-like sizes (what is
//! cached, what is rebuilt and absorbed, and the decoupled RoPE key beside the latent), and the
//! cache per token of latent, multi-head and grouped-query attention on a linear scale with
//! their ratios.

use demo_support::chart::{Area, LegendEntry, Swatch, draw_legend_row, text_width};
use demo_support::fmt::{bytes, fixed};
use demo_support::report::fmt_thousands;
use demo_support::svg::{Stroke, Svg, TextStyle, color};

use crate::{CACHE_TOKENS, Evidence, deepseek_like_config};

/// The figure's title.
pub const TITLE: &str = "Chapter 35 — multi-head latent attention: cache a latent, absorb the rest";

/// Fill of what the cache stores.
const CACHED: &str = "#c7e9c0";
/// Outline of what the cache stores.
const CACHED_LINE: &str = "#238b45";
/// Fill of what is computed and never stored.
const TRANSIENT: &str = "#ffffff";

/// How a box of the diagram looks.
#[derive(Clone, Copy)]
enum Kind {
    /// The input and the query side: plain.
    Plain,
    /// Stored in the cache: green.
    Cached,
    /// Rebuilt and absorbed, never stored: dashed.
    Absorbed,
}

/// A box of the diagram with a bold name and its width below it, text `size` pixels tall.
fn node(svg: &mut Svg, area: Area, kind: Kind, name: &str, width: &str, size: f64) {
    let (fill, stroke) = match kind {
        Kind::Plain => ("#f0f0f0", Stroke::solid("#666666", 1.0)),
        Kind::Cached => (CACHED, Stroke::solid(CACHED_LINE, 2.0)),
        Kind::Absorbed => (TRANSIENT, Stroke::dashed("#666666", 1.5)),
    };
    svg.rect(area.x, area.y, area.width, area.height, fill, Some(stroke));
    let style = TextStyle { bold: true, ..TextStyle::centered().size(size) };
    svg.text(area.center_x(), area.center_y() - 3.0, style, name);
    svg.text(area.center_x(), area.center_y() + size + 1.0, TextStyle::centered().size(size), width);
}

/// An arrow from the right edge of `from` to the left edge of `to`, `label` above its middle.
fn link(svg: &mut Svg, from: Area, to: Area, label: &str, size: f64) {
    let (x1, y1, x2, y2) = (from.right(), from.center_y(), to.x - 2.0, to.center_y());
    svg.arrow(x1, y1, x2, y2, Stroke::solid("#444444", 1.5));
    if !label.is_empty() {
        // above the line on the side where it runs lower: left of a rising arrow, right of a
        // falling one
        let (mx, my) = ((x1 + x2) / 2.0, (y1 + y2) / 2.0);
        let style = if y2 < y1 { TextStyle::right() } else { TextStyle::label() };
        let dx = if y2 < y1 { -4.0 } else { 6.0 };
        svg.text(mx + dx, my - 6.0, style.size(size).color("#444444"), label);
    }
}

/// The legend of the diagram's boxes.
fn kinds_legend(cached: usize) -> Vec<LegendEntry> {
    vec![
        LegendEntry {
            name: format!("cached: {cached} numbers per token"),
            color: CACHED_LINE.to_string(),
            swatch: Swatch::Square,
        },
        LegendEntry {
            name: "rebuilt and absorbed, never stored".to_string(),
            color: "#666666".to_string(),
            swatch: Swatch::Line { dashed: true },
        },
    ]
}

/// The latent path of one token at DeepSeek-V2-like sizes, with what each piece becomes.
fn path_panel(svg: &mut Svg, e: &Evidence, y: f64) {
    let c = deepseek_like_config();
    svg.text(20.0, y, TextStyle::heading(15.0), "One token's keys and values, at DeepSeek-V2-like sizes");
    let size = 13.0;
    let x = Area { x: 20.0, y: y + 75.0, width: 110.0, height: 50.0 };
    let latent = Area { x: 215.0, y: y + 30.0, width: 150.0, height: 50.0 };
    let rope = Area { x: 215.0, y: y + 135.0, width: 150.0, height: 50.0 };
    let keys = Area { x: 450.0, y: y + 20.0, width: 150.0, height: 44.0 };
    let values = Area { x: 450.0, y: y + 84.0, width: 150.0, height: 44.0 };
    let per_head = format!("{} heads × {}", c.heads, c.head_width);
    node(svg, x, Kind::Plain, "token x_n", &format!("width d = {}", c.model_width), size);
    node(svg, latent, Kind::Cached, "latent c_n", &format!("width d_c = {}", c.latent_width), size);
    node(svg, rope, Kind::Cached, "RoPE key k_R,n", &format!("width d_r = {}", c.rope_width), size);
    node(svg, keys, Kind::Absorbed, "keys k_h,n", &per_head, size);
    node(svg, values, Kind::Absorbed, "values v_h,n", &per_head, size);
    link(svg, x, latent, "· W_DKV", size);
    link(svg, x, rope, "· W_KR, rotate", size);
    link(svg, latent, keys, "· A_h", size);
    link(svg, latent, values, "· B_h", size);
    let note = TextStyle::label().size(12.0);
    svg.text_lines(
        612.0,
        keys.y + 12.0,
        15.0,
        note,
        &[
            "absorbed into the query:".to_string(),
            format!("q·A_hᵀ (width {})", c.latent_width),
            "scores c_n directly".into(),
        ],
    );
    svg.text_lines(612.0, values.y + 20.0, 15.0, note, &["absorbed into the output:", "B_h·W_O,h is one matrix"]);
    svg.text_lines(
        390.0,
        rope.y + 12.0,
        16.0,
        note,
        &[
            format!("shared by all {} heads, scored against a rotated query q_R.", c.heads),
            "RoPE cannot go on the rebuilt key: (R_m q)·(R_n A_hᵀ c_n)".to_string(),
            "puts R_(n−m) between q and c, which no fixed matrix absorbs.".to_string(),
        ],
    );
    draw_legend_row(svg, 20.0, y + 225.0, &kinds_legend(e.config_cached_per_token), 13.0);
}

/// `mla(d_c:512,d_r:64)` in words: `latent attention, d_c = 512, d_r = 64`.
fn layout_words(code: &str) -> String {
    let (kind, rest) = code.split_once('(').unwrap_or((code, ""));
    let kind = match kind {
        "mla" => "latent attention",
        "mha" => "multi-head attention",
        "gqa" => "grouped-query attention",
        other => other,
    };
    let sizes: Vec<String> =
        rest.trim_end_matches(')').split(',').filter(|p| !p.is_empty()).map(|p| p.replacen(':', " = ", 1)).collect();
    if sizes.is_empty() { kind.to_string() } else { format!("{kind}, {}", sizes.join(", ")) }
}

/// The cache per token of each layout as horizontal bars on a linear scale, each labelled with its
/// numbers, its bytes at [`CACHE_TOKENS`] tokens and its ratio to the latent cache.
fn cache_panel(svg: &mut Svg, e: &Evidence, y: f64) {
    svg.text(20.0, y, TextStyle::heading(15.0), "Cache per token and layer (linear scale)");
    svg.text(
        20.0,
        y + 20.0,
        TextStyle::label().size(12.0),
        &format!("numbers per token; bytes for {} tokens in fp16", fmt_thousands(CACHE_TOKENS as u128)),
    );
    let largest = e.per_token.iter().map(|p| p.1).max().unwrap_or(1).max(1) as f64;
    let latent = e.per_token.first().map_or(1, |p| p.1.max(1)) as f64;
    let (left, width) = (20.0, 500.0);
    for (i, &(code, numbers, stored)) in e.per_token.iter().enumerate() {
        let top = y + 40.0 + i as f64 * 58.0;
        svg.text(left, top + 13.0, TextStyle::label(), &layout_words(code));
        let length = (numbers as f64 / largest * width).max(2.0);
        let fill = if i == 0 { CACHED_LINE } else { color(0) };
        svg.rect(left, top + 20.0, length, 22.0, fill, None);
        let ratio =
            if i == 0 { String::new() } else { format!(", {}× the latent", fixed(numbers as f64 / latent, 1)) };
        let label = format!("{} numbers = {}{ratio}", fmt_thousands(numbers), bytes(stored));
        // the label after a short bar, inside a long one
        if text_width(&label, 13.0) + length + 14.0 < 790.0 - left {
            svg.text(left + length + 8.0, top + 36.0, TextStyle::label(), &label);
        } else {
            svg.text(left + length - 8.0, top + 36.0, TextStyle::right().color("white"), &label);
        }
    }
    let bottom = y + 40.0 + e.per_token.len() as f64 * 58.0;
    svg.text(
        20.0,
        bottom + 14.0,
        TextStyle::label().size(12.0),
        &format!(
            "The small layer of this chapter caches {} numbers for 2 × 6 tokens; multi-head attention would cache {}.",
            e.decodes.first().map_or(0, |d| d.3),
            e.mha_stored
        ),
    );
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 590.0, TITLE);
    path_panel(&mut svg, e, 62.0);
    cache_panel(&mut svg, e, 340.0);
    svg.finish()
}

/// The thumbnail: the latent path, what is cached and what is absorbed, 300 px wide.
pub fn render_thumbnail(e: &Evidence) -> String {
    let c = deepseek_like_config();
    let (mut svg, top) = Svg::thumbnail(350.0, TITLE);
    let size = 13.0;
    let x = Area { x: 10.0, y: top + 62.0, width: 62.0, height: 44.0 };
    let latent = Area { x: 112.0, y: top + 22.0, width: 62.0, height: 44.0 };
    let rope = Area { x: 112.0, y: top + 110.0, width: 62.0, height: 44.0 };
    let keys = Area { x: 216.0, y: top + 4.0, width: 76.0, height: 44.0 };
    let values = Area { x: 216.0, y: top + 62.0, width: 76.0, height: 44.0 };
    let per_head = format!("{}×{}", c.heads, c.head_width);
    node(&mut svg, x, Kind::Plain, "x", &c.model_width.to_string(), size);
    node(&mut svg, latent, Kind::Cached, "c", &c.latent_width.to_string(), size);
    node(&mut svg, rope, Kind::Cached, "k_R", &c.rope_width.to_string(), size);
    node(&mut svg, keys, Kind::Absorbed, "K", &per_head, size);
    node(&mut svg, values, Kind::Absorbed, "V", &per_head, size);
    for (from, to) in [(x, latent), (x, rope), (latent, keys), (latent, values)] {
        link(&mut svg, from, to, "", size);
    }
    let legend = kinds_legend(e.config_cached_per_token);
    let below = rope.bottom() + 26.0;
    draw_legend_row(&mut svg, 10.0, below, &legend[..1], size);
    draw_legend_row(&mut svg, 10.0, below + 20.0, &legend[1..], size);
    let mha = e.per_token.get(1).map_or(0, |p| p.1);
    let latent_numbers = e.per_token.first().map_or(1, |p| p.1.max(1));
    let ratio = fixed(mha as f64 / latent_numbers as f64, 1);
    svg.text_lines(
        10.0,
        below + 46.0,
        18.0,
        TextStyle::label(),
        &["multi-head attention caches".to_string(), format!("{} numbers, {ratio}× more", fmt_thousands(mha))],
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
        [
            |e: &mut Evidence| e.per_token[0].1 = 1024,
            |e: &mut Evidence| e.per_token[2].2 *= 2,
            |e: &mut Evidence| e.config_cached_per_token = 7,
            |e: &mut Evidence| e.mha_stored = 1,
        ]
    );

    demo_support::chapter_thumbnail_test!(
        crate::learner_evidence(),
        render_thumbnail,
        TITLE,
        [|e: &mut Evidence| e.per_token[1].1 = 1024, |e: &mut Evidence| e.config_cached_per_token = 7]
    );

    #[test]
    fn layouts_are_named_in_words() {
        assert_eq!(layout_words("mla(d_c:512,d_r:64)"), "latent attention, d_c = 512, d_r = 64");
        assert_eq!(layout_words("gqa(G:8,d_h:128)"), "grouped-query attention, G = 8, d_h = 128");
        assert_eq!(layout_words("other"), "other");
    }
}
