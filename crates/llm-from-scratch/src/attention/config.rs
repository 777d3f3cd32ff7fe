//! [`AttentionConfig`]: every setting of a [`GroupedQueryAttention`](crate::attention::GroupedQueryAttention) layer in one place, and
//! [`AttentionPath`], the choice between the explicit and the tiled attention.
//!
//! Chapter 32 (`ch32-grouped-query-attention`) introduces it; chapters 33, 34 and 36 add the
//! window, the tiled kernel and the sinks.

use crate::attention::memory::total;
use crate::attention::{AttentionError, SlidingWindow};
use crate::nn::{RopeLayout, RotaryEmbedding};

/// Every setting of a [`GroupedQueryAttention`](crate::attention::GroupedQueryAttention) layer in one place.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionConfig {
    /// `d`, the width of the residual stream.
    pub model_width: usize,
    /// `H`, query heads.
    pub query_heads: usize,
    /// `G`, key/value heads (`H % G == 0`).
    pub kv_heads: usize,
    /// `d_h`, the width of one head (even, for RoPE).
    pub head_width: usize,
    /// RoPE capacity: positions `0..max_positions`.
    pub max_positions: usize,
    /// RoPE frequency base.
    pub rope_base: f64,
    /// RoPE pairing.
    pub rope_layout: RopeLayout,
    /// Biases on all four projections.
    pub bias: bool,
    /// Sliding window, if any.
    pub window: Option<SlidingWindow>,
    /// Dropout on the attention weights after the softmax (training only).
    pub attention_dropout: f64,
    /// Dropout on the layer's output (training only).
    pub output_dropout: f64,
    /// The attention path: explicit (weights inspectable) or tiled (O(T) memory).
    pub path: AttentionPath,
    /// A learned per-head sink logit (zero value vector) in every softmax.
    pub sinks: bool,
}

/// How the attention weights are computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionPath {
    /// Every score materialised, weights returned in the trace: the chapters' path.
    #[default]
    Explicit,
    /// Blocks with an online softmax, never forming `[T, T]`: long sequences and training.
    Tiled,
}

impl AttentionConfig {
    /// `H` query heads over `G` key/value heads of width `d_h`; RoPE base 10 000 over 2048
    /// positions, no bias, no window, no dropout.
    pub fn new(model_width: usize, query_heads: usize, kv_heads: usize, head_width: usize) -> Self {
        Self {
            model_width,
            query_heads,
            kv_heads,
            head_width,
            max_positions: 2048,
            rope_base: 10_000.0,
            rope_layout: RopeLayout::AdjacentPairs,
            bias: false,
            window: None,
            attention_dropout: 0.0,
            output_dropout: 0.0,
            path: AttentionPath::Explicit,
            sinks: false,
        }
    }

    /// Selects the attention path.
    pub fn with_path(mut self, path: AttentionPath) -> Self {
        self.path = path;
        self
    }

    /// Adds (or removes) learned per-head sink logits.
    pub fn with_sinks(mut self, sinks: bool) -> Self {
        self.sinks = sinks;
        self
    }

    /// Multi-head attention: `G = H` heads of width `d / H` (checked by [`AttentionConfig::validate`]).
    pub fn multi_head(model_width: usize, heads: usize) -> Self {
        Self::new(model_width, heads, heads, model_width.checked_div(heads).unwrap_or(0))
    }

    /// Sets RoPE capacity and base.
    pub fn with_rope(mut self, max_positions: usize, base: f64) -> Self {
        self.max_positions = max_positions;
        self.rope_base = base;
        self
    }

    /// Sets biases on or off.
    pub fn with_bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }

    /// Sets a sliding window.
    pub fn with_window(mut self, window: SlidingWindow) -> Self {
        self.window = Some(window);
        self
    }

    /// Sets both dropout probabilities.
    pub fn with_dropout(mut self, attention: f64, output: f64) -> Self {
        self.attention_dropout = attention;
        self.output_dropout = output;
        self
    }

    /// Sets the RoPE pairing.
    pub fn with_rope_layout(mut self, layout: RopeLayout) -> Self {
        self.rope_layout = layout;
        self
    }

    /// `H / G`, query heads per key/value head.
    pub fn group_size(&self) -> usize {
        self.query_heads / self.kv_heads.max(1)
    }

    /// Checks every rule, in order: `d > 0`, `H > 0`, `G > 0`, `H % G == 0`, `d_h > 0` and even,
    /// the window, the dropout probabilities, then RoPE's capacity and base.
    ///
    /// # Errors
    /// The first rule broken, as an [`AttentionError`].
    pub fn validate(&self) -> Result<(), AttentionError> {
        if self.model_width == 0 {
            return Err(AttentionError::ZeroModelWidth);
        }
        if self.query_heads == 0 {
            return Err(AttentionError::ZeroHeads);
        }
        if self.kv_heads == 0 {
            return Err(AttentionError::ZeroKvHeads);
        }
        if !self.query_heads.is_multiple_of(self.kv_heads) {
            return Err(AttentionError::GroupsDoNotDivide { query_heads: self.query_heads, kv_heads: self.kv_heads });
        }
        AttentionError::check_head_width(self.head_width, self.model_width, self.query_heads)?;
        // every weight must be allocatable: W_Q holds d·H·d_h numbers
        crate::tensor::dense::element_count(
            "attention config",
            &[self.model_width, self.query_heads, self.head_width],
        )?;
        if let Some(w) = self.window {
            w.validate()?;
        }
        for (which, p) in [("attention", self.attention_dropout), ("output", self.output_dropout)] {
            if !(0.0..1.0).contains(&p) {
                return Err(AttentionError::InvalidDropout { which, p });
            }
        }
        if self.path == AttentionPath::Tiled && self.attention_dropout > 0.0 {
            return Err(AttentionError::Unsupported {
                feature: "attention dropout with the tiled kernel",
                reason: "the tiled kernel never forms the weights a dropout mask would apply to",
            });
        }
        // the rules only: the layer builds its RoPE, a configuration's check allocates nothing
        RotaryEmbedding::check_settings(self.head_width, self.max_positions, self.rope_base)
            .map_err(AttentionError::Rope)
    }

    /// The layer's RoPE, built from these settings (allocates its tables lazily).
    pub(crate) fn rope(&self) -> Result<RotaryEmbedding, AttentionError> {
        RotaryEmbedding::new(self.head_width, self.max_positions, self.rope_base)
            .map(|r| r.with_layout(self.rope_layout))
            .map_err(AttentionError::Rope)
    }

    /// Scalars in the layer: `2·d·d_h·(H+G)` (+ `H·d_h + 2·G·d_h + d` with biases, + `H` sinks).
    pub fn parameter_count(&self) -> usize {
        let (d, dh, h, g) = (self.model_width, self.head_width, self.query_heads, self.kv_heads);
        let weights = crate::attention::memory::product(&[2, d, dh, h.saturating_add(g)]);
        let biases = if self.bias { total(&[product3(h, dh, 1), product3(2, g, dh), d as u128]) } else { 0 };
        let total = total(&[weights, biases, if self.sinks { h as u128 } else { 0 }]);
        usize::try_from(total).unwrap_or(usize::MAX) // saturates for sizes no machine could hold
    }

    /// Bytes of a KV cache over `layers` such layers: `2·L·G·d_h·T·B·b` for `tokens` positions
    /// (capped by the window's visible keys), `batch` rows and `bytes_per_value` (2 for fp16).
    pub fn kv_cache_bytes(&self, layers: usize, tokens: usize, batch: usize, bytes_per_value: usize) -> u128 {
        let kept = self.window.map_or(tokens, |w| tokens.min(w.visible_keys()));
        crate::attention::memory::product(&[2, layers, self.kv_heads, self.head_width, kept, batch, bytes_per_value])
    }
}

/// `a·b·c` in u128 (saturating), for parameter counts.
fn product3(a: usize, b: usize, c: usize) -> u128 {
    crate::attention::memory::product(&[a, b, c])
}
