//! The latent KV cache of [`LatentAttention`]: per token only the latent `C` (`d_c` numbers) and
//! the shared rotated key `k_R` (`d_r`), and decoding with the absorbed path over them.

use crate::attention::error::AtStage;
use crate::attention::{AttentionError, LatentAttention, Stage};
use crate::autodiff::{TensorValue, constant};
use crate::tensor::{Mask, Tensor};

/// The latent KV cache: `C` and `k_R` per token, nothing else.
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
    /// # Errors
    /// Input errors; [`AttentionError::CacheMismatch`] for a cache of another shape;
    /// [`AttentionError::PositionOutOfRange`] past capacity (the cache is then unchanged).
    pub fn forward_cached(&self, x: &TensorValue, cache: &mut LatentKvCache) -> Result<Tensor, AttentionError> {
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
        let (new_c, new_kr) = (read(&latent)?, read(&k_rope)?);
        let (dc, dr) = (c.latent_width, c.rope_width);
        for bi in 0..b {
            cache.latent[bi].extend_from_slice(&new_c.as_slice()[bi * t * dc..(bi + 1) * t * dc]);
            cache.rope_key[bi].extend_from_slice(&new_kr.as_slice()[bi * t * dr..(bi + 1) * t * dr]);
        }
        cache.next_position = first + t;
        let total = cache.next_position;
        let all = |lanes: &[Vec<f64>], w: usize| constant(&[b, 1, total, w], &lanes.concat()).at(Stage::Scores);
        let (latent_all, rope_all) = (all(&cache.latent, dc)?, all(&cache.rope_key, dr)?);
        let mask = Mask::causal(t, total, first).at(Stage::Softmax)?;
        let (_, output) = self.attend_absorbed(&q, &q_rope, &latent_all, &rope_all, &mask)?;
        output.value().at(Stage::OutputProjection)
    }
}
