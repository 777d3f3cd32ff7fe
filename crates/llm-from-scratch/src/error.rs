//! The crate's typed errors.
//!
//! Every chapter's report (27–36) prints some of these messages, for the wrong shapes and settings
//! it tries on purpose. [`TensorAutodiffError`] belongs to tensors and the tape; the layers have their own
//! ([`crate::nn::NnError`], [`crate::nn::RopeError`], [`crate::attention::AttentionError`],
//! [`crate::model::ModelError`]), each wrapping the one below.
//!
//! Every fallible public function returns one of these enums. A message is lowercase, names the stage
//! (`op`) that failed and carries the values that went wrong, so that a learner can read it without a
//! debugger. Shapes print as `[1,3,4]`.

use thiserror::Error;

/// Formats a shape the way every report of this crate prints it: `[1,3,4]`, `[]` for a scalar.
pub fn fmt_shape(shape: &[usize]) -> String {
    let items: Vec<String> = shape.iter().map(|axis| axis.to_string()).collect();
    format!("[{}]", items.join(","))
}

/// A wrapper whose `Display` is [`fmt_shape`], used inside error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape(pub Vec<usize>);

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&fmt_shape(&self.0))
    }
}

impl From<&[usize]> for Shape {
    fn from(shape: &[usize]) -> Self {
        Shape(shape.to_vec())
    }
}

/// Errors of tensors, the tape and its operations.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TensorAutodiffError {
    /// The number of values does not match the product of the shape.
    #[error("{op}: shape {shape} holds {expected} values but {actual} were given")]
    LengthMismatch {
        /// The stage that failed.
        op: &'static str,
        /// The requested shape.
        shape: Shape,
        /// The product of the shape.
        expected: usize,
        /// The number of values supplied.
        actual: usize,
    },
    /// The product of a shape overflows `usize` or exceeds [`crate::tensor::MAX_ELEMENTS`].
    #[error("{op}: shape {shape} holds more than 2^31 elements, the most one tensor may hold")]
    ShapeOverflow {
        /// The stage that failed.
        op: &'static str,
        /// The offending shape.
        shape: Shape,
    },
    /// Two operands have shapes that the operation cannot combine.
    #[error("{op}: shapes {lhs} and {rhs} are incompatible ({reason})")]
    ShapeMismatch {
        /// The stage that failed.
        op: &'static str,
        /// Shape of the left (or first) operand.
        lhs: Shape,
        /// Shape of the right (or second) operand.
        rhs: Shape,
        /// What the operation needed.
        reason: &'static str,
    },
    /// An operand has the wrong number of axes.
    #[error("{op}: expected rank {expected} but got shape {shape}")]
    RankMismatch {
        /// The stage that failed.
        op: &'static str,
        /// The rank that was required, e.g. `3` or `at least 2`.
        expected: String,
        /// The shape that was given.
        shape: Shape,
    },
    /// An axis index is not smaller than the rank.
    #[error("{op}: axis {axis} is out of range for shape {shape}")]
    AxisOutOfRange {
        /// The stage that failed.
        op: &'static str,
        /// The requested axis.
        axis: usize,
        /// The shape of the operand.
        shape: Shape,
    },
    /// A permutation is not a rearrangement of `0..rank`.
    #[error("{op}: {permutation:?} is not a permutation of the axes of {shape}")]
    InvalidPermutation {
        /// The stage that failed.
        op: &'static str,
        /// The permutation that was given.
        permutation: Vec<usize>,
        /// The shape of the operand.
        shape: Shape,
    },
    /// A reshape would change the number of elements.
    #[error("{op}: cannot reshape {from} ({from_len} values) into {to} ({to_len} values)")]
    ReshapeMismatch {
        /// The stage that failed.
        op: &'static str,
        /// The shape of the operand.
        from: Shape,
        /// The requested shape.
        to: Shape,
        /// Elements of the operand.
        from_len: usize,
        /// Elements of the requested shape.
        to_len: usize,
    },
    /// A half-open range `[start, end)` does not lie inside an axis.
    #[error("{op}: range {start}..{end} is outside axis {axis} of length {len}")]
    RangeOutOfBounds {
        /// The stage that failed.
        op: &'static str,
        /// The axis being sliced.
        axis: usize,
        /// First index requested.
        start: usize,
        /// One past the last index requested.
        end: usize,
        /// Length of the axis.
        len: usize,
    },
    /// A scalar argument is outside the values the operation accepts.
    #[error("{op}: {name} = {value} is invalid ({reason})")]
    InvalidArgument {
        /// The stage that failed.
        op: &'static str,
        /// The argument's name.
        name: &'static str,
        /// The value that was given.
        value: f64,
        /// What was required.
        reason: &'static str,
    },
    /// An operation needed a value whose storage was released.
    #[error("{op}: the value made by {created_by} was released and cannot be read")]
    Released {
        /// The stage that failed.
        op: &'static str,
        /// The creation index of the released node.
        node: u64,
        /// The operation that created it.
        created_by: &'static str,
    },
    /// `backward` without an upstream adjoint needs a scalar output.
    #[error("{op}: backward without an upstream adjoint needs one value but the output has shape {shape}")]
    NotScalar {
        /// The stage that failed.
        op: &'static str,
        /// Shape of the output.
        shape: Shape,
    },
    /// Gradient checking could not run (no coordinates, bad step or tolerance).
    #[error("gradcheck: {detail}")]
    Gradcheck {
        /// What went wrong.
        detail: String,
    },
}

/// Shorthand used throughout the tensor and autodiff modules.
pub type Result<T, E = TensorAutodiffError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{Mask, Tensor};

    #[test]
    fn construction_errors_name_the_stage_and_the_values() {
        let err = Tensor::new(&[2, 3], vec![0.0; 5]).unwrap_err();
        assert_eq!(
            err,
            TensorAutodiffError::LengthMismatch { op: "tensor", shape: Shape(vec![2, 3]), expected: 6, actual: 5 }
        );
        assert_eq!(err.to_string(), "tensor: shape [2,3] holds 6 values but 5 were given");
        let err = Mask::new(&[2], vec![true]).unwrap_err();
        assert!(matches!(err, TensorAutodiffError::LengthMismatch { op: "mask", expected: 2, actual: 1, .. }));
        let err = Tensor::zeros(&[1 << 20, 1 << 20]).unwrap_err();
        assert!(matches!(err, TensorAutodiffError::ShapeOverflow { op: "zeros", .. }));
        assert_eq!(
            err.to_string(),
            "zeros: shape [1048576,1048576] holds more than 2^31 elements, the most one tensor may hold"
        );
        let err = crate::constant(&[2, 2], &[0.0; 4]).unwrap().reshape(&[3]).unwrap_err();
        assert!(matches!(err, TensorAutodiffError::ReshapeMismatch { from_len: 4, to_len: 3, .. }));
        let err = crate::constant(&[2, 2], &[0.0; 4]).unwrap().slice_axis(0, 1, 3).unwrap_err();
        assert_eq!(err, TensorAutodiffError::RangeOutOfBounds { op: "slice_axis", axis: 0, start: 1, end: 3, len: 2 });
        let err = crate::constant(&[1], &[0.5]).unwrap().dropout(-0.1, &mut crate::nn::SplitMix64::new(0)).unwrap_err();
        assert!(matches!(err, TensorAutodiffError::InvalidArgument { op: "dropout", name: "p", .. }));
        let err =
            crate::constant(&[2], &[0.0; 2]).unwrap().add(&crate::constant(&[3], &[0.0; 3]).unwrap()).unwrap_err();
        assert!(matches!(err, TensorAutodiffError::ShapeMismatch { op: "add", .. }));
    }
}
