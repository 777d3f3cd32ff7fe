//! RMS normalisation over the last axis: `y = x / sqrt(mean(x²) + ε) ⊙ g`.

use crate::autodiff::TensorValue;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::Tensor;

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
        let mut out = vec![0.0; x.len()];
        if d > 0 {
            for (orow, xrow) in out.chunks_mut(d).zip(x.as_slice().chunks(d)) {
                let r = inverse_rms(xrow, eps);
                for ((o, &xi), &gi) in orow.iter_mut().zip(xrow).zip(g.as_slice()) {
                    *o = xi * r * gi;
                }
            }
        }
        let out = Tensor::from_parts(x.shape().to_vec(), out);
        Ok(TensorValue::record("rms_norm", vec![self.clone(), gain.clone()], out, move |ctx| {
            // forward: y_i = x_i · r · g_i with r = (Σ_j x_j²/d + ε)^(−1/2)
            //   =>  dg_i = Σ_rows dy_i · x_i · r
            //   =>  dx_i = r · g_i · dy_i − (r³/d) · x_i · Σ_j dy_j · g_j · x_j
            let (x, g, dy) = (ctx.input(0)?, ctx.input(1)?, ctx.grad());
            let mut dx = vec![0.0; x.len()];
            let mut dg = vec![0.0; d];
            if d == 0 {
                return Ok(vec![
                    Some(Tensor::from_parts(x.shape().to_vec(), dx)),
                    Some(Tensor::from_parts(vec![0], dg)),
                ]);
            }
            for ((dxrow, xrow), dyrow) in dx.chunks_mut(d).zip(x.as_slice().chunks(d)).zip(dy.as_slice().chunks(d)) {
                let r = inverse_rms(xrow, eps);
                let dot: f64 = xrow.iter().zip(dyrow).zip(g.as_slice()).map(|((x, dy), g)| x * dy * g).sum();
                let coef = r * r * r / d as f64 * dot;
                for i in 0..d {
                    dxrow[i] = r * g.as_slice()[i] * dyrow[i] - coef * xrow[i];
                    dg[i] += dyrow[i] * xrow[i] * r;
                }
            }
            Ok(vec![Some(Tensor::from_parts(x.shape().to_vec(), dx)), Some(Tensor::from_parts(vec![d], dg))])
        }))
    }
}

/// `1 / sqrt(mean(x²) + ε)`; a zero row with ε = 0 gives +∞·0 — guarded to return 0 output.
fn inverse_rms(row: &[f64], eps: f64) -> f64 {
    let mean_sq = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
    let denom = (mean_sq + eps).sqrt();
    if denom == 0.0 { 0.0 } else { 1.0 / denom }
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
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
    fn gradcheck_rms_norm() {
        let x = Tensor::new(&[2, 3, 4], (0..24).map(|i| (i as f64 * 0.9).sin() + 0.1).collect()).unwrap();
        let g = Tensor::new(&[4], vec![0.5, 1.5, -0.7, 1.1]).unwrap();
        let r =
            gradcheck(&[("x", x), ("gain", g)], &GradcheckConfig::default(), |v| v[0].rms_norm(&v[1], 1e-5)).unwrap();
        assert!(r.passed(), "{r:?}");
    }
}
