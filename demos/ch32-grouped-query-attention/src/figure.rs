//! The chapter's figure: which key/value head each query head reads (as the layer computed it),
//! the trap of the tiled order, and what sharing saves — parameters and cache of MHA, GQA and MQA
//! at 7B size, and the caches of published models.

use demo_support::chart::{Area, Axis, BarChart, BarSeries};
use demo_support::fmt::{bytes, fixed};
use demo_support::svg::{Stroke, Svg, TextStyle, color};

use crate::{CACHE_TOKENS, Evidence, KV_HEADS, KnownModel, QUERY_HEADS, interleaved_mapping, tiled_mapping};

/// The figure's title.
pub const TITLE: &str = "Chapter 32 — grouped-query attention: query heads share K,V heads";

/// Query heads in a row over key/value heads, a line from each query head to the head it reads
/// (`None`: drawn red, unmatched); `wrong` query heads are outlined red.
fn mapping_diagram(
    svg: &mut Svg,
    (x, y, step): (f64, f64, f64),
    mapping: &[Option<usize>],
    kv_heads: usize,
    wrong: &[usize],
) {
    let width = step - 8.0;
    let span = mapping.len() as f64 * step;
    let kv_x = |g: usize| x + span * (g as f64 + 0.5) / kv_heads as f64 - 45.0;
    for g in 0..kv_heads {
        let fill = if g % 2 == 0 { "#d6e6f5" } else { "#fbe0d0" };
        svg.labelled_box(
            Area { x: kv_x(g), y: y + 110.0, width: 90.0, height: 34.0 },
            fill,
            Stroke::solid(color(g), 2.0),
            &format!("K,V head {g}"),
        );
    }
    for (h, kv) in mapping.iter().enumerate() {
        let bx = x + h as f64 * step;
        let line = match kv {
            Some(g) => Stroke::solid(color(*g), 2.0),
            None => Stroke::dashed("#c00000", 2.0),
        };
        let target = kv.map_or(x + span / 2.0, |g| kv_x(g) + 45.0);
        svg.line(bx + width / 2.0, y + 34.0, target, y + 110.0, line);
        let outline = if wrong.contains(&h) { Stroke::solid("#c00000", 3.0) } else { line };
        let fill = match kv {
            Some(g) if g % 2 == 0 => "#d6e6f5",
            Some(_) => "#fbe0d0",
            None => "#eeeeee",
        };
        svg.labelled_box(Area { x: bx, y, width, height: 34.0 }, fill, outline, &h.to_string());
    }
}

/// A model's code name in words: `llama_7b` → `LLaMA-7B`, `gemma_2b_if_mha` → `Gemma-2B as MHA`.
fn model_words(name: &str) -> String {
    let (base, variant) = name.split_once("_if_").unwrap_or((name, ""));
    let words: Vec<String> = base
        .split('_')
        .map(|w| match w {
            "llama" => "LLaMA".to_string(),
            w if w.chars().next().is_some_and(|c| c.is_ascii_digit()) => w.to_uppercase(),
            w => w[..1].to_uppercase() + &w[1..],
        })
        .collect();
    let model = words.join("-");
    if variant.is_empty() { model } else { format!("{model} as {}", variant.to_uppercase()) }
}

/// The thumbnail: which K,V head each query head reads, 300 px wide.
pub fn render_thumbnail(e: &Evidence) -> String {
    let (mut svg, top) = Svg::thumbnail(240.0, TITLE);
    svg.text(10.0, top + 2.0, TextStyle::label(), &format!("{QUERY_HEADS} query heads read {KV_HEADS} K,V heads"));
    mapping_diagram(&mut svg, (14.0, top + 18.0, 34.0), &e.observed_mapping, KV_HEADS, &[]);
    svg.finish()
}

/// `bytes` in GiB.
fn gib(bytes: u128) -> f64 {
    bytes as f64 / (1024.0 * 1024.0 * 1024.0)
}

/// A round upper end for an axis showing `values`: the largest plus 15 %, rounded up to `step`.
fn top(values: &[f64], step: f64) -> f64 {
    (values.iter().fold(step, |m, x| m.max(*x)) * 1.15 / step).ceil() * step
}

/// The figure as a standalone SVG document, 800 px wide.
pub fn render_svg(e: &Evidence) -> String {
    let mut svg = Svg::new(800.0, 900.0, TITLE);
    let group = QUERY_HEADS / KV_HEADS;
    // 1. the mapping the layer computed
    svg.text(
        20.0,
        58.0,
        TextStyle::heading(15.0),
        &format!(
            "What the layer computed: H = {QUERY_HEADS}, G = {KV_HEADS}, kv_head(h) = ⌊h / (H/G)⌋ = ⌊h / {group}⌋"
        ),
    );
    mapping_diagram(&mut svg, (30.0, 75.0, 52.0), &e.observed_mapping, KV_HEADS, &[]);
    let interleaved: Vec<String> = interleaved_mapping(QUERY_HEADS, KV_HEADS).iter().map(usize::to_string).collect();
    svg.text_lines(
        460.0,
        95.0,
        19.0,
        TextStyle::label().size(12.0),
        &[
            "Query heads 0–7 (top) each read one K,V head".to_string(),
            "(bottom): neighbours share, in the order".to_string(),
            format!("[{}] (repeat-interleave).", interleaved.join(", ")),
        ],
    );
    // 2. the trap
    let tiled: Vec<Option<usize>> = tiled_mapping(QUERY_HEADS, KV_HEADS).into_iter().map(Some).collect();
    let wrong: Vec<String> = e.tiled_wrong_heads.iter().map(usize::to_string).collect();
    svg.text(20.0, 268.0, TextStyle::heading(15.0), "The trap: tiling K and V gives h mod G instead");
    mapping_diagram(&mut svg, (30.0, 285.0, 52.0), &tiled, KV_HEADS, &e.tiled_wrong_heads);
    svg.text_lines(
        460.0,
        305.0,
        19.0,
        TextStyle::label().size(12.0),
        &[
            "red outline: query heads whose output changes".to_string(),
            format!("({}), by up to {}.", wrong.join(", "), fixed(e.tiled_max_diff, 2)),
            "G = H is multi-head attention (MHA),".to_string(),
            "G = 1 multi-query attention (MQA).".to_string(),
        ],
    );
    // 3. what sharing saves
    svg.text(
        20.0,
        490.0,
        TextStyle::heading(15.0),
        &format!("d = 4096, H = 32, d_h = 128, 32 layers; cache of {CACHE_TOKENS} tokens in fp16"),
    );
    let names: Vec<String> = e.sharing.iter().map(|m| m.name.to_string()).collect();
    let params: Vec<f64> = e.sharing.iter().map(|m| m.parameters as f64 / 1e6).collect();
    BarChart {
        area: Area { x: 80.0, y: 520.0, width: 290.0, height: 130.0 },
        categories: names.clone(),
        x_label: "one attention layer".to_string(),
        y: Axis::linear("parameters (millions)", 0.0, top(&params, 20.0), 4, 0),
        series: vec![BarSeries::new("parameters", 0, params.clone(), params.iter().map(|p| fixed(*p, 1)).collect())],
    }
    .draw_without_legend(&mut svg);
    let cache =
        |models: &[KnownModel]| -> Vec<f64> { models.iter().map(|m| gib(m.cache_bytes.unwrap_or(0))).collect() };
    let shared_cache = cache(&e.sharing);
    let labels =
        |models: &[KnownModel]| -> Vec<String> { models.iter().map(|m| bytes(m.cache_bytes.unwrap_or(0))).collect() };
    BarChart {
        area: Area { x: 480.0, y: 520.0, width: 290.0, height: 130.0 },
        categories: names,
        x_label: "all 32 layers".to_string(),
        y: Axis::linear("KV cache (GiB)", 0.0, top(&shared_cache, 0.5), 5, 1),
        series: vec![BarSeries::new("cache", 1, shared_cache, labels(&e.sharing))],
    }
    .draw_without_legend(&mut svg);
    // 4. published models
    let published: Vec<KnownModel> = e.models.iter().filter(|m| m.cache_bytes.is_some()).cloned().collect();
    svg.text(
        20.0,
        725.0,
        TextStyle::heading(15.0),
        &format!("KV cache of published models at {CACHE_TOKENS} tokens, fp16"),
    );
    let published_cache = cache(&published);
    BarChart {
        area: Area { x: 80.0, y: 745.0, width: 690.0, height: 105.0 },
        categories: published.iter().map(|m| model_words(m.name)).collect(),
        x_label: String::new(),
        y: Axis::linear("GiB", 0.0, top(&published_cache, 0.5), 5, 1),
        series: vec![BarSeries::new(
            "KV cache",
            2,
            published_cache,
            published
                .iter()
                .map(|m| format!("G = {}: {}", m.config.kv_heads, bytes(m.cache_bytes.unwrap_or(0))))
                .collect(),
        )],
    }
    .draw_without_legend(&mut svg);
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
            |e: &mut Evidence| e.observed_mapping[0] = Some(1),
            |e: &mut Evidence| e.sharing[0].cache_bytes = Some(1 << 20),
        ]
    );

    demo_support::chapter_thumbnail_test!(
        crate::learner_evidence(),
        render_thumbnail,
        TITLE,
        [|e: &mut Evidence| e.observed_mapping[0] = Some(1)]
    );

    #[test]
    fn models_are_named_in_words() {
        assert_eq!(model_words("llama_7b"), "LLaMA-7B");
        assert_eq!(model_words("gemma_2b_if_mha"), "Gemma-2B as MHA");
        assert_eq!(model_words("mistral_7b"), "Mistral-7B");
    }
}
