//! Broadcasting: aligning two shapes from the right, and summing an adjoint back to the shape
//! of an operand that was broadcast.
//!
//! Two axes are compatible when they are equal or one of them is 1; a missing leading axis
//! counts as 1. `[4,1,3]` and `[2,3]` broadcast to `[4,2,3]`.

use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::Tensor;

/// The shape that `lhs` and `rhs` broadcast to.
///
/// # Shapes
/// Aligned from the right; each output axis is the larger of the two (one of which is 1 or missing).
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] naming `op` if some aligned axes differ and neither is 1.
///
/// # Example
/// ```
/// use llm_from_scratch::tensor::broadcast_shapes;
/// assert_eq!(broadcast_shapes("add", &[4, 1, 3], &[2, 3])?, vec![4, 2, 3]);
/// assert!(broadcast_shapes("add", &[2, 3], &[2]).is_err()); // 3 against 2
/// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
/// ```
pub fn broadcast_shapes(op: &'static str, lhs: &[usize], rhs: &[usize]) -> Result<Vec<usize>> {
    let rank = lhs.len().max(rhs.len());
    let mut out = vec![0; rank];
    for (i, slot) in out.iter_mut().enumerate() {
        let a = axis_from_right(lhs, rank - 1 - i);
        let b = axis_from_right(rhs, rank - 1 - i);
        *slot = match (a, b) {
            (a, b) if a == b => a,
            (1, b) => b,
            (a, 1) => a,
            _ => {
                return Err(TensorAutodiffError::ShapeMismatch {
                    op,
                    lhs: Shape::from(lhs),
                    rhs: Shape::from(rhs),
                    reason: "aligned axes must be equal or 1 to broadcast",
                });
            }
        };
    }
    Ok(out)
}

/// Axis `k` counted from the right (0 = last), 1 when the shape is shorter.
fn axis_from_right(shape: &[usize], k: usize) -> usize {
    if k < shape.len() { shape[shape.len() - 1 - k] } else { 1 }
}

/// Row-major strides of `shape` seen inside `out_shape`: 0 on broadcast (size-1 or missing) axes.
pub(crate) fn broadcast_strides(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let rank = out_shape.len();
    let offset = rank - shape.len();
    let mut strides = vec![0; rank];
    let mut stride = 1;
    for i in (0..shape.len()).rev() {
        strides[offset + i] = if shape[i] == 1 { 0 } else { stride };
        stride *= shape[i];
    }
    strides
}

/// Calls `f(out_index, lhs_offset, rhs_offset)` for every element of `out_shape` in row-major
/// order, with the offsets of the broadcast operands.
pub(crate) fn for_each_broadcast(
    out_shape: &[usize],
    lhs_strides: &[usize],
    rhs_strides: &[usize],
    mut f: impl FnMut(usize, usize, usize),
) {
    let total: usize = out_shape.iter().product();
    if total == 0 {
        return;
    }
    let rank = out_shape.len();
    let mut index = vec![0usize; rank];
    let (mut a, mut b) = (0usize, 0usize);
    for out in 0..total {
        f(out, a, b);
        // odometer increment, keeping both offsets in step
        for axis in (0..rank).rev() {
            index[axis] += 1;
            a += lhs_strides[axis];
            b += rhs_strides[axis];
            if index[axis] < out_shape[axis] {
                break;
            }
            a -= lhs_strides[axis] * out_shape[axis];
            b -= rhs_strides[axis] * out_shape[axis];
            index[axis] = 0;
        }
    }
}

/// Sums `tensor` over the axes on which `target` was broadcast, giving a tensor of shape `target`.
/// This is the backward of broadcasting: every copy of a value sends its adjoint home.
///
/// # Shapes
/// `tensor` of the broadcast shape → `target`.
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if `target` does not broadcast to the tensor's shape.
///
/// # Example
/// ```
/// use llm_from_scratch::{Tensor, tensor::sum_to_shape};
/// // a bias [2] was added to 3 rows: its adjoint is the column sums of the [3, 2] adjoint
/// let adjoint = Tensor::new(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
/// assert_eq!(sum_to_shape(&adjoint, &[2])?.as_slice(), &[9.0, 12.0]);
/// assert!(sum_to_shape(&adjoint, &[4]).is_err()); // [4] does not broadcast to [3, 2]
/// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
/// ```
pub fn sum_to_shape(tensor: &Tensor, target: &[usize]) -> Result<Tensor> {
    if tensor.shape() == target {
        return Ok(tensor.clone());
    }
    let out_shape = broadcast_shapes("sum_to_shape", target, tensor.shape())?;
    if out_shape != tensor.shape() {
        return Err(TensorAutodiffError::ShapeMismatch {
            op: "sum_to_shape",
            lhs: Shape::from(tensor.shape()),
            rhs: Shape::from(target),
            reason: "the target must broadcast to the tensor's shape",
        });
    }
    let target_len: usize = target.iter().product();
    let mut out = vec![0.0; target_len];
    let target_strides = broadcast_strides(target, &out_shape);
    let own_strides = broadcast_strides(tensor.shape(), &out_shape);
    let values = tensor.as_slice();
    for_each_broadcast(&out_shape, &target_strides, &own_strides, |_, t, s| {
        out[t] += values[s];
    });
    Tensor::new(target, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_align_from_the_right() {
        assert_eq!(broadcast_shapes("t", &[4, 1, 3], &[2, 3]).unwrap(), vec![4, 2, 3]);
        assert_eq!(broadcast_shapes("t", &[], &[2]).unwrap(), vec![2]);
        let err = broadcast_shapes("add", &[2, 3], &[4]).unwrap_err();
        assert!(err.to_string().starts_with("add: shapes [2,3] and [4]"), "{err}");
    }

    #[test]
    fn sum_to_shape_adds_every_copy() {
        // [[1,2],[3,4],[5,6]] summed to [2]: columns 1+3+5 = 9 and 2+4+6 = 12
        let t = Tensor::new(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!(sum_to_shape(&t, &[2]).unwrap().as_slice(), &[9.0, 12.0]);
        // summed to [3,1]: rows 1+2, 3+4, 5+6
        assert_eq!(sum_to_shape(&t, &[3, 1]).unwrap().as_slice(), &[3.0, 7.0, 11.0]);
        assert_eq!(sum_to_shape(&t, &[]).unwrap().as_slice(), &[21.0]);
        assert!(sum_to_shape(&t, &[4]).is_err());
    }
}
