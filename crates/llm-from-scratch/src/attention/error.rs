//! Errors of the attention layers: configuration, input, and which stage of a forward failed.

use thiserror::Error;

use crate::autodiff::TensorValue;
use crate::error::{Shape, TensorAutodiffError};
use crate::nn::{NnError, RopeError, RotaryEmbedding};

/// The projection branch a stage error belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Branch {
    /// The query branch.
    Query,
    /// The key branch.
    Key,
    /// The value branch.
    Value,
}

impl std::fmt::Display for Branch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Branch::Query => "query",
            Branch::Key => "key",
            Branch::Value => "value",
        })
    }
}

/// The stage of an attention forward, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The packed Q/K/V projection.
    Projection,
    /// `[B,T,h·d_h] → [B,h,T,d_h]` of one branch (`None` when called on its own).
    SplitHeads(Option<Branch>),
    /// Rotary embedding of the query or key heads.
    Rotary(Branch),
    /// `q·kᵀ/√d_h`.
    Scores,
    /// Masking and softmax over keys.
    Softmax,
    /// `weights · v`.
    WeightedValues,
    /// `[B,h,T,d_h] → [B,T,h·d_h]`.
    MergeHeads,
    /// The output projection `W_O`.
    OutputProjection,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stage::Projection => f.write_str("qkv projection"),
            Stage::SplitHeads(Some(b)) => write!(f, "split heads ({b})"),
            Stage::SplitHeads(None) => f.write_str("split heads"),
            Stage::Rotary(b) => write!(f, "rotary embedding ({b})"),
            Stage::Scores => f.write_str("scores"),
            Stage::Softmax => f.write_str("softmax"),
            Stage::WeightedValues => f.write_str("weighted values"),
            Stage::MergeHeads => f.write_str("merge heads"),
            Stage::OutputProjection => f.write_str("output projection"),
        }
    }
}

/// Errors of the attention functions and layers.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AttentionError {
    /// `d_model = 0`.
    #[error("attention config: model width must be positive, got 0")]
    ZeroModelWidth,
    /// `heads = 0`.
    #[error("attention config: number of heads must be positive, got 0")]
    ZeroHeads,
    /// `d_model` is not a multiple of the number of heads.
    #[error("attention config: model width {model_width} is not divisible by {heads} heads")]
    HeadsDoNotDivide {
        /// `d_model`.
        model_width: usize,
        /// `h`.
        heads: usize,
    },
    /// RoPE rotates coordinate pairs, so `d_h` must be even.
    #[error(
        "attention config: head width {head_width} (model width {model_width}, {heads} heads) is odd; rotary embedding needs pairs"
    )]
    OddHeadWidth {
        /// `d_h`.
        head_width: usize,
        /// `d_model`.
        model_width: usize,
        /// `h`.
        heads: usize,
    },
    /// `G = 0` key/value heads.
    #[error("attention config: number of key/value heads must be positive, got 0")]
    ZeroKvHeads,
    /// `H` query heads cannot be split into groups over `G` key/value heads.
    #[error("attention config: {query_heads} query heads are not divisible by {kv_heads} key/value heads")]
    GroupsDoNotDivide {
        /// `H`.
        query_heads: usize,
        /// `G`.
        kv_heads: usize,
    },
    /// A sliding window that lets no key through.
    #[error("attention config: window {window} is meaningless ({reason})")]
    InvalidWindow {
        /// The window as given, e.g. `exclusive(0)`.
        window: String,
        /// Why it cannot be used.
        reason: &'static str,
    },
    /// A dropout probability outside `0 ≤ p < 1`.
    #[error("attention config: {which} dropout p = {p} must satisfy 0 ≤ p < 1")]
    InvalidDropout {
        /// `attention` or `output`.
        which: &'static str,
        /// The probability given.
        p: f64,
    },
    /// A key-padding mask that is not `[B, T]`, or explicit positions of the wrong count.
    #[error("attention input: {what} has shape {actual} but {expected} was needed")]
    PaddingShape {
        /// `key padding` or `positions`.
        what: &'static str,
        /// The shape that fits.
        expected: Shape,
        /// The shape given.
        actual: Shape,
    },
    /// A KV cache made for another layer (or batch).
    #[error("attention cache: {what} is {actual} in the cache but {expected} in this call")]
    CacheMismatch {
        /// `key/value heads`, `head width`, `batch`, `window`, `capacity`.
        what: &'static str,
        /// What the layer or input needs.
        expected: usize,
        /// What the cache holds.
        actual: usize,
    },
    /// A size that must be positive is 0.
    #[error("attention config: {what} must be positive, got 0")]
    ZeroSize {
        /// Which size.
        what: &'static str,
    },
    /// The decoupled RoPE branch of latent attention rotates pairs, so `d_r` must be even.
    #[error("attention config: rope width {rope_width} is odd; rotary embedding needs pairs")]
    OddRopeWidth {
        /// `d_r`.
        rope_width: usize,
    },
    /// A combination of settings the layer does not implement.
    #[error("attention config: {feature} is not supported ({reason})")]
    Unsupported {
        /// What was asked for.
        feature: &'static str,
        /// Why not.
        reason: &'static str,
    },
    /// Another configuration value is unusable (capacity, RoPE base, …).
    #[error("attention config: {0}")]
    Rope(RopeError),
    /// A parameter does not have the shape the configuration needs.
    #[error("attention parameters: {name} has shape {actual} but {expected} was needed")]
    ParameterShape {
        /// Which parameter.
        name: &'static str,
        /// The shape that fits.
        expected: Shape,
        /// The shape given.
        actual: Shape,
    },
    /// The parts of a layer carry biases where the configuration has none, or the reverse.
    #[error("attention parameters: the configuration says bias = {config} but the {part} has {found}")]
    BiasMismatch {
        /// `config.bias`.
        config: bool,
        /// `query/key/value projections` or `output projection`.
        part: &'static str,
        /// `biases` or `no biases`.
        found: &'static str,
    },
    /// An online-softmax state got scores and value rows that do not pair up, or two states of
    /// different widths.
    #[error("online softmax: {what}: {actual} where {expected} was expected")]
    OnlineSoftmaxShape {
        /// `value rows`, `value row width` or `merged state width`.
        what: &'static str,
        /// The count that fits (number of scores, or the width of the first row / this state).
        expected: usize,
        /// The count given.
        actual: usize,
    },
    /// The input is not rank 3 `[B, T, d_model]`.
    #[error("attention input: expected rank 3 [B, T, d_model] but got shape {shape}")]
    InputRank {
        /// The input's shape.
        shape: Shape,
    },
    /// The input's last axis is not `d_model`.
    #[error("attention input: last axis of {shape} must be the model width {expected}")]
    InputWidth {
        /// `d_model`.
        expected: usize,
        /// The input's shape.
        shape: Shape,
    },
    /// `T = 0`: there is no token to attend from.
    #[error("attention input: {shape} has no tokens (T = 0)")]
    EmptySequence {
        /// The input's shape.
        shape: Shape,
    },
    /// `offset + T` overflows.
    #[error("attention positions: offset {offset} + {tokens} tokens overflows")]
    PositionOverflow {
        /// First position.
        offset: usize,
        /// Tokens.
        tokens: usize,
    },
    /// The positions `[offset, offset+T)` run past the RoPE capacity.
    #[error("attention positions: {start}..{end} exceed capacity {capacity}")]
    PositionOutOfRange {
        /// First position.
        start: usize,
        /// One past the last.
        end: usize,
        /// `max_positions`.
        capacity: usize,
    },
    /// Query, key and value do not fit together.
    #[error("attention: query {query}, key {key}, value {value} do not fit ({reason})")]
    QkvShapes {
        /// Query shape.
        query: Shape,
        /// Key shape.
        key: Shape,
        /// Value shape.
        value: Shape,
        /// What was required.
        reason: &'static str,
    },
    /// Splitting or merging heads got a shape it cannot rearrange.
    #[error("{op}: shape {shape} cannot be rearranged into {heads} heads")]
    HeadShape {
        /// `split_heads` or `merge_heads`.
        op: &'static str,
        /// The input's shape.
        shape: Shape,
        /// The number of heads requested.
        heads: usize,
    },
    /// A stage of the forward failed; `source` says how.
    #[error("attention {stage}: {source}")]
    Stage {
        /// Where it failed.
        stage: Stage,
        /// The failing operation's error.
        #[source]
        source: TensorAutodiffError,
    },
    /// A tensor error outside any stage of a layer (e.g. from [`crate::gradcheck`] around one).
    #[error("attention: {0}")]
    Tensor(#[from] TensorAutodiffError),
    /// A layer used by a stage (a projection) rejected its input.
    #[error("attention {stage}: {source}")]
    Layer {
        /// Where it failed.
        stage: Stage,
        /// The layer's error.
        #[source]
        source: NnError,
    },
}

impl AttentionError {
    /// [`AttentionError::QkvShapes`] for these three operands and what they failed.
    pub(crate) fn qkv_shapes(q: &TensorValue, k: &TensorValue, v: &TensorValue, reason: &'static str) -> Self {
        AttentionError::QkvShapes {
            query: Shape::from(q.shape()),
            key: Shape::from(k.shape()),
            value: Shape::from(v.shape()),
            reason,
        }
    }
    /// Wraps a tensor error with the stage it happened in.
    pub(crate) fn at(stage: Stage) -> impl FnOnce(TensorAutodiffError) -> AttentionError {
        move |source| AttentionError::Stage { stage, source }
    }

    /// Translates a layer error from the projection stage.
    pub(crate) fn from_nn(stage: Stage, err: NnError) -> AttentionError {
        match err {
            NnError::Tensor { source, .. } => AttentionError::Stage { stage, source },
            other => AttentionError::Layer { stage, source: other },
        }
    }

    /// RoPE's head-width rule ([`RotaryEmbedding::check_head_width`]) for `heads` heads of width
    /// `head_width` over `model_width`: an odd width is reported with the sizes it came from.
    pub(crate) fn check_head_width(head_width: usize, model_width: usize, heads: usize) -> Result<(), AttentionError> {
        RotaryEmbedding::check_head_width(head_width).map_err(|e| match e {
            RopeError::OddHeadWidth { head_width } => AttentionError::OddHeadWidth { head_width, model_width, heads },
            other => AttentionError::Rope(other),
        })
    }

    /// Translates a rotary error of `branch`: tensor failures become stage errors.
    pub(crate) fn from_rope(branch: Branch, err: RopeError) -> AttentionError {
        match err {
            RopeError::Tensor(source) => AttentionError::Stage { stage: Stage::Rotary(branch), source },
            RopeError::PositionOverflow { offset, tokens } => AttentionError::PositionOverflow { offset, tokens },
            RopeError::PositionOutOfRange { start, end, capacity } => {
                AttentionError::PositionOutOfRange { start, end, capacity }
            }
            other => AttentionError::Rope(other),
        }
    }
}

/// `.at(stage)` on a result of the tape or of a layer: its error, named by the attention stage
/// it came from (instead of `map_err(|e| AttentionError::from_…(Stage::…, e))` at every call).
pub(crate) trait AtStage<T> {
    /// The result, its error translated into an [`AttentionError`] of `stage`.
    fn at(self, stage: Stage) -> Result<T, AttentionError>;
}

impl<T> AtStage<T> for Result<T, TensorAutodiffError> {
    fn at(self, stage: Stage) -> Result<T, AttentionError> {
        self.map_err(AttentionError::at(stage))
    }
}

impl<T> AtStage<T> for Result<T, NnError> {
    fn at(self, stage: Stage) -> Result<T, AttentionError> {
        self.map_err(|e| AttentionError::from_nn(stage, e))
    }
}

/// `.on(branch)` on a result of RoPE: its error, named by the branch (query or key) it rotated.
pub(crate) trait OnBranch<T> {
    /// The result, its error translated into an [`AttentionError`] of `branch`.
    fn on(self, branch: Branch) -> Result<T, AttentionError>;
}

impl<T> OnBranch<T> for Result<T, RopeError> {
    fn on(self, branch: Branch) -> Result<T, AttentionError> {
        self.map_err(|e| AttentionError::from_rope(branch, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_errors_outside_a_stage_convert() {
        let err: AttentionError = TensorAutodiffError::Gradcheck { detail: "no inputs to check".into() }.into();
        assert_eq!(err.to_string(), "attention: gradcheck: no inputs to check");
    }

    #[test]
    fn layer_and_rope_errors_are_translated_with_their_stage() {
        let layer = NnError::InputShape {
            module: "qkv attention".into(),
            expected: "[..., T, 4]".into(),
            actual: Shape(vec![3]),
        };
        let err = AttentionError::from_nn(Stage::Projection, layer);
        assert!(matches!(err, AttentionError::Layer { stage: Stage::Projection, .. }));
        assert_eq!(
            err.to_string(),
            "attention qkv projection: qkv attention: input of shape [3] does not fit (expected [..., T, 4])"
        );
        let rope = AttentionError::from_rope(Branch::Key, RopeError::OddHeadWidth { head_width: 3 });
        assert_eq!(rope.to_string(), "attention config: rope: head width must be even to form coordinate pairs, got 3");
        let released = TensorAutodiffError::Released { op: "rope", node: 7, created_by: "transpose" };
        assert!(matches!(
            AttentionError::from_rope(Branch::Key, RopeError::Tensor(released)),
            AttentionError::Stage { stage: Stage::Rotary(Branch::Key), .. }
        ));
    }
}
