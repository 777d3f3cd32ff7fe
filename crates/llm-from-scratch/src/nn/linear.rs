//! [`Linear`]: `y = x · W + b`.
//!
//! Chapter 32 (`ch32-grouped-query-attention`) uses it directly; every projection of the crate is one.

use crate::autodiff::TensorValue;
use crate::error::{Shape, fmt_shape};
use crate::nn::{NamedParameter, NnError, SplitMix64};
use crate::tensor::Tensor;

/// An affine map with weight `[in, out]` (so `y = x · W`, no transpose) and an optional bias `[out]`.
///
/// # Shapes
/// `x [..., in] → y [..., out]`.
///
/// # Errors
/// [`Linear::new`] and [`Linear::from_parameters`] refuse empty or mismatched sizes
/// ([`NnError::InvalidConfig`], [`NnError::ParameterShape`]); [`Linear::forward`] refuses an input
/// whose last axis is not `in` ([`NnError::InputShape`]).
///
/// # Example
/// ```
/// use llm_from_scratch::{constant, parameter, nn::Linear};
/// // W = [[1, 2], [3, 4]], b = [10, 20]: [1, 1] · W + b = [14, 26]
/// let lin = Linear::from_parameters(parameter(&[2, 2], &[1.0, 2.0, 3.0, 4.0])?, Some(parameter(&[2], &[10.0, 20.0])?))?;
/// let y = lin.forward(&constant(&[1, 2], &[1.0, 1.0])?)?;
/// assert_eq!(y.value()?.as_slice(), &[14.0, 26.0]);
/// assert!(lin.forward(&constant(&[1, 3], &[1.0, 1.0, 1.0])?).is_err()); // last axis 3, not 2
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Linear {
    name: String,
    weight: TensorValue,
    bias: Option<TensorValue>,
}

/// Refuses layer sizes whose tensors could not be allocated (overflow or above
/// [`crate::tensor::MAX_ELEMENTS`]) before anything is drawn.
pub(crate) fn check_sizes(module: &str, shapes: &[&[usize]]) -> Result<(), NnError> {
    for shape in shapes {
        crate::tensor::dense::element_count("layer size", shape).map_err(NnError::tensor(module))?;
    }
    Ok(())
}

impl Linear {
    /// A layer named `name` (parameters `name.weight`, `name.bias`) initialised uniformly in
    /// `±1/√in`, the usual scale that keeps `x · W` of unit order. Draws from a trial copy of `rng`
    /// and commits it only on success.
    ///
    /// # Errors
    /// [`NnError::InvalidConfig`] if `in_width` or `out_width` is 0.
    pub fn new(
        name: &str,
        in_width: usize,
        out_width: usize,
        bias: bool,
        rng: &mut SplitMix64,
    ) -> Result<Self, NnError> {
        for (setting, value) in [("input width", in_width), ("output width", out_width)] {
            if value == 0 {
                return Err(NnError::InvalidConfig {
                    module: format!("linear {name}"),
                    setting,
                    value: "0".into(),
                    reason: "a linear layer needs at least one input and one output",
                });
            }
        }
        let module = format!("linear {name}");
        check_sizes(&module, &[&[in_width, out_width]])?;
        let mut trial = rng.clone();
        let bound = 1.0 / (in_width as f64).sqrt();
        let mut draw = |shape: &[usize]| {
            let values = Tensor::uniform(shape, -bound, bound, &mut trial).map_err(NnError::tensor(&module))?;
            Ok::<_, NnError>(TensorValue::leaf(values, true))
        };
        let weight = draw(&[in_width, out_width])?;
        let bias = if bias { Some(draw(&[out_width])?) } else { None };
        *rng = trial;
        Ok(Self { name: name.to_string(), weight, bias })
    }

    /// A layer from existing parameters (named `linear.weight` / `linear.bias`; see [`Linear::named`]).
    ///
    /// # Errors
    /// [`NnError::ParameterShape`] if the weight is not rank 2 with both axes > 0, or the bias is
    /// not `[out]`.
    pub fn from_parameters(weight: TensorValue, bias: Option<TensorValue>) -> Result<Self, NnError> {
        let ws = weight.shape();
        if ws.len() != 2 || ws[0] == 0 || ws[1] == 0 {
            return Err(NnError::ParameterShape {
                module: "linear".into(),
                name: "weight",
                expected: "[in, out] with in, out > 0".into(),
                actual: Shape::from(ws),
            });
        }
        if let Some(b) = &bias
            && b.shape() != [ws[1]]
        {
            return Err(NnError::ParameterShape {
                module: "linear".into(),
                name: "bias",
                expected: fmt_shape(&[ws[1]]),
                actual: Shape::from(b.shape()),
            });
        }
        Ok(Self { name: "linear".into(), weight, bias })
    }

    /// The same layer under another name prefix.
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// `x · W (+ b)` for `x [..., in]`.
    ///
    /// # Errors
    /// [`NnError::InputShape`] if `x` is a scalar or its last axis is not `in`;
    /// [`NnError::Tensor`] if a value was released.
    pub fn forward(&self, x: &TensorValue) -> Result<TensorValue, NnError> {
        let shape = x.shape();
        if shape.last() != Some(&self.input_width()) {
            return Err(NnError::InputShape {
                module: format!("linear {}", self.name),
                expected: format!("[..., {}]", self.input_width()),
                actual: Shape::from(shape),
            });
        }
        let wrap = NnError::tensor(&self.name);
        let run = || {
            // [..., in] · [in, out] → [..., out]; a vector is treated as one row
            let y = if shape.len() == 1 {
                x.reshape(&[1, shape[0]])?.matmul(&self.weight)?.reshape(&[self.output_width()])?
            } else {
                x.matmul(&self.weight)?
            };
            match &self.bias {
                Some(b) => y.add(b),
                None => Ok(y),
            }
        };
        run().map_err(wrap)
    }

    /// `in`.
    pub fn input_width(&self) -> usize {
        self.weight.shape()[0]
    }

    /// `out`.
    pub fn output_width(&self) -> usize {
        self.weight.shape()[1]
    }

    /// The weight leaf `[in, out]`.
    pub fn weight(&self) -> &TensorValue {
        &self.weight
    }

    /// The bias leaf `[out]`, if any.
    pub fn bias(&self) -> Option<&TensorValue> {
        self.bias.as_ref()
    }

    /// `name.weight` and (if present) `name.bias`.
    pub fn parameters(&self) -> Vec<NamedParameter> {
        let mut list = vec![NamedParameter::new(format!("{}.weight", self.name), self.weight.clone())];
        if let Some(b) = &self.bias {
            list.push(NamedParameter::new(format!("{}.bias", self.name), b.clone()));
        }
        list
    }

    /// Scalars in the layer: `in·out (+ out)`.
    pub fn parameter_count(&self) -> usize {
        self.weight.len() + self.bias.as_ref().map_or(0, TensorValue::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};

    #[test]
    fn construction_errors_leave_the_generator_untouched() {
        let mut rng = SplitMix64::new(1);
        let err = Linear::new("proj", 0, 3, true, &mut rng).unwrap_err();
        assert!(matches!(err, NnError::InvalidConfig { setting: "input width", .. }));
        assert_eq!(
            err.to_string(),
            "linear proj: input width = 0 is invalid (a linear layer needs at least one input and one output)"
        );
        assert_eq!(rng, SplitMix64::new(1));
        let lin = Linear::new("proj", 4, 3, true, &mut rng).unwrap();
        assert_ne!(rng, SplitMix64::new(1));
        assert_eq!(lin.parameter_count(), 15);
        assert_eq!(lin.parameters()[1].name(), "proj.bias");
        let bound = 0.5;
        assert!(lin.weight().value().unwrap().as_slice().iter().all(|w| w.abs() <= bound));
    }

    #[test]
    fn shape_errors() {
        let w = crate::parameter(&[2, 3], &[0.0; 6]).unwrap();
        let err = Linear::from_parameters(w.clone(), Some(crate::parameter(&[2], &[0.0; 2]).unwrap())).unwrap_err();
        assert_eq!(err.to_string(), "linear: parameter bias has shape [2] but [3] was needed");
        assert!(Linear::from_parameters(crate::parameter(&[6], &[0.0; 6]).unwrap(), None).is_err());
        let lin = Linear::from_parameters(w, None).unwrap();
        let err = lin.forward(&constant(&[4, 3], &[0.0; 12]).unwrap()).unwrap_err();
        assert_eq!(err.to_string(), "linear linear: input of shape [4,3] does not fit (expected [..., 2])");
        let x = constant(&[2], &[1.0, 2.0]).unwrap();
        x.release();
        assert!(matches!(lin.forward(&x), Err(NnError::Tensor { .. })));
        assert_eq!(lin.forward(&constant(&[2], &[1.0, 2.0]).unwrap()).unwrap().shape(), &[3]);
    }

    #[test]
    fn gradcheck_linear_with_bias_on_batched_input() {
        let mut rng = SplitMix64::new(5);
        let mut draw = |shape: &[usize]| Tensor::uniform(shape, -1.0, 1.0, &mut rng).unwrap();
        let (x, w, b) = (draw(&[2, 3, 4]), draw(&[4, 2]), draw(&[2]));
        let r = gradcheck(&[("x", x), ("w", w), ("b", b)], &GradcheckConfig::default(), |v| {
            Linear::from_parameters(v[1].clone(), Some(v[2].clone())).and_then(|l| l.forward(&v[0])).map_err(
                |e| match e {
                    NnError::Tensor { source, .. } => source,
                    other => panic!("{other}"),
                },
            )
        })
        .unwrap();
        assert!(r.passed(), "{r:?}");
    }
}
