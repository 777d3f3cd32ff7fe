//! Softmax over the last axis, numerically stable.
//!
//! `y_j = e^{x_j − m} / Σ_k e^{x_k − m}` with `m = max_k x_k`: subtracting the row maximum keeps
//! every exponent ≤ 0, so nothing overflows, and it changes nothing mathematically.
//!
//! Defined answers where the formula alone would give NaN:
//! - a row whose entries are all −∞ (every key masked) gives all zeros — no key receives weight;
//! - a row containing +∞ splits the weight equally among its +∞ entries.
//!
//! A NaN input stays NaN (it is propagated, never hidden).

use crate::autodiff::TensorValue;
use crate::autodiff::ops::masked_fill::expand;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::exp::exp_shifted_sum;
use crate::tensor::values::map_rows;
use crate::tensor::{Mask, Tensor};

/// Rows per parallel task: large enough that a task outweighs its scheduling.
const ROWS_PER_TASK: usize = 64;

/// Softmax of one row into `out` (see the module docs for the infinite cases).
pub(crate) fn softmax_row(x: &[f64], out: &mut [f64]) {
    if x.iter().any(|v| v.is_nan()) {
        out.fill(f64::NAN);
        return;
    }
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        out.fill(0.0);
        return;
    }
    if max == f64::INFINITY {
        let count = x.iter().filter(|&&v| v == f64::INFINITY).count() as f64;
        for (o, &v) in out.iter_mut().zip(x) {
            *o = if v == f64::INFINITY { 1.0 / count } else { 0.0 };
        }
        return;
    }
    out.copy_from_slice(x);
    let sum = exp_shifted_sum(out, max);
    let inv = 1.0 / sum;
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// Backward of one row: `dx_j = y_j · (dy_j − Σ_k dy_k · y_k)`.
pub(crate) fn softmax_row_backward(y: &[f64], dy: &[f64], dx: &mut [f64]) {
    let dot: f64 = y.iter().zip(dy).map(|(a, b)| a * b).sum();
    for ((d, &yj), &gj) in dx.iter_mut().zip(y).zip(dy) {
        *d = yj * (gj - dot);
    }
}

/// [`softmax_row_backward`] over the visible entries only: a hidden entry gets `dx_j = 0` and its
/// `dy_j` (which may be NaN when it paired a hidden key's value) takes no part in the sum.
fn masked_softmax_row_backward(y: &[f64], dy: &[f64], hidden: &[bool], dx: &mut [f64]) {
    let visible = |j: &usize| !hidden[*j];
    let dot: f64 = (0..y.len()).filter(visible).map(|j| y[j] * dy[j]).sum();
    for (j, d) in dx.iter_mut().enumerate() {
        *d = if hidden[j] { 0.0 } else { y[j] * (dy[j] - dot) };
    }
}

impl TensorValue {
    /// Softmax over the last axis: every row becomes non-negative weights that sum to 1.
    ///
    /// # Shapes
    /// `[..., n] → [..., n]`.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::constant;
    /// // equal scores share the weight equally; a −∞ score gets exactly 0
    /// let x = constant(&[1, 3], &[0.5, 0.5, f64::NEG_INFINITY])?;
    /// assert_eq!(x.softmax_last_axis()?.value()?.as_slice(), &[0.5, 0.5, 0.0]);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    ///
    /// # Errors
    /// [`TensorAutodiffError::RankMismatch`] for a scalar;
    /// [`TensorAutodiffError::Released`] if an operand was released.
    pub fn softmax_last_axis(&self) -> Result<TensorValue> {
        self.softmax_with("softmax", None)
    }

    /// Softmax over the last axis with the keys where `mask` is true treated as −∞: the fused
    /// form of `masked_fill(mask, −∞)` followed by [`TensorValue::softmax_last_axis`]. Masked
    /// entries get exactly 0, and no −∞ is ever stored on the tape.
    ///
    /// # Shapes
    /// `x [..., T_q, T_k]`, `mask` broadcasting to it → `[..., T_q, T_k]`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::ShapeMismatch`] if the mask does not broadcast to the value's
    /// shape; as [`TensorValue::softmax_last_axis`] otherwise.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::{Mask, constant};
    /// // causal over two tokens: query 0 sees only key 0, query 1 shares between equal scores
    /// let scores = constant(&[2, 2], &[0.3, 0.9, 0.5, 0.5])?;
    /// let w = scores.masked_softmax_last_axis(&Mask::causal(2, 2, 0)?)?.value()?;
    /// assert_eq!(w.as_slice(), &[1.0, 0.0, 0.5, 0.5]);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn masked_softmax_last_axis(&self, mask: &Mask) -> Result<TensorValue> {
        let covered = expand("masked_softmax", mask, self.shape())?;
        self.softmax_with("masked_softmax", Some(covered))
    }

    fn softmax_with(&self, op: &'static str, masked: Option<Vec<bool>>) -> Result<TensorValue> {
        let width = match self.shape().last() {
            Some(&w) => w,
            None => {
                return Err(TensorAutodiffError::RankMismatch {
                    op,
                    expected: "at least 1".into(),
                    shape: Shape::from(self.shape()),
                });
            }
        };
        let x = self.read(op)?;
        // each row into storage never filled before (`map_rows`, whose workers run the
        // exponentials on the caller's target)
        let xs = x.as_slice();
        let out = map_rows((x.len(), width), ROWS_PER_TASK, |r, orow, row_buf| {
            let (start, xrow) = (r * width, &xs[r * width..(r + 1) * width]);
            match &masked {
                None => softmax_row(xrow, orow),
                Some(m) => {
                    for ((b, &v), &hide) in row_buf.iter_mut().zip(xrow).zip(&m[start..start + width]) {
                        *b = if hide { f64::NEG_INFINITY } else { v };
                    }
                    softmax_row(row_buf, orow);
                }
            }
        });
        let out = Tensor::from_parts(x.shape().to_vec(), out);
        Ok(TensorValue::record(op, vec![self.clone()], out, move |ctx| {
            // forward: y = softmax(x) per row  =>  dx_j = y_j · (dy_j − Σ_k dy_k y_k)
            // (masked entries are skipped: dx_j = 0, and their dy_j takes no part in the sum)
            let (y, g) = (ctx.output()?, ctx.grad());
            let (ys, gs) = (y.as_slice(), g.as_slice());
            let dx = map_rows((y.len(), width), ROWS_PER_TASK, |r, drow, _| {
                let rows = r * width..(r + 1) * width;
                let (yrow, grow) = (&ys[rows.clone()], &gs[rows.clone()]);
                match &masked {
                    None => softmax_row_backward(yrow, grow, drow),
                    Some(m) => masked_softmax_row_backward(yrow, grow, &m[rows], drow),
                }
            });
            Ok(vec![Some(Tensor::from_parts(y.shape().to_vec(), dx))])
        }))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::Tensor;

    #[test]
    fn hand_values_and_defined_edge_rows() {
        // [0, ln 3] → [1/4, 3/4]
        let x = constant(&[2, 2], &[0.0, 3f64.ln(), f64::NEG_INFINITY, f64::NEG_INFINITY]).unwrap();
        let y = x.softmax_last_axis().unwrap().value().unwrap();
        assert!((y.as_slice()[0] - 0.25).abs() < 1e-15 && (y.as_slice()[1] - 0.75).abs() < 1e-15);
        assert_eq!(&y.as_slice()[2..], &[0.0, 0.0], "a fully masked row is all zeros, not NaN");
        let z = constant(&[3], &[f64::INFINITY, 1.0, f64::INFINITY]).unwrap().softmax_last_axis().unwrap();
        assert_eq!(z.value().unwrap().as_slice(), &[0.5, 0.0, 0.5]);
        let big = constant(&[2], &[1e6, -1e6]).unwrap().softmax_last_axis().unwrap();
        assert_eq!(big.value().unwrap().as_slice(), &[1.0, 0.0]);
        assert!(constant(&[], &[1.0]).unwrap().softmax_last_axis().is_err());
    }

    #[test]
    fn fused_masked_softmax_equals_fill_then_softmax() {
        let x = constant(&[2, 3, 3], &(0..18).map(|i| (i as f64 * 0.7).sin()).collect::<Vec<_>>()).unwrap();
        let mask = crate::tensor::Mask::causal(3, 3, 0).unwrap();
        let fused = x.masked_softmax_last_axis(&mask).unwrap().value().unwrap();
        let explicit = x.masked_fill(&mask, f64::NEG_INFINITY).unwrap().softmax_last_axis().unwrap().value().unwrap();
        assert!(fused.bitwise_eq(&explicit));
        let err = x.masked_softmax_last_axis(&crate::tensor::Mask::causal(2, 2, 0).unwrap()).unwrap_err();
        assert!(err.to_string().starts_with("masked_softmax: shapes [2,3,3] and [2,2]"), "{err}");
        let x = Tensor::new(&[2, 3, 3], (0..18).map(|i| (i as f64 * 0.3).cos()).collect()).unwrap();
        let r = gradcheck(&[("x", x)], &GradcheckConfig::default(), |v| v[0].masked_softmax_last_axis(&mask)).unwrap();
        assert!(r.passed(), "{r:?}");
    }

    /// The textbook formula with the library `f64::exp`, one row at a time.
    fn naive_softmax(row: &[f64]) -> Vec<f64> {
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
        let z: f64 = e.iter().sum();
        e.iter().map(|v| v / z).collect()
    }

    #[test]
    fn the_fast_softmax_equals_the_naive_formula() {
        let mut rng = crate::nn::SplitMix64::new(17);
        for width in [1, 3, 8, 9, 64, 257] {
            let values: Vec<f64> = (0..4 * width).map(|_| rng.uniform(-30.0, 30.0)).collect();
            let y = constant(&[4, width], &values).unwrap().softmax_last_axis().unwrap().value().unwrap();
            for (got, row) in y.as_slice().chunks(width).zip(values.chunks(width)) {
                for (g, w) in got.iter().zip(naive_softmax(row)) {
                    assert!((g - w).abs() <= 1e-15 * (1.0 + w), "{g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn softmax_is_bitwise_independent_of_thread_count() {
        let mut rng = crate::nn::SplitMix64::new(18);
        let values: Vec<f64> = (0..300 * 77).map(|_| rng.uniform(-5.0, 5.0)).collect();
        let run = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| constant(&[300, 77], &values).unwrap().softmax_last_axis().unwrap().value().unwrap())
        };
        assert!(run(1).bitwise_eq(&run(2)));
    }

    #[test]
    fn gradcheck_softmax() {
        let x = Tensor::new(&[3, 4], (0..12).map(|i| (i as f64 * 1.3).sin() * 2.0).collect()).unwrap();
        let report = gradcheck(&[("x", x)], &GradcheckConfig::default(), |v| v[0].softmax_last_axis()).unwrap();
        assert!(report.passed(), "{report:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn rows_sum_to_one(rows in 1usize..5, width in 1usize..9, seed in any::<u64>(), scale in 0.1f64..50.0) {
            let mut rng = crate::nn::SplitMix64::new(seed);
            let values: Vec<f64> = (0..rows * width).map(|_| rng.uniform(-scale, scale)).collect();
            let y = constant(&[rows, width], &values).unwrap().softmax_last_axis().unwrap().value().unwrap();
            for row in y.as_slice().chunks(width) {
                let sum: f64 = row.iter().sum();
                prop_assert!((sum - 1.0).abs() <= 1e-12, "sum {}", sum);
                prop_assert!(row.iter().all(|&p| (0.0..=1.0).contains(&p)));
            }
        }
    }
}
