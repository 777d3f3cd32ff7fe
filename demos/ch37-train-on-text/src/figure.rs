//! `--figure PATH`: training and validation loss against steps beside the unigram baseline and
//! the uniform guess, what the trained model writes, and where two of its heads look when it reads
//! a phrase of the book ([`crate::attention::PHRASE`]). [`render_thumbnail`] draws one head alone.

use demo_support::chart::{Area, Axis, Corner, LineChart, Series};
use demo_support::fmt::fixed;
use demo_support::heat::{HeatMap, Shading, draw_colour_scale, draw_inline_key, grid};
use demo_support::svg::{Stroke, Svg, TextStyle};

use crate::attention::PhraseAttention;
use crate::{EvalPoint, Evidence, SAMPLE_CHARS, STEPS, Sample};

/// The figure's title.
pub const TITLE: &str = "Chapter 37 — a character-level model learns Cicero";
/// The thumbnail's title (short enough for its 300 px).
pub const THUMBNAIL_TITLE: &str = "Chapter 37 — train on text";

/// Attention weights: white 0 to dark blue 1, written with two decimals.
const WEIGHTS: Shading = Shading::Sequential { min: 0.0, max: 1.0 };
/// Decimals of every attention weight.
const DECIMALS: usize = 2;
/// Grey of the prompt and of notes.
const GREY: &str = "#555555";

/// A character as an axis shows it: a space as `␣`.
fn shown(c: char) -> String {
    if c == ' ' { "␣".to_string() } else { c.to_string() }
}

/// `text` cut at spaces into lines of at most `width` characters (a longer word gets a line of
/// its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

/// The loss chart in `area`: `history` beside the `unigram` baseline (if known) and the uniform
/// guess `ln V`.
fn draw_loss(svg: &mut Svg, area: Area, history: &[EvalPoint], unigram: Option<f64>, vocabulary: usize) {
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
        area,
        x: Axis::linear("optimiser step", 0.0, last, 8, 0),
        y: Axis::linear("cross-entropy (nats per character)", 0.0, top, top as usize, 0),
        series,
    }
    .draw_with_legend(svg, Corner::TopRight);
}

/// The prompt and the sample, from `y` down; returns the `y` below the last line.
fn draw_sample(svg: &mut Svg, y: f64, sample: &Sample, steps: usize) -> f64 {
    svg.text(20.0, y, TextStyle::heading(15.0), &format!("What the model writes after {steps} steps"));
    let prompt = format!("Prompt (the start of the validation text): “{}”", sample.prompt);
    svg.text(20.0, y + 24.0, TextStyle::label().color(GREY), &prompt);
    svg.text(
        20.0,
        y + 44.0,
        TextStyle::label().color(GREY),
        &format!("It goes on ({SAMPLE_CHARS} characters, nucleus sampling p = 0.9, temperature 0.8):"),
    );
    let lines = wrap(&sample.text, 96);
    svg.text_lines(32.0, y + 66.0, 19.0, TextStyle::label(), &lines);
    y + 66.0 + lines.len() as f64 * 19.0
}

/// Outline of a cell a head's measure counts.
const MEASURED: &str = "#d55e00";

/// Draws head `(layer, head)` of `attention` over its first `t` characters with its grid's top
/// left corner at `(gx, gy)`, cells of `cell` pixels, the characters on both axes at `size` pixels
/// and the cells of `pairs` outlined.
#[allow(clippy::too_many_arguments)]
fn head_map(
    svg: &mut Svg,
    attention: &PhraseAttention,
    (layer, head): (usize, usize),
    t: usize,
    (gx, gy): (f64, f64),
    cell: f64,
    size: f64,
    pairs: &[(usize, usize)],
) {
    let n = attention.phrase.len();
    let Some(weights) = attention.head(layer, head) else { return };
    let cells = grid(weights, n)
        .into_iter()
        .take(t)
        .enumerate()
        .map(|(q, row)| row.into_iter().take(t).enumerate().map(|(k, w)| w.filter(|_| k <= q)).collect())
        .collect();
    HeatMap {
        x: gx - 10.0, // no row labels: 10 px
        y: gy - 40.0,
        cell_width: cell,
        cell_height: cell,
        title: String::new(),
        row_labels: Vec::new(),
        col_labels: Vec::new(),
        cells,
        shading: WEIGHTS,
        decimals: DECIMALS,
        masked_label: String::new(),
        cell_labels: false,
    }
    .draw(svg);
    for (i, &c) in attention.phrase.iter().take(t).enumerate() {
        let middle = (i as f64 + 0.5) * cell;
        svg.text(gx + middle, gy - 4.0, TextStyle::centered().size(size), &shown(c));
        svg.text(gx - 4.0, gy + middle + size * 0.35, TextStyle::right().size(size), &shown(c));
    }
    for &(q, k) in pairs.iter().filter(|&&(q, _)| q < t) {
        let (x, y) = (gx + k as f64 * cell, gy + q as f64 * cell);
        svg.rect(x, y, cell, cell, "none", Some(Stroke::solid(MEASURED, 1.5)));
    }
}

/// A head the figure draws: `(layer, head)`, the `(query, key)` cells it is measured on, and
/// what those cells are.
type Chosen = ((usize, usize), Vec<(usize, usize)>, &'static str);

/// The two heads the figure draws, with what each is measured on and how that is said: the head
/// that reads the previous character most, and another that reads the space before the word.
fn chosen_heads(a: &PhraseAttention) -> [Chosen; 2] {
    let (previous, starts) = (a.previous_characters(), a.word_starts());
    let first = a.most(&previous, None);
    let second = a.most(&starts, Some(first));
    [(first, previous, "on the previous character"), (second, starts, "on the space before the word")]
}

/// The chapter's figure (`--figure loss.svg`; the committed copy is
/// `docs/figures/ch37-train-on-text.svg`).
pub fn render_svg(e: &Evidence) -> String {
    let a = &e.attention;
    let t = a.phrase.len();
    let cell = 11.5;
    let steps = e.history.last().map_or(STEPS, |p| p.step);
    let mut svg = Svg::new(800.0, 660.0 + t as f64 * cell, TITLE);
    let area = Area { x: 80.0, y: 60.0, width: 690.0, height: 200.0 };
    draw_loss(&mut svg, area, &e.history, e.unigram, e.vocabulary.len());
    let top = draw_sample(&mut svg, 340.0, &e.sample, steps) + 40.0;
    let phrase: String = a.phrase.iter().collect();
    svg.text(20.0, top, TextStyle::heading(15.0), &format!("Where two heads look when the model reads “{phrase}”"));
    svg.text(
        20.0,
        top + 20.0,
        TextStyle::label(),
        "Rows: the character being read; columns: the characters up to it (␣ is a space). Orange: what is measured.",
    );
    for (i, (head, pairs, what)) in chosen_heads(a).iter().enumerate() {
        let gx = 34.0 + i as f64 * 355.0;
        svg.text(gx - 14.0, top + 50.0, TextStyle::heading(14.0), &format!("layer {}, head {}", head.0, head.1));
        let share = format!("{} of the weight {what}", fixed(a.share(*head, pairs), DECIMALS));
        svg.text(gx - 14.0, top + 68.0, TextStyle::label(), &share);
        head_map(&mut svg, a, *head, t, (gx, top + 100.0), cell, 10.0, pairs);
    }
    draw_colour_scale(&mut svg, 735.0, top + 120.0, 240.0, WEIGHTS, DECIMALS, "weight");
    svg.finish()
}

/// Characters of the phrase the thumbnail shows (its first words: whole rows, since a character
/// only reads those before it).
const THUMBNAIL_CHARACTERS: usize = 14;

/// The thumbnail: the head that reads the space before the word, over the phrase's first words,
/// 300 px wide, text of 13 px.
pub fn render_thumbnail(e: &Evidence) -> String {
    let a = &e.attention;
    let t = THUMBNAIL_CHARACTERS.min(a.phrase.len());
    let cell = 16.0;
    let (gx, gy) = (44.0, 110.0);
    let bottom = gy + t as f64 * cell;
    let mut svg = Svg::new(300.0, bottom + 62.0, THUMBNAIL_TITLE);
    let [_, (head, pairs, what)] = chosen_heads(a);
    let pairs: Vec<(usize, usize)> = pairs.into_iter().filter(|&(q, _)| q < t).collect();
    let lines = [
        format!("layer {}, head {} reading Cicero:", head.0, head.1),
        format!("{} {what}", fixed(a.share(head, &pairs), DECIMALS)),
    ];
    svg.text_lines(20.0, 52.0, 17.0, TextStyle::label().color(GREY), &lines);
    head_map(&mut svg, a, head, t, (gx, gy), cell, 13.0, &pairs);
    draw_inline_key(&mut svg, (60.0, bottom + 14.0), 110.0, WEIGHTS, DECIMALS, "weight");
    svg.text(20.0, bottom + 48.0, TextStyle::label().color(GREY), "rows: reading · columns: read");
    svg.finish()
}

#[cfg(test)]
mod tests {
    use demo_support::check::check_chapter_figure;
    use llm_from_scratch::model::DecoderConfig;

    use super::*;
    use crate::attention::PHRASE;

    fn point(step: usize, train_loss: f64, validation_loss: f64) -> EvalPoint {
        EvalPoint { step, lr: 0.0, train_loss, validation_loss }
    }

    /// Evidence without training: three evaluations, a sample, and two layers of two heads over
    /// the phrase, one reading the previous character, one the character itself.
    fn evidence() -> Evidence {
        let t = PHRASE.chars().count();
        let previous = (0..t * t).map(|i| if i % t + 1 == (i / t).max(1) { 1.0 } else { 0.0 });
        let itself = (0..t * t).map(|i| if i % t == i / t { 1.0 } else { 0.0 });
        let layer: Vec<f64> = previous.chain(itself).collect();
        Evidence {
            characters: 100,
            lines: 1,
            split: (90, 10),
            vocabulary: PHRASE.chars().collect(),
            parameters: 0,
            config: DecoderConfig::new(57, 8, 2, 2),
            unigram: Some(2.9),
            history: vec![point(0, 4.1, 4.1), point(100, 2.5, 2.6), point(200, 2.0, 2.2)],
            sample: Sample {
                prompt: "cundius. nec".into(),
                text: "vero hoc oratus esse ".repeat(12),
                same_as_recompute: true,
                max_logit_diff: 0.0,
                words: 48,
                known_words: 48,
            },
            errors: Vec::new(),
            attention: PhraseAttention { phrase: PHRASE.chars().collect(), layers: vec![layer.clone(), layer] },
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
                &|e: &mut Evidence| e.history[1].validation_loss = 3.0,
                &|e: &mut Evidence| e.unigram = Some(3.5),
                &|e: &mut Evidence| e.sample.text.push_str(" amet"),
                // layer 0, head 0 (the previous-character head), query 3, key 1
                &|e: &mut Evidence| e.attention.layers[0][3 * 29 + 1] = 0.5,
                // layer 1, head 0 now reads a word's start: query 9 (`p`), key 7 (the space)
                &|e: &mut Evidence| e.attention.layers[1][9 * 29 + 7] = 0.5,
            ],
        )?;
        let svg = render_svg(&evidence());
        assert!(svg.contains("unigram baseline") && svg.contains(">1.00 of the weight on the previous character<"));
        Ok(())
    }

    /// The thumbnail: well formed, titled, deterministic, drawn from a head, no text under 13 px.
    #[test]
    fn the_thumbnail_is_well_formed_titled_deterministic_and_follows_the_data() -> Result<(), Box<dyn std::error::Error>>
    {
        check_chapter_figure(
            &evidence(),
            render_thumbnail,
            THUMBNAIL_TITLE,
            &[
                &|e: &mut Evidence| e.attention.layers[1][9 * 29 + 7] = 0.5,
                &|e: &mut Evidence| e.attention.layers[0][29 * 29 + 2 * 29 + 2] = 0.5, // head 1, query 2, key 2
                &|e: &mut Evidence| e.attention.phrase[0] = 'D',
            ],
        )?;
        let svg = render_thumbnail(&evidence());
        assert!(svg.contains(r#"width="300.0""#), "{svg}");
        assert!(!svg.contains(r#"font-size="12.0""#) && !svg.contains(r#"font-size="10.0""#), "no text under 13 px");
        Ok(())
    }

    #[test]
    fn long_text_wraps_at_spaces() {
        assert_eq!(wrap("ab cd ef", 5), ["ab cd", "ef"]);
        assert_eq!(wrap("abcdefgh ij", 4), ["abcdefgh", "ij"]);
    }
}
