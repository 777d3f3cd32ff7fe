//! The layer's inference path: prefill and decode through a [`KvCache`].
//!
//! Chapter 33 (`ch33-kv-cache`) teaches it; chapter 36 generates with it. A call projects only the
//! new tokens, attends each of their query rows over the cached keys plus the new ones
//! (`decode.rs`), appends the new keys and values, and mixes the heads with `W_O` — the same
//! result as the full masked pass of [`GroupedQueryAttention::forward`], without recomputing the
//! past. A prefill into an empty cache *is* that full pass over the new tokens, so it runs the
//! tiled kernel ([`crate::attention::tiled_attention`]), which skips the key blocks no query sees.

use rayon::prelude::*;

use crate::attention::decode::{RowQuery, Run, attend_rows};
use crate::attention::error::{AtStage, OnBranch};
use crate::attention::input::check_sequence;
use crate::attention::{
    AttentionError, GroupedQueryAttention, KvCache, SlidingWindow, Stage, Visibility, tiled_attention,
};
use crate::autodiff::{TensorValue, constant};
use crate::error::Shape;
use crate::tensor::Tensor;

impl GroupedQueryAttention {
    /// An empty KV cache for `batch` rows of this layer.
    pub fn new_cache(&self, batch: usize) -> KvCache {
        KvCache::for_layer(self, batch)
    }

    /// Runs `x [B, T, d]` as the next `T` tokens after what `cache` holds (prefill when the cache
    /// is empty, decode for `T = 1`, chunked prefill otherwise) and appends their keys and values.
    /// Returns the layer's output `[B, T, d]` (evaluation mode).
    ///
    /// # Errors
    /// Input errors as in [`GroupedQueryAttention::check_input`];
    /// [`AttentionError::CacheMismatch`] for a cache of another layer or batch;
    /// [`AttentionError::PositionOutOfRange`] when the tokens would pass `max_positions` (the
    /// cache is then unchanged).
    pub fn forward_cached(&self, x: &TensorValue, cache: &mut KvCache) -> Result<Tensor, AttentionError> {
        // a decoding step is three parallel passes with serial work between them: keep a worker
        // from parking (crate::parallel)
        llm_kernels::parallel::with_workers_awake(|| self.forward_cached_body(x, cache))
    }

    fn forward_cached_body(&self, x: &TensorValue, cache: &mut KvCache) -> Result<Tensor, AttentionError> {
        let c = self.config();
        check_sequence(x.shape(), c.model_width)?;
        let (b, t) = (x.shape()[0], x.shape()[1]);
        cache.check_matches(self, b)?;
        let first = cache.next_position();
        self.rope().check_interval(first, t).on(crate::attention::Branch::Query)?;
        let (q, k, v) = self.rotated_heads(x, first..first + t)?;
        let heads = self.attend_cached(cache, (&q, &k, &v), first)?; // [B,H,T,d_h]
        cache.append(&k, &v, first);
        // [B,H,T,d_h] → [B,T,H·d_h] → W_O
        let heads = constant(&[b, c.query_heads, t, c.head_width], &heads).at(Stage::MergeHeads)?;
        let merged = crate::attention::merge_heads(&heads)?;
        let out = self.output_projection().forward(&merged).at(Stage::OutputProjection)?;
        out.value().at(Stage::OutputProjection)
    }

    /// The new tokens' rotated queries `[B,H,T,d_h]`, rotated keys and values `[B,G,T,d_h]`.
    fn rotated_heads(
        &self,
        x: &TensorValue,
        positions: std::ops::Range<usize>,
    ) -> Result<(Tensor, Tensor, Tensor), AttentionError> {
        let positions: Vec<usize> = positions.collect();
        let projected = if x.shape()[0] * x.shape()[1] == 1 {
            // one token: the three projections share one pass over the weights
            let token = x.read("forward_cached").at(Stage::Projection)?;
            self.project_token(&token, &positions)?
        } else {
            self.project(x, &positions)?
        };
        let read = |v: &TensorValue| v.value().at(Stage::Scores);
        Ok((read(&projected.rotated_query_heads)?, read(&projected.rotated_key_heads)?, read(&projected.value_heads)?))
    }

    /// Every new query row `[B,H,T,d_h]` attended over the cached keys and the new ones before it.
    fn attend_cached(
        &self,
        cache: &KvCache,
        qkv: (&Tensor, &Tensor, &Tensor),
        first: usize,
    ) -> Result<Vec<f64>, AttentionError> {
        let sinks = self.sink_logits().map(|s| s.value().at(Stage::Softmax)).transpose()?;
        attend_cached(self.config(), sinks.as_ref(), cache, qkv, first)
    }
}

/// The new tokens' rotated queries `[B,H,T,d_h]` (keys and values `[B,G,T,d_h]`, first position
/// `first`) attended over what `cache` holds and the new keys before each. The attention of a
/// layer with configuration `c` and sink logits `sinks` (`[H]`), for any holder of its projections
/// (the layer's own weights, or a file's quantized ones).
///
/// - A prefill (an empty cache, more than one token) is the full causal pass over the new tokens:
///   it runs [`crate::attention::tiled_attention`], which scores only the key blocks each query
///   block can see, with products in registers.
/// - Otherwise each query row attends over the cached keys and the new ones (`decode.rs`), one
///   task per (batch, query head) lane; where a step reads at least [`GROUPED_LANE_BYTES`] of a
///   kv lane, a task takes several query heads of one kv lane together (every head of it where
///   there are at least as many lanes as threads), reading the lane once for them, in bundles
///   that give each thread as many lanes to read (`bundled`); and the
///   tokens of a step of several are attended together ([`SCORES_AT_ONCE`]), reading it once for
///   as many of them as fit: the same bits either way.
///
/// # Errors
/// [`AttentionError`] from the tiled pass (shapes the caller has already checked), and
/// [`AttentionError::QkvShapes`] should the decoding kernel refuse its rows (which the checks
/// before the step rule out).
pub(crate) fn attend_cached(
    c: &crate::attention::AttentionConfig,
    sinks: Option<&Tensor>,
    cache: &KvCache,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    first: usize,
) -> Result<Vec<f64>, AttentionError> {
    attend_cached_scoring(c, sinks, cache, (q, k, v), first, SCORES_AT_ONCE)
}

/// [`attend_cached`], each call of the decoding kernel scoring at most `scores_at_once` keys times
/// queries (or one step's queries, where they alone score more).
fn attend_cached_scoring(
    c: &crate::attention::AttentionConfig,
    sinks: Option<&Tensor>,
    cache: &KvCache,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    first: usize,
    scores_at_once: usize,
) -> Result<Vec<f64>, AttentionError> {
    if cache.is_empty() && q.shape()[2] > 1 {
        // positions first.. for queries and keys alike: only their differences decide what is seen
        let visibility = Visibility { window: c.window, ..Visibility::default() };
        let leaf = |x: &Tensor| TensorValue::leaf(x.clone(), false);
        let sinks = sinks.map(leaf);
        let out = tiled_attention(&leaf(q), &leaf(k), &leaf(v), sinks.as_ref(), &visibility)?;
        let heads = out.value().at(Stage::WeightedValues)?;
        drop(out); // the values' only other holder: `into_vec` then takes them without a copy
        return Ok(heads.into_vec());
    }
    let (h, g, d, group) = (c.query_heads, c.kv_heads, c.head_width, c.group_size());
    let (t, scale) = (q.shape()[2], 1.0 / (d as f64).sqrt());
    let mut heads = vec![0.0; q.len()];
    let target = llm_kernels::active();
    let window_keys = c.window.map(SlidingWindow::visible_keys);
    // the shapes were checked before the step: a refusal of the kernel would be a caller's bug
    let refused = |_: llm_kernels::decode::DecodeError| {
        let shape = |x: &Tensor| Shape::from(x.shape());
        let reason = "the cache and this step's rows do not fit the decoding kernel";
        AttentionError::QkvShapes { query: shape(q), key: shape(k), value: shape(v), reason }
    };
    // a task attends some query heads of one kv lane: one head where the lane is short; where a
    // step reads at least GROUPED_LANE_BYTES of it, several heads together, so that each key and
    // value row is read from memory once for all of them (the same bits whichever heads a task
    // takes: `attend_rows`)
    let lanes = heads.len() / (group * t * d);
    let grouped = (cache.len() + t).saturating_mul(d).saturating_mul(16) >= GROUPED_LANE_BYTES;
    let threads = rayon::current_num_threads().max(1);
    // grouped, tasks a kv lane: as many as give every thread one where the lanes are fewer than
    // the threads; otherwise one, the last `lanes % threads` lanes in two (three lanes on two
    // threads: the last lane's heads split, so that each thread reads as many lanes)
    let per_lane = if grouped { threads.div_ceil(lanes.max(1)).clamp(1, group) } else { group };
    let mut tasks: Vec<(usize, usize, &mut [f64])> = Vec::with_capacity(2 * lanes * per_lane);
    for (kv_lane, out) in heads.chunks_mut(group * t * d).enumerate() {
        let split = grouped && per_lane == 1 && kv_lane >= lanes - lanes % threads;
        let heads_a_task = group.div_ceil(if split { 2 } else { per_lane });
        for (i, part) in out.chunks_mut(heads_a_task * t * d).enumerate() {
            tasks.push((kv_lane, i * heads_a_task, part));
        }
    }
    let attend_task = |(kv_lane, j0, out): (usize, usize, &mut [f64])| {
        let (bi, kv) = (kv_lane / g, kv_lane % g); // repeat-interleave: query head h reads kv head ⌊h/(H/G)⌋
        let fresh = kv_lane * t * d..(kv_lane + 1) * t * d;
        // the cached keys in chronological order, then this call's keys
        let mut runs: Vec<Run<'_>> = cache.lane_runs(kv_lane);
        runs.push((first, &k.as_slice()[fresh.clone()], &v.as_slice()[fresh]));
        let count = out.len() / (t * d);
        let keys = cache.len() + t;
        // the steps attended in one call: all of them where their scores fit in `scores_at_once`,
        // so that the lane is read once a call rather than once a token (the same bits either way)
        let steps = (scores_at_once / count.saturating_mul(keys).max(1)).clamp(1, t);
        let mut scores = vec![0.0; count * steps * keys];
        // a call's rows, where they are not already where the task's output wants them (it holds
        // each head's `t` rows one after the other: so do the queries of a call that takes them all)
        let mut rows = vec![0.0; if steps == t { 0 } else { count * steps * d }];
        let mut queries: Vec<RowQuery<'_>> = Vec::with_capacity(count * steps);
        for s0 in (0..t).step_by(steps) {
            let s1 = (s0 + steps).min(t);
            // head by head, each head's steps in order; the new keys after a step are in its
            // future: the mask hides them
            queries.clear();
            for j in j0..j0 + count {
                let (hi, lane) = (kv * group + j, bi * h + kv * group + j);
                let sink = sinks.as_ref().map(|s| s.as_slice()[hi]);
                queries.extend((s0..s1).map(|step| {
                    let q = &q.as_slice()[(lane * t + step) * d..][..d];
                    RowQuery { q, position: first + step, window_keys, scale, sink, target }
                }));
            }
            let n = queries.len();
            if steps == t {
                attend_rows(&queries, &runs, &mut scores, out).map_err(refused)?;
            } else {
                attend_rows(&queries, &runs, &mut scores[..n * keys], &mut rows[..n * d]).map_err(refused)?;
                for (i, row) in rows[..n * d].chunks_exact(d).enumerate() {
                    let (j, step) = (i / (s1 - s0), s0 + i % (s1 - s0));
                    out[(j * t + step) * d..][..d].copy_from_slice(row);
                }
            }
        }
        Ok::<(), AttentionError>(())
    };
    let bundles = bundled(tasks, lanes, threads, grouped && per_lane == 1);
    bundles.into_par_iter().try_for_each(|bundle| bundle.into_iter().try_for_each(&attend_task))?;
    Ok(heads)
}

/// A step's tasks (kv lane, first head, output; in lane order) in the bundles the threads take:
/// one bundle a task, except where the lanes do not divide among the `threads` (`split`: the
/// last `lanes % threads` lanes in parts), where each thread's bundle takes a run of whole lanes
/// and the parts are dealt in turn — three lanes on two threads: the first lane and half the
/// third, the second lane and the rest of the third, a lane and a half each. Left in lane order,
/// the tasks were halved by rayon into the first two lanes and the third lane's two parts, and a
/// thread that had read one lane stole the other's second: two lanes on one thread, one on the
/// other. SmolLM2-135M decoded a token 0–6 % faster from 256 positions, 5 % from 512, 5–12 %
/// from 1024 and 12–14 % from 2048 and 4096 (two threads; `docs/performance.md`, "2026-12-07").
/// How the tasks are bundled changes no bit.
fn bundled<T>(tasks: Vec<(usize, usize, T)>, lanes: usize, threads: usize, split: bool) -> Vec<Vec<(usize, usize, T)>> {
    if !split || lanes.is_multiple_of(threads) {
        return tasks.into_iter().map(|task| vec![task]).collect();
    }
    let (whole, runs) = (lanes - lanes % threads, lanes / threads);
    let mut bundles: Vec<Vec<_>> = (0..threads).map(|_| Vec::new()).collect();
    let mut dealt = 0;
    for task in tasks {
        if task.0 < whole {
            bundles[task.0 / runs].push(task);
        } else {
            bundles[dealt % threads].push(task);
            dealt += 1;
        }
    }
    bundles
}

/// The bytes of keys and values a step reads from one kv lane (its cached positions and its new
/// ones, `(positions + T) · d_h · 16`) from which it attends a kv head's query heads in one
/// task rather than one task each, so that the lane is read once rather than once per head: 256
/// positions of a 64-wide head. SmolLM2-135M (three query heads to a kv head) decoded a token 4 %
/// faster from 256 positions, 10 % from 512 and 18–24 % from 2048 (the last of its three lanes
/// split between two tasks, on two threads); at 128–160 no faster and at 64 1–2 % slower
/// (`docs/performance.md`, "2026-12-06, third"). How many tasks a lane takes changes no bit.
const GROUPED_LANE_BYTES: usize = 1 << 18;

// `tests/attention_family.rs` decodes over 255 cached positions of a 64-wide head to reach it
const _: () = assert!(256 * 64 * 16 >= GROUPED_LANE_BYTES);

/// Scores (keys times queries) one call of the decoding kernel takes at most in a step of several
/// tokens: every token's query rows attend over the same keys (the cached ones and the step's
/// own, the mask hiding each token's future), so they are attended together, reading the lane
/// once for as many tokens as fit (1 MiB of scores: ten tokens of three heads over 4096
/// positions). A chat turn of 16 tokens after 4096 positions of SmolLM2-135M took 231.9–272.4 ms
/// where it took 316.2–340.7 reading the lane once a token; after 2048, 150.1–158.9 against
/// 165.1–174.3 (best of five, alternating builds; `docs/performance.md`, "2026-12-06, fourth").
const SCORES_AT_ONCE: usize = 1 << 17;

/// A generation loop at the level of one layer: prefill `prompt [1, T, d]`, then `steps` times
/// turn the last output row into the next input row with `next` and decode it.
///
/// When the next token would pass the layer's `max_positions`, the cache is reset and the last
/// `keep` inputs are prefilled again from position 0 (RoPE sees only relative positions, so
/// attention within the kept text is unchanged; what is older than `keep` is forgotten). With a
/// window, `keep` = the window's visible keys reproduces every later output exactly.
///
/// Returns every output row produced after the prompt.
///
/// The rows produced are `steps × d` values: more than [`crate::tensor::MAX_ELEMENTS`] is refused
/// before anything runs, and nothing is reserved up front for them.
///
/// # Shapes
/// `prompt [1, T, d]`; `next` maps an output row of `d` values to the next input row of `d`;
/// the result holds `steps` rows of `d`.
///
/// # Example
/// ```
/// use llm_from_scratch::attention::{AttentionConfig, GroupedQueryAttention, generate_with_cache};
/// use llm_from_scratch::{Tensor, nn::SplitMix64};
/// // a layer with room for 4 positions generates 6 rows, keeping the last 2 inputs on each reset
/// let layer =
///     GroupedQueryAttention::new("attn", AttentionConfig::new(4, 2, 1, 2).with_rope(4, 100.0), &mut SplitMix64::new(0))?;
/// let prompt = Tensor::new(&[1, 2, 4], vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])?;
/// let rows = generate_with_cache(&layer, &prompt, 6, 2, |row| row.to_vec())?;
/// assert_eq!(rows.len(), 6);
/// assert!(rows.iter().all(|r| r.len() == 4 && r.iter().all(|v| v.is_finite())));
/// assert!(generate_with_cache(&layer, &prompt, 1, 4, |row| row.to_vec()).is_err()); // keep ≥ capacity
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// The errors of [`GroupedQueryAttention::forward_cached`]; [`AttentionError::ZeroSize`] if `keep`
/// is 0, [`AttentionError::PositionOutOfRange`] if the kept tokens leave no room for the next
/// (`keep ≥ max_positions`), and [`AttentionError::Tensor`] (a shape overflow) if `steps × d`
/// values exceed the ceiling.
pub fn generate_with_cache(
    layer: &GroupedQueryAttention,
    prompt: &Tensor,
    steps: usize,
    keep: usize,
    mut next: impl FnMut(&[f64]) -> Vec<f64>,
) -> Result<Vec<Vec<f64>>, AttentionError> {
    let d = layer.config().model_width;
    if keep == 0 {
        return Err(AttentionError::ZeroSize { what: "the number of tokens kept on a reset" });
    }
    let capacity = layer.config().max_positions;
    if keep >= capacity {
        // after a reset the kept tokens take positions 0..keep and the next token needs one more
        return Err(AttentionError::PositionOutOfRange { start: 0, end: keep.saturating_add(1), capacity });
    }
    // the rows returned (and the inputs kept) are steps × d values: refuse what could never fit
    crate::tensor::dense::element_count("generated rows", &[steps, d])?;
    let mut cache = layer.new_cache(1);
    let mut history: Vec<Vec<f64>> = prompt.as_slice().chunks(d.max(1)).map(<[f64]>::to_vec).collect();
    let as_input = |rows: &[Vec<f64>]| constant(&[1, rows.len(), d], &rows.concat()).at(Stage::Projection);
    let out = layer.forward_cached(&as_input(&history)?, &mut cache)?;
    let mut last = out.as_slice()[out.len() - d..].to_vec();
    let mut produced = Vec::new();
    for _ in 0..steps {
        let row = next(&last);
        history.push(row.clone());
        let out = if cache.next_position() >= layer.config().max_positions {
            cache.reset();
            let tail = &history[history.len().saturating_sub(keep)..];
            let out = layer.forward_cached(&as_input(tail)?, &mut cache)?;
            out.as_slice()[out.len() - d..].to_vec()
        } else {
            layer.forward_cached(&as_input(&[row])?, &mut cache)?.into_vec()
        };
        last = out;
        produced.push(last.clone());
    }
    Ok(produced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::AttentionConfig;
    use crate::nn::SplitMix64;

    fn input(shape: &[usize], rng: &mut SplitMix64) -> TensorValue {
        let values: Vec<f64> = (0..shape.iter().product()).map(|_| rng.uniform(-1.0, 1.0)).collect();
        constant(shape, &values).unwrap()
    }

    #[test]
    fn a_steps_tokens_attended_in_one_call_or_in_several_have_the_same_bits() {
        // a short lane (a task a head), long ones (a task several heads, a lane split between two
        // tasks on two threads: three lanes, as SmolLM2's), a wrapping window ring and sinks; each
        // limit makes the calls take another number of tokens, the last call fewer where it does
        // not divide the step
        let mut rng = SplitMix64::new(31);
        for (batch, query_heads, kv_heads, cached, t, window) in [
            (1, 6, 3, 40, 7, None),
            (2, 6, 2, 300, 5, Some(SlidingWindow::Exclusive(256))),
            (1, 3, 1, 255, 6, None),
            (1, 6, 3, 260, 2, None),
        ] {
            let mut config = AttentionConfig::new(48, query_heads, kv_heads, 64)
                .with_rope(400, 10_000.0)
                .with_sinks(window.is_some());
            config.window = window;
            let layer = GroupedQueryAttention::new("steps", config, &mut rng).unwrap();
            let mut cache = layer.new_cache(batch);
            layer.forward_cached(&input(&[batch, cached, 48], &mut rng), &mut cache).unwrap();
            let first = cache.next_position();
            let (q, k, v) = layer.rotated_heads(&input(&[batch, t, 48], &mut rng), first..first + t).unwrap();
            let sinks = layer.sink_logits().map(|s| s.value().unwrap());
            let config = layer.config();
            let attend =
                |limit| attend_cached_scoring(config, sinks.as_ref(), &cache, (&q, &k, &v), first, limit).unwrap();
            let whole = attend(usize::MAX);
            let keys = cache.len() + t;
            for limit in [0, keys, 2 * keys, 3 * keys, 4 * keys, 7 * keys, 11 * keys] {
                let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&attend(limit)),
                    bits(&whole),
                    "{query_heads}/{kv_heads} heads, {cached} cached, limit {limit}"
                );
            }
            // the threads take the tasks in other bundles: the same bits
            for threads in [1, 2, 3, 4] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&pool.install(|| attend(usize::MAX))), bits(&whole), "{threads} threads");
            }
        }
    }

    #[test]
    fn each_thread_takes_a_run_of_whole_lanes_and_the_parts_in_turn() {
        // (kv lane, first head, a label); SmolLM2's three lanes on two threads, the third split
        let lanes_of = |bundles: Vec<Vec<(usize, usize, char)>>| -> Vec<String> {
            bundles.iter().map(|b| b.iter().map(|t| t.2).collect()).collect()
        };
        let three = vec![(0, 0, 'a'), (1, 0, 'b'), (2, 0, 'c'), (2, 2, 'd')];
        assert_eq!(lanes_of(bundled(three.clone(), 3, 2, true)), ["ac", "bd"]);
        // without split lanes (or where the lanes divide among the threads), a bundle a task
        assert_eq!(lanes_of(bundled(three, 3, 2, false)), ["a", "b", "c", "d"]);
        let four = vec![(0, 0, 'a'), (1, 0, 'b'), (2, 0, 'c'), (3, 0, 'd')];
        assert_eq!(lanes_of(bundled(four, 4, 2, true)), ["a", "b", "c", "d"]);
        // five lanes on two threads: two whole lanes each, the fifth's parts one each
        let five = vec![(0, 0, 'a'), (1, 0, 'b'), (2, 0, 'c'), (3, 0, 'd'), (4, 0, 'e'), (4, 1, 'f')];
        assert_eq!(lanes_of(bundled(five, 5, 2, true)), ["abe", "cdf"]);
        // fewer lanes than threads (a head a lane): the lanes dealt in turn
        assert_eq!(lanes_of(bundled(vec![(0, 0, 'a'), (1, 0, 'b')], 2, 4, true)), ["a", "b", "", ""]);
    }
}
