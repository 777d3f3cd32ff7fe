//! Reductions to a scalar: `sum` and `weighted_sum` (the loss `Σ upstream ⊙ output` that turns
//! any output into something `backward` can start from).

use crate::autodiff::TensorValue;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::Tensor;

impl TensorValue {
    /// `Σ_i x_i` as a rank-0 value.
    ///
    /// # Shapes
    /// `[...] → []` (rank 0).
    ///
    /// # Errors
    /// [`TensorAutodiffError::Released`] if an operand was released.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::parameter;
    /// let x = parameter(&[2, 2], &[1.0, 2.0, 3.0, 4.0])?;
    /// let total = x.sum()?;
    /// assert_eq!((total.shape(), total.value()?.as_slice()), (&[][..], &[10.0][..]));
    /// assert_eq!(total.backward()?.get(&x).unwrap().as_slice(), &[1.0; 4]); // ∂Σ/∂x_i = 1
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn sum(&self) -> Result<TensorValue> {
        let total: f64 = self.read("sum")?.as_slice().iter().sum();
        Ok(TensorValue::record("sum", vec![self.clone()], Tensor::scalar(total), |ctx| {
            // forward: s = Σ_i x_i  =>  dx_i = ds
            let g = ctx.grad().as_slice()[0];
            let shape = ctx.input_shape(0).to_vec();
            let len = shape.iter().product();
            Ok(vec![Some(Tensor::from_parts(shape, vec![g; len]))])
        }))
    }

    /// `Σ_i w_i · x_i` as a rank-0 value, for fixed weights `w` of the same shape.
    ///
    /// # Shapes
    /// `x [...]`, `weights` of the same shape → `[]` (rank 0).
    ///
    /// # Errors
    /// [`TensorAutodiffError::ShapeMismatch`] if `weights` has another shape;
    /// [`TensorAutodiffError::Released`] if an operand was released.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::{Tensor, parameter};
    /// // the loss Σ upstream ⊙ y: its gradient with respect to y is the upstream adjoint
    /// let y = parameter(&[3], &[1.0, 2.0, 3.0])?;
    /// let upstream = Tensor::new(&[3], vec![0.5, 0.0, -1.0])?;
    /// let loss = y.weighted_sum(&upstream)?;
    /// assert_eq!(loss.value()?.as_slice(), &[-2.5]);
    /// assert_eq!(loss.backward()?.get(&y).unwrap().as_slice(), upstream.as_slice());
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn weighted_sum(&self, weights: &Tensor) -> Result<TensorValue> {
        if weights.shape() != self.shape() {
            return Err(TensorAutodiffError::ShapeMismatch {
                op: "weighted_sum",
                lhs: Shape::from(self.shape()),
                rhs: Shape::from(weights.shape()),
                reason: "weights must have the value's shape",
            });
        }
        let x = self.read("weighted_sum")?;
        let total: f64 = x.as_slice().iter().zip(weights.as_slice()).map(|(a, b)| a * b).sum();
        let weights = weights.clone();
        Ok(TensorValue::record("weighted_sum", vec![self.clone()], Tensor::scalar(total), move |ctx| {
            // forward: s = Σ_i w_i x_i  =>  dx_i = w_i · ds
            let g = ctx.grad().as_slice()[0];
            Ok(vec![Some(weights.map(|w| w * g))])
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::Tensor;

    #[test]
    fn sums_by_hand() {
        // 1+2+3 = 6; 1·4 + 2·5 + 3·6 = 32
        let x = constant(&[3], &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(x.sum().unwrap().value().unwrap().as_slice(), &[6.0]);
        let w = Tensor::new(&[3], vec![4.0, 5.0, 6.0]).unwrap();
        assert_eq!(x.weighted_sum(&w).unwrap().value().unwrap().as_slice(), &[32.0]);
        let err = x.weighted_sum(&Tensor::new(&[2], vec![0.0; 2]).unwrap()).unwrap_err();
        assert!(err.to_string().starts_with("weighted_sum: shapes [3] and [2]"), "{err}");
    }

    #[test]
    fn gradcheck_sums() {
        let x = Tensor::new(&[2, 3], vec![0.1, -0.4, 0.9, 1.3, -2.0, 0.5]).unwrap();
        let w = Tensor::new(&[2, 3], vec![0.3, 0.1, -0.2, 0.7, 0.5, -1.1]).unwrap();
        let r = gradcheck(&[("x", x)], &GradcheckConfig::default(), |v| {
            v[0].weighted_sum(&w)?.scale(2.0)?.add(&v[0].sum()?)
        })
        .unwrap();
        assert!(r.passed(), "{r:?}");
    }
}
