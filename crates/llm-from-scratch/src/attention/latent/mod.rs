//! Multi-head latent attention (MLA): keys and values rebuilt from one small latent per token.
//!
//! Chapter 35 (`ch35-latent-attention`) teaches it.
//!
//! Every token is compressed to a latent `c = x·W_DKV` of width `d_c`, shared by all heads. Head
//! `h` reconstructs its key and value from it: `K_h = C·A_h` and `V_h = C·B_h` (`A = W_UK`,
//! `B = W_UV`). A KV cache then stores `C` — `d_c` numbers per token instead of `2·H·d_h`.
//!
//! **Absorption.** Because `A_h` is a fixed matrix, `q_h·K_hᵀ = q_h·(C·A_h)ᵀ = (q_h·A_hᵀ)·Cᵀ`: the
//! query can be moved into latent space once, and scores computed directly against the cached
//! `C` without rebuilding any key. Likewise `P_h·V_h·W_O,h = (P_h·C)·(B_h·W_O,h)`: `B` merges into
//! the output projection. The absorbed path equals the direct one to rounding.
//!
//! **Decoupled RoPE.** RoPE rotates a key by its position `n`: `R_n·k`. A rotation between `q` and
//! `C` depends on `n`, so it cannot be folded into the fixed `A_h` — rotating the reconstructed key
//! breaks absorption (a test shows it). MLA therefore adds a separate positional branch: a small
//! rotated query `q_R = RoPE(x·W_QR)` per head and one rotated key `k_R = RoPE(x·W_KR)` shared by all
//! heads, cached beside `C`:
//!
//! ```text
//! score_h(m, n) = (q_h(m)·k_h(n) + q_R,h(m)·k_R(n)) / √(d_h + d_r)
//! ```

use crate::attention::error::{AtStage, OnBranch};
use crate::attention::input::check_sequence;
use crate::attention::{AttentionError, Branch, Stage, merge_heads};
use crate::autodiff::TensorValue;
use crate::error::Shape;
use crate::nn::{NamedParameter, NamedParameters, RopeError, RotaryEmbedding, SplitMix64};
use crate::tensor::{Mask, Tensor};

mod cache;

pub use cache::LatentKvCache;

/// Sizes of a [`LatentAttention`] layer.
#[derive(Clone, Debug, PartialEq)]
pub struct LatentConfig {
    /// `d`.
    pub model_width: usize,
    /// `H`.
    pub heads: usize,
    /// `d_h`, width of the content part of a query/key head.
    pub head_width: usize,
    /// `d_c`, width of the latent.
    pub latent_width: usize,
    /// `d_r`, width of the decoupled RoPE branch (even).
    pub rope_width: usize,
    /// RoPE capacity.
    pub max_positions: usize,
    /// RoPE base.
    pub rope_base: f64,
}

impl LatentConfig {
    /// Scalars in the layer: `W_Q, W_QR, W_DKV, W_KR, W_UK, W_UV, W_O`.
    pub fn parameter_count(&self) -> usize {
        let (d, h, dh, dc, dr) = (self.model_width, self.heads, self.head_width, self.latent_width, self.rope_width);
        let p = crate::attention::memory::product;
        let total = crate::attention::memory::total(&[
            p(&[d, h, dh]),
            p(&[d, h, dr]),
            p(&[d, dc]),
            p(&[d, dr]),
            p(&[2, dc, h, dh]),
            p(&[h, dh, d]),
        ]);
        usize::try_from(total).unwrap_or(usize::MAX) // saturates for sizes no machine could hold
    }

    /// Numbers cached per token and layer: `d_c + d_r` (versus `2·G·d_h` for grouped attention).
    pub fn cached_per_token(&self) -> usize {
        self.latent_width.saturating_add(self.rope_width)
    }

    fn validate(&self) -> Result<RotaryEmbedding, AttentionError> {
        for (value, what) in [
            (self.model_width, "model width"),
            (self.heads, "heads"),
            (self.head_width, "head width"),
            (self.latent_width, "latent width"),
        ] {
            if value == 0 {
                return Err(AttentionError::ZeroSize { what });
            }
        }
        let widest = self.head_width.max(self.rope_width).max(self.latent_width);
        crate::tensor::dense::element_count(
            "latent config",
            &[self.model_width.max(self.latent_width), self.heads, widest],
        )?;
        RotaryEmbedding::check_head_width(self.rope_width).map_err(|e| match e {
            RopeError::OddHeadWidth { head_width } => AttentionError::OddRopeWidth { rope_width: head_width },
            other => AttentionError::Rope(other),
        })?;
        RotaryEmbedding::new(self.rope_width, self.max_positions, self.rope_base).map_err(AttentionError::Rope)
    }
}

/// The parameters of a latent attention layer, `y = x·W` layout.
#[derive(Clone, Debug)]
pub struct LatentWeights {
    /// `W_Q [d, H·d_h]`.
    pub query: TensorValue,
    /// `W_QR [d, H·d_r]`, the positional query branch.
    pub query_rope: TensorValue,
    /// `W_DKV [d, d_c]`, down-projection to the latent.
    pub down: TensorValue,
    /// `W_KR [d, d_r]`, the shared positional key.
    pub key_rope: TensorValue,
    /// `A = W_UK [d_c, H·d_h]`, latent → keys.
    pub up_key: TensorValue,
    /// `B = W_UV [d_c, H·d_h]`, latent → values.
    pub up_value: TensorValue,
    /// `W_O [H·d_h, d]`.
    pub output: TensorValue,
}

impl LatentWeights {
    /// The weights from a list in the order of [`LatentAttention::parameters`]: query, query_rope,
    /// down, key_rope, up_key, up_value, output (e.g. the leaves a gradient check hands back).
    ///
    /// # Errors
    /// [`AttentionError::ParameterShape`] naming the list when it does not hold exactly seven.
    pub fn from_ordered(list: &[TensorValue]) -> Result<Self, AttentionError> {
        let [query, query_rope, down, key_rope, up_key, up_value, output] = list else {
            return Err(AttentionError::ParameterShape {
                name: "latent weight list",
                expected: Shape(vec![7]),
                actual: Shape(vec![list.len()]),
            });
        };
        let c = |v: &TensorValue| v.clone();
        Ok(Self {
            query: c(query),
            query_rope: c(query_rope),
            down: c(down),
            key_rope: c(key_rope),
            up_key: c(up_key),
            up_value: c(up_value),
            output: c(output),
        })
    }
}

/// Everything a forward pass returns.
#[derive(Clone, Debug)]
pub struct LatentOutput {
    /// The latent `C [B, T, d_c]` (what a cache stores).
    pub latent: TensorValue,
    /// The rotated shared key `k_R [B, 1, T, d_r]` (cached beside `C`).
    pub rope_key: TensorValue,
    /// Attention weights `[B, H, T, T]`.
    pub weights: TensorValue,
    /// The layer's output `[B, T, d]`.
    pub output: TensorValue,
}

/// Multi-head latent attention with a decoupled RoPE branch (causal).
///
/// # Shapes
/// `x [B, T, d] → output [B, T, d]`; the latent `C [B, T, d_c]` and the shared rotated key
/// `k_R [B, 1, T, d_r]` are what a [`LatentKvCache`] keeps (see [`LatentOutput`]).
///
/// # Errors
/// [`LatentAttention::new`]: [`AttentionError::ZeroSize`], [`AttentionError::OddRopeWidth`] or
/// [`AttentionError::Rope`]; the forwards: input errors (rank, width, no token, positions past
/// `max_positions`) and [`AttentionError::CacheMismatch`] for a cache of another layer or batch.
///
/// # Example
/// ```
/// use llm_from_scratch::attention::{LatentAttention, LatentConfig};
/// use llm_from_scratch::{constant, nn::SplitMix64};
/// let config = LatentConfig {
///     model_width: 8, heads: 2, head_width: 4, latent_width: 3, rope_width: 2,
///     max_positions: 16, rope_base: 10_000.0,
/// };
/// let layer = LatentAttention::new(config, &mut SplitMix64::new(0))?;
/// let x = constant(&[1, 4, 8], &(0..32).map(|i| (i as f64 * 0.3).cos()).collect::<Vec<_>>())?;
/// let direct = layer.forward(&x, 0)?.output.value()?;
/// let absorbed = layer.forward_absorbed(&x, 0)?.output.value()?;
/// assert!(direct.max_abs_diff(&absorbed).unwrap() < 1e-12);
/// let mut cache = layer.new_cache(1);
/// layer.forward_cached(&x, &mut cache)?;
/// assert_eq!(cache.stored_values(), 4 * (3 + 2)); // d_c + d_r per token, not 2·H·d_h = 16
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct LatentAttention {
    config: LatentConfig,
    weights: LatentWeights,
    rope: RotaryEmbedding,
}

impl LatentAttention {
    /// A layer with weights uniform in `±1/√fan_in`, drawn from a trial copy of `rng`.
    ///
    /// # Errors
    /// [`AttentionError::ZeroSize`] for a zero size, [`AttentionError::OddRopeWidth`], then
    /// [`AttentionError::Rope`] for a zero RoPE width, capacity or base.
    pub fn new(config: LatentConfig, rng: &mut SplitMix64) -> Result<Self, AttentionError> {
        config.validate()?;
        let (d, h, dh, dc, dr) =
            (config.model_width, config.heads, config.head_width, config.latent_width, config.rope_width);
        let mut trial = rng.clone();
        let mut draw = |rows: usize, cols: usize| {
            let bound = 1.0 / (rows as f64).sqrt();
            let values = Tensor::uniform(&[rows, cols], -bound, bound, &mut trial);
            Ok::<_, AttentionError>(TensorValue::leaf(values.at(Stage::Projection)?, true))
        };
        let weights = LatentWeights {
            query: draw(d, h * dh)?,
            query_rope: draw(d, h * dr)?,
            down: draw(d, dc)?,
            key_rope: draw(d, dr)?,
            up_key: draw(dc, h * dh)?,
            up_value: draw(dc, h * dh)?,
            output: draw(h * dh, d)?,
        };
        *rng = trial;
        Self::from_weights(config, weights)
    }

    /// A layer from existing weights.
    ///
    /// # Errors
    /// As [`LatentAttention::new`], then [`AttentionError::ParameterShape`] naming a weight whose
    /// shape does not fit.
    pub fn from_weights(config: LatentConfig, weights: LatentWeights) -> Result<Self, AttentionError> {
        let rope = config.validate()?;
        let (d, h, dh, dc, dr) =
            (config.model_width, config.heads, config.head_width, config.latent_width, config.rope_width);
        let w = &weights;
        for (name, value, expected) in [
            ("query weight", &w.query, [d, h * dh]),
            ("query rope weight", &w.query_rope, [d, h * dr]),
            ("down weight", &w.down, [d, dc]),
            ("key rope weight", &w.key_rope, [d, dr]),
            ("up key weight", &w.up_key, [dc, h * dh]),
            ("up value weight", &w.up_value, [dc, h * dh]),
            ("output weight", &w.output, [h * dh, d]),
        ] {
            if value.shape() != expected {
                return Err(AttentionError::ParameterShape {
                    name,
                    expected: Shape(expected.to_vec()),
                    actual: Shape::from(value.shape()),
                });
            }
        }
        let layer = Self { config, weights, rope };
        layer.checked_parameters()?;
        Ok(layer)
    }

    /// The configuration.
    pub fn config(&self) -> &LatentConfig {
        &self.config
    }

    /// The weights.
    pub fn weights(&self) -> &LatentWeights {
        &self.weights
    }

    /// The parameters under dotted names (`mla.query.weight`, …).
    pub fn parameters(&self) -> NamedParameters {
        // `from_weights` checked this list, so it cannot fail here
        self.checked_parameters().unwrap_or_default()
    }

    /// The parameter list, rejecting a leaf used for two weights.
    fn checked_parameters(&self) -> Result<NamedParameters, AttentionError> {
        let w = &self.weights;
        let list = [
            ("query", &w.query),
            ("query_rope", &w.query_rope),
            ("down", &w.down),
            ("key_rope", &w.key_rope),
            ("up_key", &w.up_key),
            ("up_value", &w.up_value),
            ("output", &w.output),
        ]
        .into_iter()
        .map(|(n, v)| NamedParameter::new(format!("mla.{n}.weight"), v.clone()))
        .collect();
        NamedParameters::try_new(list).map_err(|source| AttentionError::Layer { stage: Stage::Projection, source })
    }

    /// The shared pieces of both paths for `x [B,T,d]` at positions `offset..offset+T`: the
    /// latent `C`, content queries `[B,H,T,d_h]`, rotated positional queries `[B,H,T,d_r]` and the
    /// rotated shared key `[B,1,T,d_r]`.
    fn pieces(&self, x: &TensorValue, offset: usize) -> Result<[TensorValue; 4], AttentionError> {
        let c = &self.config;
        check_sequence(x.shape(), c.model_width)?;
        let (b, t) = (x.shape()[0], x.shape()[1]);
        self.rope.check_interval(offset, t).on(Branch::Query)?;
        let w = &self.weights;
        let latent = x.matmul(&w.down).at(Stage::Projection)?; // [B,T,d_c]
        let split = |v: TensorValue, heads: usize, width: usize| -> Result<TensorValue, AttentionError> {
            v.reshape(&[b, t, heads, width]).and_then(|v| v.transpose(1, 2)).at(Stage::SplitHeads(None))
        };
        let q = split(x.matmul(&w.query).at(Stage::Projection)?, c.heads, c.head_width)?;
        let q_rope = split(x.matmul(&w.query_rope).at(Stage::Projection)?, c.heads, c.rope_width)?;
        let k_rope = split(x.matmul(&w.key_rope).at(Stage::Projection)?, 1, c.rope_width)?;
        let rotate = |v: &TensorValue, branch| self.rope.rotate(v, offset).on(branch);
        Ok([latent, q, rotate(&q_rope, Branch::Query)?, rotate(&k_rope, Branch::Key)?])
    }

    fn scale(&self) -> f64 {
        1.0 / ((self.config.head_width + self.config.rope_width) as f64).sqrt()
    }

    /// The direct path: rebuild `K = C·A` and `V = C·B` per head, then ordinary causal attention.
    ///
    /// # Errors
    /// Input errors (rank, width, empty, positions), then `Stage` errors.
    pub fn forward(&self, x: &TensorValue, offset: usize) -> Result<LatentOutput, AttentionError> {
        let [latent, q, q_rope, k_rope] = self.pieces(x, offset)?;
        let c = &self.config;
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let heads = |v: TensorValue| v.reshape(&[b, t, c.heads, c.head_width]).and_then(|v| v.transpose(1, 2));
        let k = heads(latent.matmul(&self.weights.up_key).at(Stage::Projection)?)
            .at(Stage::SplitHeads(Some(Branch::Key)))?;
        let v = heads(latent.matmul(&self.weights.up_value).at(Stage::Projection)?)
            .at(Stage::SplitHeads(Some(Branch::Value)))?;
        let scores = (|| {
            let content = q.matmul(&k.transpose(2, 3)?)?; // [B,H,T,T]
            let position = q_rope.matmul(&k_rope.transpose(2, 3)?)?; // k_R broadcast over heads
            content.add(&position)?.scale(self.scale())
        })()
        .at(Stage::Scores)?;
        let mask = Mask::causal(t, t, 0).at(Stage::Softmax)?;
        let weights = scores.masked_softmax_last_axis(&mask).at(Stage::Softmax)?;
        // hidden (future) tokens are skipped, not weighted by 0: 0 · NaN would leak backwards
        let heads_out = weights.matmul_visible(&v, &mask).at(Stage::WeightedValues)?; // [B,H,T,d_h]
        let merged = merge_heads(&heads_out)?;
        let output = merged.matmul(&self.weights.output).at(Stage::OutputProjection)?;
        Ok(LatentOutput { latent, rope_key: k_rope, weights, output })
    }

    /// The absorbed path: queries move into latent space (`q·Aᵀ`), scores are taken against `C`
    /// itself, and `B·W_O` is one merged output matrix. No key or value is ever rebuilt.
    ///
    /// # Errors
    /// As [`LatentAttention::forward`].
    pub fn forward_absorbed(&self, x: &TensorValue, offset: usize) -> Result<LatentOutput, AttentionError> {
        let [latent, q, q_rope, k_rope] = self.pieces(x, offset)?;
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let latent4 = latent.reshape(&[b, 1, t, self.config.latent_width]).at(Stage::Scores)?;
        let mask = Mask::causal(t, t, 0).at(Stage::Softmax)?;
        let (weights, output) = self.attend_absorbed(&q, &q_rope, &latent4, &k_rope, &mask)?;
        Ok(LatentOutput { latent, rope_key: k_rope, weights, output })
    }

    /// `A_hᵀ` per head `[1,H,d_h,d_c]` and the merged output `B_h·W_O,h` stacked `[H·d_c, d]`.
    fn absorbed_matrices(&self) -> Result<(TensorValue, TensorValue), crate::TensorAutodiffError> {
        let c = &self.config;
        let (h, dh, dc, d) = (c.heads, c.head_width, c.latent_width, c.model_width);
        // A [d_c, H·d_h] → [d_c, H, d_h] → [H, d_h, d_c]: per head Aᵀ
        let a_t = self.weights.up_key.reshape(&[dc, h, dh])?.permute(&[1, 2, 0])?.reshape(&[1, h, dh, dc])?;
        // B_h·W_O,h: [H, d_c, d_h] · [H, d_h, d] → [H, d_c, d] → [H·d_c, d]
        let b_h = self.weights.up_value.reshape(&[dc, h, dh])?.transpose(0, 1)?;
        let wo_h = self.weights.output.reshape(&[h, dh, d])?;
        Ok((a_t, b_h.matmul(&wo_h)?.reshape(&[h * dc, d])?))
    }

    /// Absorbed attention of queries `[B,H,T_q,·]` over latents `[B,1,T_k,d_c]` and rotated keys
    /// `[B,1,T_k,d_r]`.
    fn attend_absorbed(
        &self,
        q: &TensorValue,
        q_rope: &TensorValue,
        latent: &TensorValue,
        k_rope: &TensorValue,
        mask: &Mask,
    ) -> Result<(TensorValue, TensorValue), AttentionError> {
        let (b, t_q) = (q.shape()[0], q.shape()[2]);
        let (h, dc) = (self.config.heads, self.config.latent_width);
        let (a_t, merged_out) = self.absorbed_matrices().at(Stage::Projection)?;
        let scores = (|| {
            let q_latent = q.matmul(&a_t)?; // (q·Aᵀ): [B,H,T_q,d_c]
            let content = q_latent.matmul(&latent.transpose(2, 3)?)?; // ·Cᵀ: [B,H,T_q,T_k]
            let position = q_rope.matmul(&k_rope.transpose(2, 3)?)?;
            content.add(&position)?.scale(self.scale())
        })()
        .at(Stage::Scores)?;
        let weights = scores.masked_softmax_last_axis(mask).at(Stage::Softmax)?;
        let output = (|| {
            let pc = weights.matmul_visible(latent, mask)?; // (P·C) over visible tokens: [B,H,T_q,d_c]
            pc.transpose(1, 2)?.reshape(&[b, t_q, h * dc])?.matmul(&merged_out) // Σ_h (P_h·C)·(B_h·W_O,h)
        })()
        .at(Stage::OutputProjection)?;
        Ok((weights, output))
    }

    /// The counterexample of the chapter: RoPE applied to the *reconstructed* content key
    /// (`K = RoPE(C·A)`, no decoupled branch) — its scores `[B,H,T,T]`, which no fixed matrix can
    /// absorb, and the scores of the naive absorbed formula `(q·Aᵀ)·Cᵀ` on rotated queries.
    ///
    /// # Errors
    /// As [`LatentAttention::forward`].
    pub fn rope_on_reconstructed_keys(
        &self,
        x: &TensorValue,
        offset: usize,
    ) -> Result<(Tensor, Tensor), AttentionError> {
        let [latent, q, _, _] = self.pieces(x, offset)?;
        let c = &self.config;
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let rope = RotaryEmbedding::new(c.head_width, c.max_positions, c.rope_base).map_err(AttentionError::Rope)?;
        let rot = |v: &TensorValue| rope.rotate(v, offset).on(Branch::Key);
        let k = latent
            .matmul(&self.weights.up_key)
            .and_then(|k| k.reshape(&[b, t, c.heads, c.head_width]))
            .and_then(|k| k.transpose(1, 2))
            .at(Stage::Projection)?;
        let q_rot = rot(&q)?;
        let direct = q_rot.matmul(&rot(&k)?.transpose(2, 3).at(Stage::Scores)?).at(Stage::Scores)?;
        let (a_t, _) = self.absorbed_matrices().at(Stage::Projection)?;
        let latent4 = latent.reshape(&[b, 1, t, c.latent_width]).at(Stage::Scores)?;
        let absorbed = q_rot.matmul(&a_t).and_then(|ql| ql.matmul(&latent4.transpose(2, 3)?)).at(Stage::Scores)?;
        Ok((read_value(&direct)?, read_value(&absorbed)?))
    }
}

fn read_value(v: &TensorValue) -> Result<Tensor, AttentionError> {
    v.value().at(Stage::Scores)
}
