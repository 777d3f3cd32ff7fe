//! [`AdamW`]: Adam with decoupled weight decay (Loshchilov & Hutter), the optimiser of LLaMA.
//!
//! For every parameter `p` with gradient `g`, at step `t = 1, 2, …` with learning rate `η`:
//!
//! ```text
//! m = β₁·m + (1 − β₁)·g                 running mean of the gradient
//! v = β₂·v + (1 − β₂)·g²                running mean of its square
//! m̂ = m / (1 − β₁ᵗ),  v̂ = v / (1 − β₂ᵗ)   bias correction (m, v start at 0)
//! p = p − η·λ·p − η·m̂ / (√v̂ + ε)         decay first, then the Adam step
//! ```
//!
//! *Decoupled*: the decay `η·λ·p` shrinks the weight directly instead of being added to `g`, so it
//! is not rescaled by `1/√v̂` — every weight decays at the same rate whatever its gradient history.
//! As in nanoGPT, only matrices (rank ≥ 2: projections, the embedding) decay; gains and biases do
//! not, since pulling a gain towards 0 would switch its normalised input off.

use rayon::prelude::*;

use crate::model::ModelError;
use crate::nn::NamedParameters;
use crate::tensor::Tensor;
use crate::tensor::values::PARALLEL_VALUES;

/// Values per task of a step on every thread.
const VALUES_PER_RUN: usize = 4096;

/// The most values [`AdamW::update`] copies at a time (a tensor larger than this is copied
/// alone): 8 MiB beside the parameters.
const BATCH_VALUES: usize = 1 << 20;

/// `β₁`, `β₂`, `ε` and the decoupled weight decay `λ`.
#[derive(Clone, Debug, PartialEq)]
pub struct AdamWConfig {
    /// Decay of the first moment (0.9).
    pub beta1: f64,
    /// Decay of the second moment (0.95, LLaMA's choice).
    pub beta2: f64,
    /// Added to `√v̂` (1e-8).
    pub eps: f64,
    /// `λ` (0.1).
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self::LLAMA
    }
}

impl AdamWConfig {
    /// LLaMA's settings, the default: `β₁ = 0.9`, `β₂ = 0.95`, `ε = 1e-8`, `λ = 0.1` (a constant,
    /// so that a [`Recipe`](crate::model::Recipe) can be one).
    pub const LLAMA: Self = Self { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 };

    /// Checks `0 ≤ β₁, β₂ < 1`, `ε > 0` and `λ ≥ 0`, all finite.
    ///
    /// # Errors
    /// [`ModelError::InvalidSetting`] (module `adamw`) naming the first setting out of range.
    pub fn validate(&self) -> Result<(), ModelError> {
        for (setting, beta) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&beta) {
                return Err(ModelError::setting("adamw", setting, beta, "must satisfy 0 ≤ β < 1"));
            }
        }
        if !(self.eps > 0.0 && self.eps.is_finite()) {
            return Err(ModelError::setting("adamw", "eps", self.eps, "must be finite and positive"));
        }
        if !(self.weight_decay >= 0.0 && self.weight_decay.is_finite()) {
            return Err(ModelError::setting("adamw", "weight_decay", self.weight_decay, "must be finite and ≥ 0"));
        }
        Ok(())
    }
}

/// `true` for the tensors AdamW decays: matrices (rank ≥ 2), not gains or biases.
pub fn decays(shape: &[usize]) -> bool {
    shape.len() >= 2
}

/// The optimiser's state for one list of parameters: both moments and the step count.
///
/// ```
/// use llm_from_scratch::model::{AdamW, AdamWConfig};
/// use llm_from_scratch::nn::{NamedParameter, NamedParameters};
/// use llm_from_scratch::{Tensor, parameter};
/// // the first step moves every coordinate by η against the sign of its gradient: m̂/√v̂ = ±1
/// let p = parameter(&[2], &[1.0, 1.0])?;
/// let params = NamedParameters::try_new(vec![NamedParameter::new("p", p.clone())])?;
/// let mut adamw = AdamW::new(AdamWConfig { weight_decay: 0.0, ..AdamWConfig::default() }, &params)?;
/// adamw.update(&params, &[Tensor::new(&[2], vec![3.0, -0.5])?], 0.1)?;
/// let v = p.value()?;
/// assert!((v.as_slice()[0] - 0.9).abs() < 1e-8 && (v.as_slice()[1] - 1.1).abs() < 1e-8);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct AdamW {
    config: AdamWConfig,
    names: Vec<String>,
    first: Vec<Vec<f64>>,
    second: Vec<Vec<f64>>,
    steps: u64,
    /// `β₁ᵗ` and `β₂ᵗ`, kept as running products (exact and the same on every machine).
    beta_powers: (f64, f64),
}

impl AdamW {
    /// Zero moments for every tensor of `params`.
    ///
    /// # Errors
    /// The errors of [`AdamWConfig::validate`].
    pub fn new(config: AdamWConfig, params: &NamedParameters) -> Result<Self, ModelError> {
        config.validate()?;
        let zeros: Vec<Vec<f64>> = params.iter().map(|p| vec![0.0; p.value().len()]).collect();
        Ok(Self {
            config,
            names: params.iter().map(|p| p.name().to_string()).collect(),
            first: zeros.clone(),
            second: zeros,
            steps: 0,
            beta_powers: (1.0, 1.0),
        })
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The settings.
    pub fn config(&self) -> &AdamWConfig {
        &self.config
    }

    /// The names of the tensors the state is for, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The first and second moments `(m, v)`, one list of numbers per tensor, in the order of
    /// [`AdamW::names`].
    pub fn moments(&self) -> (&[Vec<f64>], &[Vec<f64>]) {
        (&self.first, &self.second)
    }

    /// `(β₁ᵗ, β₂ᵗ)` after the steps taken (the bias corrections are `1 − βᵗ`).
    pub fn beta_powers(&self) -> (f64, f64) {
        self.beta_powers
    }

    /// An optimiser in the middle of training: the state [`AdamW::moments`], [`AdamW::steps`] and
    /// [`AdamW::beta_powers`] reported, for the tensors of `params`. Continuing from it is
    /// bitwise the same as never having stopped.
    ///
    /// # Errors
    /// The errors of [`AdamWConfig::validate`]; [`ModelError::ParameterListChanged`] if a moment
    /// list does not fit `params`; [`ModelError::InvalidSetting`] for β powers outside `[0, 1]`.
    pub fn from_state(
        config: AdamWConfig,
        params: &NamedParameters,
        moments: (Vec<Vec<f64>>, Vec<Vec<f64>>),
        steps: u64,
        beta_powers: (f64, f64),
    ) -> Result<Self, ModelError> {
        let mut adamw = Self::new(config, params)?;
        let (first, second) = moments;
        for (what, list) in [("first", &first), ("second", &second)] {
            let fits =
                list.len() == adamw.first.len() && list.iter().zip(&adamw.first).all(|(a, b)| a.len() == b.len());
            if !fits {
                return Err(ModelError::ParameterListChanged {
                    detail: format!("the {what} moments do not fit the {} parameter tensors", adamw.names.len()),
                });
            }
        }
        for (setting, power) in [("beta1 power", beta_powers.0), ("beta2 power", beta_powers.1)] {
            if !(0.0..=1.0).contains(&power) {
                return Err(ModelError::setting("adamw", setting, power, "must be in [0, 1]"));
            }
        }
        (adamw.first, adamw.second, adamw.steps, adamw.beta_powers) = (first, second, steps, beta_powers);
        Ok(adamw)
    }

    /// One step with learning rate `lr`: `grads[i]` is the gradient of the `i`-th tensor of
    /// `params` (the list the optimiser was made for). Writes the new values into the leaves.
    ///
    /// # Errors
    /// [`ModelError::InvalidSetting`] for a negative or non-finite `lr`;
    /// [`ModelError::ParameterListChanged`] if the names, the count or a shape differ;
    /// [`ModelError::NonFiniteParameterGradient`] if a gradient holds NaN or ±∞ (training
    /// frameworks skip such a step; here the caller decides what to do with the batch); a
    /// tensor error if a parameter's value was released. Nothing is changed on error.
    pub fn update(&mut self, params: &NamedParameters, grads: &[Tensor], lr: f64) -> Result<(), ModelError> {
        self.update_in_batches(params, grads, lr, BATCH_VALUES)
    }

    /// [`AdamW::update`], copying at most `batch_values` values at a time (or one larger tensor).
    fn update_in_batches(
        &mut self,
        params: &NamedParameters,
        grads: &[Tensor],
        lr: f64,
        batch_values: usize,
    ) -> Result<(), ModelError> {
        if !(lr >= 0.0 && lr.is_finite()) {
            return Err(ModelError::setting("adamw", "learning rate", lr, "must be finite and ≥ 0"));
        }
        self.check(params, grads)?;
        for (name, grad) in self.names.iter().zip(grads) {
            if let Some((index, value)) = grad.as_slice().iter().enumerate().find(|(_, g)| !g.is_finite()) {
                return Err(ModelError::NonFiniteParameterGradient {
                    name: name.clone(),
                    index,
                    value: value.to_string(),
                });
            }
        }
        let values = params.iter().map(|p| p.value().value()).collect::<Result<Vec<_>, _>>()?;
        let AdamWConfig { beta1, beta2, eps, weight_decay } = self.config;
        self.steps += 1;
        self.beta_powers = (self.beta_powers.0 * beta1, self.beta_powers.1 * beta2);
        let (correction1, correction2) = (1.0 - self.beta_powers.0, 1.0 - self.beta_powers.1);
        // a run of values' steps, each value's from its own gradient and moments alone
        let step = |(p, g, m, v, decay): (&mut [f64], &[f64], &mut [f64], &mut [f64], f64)| {
            for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
                *m = beta1 * *m + (1.0 - beta1) * g;
                *v = beta2 * *v + (1.0 - beta2) * g * g;
                let (m_hat, v_hat) = (*m / correction1, *v / correction2);
                *p = *p * decay - lr * m_hat / (v_hat.sqrt() + eps);
            }
        };
        // the tensors in batches of at most `batch_values` values (or one larger tensor), so that
        // one batch's copy at most is held beside the parameters; each batch in runs of values,
        // on every thread once there are many: each value is updated alone, so the bits do not
        // depend on the threads
        let mut values = values.into_iter().peekable();
        let mut start = 0;
        while let Some(first) = values.next() {
            let mut batch = vec![first];
            let mut total = batch[0].len();
            while let Some(more) = values.next_if(|v| total + v.len() <= batch_values) {
                total += more.len();
                batch.push(more);
            }
            let end = start + batch.len();
            let decay: Vec<f64> =
                batch.iter().map(|v| if decays(v.shape()) { 1.0 - lr * weight_decay } else { 1.0 }).collect();
            let mut next: Vec<Vec<f64>> = batch.into_iter().map(Tensor::into_vec).collect();
            let moments = self.first[start..end].iter_mut().zip(&mut self.second[start..end]);
            let runs = next.iter_mut().zip(&grads[start..end]).zip(moments).zip(&decay).flat_map(
                |(((p, g), (m, v)), &decay)| {
                    let pieces = p.chunks_mut(VALUES_PER_RUN).zip(g.as_slice().chunks(VALUES_PER_RUN));
                    let moments = m.chunks_mut(VALUES_PER_RUN).zip(v.chunks_mut(VALUES_PER_RUN));
                    pieces.zip(moments).map(move |((p, g), (m, v))| (p, g, m, v, decay))
                },
            );
            if total >= PARALLEL_VALUES {
                runs.collect::<Vec<_>>().into_par_iter().for_each(step);
            } else {
                runs.for_each(step);
            }
            for (param, next) in params.iter().skip(start).zip(next) {
                param.value().set_value(Tensor::new(param.value().shape(), next)?)?;
            }
            start = end;
        }
        Ok(())
    }

    fn check(&self, params: &NamedParameters, grads: &[Tensor]) -> Result<(), ModelError> {
        let changed = |detail: String| Err(ModelError::ParameterListChanged { detail });
        if params.len() != self.names.len() || grads.len() != self.names.len() {
            return changed(format!(
                "made for {} tensors but given {} parameters and {} gradients",
                self.names.len(),
                params.len(),
                grads.len()
            ));
        }
        for (i, (p, g)) in params.iter().zip(grads).enumerate() {
            let name = &self.names[i];
            if p.name() != name {
                return changed(format!("expected {name} but found {}", p.name()));
            }
            if g.shape() != p.value().shape() || p.value().len() != self.first[i].len() {
                return changed(format!(
                    "{name}: parameter {} and gradient {} do not match the state",
                    crate::fmt_shape(p.value().shape()),
                    crate::fmt_shape(g.shape())
                ));
            }
            // only leaves can be assigned; checked first so that a failure changes nothing
            if !matches!(p.value().op(), "parameter" | "constant") {
                return changed(format!("{name} is computed by {}, not a leaf", p.value().op()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::parameter;
    use crate::nn::NamedParameter;

    fn list(values: &[(&str, &[usize], &[f64])]) -> NamedParameters {
        let list = values.iter().map(|(n, s, v)| NamedParameter::new(*n, parameter(s, v).unwrap())).collect();
        NamedParameters::try_new(list).unwrap()
    }

    #[test]
    fn minimises_a_tiny_quadratic() {
        // f(w) = Σ (w_i − c_i)², ∇f = 2(w − c): AdamW without decay reaches c
        let c = [3.0, -2.0, 0.5, 1.0];
        let params = list(&[("w", &[2, 2], &[0.0; 4])]);
        let config = AdamWConfig { weight_decay: 0.0, beta2: 0.999, ..AdamWConfig::default() };
        let mut adamw = AdamW::new(config, &params).unwrap();
        let w = params.iter().next().unwrap().value().clone();
        for step in 0..2000 {
            let lr = if step < 1500 { 0.05 } else { 0.005 };
            let grad: Vec<f64> = w.value().unwrap().as_slice().iter().zip(&c).map(|(w, c)| 2.0 * (w - c)).collect();
            adamw.update(&params, &[Tensor::new(&[2, 2], grad).unwrap()], lr).unwrap();
        }
        let got = w.value().unwrap();
        assert!(got.as_slice().iter().zip(&c).all(|(w, c)| (w - c).abs() < 1e-3), "{got:?}");
        assert_eq!(adamw.steps(), 2000);
    }

    #[test]
    fn many_values_on_any_thread_count_take_the_plain_steps_bits() {
        // a matrix and a gain, together past the threshold of running on every thread (a run of
        // values shorter than the others at each tensor's end); three steps against the formula
        // written out value by value
        let (rows, d) = (300, 64);
        let w: Vec<f64> = (0..rows * d).map(|i| (i as f64 * 0.37).sin()).collect();
        let g: Vec<f64> = (0..d).map(|i| 1.0 + i as f64 / 100.0).collect();
        let grads = |k: usize| {
            let gw = (0..rows * d).map(|i| ((i * (k + 3)) as f64 * 0.013).cos()).collect();
            let gg = (0..d).map(|i| (i + k) as f64 * 0.01 - 0.2).collect();
            [Tensor::new(&[rows, d], gw).unwrap(), Tensor::new(&[d], gg).unwrap()]
        };
        let config = AdamWConfig::default();
        let (lr, (b1, b2)) = (0.01, (config.beta1, config.beta2));
        let mut plain = [w.clone(), g.clone()];
        let mut moments = [(vec![0.0; rows * d], vec![0.0; rows * d]), (vec![0.0; d], vec![0.0; d])];
        let mut powers = (1.0, 1.0);
        for k in 0..3 {
            powers = (powers.0 * b1, powers.1 * b2);
            for (t, decay) in [(0, 1.0 - lr * config.weight_decay), (1, 1.0)] {
                let grad = grads(k)[t].clone().into_vec();
                let (m, v) = &mut moments[t];
                for i in 0..plain[t].len() {
                    m[i] = b1 * m[i] + (1.0 - b1) * grad[i];
                    v[i] = b2 * v[i] + (1.0 - b2) * grad[i] * grad[i];
                    let (m_hat, v_hat) = (m[i] / (1.0 - powers.0), v[i] / (1.0 - powers.1));
                    plain[t][i] = plain[t][i] * decay - lr * m_hat / (v_hat.sqrt() + config.eps);
                }
            }
        }
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            // all in one batch, and one tensor at a time (a batch of 64 values holds the gain
            // alone and leaves the matrix to a batch of its own)
            for batch in [BATCH_VALUES, 64] {
                let got: Vec<Vec<u64>> = pool.install(|| {
                    let params = list(&[("w", &[rows, d], &w), ("gain", &[d], &g)]);
                    let mut adamw = AdamW::new(config.clone(), &params).unwrap();
                    for k in 0..3 {
                        adamw.update_in_batches(&params, &grads(k), lr, batch).unwrap();
                    }
                    params.iter().map(|p| bits(p.value().value().unwrap().as_slice())).collect()
                });
                assert_eq!(got, [bits(&plain[0]), bits(&plain[1])], "{threads} threads, batches of {batch}");
            }
        }
    }

    #[test]
    fn decay_is_decoupled_and_skips_gains() {
        // zero gradients: m = v = 0, so only the decay acts — matrices shrink by (1 − ηλ), gains stay
        let params = list(&[("w", &[1, 2], &[2.0, -4.0]), ("gain", &[2], &[1.0, 1.0])]);
        let mut adamw = AdamW::new(AdamWConfig::default(), &params).unwrap();
        let zeros = [Tensor::new(&[1, 2], vec![0.0; 2]).unwrap(), Tensor::new(&[2], vec![0.0; 2]).unwrap()];
        adamw.update(&params, &zeros, 0.5).unwrap();
        let values: Vec<Vec<f64>> = params.iter().map(|p| p.value().value().unwrap().into_vec()).collect();
        assert_eq!(values, [vec![2.0 * 0.95, -4.0 * 0.95], vec![1.0, 1.0]]);
    }

    #[test]
    fn errors_are_typed_and_change_nothing() {
        let params = list(&[("w", &[2], &[1.0, 2.0])]);
        let err = AdamW::new(AdamWConfig { beta1: 1.0, ..AdamWConfig::default() }, &params).unwrap_err();
        assert_eq!(err.to_string(), "adamw: beta1 = 1 is invalid (must satisfy 0 ≤ β < 1)");
        let mut adamw = AdamW::new(AdamWConfig::default(), &params).unwrap();
        let err = adamw.update(&params, &[Tensor::new(&[3], vec![0.0; 3]).unwrap()], 0.1).unwrap_err();
        assert_eq!(err.to_string(), "adamw: w: parameter [2] and gradient [3] do not match the state");
        let other = list(&[("v", &[2], &[1.0, 2.0])]);
        let err = adamw.update(&other, &[Tensor::new(&[2], vec![0.0; 2]).unwrap()], 0.1).unwrap_err();
        assert_eq!(err.to_string(), "adamw: expected w but found v");
        assert!(adamw.update(&params, &[], f64::NAN).is_err());
        // a NaN gradient used to turn the parameter into NaN silently
        let err = adamw.update(&params, &[Tensor::new(&[2], vec![0.5, f64::NAN]).unwrap()], 0.1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "adamw: the gradient of w is not finite (NaN at index 1); no parameter was changed"
        );
        let err = adamw.update(&params, &[Tensor::new(&[2], vec![f64::NEG_INFINITY, 0.0]).unwrap()], 0.1);
        assert!(matches!(err, Err(ModelError::NonFiniteParameterGradient { index: 0, .. })));
        assert_eq!(adamw.steps(), 0);
        assert_eq!(params.iter().next().unwrap().value().value().unwrap().as_slice(), &[1.0, 2.0]);
    }

    #[test]
    fn a_restored_state_continues_bitwise() {
        let grads =
            |k: f64| [Tensor::new(&[1, 2], vec![0.3 * k, -1.1]).unwrap(), Tensor::new(&[2], vec![k, 0.5]).unwrap()];
        let start: [(&str, &[usize], &[f64]); 2] = [("w", &[1, 2], &[2.0, -4.0]), ("gain", &[2], &[1.0, 1.0])];
        let (a, b) = (list(&start), list(&start));
        let mut straight = AdamW::new(AdamWConfig::default(), &a).unwrap();
        let mut first_half = AdamW::new(AdamWConfig::default(), &b).unwrap();
        for k in 0..3 {
            straight.update(&a, &grads(k as f64), 0.05).unwrap();
            first_half.update(&b, &grads(k as f64), 0.05).unwrap();
        }
        let (m, v) = first_half.moments();
        let mut resumed =
            AdamW::from_state(AdamWConfig::default(), &b, (m.to_vec(), v.to_vec()), 3, first_half.beta_powers())
                .unwrap();
        assert_eq!((resumed.steps(), resumed.names()), (3, &["w".to_string(), "gain".to_string()][..]));
        for k in 3..6 {
            straight.update(&a, &grads(k as f64), 0.05).unwrap();
            resumed.update(&b, &grads(k as f64), 0.05).unwrap();
        }
        let bits = |l: &NamedParameters| -> Vec<u64> {
            l.iter().flat_map(|p| p.value().value().unwrap().into_vec()).map(f64::to_bits).collect()
        };
        assert_eq!(bits(&a), bits(&b));
        // a state that does not fit is refused
        let err = AdamW::from_state(AdamWConfig::default(), &b, (vec![vec![0.0; 2]], vec![]), 0, (1.0, 1.0));
        assert_eq!(err.unwrap_err().to_string(), "adamw: the first moments do not fit the 2 parameter tensors");
        let zeros = || vec![vec![0.0; 2], vec![0.0; 2]];
        let err = AdamW::from_state(AdamWConfig::default(), &b, (zeros(), zeros()), 0, (1.5, 1.0)).unwrap_err();
        assert_eq!(err.to_string(), "adamw: beta1 power = 1.5 is invalid (must be in [0, 1])");
    }
}
