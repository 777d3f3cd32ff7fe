//! Generation: feed the prompt, choose a token, feed it back — with a KV cache per layer, or by
//! recomputing the whole prefix every step (the slow reference the cache must agree with).
//!
//! ```text
//! KvCache:    logits = forward_cached(prompt)           prefill: every layer stores K, V
//!             repeat: t = choose(last row); logits = forward_cached([t])     O(p·d) per token
//! Recompute:  repeat: logits = forward(prompt ++ generated); t = choose(last row)  O(p²·d)
//! ```
//!
//! Both paths compute the same numbers up to the order of floating-point sums (agreement to
//! 1e-12 is checked by tests), so with the same generator they choose the same tokens.

use crate::model::{Decoder, ModelError, Sampling};
use crate::nn::SplitMix64;

/// How each step's logits are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoding {
    /// Prefill once, then decode one token at a time from per-layer KV caches.
    KvCache,
    /// A full causal pass over the whole text for every token.
    Recompute,
}

/// What [`Decoder::generate`] produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// The generated tokens (the prompt not included).
    pub tokens: Vec<usize>,
    /// For each generated token, the logits `[V]` it was chosen from.
    pub logits: Vec<Vec<f64>>,
}

impl Generation {
    /// The largest absolute difference between the logits of two generations of equal length
    /// (`None` if the lengths or widths differ).
    pub fn max_logit_diff(&self, other: &Generation) -> Option<f64> {
        let same_shape = self.logits.len() == other.logits.len()
            && self.logits.iter().zip(&other.logits).all(|(a, b)| a.len() == b.len());
        same_shape.then(|| {
            let pairs = self.logits.iter().zip(&other.logits).flat_map(|(a, b)| a.iter().zip(b));
            pairs.map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
        })
    }
}

impl Decoder {
    /// Generates `steps` tokens after `prompt` (one sequence), choosing each with `sampling`.
    ///
    /// The last generated token is never fed back, so the text needs `prompt + steps − 1`
    /// positions; more than `max_positions` is refused before anything runs.
    ///
    /// # Errors
    /// [`ModelError::EmptyPrompt`], [`ModelError::TokenOutOfRange`], [`ModelError::ContextOverflow`],
    /// the setting errors of [`Sampling::validate`]; errors of the forward passes.
    pub fn generate(
        &self,
        prompt: &[usize],
        steps: usize,
        sampling: Sampling,
        decoding: Decoding,
        rng: &mut SplitMix64,
    ) -> Result<Generation, ModelError> {
        if prompt.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        crate::model::embedding::check_ids("input token", prompt, self.config().vocab_size)?;
        sampling.validate()?;
        let capacity = self.config().max_positions;
        let needed = prompt.len().saturating_add(steps.saturating_sub(1));
        if needed > capacity {
            return Err(ModelError::ContextOverflow { needed, capacity });
        }
        let vocab = self.config().vocab_size;
        let last_row = |logits: &crate::Tensor| logits.as_slice()[logits.len() - vocab..].to_vec();
        let mut text = prompt.to_vec();
        let mut generation = Generation { tokens: Vec::with_capacity(steps), logits: Vec::with_capacity(steps) };
        let mut caches = self.new_caches(1);
        for step in 0..steps {
            let logits = match decoding {
                // the first call prefills the prompt; later ones decode the token just chosen
                Decoding::KvCache if step == 0 => self.forward_cached(prompt, [1, prompt.len()], &mut caches)?,
                Decoding::KvCache => self.forward_cached(&text[text.len() - 1..], [1, 1], &mut caches)?,
                Decoding::Recompute => self.forward(&text, [1, text.len()])?.value()?,
            };
            let row = last_row(&logits);
            let token = sampling.choose(&row, rng)?;
            text.push(token);
            generation.tokens.push(token);
            generation.logits.push(row);
        }
        Ok(generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DecoderConfig;

    fn model(window: Option<crate::attention::SlidingWindow>) -> Decoder {
        let mut config = DecoderConfig::new(12, 16, 2, 4).with_kv_heads(2).with_rope(12, 100.0);
        config.window = window;
        // a larger embedding scale makes the untrained logits far from uniform
        Decoder::new(config.with_embedding_init_std(1.0), &mut SplitMix64::new(21)).unwrap()
    }

    #[test]
    fn cache_generation_equals_recomputation() {
        for window in [None, Some(crate::attention::SlidingWindow::Inclusive(3))] {
            let model = model(window);
            for sampling in [Sampling::Greedy, Sampling::TopK { temperature: 0.9, k: 4 }] {
                let run = |decoding| model.generate(&[3, 1, 4, 1, 5], 7, sampling, decoding, &mut SplitMix64::new(9));
                let (cached, recomputed) = (run(Decoding::KvCache).unwrap(), run(Decoding::Recompute).unwrap());
                assert_eq!(cached.tokens, recomputed.tokens, "{sampling} {window:?}");
                assert!(cached.max_logit_diff(&recomputed).unwrap() <= 1e-12, "{sampling} {window:?}");
                assert_eq!(cached.tokens.len(), 7);
            }
        }
    }

    #[test]
    fn bad_prompts_and_settings_are_typed_errors() {
        let model = model(None);
        let mut rng = SplitMix64::new(0);
        let err = model.generate(&[3, 12], 2, Sampling::Greedy, Decoding::KvCache, &mut rng).unwrap_err();
        assert_eq!(err.to_string(), "model input: input token 12 at index 1 is outside the vocabulary of 12 tokens");
        let err = model.generate(&[], 2, Sampling::Greedy, Decoding::KvCache, &mut rng).unwrap_err();
        assert_eq!(err, ModelError::EmptyPrompt);
        // 5 prompt tokens + 8 generated, the last never fed back: 12 positions fit, 13 do not
        assert!(model.generate(&[1; 5], 8, Sampling::Greedy, Decoding::KvCache, &mut rng).is_ok());
        let err = model.generate(&[1; 5], 9, Sampling::Greedy, Decoding::KvCache, &mut rng).unwrap_err();
        assert_eq!(err.to_string(), "model generation: 13 positions are needed but the model covers 12");
        let err = model.generate(&[1], 1, Sampling::TopK { temperature: 1.0, k: 0 }, Decoding::Recompute, &mut rng);
        assert!(matches!(err, Err(ModelError::InvalidSetting { module: "sampling", .. })));
    }
}
