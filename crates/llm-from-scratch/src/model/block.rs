//! [`DecoderBlock`]: one pre-norm transformer block of a LLaMA-family decoder.
//!
//! Chapter 36 (`ch36-tiny-decoder`) stacks them; chapter 31 is its attention half.
//!
//! ```text
//! h   = x + Attention(RMSNorm₁(x))        attention half: tokens exchange information
//! out = h + SwiGLU(RMSNorm₂(h))           feed-forward half: each token on its own
//! ```
//!
//! *Pre*-norm: each branch normalises its own input and the residual stream `x` itself is never
//! normalised inside the stack. The identity path therefore carries the adjoint of `out` back to
//! `x` unchanged (`∂out/∂x = I + ∂branches/∂x`), which is what lets deep stacks train without a
//! careful warm-up; the final RMSNorm of the model normalises the stream once, before the head.

use crate::attention::{AttentionTrace, GroupedQueryAttention, KvCache};
use crate::autodiff::TensorValue;
use crate::model::names::{BLOCK_TENSORS, block_prefix, block_shapes, take};
use crate::model::{DecoderConfig, ModelError, SwiGlu};
use crate::nn::{Linear, NamedParameter, NamedParameters, QkvProjections, RmsNorm, SplitMix64};
use crate::tensor::Tensor;

/// RMSNorm → grouped-query attention → residual; RMSNorm → SwiGLU → residual.
///
/// # Shapes
/// `x [B, T, d] → [B, T, d]`.
///
/// # Errors
/// [`DecoderBlock::new`]: the configuration errors of [`DecoderConfig::validate`]; the forwards: the
/// attention layer's input errors ([`ModelError::Attention`]).
///
/// # Example
/// ```
/// use llm_from_scratch::model::{DecoderBlock, DecoderConfig};
/// use llm_from_scratch::{constant, nn::SplitMix64};
/// // V = 10, d = 8, 1 block of 2 heads
/// let config = DecoderConfig::new(10, 8, 1, 2).with_rope(16, 100.0);
/// let block = DecoderBlock::new(&config, 0, &mut SplitMix64::new(0))?;
/// let x = constant(&[1, 3, 8], &[0.25; 24])?;
/// assert_eq!(block.forward(&x, 0)?.shape(), &[1, 3, 8]);
/// assert!(block.parameters(0).iter().any(|p| p.name() == "model.layers.0.self_attn.q_proj.weight"));
/// assert!(block.forward(&x, 15).is_err()); // positions 15..18 pass the 16 of RoPE
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
#[derive(Clone, Debug)]
pub struct DecoderBlock {
    input_norm: RmsNorm,
    attention: GroupedQueryAttention,
    post_norm: RmsNorm,
    mlp: SwiGlu,
}

impl DecoderBlock {
    /// Block `index` (names `model.layers.{index}.…`): gains of ones, projections drawn
    /// uniformly in `±1/√fan_in` from a trial copy of `rng`.
    ///
    /// # Errors
    /// The configuration errors of [`DecoderConfig::validate`]; `rng` is then untouched.
    pub fn new(config: &DecoderConfig, index: usize, rng: &mut SplitMix64) -> Result<Self, ModelError> {
        config.validate()?;
        let prefix = block_prefix(index);
        let (d, eps) = (config.model_width, config.rms_eps);
        let mut trial = rng.clone();
        let attention = GroupedQueryAttention::new(&format!("{prefix}.self_attn"), config.attention(), &mut trial)?;
        let mlp = SwiGlu::new(&format!("{prefix}.mlp"), d, config.ffn_width, &mut trial)?;
        *rng = trial;
        Ok(Self {
            input_norm: RmsNorm::new(&format!("{prefix}.input_layernorm"), d, eps)?,
            attention,
            post_norm: RmsNorm::new(&format!("{prefix}.post_attention_layernorm"), d, eps)?,
            mlp,
        })
    }

    /// Block `index` built on the leaves named `model.layers.{index}.…` in `params` (see
    /// [`crate::model::names`]); other entries are ignored.
    ///
    /// # Errors
    /// [`ModelError::MissingParameter`] or [`ModelError::ParameterShape`] naming the tensor;
    /// the configuration errors of [`DecoderConfig::validate`].
    pub fn from_named(config: &DecoderConfig, index: usize, params: &NamedParameters) -> Result<Self, ModelError> {
        config.validate()?;
        let prefix = block_prefix(index);
        let shapes = block_shapes(config);
        let [input_gain, q, k, v, o, post_gain, gate, up, down] =
            std::array::from_fn(|i| take(params, &format!("{prefix}.{}", BLOCK_TENSORS[i]), &shapes[i]));
        // `?` left to right: the first tensor missing in checkpoint order is the one reported
        let (input_gain, q, k, v, o, post_gain, gate, up, down) =
            (input_gain?, q?, k?, v?, o?, post_gain?, gate?, up?, down?);
        let attn_prefix = format!("{prefix}.self_attn");
        let qkv = QkvProjections::from_parameters(&attn_prefix, [q, k, v], None)?;
        let output = Linear::from_parameters(o, None)?.named(&format!("{attn_prefix}.output"));
        Ok(Self {
            input_norm: RmsNorm::from_gain(&format!("{prefix}.input_layernorm"), input_gain, config.rms_eps)?,
            attention: GroupedQueryAttention::from_parts(&attn_prefix, config.attention(), qkv, output)?,
            post_norm: RmsNorm::from_gain(&format!("{prefix}.post_attention_layernorm"), post_gain, config.rms_eps)?,
            mlp: SwiGlu::from_weights(&format!("{prefix}.mlp"), gate, up, down)?,
        })
    }

    /// The nine leaves in the order of [`BLOCK_TENSORS`].
    fn leaves(&self) -> [&TensorValue; 9] {
        let [q, k, v] = self.attention.qkv().weights();
        let [gate, up, down] = self.mlp.weights();
        let o = self.attention.output_projection().weight();
        [self.input_norm.gain(), q, k, v, o, self.post_norm.gain(), gate, up, down]
    }

    /// The block's tensors under their checkpoint names `model.layers.{index}.…`.
    pub fn parameters(&self, index: usize) -> Vec<NamedParameter> {
        let prefix = block_prefix(index);
        BLOCK_TENSORS
            .iter()
            .zip(self.leaves())
            .map(|(suffix, leaf)| NamedParameter::new(format!("{prefix}.{suffix}"), leaf.clone()))
            .collect()
    }

    /// The attention layer.
    pub fn attention(&self) -> &GroupedQueryAttention {
        &self.attention
    }

    /// The feed-forward.
    pub fn mlp(&self) -> &SwiGlu {
        &self.mlp
    }

    /// A full causal pass over `x [B, T, d]` whose first token sits at `position_offset`.
    ///
    /// # Errors
    /// The input errors of the attention layer ([`ModelError::Attention`]); tensor errors.
    pub fn forward(&self, x: &TensorValue, position_offset: usize) -> Result<TensorValue, ModelError> {
        Ok(self.forward_traced(x, position_offset)?.0)
    }

    /// [`DecoderBlock::forward`], also returning its attention layer's [`AttentionTrace`]: what
    /// the block computed on the way (rotated queries and keys, and with the explicit kernel the
    /// weights `[B, H, T, T]`), the values on the tape rather than a recomputation.
    ///
    /// # Errors
    /// As [`DecoderBlock::forward`].
    pub fn forward_traced(
        &self,
        x: &TensorValue,
        position_offset: usize,
    ) -> Result<(TensorValue, AttentionTrace), ModelError> {
        let trace = self.attention.forward(&self.input_norm.forward(x)?, position_offset)?;
        let h = x.add(&trace.output)?; // residual: [B, T, d]
        let fed = self.mlp.forward(&self.post_norm.forward(&h)?)?;
        Ok((h.add(&fed)?, trace)) // residual: [B, T, d]
    }

    /// The same block for the next `T` tokens after what `cache` holds (prefill or decode),
    /// appending their keys and values; evaluation only (no tape is kept).
    ///
    /// # Errors
    /// The errors of [`GroupedQueryAttention::forward_cached`] (cache of another layer, positions
    /// past capacity — the cache is then unchanged); tensor errors.
    pub fn forward_cached(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor, ModelError> {
        let x = TensorValue::leaf(x.clone(), false);
        let attended = self.attention.forward_cached(&self.input_norm.forward(&x)?, cache)?;
        let h = x.add(&TensorValue::leaf(attended, false))?;
        let fed = self.mlp.forward(&self.post_norm.forward(&h)?)?;
        Ok(h.add(&fed)?.value()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::{GradcheckConfig, gradcheck};
    use crate::nn::NamedParameters;

    fn config() -> DecoderConfig {
        // d = 8, H = 2 query heads over G = 1 key/value head of width 4, f = 12
        DecoderConfig::new(11, 8, 1, 2).with_kv_heads(1).with_head_width(4).with_ffn_width(12).with_rope(16, 100.0)
    }

    #[test]
    fn gradcheck_whole_block() {
        // every parameter of the block and its input, by central differences (δ = 1e-6, ε = 8e-6)
        let config = config();
        let mut rng = SplitMix64::new(31);
        let block = DecoderBlock::new(&config, 0, &mut rng).unwrap();
        let named = block.parameters(0);
        let mut inputs: Vec<(&str, Tensor)> =
            vec![("x", Tensor::new(&[2, 3, 8], (0..48).map(|_| rng.uniform(-1.0, 1.0)).collect()).unwrap())];
        // gains of ones would hide an error that a gain multiplies: draw them too
        for p in &named {
            let value = p.value().value().unwrap();
            let values = value.as_slice().iter().map(|w| w + rng.uniform(-0.3, 0.3)).collect();
            inputs.push((p.name(), Tensor::new(value.shape(), values).unwrap()));
        }
        let report = gradcheck(&inputs, &GradcheckConfig::default(), |v| {
            let list = named.iter().zip(&v[1..]).map(|(p, leaf)| NamedParameter::new(p.name(), leaf.clone())).collect();
            DecoderBlock::from_named(&config, 0, &NamedParameters::try_new(list)?)?.forward(&v[0], 2)
        })
        .unwrap();
        assert!(report.passed(), "{report:?}");
        // x 2·3·8 + gains 2·8 + q 8·8 + k 8·4 + v 8·4 + o 8·8 + gate, up, down 3·8·12
        assert_eq!(report.coordinates(), 48 + 16 + 64 + 32 + 32 + 64 + 3 * 96);
    }

    #[test]
    fn names_and_lookup_errors() {
        let config = config();
        let block = DecoderBlock::new(&config, 3, &mut SplitMix64::new(1)).unwrap();
        let names: Vec<String> = block.parameters(3).iter().map(|p| p.name().to_string()).collect();
        assert_eq!(names[1], "model.layers.3.self_attn.q_proj.weight");
        assert_eq!(names[8], "model.layers.3.mlp.down_proj.weight");
        let params = NamedParameters::try_new(block.parameters(3)).unwrap();
        let err = DecoderBlock::from_named(&config, 0, &params).unwrap_err();
        assert_eq!(err.to_string(), "model parameters: model.layers.0.input_layernorm.weight is missing");
        let err = DecoderBlock::from_named(&config.clone().with_ffn_width(10), 3, &params).unwrap_err();
        assert_eq!(
            err.to_string(),
            "model parameters: model.layers.3.mlp.gate_proj.weight has shape [8,12] but [8,10] was needed"
        );
    }

    #[test]
    fn cached_prefill_and_decode_equal_the_full_pass() {
        let config = config();
        let mut rng = SplitMix64::new(5);
        let block = DecoderBlock::new(&config, 0, &mut rng).unwrap();
        let x = Tensor::new(&[1, 4, 8], (0..32).map(|_| rng.uniform(-1.0, 1.0)).collect()).unwrap();
        let full = block.forward(&TensorValue::leaf(x.clone(), false), 0).unwrap().value().unwrap();
        let mut cache = block.attention().new_cache(1);
        let first = block.forward_cached(&Tensor::new(&[1, 3, 8], x.as_slice()[..24].to_vec()).unwrap(), &mut cache);
        let last = block.forward_cached(&Tensor::new(&[1, 1, 8], x.as_slice()[24..].to_vec()).unwrap(), &mut cache);
        let joined = [first.unwrap().into_vec(), last.unwrap().into_vec()].concat();
        let joined = Tensor::new(&[1, 4, 8], joined).unwrap();
        assert!(joined.max_abs_diff(&full).unwrap() <= 1e-12);
    }
}
