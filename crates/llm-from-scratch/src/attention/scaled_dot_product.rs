//! Scaled dot-product attention, the explicit path: every score is materialised.
//!
//! Chapter 27 (`ch27-scaled-dot-product-attention`) works it by hand; chapter 28
//! (`ch28-causal-masking`) adds the causal mask and the all-masked row.
//!
//! ```text
//! scores  = q · kᵀ / √d_h                 [..., T_q, T_k]
//! masked  = scores with hidden keys → −∞
//! weights = softmax over keys             rows sum to 1; hidden keys get exactly 0
//! output  = weights · v                   [..., T_q, d_v]
//! ```
//!
//! Dividing by `√d_h` keeps the scores of unit order when `q` and `k` have unit-variance
//! coordinates, so the softmax does not saturate as heads get wider.
//!
//! A query row whose keys are all hidden (only possible with padding) has weights of all zeros
//! and therefore an output of zeros: it attends to nothing, and no NaN appears.
//!
//! Hidden keys take no part in the arithmetic ([`TensorValue::matmul_visible`],
//! [`TensorValue::matmul_scores`]): a NaN or ∞ in a token that a query cannot see (a future
//! token, a padding token) leaves that query's output — and, for keys hidden from every query,
//! every gradient — exactly as if the token held ordinary numbers.

use crate::attention::error::AtStage;
use crate::attention::{AttentionError, Stage};
use crate::autodiff::TensorValue;
use crate::nn::SplitMix64;
use crate::tensor::Mask;

/// The intermediate and final values of one attention call.
#[derive(Clone, Debug)]
pub struct AttentionOutput {
    scores: TensorValue,
    weights: TensorValue,
    output: TensorValue,
}

impl AttentionOutput {
    /// `q·kᵀ/√d_h` before masking, `[..., T_q, T_k]`.
    pub fn scores(&self) -> &TensorValue {
        &self.scores
    }
    /// The attention probabilities `[..., T_q, T_k]`.
    pub fn weights(&self) -> &TensorValue {
        &self.weights
    }
    /// `weights · v`, `[..., T_q, d_v]`.
    pub fn output(&self) -> &TensorValue {
        &self.output
    }
}

fn check_shapes(q: &TensorValue, k: &TensorValue, v: &TensorValue) -> Result<(), AttentionError> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let fail = |reason| AttentionError::qkv_shapes(q, k, v, reason);
    if qs.len() < 2 || ks.len() != qs.len() || vs.len() != qs.len() {
        return Err(fail("all three must have the same rank ≥ 2: [..., T, d_h]"));
    }
    let r = qs.len();
    if qs[r - 1] != ks[r - 1] {
        return Err(fail("query and key need the same head width"));
    }
    if ks[r - 2] != vs[r - 2] {
        return Err(fail("key and value need the same number of positions"));
    }
    // key and value share their leading axes; the query's may repeat them (a key/value axis of 1
    // broadcasts over a query axis: grouped and multi-query attention, with no copy of K or V)
    let broadcasts = qs[..r - 2].iter().zip(&ks[..r - 2]).all(|(&q, &k)| q == k || k == 1);
    if ks[..r - 2] != vs[..r - 2] || !broadcasts {
        return Err(fail("leading axes must agree (a key/value axis of 1 may broadcast over the query's)"));
    }
    Ok(())
}

/// Attention of queries `q [..., T_q, d_h]` over keys `k [..., T_k, d_h]` and values
/// `v [..., T_k, d_v]`, hiding the keys where `mask [T_q, T_k]` (or any shape broadcasting to the
/// scores) is true.
///
/// # Shapes
/// `q [..., T_q, d_h]`, `k [..., T_k, d_h]`, `v [..., T_k, d_v]` → scores and weights
/// `[..., T_q, T_k]`, output `[..., T_q, d_v]` (all three in the [`AttentionOutput`]).
///
/// # Errors
/// [`AttentionError::QkvShapes`] if the shapes do not fit; an [`AttentionError::Stage`] error naming
/// the scores, softmax or weighted-values stage (e.g. a mask of the wrong shape, a released input).
///
/// # Example
/// ```
/// use llm_from_scratch::{attention::scaled_dot_product_attention, constant};
/// // one query [1, 0] over keys [1, 0] and [0, 1] with d_h = 2: scores 1/√2 and 0
/// let q = constant(&[1, 2], &[1.0, 0.0])?;
/// let k = constant(&[2, 2], &[1.0, 0.0, 0.0, 1.0])?;
/// let v = constant(&[2, 1], &[10.0, 20.0])?;
/// let out = scaled_dot_product_attention(&q, &k, &v, None)?;
/// let w = out.weights().value()?;
/// let expected = 1.0 / (1.0 + (-(0.5f64).sqrt()).exp()); // softmax of [1/√2, 0]
/// assert!((w.as_slice()[0] - expected).abs() < 1e-15);
/// assert!((w.as_slice().iter().sum::<f64>() - 1.0).abs() < 1e-15);
/// assert_eq!(out.output().shape(), &[1, 1]);
/// assert!(scaled_dot_product_attention(&q, &k, &constant(&[3, 1], &[0.0; 3])?, None).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn scaled_dot_product_attention(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    mask: Option<&Mask>,
) -> Result<AttentionOutput, AttentionError> {
    attend(q, k, v, mask, None, None)
}

/// [`scaled_dot_product_attention`] with optional dropout `(p, rng)` on the weights after the
/// softmax (training only); the returned weights are the ones actually applied to `v`.
pub(crate) fn attend(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    mask: Option<&Mask>,
    sinks: Option<&TensorValue>,
    dropout: Option<(f64, &mut SplitMix64)>,
) -> Result<AttentionOutput, AttentionError> {
    check_shapes(q, k, v)?;
    let r = q.shape().len();
    let d_h = q.shape()[r - 1];
    let scale = 1.0 / (d_h.max(1) as f64).sqrt();
    // scores: [..., T_q, d_h] · [..., d_h, T_k] → [..., T_q, T_k]; with a mask, the hidden
    // pairs take no part in the backward (a hidden key's NaN must not reach a query's gradient)
    if let Some(m) = mask {
        // a mask that does not fit the scores is the softmax's error, reported before any work
        let mut scores_shape = q.shape().to_vec();
        scores_shape[r - 1] = k.shape()[r - 2];
        crate::autodiff::ops::masked_fill::check_mask("masked_softmax", m, &scores_shape).at(Stage::Softmax)?;
    }
    let k_t = k.transpose(r - 2, r - 1).at(Stage::Scores)?;
    let scores = match mask {
        Some(m) => q.matmul_scores(&k_t, m),
        None => q.matmul(&k_t),
    }
    .and_then(|s| s.scale(scale))
    .at(Stage::Scores)?;
    // hidden keys count as −∞ inside the softmax (fused, so no −∞ is stored on the tape)
    let weights = match sinks {
        None => match mask {
            Some(m) => scores.masked_softmax_last_axis(m),
            None => scores.softmax_last_axis(),
        },
        Some(sink) => softmax_with_sink(&scores, sink, mask),
    }
    .at(Stage::Softmax)?;
    let weights = match dropout {
        Some((p, rng)) => weights.dropout(p, rng).at(Stage::Softmax)?,
        None => weights,
    };
    // hidden keys are skipped, not multiplied by their zero weight: 0 · NaN would be NaN
    let output = match mask {
        Some(m) => weights.matmul_visible(v, m),
        None => weights.matmul(v),
    }
    .at(Stage::WeightedValues)?;
    Ok(AttentionOutput { scores, weights, output })
}

/// Softmax over `[scores | sink]`, where the sink logit (broadcast to one extra column) is never
/// masked and has a zero value vector: the returned weights over the real keys sum to
/// `1 − p_sink`.
fn softmax_with_sink(
    scores: &TensorValue,
    sink: &TensorValue,
    mask: Option<&Mask>,
) -> Result<TensorValue, crate::TensorAutodiffError> {
    let r = scores.shape().len();
    let mut column_shape = scores.shape().to_vec();
    column_shape[r - 1] = 1;
    let zeros = crate::autodiff::constant(&column_shape, &vec![0.0; column_shape.iter().product()])?;
    let column = zeros.add(sink)?; // [..., T_q, 1]: the sink logit in every row
    let extended = crate::autodiff::concat(&[scores, &column], r - 1)?; // [..., T_q, T_k + 1]
    let t_k = scores.shape()[r - 1];
    let weights = match mask {
        Some(m) => extended.masked_softmax_last_axis(&m.with_open_column()?)?,
        None => extended.softmax_last_axis()?,
    };
    weights.slice_axis(r - 1, 0, t_k)
}

/// Causal self-attention on `[lanes, T, d_h]` (or any `[..., T, d_h]`): query `i` sees keys
/// `0..=i`, so no token reads the future.
///
/// # Shapes
/// `q, k, v [..., T, d_h]` → weights `[..., T, T]` (zero above the diagonal), output `[..., T, d_h]`.
///
/// # Example
/// ```
/// use llm_from_scratch::{constant, attention::causal_scaled_dot_product_self_attention};
/// // Two tokens, one lane; the first query can only see itself.
/// let q = constant(&[1, 2, 2], &[1.0, 0.0, 0.0, 1.0])?;
/// let out = causal_scaled_dot_product_self_attention(&q, &q, &q)?;
/// assert_eq!(out.weights().value()?.as_slice()[..2], [1.0, 0.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// As [`scaled_dot_product_attention`]; the three inputs must have the same number of tokens.
pub fn causal_scaled_dot_product_self_attention(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
) -> Result<AttentionOutput, AttentionError> {
    check_shapes(q, k, v)?;
    let r = q.shape().len();
    let (t_q, t_k) = (q.shape()[r - 2], k.shape()[r - 2]);
    if t_q != t_k {
        return Err(AttentionError::qkv_shapes(q, k, v, "self-attention needs as many queries as keys"));
    }
    let mask = Mask::causal(t_q, t_k, 0).at(Stage::Softmax)?;
    scaled_dot_product_attention(q, k, v, Some(&mask))
}

/// The explicit path of grouped attention: `q [B,H,T_q,d]` over `k, v [B,G,T_k,d]` with the
/// visibility rules of [`crate::attention::Visibility`] and optional per-head sink logits `[H]`.
/// It materialises every score; [`crate::attention::tiled_attention`] computes the same without.
///
/// # Shapes
/// Scores and weights `[B,H,T_q,T_k]`, output `[B,H,T_q,d]`.
///
/// # Errors
/// [`AttentionError::QkvShapes`] if the shapes do not fit; [`AttentionError::Stage`] errors as in
/// [`scaled_dot_product_attention`].
///
/// # Example
/// ```
/// use llm_from_scratch::attention::{Visibility, grouped_attention};
/// use llm_from_scratch::constant;
/// // 2 query heads share 1 key/value head (G = 1: multi-query attention), 3 tokens of width 2
/// let q = constant(&[1, 2, 3, 2], &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])?;
/// let kv = constant(&[1, 1, 3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0])?;
/// let out = grouped_attention(&q, &kv, &kv, None, &Visibility::default())?;
/// assert_eq!(out.weights().shape(), &[1, 2, 3, 3]);
/// assert_eq!(out.output().shape(), &[1, 2, 3, 2]);
/// // causal: the first token of each head sees only itself, and so returns its own value [1, 0]
/// let o = out.output().value()?;
/// assert_eq!((&o.as_slice()[..2], &o.as_slice()[6..8]), (&[1.0, 0.0][..], &[1.0, 0.0][..]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn grouped_attention(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    visibility: &crate::attention::Visibility,
) -> Result<AttentionOutput, AttentionError> {
    grouped_attention_with(q, k, v, sinks, visibility, None)
}

/// [`grouped_attention`] with optional dropout on the weights.
pub(crate) fn grouped_attention_with(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    visibility: &crate::attention::Visibility,
    dropout: Option<(f64, &mut SplitMix64)>,
) -> Result<AttentionOutput, AttentionError> {
    let (qs, ks) = (q.shape(), k.shape());
    if qs.len() != 4 || ks.len() != 4 || ks[1] == 0 || qs[1] % ks[1] != 0 || k.shape() != v.shape() {
        return Err(AttentionError::qkv_shapes(
            q,
            k,
            v,
            "grouped attention needs q [B,H,T_q,d] and k = v shapes [B,G,T_k,d] with G dividing H",
        ));
    }
    let (b, h, t_q, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (g, t_k) = (ks[1], ks[2]);
    // [B,H,T_q,d] → [B,G,H/G,T_q,d]; keys and values [B,G,1,T_k,d] broadcast over each group
    let q5 = q.reshape(&[b, g, h / g, t_q, d]).at(Stage::Scores)?;
    let k5 = k.reshape(&[b, g, 1, t_k, ks[3]]).at(Stage::Scores)?;
    let v5 = v.reshape(&[b, g, 1, t_k, ks[3]]).at(Stage::WeightedValues)?;
    let sink5 = sinks.map(|s| s.reshape(&[1, g, h / g, 1, 1])).transpose().at(Stage::Softmax)?; // [H] → [1,G,H/G,1,1]
    let end = visibility
        .query_offset
        .checked_add(t_q)
        .ok_or(AttentionError::PositionOverflow { offset: visibility.query_offset, tokens: t_q })?;
    let queries: Vec<usize> = (visibility.query_offset..end).collect();
    let keys: Vec<usize> = (0..t_k).collect();
    let mask = match &visibility.key_padding {
        Some(p) => {
            crate::attention::attention_mask(&queries.repeat(b), &keys.repeat(b), b, Some(p), visibility.window)?
        }
        None => crate::attention::attention_mask(&queries, &keys, 1, None, visibility.window)?,
    };
    let out = attend(&q5, &k5, &v5, Some(&mask), sink5.as_ref(), dropout)?;
    let to_heads = |x: &TensorValue, last: usize| x.reshape(&[b, h, t_q, last]); // [B,G,H/G,T_q,·] → [B,H,T_q,·]
    Ok(AttentionOutput {
        scores: to_heads(out.scores(), t_k).at(Stage::Scores)?,
        weights: to_heads(out.weights(), t_k).at(Stage::Softmax)?,
        output: to_heads(out.output(), d).at(Stage::WeightedValues)?,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::nn::SplitMix64;
    use crate::tensor::Tensor;

    fn stage_source(e: AttentionError) -> crate::TensorAutodiffError {
        match e {
            AttentionError::Stage { source, .. } => source,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn hand_example_three_tokens() {
        // q = k = v = [1,0], [0,1], [1,1]/√… chosen so the scores are easy:
        // token 1: scores to keys 0,1 = (0·1+1·0)/√2 = 0 and (0·0+1·1)/√2 = 1/√2
        let x = constant(&[1, 3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]).unwrap();
        let out = causal_scaled_dot_product_self_attention(&x, &x, &x).unwrap();
        let w = out.weights().value().unwrap();
        let w = w.as_slice();
        assert_eq!(&w[..3], &[1.0, 0.0, 0.0]);
        let e = (1.0 / 2f64.sqrt()).exp();
        assert!((w[3] - 1.0 / (1.0 + e)).abs() < 1e-15 && (w[4] - e / (1.0 + e)).abs() < 1e-15);
        assert_eq!(w[5], 0.0, "masked probabilities are exactly zero");
        assert_eq!(out.scores().value().unwrap().as_slice()[4], 1.0 / 2f64.sqrt());
    }

    #[test]
    fn fully_masked_rows_give_zeros_not_nan() {
        let x = constant(&[1, 2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let all = Mask::new(&[2, 2], vec![true, true, false, false]).unwrap();
        let out = scaled_dot_product_attention(&x, &x, &x, Some(&all)).unwrap();
        let o = out.output().value().unwrap();
        assert_eq!(&o.as_slice()[..2], &[0.0, 0.0]);
        assert!(o.all_finite());
    }

    #[test]
    fn shape_errors_name_every_operand() {
        let q = constant(&[1, 3, 2], &[0.0; 6]).unwrap();
        let k = constant(&[1, 3, 4], &[0.0; 12]).unwrap();
        let err = causal_scaled_dot_product_self_attention(&q, &k, &k).unwrap_err();
        assert_eq!(
            err.to_string(),
            "attention: query [1,3,2], key [1,3,4], value [1,3,4] do not fit (query and key need the same head width)"
        );
        let short = constant(&[1, 2, 2], &[0.0; 4]).unwrap();
        assert!(matches!(
            causal_scaled_dot_product_self_attention(&q, &short, &short),
            Err(AttentionError::QkvShapes { .. })
        ));
        let bad_mask = Mask::causal(2, 2, 0).unwrap();
        let err = scaled_dot_product_attention(&q, &q, &q, Some(&bad_mask)).unwrap_err();
        assert!(err.to_string().starts_with("attention softmax: masked_softmax"), "{err}");
        q.release();
        let err = causal_scaled_dot_product_self_attention(&q, &q, &q).unwrap_err();
        assert!(matches!(err, AttentionError::Stage { stage: Stage::Scores, .. }), "{err}");
    }

    #[test]
    fn gradcheck_causal_attention() {
        let mut rng = SplitMix64::new(21);
        let mut mk = |shape: &[usize]| {
            let n = shape.iter().product();
            Tensor::new(shape, (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()).unwrap()
        };
        let inputs = vec![("q", mk(&[2, 4, 3])), ("k", mk(&[2, 4, 3])), ("v", mk(&[2, 4, 2]))];
        let r = gradcheck(&inputs, &GradcheckConfig::default(), |v| {
            causal_scaled_dot_product_self_attention(&v[0], &v[1], &v[2])
                .map(|o| o.output().clone())
                .map_err(stage_source)
        })
        .unwrap();
        assert!(r.passed(), "{r:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn perturbing_token_t_never_changes_earlier_outputs(t in 2usize..6, which in 0usize..6, seed in any::<u64>(), bump in -3.0f64..3.0) {
            let which = which % t;
            let mut rng = SplitMix64::new(seed);
            let values: Vec<f64> = (0..t * 4).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let mut changed = values.clone();
            for c in 0..4 { changed[which * 4 + c] += bump; }
            let run = |vals: &[f64]| {
                let x = constant(&[1, t, 4], vals).unwrap();
                causal_scaled_dot_product_self_attention(&x, &x, &x).unwrap().output().value().unwrap()
            };
            let (a, b) = (run(&values), run(&changed));
            for i in 0..which * 4 {
                prop_assert_eq!(a.as_slice()[i].to_bits(), b.as_slice()[i].to_bits());
            }
        }
    }
}
