//! Broadcasting binary operations: `add`, `sub`, `mul`.
//!
//! # Shapes
//! Operands broadcast from the right (`[B,T,d] + [d]` adds a bias to every row). The backward of a
//! broadcast sums the adjoint over the copied axes ([`sum_to_shape`]).

use crate::autodiff::TensorValue;
use crate::error::Result;
use crate::tensor::broadcast::{broadcast_strides, for_each_broadcast};
use crate::tensor::values::zip_values;
use crate::tensor::{Tensor, broadcast_shapes, sum_to_shape};

/// `out[i] = f(a[i'], b[i''])` over the broadcast shape.
/// Operands of one shape are zipped on every thread once they are long (`tensor::values`).
fn zip_broadcast(op: &'static str, a: &Tensor, b: &Tensor, f: impl Fn(f64, f64) -> f64 + Sync) -> Result<Tensor> {
    if a.shape() == b.shape() {
        return Ok(Tensor::from_parts(a.shape().to_vec(), zip_values(a.as_slice(), b.as_slice(), f)));
    }
    let out_shape = broadcast_shapes(op, a.shape(), b.shape())?;
    let total = crate::tensor::dense::element_count(op, &out_shape)?; // [n,1] + [n] asks for n² values
    let mut out = vec![0.0; total];
    let (xa, xb) = (a.as_slice(), b.as_slice());
    let sa = broadcast_strides(a.shape(), &out_shape);
    let sb = broadcast_strides(b.shape(), &out_shape);
    for_each_broadcast(&out_shape, &sa, &sb, |o, i, j| out[o] = f(xa[i], xb[j]));
    Ok(Tensor::from_parts(out_shape, out))
}

impl TensorValue {
    /// `self + rhs` with broadcasting.
    ///
    /// # Shapes
    /// Operands broadcast from the right: `[B, T, d] + [d] → [B, T, d]` (see [`broadcast_shapes`]).
    ///
    /// # Errors
    /// [`crate::error::TensorAutodiffError::ShapeMismatch`] if the shapes do not broadcast;
    /// [`crate::error::TensorAutodiffError::Released`] if an operand was released.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::{constant, parameter};
    /// // a bias [2] added to every row of [2, 2]; its gradient sums over the rows
    /// let x = constant(&[2, 2], &[1.0, 2.0, 3.0, 4.0])?;
    /// let b = parameter(&[2], &[10.0, 20.0])?;
    /// let y = x.add(&b)?;
    /// assert_eq!(y.value()?.as_slice(), &[11.0, 22.0, 13.0, 24.0]);
    /// assert_eq!(y.sum()?.backward()?.get(&b).unwrap().as_slice(), &[2.0, 2.0]);
    /// assert!(x.add(&constant(&[3], &[0.0; 3])?).is_err()); // [2, 2] and [3] do not broadcast
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn add(&self, rhs: &TensorValue) -> Result<TensorValue> {
        let out = zip_broadcast("add", &self.read("add")?, &rhs.read("add")?, |x, y| x + y)?;
        Ok(TensorValue::record("add", vec![self.clone(), rhs.clone()], out, |ctx| {
            // forward: out = a + b  =>  da = Σ_broadcast dout, db = Σ_broadcast dout
            let g = ctx.grad();
            Ok(vec![Some(sum_to_shape(g, ctx.input_shape(0))?), Some(sum_to_shape(g, ctx.input_shape(1))?)])
        }))
    }

    /// `self − rhs` with broadcasting.
    ///
    /// # Shapes
    /// As [`TensorValue::add`].
    ///
    /// # Errors
    /// As [`TensorValue::add`].
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::constant;
    /// let x = constant(&[2], &[5.0, 7.0])?;
    /// assert_eq!(x.sub(&constant(&[1], &[1.0])?)?.value()?.as_slice(), &[4.0, 6.0]);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn sub(&self, rhs: &TensorValue) -> Result<TensorValue> {
        let out = zip_broadcast("sub", &self.read("sub")?, &rhs.read("sub")?, |x, y| x - y)?;
        Ok(TensorValue::record("sub", vec![self.clone(), rhs.clone()], out, |ctx| {
            // forward: out = a − b  =>  da = Σ dout, db = −Σ dout
            let g = ctx.grad();
            Ok(vec![
                Some(sum_to_shape(g, ctx.input_shape(0))?),
                Some(sum_to_shape(&g.map(|v| -v), ctx.input_shape(1))?),
            ])
        }))
    }

    /// `self ⊙ rhs` (elementwise product) with broadcasting.
    ///
    /// # Shapes
    /// As [`TensorValue::add`].
    ///
    /// # Errors
    /// As [`TensorValue::add`].
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::parameter;
    /// // ∂(Σ x ⊙ y)/∂x = y
    /// let x = parameter(&[2], &[2.0, 3.0])?;
    /// let y = parameter(&[2], &[5.0, 7.0])?;
    /// let grads = x.mul(&y)?.sum()?.backward()?;
    /// assert_eq!(grads.get(&x).unwrap().as_slice(), &[5.0, 7.0]);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn mul(&self, rhs: &TensorValue) -> Result<TensorValue> {
        let out = zip_broadcast("mul", &self.read("mul")?, &rhs.read("mul")?, |x, y| x * y)?;
        Ok(TensorValue::record("mul", vec![self.clone(), rhs.clone()], out, |ctx| {
            // forward: out = a ⊙ b  =>  da = Σ dout ⊙ b, db = Σ dout ⊙ a
            let g = ctx.grad();
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            let da = if ctx.wants(0) {
                Some(sum_to_shape(&zip_broadcast("mul", g, &b, |x, y| x * y)?, a.shape())?)
            } else {
                None
            };
            let db = if ctx.wants(1) {
                Some(sum_to_shape(&zip_broadcast("mul", g, &a, |x, y| x * y)?, b.shape())?)
            } else {
                None
            };
            Ok(vec![da, db])
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{GradcheckConfig, constant, gradcheck, parameter};
    use crate::tensor::Tensor;

    #[test]
    fn broadcast_add_mul_by_hand() {
        // [[1,2],[3,4]] + [10,20] = [[11,22],[13,24]];  ⊙ [10,20] = [[10,40],[30,80]]
        let a = constant(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let b = constant(&[2], &[10.0, 20.0]).unwrap();
        assert_eq!(a.add(&b).unwrap().value().unwrap().as_slice(), &[11.0, 22.0, 13.0, 24.0]);
        assert_eq!(a.mul(&b).unwrap().value().unwrap().as_slice(), &[10.0, 40.0, 30.0, 80.0]);
        assert_eq!(b.sub(&a).unwrap().value().unwrap().as_slice(), &[9.0, 18.0, 7.0, 16.0]);
        let err = a.add(&constant(&[3], &[0.0; 3]).unwrap()).unwrap_err();
        assert!(err.to_string().contains("add: shapes [2,2] and [3]"), "{err}");
    }

    #[test]
    fn broadcast_gradients_sum_over_copies() {
        // loss = Σ (a + b) with b broadcast over 2 rows: ∂loss/∂b = [2,2]
        let a = parameter(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let b = parameter(&[2], &[10.0, 20.0]).unwrap();
        let grads = a.add(&b).unwrap().sum().unwrap().backward().unwrap();
        assert_eq!(grads.get(&b).unwrap().as_slice(), &[2.0, 2.0]);
        assert_eq!(grads.get(&a).unwrap().as_slice(), &[1.0; 4]);
    }

    #[test]
    fn gradcheck_add_sub_mul_with_broadcasting_and_reuse() {
        let inputs = vec![
            ("a", Tensor::new(&[2, 1, 3], vec![0.3, -0.2, 0.5, 1.1, 0.7, -0.9]).unwrap()),
            ("b", Tensor::new(&[4, 3], (0..12).map(|i| 0.1 * i as f64 - 0.4).collect()).unwrap()),
            ("c", Tensor::new(&[3], vec![0.2, -0.6, 0.9]).unwrap()),
        ];
        let report = gradcheck(&inputs, &GradcheckConfig::default(), |v| {
            // a is used twice: (a ⊙ b + c) − a ⊙ c
            v[0].mul(&v[1])?.add(&v[2])?.sub(&v[0].mul(&v[2])?)
        })
        .unwrap();
        assert!(report.passed(), "{report:?}");
        assert_eq!(report.coordinates(), 6 + 12 + 3);
    }
}
