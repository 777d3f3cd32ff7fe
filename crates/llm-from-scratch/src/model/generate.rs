//! Generation: feed the prompt, choose a token, feed it back — with a KV cache per layer, or by
//! recomputing the whole prefix every step (the slow reference the cache must agree with).
//!
//! ```text
//! KvCache:    logits = forward_cached(prompt)           prefill: every layer stores K, V
//!             repeat: t = choose(last row); logits = forward_cached([t])     O(p·d) per token
//! Recompute:  repeat: logits = forward(prompt ++ generated); t = choose(last row)  O(p²·d)
//! ```
//!
//! Past `max_positions` the context slides ([`Overflow::Slide`]): the caches are reset and the
//! last half of the window is prefilled again from position 0, so RoPE's positions stay in range.
//!
//! Both paths compute the same numbers up to the order of floating-point sums (agreement to
//! 1e-12 is checked by tests), so with the same generator they choose the same tokens.

use std::ops::ControlFlow;

use crate::attention::KvCache;
use crate::error::Shape;
use crate::model::{Decoder, ModelError, Sampling};
use crate::nn::SplitMix64;
use crate::tensor::Tensor;

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

/// What generation does when the text outgrows the model's `max_positions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Refuse before anything runs ([`ModelError::ContextOverflow`]) if the prompt and the tokens
    /// fed back need more than `max_positions` positions.
    Refuse,
    /// Keep going on a sliding context: when the next token would not fit, the model forgets all
    /// but the last `⌈max_positions / 2⌉` tokens and reads them again from position 0.
    ///
    /// RoPE only has angles for positions `0..max_positions`, and the cached keys were rotated at
    /// the positions they were written at, so the cache cannot simply drop its oldest entry: the
    /// kept tokens must be *re-encoded* at their new positions. That is a prefill of the kept
    /// window into fresh caches; halving (rather than dropping one token per step) makes it
    /// happen once every `max_positions / 2` tokens instead of for every token. The recompute
    /// path reads exactly the same window, so both paths still agree. A prompt longer than
    /// `max_positions` is cut to its last `⌈max_positions / 2⌉` tokens the same way.
    Slide,
}

impl Decoder {
    /// Generates `steps` tokens after `prompt` (one sequence), choosing each with `sampling`;
    /// past `max_positions` the context slides ([`Overflow::Slide`]).
    ///
    /// The tokens and logits are collected as they come (nothing is reserved from `steps`). For a
    /// long or open-ended generation use [`Generator::generate_streaming`], which keeps nothing.
    ///
    /// # Errors
    /// [`ModelError::InvalidSetting`] when the logits of `steps` tokens would hold more values than
    /// one tensor may ([`crate::tensor::MAX_ELEMENTS`]), before anything runs; otherwise as
    /// [`Generator::generate_streaming`].
    pub fn generate(
        &self,
        prompt: &[usize],
        steps: usize,
        sampling: Sampling,
        decoding: Decoding,
        rng: &mut SplitMix64,
    ) -> Result<Generation, ModelError> {
        if steps.checked_mul(self.config().vocab_size).is_none_or(|n| n > crate::tensor::MAX_ELEMENTS) {
            return Err(ModelError::InvalidSetting {
                module: "model generation",
                setting: "steps",
                value: steps.to_string(),
                reason: "the logits of that many steps would pass the 2^31-value ceiling; generate_streaming keeps none",
            });
        }
        let mut generation = Generation { tokens: Vec::new(), logits: Vec::new() };
        self.generate_streaming(prompt, steps, sampling, decoding, Overflow::Slide, rng, |token, logits| {
            generation.tokens.push(token);
            generation.logits.push(logits.to_vec());
            ControlFlow::Continue(())
        })?;
        Ok(generation)
    }
}

/// What generation needs of a model: its vocabulary and capacity, KV caches, and the logits of
/// the next tokens — the [`Decoder`], or a model that keeps its weights in a file's blocks
/// ([`crate::gguf::QuantizedLlama`]). The loop itself is [`Generator::generate_streaming`].
pub trait Generator {
    /// The error of its forward passes; the prompt's and sampling's errors convert into it.
    type Error: From<ModelError>;

    /// `V`.
    fn vocab_size(&self) -> usize;
    /// RoPE's capacity: positions `0..max_positions`.
    fn max_positions(&self) -> usize;
    /// One empty KV cache per layer for `batch` sequences.
    fn new_caches(&self, batch: usize) -> Vec<KvCache>;
    /// Logits `[B, T, V]` for the next `T` tokens after what `caches` hold, appending their keys
    /// and values.
    ///
    /// # Errors
    /// The model's own.
    fn forward_cached(
        &self,
        tokens: &[usize],
        shape: [usize; 2],
        caches: &mut [KvCache],
    ) -> Result<Tensor, Self::Error>;
    /// Logits `[1, T, V]` of the tokens `window` from scratch ([`Decoding::Recompute`]).
    ///
    /// # Errors
    /// The model's own.
    fn forward_window(&self, window: &[usize]) -> Result<Tensor, Self::Error>;
    /// [`Generator::forward_cached`], keeping only each sequence's last logits, `[B, 1, V]`:
    /// what a generator reads after a prompt. The caches change as they would. This default
    /// computes every position's logits and keeps the last (logits of a shape other than
    /// `[B, T, V]`, or with no position, come back as the model gave them); a model may compute
    /// only the rows it returns, with the same bits.
    ///
    /// # Errors
    /// As [`Generator::forward_cached`].
    fn forward_cached_last(
        &self,
        tokens: &[usize],
        shape: [usize; 2],
        caches: &mut [KvCache],
    ) -> Result<Tensor, Self::Error> {
        let logits = self.forward_cached(tokens, shape, caches)?;
        let (t, v) = (shape[1], self.vocab_size());
        if logits.shape() != [shape[0], t, v] || t.checked_mul(v).is_none_or(|values| values == 0) {
            return Ok(logits); // no last row to cut out: the model's answer as it is
        }
        let last: Vec<f64> =
            logits.as_slice().chunks(t * v).flat_map(|sequence| &sequence[sequence.len() - v..]).copied().collect();
        Ok(Tensor::new(&[shape[0], 1, v], last).map_err(ModelError::from)?)
    }

    /// Generates up to `steps` tokens after `prompt`, handing each to `emit` with the logits `[V]`
    /// it was chosen from as soon as it is chosen; `emit` returns [`ControlFlow::Break`] to stop
    /// early. Returns the number of tokens generated. Nothing is stored, so `steps` may be
    /// `usize::MAX`.
    ///
    /// With [`Overflow::Refuse`], the last generated token is never fed back, so the text needs
    /// `prompt + steps − 1` positions; more than `max_positions` is refused before anything runs.
    ///
    /// # Errors
    /// [`ModelError::EmptyPrompt`], [`ModelError::TokenOutOfRange`], [`ModelError::ContextOverflow`]
    /// (only with [`Overflow::Refuse`]), the setting errors of [`Sampling::validate`]; errors of
    /// the forward passes, and [`ModelError::LogitsShape`] where a pass returns logits that do not
    /// end in a row of `vocab_size` values.
    #[allow(clippy::too_many_arguments)]
    fn generate_streaming(
        &self,
        prompt: &[usize],
        steps: usize,
        sampling: Sampling,
        decoding: Decoding,
        overflow: Overflow,
        rng: &mut SplitMix64,
        mut emit: impl FnMut(usize, &[f64]) -> ControlFlow<()>,
    ) -> Result<usize, Self::Error> {
        if prompt.is_empty() {
            return Err(ModelError::EmptyPrompt.into());
        }
        let vocab = self.vocab_size();
        crate::model::embedding::check_ids("input token", prompt, vocab)?;
        sampling.validate()?;
        let capacity = self.max_positions();
        if overflow == Overflow::Refuse {
            let needed = prompt.len().saturating_add(steps.saturating_sub(1));
            if needed > capacity {
                return Err(ModelError::ContextOverflow { needed, capacity }.into());
            }
        }
        let keep = capacity.div_ceil(2).max(1);
        // a generator's logits come from its own code: their last row is checked, not assumed
        let last_row = |logits: &Tensor| match logits.shape().last() {
            Some(&width) if width == vocab && logits.len() >= vocab => {
                Ok(logits.as_slice()[logits.len() - vocab..].to_vec())
            }
            _ => Err(ModelError::LogitsShape { shape: Shape::from(logits.shape()), vocab }),
        };
        let mut text = prompt.to_vec();
        // the model reads text[start..]; the caches hold every token of it but the last
        let mut start = 0;
        let mut caches = self.new_caches(1);
        let mut prefilled = false;
        for step in 0..steps {
            if text.len() - start > capacity {
                start = text.len() - keep;
                prefilled = false;
            }
            let logits = match decoding {
                Decoding::KvCache if !prefilled => {
                    caches = self.new_caches(1);
                    prefilled = true;
                    let window = &text[start..];
                    // only the last position's logits are read: a model may skip the others
                    self.forward_cached_last(window, [1, window.len()], &mut caches)?
                }
                Decoding::KvCache => self.forward_cached(&text[text.len() - 1..], [1, 1], &mut caches)?,
                Decoding::Recompute => self.forward_window(&text[start..])?,
            };
            let row = last_row(&logits)?;
            let token = sampling.choose(&row, rng)?;
            text.push(token);
            if emit(token, &row).is_break() {
                return Ok(step + 1);
            }
        }
        Ok(steps)
    }
}

impl Generator for Decoder {
    type Error = ModelError;

    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }

    fn max_positions(&self) -> usize {
        self.config().max_positions
    }

    fn new_caches(&self, batch: usize) -> Vec<KvCache> {
        Decoder::new_caches(self, batch)
    }

    fn forward_cached(
        &self,
        tokens: &[usize],
        shape: [usize; 2],
        caches: &mut [KvCache],
    ) -> Result<Tensor, ModelError> {
        Decoder::forward_cached(self, tokens, shape, caches)
    }

    fn forward_window(&self, window: &[usize]) -> Result<Tensor, ModelError> {
        Ok(self.forward(window, [1, window.len()])?.value()?)
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
        // refusing: 5 prompt tokens + 8 generated, the last never fed back: 12 positions fit, 13 do not
        let refuse = |steps, rng: &mut SplitMix64| {
            let emit = |_, _: &[f64]| ControlFlow::Continue(());
            model.generate_streaming(&[1; 5], steps, Sampling::Greedy, Decoding::KvCache, Overflow::Refuse, rng, emit)
        };
        assert_eq!(refuse(8, &mut rng), Ok(8));
        let err = refuse(9, &mut rng).unwrap_err();
        assert_eq!(err.to_string(), "model generation: 13 positions are needed but the model covers 12");
        assert_eq!(refuse(usize::MAX, &mut rng), Err(ModelError::ContextOverflow { needed: usize::MAX, capacity: 12 }));
        let err = model.generate(&[1], 1, Sampling::TopK { temperature: 1.0, k: 0 }, Decoding::Recompute, &mut rng);
        assert!(matches!(err, Err(ModelError::InvalidSetting { module: "sampling", .. })));
        // collecting the logits of usize::MAX steps (or of 2^31 / 12 + 1) is refused before any step
        for steps in [usize::MAX, (1 << 31) / 12 + 1] {
            let err = model.generate(&[1], steps, Sampling::Greedy, Decoding::KvCache, &mut rng).unwrap_err();
            assert!(matches!(err, ModelError::InvalidSetting { module: "model generation", setting: "steps", .. }));
        }
    }

    #[test]
    fn generation_slides_past_max_positions_and_both_paths_agree() {
        for window in [None, Some(crate::attention::SlidingWindow::Inclusive(3))] {
            let model = model(window);
            let sampling = Sampling::TopP { temperature: 1.0, k: 6, p: 0.9 };
            // 5 + 40 tokens through a capacity of 12: the context slides several times
            let run = |decoding| model.generate(&[3, 1, 4, 1, 5], 40, sampling, decoding, &mut SplitMix64::new(4));
            let (cached, recomputed) = (run(Decoding::KvCache).unwrap(), run(Decoding::Recompute).unwrap());
            assert_eq!(cached.tokens.len(), 40);
            assert_eq!(cached.tokens, recomputed.tokens, "{window:?}");
            assert!(cached.max_logit_diff(&recomputed).unwrap() <= 1e-12, "{window:?}");
            // the token after a slide is what a fresh model reading the kept window predicts
            let text: Vec<usize> = [3, 1, 4, 1, 5].into_iter().chain(cached.tokens.iter().copied()).collect();
            // the text reaches 13 tokens before the 9th generated one: the last 6 are read from 0
            let fresh = model.forward(&text[7..13], [1, 6]).unwrap().value().unwrap();
            let row = &fresh.as_slice()[5 * 12..];
            assert!(row.iter().zip(&cached.logits[8]).all(|(a, b)| (a - b).abs() <= 1e-12));
        }
        // a prompt longer than the model's capacity is cut to its last half-window
        let model = model(None);
        let long: Vec<usize> = (0..30).map(|i| i % 12).collect();
        let a = model.generate(&long, 3, Sampling::Greedy, Decoding::KvCache, &mut SplitMix64::new(0)).unwrap();
        let b = model.generate(&long[24..], 3, Sampling::Greedy, Decoding::KvCache, &mut SplitMix64::new(0)).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn the_last_logits_alone_are_the_full_passes_last_rows() {
        let model = model(None);
        let tokens = [3, 1, 4, 1, 5, 9, 2, 6];
        for [b, t] in [[1, 8], [2, 4], [4, 2], [8, 1]] {
            let (mut full_caches, mut last_caches) = (model.new_caches(b), model.new_caches(b));
            let full = Generator::forward_cached(&model, &tokens, [b, t], &mut full_caches).unwrap();
            let last = model.forward_cached_last(&tokens, [b, t], &mut last_caches).unwrap();
            assert_eq!(last.shape(), [b, 1, 12]);
            for (sequence, row) in full.as_slice().chunks(t * 12).zip(last.as_slice().chunks(12)) {
                assert_eq!(&sequence[(t - 1) * 12..], row, "[{b}, {t}]");
            }
            // the caches moved alike: the next token's logits agree
            let next = vec![7; b];
            let after_full = Generator::forward_cached(&model, &next, [b, 1], &mut full_caches).unwrap();
            let after_last = Generator::forward_cached(&model, &next, [b, 1], &mut last_caches).unwrap();
            assert_eq!(after_full.as_slice(), after_last.as_slice(), "[{b}, {t}]");
        }
        // errors stay the forward pass's
        assert!(model.forward_cached_last(&tokens, [3, 3], &mut model.new_caches(3)).is_err());
    }

    /// A generator whose passes return logits of the shape `shape` gives for the number of
    /// tokens: a model of someone else's code that need not keep [`Generator`]'s shapes.
    struct Lenient {
        shape: fn(usize) -> Vec<usize>,
    }

    impl Generator for Lenient {
        type Error = ModelError;
        fn vocab_size(&self) -> usize {
            4
        }
        fn max_positions(&self) -> usize {
            16
        }
        fn new_caches(&self, _batch: usize) -> Vec<KvCache> {
            Vec::new()
        }
        fn forward_cached(&self, tokens: &[usize], _: [usize; 2], _: &mut [KvCache]) -> Result<Tensor, ModelError> {
            let shape = (self.shape)(tokens.len());
            Ok(Tensor::new(&shape, vec![0.5; shape.iter().product()])?)
        }
        fn forward_window(&self, window: &[usize]) -> Result<Tensor, ModelError> {
            self.forward_cached(window, [1, window.len()], &mut [])
        }
    }

    #[test]
    fn logits_without_a_row_of_the_vocabulary_are_a_typed_error() {
        let run = |shape, steps, decoding| {
            let mut tokens = Vec::new();
            let emit = |token, _: &[f64]| {
                tokens.push(token);
                ControlFlow::Continue(())
            };
            let mut rng = SplitMix64::new(0);
            Lenient { shape }
                .generate_streaming(&[1, 2], steps, Sampling::Greedy, decoding, Overflow::Slide, &mut rng, emit)
                .map(|_| tokens)
        };
        let refused: [fn(usize) -> Vec<usize>; 6] =
            [|t| vec![1, t, 0], |t| vec![1, t, 3], |t| vec![1, t, 5], |_| vec![], |_| vec![1, 0, 4], |_| vec![3]];
        for decoding in [Decoding::KvCache, Decoding::Recompute] {
            for shape in refused {
                let logits = Shape::from(&shape(2)[..]);
                let err = ModelError::LogitsShape { shape: logits.clone(), vocab: 4 };
                assert_eq!(run(shape, 2, decoding), Err(err), "{logits} {decoding:?}");
            }
            // generators keeping the shapes, or giving one row alone, generate
            assert_eq!(run(|t| vec![1, t, 4], 2, decoding), Ok(vec![0, 0]));
            assert_eq!(run(|_| vec![4], 2, decoding), Ok(vec![0, 0]));
        }
        let message = "model generation: the model's logits have shape [1,2,3]; their last axis must be its 4 tokens";
        assert_eq!(run(|t| vec![1, t, 3], 1, Decoding::KvCache).unwrap_err().to_string(), message);
    }

    #[test]
    fn streaming_reserves_nothing_and_stops_when_asked() {
        let model = model(None);
        let mut seen = Vec::new();
        let emit = |token, logits: &[f64]| {
            assert_eq!(logits.len(), 12);
            seen.push(token);
            if seen.len() == 30 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        };
        // usize::MAX steps: nothing is allocated from the count, the callback ends the run
        let sampling = Sampling::TopK { temperature: 1.0, k: 4 };
        let mut rng = SplitMix64::new(1);
        let n =
            model.generate_streaming(&[2], usize::MAX, sampling, Decoding::KvCache, Overflow::Slide, &mut rng, emit);
        assert_eq!(n, Ok(30));
        let collected = model.generate(&[2], 30, sampling, Decoding::KvCache, &mut SplitMix64::new(1)).unwrap();
        assert_eq!(collected.tokens, seen);
        let none = model.generate(&[2], 0, sampling, Decoding::KvCache, &mut SplitMix64::new(1)).unwrap();
        assert!(none.tokens.is_empty());
    }
}
