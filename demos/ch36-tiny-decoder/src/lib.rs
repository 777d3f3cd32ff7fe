//! # Chapter 36 — a tiny decoder that learns to reverse
//!
//! Everything of the earlier chapters, stacked into a language model and trained from scratch:
//!
//! ```text
//! tokens [B, T] → embed_tokens → 2 × { x + GQA(RMSNorm(x)); x + SwiGLU(RMSNorm(x)) } → RMSNorm
//!              → logits = x · embed_tokensᵀ (tied) → cross-entropy on the next token
//! ```
//!
//! ## The task: reverse after a separator
//!
//! A sequence is five random symbols (15 possible), the separator, then the same symbols in
//! reverse order: `7 2 9 11 0 | 0 11 9 2 7`. The model reads it left to right and predicts each
//! next token. The first five symbols are random, so nothing can predict them; only the reversed
//! half is scored (the position of the separator predicts the last symbol, and so on). Without
//! attention the model cannot do better than chance there (`ln 15` nats): the symbol to write is
//! an earlier token, and only attention can fetch it. Where it sits changes with every step —
//! the `k`-th written symbol reads the token `2k + 1` positions back — so the model must also work
//! out how far it is from the separator. RoPE gives every head relative offsets; two layers give
//! it room to locate the separator first and fetch the symbol second.
//!
//! ## Training
//!
//! AdamW (decoupled weight decay on matrices only), a linear warm-up then a cosine decay of the
//! learning rate, gradients clipped to a global norm of 1, batches of 32 fresh sequences per step.
//! A held-out set of 256 sequences is drawn from its own seed and excluded from training, so its
//! accuracy measures reversing, not memorising. Everything is f64 and seeded: the printed numbers
//! are the same on every run, in debug and in release builds.
//!
//! ## Generation
//!
//! Greedy decoding with a KV cache per layer (prefill the prompt, then one token at a time) must
//! give the same tokens as recomputing the full prefix for every token, with logits equal to
//! 1e-12. Temperature/top-k sampling draws one number per token from a seeded generator.
//!
//! `cargo run --release -p ch36-tiny-decoder` prints the report (progress goes to standard
//! error); `-- --text FILE [--steps N]` trains a character-level model on a text file instead
//! ([`text`]).
#![doc = demo_support::chapter_page!(
    "ch36-tiny-decoder",
    "[`Decoder`](../llm_from_scratch/model/struct.Decoder.html), [`DecoderConfig`](../llm_from_scratch/model/struct.DecoderConfig.html) and [`Trainer`](../llm_from_scratch/model/struct.Trainer.html)",
    ("chapter 35", "ch35_latent_attention"),
    ("chapter 37", "ch37_train_on_text")
)]

use demo_support::evidence::DemoResult;
use std::collections::BTreeSet;

use demo_support::report::{fmt_f64, fmt_values};
use llm_from_scratch::model::{
    AdamWConfig, Decoder, DecoderConfig, Decoding, Evaluation, Generation, Generator, Overflow, Recipe, Sampling,
    StepReport, TokenBatch, Trainer, parameter_shapes,
};
use llm_from_scratch::nn::SplitMix64;
use llm_from_scratch::{Tensor, TensorValue, fmt_shape};

pub mod circuit;
mod figure;
pub mod text;

pub use figure::{THUMBNAIL_TITLE, TITLE, render_figure, render_svg, render_thumbnail};

/// Content symbols `0..15`.
pub const SYMBOLS: usize = 15;
/// The separator token.
pub const SEPARATOR: usize = 15;
/// `V`: the symbols and the separator.
pub const VOCAB: usize = 16;
/// Symbols per sequence (written once forwards, once reversed).
pub const LENGTH: usize = 5;
/// Input tokens per sequence: `2·L` (the last token is only a target).
pub const TOKENS: usize = 2 * LENGTH;
/// `d`.
pub const MODEL_WIDTH: usize = 32;
/// `N`.
pub const LAYERS: usize = 2;
/// `H`.
pub const QUERY_HEADS: usize = 4;
/// `G`.
pub const KV_HEADS: usize = 2;
/// SwiGLU hidden width.
pub const FFN_WIDTH: usize = 64;
/// RoPE capacity.
pub const MAX_POSITIONS: usize = 16;
/// RoPE base: small, because the sequences are short.
pub const ROPE_BASE: f64 = 100.0;
/// Seed of the weights and of the training batches.
pub const SEED: u64 = 36;
/// Seed of the held-out sequences.
pub const HELD_OUT_SEED: u64 = 3_600;
/// How the model is trained: AdamW with LLaMA's settings, 50 warm-up steps up to a learning rate
/// of 1e-2, a cosine down to 1e-3 at step 600, gradients clipped to a global norm of 1, 32 fresh
/// sequences per step, the held-out set evaluated every 100 steps.
pub const RECIPE: Recipe = Recipe {
    steps: 600,
    batch: 32,
    warmup_steps: 50,
    peak_lr: 1e-2,
    min_lr: 1e-3,
    adamw: AdamWConfig::LLAMA,
    clip_norm: 1.0,
    eval_every: 100,
};
/// Optimiser steps ([`RECIPE`]'s).
pub const STEPS: usize = RECIPE.steps;
/// Sequences per training batch ([`RECIPE`]'s).
pub const BATCH: usize = RECIPE.batch;
/// Held-out sequences.
pub const HELD_OUT: usize = 256;
/// Greedy generations shown.
pub const GREEDY_SHOWN: usize = 3;
/// The sampling rule of the sampled generation.
pub const SAMPLING: Sampling = Sampling::TopK { temperature: 1.5, k: 3 };
/// Seed of the sampled generation.
pub const SAMPLE_SEED: u64 = 7;
/// Tokens sampled: the reversal, then positions the model was never trained on.
pub const SAMPLE_STEPS: usize = 9;

/// The model's configuration.
pub fn config() -> DecoderConfig {
    DecoderConfig::new(VOCAB, MODEL_WIDTH, LAYERS, QUERY_HEADS)
        .with_kv_heads(KV_HEADS)
        .with_ffn_width(FFN_WIDTH)
        .with_rope(MAX_POSITIONS, ROPE_BASE)
}

/// `L` random symbols, the separator, the same symbols reversed (`2L + 1` tokens).
pub fn reverse_sequence(rng: &mut SplitMix64) -> Vec<usize> {
    let symbols: Vec<usize> = (0..LENGTH).map(|_| rng.below(SYMBOLS as u64) as usize).collect();
    [symbols.clone(), vec![SEPARATOR], symbols.into_iter().rev().collect()].concat()
}

/// Next-token pairs of sequences, scored from the separator on.
fn batch_of(sequences: &[Vec<usize>]) -> DemoResult<TokenBatch> {
    Ok(TokenBatch::next_token(sequences, LENGTH)?)
}

/// Draws training sequences, skipping every held-out one.
struct TrainingData {
    rng: SplitMix64,
    held_out: BTreeSet<Vec<usize>>,
    skipped: usize,
}

impl TrainingData {
    fn next_sequences(&mut self) -> Vec<Vec<usize>> {
        let mut sequences = Vec::with_capacity(BATCH);
        while sequences.len() < BATCH {
            let s = reverse_sequence(&mut self.rng);
            if self.held_out.contains(&s) {
                self.skipped += 1;
            } else {
                sequences.push(s);
            }
        }
        sequences
    }
}

/// The state at an evaluation point.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// Optimiser steps taken.
    pub step: usize,
    /// Learning rate of the last step (0 before training).
    pub lr: f64,
    /// Mean training loss of the steps since the previous checkpoint (`None` before training).
    pub train_loss: Option<f64>,
    /// Largest global gradient norm (before clipping) since the previous checkpoint.
    pub max_grad_norm: Option<f64>,
    /// Loss and accuracy on the held-out set.
    pub held_out: Evaluation,
}

/// One prompt generated both ways.
#[derive(Clone, Debug)]
pub struct GenerationCheck {
    /// The prompt: symbols and separator.
    pub prompt: Vec<usize>,
    /// The correct continuation (the reversed symbols).
    pub expected: Vec<usize>,
    /// With the KV cache.
    pub cached: Generation,
    /// Recomputing the full prefix every step.
    pub recomputed: Generation,
}

impl GenerationCheck {
    /// Both paths chose the same tokens.
    pub fn same_tokens(&self) -> bool {
        self.cached.tokens == self.recomputed.tokens
    }

    /// Largest difference between the two paths' logits.
    pub fn max_logit_diff(&self) -> f64 {
        self.cached.max_logit_diff(&self.recomputed).unwrap_or(f64::INFINITY)
    }

    /// Generated tokens equal to the correct continuation (over its length).
    pub fn matches(&self) -> usize {
        self.cached.tokens.iter().zip(&self.expected).filter(|(a, b)| a == b).count()
    }
}

/// What the chapter computes; [`render_report`] prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// Every tensor under its checkpoint name.
    pub parameter_shapes: Vec<(String, Vec<usize>)>,
    /// Scalars in the model.
    pub parameter_count: usize,
    /// The first training sequence.
    pub example: Vec<usize>,
    /// Training draws skipped because they were held out.
    pub skipped: usize,
    /// Step 0 (before training), then every `RECIPE.eval_every` steps.
    pub checkpoints: Vec<Checkpoint>,
    /// Greedy generations of the first held-out prompts.
    pub greedy: Vec<GenerationCheck>,
    /// A sampled generation ([`SAMPLING`], seed [`SAMPLE_SEED`]).
    pub sample: GenerationCheck,
    /// The top-k candidates and probabilities of the sample's first token.
    pub sample_first_distribution: Vec<(usize, f64)>,
    /// `(case, message)` of inputs the library rejects.
    pub errors: Vec<(&'static str, String)>,
    /// Tokens fed to the model during training.
    pub tokens_trained: usize,
    /// What only the figure draws: every step's loss and the trained model's attention.
    pub figure: TrainingFigure,
}

/// The data of the chapter's figure that the report does not print.
#[derive(Clone, Debug)]
pub struct TrainingFigure {
    /// The training loss of every optimiser step, step 1 first.
    pub step_losses: Vec<f64>,
    /// The held-out sequence the attention maps are drawn on (symbols, separator, reversal).
    pub attention_tokens: Vec<usize>,
    /// Per layer, the trained model's attention weights `[1, H, T, T]` on that sequence.
    pub attention_maps: Vec<Tensor>,
}

/// Computes the chapter's evidence (trains the model).
///
/// # Errors
/// Any library error (none is expected).
pub fn learner_evidence() -> DemoResult<Evidence> {
    learner_evidence_with_progress(|_| {})
}

/// [`learner_evidence`], calling `progress` after every optimiser step.
///
/// # Errors
/// Any library error (none is expected).
pub fn learner_evidence_with_progress(mut progress: impl FnMut(&StepReport)) -> DemoResult<Evidence> {
    let mut held_out_rng = SplitMix64::new(HELD_OUT_SEED);
    let held_out_sequences: Vec<Vec<usize>> = (0..HELD_OUT).map(|_| reverse_sequence(&mut held_out_rng)).collect();
    let held_out = batch_of(&held_out_sequences)?;
    let mut rng = SplitMix64::new(SEED);
    let model = Decoder::new(config(), &mut rng)?;
    let parameter_count = model.parameter_count();
    let mut data = TrainingData { rng, held_out: held_out_sequences.iter().cloned().collect(), skipped: 0 };
    let mut trainer = Trainer::new(model, RECIPE.training_config()?)?;

    let mut checkpoints = vec![Checkpoint {
        step: 0,
        lr: 0.0,
        train_loss: None,
        max_grad_norm: None,
        held_out: trainer.model().evaluate(&held_out)?,
    }];
    let mut example = Vec::new();
    let (mut loss_sum, mut max_norm) = (0.0, 0.0f64);
    let mut step_losses = Vec::with_capacity(STEPS);
    for step in 1..=STEPS {
        let sequences = data.next_sequences();
        if example.is_empty() {
            example = sequences[0].clone();
        }
        let report = trainer.step(&batch_of(&sequences)?)?;
        progress(&report);
        step_losses.push(report.loss);
        loss_sum += report.loss;
        max_norm = max_norm.max(report.grad_norm);
        if step.is_multiple_of(RECIPE.eval_every) {
            checkpoints.push(Checkpoint {
                step,
                lr: report.lr,
                train_loss: Some(loss_sum / RECIPE.eval_every as f64),
                max_grad_norm: Some(max_norm),
                held_out: trainer.model().evaluate(&held_out)?,
            });
            (loss_sum, max_norm) = (0.0, 0.0);
        }
    }
    let model = trainer.into_model();

    let generate_both = |sequence: &[usize], steps, sampling, seed| -> DemoResult<GenerationCheck> {
        let prompt = sequence[..=LENGTH].to_vec();
        let run = |decoding| model.generate(&prompt, steps, sampling, decoding, &mut SplitMix64::new(seed));
        Ok(GenerationCheck {
            expected: sequence[LENGTH + 1..].to_vec(),
            cached: run(Decoding::KvCache)?,
            recomputed: run(Decoding::Recompute)?,
            prompt,
        })
    };
    let greedy = held_out_sequences[..GREEDY_SHOWN]
        .iter()
        .map(|s| generate_both(s, LENGTH, Sampling::Greedy, 0))
        .collect::<DemoResult<Vec<_>>>()?;
    let sample = generate_both(&held_out_sequences[GREEDY_SHOWN], SAMPLE_STEPS, SAMPLING, SAMPLE_SEED)?;
    let sample_first_distribution = SAMPLING.distribution(&sample.cached.logits[0])?;
    Ok(Evidence {
        parameter_shapes: parameter_shapes(model.config()),
        parameter_count,
        example,
        skipped: data.skipped,
        checkpoints,
        greedy,
        sample,
        sample_first_distribution,
        errors: error_cases(&model)?,
        tokens_trained: STEPS * BATCH * TOKENS,
        figure: TrainingFigure {
            step_losses,
            attention_maps: attention_maps(&model, &held_out_sequences[0])?,
            attention_tokens: held_out_sequences[0].clone(),
        },
    })
}

/// The attention weights `[1, H, T, T]` of every layer of `model` on one sequence: the maps the
/// model's own forward pass used ([`Decoder::forward_traced`]).
fn attention_maps(model: &Decoder, tokens: &[usize]) -> DemoResult<Vec<Tensor>> {
    let trace = model.forward_traced(tokens, [1, tokens.len()])?;
    let mut maps = Vec::with_capacity(trace.attention.len());
    for layer in &trace.attention {
        maps.push(layer.weights.as_ref().ok_or("the explicit kernel keeps its weights")?.value()?);
    }
    Ok(maps)
}

/// Every input of the chapter's API that must be refused, with the library's message.
fn error_cases(model: &Decoder) -> DemoResult<Vec<(&'static str, String)>> {
    let mut rng = SplitMix64::new(0);
    let prompt = [1, 2, 3, 4, 5, SEPARATOR];
    let message = |r: Result<TensorValue, llm_from_scratch::model::ModelError>| match r {
        Ok(_) => "accepted".to_string(),
        Err(e) => e.to_string(),
    };
    let generation = |r: Result<Generation, llm_from_scratch::model::ModelError>| match r {
        Ok(_) => "accepted".to_string(),
        Err(e) => e.to_string(),
    };
    let bad_target = TokenBatch::new(vec![1, 2, SEPARATOR], vec![None, None, Some(VOCAB)], [1, 3])?;
    let unscored = TokenBatch::new(vec![1, 2, SEPARATOR], vec![None; 3], [1, 3])?;
    Ok(vec![
        ("input_token", message(model.forward(&[3, VOCAB, 1], [1, 3]))),
        ("target_token", message(model.loss(&bad_target))),
        ("no_target", message(model.loss(&unscored))),
        ("batch_shape", message(model.forward(&[1, 2, 3], [2, 2]))),
        ("too_long", message(model.forward(&[1; MAX_POSITIONS + 1], [1, MAX_POSITIONS + 1]))),
        (
            // generate() slides past the capacity; refusing is the explicit option
            "generation_capacity",
            generation(
                model
                    .generate_streaming(
                        &prompt,
                        MAX_POSITIONS,
                        Sampling::Greedy,
                        Decoding::KvCache,
                        Overflow::Refuse,
                        &mut rng,
                        |_, _| std::ops::ControlFlow::Continue(()),
                    )
                    .map(|_| Generation { tokens: Vec::new(), logits: Vec::new() }),
            ),
        ),
        (
            "top_k_zero",
            generation(model.generate(
                &prompt,
                1,
                Sampling::TopK { temperature: 1.0, k: 0 },
                Decoding::KvCache,
                &mut rng,
            )),
        ),
        (
            "temperature_zero",
            generation(model.generate(
                &prompt,
                1,
                Sampling::TopK { temperature: 0.0, k: 3 },
                Decoding::KvCache,
                &mut rng,
            )),
        ),
    ])
}

fn fmt_tokens(tokens: &[usize]) -> String {
    let items: Vec<String> = tokens.iter().map(usize::to_string).collect();
    format!("[{}]", items.join(","))
}

fn fmt_generation(name: &str, g: &GenerationCheck) -> String {
    format!(
        "{name}=prompt:{} expected:{} kv_cache:{} recompute:{} matches:{}/{} same_tokens:{} logits_within_1e-12:{}",
        fmt_tokens(&g.prompt),
        fmt_tokens(&g.expected),
        fmt_tokens(&g.cached.tokens),
        fmt_tokens(&g.recomputed.tokens),
        g.matches(),
        g.expected.len(),
        g.same_tokens(),
        g.max_logit_diff() <= 1e-12
    )
}

/// The report, one `key=value` line each, ending with a newline.
pub fn render_report(e: &Evidence) -> String {
    let c = config();
    let uniform = (VOCAB as f64).ln();
    let mut lines = vec![
        "chapter=36-tiny-decoder".to_string(),
        format!(
            "prediction=before training the reversed half costs about ln {VOCAB} = {} nats per token and is right 1 time \
             in {SYMBOLS}; the k-th written symbol is the token 2k+1 positions back, so only attention can fetch it and \
             the model must count its distance from the separator; after {STEPS} steps the held-out reversals are \
             right (accuracy >= 0.99) and the loss is far below ln {VOCAB}; decoding with the KV cache writes exactly \
             what recomputing the whole prefix writes",
            fmt_f64(uniform)
        ),
        format!(
            "task=reverse symbols:0..{SYMBOLS} separator:{SEPARATOR} length:{LENGTH} sequence:{} inputs:{TOKENS} \
             scored_positions:{LENGTH}..{TOKENS} example:{}",
            2 * LENGTH + 1,
            fmt_tokens(&e.example)
        ),
        format!(
            "config=vocab:{} model_width:{} layers:{} query_heads:{} kv_heads:{} head_width:{} ffn_width:{} \
             max_positions:{} rope_base:{} rope_layout:adjacent_pairs rms_eps:1e-6 tied_embeddings:{} kernel:explicit \
             embedding_init:normal(0,{}) projections_init:uniform(±1/√fan_in) parameters:{}",
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
            c.embedding_init_std,
            e.parameter_count
        ),
    ];
    let names: Vec<String> = e.parameter_shapes.iter().map(|(n, s)| format!("{n}{}", fmt_shape(s))).collect();
    lines.push(format!("parameters=tensors:{} {}", names.len(), names.join(" ")));
    let (r, a) = (&RECIPE, &RECIPE.adamw);
    lines.push(format!(
        "training=seed:{SEED} steps:{STEPS} batch:{BATCH} tokens_per_step:{} adamw:beta1:{} beta2:{} eps:{} \
         weight_decay:{}(matrices_only) schedule:warmup:{} cosine_peak:{} cosine_min:{} clip_global_norm:{} \
         held_out:{HELD_OUT} held_out_seed:{HELD_OUT_SEED} training_draws_skipped_as_held_out:{} tokens_trained:{}",
        BATCH * TOKENS,
        a.beta1,
        a.beta2,
        a.eps,
        a.weight_decay,
        r.warmup_steps,
        r.peak_lr,
        r.min_lr,
        r.clip_norm,
        e.skipped,
        e.tokens_trained
    ));
    for p in &e.checkpoints {
        let optional = |v: Option<f64>| v.map_or_else(|| "-".to_string(), fmt_f64);
        lines.push(format!(
            "step={} lr={} train_loss={} max_grad_norm={} held_out_loss={} held_out_token_accuracy={} \
             held_out_sequence_accuracy={}",
            p.step,
            fmt_f64(p.lr),
            optional(p.train_loss),
            optional(p.max_grad_norm),
            fmt_f64(p.held_out.loss),
            fmt_f64(p.held_out.token_accuracy()),
            fmt_f64(p.held_out.sequence_accuracy())
        ));
    }
    if let (Some(first), Some(last)) = (e.checkpoints.first(), e.checkpoints.last()) {
        lines.push(format!(
            "result=held_out_token_accuracy:{} (>=0.99:{}) held_out_sequence_accuracy:{} held_out_loss:{} \
             uniform_loss:ln({VOCAB})={} initial_held_out_loss:{} loss_below_uniform_by:{}x",
            fmt_f64(last.held_out.token_accuracy()),
            last.held_out.token_accuracy() >= 0.99,
            fmt_f64(last.held_out.sequence_accuracy()),
            fmt_f64(last.held_out.loss),
            fmt_f64(uniform),
            fmt_f64(first.held_out.loss),
            fmt_f64(uniform / last.held_out.loss)
        ));
    }
    for (i, g) in e.greedy.iter().enumerate() {
        lines.push(fmt_generation(&format!("greedy_{i}"), g));
    }
    lines.push(format!(
        "sample=sampling:{SAMPLING} seed:{SAMPLE_SEED} steps:{SAMPLE_STEPS} (the last {} continue past anything trained) {}",
        SAMPLE_STEPS - LENGTH,
        fmt_generation("", &e.sample).trim_start_matches('=')
    ));
    let candidates: Vec<String> =
        e.sample_first_distribution.iter().map(|(t, p)| format!("{t}:{}", fmt_f64(*p))).collect();
    lines.push(format!(
        "sample_first_token=candidates:[{}] logits:{}",
        candidates.join(","),
        fmt_values(&e.sample.cached.logits[0])
    ));
    lines.extend(e.errors.iter().map(|(case, message)| format!("error_{case}={message}")));
    let all_same = e.greedy.iter().chain([&e.sample]).all(|g| g.same_tokens() && g.max_logit_diff() <= 1e-12);
    lines.push(format!(
        "proof=held_out_never_trained:true cache_equals_recompute:{} accuracy_at_least_0.99:{}",
        all_same,
        e.checkpoints.last().is_some_and(|p| p.held_out.token_accuracy() >= 0.99)
    ));
    lines.push(
        "next=checkpoints: save and load the model in safetensors, and load a Hugging Face LlamaForCausalLM"
            .to_string(),
    );
    lines.join("\n") + "\n"
}
