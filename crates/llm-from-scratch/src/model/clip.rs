//! Gradient clipping by global norm.
//!
//! ```text
//! n = sqrt(Σ_tensors Σ_i g_i²)            one norm over every gradient together
//! if n > c:  g ← g · c / n                every tensor scaled by the same factor
//! ```
//!
//! Scaling all gradients together keeps the update's *direction*; only a rare huge step (a bad
//! batch, a loss spike) is shortened to length `c`. Clipping each tensor on its own would change
//! the direction.

use crate::model::ModelError;
use crate::tensor::Tensor;

/// `sqrt(Σ g²)` over every value of every tensor, summed in order.
pub fn global_norm(grads: &[Tensor]) -> f64 {
    let values = || grads.iter().flat_map(|g| g.as_slice());
    let norm = values().map(|v| v * v).sum::<f64>().sqrt();
    if norm.is_finite() || values().any(|v| !v.is_finite()) {
        return norm;
    }
    // finite values whose squares overflow (|v| ≳ 1e154): scale by the largest first
    let largest = values().fold(0.0f64, |m, v| m.max(v.abs()));
    largest * values().map(|v| (v / largest) * (v / largest)).sum::<f64>().sqrt()
}

/// Scales `grads` so that their global norm is at most `max_norm`; returns the norm before.
///
/// ```
/// use llm_from_scratch::{Tensor, model::clip_global_norm};
/// // norm of [3] and [4] is 5; clipped to 1 they become [0.6] and [0.8]
/// let mut grads = vec![Tensor::new(&[1], vec![3.0])?, Tensor::new(&[1], vec![4.0])?];
/// assert_eq!(clip_global_norm(&mut grads, 1.0)?, 5.0);
/// assert_eq!((grads[0].as_slice(), grads[1].as_slice()), (&[0.6][..], &[0.8][..]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`ModelError::InvalidSetting`] unless `max_norm` is finite and positive;
/// [`ModelError::NonFiniteGradient`] if the norm is NaN or infinite (the gradients are then left
/// as they are).
pub fn clip_global_norm(grads: &mut [Tensor], max_norm: f64) -> Result<f64, ModelError> {
    if !(max_norm > 0.0 && max_norm.is_finite()) {
        return Err(ModelError::setting("gradient clipping", "max_norm", max_norm, "must be finite and positive"));
    }
    let norm = global_norm(grads);
    if !norm.is_finite() {
        return Err(ModelError::NonFiniteGradient { norm });
    }
    if norm > max_norm {
        for g in grads.iter_mut() {
            g.as_mut_slice().iter_mut().for_each(|v| *v = *v * max_norm / norm);
        }
    }
    Ok(norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clips_only_above_the_threshold_and_keeps_direction() {
        let make = || vec![Tensor::new(&[2], vec![1.0, -2.0]).unwrap(), Tensor::new(&[1, 1], vec![2.0]).unwrap()];
        // norm = sqrt(1 + 4 + 4) = 3
        let mut small = make();
        assert_eq!(clip_global_norm(&mut small, 5.0).unwrap(), 3.0);
        assert_eq!(small, make(), "below the threshold nothing changes");
        let mut big = make();
        assert_eq!(clip_global_norm(&mut big, 1.5).unwrap(), 3.0);
        assert!((global_norm(&big) - 1.5).abs() < 1e-15);
        assert_eq!(big[0].as_slice(), &[0.5, -1.0]);
        assert_eq!(big[1].as_slice(), &[1.0]);
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let mut grads = vec![Tensor::new(&[2], vec![f64::INFINITY, 1.0]).unwrap()];
        let err = clip_global_norm(&mut grads, 1.0).unwrap_err();
        assert_eq!(err.to_string(), "gradient clipping: the global gradient norm is inf, not finite");
        assert!(clip_global_norm(&mut grads, 0.0).is_err());
        assert_eq!(clip_global_norm(&mut [], 1.0).unwrap(), 0.0);
    }
}
