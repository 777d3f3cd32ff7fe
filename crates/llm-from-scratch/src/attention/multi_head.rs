//! [`MultiHeadAttention`]: `h` heads of causal attention side by side, each on its own slice of
//! the model width, with rotary positions on queries and keys.
//!
//! ```text
//! x [B,T,d] ─ W_Q,W_K,W_V ─▶ Q,K,V [B,T,d] ─ split ─▶ [B,h,T,d_h] ─ RoPE(Q,K) ─▶ causal attention
//!   ─▶ head outputs [B,h,T,d_h] ─ merge ─▶ [B,T,d] ─ W_O ─▶ output [B,T,d]
//! ```
//!
//! Heads never exchange information before `W_O`: head `i` reads only coordinates
//! `i·d_h .. (i+1)·d_h` of Q, K and V. `W_O` is where they mix.

use crate::attention::heads::split_heads_of;
use crate::attention::{
    AttentionError, Branch, Stage, causal_scaled_dot_product_self_attention, merge_heads,
};
use crate::autodiff::TensorValue;
use crate::error::Shape;
use crate::nn::{
    Linear, NamedParameter, NamedParameters, QkvProjections, RotaryEmbedding, SplitMix64,
};

/// Multi-head causal self-attention with rotary embedding and no biases.
///
/// Parameters: `W_Q, W_K, W_V, W_O`, each `[d_model, d_model]` (`y = x·W`), `4·d_model²` in all.
#[derive(Clone, Debug)]
pub struct MultiHeadAttention {
    prefix: String,
    heads: usize,
    qkv: QkvProjections,
    output: Linear,
    rope: RotaryEmbedding,
}

/// Every intermediate of one forward pass, for inspection and for reports.
#[derive(Clone, Debug)]
pub struct MultiHeadAttentionOutput {
    /// `Q` split into heads, before RoPE: `[B,h,T,d_h]`.
    pub query_heads: TensorValue,
    /// `K` split into heads, before RoPE: `[B,h,T,d_h]`.
    pub key_heads: TensorValue,
    /// `V` split into heads: `[B,h,T,d_h]`.
    pub value_heads: TensorValue,
    /// Query heads after RoPE.
    pub rotated_query_heads: TensorValue,
    /// Key heads after RoPE.
    pub rotated_key_heads: TensorValue,
    /// Scaled scores before masking, `[B,h,T,T]`.
    pub scores: TensorValue,
    /// Attention probabilities, `[B,h,T,T]`.
    pub weights: TensorValue,
    /// Per-head outputs `weights · V`, `[B,h,T,d_h]`.
    pub head_outputs: TensorValue,
    /// Heads concatenated back, `[B,T,d]`.
    pub merged: TensorValue,
    /// `merged · W_O`, `[B,T,d]`.
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
    if model_width % heads != 0 {
        return Err(AttentionError::HeadsDoNotDivide { model_width, heads });
    }
    let head_width = model_width / heads;
    if head_width % 2 != 0 {
        return Err(AttentionError::OddHeadWidth {
            head_width,
            model_width,
            heads,
        });
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
        let head_width = check_config(model_width, heads)?;
        let rope = RotaryEmbedding::new(head_width, max_positions, rope_base)
            .map_err(AttentionError::Rope)?;
        let mut trial = rng.clone();
        let qkv = QkvProjections::new(prefix, model_width, model_width, &mut trial)
            .map_err(|e| AttentionError::from_nn(Stage::Projection, e))?;
        let output = Linear::new(
            &format!("{prefix}.output"),
            model_width,
            model_width,
            false,
            &mut trial,
        )
        .map_err(|e| AttentionError::from_nn(Stage::OutputProjection, e))?;
        *rng = trial;
        Ok(Self {
            prefix: prefix.to_string(),
            heads,
            qkv,
            output,
            rope,
        })
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
        let head_width = check_config(d, heads)?;
        for (name, w) in [
            ("query weight", &wq),
            ("key weight", &wk),
            ("value weight", &wv),
            ("output weight", &wo),
        ] {
            if w.shape() != [d, d] {
                return Err(AttentionError::ParameterShape {
                    name,
                    expected: Shape(vec![d, d]),
                    actual: Shape::from(w.shape()),
                });
            }
        }
        let rope = RotaryEmbedding::new(head_width, max_positions, rope_base)
            .map_err(AttentionError::Rope)?;
        let prefix = "attention";
        let qkv = QkvProjections::from_parameters(prefix, [wq, wk, wv], None)
            .map_err(|e| AttentionError::from_nn(Stage::Projection, e))?;
        let output = Linear::from_parameters(wo, None)
            .map_err(|e| AttentionError::from_nn(Stage::OutputProjection, e))?
            .named(&format!("{prefix}.output"));
        Ok(Self {
            prefix: prefix.to_string(),
            heads,
            qkv,
            output,
            rope,
        })
    }

    /// Checks an input `[B,T,d]` and its positions `[offset, offset+T)` without touching the tape,
    /// in this order: rank 3, last width, at least one token, the whole position interval.
    ///
    /// # Errors
    /// [`AttentionError::InputRank`], [`AttentionError::InputWidth`],
    /// [`AttentionError::EmptySequence`], [`AttentionError::PositionOverflow`],
    /// [`AttentionError::PositionOutOfRange`].
    pub fn check_input(
        &self,
        shape: &[usize],
        position_offset: usize,
    ) -> Result<(), AttentionError> {
        if shape.len() != 3 {
            return Err(AttentionError::InputRank {
                shape: Shape::from(shape),
            });
        }
        if shape[2] != self.model_width() {
            return Err(AttentionError::InputWidth {
                expected: self.model_width(),
                shape: Shape::from(shape),
            });
        }
        if shape[1] == 0 {
            return Err(AttentionError::EmptySequence {
                shape: Shape::from(shape),
            });
        }
        self.rope
            .check_interval(position_offset, shape[1])
            .map_err(|e| AttentionError::from_rope(Branch::Query, e))
    }

    /// Runs the layer on `x [B,T,d]` whose first token sits at absolute position `position_offset`.
    ///
    /// # Errors
    /// The input errors of [`MultiHeadAttention::check_input`] (reported before anything is
    /// recorded), then [`AttentionError::Stage`] naming the stage and branch that failed.
    pub fn forward(
        &self,
        x: &TensorValue,
        position_offset: usize,
    ) -> Result<MultiHeadAttentionOutput, AttentionError> {
        self.check_input(x.shape(), position_offset)?;
        let qkv = self
            .qkv
            .forward(x)
            .map_err(|e| AttentionError::from_nn(Stage::Projection, e))?;
        // [B,T,d] → [B,h,T,d_h] for each branch
        let query_heads = split_heads_of(qkv.query(), self.heads, Some(Branch::Query))?;
        let key_heads = split_heads_of(qkv.key(), self.heads, Some(Branch::Key))?;
        let value_heads = split_heads_of(qkv.value(), self.heads, Some(Branch::Value))?;
        // positions enter through Q and K only; V carries content
        let rotated_query_heads = self
            .rope
            .rotate(&query_heads, position_offset)
            .map_err(|e| AttentionError::from_rope(Branch::Query, e))?;
        let rotated_key_heads = self
            .rope
            .rotate(&key_heads, position_offset)
            .map_err(|e| AttentionError::from_rope(Branch::Key, e))?;
        let attention = causal_scaled_dot_product_self_attention(
            &rotated_query_heads,
            &rotated_key_heads,
            &value_heads,
        )?;
        let head_outputs = attention.output().clone(); // [B,h,T,d_h]
        let merged = merge_heads(&head_outputs)?; // [B,T,d]
        let output = self
            .output
            .forward(&merged)
            .map_err(|e| AttentionError::from_nn(Stage::OutputProjection, e))?;
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
        self.model_width() / self.heads
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
        self.parameters().scalar_count()
    }

    /// The four weights under their dotted names, in the order Q, K, V, O.
    pub fn parameters(&self) -> NamedParameters {
        let mut list: Vec<NamedParameter> = self.qkv.parameters();
        list.extend(self.output.parameters());
        NamedParameters::try_new(list).unwrap_or_default()
    }

    /// The name prefix of the parameters.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}
