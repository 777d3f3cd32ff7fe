//! [`GroupedQueryAttention`]: the general attention layer of modern decoders.
//!
//! Chapter 32 (`ch32-grouped-query-attention`) teaches it; chapters 33, 34 and 36 build on it.
//!
//! `H` query heads share `G` key/value heads (`H % G == 0`): query head `h` reads key/value head
//! `⌊h / (H/G)⌋`, so consecutive query heads form a group — the *repeat-interleave* order
//! `[KV0, KV0, …, KV1, KV1, …]`, not the tiled order `[KV0, KV1, …, KV0, KV1, …]`. Loading a
//! checkpoint with the wrong order silently pairs queries with the wrong keys.
//!
//! - `G = H` is multi-head attention; `G = 1` is multi-query attention.
//! - The grouping is a reshape `[B, H, T, d_h] → [B, G, H/G, T, d_h]` of the queries against
//!   keys/values viewed as `[B, G, 1, T, d_h]`: the matrix product broadcasts the single key/value
//!   head over its group, so K and V are never copied `H/G` times.
//! - The head width `d_h` is a free choice (Gemma-7B: 16 heads × 256 with `d_model = 3072`).
//! - Parameters: `W_Q [d, H·d_h]`, `W_K, W_V [d, G·d_h]`, `W_O [H·d_h, d]` — `2·d·d_h·(H+G)`, plus
//!   `H·d_h + 2·G·d_h + d` biases when enabled.
//!
//! Options: a sliding window ([`SlidingWindow`]), key padding with explicit positions, and dropout
//! on the attention weights and on the output (training only).

use crate::attention::config::{AttentionConfig, AttentionPath};
use crate::attention::error::{AtStage, OnBranch};
use crate::attention::input::{check_key_padding, check_positions, check_sequence};
use crate::attention::scaled_dot_product::grouped_attention_with;
use crate::attention::{AttentionError, Branch, Stage, Visibility, tiled_attention_merged};
use crate::autodiff::TensorValue;
use crate::error::Shape;
use crate::nn::{Linear, NamedParameters, QkvOutput, QkvProjections, RotaryEmbedding, SplitMix64};
use crate::tensor::{Mask, Tensor};

/// Per-call options of [`GroupedQueryAttention::forward_with`].
#[derive(Debug, Default)]
pub struct AttentionOptions<'a> {
    /// Absolute position of the first token (ignored when `positions` is given).
    pub position_offset: usize,
    /// Explicit RoPE positions: `T` (shared by the batch) or `B·T` (one row per batch row), e.g.
    /// `0, 0, 0, 1, 2` for a row left-padded by two tokens. Causality and the window still count
    /// stream positions `position_offset + index`.
    pub positions: Option<&'a [usize]>,
    /// `[B, T]`, `true` marks a padding token: no query attends to it.
    pub key_padding: Option<&'a Mask>,
    /// Training mode: dropout draws from this generator. `None` is evaluation (no dropout).
    pub training: Option<&'a mut SplitMix64>,
}

/// Every intermediate of one forward pass.
///
/// # Shapes
/// Query tensors are `[B, H, T, d_h]`, key/value tensors `[B, G, T, d_h]`, scores and weights
/// `[B, H, T, T]`, `merged` `[B, T, H·d_h]` and `output` `[B, T, d]`.
#[derive(Clone, Debug)]
pub struct AttentionTrace {
    /// `Q` split into heads, before RoPE (`None` with the tiled kernel, whose layer splits and
    /// rotates in one pass: [`crate::nn::RotaryEmbedding::rotate_heads`]).
    pub query_heads: Option<TensorValue>,
    /// `K` split into heads, before RoPE (`None` with the tiled kernel, as `query_heads`).
    pub key_heads: Option<TensorValue>,
    /// `V` split into heads (`None` with the tiled kernel, which reads the values in the
    /// projection's rows: [`crate::attention::tiled_attention_merged`]).
    pub value_heads: Option<TensorValue>,
    /// Query heads after RoPE.
    pub rotated_query_heads: TensorValue,
    /// Key heads after RoPE.
    pub rotated_key_heads: TensorValue,
    /// Scaled scores before masking (`None` with the tiled kernel, which never forms them).
    pub scores: Option<TensorValue>,
    /// Attention weights, after dropout when training (`None` with the tiled kernel).
    pub weights: Option<TensorValue>,
    /// Per-head outputs (`None` with the tiled kernel, which writes them merged).
    pub head_outputs: Option<TensorValue>,
    /// Heads concatenated.
    pub merged: TensorValue,
    /// The layer's output.
    pub output: TensorValue,
}

/// Grouped-query attention with RoPE, optional window, padding, biases and dropout.
///
/// # Shapes
/// `x [B, T, d] → output [B, T, d]`; queries `[B, H, T, d_h]`, keys and values `[B, G, T, d_h]`
/// (every intermediate is in [`AttentionTrace`]).
///
/// # Errors
/// [`GroupedQueryAttention::new`]: the configuration errors of [`AttentionConfig::validate`];
/// the forwards: the input errors of [`GroupedQueryAttention::check_input`], then
/// [`AttentionError::Stage`] naming the stage that failed.
///
/// # Example
/// ```
/// use llm_from_scratch::attention::{AttentionConfig, AttentionError, GroupedQueryAttention};
/// use llm_from_scratch::{constant, nn::SplitMix64};
/// // 4 query heads share 2 key/value heads of width 4
/// let config = AttentionConfig::new(16, 4, 2, 4).with_rope(32, 10_000.0);
/// let layer = GroupedQueryAttention::new("attn", config, &mut SplitMix64::new(0))?;
/// let trace = layer.forward(&constant(&[1, 5, 16], &[0.2; 80])?, 0)?;
/// assert_eq!(trace.rotated_query_heads.shape(), &[1, 4, 5, 4]);
/// assert_eq!(trace.rotated_key_heads.shape(), &[1, 2, 5, 4]);
/// assert_eq!(trace.output.shape(), &[1, 5, 16]);
/// // 3 query heads cannot share 2 key/value heads
/// let bad = GroupedQueryAttention::new("attn", AttentionConfig::new(12, 3, 2, 4), &mut SplitMix64::new(0));
/// assert!(matches!(bad, Err(AttentionError::GroupsDoNotDivide { .. })));
/// # Ok::<(), AttentionError>(())
/// ```
#[derive(Clone, Debug)]
pub struct GroupedQueryAttention {
    prefix: String,
    config: AttentionConfig,
    qkv: QkvProjections,
    output: Linear,
    rope: RotaryEmbedding,
    sinks: Option<TensorValue>,
}

impl GroupedQueryAttention {
    /// A layer with weights drawn uniformly in `±1/√fan_in` from a trial copy of `rng`.
    ///
    /// # Errors
    /// The configuration errors of [`AttentionConfig::validate`]; `rng` is then untouched.
    pub fn new(prefix: &str, config: AttentionConfig, rng: &mut SplitMix64) -> Result<Self, AttentionError> {
        config.validate()?;
        let (d, q, kv) =
            (config.model_width, config.query_heads * config.head_width, config.kv_heads * config.head_width);
        let mut trial = rng.clone();
        let qkv = QkvProjections::with_widths(prefix, d, q, kv, config.bias, &mut trial).at(Stage::Projection)?;
        let output =
            Linear::new(&format!("{prefix}.output"), q, d, config.bias, &mut trial).at(Stage::OutputProjection)?;
        *rng = trial;
        Self::from_parts(prefix, config, qkv, output)
    }

    /// A layer from existing projections (`W_Q [d, H·d_h]`, `W_K/W_V [d, G·d_h]`) and output
    /// projection (`[H·d_h, d]`).
    ///
    /// # Errors
    /// The configuration errors, then [`AttentionError::ParameterShape`] if a projection does not
    /// match the configuration, and [`AttentionError::BiasMismatch`] if the parts carry biases
    /// where `config.bias` is false, or lack them where it is true (so that
    /// [`AttentionConfig::parameter_count`] always counts the layer's parameters).
    pub fn from_parts(
        prefix: &str,
        config: AttentionConfig,
        qkv: QkvProjections,
        output: Linear,
    ) -> Result<Self, AttentionError> {
        config.validate()?;
        let (d, q, kv) =
            (config.model_width, config.query_heads * config.head_width, config.kv_heads * config.head_width);
        let checks = [
            ("query weight", vec![qkv.model_width(), qkv.head_width()], vec![d, q]),
            ("key weight", vec![qkv.model_width(), qkv.kv_width()], vec![d, kv]),
            ("output weight", vec![output.input_width(), output.output_width()], vec![q, d]),
        ];
        for (name, actual, expected) in checks {
            if actual != expected {
                return Err(AttentionError::ParameterShape { name, expected: Shape(expected), actual: Shape(actual) });
            }
        }
        let found = |has: bool| if has { "biases" } else { "no biases" };
        for (part, has) in
            [("query/key/value projections", qkv.biases().is_some()), ("output projection", output.bias().is_some())]
        {
            if has != config.bias {
                return Err(AttentionError::BiasMismatch { config: config.bias, part, found: found(has) });
            }
        }
        let rope = config.rope()?;
        // sinks start at logit 0: as likely as a key with score 0
        let sinks = config.sinks.then(|| {
            TensorValue::leaf(crate::Tensor::from_parts(vec![config.query_heads], vec![0.0; config.query_heads]), true)
        });
        let layer = Self { prefix: prefix.to_string(), config, qkv, output, rope, sinks };
        layer.checked_parameters()?;
        Ok(layer)
    }

    /// Uses an existing leaf `[H]` as the sink logits (the configuration must enable sinks).
    ///
    /// # Errors
    /// [`AttentionError::ParameterShape`] if the shape is not `[H]` or sinks are disabled.
    pub fn with_sink_logits(mut self, sinks: TensorValue) -> Result<Self, AttentionError> {
        let h = self.config.query_heads;
        if !self.config.sinks || sinks.shape() != [h] {
            return Err(AttentionError::ParameterShape {
                name: "sink logits",
                expected: Shape(if self.config.sinks { vec![h] } else { vec![] }),
                actual: Shape::from(sinks.shape()),
            });
        }
        self.sinks = Some(sinks);
        self.checked_parameters()?;
        Ok(self)
    }

    /// The sink logits `[H]`, if enabled.
    pub fn sink_logits(&self) -> Option<&TensorValue> {
        self.sinks.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &AttentionConfig {
        &self.config
    }

    /// The rotary tables.
    pub fn rope(&self) -> &RotaryEmbedding {
        &self.rope
    }

    /// The Q/K/V projections.
    pub fn qkv(&self) -> &QkvProjections {
        &self.qkv
    }

    /// The output projection.
    pub fn output_projection(&self) -> &Linear {
        &self.output
    }

    /// The parameter list, rejecting a node used for two parameters (e.g. the same leaf passed as
    /// `W_Q` and `W_K`): each parameter must be its own leaf so that its update is applied once.
    fn checked_parameters(&self) -> Result<NamedParameters, AttentionError> {
        let mut list = self.qkv.parameters();
        list.extend(self.output.parameters());
        if let Some(s) = &self.sinks {
            list.push(crate::nn::NamedParameter::new(format!("{}.sinks", self.prefix), s.clone()));
        }
        NamedParameters::try_new(list).map_err(|source| AttentionError::Layer { stage: Stage::Projection, source })
    }

    /// All parameters under their dotted names (Q, K, V, O weights, then biases, then sinks).
    pub fn parameters(&self) -> NamedParameters {
        // every constructor checked this list, so it cannot fail here
        self.checked_parameters().unwrap_or_default()
    }

    /// Scalars in the layer.
    pub fn parameter_count(&self) -> usize {
        self.parameters().scalar_count()
    }

    /// Runs a causal pass over `x [B, T, d]` starting at absolute position `position_offset`
    /// (evaluation mode).
    ///
    /// # Errors
    /// As [`GroupedQueryAttention::forward_with`].
    pub fn forward(&self, x: &TensorValue, position_offset: usize) -> Result<AttentionTrace, AttentionError> {
        self.forward_with(x, AttentionOptions { position_offset, ..AttentionOptions::default() })
    }

    /// Checks `x`'s shape and the positions, before anything is recorded. Order: rank 3, last
    /// width, at least one token, positions (interval or explicit list), then the padding mask.
    ///
    /// # Errors
    /// [`AttentionError::InputRank`], `InputWidth`, `EmptySequence`, `PositionOverflow`,
    /// `PositionOutOfRange`, `PaddingShape`.
    pub fn check_input(&self, shape: &[usize], options: &AttentionOptions<'_>) -> Result<(), AttentionError> {
        check_sequence(shape, self.config.model_width)?;
        let (b, t) = (shape[0], shape[1]);
        match options.positions {
            None => self.rope.check_interval(options.position_offset, t).on(Branch::Query)?,
            Some(p) => check_positions(p, (b, t), self.config.max_positions)?,
        }
        options.key_padding.map_or(Ok(()), |m| check_key_padding(m, (b, t)))
    }

    /// Runs the layer on `x [B, T, d]` with the given options.
    ///
    /// # Errors
    /// The input errors of [`GroupedQueryAttention::check_input`] (before anything is recorded),
    /// then [`AttentionError::Stage`] naming the stage and branch that failed.
    pub fn forward_with(
        &self,
        x: &TensorValue,
        options: AttentionOptions<'_>,
    ) -> Result<AttentionTrace, AttentionError> {
        // many short parallel regions: keep a worker from parking between them (crate::parallel)
        llm_kernels::parallel::with_workers_awake(|| self.forward_with_body(x, options))
    }

    fn forward_with_body(
        &self,
        x: &TensorValue,
        options: AttentionOptions<'_>,
    ) -> Result<AttentionTrace, AttentionError> {
        self.check_input(x.shape(), &options)?;
        let t = x.shape()[1];
        // RoPE uses explicit positions when given (padding), else offset + index (checked above)
        let positions = match options.positions {
            Some(p) => p.to_vec(),
            None => (options.position_offset..options.position_offset + t).collect(),
        };
        let qkv = self.qkv.forward(x).at(Stage::Projection)?;
        // causality and windows count stream positions (tokens as they arrived, padding included);
        // keys are the same tokens as the queries, so positions relative to the first suffice
        let visibility = Visibility {
            query_offset: 0,
            window: self.config.window,
            key_padding: options.key_padding.map(|m| m.as_slice().to_vec()),
        };
        let mut rng = options.training;
        // the explicit path keeps every intermediate for inspection; the tiled path splits and
        // rotates queries and keys in one pass (the same rotated heads, bit for bit) and reads
        // the values and writes the heads' outputs in the projections' rows (the same bits as
        // splitting and merging)
        // each arm fills the trace up to the merged heads; the output projection follows
        let mut trace = match self.config.path {
            AttentionPath::Explicit => {
                let p = self.split_and_rotate(&qkv, &positions, true)?;
                let (q, k, v) = (&p.rotated_query_heads, &p.rotated_key_heads, &p.value_heads);
                let attention_p = if rng.is_some() { self.config.attention_dropout } else { 0.0 };
                let dropout = rng.as_deref_mut().map(|r| (attention_p, r));
                let out = grouped_attention_with(q, k, v, self.sinks.as_ref(), &visibility, dropout)?;
                let merged = crate::attention::merge_heads(out.output())?; // [B,T,H·d_h]
                AttentionTrace {
                    query_heads: p.query_heads,
                    key_heads: p.key_heads,
                    value_heads: Some(p.value_heads),
                    rotated_query_heads: p.rotated_query_heads,
                    rotated_key_heads: p.rotated_key_heads,
                    scores: Some(out.scores().clone()),
                    weights: Some(out.weights().clone()),
                    head_outputs: Some(out.output().clone()),
                    output: merged.clone(),
                    merged,
                }
            }
            AttentionPath::Tiled => {
                let (q, k) = self.rotate(&qkv, &positions)?;
                let merged = tiled_attention_merged(&q, &k, qkv.value(), self.sinks.as_ref(), &visibility)?;
                AttentionTrace {
                    query_heads: None,
                    key_heads: None,
                    value_heads: None,
                    rotated_query_heads: q,
                    rotated_key_heads: k,
                    scores: None,
                    weights: None,
                    head_outputs: None,
                    output: merged.clone(),
                    merged,
                }
            }
        };
        let mut output = self.output.forward(&trace.merged).at(Stage::OutputProjection)?;
        if let Some(r) = rng {
            output = output.dropout(self.config.output_dropout, r).at(Stage::OutputProjection)?;
        }
        trace.output = output;
        Ok(trace)
    }

    /// Projects, splits into heads and rotates queries and keys at `positions` (`T` or `B·T`).
    pub(crate) fn project(&self, x: &TensorValue, positions: &[usize]) -> Result<Projected, AttentionError> {
        let qkv = self.qkv.forward(x).at(Stage::Projection)?;
        self.split_and_rotate(&qkv, positions, false)
    }

    /// [`GroupedQueryAttention::project`] for one token outside training (decoding): the three
    /// products share one pass over the weights ([`QkvProjections::forward_token`]).
    pub(crate) fn project_token(&self, x: &Tensor, positions: &[usize]) -> Result<Projected, AttentionError> {
        let qkv = self.qkv.forward_token(x).at(Stage::Projection)?;
        self.split_and_rotate(&qkv, positions, false)
    }

    /// Splits projected queries, keys and values into heads and rotates queries and keys; with
    /// `keep_unrotated`, as two steps that keep the heads before RoPE, else in one pass
    /// ([`crate::nn::RotaryEmbedding::rotate_heads`], the same rotated heads bit for bit).
    fn split_and_rotate(
        &self,
        qkv: &QkvOutput,
        positions: &[usize],
        keep_unrotated: bool,
    ) -> Result<Projected, AttentionError> {
        let (h, g) = (self.config.query_heads, self.config.kv_heads);
        let split = crate::attention::heads::split_heads_of;
        let value_heads = split(qkv.value(), g, Some(Branch::Value))?; // [B,G,T,d_h]
        if !keep_unrotated {
            let (rotated_query_heads, rotated_key_heads) = self.rotate(qkv, positions)?;
            return Ok(Projected {
                query_heads: None,
                key_heads: None,
                value_heads,
                rotated_query_heads,
                rotated_key_heads,
            });
        }
        let query_heads = split(qkv.query(), h, Some(Branch::Query))?; // [B,H,T,d_h]
        let key_heads = split(qkv.key(), g, Some(Branch::Key))?; // [B,G,T,d_h]
        let rotated_query_heads = self.rope.rotate_at(&query_heads, positions).on(Branch::Query)?;
        let rotated_key_heads = self.rope.rotate_at(&key_heads, positions).on(Branch::Key)?;
        Ok(Projected {
            query_heads: Some(query_heads),
            key_heads: Some(key_heads),
            value_heads,
            rotated_query_heads,
            rotated_key_heads,
        })
    }

    /// Splits projected queries and keys into heads and rotates them, in one pass each
    /// ([`crate::nn::RotaryEmbedding::rotate_heads`]).
    fn rotate(&self, qkv: &QkvOutput, positions: &[usize]) -> Result<(TensorValue, TensorValue), AttentionError> {
        let (h, g) = (self.config.query_heads, self.config.kv_heads);
        let rotated_query_heads = self.rope.rotate_heads(qkv.query(), h, positions).on(Branch::Query)?;
        let rotated_key_heads = self.rope.rotate_heads(qkv.key(), g, positions).on(Branch::Key)?;
        Ok((rotated_query_heads, rotated_key_heads))
    }

    /// The dotted-name prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

/// Projected, split and rotated heads of one call.
pub(crate) struct Projected {
    pub(crate) query_heads: Option<TensorValue>,
    pub(crate) key_heads: Option<TensorValue>,
    pub(crate) value_heads: TensorValue,
    pub(crate) rotated_query_heads: TensorValue,
    pub(crate) rotated_key_heads: TensorValue,
}
