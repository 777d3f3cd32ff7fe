//! Chapter 27 — scaled dot-product attention, one head, no mask.
//!
//! Every token carries three vectors of width `d_h`: a *query* (what it is looking for), a *key*
//! (what it offers to be found by) and a *value* (what it hands over when found). Attention lets
//! each query read a mixture of all values, weighted by how well the query matches each key:
//!
//! ```text
//! scores  S = Q · Kᵀ / √d_h          [T_q, T_k]   S[i][j] = q_i · k_j / √d_h
//! weights P = softmax over each row  [T_q, T_k]   P[i][j] = e^{S[i][j]} / Σ_l e^{S[i][l]}
//! output  O = P · V                  [T_q, d_v]   O[i] = Σ_j P[i][j] · v_j
//! ```
//!
//! The weights of a row are positive and sum to 1, so each output row is a *weighted average* of
//! the value rows: with weights `[0.25, 0.75]` over values `[1,0]` and `[0,1]` the output is
//! `0.25·[1,0] + 0.75·[0,1] = [0.25, 0.75]`.
//!
//! Why divide by `√d_h`? If the coordinates of `q` and `k` are independent with mean 0 and
//! variance 1, then `q · k = Σ_c q_c k_c` is a sum of `d_h` independent terms of variance 1, so
//! `Var(q · k) = d_h` and its standard deviation is `√d_h`. A 64-wide head would produce scores
//! spread eight times wider than a 1-wide one; the softmax of widely spread scores puts almost all
//! weight on the largest one (it *saturates*) and its gradient all but vanishes. Dividing by
//! `√d_h` brings the spread back to 1 whatever the head width. This report measures both effects.
//!
//! In this chapter the queries, keys and values are the token vectors themselves (identity
//! projections); chapter 30 learns the projections `W_Q`, `W_K`, `W_V`. Chapter 28 adds the
//! causal mask, which the worked example here deliberately leaves out: every token sees all.
#![doc = demo_support::chapter_page!(
    "ch27-scaled-dot-product-attention",
    "[`scaled_dot_product_attention`](../llm_from_scratch/attention/fn.scaled_dot_product_attention.html), [`TensorValue`](../llm_from_scratch/autodiff/struct.TensorValue.html) and [`gradcheck`](../llm_from_scratch/autodiff/fn.gradcheck.html)",
    ("the chapters", "llm_book"),
    ("chapter 28", "ch28_causal_masking")
)]

use demo_support::evidence::{DemoResult, rejection};

use demo_support::report::{fmt_f64, fmt_gradcheck, fmt_tensor, fmt_values};
use llm_from_scratch::attention::scaled_dot_product_attention;
use llm_from_scratch::nn::SplitMix64;
use llm_from_scratch::{GradcheckConfig, GradcheckReport, Tensor, TensorValue, constant, gradcheck, parameter};

mod figure;
pub use figure::{render_svg, render_thumbnail};

/// Tokens of the worked example, `[T, d_h] = [3, 2]`: each row is that token's query, key and value.
const TOKENS: [f64; 6] = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
/// `T` of the worked example.
const TOKEN_COUNT: usize = 3;
/// `d_h` of the worked example.
const HEAD_WIDTH: usize = 2;
/// The head widths whose score spread the report compares.
const SPREAD_WIDTHS: [usize; 2] = [2, 64];
/// Dot products drawn per head width.
const SPREAD_SAMPLES: usize = 4096;
/// Queries (and keys per query) of the saturation measurement at `d_h = 64`.
const SATURATION_QUERIES: usize = 512;
const SATURATION_KEYS: usize = 8;
/// Seed of every random draw of the chapter.
const SEED: u64 = 27;

/// What the chapter computes; `render_report` prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// The token rows `[3, 2]`, used as queries, keys and values.
    pub tokens: Tensor,
    /// `Q · Kᵀ` before scaling, `[3, 3]`.
    pub raw_scores: Tensor,
    /// `Q · Kᵀ / √2`, `[3, 3]` (what the library calls the scores).
    pub scores: Tensor,
    /// The softmax of each score row, `[3, 3]`.
    pub weights: Tensor,
    /// The softmax of each *unscaled* score row, `[3, 3]`: what the weights would be without `1/√d_h`.
    pub unscaled_weights: Tensor,
    /// The sum of each weight row (1 up to rounding).
    pub weight_row_sums: Vec<f64>,
    /// `weights · V`, `[3, 2]`.
    pub output: Tensor,
    /// Whether the step-by-step primitives reproduce the library function bit for bit.
    pub explicit_matches_library: bool,
    /// The weighted-context example: scaled scores `[0, ln 3]` of one query over two keys.
    pub context_scores: Tensor,
    /// Its weights `[0.25, 0.75]`.
    pub context_weights: Tensor,
    /// Its output `0.25·[1,0] + 0.75·[0,1]`.
    pub context_output: Tensor,
    /// `√d_h` for `d_h` = 2 and 64: the predicted std of an unscaled score.
    pub spread_formula: Vec<f64>,
    /// The measured std of unscaled scores `q · k` per width.
    pub spread_unscaled: Vec<f64>,
    /// The measured std of scaled scores `q · k / √d_h` per width.
    pub spread_scaled: Vec<f64>,
    /// Mean largest softmax weight over 8 keys at `d_h = 64`, without scaling.
    pub top_weight_unscaled: f64,
    /// The same with the `1/√d_h` scaling.
    pub top_weight_scaled: f64,
    /// The upstream adjoint `∂loss/∂output` of the worked example (all ones).
    pub upstream: Tensor,
    /// `∂loss/∂Q` of the worked example.
    pub query_gradient: Tensor,
    /// `∂loss/∂K`.
    pub key_gradient: Tensor,
    /// `∂loss/∂V = Pᵀ · upstream`: with ones, the total weight each key receives.
    pub value_gradient: Tensor,
    /// Central-difference check of single-head attention on random `q [2,3]`, `k [4,3]`, `v [4,2]`.
    pub gradcheck: GradcheckReport,
    /// `(case, message)` of inputs the library rejects.
    pub errors: Vec<(&'static str, String)>,
    /// Whether a second run of the worked example gives bitwise identical weights and output.
    pub replay_bitwise: bool,
}

/// Computes the chapter's evidence through the library.
///
/// # Errors
/// Any library error (none is expected), or an error case that the library unexpectedly accepts.
pub fn learner_evidence() -> DemoResult<Evidence> {
    let tokens = Tensor::new(&[TOKEN_COUNT, HEAD_WIDTH], TOKENS.to_vec())?;
    let explicit = explicit_attention(&tokens)?;
    let (weights, output, gradients) = library_attention(&tokens)?;
    let (replay_weights, replay_output, _) = library_attention(&tokens)?;
    let (context_scores, context_weights, context_output) = weighted_context()?;
    let mut rng = SplitMix64::new(SEED);
    let mut spread_unscaled = Vec::new();
    let mut spread_scaled = Vec::new();
    for width in SPREAD_WIDTHS {
        let (unscaled, scaled) = score_spread(width, &mut rng)?;
        spread_unscaled.push(unscaled);
        spread_scaled.push(scaled);
    }
    let (top_weight_unscaled, top_weight_scaled) = mean_top_weights(&mut rng)?;
    Ok(Evidence {
        weight_row_sums: weights.as_slice().chunks(TOKEN_COUNT).map(|row| row.iter().sum()).collect(),
        explicit_matches_library: explicit.weights.bitwise_eq(&weights) && explicit.output.bitwise_eq(&output),
        replay_bitwise: replay_weights.bitwise_eq(&weights) && replay_output.bitwise_eq(&output),
        tokens,
        raw_scores: explicit.raw_scores,
        unscaled_weights: explicit.unscaled_weights,
        scores: explicit.scores,
        weights,
        output,
        context_scores,
        context_weights,
        context_output,
        spread_formula: SPREAD_WIDTHS.iter().map(|&d| (d as f64).sqrt()).collect(),
        spread_unscaled,
        spread_scaled,
        top_weight_unscaled,
        top_weight_scaled,
        upstream: gradients.upstream,
        query_gradient: gradients.query,
        key_gradient: gradients.key,
        value_gradient: gradients.value,
        gradcheck: check_gradients(&mut rng)?,
        errors: error_cases()?,
    })
}

/// The worked example built from primitives, one line per formula.
struct Explicit {
    raw_scores: Tensor,
    unscaled_weights: Tensor,
    scores: Tensor,
    weights: Tensor,
    output: Tensor,
}

// Hand derivation, tokens x0 = [1,0], x1 = [0,1], x2 = [1,1], q = k = v = x, 1/√2 = 0.707107:
//   Q·Kᵀ = [[1,0,1],[0,1,1],[1,1,2]]   (x2·x2 = 1 + 1 = 2)
//   /√2  = [[0.707107,0,0.707107],[0,0.707107,0.707107],[0.707107,0.707107,1.414214]]
//   row 0: subtract the max 0.707107 → exponents [0,−0.707107,0] → [1, 0.493069, 1],
//          sum 2.493069 → weights [0.401112, 0.197776, 0.401112]
//          output 0.401112·[1,0] + 0.197776·[0,1] + 0.401112·[1,1] = [0.802224, 0.598888]
//   row 1: the mirror image of row 0 → weights [0.197776, 0.401112, 0.401112], output [0.598888, 0.802224]
//   row 2: subtract 1.414214 → [0.493069, 0.493069, 1], sum 1.986137
//          → weights [0.248255, 0.248255, 0.503490], output [0.751745, 0.751745]
// Token 2 matches itself best (score 2 against 1), so it keeps half of its attention for itself.
fn explicit_attention(tokens: &Tensor) -> DemoResult<Explicit> {
    let x = TensorValue::leaf(tokens.clone(), false);
    let (q, k, v) = (&x, &x, &x);
    let raw = q.matmul(&k.transpose(0, 1)?)?; // [T, d_h] · [d_h, T] → [T, T]
    let scores = raw.scale(1.0 / (HEAD_WIDTH as f64).sqrt())?;
    let weights = scores.softmax_last_axis()?; // each row sums to 1
    let output = weights.matmul(v)?; // [T, T] · [T, d_h] → [T, d_h]
    Ok(Explicit {
        unscaled_weights: raw.softmax_last_axis()?.value()?, // for the figure: no 1/√d_h
        raw_scores: raw.value()?,
        scores: scores.value()?,
        weights: weights.value()?,
        output: output.value()?,
    })
}

/// Gradients of the worked example for an all-ones upstream adjoint.
struct RoleGradients {
    upstream: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
}

/// The worked example through `scaled_dot_product_attention`, with Q, K and V as three separate
/// parameters (same values) so that each role receives its own gradient.
fn library_attention(tokens: &Tensor) -> DemoResult<(Tensor, Tensor, RoleGradients)> {
    let shape = tokens.shape();
    let q = parameter(shape, tokens.as_slice())?;
    let k = parameter(shape, tokens.as_slice())?;
    let v = parameter(shape, tokens.as_slice())?;
    let attention = scaled_dot_product_attention(&q, &k, &v, None)?;
    let output = attention.output();
    // With upstream ones, ∂loss/∂V[j] = Σ_i P[i][j]·[1,1]: column sums of the weights,
    // [0.847143, 0.847143, 1.305714] per coordinate — token 2 is read the most.
    let upstream = Tensor::new(output.shape(), vec![1.0; output.len()])?;
    let grads = output.backward_with(&upstream)?;
    let gradients = RoleGradients {
        upstream,
        query: grads.get_or_zeros(&q),
        key: grads.get_or_zeros(&k),
        value: grads.get_or_zeros(&v),
    };
    Ok((attention.weights().value()?, output.value()?, gradients))
}

// The weighted context: one query q = [1,0] over keys k0 = [0,0] and k1 = [√2·ln 3, 0].
//   scaled scores = [0, √2·ln 3 / √2] = [0, ln 3]
//   weights = [1, 3] / (1 + 3) = [0.25, 0.75]
//   output  = 0.25·[1,0] + 0.75·[0,1] = [0.25, 0.75]
fn weighted_context() -> DemoResult<(Tensor, Tensor, Tensor)> {
    let q = constant(&[1, 2], &[1.0, 0.0])?;
    let k = constant(&[2, 2], &[0.0, 0.0, 2f64.sqrt() * 3f64.ln(), 0.0])?;
    let v = constant(&[2, 2], &[1.0, 0.0, 0.0, 1.0])?;
    let attention = scaled_dot_product_attention(&q, &k, &v, None)?;
    Ok((attention.scores().value()?, attention.weights().value()?, attention.output().value()?))
}

/// Draws `n` coordinates with mean 0 and variance 1 (uniform on `[−√3, √3)`).
fn unit_variance(rng: &mut SplitMix64, n: usize) -> Vec<f64> {
    let bound = 3f64.sqrt(); // Var(U[−a, a)) = a²/3 = 1
    (0..n).map(|_| rng.uniform(-bound, bound)).collect()
}

/// Population standard deviation.
fn std_dev(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    (values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n).sqrt()
}

/// The measured std of `q · k` and of `q · k / √d_h` over [`SPREAD_SAMPLES`] random pairs.
fn score_spread(width: usize, rng: &mut SplitMix64) -> DemoResult<(f64, f64)> {
    let n = SPREAD_SAMPLES;
    let q = constant(&[n, 1, width], &unit_variance(rng, n * width))?;
    let k = constant(&[n, width, 1], &unit_variance(rng, n * width))?;
    let raw = q.matmul(&k)?; // [n, 1, d_h] · [n, d_h, 1] → [n, 1, 1]: one dot product per sample
    let scaled = raw.scale(1.0 / (width as f64).sqrt())?;
    Ok((std_dev(raw.value()?.as_slice()), std_dev(scaled.value()?.as_slice())))
}

/// The mean, over random queries, of the largest softmax weight among 8 random keys at `d_h = 64`,
/// without and with the scaling: near 1 when the softmax saturates on one key, near 1/8 when it
/// spreads evenly. Both use the same draws.
fn mean_top_weights(rng: &mut SplitMix64) -> DemoResult<(f64, f64)> {
    let (n, keys, width) = (SATURATION_QUERIES, SATURATION_KEYS, SPREAD_WIDTHS[1]);
    let q = constant(&[n, 1, width], &unit_variance(rng, n * width))?;
    let k = constant(&[n, keys, width], &unit_variance(rng, n * keys * width))?;
    let raw = q.matmul(&k.transpose(1, 2)?)?; // [n, 1, d_h] · [n, d_h, 8] → [n, 1, 8]
    let scaled = raw.scale(1.0 / (width as f64).sqrt())?;
    let mean_top = |scores: &TensorValue| -> DemoResult<f64> {
        let weights = scores.softmax_last_axis()?.value()?;
        let tops = weights.as_slice().chunks(keys).map(|row| row.iter().copied().fold(0.0, f64::max));
        Ok(tops.sum::<f64>() / n as f64)
    };
    Ok((mean_top(&raw)?, mean_top(&scaled)?))
}

/// Single-head attention as a function of three parameter leaves, for [`gradcheck`].
fn attend(inputs: &[TensorValue]) -> DemoResult<TensorValue> {
    let attention = scaled_dot_product_attention(&inputs[0], &inputs[1], &inputs[2], None)?;
    Ok(attention.output().clone())
}

/// Central differences (δ = 1e-6, ε = 8e-6) on every coordinate of random q, k, v; two queries
/// over four keys so that no shape coincidence can hide a transposed gradient.
fn check_gradients(rng: &mut SplitMix64) -> DemoResult<GradcheckReport> {
    let mut draw = |shape: &[usize]| Tensor::uniform(shape, -1.0, 1.0, rng);
    let inputs = [("q", draw(&[2, 3])?), ("k", draw(&[4, 3])?), ("v", draw(&[4, 2])?)];
    let config = GradcheckConfig { delta: 1e-6, tolerance: 8e-6, ..GradcheckConfig::default() };
    gradcheck(&inputs, &config, attend)
}

/// Inputs that cannot be attended: widths, lengths or ranks that do not fit.
fn error_cases() -> DemoResult<Vec<(&'static str, String)>> {
    let q = constant(&[3, 2], &[0.0; 6])?;
    let wide_k = constant(&[3, 3], &[0.0; 9])?;
    let short_v = constant(&[2, 2], &[0.0; 4])?;
    let flat = constant(&[2], &[0.0; 2])?;
    Ok(vec![
        rejection("head_width", scaled_dot_product_attention(&q, &wide_k, &q, None))?,
        rejection("positions", scaled_dot_product_attention(&q, &q, &short_v, None))?,
        rejection("rank", scaled_dot_product_attention(&flat, &flat, &flat, None))?,
    ])
}

/// The report, one `key=value` line each, ending with a newline.
pub fn render_report(evidence: &Evidence) -> String {
    let e = evidence;
    let check = &e.gradcheck;
    let mut lines = vec![
        "chapter=27-scaled-dot-product-attention".to_string(),
        "prediction=every weight row sums to 1 and every output row is a weighted average of the \
         value rows; token [1,1] scores 2 against itself and 1 against the others, so it keeps \
         about half of its attention; unscaled scores spread like sqrt(d_h) (8 at d_h=64) and \
         saturate the softmax, scaled ones spread like 1"
            .to_string(),
        format!(
            "config=tokens:{TOKEN_COUNT} head_width:{HEAD_WIDTH} query=key=value=tokens mask:none \
             scale:1/sqrt({HEAD_WIDTH}) spread_widths:[{},{}] spread_samples:{SPREAD_SAMPLES} \
             saturation:{SATURATION_QUERIES}x{SATURATION_KEYS} seed:{SEED}",
            SPREAD_WIDTHS[0], SPREAD_WIDTHS[1]
        ),
        format!("tokens={}", fmt_tensor(&e.tokens)),
        format!("raw_scores={}", fmt_tensor(&e.raw_scores)),
        format!("scaled_scores={}", fmt_tensor(&e.scores)),
        format!("weights={}", fmt_tensor(&e.weights)),
        format!("weight_row_sums={}", fmt_values(&e.weight_row_sums)),
        format!("output={}", fmt_tensor(&e.output)),
        format!("explicit_path={}", bitwise_word(e.explicit_matches_library)),
        format!("weighted_context_scores={}", fmt_tensor(&e.context_scores)),
        format!("weighted_context_weights={}", fmt_tensor(&e.context_weights)),
        format!("weighted_context={}", fmt_tensor(&e.context_output)),
        format!("score_std_formula={}", fmt_values(&e.spread_formula)),
        format!("score_std_unscaled={}", fmt_values(&e.spread_unscaled)),
        format!("score_std_scaled={}", fmt_values(&e.spread_scaled)),
        format!(
            "top_weight_d64=unscaled:{} scaled:{} uniform:{}",
            fmt_f64(e.top_weight_unscaled),
            fmt_f64(e.top_weight_scaled),
            fmt_f64(1.0 / SATURATION_KEYS as f64)
        ),
        format!("upstream={}", fmt_tensor(&e.upstream)),
        format!("query_gradient={}", fmt_tensor(&e.query_gradient)),
        format!("key_gradient={}", fmt_tensor(&e.key_gradient)),
        format!("value_gradient={}", fmt_tensor(&e.value_gradient)),
        format!("gradcheck={}", fmt_gradcheck(check)),
    ];
    lines.extend(e.errors.iter().map(|(case, message)| format!("error_{case}={message}")));
    lines.push(format!("replay={}", bitwise_word(e.replay_bitwise)));
    lines.push("next=28-causal-masking".to_string());
    lines.join("\n") + "\n"
}

/// `bitwise` when two runs agree bit for bit, `differs` otherwise.
fn bitwise_word(equal: bool) -> &'static str {
    if equal { "bitwise" } else { "differs" }
}
