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
use crate::attention::input::check_sequence;
use crate::attention::{
    AttentionConfig, AttentionError, Branch, GroupedQueryAttention, Stage, causal_scaled_dot_product_self_attention,
    merge_heads,
};
use crate::autodiff::TensorValue;
use crate::error::Shape;
use crate::nn::{Linear, NamedParameters, QkvProjections, RotaryEmbedding, SplitMix64};

/// Multi-head causal self-attention with rotary embedding and no biases.
///
/// Parameters: `W_Q, W_K, W_V, W_O`, each `[d_model, d_model]` (`y = x·W`), `4·d_model²` in all.
/// It is the `G = H`, `d_h = d_model / h` case of [`GroupedQueryAttention`], whose projections it
/// uses; its forward keeps the chapter's explicit path (causal attention per head on
/// `[B, h, T, d_h]`), which the tests tie to the grouped path.
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
    inner: GroupedQueryAttention,
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

/// Checks the configuration rules in order: `d > 0`, `h > 0`, `h | d`, `d/h` even.
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
    if !head_width.is_multiple_of(2) {
        return Err(AttentionError::OddHeadWidth { head_width, model_width, heads });
    }
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
    /// [`AttentionError::Rope`] for a zero capacity or a bad base.
    pub fn new(
        prefix: &str,
        model_width: usize,
        heads: usize,
        max_positions: usize,
        rope_base: f64,
        rng: &mut SplitMix64,
    ) -> Result<Self, AttentionError> {
        check_config(model_width, heads)?;
        let config = AttentionConfig::multi_head(model_width, heads).with_rope(max_positions, rope_base);
        Ok(Self { inner: GroupedQueryAttention::new(prefix, config, rng)? })
    }

    /// A layer from existing weights, each `[d, d]`.
    ///
    /// # Errors
    /// The configuration errors of [`MultiHeadAttention::new`] (with `d` read from `wq`), then
    /// [`AttentionError::ParameterShape`] naming the first weight that is not `[d, d]`.
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
        let config = AttentionConfig::multi_head(d, heads).with_rope(max_positions, rope_base);
        let prefix = "attention";
        let qkv = QkvProjections::from_parameters(prefix, [wq, wk, wv], None).at(Stage::Projection)?;
        let output = Linear::from_parameters(wo, None).at(Stage::OutputProjection)?.named(&format!("{prefix}.output"));
        Ok(Self { inner: GroupedQueryAttention::from_parts(prefix, config, qkv, output)? })
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
        self.rope().check_interval(position_offset, shape[1]).on(Branch::Query)
    }

    /// Runs the layer on `x [B,T,d]` whose first token sits at absolute position `position_offset`.
    ///
    /// # Errors
    /// The input errors of [`MultiHeadAttention::check_input`] (reported before anything is
    /// recorded), then [`AttentionError::Stage`] naming the stage and branch that failed.
    pub fn forward(&self, x: &TensorValue, position_offset: usize) -> Result<MultiHeadAttentionOutput, AttentionError> {
        self.check_input(x.shape(), position_offset)?;
        let t = x.shape()[1];
        let positions: Vec<usize> = (position_offset..position_offset + t).collect();
        // projections, split into [B,h,T,d_h], RoPE on Q and K (positions), not on V (content)
        let projected = self.inner.project(x, &positions)?;
        let attention = causal_scaled_dot_product_self_attention(
            &projected.rotated_query_heads,
            &projected.rotated_key_heads,
            &projected.value_heads,
        )?;
        let head_outputs = attention.output().clone(); // [B,h,T,d_h]
        let merged = merge_heads(&head_outputs)?; // [B,T,d]
        let output = self.inner.output_projection().forward(&merged).at(Stage::OutputProjection)?;
        Ok(MultiHeadAttentionOutput {
            query_heads: projected.query_heads,
            key_heads: projected.key_heads,
            value_heads: projected.value_heads,
            rotated_query_heads: projected.rotated_query_heads,
            rotated_key_heads: projected.rotated_key_heads,
            scores: attention.scores().clone(),
            weights: attention.weights().clone(),
            head_outputs,
            merged,
            output,
        })
    }

    /// `d_model`.
    pub fn model_width(&self) -> usize {
        self.inner.config().model_width
    }

    /// `h`.
    pub fn heads(&self) -> usize {
        self.inner.config().query_heads
    }

    /// `d_h = d_model / h`.
    pub fn head_width(&self) -> usize {
        self.inner.config().head_width
    }

    /// The rotary tables.
    pub fn rope(&self) -> &RotaryEmbedding {
        self.inner.rope()
    }

    /// `[W_Q, W_K, W_V]`.
    pub fn qkv_weights(&self) -> &[TensorValue; 3] {
        self.inner.qkv().weights()
    }

    /// `W_O`.
    pub fn output_weight(&self) -> &TensorValue {
        self.inner.output_projection().weight()
    }

    /// `4·d_model²`.
    pub fn parameter_count(&self) -> usize {
        self.inner.parameter_count()
    }

    /// The four weights under their dotted names, in the order Q, K, V, O.
    pub fn parameters(&self) -> NamedParameters {
        self.inner.parameters()
    }

    /// The same layer as the general grouped-query layer (`G = H`).
    pub fn as_grouped(&self) -> &GroupedQueryAttention {
        &self.inner
    }
}
