//! [`MultiHeadAttention`]: `h` heads of causal attention side by side, each on its own slice of
//! the model width, with rotary positions on queries and keys.
//!
//! Chapter 30 (`ch30-multi-head-attention`, the main demo) and chapter 31
//! (`ch31-pre-norm-residual`) use it.
//!
//! ```text
//! x [B,T,d] ─ W_Q,W_K,W_V ─▶ Q,K,V [B,T,d] ─ split ─▶ [B,h,T,d_h] ─ RoPE(Q,K) ─▶ causal attention
//!   ─▶ head outputs [B,h,T,d_h] ─ merge ─▶ [B,T,d] ─ W_O ─▶ output [B,T,d]
//! ```
//!
//! Heads never exchange information before `W_O`: head `i` reads only coordinates
//! `i·d_h .. (i+1)·d_h` of Q, K and V. `W_O` is where they mix.

use crate::attention::error::{AtStage, OnBranch};
use crate::attention::heads::split_heads_of;
use crate::attention::input::check_sequence;
use crate::attention::{
    AttentionConfig, AttentionError, Branch, GroupedQueryAttention, Stage, causal_scaled_dot_product_self_attention,
    merge_heads,
};
use crate::autodiff::TensorValue;
use crate::error::Shape;
use crate::nn::{Linear, NamedParameter, NamedParameters, QkvProjections, RotaryEmbedding, SplitMix64};

/// Multi-head causal self-attention with rotary embedding and no biases.
///
/// Parameters: `W_Q, W_K, W_V, W_O`, each `[d_model, d_model]` (`y = x·W`), `4·d_model²` in all.
/// Built from the chapter's parts only: the projections ([`QkvProjections`]), [`split_heads`]
/// and [`merge_heads`], [`RotaryEmbedding`], [`causal_scaled_dot_product_self_attention`] and the
/// output [`Linear`]. Chapter 32 generalises it: it is the `G = H` case of
/// [`GroupedQueryAttention`] ([`MultiHeadAttention::to_grouped`]).
///
/// [`split_heads`]: crate::attention::split_heads
///
/// # Shapes
/// `x [B, T, d] → output [B, T, d]`, with every intermediate in [`MultiHeadAttentionOutput`].
///
/// # Errors
/// [`MultiHeadAttention::new`]: sizes that do not split into heads of even width
/// ([`AttentionError::HeadsDoNotDivide`], [`AttentionError::OddHeadWidth`], …);
/// [`MultiHeadAttention::forward`]: an input that is not `[B, T, d]` or that runs past the RoPE
/// tables ([`AttentionError::InputWidth`], [`AttentionError::PositionOutOfRange`], …).
///
/// # Example
/// ```
/// use llm_from_scratch::attention::MultiHeadAttention;
/// use llm_from_scratch::{constant, nn::SplitMix64};
/// // d = 8 in 2 heads of width 4, RoPE over 16 positions
/// let mha = MultiHeadAttention::new("attn", 8, 2, 16, 10_000.0, &mut SplitMix64::new(0))?;
/// let out = mha.forward(&constant(&[1, 3, 8], &[0.1; 24])?, 0)?;
/// assert_eq!(out.weights.shape(), &[1, 2, 3, 3]);
/// assert_eq!(out.output.shape(), &[1, 3, 8]);
/// // causal: the first token sees only itself, so its row of weights is [1, 0, 0]
/// assert_eq!(&out.weights.value()?.as_slice()[..3], &[1.0, 0.0, 0.0]);
/// assert!(mha.forward(&constant(&[1, 3, 6], &[0.1; 18])?, 0).is_err()); // width 6, not 8
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct MultiHeadAttention {
    /// The dotted-name prefix of the parameters.
    prefix: String,
    /// `h`.
    heads: usize,
    /// `W_Q, W_K, W_V`, each `[d, d]`.
    qkv: QkvProjections,
    /// `W_O [d, d]`.
    output: Linear,
    /// The rotation tables for heads of width `d_h`.
    rope: RotaryEmbedding,
    /// The four weights under their names, checked once when the layer is built (each its own
    /// leaf), so that listing them later cannot fail.
    parameters: NamedParameters,
}

/// Every intermediate of one forward pass, for inspection and for reports.
///
/// # Shapes
/// Head tensors `[B,h,T,d_h]`, scores and weights `[B,h,T,T]`, `merged` and `output` `[B,T,d]`.
#[derive(Clone, Debug)]
pub struct MultiHeadAttentionOutput {
    /// `Q` split into heads, before RoPE.
    pub query_heads: TensorValue,
    /// `K` split into heads, before RoPE.
    pub key_heads: TensorValue,
    /// `V` split into heads.
    pub value_heads: TensorValue,
    /// Query heads after RoPE.
    pub rotated_query_heads: TensorValue,
    /// Key heads after RoPE.
    pub rotated_key_heads: TensorValue,
    /// Scaled scores before masking.
    pub scores: TensorValue,
    /// Attention probabilities.
    pub weights: TensorValue,
    /// Per-head outputs `weights · V`.
    pub head_outputs: TensorValue,
    /// Heads concatenated back.
    pub merged: TensorValue,
    /// `merged · W_O`.
    pub output: TensorValue,
}

/// Checks the configuration rules in order: `d > 0`, `h > 0`, `h | d`, then RoPE's rule for `d/h`.
fn check_config(model_width: usize, heads: usize) -> Result<usize, AttentionError> {
    if model_width == 0 {
        return Err(AttentionError::ZeroModelWidth);
    }
    if heads == 0 {
        return Err(AttentionError::ZeroHeads);
    }
    if !model_width.is_multiple_of(heads) {
        return Err(AttentionError::HeadsDoNotDivide { model_width, heads });
    }
    let head_width = model_width / heads;
    AttentionError::check_head_width(head_width, model_width, heads)?;
    Ok(head_width)
}

impl MultiHeadAttention {
    /// A layer with random weights in `±1/√d` drawn from a trial copy of `rng` (committed only on
    /// success). Parameter names: `prefix.query.weight`, `prefix.key.weight`,
    /// `prefix.value.weight`, `prefix.output.weight`.
    ///
    /// # Errors
    /// In order: [`AttentionError::ZeroModelWidth`], [`AttentionError::ZeroHeads`],
    /// [`AttentionError::HeadsDoNotDivide`], [`AttentionError::OddHeadWidth`], then
    /// [`AttentionError::Rope`] for a zero capacity or a bad base, then an
    /// [`AttentionError::Stage`] error for weights too large to allocate.
    pub fn new(
        prefix: &str,
        model_width: usize,
        heads: usize,
        max_positions: usize,
        rope_base: f64,
        rng: &mut SplitMix64,
    ) -> Result<Self, AttentionError> {
        let head_width = check_config(model_width, heads)?;
        // the rules only: the tables are built once the weights are known to fit in memory
        RotaryEmbedding::check_settings(head_width, max_positions, rope_base).map_err(AttentionError::Rope)?;
        let d = model_width;
        let mut trial = rng.clone();
        let qkv = QkvProjections::new(prefix, d, d, &mut trial).at(Stage::Projection)?;
        let output = Linear::new(&format!("{prefix}.output"), d, d, false, &mut trial).at(Stage::OutputProjection)?;
        let layer = Self::from_parts(prefix, heads, qkv, output, max_positions, rope_base)?;
        *rng = trial;
        Ok(layer)
    }

    /// A layer from existing weights, each `[d, d]`.
    ///
    /// # Errors
    /// The configuration errors of [`MultiHeadAttention::new`] (with `d` read from `wq`), then
    /// [`AttentionError::ParameterShape`] naming the first weight that is not `[d, d]`, then
    /// [`AttentionError::Rope`], then [`AttentionError::Layer`] if one leaf is passed as two weights
    /// (each must be its own leaf, so that its update is applied once).
    pub fn from_parameters(
        wq: TensorValue,
        wk: TensorValue,
        wv: TensorValue,
        wo: TensorValue,
        heads: usize,
        max_positions: usize,
        rope_base: f64,
    ) -> Result<Self, AttentionError> {
        let d = wq.shape().first().copied().unwrap_or(0);
        check_config(d, heads)?;
        for (name, w) in [("query weight", &wq), ("key weight", &wk), ("value weight", &wv), ("output weight", &wo)] {
            if w.shape() != [d, d] {
                return Err(AttentionError::ParameterShape {
                    name,
                    expected: Shape(vec![d, d]),
                    actual: Shape::from(w.shape()),
                });
            }
        }
        let prefix = "attention";
        let qkv = QkvProjections::from_parameters(prefix, [wq, wk, wv], None).at(Stage::Projection)?;
        let output = Linear::from_parameters(wo, None).at(Stage::OutputProjection)?.named(&format!("{prefix}.output"));
        Self::from_parts(prefix, heads, qkv, output, max_positions, rope_base)
    }

    /// The layer from projections whose shapes were checked: builds RoPE and the parameter list.
    fn from_parts(
        prefix: &str,
        heads: usize,
        qkv: QkvProjections,
        output: Linear,
        max_positions: usize,
        rope_base: f64,
    ) -> Result<Self, AttentionError> {
        let head_width = qkv.model_width() / heads;
        let rope = RotaryEmbedding::new(head_width, max_positions, rope_base).map_err(AttentionError::Rope)?;
        let list: Vec<NamedParameter> = qkv.parameters().into_iter().chain(output.parameters()).collect();
        let parameters = NamedParameters::try_new(list)
            .map_err(|source| AttentionError::Layer { stage: Stage::Projection, source })?;
        Ok(Self { prefix: prefix.to_string(), heads, qkv, output, rope, parameters })
    }

    /// Checks an input `[B,T,d]` and its positions `[offset, offset+T)` without touching the tape,
    /// in this order: rank 3, last width, at least one token, the whole position interval.
    ///
    /// # Errors
    /// [`AttentionError::InputRank`], [`AttentionError::InputWidth`],
    /// [`AttentionError::EmptySequence`], [`AttentionError::PositionOverflow`],
    /// [`AttentionError::PositionOutOfRange`].
    pub fn check_input(&self, shape: &[usize], position_offset: usize) -> Result<(), AttentionError> {
        check_sequence(shape, self.model_width())?;
        self.rope.check_interval(position_offset, shape[1]).on(Branch::Query)
    }

    /// Runs the layer on `x [B,T,d]` whose first token sits at absolute position `position_offset`.
    ///
    /// # Errors
    /// The input errors of [`MultiHeadAttention::check_input`] (reported before anything is
    /// recorded), then [`AttentionError::Stage`] naming the stage and branch that failed.
    pub fn forward(&self, x: &TensorValue, position_offset: usize) -> Result<MultiHeadAttentionOutput, AttentionError> {
        self.check_input(x.shape(), position_offset)?;
        let h = self.heads;
        // 1. project: Q, K, V [B,T,d]
        let qkv = self.qkv.forward(x).at(Stage::Projection)?;
        // 2. cut the width into h heads: [B,T,d] → [B,h,T,d_h]
        let query_heads = split_heads_of(qkv.query(), h, Some(Branch::Query))?;
        let key_heads = split_heads_of(qkv.key(), h, Some(Branch::Key))?;
        let value_heads = split_heads_of(qkv.value(), h, Some(Branch::Value))?;
        // 3. RoPE on Q and K (they carry positions), not on V (it carries content)
        let rotated_query_heads = self.rope.rotate(&query_heads, position_offset).on(Branch::Query)?;
        let rotated_key_heads = self.rope.rotate(&key_heads, position_offset).on(Branch::Key)?;
        // 4. causal attention in every head at once (the head axis is a batch axis)
        let attention =
            causal_scaled_dot_product_self_attention(&rotated_query_heads, &rotated_key_heads, &value_heads)?;
        let head_outputs = attention.output().clone(); // [B,h,T,d_h]
        // 5. heads side by side again, then W_O mixes them
        let merged = merge_heads(&head_outputs)?; // [B,T,d]
        let output = self.output.forward(&merged).at(Stage::OutputProjection)?;
        Ok(MultiHeadAttentionOutput {
            query_heads,
            key_heads,
            value_heads,
            rotated_query_heads,
            rotated_key_heads,
            scores: attention.scores().clone(),
            weights: attention.weights().clone(),
            head_outputs,
            merged,
            output,
        })
    }

    /// `d_model`.
    pub fn model_width(&self) -> usize {
        self.qkv.model_width()
    }

    /// `h`.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// `d_h = d_model / h`.
    pub fn head_width(&self) -> usize {
        self.rope.head_width()
    }

    /// The rotary tables.
    pub fn rope(&self) -> &RotaryEmbedding {
        &self.rope
    }

    /// `[W_Q, W_K, W_V]`.
    pub fn qkv_weights(&self) -> &[TensorValue; 3] {
        self.qkv.weights()
    }

    /// `W_O`.
    pub fn output_weight(&self) -> &TensorValue {
        self.output.weight()
    }

    /// `4·d_model²`.
    pub fn parameter_count(&self) -> usize {
        self.parameters.scalar_count()
    }

    /// The four weights under their dotted names, in the order Q, K, V, O.
    pub fn parameters(&self) -> NamedParameters {
        self.parameters.clone()
    }

    /// The same layer as chapter 32's grouped-query layer with `G = H` key/value heads, sharing
    /// these weight leaves (so gradients through either reach the same parameters).
    ///
    /// # Errors
    /// None for a layer built by [`MultiHeadAttention::new`] or
    /// [`MultiHeadAttention::from_parameters`], whose settings and shapes the grouped layer
    /// checks again ([`GroupedQueryAttention::from_parts`]).
    pub fn to_grouped(&self) -> Result<GroupedQueryAttention, AttentionError> {
        let config = AttentionConfig::multi_head(self.model_width(), self.heads)
            .with_rope(self.rope.max_positions(), self.rope.base());
        GroupedQueryAttention::from_parts(&self.prefix, config, self.qkv.clone(), self.output.clone())
    }
}
