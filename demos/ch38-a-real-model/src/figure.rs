//! `--figure PATH`: where a real model's heads look. Three heat maps — one head of an early, a
//! middle and a late block — over the tokens of [`crate::SENTENCE`], and a bar chart of the share
//! of attention each block gives the first token (the attention sink).

use demo_support::chart::{Area, Axis, BarChart, BarSeries, text_width};
use demo_support::fmt::fixed;
use demo_support::heat::{HeatMap, Shading, draw_colour_scale, draw_inline_key};
use demo_support::svg::{Stroke, Svg, TextStyle};

use crate::Evidence;

/// The figure's title.
pub const TITLE: &str = "Chapter 38 — where a pretrained model's attention goes";
/// `(layer, head)` of the three heat maps: early, middle, late.
pub const HEADS: [(usize, usize); 3] = [(1, 2), (15, 6), (29, 1)];

/// Attention weights: white 0 to dark blue 1.
const WEIGHTS: Shading = Shading::Sequential { min: 0.0, max: 1.0 };
/// Width of a cell of the heat maps.
const CELL: f64 = 19.0;
/// Room above a grid for its column labels, written upwards.
const COLUMN_LABELS: f64 = 80.0;

/// The height a map of `t` tokens takes: title, column labels, grid, the line below.
fn map_height(t: usize) -> f64 {
    COLUMN_LABELS + 20.0 + t as f64 * CELL + 20.0
}

/// The mean weight a head's `t × t` map gives token 0 over the queries from position 1 on
/// (position 0 can only see itself).
fn sink_share(weights: &[f64], t: usize) -> f64 {
    weights.chunks(t.max(1)).skip(1).map(|row| row[0]).sum::<f64>() / (t.max(2) - 1) as f64
}

/// The `t × t` map of head `head` of layer `layer` (`None` if the evidence has no such head).
fn head_weights(e: &Evidence, (layer, head): (usize, usize)) -> Option<&[f64]> {
    let t = e.attention_tokens().len();
    e.attention.get(layer).and_then(|w| w.get(head * t * t..(head + 1) * t * t))
}

/// Draws `weights` as a grid of `cell`-pixel cells, the future masked, with the tokens written at
/// `size` pixels to the left of the rows and upwards above the columns; `(x, y)` is the top left
/// corner of the row labels' column at the height of the grid's top. Returns the grid's top left
/// corner.
fn token_grid(
    svg: &mut Svg,
    tokens: &[String],
    weights: &[f64],
    (x, y): (f64, f64),
    cell: f64,
    size: f64,
) -> (f64, f64) {
    let t = tokens.len();
    let labels = tokens.iter().map(|l| text_width(l, size)).fold(0.0, f64::max) + 10.0;
    let cells = weights
        .chunks(t.max(1))
        .enumerate()
        .map(|(q, row)| row.iter().enumerate().map(|(k, &w)| (k <= q).then_some(w)).collect());
    let map = HeatMap {
        x: x + labels - 10.0, // without row labels the map keeps 10 px for them
        y: y - 40.0,
        cell_width: cell,
        cell_height: cell,
        title: String::new(),
        row_labels: Vec::new(),
        col_labels: Vec::new(),
        cells: cells.collect(),
        shading: WEIGHTS,
        decimals: 2,
        masked_label: String::new(),
        cell_labels: false,
    };
    map.draw(svg);
    let (gx, gy) = (map.grid_x(), map.grid_y());
    for (i, token) in tokens.iter().enumerate() {
        let middle = (i as f64 + 0.5) * cell;
        svg.text(gx - 6.0, gy + middle + size * 0.35, TextStyle::right().size(size), token);
        // written upwards, ending just above the grid
        let up = gy - 6.0 - text_width(token, size) / 2.0;
        svg.vertical_text(gx + middle + size * 0.35, up, TextStyle::label().size(size), token);
    }
    (gx, gy)
}

/// Draws head `head` of layer `layer` with its title at `(x, y)`, the tokens on both axes and a
/// colour key to its right (nothing if the evidence has no such head).
fn head_map(svg: &mut Svg, e: &Evidence, (layer, head): (usize, usize), x: f64, y: f64) {
    let tokens = e.attention_tokens();
    let t = tokens.len();
    let Some(weights) = head_weights(e, (layer, head)) else { return };
    let title = format!("block {layer}, head {head}: {} of the weight on token 0", fixed(sink_share(weights, t), 2));
    svg.text(x, y + 14.0, TextStyle::heading(13.0), &title);
    let (gx, gy) = token_grid(svg, tokens, weights, (x, y + COLUMN_LABELS + 20.0), CELL, 12.0);
    let height = t as f64 * CELL;
    draw_colour_scale(svg, gx + t as f64 * CELL + 12.0, gy, height, WEIGHTS, 2, "weight");
    svg.text(gx, gy + height + 16.0, TextStyle::label().size(11.0).color("#555555"), "rows: query · columns: key");
}

/// The chapter's figure.
pub fn render_svg(e: &Evidence) -> String {
    let t = e.attention_tokens().len();
    let (top, map) = (90.0, map_height(t));
    let second = top + map + 25.0;
    let area = Area { x: 80.0, y: second + map + 60.0, width: 690.0, height: 200.0 };
    let mut svg = Svg::new(800.0, area.bottom() + 60.0, TITLE);
    let intro = [
        format!("SmolLM2-135M-Instruct reading {:?}: one row per", crate::SENTENCE),
        "query token, one column per key it may see (grey: the future, masked); a space is shown as ␣.".to_string(),
    ];
    svg.text_lines(20.0, 56.0, 17.0, TextStyle::label().size(13.0), &intro);
    head_map(&mut svg, e, HEADS[0], 15.0, top);
    head_map(&mut svg, e, HEADS[1], 405.0, top);
    head_map(&mut svg, e, HEADS[2], 15.0, second);
    let caption = [
        "Block 1, head 2 looks at the previous token",
        "(the line just below the diagonal).",
        "Block 15, head 6 puts nearly all of every row",
        "on column 0: the first token, whatever it",
        "says, has become a sink. Block 29, head 1",
        "splits between the sink and the query itself.",
        "",
        "Softmax must hand out all of a row's weight.",
        "A head with nothing to fetch parks it on a",
        "token every query can see, whose value adds",
        "little to the output. Chapter 34 gave attention",
        "a sink logit for this; this model, trained",
        "without one, made the first token its sink.",
    ];
    svg.text_lines(405.0, second + 40.0, 19.0, TextStyle::label().size(14.0), &caption);
    let shares = e.sink_shares();
    let heading = "Share of attention on token 0, per block (mean over heads and query positions 1…)";
    svg.text(20.0, area.y - 30.0, TextStyle::heading(13.0), heading);
    BarChart {
        area,
        categories: (0..shares.len()).map(|l| l.to_string()).collect(),
        x_label: "block (0 = first, next to the embedding)".to_string(),
        y: Axis::linear("share on token 0", 0.0, 1.0, 4, 2),
        series: vec![BarSeries::new("share of attention on token 0", 0, shares, Vec::new())],
    }
    .draw_without_legend(&mut svg);
    // what an even spread over the visible tokens would give token 0
    let even = (1..t).map(|q| 1.0 / (q + 1) as f64).sum::<f64>() / (t.max(2) - 1) as f64;
    let y = area.bottom() - even * area.height;
    let red = "#d62728";
    svg.line(area.x, y, area.right(), y, Stroke::dashed(red, 2.0));
    svg.line(area.x, area.y - 12.0, area.x + 30.0, area.y - 12.0, Stroke::dashed(red, 2.0));
    let note = format!("what an even spread over the visible tokens would give: {}", fixed(even, 2));
    svg.text(area.x + 38.0, area.y - 8.0, TextStyle::label().size(12.0).color(red), &note);
    svg.finish()
}

/// The thumbnail's title (short enough for its 300 px).
pub const THUMBNAIL_TITLE: &str = "Chapter 38 — a real model";

/// The thumbnail: the attention sink of [`HEADS`]`[1]` over the sentence's tokens, 300 px wide,
/// text of 13 px, with a colour key below.
pub fn render_thumbnail(e: &Evidence) -> String {
    let tokens = e.attention_tokens();
    let t = tokens.len();
    let cell = (200.0 / t.max(1) as f64).min(16.0);
    let top = 148.0;
    let bottom = top + t as f64 * cell;
    let mut svg = Svg::new(300.0, bottom + 66.0, THUMBNAIL_TITLE);
    let (layer, head) = HEADS[1];
    let share = head_weights(e, HEADS[1]).map_or(0.0, |w| sink_share(w, t));
    let lines =
        [format!("SmolLM2, block {layer}, head {head}:"), format!("{} of the weight on token 0", fixed(share, 2))];
    svg.text_lines(20.0, 52.0, 17.0, TextStyle::label().color("#555555"), &lines);
    if let Some(weights) = head_weights(e, HEADS[1]) {
        token_grid(&mut svg, tokens, weights, (14.0, top), cell, 13.0);
    }
    draw_inline_key(&mut svg, (60.0, bottom + 16.0), 110.0, WEIGHTS, 2, "weight");
    svg.text(20.0, bottom + 52.0, TextStyle::label().color("#555555"), "rows: query · columns: key");
    svg.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use demo_support::check::check_chapter_figure;
    use llm_from_scratch::model::DecoderConfig;

    use super::*;
    use crate::{FileSummary, PromptRun};

    /// Thirty layers of nine heads over three tokens, every query on token 0.
    fn evidence() -> Evidence {
        let sink = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0].repeat(9);
        let prompt = PromptRun {
            name: "sentence",
            text: "a b c".into(),
            ids: vec![1, 2, 3],
            tokens: vec!["a".into(), "␣b".into(), "␣c".into()],
            top: Vec::new(),
            continuation: None,
        };
        let file = FileSummary {
            name: "x".into(),
            architecture: "llama".into(),
            bytes: 0,
            tensor_types: BTreeMap::new(),
            chat_template_matches: true,
        };
        Evidence {
            file,
            config: DecoderConfig::new(4, 18, 30, 9),
            parameters: 0,
            prompts: vec![prompt],
            rope_difference: 0.0,
            cache_difference: 0.0,
            attention: vec![sink; 30],
        }
    }

    /// Well formed, titled, deterministic, and changed by each change of the data it draws.
    #[test]
    fn the_figure_is_well_formed_titled_deterministic_and_follows_the_data() -> Result<(), Box<dyn std::error::Error>> {
        check_chapter_figure(
            &evidence(),
            render_svg,
            TITLE,
            &[
                &|e: &mut Evidence| e.attention[15][6 * 9 + 4] = 0.5, // a cell of block 15, head 6
                &|e: &mut Evidence| e.attention[7][3] = 0.0,
                &|e: &mut Evidence| e.prompts[0].tokens[1] = "␣z".into(),
            ],
        )?;
        let svg = render_svg(&evidence());
        assert!(svg.contains("block 29, head 1: 1.00 of the weight on token 0"), "{svg}");
        assert_eq!(evidence().sink_shares(), vec![1.0; 30]);
        Ok(())
    }

    /// The thumbnail: well formed, titled, deterministic, drawn from the sink head, no text
    /// under 13 px.
    #[test]
    fn the_thumbnail_is_well_formed_titled_deterministic_and_follows_the_data() -> Result<(), Box<dyn std::error::Error>>
    {
        check_chapter_figure(
            &evidence(),
            render_thumbnail,
            THUMBNAIL_TITLE,
            &[
                &|e: &mut Evidence| e.attention[15][6 * 9 + 4] = 0.5, // a cell of block 15, head 6
                &|e: &mut Evidence| e.prompts[0].tokens[1] = "␣z".into(),
            ],
        )?;
        let svg = render_thumbnail(&evidence());
        assert!(svg.contains(r#"width="300.0""#) && svg.contains(">1.00 of the weight on token 0<"), "{svg}");
        assert!(!svg.contains(r#"font-size="12.0""#) && !svg.contains(r#"font-size="11.0""#), "no text under 13 px");
        Ok(())
    }
}
