//! Chapter 28 — causal masking: no token reads the future.
//!
//! A language model predicts token `t + 1` from tokens `0..=t`. If the attention of token `t`
//! could read token `t + 1`, training would teach it to copy the answer. The *causal mask* hides,
//! for the query at position `i`, every key at a position `j > i`:
//!
//! ```text
//! mask[i][j] = (j > i)                    true = hidden            [T, T]
//! S'[i][j]   = −∞ if mask[i][j] else S[i][j]
//! P[i][j]    = e^{S'[i][j]} / Σ_l e^{S'[i][l]}    (e^{−∞} = 0: a hidden key gets exactly 0)
//! O[i]       = Σ_{j ≤ i} P[i][j] · v_j
//! ```
//!
//! Filling with −∞ *before* the softmax (rather than zeroing weights after it) keeps every row a
//! proper distribution over the keys it may see: the row still sums to 1. For a `4 × 4` mask,
//! printed with `x` for hidden and `.` for visible:
//!
//! ```text
//! .xxx    query 0 sees key 0
//! ..xx    query 1 sees keys 0, 1
//! ...x    query 2 sees keys 0, 1, 2
//! ....    query 3 sees everything
//! ```
//!
//! Consequence: output `i` is a function of tokens `0..=i` only, so changing the last token
//! cannot change any earlier output — not even in the last bit, because the hidden weights are
//! exactly `0.0` and `0.0 · v` adds exactly nothing. Without the mask the same change moves every
//! row.
//!
//! Masks are built from *absolute* positions: when queries start at position `offset` (decoding
//! with a cache), query `i` sees keys `0..=offset + i`. A padding mask hides pad tokens as keys;
//! a query that ends up with no visible key at all (a pad at the front) gets weights of zeros and
//! an output of zeros — a defined answer instead of the `0/0 = NaN` of the bare formula.
#![doc = demo_support::chapter_page!(
    "ch28-causal-masking",
    "[`causal_scaled_dot_product_self_attention`](../llm_from_scratch/attention/fn.causal_scaled_dot_product_self_attention.html), [`Mask`](../llm_from_scratch/tensor/struct.Mask.html) and [`scaled_dot_product_attention`](../llm_from_scratch/attention/fn.scaled_dot_product_attention.html)",
    ("chapter 27", "ch27_scaled_dot_product_attention"),
    ("chapter 29", "ch29_rotary_position_embedding")
)]

use demo_support::evidence::{DemoResult, rejection};

use demo_support::report::{fmt_gradcheck, fmt_mask_rows, fmt_tensor, fmt_values};
use llm_from_scratch::attention::{causal_scaled_dot_product_self_attention, scaled_dot_product_attention};
use llm_from_scratch::nn::SplitMix64;
use llm_from_scratch::{GradcheckConfig, GradcheckReport, Mask, Tensor, TensorValue, gradcheck};

mod figure;
pub use figure::{render_svg, render_thumbnail};

/// Tokens `[T, d_h] = [4, 2]`: chapter 27's three tokens plus `x3 = [−1, 1]`.
const TOKENS: [f64; 8] = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, -1.0, 1.0];
/// `T`.
const TOKEN_COUNT: usize = 4;
/// `d_h`.
const HEAD_WIDTH: usize = 2;
/// The replacement for the last token in the prefix proof.
const CHANGED_LAST_TOKEN: [f64; 2] = [5.0, -3.0];
/// Seed of the gradient check's random inputs.
const SEED: u64 = 28;

/// What the chapter computes; `render_report` prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// The token rows `[4, 2]`, used as queries, keys and values.
    pub tokens: Tensor,
    /// `Mask::causal(4, 4, 0)`: true above the diagonal.
    pub causal_mask: Mask,
    /// `Mask::causal(2, 4, 2)`: two queries at absolute positions 2 and 3 over keys 0..4.
    pub offset_mask: Mask,
    /// `q·kᵀ/√d_h` before masking, `[4, 4]`.
    pub scores: Tensor,
    /// The scores after `masked_fill(mask, −∞)`.
    pub masked_scores: Tensor,
    /// The weights, `[4, 4]`, exactly 0 above the diagonal.
    pub weights: Tensor,
    /// Masked entries whose weight is exactly `0.0`, and the number of masked entries.
    pub masked_zeros: (usize, usize),
    /// The sum of each weight row.
    pub weight_row_sums: Vec<f64>,
    /// The output `[4, 2]`.
    pub output: Tensor,
    /// Whether masked_fill → softmax → matmul by hand equals the library function (weights and
    /// output) bit for bit.
    pub explicit_matches_library: bool,
    /// The output after replacing the last token by `[5, −3]`.
    pub changed_output: Tensor,
    /// Output rows bitwise unchanged by that replacement (expected: 0, 1, 2).
    pub unchanged_rows: Vec<usize>,
    /// Row 0 of the output *without* a mask, before and after the replacement.
    pub unmasked_row0: (Vec<f64>, Vec<f64>),
    /// The mask of a sequence whose token 0 is padding: causal, and key 0 hidden for everyone.
    pub padding_mask: Mask,
    /// The weights under the padding mask (row 0 has no visible key).
    pub padded_weights: Tensor,
    /// The output under the padding mask (row 0 is zeros).
    pub padded_output: Tensor,
    /// Gradient check of causal attention on random `q, k [2,4,3]`, `v [2,4,2]`.
    pub gradcheck_causal: GradcheckReport,
    /// Gradient check of attention under the padding mask (with its fully masked row).
    pub gradcheck_padded: GradcheckReport,
    /// `(case, message)` of inputs the library rejects.
    pub errors: Vec<(&'static str, String)>,
}

/// Computes the chapter's evidence through the library.
///
/// # Errors
/// Any library error (none is expected), or an error case that the library unexpectedly accepts.
pub fn learner_evidence() -> DemoResult<Evidence> {
    let tokens = Tensor::new(&[TOKEN_COUNT, HEAD_WIDTH], TOKENS.to_vec())?;
    let causal_mask = Mask::causal(TOKEN_COUNT, TOKEN_COUNT, 0)?;
    let explicit = explicit_causal(&tokens, &causal_mask)?;
    let (weights, output) = causal_self_attention(&tokens)?;
    let changed = with_last_token(&tokens, &CHANGED_LAST_TOKEN)?;
    let (_, changed_output) = causal_self_attention(&changed)?;
    let padding_mask = left_padding_mask(TOKEN_COUNT, 1)?;
    let x = TensorValue::leaf(tokens.clone(), false);
    let padded = scaled_dot_product_attention(&x, &x, &x, Some(&padding_mask))?;
    let mut rng = SplitMix64::new(SEED);
    Ok(Evidence {
        masked_zeros: count_masked_zeros(&explicit.weights, &causal_mask),
        weight_row_sums: explicit.weights.as_slice().chunks(TOKEN_COUNT).map(|r| r.iter().sum()).collect(),
        explicit_matches_library: explicit.weights.bitwise_eq(&weights) && explicit.output.bitwise_eq(&output),
        unchanged_rows: bitwise_equal_rows(&output, &changed_output),
        unmasked_row0: (unmasked_row0(&tokens)?, unmasked_row0(&changed)?),
        offset_mask: Mask::causal(2, TOKEN_COUNT, 2)?,
        padded_weights: padded.weights().value()?,
        padded_output: padded.output().value()?,
        gradcheck_causal: check_causal(&mut rng)?,
        gradcheck_padded: check_padded(&tokens, &padding_mask)?,
        errors: error_cases(&tokens)?,
        tokens,
        causal_mask,
        scores: explicit.scores,
        masked_scores: explicit.masked_scores,
        weights: explicit.weights,
        output,
        changed_output,
        padding_mask,
    })
}

/// The masked attention of the worked example built from primitives.
struct Explicit {
    scores: Tensor,
    masked_scores: Tensor,
    weights: Tensor,
    output: Tensor,
}

// Hand derivation, tokens x0 = [1,0], x1 = [0,1], x2 = [1,1], x3 = [−1,1], q = k = v = x,
// 1/√2 = 0.707107, e^{−0.707107} = 0.493069:
//   row 0: only key 0 is visible → weights [1,0,0,0], output x0 = [1,0]
//   row 1: visible scores [0, 0.707107] → [0.493069, 1] / 1.493069 = [0.330238, 0.669762]
//          output [0.330238, 0.669762]
//   row 2: visible scores [0.707107, 0.707107, 1.414214] — exactly chapter 27's last row, so the
//          same weights [0.248255, 0.248255, 0.503490] and output [0.751745, 0.751745]
//   row 3: scores [−1, 1, 0, 2]/√2 → subtract 1.414214 → [0.119873, 0.493069, 0.243117, 1],
//          sum 1.856059 → weights [0.064585, 0.265654, 0.130985, 0.538776],
//          output 0.064585·[1,0] + 0.265654·[0,1] + 0.130985·[1,1] + 0.538776·[−1,1]
//                 = [0.064585 + 0.130985 − 0.538776, 0.265654 + 0.130985 + 0.538776]
//                 = [−0.343206, 0.935415]
// The six entries above the diagonal are −∞ after the fill and exactly 0.0 after the softmax.
fn explicit_causal(tokens: &Tensor, mask: &Mask) -> DemoResult<Explicit> {
    let x = TensorValue::leaf(tokens.clone(), false);
    let scores = x.matmul(&x.transpose(0, 1)?)?.scale(1.0 / (HEAD_WIDTH as f64).sqrt())?; // [T, T]
    let masked = scores.masked_fill(mask, f64::NEG_INFINITY)?;
    let weights = masked.softmax_last_axis()?;
    let output = weights.matmul(&x)?; // [T, T] · [T, d_h] → [T, d_h]
    Ok(Explicit {
        scores: scores.value()?,
        masked_scores: masked.value()?,
        weights: weights.value()?,
        output: output.value()?,
    })
}

/// The library's causal self-attention of `tokens [T, d_h]` (q = k = v): `(weights, output)`.
fn causal_self_attention(tokens: &Tensor) -> DemoResult<(Tensor, Tensor)> {
    let x = TensorValue::leaf(tokens.clone(), false);
    let attention = causal_scaled_dot_product_self_attention(&x, &x, &x)?;
    Ok((attention.weights().value()?, attention.output().value()?))
}

/// Unmasked attention of `tokens`, row 0 of its output: what query 0 reads when nothing is hidden.
fn unmasked_row0(tokens: &Tensor) -> DemoResult<Vec<f64>> {
    let x = TensorValue::leaf(tokens.clone(), false);
    let output = scaled_dot_product_attention(&x, &x, &x, None)?.output().value()?;
    Ok(output.as_slice()[..HEAD_WIDTH].to_vec())
}

/// `tokens` with its last row replaced.
fn with_last_token(tokens: &Tensor, last: &[f64]) -> DemoResult<Tensor> {
    let mut values = tokens.as_slice().to_vec();
    let start = values.len() - last.len();
    values[start..].copy_from_slice(last);
    Ok(Tensor::new(tokens.shape(), values)?)
}

/// The rows (of width `d_h`) where two outputs agree bit for bit.
fn bitwise_equal_rows(a: &Tensor, b: &Tensor) -> Vec<usize> {
    let rows = a.as_slice().chunks(HEAD_WIDTH).zip(b.as_slice().chunks(HEAD_WIDTH));
    rows.enumerate()
        .filter(|(_, (x, y))| x.iter().zip(*y).all(|(u, v)| u.to_bits() == v.to_bits()))
        .map(|(i, _)| i)
        .collect()
}

/// `(masked entries whose weight is exactly 0.0, masked entries)`.
fn count_masked_zeros(weights: &Tensor, mask: &Mask) -> (usize, usize) {
    let pairs = weights.as_slice().iter().zip(mask.as_slice());
    let masked: Vec<f64> = pairs.filter(|(_, hidden)| **hidden).map(|(w, _)| *w).collect();
    (masked.iter().filter(|w| **w == 0.0).count(), masked.len())
}

/// The causal mask of `tokens` tokens whose first `pads` are padding: key `j` is hidden from
/// query `i` when `j > i` or `j < pads`. Query 0 is then left with no visible key.
fn left_padding_mask(tokens: usize, pads: usize) -> DemoResult<Mask> {
    let flags = (0..tokens).flat_map(|i| (0..tokens).map(move |j| j > i || j < pads)).collect();
    Ok(Mask::new(&[tokens, tokens], flags)?)
}

/// δ = 1e-6, ε = 8e-6, as in chapter 30.
fn gradcheck_config() -> GradcheckConfig {
    GradcheckConfig { delta: 1e-6, tolerance: 8e-6, ..GradcheckConfig::default() }
}

/// Central differences through the library's causal attention: two lanes of four tokens.
fn check_causal(rng: &mut SplitMix64) -> DemoResult<GradcheckReport> {
    let inputs = [
        ("q", Tensor::uniform(&[2, 4, 3], -1.0, 1.0, rng)?),
        ("k", Tensor::uniform(&[2, 4, 3], -1.0, 1.0, rng)?),
        ("v", Tensor::uniform(&[2, 4, 2], -1.0, 1.0, rng)?),
    ];
    gradcheck(&inputs, &gradcheck_config(), |v: &[TensorValue]| -> DemoResult<TensorValue> {
        Ok(causal_scaled_dot_product_self_attention(&v[0], &v[1], &v[2])?.output().clone())
    })
}

/// Central differences with the padding mask: the fully masked row must have zero gradient on
/// both sides (the tape's and the finite differences'), never NaN.
fn check_padded(tokens: &Tensor, mask: &Mask) -> DemoResult<GradcheckReport> {
    let inputs = [("q", tokens.clone()), ("k", tokens.clone()), ("v", tokens.clone())];
    gradcheck(&inputs, &gradcheck_config(), |v: &[TensorValue]| -> DemoResult<TensorValue> {
        Ok(scaled_dot_product_attention(&v[0], &v[1], &v[2], Some(mask))?.output().clone())
    })
}

/// A mask for three tokens on four, a self-attention whose keys are shorter than its queries, and
/// a mask whose flags do not fill its shape.
fn error_cases(tokens: &Tensor) -> DemoResult<Vec<(&'static str, String)>> {
    let x = TensorValue::leaf(tokens.clone(), false);
    let first_three = x.slice_axis(0, 0, 3)?; // [3, d_h]
    Ok(vec![
        rejection("mask_shape", scaled_dot_product_attention(&x, &x, &x, Some(&Mask::causal(3, 3, 0)?)))?,
        rejection("self_attention_lengths", causal_scaled_dot_product_self_attention(&x, &first_three, &first_three))?,
        rejection("mask_flags", Mask::new(&[4, 4], vec![false; 15]))?,
    ])
}

/// The report, one `key=value` line each, ending with a newline.
pub fn render_report(evidence: &Evidence) -> String {
    let e = evidence;
    let unchanged: Vec<String> = e.unchanged_rows.iter().map(usize::to_string).collect();
    let mut lines = vec![
        "chapter=28-causal-masking".to_string(),
        "prediction=query i sees keys 0..=i only: the weights are exactly 0 above the diagonal, \
         rows still sum to 1, row 0 copies token 0, and changing the last token leaves rows 0-2 \
         bitwise unchanged (without the mask it moves row 0); a query with no visible key gets \
         zeros, not NaN"
            .to_string(),
        format!(
            "config=tokens:{TOKEN_COUNT} head_width:{HEAD_WIDTH} query=key=value=tokens \
             fill:-inf mask_legend:x=hidden,.=visible changed_last_token:{} padding:left,1 seed:{SEED}",
            fmt_values(&CHANGED_LAST_TOKEN)
        ),
        format!("tokens={}", fmt_tensor(&e.tokens)),
        format!("causal_mask={}", fmt_mask_rows(&e.causal_mask)),
        format!("offset_mask=queries:2 offset:2 keys:4 rows:{}", fmt_mask_rows(&e.offset_mask)),
        format!("scores={}", fmt_tensor(&e.scores)),
        format!("masked_scores={}", fmt_tensor(&e.masked_scores)),
        format!("weights={}", fmt_tensor(&e.weights)),
        format!("masked_weights_exactly_zero={}/{}", e.masked_zeros.0, e.masked_zeros.1),
        format!("weight_row_sums={}", fmt_values(&e.weight_row_sums)),
        format!("output={}", fmt_tensor(&e.output)),
        format!("explicit_path={}", if e.explicit_matches_library { "bitwise" } else { "differs" }),
        format!("changed_output={}", fmt_tensor(&e.changed_output)),
        format!("prefix_rows_bitwise_unchanged=[{}]", unchanged.join(",")),
        format!("unmasked_row0=before:{} after:{}", fmt_values(&e.unmasked_row0.0), fmt_values(&e.unmasked_row0.1)),
        format!("padding_mask={}", fmt_mask_rows(&e.padding_mask)),
        format!("padded_weights={}", fmt_tensor(&e.padded_weights)),
        format!("padded_output={}", fmt_tensor(&e.padded_output)),
        format!("padded_finite={}", e.padded_weights.all_finite() && e.padded_output.all_finite()),
        format!("gradcheck_causal={}", fmt_gradcheck(&e.gradcheck_causal)),
        format!("gradcheck_padded={}", fmt_gradcheck(&e.gradcheck_padded)),
    ];
    lines.extend(e.errors.iter().map(|(case, message)| format!("error_{case}={message}")));
    lines.push("next=29-rotary-position-embedding".to_string());
    lines.join("\n") + "\n"
}
