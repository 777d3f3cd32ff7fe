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
//! full masked pass of [`GroupedQueryAttention::forward`]. The layer's side —
//! [`GroupedQueryAttention::new_cache`], [`GroupedQueryAttention::forward_cached`] and
//! [`generate_with_cache`](crate::attention::generate_with_cache) — is in `cached_forward.rs`; the
//! attention of one query row over what is kept, in `decode.rs`.

use llm_kernels::aligned::AlignedValues;

use crate::attention::decode::Run;
use crate::attention::{AttentionError, GroupedQueryAttention, SlidingWindow};
use crate::tensor::Tensor;

/// Keys and values of one layer for a batch of sequences that advance together.
///
/// Storage for every position it may keep (the window's need, or `max_positions`) is reserved at
/// the first append, so decoding never reallocates — and never copies — what is stored. Where
/// that is more than the machine can reserve (a capacity of 2⁴⁰ positions, say), the storage
/// grows with what is stored instead, doubling, so it is copied at most log₂(len) times. A clone
/// keeps the reservation. Each lane starts on a cache line
/// ([`AlignedValues`](llm_kernels::aligned::AlignedValues)), so with a head width of a multiple
/// of eight every row does: the decoding kernel reads each row once per query, and a row across
/// two lines costs it a fifth of its time.
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
#[derive(Clone, Debug)]
pub struct KvCache {
    batch: usize,
    kv_heads: usize,
    head_width: usize,
    window: Option<SlidingWindow>,
    max_positions: usize,
    /// Slots kept per lane: `None` grows up to `max_positions`.
    ring: Option<usize>,
    /// One lane per `(b, g)`: `slots × d_h` keys (RoPE applied) in slot order, from a cache-line
    /// boundary (the decoding kernel reads each row once per query: split loads cost it a fifth).
    keys: Vec<AlignedValues>,
    values: Vec<AlignedValues>,
    /// Absolute position held by each slot (shared by all lanes).
    slot_positions: Vec<usize>,
    /// Slot of the oldest kept position (ring buffer start).
    start: usize,
    next_position: usize,
}

impl KvCache {
    /// Positions a lane may hold: the window's need, or the whole capacity.
    fn slots(&self) -> usize {
        self.ring.unwrap_or(self.max_positions)
    }

    /// An empty cache for `batch` rows of the layer's shape.
    pub fn for_layer(layer: &GroupedQueryAttention, batch: usize) -> Self {
        Self::for_config(layer.config(), batch)
    }

    /// An empty cache for `batch` rows of a layer with configuration `c`.
    pub(crate) fn for_config(c: &crate::attention::AttentionConfig, batch: usize) -> Self {
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
            keys: vec![AlignedValues::new(); batch * c.kv_heads],
            values: vec![AlignedValues::new(); batch * c.kv_heads],
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
        self.keys.iter_mut().chain(self.values.iter_mut()).for_each(AlignedValues::clear);
        self.slot_positions.clear();
        self.start = 0;
        self.next_position = 0;
    }

    /// The stored slots in chronological order as at most two contiguous ranges (a ring that has
    /// wrapped holds its oldest keys after `start`, its newest before it).
    fn chronological_runs(&self) -> [std::ops::Range<usize>; 2] {
        [self.start..self.len(), 0..self.start]
    }

    /// What lane `kv_lane` (`b·G + g`) holds, oldest first, as runs of consecutive positions
    /// (at most two: a wrapped ring), without copying.
    pub(super) fn lane_runs(&self, kv_lane: usize) -> Vec<Run<'_>> {
        let d = self.head_width;
        let (keys, values) = (&self.keys[kv_lane], &self.values[kv_lane]);
        self.chronological_runs()
            .into_iter()
            .filter(|slots| !slots.is_empty())
            .map(|slots| {
                let at = slots.start * d..slots.end * d;
                (self.slot_positions[slots.start], &keys[at.clone()], &values[at])
            })
            .collect()
    }

    fn logical_slots(&self) -> impl Iterator<Item = usize> + '_ {
        let n = self.len();
        (0..n).map(move |i| (self.start + i) % n.max(1))
    }

    /// The lanes' slots in chronological order as `[B, G, len, d_h]`: `B·G` lanes of `len` rows
    /// of `d_h`, so the length matches the shape by construction.
    fn gather(&self, lanes: &[AlignedValues]) -> Tensor {
        let d = self.head_width;
        let mut out = Vec::with_capacity(lanes.len() * self.len() * d);
        for lane in lanes {
            for s in self.logical_slots() {
                out.extend_from_slice(&lane[s * d..(s + 1) * d]);
            }
        }
        Tensor::from_parts(self.key_shape().to_vec(), out)
    }

    /// Appends `T` new positions from `k, v [B, G, T, d_h]`, overwriting the oldest slots when a
    /// window's ring is full. Never copies what is already stored.
    pub(crate) fn append(&mut self, k: &Tensor, v: &Tensor, first_position: usize) {
        let (t, d) = (k.shape()[2], self.head_width);
        // every slot at the first append; `max_positions` comes from the caller, so a reservation
        // the machine refuses (or that overflows) falls back to growing with what is stored
        let reserve = self.slots().checked_mul(d);
        for lane in self.keys.iter_mut().chain(self.values.iter_mut()) {
            let whole = lane.capacity() == 0 && reserve.is_some_and(|r| lane.try_reserve_exact(r).is_ok());
            if !whole {
                lane.reserve(t * d);
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
    pub(super) fn check_matches(&self, layer: &GroupedQueryAttention, batch: usize) -> Result<(), AttentionError> {
        self.check_matches_config(layer.config(), batch)
    }

    /// Rejects a cache made for a layer of another configuration than `c`, or another batch.
    pub(crate) fn check_matches_config(
        &self,
        c: &crate::attention::AttentionConfig,
        batch: usize,
    ) -> Result<(), AttentionError> {
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

#[cfg(test)]
mod tests {
    use crate::attention::{AttentionConfig, GroupedQueryAttention, SlidingWindow};
    use crate::constant;
    use crate::nn::SplitMix64;

    /// Every run the decoding kernel reads starts on a cache line, so every row of a head of a
    /// multiple of eight values does: after a prefill, after steps, in a ring that has wrapped and
    /// in a clone, which keeps every lane's reservation. (The kernel's results do not depend on
    /// it; its speed does.)
    #[test]
    fn every_lane_and_so_every_row_of_a_head_of_eight_values_starts_on_a_cache_line() {
        let mut rng = SplitMix64::new(5);
        for (head_width, window) in [(64, None), (8, Some(SlidingWindow::Exclusive(6))), (24, None)] {
            let mut config = AttentionConfig::new(16, 4, 2, head_width).with_rope(64, 10_000.0);
            config.window = window;
            let layer = GroupedQueryAttention::new("aligned", config, &mut rng).unwrap();
            let mut cache = layer.new_cache(2);
            for t in [5, 1, 1, 3] {
                let x: Vec<f64> = (0..2 * t * 16).map(|_| rng.uniform(-1.0, 1.0)).collect();
                layer.forward_cached(&constant(&[2, t, 16], &x).unwrap(), &mut cache).unwrap();
                // a clone keeps every lane's reservation (the next append does not reallocate)
                let copy = cache.clone();
                for (lane, copied) in cache.keys.iter().chain(&cache.values).zip(copy.keys.iter().chain(&copy.values)) {
                    assert_eq!(copied.capacity(), lane.capacity(), "d_h = {head_width}: a clone's lane");
                }
                for cache in [&cache, &copy] {
                    for lane in 0..4 {
                        for (_, keys, values) in cache.lane_runs(lane) {
                            for rows in [keys, values] {
                                assert!(
                                    (rows.as_ptr() as usize).is_multiple_of(64),
                                    "d_h = {head_width}, lane {lane}, {} positions",
                                    cache.len()
                                );
                            }
                        }
                    }
                }
            }
            assert_eq!(cache.len(), if window.is_some() { 5 } else { 10 });
        }
    }
}
