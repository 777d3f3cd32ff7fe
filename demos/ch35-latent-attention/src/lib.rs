//! # Chapter 35 — multi-head latent attention (MLA)
//!
//! Chapter 33's cache stores `2·G·d_h` numbers per token and layer. Grouped-query attention
//! shrinks it by sharing heads. Latent attention compresses instead: every token is squeezed
//! into one latent vector `c` of width `d_c`, shared by all heads, and each head rebuilds its key
//! and value from it:
//!
//! ```text
//! c_n   = x_n · W_DKV                      [d_c]        what the cache stores
//! k_h,n = c_n · A_h      (A = W_UK)        [d_h]        rebuilt, never stored
//! v_h,n = c_n · B_h      (B = W_UV)        [d_h]
//! ```
//!
//! ## Absorption: never rebuild a key
//!
//! `A_h` is a fixed matrix, so it can move to the query's side of the dot product:
//!
//! ```text
//! q_h,m · k_h,nᵀ = q_h,m · (c_n · A_h)ᵀ = (q_h,m · A_hᵀ) · c_nᵀ
//! Σ_n p_mn · v_h,n · W_O,h = (Σ_n p_mn · c_n) · (B_h · W_O,h)
//! ```
//!
//! The query is mapped into latent space once (`q·Aᵀ`, width `d_c`) and scored against the cached
//! latents directly. `B_h·W_O,h` is one merged output matrix. The *absorbed* path computes the
//! same numbers as the *direct* path, grouped in a different order, so they agree to 1e-12.
//!
//! ## Why RoPE needs its own branch
//!
//! RoPE rotates a query at position `m` by `R_m` and a key at position `n` by `R_n`. Rotating the
//! rebuilt key gives
//!
//! ```text
//! (R_m q_m) · (R_n A_hᵀ c_n)  =  q_mᵀ · R_{n−m} · A_hᵀ · c_n
//! ```
//!
//! The matrix between `q` and `c` is now `R_{n−m}·A_hᵀ`, which depends on the key's position.
//! No single fixed matrix can be folded into the query, so absorption breaks. MLA keeps the
//! content part unrotated and adds a small *decoupled* positional branch: a rotated query
//! `q_R = RoPE(x·W_QR)` per head and one rotated key `k_R = RoPE(x·W_KR)` of width `d_r`, shared by
//! all heads and cached beside `c`:
//!
//! ```text
//! score_h(m, n) = (q_h,m · k_h,n + q_R,h,m · k_R,n) / √(d_h + d_r)
//! ```
//!
//! ## What the cache costs
//!
//! Per token and layer: MLA `d_c + d_r`, MHA `2·H·d_h`, GQA `2·G·d_h`. With the sizes of
//! DeepSeek-V2 (`d_c = 512`, `d_r = 64`, `H = 128`, `d_h = 128`) that is 576 numbers against
//! 32,768 for MHA and 2,048 for a GQA with 8 kv heads.
#![doc = demo_support::chapter_page!(
    "ch35-latent-attention",
    "[`LatentAttention`](../llm_from_scratch/attention/struct.LatentAttention.html), [`LatentConfig`](../llm_from_scratch/attention/struct.LatentConfig.html) and [`kv_cache_bytes`](../llm_from_scratch/attention/fn.kv_cache_bytes.html)",
    ("chapter 34", "ch34_efficient_attention"),
    ("chapter 36", "ch36_tiny_decoder")
)]

use demo_support::evidence::{DemoResult, rejection};

use demo_support::report::{fmt_f64, fmt_gradcheck, fmt_values};
use llm_from_scratch::attention::{CacheLayout, LatentAttention, LatentConfig, kv_cache_bytes};
use llm_from_scratch::nn::SplitMix64;
use llm_from_scratch::{GradcheckConfig, GradcheckReport, Tensor, TensorValue, constant, fmt_shape, gradcheck};

mod figure;
pub use figure::{render_svg, render_thumbnail};

/// The agreement asked of two paths: `|a − b| ≤ 1e-12 · (1 + |b|)` for every element.
const TOLERANCE: f64 = 1e-12;
/// `B` and `T` of the comparison input.
const BATCH: usize = 2;
/// See [`BATCH`].
const TOKENS: usize = 6;
/// Position of the first token in the direct/absorbed comparison.
const OFFSET: usize = 3;
/// Chunk schedules of the cached decode (each sums to [`TOKENS`]).
const SCHEDULES: [&[usize]; 3] = [&[1, 1, 1, 1, 1, 1], &[3, 1, 2], &[6]];
/// Tokens of the realistic cache comparison (fp16, one layer).
const CACHE_TOKENS: usize = 4096;
/// Seed of the weights and inputs.
const SEED: u64 = 35;

/// The small layer of the chapter.
pub fn small_config() -> LatentConfig {
    LatentConfig {
        model_width: 12,
        heads: 3,
        head_width: 4,
        latent_width: 5,
        rope_width: 2,
        max_positions: 16,
        rope_base: 100.0,
    }
}

/// A DeepSeek-V2-like layer: `d = 5120`, `H = 128`, `d_h = 128`, `d_c = 512`, `d_r = 64`.
pub fn deepseek_like_config() -> LatentConfig {
    LatentConfig {
        model_width: 5120,
        heads: 128,
        head_width: 128,
        latent_width: 512,
        rope_width: 64,
        max_positions: 4096,
        rope_base: 10_000.0,
    }
}

/// What the chapter computes; `render_report` prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// `(name, shape)` of the latent, the rotated shared key, the weights and the output.
    pub shapes: Vec<(&'static str, Vec<usize>)>,
    /// Direct and absorbed outputs within 1e-12 (relative, `TOLERANCE`).
    pub outputs_match: bool,
    /// Direct and absorbed weights within 1e-12 (relative, `TOLERANCE`).
    pub weights_match: bool,
    /// `(input or parameter, gradients of both paths within TOLERANCE)`.
    pub gradients_match: Vec<(String, bool)>,
    /// Head 0's weights for the last query of batch row 0 (direct path).
    pub last_query_weights: Vec<f64>,
    /// The direct and the absorbed outputs `[2,6,12]` (for the figure).
    pub outputs: (Tensor, Tensor),
    /// The largest `|absorbed − direct|` of the outputs and of the weights.
    pub gaps: (f64, f64),
    /// `(schedule, equals the full pass, tokens in the cache, numbers stored)`.
    pub decodes: Vec<(String, bool, usize, usize)>,
    /// Numbers an MHA cache of the same small layer would store for the same tokens.
    pub mha_stored: u128,
    /// `(kind, numbers per token, bytes at 4096 tokens fp16, one layer)` for the realistic sizes.
    pub per_token: Vec<(&'static str, u128, u128)>,
    /// `LatentConfig::cached_per_token` of the realistic config.
    pub config_cached_per_token: usize,
    /// Largest `|direct − naive absorbed|` score when RoPE rotates the rebuilt key.
    pub rope_gap: f64,
    /// The scores of query 0 over key 0 (both at position 0, where `R_0 = I`) still agree.
    pub rope_position_zero_agrees: bool,
    /// Gradient checks of the direct and the absorbed path.
    pub gradchecks: Vec<(&'static str, GradcheckReport)>,
    /// `(case, message)` of inputs the library rejects.
    pub errors: Vec<(&'static str, String)>,
}

/// `|a − b| ≤ TOLERANCE · (1 + |b|)` element by element.
fn within(a: &Tensor, b: &Tensor) -> bool {
    a.shape() == b.shape()
        && a.as_slice().iter().zip(b.as_slice()).all(|(x, y)| (x - y).abs() <= TOLERANCE * (1.0 + y.abs()))
}

/// Computes the chapter's evidence through the library.
///
/// # Errors
/// Any library error (none is expected), or an error case that the library unexpectedly accepts.
pub fn learner_evidence() -> DemoResult<Evidence> {
    let mut rng = SplitMix64::new(SEED);
    let layer = LatentAttention::new(small_config(), &mut rng)?;
    let d = small_config().model_width;
    let input = Tensor::uniform(&[BATCH, TOKENS, d], -1.0, 1.0, &mut rng)?;
    let upstream = Tensor::uniform(&[BATCH, TOKENS, d], -1.0, 1.0, &mut rng)?;
    let x = TensorValue::leaf(input.clone(), true);
    let (direct, absorbed) = (layer.forward(&x, OFFSET)?, layer.forward_absorbed(&x, OFFSET)?);
    let (gd, ga) = (direct.output.backward_with(&upstream)?, absorbed.output.backward_with(&upstream)?);
    let mut gradients_match = vec![("x".to_string(), within(&ga.get_or_zeros(&x), &gd.get_or_zeros(&x)))];
    for p in layer.parameters().iter() {
        gradients_match.push((p.name().to_string(), within(&ga.get_or_zeros(p.value()), &gd.get_or_zeros(p.value()))));
    }
    let weights = direct.weights.value()?; // [B,H,T,T]
    let last_row = (TOKENS - 1) * TOKENS;
    let rope_x = constant(&[1, 5, d], Tensor::uniform(&[1, 5, d], -1.0, 1.0, &mut rng)?.as_slice())?;
    let (rope_direct, rope_absorbed) = layer.rope_on_reconstructed_keys(&rope_x, 0)?; // scores [1,3,5,5]
    // per head 5·5 scores; entry 0 is query 0 over key 0, both at position 0
    let first_pair = |scores: &Tensor| -> Vec<f64> { scores.as_slice().chunks(25).map(|head| head[0]).collect() };
    Ok(Evidence {
        shapes: vec![
            ("latent", direct.latent.shape().to_vec()),
            ("rope_key", direct.rope_key.shape().to_vec()),
            ("weights", direct.weights.shape().to_vec()),
            ("output", direct.output.shape().to_vec()),
        ],
        outputs_match: within(&absorbed.output.value()?, &direct.output.value()?),
        weights_match: within(&absorbed.weights.value()?, &weights),
        gaps: (
            absorbed.output.value()?.max_abs_diff(&direct.output.value()?).ok_or("outputs of different shapes")?,
            absorbed.weights.value()?.max_abs_diff(&weights).ok_or("weights of different shapes")?,
        ),
        outputs: (direct.output.value()?, absorbed.output.value()?),
        gradients_match,
        last_query_weights: weights.as_slice()[last_row..last_row + TOKENS].to_vec(),
        decodes: cached_decodes(&layer, &input)?,
        mha_stored: CacheLayout::Grouped { kv_heads: 3, head_width: 4, window: None }.values(TOKENS) * BATCH as u128,
        per_token: per_token_costs(),
        config_cached_per_token: deepseek_like_config().cached_per_token(),
        rope_gap: rope_direct.max_abs_diff(&rope_absorbed).ok_or("rope scores of different shapes")?,
        rope_position_zero_agrees: within(
            &Tensor::new(&[3], first_pair(&rope_absorbed))?,
            &Tensor::new(&[3], first_pair(&rope_direct))?,
        ),
        gradchecks: check_both_paths(&mut rng)?,
        errors: error_cases(&layer)?,
    })
}

/// Feeds `input [B,T,d]` through a fresh latent cache in the chunks of each schedule and compares
/// the stitched outputs with the full pass from position 0.
fn cached_decodes(layer: &LatentAttention, input: &Tensor) -> DemoResult<Vec<(String, bool, usize, usize)>> {
    let d = layer.config().model_width;
    let full = layer.forward(&constant(input.shape(), input.as_slice())?, 0)?.output.value()?;
    let mut results = Vec::new();
    for schedule in SCHEDULES {
        let mut cache = layer.new_cache(BATCH);
        let mut rows = vec![Vec::new(); BATCH]; // per batch row, the outputs in token order
        let mut start = 0;
        for &len in schedule {
            let chunk = constant(input.shape(), input.as_slice())?.slice_axis(1, start, start + len)?; // [B,len,d]
            let out = layer.forward_cached(&chunk, &mut cache)?;
            for (b, row) in rows.iter_mut().enumerate() {
                row.extend_from_slice(&out.as_slice()[b * len * d..(b + 1) * len * d]);
            }
            start += len;
        }
        let stitched = Tensor::new(full.shape(), rows.concat())?;
        let name: Vec<String> = schedule.iter().map(usize::to_string).collect();
        results.push((name.join("+"), within(&stitched, &full), cache.len(), cache.stored_values()));
    }
    Ok(results)
}

/// Numbers per token and bytes at 4096 tokens in fp16 for one layer of each kind.
fn per_token_costs() -> Vec<(&'static str, u128, u128)> {
    let layouts = [
        ("mla(d_c:512,d_r:64)", CacheLayout::Latent { latent_width: 512, rope_width: 64 }),
        ("mha(H:128,d_h:128)", CacheLayout::Grouped { kv_heads: 128, head_width: 128, window: None }),
        ("gqa(G:8,d_h:128)", CacheLayout::Grouped { kv_heads: 8, head_width: 128, window: None }),
    ];
    layouts.into_iter().map(|(name, l)| (name, l.values(1), kv_cache_bytes(&[l], CACHE_TOKENS, 1, 2))).collect()
}

/// Central differences over the input and all seven weights, through each path.
fn check_both_paths(rng: &mut SplitMix64) -> DemoResult<Vec<(&'static str, GradcheckReport)>> {
    let layer = LatentAttention::new(small_config(), rng)?;
    let params: Vec<(String, Tensor)> =
        layer.parameters().iter().map(|p| Ok((p.name().to_string(), p.value().value()?))).collect::<DemoResult<_>>()?;
    let mut inputs = vec![("x", Tensor::uniform(&[1, 4, 12], -1.0, 1.0, rng)?)];
    inputs.extend(params.iter().map(|(name, t)| (name.as_str(), t.clone())));
    let config = GradcheckConfig { delta: 1e-6, tolerance: 8e-6, ..GradcheckConfig::default() };
    let mut reports = Vec::new();
    for (path, absorbed) in [("direct", false), ("absorbed", true)] {
        let report = gradcheck(&inputs, &config, |v: &[TensorValue]| -> DemoResult<TensorValue> {
            // the order of `parameters()`: query, query_rope, down, key_rope, up_key, up_value, output
            let weights = llm_from_scratch::attention::LatentWeights::from_ordered(&v[1..])?;
            let layer = LatentAttention::from_weights(small_config(), weights)?;
            let out = if absorbed { layer.forward_absorbed(&v[0], 1)? } else { layer.forward(&v[0], 1)? };
            Ok(out.output)
        })?;
        reports.push((path, report));
    }
    Ok(reports)
}

/// An odd RoPE width, a zero latent width, a weight of the wrong shape, a cache made for another
/// batch, and positions past the RoPE capacity (16): 15 cached tokens, then 2 more.
fn error_cases(layer: &LatentAttention) -> DemoResult<Vec<(&'static str, String)>> {
    let mut rng = SplitMix64::new(SEED);
    let mut wrong = layer.weights().clone();
    wrong.up_value = TensorValue::leaf(Tensor::zeros(&[5, 11])?, true);
    let mut small_cache = layer.new_cache(1);
    let batch_error = layer.forward_cached(&constant(&[2, 1, 12], &[0.0; 24])?, &mut small_cache);
    let mut full_cache = layer.new_cache(1);
    layer.forward_cached(&constant(&[1, 15, 12], &[0.1; 180])?, &mut full_cache)?;
    Ok(vec![
        rejection("odd_rope_width", LatentAttention::new(LatentConfig { rope_width: 3, ..small_config() }, &mut rng))?,
        rejection(
            "zero_latent_width",
            LatentAttention::new(LatentConfig { latent_width: 0, ..small_config() }, &mut rng),
        )?,
        rejection("weight_shape", LatentAttention::from_weights(small_config(), wrong))?,
        rejection("cache_batch", batch_error)?,
        rejection("past_capacity", layer.forward_cached(&constant(&[1, 2, 12], &[0.1; 24])?, &mut full_cache))?,
    ])
}

/// The report, one `key=value` line each, ending with a newline.
pub fn render_report(evidence: &Evidence) -> String {
    let e = evidence;
    let c = small_config();
    let shapes: Vec<String> = e.shapes.iter().map(|(name, s)| format!("{name}:{}", fmt_shape(s))).collect();
    let grads: Vec<String> = e.gradients_match.iter().map(|(name, ok)| format!("{name}:{ok}")).collect();
    let mut lines = vec![
        "chapter=35-latent-attention".to_string(),
        "prediction=the absorbed path (q·Aᵀ)·Cᵀ and (P·C)·(B·W_O) equals the direct path to 1e-12 in \
         outputs, weights and gradients; decoding with a cache of C and k_R only equals the full \
         pass; the cache costs d_c+d_r = 576 numbers per token against 32768 for MHA and 2048 for \
         GQA with 8 kv heads; rotating the rebuilt key breaks absorption"
            .to_string(),
        format!(
            "config=model_width:{} heads:{} head_width:{} latent_width:{} rope_width:{} max_positions:{} \
             rope_base:{} batch:{BATCH} tokens:{TOKENS} offset:{OFFSET} tolerance:1e-12(relative) \
             input:uniform(-1,1) seed:{SEED}",
            c.model_width,
            c.heads,
            c.head_width,
            c.latent_width,
            c.rope_width,
            c.max_positions,
            fmt_f64(c.rope_base)
        ),
        format!("parameters={} cached_per_token:{}", c.parameter_count(), c.cached_per_token()),
        format!("shapes={}", shapes.join(" ")),
        format!("weights_b0_h0_last_query={}", fmt_values(&e.last_query_weights)),
        format!("absorbed_vs_direct=outputs_within_1e-12:{} weights_within_1e-12:{}", e.outputs_match, e.weights_match),
        format!("absorbed_vs_direct_gradients_within_1e-12=[{}]", grads.join(",")),
    ];
    for (schedule, ok, len, stored) in &e.decodes {
        lines.push(format!(
            "cached_decode_{schedule}=equals_full_pass_within_1e-12:{ok} cache_len:{len} stored_values:{stored} \
             (B·T·(d_c+d_r) = {BATCH}·{TOKENS}·{})",
            c.cached_per_token()
        ));
    }
    lines.push(format!("mha_cache_same_layer=stored_values:{} (B·T·2·H·d_h)", e.mha_stored));
    for (name, per_token, bytes) in &e.per_token {
        lines.push(format!(
            "cache_per_token_{name}=numbers:{per_token} bytes_4096_tokens_fp16_per_layer:{bytes} mib:{}",
            fmt_f64(*bytes as f64 / f64::from(1 << 20))
        ));
    }
    if let [(_, mla, _), (_, mha, _), (_, gqa, _)] = e.per_token[..] {
        lines.push(format!(
            "cache_ratios=mha/mla:{} gqa/mla:{} latent_config_cached_per_token:{}",
            fmt_f64(mha as f64 / mla as f64),
            fmt_f64(gqa as f64 / mla as f64),
            e.config_cached_per_token
        ));
    }
    lines.extend([
        format!(
            "rope_on_rebuilt_key=max_gap:{} gap_above_1e-3:{} query0_key0_agree_within_1e-12:{}",
            fmt_f64(e.rope_gap),
            e.rope_gap > 1e-3,
            e.rope_position_zero_agrees
        ),
        "rope_why=(R_m q)·(R_n Aᵀc_n) = qᵀ·R_(n-m)·Aᵀ·c_n: the matrix between q and c depends on the key \
         position n, so no fixed matrix can be absorbed into the query (it agrees only where m = n = 0, \
         R_0 = I); MLA rotates a separate shared key k_R instead"
            .to_string(),
    ]);
    for (path, report) in &e.gradchecks {
        lines.push(format!("gradcheck_{path}={}", fmt_gradcheck(report)));
    }
    lines.extend(e.errors.iter().map(|(case, message)| format!("error_{case}={message}")));
    lines
        .push("next=36-tiny-decoder: stack attention, feed-forward and normalisation into a small decoder".to_string());
    lines.join("\n") + "\n"
}
