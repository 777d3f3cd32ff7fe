//! Errors of the decoder model, its training and its generation.

use thiserror::Error;

use crate::attention::AttentionError;
use crate::error::{Shape, TensorAutodiffError};
use crate::nn::NnError;

/// Errors of [`crate::model`]: configuration, inputs, parameters, caches, optimiser and sampling,
/// plus the errors of the layers it is built from.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ModelError {
    /// A setting that cannot be used (`module` is `model config`, `adamw`, `lr schedule`,
    /// `gradient clipping`, `recipe`, `sampling` or `model generation`).
    #[error("{module}: {setting} = {value} is invalid ({reason})")]
    InvalidSetting {
        /// Where the setting belongs.
        module: &'static str,
        /// The setting's name.
        setting: &'static str,
        /// The value given.
        value: String,
        /// What is required.
        reason: &'static str,
    },
    /// A token id (an input or a target) at or past the vocabulary size.
    #[error("model input: {what} {id} at index {index} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfRange {
        /// `input token` or `target token`.
        what: &'static str,
        /// Row-major index in the batch.
        index: usize,
        /// The id given.
        id: usize,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A token list whose length does not fit the batch shape `[B, T]`.
    #[error("model input: {what} holds {actual} entries but the batch shape {shape} needs {expected}")]
    BatchShape {
        /// `inputs`, `targets` or `sequences`.
        what: &'static str,
        /// `[B, T]`.
        shape: Shape,
        /// `B·T`.
        expected: usize,
        /// The length given.
        actual: usize,
    },
    /// A gradient holds NaN or ±∞: an optimiser step would turn the parameter (and its moments)
    /// into NaN for good, so the step is refused and nothing is changed.
    #[error("adamw: the gradient of {name} is not finite ({value} at index {index}); no parameter was changed")]
    NonFiniteParameterGradient {
        /// The parameter's name.
        name: String,
        /// Row-major index of the first non-finite value.
        index: usize,
        /// That value, printed.
        value: String,
    },
    /// Every target is ignored: a mean over no tokens is undefined.
    #[error("model loss: every target is ignored, there is nothing to score")]
    NoTargets,
    /// A tensor the configuration needs is not in the list.
    #[error("model parameters: {name} is missing")]
    MissingParameter {
        /// Its checkpoint name.
        name: String,
    },
    /// A tensor has another shape than the configuration needs.
    #[error("model parameters: {name} has shape {actual} but {expected} was needed")]
    ParameterShape {
        /// Its checkpoint name.
        name: String,
        /// The shape that fits.
        expected: Shape,
        /// The shape given.
        actual: Shape,
    },
    /// A tensor that this configuration does not use (e.g. `lm_head.weight` with tied embeddings).
    #[error("model parameters: {name} is not a parameter of this configuration")]
    UnexpectedParameter {
        /// Its name.
        name: String,
    },
    /// One KV cache per layer is needed.
    #[error("model cache: the model has {expected} layers but {actual} caches were given")]
    CacheCount {
        /// Layers.
        expected: usize,
        /// Caches given.
        actual: usize,
    },
    /// Generation would need more positions than RoPE covers (only when asked to refuse,
    /// [`crate::model::Overflow::Refuse`]; by default the context slides).
    #[error("model generation: {needed} positions are needed but the model covers {capacity}")]
    ContextOverflow {
        /// Prompt plus generated tokens that are fed back.
        needed: usize,
        /// `max_positions`.
        capacity: usize,
    },
    /// Generation needs at least one prompt token.
    #[error("model generation: the prompt is empty")]
    EmptyPrompt,
    /// A generator's forward pass returned logits with no last row of one logit per token of
    /// its vocabulary to choose the next token from.
    #[error("model generation: the model's logits have shape {shape}; their last axis must be its {vocab} tokens")]
    LogitsShape {
        /// The logits' shape.
        shape: Shape,
        /// The generator's vocabulary size.
        vocab: usize,
    },
    /// A logit that cannot be turned into a probability.
    #[error("sampling: logit {value} at index {index} is not finite")]
    NonFiniteLogit {
        /// Its index in the vocabulary.
        index: usize,
        /// Its value.
        value: f64,
    },
    /// The optimiser was given another parameter list than it was made for.
    #[error("adamw: {detail}")]
    ParameterListChanged {
        /// What differs.
        detail: String,
    },
    /// The gradients contain NaN or ±∞: no step can be taken.
    #[error("gradient clipping: the global gradient norm is {norm}, not finite")]
    NonFiniteGradient {
        /// The norm computed.
        norm: f64,
    },
    /// An attention layer failed.
    #[error("model: {0}")]
    Attention(#[from] AttentionError),
    /// A layer of `nn` failed.
    #[error("model: {0}")]
    Nn(#[from] NnError),
    /// A tensor operation failed.
    #[error("model: {0}")]
    Tensor(#[from] TensorAutodiffError),
}

impl ModelError {
    /// An [`ModelError::InvalidSetting`] of `module`.
    pub(crate) fn setting(
        module: &'static str,
        setting: &'static str,
        value: impl ToString,
        reason: &'static str,
    ) -> Self {
        ModelError::InvalidSetting { module, setting, value: value.to_string(), reason }
    }
}
