//! Gradient checking by central differences.
//!
//! Chapters 27–32, 34 and 35 print a gradient check made with it.
//!
//! For every coordinate `x_j` of every checked input, the numerical derivative
//! `(L(x + δ e_j) − L(x − δ e_j)) / 2δ` of `L = Σ upstream ⊙ f(x)` is compared with the adjoint the
//! tape computed. A coordinate passes when `|numerical − analytic| ≤ ε · max(1, |analytic|)`:
//! absolute for small derivatives, relative for large ones. The truncation error of central
//! differences is O(δ²) and the rounding error O(u/δ) with u ≈ 1e-16, so δ = 1e-6 leaves about
//! 1e-10 of noise — far below the default ε = 8e-6.

use crate::autodiff::TensorValue;
use crate::error::{Result, TensorAutodiffError};
use crate::tensor::SplitMix64;
use crate::tensor::Tensor;

/// Step, tolerance and upstream adjoint of a gradient check.
#[derive(Clone, Debug)]
pub struct GradcheckConfig {
    /// The finite-difference step δ (default 1e-6).
    pub delta: f64,
    /// The tolerance ε (default 8e-6).
    pub tolerance: f64,
    /// The upstream adjoint; `None` draws a fixed non-uniform one from `seed` (a uniform adjoint
    /// would hide errors, e.g. every softmax row's gradient of `Σ y` is zero).
    pub upstream: Option<Tensor>,
    /// Seed of the drawn upstream adjoint.
    pub seed: u64,
}

impl Default for GradcheckConfig {
    fn default() -> Self {
        Self { delta: 1e-6, tolerance: 8e-6, upstream: None, seed: 0x5EED }
    }
}

/// The outcome for one checked input.
#[derive(Clone, Debug, PartialEq)]
pub struct GradcheckTensor {
    /// The name given with the input.
    pub name: String,
    /// Coordinates checked (every element of the input).
    pub coordinates: usize,
    /// Coordinates outside the tolerance.
    pub failures: usize,
    /// The largest scaled error `|num − ana| / max(1, |ana|)` seen.
    pub max_error: f64,
}

/// The outcome of [`gradcheck`]: one entry per checked input, in the order given.
#[derive(Clone, Debug, PartialEq)]
pub struct GradcheckReport {
    /// Per-input results.
    pub tensors: Vec<GradcheckTensor>,
    /// The step δ used.
    pub delta: f64,
    /// The tolerance ε used.
    pub tolerance: f64,
}

impl GradcheckReport {
    /// `true` when every coordinate of every input passed.
    pub fn passed(&self) -> bool {
        self.tensors.iter().all(|t| t.failures == 0)
    }

    /// Total coordinates checked.
    pub fn coordinates(&self) -> usize {
        self.tensors.iter().map(|t| t.coordinates).sum()
    }

    /// Total coordinates outside the tolerance.
    pub fn failures(&self) -> usize {
        self.tensors.iter().map(|t| t.failures).sum()
    }
}

/// Checks the tape's gradients of `f` with respect to every coordinate of every input.
///
/// `f` receives the inputs as parameter leaves (in the order given) and builds the computation;
/// it is called once for the analytic gradient and twice per coordinate.
///
/// ```
/// use llm_from_scratch::{GradcheckConfig, Tensor, gradcheck};
/// let x = Tensor::new(&[3], vec![0.5, -1.0, 2.0])?;
/// let report = gradcheck(&[("x", x)], &GradcheckConfig::default(), |v| v[0].mul(&v[0]))?;
/// assert!(report.passed());
/// assert_eq!(report.coordinates(), 3);
/// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
/// ```
///
/// # Errors
/// [`TensorAutodiffError::Gradcheck`] for a non-positive δ or ε or an empty input list; any
/// error of `f` or of the backward sweep.
pub fn gradcheck<E: From<TensorAutodiffError>>(
    inputs: &[(&str, Tensor)],
    config: &GradcheckConfig,
    f: impl Fn(&[TensorValue]) -> Result<TensorValue, E>,
) -> Result<GradcheckReport, E> {
    if !(config.delta > 0.0 && config.delta.is_finite() && config.tolerance > 0.0) {
        return Err(TensorAutodiffError::Gradcheck {
            detail: format!("step {} and tolerance {} must be positive", config.delta, config.tolerance),
        }
        .into());
    }
    if inputs.is_empty() {
        return Err(TensorAutodiffError::Gradcheck { detail: "no inputs to check".into() }.into());
    }
    let leaves: Vec<TensorValue> = inputs.iter().map(|(_, t)| TensorValue::leaf(t.clone(), true)).collect();
    let output = f(&leaves)?;
    let upstream = match &config.upstream {
        Some(u) => u.clone(),
        None => {
            let mut rng = SplitMix64::new(config.seed);
            let values = (0..output.len()).map(|_| rng.uniform(-1.0, 1.0)).collect();
            Tensor::new(output.shape(), values)?
        }
    };
    let grads = output.backward_with(&upstream)?;
    let loss_at = |values: &[Tensor]| -> Result<f64, E> {
        let leaves: Vec<TensorValue> = values.iter().map(|t| TensorValue::leaf(t.clone(), false)).collect();
        let out = f(&leaves)?.value()?;
        Ok(out.as_slice().iter().zip(upstream.as_slice()).map(|(a, b)| a * b).sum())
    };
    let mut current: Vec<Tensor> = inputs.iter().map(|(_, t)| t.clone()).collect();
    let mut tensors = Vec::with_capacity(inputs.len());
    for (i, (name, original)) in inputs.iter().enumerate() {
        let analytic = grads.get_or_zeros(&leaves[i]);
        let mut failures = 0;
        let mut max_error: f64 = 0.0;
        for j in 0..original.len() {
            let x = original.as_slice()[j];
            current[i].as_mut_slice()[j] = x + config.delta;
            let plus = loss_at(&current)?;
            current[i].as_mut_slice()[j] = x - config.delta;
            let minus = loss_at(&current)?;
            current[i].as_mut_slice()[j] = x;
            let numerical = (plus - minus) / (2.0 * config.delta);
            let a = analytic.as_slice()[j];
            let error = (numerical - a).abs() / a.abs().max(1.0);
            // NaN errors count as failures
            if error.is_nan() || error > config.tolerance {
                failures += 1;
            }
            max_error = max_error.max(if error.is_nan() { f64::INFINITY } else { error });
        }
        tensors.push(GradcheckTensor { name: (*name).to_string(), coordinates: original.len(), failures, max_error });
    }
    Ok(GradcheckReport { tensors, delta: config.delta, tolerance: config.tolerance })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_backward_is_caught() {
        // scale's backward is right; pretend the rule were wrong by checking against a different
        // function: f(x) = x ⊙ x has derivative 2x, and a 1e-3 tolerance still catches 2x vs x.
        let x = Tensor::new(&[2], vec![1.0, 2.0]).unwrap();
        let report = gradcheck(&[("x", x.clone())], &GradcheckConfig::default(), |v| v[0].mul(&v[0])).unwrap();
        assert!(report.passed());
        // A function whose tape is cut (a constant copy of the input) has zero analytic gradient
        // but a non-zero numerical one: the check must fail.
        let cut = gradcheck(&[("x", x)], &GradcheckConfig::default(), |v| {
            let copy = crate::autodiff::constant(v[0].shape(), v[0].value()?.as_slice())?;
            copy.mul(&copy)
        })
        .unwrap();
        assert!(!cut.passed());
        assert_eq!(cut.failures(), 2);
    }

    #[test]
    fn bad_configuration_is_a_typed_error() {
        let x = Tensor::new(&[1], vec![1.0]).unwrap();
        let cfg = GradcheckConfig { delta: 0.0, ..GradcheckConfig::default() };
        let err = gradcheck(&[("x", x)], &cfg, |v| Ok::<_, TensorAutodiffError>(v[0].clone())).unwrap_err();
        assert!(err.to_string().starts_with("gradcheck: step 0"), "{err}");
        assert!(gradcheck(&[], &GradcheckConfig::default(), |v| Ok::<_, TensorAutodiffError>(v[0].clone())).is_err());
    }
}
