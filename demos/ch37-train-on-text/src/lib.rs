//! # Chapter 37 — train a small language model on real text
//!
//! Chapter 36's decoder learned a synthetic task. Here it learns a language: the first book of
//! Cicero's *De finibus bonorum et malorum* (45 BC), 49 068 characters of Latin that the `lipsum`
//! crate ships inside itself as [`lipsum::LIBER_PRIMUS`] (the text lorem ipsum was cut from).
//!
//! ```text
//! text ──CharTokenizer──▶ ids (57 characters) ──▶ train: first 90 %   validation: last 10 %
//! every step: 16 random windows of 65 ids from train → inputs [16, 64], targets shifted by one
//! model: d = 64, 2 blocks (GQA 4/2 heads + RoPE, SwiGLU), tied embedding, 64 positions,
//!        attention on chapter 34's tiled kernel (the figure's weights from the explicit one)
//! AdamW, linear warm-up then cosine decay, global gradient norm clipped to 1
//! ```
//!
//! ## What "learning" means here
//!
//! The loss is the cross-entropy of the next character in nats. Two baselines frame it:
//!
//! * **uniform**: `ln 57 = 4.04` — a model that knows only the alphabet;
//! * **unigram**: the cross-entropy of the validation text under the *training* text's character
//!   frequencies, `−Σ log p_train(c) / n` ≈ 2.91 — a model that knows how often each letter occurs
//!   but nothing about order. Every bit below it is learned *context*: which letters follow which,
//!   where words end, that `q` is followed by `u`.
//!
//! Validation windows are never trained on (they are the last tenth of the book), so a validation
//! loss below the unigram baseline is generalisation, not memorisation. Perplexity `e^loss` is the
//! same number read as "the model hesitates between this many characters".
//!
//! ## Generation
//!
//! The trained model continues the first characters of the validation text with nucleus (top-p)
//! sampling and a KV cache. The sample is longer than the model's 64 positions: the context
//! slides ([`Overflow::Slide`](../llm_from_scratch/model/enum.Overflow.html#variant.Slide)), and recomputing every
//! step from scratch over the same window gives the same tokens. How many of its words occur in the book measures how Latin it looks.
//!
//! ## Determinism
//!
//! The windows of step `s` are drawn from a generator seeded by `s` alone, so a run that stops
//! after any step, saves ([`save_train_state`](../llm_from_scratch/model/fn.save_train_state.html)) and resumes computes bit for bit what an
//! uninterrupted run computes. Everything is f64; the printed numbers are the same on every run.
//!
//! `cargo run --release -p ch37-train-on-text` prints the report; flags (`--quiet`, `--steps N`,
//! `--save PATH`, `--resume PATH`, `--figure loss.svg`) are described by `--help`. The second
//! binary, `generate`, writes text from a saved state.
#![doc = demo_support::chapter_page!(
    "ch37-train-on-text",
    "[`Decoder`](../llm_from_scratch/model/struct.Decoder.html), [`Trainer`](../llm_from_scratch/model/struct.Trainer.html) and [`Decoder::generate`](../llm_from_scratch/model/struct.Decoder.html#method.generate)",
    ("chapter 36", "ch36_tiny_decoder"),
    ("chapter 38", "ch38_a_real_model")
)]

use std::collections::{BTreeMap, BTreeSet};

use demo_support::report::{fmt_f64, fmt_thousands};
use llm_from_scratch::attention::AttentionPath;
use llm_from_scratch::model::{
    AdamWConfig, CharTokenizer, Decoder, DecoderConfig, Decoding, Recipe, Sampling, StepReport, TokenBatch, TrainState,
    Trainer, save_train_state,
};
use llm_from_scratch::nn::SplitMix64;

pub mod attention;
pub mod figure;

pub use demo_support::evidence::DemoResult;
pub use figure::{THUMBNAIL_TITLE, TITLE, render_svg, render_thumbnail};

/// The corpus: Cicero, *De finibus bonorum et malorum*, book I.
pub const CORPUS: &str = lipsum::LIBER_PRIMUS;
/// Share of the text kept for validation (the end of the book).
pub const VALIDATION_SHARE: f64 = 0.1;
/// `T`: positions per training window (and the model's RoPE capacity).
pub const CONTEXT: usize = 64;
/// `d`.
pub const MODEL_WIDTH: usize = 64;
/// `N`.
pub const LAYERS: usize = 2;
/// `H`.
pub const QUERY_HEADS: usize = 4;
/// `G`.
pub const KV_HEADS: usize = 2;
/// RoPE base.
pub const ROPE_BASE: f64 = 10_000.0;
/// Seed of the weights.
pub const SEED: u64 = 37;
/// Seed of the training windows (combined with the step).
pub const DATA_SEED: u64 = 3_700;
/// How the model is trained: AdamW with LLaMA's settings, 40 warm-up steps up to a learning rate
/// of 4e-3, a cosine down to 2e-4 at step 800, gradients clipped to a global norm of 1, 16 random
/// windows per step, evaluated every 100 steps. The schedule spans all 800 steps whatever step a
/// run stops at.
pub const RECIPE: Recipe = Recipe {
    steps: 800,
    batch: 16,
    warmup_steps: 40,
    peak_lr: 4e-3,
    min_lr: 2e-4,
    adamw: AdamWConfig::LLAMA,
    clip_norm: 1.0,
    eval_every: 100,
};
/// Optimiser steps of the schedule ([`RECIPE`]'s).
pub const STEPS: usize = RECIPE.steps;
/// Windows per step ([`RECIPE`]'s).
pub const BATCH: usize = RECIPE.batch;
/// Characters of validation text used as the generation prompt.
pub const PROMPT_CHARS: usize = 24;
/// Characters generated.
pub const SAMPLE_CHARS: usize = 240;
/// The sampling rule of the sample.
pub const SAMPLING: Sampling = Sampling::TopP { temperature: 0.8, k: usize::MAX, p: 0.9 };
/// Seed of the sample.
pub const SAMPLE_SEED: u64 = 7;

/// The attention kernel the model trains and evaluates with: chapter 34's tiled kernel, which
/// gives the explicit kernel's loss and gradients to 1e-12 without forming the `[B, H, T, T]`
/// scores and weights (a sixth less time per step). The figure's attention weights come from the
/// explicit kernel on the same parameters ([`attention::phrase_attention`],
/// [`Decoder::with_attention_path`]).
pub const ATTENTION_PATH: AttentionPath = AttentionPath::Tiled;

/// The model's configuration for a vocabulary of `vocab` characters.
pub fn config(vocab: usize) -> DecoderConfig {
    DecoderConfig::new(vocab, MODEL_WIDTH, LAYERS, QUERY_HEADS)
        .with_kv_heads(KV_HEADS)
        .with_rope(CONTEXT, ROPE_BASE)
        .with_path(ATTENTION_PATH)
}

/// The corpus as ids, split into training and validation text.
#[derive(Clone, Debug)]
pub struct Corpus {
    /// The vocabulary of the whole text.
    pub tokenizer: CharTokenizer,
    /// The first 90 %.
    pub train: Vec<usize>,
    /// The last 10 %.
    pub validation: Vec<usize>,
    /// Fixed windows of the training text, as many tokens as `validation` (to compare losses).
    pub train_probe: TokenBatch,
    /// The validation text as consecutive windows, every position scored.
    pub validation_batch: TokenBatch,
}

impl Corpus {
    /// Tokenises and splits `text`.
    ///
    /// # Errors
    /// An empty text, or one too short for a window in both parts.
    pub fn new(text: &str) -> DemoResult<Self> {
        let tokenizer = CharTokenizer::from_text(text)?;
        let ids = tokenizer.encode(text)?;
        let validation_len = (ids.len() as f64 * VALIDATION_SHARE).round() as usize;
        if validation_len < CONTEXT + 1 || ids.len() - validation_len < 2 * (CONTEXT + 1) {
            return Err(format!("a text of {} characters is too short to split", ids.len()).into());
        }
        let (train, validation) = ids.split_at(ids.len() - validation_len);
        let validation_batch = consecutive_windows(validation)?;
        // evenly spaced training windows covering as many tokens as the validation windows
        let count = validation_batch.shape()[0];
        let stride = (train.len() - CONTEXT - 1) / count.max(1);
        let probe: Vec<Vec<usize>> = (0..count).map(|i| train[i * stride..i * stride + CONTEXT + 1].to_vec()).collect();
        Ok(Self {
            tokenizer,
            train: train.to_vec(),
            validation: validation.to_vec(),
            train_probe: TokenBatch::next_token(&probe, 0)?,
            validation_batch,
        })
    }

    /// The windows of training step `step`: [`BATCH`] random windows of `CONTEXT + 1` ids, drawn
    /// from a generator seeded by the step alone (so a resumed run draws the same ones).
    pub fn windows(&self, step: usize) -> Vec<Vec<usize>> {
        let mut rng = SplitMix64::new(DATA_SEED ^ (step as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let starts = (self.train.len() - CONTEXT) as u64;
        (0..BATCH)
            .map(|_| {
                let start = rng.below(starts) as usize;
                self.train[start..start + CONTEXT + 1].to_vec()
            })
            .collect()
    }

    /// Cross-entropy (nats per character) of the validation characters the model is scored on
    /// (the targets of [`Corpus::validation_batch`]) under the training text's character
    /// frequencies; `None` if one of them never occurs in training.
    pub fn unigram_loss(&self) -> Option<f64> {
        let mut counts = vec![0usize; self.tokenizer.vocab_size()];
        for &id in &self.train {
            counts[id] += 1;
        }
        let n = self.train.len() as f64;
        let targets: Vec<usize> = self.validation_batch.targets().iter().flatten().copied().collect();
        let total: f64 =
            targets.iter().map(|&id| if counts[id] == 0 { f64::INFINITY } else { -(counts[id] as f64 / n).ln() }).sum();
        let loss = total / targets.len().max(1) as f64;
        loss.is_finite().then_some(loss)
    }
}

/// `ids` cut into consecutive windows of `CONTEXT + 1` ids overlapping by one (the target of a
/// window's last position is the next window's first input), every position scored once; a tail
/// shorter than a window (under 64 characters) is left out.
fn consecutive_windows(ids: &[usize]) -> DemoResult<TokenBatch> {
    let windows: Vec<Vec<usize>> = ids.windows(CONTEXT + 1).step_by(CONTEXT).map(<[usize]>::to_vec).collect::<Vec<_>>();
    Ok(TokenBatch::next_token(&windows, 0)?)
}

/// Losses at one evaluation point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvalPoint {
    /// Steps taken.
    pub step: usize,
    /// Learning rate of the last step (0 before training).
    pub lr: f64,
    /// Loss on the fixed training windows.
    pub train_loss: f64,
    /// Loss on the validation text.
    pub validation_loss: f64,
}

impl EvalPoint {
    /// `e^validation_loss`.
    pub fn perplexity(&self) -> f64 {
        self.validation_loss.exp()
    }
}

/// A training run in progress: the trainer and the evaluations so far.
#[derive(Debug)]
pub struct Run {
    /// The model with its optimiser.
    pub trainer: Trainer,
    /// Step 0 and every `RECIPE.eval_every` steps (the same whether the run stopped and resumed or
    /// not; [`evidence_of`] adds the step a shorter run stopped at).
    pub history: Vec<EvalPoint>,
}

/// The note under which a saved state keeps the tokenizer's vocabulary.
pub const VOCABULARY_NOTE: &str = "vocabulary";
/// The note under which a saved state keeps the evaluation history.
pub const HISTORY_NOTE: &str = "history";

impl Run {
    /// A fresh model, evaluated once before training.
    ///
    /// # Errors
    /// Library errors (none expected).
    pub fn start(corpus: &Corpus) -> DemoResult<Self> {
        let model = Decoder::new(config(corpus.tokenizer.vocab_size()), &mut SplitMix64::new(SEED))?;
        let trainer = Trainer::new(model, RECIPE.training_config()?)?;
        let first = evaluate(&trainer, corpus, 0.0)?;
        Ok(Self { trainer, history: vec![first] })
    }

    /// Continues a saved run (see [`Run::save`]).
    ///
    /// # Errors
    /// A state saved for another vocabulary, a missing or unreadable history, library errors.
    pub fn resume(state: TrainState, corpus: &Corpus) -> DemoResult<Self> {
        let vocabulary: String = corpus.tokenizer.vocabulary().iter().collect();
        if state.notes.get(VOCABULARY_NOTE) != Some(&vocabulary) {
            return Err("the saved state was trained on another vocabulary than this corpus".into());
        }
        let history = state.notes.get(HISTORY_NOTE).map(|h| parse_history(h)).transpose()?.unwrap_or_default();
        if history.last().is_none_or(|p| p.step > state.step) {
            return Err(format!("the saved history does not lead to the saved step {}", state.step).into());
        }
        // the state names the attention kernel it trained with, so the run continues on it
        Ok(Self { trainer: state.into_trainer(RECIPE.training_config()?)?, history })
    }

    /// Trains until `until` steps have been taken, calling `progress` after every step and
    /// evaluating every `RECIPE.eval_every` steps and at the end of the schedule.
    ///
    /// # Errors
    /// Library errors (none expected).
    pub fn train_until(
        &mut self,
        corpus: &Corpus,
        until: usize,
        mut progress: impl FnMut(&StepReport),
    ) -> DemoResult<()> {
        while self.trainer.steps_taken() < until {
            let step = self.trainer.steps_taken();
            let report = self.trainer.step(&TokenBatch::next_token(&corpus.windows(step), 0)?)?;
            progress(&report);
            let done = step + 1;
            if done.is_multiple_of(RECIPE.eval_every) || done == STEPS {
                let point = evaluate(&self.trainer, corpus, report.lr)?;
                self.history.push(point);
            }
        }
        Ok(())
    }

    /// Writes the model, the optimiser, the step, the vocabulary and the history to `path`.
    ///
    /// # Errors
    /// The errors of [`save_train_state`].
    pub fn save(&self, corpus: &Corpus, path: &std::path::Path) -> DemoResult<()> {
        let notes: BTreeMap<String, String> = [
            (VOCABULARY_NOTE.to_string(), corpus.tokenizer.vocabulary().iter().collect()),
            (HISTORY_NOTE.to_string(), history_text(&self.history)),
        ]
        .into();
        Ok(save_train_state(&self.trainer, &notes, path)?)
    }
}

fn evaluate(trainer: &Trainer, corpus: &Corpus, lr: f64) -> DemoResult<EvalPoint> {
    Ok(EvalPoint {
        step: trainer.steps_taken(),
        lr,
        train_loss: trainer.model().evaluate(&corpus.train_probe)?.loss,
        validation_loss: trainer.model().evaluate(&corpus.validation_batch)?.loss,
    })
}

/// `step lr train validation;…` with every f64 in Rust's shortest round-trip form.
fn history_text(history: &[EvalPoint]) -> String {
    let points: Vec<String> =
        history.iter().map(|p| format!("{} {} {} {}", p.step, p.lr, p.train_loss, p.validation_loss)).collect();
    points.join(";")
}

fn parse_history(text: &str) -> DemoResult<Vec<EvalPoint>> {
    text.split(';')
        .map(|point| {
            let fields: Vec<&str> = point.split(' ').collect();
            let [step, lr, train, validation] = fields[..] else {
                return Err(format!("unreadable history entry {point:?}").into());
            };
            Ok(EvalPoint {
                step: step.parse()?,
                lr: lr.parse()?,
                train_loss: train.parse()?,
                validation_loss: validation.parse()?,
            })
        })
        .collect()
}

/// A generated continuation and how it was checked.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The prompt (the first characters of the validation text).
    pub prompt: String,
    /// The continuation.
    pub text: String,
    /// Recomputing every step over the same sliding window chose the same characters.
    pub same_as_recompute: bool,
    /// Largest logit difference between the cached and the recomputed path.
    pub max_logit_diff: f64,
    /// Words (runs of letters) in the continuation.
    pub words: usize,
    /// Of those, words that occur in the corpus.
    pub known_words: usize,
}

/// Continues the start of the validation text with [`SAMPLING`] (seed [`SAMPLE_SEED`]).
///
/// # Errors
/// Library errors (none expected).
pub fn sample(model: &Decoder, corpus: &Corpus) -> DemoResult<Sample> {
    let prompt = &corpus.validation[..PROMPT_CHARS];
    let run = |decoding| model.generate(prompt, SAMPLE_CHARS, SAMPLING, decoding, &mut SplitMix64::new(SAMPLE_SEED));
    let (cached, recomputed) = (run(Decoding::KvCache)?, run(Decoding::Recompute)?);
    let text = corpus.tokenizer.decode(&cached.tokens)?;
    let vocabulary = words(CORPUS);
    let all: Vec<&str> = text.split(|c: char| !c.is_alphabetic()).filter(|w| !w.is_empty()).collect();
    Ok(Sample {
        prompt: corpus.tokenizer.decode(prompt)?,
        same_as_recompute: cached.tokens == recomputed.tokens,
        max_logit_diff: cached.max_logit_diff(&recomputed).unwrap_or(f64::INFINITY),
        words: all.len(),
        known_words: all.iter().filter(|w| vocabulary.contains(&w.to_lowercase())).count(),
        text,
    })
}

/// The distinct lower-cased words (runs of letters) of `text`.
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphabetic()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// What the chapter computes; [`render_report`] prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// Characters of the corpus.
    pub characters: usize,
    /// Lines of the corpus.
    pub lines: usize,
    /// Training and validation characters.
    pub split: (usize, usize),
    /// The vocabulary, id order.
    pub vocabulary: Vec<char>,
    /// Scalars in the model.
    pub parameters: usize,
    /// The model's configuration.
    pub config: DecoderConfig,
    /// The unigram cross-entropy of the validation text.
    pub unigram: Option<f64>,
    /// The evaluations.
    pub history: Vec<EvalPoint>,
    /// The generated sample.
    pub sample: Sample,
    /// `(case, message)` of inputs the tokenizer refuses.
    pub errors: Vec<(&'static str, String)>,
    /// What only the figure draws: every head's attention over a phrase of the book.
    pub attention: attention::PhraseAttention,
}

/// Trains the whole schedule and gathers the evidence.
///
/// # Errors
/// Library errors (none expected).
pub fn learner_evidence() -> DemoResult<Evidence> {
    let corpus = Corpus::new(CORPUS)?;
    let mut run = Run::start(&corpus)?;
    run.train_until(&corpus, STEPS, |_| {})?;
    evidence_of(&run, &corpus)
}

/// The evidence of a run (trained as far as it went).
///
/// # Errors
/// Library errors (none expected).
pub fn evidence_of(run: &Run, corpus: &Corpus) -> DemoResult<Evidence> {
    let tokenizer = &corpus.tokenizer;
    let mut history = run.history.clone();
    let step = run.trainer.steps_taken();
    if history.last().is_some_and(|p| p.step != step) {
        let lr = RECIPE.schedule()?.at(step.saturating_sub(1));
        history.push(evaluate(&run.trainer, corpus, lr)?);
    }
    let message = |r: Result<String, llm_from_scratch::model::TokenizerError>| match r {
        Ok(_) => "accepted".to_string(),
        Err(e) => e.to_string(),
    };
    Ok(Evidence {
        characters: CORPUS.chars().count(),
        lines: CORPUS.lines().count(),
        split: (corpus.train.len(), corpus.validation.len()),
        vocabulary: tokenizer.vocabulary().to_vec(),
        parameters: run.trainer.model().parameter_count(),
        config: run.trainer.model().config().clone(),
        unigram: corpus.unigram_loss(),
        history,
        sample: sample(run.trainer.model(), corpus)?,
        errors: vec![
            ("unknown_character", message(tokenizer.encode("Jupiter").map(|_| String::new()))),
            ("unknown_id", message(tokenizer.decode(&[0, tokenizer.vocab_size()]))),
            ("empty_corpus", message(CharTokenizer::from_text("").map(|_| String::new()))),
        ],
        attention: attention::phrase_attention(run.trainer.model(), tokenizer)?,
    })
}

/// The report, one `key=value` line each, ending with a newline.
pub fn render_report(e: &Evidence) -> String {
    let c = &e.config;
    let uniform = (e.vocabulary.len() as f64).ln();
    let unigram = e.unigram.map_or("-".to_string(), fmt_f64);
    let mut lines = vec![
        "chapter=37-train-on-text".to_string(),
        format!(
            "prediction=an untrained model costs about ln {} = {} nats per character; knowing only how often each \
             character occurs costs the unigram cross-entropy {unigram}; after {STEPS} steps on random windows of \
             the first 90 % of the book the validation loss (the last 10 %, never trained on) is far below the \
             unigram baseline, and the sampled continuation is made of Latin-looking words",
            e.vocabulary.len(),
            fmt_f64(uniform)
        ),
        format!(
            "corpus=source:lipsum::LIBER_PRIMUS (Cicero, De finibus I) characters:{} lines:{} train:{} \
             validation:{} (last {}%) vocabulary:{} characters_in_id_order:{:?}",
            fmt_thousands(e.characters as u128),
            e.lines,
            e.split.0,
            e.split.1,
            (VALIDATION_SHARE * 100.0).round(),
            e.vocabulary.len(),
            e.vocabulary.iter().collect::<String>()
        ),
        format!(
            "config=vocab:{} model_width:{} layers:{} query_heads:{} kv_heads:{} head_width:{} ffn_width:{} \
             max_positions:{} rope_base:{} tied_embeddings:{} parameters:{}",
            c.vocab_size,
            c.model_width,
            c.layers,
            c.query_heads,
            c.kv_heads,
            c.head_width,
            c.ffn_width,
            c.max_positions,
            fmt_f64(c.rope_base),
            c.tie_embeddings,
            fmt_thousands(e.parameters as u128)
        ),
        format!(
            "training=seed:{SEED} data_seed:{DATA_SEED} steps:{STEPS} batch:{BATCH} context:{CONTEXT} \
             tokens_per_step:{} tokens_trained:{} epochs:{} adamw:beta1:{} beta2:{} eps:{} \
             weight_decay:{}(matrices_only) schedule:warmup:{} cosine_peak:{} cosine_min:{} \
             clip_global_norm:{} eval_every:{}",
            BATCH * CONTEXT,
            fmt_thousands((BATCH * CONTEXT * STEPS) as u128),
            fmt_f64((BATCH * CONTEXT * STEPS) as f64 / e.split.0 as f64),
            RECIPE.adamw.beta1,
            RECIPE.adamw.beta2,
            RECIPE.adamw.eps,
            RECIPE.adamw.weight_decay,
            RECIPE.warmup_steps,
            RECIPE.peak_lr,
            RECIPE.min_lr,
            RECIPE.clip_norm,
            RECIPE.eval_every
        ),
        format!(
            "baselines=uniform:ln({})={} unigram_validation:{unigram} (the scored validation characters under the training text's \
             character frequencies)",
            e.vocabulary.len(),
            fmt_f64(uniform)
        ),
    ];
    for p in &e.history {
        lines.push(format!(
            "step={} lr={} train_loss={} validation_loss={} validation_perplexity={}",
            p.step,
            fmt_f64(p.lr),
            fmt_f64(p.train_loss),
            fmt_f64(p.validation_loss),
            fmt_f64(p.perplexity())
        ));
    }
    if let (Some(first), Some(last)) = (e.history.first(), e.history.last()) {
        let below = e.unigram.map(|u| u - last.validation_loss);
        lines.push(format!(
            "result=step:{} validation_loss:{} unigram:{unigram} below_unigram_by:{} nats validation_perplexity:{} \
             unigram_perplexity:{} initial_validation_loss:{} generalisation_gap:{} clearly_below_unigram:{}",
            last.step,
            fmt_f64(last.validation_loss),
            below.map_or("-".to_string(), fmt_f64),
            fmt_f64(last.perplexity()),
            e.unigram.map_or("-".to_string(), |u| fmt_f64(u.exp())),
            fmt_f64(first.validation_loss),
            fmt_f64(last.validation_loss - last.train_loss),
            below.is_some_and(|b| b > 0.3)
        ));
    }
    let s = &e.sample;
    lines.push(format!("sample_prompt={:?}", s.prompt));
    lines.push(format!(
        "sample=sampling:{SAMPLING} seed:{SAMPLE_SEED} characters:{SAMPLE_CHARS} (past the {CONTEXT} positions the \
         context slides) text:{:?}",
        s.text
    ));
    lines.push(format!(
        "sample_check=words:{} words_found_in_the_book:{} share:{} kv_cache_equals_recompute:{} \
         logits_within_1e-9:{}",
        s.words,
        s.known_words,
        fmt_f64(s.known_words as f64 / s.words.max(1) as f64),
        s.same_as_recompute,
        s.max_logit_diff <= 1e-9
    ));
    lines.extend(e.errors.iter().map(|(case, message)| format!("error_{case}={message}")));
    lines.push(
        "next=a tokenizer that merges frequent character pairs (byte-pair encoding), so each position carries more \
         text"
            .to_string(),
    );
    lines.join("\n") + "\n"
}
