//! Elementwise operations of one input: `scale`, `exp`, `log`, `silu`.

use crate::autodiff::TensorValue;
use crate::error::{Result, TensorAutodiffError};
use crate::tensor::Tensor;
use crate::tensor::values::{PARALLEL_VALUES, map_values, zip_values};
use llm_kernels::logistic;

/// Which value a derivative is written in terms of: the backward reads only that one, so the other
/// may be released.
#[derive(Clone, Copy)]
enum Reads {
    /// `f'` from the input `x`.
    Input,
    /// `f'` from the output `f(x)` (e.g. `eˣ`).
    Output,
}

/// `out[i] = f(x[i])`, with `dfdx` as the local derivative, in terms of the value `reads` names.
/// Long tensors are mapped on every thread (`tensor::values`: the same bits as one thread).
fn unary(
    x: &TensorValue,
    op: &'static str,
    f: impl Fn(f64) -> f64 + Sync,
    reads: Reads,
    dfdx: impl Fn(f64) -> f64 + Sync + 'static,
) -> Result<TensorValue> {
    let input = x.read(op)?;
    let out = Tensor::from_parts(input.shape().to_vec(), map_values(input.as_slice(), f));
    Ok(TensorValue::record(op, vec![x.clone()], out, move |ctx| {
        // forward: out[i] = f(x[i])  =>  dx[i] = f'(x[i]) · dout[i]
        let known = match reads {
            Reads::Input => ctx.input(0)?,
            Reads::Output => ctx.output()?,
        };
        let values = zip_values(known.as_slice(), ctx.grad().as_slice(), |v, g| dfdx(v) * g);
        Ok(vec![Some(Tensor::from_parts(known.shape().to_vec(), values))])
    }))
}

impl TensorValue {
    /// `factor · self`.
    ///
    /// # Shapes
    /// `[...] → [...]` (same shape); so are [`TensorValue::exp`], [`TensorValue::log`] and
    /// [`TensorValue::silu`].
    ///
    /// # Errors
    /// [`TensorAutodiffError::Released`] if an operand was released.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::parameter;
    /// // scores / √d_h with d_h = 4; the gradient is the factor
    /// let x = parameter(&[2], &[1.0, -2.0])?;
    /// let y = x.scale(0.5)?;
    /// assert_eq!(y.value()?.as_slice(), &[0.5, -1.0]);
    /// assert_eq!(y.sum()?.backward()?.get(&x).unwrap().as_slice(), &[0.5, 0.5]);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn scale(&self, factor: f64) -> Result<TensorValue> {
        let x = self.read("scale")?;
        let out = Tensor::from_parts(x.shape().to_vec(), map_values(x.as_slice(), |v| v * factor));
        Ok(TensorValue::record("scale", vec![self.clone()], out, move |ctx| {
            // forward: out = c · x  =>  dx = c · dout
            let g = ctx.grad();
            Ok(vec![Some(Tensor::from_parts(g.shape().to_vec(), map_values(g.as_slice(), |g| g * factor)))])
        }))
    }

    /// `eˣ` elementwise.
    ///
    /// # Shapes
    /// `[...] → [...]`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::Released`] if an operand was released.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::constant;
    /// let y = constant(&[2], &[0.0, 1.0])?.exp()?.value()?;
    /// assert_eq!(y.as_slice()[0], 1.0);
    /// assert!((y.as_slice()[1] - std::f64::consts::E).abs() < 1e-15);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn exp(&self) -> Result<TensorValue> {
        // d/dx eˣ = eˣ = out
        unary(self, "exp", f64::exp, Reads::Output, |y| y)
    }

    /// Natural logarithm elementwise; `log(0) = −∞`.
    ///
    /// # Shapes
    /// `[...] → [...]`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::InvalidArgument`] if a value is negative (or NaN): the logarithm
    /// has no real answer there.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::constant;
    /// let y = constant(&[2], &[1.0, 0.0])?.log()?.value()?;
    /// assert_eq!(y.as_slice(), &[0.0, f64::NEG_INFINITY]);
    /// assert!(constant(&[1], &[-1.0])?.log().is_err());
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn log(&self) -> Result<TensorValue> {
        let x = self.read("log")?;
        if let Some(&bad) = x.as_slice().iter().find(|v| v.is_nan() || **v < 0.0) {
            return Err(TensorAutodiffError::InvalidArgument {
                op: "log",
                name: "input",
                value: bad,
                reason: "the logarithm needs values ≥ 0",
            });
        }
        // d/dx ln x = 1/x
        unary(self, "log", f64::ln, Reads::Input, |x| 1.0 / x)
    }

    /// SiLU (swish): `x · σ(x)` with `σ(x) = 1 / (1 + e^{−x})`.
    ///
    /// # Shapes
    /// `[...] → [...]`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::Released`] if an operand was released.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::constant;
    /// // silu(0) = 0; silu(x) → x for large x; silu is slightly negative below 0
    /// let y = constant(&[3], &[0.0, 40.0, -1.0])?.silu()?.value()?;
    /// assert_eq!(y.as_slice()[0], 0.0);
    /// assert!((y.as_slice()[1] - 40.0).abs() < 1e-12);
    /// assert!((y.as_slice()[2] + 1.0 / (1.0 + 1f64.exp())).abs() < 1e-15);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn silu(&self) -> Result<TensorValue> {
        let x = self.read("silu")?;
        let (shape, xs) = (x.shape().to_vec(), x.as_slice());
        // σ(x) once per value, with e = e^{−|x|}: 1/(1 + e) for x ≥ 0, e/(1 + e) below, so
        // nothing overflows (`llm_kernels::logistic`: many values at a time, the exponential
        // with the C library's bits on x86-64 Linux); the output and, when a gradient is wanted,
        // the local derivative d/dx x·σ(x) = σ(x) + x·σ(x)·(1 − σ(x)), kept for the backward (no
        // second e^{−x} there). At x = ±∞ both take their limits.
        let parallel = xs.len() >= PARALLEL_VALUES;
        let (out, slope) = if self.requires_grad() {
            let (out, slope) = logistic::silu_and_slope(xs, parallel);
            (out, Some(slope))
        } else {
            (logistic::silu(xs, parallel), None)
        };
        let out = Tensor::from_parts(shape, out);
        Ok(TensorValue::record("silu", vec![self.clone()], out, move |ctx| {
            // forward: out[i] = x[i]·σ(x[i])  =>  dx[i] = (σ + x·σ·(1 − σ))(x[i]) · dout[i]
            let x = ctx.input(0)?; // the derivative was taken from it: it must still be there
            let slope = slope.as_deref().unwrap_or_default();
            let values = zip_values(slope, ctx.grad().as_slice(), |d, g| d * g);
            Ok(vec![Some(Tensor::from_parts(x.shape().to_vec(), values))])
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::Tensor;

    #[test]
    fn hand_values() {
        // silu(0) = 0·½ = 0; exp(0) = 1; log(1) = 0; scale by −2
        let x = constant(&[3], &[0.0, 1.0, 2.0]).unwrap();
        assert_eq!(x.silu().unwrap().value().unwrap().as_slice()[0], 0.0);
        assert_eq!(x.exp().unwrap().value().unwrap().as_slice()[0], 1.0);
        assert_eq!(x.log().unwrap().value().unwrap().as_slice()[1], 0.0);
        assert_eq!(x.scale(-2.0).unwrap().value().unwrap().as_slice(), &[-0.0, -2.0, -4.0]);
        let err = constant(&[1], &[-1.0]).unwrap().log().unwrap_err();
        assert!(err.to_string().starts_with("log: input = -1"), "{err}");
    }

    #[test]
    fn backward_reads_only_the_value_its_derivative_needs() {
        // exp's derivative is its output: the input may be released
        let x = crate::autodiff::parameter(&[2], &[0.0, 1.0]).unwrap();
        let y = x.exp().unwrap();
        x.release();
        let g = y.sum().unwrap().backward().unwrap();
        assert_eq!(g.get(&x).unwrap().as_slice(), &[1.0, 1f64.exp()]);
        // log's derivative is 1/x: the output may be released
        let x = crate::autodiff::parameter(&[1], &[4.0]).unwrap();
        let y = x.log().unwrap();
        let s = y.sum().unwrap();
        y.release();
        assert_eq!(s.backward().unwrap().get(&x).unwrap().as_slice(), &[0.25]);
    }

    #[test]
    fn silu_keeps_the_bits_of_its_formula_on_a_long_tensor() {
        // long enough for the parallel passes; the derivative kept from the forward must be the
        // one the formula gives, bit for bit
        let n = 40_000;
        let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.013).sin() * 12.0).collect();
        let x = crate::autodiff::parameter(&[n], &xs).unwrap();
        let y = x.silu().unwrap();
        let upstream = Tensor::new(&[n], (0..n).map(|i| (i as f64 * 0.7).cos()).collect()).unwrap();
        let grads = y.backward_with(&upstream).unwrap();
        let (out, dx) = (y.value().unwrap(), grads.get(&x).unwrap().clone());
        for (i, &v) in xs.iter().enumerate() {
            let s = llm_kernels::logistic::sigmoid(v);
            assert_eq!(out.as_slice()[i].to_bits(), (v * s).to_bits());
            let want = (s + v * s * (1.0 - s)) * upstream.as_slice()[i];
            assert_eq!(dx.as_slice()[i].to_bits(), want.to_bits());
        }
    }

    /// The plain formula with `f64::exp`: where that is glibc's build for processors with AVX2
    /// and FMA (x86-64 Linux), the tape's SiLU has its bits (what chapters 36 and 37's reports
    /// were made with); elsewhere it is within a few ulp.
    #[test]
    fn silu_is_the_plain_formula_with_the_c_librarys_exp() {
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.031).sin() * 30.0).collect();
        let out = constant(&[n], &xs).unwrap().silu().unwrap().value().unwrap();
        #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
        let bitwise = std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2");
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
        let bitwise = false;
        for (&v, &got) in xs.iter().zip(out.as_slice()) {
            // σ as two branches, each with its own exponential
            let s = if v >= 0.0 { 1.0 / (1.0 + (-v).exp()) } else { v.exp() / (1.0 + v.exp()) };
            if bitwise {
                assert_eq!(got.to_bits(), (v * s).to_bits(), "silu({v})");
            } else {
                assert!((got - v * s).abs() <= 1e-15 * (v * s).abs().max(1e-300), "silu({v})");
            }
        }
        let limits = constant(&[3], &[f64::INFINITY, f64::NEG_INFINITY, 0.0]).unwrap().silu().unwrap();
        assert_eq!(limits.value().unwrap().as_slice(), &[f64::INFINITY, 0.0, 0.0]);
    }

    #[test]
    fn gradcheck_unary_ops() {
        let x = Tensor::new(&[2, 3], vec![0.3, 1.2, 0.5, 2.0, 0.8, 1.7]).unwrap();
        for which in 0..4 {
            let report = gradcheck(&[("x", x.clone())], &GradcheckConfig::default(), |v| match which {
                0 => v[0].exp(),
                1 => v[0].log(),
                2 => v[0].silu(),
                _ => v[0].scale(-1.5),
            })
            .unwrap();
            assert!(report.passed(), "op {which}: {report:?}");
        }
    }
}
