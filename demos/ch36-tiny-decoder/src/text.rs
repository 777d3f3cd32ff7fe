//! Character-level training on a text file: `ch36-tiny-decoder --text FILE [--steps N]`.
//!
//! Every distinct character of the file is a token (sorted, so the ids do not depend on the
//! order of the text). Each step trains on random windows of the text, every position scored;
//! at the end the model continues the beginning of the file by top-k sampling.

use std::collections::BTreeSet;

use demo_support::report::fmt_f64;
use llm_from_scratch::model::{
    AdamWConfig, Decoder, DecoderConfig, Decoding, LrSchedule, Sampling, StepReport, TokenBatch, Trainer,
    TrainingConfig,
};
use llm_from_scratch::nn::SplitMix64;

use demo_support::evidence::DemoResult;

/// Tokens per training window (and the model's RoPE capacity).
pub const CONTEXT: usize = 32;
/// Windows per step.
pub const TEXT_BATCH: usize = 16;
/// Characters of the file used as the generation prompt.
pub const PROMPT_CHARS: usize = 8;
/// Sampling of the continuation.
pub const TEXT_SAMPLING: Sampling = Sampling::TopK { temperature: 0.8, k: 5 };

/// The outcome of a text run.
#[derive(Clone, Debug)]
pub struct TextRun {
    /// Characters in the file.
    pub characters: usize,
    /// The vocabulary, id order.
    pub vocabulary: Vec<char>,
    /// Scalars in the model.
    pub parameters: usize,
    /// Mean loss of the last tenth of the steps.
    pub final_loss: f64,
    /// The prompt (the file's first characters).
    pub prompt: String,
    /// What the model wrote after it.
    pub continuation: String,
}

/// A model for a vocabulary of `vocab` characters: d = 64, 2 layers of 4 query heads over 2
/// key/value heads.
pub fn text_config(vocab: usize) -> DecoderConfig {
    DecoderConfig::new(vocab, 64, 2, 4).with_kv_heads(2).with_rope(CONTEXT, 10_000.0)
}

/// Trains on `text` for `steps` steps (seeded), calling `progress` after each.
///
/// # Errors
/// A message if the text has fewer than 2 characters or `steps` is 0; library errors.
pub fn train_on_text(text: &str, steps: usize, mut progress: impl FnMut(&StepReport)) -> DemoResult<TextRun> {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() < 2 || steps == 0 {
        return Err(
            format!("need a text of at least 2 characters and at least 1 step ({} characters)", chars.len()).into()
        );
    }
    let vocabulary: Vec<char> = chars.iter().copied().collect::<BTreeSet<_>>().into_iter().collect();
    let ids: Vec<usize> = chars.iter().map(|c| vocabulary.binary_search(c).unwrap_or(0)).collect();
    let window = CONTEXT.min(ids.len() - 1) + 1;
    let mut rng = SplitMix64::new(1);
    let model = Decoder::new(text_config(vocabulary.len()), &mut rng)?;
    let parameters = model.parameter_count();
    let schedule = LrSchedule::warmup_cosine(3e-3, 3e-4, (steps / 10).min(100), steps)?;
    let mut trainer =
        Trainer::new(model, TrainingConfig { adamw: AdamWConfig::default(), schedule, clip_norm: Some(1.0) })?;
    let tail = (steps / 10).max(1);
    let mut tail_loss = 0.0;
    for step in 0..steps {
        let windows: Vec<Vec<usize>> = (0..TEXT_BATCH)
            .map(|_| {
                let start = rng.below((ids.len() - window + 1) as u64) as usize;
                ids[start..start + window].to_vec()
            })
            .collect();
        let report = trainer.step(&TokenBatch::next_token(&windows, 0)?)?;
        if step >= steps - tail {
            tail_loss += report.loss / tail as f64;
        }
        progress(&report);
    }
    let model = trainer.into_model();
    let prompt_ids = &ids[..PROMPT_CHARS.min(ids.len())];
    let generated = model.generate(
        prompt_ids,
        CONTEXT - prompt_ids.len(),
        TEXT_SAMPLING,
        Decoding::KvCache,
        &mut SplitMix64::new(2),
    )?;
    let spell = |ids: &[usize]| ids.iter().map(|&i| vocabulary[i]).collect::<String>();
    Ok(TextRun {
        characters: chars.len(),
        parameters,
        final_loss: tail_loss,
        prompt: spell(prompt_ids),
        continuation: spell(&generated.tokens),
        vocabulary,
    })
}

/// The run as `key=value` lines.
pub fn render_text_run(run: &TextRun) -> String {
    format!(
        "text=characters:{} vocabulary:{} parameters:{} context:{CONTEXT} batch:{TEXT_BATCH} final_loss:{} \
         uniform_loss:{}\nprompt={:?}\ncontinuation={:?} sampling:{TEXT_SAMPLING}\n",
        run.characters,
        run.vocabulary.len(),
        run.parameters,
        fmt_f64(run.final_loss),
        fmt_f64((run.vocabulary.len() as f64).ln()),
        run.prompt,
        run.continuation
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_text_trains_and_continues() {
        let run = train_on_text("abcabcabcabc", 3, |_| {}).unwrap();
        assert_eq!((run.characters, run.vocabulary.len(), run.prompt.as_str()), (12, 3, "abcabcab"));
        assert_eq!(run.continuation.chars().count(), CONTEXT - PROMPT_CHARS);
        assert!(render_text_run(&run).starts_with("text=characters:12 vocabulary:3 "));
        assert!(train_on_text("a", 3, |_| {}).is_err());
        assert!(train_on_text("ab", 0, |_| {}).is_err());
    }
}
