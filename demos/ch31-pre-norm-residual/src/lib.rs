//! # Chapter 31 — RMSNorm and the pre-norm residual branch
//!
//! Chapter 30 built multi-head attention. A transformer block does not apply it to the stream
//! directly: it *adds* attention's output to what was there (a residual connection), and it
//! feeds attention a *normalised* copy of the stream (pre-norm):
//!
//! ```text
//! RMSNorm(x) = x / sqrt(mean(x²) + ε) ⊙ g          per token, over the d_model coordinates
//! out        = x + MHA(RMSNorm(x))                   [B,T,d]
//! ```
//!
//! - **RMSNorm** divides each token's vector by its root mean square, so attention always sees
//!   vectors of the same size whatever the stream has accumulated; the gain `g` (initially ones)
//!   lets training pick a size per coordinate. Unlike LayerNorm it subtracts no mean and has no
//!   bias: one statistic per token, and the same results in practice (LLaMA, Mistral, Gemma).
//! - **The residual** keeps `x` itself on the main path. The branch only *adds* to it, and the
//!   derivative of `x + f(x)` is `I + f'(x)`: the upstream adjoint reaches `x` unchanged along
//!   the identity, whatever the branch does — this is what lets deep stacks train.
//! - **Pre-norm** (normalise the branch's input) versus post-norm (`RMSNorm(x + f(x))`, the
//!   original transformer): post-norm rescales the stream every block, so the identity path
//!   passes through a normalisation Jacobian each time; pre-norm leaves the stream alone and
//!   normalises once more at the very end of the model.
//!
//! The worked example continues chapter 30 exactly: the same `X`, `W_Q = W_K = W_V = I`, `W_O`
//! swapping the two head groups. The mean squares of the rows of `X` are `(1+1)/4 = 0.5`,
//! `(cos²1 + sin²1 + 1)/4 = 0.5` and `(cos²2 + sin²2 + 1 + 1)/4 = 0.75`, so RMSNorm multiplies them
//! by `√2`, `√2` and `2/√3` (with ε = 1e-6: `1.414212`, `1.414212`, `1.154700` — ε moves the sixth
//! decimal of √2 = 1.414214). Head 0 again rotates every row back to a multiple of `[1, 0]`, but
//! the multiples now differ (`√2, √2, 2/√3`), so its last row no longer averages uniformly: the
//! score of query 2 with key `j` is `c₂·c_j/√2`.
#![doc = demo_support::chapter_page!(
    "ch31-pre-norm-residual",
    "[`RmsNorm`](../llm_from_scratch/nn/struct.RmsNorm.html) and [`MultiHeadAttention`](../llm_from_scratch/attention/struct.MultiHeadAttention.html)",
    ("chapter 30", "ch30_multi_head_attention"),
    ("chapter 32", "ch32_grouped_query_attention")
)]

use demo_support::evidence::DemoResult;

use ch30_multi_head_attention::{HEADS, MAX_POSITIONS, MODEL_WIDTH, ROPE_BASE, TOKENS, example_input, head_rows};
use demo_support::report::{fmt_f64, fmt_rows, fmt_tensor, fmt_values};
use llm_from_scratch::attention::{MultiHeadAttention, MultiHeadAttentionOutput};
use llm_from_scratch::nn::RmsNorm;
use llm_from_scratch::{GradcheckConfig, GradcheckReport, Tensor, TensorValue, constant, gradcheck, parameter};

mod figure;
pub use figure::{render_svg, render_thumbnail};

/// ε of the RMSNorm (LLaMA's value).
pub const RMS_EPS: f64 = 1e-6;
/// The factor of the scale-invariance check.
pub const SCALE: f64 = 10.0;

/// What the chapter computes; [`render_report`] prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// X `[1,3,4]` (chapter 30's input).
    pub input: Tensor,
    /// `mean(x²)` of each row.
    pub mean_square: Vec<f64>,
    /// `1/sqrt(mean(x²) + ε)` of each row.
    pub inverse_rms: Vec<f64>,
    /// `RMSNorm(X)` with gain ones.
    pub normalized: Tensor,
    /// Root mean square of each normalised row.
    pub normalized_rms: Vec<f64>,
    /// Attention weights `[1,2,3,3]` on the normalised input.
    pub weights: Tensor,
    /// Chapter 30's weights on the raw input.
    pub ch30_weights: Tensor,
    /// The branch `MHA(RMSNorm(X))`.
    pub branch: Tensor,
    /// `X + branch`.
    pub output: Tensor,
    /// Root mean square of each output row (pre-norm: the stream keeps its own size).
    pub output_rms: Vec<f64>,
    /// `RMSNorm(X + MHA(X))`, the post-norm arrangement, and its rows' root mean squares.
    pub post_norm: (Tensor, Vec<f64>),
    /// Largest difference between the branch of `SCALE·X` and the branch of `X`, with ε = 1e-6
    /// and with ε = 0.
    pub scaled_branch_diff: (f64, f64),
    /// The upstream adjoint (chapter 30's).
    pub upstream: Tensor,
    /// Gradients of `Σ upstream ⊙ out`: input, gain, W_Q, W_K, W_V, W_O.
    pub gradients: [Tensor; 6],
    /// Gradient of `Σ upstream ⊙ branch` with respect to X: the branch path alone.
    pub branch_input_gradient: Tensor,
    /// `input_gradient == upstream + branch_input_gradient`, bitwise.
    pub identity_path_bitwise: bool,
    /// Central differences over the whole residual branch.
    pub gradcheck: GradcheckReport,
    /// Central differences over RMSNorm alone (input and a non-uniform gain).
    pub norm_gradcheck: GradcheckReport,
    /// Rows 0 and 1 of the output are bitwise unchanged when only token 2 changes.
    pub prefix_rows_bitwise: bool,
    /// Scalars: `4·d²` attention + `d` gain.
    pub parameters: usize,
    /// `(case, message)` of inputs the library rejects.
    pub errors: Vec<(&'static str, String)>,
    /// Every stored value on the tape is finite.
    pub tape_finite: bool,
    /// Running everything again gives bitwise the same output and gradients.
    pub replay_bitwise: bool,
}

/// `I₄`, chapter 30's W_Q = W_K = W_V.
fn identity() -> Vec<f64> {
    (0..MODEL_WIDTH * MODEL_WIDTH).map(|i| if i % (MODEL_WIDTH + 1) == 0 { 1.0 } else { 0.0 }).collect()
}

/// Chapter 30's upstream adjoint: `±(i+1)/10`, alternating in sign.
fn upstream() -> DemoResult<Tensor> {
    let values = (0..TOKENS * MODEL_WIDTH).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 } * (i + 1) as f64 / 10.0);
    Ok(Tensor::new(&[1, TOKENS, MODEL_WIDTH], values.collect())?)
}

/// `[W_Q, W_K, W_V, W_O]` of chapter 30.
fn weight_values() -> [Vec<f64>; 4] {
    [identity(), identity(), identity(), ch30_multi_head_attention::output_map()]
}

/// The norm (with `eps`) and the attention layer on the given leaves: gain `[d]`, then the four
/// weights.
fn layers_with(gain: &TensorValue, w: &[TensorValue], eps: f64) -> DemoResult<(RmsNorm, MultiHeadAttention)> {
    let norm = RmsNorm::from_gain("norm", gain.clone(), eps)?;
    let [q, k, v, o] = [0, 1, 2, 3].map(|i| w[i].clone());
    let mha = MultiHeadAttention::from_parameters(q, k, v, o, HEADS, MAX_POSITIONS, ROPE_BASE)?;
    Ok((norm, mha))
}

/// One pass of the residual branch.
struct Pass {
    normalized: TensorValue,
    attention: MultiHeadAttentionOutput,
    output: TensorValue,
}

/// [`layers_with`] at the chapter's ε.
fn layers(gain: &TensorValue, w: &[TensorValue]) -> DemoResult<(RmsNorm, MultiHeadAttention)> {
    layers_with(gain, w, RMS_EPS)
}

/// `x + MHA(RMSNorm(x))`.
fn residual(x: &TensorValue, gain: &TensorValue, w: &[TensorValue]) -> DemoResult<Pass> {
    residual_with(x, gain, w, RMS_EPS)
}

/// `x + MHA(RMSNorm(x))` with the norm's `eps`.
fn residual_with(x: &TensorValue, gain: &TensorValue, w: &[TensorValue], eps: f64) -> DemoResult<Pass> {
    let (norm, mha) = layers_with(gain, w, eps)?;
    let normalized = norm.forward(x)?; // [1,3,4], every row of rms ≈ 1
    let attention = mha.forward(&normalized, 0)?;
    let output = x.add(&attention.output)?; // the residual: [1,3,4]
    Ok(Pass { normalized, attention, output })
}

/// Leaves for the gain (ones) and the four weights.
fn leaves(
    make: fn(&[usize], &[f64]) -> Result<TensorValue, llm_from_scratch::TensorAutodiffError>,
) -> DemoResult<(TensorValue, Vec<TensorValue>)> {
    let gain = make(&[MODEL_WIDTH], &[1.0; MODEL_WIDTH])?;
    let weights =
        weight_values().iter().map(|w| make(&[MODEL_WIDTH, MODEL_WIDTH], w)).collect::<Result<Vec<_>, _>>()?;
    Ok((gain, weights))
}

/// Root mean square of every row of width `MODEL_WIDTH`.
fn row_rms(t: &Tensor) -> Vec<f64> {
    t.as_slice().chunks(MODEL_WIDTH).map(|r| (r.iter().map(|v| v * v).sum::<f64>() / r.len() as f64).sqrt()).collect()
}

/// Forward and backward with every leaf a parameter: output, pass values and the six gradients.
fn run_once(input: &[f64]) -> DemoResult<(Pass, [Tensor; 6], bool)> {
    let x = parameter(&[1, TOKENS, MODEL_WIDTH], input)?;
    let (gain, w) = leaves(parameter)?;
    let pass = residual(&x, &gain, &w)?;
    let grads = pass.output.backward_with(&upstream()?)?;
    let g = |v: &TensorValue| grads.get_or_zeros(v);
    let gradients = [g(&x), g(&gain), g(&w[0]), g(&w[1]), g(&w[2]), g(&w[3])];
    let finite = llm_from_scratch::Tape::of(&pass.output).all_finite();
    Ok((pass, gradients, finite))
}

/// Every input of the chapter the library must refuse, with its message.
fn error_cases() -> DemoResult<Vec<(&'static str, String)>> {
    let message = |r: Result<TensorValue, llm_from_scratch::nn::NnError>| match r {
        Ok(_) => "accepted".to_string(),
        Err(e) => e.to_string(),
    };
    let x = constant(&[1, TOKENS, MODEL_WIDTH], &example_input())?;
    let norm = RmsNorm::new("norm", MODEL_WIDTH, RMS_EPS)?;
    let released = constant(&[1, TOKENS, MODEL_WIDTH], &example_input())?;
    released.release();
    let config = |r: Result<RmsNorm, llm_from_scratch::nn::NnError>| match r {
        Ok(_) => "accepted".to_string(),
        Err(e) => e.to_string(),
    };
    Ok(vec![
        ("gain_shape", config(RmsNorm::from_gain("norm", constant(&[2, 2], &[1.0; 4])?, RMS_EPS))),
        ("negative_eps", config(RmsNorm::new("norm", MODEL_WIDTH, -1e-6))),
        ("zero_width", config(RmsNorm::new("norm", 0, RMS_EPS))),
        ("input_width", message(RmsNorm::new("norm", 3, RMS_EPS)?.forward(&x))),
        ("released_input", message(norm.forward(&released))),
    ])
}

/// Computes the chapter's evidence.
///
/// # Errors
/// Only if the library rejects the fixed example (it does not).
pub fn learner_evidence() -> DemoResult<Evidence> {
    let input = example_input();
    let (pass, gradients, tape_finite) = run_once(&input)?;
    let (again, again_gradients, _) = run_once(&input)?;
    let output = pass.output.value()?;
    let replay_bitwise = again.output.value()?.bitwise_eq(&output)
        && again_gradients.iter().zip(&gradients).all(|(a, b)| a.bitwise_eq(b));

    // the branch alone, and its gradient with respect to x
    let x = parameter(&[1, TOKENS, MODEL_WIDTH], &input)?;
    let (gain, w) = leaves(constant)?;
    let alone = residual(&x, &gain, &w)?;
    let branch_input_gradient = alone.attention.output.backward_with(&upstream()?)?.get_or_zeros(&x);
    let upstream = upstream()?;
    let identity_sum: Vec<f64> =
        upstream.as_slice().iter().zip(branch_input_gradient.as_slice()).map(|(u, b)| u + b).collect();
    let identity_path_bitwise = Tensor::new(upstream.shape(), identity_sum)?.bitwise_eq(&gradients[0]);

    // RMSNorm forgets the size of each token: the branch of 10·x is the branch of x, up to ε
    // (which weighs 100 times less against the mean square of 10·x)
    let scaled_input: Vec<f64> = input.iter().map(|v| v * SCALE).collect();
    let scaled_branch_diff = |eps: f64| -> DemoResult<f64> {
        let branch = |values: &[f64]| -> DemoResult<Tensor> {
            let x = constant(&[1, TOKENS, MODEL_WIDTH], values)?;
            Ok(residual_with(&x, &gain, &w, eps)?.attention.output.value()?)
        };
        Ok(branch(&scaled_input)?.max_abs_diff(&branch(&input)?).unwrap_or(f64::INFINITY))
    };
    let scaled_branch_diff = (scaled_branch_diff(RMS_EPS)?, scaled_branch_diff(0.0)?);

    // post-norm for comparison: RMSNorm(x + MHA(x))
    let (norm, mha) = layers(&gain, &w)?;
    let raw = constant(&[1, TOKENS, MODEL_WIDTH], &input)?;
    let ch30 = mha.forward(&raw, 0)?;
    let post = norm.forward(&raw.add(&ch30.output)?)?.value()?;

    // change only token 2: RMSNorm works per token, so rows 0 and 1 still cannot see it
    let mut perturbed = input.clone();
    perturbed[2 * MODEL_WIDTH..].iter_mut().for_each(|v| *v += 0.75);
    let changed = residual(&constant(&[1, TOKENS, MODEL_WIDTH], &perturbed)?, &gain, &w)?.output.value()?;
    let bits = |t: &Tensor| t.as_slice()[..2 * MODEL_WIDTH].iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let prefix_rows_bitwise = bits(&changed) == bits(&output);

    let mut inputs = vec![("input", Tensor::new(&[1, TOKENS, MODEL_WIDTH], input.clone())?)];
    inputs.push(("gain", Tensor::new(&[MODEL_WIDTH], vec![1.0; MODEL_WIDTH])?));
    for (name, w) in ["query_weight", "key_weight", "value_weight", "output_weight"].into_iter().zip(weight_values()) {
        inputs.push((name, Tensor::new(&[MODEL_WIDTH, MODEL_WIDTH], w)?));
    }
    let check = GradcheckConfig { upstream: Some(upstream.clone()), ..GradcheckConfig::default() };
    let gradcheck_report =
        gradcheck(&inputs, &check, |v| -> DemoResult<TensorValue> { Ok(residual(&v[0], &v[1], &v[2..])?.output) })?;
    // RMSNorm alone, with a gain that is not all ones so that its role in the backward shows
    let norm_inputs = [inputs[0].clone(), ("gain", Tensor::new(&[MODEL_WIDTH], vec![0.5, 1.5, -0.7, 1.1])?)];
    let norm_gradcheck = gradcheck(&norm_inputs, &check, |v| v[0].rms_norm(&v[1], RMS_EPS))?;

    let x_tensor = Tensor::new(&[1, TOKENS, MODEL_WIDTH], input)?;
    let mean_square: Vec<f64> = row_rms(&x_tensor).iter().map(|r| r * r).collect();
    let normalized = pass.normalized.value()?;
    let branch = pass.attention.output.value()?;
    Ok(Evidence {
        inverse_rms: mean_square.iter().map(|m| 1.0 / (m + RMS_EPS).sqrt()).collect(),
        mean_square,
        normalized_rms: row_rms(&normalized),
        normalized,
        weights: pass.attention.weights.value()?,
        ch30_weights: ch30.weights.value()?,
        branch,
        output_rms: row_rms(&output),
        output,
        post_norm: (post.clone(), row_rms(&post)),
        scaled_branch_diff,
        upstream,
        gradients,
        branch_input_gradient,
        identity_path_bitwise,
        gradcheck: gradcheck_report,
        norm_gradcheck,
        prefix_rows_bitwise,
        parameters: mha.parameter_count() + MODEL_WIDTH,
        errors: error_cases()?,
        input: x_tensor,
        tape_finite,
        replay_bitwise,
    })
}

fn fmt_check(report: &GradcheckReport) -> String {
    let per: Vec<String> = report.tensors.iter().map(|t| format!("{}:{}", t.name, t.coordinates)).collect();
    format!(
        "coordinates:{} {} delta:1e-6 epsilon:8e-6 failures:{} passed:{}",
        report.coordinates(),
        per.join(" "),
        report.failures(),
        report.passed()
    )
}

/// The report, one `key=value` line each, ending with a newline.
pub fn render_report(e: &Evidence) -> String {
    let mut lines = vec![
        "chapter=31-pre-norm-residual".to_string(),
        "prediction=RMSNorm rescales every token to root mean square 1 (the rows of X have mean squares 0.5, 0.5, \
         0.75, so they are multiplied by √2, √2, 2/√3); head 0's scores then differ for query 2 and its weights stop \
         being uniform; the residual adds the branch to X unchanged, so the input gradient is the upstream adjoint \
         plus the branch's; the branch of 10·X equals the branch of X up to ε; token 0 still sees only itself"
            .to_string(),
        format!(
            "config=batch:1 tokens:{TOKENS} model_width:{MODEL_WIDTH} heads:{HEADS} head_width:{} rope_base:{} \
             max_positions:{MAX_POSITIONS} rms_eps:1e-6 gain:ones w_q=w_k=w_v:identity w_o:swap_head_groups \
             placement:pre_norm out=x+MHA(RMSNorm(x))",
            MODEL_WIDTH / HEADS,
            fmt_f64(ROPE_BASE)
        ),
        format!("input={}", fmt_tensor(&e.input)),
        format!(
            "rms_norm=mean_square:{} inverse_rms:{} formula:1/sqrt(mean(x²)+eps)",
            fmt_values(&e.mean_square),
            fmt_values(&e.inverse_rms)
        ),
        format!("normalized={}", fmt_tensor(&e.normalized)),
        format!("normalized_row_rms={}", fmt_values(&e.normalized_rms)),
        format!("attention_weights={}", fmt_tensor(&e.weights)),
        format!(
            "compare_ch30=head0_weights_raw_x:{} head0_weights_normalized_x:{} head1_weights_raw_x:{} \
             head1_weights_normalized_x:{}",
            fmt_rows(&head_rows(&e.ch30_weights, 0)),
            fmt_rows(&head_rows(&e.weights, 0)),
            fmt_rows(&head_rows(&e.ch30_weights, 1)),
            fmt_rows(&head_rows(&e.weights, 1))
        ),
        format!("branch={}", fmt_tensor(&e.branch)),
        format!("output={}", fmt_tensor(&e.output)),
        format!(
            "stream_row_rms=input:{} pre_norm_output:{} post_norm_output:{} post_norm_values:{}",
            fmt_values(&row_rms(&e.input)),
            fmt_values(&e.output_rms),
            fmt_values(&e.post_norm.1),
            fmt_values(e.post_norm.0.as_slice())
        ),
        format!(
            "scale_invariance=max_abs(branch(10·x)-branch(x)) eps_1e-6:{} (ε counts 100 times less against mean(x²) \
             of 10·x) eps_0:within_1e-12:{}",
            fmt_f64(e.scaled_branch_diff.0),
            e.scaled_branch_diff.1 <= 1e-12
        ),
        format!("parameters=count:{} formula:4·d_model²+d_model=4·4²+4 bias:none", e.parameters),
        format!("upstream={}", fmt_tensor(&e.upstream)),
    ];
    let names = [
        "input_gradient",
        "gain_gradient",
        "query_weight_gradient",
        "key_weight_gradient",
        "value_weight_gradient",
        "output_weight_gradient",
    ];
    for (name, g) in names.iter().zip(&e.gradients) {
        lines.push(format!("{name}={}", fmt_tensor(g)));
    }
    lines.push(format!(
        "identity_path=branch_input_gradient:{} input_gradient=upstream+branch_input_gradient:{}",
        fmt_tensor(&e.branch_input_gradient),
        if e.identity_path_bitwise { "bitwise" } else { "differs" }
    ));
    lines.push(format!("gradcheck={}", fmt_check(&e.gradcheck)));
    lines.push(format!("rms_norm_gradcheck=gain:[0.5,1.5,-0.7,1.1] {}", fmt_check(&e.norm_gradcheck)));
    let errors: Vec<String> = e.errors.iter().map(|(name, message)| format!("{name}:{{{message}}}")).collect();
    lines.push(format!("errors={}", errors.join(" ")));
    lines.push(format!(
        "proof=tape_finite:{} replay:{} prefix_rows:{} identity_path:{} gradcheck:{} rms_norm_gradcheck:{}",
        e.tape_finite,
        if e.replay_bitwise { "bitwise" } else { "differs" },
        if e.prefix_rows_bitwise { "bitwise" } else { "differs" },
        if e.identity_path_bitwise { "bitwise" } else { "differs" },
        if e.gradcheck.passed() { "pass" } else { "fail" },
        if e.norm_gradcheck.passed() { "pass" } else { "fail" }
    ));
    lines.push(
        "next=32-grouped-query-attention: H query heads sharing G key/value heads, the attention of modern blocks"
            .to_string(),
    );
    lines.join("\n") + "\n"
}
