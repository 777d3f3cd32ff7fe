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

use llm_kernels::rows::{BlockWritten, RowBlock};
use llm_kernels::softmax::SoftmaxRows;
use llm_kernels::target::active;

use crate::autodiff::TensorValue;
use crate::autodiff::ops::masked_fill::MaskRows;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::exp::exp_shifted_sum;
use crate::tensor::values::row_blocks;
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

/// Backward of one row: `dx_j = y_j · (dy_j − Σ_k dy_k · y_k)`. The plain twin of the kernel the
/// op runs (`llm_kernels::softmax`, which adds eight rows' sums side by side).
#[cfg(test)]
fn softmax_row_backward(y: &[f64], dy: &[f64], dx: &mut [f64]) {
    let dot: f64 = y.iter().zip(dy).map(|(a, b)| a * b).sum();
    for ((d, &yj), &gj) in dx.iter_mut().zip(y).zip(dy) {
        *d = yj * (gj - dot);
    }
}

/// [`softmax_row_backward`] over the visible entries only: a hidden entry gets `dx_j = 0` and its
/// `dy_j` (which may be NaN when it paired a hidden key's value) takes no part in the sum.
#[cfg(test)]
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
        let hidden = MaskRows::of("masked_softmax", mask, self.shape())?;
        self.softmax_with("masked_softmax", Some(hidden))
    }

    fn softmax_with(&self, op: &'static str, hidden: Option<MaskRows>) -> Result<TensorValue> {
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
        // each block of rows by the kernel compiled for the target (`softmax_row` for each row,
        // with the hidden keys taken as −∞), into storage never filled before
        let keys = hidden.as_ref().and_then(MaskRows::keys);
        let out = softmax_rows(x.len(), width, |kernel, block| kernel.forward(x.as_slice(), keys, block));
        let out = Tensor::from_parts(x.shape().to_vec(), out);
        Ok(TensorValue::record(op, vec![self.clone()], out, move |ctx| {
            // forward: y = softmax(x) per row  =>  dx_j = y_j · (dy_j − Σ_k dy_k y_k)
            // (hidden entries are skipped: dx_j = 0, and their dy_j takes no part in the sum;
            // `softmax_row_backward` and `masked_softmax_row_backward` for each row)
            let (y, g) = (ctx.output()?, ctx.grad());
            let keys = hidden.as_ref().and_then(MaskRows::keys);
            let dx = softmax_rows(y.len(), width, |kernel, block| {
                kernel.backward((y.as_slice(), g.as_slice()), keys, block)
            });
            Ok(vec![Some(Tensor::from_parts(y.shape().to_vec(), dx))])
        }))
    }
}

/// `len` values as rows of `width`, each block of [`ROWS_PER_TASK`] rows written by `block`
/// with the row loops compiled for the caller's target, on every thread when there are many.
fn softmax_rows(
    len: usize,
    width: usize,
    block: impl for<'o> Fn(SoftmaxRows, RowBlock<'o>) -> BlockWritten<'o> + Sync + Send,
) -> Vec<f64> {
    let kernel = SoftmaxRows::new(active());
    row_blocks((len, width), ROWS_PER_TASK, || (), |_, rows| block(kernel, rows))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{masked_softmax_row_backward, softmax_row, softmax_row_backward};
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::{Mask, Tensor};

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

    /// Rows that reach every branch of a row's softmax and its adjoint: ordinary values, a NaN
    /// among the visible keys and among the hidden ones, every key hidden, +∞ and −∞, a maximum
    /// of +0 beside −0, a causal row's end of −∞; widths around the kernels' blocks of eight;
    /// and a mask of every fourth flag per row, shifted row by row.
    fn edge_rows(width: usize, rows: usize, seed: u64) -> (Vec<f64>, Vec<f64>, Vec<bool>) {
        let mut rng = crate::nn::SplitMix64::new(seed);
        let mut x: Vec<f64> = (0..rows * width).map(|_| rng.uniform(-20.0, 20.0)).collect();
        let dy: Vec<f64> = (0..rows * width).map(|_| rng.uniform(-2.0, 2.0)).collect();
        let hidden: Vec<bool> = (0..rows * width).map(|i| (i + i / width).is_multiple_of(4)).collect();
        let mut dy = dy;
        for r in 0..rows {
            let row = &mut x[r * width..(r + 1) * width];
            match r % 9 {
                1 => row[width / 2] = f64::NAN,
                2 => row[width - 1] = f64::INFINITY,
                3 => row.fill(f64::NEG_INFINITY),
                4 => {
                    row.fill(-1.0);
                    row[0] = -0.0;
                    row[width - 1] = 0.0;
                }
                5 => row[0] = f64::NEG_INFINITY,
                // the end of a causal row: whole chunks of eight hidden keys
                6 => row[width / 4 + 1..].fill(f64::NEG_INFINITY),
                _ => {}
            }
            // a hidden key's adjoint may be NaN, and must take no part
            if r % 5 == 0 {
                dy[r * width] = f64::NAN;
            }
        }
        (x, dy, hidden)
    }

    fn bits(values: &[f64]) -> Vec<u64> {
        values.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn the_kernels_give_the_plain_rows_bits_on_every_target_and_thread_count() {
        use llm_kernels::target::{Target, with_target};
        // 300 rows of 64 run in parallel blocks of 64 rows, the last of 44 (not a multiple of 8)
        for (width, rows) in [(1, 5), (3, 13), (7, 9), (8, 17), (9, 11), (16, 8), (64, 300), (65, 21), (257, 3)] {
            let (x, dy, flags) = edge_rows(width, rows, (width * rows) as u64);
            let shape = [rows, width];
            let mask = Mask::new(&shape, flags.clone()).unwrap();
            // the plain rows: forward, then the adjoint of each row's output
            let (mut want_y, mut want_masked) = (vec![0.0; rows * width], vec![0.0; rows * width]);
            let (mut want_dx, mut want_masked_dx) = (vec![0.0; rows * width], vec![0.0; rows * width]);
            for r in 0..rows {
                let span = r * width..(r + 1) * width;
                softmax_row(&x[span.clone()], &mut want_y[span.clone()]);
                let hidden: Vec<f64> = x[span.clone()]
                    .iter()
                    .zip(&flags[span.clone()])
                    .map(|(&v, &h)| if h { f64::NEG_INFINITY } else { v })
                    .collect();
                softmax_row(&hidden, &mut want_masked[span.clone()]);
                softmax_row_backward(&want_y[span.clone()], &dy[span.clone()], &mut want_dx[span.clone()]);
                masked_softmax_row_backward(
                    &want_masked[span.clone()],
                    &dy[span.clone()],
                    &flags[span.clone()],
                    &mut want_masked_dx[span],
                );
            }
            let hidden = super::MaskRows::of("t", &mask, &shape).unwrap();
            for target in Target::available() {
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    let run = || {
                        let y = super::softmax_rows(x.len(), width, |k, b| k.forward(&x, None, b));
                        let ym = super::softmax_rows(x.len(), width, |k, b| k.forward(&x, hidden.keys(), b));
                        let dx = super::softmax_rows(x.len(), width, |k, b| k.backward((&want_y, &dy), None, b));
                        let dxm = super::softmax_rows(x.len(), width, |k, b| {
                            k.backward((&want_masked, &dy), hidden.keys(), b)
                        });
                        (y, ym, dx, dxm)
                    };
                    let (y, ym, dx, dxm) = pool.install(|| with_target(target, run)).unwrap();
                    let at = format!("width {width}, {target:?}, {threads} threads");
                    assert_eq!(bits(&y), bits(&want_y), "forward, {at}");
                    assert_eq!(bits(&ym), bits(&want_masked), "masked forward, {at}");
                    assert_eq!(bits(&dx), bits(&want_dx), "backward, {at}");
                    assert_eq!(bits(&dxm), bits(&want_masked_dx), "masked backward, {at}");
                }
            }
        }
    }

    #[test]
    fn a_mask_broadcast_by_rows_or_by_keys_hides_the_same_scores() {
        // a causal [4, 4] under [2, 3, 4, 4] (rows of flags shared), against the same flags
        // expanded to a mask of the full shape, and a mask broadcast along the keys ([4, 1])
        let shape = [2, 3, 4, 4];
        let x = constant(&shape, &(0..96).map(|i| (i as f64 * 0.37).sin() * 4.0).collect::<Vec<_>>()).unwrap();
        let causal = Mask::causal(4, 4, 0).unwrap();
        let full = Mask::new(&shape, super::super::masked_fill::expand("t", &causal, &shape).unwrap()).unwrap();
        let by_rows = x.masked_softmax_last_axis(&causal).unwrap().value().unwrap();
        assert!(by_rows.bitwise_eq(&x.masked_softmax_last_axis(&full).unwrap().value().unwrap()));
        let keys = Mask::new(&[4, 1], vec![false, true, false, true]).unwrap();
        let by_keys = x.masked_softmax_last_axis(&keys).unwrap().value().unwrap();
        let filled = x.masked_fill(&keys, f64::NEG_INFINITY).unwrap().softmax_last_axis().unwrap().value().unwrap();
        assert!(by_keys.bitwise_eq(&filled));
        // rows whose every key is hidden are zeros
        assert!(by_keys.as_slice().chunks(4).skip(1).step_by(2).all(|row| row.iter().all(|&v| v == 0.0)));
        // a value with no keys at all holds nothing and allocates nothing per row, however many
        // rows it names
        let empty = constant(&[1 << 31, 0], &[]).unwrap();
        let none = Mask::new(&[1, 0], vec![]).unwrap();
        assert!(empty.masked_softmax_last_axis(&none).unwrap().value().unwrap().as_slice().is_empty());
        assert!(empty.masked_fill(&none, 0.0).unwrap().value().unwrap().as_slice().is_empty());
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
