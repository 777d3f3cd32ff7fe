//! Errors of the `nn` layers.

use thiserror::Error;

use crate::error::{Shape, TensorAutodiffError};

/// Errors of parameter lists and layers (`Linear`, `QkvProjections`, `RmsNorm`).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum NnError {
    /// A size or setting that the layer cannot be built with.
    #[error("{module}: {setting} = {value} is invalid ({reason})")]
    InvalidConfig {
        /// The layer being built.
        module: String,
        /// The setting's name.
        setting: &'static str,
        /// The value given.
        value: String,
        /// What is required.
        reason: &'static str,
    },
    /// A parameter's shape does not fit the layer.
    #[error("{module}: parameter {name} has shape {actual} but {expected} was needed")]
    ParameterShape {
        /// The layer being built.
        module: String,
        /// The parameter's role (`weight`, `bias`, …).
        name: &'static str,
        /// The shape that fits.
        expected: String,
        /// The shape given.
        actual: Shape,
    },
    /// An input has the wrong rank or last axis.
    #[error("{module}: input of shape {actual} does not fit (expected {expected})")]
    InputShape {
        /// The layer that was called.
        module: String,
        /// What fits, e.g. `[..., 4]`.
        expected: String,
        /// The shape given.
        actual: Shape,
    },
    /// Two parameters share a name.
    #[error("parameters: the name {name:?} appears twice (positions {first} and {second})")]
    DuplicateParameterName {
        /// The repeated name.
        name: String,
        /// Index of the first occurrence.
        first: usize,
        /// Index of the repeat.
        second: usize,
    },
    /// The same node is listed twice (under two names): its gradient would be counted twice.
    #[error("parameters: {first_name:?} and {second_name:?} are the same node #{node}")]
    DuplicateParameterNode {
        /// Creation index of the node.
        node: u64,
        /// Its first name.
        first_name: String,
        /// Its second name.
        second_name: String,
    },
    /// A tensor operation inside the layer failed.
    #[error("{module}: {source}")]
    Tensor {
        /// The layer that was running.
        module: String,
        /// The failing operation's error.
        #[source]
        source: TensorAutodiffError,
    },
}

impl NnError {
    /// Wraps a tensor error with the layer's name.
    pub(crate) fn tensor(module: &str) -> impl FnOnce(TensorAutodiffError) -> NnError + '_ {
        move |source| NnError::Tensor { module: module.to_string(), source }
    }
}
