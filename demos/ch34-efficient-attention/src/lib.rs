//! # Chapter 34 — efficient attention: online softmax, tiles, sinks and mixed caches
//!
//! The explicit path of chapters 27–33 materialises the scores and the weights, two `[T, T]`
//! matrices per head. At `T = 16,384` with 8 heads in `f64` that is 32 GiB for one layer's
//! attention. The output, though, needs only one row of `d` numbers per query. This chapter
//! computes that row without the matrix, and then looks at two other memory levers.
//!
//! ## Online softmax
//!
//! For one query, `o = Σ_j e^{s_j} v_j / Σ_j e^{s_j}`. Walk over the keys in blocks and keep three
//! running quantities:
//!
//! ```text
//! m = max_j s_j                 the largest score seen so far (keeps every exponent ≤ 0)
//! ℓ = Σ_j e^{s_j − m}           the normaliser
//! n = Σ_j e^{s_j − m} · v_j     the numerator, a vector of width d
//! ```
//!
//! Two states `(m_a, ℓ_a, n_a)` and `(m_b, ℓ_b, n_b)` merge exactly. With `M = max(m_a, m_b)`:
//!
//! ```text
//! ℓ = ℓ_a · e^{m_a − M} + ℓ_b · e^{m_b − M}
//! n = n_a · e^{m_a − M} + n_b · e^{m_b − M}          o = n / ℓ
//! ```
//!
//! The factor `e^{m − M}` only changes the reference point of the exponents. The result is the
//! same softmax average, not an approximation. Because every exponent is `s − m ≤ 0`, scores of
//! 1000 do not overflow, where the bare formula would divide `∞` by `∞`.
//!
//! ## Tiled ("flash") attention
//!
//! Queries and keys go in square blocks: 64 rows, or 128 from 2048 keys on (`block_size`; a causal
//! block on the diagonal is computed whole though half of it is hidden, so short sequences take
//! small blocks and long ones the faster large products). Each query row folds in one key block
//! at a time with the merge above. Blocks that causality or the
//! window hide entirely are skipped. Between forward and backward the kernel keeps only
//! `log Σ e^s` per query row (`B·H·T` numbers instead of `2·B·H·T²`). The backward recomputes
//! each block's probabilities as `P = e^{S − lse}`. Both paths compute the same function and
//! differ only in the order in which floating-point sums are grouped, so they agree to 1e-12
//! (relative), in outputs and in gradients. (On processors with AVX-512 the library runs the
//! forward as a "strip kernel" that keeps 32 queries in vector registers and folds in 60 keys at
//! a time with the same merge; its results agree with the block products to 1e-12 as well.)
//!
//! ## Attention sinks
//!
//! A per-head learned logit `s_h` joins every softmax as an extra "key" whose value vector is
//! zero:
//!
//! ```text
//! p_sink = e^{s_h} / (e^{s_h} + Σ_j e^{S_ij})      w_ij = e^{S_ij} / (e^{s_h} + Σ_j e^{S_ij})
//! Σ_j w_ij = 1 − p_sink                             o_i = Σ_j w_ij v_j = (1 − p_sink) · o_i^{no sink}
//! ```
//!
//! A head that has nothing useful to read can send its mass to the sink instead of spreading it
//! over real tokens. A very large `s_h` drives the output to zero.
//!
//! ## Global and local layers
//!
//! A windowed (local) layer caches at most its visible keys. A global layer caches every token.
//! Mixing one global layer in four with local ones keeps long-range access while most layers
//! stop growing. Information still travels `W` positions further per layer, so `L` windowed
//! layers reach `L·W` tokens back.
#![doc = demo_support::chapter_page!(
    "ch34-efficient-attention",
    "[`tiled_attention`](../llm_from_scratch/attention/fn.tiled_attention.html), [`OnlineSoftmax`](../llm_from_scratch/attention/struct.OnlineSoftmax.html) and [`Visibility`](../llm_from_scratch/attention/struct.Visibility.html); the strip kernel it runs on is the kernels crate's [`strips`](../llm_kernels/strips/index.html)",
    ("chapter 33", "ch33_kv_cache"),
    ("chapter 35", "ch35_latent_attention")
)]

use demo_support::evidence::{DemoResult, rejection};

use demo_support::report::{fmt_f64, fmt_gradcheck, fmt_tensor, fmt_thousands, fmt_values};
use llm_from_scratch::attention::{
    AttentionConfig, AttentionOutput, AttentionPath, CacheLayout, GroupedQueryAttention, LONG_BLOCK, LONG_SEQUENCE,
    OnlineSoftmax, SHORT_BLOCK, SlidingWindow, Visibility, block_size, explicit_attention_bytes, grouped_attention,
    kv_cache_bytes, receptive_field, tiled_attention, tiled_attention_bytes,
};
use llm_from_scratch::nn::SplitMix64;
use llm_from_scratch::{GradcheckConfig, GradcheckReport, Tensor, TensorValue, constant, gradcheck};

mod figure;
pub use figure::{render_svg, render_thumbnail};

/// The agreement asked of two paths: `|a − b| ≤ 1e-12 · (1 + |b|)` for every element.
const TOLERANCE: f64 = 1e-12;
/// Block A of the hand example: two scores and their value rows.
const BLOCK_A: ([f64; 2], [[f64; 2]; 2]) = ([1.0, 2.0], [[1.0, 0.0], [0.0, 1.0]]);
/// Block B of the hand example.
const BLOCK_B: ([f64; 2], [[f64; 2]; 2]) = ([3.0, 0.5], [[1.0, 1.0], [-1.0, 2.0]]);
/// The shift that makes the bare softmax overflow.
const SHIFT: f64 = 1000.0;
/// Sequence lengths of the memory table (B = 1, H = 8, f64).
const MEMORY_LENGTHS: [usize; 4] = [256, 1024, 4096, 16_384];
/// Tokens of the sink example, `[3, 2]`: chapter 27's `x0 = [1,0], x1 = [0,1], x2 = [1,1]`.
const SINK_TOKENS: [f64; 6] = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
/// One sink logit per head of the sink example.
const SINK_LOGITS: [f64; 2] = [0.0, 2.0];
/// Sink logits swept for head 0.
const SINK_SWEEP: [f64; 5] = [-4.0, 0.0, 4.0, 8.0, 40.0];
/// Seed of the random inputs.
const SEED: u64 = 34;

/// The two blocks, their merge and the one-pass reference.
#[derive(Clone, Debug)]
pub struct OnlineEvidence {
    /// The state of block A, of block B, and of their merge.
    pub block_a: OnlineSoftmax,
    /// See `block_a`.
    pub block_b: OnlineSoftmax,
    /// See `block_a`.
    pub merged: OnlineSoftmax,
    /// `(e^{m_a − M}, e^{m_b − M})`.
    pub rescale: (f64, f64),
    /// Softmax over all four scores at once, and the weighted average of the values.
    pub one_pass_weights: Vec<f64>,
    /// See `one_pass_weights`.
    pub one_pass_output: Vec<f64>,
    /// `n / ℓ` of the merge equals the one-pass output.
    pub merged_equals_one_pass: bool,
    /// `B.merge(A)` equals `A.merge(B)`.
    pub order_independent: bool,
    /// `Σ e^s` of the shifted scores computed without subtracting the maximum (`inf`).
    pub naive_shifted_sum: f64,
    /// The bare formula's output on the shifted scores is finite (it is not: `∞/∞`).
    pub naive_shifted_finite: bool,
    /// The online output on the shifted scores is bitwise the unshifted one.
    pub online_shifted_bitwise: bool,
    /// The state after each of the four scores when they are merged one at a time (blocks of
    /// one key), for the figure: the running max and sum it draws.
    pub running: Vec<OnlineSoftmax>,
}

/// Tiled against explicit on one case.
#[derive(Clone, Debug)]
pub struct PathComparison {
    /// What the case exercises.
    pub description: String,
    /// Outputs within 1e-12 (relative, `TOLERANCE`).
    pub outputs: bool,
    /// `(input, gradient within TOLERANCE)` for q, k, v (and the sinks).
    pub gradients: Vec<(&'static str, bool)>,
}

/// The sink example through the explicit path.
#[derive(Clone, Debug)]
pub struct SinkEvidence {
    /// Weights over the real keys `[1, 2, 3, 3]`.
    pub weights: Tensor,
    /// `Σ_j w_ij` per (head, query).
    pub row_sums: Vec<f64>,
    /// `p_sink` per (head, query), computed by hand from the scores.
    pub p_sink: Vec<f64>,
    /// `Σ_j w_ij = 1 − p_sink` for every row.
    pub sums_are_one_minus_p_sink: bool,
    /// The output `[1, 2, 3, 2]`.
    pub output: Tensor,
    /// The output equals `(1 − p_sink) ·` the output without a sink.
    pub output_is_scaled_no_sink_output: bool,
    /// `(sink logit, p_sink of head 0's last query)`.
    pub sweep: Vec<(f64, f64)>,
    /// With the logit 40 on both heads: the largest `|o|` is below 1e-12.
    pub large_sink_output_vanishes: bool,
}

/// What the chapter computes; `render_report` prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// The online softmax by hand.
    pub online: OnlineEvidence,
    /// Tiled against explicit, without and with sinks.
    pub comparisons: Vec<PathComparison>,
    /// `(T, explicit bytes, tiled bytes)` for B = 1, H = 8, f64.
    pub memory: Vec<(usize, u128, u128)>,
    /// Attention sinks.
    pub sinks: SinkEvidence,
    /// `(name, layers, bytes)` of a 32-layer cache at 32,768 tokens in fp16.
    pub caches: Vec<(&'static str, &'static str, u128)>,
    /// `receptive_field(32, 4096)`.
    pub receptive_field: u128,
    /// Central differences through the tiled kernel with sinks, window and padding.
    pub gradcheck: GradcheckReport,
    /// `(case, message)` of inputs the library rejects.
    pub errors: Vec<(&'static str, String)>,
}

/// Computes the chapter's evidence through the library.
///
/// # Errors
/// Any library error (none is expected), or an error case that the library unexpectedly accepts.
pub fn learner_evidence() -> DemoResult<Evidence> {
    let mut rng = SplitMix64::new(SEED);
    let window = Visibility { window: Some(SlidingWindow::Inclusive(90)), ..Visibility::default() };
    // batch row 0 starts with 10 padding keys, so its first 10 queries see only the sink
    let padding = Visibility { key_padding: Some((0..400).map(|i| i < 10).collect()), ..Visibility::default() };
    Ok(Evidence {
        online: online_softmax_by_hand()?,
        comparisons: vec![
            compare_paths(
                "causal+window:inclusive(90) B:2 H:4 G:2 T:200 d:8",
                [2, 4, 2, 200, 8],
                false,
                &window,
                &mut rng,
            )?,
            compare_paths(
                "causal+sinks+key_padding B:2 H:4 G:1 T:200 d:8",
                [2, 4, 1, 200, 8],
                true,
                &padding,
                &mut rng,
            )?,
        ],
        memory: MEMORY_LENGTHS
            .iter()
            .map(|&t| (t, explicit_attention_bytes(1, 8, t, t, 8), tiled_attention_bytes(1, 8, t, 8)))
            .collect(),
        sinks: sink_evidence()?,
        caches: mixed_caches(),
        receptive_field: receptive_field(32, 4096),
        gradcheck: check_tiled(&mut rng)?,
        errors: error_cases()?,
    })
}

/// The state of one hand block.
fn block(scores: &[f64], values: &[[f64; 2]]) -> DemoResult<OnlineSoftmax> {
    let rows: Vec<Vec<f64>> = values.iter().map(|v| v.to_vec()).collect();
    Ok(OnlineSoftmax::from_block(scores, &rows)?)
}

/// `|a − b| ≤ TOLERANCE · (1 + |b|)` element by element.
fn within(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= TOLERANCE * (1.0 + y.abs()))
}

// Hand derivation (e^{−1} = 0.367879, e^{−2.5} = 0.082085):
//   block A, scores [1, 2]:   m = 2, ℓ = e^{−1} + 1 = 1.367879, n = e^{−1}·[1,0] + [0,1] = [0.367879, 1]
//   block B, scores [3, 0.5]: m = 3, ℓ = 1 + e^{−2.5} = 1.082085,
//                             n = [1,1] + e^{−2.5}·[−1,2] = [0.917915, 1.164170]
//   merge: M = 3, A is rescaled by e^{2−3} = 0.367879 and B by e^0 = 1
//          ℓ = 1.367879·0.367879 + 1.082085 = 1.585300
//          n = [0.367879·0.367879 + 0.917915, 0.367879 + 1.164170] = [1.053250, 1.532049]
//          o = n / ℓ = [0.664386, 0.966410]
fn online_softmax_by_hand() -> DemoResult<OnlineEvidence> {
    let (a, b) = (block(&BLOCK_A.0, &BLOCK_A.1)?, block(&BLOCK_B.0, &BLOCK_B.1)?);
    let merged = a.merge(&b)?;
    let scores: Vec<f64> = BLOCK_A.0.iter().chain(&BLOCK_B.0).copied().collect();
    let values: Vec<f64> = BLOCK_A.1.iter().chain(&BLOCK_B.1).flatten().copied().collect();
    // the one-pass reference on the tape: softmax over all four scores, then weights · values
    let weights = constant(&[1, 4], &scores)?.softmax_last_axis()?;
    let one_pass = weights.matmul(&constant(&[4, 2], &values)?)?.value()?;
    // the same scores shifted by 1000: e^{1003} overflows, so Σ e^s v / Σ e^s = ∞/∞
    let shifted = |s: &[f64]| s.iter().map(|x| x + SHIFT).collect::<Vec<f64>>();
    let naive_sum: f64 = shifted(&scores).iter().map(|s| s.exp()).sum();
    // first output coordinate by the bare formula: Σ_j e^{s_j} v_j0 / Σ_j e^{s_j}
    let first_column = values.iter().step_by(2);
    let naive_first = first_column.zip(shifted(&scores)).map(|(v, s)| v * s.exp()).sum::<f64>() / naive_sum;
    let online_shifted = block(&shifted(&BLOCK_A.0), &BLOCK_A.1)?.merge(&block(&shifted(&BLOCK_B.0), &BLOCK_B.1)?)?;
    let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<u64>>();
    Ok(OnlineEvidence {
        rescale: ((a.max - merged.max).exp(), (b.max - merged.max).exp()),
        merged_equals_one_pass: within(&merged.output(), one_pass.as_slice()),
        order_independent: within(&b.merge(&a)?.output(), &merged.output()),
        one_pass_weights: weights.value()?.as_slice().to_vec(),
        one_pass_output: one_pass.as_slice().to_vec(),
        naive_shifted_sum: naive_sum,
        naive_shifted_finite: naive_first.is_finite(),
        online_shifted_bitwise: bits(&online_shifted.output()) == bits(&merged.output()),
        running: running_states(&BLOCK_A, &BLOCK_B)?,
        block_a: a,
        block_b: b,
        merged,
    })
}

/// The online state after each key of the two blocks, merged one key at a time.
fn running_states(a: &([f64; 2], [[f64; 2]; 2]), b: &([f64; 2], [[f64; 2]; 2])) -> DemoResult<Vec<OnlineSoftmax>> {
    let keys = a.0.iter().zip(&a.1).chain(b.0.iter().zip(&b.1));
    let mut state = OnlineSoftmax::empty(2);
    keys.map(|(&s, v)| {
        state = state.merge(&block(&[s], &[*v])?)?;
        Ok(state.clone())
    })
    .collect()
}

/// Runs the tiled and the explicit path on the same random `q [B,H,T,d]`, `k, v [B,G,T,d]`
/// (and sink logits `[H]`) with the same upstream adjoint, and compares outputs and gradients.
fn compare_paths(
    description: &str,
    [b, h, g, t, d]: [usize; 5],
    with_sinks: bool,
    visibility: &Visibility,
    rng: &mut SplitMix64,
) -> DemoResult<PathComparison> {
    // scores of order ±4 so that the softmax is far from uniform
    let q = TensorValue::leaf(Tensor::uniform(&[b, h, t, d], -2.0, 2.0, rng)?, true);
    let k = TensorValue::leaf(Tensor::uniform(&[b, g, t, d], -2.0, 2.0, rng)?, true);
    let v = TensorValue::leaf(Tensor::uniform(&[b, g, t, d], -1.0, 1.0, rng)?, true);
    let sinks = if with_sinks { Some(TensorValue::leaf(Tensor::uniform(&[h], -1.0, 1.0, rng)?, true)) } else { None };
    let upstream = Tensor::uniform(&[b, h, t, d], -1.0, 1.0, rng)?;
    let tiled = tiled_attention(&q, &k, &v, sinks.as_ref(), visibility)?;
    let explicit = grouped_attention(&q, &k, &v, sinks.as_ref(), visibility)?.output().clone();
    let outputs = within(tiled.value()?.as_slice(), explicit.value()?.as_slice());
    let (gt, ge) = (tiled.backward_with(&upstream)?, explicit.backward_with(&upstream)?);
    let mut leaves = vec![("q", &q), ("k", &k), ("v", &v)];
    leaves.extend(sinks.as_ref().map(|s| ("sinks", s)));
    let gradients = leaves
        .into_iter()
        .map(|(name, x)| (name, within(gt.get_or_zeros(x).as_slice(), ge.get_or_zeros(x).as_slice())));
    Ok(PathComparison { description: description.to_string(), outputs, gradients: gradients.collect() })
}

/// The explicit path over the sink tokens (`q` the same for both heads, one key/value head),
/// with sink logits `[H]` or without a sink.
fn sink_attention(logits: Option<&[f64]>) -> DemoResult<AttentionOutput> {
    let q = constant(&[1, 2, 3, 2], &SINK_TOKENS.repeat(2))?; // [B,H,T,d]
    let kv = constant(&[1, 1, 3, 2], &SINK_TOKENS)?; // [B,G,T,d]
    let sinks = logits.map(|l| constant(&[2], l)).transpose()?;
    Ok(grouped_attention(&q, &kv, &kv, sinks.as_ref(), &Visibility::default())?)
}

/// `Σ_j w_ij` of every row of `[.., T, T]` weights.
fn row_sums(weights: &Tensor) -> Vec<f64> {
    weights.as_slice().chunks(3).map(|r| r.iter().sum()).collect()
}

// Hand derivation for head 0 (sink logit 0, e^{1/√2} = 2.028115, e^{√2} = 4.113250):
//   query 0 sees key 0, score 0.707107:  Z = 1 + 2.028115 = 3.028115
//           w = [0.669762], p_sink = 1/Z = 0.330238
//   query 1, scores [0, 0.707107]:        Z = 1 + 1 + 2.028115 = 4.028115
//           w = [0.248255, 0.503490], p_sink = 0.248255
//   query 2, scores [0.707107, 0.707107, 1.414214]: Z = 1 + 2·2.028115 + 4.113250 = 9.169480
//           w = [0.221181, 0.221181, 0.448581], p_sink = 0.109057
// Head 1's logit 2 (e² = 7.389056) takes more: query 0 gets p_sink = 7.389056 / 9.417171 = 0.784636.
fn sink_evidence() -> DemoResult<SinkEvidence> {
    let out = sink_attention(Some(&SINK_LOGITS))?;
    let (scores, weights) = (out.scores().value()?, out.weights().value()?);
    // p_sink by hand from the unmasked scores: query i sees keys j ≤ i
    let p_sink: Vec<f64> = (0..6)
        .map(|row| {
            let (head, i) = (row / 3, row % 3);
            let seen: f64 = scores.as_slice()[row * 3..row * 3 + i + 1].iter().map(|s| s.exp()).sum();
            SINK_LOGITS[head].exp() / (SINK_LOGITS[head].exp() + seen)
        })
        .collect();
    let sums = row_sums(&weights);
    let one_minus: Vec<f64> = p_sink.iter().map(|p| 1.0 - p).collect();
    let plain = sink_attention(None)?.output().value()?;
    let scaled: Vec<f64> =
        plain.as_slice().chunks(2).zip(&one_minus).flat_map(|(o, f)| o.iter().map(move |x| x * f)).collect();
    let output = out.output().value()?;
    let mut sweep = Vec::new();
    for logit in SINK_SWEEP {
        let last_row_mass: f64 = row_sums(&sink_attention(Some(&[logit, 0.0]))?.weights().value()?)[2];
        sweep.push((logit, 1.0 - last_row_mass));
    }
    let large = sink_attention(Some(&[40.0, 40.0]))?.output().value()?;
    Ok(SinkEvidence {
        sums_are_one_minus_p_sink: within(&sums, &one_minus),
        output_is_scaled_no_sink_output: within(output.as_slice(), &scaled),
        large_sink_output_vanishes: large.as_slice().iter().all(|x| x.abs() < 1e-12),
        row_sums: sums,
        weights,
        p_sink,
        output,
        sweep,
    })
}

/// A 32-layer, 8 × 128 kv-head model at 32,768 tokens in fp16: all global, all local with a
/// 4096-key window, and one global layer in four.
fn mixed_caches() -> Vec<(&'static str, &'static str, u128)> {
    let global = CacheLayout::Grouped { kv_heads: 8, head_width: 128, window: None };
    let local = CacheLayout::Grouped { kv_heads: 8, head_width: 128, window: Some(SlidingWindow::Exclusive(4096)) };
    let mix: Vec<CacheLayout> = (0..32).map(|layer| if layer % 4 == 0 { global } else { local }).collect();
    vec![
        ("all_global", "32_global", kv_cache_bytes(&[global; 32], 32_768, 1, 2)),
        ("all_local", "32_local", kv_cache_bytes(&[local; 32], 32_768, 1, 2)),
        ("1_global_in_4", "8_global+24_local", kv_cache_bytes(&mix, 32_768, 1, 2)),
    ]
}

/// Central differences through the tiled kernel: MQA, sinks, window inclusive(2), key 0 padded.
fn check_tiled(rng: &mut SplitMix64) -> DemoResult<GradcheckReport> {
    let inputs = [
        ("q", Tensor::uniform(&[1, 2, 5, 4], -1.0, 1.0, rng)?),
        ("k", Tensor::uniform(&[1, 1, 5, 4], -1.0, 1.0, rng)?),
        ("v", Tensor::uniform(&[1, 1, 5, 4], -1.0, 1.0, rng)?),
        ("sinks", Tensor::uniform(&[2], -1.0, 1.0, rng)?),
    ];
    let vis = Visibility {
        query_offset: 0,
        window: Some(SlidingWindow::Inclusive(2)),
        key_padding: Some(vec![true, false, false, false, false]),
    };
    let config = GradcheckConfig { delta: 1e-6, tolerance: 8e-6, ..GradcheckConfig::default() };
    gradcheck(&inputs, &config, |v: &[TensorValue]| -> DemoResult<TensorValue> {
        Ok(tiled_attention(&v[0], &v[1], &v[2], Some(&v[3]), &vis)?)
    })
}

/// Three query heads on two kv heads, sink logits for the wrong number of heads, a padding mask of
/// the wrong length, and dropout on weights the tiled kernel never forms.
fn error_cases() -> DemoResult<Vec<(&'static str, String)>> {
    let zeros = |shape: &[usize]| -> DemoResult<TensorValue> { Ok(TensorValue::leaf(Tensor::zeros(shape)?, false)) };
    let (q, kv) = (zeros(&[1, 2, 2, 4])?, zeros(&[1, 1, 2, 4])?);
    let none = Visibility::default();
    let bad_padding = Visibility { key_padding: Some(vec![false; 3]), ..Visibility::default() };
    let dropout = AttentionConfig::new(8, 2, 1, 4).with_path(AttentionPath::Tiled).with_dropout(0.1, 0.0);
    Ok(vec![
        rejection(
            "groups",
            tiled_attention(&zeros(&[1, 3, 2, 4])?, &zeros(&[1, 2, 2, 4])?, &zeros(&[1, 2, 2, 4])?, None, &none),
        )?,
        rejection("sink_shape", tiled_attention(&q, &kv, &kv, Some(&zeros(&[3])?), &none))?,
        rejection("padding_shape", tiled_attention(&q, &kv, &kv, None, &bad_padding))?,
        rejection("tiled_dropout", GroupedQueryAttention::new("attention", dropout, &mut SplitMix64::new(SEED)))?,
    ])
}

/// `bytes` in MiB at six decimals.
fn mib(bytes: u128) -> String {
    fmt_f64(bytes as f64 / f64::from(1 << 20))
}

/// `m:… l:… n:[…]` of one state.
fn fmt_state(s: &OnlineSoftmax) -> String {
    format!("m:{} l:{} n:{}", fmt_f64(s.max), fmt_f64(s.normaliser), fmt_values(&s.numerator))
}

/// The report, one `key=value` line each, ending with a newline.
pub fn render_report(evidence: &Evidence) -> String {
    let (e, o, s) = (evidence, &evidence.online, &evidence.sinks);
    let g = &e.gradcheck;
    let mut lines = vec![
        "chapter=34-efficient-attention".to_string(),
        "prediction=merging softmax blocks with the rescale e^(m-M) is exact, so the tiled kernel \
         equals the explicit path to 1e-12 in outputs and gradients while its memory grows like T \
         instead of T^2; a sink logit takes mass p_sink from the real keys without adding to the \
         output; one global layer in four keeps a 32k-token cache at 1408 MiB instead of 4096 MiB"
            .to_string(),
        format!(
            "config=block:{SHORT_BLOCK}(T_k<{LONG_SEQUENCE})/{LONG_BLOCK}(T_k>={LONG_SEQUENCE}) tolerance:1e-12(relative) \
             block_a:scores:{} values:[[1,0],[0,1]] block_b:scores:{} values:[[1,1],[-1,2]] shift:{} \
             sink_tokens:[[1,0],[0,1],[1,1]] sink_logits:{} seed:{SEED}",
            fmt_values(&BLOCK_A.0),
            fmt_values(&BLOCK_B.0),
            fmt_f64(SHIFT),
            fmt_values(&SINK_LOGITS)
        ),
        format!("online_block_a={}", fmt_state(&o.block_a)),
        format!("online_block_b={}", fmt_state(&o.block_b)),
        format!(
            "online_rescale=M:{} e^(m_a-M):{} e^(m_b-M):{}",
            fmt_f64(o.merged.max),
            fmt_f64(o.rescale.0),
            fmt_f64(o.rescale.1)
        ),
        format!("online_merged={} output:{}", fmt_state(&o.merged), fmt_values(&o.merged.output())),
        format!("one_pass=weights:{} output:{}", fmt_values(&o.one_pass_weights), fmt_values(&o.one_pass_output)),
        format!(
            "online_equals_one_pass=within_1e-12:{} merge_order_independent:{}",
            o.merged_equals_one_pass, o.order_independent
        ),
        format!(
            "shifted_by_1000=naive_sum_exp:{} naive_output_finite:{} online_output_bitwise_unchanged:{}",
            o.naive_shifted_sum, o.naive_shifted_finite, o.online_shifted_bitwise
        ),
        format!(
            "blocks=T:200 query_blocks:{} last_block_rows:{} (T is not a multiple of the block)",
            200_usize.div_ceil(block_size(200)),
            200 % block_size(200)
        ),
    ];
    for (i, c) in e.comparisons.iter().enumerate() {
        let grads: Vec<String> = c.gradients.iter().map(|(name, ok)| format!("{name}:{ok}")).collect();
        lines.push(format!(
            "tiled_vs_explicit_{}=case:{} outputs_within_1e-12:{} gradients_within_1e-12:[{}]",
            i + 1,
            c.description,
            c.outputs,
            grads.join(",")
        ));
    }
    for &(t, explicit, tiled) in &e.memory {
        lines.push(format!(
            "memory_T{t}=B:1 H:8 bytes_per_value:8 explicit_mib:{} tiled_mib:{} ratio:{}",
            mib(explicit),
            mib(tiled),
            explicit / tiled.max(1)
        ));
    }
    lines.extend([
        format!("sink_weights={}", fmt_tensor(&s.weights)),
        format!("sink_row_sums={}", fmt_values(&s.row_sums)),
        format!("sink_p_sink_by_hand={}", fmt_values(&s.p_sink)),
        format!("sink_row_sums_equal_1_minus_p_sink=within_1e-12:{}", s.sums_are_one_minus_p_sink),
        format!("sink_output={}", fmt_tensor(&s.output)),
        format!("sink_output_equals_(1-p_sink)*output_without_sink=within_1e-12:{}", s.output_is_scaled_no_sink_output),
    ]);
    let sweep: Vec<String> = s.sweep.iter().map(|(l, p)| format!("{}:{}", fmt_f64(*l), fmt_f64(*p))).collect();
    lines.push(format!("sink_sweep=head:0 query:2 logit->p_sink:[{}]", sweep.join(",")));
    lines.push(format!("sink_large=logit:40.000000 output_max_abs_below_1e-12:{}", s.large_sink_output_vanishes));
    for (name, layers, bytes) in &e.caches {
        lines.push(format!(
            "kv_cache_{name}=layers:{layers} kv_heads:8 head_width:128 local_window:exclusive(4096) tokens:32768 \
             fp16 mib:{}",
            mib(*bytes)
        ));
    }
    lines.push(format!("receptive_field=layers:32 window:4096 tokens:{}", fmt_thousands(e.receptive_field)));
    lines.push(format!("gradcheck_tiled={}", fmt_gradcheck(g)));
    lines.extend(e.errors.iter().map(|(case, message)| format!("error_{case}={message}")));
    lines.push(
        "next=35-latent-attention: cache one small latent per token and rebuild keys and values from it".to_string(),
    );
    lines.join("\n") + "\n"
}
