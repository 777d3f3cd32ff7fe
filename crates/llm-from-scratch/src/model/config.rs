//! [`DecoderConfig`]: every hyperparameter of the decoder in one place.

use crate::attention::{AttentionConfig, AttentionPath, SlidingWindow};
use crate::model::ModelError;
use crate::nn::RopeLayout;

/// The most parameters a [`DecoderConfig`] may ask for: 2³¹ (16 GiB of `f64`, the same ceiling as
/// one tensor's [`crate::tensor::MAX_ELEMENTS`]). [`DecoderConfig::validate`] refuses more before
/// anything is allocated, so a configuration with a trillion layers is an error, not an abort.
pub const MAX_PARAMETERS: usize = crate::tensor::MAX_ELEMENTS;

/// The architecture of a LLaMA-family decoder.
///
/// ```text
/// tokens [B, T] → embed_tokens [V, d] → x [B, T, d]
/// N × { x = x + Attention(RMSNorm(x));  x = x + SwiGLU(RMSNorm(x)) }
/// logits = RMSNorm(x) · W_head           [B, T, V]   (W_head = embed_tokensᵀ when tied)
/// ```
///
/// ```
/// use llm_from_scratch::model::DecoderConfig;
/// // 16 tokens, width 32, 2 layers of 4 query heads sharing 2 key/value heads
/// let config = DecoderConfig::new(16, 32, 2, 4).with_kv_heads(2).with_ffn_width(64);
/// config.validate()?;
/// assert_eq!(config.head_width, 8);
/// // embedding 16·32 + 2 × (2·32 gains + 2·32·8·(4+2) attention + 3·32·64 feed-forward) + 32, tied head
/// assert_eq!(config.parameter_count(), 512 + 2 * (64 + 3072 + 6144) + 32);
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// `V`, the number of token ids.
    pub vocab_size: usize,
    /// `d`, the width of the residual stream.
    pub model_width: usize,
    /// `N`, the number of blocks.
    pub layers: usize,
    /// `H`, query heads per block.
    pub query_heads: usize,
    /// `G`, key/value heads per block (`H % G == 0`).
    pub kv_heads: usize,
    /// `d_h`, the width of one head (even, for RoPE).
    pub head_width: usize,
    /// The hidden width of the SwiGLU feed-forward.
    pub ffn_width: usize,
    /// RoPE capacity: positions `0..max_positions`.
    pub max_positions: usize,
    /// RoPE frequency base (LLaMA: 10 000).
    pub rope_base: f64,
    /// RoPE pairing (Hugging Face checkpoints: split halves).
    pub rope_layout: RopeLayout,
    /// ε of every RMSNorm.
    pub rms_eps: f64,
    /// A sliding window on every attention layer, if any.
    pub window: Option<SlidingWindow>,
    /// The LM head reuses the embedding table (transposed) instead of its own weight.
    pub tie_embeddings: bool,
    /// The attention path of full passes (training and recomputation).
    pub path: AttentionPath,
    /// Standard deviation of the normal initialisation of the embedding table.
    pub embedding_init_std: f64,
}

impl DecoderConfig {
    /// `V` tokens, width `d`, `N` blocks of multi-head attention with `heads` heads of width
    /// `d / heads`; feed-forward width `8d/3` rounded up to a multiple of 8 (the SwiGLU choice that
    /// keeps the parameters of a `4d` two-matrix MLP), RoPE base 10 000 over 2048 positions,
    /// ε = 1e-6, tied embeddings initialised with std 0.02, explicit attention path.
    pub fn new(vocab_size: usize, model_width: usize, layers: usize, heads: usize) -> Self {
        Self {
            vocab_size,
            model_width,
            layers,
            query_heads: heads,
            kv_heads: heads,
            head_width: model_width.checked_div(heads).unwrap_or(0),
            ffn_width: model_width.saturating_mul(8).div_ceil(3).div_ceil(8).saturating_mul(8),
            max_positions: 2048,
            rope_base: 10_000.0,
            rope_layout: RopeLayout::AdjacentPairs,
            rms_eps: 1e-6,
            window: None,
            tie_embeddings: true,
            path: AttentionPath::Explicit,
            embedding_init_std: 0.02,
        }
    }

    /// Sets `G` (grouped-query attention; 1 is multi-query).
    pub fn with_kv_heads(mut self, kv_heads: usize) -> Self {
        self.kv_heads = kv_heads;
        self
    }

    /// Sets `d_h` independently of `d / H`.
    pub fn with_head_width(mut self, head_width: usize) -> Self {
        self.head_width = head_width;
        self
    }

    /// Sets the feed-forward hidden width.
    pub fn with_ffn_width(mut self, ffn_width: usize) -> Self {
        self.ffn_width = ffn_width;
        self
    }

    /// Sets RoPE capacity and base.
    pub fn with_rope(mut self, max_positions: usize, base: f64) -> Self {
        self.max_positions = max_positions;
        self.rope_base = base;
        self
    }

    /// Sets the RoPE pairing.
    pub fn with_rope_layout(mut self, layout: RopeLayout) -> Self {
        self.rope_layout = layout;
        self
    }

    /// Sets ε of every RMSNorm.
    pub fn with_rms_eps(mut self, eps: f64) -> Self {
        self.rms_eps = eps;
        self
    }

    /// Sets a sliding window on every attention layer.
    pub fn with_window(mut self, window: SlidingWindow) -> Self {
        self.window = Some(window);
        self
    }

    /// Ties (or unties) the LM head to the embedding.
    pub fn with_tied_embeddings(mut self, tied: bool) -> Self {
        self.tie_embeddings = tied;
        self
    }

    /// Selects the attention path of full passes.
    pub fn with_path(mut self, path: AttentionPath) -> Self {
        self.path = path;
        self
    }

    /// Sets the standard deviation of the embedding's initialisation.
    pub fn with_embedding_init_std(mut self, std: f64) -> Self {
        self.embedding_init_std = std;
        self
    }

    /// The configuration of every attention layer (no bias, no dropout).
    pub fn attention(&self) -> AttentionConfig {
        let mut config = AttentionConfig::new(self.model_width, self.query_heads, self.kv_heads, self.head_width)
            .with_rope(self.max_positions, self.rope_base)
            .with_rope_layout(self.rope_layout)
            .with_path(self.path);
        config.window = self.window;
        config
    }

    /// Checks every rule: `V > 0`, `N > 0`, a positive feed-forward width, a finite ε ≥ 0, a
    /// finite initialisation std ≥ 0, the attention rules of [`AttentionConfig::validate`], tensors
    /// small enough to allocate, and at most [`MAX_PARAMETERS`] in the whole model. Nothing is
    /// allocated by the check.
    ///
    /// # Errors
    /// [`ModelError::InvalidSetting`] (module `model config`) or [`ModelError::Attention`].
    pub fn validate(&self) -> Result<(), ModelError> {
        let positive = |setting, value: usize| {
            if value == 0 { Err(ModelError::setting("model config", setting, 0, "must be positive")) } else { Ok(()) }
        };
        positive("vocab_size", self.vocab_size)?;
        positive("layers", self.layers)?;
        positive("ffn_width", self.ffn_width)?;
        if !(self.rms_eps >= 0.0 && self.rms_eps.is_finite()) {
            return Err(ModelError::setting("model config", "rms_eps", self.rms_eps, "must be finite and ≥ 0"));
        }
        if !(self.embedding_init_std >= 0.0 && self.embedding_init_std.is_finite()) {
            return Err(ModelError::setting(
                "model config",
                "embedding_init_std",
                self.embedding_init_std,
                "must be finite and ≥ 0",
            ));
        }
        self.attention().validate()?;
        for shape in [[self.vocab_size, self.model_width], [self.model_width, self.ffn_width]] {
            crate::tensor::dense::element_count("model config", &shape)?;
        }
        // every block allocates its weights: the whole model, not only each tensor, must fit
        let count = self.parameter_count();
        if count > MAX_PARAMETERS {
            return Err(ModelError::setting(
                "model config",
                "parameter count",
                count,
                "exceeds MAX_PARAMETERS = 2^31 (16 GiB of f64)",
            ));
        }
        Ok(())
    }

    /// Scalars in one block: two RMSNorm gains, attention `2·d·d_h·(H+G)`, SwiGLU `3·d·ffn`.
    pub fn block_parameter_count(&self) -> usize {
        let p = crate::attention::memory::product;
        let parts = [
            p(&[2, self.model_width]),
            self.attention().parameter_count() as u128,
            p(&[3, self.model_width, self.ffn_width]),
        ];
        let total = crate::attention::memory::total(&parts);
        usize::try_from(total).unwrap_or(usize::MAX) // saturates for sizes no machine could hold
    }

    /// Scalars in the model: embedding `V·d`, `N` blocks, the final gain `d`, and `d·V` for an
    /// untied head.
    pub fn parameter_count(&self) -> usize {
        let p = crate::attention::memory::product;
        let (v, d) = (self.vocab_size, self.model_width);
        let head = if self.tie_embeddings { 0 } else { p(&[d, v]) };
        let total = crate::attention::memory::total(&[
            p(&[v, d]),
            p(&[self.layers, self.block_parameter_count()]),
            d as u128,
            head,
        ]);
        usize::try_from(total).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::AttentionError;

    #[test]
    fn defaults_and_rules() {
        let c = DecoderConfig::new(100, 48, 3, 6);
        assert_eq!((c.head_width, c.ffn_width, c.kv_heads), (8, 128, 6));
        assert!(c.validate().is_ok());
        let err = DecoderConfig::new(0, 48, 3, 6).validate().unwrap_err();
        assert_eq!(err.to_string(), "model config: vocab_size = 0 is invalid (must be positive)");
        let err = c.clone().with_rms_eps(-1.0).validate().unwrap_err();
        assert!(err.to_string().starts_with("model config: rms_eps = -1"), "{err}");
        let err = c.clone().with_kv_heads(4).validate().unwrap_err();
        assert!(matches!(err, ModelError::Attention(AttentionError::GroupsDoNotDivide { .. })), "{err}");
        let err = c.with_head_width(3).validate().unwrap_err();
        assert!(matches!(err, ModelError::Attention(AttentionError::OddHeadWidth { .. })), "{err}");
        assert!(DecoderConfig::new(usize::MAX / 2, 1 << 20, 1, 1 << 10).validate().is_err());
    }

    #[test]
    fn untied_head_adds_d_times_v() {
        let c = DecoderConfig::new(10, 8, 1, 2).with_ffn_width(16);
        assert_eq!(c.clone().with_tied_embeddings(false).parameter_count() - c.parameter_count(), 80);
        // one block: 2·8 gains + 4·8·8 attention + 3·8·16 feed-forward
        assert_eq!(c.block_parameter_count(), 16 + 256 + 384);
    }
}
