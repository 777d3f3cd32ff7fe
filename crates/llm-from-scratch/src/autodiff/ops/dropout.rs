//! Inverted dropout: zero each entry with probability `p`, scale survivors by `1/(1−p)` so the
//! expected value is unchanged. Only for training; evaluation simply skips it.

use crate::autodiff::TensorValue;
use crate::error::{Result, TensorAutodiffError};
use crate::tensor::SplitMix64;
use crate::tensor::Tensor;

impl TensorValue {
    /// Dropout with probability `p`, drawing one uniform number per entry from `rng`.
    /// With `p = 0` it returns the same node and draws nothing.
    ///
    /// # Shapes
    /// `[...] → [...]` (same shape).
    ///
    /// # Errors
    /// [`TensorAutodiffError::InvalidArgument`] unless `0 ≤ p < 1`;
    /// [`TensorAutodiffError::Released`] if an operand was released.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::{constant, nn::SplitMix64};
    /// let x = constant(&[1, 1000], &[1.0; 1000])?;
    /// let y = x.dropout(0.5, &mut SplitMix64::new(0))?.value()?;
    /// // every entry is 0 or 1/(1 − p) = 2, so the expected value stays 1
    /// assert!(y.as_slice().iter().all(|&v| v == 0.0 || v == 2.0));
    /// let kept = y.as_slice().iter().filter(|&&v| v == 2.0).count();
    /// assert!((400..600).contains(&kept));
    /// assert!(x.dropout(1.0, &mut SplitMix64::new(0)).is_err());
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn dropout(&self, p: f64, rng: &mut SplitMix64) -> Result<TensorValue> {
        if !(0.0..1.0).contains(&p) {
            return Err(TensorAutodiffError::InvalidArgument {
                op: "dropout",
                name: "p",
                value: p,
                reason: "the drop probability must satisfy 0 ≤ p < 1",
            });
        }
        if p == 0.0 {
            return Ok(self.clone());
        }
        let x = self.read("dropout")?;
        let keep_scale = 1.0 / (1.0 - p);
        let factors: Vec<f64> = (0..x.len()).map(|_| if rng.next_f64() < p { 0.0 } else { keep_scale }).collect();
        let values = x.as_slice().iter().zip(&factors).map(|(v, f)| v * f).collect();
        let out = Tensor::from_parts(x.shape().to_vec(), values);
        Ok(TensorValue::record("dropout", vec![self.clone()], out, move |ctx| {
            // forward: out_i = x_i · f_i (f_i ∈ {0, 1/(1−p)})  =>  dx_i = f_i · dout_i
            let g = ctx.grad();
            let values = g.as_slice().iter().zip(&factors).map(|(d, f)| d * f).collect();
            Ok(vec![Some(Tensor::from_parts(g.shape().to_vec(), values))])
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::SplitMix64;
    use crate::tensor::Tensor;

    #[test]
    fn dropout_scales_survivors_and_p_zero_draws_nothing() {
        let x = constant(&[1000], &[1.0; 1000]).unwrap();
        let mut rng = SplitMix64::new(7);
        let y = x.dropout(0.25, &mut rng).unwrap().value().unwrap();
        assert!(y.as_slice().iter().all(|&v| v == 0.0 || v == 1.0 / 0.75));
        let kept = y.as_slice().iter().filter(|&&v| v > 0.0).count();
        assert!((700..800).contains(&kept), "{kept}");
        let before = rng.clone();
        let same = x.dropout(0.0, &mut rng).unwrap();
        assert!(same.same_node(&x) && rng == before);
        assert!(x.dropout(1.0, &mut rng).unwrap_err().to_string().starts_with("dropout: p = 1"));
    }

    #[test]
    fn gradcheck_dropout_with_a_fixed_draw() {
        let x = Tensor::new(&[2, 5], (0..10).map(|i| i as f64 * 0.3 - 1.0).collect()).unwrap();
        // the same seed inside the closure draws the same mask on every evaluation
        let r = gradcheck(&[("x", x)], &GradcheckConfig::default(), |v| v[0].dropout(0.4, &mut SplitMix64::new(3)))
            .unwrap();
        assert!(r.passed(), "{r:?}");
    }
}
