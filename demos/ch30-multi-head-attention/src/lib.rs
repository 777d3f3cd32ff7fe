//! # Chapter 30 — multi-head attention
//!
//! One attention head computes one table of weights: every query spreads its attention over the
//! earlier tokens in a single way. Multi-head attention cuts the model width `d_model` into `h`
//! slices of width `d_h = d_model / h` and runs causal attention on each slice independently, so
//! the same tokens can be related in `h` different ways at once (one head may track content,
//! another recency). The heads' outputs are concatenated back to `d_model` and mixed by `W_O`.
//!
//! ```text
//! Q = X·W_Q, K = X·W_K, V = X·W_V                       [B,T,d]
//! split:   [B,T,h·d_h] → [B,T,h,d_h] → [B,h,T,d_h]
//! RoPE on Q and K (positions), not on V (content)
//! weights = softmax(mask(Q·Kᵀ/√d_h))  per head          [B,h,T,T]
//! heads   = weights · V                                  [B,h,T,d_h]
//! merge:   [B,h,T,d_h] → [B,T,h,d_h] → [B,T,d]
//! output  = merged · W_O                                 [B,T,d]
//! ```
//!
//! The worked example (B=1, T=3, d_model=4, h=2, RoPE base 100) is chosen so that every number
//! can be derived by hand. With `W_Q = W_K = W_V = I`, head 0 reads columns 0–1 of X and head 1
//! columns 2–3. Head 0's rows are `[cos p, −sin p]`, which RoPE (angle `p·θ₀`, θ₀ = 1 since
//! d_h = 2) rotates back to `[1, 0]` for every token: all its scores are equal, so each query
//! averages uniformly over what it may see — `[1]`, `[½,½]`, `[⅓,⅓,⅓]`. Head 1's rows `[1,0]`,
//! `[0,1]`, `[1,1]` rotate to `[1,0]`, `[−sin 1, cos 1]`, `[cos 2 − sin 2, sin 2 + cos 2]`; for query
//! 1 the scores are `[−sin 1, 1]/√2 = [−0.595010, 0.707107]`, hence weights
//! `[0.213809, 0.786191]`. `W_O` swaps the two head groups, so each output row is
//! `[head 1 | head 0]`.
#![doc = demo_support::chapter_page!(
    "ch30-multi-head-attention",
    "[`MultiHeadAttention`](../llm_from_scratch/attention/struct.MultiHeadAttention.html), [`split_heads`](../llm_from_scratch/attention/fn.split_heads.html) and [`merge_heads`](../llm_from_scratch/attention/fn.merge_heads.html)",
    ("chapter 29", "ch29_rotary_position_embedding"),
    ("chapter 31", "ch31_pre_norm_residual")
)]

use std::error::Error;

use demo_support::report::{fmt_f64, fmt_rows, fmt_tensor, fmt_thousands, fmt_values};
use llm_from_scratch::attention::{AttentionError, MultiHeadAttention, MultiHeadAttentionOutput};
use llm_from_scratch::{
    GradcheckConfig, GradcheckReport, Tensor, TensorAutodiffError, TensorValue, constant, fmt_shape, gradcheck,
    parameter,
};

mod figure;
mod trace;

pub use figure::{THUMBNAIL_TITLE, TITLE, render_svg, render_thumbnail};
pub use trace::render_diagram_trace;

/// Batch size of the worked example.
pub const BATCH: usize = 1;
/// Tokens of the worked example.
pub const TOKENS: usize = 3;
/// Model width.
pub const MODEL_WIDTH: usize = 4;
/// Number of heads.
pub const HEADS: usize = 2;
/// RoPE frequency base.
pub const ROPE_BASE: f64 = 100.0;
/// RoPE capacity (max positions).
pub const MAX_POSITIONS: usize = 6;

/// Everything the chapter computes; [`render_report`] prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// The input X `[1,3,4]`.
    pub input: Tensor,
    /// Every intermediate of the forward pass, as values.
    pub forward: ForwardValues,
    /// `W_O` `[4,4]`.
    pub output_weight: Tensor,
    /// The output after changing only token 2.
    pub prefix_perturbed_output: Tensor,
    /// Rows 0 and 1 of the output are bitwise unchanged by that change.
    pub prefix_rows_bitwise_equal: bool,
    /// Row 2 did change.
    pub last_row_changed: bool,
    /// Largest weight difference after shifting every position by 3.
    pub common_offset_max_diff: f64,
    /// Number of parameters of the layer.
    pub parameters: usize,
    /// The fixed, non-uniform upstream adjoint.
    pub upstream: Tensor,
    /// Gradients of `Σ upstream ⊙ output`: input, W_Q, W_K, W_V, W_O.
    pub gradients: [Tensor; 5],
    /// Central-difference check of those gradients.
    pub gradcheck: GradcheckReport,
    /// `(h, verdict)` for d_model = 6.
    pub head_choices: Vec<(usize, String)>,
    /// `(B,T,d,h)` split shape and weight shape of the exercise.
    pub exercise_shapes: (Vec<usize>, Vec<usize>),
    /// Parameters at d_model = 128.
    pub parameters_d128: usize,
    /// `(case, error)` for every rejected configuration or input.
    pub errors: Vec<(&'static str, String)>,
    /// The earlier chapter's weighted context `0.25·[1,0] + 0.75·[0,1]`.
    pub history_context: Vec<f64>,
    /// Weight shapes of one head over the example vs two heads.
    pub history_shapes: (Vec<usize>, Vec<usize>),
    /// No stored value on the tape is NaN or infinite.
    pub tape_finite: bool,
    /// Running the whole computation again gives bitwise the same output and gradients.
    pub replay_bitwise: bool,
}

/// The forward intermediates as plain tensors.
#[derive(Clone, Debug)]
pub struct ForwardValues {
    /// Q heads `[1,2,3,2]`.
    pub query_heads: Tensor,
    /// K heads.
    pub key_heads: Tensor,
    /// V heads.
    pub value_heads: Tensor,
    /// Q heads after RoPE.
    pub rotated_query_heads: Tensor,
    /// K heads after RoPE.
    pub rotated_key_heads: Tensor,
    /// Scores `[1,2,3,3]` before masking.
    pub scores: Tensor,
    /// Weights `[1,2,3,3]`.
    pub weights: Tensor,
    /// Head outputs `[1,2,3,2]`.
    pub head_outputs: Tensor,
    /// Merged `[1,3,4]`.
    pub merged: Tensor,
    /// Output `[1,3,4]`.
    pub output: Tensor,
}

impl ForwardValues {
    fn read(out: &MultiHeadAttentionOutput) -> Result<Self, TensorAutodiffError> {
        Ok(Self {
            query_heads: out.query_heads.value()?,
            key_heads: out.key_heads.value()?,
            value_heads: out.value_heads.value()?,
            rotated_query_heads: out.rotated_query_heads.value()?,
            rotated_key_heads: out.rotated_key_heads.value()?,
            scores: out.scores.value()?,
            weights: out.weights.value()?,
            head_outputs: out.head_outputs.value()?,
            merged: out.merged.value()?,
            output: out.output.value()?,
        })
    }
}

/// The input rows `[1,0,1,0]`, `[cos1,−sin1,0,1]`, `[cos2,−sin2,1,1]`.
pub fn example_input() -> Vec<f64> {
    let (c1, s1, c2, s2) = (1f64.cos(), 1f64.sin(), 2f64.cos(), 2f64.sin());
    vec![1.0, 0.0, 1.0, 0.0, c1, -s1, 0.0, 1.0, c2, -s2, 1.0, 1.0]
}

/// `I₄` for W_Q, W_K, W_V.
fn identity() -> Vec<f64> {
    (0..16).map(|i| if i % 5 == 0 { 1.0 } else { 0.0 }).collect()
}

/// W_O swapping the head groups: rows `r0=[0,0,1,0]`, `r1=[0,0,0,1]`, `r2=[1,0,0,0]`, `r3=[0,1,0,0]`.
pub fn output_map() -> Vec<f64> {
    vec![0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
}

/// The fixed upstream adjoint: `±(i+1)/10`, alternating in sign.
fn upstream() -> Result<Tensor, TensorAutodiffError> {
    let values = (0..BATCH * TOKENS * MODEL_WIDTH)
        .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 } * (i + 1) as f64 / 10.0)
        .collect();
    Tensor::new(&[BATCH, TOKENS, MODEL_WIDTH], values)
}

/// The layer of the example built on the given weight leaves.
fn layer(w: &[TensorValue]) -> Result<MultiHeadAttention, AttentionError> {
    MultiHeadAttention::from_parameters(
        w[0].clone(),
        w[1].clone(),
        w[2].clone(),
        w[3].clone(),
        HEADS,
        MAX_POSITIONS,
        ROPE_BASE,
    )
}

/// One complete run: forward, backward with the upstream adjoint, tape check.
fn run_once(input: &[f64]) -> Result<(MultiHeadAttentionOutput, [Tensor; 5], bool), Box<dyn Error>> {
    let x = parameter(&[BATCH, TOKENS, MODEL_WIDTH], input)?;
    let weights = [identity(), identity(), identity(), output_map()]
        .iter()
        .map(|w| parameter(&[MODEL_WIDTH, MODEL_WIDTH], w))
        .collect::<Result<Vec<_>, _>>()?;
    let out = layer(&weights)?.forward(&x, 0)?;
    let grads = out.output.backward_with(&upstream()?)?;
    let g = |v: &TensorValue| grads.get_or_zeros(v);
    let gradients = [g(&x), g(&weights[0]), g(&weights[1]), g(&weights[2]), g(&weights[3])];
    let finite = llm_from_scratch::Tape::of(&out.output).all_finite();
    Ok((out, gradients, finite))
}

/// The layer's output for an input, offset by `offset` positions.
fn output_at(input: &[f64], offset: usize) -> Result<MultiHeadAttentionOutput, Box<dyn Error>> {
    let weights = [identity(), identity(), identity(), output_map()]
        .iter()
        .map(|w| constant(&[MODEL_WIDTH, MODEL_WIDTH], w))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(layer(&weights)?.forward(&constant(&[BATCH, TOKENS, MODEL_WIDTH], input)?, offset)?)
}

/// Which head counts work for d_model = 6, in the order of the configuration checks.
fn head_choices() -> Vec<(usize, String)> {
    let mut rng = llm_from_scratch::nn::SplitMix64::new(0);
    [1, 2, 3, 4, 6]
        .into_iter()
        .map(|h| {
            let verdict = match MultiHeadAttention::new("exercise", 6, h, 8, 10_000.0, &mut rng) {
                Ok(_) => "valid".to_string(),
                Err(AttentionError::OddHeadWidth { head_width, .. }) => format!("odd_head_width({head_width})"),
                Err(AttentionError::HeadsDoNotDivide { .. }) => "not_a_divisor".to_string(),
                Err(other) => other.to_string(),
            };
            (h, verdict)
        })
        .collect()
}

/// Every error case of the chapter, each paired with the library's message.
fn error_cases() -> Result<Vec<(&'static str, String)>, Box<dyn Error>> {
    let mut rng = llm_from_scratch::nn::SplitMix64::new(1);
    let mut cases = Vec::new();
    let mut config = |name, d, h| {
        let message = match MultiHeadAttention::new("attention", d, h, MAX_POSITIONS, ROPE_BASE, &mut rng) {
            Ok(_) => "accepted".to_string(),
            Err(e) => e.to_string(),
        };
        cases.push((name, message));
    };
    config("zero_width", 0, 2);
    config("zero_heads", 4, 0);
    config("non_divisible", 6, 4);
    config("odd_head_width", 6, 2);
    let weights = [identity(), identity(), identity(), output_map()]
        .iter()
        .map(|w| constant(&[MODEL_WIDTH, MODEL_WIDTH], w))
        .collect::<Result<Vec<_>, _>>()?;
    let mha = self::layer(&weights)?;
    let mut input = |name, shape: &[usize], offset: usize, release: bool| -> Result<(), Box<dyn Error>> {
        let len = shape.iter().product();
        let x = constant(shape, &vec![0.5; len])?;
        if release {
            x.release();
        }
        let message = match mha.forward(&x, offset) {
            Ok(_) => "accepted".to_string(),
            Err(e) => e.to_string(),
        };
        cases.push((name, message));
        Ok(())
    };
    input("rank", &[3, 4], 0, false)?;
    input("width", &[1, 3, 5], 0, false)?;
    input("empty_tokens", &[1, 0, 4], 0, false)?;
    input("offset_overflow", &[1, 3, 4], usize::MAX - 1, false)?;
    input("position_range", &[1, 3, 4], 4, false)?;
    input("released_input", &[1, 3, 4], 0, true)?;
    input("released_input_bad_positions", &[1, 3, 4], 5, true)?;
    Ok(cases)
}

/// Computes the chapter's evidence.
///
/// # Errors
/// Only if the library rejects the fixed example (it does not).
pub fn learner_evidence() -> Result<Evidence, Box<dyn Error>> {
    let input = example_input();
    let (out, gradients, tape_finite) = run_once(&input)?;
    let forward = ForwardValues::read(&out)?;
    let (_, again, _) = run_once(&input)?;
    let replay = ForwardValues::read(&run_once(&input)?.0)?;
    let replay_bitwise = replay.output.bitwise_eq(&forward.output)
        && replay.weights.bitwise_eq(&forward.weights)
        && again.iter().zip(&gradients).all(|(a, b)| a.bitwise_eq(b));

    // change only token 2: earlier rows cannot see it
    let mut perturbed = input.clone();
    for v in &mut perturbed[2 * MODEL_WIDTH..] {
        *v += 0.75;
    }
    let prefix_perturbed_output = output_at(&perturbed, 0)?.output.value()?;
    let rows =
        |t: &Tensor, range: std::ops::Range<usize>| t.as_slice()[range].iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let prefix_rows_bitwise_equal = rows(&prefix_perturbed_output, 0..8) == rows(&forward.output, 0..8);
    let last_row_changed = rows(&prefix_perturbed_output, 8..12) != rows(&forward.output, 8..12);

    // RoPE sees only relative positions: shifting every token by 3 keeps every weight
    let shifted = output_at(&input, 3)?.weights.value()?;
    let common_offset_max_diff = shifted.max_abs_diff(&forward.weights).unwrap_or(f64::INFINITY);

    let mut inputs = vec![("input", Tensor::new(&[BATCH, TOKENS, MODEL_WIDTH], input.clone())?)];
    for (name, w) in [
        ("query_weight", identity()),
        ("key_weight", identity()),
        ("value_weight", identity()),
        ("output_weight", output_map()),
    ] {
        inputs.push((name, Tensor::new(&[MODEL_WIDTH, MODEL_WIDTH], w)?));
    }
    let config = GradcheckConfig { upstream: Some(upstream()?), ..GradcheckConfig::default() };
    let gradcheck = gradcheck(&inputs, &config, |v| -> Result<TensorValue, Box<dyn Error>> {
        Ok(layer(&v[1..])?.forward(&v[0], 0)?.output)
    })?;

    let mut rng = llm_from_scratch::nn::SplitMix64::new(2);
    let exercise = MultiHeadAttention::new("exercise", 12, 3, 8, 10_000.0, &mut rng)?;
    let ex_out = exercise.forward(&constant(&[2, 5, 12], &vec![0.1; 120])?, 0)?;
    let d128 = MultiHeadAttention::new("exercise", 128, 8, 8, 10_000.0, &mut rng)?;

    let history_context = vec![0.25 * 1.0 + 0.75 * 0.0, 0.25 * 0.0 + 0.75 * 1.0];
    Ok(Evidence {
        input: Tensor::new(&[BATCH, TOKENS, MODEL_WIDTH], input)?,
        output_weight: Tensor::new(&[MODEL_WIDTH, MODEL_WIDTH], output_map())?,
        prefix_perturbed_output,
        prefix_rows_bitwise_equal,
        last_row_changed,
        common_offset_max_diff,
        parameters: layer(&[
            constant(&[4, 4], &identity())?,
            constant(&[4, 4], &identity())?,
            constant(&[4, 4], &identity())?,
            constant(&[4, 4], &output_map())?,
        ])?
        .parameter_count(),
        upstream: upstream()?,
        gradients,
        gradcheck,
        head_choices: head_choices(),
        exercise_shapes: (ex_out.query_heads.shape().to_vec(), ex_out.weights.shape().to_vec()),
        parameters_d128: d128.parameter_count(),
        errors: error_cases()?,
        history_context,
        history_shapes: (vec![BATCH, TOKENS, TOKENS], forward.weights.shape().to_vec()),
        forward,
        tape_finite,
        replay_bitwise,
    })
}

/// Rows of one head of a `[1,h,T,w]` tensor, e.g. `[[1.000000,0.000000],[…]]`.
pub fn head_rows(t: &Tensor, head: usize) -> Vec<Vec<f64>> {
    let (tokens, width) = (t.shape()[2], t.shape()[3]);
    let start = head * tokens * width;
    t.as_slice()[start..start + tokens * width].chunks(width).map(<[f64]>::to_vec).collect()
}

/// The report, one `key=value` line each, in the chapter's order.
pub fn render_report(e: &Evidence) -> String {
    let f = &e.forward;
    let mut lines = vec![
        "chapter=30-multi-head-attention".to_string(),
        "prediction=head 0's rotated queries and keys are all [1,0], so it weighs visible tokens equally (1, 1/2, 1/3); head 1's vectors turn with position, so its weights differ; token 0 sees only itself in every head; no output row reads a later token".to_string(),
        format!(
            "config=batch:{BATCH} tokens:{TOKENS} model_width:{MODEL_WIDTH} heads:{HEADS} head_width:{} rope_base:{} max_positions:{MAX_POSITIONS} offset:0 bias:false w_q=w_k=w_v:identity w_o:swap_head_groups",
            MODEL_WIDTH / HEADS,
            fmt_f64(ROPE_BASE)
        ),
        format!("input={}", fmt_tensor(&e.input)),
        format!("projected_query_heads={}", fmt_tensor(&f.query_heads)),
        format!("projected_key_heads={}", fmt_tensor(&f.key_heads)),
        format!("projected_value_heads={}", fmt_tensor(&f.value_heads)),
        format!("rotated_query_heads={}", fmt_tensor(&f.rotated_query_heads)),
        format!("rotated_key_heads={}", fmt_tensor(&f.rotated_key_heads)),
        format!("attention_weights={}", fmt_tensor(&f.weights)),
        format!("head_outputs={}", fmt_tensor(&f.head_outputs)),
        format!("merged={}", fmt_tensor(&f.merged)),
        format!("output_weight={}", fmt_tensor(&e.output_weight)),
        format!("output={}", fmt_tensor(&f.output)),
    ];
    let score_row = &head_rows(&f.scores, 1)[1][..2];
    lines.push(format!(
        "heads=count:{HEADS} head0_weights:{} head1_weights:{} head1_scores_query1:{} head0_outputs:{} head1_outputs:{}",
        fmt_rows(&head_rows(&f.weights, 0)),
        fmt_rows(&head_rows(&f.weights, 1)),
        fmt_values(score_row),
        fmt_rows(&head_rows(&f.head_outputs, 0)),
        fmt_rows(&head_rows(&f.head_outputs, 1)),
    ));
    lines.push(format!(
        "prefix_perturbed_output={} changed_token:2 rows_0_1_bitwise_unchanged:{} row_2_changed:{}",
        fmt_tensor(&e.prefix_perturbed_output),
        e.prefix_rows_bitwise_equal,
        e.last_row_changed
    ));
    lines.push(
        "layout=weights:[in,out] y=x·W split:[B,T,h·d_h]->reshape[B,T,h,d_h]->transpose[B,h,T,d_h] merge:inverse head_h_columns:h·d_h..(h+1)·d_h rope:adjacent_pairs(0,1) on:query,key".to_string(),
    );
    lines.push(format!("parameters=count:{} formula:4·d_model²=4·{MODEL_WIDTH}² bias:none", e.parameters));
    lines.push(format!("upstream={}", fmt_tensor(&e.upstream)));
    let names = [
        "input_gradient",
        "query_weight_gradient",
        "key_weight_gradient",
        "value_weight_gradient",
        "output_weight_gradient",
    ];
    for (name, g) in names.iter().zip(&e.gradients) {
        lines.push(format!("{name}={}", fmt_tensor(g)));
    }
    let per: Vec<String> = e.gradcheck.tensors.iter().map(|t| format!("{}:{}", t.name, t.coordinates)).collect();
    lines.push(format!(
        "gradcheck=coordinates:{} {} delta:1e-6 epsilon:8e-6 failures:{} passed:{}",
        e.gradcheck.coordinates(),
        per.join(" "),
        e.gradcheck.failures(),
        e.gradcheck.passed()
    ));
    let choices: Vec<String> = e.head_choices.iter().map(|(h, v)| format!("h{h}:{v}")).collect();
    lines.push(format!(
        "shapes=d_model6:[{}] B2_T5_d12_h3:split:{} weights:{} parameters_d128:{}",
        choices.join(","),
        fmt_shape(&e.exercise_shapes.0),
        fmt_shape(&e.exercise_shapes.1),
        fmt_thousands(e.parameters_d128 as u128)
    ));
    let errors: Vec<String> = e.errors.iter().map(|(name, message)| format!("{name}:{{{message}}}")).collect();
    lines.push(format!("errors={}", errors.join(" ")));
    lines.push(format!(
        "history=earlier_context:0.25·[1,0]+0.75·[0,1]={} single_head_weights:{} tables:1 multi_head_weights:{} tables:{HEADS}",
        fmt_values(&e.history_context),
        fmt_shape(&e.history_shapes.0),
        fmt_shape(&e.history_shapes.1)
    ));
    lines.push(format!(
        "proof=tape_finite:{} replay:{} prefix_rows:{} common_offset_3_weights_within_1e-12:{} gradcheck:{}",
        e.tape_finite,
        if e.replay_bitwise { "bitwise" } else { "differs" },
        if e.prefix_rows_bitwise_equal { "bitwise" } else { "differs" },
        e.common_offset_max_diff <= 1e-12,
        if e.gradcheck.passed() { "pass" } else { "fail" }
    ));
    lines.push("next=31-pre-norm-residual: x + MHA(RMSNorm(x)), the attention half of a transformer block".to_string());
    let mut text = lines.join("\n");
    text.push('\n');
    text
}
