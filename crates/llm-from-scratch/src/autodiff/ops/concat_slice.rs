//! `concat` along an axis and `slice_axis` (a contiguous range of one axis): the pieces a KV cache
//! and the two halves of rotary embedding are built from.

use crate::autodiff::TensorValue;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::Tensor;

/// `(outer, inner)`: products of the axes before and after `axis`.
fn outer_inner(shape: &[usize], axis: usize) -> (usize, usize) {
    (shape[..axis].iter().product(), shape[axis + 1..].iter().product())
}

/// Joins `values` along `axis`; all other axes must agree.
///
/// # Shapes
/// `[..., n_i, ...]` for each value (`n_i` at `axis`) → `[..., Σ n_i, ...]`.
///
/// ```
/// use llm_from_scratch::{concat, constant};
/// let a = constant(&[1, 2], &[1.0, 2.0])?;
/// let b = constant(&[2, 2], &[3.0, 4.0, 5.0, 6.0])?;
/// let c = concat(&[&a, &b], 0)?;
/// assert_eq!((c.shape(), c.value()?.as_slice()), (&[3usize, 2][..], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0][..]));
/// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
/// ```
///
/// # Errors
/// [`TensorAutodiffError::InvalidArgument`] for an empty list, `AxisOutOfRange`, or
/// `ShapeMismatch` when the other axes differ.
pub fn concat(values: &[&TensorValue], axis: usize) -> Result<TensorValue> {
    let Some(first) = values.first() else {
        return Err(TensorAutodiffError::InvalidArgument {
            op: "concat",
            name: "number of values",
            value: 0.0,
            reason: "needs at least one value",
        });
    };
    let shape = first.shape();
    if axis >= shape.len() {
        return Err(TensorAutodiffError::AxisOutOfRange { op: "concat", axis, shape: Shape::from(shape) });
    }
    let mut out_shape = shape.to_vec();
    out_shape[axis] = 0;
    for v in values {
        let s = v.shape();
        let same_elsewhere =
            s.len() == shape.len() && s.iter().zip(shape).enumerate().all(|(i, (a, b))| i == axis || a == b);
        if !same_elsewhere {
            return Err(TensorAutodiffError::ShapeMismatch {
                op: "concat",
                lhs: Shape::from(shape),
                rhs: Shape::from(s),
                reason: "all axes but the joined one must agree",
            });
        }
        out_shape[axis] += s[axis];
    }
    let parts = values.iter().map(|v| v.read("concat")).collect::<Result<Vec<_>>>()?;
    let (outer, inner) = outer_inner(&out_shape, axis);
    let mut out = Vec::with_capacity(out_shape.iter().product());
    for o in 0..outer {
        for part in &parts {
            let chunk = part.shape()[axis] * inner;
            out.extend_from_slice(&part.as_slice()[o * chunk..(o + 1) * chunk]);
        }
    }
    let lengths: Vec<usize> = parts.iter().map(|p| p.shape()[axis]).collect();
    let parents = values.iter().map(|v| (*v).clone()).collect();
    Ok(TensorValue::record("concat", parents, Tensor::from_parts(out_shape.clone(), out), move |ctx| {
        // forward: out[o, start_i + j, :] = part_i[o, j, :]  =>  dpart_i = dout[o, start_i.., :]
        let g = ctx.grad().as_slice();
        let total = out_shape[axis] * inner;
        let mut start = 0;
        let mut grads = Vec::with_capacity(lengths.len());
        for (i, &len) in lengths.iter().enumerate() {
            let mut d = Vec::with_capacity(outer * len * inner);
            for o in 0..outer {
                d.extend_from_slice(&g[o * total + start * inner..][..len * inner]);
            }
            grads.push(Some(Tensor::from_parts(ctx.input_shape(i).to_vec(), d)));
            start += len;
        }
        Ok(grads)
    }))
}

impl TensorValue {
    /// The positions `start..end` of `axis` (a copy).
    ///
    /// # Shapes
    /// `[..., n, ...] → [..., end − start, ...]` (`n` at `axis`).
    ///
    /// # Errors
    /// [`TensorAutodiffError::AxisOutOfRange`] or [`TensorAutodiffError::RangeOutOfBounds`].
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::parameter;
    /// // the second half of each row; the backward sends the adjoint to those entries only
    /// let x = parameter(&[2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])?;
    /// let half = x.slice_axis(1, 2, 4)?;
    /// assert_eq!(half.value()?.as_slice(), &[3.0, 4.0, 7.0, 8.0]);
    /// assert_eq!(half.sum()?.backward()?.get(&x).unwrap().as_slice(), &[0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]);
    /// assert!(x.slice_axis(1, 3, 5).is_err()); // past the end of the axis
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn slice_axis(&self, axis: usize, start: usize, end: usize) -> Result<TensorValue> {
        let shape = self.shape().to_vec();
        if axis >= shape.len() {
            return Err(TensorAutodiffError::AxisOutOfRange { op: "slice_axis", axis, shape: Shape(shape) });
        }
        if start > end || end > shape[axis] {
            return Err(TensorAutodiffError::RangeOutOfBounds { op: "slice_axis", axis, start, end, len: shape[axis] });
        }
        let x = self.read("slice_axis")?;
        let (outer, inner) = outer_inner(&shape, axis);
        let total = shape[axis] * inner;
        let len = end - start;
        let mut out = Vec::with_capacity(outer * len * inner);
        for o in 0..outer {
            out.extend_from_slice(&x.as_slice()[o * total + start * inner..][..len * inner]);
        }
        let mut out_shape = shape.clone();
        out_shape[axis] = len;
        Ok(TensorValue::record("slice_axis", vec![self.clone()], Tensor::from_parts(out_shape, out), move |ctx| {
            // forward: out[o, j, :] = x[o, start + j, :]  =>  dx[o, start + j, :] = dout[o, j, :], 0 elsewhere
            let g = ctx.grad().as_slice();
            let mut dx = vec![0.0; outer * total];
            for o in 0..outer {
                dx[o * total + start * inner..][..len * inner].copy_from_slice(&g[o * len * inner..][..len * inner]);
            }
            Ok(vec![Some(Tensor::from_parts(shape.clone(), dx))])
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::concat;
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::Tensor;

    #[test]
    fn slice_by_hand_and_errors() {
        // columns 1..3 of [[1,2,3],[4,5,6]] are [[2,3],[5,6]]
        let x = constant(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!(x.slice_axis(1, 1, 3).unwrap().value().unwrap().as_slice(), &[2.0, 3.0, 5.0, 6.0]);
        let err = x.slice_axis(1, 2, 4).unwrap_err();
        assert_eq!(err.to_string(), "slice_axis: range 2..4 is outside axis 1 of length 3");
        assert!(matches!(x.slice_axis(2, 0, 1), Err(crate::error::TensorAutodiffError::AxisOutOfRange { .. })));
        let y = constant(&[3, 3], &[0.0; 9]).unwrap();
        let err = concat(&[&x, &y], 1).unwrap_err();
        assert!(err.to_string().starts_with("concat: shapes [2,3] and [3,3]"), "{err}");
        assert!(concat(&[], 0).is_err());
    }

    #[test]
    fn gradcheck_concat_of_slices() {
        let x = Tensor::new(&[2, 4, 3], (0..24).map(|i| (i as f64 * 0.71).cos()).collect()).unwrap();
        let y = Tensor::new(&[2, 1, 3], (0..6).map(|i| i as f64 * 0.2 - 0.5).collect()).unwrap();
        let report = gradcheck(&[("x", x), ("y", y)], &GradcheckConfig::default(), |v| {
            // rotate-half style: [x[2..4], y, x[0..2]] along axis 1
            concat(&[&v[0].slice_axis(1, 2, 4)?, &v[1], &v[0].slice_axis(1, 0, 2)?], 1)
        })
        .unwrap();
        assert!(report.passed(), "{report:?}");
    }
}
