//! The KV cache: generation without recomputing the past.
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
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut lanes = [0.0; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    let tail: f64 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail
}

/// Softmax-weighted sum for one query row over `keys` given as `(position, key, value)`, with an
/// optional sink logit (a key with a zero value vector); `scores` is scratch space of at least
/// `keys.len()`.
#[allow(clippy::too_many_arguments)]
fn attend_row(
    q: &[f64],
    query_position: usize,
    keys: &[(usize, &[f64], &[f64])],
    window: Option<SlidingWindow>,
    scale: f64,
    sink: Option<f64>,
    scores: &mut [f64],
    out: &mut [f64],
) {
    let scores = &mut scores[..keys.len()];
    for (s, (p, k, _)) in scores.iter_mut().zip(keys) {
        *s = if visible(query_position, *p, window) { dot(q, k) * scale } else { f64::NEG_INFINITY };
    }
    let max = scores.iter().copied().fold(sink.unwrap_or(f64::NEG_INFINITY), f64::max);
    out.fill(0.0);
    if max == f64::NEG_INFINITY {
        return; // no visible key: attend to nothing (zeros), as in the full pass
    }
    // the sink joins the normaliser but adds nothing to the output
    let total = exp_shifted_sum(scores, max) + sink.map_or(0.0, |s| crate::tensor::exp::exp(s - max));
    for (&w, (_, _, v)) in scores.iter().zip(keys) {
        if w != 0.0 {
            for (o, x) in out.iter_mut().zip(v.iter()) {
                *o += w * x;
            }
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
        let c = self.config();
        check_sequence(x.shape(), c.model_width)?;
        let (b, t) = (x.shape()[0], x.shape()[1]);
        cache.check_matches(self, b)?;
        let first = cache.next_position;
        self.rope()
            .check_interval(first, t)
            .map_err(|e| AttentionError::from_rope(crate::attention::Branch::Query, e))?;
        let positions: Vec<usize> = (first..first + t).collect();
        let projected = self.project(x, &positions)?;
        let read = |v: &TensorValue| v.value().map_err(AttentionError::at(Stage::Scores));
        let (q, k, v) =
            (read(&projected.rotated_query_heads)?, read(&projected.rotated_key_heads)?, read(&projected.value_heads)?);
        let (h, g, d) = (c.query_heads, c.kv_heads, c.head_width);
        let group = c.group_size();
        let scale = 1.0 / (d as f64).sqrt();
        let sinks = match self.sink_logits() {
            Some(s) => Some(s.value().map_err(AttentionError::at(Stage::Softmax))?),
            None => None,
        };
        let mut heads = vec![0.0; b * h * t * d]; // [B,H,T,d_h]
        let cached = cache.logical_slots().collect::<Vec<_>>();
        heads.par_chunks_mut(t * d).enumerate().for_each(|(lane, out)| {
            let (bi, hi) = (lane / h, lane % h);
            let kv_lane = bi * g + hi / group; // repeat-interleave: query head h reads kv head ⌊h/(H/G)⌋
            let (ck, cv) = (&cache.keys[kv_lane], &cache.values[kv_lane]);
            let fresh = |j: usize| (kv_lane * t + j) * d;
            // the cached keys in chronological order, then this call's keys
            let mut keys: Vec<(usize, &[f64], &[f64])> = Vec::with_capacity(cached.len() + t);
            keys.extend(
                cached.iter().map(|&s| (cache.slot_positions[s], &ck[s * d..(s + 1) * d], &cv[s * d..(s + 1) * d])),
            );
            keys.extend(
                (0..t)
                    .map(|j| (first + j, &k.as_slice()[fresh(j)..fresh(j) + d], &v.as_slice()[fresh(j)..fresh(j) + d])),
            );
            let mut scores = vec![0.0; keys.len()];
            for step in 0..t {
                // the new keys after `step` are in the future of this query: the mask hides them
                let qrow = &q.as_slice()[(lane * t + step) * d..][..d];
                let sink = sinks.as_ref().map(|s| s.as_slice()[hi]);
                let out_row = &mut out[step * d..(step + 1) * d];
                attend_row(qrow, first + step, &keys, c.window, scale, sink, &mut scores, out_row);
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
/// # Errors
/// The errors of [`GroupedQueryAttention::forward_cached`]; [`AttentionError::ZeroSize`] if `keep`
/// is 0 and [`AttentionError::PositionOutOfRange`] if the kept tokens leave no room for the next
/// (`keep ≥ max_positions`).
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
    let mut cache = layer.new_cache(1);
    let mut history: Vec<Vec<f64>> = prompt.as_slice().chunks(d.max(1)).map(<[f64]>::to_vec).collect();
    let as_input = |rows: &[Vec<f64>]| {
        constant(&[1, rows.len(), d], &rows.concat()).map_err(AttentionError::at(Stage::Projection))
    };
    let out = layer.forward_cached(&as_input(&history)?, &mut cache)?;
    let mut last = out.as_slice()[out.len() - d..].to_vec();
    let mut produced = Vec::with_capacity(steps);
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
