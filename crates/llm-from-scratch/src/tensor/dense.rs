//! The [`Tensor`]: a row-major shape and `f64` storage.

use std::sync::Arc;

use rayon::prelude::*;

use crate::error::{Result, Shape, TensorAutodiffError};

/// A dense, row-major `f64` tensor.
///
/// Rank 0 (a scalar, shape `[]`, one value) and empty axes (shape `[2,0]`, no values) are allowed.
/// Storage is shared: cloning a tensor is cheap and never copies values; writing through
/// [`Tensor::as_mut_slice`] copies only when the storage is shared.
///
/// ```
/// use llm_from_scratch::Tensor;
/// let t = Tensor::new(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
/// assert_eq!(t.shape(), &[2, 3]);
/// assert_eq!(t.get(&[1, 0]), Some(4.0));
/// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Arc<Vec<f64>>,
}

/// From this many values on, [`zeros`] fills, and [`Tensor::add_assign_same_shape`] adds, on
/// every thread.
const PARALLEL_ZEROS: usize = 1 << 16;

/// Values per task of a parallel addition: long runs, so that splitting costs little.
const ADD_MIN_LEN: usize = 1 << 14;

/// `len` zeros, written by every thread of the pool when `len` is large. Buffers that are summed
/// into (gradients) start as zeros; one thread writing megabytes of them would leave the others
/// idle, on the critical path of a training step.
pub(crate) fn zeros(len: usize) -> Vec<f64> {
    if len < PARALLEL_ZEROS {
        return vec![0.0; len];
    }
    let mut out = Vec::with_capacity(len);
    out.par_extend(rayon::iter::repeat_n(0.0, len));
    out
}

/// Values per task of a parallel [`all_finite`].
const FINITE_MIN_LEN: usize = 1 << 15;

/// `true` when every value is finite. `x · 0` is ±0 for a finite `x` and NaN for NaN or ±∞, so
/// eight running sums of it stay 0 exactly when all values are finite: a pass with no branch,
/// which vectorises (a check on the hot path of the attention kernels, which run a plain loop
/// when some operand is not finite).
pub(crate) fn all_finite(values: &[f64]) -> bool {
    let chunk_ok = |chunk: &[f64]| {
        let mut lanes = [0.0f64; 8];
        let mut eights = chunk.chunks_exact(8);
        for x in &mut eights {
            for (lane, &v) in lanes.iter_mut().zip(x) {
                *lane += v * 0.0;
            }
        }
        lanes.iter().all(|&l| l == 0.0) && eights.remainder().iter().all(|v| v.is_finite())
    };
    if values.len() < FINITE_MIN_LEN { chunk_ok(values) } else { values.par_chunks(FINITE_MIN_LEN).all(chunk_ok) }
}

/// The most elements one tensor may hold: 2³¹ (16 GiB of `f64`). Larger requests are refused with
/// a typed error instead of aborting the process when the allocation fails.
pub const MAX_ELEMENTS: usize = 1 << 31;

/// The number of elements of `shape`, or a typed error if it overflows or exceeds [`MAX_ELEMENTS`].
pub(crate) fn element_count(op: &'static str, shape: &[usize]) -> Result<usize> {
    // the non-zero axes must fit too, so that `shape.iter().product()` can never overflow later
    let nonzero = shape.iter().filter(|&&a| a != 0).try_fold(1usize, |acc, &axis| acc.checked_mul(axis));
    match nonzero {
        Some(n) if n <= MAX_ELEMENTS => Ok(if shape.contains(&0) { 0 } else { n }),
        _ => Err(TensorAutodiffError::ShapeOverflow { op, shape: Shape::from(shape) }),
    }
}

impl Tensor {
    /// A tensor of `shape` holding `values` in row-major order.
    ///
    /// # Errors
    /// [`TensorAutodiffError::LengthMismatch`] if `values.len()` is not the product of `shape`,
    /// [`TensorAutodiffError::ShapeOverflow`] if that product overflows.
    pub fn new(shape: &[usize], values: Vec<f64>) -> Result<Self> {
        let expected = element_count("tensor", shape)?;
        if expected != values.len() {
            return Err(TensorAutodiffError::LengthMismatch {
                op: "tensor",
                shape: Shape::from(shape),
                expected,
                actual: values.len(),
            });
        }
        Ok(Self { shape: shape.to_vec(), data: Arc::new(values) })
    }

    /// Internal constructor for operations whose output length is correct by construction.
    pub(crate) fn from_parts(shape: Vec<usize>, values: Vec<f64>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), values.len());
        Self { shape, data: Arc::new(values) }
    }

    /// A tensor of `shape` filled with zeros.
    ///
    /// # Errors
    /// [`TensorAutodiffError::ShapeOverflow`] if the shape has too many elements.
    pub fn zeros(shape: &[usize]) -> Result<Self> {
        let len = element_count("zeros", shape)?;
        Ok(Self::from_parts(shape.to_vec(), vec![0.0; len]))
    }

    /// A rank-0 tensor holding `value`.
    pub fn scalar(value: f64) -> Self {
        Self::from_parts(Vec::new(), vec![value])
    }

    /// The shape, outermost axis first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The values in row-major order.
    pub fn as_slice(&self) -> &[f64] {
        &self.data
    }

    /// Mutable access to the values; copies the storage first if another tensor shares it.
    pub fn as_mut_slice(&mut self) -> &mut [f64] {
        Arc::make_mut(&mut self.data).as_mut_slice()
    }

    /// The values as an owned vector (no copy when the storage is not shared).
    pub fn into_vec(self) -> Vec<f64> {
        Arc::try_unwrap(self.data).unwrap_or_else(|shared| (*shared).clone())
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// `true` when the tensor holds no values (some axis is 0).
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The value at a multi-index, or `None` if the index has the wrong rank or is out of range.
    pub fn get(&self, index: &[usize]) -> Option<f64> {
        if index.len() != self.shape.len() {
            return None;
        }
        let mut offset = 0usize;
        for (&i, &axis) in index.iter().zip(&self.shape) {
            if i >= axis {
                return None;
            }
            offset = offset * axis + i;
        }
        self.data.get(offset).copied()
    }

    /// `true` when every value is finite (no NaN, no ±∞).
    pub fn all_finite(&self) -> bool {
        all_finite(&self.data)
    }

    /// The same values under another shape with the same number of elements (no copy).
    ///
    /// # Errors
    /// [`TensorAutodiffError::ReshapeMismatch`] if the element counts differ.
    pub fn reshaped(&self, shape: &[usize]) -> Result<Self> {
        let to_len = element_count("reshape", shape)?;
        if to_len != self.len() {
            return Err(TensorAutodiffError::ReshapeMismatch {
                op: "reshape",
                from: Shape::from(self.shape()),
                to: Shape::from(shape),
                from_len: self.len(),
                to_len,
            });
        }
        Ok(Self { shape: shape.to_vec(), data: Arc::clone(&self.data) })
    }

    /// Elementwise `self + other` for tensors of the same shape (used to accumulate adjoints), on
    /// every thread from [`PARALLEL_ZEROS`] values on: each value is one addition, so the result
    /// is the same bits either way.
    pub(crate) fn add_assign_same_shape(&mut self, other: &Tensor) {
        debug_assert_eq!(self.shape, other.shape);
        let add = |(a, b): (&mut f64, &f64)| *a += b;
        if self.len() < PARALLEL_ZEROS {
            self.as_mut_slice().iter_mut().zip(other.as_slice()).for_each(add);
        } else {
            self.as_mut_slice().par_iter_mut().zip(other.as_slice()).with_min_len(ADD_MIN_LEN).for_each(add);
        }
    }

    /// A new tensor with `f` applied to every value.
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Self {
        Self::from_parts(self.shape.clone(), self.data.iter().map(|&v| f(v)).collect())
    }

    /// The largest absolute difference between two tensors of the same shape, or `None` if the
    /// shapes differ. Handy in tests: `assert!(a.max_abs_diff(&b).unwrap() < 1e-12)`.
    pub fn max_abs_diff(&self, other: &Tensor) -> Option<f64> {
        (self.shape == other.shape)
            .then(|| self.data.iter().zip(other.data.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max))
    }

    /// `true` when both tensors have the same shape and bitwise identical values.
    pub fn bitwise_eq(&self, other: &Tensor) -> bool {
        self.shape == other.shape && self.data.iter().zip(other.data.iter()).all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn all_finite_finds_one_bad_value_anywhere() {
        use super::all_finite;
        for len in [0, 1, 7, 8, 9, 100, (1 << 15) + 13, 3 << 15] {
            let mut values = vec![1.5; len];
            assert!(all_finite(&values), "{len}");
            for at in [0, len / 2, len.saturating_sub(1)].into_iter().filter(|&at| at < len) {
                for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                    values[at] = bad;
                    assert!(!all_finite(&values), "{len} {at} {bad}");
                    values[at] = -2.0;
                    assert!(all_finite(&values), "{len} {at}");
                }
            }
        }
        assert!(all_finite(&[f64::MAX, f64::MIN, 0.0, -0.0, f64::MIN_POSITIVE]));
    }
    #[test]
    fn zeros_below_and_above_the_parallel_threshold_are_all_zero() {
        for len in [0, 5, super::PARALLEL_ZEROS - 1, super::PARALLEL_ZEROS, 3 * super::PARALLEL_ZEROS + 7] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
            let zeros = pool.install(|| super::zeros(len));
            assert_eq!(zeros.len(), len);
            assert!(zeros.iter().all(|&x| x.to_bits() == 0), "{len}");
        }
    }

    #[test]
    fn adjoint_sums_below_and_above_the_parallel_threshold_add_every_value() {
        let p = super::PARALLEL_ZEROS;
        for len in [1, p - 1, p, 3 * p + 7] {
            let a = super::Tensor::from_parts(vec![len], (0..len).map(|i| (i as f64).sin()).collect());
            let b = super::Tensor::from_parts(vec![len], (0..len).map(|i| 0.1 * (i as f64).cos()).collect());
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                // a shares its values with `sum` until the addition, which must leave `a` alone
                let mut sum = a.clone();
                pool.install(|| sum.add_assign_same_shape(&b));
                let expected = a.as_slice().iter().zip(b.as_slice()).map(|(x, y)| x + y);
                assert!(sum.as_slice().iter().zip(expected).all(|(s, e)| s.to_bits() == e.to_bits()), "{len}");
                assert_eq!(a.as_slice()[len - 1], ((len - 1) as f64).sin());
            }
        }
    }
}
