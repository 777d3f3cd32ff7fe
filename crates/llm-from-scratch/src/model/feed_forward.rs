//! [`SwiGlu`]: the gated feed-forward of LLaMA-family blocks.
//!
//! ```text
//! gate = x · W1          [B, T, f]     (checkpoint name: gate_proj)
//! up   = x · W3          [B, T, f]     (up_proj)
//! h    = silu(gate) ⊙ up               silu(z) = z · σ(z)
//! out  = h · W2          [B, T, d]     (down_proj)
//! ```
//!
//! The gate decides, per hidden unit and per token, how much of the linear `up` signal passes.
//! With three matrices instead of two, a hidden width of `8d/3` keeps the parameter count of the
//! classic `d → 4d → d` MLP. Every step is a tape operation, so the backward needs no code here.

use crate::autodiff::TensorValue;
use crate::model::ModelError;
use crate::nn::{Linear, NamedParameter, SplitMix64};

/// `W2 · (silu(x·W1) ⊙ (x·W3))`, bias-free.
///
/// # Shapes
/// `x [..., d] → [..., d]`; `W1, W3 [d, f]`, `W2 [f, d]`.
///
/// # Errors
/// [`SwiGlu::new`] and [`SwiGlu::from_weights`]: zero widths or weights that do not fit together
/// ([`ModelError::Nn`], [`ModelError::ParameterShape`]); [`SwiGlu::forward`]: [`ModelError::Nn`] when
/// the last axis of `x` is not `d`.
///
/// # Example
/// ```
/// use llm_from_scratch::model::SwiGlu;
/// use llm_from_scratch::{constant, nn::SplitMix64};
/// let mlp = SwiGlu::new("mlp", 4, 8, &mut SplitMix64::new(0))?;
/// assert_eq!(mlp.forward(&constant(&[2, 3, 4], &[0.5; 24])?)?.shape(), &[2, 3, 4]);
/// // silu(0) = 0: a zero input gives a zero output
/// assert!(mlp.forward(&constant(&[1, 4], &[0.0; 4])?)?.value()?.as_slice().iter().all(|&v| v == 0.0));
/// assert!(mlp.forward(&constant(&[1, 5], &[0.0; 5])?).is_err());
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
#[derive(Clone, Debug)]
pub struct SwiGlu {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl SwiGlu {
    /// Weights `prefix.gate_proj.weight`, `prefix.up_proj.weight`, `prefix.down_proj.weight`
    /// drawn uniformly in `±1/√fan_in` from a trial copy of `rng`.
    ///
    /// # Errors
    /// [`ModelError::Nn`] for a zero width; `rng` is then untouched.
    pub fn new(prefix: &str, width: usize, hidden: usize, rng: &mut SplitMix64) -> Result<Self, ModelError> {
        let mut trial = rng.clone();
        let gate = Linear::new(&format!("{prefix}.gate_proj"), width, hidden, false, &mut trial)?;
        let up = Linear::new(&format!("{prefix}.up_proj"), width, hidden, false, &mut trial)?;
        let down = Linear::new(&format!("{prefix}.down_proj"), hidden, width, false, &mut trial)?;
        *rng = trial;
        Ok(Self { gate, up, down })
    }

    /// A feed-forward from existing leaves `W1 [d, f]`, `W3 [d, f]`, `W2 [f, d]`.
    ///
    /// # Errors
    /// [`ModelError::ParameterShape`] naming the weight that does not fit the others.
    pub fn from_weights(
        prefix: &str,
        gate: TensorValue,
        up: TensorValue,
        down: TensorValue,
    ) -> Result<Self, ModelError> {
        let (d, f) = match gate.shape() {
            &[d, f] => (d, f),
            _ => (0, 0),
        };
        for (name, w, expected) in
            [("gate_proj", &gate, [d, f]), ("up_proj", &up, [d, f]), ("down_proj", &down, [f, d])]
        {
            if w.shape() != expected || d == 0 || f == 0 {
                return Err(ModelError::ParameterShape {
                    name: format!("{prefix}.{name}.weight"),
                    expected: crate::error::Shape(expected.to_vec()),
                    actual: crate::error::Shape::from(w.shape()),
                });
            }
        }
        let linear = |w: TensorValue, name: &str| -> Result<Linear, ModelError> {
            Ok(Linear::from_parameters(w, None)?.named(&format!("{prefix}.{name}")))
        };
        Ok(Self { gate: linear(gate, "gate_proj")?, up: linear(up, "up_proj")?, down: linear(down, "down_proj")? })
    }

    /// `silu(x·W1) ⊙ (x·W3) · W2`.
    ///
    /// # Errors
    /// [`ModelError::Nn`] if the last axis of `x` is not `d`; a tensor error if a value was released.
    pub fn forward(&self, x: &TensorValue) -> Result<TensorValue, ModelError> {
        let gate = self.gate.forward(x)?.silu()?; // [..., f]
        let hidden = gate.mul(&self.up.forward(x)?)?; // [..., f]
        Ok(self.down.forward(&hidden)?) // [..., d]
    }

    /// `f`, the hidden width.
    pub fn hidden_width(&self) -> usize {
        self.gate.output_width()
    }

    /// `[W1, W3, W2]` = `[gate, up, down]`.
    pub fn weights(&self) -> [&TensorValue; 3] {
        [self.gate.weight(), self.up.weight(), self.down.weight()]
    }

    /// The three weights under their checkpoint names.
    pub fn parameters(&self) -> Vec<NamedParameter> {
        [&self.gate, &self.up, &self.down].iter().flat_map(|l| l.parameters()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::{GradcheckConfig, constant, gradcheck, parameter};
    use crate::tensor::Tensor;

    #[test]
    fn hand_value_and_names() {
        // d = 1, f = 1: W1 = 2, W3 = 3, W2 = 0.5; x = 1 → silu(2)·3·0.5 = 1.5 · 2σ(2)
        let ffn = SwiGlu::from_weights(
            "mlp",
            parameter(&[1, 1], &[2.0]).unwrap(),
            parameter(&[1, 1], &[3.0]).unwrap(),
            parameter(&[1, 1], &[0.5]).unwrap(),
        )
        .unwrap();
        let y = ffn.forward(&constant(&[1, 1, 1], &[1.0]).unwrap()).unwrap().value().unwrap();
        let sigma2 = 1.0 / (1.0 + (-2.0f64).exp());
        assert!((y.as_slice()[0] - 3.0 * sigma2).abs() < 1e-15);
        let names: Vec<String> = ffn.parameters().iter().map(|p| p.name().to_string()).collect();
        assert_eq!(names, ["mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]);
        let err = SwiGlu::from_weights(
            "mlp",
            parameter(&[2, 3], &[0.0; 6]).unwrap(),
            parameter(&[2, 3], &[0.0; 6]).unwrap(),
            parameter(&[2, 3], &[0.0; 6]).unwrap(),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "model parameters: mlp.down_proj.weight has shape [2,3] but [3,2] was needed");
    }

    #[test]
    fn gradcheck_swiglu() {
        let mut rng = SplitMix64::new(12);
        let mut draw = |shape: &[usize]| {
            Tensor::new(shape, (0..shape.iter().product()).map(|_| rng.uniform(-1.0, 1.0)).collect()).unwrap()
        };
        let inputs = [("x", draw(&[2, 3, 4])), ("w1", draw(&[4, 6])), ("w3", draw(&[4, 6])), ("w2", draw(&[6, 4]))];
        let r = gradcheck(&inputs, &GradcheckConfig::default(), |v| {
            SwiGlu::from_weights("mlp", v[1].clone(), v[2].clone(), v[3].clone())?.forward(&v[0])
        })
        .unwrap();
        assert!(r.passed(), "{r:?}");
        let mut rng = SplitMix64::new(1);
        let before = rng.clone();
        assert!(SwiGlu::new("mlp", 4, 0, &mut rng).is_err());
        assert_eq!(rng, before);
    }
}
