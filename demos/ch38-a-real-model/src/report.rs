//! The chapter's report: one `key=value` line each, six decimals, canonical zero.

use demo_support::report::{fmt_f64, fmt_indices, fmt_thousands, fmt_values};
use llm_from_scratch::nn::RopeLayout;

use crate::{CONTINUATION, DIGITS, Evidence, PromptRun, QUESTION, SENTENCE, TOP};

/// Bytes of one stored value in the cache: f64 and fp16.
const F64_BYTES: usize = 8;
const FP16_BYTES: usize = 2;

/// `below:1e-12` when `x` is below it (the bound holds on every processor), else the value.
fn bound(x: f64) -> String {
    if x < 1e-12 { "below:1e-12".to_string() } else { format!("{x:e} (not below 1e-12)") }
}

/// `["a","b"]`: texts quoted as Rust writes them.
fn quoted(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(","))
}

/// The lines of one prompt (`--prompt`), ending with a newline.
pub fn render_prompt(p: &PromptRun) -> String {
    prompt_lines(p).join("\n") + "\n"
}

fn prompt_lines(p: &PromptRun) -> Vec<String> {
    let top: Vec<String> =
        p.top.iter().map(|(id, shown, logit)| format!("{id}:{shown:?}:{}", fmt_f64(*logit))).collect();
    let mut lines = vec![
        format!("prompt_{}=tokens:{} text:{:?}", p.name, p.ids.len(), p.text),
        format!("prompt_{}_ids={}", p.name, fmt_indices(&p.ids)),
        format!("prompt_{}_tokens={}", p.name, quoted(&p.tokens)),
        format!("prompt_{}_top{TOP}=[{}]", p.name, top.join(",")),
    ];
    if let Some((ids, text)) = &p.continuation {
        lines.push(format!("prompt_{}_greedy=tokens:{} ids:{} text:{text:?}", p.name, ids.len(), fmt_indices(ids)));
    }
    lines
}

/// The report, ending with a newline.
pub fn render_report(e: &Evidence) -> String {
    let c = &e.config;
    let (d, l, h, g, d_h, f, v) =
        (c.model_width, c.layers, c.query_heads, c.kv_heads, c.head_width, c.ffn_width, c.vocab_size);
    let attention = 2 * d * d_h * (h + g);
    let block = attention + 3 * d * f + 2 * d;
    let counted = v * d + l * block + d;
    let per_token = |bytes: usize, kv: usize| 2 * l * kv * d_h * bytes;
    let types: Vec<String> = e.file.tensor_types.iter().map(|(name, n)| format!("{name}:{n}")).collect();
    let layout = match c.rope_layout {
        RopeLayout::AdjacentPairs => "adjacent_pairs",
        RopeLayout::SplitHalves => "split_halves",
    };
    let shares = e.sink_shares();
    let t = e.attention_tokens().len();
    // a head that spread its weight evenly over what it sees would give key 0 a share 1/(q+1)
    let even = (1..t).map(|q| 1.0 / (q + 1) as f64).sum::<f64>() / (t.max(2) - 1) as f64;
    let later = shares.get(2..).unwrap_or(&[]);
    let mut lines = vec![
        "chapter=38-a-real-model".to_string(),
        format!(
            "prediction=a pretrained model is the same decoder as chapter 36 with numbers read from a file: its \
             greedy continuation of {SENTENCE:?} names Rome, it answers {QUESTION:?} in the file's chat template and \
             ends its turn, and in most blocks from the third on more than half of the attention goes to the first \
             token, a sink it learnt without being given one"
        ),
        format!(
            "file=name:{:?} architecture:{} bytes:{} tensors:{} types:[{}] chat_template:chatml_with_default_system:{}",
            e.file.name,
            e.file.architecture,
            fmt_thousands(e.file.bytes as u128),
            e.file.tensor_types.values().sum::<usize>(),
            types.join(","),
            e.file.chat_template_matches
        ),
        format!(
            "config=vocab:{v} model_width:{d} layers:{l} query_heads:{h} kv_heads:{g} head_width:{d_h} ffn_width:{f} \
             max_positions:{} rope_base:{} rope_layout:{layout} rms_eps:{:.1e} tied_embeddings:{} kernel:{:?}",
            c.max_positions,
            fmt_f64(c.rope_base),
            c.rms_eps,
            c.tie_embeddings,
            c.path
        ),
        format!(
            "parameters={} embedding:V·d={} per_block:{} (attention:2·d·d_h·(H+G)={} swiglu:3·d·f={} norms:2·d={}) \
             final_norm:{d} counted:{} matches:{}",
            fmt_thousands(e.parameters as u128),
            fmt_thousands((v * d) as u128),
            fmt_thousands(block as u128),
            fmt_thousands(attention as u128),
            fmt_thousands((3 * d * f) as u128),
            2 * d,
            fmt_thousands(counted as u128),
            counted == e.parameters
        ),
        format!(
            "kv_cache_per_token=2·L·G·d_h·b f64:{} fp16:{} fp16_if_it_were_mha(G=H={h}):{} fp16_at_{}_positions:{}",
            fmt_thousands(per_token(F64_BYTES, g) as u128),
            fmt_thousands(per_token(FP16_BYTES, g) as u128),
            fmt_thousands(per_token(FP16_BYTES, h) as u128),
            c.max_positions,
            fmt_thousands((per_token(FP16_BYTES, g) * c.max_positions) as u128)
        ),
    ];
    for p in &e.prompts {
        lines.extend(prompt_lines(p));
    }
    lines.extend([
        format!(
            "generation=greedy through the KV cache, at most {CONTINUATION} tokens, stopping after <|im_end|>; the \
             digits prompt {DIGITS:?} only lists its next tokens"
        ),
        format!(
            "kv_cache_prefill=sentence last_position_logits_vs_full_pass max_relative_difference:{}",
            bound(e.cache_difference)
        ),
        format!(
            "rope_layouts=as_stored:adjacent_pairs hugging_face:split_halves(rows_of_w_q_w_k_permuted) \
             logits_compared:{t}x{v} max_relative_difference:{}",
            bound(e.rope_difference)
        ),
        format!(
            "attention_sink_prompt=sentence tokens:{t} heads_per_layer:{h} query_positions:1..{}",
            t.saturating_sub(1)
        ),
        format!("attention_sink_share_per_layer={}", fmt_values(&shares)),
        format!(
            "attention_sink=even_spread_would_give:{} layers_0_1:{} mean_of_layers_2_on:{} layers_above_one_half:{}/{}",
            fmt_f64(even),
            fmt_values(shares.get(..2).unwrap_or(&[])),
            fmt_f64(later.iter().sum::<f64>() / later.len().max(1) as f64),
            shares.iter().filter(|&&s| s > 0.5).count(),
            shares.len()
        ),
        "next=what the heads that do not look at the sink look at: induction and previous-token heads, and how \
         quantization to 4 bits changed the logits"
            .to_string(),
    ]);
    lines.join("\n") + "\n"
}
