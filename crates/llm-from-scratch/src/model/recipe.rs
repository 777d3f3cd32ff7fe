//! [`Recipe`]: how a model is trained, in one value — the optimiser, the learning-rate schedule,
//! the clipping, how many steps on how many sequences each, how often the model is evaluated.
//!
//! Chapters 36 (`ch36-tiny-decoder`) and 37 (`ch37-train-on-text`) each declare theirs as one
//! constant; [`Recipe::training_config`] turns it into what a [`Trainer`](crate::model::Trainer)
//! takes, checked.

use crate::model::{AdamWConfig, LrSchedule, ModelError, TrainingConfig, clip_global_norm};

/// A training recipe in the LLaMA style: AdamW, a linear warm-up to `peak_lr`, a cosine decay to
/// `min_lr` at the last step, and gradients clipped to a global norm.
///
/// The fields are public so that a recipe can be a `const`; [`Recipe::training_config`] checks
/// them.
///
/// # Errors
/// [`Recipe::schedule`] and [`Recipe::training_config`] report the first setting out of range.
///
/// # Example
/// ```
/// use llm_from_scratch::model::{AdamWConfig, Recipe};
/// const RECIPE: Recipe = Recipe {
///     steps: 600,
///     batch: 32,
///     warmup_steps: 50,
///     peak_lr: 1e-2,
///     min_lr: 1e-3,
///     adamw: AdamWConfig::LLAMA,
///     clip_norm: 1.0,
///     eval_every: 100,
/// };
/// let config = RECIPE.training_config()?;
/// assert_eq!(config.schedule.at(49), 1e-2); // the last warm-up step reaches the peak
/// assert_eq!(config.schedule.at(600), 1e-3); // the cosine ends on the floor
/// assert_eq!((config.adamw, config.clip_norm), (AdamWConfig::default(), Some(1.0)));
/// assert!(Recipe { batch: 0, ..RECIPE }.training_config().is_err());
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Recipe {
    /// Optimiser steps; the cosine reaches `min_lr` at the last.
    pub steps: usize,
    /// Sequences (or windows of text) per step.
    pub batch: usize,
    /// Steps of linear warm-up.
    pub warmup_steps: usize,
    /// The learning rate at the end of the warm-up.
    pub peak_lr: f64,
    /// The learning rate the cosine ends on.
    pub min_lr: f64,
    /// `β₁`, `β₂`, `ε` and the decoupled weight decay.
    pub adamw: AdamWConfig,
    /// The largest global gradient norm: a larger gradient is scaled down to it.
    pub clip_norm: f64,
    /// Steps between two evaluations.
    pub eval_every: usize,
}

impl Recipe {
    /// The learning rate per step: warm-up over `warmup_steps`, cosine down to `min_lr` at `steps`.
    ///
    /// # Errors
    /// The errors of [`LrSchedule::warmup_cosine`].
    pub fn schedule(&self) -> Result<LrSchedule, ModelError> {
        LrSchedule::warmup_cosine(self.peak_lr, self.min_lr, self.warmup_steps, self.steps)
    }

    /// The optimiser, the schedule and the clipping a [`Trainer`](crate::model::Trainer) takes,
    /// every setting checked.
    ///
    /// # Errors
    /// [`ModelError::InvalidSetting`] (module `recipe`) for zero steps, batch or evaluation
    /// interval; then the errors of [`AdamWConfig::validate`], of [`clip_global_norm`] for a clip
    /// norm that is not finite and positive, and of [`Recipe::schedule`].
    pub fn training_config(&self) -> Result<TrainingConfig, ModelError> {
        for (setting, value) in [("steps", self.steps), ("batch", self.batch), ("eval_every", self.eval_every)] {
            if value == 0 {
                return Err(ModelError::setting("recipe", setting, value, "must be positive"));
            }
        }
        self.adamw.validate()?;
        clip_global_norm(&mut [], self.clip_norm)?;
        Ok(TrainingConfig { adamw: self.adamw.clone(), schedule: self.schedule()?, clip_norm: Some(self.clip_norm) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECIPE: Recipe = Recipe {
        steps: 800,
        batch: 16,
        warmup_steps: 40,
        peak_lr: 4e-3,
        min_lr: 2e-4,
        adamw: AdamWConfig::LLAMA,
        clip_norm: 1.0,
        eval_every: 100,
    };

    #[test]
    fn a_recipe_feeds_the_trainer_what_it_declares() {
        let config = RECIPE.training_config().unwrap();
        assert_eq!(config.schedule, LrSchedule::warmup_cosine(4e-3, 2e-4, 40, 800).unwrap());
        assert_eq!(config.adamw, AdamWConfig { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 });
        assert_eq!(config.clip_norm, Some(1.0));
        assert_eq!(RECIPE.schedule().unwrap(), config.schedule);
    }

    #[test]
    fn every_setting_is_checked_in_order() {
        let err = |r: Recipe| r.training_config().unwrap_err().to_string();
        assert_eq!(err(Recipe { steps: 0, batch: 0, ..RECIPE }), "recipe: steps = 0 is invalid (must be positive)");
        assert!(err(Recipe { batch: 0, ..RECIPE }).contains("batch = 0"));
        assert!(err(Recipe { eval_every: 0, ..RECIPE }).contains("eval_every = 0"));
        let adamw = AdamWConfig { beta1: 1.0, ..AdamWConfig::LLAMA };
        assert!(err(Recipe { adamw, clip_norm: -1.0, ..RECIPE }).contains("beta1"));
        assert!(err(Recipe { clip_norm: f64::NAN, warmup_steps: 900, ..RECIPE }).contains("NaN"));
        assert!(err(Recipe { warmup_steps: 900, ..RECIPE }).contains("warmup_steps"));
        assert!(err(Recipe { min_lr: 1.0, ..RECIPE }).contains("min_lr"));
    }
}
