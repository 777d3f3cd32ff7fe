//! The [`DecoderConfig`] of a GGUF LLaMA: the `llama.*` hyperparameters, every one checked.
//!
//! ```text
//! general.architecture                    "llama" (anything else is refused)
//! llama.embedding_length                  d
//! llama.block_count                       N
//! llama.attention.head_count              H
//! llama.attention.head_count_kv           G        (default H)
//! llama.attention.key_length              d_h      (default d / H)
//! llama.feed_forward_length               SwiGLU width
//! llama.context_length                    max_positions
//! llama.rope.freq_base                    RoPE base (default 10 000)
//! llama.rope.dimension_count              must be d_h (partial rotation is not supported)
//! llama.attention.layer_norm_rms_epsilon  ε
//! tokenizer.ggml.tokens                   V = its length; without it, the rows of token_embd.weight
//! output.weight                           present: an untied head; absent: tied to the embedding
//! ```
//!
//! Refused: RoPE scaling (`llama.rope.scaling.type` other than `none`) and mixtures of experts
//! (`llama.expert_count` > 0), which this decoder does not have.

use super::{Gguf, GgufError, GgufRope, Metadata};
use crate::error::Shape;
use crate::model::DecoderConfig;
use crate::nn::RopeLayout;

/// The embedding table's name in GGUF.
pub(crate) const TOKEN_EMBD: &str = "token_embd.weight";
/// The untied LM head's name in GGUF.
pub(crate) const OUTPUT: &str = "output.weight";

/// `getter(key)` if `key` is present.
fn optional<'m, 'a, T>(
    m: &'m Metadata<'a>,
    key: &str,
    getter: impl Fn(&'m Metadata<'a>, &str) -> Result<T, GgufError>,
) -> Result<Option<T>, GgufError> {
    m.get(key).map(|_| getter(m, key)).transpose()
}

fn invalid(key: &str, value: impl ToString, reason: &'static str) -> GgufError {
    GgufError::InvalidValue { key: key.to_string(), value: value.to_string(), reason }
}

/// The decoder configuration of the GGUF LLaMA `file`, with the RoPE layout that `rope` loads
/// its W_Q and W_K rows for.
///
/// # Errors
/// [`GgufError::MissingKey`], [`GgufError::WrongType`] and [`GgufError::InvalidValue`] naming the
/// key; [`GgufError::Architecture`]; [`GgufError::MissingTensor`] or [`GgufError::TensorShape`]
/// for `token_embd.weight` when the vocabulary comes from it; the rules of
/// [`DecoderConfig::validate`].
pub fn gguf_llama_config(file: &Gguf<'_>, rope: GgufRope) -> Result<DecoderConfig, GgufError> {
    let m = file.metadata();
    let architecture = m.string("general.architecture")?;
    if architecture != "llama" {
        return Err(GgufError::Architecture { found: architecture.to_string() });
    }
    let width = m.count("llama.embedding_length")?;
    let layers = m.count("llama.block_count")?;
    let heads = m.count("llama.attention.head_count")?;
    let kv_heads = optional(m, "llama.attention.head_count_kv", Metadata::count)?.unwrap_or(heads);
    let head_width = optional(m, "llama.attention.key_length", Metadata::count)?
        .unwrap_or_else(|| width.checked_div(heads).unwrap_or(0));
    if let Some(v) = optional(m, "llama.attention.value_length", Metadata::count)?.filter(|&v| v != head_width) {
        return Err(invalid("llama.attention.value_length", v, "must equal the key width"));
    }
    if let Some(r) = optional(m, "llama.rope.dimension_count", Metadata::count)?.filter(|&r| r != head_width) {
        return Err(invalid("llama.rope.dimension_count", r, "must equal the head width (every coordinate rotates)"));
    }
    if let Some(s) = optional(m, "llama.rope.scaling.type", Metadata::string)?.filter(|&s| s != "none") {
        return Err(invalid("llama.rope.scaling.type", s, "RoPE scaling is not supported"));
    }
    if let Some(e) = optional(m, "llama.expert_count", Metadata::count)?.filter(|&e| e > 0) {
        return Err(invalid("llama.expert_count", e, "a mixture of experts is not supported"));
    }
    let vocab = match optional(m, "tokenizer.ggml.tokens", Metadata::string_array)? {
        Some(tokens) => tokens.len(),
        None => {
            let dims = file.tensor(TOKEN_EMBD)?.dims();
            match dims {
                &[_, rows] => rows,
                _ => {
                    return Err(GgufError::TensorShape {
                        name: TOKEN_EMBD.to_string(),
                        expected: Shape(vec![width, 0]),
                        actual: Shape::from(dims),
                    });
                }
            }
        }
    };
    let config = DecoderConfig::new(vocab, width, layers, heads)
        .with_kv_heads(kv_heads)
        .with_head_width(head_width)
        .with_ffn_width(m.count("llama.feed_forward_length")?)
        .with_rope(
            m.count("llama.context_length")?,
            optional(m, "llama.rope.freq_base", Metadata::float)?.unwrap_or(1e4),
        )
        .with_rope_layout(match rope {
            GgufRope::AsStored => RopeLayout::AdjacentPairs,
            GgufRope::HuggingFace => RopeLayout::SplitHalves,
        })
        .with_rms_eps(m.float("llama.attention.layer_norm_rms_epsilon")?)
        .with_tied_embeddings(file.tensor(OUTPUT).is_err());
    config.validate()?;
    Ok(config)
}
