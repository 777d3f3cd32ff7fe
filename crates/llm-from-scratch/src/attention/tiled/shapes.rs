//! What every tiled kernel shares: the block sizes, the shapes of one call and the slices of
//! one lane that a kernel reads.

use crate::attention::{AttentionError, Visibility};
use crate::autodiff::TensorValue;
use crate::error::Shape;

/// Query rows and key rows per block for sequences shorter than [`LONG_SEQUENCE`] keys.
pub const SHORT_BLOCK: usize = 64;
/// Query rows and key rows per block from [`LONG_SEQUENCE`] keys on.
pub const LONG_BLOCK: usize = 128;
/// Key count from which blocks are [`LONG_BLOCK`] rows.
pub const LONG_SEQUENCE: usize = 2048;

/// Query rows and key rows per block for attention over `t_k` keys (the strip kernel's forward
/// gives each task four such query blocks and walks the keys in its own blocks of 60).
///
/// A causal block on the diagonal is computed whole though half of it is hidden, so short
/// sequences, where the diagonal is a large share of the blocks, take smaller blocks; long ones
/// take larger blocks, whose matrix products run faster (`docs/performance.md` has the timings).
/// The size depends only on the shapes, so results never depend on the machine load or the thread
/// count.
pub fn block_size(t_k: usize) -> usize {
    if t_k >= LONG_SEQUENCE { LONG_BLOCK } else { SHORT_BLOCK }
}

/// Shapes of one call: `q [B,H,T_q,d]`, `k, v [B,G,T_k,d]`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    pub(super) b: usize,
    pub(super) h: usize,
    pub(super) g: usize,
    pub(super) t_q: usize,
    pub(super) t_k: usize,
    pub(super) d: usize,
    /// Query rows and key rows per block ([`block_size`]).
    pub(super) block: usize,
}

impl Dims {
    pub(super) fn group(&self) -> usize {
        self.h / self.g
    }
    pub(super) fn q_lane(&self, b: usize, h: usize) -> usize {
        (b * self.h + h) * self.t_q * self.d
    }
    pub(super) fn kv_lane(&self, b: usize, h: usize) -> usize {
        // repeat-interleave: query head h reads kv head ⌊h / (H/G)⌋
        (b * self.g + h / self.group()) * self.t_k * self.d
    }
}

/// Checks the shapes of one call (and of its sinks and padding) and returns them.
pub(super) fn check(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    vis: &Visibility,
) -> Result<Dims, AttentionError> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let fail = |reason| AttentionError::qkv_shapes(q, k, v, reason);
    if qs.len() != 4 || ks.len() != 4 || ks != vs {
        return Err(fail("tiled attention needs q [B,H,T_q,d] and k = v shapes [B,G,T_k,d]"));
    }
    let dims = Dims { b: qs[0], h: qs[1], g: ks[1], t_q: qs[2], t_k: ks[2], d: qs[3], block: block_size(ks[2]) };
    if ks[0] != dims.b || ks[3] != dims.d || dims.g == 0 || !dims.h.is_multiple_of(dims.g) {
        return Err(fail("batch and width must agree, and H must be a multiple of G"));
    }
    if dims.d == 0 {
        return Err(fail("the head width must be positive"));
    }
    if vis.query_offset.checked_add(dims.t_q).is_none() {
        return Err(AttentionError::PositionOverflow { offset: vis.query_offset, tokens: dims.t_q });
    }
    if let Some(s) = sinks
        && s.shape() != [dims.h]
    {
        return Err(AttentionError::ParameterShape {
            name: "sink logits",
            expected: Shape(vec![dims.h]),
            actual: Shape::from(s.shape()),
        });
    }
    if let Some(p) = &vis.key_padding
        && p.len() != dims.b * dims.t_k
    {
        return Err(AttentionError::PaddingShape {
            what: "key padding",
            expected: Shape(vec![dims.b, dims.t_k]),
            actual: Shape(vec![p.len()]),
        });
    }
    Ok(dims)
}

/// One (batch, query head) lane's queries `[T_q, d]`, the kv lane `[T_k, d]` they read (of batch
/// row `b`) and the head's sink logit: what every forward kernel reads of one lane.
#[derive(Clone, Copy)]
pub(super) struct LaneInputs<'a> {
    pub(super) q: &'a [f64],
    pub(super) k: &'a [f64],
    pub(super) v: &'a [f64],
    pub(super) sink: Option<f64>,
    pub(super) b: usize,
}

/// What the backward reads: `q`, `k`, `v`, the upstream `dO` (`g`), the saved `log Σ e^s` and
/// `D_i = dO_i · O_i` — of the whole call, or the slices of one (batch, query head) lane.
#[derive(Clone, Copy)]
pub(super) struct Operands<'a> {
    pub(super) q: &'a [f64],
    pub(super) k: &'a [f64],
    pub(super) v: &'a [f64],
    pub(super) g: &'a [f64],
    pub(super) lse: &'a [f64],
    pub(super) delta: &'a [f64],
}
