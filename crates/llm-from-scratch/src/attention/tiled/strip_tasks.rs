//! The strip kernel's tasks over a call's lanes, for both layouts of tiled attention: each
//! lane's rows side by side (`[B, H, T, d]`, [`super::tiled_attention`]) or the heads side by
//! side in each token's row (`[B, T, H·d]`, [`super::tiled_attention_merged`]). [`Rows`] says
//! where a head's rows begin and the distance between two; the tasks are the same.
//!
//! Forward, one task per (batch, head) lane and block of queries; backward, in one pass, one
//! task per (batch, kv head) lane, which owns `dK`, `dV` of its lane and `dQ` of its group's
//! query heads. The kernel writes every row of the output, and of `dK` and `dV`, whole, so they
//! are written into storage never filled with zeros ([`Unfilled`]), cut into one band per lane
//! ([`Rows::lanes`]); only `dQ`, which adds up, starts from zeros.

use std::borrow::Cow;

use rayon::prelude::*;

use super::saved::{Saved, sink_gradients};
use super::shapes::Dims;
use crate::attention::Visibility;
use crate::error::TensorAutodiffError;
use crate::tensor::Tensor;
use llm_kernels::bands::{Band, Unfilled, Unwritten};
use llm_kernels::strips::{LaneGradients, Operands, QueryBlock, StripKernel, TASK_BLOCKS};

/// A kernel's output that came back short ([`Unfilled::finish`]): a bug of the kernel, reported
/// as the values it gave against the values the tensor holds.
impl From<Unwritten> for TensorAutodiffError {
    fn from(error: Unwritten) -> Self {
        TensorAutodiffError::LengthMismatch {
            op: "tiled attention kernel",
            shape: crate::error::Shape(vec![error.len]),
            expected: error.len,
            actual: error.written,
        }
    }
}

/// Where a call's values and output rows lie: each lane's rows side by side (`v [B, G, T_k, d]`,
/// output `[B, H, T_q, d]`), or the heads side by side in each token's row (`v [B, T_k, G·d]`,
/// output `[B, T_q, H·d]`).
#[derive(Clone, Copy, Debug)]
pub(super) enum Rows {
    /// `[B, n, T, d]`.
    Heads,
    /// `[B, T, n·d]`.
    Merged,
}

impl Rows {
    /// The lanes of `n` heads of `t` rows of `d` in `storage`, in the order (batch, head): in
    /// merged rows each head's band of the rows cut into batch rows, else the lanes one after
    /// another.
    fn lanes(self, storage: &mut Unfilled, (b, n, t, d): (usize, usize, usize, usize)) -> Vec<Band<'_>> {
        let (batches, n) = match self {
            Rows::Heads => (b * n, 1),
            Rows::Merged => (b, n),
        };
        let mut heads: Vec<_> =
            storage.column_bands(n * d, d).into_iter().map(|band| band.chunks(t).into_iter()).collect();
        (0..batches).flat_map(|_| heads.iter_mut().filter_map(Iterator::next).collect::<Vec<_>>()).collect()
    }

    /// Where the rows of head `i` of batch row `bi` begin, among `n` heads of `t` rows of `d`, and
    /// the distance between two of them.
    fn rows(self, (bi, i): (usize, usize), (n, t, d): (usize, usize, usize)) -> (usize, usize) {
        match self {
            Rows::Heads => ((bi * n + i) * t * d, d),
            Rows::Merged => ((bi * t * n + i) * d, n * d),
        }
    }
}

/// `[n, a, c, d] → [n, c, a, d]`: axes 1 and 2 swapped, rows of `d` moved whole. Merged rows
/// `[B, T, n·d]` to heads `[B, n, T, d]` with `[B, T, n, d]`, and back with `[B, n, T, d]`.
pub(super) fn swap_axes(x: &[f64], [n, a, c, d]: [usize; 4]) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    if a * c * d == 0 {
        return out; // no values (and no chunks of zero)
    }
    for block in x.chunks_exact(a * c * d) {
        for j in 0..c {
            for i in 0..a {
                out.extend_from_slice(&block[(i * c + j) * d..(i * c + j + 1) * d]);
            }
        }
    }
    debug_assert_eq!(out.len(), n * a * c * d);
    out
}

/// The strip kernel's forward, one task per (batch, head) lane and block of queries, each
/// writing its rows of the output — in merged rows, its head's band of them — into storage
/// never zeroed ([`Unfilled`]). Both layouts' calls run it where no lane holds NaN or ±∞.
pub(super) fn strips_forward(
    rows_of: Rows,
    (dims, vis): (Dims, &Visibility),
    (q, k, v, sinks): (&Tensor, &Tensor, &Tensor, Option<&Tensor>),
    kernel: StripKernel,
    keep_lse: bool,
) -> Result<(Vec<f64>, Vec<f64>), TensorAutodiffError> {
    let Dims { b, h, t_q, t_k, d, .. } = dims;
    let rows = TASK_BLOCKS * dims.block;
    let mut lse = vec![0.0; if keep_lse { b * h * t_q } else { 0 }];
    if b * t_q * h * d == 0 {
        return Ok((Vec::new(), lse)); // no query rows
    }
    // no zeros first: the kernel writes every output row
    let mut out = Unfilled::new(b * t_q * h * d);
    let mut lse_lanes = lse.chunks_mut(t_q);
    let mut tasks = Vec::with_capacity(b * h * t_q.div_ceil(rows));
    for (lane, band) in rows_of.lanes(&mut out, (b, h, t_q, d)).into_iter().enumerate() {
        let lane_lse = lse_lanes.next().map(|l| l.chunks_mut(rows));
        let mut lane_lse = lane_lse.into_iter().flatten();
        for (qb, block) in band.chunks(rows).into_iter().enumerate() {
            tasks.push((lane / h, lane % h, qb * rows, block, lane_lse.next()));
        }
    }
    let (q, k, v, vis) = (q.as_slice(), k.as_slice(), v.as_slice(), vis.rule());
    tasks.into_par_iter().for_each(|(bi, hi, i0, out, lse)| {
        let (ql, kl) = (dims.q_lane(bi, hi), dims.kv_lane(bi, hi));
        let (first, v_stride) = rows_of.rows((bi, hi / dims.group()), (dims.g, t_k, d));
        let task = QueryBlock {
            out,
            lse,
            q: &q[ql..ql + t_q * d],
            k: &k[kl..kl + t_k * d],
            // the lane's first value row onwards (none without keys)
            v: v.get(first..).unwrap_or(&[]),
            v_stride,
            sink: sinks.map(|s| s.as_slice()[hi]),
            dims,
            b: bi,
            i0,
            vis,
        };
        kernel.forward_block(task);
    });
    // every band went to a task, and the finished tasks counted their rows
    Ok((out.finish()?, lse))
}

/// The one-pass strip backward, one task per (batch, kv head) lane, reading `v` and `dO` where
/// their rows lie and writing the lane's `dK` and `dV` — in merged rows, its kv head's band of
/// them — into storage never zeroed ([`Unfilled`]); `D_i` given in the order of `dO`'s rows in
/// memory. Both layouts' calls run it where no operand holds NaN or ±∞ and there are at least
/// `FUSED_BACKWARD_LANES` kv lanes.
pub(super) fn lane_strips_backward(
    rows_of: Rows,
    (dims, vis): (Dims, &Visibility),
    saved: Saved<'_>,
    (g, delta): (&Tensor, &[f64]),
    kernel: StripKernel,
) -> Result<Vec<Option<Tensor>>, TensorAutodiffError> {
    let Saved { q, k, v, sinks, lse, .. } = saved;
    let Dims { b, h, g: g_n, t_q, t_k, d, .. } = dims;
    let group = dims.group();
    // D_i in the lanes' order [B, H, T_q]
    let delta = match rows_of {
        Rows::Heads => Cow::Borrowed(delta),
        Rows::Merged => Cow::Owned(swap_axes(delta, [b, t_q, h, 1])),
    };
    // dQ adds up in place from zeros; the kernel writes every row of dK and dV, so no zeros first
    let mut dq = crate::tensor::dense::zeros(q.len());
    let (mut dk, mut dv) = (Unfilled::new(k.len()), Unfilled::new(v.len()));
    let (qs, ks, vs, gs) = (q.as_slice(), k.as_slice(), v.as_slice(), g.as_slice());
    let rule = vis.rule();
    // the kv lanes, in the order (b, g): dK's side by side, dV's where the values lie
    let dk_lanes = Rows::Heads.lanes(&mut dk, (b, g_n, t_k, d));
    let dv_lanes = rows_of.lanes(&mut dv, (b, g_n, t_k, d));
    let kv_lanes = dk_lanes.into_iter().zip(dv_lanes).collect::<Vec<_>>().into_par_iter().enumerate();
    kv_lanes.zip(dq.par_chunks_mut(group * t_q * d)).for_each(|((kv_lane, (dk, dv)), dq)| {
        let (bi, gi) = (kv_lane / g_n, kv_lane % g_n);
        let kl = dims.kv_lane(bi, gi * group);
        let (v_first, v_stride) = rows_of.rows((bi, gi), (g_n, t_k, d));
        let heads: Vec<Operands<'_>> = (gi * group..(gi + 1) * group)
            .map(|hi| {
                let (ql, row) = (dims.q_lane(bi, hi), (bi * h + hi) * t_q);
                let (g_first, g_stride) = rows_of.rows((bi, hi), (h, t_q, d));
                Operands {
                    q: &qs[ql..ql + t_q * d],
                    k: &ks[kl..kl + t_k * d],
                    v: &vs[v_first..],
                    g: &gs[g_first..],
                    lse: &lse[row..row + t_q],
                    delta: &delta[row..row + t_q],
                    v_stride,
                    g_stride,
                }
            })
            .collect();
        kernel.lane_gradients(LaneGradients { dq, dk, dv, heads: &heads, dims, b: bi, vis: rule });
    });
    // every band went to a task, and the finished tasks counted their rows
    let (dk, dv) = (dk.finish()?, dv.finish()?);
    let mut grads =
        vec![Some(Tensor::new(q.shape(), dq)?), Some(Tensor::new(k.shape(), dk)?), Some(Tensor::new(v.shape(), dv)?)];
    if let Some(s) = sinks {
        grads.push(Some(Tensor::new(&[h], sink_gradients(dims, lse, &delta, s))?));
    }
    Ok(grads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_kernel_output_is_a_length_error() {
        let err = TensorAutodiffError::from(Unwritten { written: 28, len: 30 });
        assert!(matches!(err, TensorAutodiffError::LengthMismatch { expected: 30, actual: 28, .. }), "{err}");
    }
}
