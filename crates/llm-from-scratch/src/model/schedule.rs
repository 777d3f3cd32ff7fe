//! [`LrSchedule`]: linear warm-up, then cosine decay to a floor.
//!
//! ```text
//! step < W:          η = η_max · (step + 1) / W                       warm-up
//! W ≤ step < S:      η = η_min + ½ (η_max − η_min) (1 + cos(π · (step − W) / (S − W)))
//! step ≥ S:          η = η_min
//! ```
//!
//! Warm-up keeps the first steps small while Adam's second-moment estimate is still noisy; the
//! cosine spends most steps near the peak and lands softly on `η_min` at step `S`.

use crate::model::ModelError;

/// Warm-up over `warmup_steps`, cosine decay until `total_steps`, then `min_lr`.
///
/// ```
/// use llm_from_scratch::model::LrSchedule;
/// let s = LrSchedule::warmup_cosine(1e-2, 1e-3, 10, 110)?;
/// assert_eq!(s.at(0), 1e-3);                          // 1e-2 · 1/10
/// assert_eq!(s.at(9), 1e-2);                          // end of warm-up: the peak
/// assert!((s.at(60) - 5.5e-3).abs() < 1e-15);         // half-way: the mean of peak and floor
/// assert_eq!(s.at(110), 1e-3);
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LrSchedule {
    /// `η_max`.
    pub peak_lr: f64,
    /// `η_min`.
    pub min_lr: f64,
    /// `W`.
    pub warmup_steps: usize,
    /// `S`, where the cosine reaches `η_min`.
    pub total_steps: usize,
}

impl LrSchedule {
    /// A warm-up and cosine schedule.
    ///
    /// # Errors
    /// [`ModelError::InvalidSetting`] (module `lr schedule`) unless
    /// `0 ≤ min_lr ≤ peak_lr` (finite) and `warmup_steps ≤ total_steps`.
    pub fn warmup_cosine(
        peak_lr: f64,
        min_lr: f64,
        warmup_steps: usize,
        total_steps: usize,
    ) -> Result<Self, ModelError> {
        if !(peak_lr >= 0.0 && peak_lr.is_finite()) {
            return Err(ModelError::setting("lr schedule", "peak_lr", peak_lr, "must be finite and ≥ 0"));
        }
        if !(min_lr >= 0.0 && min_lr <= peak_lr) {
            return Err(ModelError::setting("lr schedule", "min_lr", min_lr, "must satisfy 0 ≤ min_lr ≤ peak_lr"));
        }
        if warmup_steps > total_steps {
            return Err(ModelError::setting(
                "lr schedule",
                "warmup_steps",
                warmup_steps,
                "must not exceed total_steps",
            ));
        }
        Ok(Self { peak_lr, min_lr, warmup_steps, total_steps })
    }

    /// The same rate at every step.
    ///
    /// # Errors
    /// As [`LrSchedule::warmup_cosine`].
    pub fn constant(lr: f64) -> Result<Self, ModelError> {
        Self::warmup_cosine(lr, lr, 0, 0)
    }

    /// The learning rate of step `step` (counted from 0).
    pub fn at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.peak_lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        if step >= self.total_steps {
            return self.min_lr;
        }
        let progress = (step - self.warmup_steps) as f64 / (self.total_steps - self.warmup_steps) as f64;
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.min_lr + (self.peak_lr - self.min_lr) * cosine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_along_the_schedule() {
        let s = LrSchedule::warmup_cosine(0.01, 0.0, 4, 12).unwrap();
        // warm-up: 0.0025, 0.005, 0.0075, 0.01; cosine over 8 steps: at step 6, progress 1/4
        let warm: Vec<f64> = (0..4).map(|i| s.at(i)).collect();
        assert_eq!(warm, [0.0025, 0.005, 0.0075, 0.01]);
        assert_eq!(s.at(4), 0.01);
        let quarter = 0.005 * (1.0 + std::f64::consts::FRAC_1_SQRT_2);
        assert!((s.at(6) - quarter).abs() < 1e-15);
        assert!((s.at(8) - 0.005).abs() < 1e-15);
        assert!((4..12).all(|i| s.at(i) >= s.at(i + 1)), "decays monotonically");
        assert_eq!((s.at(12), s.at(1000)), (0.0, 0.0));
        assert_eq!(LrSchedule::constant(0.3).unwrap().at(7), 0.3);
    }

    #[test]
    fn settings_are_checked() {
        let err = LrSchedule::warmup_cosine(0.01, 0.02, 0, 10).unwrap_err();
        assert_eq!(err.to_string(), "lr schedule: min_lr = 0.02 is invalid (must satisfy 0 ≤ min_lr ≤ peak_lr)");
        assert!(LrSchedule::warmup_cosine(f64::NAN, 0.0, 0, 10).is_err());
        assert!(LrSchedule::warmup_cosine(0.01, 0.0, 11, 10).is_err());
    }
}
