//! The latent KV cache of [`LatentAttention`]: per token only the latent `C` (`d_c` numbers) and
//! the shared rotated key `k_R` (`d_r`), and decoding with the absorbed path over them.
//!
//! A decoding step reads the cache where it lies. Each batch row keeps `C` as one contiguous
//! `len × d_c` buffer and `k_R` as one `len × d_r` buffer; the step appends the new tokens' rows
//! (the buffers grow geometrically, so regrowing copies each value O(1) times over a whole
//! generation) and hands the buffers to the product kernels as matrices — `Cᵀ` is a transposed
//! view, not a copy. For the `T` new tokens of batch row `b`, token `t` at position
//! `p = first + t` sees the `n = p + 1` tokens `0..=p`, and its `H` heads are scored together:
//!
//! ```text
//! S = ((Q·Aᵀ)·C[..n]ᵀ + Q_R·k_R[..n]ᵀ) / √(d_h + d_r)    [H, n]   (heads as rows)
//! P = softmax(S) per row;   O = P·C[..n]                 [H, d_c]
//! out = [O_h·B_h of every head h] · W_O                  [d]
//! ```
//!
//! The keys are absorbed as in the chapter (`Q·Aᵀ` meets `C` itself). On the value side
//! `O_h·B_h·W_O,h` is the chapter's `(P_h·C)·(B_h·W_O,h)` taken in the other order: `B_h` is applied
//! to the one weighted latent of each new token, so no value is rebuilt per cached token and the
//! merged `B·W_O` (`H·d_c·d_h·d` multiply-adds to form) is not formed on every step.
//!
//! # Cost
//! Per new token and batch row: `H·n·(2·d_c + d_r)` multiply-adds over the `n` tokens it sees —
//! each cached value is read twice (scores, then weighted latents), never copied — plus
//! `H·d_h·(2·d_c + d)` for `Aᵀ`, `B` and `W_O` and the token's projections. Only reading grows with
//! the cache.

use rayon::prelude::*;

use crate::TensorAutodiffError;
use crate::attention::error::AtStage;
use crate::attention::{AttentionError, LatentAttention, Stage};
use crate::autodiff::TensorValue;
use crate::autodiff::ops::softmax::softmax_row;
use crate::tensor::Tensor;
use crate::tensor::matmul::{MatRef, matmul, matmul_new};

/// The latent KV cache: `C` and `k_R` per token, nothing else.
///
/// # Shapes
/// Per batch row, `C [len, d_c]` and `k_R [len, d_r]`, each one contiguous buffer;
/// [`LatentAttention::forward_cached`] takes `x [B, T, d]` and appends `T` tokens.
#[derive(Debug)]
pub struct LatentKvCache {
    batch: usize,
    latent_width: usize,
    rope_width: usize,
    /// `[B][len · d_c]`.
    latent: Vec<Vec<f64>>,
    /// `[B][len · d_r]`.
    rope_key: Vec<Vec<f64>>,
    next_position: usize,
}

impl Clone for LatentKvCache {
    /// A copy with the same reserved capacity (a derived clone would trim it, and the next append
    /// would then reallocate and copy every row).
    fn clone(&self) -> Self {
        let rows = |rows: &[Vec<f64>]| rows.iter().map(with_capacity_of).collect();
        Self { latent: rows(&self.latent), rope_key: rows(&self.rope_key), ..*self }
    }
}

/// A copy of `row` that keeps its capacity.
fn with_capacity_of(row: &Vec<f64>) -> Vec<f64> {
    let mut copy = Vec::with_capacity(row.capacity());
    copy.extend_from_slice(row);
    copy
}

impl LatentKvCache {
    /// Tokens stored.
    pub fn len(&self) -> usize {
        self.next_position
    }
    /// `true` before the first call.
    pub fn is_empty(&self) -> bool {
        self.next_position == 0
    }
    /// Numbers stored: `B · len · (d_c + d_r)`.
    pub fn stored_values(&self) -> usize {
        self.latent.iter().chain(&self.rope_key).map(Vec::len).sum()
    }

    /// Tokens the buffers hold room for before the next append must regrow them (the smallest
    /// over the batch rows and both buffers; `0` for an empty batch).
    pub fn capacity(&self) -> usize {
        let latent = self.latent.iter().map(|row| row.capacity() / self.latent_width.max(1));
        let rope_key = self.rope_key.iter().map(|row| row.capacity() / self.rope_width.max(1));
        latent.chain(rope_key).min().unwrap_or(0)
    }

    /// Appends the `T` tokens of `latent [B, T, d_c]` and `rope_key [B, 1, T, d_r]`, each batch row
    /// onto its own buffers (what is stored is never moved, except when a buffer regrows).
    fn append(&mut self, latent: &Tensor, rope_key: &Tensor, tokens: usize) {
        let (dc, dr) = (self.latent_width, self.rope_width);
        let rows = self.latent.iter_mut().zip(&mut self.rope_key);
        for ((c, kr), (new_c, new_kr)) in
            rows.zip(latent.as_slice().chunks(tokens * dc).zip(rope_key.as_slice().chunks(tokens * dr)))
        {
            c.extend_from_slice(new_c);
            kr.extend_from_slice(new_kr);
        }
        self.next_position += tokens;
    }

    /// Forgets every token from position `len` on (undoes an append whose step then failed).
    fn truncate(&mut self, len: usize) {
        self.latent.iter_mut().for_each(|row| row.truncate(len * self.latent_width));
        self.rope_key.iter_mut().for_each(|row| row.truncate(len * self.rope_width));
        self.next_position = len;
    }
}

impl LatentAttention {
    /// An empty latent cache for `batch` rows.
    pub fn new_cache(&self, batch: usize) -> LatentKvCache {
        LatentKvCache {
            batch,
            latent_width: self.config.latent_width,
            rope_width: self.config.rope_width,
            latent: vec![Vec::new(); batch],
            rope_key: vec![Vec::new(); batch],
            next_position: 0,
        }
    }

    /// Runs `x [B,T,d]` as the next tokens after what `cache` holds, with the absorbed path over
    /// the cached latents, and appends their `C` and `k_R`. Returns the output `[B,T,d]`.
    ///
    /// The cached tokens are read in place (see the module docs); the result equals the full
    /// causal pass of [`LatentAttention::forward_absorbed`] to rounding (the tests hold them to
    /// 1e-12 relative).
    ///
    /// # Errors
    /// Input errors; [`AttentionError::CacheMismatch`] for a cache of another shape;
    /// [`AttentionError::PositionOutOfRange`] past capacity (the cache is then unchanged).
    pub fn forward_cached(&self, x: &TensorValue, cache: &mut LatentKvCache) -> Result<Tensor, AttentionError> {
        // a decoding step is several parallel passes with serial work between them: keep a worker
        // from parking (crate::parallel)
        llm_kernels::parallel::with_workers_awake(|| self.forward_cached_body(x, cache))
    }

    fn forward_cached_body(&self, x: &TensorValue, cache: &mut LatentKvCache) -> Result<Tensor, AttentionError> {
        let c = &self.config;
        if x.shape().len() == 3 {
            for (what, expected, actual) in [
                ("batch", x.shape()[0], cache.batch),
                ("latent width", c.latent_width, cache.latent_width),
                ("rope width", c.rope_width, cache.rope_width),
            ] {
                if expected != actual {
                    return Err(AttentionError::CacheMismatch { what, expected, actual });
                }
            }
        }
        let first = cache.next_position;
        let [latent, q, q_rope, k_rope] = self.pieces(x, first)?;
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let read = |v: &TensorValue| v.value().at(Stage::Scores);
        let (up_key, up_value) = (read(&self.weights.up_key)?, read(&self.weights.up_value)?);
        // (q·Aᵀ): the queries in latent space [B,H,T,d_c]; the rotated positional ones [B,H,T,d_r]
        let q_latent = self.queries_in_latent_space(&read(&q)?, &up_key).at(Stage::Scores)?;
        let q_rope = read(&q_rope)?;
        cache.append(&read(&latent)?, &read(&k_rope)?, t);
        let out = self.attend_cache(cache, &q_latent, &q_rope, first).and_then(|mixed| {
            // Σ_h (P_h·C)·B_h·W_O,h: the heads' values [B,T,H·d_h], then the output projection
            let heads = self.values_of_latents(&mixed, b * t, &up_value)?;
            let heads = TensorValue::leaf(Tensor::new(&[b, t, c.heads * c.head_width], heads)?, false);
            heads.matmul(&self.weights.output)?.value()
        });
        out.map_err(|source| {
            cache.truncate(first);
            AttentionError::Stage { stage: Stage::OutputProjection, source }
        })
    }

    /// `q_h·A_hᵀ` for every head: queries `[B,H,T,d_h]` moved into latent space `[B,H,T,d_c]`,
    /// each head reading its columns of `A = W_UK [d_c, H·d_h]` as a strided view (the weight is
    /// not permuted into a copy).
    fn queries_in_latent_space(&self, q: &Tensor, up_key: &Tensor) -> Result<Vec<f64>, TensorAutodiffError> {
        let (h, dh, dc) = (self.config.heads, self.config.head_width, self.config.latent_width);
        let t = q.shape()[2];
        let mut out = vec![0.0; q.len() / dh * dc];
        // one task per (batch row, head) lane: [T, d_h] · A_hᵀ [d_h, d_c], on the target read here
        let target = llm_kernels::active();
        let lane = |lane: usize, out: &mut [f64], q: &[f64]| -> Result<(), TensorAutodiffError> {
            let a_h = MatRef::new(&up_key.as_slice()[(lane % h) * dh..], dc, dh, h * dh, 1)?; // A_h [d_c, d_h]
            matmul(out, MatRef::row_major(q, t, dh)?, a_h.t(), false, false)
        };
        out.par_chunks_mut(t * dc)
            .zip(q.as_slice().par_chunks(t * dh))
            .enumerate()
            .try_for_each(|(l, (out, q))| target.within(|| lane(l, out, q)))?;
        Ok(out)
    }

    /// `(P_h·C)·B_h` for every head, side by side: the weighted latents `[rows, H·d_c]` (a row per
    /// new token) into the heads' values `[rows, H·d_h]`, each head reading its columns of
    /// `B = W_UV [d_c, H·d_h]` as a strided view.
    ///
    /// The chapter merges `B_h·W_O,h` into one matrix instead; formed on every call that would cost
    /// `H·d_c·d_h·d` multiply-adds, and the merged `[H·d_c, d]` is `d_c/d_h` times `W_O` to read.
    fn values_of_latents(
        &self,
        mixed: &[f64],
        rows: usize,
        up_value: &Tensor,
    ) -> Result<Vec<f64>, TensorAutodiffError> {
        let (h, dh, dc) = (self.config.heads, self.config.head_width, self.config.latent_width);
        let mut values = vec![0.0; rows * h * dh];
        if rows == 0 {
            return Ok(values);
        }
        for hi in 0..h {
            let weighted = MatRef::new(&mixed[hi * dc..], rows, dc, h * dc, 1)?; // P_h·C [rows, d_c]
            let b_h = MatRef::new(&up_value.as_slice()[hi * dh..], dc, dh, h * dh, 1)?; // B_h [d_c, d_h]
            let head = matmul_new(weighted, b_h, true)?; // [rows, d_h]
            for (row, head_row) in values.chunks_exact_mut(h * dh).zip(head.chunks_exact(dh)) {
                row[hi * dh..(hi + 1) * dh].copy_from_slice(head_row);
            }
        }
        Ok(values)
    }

    /// The weighted latents `P·C` of every new token, `[B, T, H·d_c]` (token-major, the heads of
    /// one token side by side), each token over the cached tokens it sees — read in place.
    ///
    /// `q_latent [B,H,T,d_c]` and `q_rope [B,H,T,d_r]` are the new tokens' queries, whose latents
    /// and rotated keys the cache already holds from position `first` on. One task per
    /// (batch row, new token); each value is summed the same way whatever the thread count.
    fn attend_cache(
        &self,
        cache: &LatentKvCache,
        q_latent: &[f64],
        q_rope: &Tensor,
        first: usize,
    ) -> Result<Vec<f64>, TensorAutodiffError> {
        let (h, dc, dr) = (self.config.heads, self.config.latent_width, self.config.rope_width);
        let (b, t) = (q_rope.shape()[0], q_rope.shape()[2]);
        let scale = self.scale();
        let token = |job: usize, out: &mut [f64], parallel: bool| -> Result<(), TensorAutodiffError> {
            let (bi, ti) = (job / t, job % t);
            let seen = first + ti + 1; // causal: the tokens at positions 0..=first + ti
            let latent = MatRef::row_major(&cache.latent[bi][..seen * dc], seen, dc)?; // C [n, d_c]
            let rope_key = MatRef::row_major(&cache.rope_key[bi][..seen * dr], seen, dr)?; // k_R [n, d_r]
            // the H heads of token ti as the rows of one view: head hi at ((bi·H + hi)·T + ti)·w
            let at = bi * h * t + ti;
            let q_latent = MatRef::new(&q_latent[at * dc..], h, dc, t * dc, 1)?; // [H, d_c]
            let q_rope = MatRef::new(&q_rope.as_slice()[at * dr..], h, dr, t * dr, 1)?; // [H, d_r]
            // content + position, then scaled, as the full pass adds them: [H, n]
            let mut scores = matmul_new(q_latent, latent.t(), parallel)?;
            matmul(&mut scores, q_rope, rope_key.t(), true, parallel)?;
            let mut weights = vec![0.0; scores.len()];
            for (s, w) in scores.chunks_exact_mut(seen).zip(weights.chunks_exact_mut(seen)) {
                s.iter_mut().for_each(|v| *v *= scale);
                softmax_row(s, w);
            }
            matmul(out, MatRef::row_major(&weights, h, seen)?, latent, false, parallel) // P·C: [H, d_c]
        };
        let mut mixed = vec![0.0; b * t * h * dc];
        if b * t == 1 {
            // one decoding row: the kernels use the threads
            token(0, &mut mixed, true)?;
        } else {
            let target = llm_kernels::active();
            mixed
                .par_chunks_mut(h * dc)
                .enumerate()
                .try_for_each(|(job, out)| target.within(|| token(job, out, false)))?;
        }
        Ok(mixed)
    }
}

#[cfg(test)]
mod tests {
    use crate::attention::{LatentAttention, LatentConfig};
    use crate::autodiff::constant;
    use crate::nn::SplitMix64;

    #[test]
    fn a_step_appends_in_place_and_the_buffers_grow_geometrically() {
        let config = LatentConfig {
            model_width: 8,
            heads: 2,
            head_width: 4,
            latent_width: 6,
            rope_width: 2,
            max_positions: 600,
            rope_base: 100.0,
        };
        let layer = LatentAttention::new(config, &mut SplitMix64::new(1)).unwrap();
        let mut cache = layer.new_cache(2);
        assert_eq!(cache.capacity(), 0);
        let mut moves = 0;
        for step in 0..512 {
            let token = constant(&[2, 1, 8], &[0.01 * step as f64; 16]).unwrap();
            let before: Vec<*const f64> = cache.latent.iter().chain(&cache.rope_key).map(|row| row.as_ptr()).collect();
            let room = cache.capacity();
            layer.forward_cached(&token, &mut cache).unwrap();
            let after: Vec<*const f64> = cache.latent.iter().chain(&cache.rope_key).map(|row| row.as_ptr()).collect();
            if step < room {
                // room for the token: what is stored stays where it is, nothing is copied
                assert_eq!(before, after, "step {step}");
            } else {
                moves += 1;
            }
            assert!(cache.capacity() > step);
        }
        // each regrowth at least doubles the room: 512 tokens need at most ⌈log₂ 512⌉ + 1 = 10
        assert!(moves <= 10, "{moves} regrowths for 512 tokens");
        assert_eq!(cache.len(), 512);
        // a clone keeps the room, so its next step does not regrow either
        let copy = cache.clone();
        assert_eq!(copy.capacity(), cache.capacity());
    }
}
