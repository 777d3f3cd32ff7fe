//! The input rules shared by the attention layers, checked before anything is recorded on the
//! tape, so that a bad call leaves no trace and names what was wrong.

use crate::attention::AttentionError;
use crate::error::Shape;
use crate::tensor::Mask;

/// The input rules shared by every attention layer: rank 3, last axis `d`, at least one token.
pub(crate) fn check_sequence(shape: &[usize], model_width: usize) -> Result<(), AttentionError> {
    if shape.len() != 3 {
        return Err(AttentionError::InputRank { shape: Shape::from(shape) });
    }
    if shape[2] != model_width {
        return Err(AttentionError::InputWidth { expected: model_width, shape: Shape::from(shape) });
    }
    if shape[1] == 0 {
        return Err(AttentionError::EmptySequence { shape: Shape::from(shape) });
    }
    Ok(())
}

/// Explicit RoPE positions for `x [B, T, d]`: `T` of them (shared by the batch) or `B·T` (one row
/// per batch row), each below the layer's `capacity`.
pub(crate) fn check_positions(
    positions: &[usize],
    (b, t): (usize, usize),
    capacity: usize,
) -> Result<(), AttentionError> {
    if positions.len() != t && positions.len() != b * t {
        return Err(AttentionError::PaddingShape {
            what: "positions",
            expected: Shape(vec![b, t]),
            actual: Shape(vec![positions.len()]),
        });
    }
    if let Some(&bad) = positions.iter().find(|&&p| p >= capacity) {
        return Err(AttentionError::PositionOutOfRange { start: bad, end: bad.saturating_add(1), capacity });
    }
    Ok(())
}

/// A key padding mask for `x [B, T, d]`: shape `[B, T]`.
pub(crate) fn check_key_padding(mask: &Mask, (b, t): (usize, usize)) -> Result<(), AttentionError> {
    if mask.shape() != [b, t] {
        return Err(AttentionError::PaddingShape {
            what: "key padding",
            expected: Shape(vec![b, t]),
            actual: Shape::from(mask.shape()),
        });
    }
    Ok(())
}
