//! Checkpoint names: every tensor of the decoder under the name a Hugging Face
//! `LlamaForCausalLM` checkpoint gives it, and lookup by name.
//!
//! Chapter 36's decoder is built and saved under these names ([`crate::model::save_checkpoint`],
//! [`crate::model::load_hf_llama`]).
//!
//! ```text
//! model.embed_tokens.weight                         [V, d]
//! model.layers.{i}.input_layernorm.weight           [d]
//! model.layers.{i}.self_attn.q_proj.weight          [d, H·d_h]
//! model.layers.{i}.self_attn.k_proj.weight          [d, G·d_h]
//! model.layers.{i}.self_attn.v_proj.weight          [d, G·d_h]
//! model.layers.{i}.self_attn.o_proj.weight          [H·d_h, d]
//! model.layers.{i}.post_attention_layernorm.weight  [d]
//! model.layers.{i}.mlp.gate_proj.weight             [d, f]    W1
//! model.layers.{i}.mlp.up_proj.weight               [d, f]    W3
//! model.layers.{i}.mlp.down_proj.weight             [f, d]    W2
//! model.norm.weight                                 [d]
//! lm_head.weight                                    [d, V]    (absent when tied)
//! ```
//!
//! The names match the checkpoint; the matrices do not: this crate multiplies `y = x · W` with
//! `W [in, out]`, while a checkpoint stores `[out, in]` (PyTorch's `y = x · Wᵀ`). A loader
//! transposes every projection and the head; the embedding `[V, d]` and the gains are stored alike.

use crate::autodiff::TensorValue;
use crate::error::Shape;
use crate::model::{DecoderConfig, ModelError};
use crate::nn::NamedParameters;

/// The embedding table.
pub const EMBED_TOKENS: &str = "model.embed_tokens.weight";
/// The gain of the final RMSNorm.
pub const FINAL_NORM: &str = "model.norm.weight";
/// The LM head of an untied model.
pub const LM_HEAD: &str = "lm_head.weight";

/// The tensors of one block, after the prefix `model.layers.{i}.`, in the order
/// [`crate::model::DecoderBlock::parameters`] lists them.
pub const BLOCK_TENSORS: [&str; 9] = [
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
];

/// `model.layers.{index}`.
pub fn block_prefix(index: usize) -> String {
    format!("model.layers.{index}")
}

/// The shapes of one block's tensors, in the order of [`BLOCK_TENSORS`].
pub fn block_shapes(config: &DecoderConfig) -> [Vec<usize>; 9] {
    let (d, f) = (config.model_width, config.ffn_width);
    let (q, kv) = (config.query_heads * config.head_width, config.kv_heads * config.head_width);
    [vec![d], vec![d, q], vec![d, kv], vec![d, kv], vec![q, d], vec![d], vec![d, f], vec![d, f], vec![f, d]]
}

/// Every tensor of a model with this configuration: `(name, shape)` in the order of
/// [`crate::model::Decoder::parameters`].
///
/// ```
/// use llm_from_scratch::model::{DecoderConfig, parameter_shapes};
/// let specs = parameter_shapes(&DecoderConfig::new(16, 8, 2, 2).with_tied_embeddings(false));
/// assert_eq!(specs.len(), 1 + 2 * 9 + 2);
/// assert_eq!(specs[2], ("model.layers.0.self_attn.q_proj.weight".to_string(), vec![8, 8]));
/// assert_eq!(specs.last().unwrap(), &("lm_head.weight".to_string(), vec![8, 16]));
/// ```
pub fn parameter_shapes(config: &DecoderConfig) -> Vec<(String, Vec<usize>)> {
    let (v, d) = (config.vocab_size, config.model_width);
    let mut specs = vec![(EMBED_TOKENS.to_string(), vec![v, d])];
    for i in 0..config.layers {
        let prefix = block_prefix(i);
        specs.extend(BLOCK_TENSORS.iter().zip(block_shapes(config)).map(|(n, s)| (format!("{prefix}.{n}"), s)));
    }
    specs.push((FINAL_NORM.to_string(), vec![d]));
    if !config.tie_embeddings {
        specs.push((LM_HEAD.to_string(), vec![d, v]));
    }
    specs
}

/// The leaf named `name`, which must have `shape`.
///
/// # Errors
/// [`ModelError::MissingParameter`] or [`ModelError::ParameterShape`].
pub(crate) fn take(params: &NamedParameters, name: &str, shape: &[usize]) -> Result<TensorValue, ModelError> {
    let found = params.get(name).ok_or_else(|| ModelError::MissingParameter { name: name.to_string() })?;
    if found.value().shape() != shape {
        return Err(ModelError::ParameterShape {
            name: name.to_string(),
            expected: Shape::from(shape),
            actual: Shape::from(found.value().shape()),
        });
    }
    Ok(found.value().clone())
}
