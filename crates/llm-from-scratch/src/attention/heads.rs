//! Splitting the model width into heads and merging them back — both on the tape.
//!
//! Chapter 30 (`ch30-multi-head-attention`) uses both for its figure; chapter 32 merges heads by hand.
//!
//! # Shapes
//! `split_heads`: `[B, T, h·d_h] → [B, T, h, d_h]` (reshape) `→ [B, h, T, d_h]` (transpose).
//! `merge_heads`: the inverse. Split then merge is bitwise the identity: both only move values.

use crate::attention::error::AtStage;
use crate::attention::{AttentionError, Branch, Stage};
use crate::autodiff::TensorValue;
use crate::error::Shape;

/// Cuts the model width into `heads` heads and moves the head axis before the tokens.
///
/// # Shapes
/// `[B, T, h·d_h] → [B, h, T, d_h]`.
///
/// # Errors
/// [`AttentionError::HeadShape`] if `x` is not rank 3, `heads` is 0 or does not divide the last
/// axis; an [`AttentionError::Stage`] error if `x` was released.
///
/// # Example
/// ```
/// use llm_from_scratch::attention::{merge_heads, split_heads};
/// use llm_from_scratch::constant;
/// // 2 tokens of width 4 = 2 heads of width 2: head 0 holds coordinates 0..2 of every token
/// let x = constant(&[1, 2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])?;
/// let heads = split_heads(&x, 2)?;
/// assert_eq!(heads.shape(), &[1, 2, 2, 2]);
/// assert_eq!(heads.value()?.as_slice(), &[1.0, 2.0, 5.0, 6.0, 3.0, 4.0, 7.0, 8.0]);
/// assert!(merge_heads(&heads)?.value()?.bitwise_eq(&x.value()?)); // merge undoes split
/// assert!(split_heads(&x, 3).is_err()); // 3 does not divide 4
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn split_heads(x: &TensorValue, heads: usize) -> Result<TensorValue, AttentionError> {
    split_heads_of(x, heads, None)
}

/// [`split_heads`] whose stage errors name the branch being split.
pub(crate) fn split_heads_of(
    x: &TensorValue,
    heads: usize,
    branch: Option<Branch>,
) -> Result<TensorValue, AttentionError> {
    let shape = x.shape();
    if shape.len() != 3 || heads == 0 || !shape[2].is_multiple_of(heads) {
        return Err(AttentionError::HeadShape { op: "split_heads", shape: Shape::from(shape), heads });
    }
    let (b, t, d_h) = (shape[0], shape[1], shape[2] / heads);
    let run = || {
        x.reshape(&[b, t, heads, d_h])? // [B, T, h, d_h]
            .transpose(1, 2) // [B, h, T, d_h]
    };
    run().at(Stage::SplitHeads(branch))
}

/// Puts the heads side by side again: the inverse of [`split_heads`].
///
/// # Shapes
/// `[B, h, T, d_h] → [B, T, h·d_h]`.
///
/// # Errors
/// [`AttentionError::HeadShape`] if `x` is not rank 4; an [`AttentionError::Stage`] error if it was
/// released.
///
/// # Example
/// ```
/// use llm_from_scratch::{attention::merge_heads, constant};
/// let heads = constant(&[1, 2, 1, 2], &[1.0, 2.0, 3.0, 4.0])?; // 2 heads, 1 token
/// assert_eq!(merge_heads(&heads)?.value()?.as_slice(), &[1.0, 2.0, 3.0, 4.0]);
/// assert!(merge_heads(&constant(&[2, 2], &[0.0; 4])?).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn merge_heads(x: &TensorValue) -> Result<TensorValue, AttentionError> {
    let shape = x.shape();
    if shape.len() != 4 {
        return Err(AttentionError::HeadShape {
            op: "merge_heads",
            shape: Shape::from(shape),
            heads: shape.get(1).copied().unwrap_or(0),
        });
    }
    let (b, h, t, d_h) = (shape[0], shape[1], shape[2], shape[3]);
    let run = || {
        x.transpose(1, 2)? // [B, T, h, d_h]
            .reshape(&[b, t, h * d_h]) // [B, T, h·d_h]
    };
    run().at(Stage::MergeHeads)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::Tensor;

    #[test]
    fn split_by_hand_and_errors() {
        // one token [a0,a1,b0,b1] with 2 heads: head 0 = [a0,a1], head 1 = [b0,b1]
        let x = constant(&[1, 2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).unwrap();
        let s = split_heads(&x, 2).unwrap().value().unwrap();
        assert_eq!(s.shape(), &[1, 2, 2, 2]);
        assert_eq!(s.as_slice(), &[1.0, 2.0, 5.0, 6.0, 3.0, 4.0, 7.0, 8.0]);
        assert_eq!(
            split_heads(&x, 3).unwrap_err().to_string(),
            "split_heads: shape [1,2,4] cannot be rearranged into 3 heads"
        );
        assert!(split_heads(&x, 0).is_err());
        assert!(merge_heads(&x).is_err());
        assert!(matches!(split_heads(&constant(&[4], &[0.0; 4]).unwrap(), 2), Err(AttentionError::HeadShape { .. })));
    }

    #[test]
    fn gradcheck_split_then_merge() {
        let x = Tensor::new(&[2, 3, 4], (0..24).map(|i| (i as f64).sqrt()).collect()).unwrap();
        let r = gradcheck(&[("x", x)], &GradcheckConfig::default(), |v| {
            let s = split_heads(&v[0], 2).unwrap();
            // scale head axis differently so the adjoint route matters
            merge_heads(&s.mul(&crate::constant(&[2, 1, 1], &[1.0, -2.0])?)?).map_err(|e| match e {
                AttentionError::Stage { source, .. } => source,
                other => panic!("{other}"),
            })
        })
        .unwrap();
        assert!(r.passed(), "{r:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn split_then_merge_is_bitwise_identity(b in 1usize..3, t in 1usize..5, heads in 1usize..4, d_h in 1usize..4, seed in any::<u64>()) {
            let mut rng = crate::nn::SplitMix64::new(seed);
            let values: Vec<f64> = (0..b * t * heads * d_h).map(|_| rng.normal()).collect();
            let x = constant(&[b, t, heads * d_h], &values).unwrap();
            let back = merge_heads(&split_heads(&x, heads).unwrap()).unwrap().value().unwrap();
            prop_assert!(back.bitwise_eq(&x.value().unwrap()));
        }
    }
}
