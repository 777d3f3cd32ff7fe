//! # Chapter 33 — the KV cache
//!
//! A decoder writes one token at a time, and each new token's query needs the keys and values of
//! every earlier token. Under the causal mask those never change: token `j`'s key depends only on
//! tokens `0..=j`. So they are computed once, kept, and generation splits into two phases:
//!
//! ```text
//! prefill  x[0..P)  → Q, K, V of P tokens; attend causally; store K, V          cache len P
//! decode   x[p]     → q_p, k_p, v_p of ONE token; attend over [cache | k_p]; append k_p, v_p
//!          o_p = Σ_{j ≤ p, visible(p, j)} softmax_j(q_p·k_jᵀ/√d_h) · v_j      the full pass's row p
//! ```
//!
//! Decoding token `p` costs `O(p·d)` instead of recomputing `O(p²·d)`. Chunked prefill (several
//! tokens per call) is the same thing with a small causal block inside the chunk. In every case
//! the result equals the full masked pass, up to the order in which floating-point sums are
//! grouped.
//!
//! ## What is stored: `[B, G, len, d_h]`, K after RoPE
//!
//! - **`G` heads, not `H`.** The cache holds the key/value heads *before* they are shared across
//!   query heads. This is where grouped-query attention saves memory (chapter 32): each query
//!   head reads its group's head straight from the cache.
//! - **K after RoPE.** RoPE rotates a key by an angle that depends only on that key's own absolute
//!   position `j`: `k̃_j = R(j)·k_j`. Later queries never change `j`, so `k̃_j` is final the moment
//!   it is computed and can be stored as it is. The query `q̃_p = R(p)·q_p` is rotated at its own
//!   position when it arrives, and `q̃_p·k̃_jᵀ = q_p·R(j − p)·k_jᵀ` depends only on `p − j`. (With
//!   absolute position embeddings *added* to x the same holds. What cannot be cached is anything
//!   that depends on the query's position *and* is applied to keys.)
//!
//! ## Sliding window: cache length ≠ position
//!
//! With a window, query `i` sees key `j` when `0 ≤ i − j ≤ W` (`Inclusive(W)`, `W + 1` keys, the
//! course's convention) or `0 ≤ i − j < W` (`Exclusive(W)`, `W` keys, the `sliding_window` of
//! Hugging Face / Mistral checkpoints; `Exclusive(W) = Inclusive(W − 1)`). A future query `p ≥ n`
//! (`n` is the next position) needs only keys `j > p − visible`, and its own key arrives with
//! it, so the cache keeps the last `visible − 1` positions in a ring buffer. Its length stops
//! growing while the absolute position keeps counting. Masks are therefore built from
//! *absolute* positions (query at `p` over the stored positions), never from indices into the
//! cache.
//!
//! Stacking `L` windowed layers widens what the last layer can reach: each layer looks `W`
//! tokens further back, so the receptive field is `L·W` tokens (Mistral-7B: `32·4096 = 131,072`).
//!
//! ## Capacity
//!
//! RoPE tables cover positions `0..max_positions`. Decoding past them is a typed error, and the
//! cache is left untouched. A generation loop that outgrows the capacity resets the cache and
//! prefills the last `keep` inputs again from position 0. RoPE only sees relative positions, so
//! attention inside the kept text is unchanged. With a window and `keep = W + 1`, every later
//! output is reproduced (to rounding): the window forgets everything older anyway.
#![doc = demo_support::chapter_page!(
    "ch33-kv-cache",
    "[`KvCache`](../llm_from_scratch/attention/struct.KvCache.html), [`SlidingWindow`](../llm_from_scratch/attention/enum.SlidingWindow.html) and [`GroupedQueryAttention::forward_cached`](../llm_from_scratch/attention/struct.GroupedQueryAttention.html#method.forward_cached)",
    ("chapter 32", "ch32_grouped_query_attention"),
    ("chapter 34", "ch34_efficient_attention")
)]

use demo_support::evidence::{DemoResult, rejection};

use demo_support::report::{fmt_f64, fmt_indices, fmt_mask_rows, fmt_rows, fmt_thousands};
use llm_from_scratch::attention::{
    AttentionConfig, GroupedQueryAttention, KvCache, SlidingWindow, attention_mask, generate_with_cache, visible,
};
use llm_from_scratch::nn::SplitMix64;
use llm_from_scratch::{Mask, Tensor, TensorValue, constant, fmt_shape};

mod figure;
pub use figure::{render_svg, render_thumbnail};

/// Tokens of the worked sequence (batch 1).
pub const TOKENS: usize = 6;
/// Tokens prefilled before decoding.
pub const PROMPT: usize = 3;
/// `d`.
pub const MODEL_WIDTH: usize = 8;
/// `H`.
pub const QUERY_HEADS: usize = 4;
/// `G`.
pub const KV_HEADS: usize = 2;
/// `d_h`.
pub const HEAD_WIDTH: usize = 2;
/// RoPE capacity of the worked layer.
pub const MAX_POSITIONS: usize = 16;
/// RoPE frequency base.
pub const ROPE_BASE: f64 = 100.0;
/// The window of the windowed layer: `0 ≤ i − j ≤ 2`.
pub const WINDOW: SlidingWindow = SlidingWindow::Inclusive(2);
/// Chunk sizes of the chunked prefill.
pub const CHUNK_SIZES: [usize; 4] = [1, 2, 3, TOKENS];
/// RoPE capacity of the generation layer: small, so that the text outgrows it.
pub const GENERATION_CAPACITY: usize = 6;
/// Tokens generated after the prompt.
pub const GENERATION_STEPS: usize = 6;
/// Seed of every random weight and input.
pub const SEED: u64 = 33;
/// Equal within this absolute tolerance (sums grouped differently).
const TOLERANCE: f64 = 1e-12;

/// The cache right after one call of `forward_cached`.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheStep {
    /// Tokens fed in the call.
    pub tokens: usize,
    /// `[B, G, len, d_h]`.
    pub key_shape: [usize; 4],
    /// Absolute positions stored, oldest first.
    pub positions: Vec<usize>,
    /// The absolute position of the next token.
    pub next_position: usize,
    /// Whether the cache was reset before the call (generation only).
    pub reset: bool,
    /// Absolute positions of the tokens fed in the call.
    pub input_positions: Vec<usize>,
}

/// What the chapter computes; [`render_report`] prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// Prefill 3 then decode 1, 1, 1 equals the full pass (within 1e-12).
    pub decode_within: bool,
    /// The three decoded output rows.
    pub decoded_rows: Vec<Vec<f64>>,
    /// The cache after the prefill and after each decode (no window).
    pub decode_steps: Vec<CacheStep>,
    /// The cached keys and values equal the full pass's rotated keys and its values (within 1e-12).
    pub cached_kv_within: (bool, bool),
    /// Token-by-token with the window: the cache after each token.
    pub window_steps: Vec<CacheStep>,
    /// Token-by-token with the window equals the windowed full pass.
    pub window_decode_within: bool,
    /// `(chunk size, equal without window, equal with window)`.
    pub chunked: Vec<(usize, bool, bool)>,
    /// Visible key positions of query 5 under `Inclusive(2)` and `Exclusive(2)`.
    pub conventions: (Vec<usize>, Vec<usize>),
    /// The layer with `Exclusive(3)` gives the `Inclusive(2)` output bit for bit.
    pub exclusive_equals_inclusive: bool,
    /// Stored positions after six tokens, the mask of two queries at 6, 7 over them plus
    /// themselves, and the index-based causal mask a cache-index rule would build instead.
    pub decode_mask: (Vec<usize>, Vec<usize>, Mask, Mask),
    /// Rows changed by perturbing token 0, after one and after two `Inclusive(1)` layers.
    pub receptive_rows: (Vec<usize>, Vec<usize>),
    /// `(case, message)` of calls the library rejects.
    pub errors: Vec<(&'static str, String)>,
    /// `next_position` after the rejected capacity call (unchanged).
    pub position_after_error: usize,
    /// Generation past the capacity.
    pub generation: Generation,
}

/// `generate_with_cache` past the capacity, and a loop written here with the same rule.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The mirrored loop's cache, call by call (prefill first).
    pub steps: Vec<CacheStep>,
    /// Rows produced by `generate_with_cache`.
    pub rows: Vec<Vec<f64>>,
    /// The library's rows equal the mirrored loop's (within 1e-12).
    pub equals_mirror: bool,
    /// The library's rows equal a recomputation of every step from scratch (within 1e-12).
    pub equals_recompute: bool,
}

/// Computes the chapter's evidence through the library.
///
/// # Errors
/// Any library error (none is expected), or an invalid call the library accepts.
pub fn learner_evidence() -> DemoResult<Evidence> {
    let mut rng = SplitMix64::new(SEED);
    let layer = GroupedQueryAttention::new("attention", base_config(MAX_POSITIONS), &mut rng)?;
    let x = Tensor::uniform(&[1, TOKENS, MODEL_WIDTH], -1.0, 1.0, &mut rng)?;
    let trace = layer.forward(&rows(&x, 0, TOKENS)?, 0)?;
    let full = trace.output.value()?;

    // prefill PROMPT tokens, then decode the rest one at a time
    let plan: Vec<usize> = std::iter::once(PROMPT).chain(std::iter::repeat_n(1, TOKENS - PROMPT)).collect();
    let (decoded, decode_steps, cache) = run_chunks(&layer, &x, &plan)?;
    let within = |a: &Tensor, b: &Tensor| a.max_abs_diff(b).is_some_and(|d| d <= TOLERANCE);
    let cached_kv_within = (
        within(&cache.keys(), &trace.rotated_key_heads.value()?),
        within(&cache.values(), &trace.value_heads.as_ref().ok_or("the explicit path keeps the value heads")?.value()?),
    );

    // the same weights under a window
    let windowed = with_window(&layer, WINDOW)?;
    let windowed_full = windowed.forward(&rows(&x, 0, TOKENS)?, 0)?.output.value()?;
    let (window_out, window_steps, window_cache) = run_chunks(&windowed, &x, &[1; TOKENS])?;
    let mut chunked = Vec::new();
    for size in CHUNK_SIZES {
        let plan = vec![size; TOKENS.div_ceil(size)];
        let plain = run_chunks(&layer, &x, &plan)?.0;
        let windowed_chunks = run_chunks(&windowed, &x, &plan)?.0;
        chunked.push((size, within(&plain, &full), within(&windowed_chunks, &windowed_full)));
    }
    let exclusive = with_window(&layer, SlidingWindow::Exclusive(3))?.forward(&rows(&x, 0, TOKENS)?, 0)?;

    // the next chunk, queries at 6 and 7, over what the windowed cache holds plus themselves
    let stored = window_cache.positions();
    let queries = vec![TOKENS, TOKENS + 1];
    let keys: Vec<usize> = stored.iter().chain(&queries).copied().collect();
    let mask = attention_mask(&queries, &keys, 1, None, Some(WINDOW))?;
    let index_mask = Mask::causal(queries.len(), keys.len(), stored.len())?;

    let seen = |w: SlidingWindow| (0..=5).filter(|&j| visible(5, j, Some(w))).collect::<Vec<_>>();
    let (errors, position_after_error) = cache_errors(&layer, &x, &mut rng)?;
    Ok(Evidence {
        decode_within: within(&decoded, &full),
        decoded_rows: decoded.as_slice()[PROMPT * MODEL_WIDTH..].chunks(MODEL_WIDTH).map(<[f64]>::to_vec).collect(),
        decode_steps,
        cached_kv_within,
        window_steps,
        window_decode_within: within(&window_out, &windowed_full),
        chunked,
        conventions: (seen(SlidingWindow::Inclusive(2)), seen(SlidingWindow::Exclusive(2))),
        exclusive_equals_inclusive: exclusive.output.value()?.bitwise_eq(&windowed_full),
        decode_mask: (stored, queries, mask, index_mask),
        receptive_rows: receptive_field(&x, &mut rng)?,
        errors,
        position_after_error,
        generation: generation(&x, &mut rng)?,
    })
}

/// `H = 4` query heads over `G = 2` key/value heads of width 2 on `d = 8`, no window.
fn base_config(max_positions: usize) -> AttentionConfig {
    AttentionConfig::new(MODEL_WIDTH, QUERY_HEADS, KV_HEADS, HEAD_WIDTH).with_rope(max_positions, ROPE_BASE)
}

/// `layer`'s weights under another window.
fn with_window(layer: &GroupedQueryAttention, window: SlidingWindow) -> DemoResult<GroupedQueryAttention> {
    let config = layer.config().clone().with_window(window);
    Ok(GroupedQueryAttention::from_parts("attention", config, layer.qkv().clone(), layer.output_projection().clone())?)
}

/// Tokens `start..end` of a batch-1 sequence `[1, T, d]`, as an input `[1, end − start, d]`.
fn rows(x: &Tensor, start: usize, end: usize) -> DemoResult<TensorValue> {
    Ok(constant(&[1, end - start, MODEL_WIDTH], &x.as_slice()[start * MODEL_WIDTH..end * MODEL_WIDTH])?)
}

/// Feeds `x [1, T, d]` through a fresh cache in chunks of the given sizes (the last one clipped).
/// Returns the outputs joined back to `[1, T, d]`, the cache after every call, and the cache.
fn run_chunks(
    layer: &GroupedQueryAttention,
    x: &Tensor,
    chunks: &[usize],
) -> DemoResult<(Tensor, Vec<CacheStep>, KvCache)> {
    let t = x.shape()[1];
    let mut cache = layer.new_cache(1);
    let (mut out, mut steps, mut start) = (Vec::with_capacity(x.len()), Vec::new(), 0);
    for &size in chunks {
        let end = (start + size).min(t);
        out.extend_from_slice(layer.forward_cached(&rows(x, start, end)?, &mut cache)?.as_slice());
        steps.push(snapshot(&cache, end - start, false, (start..end).collect()));
        start = end;
    }
    Ok((Tensor::new(x.shape(), out)?, steps, cache))
}

fn snapshot(cache: &KvCache, tokens: usize, reset: bool, input_positions: Vec<usize>) -> CacheStep {
    CacheStep {
        tokens,
        key_shape: cache.key_shape(),
        positions: cache.positions(),
        next_position: cache.next_position(),
        reset,
        input_positions,
    }
}

/// Two `Inclusive(1)` layers in a row; token 0 is perturbed. Output row `i` of one layer reads
/// tokens `i − 1, i`, so the change reaches rows 0, 1; the second layer reads the first's rows
/// `i − 1, i`, i.e. tokens `i − 2..=i`, so rows 0, 1, 2. Rows out of reach are bitwise unchanged:
/// a hidden key's weight is exactly 0. Returns the changed rows after one and after two layers.
fn receptive_field(x: &Tensor, rng: &mut SplitMix64) -> DemoResult<(Vec<usize>, Vec<usize>)> {
    let config = base_config(MAX_POSITIONS).with_window(SlidingWindow::Inclusive(1));
    let first = GroupedQueryAttention::new("layer0", config.clone(), rng)?;
    let second = GroupedQueryAttention::new("layer1", config, rng)?;
    let mut perturbed = x.as_slice().to_vec();
    perturbed[..MODEL_WIDTH].iter_mut().for_each(|v| *v += 0.5);
    let run = |values: &[f64]| -> DemoResult<(Tensor, Tensor)> {
        let h1 = first.forward(&constant(&[1, TOKENS, MODEL_WIDTH], values)?, 0)?.output;
        let h2 = second.forward(&h1, 0)?.output;
        Ok((h1.value()?, h2.value()?))
    };
    let (a1, a2) = run(x.as_slice())?;
    let (b1, b2) = run(&perturbed)?;
    let changed = |a: &Tensor, b: &Tensor| -> Vec<usize> {
        let pairs = a.as_slice().chunks(MODEL_WIDTH).zip(b.as_slice().chunks(MODEL_WIDTH));
        let differs = |(p, q): (&[f64], &[f64])| p.iter().zip(q).any(|(u, v)| u.to_bits() != v.to_bits());
        pairs.enumerate().filter(|(_, pair)| differs(*pair)).map(|(i, _)| i).collect()
    };
    Ok((changed(&a1, &b1), changed(&a2, &b2)))
}

/// Decoding past the capacity (5 tokens stored, 2 more with capacity 6), a cache used by a layer
/// with one key/value head, and a cache used with a batch of 2. Returns the messages and the
/// next position after the rejected capacity call.
fn cache_errors(
    layer: &GroupedQueryAttention,
    x: &Tensor,
    rng: &mut SplitMix64,
) -> DemoResult<(Vec<(&'static str, String)>, usize)> {
    let small = GroupedQueryAttention::new("small", base_config(GENERATION_CAPACITY), rng)?;
    let mut cache = small.new_cache(1);
    small.forward_cached(&rows(x, 0, 5)?, &mut cache)?;
    let past_capacity = rejection("past_max_positions", small.forward_cached(&rows(x, 4, 6)?, &mut cache))?;
    let position_after_error = cache.next_position();
    let config = AttentionConfig::new(MODEL_WIDTH, QUERY_HEADS, 1, HEAD_WIDTH).with_rope(MAX_POSITIONS, ROPE_BASE);
    let other = GroupedQueryAttention::new("other", config, rng)?;
    let mut cache = layer.new_cache(1);
    layer.forward_cached(&rows(x, 0, 2)?, &mut cache)?;
    let two_rows = constant(&[2, 1, MODEL_WIDTH], &x.as_slice()[..2 * MODEL_WIDTH])?;
    let errors = vec![
        past_capacity,
        rejection("cache_of_another_layer", other.forward_cached(&rows(x, 2, 3)?, &mut cache))?,
        rejection("cache_of_another_batch", layer.forward_cached(&two_rows, &mut cache))?,
    ];
    Ok((errors, position_after_error))
}

/// The stand-in for "sample a token and embed it": the last output row divided by its root mean
/// square (chapter 31's normalisation without gain), so the inputs keep unit scale.
fn next_input(row: &[f64]) -> Vec<f64> {
    let rms = (row.iter().map(|v| v * v).sum::<f64>() / row.len().max(1) as f64).sqrt();
    row.iter().map(|v| v / rms.max(f64::MIN_POSITIVE)).collect()
}

/// Generation with a windowed layer of capacity 6: `generate_with_cache` against a loop written
/// here with the same rule (it shows the cache, which the library's loop keeps to itself) and
/// against recomputing every step from scratch on the last `W + 1` inputs at positions `0..3`.
fn generation(x: &Tensor, rng: &mut SplitMix64) -> DemoResult<Generation> {
    let layer = GroupedQueryAttention::new("generate", base_config(GENERATION_CAPACITY).with_window(WINDOW), rng)?;
    let keep = WINDOW.visible_keys();
    let prompt = rows(x, 0, PROMPT)?;
    let library = generate_with_cache(&layer, &prompt.value()?, GENERATION_STEPS, keep, next_input)?;

    let d = MODEL_WIDTH;
    let last_row = |t: &Tensor| t.as_slice()[t.len() - d..].to_vec();
    let input = |rows: &[Vec<f64>]| constant(&[1, rows.len(), d], &rows.concat());
    let mut history: Vec<Vec<f64>> = x.as_slice()[..PROMPT * d].chunks(d).map(<[f64]>::to_vec).collect();
    let mut cache = layer.new_cache(1);
    let mut last = last_row(&layer.forward_cached(&prompt, &mut cache)?);
    let mut steps = vec![snapshot(&cache, PROMPT, false, (0..PROMPT).collect())];
    let (mut mirror, mut recomputed) = (Vec::new(), Vec::new());
    for _ in 0..GENERATION_STEPS {
        history.push(next_input(&last));
        let reset = cache.next_position() >= GENERATION_CAPACITY;
        if reset {
            cache.reset(); // start again at 0 with the last `keep` inputs
        }
        let fed = if reset { &history[history.len() - keep..] } else { &history[history.len() - 1..] };
        let first = cache.next_position();
        last = last_row(&layer.forward_cached(&input(fed)?, &mut cache)?);
        steps.push(snapshot(&cache, fed.len(), reset, (first..first + fed.len()).collect()));
        mirror.push(last.clone());
        // the window makes the newest output a function of the last W + 1 inputs only
        let tail = &history[history.len() - keep..];
        recomputed.push(last_row(&layer.forward(&input(tail)?, 0)?.output.value()?));
    }
    let close = |a: &[Vec<f64>], b: &[Vec<f64>]| {
        a.len() == b.len() && a.iter().flatten().zip(b.iter().flatten()).all(|(u, v)| (u - v).abs() <= TOLERANCE)
    };
    Ok(Generation {
        equals_mirror: close(&library, &mirror),
        equals_recompute: close(&library, &recomputed),
        steps,
        rows: library,
    })
}

fn fmt_step(s: &CacheStep) -> String {
    format!(
        "reset:{} input_positions:{} key_shape:{} stored_positions:{} next_position:{}",
        s.reset,
        fmt_indices(&s.input_positions),
        fmt_shape(&s.key_shape),
        fmt_indices(&s.positions),
        s.next_position
    )
}

/// The report, one `key=value` line each, ending with a newline.
pub fn render_report(e: &Evidence) -> String {
    let mut lines = vec![
        "chapter=33-kv-cache".to_string(),
        "prediction=prefill then decode reproduces the full pass (within 1e-12) while storing only G=2 key/value \
         heads after RoPE; with window inclusive(2) the cache stops at 2 stored positions while next_position keeps \
         counting; chunked prefill of any chunk size equals the full pass; masks come from absolute positions; \
         decoding past max_positions is a typed error, and generation resets and recomputes the last window"
            .to_string(),
        format!(
            "config=batch:1 tokens:{TOKENS} prompt:{PROMPT} model_width:{MODEL_WIDTH} query_heads:{QUERY_HEADS} \
             kv_heads:{KV_HEADS} head_width:{HEAD_WIDTH} rope_base:{} max_positions:{MAX_POSITIONS} window:{WINDOW} \
             tolerance:1e-12 input:uniform(-1,1) seed:{SEED}",
            fmt_f64(ROPE_BASE)
        ),
    ];
    lines.push(format!("decode=prefill:{PROMPT} then 1,1,1 equals_full_pass_within_1e-12:{}", e.decode_within));
    lines.push(format!("decoded_rows={}", fmt_rows(&e.decoded_rows)));
    for (i, s) in e.decode_steps.iter().enumerate() {
        let name = if i == 0 { "prefill".to_string() } else { format!("decode_{i}") };
        lines.push(format!("cache_after_{name}={}", fmt_step(s)));
    }
    lines.push(format!(
        "cache_contents=kv_heads_stored:{KV_HEADS} query_heads:{QUERY_HEADS} keys_equal_full_pass_rotated_keys_within_1e-12:{} \
         values_equal_full_pass_values_within_1e-12:{}",
        e.cached_kv_within.0, e.cached_kv_within.1
    ));
    lines.push(format!(
        "window_need={WINDOW} visible_keys:{} stored:{}=visible_keys-1 (the query's own key arrives with it)",
        WINDOW.visible_keys(),
        WINDOW.visible_keys() - 1
    ));
    for (i, s) in e.window_steps.iter().enumerate() {
        lines.push(format!("window_cache_after_token_{i}={}", fmt_step(s)));
    }
    lines.push(format!(
        "window_decode=token_by_token_equals_windowed_full_pass_within_1e-12:{}",
        e.window_decode_within
    ));
    let chunked: Vec<String> =
        e.chunked.iter().map(|(size, plain, windowed)| format!("{size}:{plain}/{windowed}")).collect();
    lines.push(format!("chunked_prefill=chunk_size:no_window/{WINDOW} [{}]", chunked.join(" ")));
    lines.push(format!(
        "window_conventions=query:5 inclusive(2):visible_keys:{} positions:{} exclusive(2):visible_keys:{} \
         positions:{} exclusive(4096)_sees_as_many_as_inclusive(4095):{} layer_exclusive(3)_vs_inclusive(2):{}",
        SlidingWindow::Inclusive(2).visible_keys(),
        fmt_indices(&e.conventions.0),
        SlidingWindow::Exclusive(2).visible_keys(),
        fmt_indices(&e.conventions.1),
        SlidingWindow::Exclusive(4096).visible_keys() == SlidingWindow::Inclusive(4095).visible_keys(),
        if e.exclusive_equals_inclusive { "bitwise" } else { "differs" }
    ));
    let (stored, queries, mask, index_mask) = &e.decode_mask;
    lines.push(format!(
        "decode_mask={WINDOW} stored_positions:{} query_positions:{} key_positions:stored+queries rows:{} \
         cache_index_causal_mask:{} index_mask_wrong_under_window:{}",
        fmt_indices(stored),
        fmt_indices(queries),
        fmt_mask_rows(mask),
        fmt_mask_rows(index_mask),
        mask != index_mask
    ));
    lines.push(format!(
        "receptive_field=formula:L·W mistral_7b:32·4096={} demo:inclusive(1) perturbed_token:0 changed_rows_1_layer:{} \
         changed_rows_2_layers:{}",
        fmt_thousands(32 * 4096),
        fmt_indices(&e.receptive_rows.0),
        fmt_indices(&e.receptive_rows.1)
    ));
    lines.extend(e.errors.iter().map(|(case, message)| format!("error_{case}={message}")));
    lines.push(format!("error_leaves_cache_unchanged=next_position:{}", e.position_after_error));
    lines.push(format!(
        "generation=max_positions:{GENERATION_CAPACITY} window:{WINDOW} keep:{} prompt:{PROMPT} steps:{GENERATION_STEPS} \
         next_input:last_output/rms(last_output) resets:{} library_equals_mirrored_loop_within_1e-12:{} \
         equals_recompute_from_scratch_within_1e-12:{}",
        WINDOW.visible_keys(),
        e.generation.steps.iter().filter(|s| s.reset).count(),
        e.generation.equals_mirror,
        e.generation.equals_recompute
    ));
    for (i, s) in e.generation.steps.iter().enumerate() {
        let name = if i == 0 { "prefill".to_string() } else { format!("step_{i}") };
        lines.push(format!("generation_{name}={}", fmt_step(s)));
    }
    lines.push(format!("generated_rows={}", fmt_rows(&e.generation.rows)));
    lines.push(
        "next=34-efficient-attention: online softmax and tiled attention that never materialise the [T,T] scores"
            .to_string(),
    );
    lines.join("\n") + "\n"
}
