//! [`QkvProjections`]: the query, key and value projections of one input.
//!
//! Chapter 32 (`ch32-grouped-query-attention`) uses them directly; every attention layer holds one.

use crate::autodiff::{TensorValue, constant};
use crate::error::Shape;
use crate::nn::{NamedParameter, NnError, SplitMix64};
use crate::tensor::Tensor;
use crate::tensor::matmul::{MatRef, row_times_matrices};

/// Three projections of the same input: `Q = x·W_Q (+b_Q)`, `K = x·W_K (+b_K)`, `V = x·W_V (+b_V)`.
///
/// The three weights are kept together and applied to the same input; each is its own product, so
/// no packed copy of the weights is made per call (decoding one token reads each weight once).
/// Key and value share a width that may be smaller than the query's (grouped-query attention).
///
/// # Shapes
/// `x [..., d] → Q [..., d_q], K [..., d_kv], V [..., d_kv]`.
///
/// # Errors
/// Construction: [`NnError::InvalidConfig`] for a zero width, [`NnError::ParameterShape`] for
/// weights that do not fit together; [`QkvProjections::forward`]: [`NnError::InputShape`] when the
/// last axis of `x` is not `d`.
///
/// # Example
/// ```
/// use llm_from_scratch::constant;
/// use llm_from_scratch::nn::{QkvProjections, SplitMix64};
/// // d = 8 → queries of width 8, keys and values of width 4 (two query heads per kv head)
/// let qkv = QkvProjections::with_widths("attn", 8, 8, 4, false, &mut SplitMix64::new(0))?;
/// let out = qkv.forward(&constant(&[2, 3, 8], &[0.5; 48])?)?;
/// assert_eq!(out.query().shape(), &[2, 3, 8]);
/// assert_eq!(out.key().shape(), &[2, 3, 4]);
/// assert_eq!(out.value().shape(), &[2, 3, 4]);
/// assert!(qkv.forward(&constant(&[2, 3, 7], &[0.5; 42])?).is_err()); // width 7, not 8
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct QkvProjections {
    prefix: String,
    weights: [TensorValue; 3],
    biases: Option<[TensorValue; 3]>,
}

/// The three projected tensors.
#[derive(Clone, Debug)]
pub struct QkvOutput {
    query: TensorValue,
    key: TensorValue,
    value: TensorValue,
}

impl QkvOutput {
    /// `Q [..., d_q]`.
    pub fn query(&self) -> &TensorValue {
        &self.query
    }
    /// `K [..., d_kv]`.
    pub fn key(&self) -> &TensorValue {
        &self.key
    }
    /// `V [..., d_kv]`.
    pub fn value(&self) -> &TensorValue {
        &self.value
    }
}

const BRANCHES: [&str; 3] = ["query", "key", "value"];

impl QkvProjections {
    /// Bias-free projections `d → projected_width` for all three, initialised in `±1/√d`
    /// (names `prefix.query.weight`, `prefix.key.weight`, `prefix.value.weight`).
    ///
    /// # Errors
    /// [`NnError::InvalidConfig`] for a zero width; the generator is then untouched.
    pub fn new(
        prefix: &str,
        model_width: usize,
        projected_width: usize,
        rng: &mut SplitMix64,
    ) -> Result<Self, NnError> {
        Self::with_widths(prefix, model_width, projected_width, projected_width, false, rng)
    }

    /// Projections with a query width, a (shared) key/value width and optional biases.
    ///
    /// # Errors
    /// [`NnError::InvalidConfig`] for a zero width; the generator is then untouched.
    pub fn with_widths(
        prefix: &str,
        model_width: usize,
        query_width: usize,
        kv_width: usize,
        bias: bool,
        rng: &mut SplitMix64,
    ) -> Result<Self, NnError> {
        for (setting, value) in
            [("model width", model_width), ("query width", query_width), ("key/value width", kv_width)]
        {
            if value == 0 {
                return Err(NnError::InvalidConfig {
                    module: format!("qkv {prefix}"),
                    setting,
                    value: "0".into(),
                    reason: "projections need positive widths",
                });
            }
        }
        let module = format!("qkv {prefix}");
        crate::nn::linear::check_sizes(&module, &[&[model_width, query_width], &[model_width, kv_width]])?;
        let mut trial = rng.clone();
        let bound = 1.0 / (model_width as f64).sqrt();
        let [q, k, v] = [query_width, kv_width, kv_width];
        let mut draw = |shape: &[usize]| {
            let values = Tensor::uniform(shape, -bound, bound, &mut trial).map_err(NnError::tensor(&module))?;
            Ok::<_, NnError>(TensorValue::leaf(values, true))
        };
        let weights = [draw(&[model_width, q])?, draw(&[model_width, k])?, draw(&[model_width, v])?];
        let biases = if bias { Some([draw(&[q])?, draw(&[k])?, draw(&[v])?]) } else { None };
        *rng = trial;
        Ok(Self { prefix: prefix.to_string(), weights, biases })
    }

    /// Projections from existing bias-free weights `[d, d_q]`, `[d, d_kv]`, `[d, d_kv]`.
    ///
    /// # Errors
    /// [`NnError::ParameterShape`] naming the branch whose weight does not fit.
    pub fn from_weights(query: TensorValue, key: TensorValue, value: TensorValue) -> Result<Self, NnError> {
        Self::from_parameters("attention", [query, key, value], None)
    }

    /// Projections from weights and optional biases `[d_q]`, `[d_kv]`, `[d_kv]`, named under `prefix`.
    ///
    /// # Errors
    /// [`NnError::ParameterShape`] naming the branch whose weight or bias does not fit.
    pub fn from_parameters(
        prefix: &str,
        weights: [TensorValue; 3],
        biases: Option<[TensorValue; 3]>,
    ) -> Result<Self, NnError> {
        let d = weights[0].shape().first().copied().unwrap_or(0);
        let kv = weights[1].shape().get(1).copied().unwrap_or(0);
        for (i, w) in weights.iter().enumerate() {
            let s = w.shape();
            let fits = s.len() == 2 && s[0] == d && d > 0 && s[1] > 0 && (i == 0 || s[1] == kv);
            if !fits {
                return Err(NnError::ParameterShape {
                    module: format!("qkv {prefix}"),
                    name: ["query weight", "key weight", "value weight"][i],
                    expected: if i == 0 {
                        "[d, d_q] with d, d_q > 0".into()
                    } else {
                        format!("[{d}, d_kv] with key and value of equal width")
                    },
                    actual: Shape::from(s),
                });
            }
        }
        if let Some(bs) = &biases {
            for (i, b) in bs.iter().enumerate() {
                if b.shape() != [weights[i].shape()[1]] {
                    return Err(NnError::ParameterShape {
                        module: format!("qkv {prefix}"),
                        name: ["query bias", "key bias", "value bias"][i],
                        expected: crate::fmt_shape(&[weights[i].shape()[1]]),
                        actual: Shape::from(b.shape()),
                    });
                }
            }
        }
        Ok(Self { prefix: prefix.to_string(), weights, biases })
    }

    /// Projects `x [..., d]` into query, key and value.
    ///
    /// # Errors
    /// [`NnError::InputShape`] if the last axis is not `d` (or `x` is a scalar or vector);
    /// [`NnError::Tensor`] if a value was released.
    pub fn forward(&self, x: &TensorValue) -> Result<QkvOutput, NnError> {
        let d = self.model_width();
        if x.shape().len() < 2 || x.shape().last() != Some(&d) {
            return Err(NnError::InputShape {
                module: format!("qkv {}", self.prefix),
                expected: format!("[..., T, {d}]"),
                actual: Shape::from(x.shape()),
            });
        }
        let run = || {
            let project = |i: usize| {
                let y = x.matmul(&self.weights[i])?; // [..., d] · [d, width] → [..., width]
                match &self.biases {
                    Some(b) => y.add(&b[i]),
                    None => Ok(y),
                }
            };
            Ok(QkvOutput { query: project(0)?, key: project(1)?, value: project(2)? })
        };
        run().map_err(NnError::tensor(&self.prefix))
    }

    /// [`QkvProjections::forward`] for one token `x [.., d]` (every leading axis 1; usually
    /// `[1, 1, d]`) → `Q [.., d_q]`, `K [.., d_kv]`, `V [.., d_kv]`, outside training, as decoding
    /// calls it: the three one-row products share one parallel pass over the
    /// weights instead of starting the worker threads three times. The values equal `forward`'s
    /// bitwise; the outputs are constants (nothing is recorded for a backward).
    ///
    /// # Errors
    /// [`NnError::InputShape`] unless `x` is `[.., d]` with one row; [`NnError::Tensor`] if a
    /// parameter was released.
    pub fn forward_token(&self, x: &Tensor) -> Result<QkvOutput, NnError> {
        let d = self.model_width();
        let shape = x.shape();
        if shape.len() < 2 || shape.last() != Some(&d) || x.len() != d {
            return Err(NnError::InputShape {
                module: format!("qkv {}", self.prefix),
                expected: format!("one token [1, 1, {d}]"),
                actual: Shape::from(shape),
            });
        }
        let run = || {
            let weights = [self.weights[0].read("qkv")?, self.weights[1].read("qkv")?, self.weights[2].read("qkv")?];
            let views = weights
                .iter()
                .map(|w| MatRef::row_major(w.as_slice(), d, w.shape()[1]))
                .collect::<Result<Vec<_>, _>>()?;
            let mut rows = row_times_matrices(x.as_slice(), &views, true)?;
            if let Some(biases) = &self.biases {
                for (row, bias) in rows.iter_mut().zip(biases) {
                    row.iter_mut().zip(bias.read("qkv")?.as_slice()).for_each(|(y, b)| *y += b);
                }
            }
            let [query, key, value] = [0, 1, 2].map(|i| {
                let mut out_shape = shape.to_vec();
                *out_shape.last_mut().unwrap_or(&mut 0) = rows[i].len();
                constant(&out_shape, &rows[i])
            });
            Ok(QkvOutput { query: query?, key: key?, value: value? })
        };
        run().map_err(NnError::tensor(&self.prefix))
    }

    /// `d`, the width of the input.
    pub fn model_width(&self) -> usize {
        self.weights[0].shape()[0]
    }

    /// The projected width of the query (all heads together, `h · d_h`).
    pub fn head_width(&self) -> usize {
        self.weights[0].shape()[1]
    }

    /// The projected width of key and value (`G · d_h`).
    pub fn kv_width(&self) -> usize {
        self.weights[1].shape()[1]
    }

    /// The weights `[W_Q, W_K, W_V]`.
    pub fn weights(&self) -> &[TensorValue; 3] {
        &self.weights
    }

    /// The biases, if any.
    pub fn biases(&self) -> Option<&[TensorValue; 3]> {
        self.biases.as_ref()
    }

    /// `prefix.query.weight`, `prefix.key.weight`, `prefix.value.weight` (then the biases).
    pub fn parameters(&self) -> Vec<NamedParameter> {
        let mut list: Vec<NamedParameter> = BRANCHES
            .iter()
            .zip(&self.weights)
            .map(|(b, w)| NamedParameter::new(format!("{}.{b}.weight", self.prefix), w.clone()))
            .collect();
        if let Some(bs) = &self.biases {
            list.extend(
                BRANCHES
                    .iter()
                    .zip(bs)
                    .map(|(b, v)| NamedParameter::new(format!("{}.{b}.bias", self.prefix), v.clone())),
            );
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::{GradcheckConfig, concat, constant, gradcheck};
    use crate::tensor::Tensor;

    #[test]
    fn one_token_in_one_pass_equals_the_taped_forward_bitwise() {
        let mut rng = SplitMix64::new(8);
        // 96 × 80 weights take the shared one-row pass; 4 × 6 ones the small-product path
        for (d, q, kv) in [(96, 80, 40), (4, 6, 2)] {
            for bias in [false, true] {
                let qkv = QkvProjections::with_widths("attn", d, q, kv, bias, &mut rng).unwrap();
                let x = Tensor::new(&[1, 1, d], (0..d).map(|i| (i as f64 * 0.7).sin()).collect()).unwrap();
                let taped = qkv.forward(&constant(x.shape(), x.as_slice()).unwrap()).unwrap();
                let token = qkv.forward_token(&x).unwrap();
                for (a, b) in
                    [(taped.query(), token.query()), (taped.key(), token.key()), (taped.value(), token.value())]
                {
                    let (a, b) = (a.value().unwrap(), b.value().unwrap());
                    assert_eq!(a.shape(), b.shape());
                    assert!(a.as_slice().iter().zip(b.as_slice()).all(|(x, y)| x.to_bits() == y.to_bits()));
                }
            }
        }
        let qkv = QkvProjections::with_widths("attn", 4, 6, 2, false, &mut rng).unwrap();
        for shape in [&[2, 1, 4][..], &[1, 1, 5], &[4]] {
            let x = Tensor::zeros(shape).unwrap();
            assert!(matches!(qkv.forward_token(&x), Err(NnError::InputShape { .. })), "{shape:?}");
        }
    }

    #[test]
    fn projections_equal_three_plain_products() {
        let mut rng = SplitMix64::new(2);
        let qkv = QkvProjections::with_widths("attn", 4, 6, 2, true, &mut rng).unwrap();
        let x = constant(&[2, 3, 4], &(0..24).map(|i| (i as f64 * 0.3).cos()).collect::<Vec<_>>()).unwrap();
        let out = qkv.forward(&x).unwrap();
        let bs = qkv.biases().unwrap();
        for (i, got) in [out.query(), out.key(), out.value()].into_iter().enumerate() {
            let want = x.matmul(&qkv.weights()[i]).unwrap().add(&bs[i]).unwrap().value().unwrap();
            assert!(got.value().unwrap().max_abs_diff(&want).unwrap() < 1e-14);
        }
        assert_eq!(out.key().shape(), &[2, 3, 2]);
        let names: Vec<String> = qkv.parameters().iter().map(|p| p.name().to_string()).collect();
        assert_eq!(names[0], "attn.query.weight");
        assert_eq!(names[5], "attn.value.bias");
    }

    #[test]
    fn errors_name_the_branch_and_leave_the_rng() {
        let mut rng = SplitMix64::new(2);
        assert!(QkvProjections::new("a", 0, 4, &mut rng).is_err());
        assert_eq!(rng, SplitMix64::new(2));
        let w = |r, c| crate::parameter(&[r, c], &vec![0.0; r * c]).unwrap();
        let err = QkvProjections::from_weights(w(4, 4), w(4, 2), w(4, 3)).unwrap_err();
        assert!(err.to_string().contains("value weight has shape [4,3]"), "{err}");
        let err = QkvProjections::from_weights(w(4, 4), w(3, 4), w(4, 4)).unwrap_err();
        assert!(err.to_string().contains("key weight"), "{err}");
        let q = QkvProjections::from_weights(w(4, 4), w(4, 4), w(4, 4)).unwrap();
        assert!(matches!(q.forward(&constant(&[2, 3], &[0.0; 6]).unwrap()), Err(NnError::InputShape { .. })));
    }

    #[test]
    fn gradcheck_packed_projections() {
        let mut rng = SplitMix64::new(8);
        let mk = |shape: &[usize], rng: &mut SplitMix64| Tensor::uniform(shape, -1.0, 1.0, rng).unwrap();
        let inputs = vec![
            ("x", mk(&[2, 2, 3], &mut rng)),
            ("wq", mk(&[3, 4], &mut rng)),
            ("wk", mk(&[3, 2], &mut rng)),
            ("wv", mk(&[3, 2], &mut rng)),
        ];
        let r = gradcheck(&inputs, &GradcheckConfig::default(), |v| {
            let qkv = QkvProjections::from_weights(v[1].clone(), v[2].clone(), v[3].clone()).unwrap();
            let out = qkv.forward(&v[0]).unwrap();
            // use all three outputs: Q·[K|V]ᵀ-like mix
            out.query().matmul(&concat(&[out.key(), out.value()], 2)?.transpose(1, 2)?)
        })
        .unwrap();
        assert!(r.passed(), "{r:?}");
        let _ = Tensor::scalar(0.0);
    }
}
