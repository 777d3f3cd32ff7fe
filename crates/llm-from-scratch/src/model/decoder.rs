//! [`Decoder`]: a decoder-only language model of the LLaMA family.
//!
//! Chapter 36 (`ch36-tiny-decoder`) trains one and generates with it.
//!
//! ```text
//! x      = embed_tokens[ids]                           [B, T, d]
//! x      = block_i(x)       for i = 0..N               [B, T, d]
//! logits = RMSNorm(x) · W_head                         [B, T, V]
//! loss   = mean over scored positions of −ln softmax(logits)[next token]
//! ```
//!
//! With tied embeddings `W_head = embed_tokensᵀ`: the same leaf is read twice (by the lookup and,
//! transposed, by the head), so the tape adds both adjoints into its gradient.

use crate::attention::{AttentionError, AttentionPath, AttentionTrace, Branch, KvCache};
use crate::autodiff::TensorValue;
use crate::model::names::{EMBED_TOKENS, FINAL_NORM, LM_HEAD, parameter_shapes, take};
use crate::model::{DecoderBlock, DecoderConfig, ModelError, TokenBatch, TokenEmbedding, cross_entropy};
use crate::nn::{Linear, NamedParameters, RmsNorm, SplitMix64};
use crate::tensor::Tensor;

/// What [`Decoder::forward_traced`] returns: the logits and what each layer's attention did.
#[derive(Clone, Debug)]
pub struct DecoderTrace {
    /// Logits `[B, T, V]`, as [`Decoder::forward`] returns them.
    pub logits: TensorValue,
    /// One trace per layer, first to last (weights `[B, H, T, T]` with the explicit kernel,
    /// `None` with the tiled one, which never forms them).
    pub attention: Vec<AttentionTrace>,
}

/// Embedding, `N` pre-norm blocks, final RMSNorm and LM head.
///
/// # Shapes
/// Token ids `[B, T]` (row-major, each `< V`) → logits `[B, T, V]`; the residual stream between
/// blocks is `[B, T, d]`.
///
/// # Errors
/// [`Decoder::new`]: the settings of [`DecoderConfig::validate`]; the passes:
/// [`ModelError::BatchShape`], [`ModelError::TokenOutOfRange`], and [`ModelError::Attention`] for
/// more tokens than `max_positions`.
///
/// # Threads
/// Its weights are leaves of the tape, which belong to one thread, so a `Decoder` stays on the
/// thread that built it. Its passes use the threads of the current rayon pool; a program that
/// builds and runs it on a thread outside any pool (`main`) wakes that thread again after each
/// parallel region. Running the whole work on a worker, as the chapter binaries do
/// (`llm_kernels::parallel::on_pool`), saves that: chapter 37's release run took 0.79 of the time.
///
/// # Example
/// ```
/// use llm_from_scratch::model::{Decoder, DecoderConfig};
/// use llm_from_scratch::nn::SplitMix64;
/// let model = Decoder::new(DecoderConfig::new(10, 8, 2, 2).with_rope(16, 100.0), &mut SplitMix64::new(0))?;
/// let logits = model.forward(&[1, 2, 3, 4, 5, 6], [2, 3])?;
/// assert_eq!(logits.shape(), &[2, 3, 10]);
/// assert!(model.forward(&[1, 2, 99], [1, 3]).is_err()); // token 99 ≥ V = 10
/// assert_eq!(model.parameters().get("model.layers.1.mlp.down_proj.weight").unwrap().value().shape(), &[24, 8]);
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Decoder {
    config: DecoderConfig,
    embed: TokenEmbedding,
    layers: Vec<DecoderBlock>,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    /// Every leaf under its name, checked once when the model is assembled (names unique, each
    /// leaf listed once), so that [`Decoder::parameters`] cannot fail.
    parameters: NamedParameters,
}

impl Decoder {
    /// A randomly initialised model: embedding from `N(0, embedding_init_std²)`, projections
    /// uniform in `±1/√fan_in`, gains of ones; drawn from a trial copy of `rng`.
    ///
    /// # Errors
    /// The errors of [`DecoderConfig::validate`]; `rng` is then untouched.
    pub fn new(config: DecoderConfig, rng: &mut SplitMix64) -> Result<Self, ModelError> {
        config.validate()?;
        let (v, d) = (config.vocab_size, config.model_width);
        let mut trial = rng.clone();
        let embed = TokenEmbedding::new("model.embed_tokens", v, d, config.embedding_init_std, &mut trial)?;
        let layers = (0..config.layers).map(|i| DecoderBlock::new(&config, i, &mut trial)).collect::<Result<_, _>>()?;
        let lm_head = if config.tie_embeddings { None } else { Some(Linear::new("lm_head", d, v, false, &mut trial)?) };
        *rng = trial;
        let norm = RmsNorm::new("model.norm", d, config.rms_eps)?;
        Self::assemble(config, embed, layers, norm, lm_head)
    }

    /// A model built on existing leaves named as in [`crate::model::names`] (what a checkpoint
    /// loader produces). Every tensor the configuration needs must be present with its shape, and
    /// nothing else.
    ///
    /// # Errors
    /// [`ModelError::MissingParameter`], [`ModelError::ParameterShape`] or
    /// [`ModelError::UnexpectedParameter`] naming the tensor; the configuration errors.
    pub fn from_named(config: DecoderConfig, params: &NamedParameters) -> Result<Self, ModelError> {
        config.validate()?;
        let specs = parameter_shapes(&config);
        if let Some(extra) = params.iter().find(|p| !specs.iter().any(|(name, _)| name == p.name())) {
            return Err(ModelError::UnexpectedParameter { name: extra.name().to_string() });
        }
        let (v, d) = (config.vocab_size, config.model_width);
        let embed = TokenEmbedding::from_weight("model.embed_tokens", take(params, EMBED_TOKENS, &[v, d])?)?;
        let layers =
            (0..config.layers).map(|i| DecoderBlock::from_named(&config, i, params)).collect::<Result<_, _>>()?;
        let norm = RmsNorm::from_gain("model.norm", take(params, FINAL_NORM, &[d])?, config.rms_eps)?;
        let lm_head = match config.tie_embeddings {
            true => None,
            false => Some(Linear::from_parameters(take(params, LM_HEAD, &[d, v])?, None)?.named("lm_head")),
        };
        Self::assemble(config, embed, layers, norm, lm_head)
    }

    /// This model computing its attention with `path`: the same parameters (shared, not copied),
    /// another kernel ([`AttentionPath`]). A model that trains on the tiled kernel, which never
    /// forms the attention weights, shows them this way
    /// (`with_attention_path(AttentionPath::Explicit)`, then [`Decoder::forward_traced`]); and a
    /// model loaded from a checkpoint, which stores no kernel, runs on the one chosen here (a
    /// training state names its kernel: [`crate::model::load_train_state`]).
    ///
    /// # Errors
    /// None for a model of this crate (its parameters are those its configuration needs).
    pub fn with_attention_path(&self, path: AttentionPath) -> Result<Self, ModelError> {
        Self::from_named(self.config.clone().with_path(path), &self.parameters)
    }

    /// The model from its parts, with its parameter list checked.
    ///
    /// # Errors
    /// [`ModelError::Nn`] if two parameters share a name or a leaf (neither happens for the
    /// parts [`Decoder::new`] draws or [`Decoder::from_named`] takes from a checked list).
    fn assemble(
        config: DecoderConfig,
        embed: TokenEmbedding,
        layers: Vec<DecoderBlock>,
        norm: RmsNorm,
        lm_head: Option<Linear>,
    ) -> Result<Self, ModelError> {
        let mut list = embed.parameters();
        for (i, layer) in layers.iter().enumerate() {
            list.extend(layer.parameters(i));
        }
        list.extend(norm.parameters());
        if let Some(head) = &lm_head {
            list.extend(head.parameters());
        }
        let parameters = NamedParameters::try_new(list)?;
        Ok(Self { config, embed, layers, norm, lm_head, parameters })
    }

    /// The configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// The token embedding.
    pub fn embedding(&self) -> &TokenEmbedding {
        &self.embed
    }

    /// The blocks, first to last.
    pub fn layers(&self) -> &[DecoderBlock] {
        &self.layers
    }

    /// Every trainable tensor under its checkpoint name, in the order of
    /// [`crate::model::parameter_shapes`] (a tied head is not listed twice).
    pub fn parameters(&self) -> NamedParameters {
        self.parameters.clone()
    }

    /// Scalars in the model.
    pub fn parameter_count(&self) -> usize {
        self.parameters.scalar_count()
    }

    /// Logits `[B, T, V]` of a full causal pass over `tokens` (row-major `[B, T]`), positions from 0.
    ///
    /// # Errors
    /// [`ModelError::BatchShape`], [`ModelError::TokenOutOfRange`]; attention input errors (no
    /// token, more tokens than `max_positions`).
    pub fn forward(&self, tokens: &[usize], shape: [usize; 2]) -> Result<TensorValue, ModelError> {
        Ok(self.forward_traced(tokens, shape)?.logits)
    }

    /// [`Decoder::forward`], also returning every layer's [`AttentionTrace`] — with the explicit
    /// kernel, `attention[i].weights` is layer `i`'s `[B, H, T, T]`: where each head of each
    /// layer looked. The traces are values the pass kept on its tape anyway.
    ///
    /// ```
    /// use llm_from_scratch::model::{Decoder, DecoderConfig};
    /// use llm_from_scratch::nn::SplitMix64;
    /// let model = Decoder::new(DecoderConfig::new(10, 8, 2, 2).with_rope(16, 100.0), &mut SplitMix64::new(0))?;
    /// let trace = model.forward_traced(&[1, 2, 3], [1, 3])?;
    /// assert_eq!(trace.attention.len(), 2); // one per layer
    /// let weights = trace.attention[1].weights.as_ref().unwrap().value()?;
    /// assert_eq!(weights.shape(), &[1, 2, 3, 3]); // [B, H, T, T]
    /// assert_eq!(weights.as_slice()[1], 0.0); // query 0 cannot see key 1
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Decoder::forward`].
    pub fn forward_traced(&self, tokens: &[usize], shape: [usize; 2]) -> Result<DecoderTrace, ModelError> {
        // one worker kept from parking through all the layers (crate::parallel)
        llm_kernels::parallel::with_workers_awake(|| {
            let mut x = self.embed.forward(tokens, shape)?; // [B, T, d]
            let mut attention = Vec::with_capacity(self.layers.len());
            for layer in &self.layers {
                let (out, trace) = layer.forward_traced(&x, 0)?;
                attention.push(trace);
                x = out;
            }
            Ok(DecoderTrace { logits: self.head(&self.norm.forward(&x)?)?, attention })
        })
    }

    /// `h · W_head`: `[B, T, d] → [B, T, V]`.
    fn head(&self, h: &TensorValue) -> Result<TensorValue, ModelError> {
        match &self.lm_head {
            Some(head) => Ok(head.forward(h)?),
            // tied: [B, T, d] · [V, d]ᵀ, the table read as it is stored (no [d, V] copy per call)
            None => Ok(h.matmul_transposed(self.embed.weight())?),
        }
    }

    /// The mean next-token cross-entropy of the scored positions of `batch` (a rank-0 value).
    ///
    /// # Errors
    /// [`ModelError::TokenOutOfRange`] for an input or target id `≥ V`; [`ModelError::NoTargets`];
    /// the errors of [`Decoder::forward`].
    pub fn loss(&self, batch: &TokenBatch) -> Result<TensorValue, ModelError> {
        let logits = self.forward(batch.inputs(), batch.shape())?;
        self.check_targets(batch)?;
        Ok(cross_entropy(&logits, batch.targets())?)
    }

    /// Rejects a target id `≥ V` (naming its index) and a batch with nothing to score.
    pub(crate) fn check_targets(&self, batch: &TokenBatch) -> Result<(), ModelError> {
        let vocab = self.config.vocab_size;
        let bad =
            batch.targets().iter().enumerate().find_map(|(index, t)| t.filter(|&id| id >= vocab).map(|id| (index, id)));
        if let Some((index, id)) = bad {
            return Err(ModelError::TokenOutOfRange { what: "target token", index, id, vocab });
        }
        if batch.scored() == 0 {
            return Err(ModelError::NoTargets);
        }
        Ok(())
    }

    /// One empty KV cache per layer for `batch` sequences.
    pub fn new_caches(&self, batch: usize) -> Vec<KvCache> {
        self.layers.iter().map(|l| l.attention().new_cache(batch)).collect()
    }

    /// Logits `[B, T, V]` for the next `T` tokens after what `caches` hold (prefill, then decode
    /// one token at a time), appending their keys and values in every layer. Evaluation only.
    ///
    /// # Errors
    /// [`ModelError::CacheCount`]; [`ModelError::InvalidSetting`] if the caches are not all at
    /// the same position; [`ModelError::Attention`] when the tokens would pass `max_positions`
    /// (checked before any cache changes); the input errors of [`Decoder::forward`].
    pub fn forward_cached(
        &self,
        tokens: &[usize],
        shape: [usize; 2],
        caches: &mut [KvCache],
    ) -> Result<Tensor, ModelError> {
        // one worker kept from parking through all the layers (crate::parallel)
        llm_kernels::parallel::with_workers_awake(|| self.forward_cached_body(tokens, shape, caches))
    }

    fn forward_cached_body(
        &self,
        tokens: &[usize],
        shape: [usize; 2],
        caches: &mut [KvCache],
    ) -> Result<Tensor, ModelError> {
        if caches.len() != self.layers.len() {
            return Err(ModelError::CacheCount { expected: self.layers.len(), actual: caches.len() });
        }
        let next = caches.first().map_or(0, KvCache::next_position);
        if caches.iter().any(|c| c.next_position() != next) {
            return Err(ModelError::setting(
                "model cache",
                "next positions",
                format!("{:?}", caches.iter().map(KvCache::next_position).collect::<Vec<_>>()),
                "every layer's cache must be at the same position",
            ));
        }
        let mut x = self.embed.forward(tokens, shape)?.value()?; // [B, T, d]
        // every layer shares the capacity: reject the call before the first cache changes
        if let Some(first) = self.layers.first() {
            let rope = first.attention().rope();
            rope.check_interval(next, shape[1]).map_err(|e| AttentionError::from_rope(Branch::Query, e))?;
        }
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            x = layer.forward_cached(&x, cache)?;
        }
        let h = TensorValue::leaf(x, false);
        Ok(self.head(&self.norm.forward(&h)?)?.value()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::{GradcheckConfig, gradcheck};
    use crate::model::names::EMBED_TOKENS;
    use crate::nn::NamedParameter;

    fn config() -> DecoderConfig {
        DecoderConfig::new(7, 8, 2, 2).with_kv_heads(1).with_ffn_width(12).with_rope(8, 100.0)
    }

    /// `params` with the tensor `name` replaced by `leaf`.
    fn replaced(params: &NamedParameters, name: &str, leaf: &TensorValue) -> NamedParameters {
        let list = params
            .iter()
            .map(|p| NamedParameter::new(p.name(), if p.name() == name { leaf.clone() } else { p.value().clone() }))
            .collect();
        NamedParameters::try_new(list).unwrap()
    }

    #[test]
    fn gradcheck_loss_with_respect_to_the_embedding() {
        // tied: the table is read by the lookup and, transposed, by the head — both adjoints count
        for tied in [true, false] {
            let config = config().with_tied_embeddings(tied).with_embedding_init_std(0.5);
            let model = Decoder::new(config.clone(), &mut SplitMix64::new(17)).unwrap();
            let params = model.parameters();
            let batch = TokenBatch::next_token(&[vec![1, 5, 5, 0, 6], vec![2, 3, 4, 1, 1]], 1).unwrap();
            let table = model.embedding().weight().value().unwrap();
            let report = gradcheck(&[("embed_tokens", table)], &GradcheckConfig::default(), |v| {
                Decoder::from_named(config.clone(), &replaced(&params, EMBED_TOKENS, &v[0]))?.loss(&batch)
            })
            .unwrap();
            assert!(report.passed(), "tied {tied}: {report:?}");
            assert_eq!(report.coordinates(), 7 * 8);
        }
    }

    #[test]
    fn from_named_round_trip_and_errors() {
        let model = Decoder::new(config(), &mut SplitMix64::new(2)).unwrap();
        let params = model.parameters();
        assert_eq!(params.len(), 1 + 2 * 9 + 1);
        assert_eq!(params.scalar_count(), config().parameter_count());
        // the list kept since construction names the model's own leaves, in the checkpoint order
        let names: Vec<String> = parameter_shapes(&config()).into_iter().map(|(name, _)| name).collect();
        assert_eq!(params.iter().map(|p| p.name().to_string()).collect::<Vec<_>>(), names);
        assert_eq!(params.get(EMBED_TOKENS).unwrap().value().id(), model.embedding().weight().id());
        let again = Decoder::from_named(config(), &params).unwrap();
        let (a, b) = (model.forward(&[1, 2, 3], [1, 3]).unwrap(), again.forward(&[1, 2, 3], [1, 3]).unwrap());
        assert!(a.value().unwrap().bitwise_eq(&b.value().unwrap()));
        // the untied configuration needs lm_head.weight; the tied one refuses it
        let err = Decoder::from_named(config().with_tied_embeddings(false), &params).unwrap_err();
        assert_eq!(err.to_string(), "model parameters: lm_head.weight is missing");
        let untied = Decoder::new(config().with_tied_embeddings(false), &mut SplitMix64::new(2)).unwrap();
        let err = Decoder::from_named(config(), &untied.parameters()).unwrap_err();
        assert_eq!(err.to_string(), "model parameters: lm_head.weight is not a parameter of this configuration");
        let bad = crate::autodiff::parameter(&[7, 9], &[0.0; 63]).unwrap();
        let err = Decoder::from_named(config(), &replaced(&params, EMBED_TOKENS, &bad)).unwrap_err();
        assert_eq!(err.to_string(), "model parameters: model.embed_tokens.weight has shape [7,9] but [7,8] was needed");
    }

    #[test]
    fn the_tiled_kernel_trains_like_the_explicit_one() {
        // same weights, both kernels: the loss and every gradient agree to 1e-12 (relative)
        let explicit = Decoder::new(config().with_embedding_init_std(0.5), &mut SplitMix64::new(4)).unwrap();
        let tiled = explicit.with_attention_path(AttentionPath::Tiled).unwrap();
        assert_eq!((explicit.config().path, tiled.config().path), (AttentionPath::Explicit, AttentionPath::Tiled));
        // the same leaves, not copies
        let (ours, theirs) = (explicit.parameters(), tiled.parameters());
        assert!(ours.iter().zip(theirs.iter()).all(|(a, b)| a.name() == b.name() && a.value().same_node(b.value())));
        let batch = TokenBatch::next_token(&[vec![1, 5, 5, 0, 6, 2, 2, 3], vec![2, 3, 4, 1, 1, 0, 6, 6]], 2).unwrap();
        let (a, b) = (explicit.loss(&batch).unwrap(), tiled.loss(&batch).unwrap());
        let (la, lb) = (a.value().unwrap().as_slice()[0], b.value().unwrap().as_slice()[0]);
        assert!((la - lb).abs() <= 1e-12 * la.abs());
        let (ga, gb) = (a.backward().unwrap(), b.backward().unwrap());
        for p in explicit.parameters().iter() {
            let (x, y) = (ga.get_or_zeros(p.value()), gb.get_or_zeros(p.value()));
            let scale = x.as_slice().iter().fold(1e-300f64, |m, v| m.max(v.abs()));
            assert!(x.max_abs_diff(&y).unwrap() <= 1e-12 * scale, "{}", p.name());
        }
    }

    #[test]
    fn the_traced_pass_is_the_forward_pass_and_keeps_each_layers_weights() {
        let model = Decoder::new(config().with_embedding_init_std(0.5), &mut SplitMix64::new(5)).unwrap();
        let tokens = [1, 5, 5, 0, 6, 2];
        let trace = model.forward_traced(&tokens, [2, 3]).unwrap();
        assert!(trace.logits.value().unwrap().bitwise_eq(&model.forward(&tokens, [2, 3]).unwrap().value().unwrap()));
        assert_eq!(trace.attention.len(), 2);
        // layer 0's weights are those of its attention layer on the normalised embeddings
        let block = &model.layers()[0];
        let x = model.embedding().forward(&tokens, [2, 3]).unwrap();
        let (out, direct) = block.forward_traced(&x, 0).unwrap();
        assert!(out.value().unwrap().bitwise_eq(&block.forward(&x, 0).unwrap().value().unwrap()));
        let weights = |t: &AttentionTrace| t.weights.as_ref().unwrap().value().unwrap();
        assert!(weights(&trace.attention[0]).bitwise_eq(&weights(&direct)));
        for layer in &trace.attention {
            let w = weights(layer);
            assert_eq!(w.shape(), &[2, 2, 3, 3]); // [B, H, T, T]
            for (r, row) in w.as_slice().chunks(3).enumerate() {
                let query = r % 3;
                assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
                assert!(row[query + 1..].iter().all(|&p| p == 0.0), "query {query} sees the future: {row:?}");
            }
        }
        // the tiled kernel never forms the weights
        let tiled = model.with_attention_path(AttentionPath::Tiled).unwrap();
        assert!(tiled.forward_traced(&tokens, [2, 3]).unwrap().attention.iter().all(|t| t.weights.is_none()));
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let model = Decoder::new(config(), &mut SplitMix64::new(2)).unwrap();
        let err = model.forward(&[1, 7], [1, 2]).unwrap_err();
        assert!(matches!(err, ModelError::TokenOutOfRange { what: "input token", index: 1, id: 7, vocab: 7 }));
        let batch = TokenBatch::new(vec![1, 2], vec![None, Some(8)], [1, 2]).unwrap();
        let err = model.loss(&batch).unwrap_err();
        assert_eq!(err.to_string(), "model input: target token 8 at index 1 is outside the vocabulary of 7 tokens");
        assert_eq!(
            model.loss(&TokenBatch::new(vec![1, 2], vec![None; 2], [1, 2]).unwrap()).unwrap_err(),
            ModelError::NoTargets
        );
        let err = model.forward(&[1; 9], [1, 9]).unwrap_err();
        assert_eq!(err.to_string(), "model: attention positions: 0..9 exceed capacity 8");
        assert!(model.forward(&[], [1, 0]).is_err());
        assert_eq!(model.forward(&[], [0, 3]).unwrap().shape(), &[0, 3, 7], "an empty batch is empty, not an error");
        let mut caches = model.new_caches(1);
        assert!(matches!(model.forward_cached(&[1], [1, 1], &mut caches[..1]), Err(ModelError::CacheCount { .. })));
        model.forward_cached(&[1; 6], [1, 6], &mut caches).unwrap();
        let err = model.forward_cached(&[1; 3], [1, 3], &mut caches).unwrap_err();
        assert_eq!(err.to_string(), "model: attention positions: 6..9 exceed capacity 8");
        assert!(caches.iter().all(|c| c.next_position() == 6), "a refused call leaves every cache unchanged");
    }
}
