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

use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use serde_json::{Map, Value, json};
use thiserror::Error;

use crate::attention::SlidingWindow;
use crate::autodiff::{TensorValue, parameter};
use crate::error::Shape;
use crate::model::names::{EMBED_TOKENS, parameter_shapes};
use crate::model::{Decoder, DecoderConfig, ModelError};
use crate::nn::{NamedParameter, NamedParameters, RopeLayout};

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
    let metadata = [(CONFIG_METADATA.to_string(), config_to_json(model.config()))].into_iter().collect();
    safetensors::serialize(views, Some(metadata)).map_err(header_error)
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

/// Little-endian numbers of `dtype` as f64, exactly.
fn widen(name: &str, dtype: Dtype, bytes: &[u8]) -> Result<Vec<f64>, CheckpointError> {
    /// `N`-byte little-endian words (the file's length was checked against the shape).
    fn words<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
        bytes.chunks_exact(N).map(|c| std::array::from_fn(|i| c[i]))
    }
    Ok(match dtype {
        Dtype::F64 => words(bytes).map(f64::from_le_bytes).collect(),
        Dtype::F32 => words(bytes).map(|w| f64::from(f32::from_le_bytes(w))).collect(),
        Dtype::BF16 => words(bytes).map(|w| bf16_to_f64(u16::from_le_bytes(w))).collect(),
        Dtype::F16 => words(bytes).map(|w| f16_to_f64(u16::from_le_bytes(w))).collect(),
        other => return Err(CheckpointError::UnsupportedDtype { name: name.to_string(), dtype: other.to_string() }),
    })
}

/// bfloat16 is the upper half of an f32: sign, 8 exponent bits, 7 fraction bits.
fn bf16_to_f64(bits: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(bits) << 16))
}

/// IEEE half: sign, 5 exponent bits (bias 15), 10 fraction bits.
fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 == 0 { 1.0 } else { -1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let fraction = f64::from(bits & 0x3ff);
    sign * match exponent {
        0 => fraction * 2f64.powi(-24), // subnormal: 0.fraction · 2^−14
        31 if fraction == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + fraction / 1024.0) * 2f64.powi(e - 15),
    }
}

/// The JSON of `config` stored in our checkpoints: Hugging Face's field names plus ours.
pub(crate) fn config_to_json(c: &DecoderConfig) -> String {
    let mut fields = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.model_width,
        "num_hidden_layers": c.layers,
        "num_attention_heads": c.query_heads,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_width,
        "intermediate_size": c.ffn_width,
        "hidden_act": "silu",
        "max_position_embeddings": c.max_positions,
        "rope_theta": c.rope_base,
        "rms_norm_eps": c.rms_eps,
        "tie_word_embeddings": c.tie_embeddings,
        "rope_layout": match c.rope_layout {
            RopeLayout::SplitHalves => "split_halves",
            RopeLayout::AdjacentPairs => "adjacent_pairs",
        },
    });
    if let (Some(window), Value::Object(map)) = (c.window, &mut fields) {
        let (w, convention) = match window {
            SlidingWindow::Exclusive(w) => (w, "exclusive"),
            SlidingWindow::Inclusive(w) => (w, "inclusive"),
        };
        map.insert("sliding_window".to_string(), json!(w));
        map.insert("sliding_window_convention".to_string(), json!(convention));
    }
    fields.to_string()
}

/// The fields of one JSON object, with the file and the path of the object for messages.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    source: &'a str,
    prefix: &'static str,
}

impl<'a> Fields<'a> {
    fn error(&self, key: &str, reason: impl Into<String>) -> CheckpointError {
        CheckpointError::Config {
            source_name: self.source.to_string(),
            field: format!("{}{key}", self.prefix),
            reason: reason.into(),
        }
    }

    /// The value of `key`; `null` counts as absent.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn count(&self, key: &str) -> Result<Option<usize>, CheckpointError> {
        self.get(key)
            .map(|v| {
                v.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| self.error(key, format!("= {v} is not a count")))
            })
            .transpose()
    }

    fn required_count(&self, key: &str) -> Result<usize, CheckpointError> {
        self.count(key)?.ok_or_else(|| self.error(key, "is missing"))
    }

    fn number(&self, key: &str) -> Result<Option<f64>, CheckpointError> {
        self.get(key).map(|v| v.as_f64().ok_or_else(|| self.error(key, format!("= {v} is not a number")))).transpose()
    }

    fn flag(&self, key: &str) -> Result<Option<bool>, CheckpointError> {
        self.get(key).map(|v| v.as_bool().ok_or_else(|| self.error(key, format!("= {v} is not a boolean")))).transpose()
    }

    fn text(&self, key: &str) -> Result<Option<&'a str>, CheckpointError> {
        self.get(key).map(|v| v.as_str().ok_or_else(|| self.error(key, format!("= {v} is not a string")))).transpose()
    }

    /// Refuses `key` unless it is absent or one of `allowed`.
    fn only(&self, key: &str, allowed: &[&str]) -> Result<Option<&'a str>, CheckpointError> {
        match self.text(key)? {
            Some(found) if !allowed.contains(&found) => {
                Err(self.error(key, format!("= \"{found}\" is not supported (only {allowed:?})")))
            }
            found => Ok(found),
        }
    }

    /// Refuses a feature this decoder does not have.
    fn not_enabled(&self, key: &str) -> Result<(), CheckpointError> {
        match self.get(key) {
            None | Some(Value::Bool(false)) => Ok(()),
            Some(v) => Err(self.error(key, format!("= {v} is not supported by this decoder"))),
        }
    }
}

/// The configuration in `text` (a `config.json`, or our metadata); see [`hf_llama_config`].
pub(crate) fn config_from_json(text: &str, source: &str) -> Result<DecoderConfig, CheckpointError> {
    let whole = |reason: String| CheckpointError::Config {
        source_name: source.to_string(),
        field: "the text".to_string(),
        reason,
    };
    let root: Value = serde_json::from_str(text).map_err(|e| whole(format!("is not JSON: {e}")))?;
    let map = root.as_object().ok_or_else(|| whole("is not a JSON object".to_string()))?;
    let top = Fields { map, source, prefix: "" };
    let vocab = top.required_count("vocab_size")?;
    let width = top.required_count("hidden_size")?;
    let layers = top.required_count("num_hidden_layers")?;
    let heads = top.required_count("num_attention_heads")?;
    let ffn = top.required_count("intermediate_size")?;
    let kv_heads = top.count("num_key_value_heads")?.unwrap_or(heads);
    let head_width = top.count("head_dim")?.unwrap_or(width.checked_div(heads).unwrap_or(0));
    let max_positions = top.count("max_position_embeddings")?.unwrap_or(2048);
    top.only("hidden_act", &["silu"])?;
    for feature in ["attention_bias", "mlp_bias", "rope_scaling"] {
        top.not_enabled(feature)?;
    }
    // transformers ≥ 5 keeps RoPE's settings in `rope_parameters`, earlier versions at the top
    let rope = match top.get("rope_parameters") {
        Some(Value::Object(map)) => Fields { map, source, prefix: "rope_parameters." },
        Some(v) => return Err(top.error("rope_parameters", format!("= {v} is not an object"))),
        None => Fields { map, source, prefix: "" },
    };
    rope.only("rope_type", &["default"])?;
    let rope_base = rope.number("rope_theta")?.unwrap_or(10_000.0);
    let layout = match top.only("rope_layout", &["split_halves", "adjacent_pairs"])? {
        Some("adjacent_pairs") => RopeLayout::AdjacentPairs,
        _ => RopeLayout::SplitHalves,
    };
    let mut config = DecoderConfig::new(vocab, width, layers, heads)
        .with_kv_heads(kv_heads)
        .with_head_width(head_width)
        .with_ffn_width(ffn)
        .with_rope(max_positions, rope_base)
        .with_rope_layout(layout)
        .with_rms_eps(top.number("rms_norm_eps")?.unwrap_or(1e-6))
        .with_tied_embeddings(top.flag("tie_word_embeddings")?.unwrap_or(false));
    if let Some(w) = top.count("sliding_window")? {
        config = config.with_window(match top.only("sliding_window_convention", &["exclusive", "inclusive"])? {
            Some("inclusive") => SlidingWindow::Inclusive(w),
            _ => SlidingWindow::Exclusive(w),
        });
    }
    config.validate()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_formats_widen_exactly() {
        // bf16 0x3fc0 = f32 0x3fc00000 = 1.5; 0xc000 = −2
        assert_eq!((bf16_to_f64(0x3fc0), bf16_to_f64(0xc000)), (1.5, -2.0));
        // f16: 0x3c00 = 1, 0xc500 = −(1 + 256/1024)·2 = −5, 0x0001 = 2^−24, 0x7bff = 65504
        assert_eq!((f16_to_f64(0x3c00), f16_to_f64(0xc500)), (1.0, -5.0));
        assert_eq!((f16_to_f64(0x0001), f16_to_f64(0x7bff)), (2f64.powi(-24), 65504.0));
        assert!(f16_to_f64(0x7c00).is_infinite() && f16_to_f64(0x7e00).is_nan());
    }

    #[test]
    fn transposing_twice_is_the_identity() {
        // [[1,2,3],[4,5,6]] → [[1,4],[2,5],[3,6]]
        let m = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(transposed(&m, 2, 3), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(transposed(&transposed(&m, 2, 3), 3, 2), m);
    }

    #[test]
    fn config_round_trips_through_json() {
        let config = DecoderConfig::new(11, 12, 3, 6)
            .with_kv_heads(2)
            .with_head_width(4)
            .with_ffn_width(20)
            .with_rope(40, 123.456)
            .with_rms_eps(1.0 / 3.0)
            .with_rope_layout(RopeLayout::AdjacentPairs)
            .with_window(SlidingWindow::Inclusive(5));
        assert_eq!(config_from_json(&config_to_json(&config), "test").unwrap(), config);
    }

    #[test]
    fn config_errors_name_the_field() {
        let base = r#""vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2"#;
        let err = hf_llama_config(&format!("{{{base}}}")).unwrap_err();
        assert_eq!(err.to_string(), "checkpoint config: config.json: intermediate_size is missing");
        let err = hf_llama_config(&format!("{{{base}, \"intermediate_size\": -3}}")).unwrap_err();
        assert_eq!(err.to_string(), "checkpoint config: config.json: intermediate_size = -3 is not a count");
        let scaled =
            format!("{{{base}, \"intermediate_size\": 8, \"rope_parameters\": {{\"rope_type\": \"llama3\"}}}}");
        let err = hf_llama_config(&scaled).unwrap_err();
        assert!(err.to_string().contains("rope_parameters.rope_type = \"llama3\" is not supported"), "{err}");
        let biased = format!("{{{base}, \"intermediate_size\": 8, \"attention_bias\": true}}");
        assert!(hf_llama_config(&biased).unwrap_err().to_string().contains("attention_bias = true"));
        assert!(matches!(hf_llama_config("{\"vocab_size\": "), Err(CheckpointError::Config { .. })));
        assert!(matches!(hf_llama_config("[1]"), Err(CheckpointError::Config { .. })));
    }
}
