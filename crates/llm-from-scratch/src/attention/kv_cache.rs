//! The KV cache: generation without recomputing the past.
//!
//! Chapter 33 (`ch33-kv-cache`) teaches it; chapter 36 generates with it.
//!
//! A decoder produces one token at a time, and each new query needs the keys and values of every
//! earlier token. Those never change (causality), so they are computed once and kept:
//!
//! - **prefill** runs the prompt through the layer and stores its K and V;
//! - **decode** runs only the new token(s), attends to the stored keys plus its own, and appends.
//!
//! What is stored is K *after* RoPE (rotated at its own absolute position, which never changes)
//! and *before* head repetition: `G` key/value heads, not `H` — the memory saving of grouped-query
//! attention lives here. With a sliding window only the positions a future query can still see
//! are kept (a ring buffer, so appending never copies the cache), and the absolute position of the
//! next token is carried separately: with a window, cache length ≠ position.
//!
//! Masks are built from absolute positions ([`visible`]), never from indices into the cache.
//!
//! This is the inference path: it works on plain tensors (no tape) and is tested against the
//! full masked pass of [`GroupedQueryAttention::forward`].

use rayon::prelude::*;

use crate::attention::grouped_query::check_sequence;
use crate::attention::{AttentionError, GroupedQueryAttention, SlidingWindow, Stage, visible};
use crate::autodiff::{TensorValue, constant};
use crate::tensor::Tensor;
use crate::tensor::exp::exp_shifted_sum;

/// Keys and values of one layer for a batch of sequences that advance together.
///
/// Storage for every position it may keep (the window's need, or `max_positions`) is reserved at
/// the first append, so decoding never reallocates — and never copies — what is stored.
///
/// # Shapes
/// Per layer, keys and values `[B, G, len, d_h]` ([`KvCache::key_shape`]); each call of
/// [`GroupedQueryAttention::forward_cached`] takes `x [B, T, d]` and appends `T` positions.
///
/// # Errors
/// [`GroupedQueryAttention::forward_cached`] returns [`AttentionError::CacheMismatch`] for a cache of
/// another layer or batch size and [`AttentionError::PositionOutOfRange`] past `max_positions`
/// (the cache is then unchanged).
///
/// # Example
/// ```
/// use llm_from_scratch::attention::{AttentionConfig, GroupedQueryAttention};
/// use llm_from_scratch::{constant, nn::SplitMix64};
/// // 2 query heads over 1 key/value head of width 4
/// let layer = GroupedQueryAttention::new("attn", AttentionConfig::new(8, 2, 1, 4), &mut SplitMix64::new(0))?;
/// let x = constant(&[1, 3, 8], &(0..24).map(|i| (i as f64 * 0.7).sin()).collect::<Vec<_>>())?;
/// let full = layer.forward(&x, 0)?.output.value()?;
/// let mut cache = layer.new_cache(1);
/// layer.forward_cached(&x.slice_axis(1, 0, 2)?, &mut cache)?; // prefill two tokens
/// let last = layer.forward_cached(&x.slice_axis(1, 2, 3)?, &mut cache)?; // decode the third
/// assert_eq!(cache.key_shape(), [1, 1, 3, 4]); // G = 1 head stored, not H = 2
/// assert!(last.as_slice().iter().zip(&full.as_slice()[16..]).all(|(a, b)| (a - b).abs() < 1e-12));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KvCache {
    batch: usize,
    kv_heads: usize,
    head_width: usize,
    window: Option<SlidingWindow>,
    max_positions: usize,
    /// Slots kept per lane: `None` grows up to `max_positions`.
    ring: Option<usize>,
    /// One lane per `(b, g)`: `slots × d_h` keys (RoPE applied) in slot order.
    keys: Vec<Vec<f64>>,
    values: Vec<Vec<f64>>,
    /// Absolute position held by each slot (shared by all lanes).
    slot_positions: Vec<usize>,
    /// Slot of the oldest kept position (ring buffer start).
    start: usize,
    next_position: usize,
}

impl Clone for KvCache {
    /// A copy with the same reserved capacity (a derived clone would trim it, and the next
    /// append would then reallocate).
    fn clone(&self) -> Self {
        let copy_lanes = |lanes: &[Vec<f64>]| {
            lanes
                .iter()
                .map(|lane| {
                    let mut v = Vec::with_capacity(lane.capacity());
                    v.extend_from_slice(lane);
                    v
                })
                .collect()
        };
        Self {
            keys: copy_lanes(&self.keys),
            values: copy_lanes(&self.values),
            slot_positions: self.slot_positions.clone(),
            ..*self
        }
    }
}

impl KvCache {
    /// Positions a lane may hold: the window's need, or the whole capacity.
    fn slots(&self) -> usize {
        self.ring.unwrap_or(self.max_positions)
    }

    /// An empty cache for `batch` rows of the layer's shape.
    pub fn for_layer(layer: &GroupedQueryAttention, batch: usize) -> Self {
        let c = layer.config();
        // a future query at p ≥ next sees keys j > p − visible: the last visible − 1 positions
        // (never more than the layer's capacity, however wide the window)
        let ring = c.window.map(|w| w.visible_keys().saturating_sub(1).min(c.max_positions));
        Self {
            batch,
            kv_heads: c.kv_heads,
            head_width: c.head_width,
            window: c.window,
            max_positions: c.max_positions,
            ring,
            keys: vec![Vec::new(); batch * c.kv_heads],
            values: vec![Vec::new(); batch * c.kv_heads],
            slot_positions: Vec::new(),
            start: 0,
            next_position: 0,
        }
    }

    /// Positions currently stored (≤ the window's need).
    pub fn len(&self) -> usize {
        self.slot_positions.len()
    }

    /// `true` before the first prefill (or after [`KvCache::reset`]).
    pub fn is_empty(&self) -> bool {
        self.slot_positions.is_empty()
    }

    /// The absolute position the next token will take.
    pub fn next_position(&self) -> usize {
        self.next_position
    }

    /// `G`, the key/value heads stored.
    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }

    /// Shape of the stored keys, `[B, G, len, d_h]`.
    pub fn key_shape(&self) -> [usize; 4] {
        [self.batch, self.kv_heads, self.len(), self.head_width]
    }

    /// The stored absolute positions, oldest first.
    pub fn positions(&self) -> Vec<usize> {
        self.logical_slots().map(|s| self.slot_positions[s]).collect()
    }

    /// The stored keys as a tensor `[B, G, len, d_h]`, oldest first (a copy, for inspection).
    pub fn keys(&self) -> Tensor {
        self.gather(&self.keys)
    }

    /// The stored values as a tensor `[B, G, len, d_h]`, oldest first.
    pub fn values(&self) -> Tensor {
        self.gather(&self.values)
    }

    /// Empties the cache; the next token starts again at position 0.
    pub fn reset(&mut self) {
        self.keys.iter_mut().chain(self.values.iter_mut()).for_each(Vec::clear);
        self.slot_positions.clear();
        self.start = 0;
        self.next_position = 0;
    }

    /// The stored slots in chronological order as at most two contiguous ranges (a ring that has
    /// wrapped holds its oldest keys after `start`, its newest before it).
    fn chronological_runs(&self) -> [std::ops::Range<usize>; 2] {
        [self.start..self.len(), 0..self.start]
    }

    fn logical_slots(&self) -> impl Iterator<Item = usize> + '_ {
        let n = self.len();
        (0..n).map(move |i| (self.start + i) % n.max(1))
    }

    fn gather(&self, lanes: &[Vec<f64>]) -> Tensor {
        let d = self.head_width;
        let mut out = Vec::with_capacity(lanes.len() * self.len() * d);
        for lane in lanes {
            for s in self.logical_slots() {
                out.extend_from_slice(&lane[s * d..(s + 1) * d]);
            }
        }
        Tensor::new(&self.key_shape(), out).unwrap_or_else(|_| Tensor::scalar(0.0))
    }

    /// Appends `T` new positions from `k, v [B, G, T, d_h]`, overwriting the oldest slots when a
    /// window's ring is full. Never copies what is already stored.
    fn append(&mut self, k: &Tensor, v: &Tensor, first_position: usize) {
        let (t, d) = (k.shape()[2], self.head_width);
        let reserve = self.slots() * d;
        for lane in self.keys.iter_mut().chain(self.values.iter_mut()) {
            if lane.capacity() < reserve {
                lane.reserve_exact(reserve - lane.len());
            }
        }
        for step in 0..t {
            let position = first_position + step;
            let slot = match self.ring {
                Some(0) => continue,
                Some(cap) if self.len() == cap => {
                    let s = self.start;
                    self.start = (self.start + 1) % cap;
                    s
                }
                _ => self.slot_positions.len(),
            };
            if slot == self.slot_positions.len() {
                self.slot_positions.push(position);
            } else {
                self.slot_positions[slot] = position;
            }
            for (lane, (kl, vl)) in self.keys.iter_mut().zip(self.values.iter_mut()).enumerate() {
                let src = (lane * t + step) * d;
                let (kr, vr) = (&k.as_slice()[src..src + d], &v.as_slice()[src..src + d]);
                if kl.len() == slot * d {
                    kl.extend_from_slice(kr);
                    vl.extend_from_slice(vr);
                } else {
                    kl[slot * d..(slot + 1) * d].copy_from_slice(kr);
                    vl[slot * d..(slot + 1) * d].copy_from_slice(vr);
                }
            }
        }
        self.next_position = first_position + t;
    }

    /// Rejects a cache made for another layer or batch.
    fn check_matches(&self, layer: &GroupedQueryAttention, batch: usize) -> Result<(), AttentionError> {
        let c = layer.config();
        let window_keys = |w: Option<SlidingWindow>| w.map_or(0, SlidingWindow::visible_keys);
        for (what, expected, actual) in [
            ("key/value heads", c.kv_heads, self.kv_heads),
            ("head width", c.head_width, self.head_width),
            ("batch", batch, self.batch),
            ("window (visible keys)", window_keys(c.window), window_keys(self.window)),
            ("capacity", c.max_positions, self.max_positions),
        ] {
            if expected != actual {
                return Err(AttentionError::CacheMismatch { what, expected, actual });
            }
        }
        Ok(())
    }
}

/// `Σ aᵢ·bᵢ` with eight running partial sums combined in a fixed order: vectorisable, and the same
/// result on every run.
#[inline(always)]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    dots::<1>(a, [b])[0]
}

/// `R` dot products of `a` with `rows`, each summed exactly as [`dot`] sums it, computed side by
/// side: the `R` independent chains of additions overlap, and `R` rows stream from memory at once
/// (one dot product at a time waits on its own additions and reads too little to keep the memory
/// busy — decoding is bound by reading the cache).
#[inline(always)]
fn dots<const R: usize>(a: &[f64], rows: [&[f64]; R]) -> [f64; R] {
    let mut lanes = [[0.0; 8]; R];
    let whole = a.len() / 8 * 8;
    for c in (0..whole).step_by(8) {
        let x = &a[c..c + 8];
        for (lane, row) in lanes.iter_mut().zip(&rows) {
            let y = &row[c..c + 8];
            for i in 0..8 {
                lane[i] += x[i] * y[i];
            }
        }
    }
    std::array::from_fn(|r| {
        let l = &lanes[r];
        let tail: f64 = a[whole..].iter().zip(&rows[r][whole..]).map(|(x, y)| x * y).sum();
        ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])) + tail
    })
}

/// Keys and values of consecutive positions, stored contiguously: `(first position, keys,
/// values)`, `keys` and `values` holding `rows × d_h` values each.
type Run<'a> = (usize, &'a [f64], &'a [f64]);

/// One query row of a decoding step and how it attends.
#[derive(Clone, Copy)]
struct RowQuery<'a> {
    /// The rotated query, `d_h` values.
    q: &'a [f64],
    /// Its absolute position.
    position: usize,
    window: Option<SlidingWindow>,
    /// `1/√d_h`.
    scale: f64,
    /// The head's sink logit, if any.
    sink: Option<f64>,
}

/// Softmax-weighted sum for one query row over the keys of `runs` (chronological), with an
/// optional sink logit (a key with a zero value vector); `scores` is scratch space for at least
/// as many scores as there are keys.
fn attend_row(query: &RowQuery<'_>, runs: &[Run<'_>], scores: &mut [f64], out: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        #[target_feature(enable = "avx512f")]
        fn wide(query: &RowQuery<'_>, runs: &[Run<'_>], scores: &mut [f64], out: &mut [f64]) {
            attend_row_portable(query, runs, scores, out);
        }
        // SAFETY: the processor has AVX-512F (checked just above). Both versions perform the
        // same IEEE operations in the same order (the scores and sums use no fused multiply-add;
        // the exponentials pick their own version at run time), so they agree bitwise.
        #[allow(unsafe_code)]
        unsafe {
            wide(query, runs, scores, out)
        };
        return;
    }
    attend_row_portable(query, runs, scores, out);
}

/// Stretches of a run of keys that [`attend_row_portable`] reads side by side.
///
/// Decoding is bound by reading the cache, and one thread walking one stretch of memory has too few
/// reads in flight to use the bandwidth the cache hierarchy offers: reading four stretches at once
/// took a decode step from 0.91–0.96 to 0.70–0.74 ms in the same session (`llm-bench decode`'s
/// layer, 2047 cached positions). Results stay the same whatever the thread count.
const STREAMS: usize = 4;
/// Consecutive keys of each stretch scored in one step (eight dot products side by side).
const AT_ONCE: usize = 2;

/// [`attend_row`] in portable code, compiled once per instruction set.
#[inline(always)]
fn attend_row_portable(query: &RowQuery<'_>, runs: &[Run<'_>], scores: &mut [f64], out: &mut [f64]) {
    let &RowQuery { q, position: query_position, window, scale, sink } = query;
    let d = q.len(); // ≥ 1: the configuration rejects a head width of 0
    let mut count = 0;
    for &(first, keys, _) in runs {
        let run_scores = &mut scores[count..count + keys.len() / d];
        count += run_scores.len();
        let score = |position: usize, product: f64| {
            if visible(query_position, position, window) { product * scale } else { f64::NEG_INFINITY }
        };
        // the run as STREAMS equal stretches of `part` keys (the last few keys, past them, alone);
        // each step scores AT_ONCE consecutive keys of every stretch
        let rows = run_scores.len();
        let part = rows / (STREAMS * AT_ONCE) * AT_ONCE;
        for i in (0..part).step_by(AT_ONCE) {
            let products = dots(
                q,
                std::array::from_fn::<_, { STREAMS * AT_ONCE }, _>(|j| {
                    &keys[((j / AT_ONCE) * part + i + j % AT_ONCE) * d..][..d]
                }),
            );
            for (j, product) in products.into_iter().enumerate() {
                let r = (j / AT_ONCE) * part + i + j % AT_ONCE;
                run_scores[r] = score(first + r, product);
            }
        }
        for r in STREAMS * part..rows {
            run_scores[r] = score(first + r, dot(q, &keys[r * d..(r + 1) * d]));
        }
    }
    let scores = &mut scores[..count];
    let max = scores.iter().copied().fold(sink.unwrap_or(f64::NEG_INFINITY), f64::max);
    out.fill(0.0);
    if max == f64::NEG_INFINITY {
        return; // no visible key: attend to nothing (zeros), as in the full pass
    }
    // the sink joins the normaliser but adds nothing to the output
    let total = exp_shifted_sum(scores, max) + sink.map_or(0.0, |s| crate::tensor::exp::exp(s - max));
    // the same stretches for the values: one partial output per stretch, added in stretch order
    // after the keys that were alone
    let mut partial = vec![0.0; STREAMS * d];
    let mut at = 0;
    for &(_, _, values) in runs {
        let rows = values.len() / d;
        let part = rows / (STREAMS * AT_ONCE) * AT_ONCE;
        let weights = &scores[at..at + rows];
        at += rows;
        // a weight of exactly 0 (a hidden key: e^−∞) is skipped, not multiplied: 0 · NaN = NaN
        // would let a key the query cannot see change its output
        for i in 0..part {
            for (s, sums) in partial.chunks_exact_mut(d).enumerate() {
                let (w, v) = (weights[s * part + i], &values[(s * part + i) * d..][..d]);
                if w == 0.0 {
                    continue;
                }
                for (o, x) in sums.iter_mut().zip(v) {
                    *o += w * x;
                }
            }
        }
        for r in STREAMS * part..rows {
            let (w, v) = (weights[r], &values[r * d..(r + 1) * d]);
            if w == 0.0 {
                continue;
            }
            for (o, x) in out.iter_mut().zip(v) {
                *o += w * x;
            }
        }
    }
    for sums in partial.chunks_exact(d) {
        for (o, x) in out.iter_mut().zip(sums) {
            *o += x;
        }
    }
    for o in out.iter_mut() {
        *o /= total;
    }
}

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
        // a decoding step is three parallel passes with serial work between them: keep a worker from parking (crate::parallel)
        crate::parallel::with_workers_awake(|| {
            let c = self.config();
            check_sequence(x.shape(), c.model_width)?;
            let (b, t) = (x.shape()[0], x.shape()[1]);
            cache.check_matches(self, b)?;
            let first = cache.next_position;
            self.rope()
                .check_interval(first, t)
                .map_err(|e| AttentionError::from_rope(crate::attention::Branch::Query, e))?;
            let positions: Vec<usize> = (first..first + t).collect();
            let projected = if b * t == 1 {
                // one token: the three projections share one pass over the weights
                self.project_token(
                    &x.read("forward_cached").map_err(AttentionError::at(Stage::Projection))?,
                    &positions,
                )?
            } else {
                self.project(x, &positions)?
            };
            let read = |v: &TensorValue| v.value().map_err(AttentionError::at(Stage::Scores));
            let (q, k, v) = (
                read(&projected.rotated_query_heads)?,
                read(&projected.rotated_key_heads)?,
                read(&projected.value_heads)?,
            );
            let (h, g, d) = (c.query_heads, c.kv_heads, c.head_width);
            let group = c.group_size();
            let scale = 1.0 / (d as f64).sqrt();
            let sinks = match self.sink_logits() {
                Some(s) => Some(s.value().map_err(AttentionError::at(Stage::Softmax))?),
                None => None,
            };
            let mut heads = vec![0.0; b * h * t * d]; // [B,H,T,d_h]
            let runs = cache.chronological_runs();
            heads.par_chunks_mut(t * d).enumerate().for_each(|(lane, out)| {
                let (bi, hi) = (lane / h, lane % h);
                let kv_lane = bi * g + hi / group; // repeat-interleave: query head h reads kv head ⌊h/(H/G)⌋
                let (ck, cv) = (&cache.keys[kv_lane], &cache.values[kv_lane]);
                let fresh = kv_lane * t * d..(kv_lane + 1) * t * d;
                // the cached keys in chronological order, then this call's keys
                let mut lane_runs: Vec<Run<'_>> = runs
                    .iter()
                    .filter(|slots| !slots.is_empty())
                    .map(|slots| {
                        let at = slots.start * d..slots.end * d;
                        (cache.slot_positions[slots.start], &ck[at.clone()], &cv[at])
                    })
                    .collect();
                lane_runs.push((first, &k.as_slice()[fresh.clone()], &v.as_slice()[fresh]));
                let mut scores = vec![0.0; cache.len() + t];
                for step in 0..t {
                    // the new keys after `step` are in the future of this query: the mask hides them
                    let qrow = &q.as_slice()[(lane * t + step) * d..][..d];
                    let query = RowQuery {
                        q: qrow,
                        position: first + step,
                        window: c.window,
                        scale,
                        sink: sinks.as_ref().map(|s| s.as_slice()[hi]),
                    };
                    attend_row(&query, &lane_runs, &mut scores, &mut out[step * d..(step + 1) * d]);
                }
            });
            cache.append(&k, &v, first);
            // [B,H,T,d_h] → [B,T,H·d_h] → W_O
            let heads = constant(&[b, h, t, d], &heads).map_err(AttentionError::at(Stage::MergeHeads))?;
            let merged = crate::attention::merge_heads(&heads)?;
            let out = self
                .output_projection()
                .forward(&merged)
                .map_err(|e| AttentionError::from_nn(Stage::OutputProjection, e))?;
            out.value().map_err(AttentionError::at(Stage::OutputProjection))
        })
    }
}

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
    let as_input = |rows: &[Vec<f64>]| {
        constant(&[1, rows.len(), d], &rows.concat()).map_err(AttentionError::at(Stage::Projection))
    };
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
