//! # Chapter 38 — a real model
//!
//! Every chapter so far built its weights from a seed or trained them for a minute. This one
//! loads a model someone else trained: SmolLM2-135M-Instruct, 135 million parameters trained on
//! trillions of tokens, read from a GGUF file (`scripts/fetch-model` downloads it; 98 MB,
//! quantized to 4 bits and dequantized here to `f64`). Nothing new is computed with it: the same
//! [`Decoder`](../llm_from_scratch/model/struct.Decoder.html) as chapter 36 runs the same code, and the file only fills in the numbers.
//!
//! ```text
//! GGUF file ──gguf_tokenizer──▶ byte-level BPE (49,152 tokens, ChatML specials)
//!           ──load_gguf_llama──▶ Decoder: 30 blocks of
//!                 x + GQA(RMSNorm(x))        9 query heads over 3 kv heads, d_h = 64, RoPE base 100,000
//!                 h + SwiGLU(RMSNorm(h))     1,536 hidden units
//!             final RMSNorm, head tied to the embedding (576 → 49,152)
//! ```
//!
//! ## Where the earlier chapters are
//!
//! * chapters 27–28: every head of every block computes `softmax(q·kᵀ/√64)` under the causal mask;
//!   the report prints, for one prompt, where those weights go;
//! * chapter 29: RoPE, in the file's layout (adjacent pairs, llama.cpp) *and* in Hugging Face's
//!   (split halves, with W_Q and W_K's rows put back): the two loadings give the same logits;
//! * chapters 30–32: 9 query heads share 3 key/value heads, so the KV cache holds 3 heads per
//!   layer — chapter 32's `2·L·G·d_h·b` bytes per token, a third of what multi-head attention
//!   would need;
//! * chapter 33: the continuations are decoded one token at a time against that cache;
//! * chapter 34: the *attention sink*. Chapter 34 gave attention an explicit sink logit; this
//!   model was trained without one and grew its own: in 24 of its 30 blocks, most of the attention
//!   goes to the first token, whatever it is (an even spread would give it 18 %). A token every
//!   query can see is a place to put probability a head does not want to spend, because softmax
//!   must spend all of it. The report measures the share per block; the figure draws it, beside a
//!   previous-token head of block 1 that does look at the text.
//!
//! ## What a learner sees
//!
//! The tokens of three prompts (a sentence, a ChatML chat turn in the file's template, a sentence
//! with digits — split one digit per token), the five most likely next tokens with their logits,
//! and greedy continuations: the 135M model completes the sentence and answers the question. The
//! numbers are the same on every kernel target (portable, AVX2, AVX-512 compute bitwise alike),
//! and they agree with an independent float64 PyTorch forward to 1e-14 (the library's
//! `real_model` tests).
//!
//! `--prompt TEXT` does the same for a text of your own (ChatML tokens included).
//!
//! Without the model file the chapter cannot compute: the binary says how to fetch it and exits
//! with status 1, and the tests say so on one line and pass.
#![doc = demo_support::chapter_page!(
    "ch38-a-real-model",
    "[`llama_from_gguf`](../llm_from_scratch/gguf/fn.llama_from_gguf.html), [`BpeTokenizer`](../llm_from_scratch/bpe/tokenizer/struct.BpeTokenizer.html) and [`Decoder::forward_traced`](../llm_from_scratch/model/struct.Decoder.html#method.forward_traced)",
    ("chapter 37", "ch37_train_on_text"),
    ("the chapters", "llm_book")
)]

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use llm_from_scratch::bpe::BpeTokenizer;
use llm_from_scratch::gguf::{Gguf, GgufRope, QuantizedLlama, gguf_tokenizer, llama_from_gguf, model_path_from_env};
use llm_from_scratch::model::{Decoder, DecoderConfig, Decoding, Generator, Overflow, Sampling};
use llm_from_scratch::nn::SplitMix64;

pub mod figure;
mod report;
pub mod tokens;

pub use demo_support::evidence::DemoResult;
pub use figure::{THUMBNAIL_TITLE, render_svg, render_thumbnail};
pub use report::{render_prompt, render_report};

/// The one line that says how to get the model.
pub const NO_MODEL: &str = "no model file: run scripts/fetch-model, then set LLM_MODEL=<path> or pass --model PATH";
/// The prompt whose attention weights are measured and drawn.
pub const SENTENCE: &str = "The capital of France is Paris, and the capital of Italy is";
/// The question of the chat prompt.
pub const QUESTION: &str = "What is 2 plus 2?";
/// A sentence with digits (SmolLM2's pre-tokenizer splits them one by one).
pub const DIGITS: &str = "In 1969, 2 people walked on the moon; 3 stayed in orbit for";
/// Tokens of each greedy continuation at most (fewer if the model ends its turn).
pub const CONTINUATION: usize = 32;
/// How many next tokens are listed per prompt.
pub const TOP: usize = 5;
/// The system message the file's chat template inserts when a conversation has none.
pub const DEFAULT_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
/// The chat template's end-of-turn token.
pub const END_OF_TURN: &str = "<|im_end|>";

/// `question` as the file's chat template renders a one-message conversation with the generation
/// prompt: its default system turn, the user turn, then the assistant's turn opened.
pub fn chat_prompt(question: &str) -> String {
    format!(
        "<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    )
}

/// What the file says about itself.
#[derive(Clone, Debug, PartialEq)]
pub struct FileSummary {
    /// `general.name`.
    pub name: String,
    /// `general.architecture`.
    pub architecture: String,
    /// Bytes of the file.
    pub bytes: usize,
    /// How many tensors are stored in each type, by type name.
    pub tensor_types: BTreeMap<String, usize>,
    /// The file's `tokenizer.chat_template` is the shape [`chat_prompt`] writes.
    pub chat_template_matches: bool,
}

/// One prompt: its tokens, the most likely next tokens, and perhaps a greedy continuation.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptRun {
    /// Its name in the report.
    pub name: &'static str,
    /// The text.
    pub text: String,
    /// Its token ids.
    pub ids: Vec<usize>,
    /// Each token as [`tokens::shown`] writes it.
    pub tokens: Vec<String>,
    /// The [`TOP`] most likely next tokens: `(id, shown, logit)`, best first (ties by id).
    pub top: Vec<(usize, String, f64)>,
    /// The greedy continuation (ids, text), when asked for.
    pub continuation: Option<(Vec<usize>, String)>,
}

/// Everything the report prints and the figure draws.
#[derive(Clone, Debug, PartialEq)]
pub struct Evidence {
    /// The file.
    pub file: FileSummary,
    /// The configuration read from it.
    pub config: DecoderConfig,
    /// Scalars in the model.
    pub parameters: usize,
    /// The prompts, [`SENTENCE`] first.
    pub prompts: Vec<PromptRun>,
    /// `max |a − b| / max |a|` over every logit of [`SENTENCE`], loaded as stored (a) and in Hugging
    /// Face's order (b).
    pub rope_difference: f64,
    /// The same between the full pass and the cached prefill's last row.
    pub cache_difference: f64,
    /// Per layer, the attention weights `[H, T, T]` of [`SENTENCE`], row-major.
    pub attention: Vec<Vec<f64>>,
}

impl Evidence {
    /// `T`, the tokens of the attention prompt.
    pub fn attention_tokens(&self) -> &[String] {
        self.prompts.first().map_or(&[], |p| &p.tokens)
    }

    /// Per layer, the share of attention that goes to token 0: the mean over heads and over query
    /// positions `≥ 1` (position 0 can only see itself) of `weights[h, q, 0]`.
    pub fn sink_shares(&self) -> Vec<f64> {
        let t = self.attention_tokens().len();
        self.attention
            .iter()
            .map(|w| {
                let rows: Vec<f64> =
                    w.chunks(t.max(1)).enumerate().filter(|(r, _)| r % t >= 1).map(|(_, row)| row[0]).collect();
                rows.iter().sum::<f64>() / rows.len().max(1) as f64
            })
            .collect()
    }
}

/// The path of the model: `--model` if given, else [`model_path_from_env`].
///
/// # Errors
/// [`NO_MODEL`] when there is none.
pub fn model_path(given: Option<&Path>) -> DemoResult<PathBuf> {
    given.map(Path::to_path_buf).or_else(model_path_from_env).ok_or_else(|| NO_MODEL.into())
}

/// The chapter's evidence from the model [`model_path_from_env`] finds.
///
/// # Errors
/// [`NO_MODEL`]; the file's errors.
pub fn learner_evidence() -> DemoResult<Evidence> {
    evidence_from(&model_path(None)?)
}

/// The chapter's evidence from the GGUF file at `path`.
///
/// # Errors
/// The file cannot be read or is not SmolLM2's kind of model; a prompt the model refuses.
pub fn evidence_from(path: &Path) -> DemoResult<Evidence> {
    let bytes = read_model(path)?;
    let file = Gguf::parse(&bytes)?;
    let tokenizer = gguf_tokenizer(&file)?;
    let model = llama_from_gguf(&file, GgufRope::AsStored)?;
    let mut prompts = Vec::new();
    // (name, text, tokens of the greedy continuation)
    for (name, text, steps) in [
        ("sentence", SENTENCE.to_string(), CONTINUATION),
        ("chat", chat_prompt(QUESTION), CONTINUATION),
        ("digits", DIGITS.to_string(), 0),
    ] {
        prompts.push(run_prompt(&model, &tokenizer, name, text, steps)?);
    }
    // the attention prompt once through the full (taped) pass, keeping every layer's weights
    let ids = &prompts[0].ids;
    let trace = model.forward_traced(ids, [1, ids.len()])?;
    let logits = trace.logits.value()?;
    let mut attention = Vec::with_capacity(trace.attention.len());
    for layer in &trace.attention {
        attention
            .push(layer.weights.as_ref().ok_or("the explicit kernel keeps its weights")?.value()?.as_slice().to_vec());
    }
    let vocab = model.config().vocab_size;
    let last = &logits.as_slice()[(ids.len() - 1) * vocab..];
    let cache_difference = relative_difference(last, &prefill_logits(&model, ids)?);
    let (config, parameters) = (model.config().clone(), model.parameter_count());
    drop(trace);
    drop(model);
    // chapter 29's two layouts: W_Q and W_K's rows in Hugging Face's order, RoPE on split halves
    let hugging_face = llama_from_gguf(&file, GgufRope::HuggingFace)?;
    let other = hugging_face.forward(ids, [1, ids.len()])?.value()?;
    let rope_difference = relative_difference(logits.as_slice(), other.as_slice());
    Ok(Evidence {
        file: summary(&file, bytes.len()),
        config,
        parameters,
        prompts,
        rope_difference,
        cache_difference,
        attention,
    })
}

/// The bytes of the model file.
fn read_model(path: &Path) -> DemoResult<Vec<u8>> {
    std::fs::read(path).map_err(|e| format!("cannot read the model {}: {e}", path.display()).into())
}

/// The tokenizer and the model (rows as stored) of the GGUF file at `path`.
///
/// # Errors
/// The file cannot be read or is not SmolLM2's kind of model.
pub fn load(path: &Path) -> DemoResult<(BpeTokenizer, Decoder)> {
    let bytes = read_model(path)?;
    let file = Gguf::parse(&bytes)?;
    Ok((gguf_tokenizer(&file)?, llama_from_gguf(&file, GgufRope::AsStored)?))
}

/// The tokenizer and the model of the GGUF file at `path`, its weights kept in the file's blocks
/// (98 MB instead of 1.08 GB of `f64`; the same logits, bitwise).
///
/// # Errors
/// The file cannot be read or is not a LLaMA with a tokenizer this crate reads.
pub fn load_quantized(path: &Path) -> DemoResult<(BpeTokenizer, QuantizedLlama)> {
    let bytes = read_model(path)?;
    let tokenizer = gguf_tokenizer(&Gguf::parse(&bytes)?)?;
    Ok((tokenizer, QuantizedLlama::from_bytes(bytes, GgufRope::AsStored)?))
}

/// `max |a − b| / max |a|`.
fn relative_difference(a: &[f64], b: &[f64]) -> f64 {
    let scale = a.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let gap = a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    if a.len() == b.len() { gap / scale } else { f64::INFINITY }
}

/// The logits `[V]` after `ids`, from a prefill of fresh KV caches.
fn prefill_logits(model: &Decoder, ids: &[usize]) -> DemoResult<Vec<f64>> {
    let logits = model.forward_cached(ids, [1, ids.len()], &mut model.new_caches(1))?;
    Ok(logits.as_slice()[logits.len() - model.config().vocab_size..].to_vec())
}

/// Tokens, top next tokens and a greedy continuation of up to `steps` tokens (none if 0) of
/// `text`, all through the KV cache: the prefill's last row gives the top tokens, then one token
/// at a time, stopping after [`END_OF_TURN`]. `model` is the `f64` [`Decoder`] (the report) or
/// the model kept in the file's blocks (`--prompt`, [`load_quantized`]).
///
/// # Errors
/// An empty or too long prompt; the model's errors.
pub fn run_prompt<M: Generator<Error: std::error::Error + 'static>>(
    model: &M,
    tokenizer: &BpeTokenizer,
    name: &'static str,
    text: String,
    steps: usize,
) -> DemoResult<PromptRun> {
    let ids = tokenizer.encode(&text);
    let end = tokenizer.id_of(END_OF_TURN);
    let (mut first, mut generated) = (None, Vec::new());
    let rng = &mut SplitMix64::new(0); // greedy never draws
    let decode = (Sampling::Greedy, Decoding::KvCache, Overflow::Refuse);
    model.generate_streaming(&ids, steps.max(1), decode.0, decode.1, decode.2, rng, |id, logits| {
        first.get_or_insert_with(|| logits.to_vec());
        generated.push(id);
        if Some(id) == end { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    })?;
    let logits = first.ok_or("the model generated nothing")?;
    let top = tokens::top(&logits, TOP)
        .into_iter()
        .map(|id| Ok((id, tokens::shown(tokenizer, id)?, logits[id])))
        .collect::<DemoResult<Vec<_>>>()?;
    let continuation = match steps {
        0 => None,
        _ => Some((generated.clone(), tokenizer.decode(&generated)?)),
    };
    let shown = ids.iter().map(|&id| tokens::shown(tokenizer, id)).collect::<Result<_, _>>()?;
    Ok(PromptRun { name, text, ids, tokens: shown, top, continuation })
}

/// Name, architecture, size, tensor types and chat template of `file`.
fn summary(file: &Gguf<'_>, bytes: usize) -> FileSummary {
    let meta = file.metadata();
    let mut tensor_types = BTreeMap::new();
    for t in file.tensors() {
        *tensor_types.entry(t.tensor_type().name().to_string()).or_insert(0) += 1;
    }
    let template = meta.string("tokenizer.chat_template").unwrap_or("");
    let chat_template_matches = ["<|im_start|>", "<|im_end|>", DEFAULT_SYSTEM, "<|im_start|>assistant\n"]
        .iter()
        .all(|piece| template.contains(piece));
    FileSummary {
        name: meta.string("general.name").unwrap_or("-").to_string(),
        architecture: meta.string("general.architecture").unwrap_or("-").to_string(),
        bytes,
        tensor_types,
        chat_template_matches,
    }
}
