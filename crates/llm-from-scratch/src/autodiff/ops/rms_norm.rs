//! RMS normalisation over the last axis: `y = x / sqrt(mean(x²) + ε) ⊙ g`.

use rayon::prelude::*;

use crate::autodiff::TensorValue;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::Tensor;
use crate::tensor::values::{PARALLEL_VALUES, map_rows};

impl TensorValue {
    /// RMS-normalises every row (last axis) and multiplies by the gain `g` of shape `[d]`.
    ///
    /// # Shapes
    /// `x [..., d]`, `gain [d]` → `[..., d]`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::ShapeMismatch`] if `gain` is not `[d]`,
    /// [`TensorAutodiffError::InvalidArgument`] if `eps` is negative or not finite;
    /// [`TensorAutodiffError::Released`] if an operand was released.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::{constant, parameter};
    /// // [3, 4] has mean square 12.5; a gain of [1, 2] doubles the second coordinate
    /// let x = constant(&[1, 2], &[3.0, 4.0])?;
    /// let y = x.rms_norm(&parameter(&[2], &[1.0, 2.0])?, 0.0)?.value()?;
    /// let r = 12.5f64.sqrt();
    /// assert!((y.as_slice()[0] - 3.0 / r).abs() < 1e-12 && (y.as_slice()[1] - 8.0 / r).abs() < 1e-12);
    /// assert!(x.rms_norm(&parameter(&[3], &[1.0; 3])?, 0.0).is_err()); // gain [3] for rows of 2
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn rms_norm(&self, gain: &TensorValue, eps: f64) -> Result<TensorValue> {
        let d = self.shape().last().copied().unwrap_or(0);
        if self.shape().is_empty() || gain.shape() != [d] {
            return Err(TensorAutodiffError::ShapeMismatch {
                op: "rms_norm",
                lhs: Shape::from(self.shape()),
                rhs: Shape::from(gain.shape()),
                reason: "the gain must be [d] for an input [..., d]",
            });
        }
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(TensorAutodiffError::InvalidArgument {
                op: "rms_norm",
                name: "eps",
                value: eps,
                reason: "must be finite and ≥ 0",
            });
        }
        let (x, g) = (self.read("rms_norm")?, gain.read("rms_norm")?);
        // rows are independent: in row blocks on every thread when there are many, each into
        // storage never filled before
        let (xs, gs) = (x.as_slice(), g.as_slice());
        let out = map_rows((x.len(), d), ROWS_PER_TASK, |row, orow, _| {
            let xrow = &xs[row * d..(row + 1) * d];
            let r = inverse_rms(xrow, eps);
            for ((o, &xi), &gi) in orow.iter_mut().zip(xrow).zip(gs) {
                *o = xi * r * gi;
            }
        });
        let out = Tensor::from_parts(x.shape().to_vec(), out);
        Ok(TensorValue::record("rms_norm", vec![self.clone(), gain.clone()], out, move |ctx| {
            // forward: y_i = x_i · r · g_i with r = (Σ_j x_j²/d + ε)^(−1/2)
            //   =>  dg_i = Σ_rows dy_i · x_i · r
            //   =>  dx_i = r · g_i · dy_i − (r³/d) · x_i · Σ_j dy_j · g_j · x_j
            let (x, g, dy) = (ctx.input(0)?, ctx.input(1)?, ctx.grad());
            let mut dg = vec![0.0; d];
            if d == 0 {
                return Ok(vec![
                    Some(Tensor::from_parts(x.shape().to_vec(), vec![0.0; x.len()])),
                    Some(Tensor::from_parts(vec![0], dg)),
                ]);
            }
            // each row's r once, then dx row by row (both on every thread when there are many
            // rows, dx into storage never filled before); the gain's adjoint sums over the rows,
            // in row order on this thread
            let (xs, dys, gs) = (x.as_slice(), dy.as_slice(), g.as_slice());
            let r_of: Vec<f64> = if xs.len() < PARALLEL_VALUES {
                xs.chunks(d).map(|xrow| inverse_rms(xrow, eps)).collect()
            } else {
                xs.par_chunks(d).with_min_len(ROWS_PER_TASK).map(|xrow| inverse_rms(xrow, eps)).collect()
            };
            let dx = map_rows((x.len(), d), ROWS_PER_TASK, |row, dxrow, _| {
                let (xrow, dyrow, r) = (&xs[row * d..(row + 1) * d], &dys[row * d..(row + 1) * d], r_of[row]);
                let dot: f64 = xrow.iter().zip(dyrow).zip(gs).map(|((x, dy), g)| x * dy * g).sum();
                let coef = r * r * r / d as f64 * dot;
                for i in 0..d {
                    dxrow[i] = r * gs[i] * dyrow[i] - coef * xrow[i];
                }
            });
            for ((xrow, dyrow), &r) in xs.chunks(d).zip(dys.chunks(d)).zip(&r_of) {
                for i in 0..d {
                    dg[i] += dyrow[i] * xrow[i] * r;
                }
            }
            Ok(vec![Some(Tensor::from_parts(x.shape().to_vec(), dx)), Some(Tensor::from_parts(vec![d], dg))])
        }))
    }
}

/// Rows per task of a parallel pass over the rows (from [`PARALLEL_VALUES`] values on).
const ROWS_PER_TASK: usize = 64;

/// `1 / sqrt(mean(x²) + ε)`; a zero row with ε = 0 gives +∞·0 — guarded to return 0 output.
fn inverse_rms(row: &[f64], eps: f64) -> f64 {
    let mean_sq = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
    let denom = (mean_sq + eps).sqrt();
    if denom == 0.0 { 0.0 } else { 1.0 / denom }
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{GradcheckConfig, constant, gradcheck, parameter};
    use crate::tensor::Tensor;

    #[test]
    fn hand_values() {
        // x = [3, 4]: mean(x²) = 12.5, rms = √12.5; with g = [1, 2]: [3/√12.5, 8/√12.5]
        let x = constant(&[1, 2], &[3.0, 4.0]).unwrap();
        let g = constant(&[2], &[1.0, 2.0]).unwrap();
        let y = x.rms_norm(&g, 0.0).unwrap().value().unwrap();
        let rms = 12.5f64.sqrt();
        assert!((y.as_slice()[0] - 3.0 / rms).abs() < 1e-15 && (y.as_slice()[1] - 8.0 / rms).abs() < 1e-15);
        // an all-zero row with ε = 0 stays zero instead of 0/0
        let z = constant(&[1, 2], &[0.0, 0.0]).unwrap().rms_norm(&g, 0.0).unwrap();
        assert_eq!(z.value().unwrap().as_slice(), &[0.0, 0.0]);
        assert!(x.rms_norm(&constant(&[3], &[1.0; 3]).unwrap(), 1e-6).is_err());
        assert!(x.rms_norm(&g, -1.0).unwrap_err().to_string().contains("rms_norm: eps = -1"));
    }

    #[test]
    fn many_rows_on_any_thread_count_equal_each_row_alone() {
        // 400 rows of 48: the row-parallel passes; each row normalised alone (the serial path)
        // must give the same bits, and the gain's adjoint the row-order sum of the rows' own
        let (rows, d) = (400, 48);
        let xs: Vec<f64> = (0..rows * d).map(|i| (i as f64 * 0.37).sin() + 0.05).collect();
        let dys: Vec<f64> = (0..rows * d).map(|i| (i as f64 * 0.11).cos()).collect();
        let gain: Vec<f64> = (0..d).map(|i| 0.5 + i as f64 / d as f64).collect();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                let (x, g) = (crate::autodiff::parameter(&[rows, d], &xs).unwrap(), parameter(&[d], &gain).unwrap());
                let y = x.rms_norm(&g, 1e-5).unwrap();
                let grads = y.backward_with(&Tensor::new(&[rows, d], dys.clone()).unwrap()).unwrap();
                let bits = |t: &Tensor| t.as_slice().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                (bits(&y.value().unwrap()), bits(grads.get(&x).unwrap()), bits(grads.get(&g).unwrap()))
            })
        };
        let (mut y_rows, mut dx_rows, mut dg) = (Vec::new(), Vec::new(), vec![0.0; d]);
        for row in 0..rows {
            let (x, g) = (parameter(&[1, d], &xs[row * d..(row + 1) * d]).unwrap(), parameter(&[d], &gain).unwrap());
            let y = x.rms_norm(&g, 1e-5).unwrap();
            let grads = y.backward_with(&Tensor::new(&[1, d], dys[row * d..(row + 1) * d].to_vec()).unwrap()).unwrap();
            y_rows.extend(y.value().unwrap().as_slice().iter().map(|v| v.to_bits()));
            dx_rows.extend(grads.get(&x).unwrap().as_slice().iter().map(|v| v.to_bits()));
            dg.iter_mut().zip(grads.get(&g).unwrap().as_slice()).for_each(|(s, v)| *s += v);
        }
        let dg: Vec<u64> = dg.iter().map(|v| v.to_bits()).collect();
        for threads in [1, 2, 3] {
            assert!(run(threads) == (y_rows.clone(), dx_rows.clone(), dg.clone()), "{threads} threads");
        }
    }

    #[test]
    fn gradcheck_rms_norm() {
        let x = Tensor::new(&[2, 3, 4], (0..24).map(|i| (i as f64 * 0.9).sin() + 0.1).collect()).unwrap();
        let g = Tensor::new(&[4], vec![0.5, 1.5, -0.7, 1.1]).unwrap();
        let r =
            gradcheck(&[("x", x), ("gain", g)], &GradcheckConfig::default(), |v| v[0].rms_norm(&v[1], 1e-5)).unwrap();
        assert!(r.passed(), "{r:?}");
    }
}
