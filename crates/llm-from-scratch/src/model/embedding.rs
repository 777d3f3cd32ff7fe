//! [`TokenEmbedding`]: token ids → vectors, the first layer of the decoder.

use crate::autodiff::TensorValue;
use crate::error::Shape;
use crate::model::ModelError;
use crate::nn::{NamedParameter, NnError, SplitMix64};
use crate::tensor::Tensor;

/// A table `[V, d]` whose row `i` is the vector of token `i`.
///
/// # Shapes
/// ids `[B, T]` → `[B, T, d]`.
///
/// # Errors
/// [`TokenEmbedding::new`]: [`ModelError::InvalidSetting`] for a zero size or a bad `std`;
/// [`TokenEmbedding::forward`]: [`ModelError::BatchShape`] and [`ModelError::TokenOutOfRange`].
///
/// # Example
/// ```
/// use llm_from_scratch::model::TokenEmbedding;
/// use llm_from_scratch::nn::SplitMix64;
/// let embed = TokenEmbedding::new("model.embed_tokens", 5, 3, 0.02, &mut SplitMix64::new(0))?;
/// let x = embed.forward(&[4, 0, 4], [1, 3])?; // one sequence of three tokens
/// assert_eq!(x.shape(), &[1, 3, 3]);
/// let rows = x.value()?;
/// assert_eq!(rows.as_slice()[..3], rows.as_slice()[6..]); // token 4 twice: the same row
/// assert!(embed.forward(&[5], [1, 1]).is_err()); // id 5 ≥ V = 5
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
#[derive(Clone, Debug)]
pub struct TokenEmbedding {
    name: String,
    weight: TensorValue,
}

/// Rejects the first id at or past `vocab`, naming its index in the batch.
///
/// # Errors
/// [`ModelError::TokenOutOfRange`].
pub(crate) fn check_ids(what: &'static str, ids: &[usize], vocab: usize) -> Result<(), ModelError> {
    match ids.iter().enumerate().find(|&(_, &id)| id >= vocab) {
        Some((index, &id)) => Err(ModelError::TokenOutOfRange { what, index, id, vocab }),
        None => Ok(()),
    }
}

impl TokenEmbedding {
    /// A table named `name.weight` with entries drawn from `N(0, std²)`.
    ///
    /// # Errors
    /// [`ModelError::InvalidSetting`] for a zero size or a negative or non-finite `std`; the
    /// generator is then untouched.
    pub fn new(name: &str, vocab: usize, width: usize, std: f64, rng: &mut SplitMix64) -> Result<Self, ModelError> {
        if vocab == 0 || width == 0 {
            return Err(ModelError::setting(
                "model config",
                "embedding size",
                format!("{vocab}×{width}"),
                "needs V, d > 0",
            ));
        }
        if !(std >= 0.0 && std.is_finite()) {
            return Err(ModelError::setting("model config", "embedding_init_std", std, "must be finite and ≥ 0"));
        }
        crate::tensor::dense::element_count("embedding", &[vocab, width])?;
        let values = (0..vocab * width).map(|_| std * rng.normal()).collect();
        Self::from_weight(name, TensorValue::leaf(Tensor::new(&[vocab, width], values)?, true))
    }

    /// An embedding from an existing table leaf `[V, d]`.
    ///
    /// # Errors
    /// [`ModelError::Nn`] (a parameter-shape error) if the table is not rank 2 with both axes > 0.
    pub fn from_weight(name: &str, weight: TensorValue) -> Result<Self, ModelError> {
        let s = weight.shape();
        if s.len() != 2 || s[0] == 0 || s[1] == 0 {
            return Err(ModelError::Nn(NnError::ParameterShape {
                module: format!("embedding {name}"),
                name: "weight",
                expected: "[V, d] with V, d > 0".into(),
                actual: Shape::from(s),
            }));
        }
        Ok(Self { name: name.to_string(), weight })
    }

    /// The vectors of `ids` (row-major, `B·T` of them) as `[B, T, d]`.
    ///
    /// # Errors
    /// [`ModelError::BatchShape`] if `ids` does not fill `shape`; [`ModelError::TokenOutOfRange`]
    /// for an id `≥ V`; a tensor error if the table was released.
    pub fn forward(&self, ids: &[usize], shape: [usize; 2]) -> Result<TensorValue, ModelError> {
        let expected = shape[0].checked_mul(shape[1]);
        if expected != Some(ids.len()) {
            return Err(ModelError::BatchShape {
                what: "inputs",
                shape: Shape(shape.to_vec()),
                expected: expected.unwrap_or(usize::MAX),
                actual: ids.len(),
            });
        }
        check_ids("input token", ids, self.vocab_size())?;
        Ok(self.weight.embedding(ids, &shape)?) // [B, T] ids → [B, T, d]
    }

    /// `V`.
    pub fn vocab_size(&self) -> usize {
        self.weight.shape()[0]
    }

    /// `d`.
    pub fn width(&self) -> usize {
        self.weight.shape()[1]
    }

    /// The table leaf `[V, d]`.
    pub fn weight(&self) -> &TensorValue {
        &self.weight
    }

    /// `name.weight`.
    pub fn parameters(&self) -> Vec<NamedParameter> {
        vec![NamedParameter::new(format!("{}.weight", self.name), self.weight.clone())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_and_errors() {
        let mut rng = SplitMix64::new(4);
        let e = TokenEmbedding::new("model.embed_tokens", 5, 3, 0.02, &mut rng).unwrap();
        assert_eq!(e.parameters()[0].name(), "model.embed_tokens.weight");
        let x = e.forward(&[4, 0, 1, 4], [2, 2]).unwrap().value().unwrap();
        let table = e.weight().value().unwrap();
        assert_eq!(&x.as_slice()[..3], &table.as_slice()[12..15]);
        let err = e.forward(&[4, 5], [1, 2]).unwrap_err();
        assert_eq!(err.to_string(), "model input: input token 5 at index 1 is outside the vocabulary of 5 tokens");
        let err = e.forward(&[0, 1, 2], [2, 2]).unwrap_err();
        assert_eq!(err.to_string(), "model input: inputs holds 3 entries but the batch shape [2,2] needs 4");
        let before = rng.clone();
        assert!(TokenEmbedding::new("e", 0, 3, 0.02, &mut rng).is_err());
        assert!(TokenEmbedding::new("e", 2, 3, f64::NAN, &mut rng).is_err());
        assert_eq!(rng, before);
    }
}
