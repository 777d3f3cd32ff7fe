//! [`TokenBatch`]: inputs and next-token targets of `B` sequences of `T` tokens.

use crate::error::Shape;
use crate::model::ModelError;

/// `B` rows of `T` input tokens and, per position, the token that should come next (`None` where
/// the position is not scored).
///
/// ```
/// use llm_from_scratch::model::TokenBatch;
/// // "3 1 | 3 1" (separator 9): only the copied half is scored
/// let batch = TokenBatch::next_token(&[vec![3, 1, 9, 3, 1]], 2)?;
/// assert_eq!(batch.inputs(), &[3, 1, 9, 3]);
/// assert_eq!(batch.targets(), &[None, None, Some(3), Some(1)]);
/// assert_eq!(batch.shape(), [1, 4]);
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBatch {
    inputs: Vec<usize>,
    targets: Vec<Option<usize>>,
    shape: [usize; 2],
}

impl TokenBatch {
    /// A batch of shape `[B, T]` from row-major inputs and targets.
    ///
    /// # Errors
    /// [`ModelError::BatchShape`] if either list does not hold `B·T` entries.
    pub fn new(inputs: Vec<usize>, targets: Vec<Option<usize>>, shape: [usize; 2]) -> Result<Self, ModelError> {
        let expected = shape[0].saturating_mul(shape[1]);
        for (what, actual) in [("inputs", inputs.len()), ("targets", targets.len())] {
            if actual != expected {
                return Err(ModelError::BatchShape { what, shape: Shape(shape.to_vec()), expected, actual });
            }
        }
        Ok(Self { inputs, targets, shape })
    }

    /// Next-token pairs of equally long sequences: input position `p` holds `s[p]` and, when
    /// `p ≥ first_scored`, the target `s[p + 1]`. Each sequence of `n` tokens gives `T = n − 1`.
    ///
    /// # Errors
    /// [`ModelError::InvalidSetting`] if there is no sequence or the first has fewer than 2
    /// tokens; [`ModelError::BatchShape`] if the lengths differ.
    pub fn next_token(sequences: &[Vec<usize>], first_scored: usize) -> Result<Self, ModelError> {
        let n = sequences.first().map_or(0, Vec::len);
        if n < 2 {
            return Err(ModelError::setting("model input", "sequence length", n, "needs at least 2 tokens"));
        }
        if let Some(bad) = sequences.iter().find(|s| s.len() != n) {
            let shape = Shape(vec![sequences.len(), n]);
            return Err(ModelError::BatchShape { what: "sequences", shape, expected: n, actual: bad.len() });
        }
        let t = n - 1;
        let mut inputs = Vec::with_capacity(sequences.len() * t);
        let mut targets = Vec::with_capacity(sequences.len() * t);
        for s in sequences {
            inputs.extend_from_slice(&s[..t]);
            targets.extend((0..t).map(|p| (p >= first_scored).then_some(s[p + 1])));
        }
        Self::new(inputs, targets, [sequences.len(), t])
    }

    /// Row-major input ids, `B·T` of them.
    pub fn inputs(&self) -> &[usize] {
        &self.inputs
    }

    /// Row-major targets, `None` where not scored.
    pub fn targets(&self) -> &[Option<usize>] {
        &self.targets
    }

    /// `[B, T]`.
    pub fn shape(&self) -> [usize; 2] {
        self.shape
    }

    /// Number of scored positions.
    pub fn scored(&self) -> usize {
        self.targets.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_errors() {
        let err = TokenBatch::new(vec![1, 2, 3], vec![None; 4], [2, 2]).unwrap_err();
        assert_eq!(err.to_string(), "model input: inputs holds 3 entries but the batch shape [2,2] needs 4");
        let err = TokenBatch::next_token(&[vec![1, 2, 3], vec![1, 2]], 0).unwrap_err();
        assert_eq!(err.to_string(), "model input: sequences holds 2 entries but the batch shape [2,3] needs 3");
        assert!(TokenBatch::next_token(&[vec![1]], 0).is_err());
        assert!(TokenBatch::next_token(&[], 0).is_err());
        let b = TokenBatch::next_token(&[vec![1, 2, 3], vec![4, 5, 6]], 1).unwrap();
        assert_eq!((b.scored(), b.targets()), (2, &[None, Some(3), None, Some(6)][..]));
    }
}
