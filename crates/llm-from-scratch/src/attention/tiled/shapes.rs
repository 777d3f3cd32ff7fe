//! The checks before a tiled call, and the slices of one lane the plain and block paths read.
//! The block sizes and the shapes of a call are plain data of the kernels crate
//! ([`llm_kernels::strips`]), which the strip kernel reads as given.

pub use llm_kernels::strips::{Dims, LONG_BLOCK, LONG_SEQUENCE, Operands, SHORT_BLOCK, block_size};

use crate::attention::{AttentionError, Visibility};
use crate::autodiff::TensorValue;
use crate::error::Shape;

/// Checks the shapes of one call (and of its sinks and padding) and returns them.
pub(super) fn check(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    vis: &Visibility,
) -> Result<Dims, AttentionError> {
    let same = |ks: &[usize], vs: &[usize]| ks == vs;
    check_with(q, k, v, (sinks, vis), (same, "tiled attention needs q [B,H,T_q,d] and k = v shapes [B,G,T_k,d]"))
}

/// [`check`] for values in merged rows, `v [B, T_k, G·d]` (`tiled_attention_merged`).
pub(super) fn check_merged(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    vis: &Visibility,
) -> Result<Dims, AttentionError> {
    let merged = |ks: &[usize], vs: &[usize]| {
        vs.len() == 3 && vs[..2] == [ks[0], ks[2]] && Some(vs[2]) == ks[1].checked_mul(ks[3])
    };
    let reason = "merged tiled attention needs q [B,H,T_q,d], k [B,G,T_k,d] and v [B,T_k,G·d]";
    check_with(q, k, v, (sinks, vis), (merged, reason))
}

/// Whether the values' shape (second) agrees with the keys' (first).
type ValuesAgree = fn(&[usize], &[usize]) -> bool;

/// The checks of [`check`] and [`check_merged`], given whether the values' shape agrees with the
/// keys' (`k` of rank 4) and the error's reason where it does not.
fn check_with(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    (sinks, vis): (Option<&TensorValue>, &Visibility),
    (values_agree, reason): (ValuesAgree, &'static str),
) -> Result<Dims, AttentionError> {
    let (qs, ks) = (q.shape(), k.shape());
    let fail = |reason| AttentionError::qkv_shapes(q, k, v, reason);
    if qs.len() != 4 || ks.len() != 4 || !values_agree(ks, v.shape()) {
        return Err(fail(reason));
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
