//! [`RmsNorm`]: the layer around [`TensorValue::rms_norm`].
//!
//! Chapter 31 (`ch31-pre-norm-residual`) puts it before attention; chapter 36 before both halves of
//! a block.

use crate::autodiff::TensorValue;
use crate::error::Shape;
use crate::nn::{NamedParameter, NnError};
use crate::tensor::Tensor;

/// Root-mean-square normalisation with a learned gain: `x / sqrt(mean(x²) + ε) ⊙ g`.
///
/// # Shapes
/// `x [..., d] → [..., d]`.
///
/// # Errors
/// [`RmsNorm::new`]: [`NnError::InvalidConfig`] for a zero width or an `ε` that is negative or not
/// finite; [`RmsNorm::forward`]: [`NnError::InputShape`] when the last axis is not `d`.
///
/// # Example
/// ```
/// use llm_from_scratch::{constant, nn::RmsNorm};
/// let norm = RmsNorm::new("norm", 2, 0.0)?;
/// // [3, 4]: mean of squares (9 + 16) / 2 = 12.5, so y = [3, 4] / √12.5 (gain 1)
/// let y = norm.forward(&constant(&[1, 2], &[3.0, 4.0])?)?.value()?;
/// assert!((y.as_slice()[0] - 3.0 / 12.5f64.sqrt()).abs() < 1e-12);
/// assert!((y.as_slice()[1] - 4.0 / 12.5f64.sqrt()).abs() < 1e-12);
/// assert!(RmsNorm::new("norm", 0, 1e-6).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct RmsNorm {
    name: String,
    gain: TensorValue,
    eps: f64,
}

impl RmsNorm {
    /// A layer of width `d` with gain initialised to ones.
    ///
    /// # Errors
    /// [`NnError::InvalidConfig`] if `d` is 0 or `eps` is negative or not finite.
    pub fn new(name: &str, width: usize, eps: f64) -> Result<Self, NnError> {
        crate::nn::linear::check_sizes(&format!("rms_norm {name}"), &[&[width]])?;
        Self::from_gain(name, TensorValue::leaf(Tensor::from_parts(vec![width], vec![1.0; width]), true), eps)
    }

    /// A layer from an existing gain leaf `[d]`.
    ///
    /// # Errors
    /// As [`RmsNorm::new`]; [`NnError::ParameterShape`] if the gain is not a non-empty vector.
    pub fn from_gain(name: &str, gain: TensorValue, eps: f64) -> Result<Self, NnError> {
        if gain.shape().len() != 1 || gain.shape()[0] == 0 {
            return Err(NnError::ParameterShape {
                module: format!("rms_norm {name}"),
                name: "gain",
                expected: "[d] with d > 0".into(),
                actual: Shape::from(gain.shape()),
            });
        }
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(NnError::InvalidConfig {
                module: format!("rms_norm {name}"),
                setting: "eps",
                value: eps.to_string(),
                reason: "must be finite and ≥ 0",
            });
        }
        Ok(Self { name: name.to_string(), gain, eps })
    }

    /// Normalises `x [..., d]`.
    ///
    /// # Errors
    /// [`NnError::InputShape`] if the last axis is not `d`; [`NnError::Tensor`] if released.
    pub fn forward(&self, x: &TensorValue) -> Result<TensorValue, NnError> {
        if x.shape().last() != Some(&self.gain.shape()[0]) {
            return Err(NnError::InputShape {
                module: format!("rms_norm {}", self.name),
                expected: format!("[..., {}]", self.gain.shape()[0]),
                actual: Shape::from(x.shape()),
            });
        }
        x.rms_norm(&self.gain, self.eps).map_err(NnError::tensor(&self.name))
    }

    /// The gain leaf.
    pub fn gain(&self) -> &TensorValue {
        &self.gain
    }

    /// ε.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// `name.weight` (the checkpoint name of the gain).
    pub fn parameters(&self) -> Vec<NamedParameter> {
        vec![NamedParameter::new(format!("{}.weight", self.name), self.gain.clone())]
    }
}
