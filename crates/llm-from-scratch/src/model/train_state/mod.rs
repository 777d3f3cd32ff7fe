//! Training state: save a [`Trainer`] mid-run and resume it bitwise.
//!
//! A model checkpoint ([`crate::model::save_checkpoint`]) holds what generation needs; resuming
//! training also needs the optimiser: AdamW's two moments for every weight, its step count and its
//! bias-correction products `β₁ᵗ, β₂ᵗ`, and the trainer's step (it selects the learning rate).
//! With all of them restored, N steps + save + load + N steps computes exactly what 2N steps
//! compute — bit for bit, as the tests check. So the file also names the attention kernel: the
//! tiled and the explicit kernel agree to 1e-12, not bit for bit, and a model checkpoint does not
//! store which one ran.
//!
//! # The file
//!
//! One safetensors file, every number an F64 stored as its 8 bytes (so nothing is rounded):
//!
//! ```text
//! tensor                              shape          what
//! <name>                              as in memory   every parameter under its checkpoint name
//!                                                    (crate::model::names), [in, out] as in memory
//! adamw.first.<name>                  same           the running mean of the gradient m
//! adamw.second.<name>                 same           the running mean of its square v
//! __metadata__ format                 llm-from-scratch/train-state/1
//!              config                 the decoder configuration (the JSON of our checkpoints)
//!              adamw                  {"beta1", "beta2", "eps", "weight_decay"}
//!              step, adamw.steps      decimal integers (equal)
//!              adamw.beta_powers      β₁ᵗ and β₂ᵗ as 16-digit hexadecimal f64 bit patterns
//!              attention              `explicit` or `tiled`: the kernel the run trains with
//!                                     (absent in files written before 2026-12-06: explicit)
//!              note.<key>             anything the caller adds (e.g. a tokenizer's vocabulary)
//! ```
//!
//! It is not a Hugging Face file (the projections are not transposed, and the moments are extra
//! tensors); [`crate::model::load_checkpoint`] does not read it.
//!
//! # Loading a file that may be corrupt
//!
//! Every size is checked before anything is allocated from it: the header's length against the
//! file (by the safetensors parser), the configuration's layer count against the number of
//! tensors present, RoPE's table size against [`MAX_ROPE_ELEMENTS`], and each tensor's dtype and
//! shape against what the configuration needs; a failure is a [`TrainStateError`] naming the key
//! or the tensor, never a panic or an abort.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use serde_json::{Value, json};
use thiserror::Error;

use crate::attention::AttentionPath;
use crate::autodiff::parameter;
use crate::error::Shape;
use crate::model::checkpoint::{config_from_json, config_to_json, serialize_sorted};
use crate::model::names::{BLOCK_TENSORS, parameter_shapes};
use crate::model::{AdamW, AdamWConfig, CheckpointError, Decoder, DecoderConfig, ModelError, Trainer, TrainingConfig};
use crate::nn::{NamedParameter, NamedParameters};

/// The value of `__metadata__["format"]`.
pub const FORMAT: &str = "llm-from-scratch/train-state/1";
/// The largest RoPE table (`max_positions × head_width` numbers per layer) a loaded file may ask
/// for: 2²⁴ (128 MiB of f64). A training state of this crate is far smaller; a corrupt
/// `max_position_embeddings` must not make the loader allocate gigabytes.
pub const MAX_ROPE_ELEMENTS: usize = 1 << 24;

/// Errors of saving and loading a training state; each names the file, the key or the tensor.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TrainStateError {
    /// The file could not be read or written.
    #[error("train state file: cannot {action} {path}: {reason}")]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The path.
        path: String,
        /// What the system said.
        reason: String,
    },
    /// The bytes are not a safetensors file (length prefix, JSON header or byte ranges broken).
    #[error("train state header: {path} is not a valid safetensors file: {reason}")]
    Header {
        /// The path.
        path: String,
        /// What the parser said.
        reason: String,
    },
    /// A metadata entry is missing or unreadable (`format`, `step`, `adamw`, …).
    #[error("train state metadata: {key} {reason}")]
    Metadata {
        /// The key in `__metadata__`.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The configuration asks for more than a loader should allocate.
    #[error("train state: {what} = {value} exceeds the limit {limit}")]
    Limit {
        /// What is counted.
        what: &'static str,
        /// The value the file asks for.
        value: usize,
        /// The largest accepted.
        limit: usize,
    },
    /// A tensor the configuration needs is not in the file.
    #[error("train state: tensor {name} is missing")]
    MissingTensor {
        /// Its name.
        name: String,
    },
    /// A tensor whose numbers are not F64.
    #[error("train state: tensor {name} has dtype {dtype}; a training state is all F64")]
    Dtype {
        /// Its name.
        name: String,
        /// The dtype found.
        dtype: String,
    },
    /// A tensor has another shape than the configuration needs.
    #[error("train state: tensor {name} has shape {actual} but {expected} was needed")]
    TensorShape {
        /// Its name.
        name: String,
        /// The shape that fits.
        expected: Shape,
        /// The shape in the file.
        actual: Shape,
    },
    /// A tensor that is neither a parameter nor a moment of this configuration.
    #[error("train state: tensor {name} is not part of this configuration's state")]
    UnexpectedTensor {
        /// Its name.
        name: String,
    },
    /// The stored configuration is invalid.
    #[error("train state: {0}")]
    Config(#[from] CheckpointError),
    /// Building the model or the optimiser failed.
    #[error("train state: {0}")]
    Model(#[from] ModelError),
}

/// A training run as read back from a file.
#[derive(Clone, Debug)]
pub struct TrainState {
    /// The model after `step` steps.
    pub model: Decoder,
    /// AdamW's state after `step` steps.
    pub optimizer: AdamW,
    /// Steps taken.
    pub step: usize,
    /// The `note.<key>` entries, without the prefix.
    pub notes: BTreeMap<String, String>,
}

impl TrainState {
    /// A trainer that continues this run with `config` (its AdamW settings must be the saved ones;
    /// the schedule and the clipping are the caller's, as in [`Trainer::new`]).
    ///
    /// # Errors
    /// The errors of [`Trainer::resume`].
    pub fn into_trainer(self, config: TrainingConfig) -> Result<Trainer, ModelError> {
        Trainer::resume(self.model, config, self.optimizer, self.step)
    }
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

fn io_error(action: &'static str, path: &Path, e: &std::io::Error) -> TrainStateError {
    TrainStateError::Io { action, path: shown(path), reason: e.to_string() }
}

fn first_key(name: &str) -> String {
    format!("adamw.first.{name}")
}

fn second_key(name: &str) -> String {
    format!("adamw.second.{name}")
}

/// Writes `trainer`'s model, optimiser state and step to `path`, with `notes` as `note.<key>`.
///
/// # Errors
/// [`TrainStateError::Io`]; [`TrainStateError::Header`] if serialisation fails; tensor errors of a
/// released parameter.
pub fn save_train_state(
    trainer: &Trainer,
    notes: &BTreeMap<String, String>,
    path: impl AsRef<Path>,
) -> Result<(), TrainStateError> {
    let path = path.as_ref();
    let optimizer = trainer.optimizer();
    let (first, second) = optimizer.moments();
    let bytes = |values: &[f64]| values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    let mut stored: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (i, p) in trainer.model().parameters().iter().enumerate() {
        let tensor = p.value().value().map_err(ModelError::from)?;
        let shape = tensor.shape().to_vec();
        stored.push((first_key(p.name()), shape.clone(), bytes(&first[i])));
        stored.push((second_key(p.name()), shape.clone(), bytes(&second[i])));
        stored.push((p.name().to_string(), shape, bytes(tensor.as_slice())));
    }
    let header_error = |e: SafeTensorError| TrainStateError::Header { path: shown(path), reason: e.to_string() };
    let views = stored
        .iter()
        .map(|(name, shape, bytes)| Ok((name.as_str(), TensorView::new(Dtype::F64, shape.clone(), bytes)?)))
        .collect::<Result<Vec<_>, SafeTensorError>>()
        .map_err(header_error)?;
    let AdamWConfig { beta1, beta2, eps, weight_decay } = *optimizer.config();
    let (p1, p2) = optimizer.beta_powers();
    let mut metadata: BTreeMap<String, String> = [
        ("format", FORMAT.to_string()),
        ("config", config_to_json(trainer.model().config())),
        ("adamw", json!({"beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": weight_decay}).to_string()),
        ("step", trainer.steps_taken().to_string()),
        ("adamw.steps", optimizer.steps().to_string()),
        ("adamw.beta_powers", format!("{:016x},{:016x}", p1.to_bits(), p2.to_bits())),
        (ATTENTION_KEY, path_name(trainer.model().config().path).to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    metadata.extend(notes.iter().map(|(k, v)| (format!("note.{k}"), v.clone())));
    let file = serialize_sorted(views, metadata).map_err(header_error)?;
    std::fs::write(path, file).map_err(|e| io_error("write", path, &e))
}

/// Reads a training state written by [`save_train_state`].
///
/// # Errors
/// Every [`TrainStateError`]: the file, its header, a metadata entry, a limit, a tensor.
pub fn load_train_state(path: impl AsRef<Path>) -> Result<TrainState, TrainStateError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_error("read", path, &e))?;
    let header_error = |e: SafeTensorError| TrainStateError::Header { path: shown(path), reason: e.to_string() };
    // checks the header length and every byte range against the file before anything else
    let file = SafeTensors::deserialize(&bytes).map_err(header_error)?;
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(header_error)?;
    let metadata: BTreeMap<String, String> =
        header.metadata().iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();
    let meta = |key: &str| {
        metadata
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| TrainStateError::Metadata { key: key.to_string(), reason: "is missing".to_string() })
    };
    let bad = |key: &str, reason: String| TrainStateError::Metadata { key: key.to_string(), reason };
    let format = meta("format")?;
    if format != FORMAT {
        return Err(bad("format", format!("= {format:?} is not {FORMAT:?}")));
    }
    let count = |key: &str| -> Result<u64, TrainStateError> {
        let text = meta(key)?;
        text.parse::<u64>().map_err(|e| bad(key, format!("= {text:?} is not a count: {e}")))
    };
    let step = count("step")?;
    let adamw_steps = count("adamw.steps")?;
    if step != adamw_steps {
        return Err(bad("adamw.steps", format!("= {adamw_steps} differs from step = {step}")));
    }
    let step = usize::try_from(step).map_err(|e| bad("step", e.to_string()))?;
    let beta_powers = parse_powers(meta("adamw.beta_powers")?).ok_or_else(|| {
        bad("adamw.beta_powers", "is not two 16-digit hexadecimal f64 bit patterns separated by a comma".to_string())
    })?;
    let adamw = parse_adamw(meta("adamw")?).map_err(|reason| bad("adamw", reason))?;
    let config = config_from_json(meta("config")?, &format!("{}: __metadata__.config", shown(path)))?;
    let attention = match metadata.get(ATTENTION_KEY).map(String::as_str) {
        None => AttentionPath::Explicit, // written before the file named its kernel
        Some(name) => path_named(name)
            .ok_or_else(|| bad(ATTENTION_KEY, format!("= {name:?} is neither \"explicit\" nor \"tiled\"")))?,
    };
    let config = config.with_path(attention);
    check_limits(&config, file.len())?;

    let specs = parameter_shapes(&config);
    let read = |name: &str, shape: &[usize]| -> Result<Vec<f64>, TrainStateError> {
        let view = file.tensor(name).map_err(|_| TrainStateError::MissingTensor { name: name.to_string() })?;
        if view.dtype() != Dtype::F64 {
            return Err(TrainStateError::Dtype { name: name.to_string(), dtype: view.dtype().to_string() });
        }
        if view.shape() != shape {
            return Err(TrainStateError::TensorShape {
                name: name.to_string(),
                expected: Shape::from(shape),
                actual: Shape::from(view.shape()),
            });
        }
        // the parser checked that the data holds exactly shape·8 bytes
        Ok(view.data().chunks_exact(8).map(|c| f64::from_le_bytes(std::array::from_fn(|i| c[i]))).collect())
    };
    let (mut list, mut first, mut second) = (Vec::new(), Vec::new(), Vec::new());
    for (name, shape) in &specs {
        let values = read(name, shape)?;
        list.push(NamedParameter::new(name.clone(), parameter(shape, &values).map_err(ModelError::from)?));
        first.push(read(&first_key(name), shape)?);
        second.push(read(&second_key(name), shape)?);
    }
    let mut names = file.names();
    names.sort_unstable(); // the header is a hash map: report the same extra tensor every time
    let known = |n: &&str| specs.iter().any(|(name, _)| name == n || first_key(name) == *n || second_key(name) == *n);
    if let Some(extra) = names.into_iter().find(|n| !known(n)) {
        return Err(TrainStateError::UnexpectedTensor { name: extra.to_string() });
    }
    let params = NamedParameters::try_new(list).map_err(ModelError::from)?;
    let model = Decoder::from_named(config, &params)?;
    let optimizer = AdamW::from_state(adamw, &model.parameters(), (first, second), adamw_steps, beta_powers)?;
    let notes =
        metadata.iter().filter_map(|(k, v)| k.strip_prefix("note.").map(|k| (k.to_string(), v.clone()))).collect();
    Ok(TrainState { model, optimizer, step, notes })
}

/// The metadata key of the attention kernel the run trains with.
const ATTENTION_KEY: &str = "attention";

/// How the file names an [`AttentionPath`].
fn path_name(path: AttentionPath) -> &'static str {
    match path {
        AttentionPath::Explicit => "explicit",
        AttentionPath::Tiled => "tiled",
    }
}

/// The [`AttentionPath`] the file names, if it names one.
fn path_named(name: &str) -> Option<AttentionPath> {
    [AttentionPath::Explicit, AttentionPath::Tiled].into_iter().find(|&p| path_name(p) == name)
}

/// `"3fe0000000000000,3fe8000000000000"` → `(0.5, 0.75)`.
fn parse_powers(text: &str) -> Option<(f64, f64)> {
    let (a, b) = text.split_once(',')?;
    let bits = |s: &str| (s.len() == 16).then(|| u64::from_str_radix(s, 16).ok()).flatten().map(f64::from_bits);
    Some((bits(a)?, bits(b)?))
}

fn parse_adamw(text: &str) -> Result<AdamWConfig, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("is not JSON: {e}"))?;
    let field = |key: &str| value.get(key).and_then(Value::as_f64).ok_or_else(|| format!("has no number {key}"));
    let config = AdamWConfig {
        beta1: field("beta1")?,
        beta2: field("beta2")?,
        eps: field("eps")?,
        weight_decay: field("weight_decay")?,
    };
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

/// Refuses a configuration whose tables or tensor list would be allocated beyond what the file
/// can hold, before [`parameter_shapes`] or the RoPE tables are built from it.
fn check_limits(config: &DecoderConfig, tensors_in_file: usize) -> Result<(), TrainStateError> {
    // three tensors (value, m, v) per parameter: 1 + 9 per layer + 1 (+ 1 untied head)
    let per_layer = 3 * BLOCK_TENSORS.len();
    let layer_limit = tensors_in_file / per_layer;
    if config.layers > layer_limit {
        return Err(TrainStateError::Limit { what: "layers", value: config.layers, limit: layer_limit });
    }
    let rope = config.max_positions.saturating_mul(config.head_width);
    if rope > MAX_ROPE_ELEMENTS {
        return Err(TrainStateError::Limit {
            what: "max_positions × head_width",
            value: rope,
            limit: MAX_ROPE_ELEMENTS,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
