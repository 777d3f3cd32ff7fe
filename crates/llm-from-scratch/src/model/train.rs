//! [`Trainer`]: one optimiser step at a time — loss, backward, clip, AdamW.
//!
//! ```text
//! η      = schedule.at(step)
//! loss   = model.loss(batch)                 forward, on the tape
//! g      = ∂loss/∂θ for every parameter θ    backward
//! n      = ‖g‖ (global);  g ← g·c/n if n > c  clipping
//! θ      ← AdamW(θ, g, η)                    the leaves are updated in place
//! ```

use crate::model::{AdamW, AdamWConfig, Decoder, LrSchedule, ModelError, TokenBatch, clip_global_norm, global_norm};
use crate::nn::NamedParameters;
use crate::tensor::Tensor;

/// The settings of training that are not part of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainingConfig {
    /// The optimiser.
    pub adamw: AdamWConfig,
    /// The learning rate per step.
    pub schedule: LrSchedule,
    /// The largest global gradient norm (`None`: no clipping).
    pub clip_norm: Option<f64>,
}

/// What one step did.
#[derive(Clone, Debug, PartialEq)]
pub struct StepReport {
    /// The step's index (from 0).
    pub step: usize,
    /// The learning rate used.
    pub lr: f64,
    /// The batch's loss before the update.
    pub loss: f64,
    /// The global gradient norm before clipping.
    pub grad_norm: f64,
}

/// A model with its optimiser state and schedule.
///
/// # Errors
/// [`Trainer::new`]: the settings of [`AdamWConfig::validate`] and a clip norm that is not finite
/// and positive; [`Trainer::step`]: the errors of [`Decoder::loss`] for the batch.
///
/// # Example
/// ```
/// use llm_from_scratch::model::{
///     AdamWConfig, Decoder, DecoderConfig, LrSchedule, TokenBatch, Trainer, TrainingConfig,
/// };
/// use llm_from_scratch::nn::SplitMix64;
/// let model = Decoder::new(DecoderConfig::new(6, 8, 1, 2).with_rope(8, 100.0), &mut SplitMix64::new(0))?;
/// let config = TrainingConfig { adamw: AdamWConfig::default(), schedule: LrSchedule::constant(1e-2)?, clip_norm: Some(1.0) };
/// let mut trainer = Trainer::new(model, config)?;
/// let batch = TokenBatch::next_token(&[vec![0, 1, 2, 3, 4, 5]], 0)?;
/// let first = trainer.step(&batch)?;
/// let later = (0..20).map(|_| trainer.step(&batch)).last().unwrap()?;
/// assert_eq!((first.step, later.step), (0, 20));
/// assert!(later.loss < first.loss);
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Trainer {
    model: Decoder,
    parameters: NamedParameters,
    optimizer: AdamW,
    schedule: LrSchedule,
    clip_norm: Option<f64>,
    step: usize,
}

impl Trainer {
    /// Starts training `model` (its parameters are updated in place).
    ///
    /// # Errors
    /// The errors of [`AdamWConfig::validate`]; [`ModelError::InvalidSetting`] for a clip norm that
    /// is not finite and positive.
    pub fn new(model: Decoder, config: TrainingConfig) -> Result<Self, ModelError> {
        if let Some(c) = config.clip_norm {
            clip_global_norm(&mut [], c)?;
        }
        let parameters = model.parameters();
        let optimizer = AdamW::new(config.adamw, &parameters)?;
        Ok(Self { model, parameters, optimizer, schedule: config.schedule, clip_norm: config.clip_norm, step: 0 })
    }

    /// Continues training `model` from a saved optimiser state after `step` steps (what
    /// [`crate::model::load_train_state`] reads). The next [`Trainer::step`] uses the learning rate
    /// of step `step`, so a run that stops and resumes takes the same steps as one that never
    /// stopped.
    ///
    /// # Errors
    /// As [`Trainer::new`]; [`ModelError::ParameterListChanged`] if the optimiser's state is not
    /// for this model's tensors or was made with other settings than `config.adamw`.
    pub fn resume(model: Decoder, config: TrainingConfig, optimizer: AdamW, step: usize) -> Result<Self, ModelError> {
        let mut trainer = Self::new(model, config)?;
        if optimizer.config() != trainer.optimizer.config() {
            return Err(ModelError::ParameterListChanged {
                detail: format!(
                    "the saved state has settings {:?}, not {:?}",
                    optimizer.config(),
                    trainer.optimizer.config()
                ),
            });
        }
        let (m, v) = optimizer.moments();
        // rebuilt on this model's parameters: names and sizes are checked there
        if optimizer.names() != trainer.optimizer.names() {
            return Err(ModelError::ParameterListChanged {
                detail: format!("the saved state is for {} tensors other than this model's", optimizer.names().len()),
            });
        }
        trainer.optimizer = AdamW::from_state(
            optimizer.config().clone(),
            &trainer.parameters,
            (m.to_vec(), v.to_vec()),
            optimizer.steps(),
            optimizer.beta_powers(),
        )?;
        trainer.step = step;
        Ok(trainer)
    }

    /// The optimiser's state.
    pub fn optimizer(&self) -> &AdamW {
        &self.optimizer
    }

    /// The model being trained.
    pub fn model(&self) -> &Decoder {
        &self.model
    }

    /// The trained model.
    pub fn into_model(self) -> Decoder {
        self.model
    }

    /// Steps taken.
    pub fn steps_taken(&self) -> usize {
        self.step
    }

    /// One step on `batch`.
    ///
    /// # Errors
    /// The errors of [`Decoder::loss`]; [`ModelError::NonFiniteGradient`] (no parameter is then
    /// changed); tensor errors of the backward sweep.
    pub fn step(&mut self, batch: &TokenBatch) -> Result<StepReport, ModelError> {
        // forward, backward and update: one worker kept from parking throughout (crate::parallel)
        llm_kernels::parallel::with_workers_awake(|| self.step_body(batch))
    }

    /// [`Trainer::step`]: loss, backward, clip, update.
    fn step_body(&mut self, batch: &TokenBatch) -> Result<StepReport, ModelError> {
        let lr = self.schedule.at(self.step);
        let loss = self.model.loss(batch)?;
        let value = loss.value()?.as_slice()[0];
        let tape_grads = loss.backward()?;
        let mut grads: Vec<Tensor> = self.parameters.gradients(&tape_grads).map(|(_, g)| g).collect();
        let grad_norm = match self.clip_norm {
            Some(c) => clip_global_norm(&mut grads, c)?,
            None => {
                let n = global_norm(&grads);
                if !n.is_finite() {
                    return Err(ModelError::NonFiniteGradient { norm: n });
                }
                n
            }
        };
        self.optimizer.update(&self.parameters, &grads, lr)?;
        let report = StepReport { step: self.step, lr, loss: value, grad_norm };
        self.step += 1;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DecoderConfig;
    use crate::nn::SplitMix64;

    #[test]
    fn a_few_steps_lower_the_loss_on_a_fixed_batch() {
        let config = DecoderConfig::new(6, 16, 1, 2).with_rope(8, 100.0);
        let model = Decoder::new(config, &mut SplitMix64::new(3)).unwrap();
        let schedule = LrSchedule::warmup_cosine(1e-2, 1e-3, 2, 30).unwrap();
        let training = TrainingConfig { adamw: AdamWConfig::default(), schedule, clip_norm: Some(1.0) };
        let mut trainer = Trainer::new(model, training).unwrap();
        let batch = TokenBatch::next_token(&[vec![0, 1, 2, 3, 4, 5], vec![5, 4, 3, 2, 1, 0]], 0).unwrap();
        let first = trainer.step(&batch).unwrap();
        assert!((first.loss - 6f64.ln()).abs() < 0.1, "near-uniform start: {}", first.loss);
        let last = (1..30).map(|_| trainer.step(&batch).unwrap()).last().unwrap();
        assert!(last.loss < 0.5 * first.loss, "{} → {}", first.loss, last.loss);
        assert_eq!((trainer.steps_taken(), last.step, last.lr), (30, 29, trainer_lr(29)));
        let bad = TokenBatch::new(vec![0, 9], vec![Some(1), Some(2)], [1, 2]).unwrap();
        assert!(matches!(trainer.step(&bad), Err(ModelError::TokenOutOfRange { id: 9, .. })));
        assert_eq!(trainer.steps_taken(), 30);
    }

    fn trainer_lr(step: usize) -> f64 {
        LrSchedule::warmup_cosine(1e-2, 1e-3, 2, 30).unwrap().at(step)
    }
}
