//! Checkpoints in the safetensors format: save and load a [`Decoder`], and load a Hugging Face
//! `LlamaForCausalLM` checkpoint.
//!
//! A safetensors file is an 8-byte little-endian length `n`, `n` bytes of JSON header (for every
//! tensor its dtype, shape and byte range; plus an optional string map `__metadata__`), then the
//! raw little-endian numbers. Nothing in it is executed, unlike a pickled PyTorch file.
//!
//! # One layout for both kinds of checkpoint
//!
//! ```text
//! tensor (names of crate::model::names)   in memory (y = x·W)   in the file (PyTorch: y = x·Wᵀ)
//! model.embed_tokens.weight               [V, d]                [V, d]      as is (a lookup table)
//! every projection and lm_head.weight     [in, out]             [out, in]   transposed
//! every RMSNorm gain                      [d]                   [d]         as is
//! ```
//!
//! Our checkpoints are written in the Hugging Face layout, so one loader reads both, and a file
//! we save is a `LlamaForCausalLM` state dict (in f64). Transposing only moves numbers and f64 is
//! stored as its 8 bytes, so save → load gives back every weight bitwise. Hugging Face files may
//! hold f32, bf16 or f16 tensors: each is widened to f64 exactly (every value of those formats is
//! an f64); any other dtype is an error.
//!
//! The configuration comes from the `config.json` beside a Hugging Face checkpoint (RoPE in split
//! halves, as `transformers` applies it). Ours carry theirs inside the file, in
//! `__metadata__["config"]`: the same JSON fields plus `rope_layout` and the window's convention.
//! The attention kernel and the initialisation std are not properties of the weights and are not
//! stored: a loaded model has the defaults of [`DecoderConfig::new`] (select a kernel afterwards
//! with [`Decoder::from_named`] on its parameters).
//!
//! ```
//! use llm_from_scratch::model::{Decoder, DecoderConfig, load_checkpoint, save_checkpoint};
//! use llm_from_scratch::nn::SplitMix64;
//! let model = Decoder::new(DecoderConfig::new(10, 8, 2, 2).with_rope(16, 100.0), &mut SplitMix64::new(0))?;
//! let path = std::env::temp_dir().join(format!("doc-checkpoint-{}.safetensors", std::process::id()));
//! save_checkpoint(&model, &path)?;
//! let loaded = load_checkpoint(&path)?;
//! std::fs::remove_file(&path).ok();
//! assert_eq!(loaded.config(), model.config());
//! let (a, b) = (model.forward(&[1, 2, 3], [1, 3])?.value()?, loaded.forward(&[1, 2, 3], [1, 3])?.value()?);
//! assert!(a.bitwise_eq(&b));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config_json;
mod dtypes;

use std::collections::BTreeMap;
use std::path::Path;

pub(crate) use config_json::{config_from_json, config_to_json};
use dtypes::widen;
pub(crate) use dtypes::{bf16_to_f64, f16_to_f64};

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use thiserror::Error;

use crate::autodiff::{TensorValue, parameter};
use crate::error::Shape;
use crate::model::names::{EMBED_TOKENS, parameter_shapes};
use crate::model::{Decoder, DecoderConfig, ModelError};
use crate::nn::{NamedParameter, NamedParameters};

/// The weights file of a single-file Hugging Face checkpoint.
const HF_WEIGHTS: &str = "model.safetensors";
/// The configuration file of a Hugging Face checkpoint.
const HF_CONFIG: &str = "config.json";
/// The `__metadata__` key under which our checkpoints store their configuration.
const CONFIG_METADATA: &str = "config";

/// Errors of reading and writing checkpoints; each names the file, the field or the tensor.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CheckpointError {
    /// The file could not be read or written.
    #[error("checkpoint file: cannot {action} {path}: {reason}")]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The path.
        path: String,
        /// What the system said.
        reason: String,
    },
    /// The bytes are not a safetensors file (length prefix, JSON header or byte ranges broken).
    #[error("checkpoint header: {path} is not a valid safetensors file: {reason}")]
    Header {
        /// The path.
        path: String,
        /// What the parser said.
        reason: String,
    },
    /// The configuration is missing, is not JSON, lacks a field, or asks for something this
    /// decoder does not have (biases, RoPE scaling, another activation).
    #[error("checkpoint config: {source_name}: {field} {reason}")]
    Config {
        /// `config.json`'s path, or the checkpoint's path for our metadata.
        source_name: String,
        /// The field (`rope_parameters.rope_theta`), or `the text` for the whole document.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor the configuration needs is not in the file.
    #[error("checkpoint: tensor {name} is missing")]
    MissingTensor {
        /// Its name.
        name: String,
    },
    /// A tensor has another shape in the file than the configuration needs (both `[out, in]`
    /// for a projection, as stored).
    #[error("checkpoint: tensor {name} has shape {actual} in the file but {expected} was needed")]
    TensorShape {
        /// Its name.
        name: String,
        /// The shape that fits, in the file's layout.
        expected: Shape,
        /// The shape in the file.
        actual: Shape,
    },
    /// A tensor whose numbers are not f64, f32, bf16 or f16.
    #[error("checkpoint: tensor {name} has dtype {dtype}; only F64, F32, BF16 and F16 can be read")]
    UnsupportedDtype {
        /// Its name.
        name: String,
        /// The safetensors dtype (`I64`, `F8_E4M3`, …).
        dtype: String,
    },
    /// A tensor this configuration does not use (e.g. `lm_head.weight` with tied embeddings).
    #[error("checkpoint: tensor {name} is not a parameter of this configuration")]
    UnexpectedTensor {
        /// Its name.
        name: String,
    },
    /// Building the model failed (configuration rules, tensor errors).
    #[error("checkpoint: {0}")]
    Model(#[from] ModelError),
}

/// Writes `model` to `path` as a safetensors file: f64 tensors under their Hugging Face names in
/// the `[out, in]` layout, the configuration in `__metadata__["config"]`.
///
/// # Errors
/// [`CheckpointError::Io`]; tensor errors of a released parameter.
pub fn save_checkpoint(model: &Decoder, path: impl AsRef<Path>) -> Result<(), CheckpointError> {
    let path = path.as_ref();
    let bytes = to_safetensors(model, path)?;
    std::fs::write(path, bytes).map_err(|e| io_error("write", path, &e))
}

/// Reads a checkpoint written by [`save_checkpoint`].
///
/// # Errors
/// [`CheckpointError::Io`], [`CheckpointError::Header`], [`CheckpointError::Config`] (also when the
/// file has no configuration of ours: a Hugging Face file is read by [`load_hf_llama`]), and the
/// tensor errors of [`CheckpointError`].
pub fn load_checkpoint(path: impl AsRef<Path>) -> Result<Decoder, CheckpointError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_error("read", path, &e))?;
    checkpoint_from(&bytes, &shown(path))
}

/// [`load_checkpoint`] on the bytes of a file already in memory (`include_bytes!`, a network
/// buffer). Messages name the source `checkpoint bytes`.
///
/// ```
/// use llm_from_scratch::model::{CheckpointError, checkpoint_from_bytes};
/// // eight bytes announcing a 2⁶³-byte header: refused, nothing allocated for it
/// let err = checkpoint_from_bytes(&u64::MAX.to_le_bytes()).unwrap_err();
/// assert!(matches!(err, CheckpointError::Header { .. }));
/// ```
///
/// # Errors
/// As [`load_checkpoint`], without the file errors.
pub fn checkpoint_from_bytes(bytes: &[u8]) -> Result<Decoder, CheckpointError> {
    checkpoint_from(bytes, "checkpoint bytes")
}

fn checkpoint_from(bytes: &[u8], source: &str) -> Result<Decoder, CheckpointError> {
    let header_error = |e: SafeTensorError| CheckpointError::Header { path: source.to_string(), reason: e.to_string() };
    let (_, metadata) = SafeTensors::read_metadata(bytes).map_err(header_error)?;
    let text =
        metadata.metadata().as_ref().and_then(|m| m.get(CONFIG_METADATA)).ok_or_else(|| CheckpointError::Config {
            source_name: source.to_string(),
            field: format!("__metadata__.{CONFIG_METADATA}"),
            reason: "is missing (a Hugging Face checkpoint is read by load_hf_llama)".to_string(),
        })?;
    let config = config_from_json(text, source)?;
    let file = SafeTensors::deserialize(bytes).map_err(header_error)?;
    decoder_from(&file, config, source)
}

/// Reads a Hugging Face `LlamaForCausalLM` checkpoint from the folder `dir`: `config.json` and the
/// single weights file `model.safetensors` (a sharded checkpoint is not read).
///
/// # Errors
/// As [`load_checkpoint`]; the configuration errors of [`hf_llama_config`].
pub fn load_hf_llama(dir: impl AsRef<Path>) -> Result<Decoder, CheckpointError> {
    let (config_path, weights_path) = (dir.as_ref().join(HF_CONFIG), dir.as_ref().join(HF_WEIGHTS));
    let text = std::fs::read_to_string(&config_path).map_err(|e| io_error("read", &config_path, &e))?;
    let config = config_from_json(&text, &shown(&config_path))?;
    let bytes = std::fs::read(&weights_path).map_err(|e| io_error("read", &weights_path, &e))?;
    hf_llama_from(config, &bytes, (&shown(&config_path), &shown(&weights_path)))
}

/// [`load_hf_llama`] on a `config.json` text and the bytes of `model.safetensors` in memory.
///
/// # Errors
/// As [`load_hf_llama`], without the file errors.
pub fn hf_llama_from_bytes(config_json: &str, weights: &[u8]) -> Result<Decoder, CheckpointError> {
    let config = config_from_json(config_json, HF_CONFIG)?;
    hf_llama_from(config, weights, (HF_CONFIG, HF_WEIGHTS))
}

fn hf_llama_from(
    config: DecoderConfig,
    weights: &[u8],
    (config_source, weights_source): (&str, &str),
) -> Result<Decoder, CheckpointError> {
    let file = SafeTensors::deserialize(weights)
        .map_err(|e| CheckpointError::Header { path: weights_source.to_string(), reason: e.to_string() })?;
    decoder_from(&file, config, config_source)
}

/// The decoder configuration of a Hugging Face LLaMA `config.json`.
///
/// Read: `vocab_size`, `hidden_size`, `num_hidden_layers`, `num_attention_heads`,
/// `intermediate_size` (required); `num_key_value_heads` (default: the query heads), `head_dim`
/// (`hidden_size / num_attention_heads`), `max_position_embeddings` (2048), `rope_theta` at the
/// top level or in `rope_parameters` (10 000), `rms_norm_eps` (1e-6), `tie_word_embeddings`
/// (false), `sliding_window` (none; Hugging Face's `i − j < W`). RoPE is in split halves.
/// Refused: `hidden_act` other than `silu`, `attention_bias` or `mlp_bias` true, any RoPE
/// scaling. Our own metadata adds `rope_layout` (`split_halves`, `adjacent_pairs`) and
/// `sliding_window_convention` (`exclusive`, `inclusive`).
///
/// ```
/// use llm_from_scratch::model::hf_llama_config;
/// let json = r#"{"vocab_size": 32, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
///   "num_key_value_heads": 2, "intermediate_size": 32, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}"#;
/// let config = hf_llama_config(json)?;
/// assert_eq!((config.head_width, config.kv_heads, config.rope_base, config.tie_embeddings), (4, 2, 5e5, false));
/// # Ok::<(), llm_from_scratch::model::CheckpointError>(())
/// ```
///
/// # Errors
/// [`CheckpointError::Config`] naming the field; the rules of [`DecoderConfig::validate`].
pub fn hf_llama_config(json: &str) -> Result<DecoderConfig, CheckpointError> {
    config_from_json(json, HF_CONFIG)
}

/// `path` for a message.
fn shown(path: &Path) -> String {
    path.display().to_string()
}

fn io_error(action: &'static str, path: &Path, e: &std::io::Error) -> CheckpointError {
    CheckpointError::Io { action, path: shown(path), reason: e.to_string() }
}

/// Projections and the head are stored `[out, in]`; the embedding table and the gains as they are.
fn stored_transposed(name: &str, shape: &[usize]) -> bool {
    shape.len() == 2 && name != EMBED_TOKENS
}

/// The row-major `[rows, cols]` matrix `values` as `[cols, rows]`.
fn transposed(values: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..cols * rows).map(|k| values[(k % rows) * cols + k / rows]).collect()
}

/// `(shape, values)` of a parameter as the file stores it.
fn to_file_layout(name: &str, shape: &[usize], values: &[f64]) -> (Vec<usize>, Vec<f64>) {
    match stored_transposed(name, shape) {
        true => (vec![shape[1], shape[0]], transposed(values, shape[0], shape[1])),
        false => (shape.to_vec(), values.to_vec()),
    }
}

/// The whole file in memory.
fn to_safetensors(model: &Decoder, path: &Path) -> Result<Vec<u8>, CheckpointError> {
    let mut stored = Vec::new(); // (name, shape [out, in], little-endian f64 bytes)
    for p in model.parameters().iter() {
        let tensor = p.value().value().map_err(ModelError::from)?;
        let (shape, values) = to_file_layout(p.name(), tensor.shape(), tensor.as_slice());
        stored.push((p.name().to_string(), shape, values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()));
    }
    let header_error = |e: SafeTensorError| CheckpointError::Header { path: shown(path), reason: e.to_string() };
    let views = stored
        .iter()
        .map(|(name, shape, bytes)| Ok((name.as_str(), TensorView::new(Dtype::F64, shape.clone(), bytes)?)))
        .collect::<Result<Vec<_>, SafeTensorError>>()
        .map_err(header_error)?;
    let metadata = [(CONFIG_METADATA.to_string(), config_to_json(model.config()))].into();
    serialize_sorted(views, metadata).map_err(header_error)
}

/// `safetensors::serialize` with every key of the header in name order, so that the same tensors
/// and metadata always give the same bytes.
///
/// The crate takes the metadata as a `HashMap` and writes it in that map's iteration order, which
/// differs from one map to the next: a training state (six entries or more) saved twice gave two
/// different files. The header is read back and written again with its keys sorted (tensors by
/// name, the metadata by key): the same entries in the same length of JSON, padded as the crate
/// pads it, and the tensors' bytes untouched. Readers look tensors up by name and order them by
/// their offsets, so the order of the entries means nothing to them.
pub(crate) fn serialize_sorted(
    views: Vec<(&str, TensorView<'_>)>,
    metadata: BTreeMap<String, String>,
) -> Result<Vec<u8>, SafeTensorError> {
    let mut file = safetensors::serialize(views, Some(metadata.into_iter().collect()))?;
    // the crate writes the header's length, then that many bytes; anything else is refused
    let header_len = file.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(u64::from_le_bytes);
    let end = header_len.and_then(|n| usize::try_from(n).ok()).and_then(|n| n.checked_add(8));
    let header = end.and_then(|end| file.get_mut(8..end)).ok_or(SafeTensorError::InvalidHeaderLength)?;
    let mut entries: BTreeMap<String, serde_json::Value> = serde_json::from_slice(header)?;
    if let Some(meta) = entries.get_mut("__metadata__") {
        // a map of strings, sorted whatever order `serde_json`'s own maps keep
        let sorted: BTreeMap<String, String> = serde_json::from_value(meta.take())?;
        *meta = serde_json::to_value(sorted)?;
    }
    let sorted = serde_json::to_vec(&entries)?;
    // the same entries in compact JSON: as long as the crate's, never longer
    let (text, padding) = header.split_at_mut_checked(sorted.len()).ok_or(SafeTensorError::InvalidHeaderLength)?;
    text.copy_from_slice(&sorted);
    padding.fill(b' ');
    Ok(file)
}

/// The model of `config` on the tensors of `file`: every tensor checked (present, a float dtype,
/// its stored shape) in the order of [`parameter_shapes`], then nothing left over.
///
/// Before anything is built, the configuration's parameter count is held against the values the
/// file actually holds: a configuration asking for more than twice as many is refused at once
/// (a few bytes of JSON asking for a million layers beside a one-layer file), so what loading
/// allocates is bounded by a small multiple of the file (the values widened to f64, the names,
/// one transposed copy). Within that bound the first missing tensor is named.
fn decoder_from(file: &SafeTensors<'_>, config: DecoderConfig, source: &str) -> Result<Decoder, CheckpointError> {
    config.validate()?;
    let held = file
        .iter()
        .map(|(_, view)| view.shape().iter().try_fold(1u128, |n, &a| n.checked_mul(a as u128)))
        .try_fold(0u128, |total, n| n.and_then(|n| total.checked_add(n)))
        .unwrap_or(u128::MAX);
    let needed = config.parameter_count() as u128;
    if needed > held.saturating_mul(2) {
        return Err(CheckpointError::Config {
            source_name: source.to_string(),
            field: "the configuration".to_string(),
            reason: format!("asks for {needed} parameters, more than twice the {held} values the weights file holds"),
        });
    }
    let specs = parameter_shapes(&config);
    let list = specs
        .iter()
        .map(|(name, shape)| Ok(NamedParameter::new(name.clone(), read_tensor(file, name, shape)?)))
        .collect::<Result<Vec<_>, CheckpointError>>()?;
    let mut names = file.names();
    names.sort_unstable(); // the header is a hash map: report the same extra tensor every time
    // older checkpoints store RoPE's inverse frequencies; they are recomputed from rope_theta
    let unused = |n: &&str| !specs.iter().any(|(name, _)| name == n) && !n.ends_with(".rotary_emb.inv_freq");
    if let Some(extra) = names.into_iter().find(unused) {
        return Err(CheckpointError::UnexpectedTensor { name: extra.to_string() });
    }
    let params = NamedParameters::try_new(list).map_err(ModelError::from)?;
    Ok(Decoder::from_named(config, &params)?)
}

/// The parameter `name` of in-memory `shape`, widened to f64 and transposed back to `[in, out]`.
fn read_tensor(file: &SafeTensors<'_>, name: &str, shape: &[usize]) -> Result<TensorValue, CheckpointError> {
    let view = file.tensor(name).map_err(|_| CheckpointError::MissingTensor { name: name.to_string() })?;
    let values = widen(name, view.dtype(), view.data())?;
    let transpose = stored_transposed(name, shape);
    let expected = if transpose { vec![shape[1], shape[0]] } else { shape.to_vec() };
    if view.shape() != expected {
        return Err(CheckpointError::TensorShape {
            name: name.to_string(),
            expected: Shape(expected),
            actual: Shape::from(view.shape()),
        });
    }
    // [out, in] → [in, out]
    let values = if transpose { transposed(&values, expected[0], expected[1]) } else { values };
    Ok(parameter(shape, &values).map_err(ModelError::from)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposing_twice_is_the_identity() {
        // [[1,2,3],[4,5,6]] → [[1,4],[2,5],[3,6]]
        let m = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(transposed(&m, 2, 3), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(transposed(&transposed(&m, 2, 3), 3, 2), m);
    }
}
