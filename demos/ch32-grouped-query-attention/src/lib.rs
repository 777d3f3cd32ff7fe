//! # Chapter 32 — grouped-query attention
//!
//! Multi-head attention (chapter 30) gives every query head its own key head and value head. When
//! a model generates text it keeps the keys and values of every earlier token (chapter 33), and
//! that cache, not the weights, ends up being the memory bill. Grouped-query attention (GQA) keeps
//! `H` query heads but computes only `G` key/value heads (`H % G == 0`). Each key/value head
//! serves a *group* of `H/G` consecutive query heads:
//!
//! ```text
//! Q = X·W_Q   [B,T,H·d_h] → [B,H,T,d_h]       W_Q [d, H·d_h]
//! K = X·W_K   [B,T,G·d_h] → [B,G,T,d_h]       W_K [d, G·d_h]     RoPE on Q and K
//! V = X·W_V   [B,T,G·d_h] → [B,G,T,d_h]       W_V [d, G·d_h]
//! g(h) = ⌊h / (H/G)⌋                          the key/value head read by query head h
//! O_h  = softmax(mask(Q_h · K_g(h)ᵀ / √d_h)) · V_g(h)     [B,H,T,d_h] → merge → · W_O [H·d_h, d]
//! ```
//!
//! - `G = H`: each group holds one head, which is multi-head attention (MHA).
//! - `G = 1`: one key/value head shared by every query, which is multi-query attention (MQA).
//! - In between (Mistral-7B: 32 query heads over 8): close to MHA in quality, at a quarter of its
//!   cache.
//!
//! ## Why G heads save memory
//!
//! A query is used once and thrown away, but a key and a value are read again by every later
//! token. So the cache holds `2·L·G·d_h` numbers per token (K and V in each of the `L` layers),
//! `2·L·G·d_h·T·B·b` bytes for `T` tokens, `B` sequences and `b` bytes per number. That is linear
//! in `G`, not `H`, so GQA divides the cache by `H/G`. At 4096 tokens in fp16
//! (`b = 2`):
//!
//! ```text
//! LLaMA-7B    2·32·32·128·4096·2 = 2,147,483,648 B = 2 GiB       (MHA, G = H = 32)
//! Mistral-7B  2·32· 8·128·4096·2 =   536,870,912 B = 512 MiB     (G = 8:  4× less)
//! Gemma-2B    2·18· 1·256·4096·2 =    75,497,472 B = 72 MiB      (G = 1:  8× less than its MHA twin, 576 MiB)
//! ```
//!
//! The weights shrink too, but less: `W_Q` and `W_O` keep `d·H·d_h` numbers each, while `W_K` and
//! `W_V` drop to `d·G·d_h`. The layer holds `2·d·d_h·(H + G)` numbers, plus `H·d_h + 2·G·d_h + d`
//! biases if it has them. For Mistral-7B that is `2·4096·128·(32 + 8) = 1,048,576·40 = 41,943,040`.
//!
//! ## Groups are consecutive: repeat-interleave, not tiling
//!
//! The grouping is a reshape of the queries, `[B,H,T,d_h] → [B,G,H/G,T,d_h]`, against keys viewed
//! as `[B,G,1,T,d_h]`. The matrix product broadcasts the single key head over its group, so K and
//! V are never copied. Consecutive query heads therefore share a key head: for `H = 8, G = 2`
//! the map is `[0,0,0,0,1,1,1,1]`. That is the order of `repeat_interleave`. Writing code that
//! expands K by *tiling* instead (`[K0,K1,K0,K1,…]`, the order of a plain `repeat`) gives
//! `[0,1,0,1,0,1,0,1]`. Every shape still fits and nothing fails, but four of the eight heads
//! read the wrong keys, so a checkpoint loaded that way is silently a different model. The report
//! finds the library's map by experiment: each query head's output equals, bit for bit, the
//! explicit attention over exactly one key/value head.
#![doc = demo_support::chapter_page!(
    "ch32-grouped-query-attention",
    "[`GroupedQueryAttention`](../llm_from_scratch/attention/struct.GroupedQueryAttention.html), [`AttentionConfig`](../llm_from_scratch/attention/struct.AttentionConfig.html) and [`QkvProjections`](../llm_from_scratch/nn/struct.QkvProjections.html)",
    ("chapter 31", "ch31_pre_norm_residual"),
    ("chapter 33", "ch33_kv_cache")
)]

use demo_support::evidence::{DemoResult, rejection};

use demo_support::report::{fmt_f64, fmt_gradcheck, fmt_indices, fmt_tensor, fmt_thousands};
use llm_from_scratch::attention::{
    AttentionConfig, AttentionTrace, GroupedQueryAttention, MultiHeadAttention, merge_heads,
    scaled_dot_product_attention,
};
use llm_from_scratch::nn::{Linear, QkvProjections, SplitMix64};
use llm_from_scratch::{GradcheckConfig, GradcheckReport, Mask, Tensor, TensorValue, concat, fmt_shape, gradcheck};

mod figure;
pub use figure::{render_svg, render_thumbnail};

/// Batch size of the worked layer.
pub const BATCH: usize = 1;
/// Tokens of the worked layer.
pub const TOKENS: usize = 4;
/// `d`, the model width.
pub const MODEL_WIDTH: usize = 8;
/// `H`, query heads.
pub const QUERY_HEADS: usize = 8;
/// `G`, key/value heads.
pub const KV_HEADS: usize = 2;
/// `d_h`.
pub const HEAD_WIDTH: usize = 2;
/// RoPE capacity.
pub const MAX_POSITIONS: usize = 16;
/// RoPE frequency base.
pub const ROPE_BASE: f64 = 100.0;
/// Seed of every random weight and input.
pub const SEED: u64 = 32;
/// Tokens in the cache-size table.
pub const CACHE_TOKENS: usize = 4096;
/// Bytes per fp16 number.
pub const FP16_BYTES: usize = 2;
/// Heads of the smaller layers used by the equivalences and the gradient check (`d_h = 2`).
const SMALL_HEADS: usize = 4;

/// A published attention layer: its configuration, its depth, and what the library computes.
#[derive(Clone, Debug)]
pub struct KnownModel {
    /// Short name used as the report key.
    pub name: &'static str,
    /// One attention layer.
    pub config: AttentionConfig,
    /// Layers, when the cache size is reported.
    pub layers: Option<usize>,
    /// [`AttentionConfig::parameter_count`].
    pub parameters: usize,
    /// [`AttentionConfig::kv_cache_bytes`] at 4096 tokens, batch 1, fp16.
    pub cache_bytes: Option<u128>,
}

/// The `G = 1` layer against multi-query attention written as one broadcast product.
#[derive(Clone, Debug)]
pub struct MqaCheck {
    /// Head outputs equal bit for bit.
    pub head_outputs_bitwise: bool,
    /// Weights equal bit for bit.
    pub weights_bitwise: bool,
    /// `[B,H,T,d_h]` of the queries.
    pub query_shape: Vec<usize>,
    /// `[B,1,T,d_h]` of the one stored key head.
    pub key_shape: Vec<usize>,
}

/// What the chapter computes; [`render_report`] prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// The input `[1,4,8]`.
    pub input: Tensor,
    /// The worked layer's output `[1,4,8]`.
    pub output: Tensor,
    /// Shapes of Q heads, K heads, V heads, weights, merged, output.
    pub shapes: Vec<(&'static str, Vec<usize>)>,
    /// For each query head, the key/value head whose explicit attention matches its output bit for
    /// bit (`None` if not exactly one does).
    pub observed_mapping: Vec<Option<usize>>,
    /// The layer's output equals the head-by-head recomputation with `⌊h/(H/G)⌋`, bit for bit.
    pub interleaved_bitwise: bool,
    /// Query heads whose output changes when they read `h mod G` instead.
    pub tiled_wrong_heads: Vec<usize>,
    /// The largest difference between the layer's output and the tiled recomputation.
    pub tiled_max_diff: f64,
    /// The worked layer's parameter count.
    pub parameters: usize,
    /// Parameter counts and cache sizes of published models.
    pub models: Vec<KnownModel>,
    /// One 7B-sized layer (`d = 4096`, `H = 32`, `d_h = 128`, 32 layers) as MHA (`G = 32`), GQA
    /// (`G = 8`) and MQA (`G = 1`): what sharing saves (for the figure).
    pub sharing: Vec<KnownModel>,
    /// GQA with `G = H` matches `MultiHeadAttention` with the same weights (outputs and weights
    /// within 1e-12).
    pub mha_within_1e12: bool,
    /// GQA with `G = 1` against multi-query attention by broadcasting.
    pub mqa: MqaCheck,
    /// Central differences through a biased GQA layer.
    pub gradcheck: GradcheckReport,
    /// `(case, message)` of configurations the library rejects.
    pub errors: Vec<(&'static str, String)>,
}

/// Query head `h` reads key/value head `⌊h / (H/G)⌋`: the repeat-interleave order.
pub fn interleaved_mapping(query_heads: usize, kv_heads: usize) -> Vec<usize> {
    let group = query_heads / kv_heads.max(1);
    (0..query_heads).map(|h| h / group.max(1)).collect()
}

/// The trap: `h mod G`, which is the order produced by tiling K `H/G` times.
pub fn tiled_mapping(query_heads: usize, kv_heads: usize) -> Vec<usize> {
    (0..query_heads).map(|h| h % kv_heads.max(1)).collect()
}

/// The published configurations of chapter 32 (one attention layer each).
fn known_models() -> Vec<(&'static str, AttentionConfig, Option<usize>)> {
    vec![
        ("gpt1", AttentionConfig::multi_head(768, 12).with_bias(true), None),
        ("llama_7b", AttentionConfig::multi_head(4096, 32), Some(32)),
        ("mistral_7b", AttentionConfig::new(4096, 32, 8, 128), Some(32)),
        ("gemma_2b", AttentionConfig::new(2048, 8, 1, 256), Some(18)),
        ("gemma_2b_if_mha", AttentionConfig::new(2048, 8, 8, 256), Some(18)),
        ("gemma_7b", AttentionConfig::new(3072, 16, 16, 256), Some(28)),
        ("mha_8x32_bias", AttentionConfig::new(256, 8, 8, 32).with_bias(true), None),
    ]
}

/// Computes the chapter's evidence through the library.
///
/// # Errors
/// Any library error (none is expected), or an invalid configuration the library accepts.
pub fn learner_evidence() -> DemoResult<Evidence> {
    let mut rng = SplitMix64::new(SEED);
    let config =
        AttentionConfig::new(MODEL_WIDTH, QUERY_HEADS, KV_HEADS, HEAD_WIDTH).with_rope(MAX_POSITIONS, ROPE_BASE);
    let layer = GroupedQueryAttention::new("attention", config, &mut rng)?;
    let input = Tensor::uniform(&[BATCH, TOKENS, MODEL_WIDTH], -1.0, 1.0, &mut rng)?;
    let x = TensorValue::leaf(input.clone(), false);
    let trace = layer.forward(&x, 0)?;
    let output = trace.output.value()?;

    let interleaved = interleaved_mapping(QUERY_HEADS, KV_HEADS);
    let tiled = tiled_mapping(QUERY_HEADS, KV_HEADS);
    let mut observed_mapping = Vec::with_capacity(QUERY_HEADS);
    let mut tiled_wrong_heads = Vec::new();
    for (h, &tiled_kv) in tiled.iter().enumerate() {
        let got = kept(&trace.head_outputs)?.slice_axis(1, h, h + 1)?.value()?; // [B,1,T,d_h]
        let mut matches = Vec::new();
        for kv in 0..KV_HEADS {
            if explicit_head(&trace, h, kv)?.value()?.bitwise_eq(&got) {
                matches.push(kv);
            }
        }
        observed_mapping.push(if matches.len() == 1 { Some(matches[0]) } else { None });
        if !explicit_head(&trace, h, tiled_kv)?.value()?.bitwise_eq(&got) {
            tiled_wrong_heads.push(h);
        }
    }
    let tiled_output = explicit_output(&layer, &trace, &tiled)?;

    let measure = |(name, config, layers): (&'static str, AttentionConfig, Option<usize>)| KnownModel {
        name,
        parameters: config.parameter_count(),
        cache_bytes: layers.map(|l| config.kv_cache_bytes(l, CACHE_TOKENS, 1, FP16_BYTES)),
        config,
        layers,
    };
    let models = known_models().into_iter().map(measure).collect();
    let sharing = [("MHA G=32", 32), ("GQA G=8", 8), ("MQA G=1", 1)]
        .into_iter()
        .map(|(name, g)| measure((name, AttentionConfig::new(4096, 32, g, 128), Some(32))))
        .collect();
    Ok(Evidence {
        shapes: vec![
            ("query_heads", trace.rotated_query_heads.shape().to_vec()),
            ("key_heads", trace.rotated_key_heads.shape().to_vec()),
            ("value_heads", kept(&trace.value_heads)?.shape().to_vec()),
            ("weights", kept(&trace.weights)?.shape().to_vec()),
            ("merged", trace.merged.shape().to_vec()),
            ("output", trace.output.shape().to_vec()),
        ],
        observed_mapping,
        interleaved_bitwise: explicit_output(&layer, &trace, &interleaved)?.bitwise_eq(&output),
        tiled_wrong_heads,
        tiled_max_diff: tiled_output.max_abs_diff(&output).ok_or("tiled output has another shape")?,
        parameters: layer.parameter_count(),
        models,
        sharing,
        mha_within_1e12: mha_equivalence(&x, &mut rng)?,
        mqa: mqa_equivalence(&x, &mut rng)?,
        gradcheck: check_gradients(&mut rng)?,
        errors: config_errors()?,
        input,
        output,
    })
}

/// The weights `[B,H,T,T]` of a pass with the explicit kernel (the default).
/// An intermediate the explicit kernel keeps in the trace (the tiled one does not form it).
fn kept(x: &Option<TensorValue>) -> DemoResult<&TensorValue> {
    x.as_ref().ok_or_else(|| "the explicit kernel keeps every intermediate".into())
}

/// Query head `h` recomputed on its own from the trace, reading key/value head `kv`:
/// `softmax(mask(q_h·k_kvᵀ/√d_h))·v_kv`, shape `[B,1,T,d_h]`.
fn explicit_head(trace: &AttentionTrace, h: usize, kv: usize) -> DemoResult<TensorValue> {
    let pick = |t: &TensorValue, i: usize| t.slice_axis(1, i, i + 1); // [B,·,T,d_h] → [B,1,T,d_h]
    let t = trace.rotated_query_heads.shape()[2];
    let attention = scaled_dot_product_attention(
        &pick(&trace.rotated_query_heads, h)?,
        &pick(&trace.rotated_key_heads, kv)?,
        &pick(kept(&trace.value_heads)?, kv)?,
        Some(&Mask::causal(t, t, 0)?),
    )?;
    Ok(attention.output().clone())
}

/// The layer's output rebuilt head by head, query head `h` reading key/value head `mapping[h]`,
/// then merged and projected by the layer's own `W_O`.
fn explicit_output(layer: &GroupedQueryAttention, trace: &AttentionTrace, mapping: &[usize]) -> DemoResult<Tensor> {
    let heads =
        mapping.iter().enumerate().map(|(h, &kv)| explicit_head(trace, h, kv)).collect::<DemoResult<Vec<_>>>()?;
    let refs: Vec<&TensorValue> = heads.iter().collect();
    let merged = merge_heads(&concat(&refs, 1)?)?; // H × [B,1,T,d_h] → [B,H,T,d_h] → [B,T,H·d_h]
    Ok(layer.output_projection().forward(&merged)?.value()?)
}

/// `G = H`: the grouped layer and `MultiHeadAttention` built from the same four `[8,8]` weights
/// agree on outputs and weights within 1e-12 (the two paths group their products differently).
fn mha_equivalence(x: &TensorValue, rng: &mut SplitMix64) -> DemoResult<bool> {
    let w = (0..4)
        .map(|_| Ok(TensorValue::leaf(Tensor::uniform(&[MODEL_WIDTH, MODEL_WIDTH], -1.0, 1.0, rng)?, false)))
        .collect::<DemoResult<Vec<_>>>()?;
    let mha = MultiHeadAttention::from_parameters(
        w[0].clone(),
        w[1].clone(),
        w[2].clone(),
        w[3].clone(),
        SMALL_HEADS,
        MAX_POSITIONS,
        ROPE_BASE,
    )?;
    let config =
        AttentionConfig::new(MODEL_WIDTH, SMALL_HEADS, SMALL_HEADS, HEAD_WIDTH).with_rope(MAX_POSITIONS, ROPE_BASE);
    let qkv = QkvProjections::from_weights(w[0].clone(), w[1].clone(), w[2].clone())?;
    let gqa =
        GroupedQueryAttention::from_parts("attention", config, qkv, Linear::from_parameters(w[3].clone(), None)?)?;
    let (a, b) = (mha.forward(x, 0)?, gqa.forward(x, 0)?);
    let within = |p: &TensorValue, q: &TensorValue| -> DemoResult<bool> {
        Ok(p.value()?.max_abs_diff(&q.value()?).is_some_and(|d| d <= 1e-12))
    };
    Ok(within(&a.output, &b.output)? && within(&a.weights, kept(&b.weights)?)?)
}

/// `G = 1`: the layer against multi-query attention written as one broadcast product,
/// `q [B,H,T,d_h]` over `k, v [B,1,T,d_h]`: the one key/value head is broadcast, never copied.
fn mqa_equivalence(x: &TensorValue, rng: &mut SplitMix64) -> DemoResult<MqaCheck> {
    let config = AttentionConfig::new(MODEL_WIDTH, SMALL_HEADS, 1, HEAD_WIDTH).with_rope(MAX_POSITIONS, ROPE_BASE);
    let layer = GroupedQueryAttention::new("attention", config, rng)?;
    let trace = layer.forward(x, 0)?;
    let broadcast = scaled_dot_product_attention(
        &trace.rotated_query_heads,
        &trace.rotated_key_heads,
        kept(&trace.value_heads)?,
        Some(&Mask::causal(TOKENS, TOKENS, 0)?),
    )?;
    Ok(MqaCheck {
        head_outputs_bitwise: broadcast.output().value()?.bitwise_eq(&kept(&trace.head_outputs)?.value()?),
        weights_bitwise: broadcast.weights().value()?.bitwise_eq(&kept(&trace.weights)?.value()?),
        query_shape: trace.rotated_query_heads.shape().to_vec(),
        key_shape: trace.rotated_key_heads.shape().to_vec(),
    })
}

/// Central differences (δ = 1e-6, ε = 8e-6) through a GQA layer with `H = 4, G = 2` and biases,
/// on a `[1,3,8]` input: every coordinate of the input, the four weights and the four biases.
fn check_gradients(rng: &mut SplitMix64) -> DemoResult<GradcheckReport> {
    let config = AttentionConfig::new(MODEL_WIDTH, SMALL_HEADS, KV_HEADS, HEAD_WIDTH)
        .with_rope(MAX_POSITIONS, ROPE_BASE)
        .with_bias(true);
    let layer = GroupedQueryAttention::new("attention", config.clone(), rng)?;
    let [wq, wk, wv] = layer.qkv().weights();
    let [bq, bk, bv] = layer.qkv().biases().ok_or("the gradient-check layer has biases")?;
    let wo = layer.output_projection().weight();
    let bo = layer.output_projection().bias().ok_or("the gradient-check layer has an output bias")?;
    let mut inputs = vec![("input", Tensor::uniform(&[1, 3, MODEL_WIDTH], -1.0, 1.0, rng)?)];
    let named = [
        ("query_weight", wq),
        ("key_weight", wk),
        ("value_weight", wv),
        ("query_bias", bq),
        ("key_bias", bk),
        ("value_bias", bv),
        ("output_weight", wo),
        ("output_bias", bo),
    ];
    for (name, p) in named {
        inputs.push((name, p.value()?));
    }
    let gradcheck_config = GradcheckConfig { delta: 1e-6, tolerance: 8e-6, ..GradcheckConfig::default() };
    gradcheck(&inputs, &gradcheck_config, |v: &[TensorValue]| -> DemoResult<TensorValue> {
        let biases = [v[4].clone(), v[5].clone(), v[6].clone()];
        let qkv =
            QkvProjections::from_parameters("attention", [v[1].clone(), v[2].clone(), v[3].clone()], Some(biases))?;
        let output = Linear::from_parameters(v[7].clone(), Some(v[8].clone()))?;
        Ok(GroupedQueryAttention::from_parts("attention", config.clone(), qkv, output)?.forward(&v[0], 0)?.output)
    })
}

/// `H % G ≠ 0`, `H = 0`, `G = 0`.
fn config_errors() -> DemoResult<Vec<(&'static str, String)>> {
    let mut rng = SplitMix64::new(SEED);
    [
        ("groups_do_not_divide", AttentionConfig::new(MODEL_WIDTH, 6, 4, HEAD_WIDTH)),
        ("zero_heads", AttentionConfig::new(MODEL_WIDTH, 0, 1, HEAD_WIDTH)),
        ("zero_kv_heads", AttentionConfig::new(MODEL_WIDTH, 2, 0, HEAD_WIDTH)),
    ]
    .into_iter()
    .map(|(case, config)| rejection(case, GroupedQueryAttention::new("attention", config, &mut rng)))
    .collect()
}

fn bitwise(equal: bool) -> &'static str {
    if equal { "bitwise" } else { "differs" }
}

/// The report, one `key=value` line each, ending with a newline.
pub fn render_report(e: &Evidence) -> String {
    let observed: Vec<String> =
        e.observed_mapping.iter().map(|m| m.map_or_else(|| "none".to_string(), |g| g.to_string())).collect();
    let shapes: Vec<String> = e.shapes.iter().map(|(name, s)| format!("{name}:{}", fmt_shape(s))).collect();
    let mut lines = vec![
        "chapter=32-grouped-query-attention".to_string(),
        "prediction=8 query heads over 2 key/value heads: heads 0-3 read kv head 0 and heads 4-7 read kv head 1 \
         (repeat-interleave), so recomputing each head with that map reproduces the layer bit for bit while the \
         tiled map h mod 2 changes heads 1,3,4,6; G=H is multi-head and G=1 multi-query attention; the cache \
         shrinks by H/G (Mistral-7B 512 MiB vs LLaMA-7B 2 GiB) while the weights shrink only in W_K and W_V"
            .to_string(),
        format!(
            "config=batch:{BATCH} tokens:{TOKENS} model_width:{MODEL_WIDTH} query_heads:{QUERY_HEADS} \
             kv_heads:{KV_HEADS} group_size:{} head_width:{HEAD_WIDTH} rope_base:{} max_positions:{MAX_POSITIONS} \
             bias:false weights:uniform(±1/sqrt(d)) input:uniform(-1,1) seed:{SEED}",
            QUERY_HEADS / KV_HEADS,
            fmt_f64(ROPE_BASE)
        ),
        format!(
            "grouping_rule=H:{QUERY_HEADS} G:{KV_HEADS} kv_head(h)=floor(h/(H/G)) repeat_interleave:{} \
             tiled(h mod G):{}",
            fmt_indices(&interleaved_mapping(QUERY_HEADS, KV_HEADS)),
            fmt_indices(&tiled_mapping(QUERY_HEADS, KV_HEADS))
        ),
        format!(
            "observed_mapping=[{}] method:the_kv_head_whose_explicit_attention_equals_the_head_bitwise",
            observed.join(",")
        ),
        format!("shapes={}", shapes.join(" ")),
        format!("input={}", fmt_tensor(&e.input)),
        format!("output={}", fmt_tensor(&e.output)),
        format!("explicit_repeat_interleave=output:{}", bitwise(e.interleaved_bitwise)),
        format!(
            "explicit_tiled=output:{} wrong_heads:{} max_abs_diff:{}",
            bitwise(e.tiled_max_diff == 0.0),
            fmt_indices(&e.tiled_wrong_heads),
            fmt_f64(e.tiled_max_diff)
        ),
        format!(
            "parameters=count:{} formula:2·d·d_h·(H+G)=2·{MODEL_WIDTH}·{HEAD_WIDTH}·({QUERY_HEADS}+{KV_HEADS}) \
             bias:H·d_h+2·G·d_h+d when enabled",
            e.parameters
        ),
    ];
    for m in e.models.iter().filter(|m| m.name != "gemma_2b_if_mha") {
        let c = &m.config;
        lines.push(format!(
            "parameters_{}=d:{} query_heads:{} kv_heads:{} head_width:{} bias:{} count:{}",
            m.name,
            c.model_width,
            c.query_heads,
            c.kv_heads,
            c.head_width,
            c.bias,
            fmt_thousands(m.parameters as u128)
        ));
    }
    for m in &e.models {
        let (Some(layers), Some(bytes)) = (m.layers, m.cache_bytes) else { continue };
        let c = &m.config;
        lines.push(format!(
            "kv_cache_{}=layers:{layers} kv_heads:{} head_width:{} tokens:{CACHE_TOKENS} batch:1 bytes_per_value:{FP16_BYTES} \
             bytes:{} mib:{} gib:{}",
            m.name,
            c.kv_heads,
            c.head_width,
            fmt_thousands(bytes),
            fmt_f64(bytes as f64 / (1u64 << 20) as f64),
            fmt_f64(bytes as f64 / (1u64 << 30) as f64)
        ));
    }
    lines.push(format!(
        "equivalence_mha=G:H={SMALL_HEADS} vs MultiHeadAttention same weights outputs_and_weights_within_1e-12:{}",
        e.mha_within_1e12
    ));
    lines.push(format!(
        "equivalence_mqa=G:1 H:{SMALL_HEADS} vs broadcast q{}·k{} head_outputs:{} weights:{}",
        fmt_shape(&e.mqa.query_shape),
        fmt_shape(&e.mqa.key_shape),
        bitwise(e.mqa.head_outputs_bitwise),
        bitwise(e.mqa.weights_bitwise)
    ));
    lines.push(format!("gradcheck=layer:H{SMALL_HEADS}_G{KV_HEADS}_bias {}", fmt_gradcheck(&e.gradcheck)));
    lines.extend(e.errors.iter().map(|(case, message)| format!("error_{case}={message}")));
    lines.push(
        "next=33-kv-cache: prefill once, then decode token by token from cached keys and values (G heads, not H)"
            .to_string(),
    );
    lines.join("\n") + "\n"
}
