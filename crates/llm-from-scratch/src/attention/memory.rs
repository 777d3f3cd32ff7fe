//! Memory accounting: what a KV cache and the attention matrix cost, in bytes.
//!
//! Chapters 32, 34 and 35 print these sizes.
//!
//! A cache holds, per layer, `K` and `V` for `G` heads of width `d_h` at every kept position:
//! `2·G·d_h·T·B·b` bytes for `T` positions, batch `B`, `b` bytes per number (2 for fp16). A sliding
//! window keeps at most its visible keys, so local layers stop growing; models that mix global and
//! local layers pay full price only for the global ones. A latent cache stores `d_c + d_r` numbers
//! per token instead of `2·G·d_h`.

use crate::attention::SlidingWindow;

/// `Σ values`, saturating at `u128::MAX`.
pub(crate) fn total(values: &[u128]) -> u128 {
    values.iter().fold(0u128, |acc, &v| acc.saturating_add(v))
}

/// `Π values`, saturating at `u128::MAX` (absurd sizes give a huge answer, never a panic).
pub(crate) fn product(values: &[usize]) -> u128 {
    values.iter().fold(1u128, |acc, &v| acc.saturating_mul(v as u128))
}

/// The cache-relevant shape of one attention layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheLayout {
    /// Grouped-query (or multi-head, multi-query) attention, optionally windowed.
    Grouped {
        /// `G`.
        kv_heads: usize,
        /// `d_h`.
        head_width: usize,
        /// A window caps the kept positions at its visible keys.
        window: Option<SlidingWindow>,
    },
    /// Latent attention: `d_c + d_r` numbers per token.
    Latent {
        /// `d_c`.
        latent_width: usize,
        /// `d_r`.
        rope_width: usize,
    },
}

impl CacheLayout {
    /// Numbers this layer keeps for `tokens` positions of one sequence.
    pub fn values(&self, tokens: usize) -> u128 {
        match *self {
            CacheLayout::Grouped { kv_heads, head_width, window } => {
                let kept = window.map_or(tokens, |w| tokens.min(w.visible_keys()));
                product(&[2, kv_heads, head_width, kept])
            }
            CacheLayout::Latent { latent_width, rope_width } => {
                (latent_width as u128 + rope_width as u128).saturating_mul(tokens as u128)
            }
        }
    }
}

/// Bytes of the caches of all `layers` for `tokens` positions, `batch` sequences and
/// `bytes_per_value` bytes per number.
///
/// ```
/// use llm_from_scratch::attention::{CacheLayout, kv_cache_bytes};
/// // LLaMA-7B: 32 layers of 32 heads × 128, 4096 tokens in fp16 = 2 GiB
/// let layer = CacheLayout::Grouped { kv_heads: 32, head_width: 128, window: None };
/// assert_eq!(kv_cache_bytes(&[layer; 32], 4096, 1, 2), 2 << 30);
/// ```
pub fn kv_cache_bytes(layers: &[CacheLayout], tokens: usize, batch: usize, bytes_per_value: usize) -> u128 {
    let values = total(&layers.iter().map(|l| l.values(tokens)).collect::<Vec<_>>());
    values.saturating_mul(product(&[batch, bytes_per_value]))
}

/// How far back information can travel through `layers` windowed layers: each layer reaches
/// `W` positions further, so `L·W` in all (32 layers × 4096 = 131 072).
pub fn receptive_field(layers: usize, window: usize) -> u128 {
    product(&[layers, window])
}

/// A lower bound on the bytes the explicit path stores for one attention call: its scores and
/// weights, `2·B·H·T_q·T_k` numbers of `bytes_per_value` (reshaped copies and a sink column add
/// more). The tiled path stores `B·H·T_q` log-sum-exps instead.
pub fn explicit_attention_bytes(batch: usize, heads: usize, t_q: usize, t_k: usize, bytes_per_value: usize) -> u128 {
    product(&[2, batch, heads, t_q, t_k, bytes_per_value])
}

/// Bytes the tiled path keeps between forward and backward: one `log Σ e^s` per query row.
pub fn tiled_attention_bytes(batch: usize, heads: usize, t_q: usize, bytes_per_value: usize) -> u128 {
    product(&[batch, heads, t_q, bytes_per_value])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u128 = 1 << 20;

    #[test]
    fn known_models() {
        let grouped = |g, d, w| CacheLayout::Grouped { kv_heads: g, head_width: d, window: w };
        assert_eq!(kv_cache_bytes(&[grouped(8, 128, None); 32], 4096, 1, 2), 512 * MIB); // Mistral-7B
        assert_eq!(kv_cache_bytes(&[grouped(1, 256, None); 18], 4096, 1, 2), 72 * MIB); // Gemma-2B
        assert_eq!(kv_cache_bytes(&[grouped(16, 256, None); 28], 4096, 1, 2), 1792 * MIB); // Gemma-7B
        // a window caps the cache: 4096 visible keys keep a 32k-token cache at the 4096 size
        let local = grouped(8, 128, Some(SlidingWindow::Exclusive(4096)));
        assert_eq!(kv_cache_bytes(&[local; 32], 32_768, 1, 2), 512 * MIB);
        // a mix: 1 global layer in 4 pays for all 32k tokens
        let mix: Vec<CacheLayout> = (0..32).map(|i| if i % 4 == 0 { grouped(8, 128, None) } else { local }).collect();
        assert_eq!(kv_cache_bytes(&mix, 32_768, 1, 2), 8 * 128 * MIB + 24 * 16 * MIB); // 8 global + 24 local
        assert_eq!(receptive_field(32, 4096), 131_072);
        let latent = CacheLayout::Latent { latent_width: 512, rope_width: 64 };
        assert_eq!(latent.values(10), 5760);
        assert_eq!(explicit_attention_bytes(1, 8, 4096, 4096, 8), 2 << 30);
        assert_eq!(tiled_attention_bytes(1, 8, 4096, 8), 256 * 1024);
    }
}
