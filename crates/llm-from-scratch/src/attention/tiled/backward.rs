//! The backward of tiled attention, written with block matrix products, and how each path runs
//! its lanes.
//!
//! The backward recomputes each score block from `Q`, `K` and the saved `log Σ eˢ` instead of
//! storing the weights:
//!
//! ```text
//! P  = exp(S − lse)                       (recomputed block)
//! dV += Pᵀ · dO
//! dP  = dO · Vᵀ
//! dS  = P ⊙ (dP − D),  D_i = dO_i · O_i
//! dQ += scale · dS · K,   dK += scale · dSᵀ · Q
//! ```

use rayon::prelude::*;

use super::path::TiledPath;
use super::plain;
use super::reference::{BlockAt, score_block};
use super::saved::{Saved, row_constants, sink_gradients, upstream_finite};
use super::shapes::{Dims, LaneInputs, Operands};
use super::strip_tasks::{Rows, lane_strips_backward};
use crate::attention::Visibility;
use crate::error::TensorAutodiffError;
use crate::tensor::Tensor;
use crate::tensor::exp::exp_shifted_sum;
use crate::tensor::matmul::{MatRef, matmul};
use llm_kernels::bands::Band;
use llm_kernels::strips;

/// The operands of one (batch, query head) lane.
struct Lane<'a> {
    b: usize,
    ops: Operands<'a>,
}

/// Everything the backward shares between lanes.
struct Backward<'a> {
    dims: Dims,
    vis: &'a Visibility,
    all: Operands<'a>,
}

impl<'a> Backward<'a> {
    fn lane(&self, b: usize, h: usize) -> Lane<'a> {
        let Dims { h: h_n, t_q, t_k, d, .. } = self.dims;
        let (ql, kl, row) = (self.dims.q_lane(b, h), self.dims.kv_lane(b, h), (b * h_n + h) * t_q);
        let all = self.all;
        let ops = Operands {
            q: &all.q[ql..ql + t_q * d],
            k: &all.k[kl..kl + t_k * d],
            v: &all.v[kl..kl + t_k * d],
            g: &all.g[ql..ql + t_q * d],
            lse: &all.lse[row..row + t_q],
            delta: &all.delta[row..row + t_q],
            v_stride: d,
            g_stride: d,
        };
        Lane { b, ops }
    }

    /// Recomputes one block's `P = exp(S − lse)` into `p` (hidden entries and rows that saw no key
    /// give 0) and `dS = scale · P ⊙ (dO·Vᵀ − D)` into `ds`.
    fn block(
        &self,
        lane: &Lane<'_>,
        (i0, i1): (usize, usize),
        (j0, j1): (usize, usize),
        p: &mut [f64],
        ds: &mut [f64],
    ) -> Result<(), TensorAutodiffError> {
        let d = self.dims.d;
        let (n, w) = (i1 - i0, j1 - j0);
        let scale = self.dims.scale();
        let at = BlockAt { b: lane.b, rows: (i0, i1), keys: (j0, j1) };
        score_block(p, (lane.ops.q, lane.ops.k), self.dims, self.vis, at)?;
        for (r, row) in p[..n * w].chunks_mut(w).enumerate() {
            if lane.ops.lse[i0 + r] == f64::NEG_INFINITY {
                row.fill(0.0);
            } else {
                exp_shifted_sum(row, lane.ops.lse[i0 + r]);
            }
        }
        // dP = dO · Vᵀ, then dS = P ⊙ (dP − D), scaled once for the products that use it
        let go = MatRef::row_major(&lane.ops.g[i0 * d..], n, d)?;
        matmul(&mut ds[..n * w], go, MatRef::row_major(&lane.ops.v[j0 * d..], w, d)?.t(), false, false)?;
        for (r, row) in ds[..n * w].chunks_mut(w).enumerate() {
            for (x, &pv) in row.iter_mut().zip(&p[r * w..(r + 1) * w]) {
                *x = scale * pv * (*x - lane.ops.delta[i0 + r]);
            }
        }
        Ok(())
    }

    /// `dQ` of one query lane: `dQ += dS · K` over its key blocks, in order.
    fn query_lane(&self, lane: &Lane<'_>, dq: &mut [f64]) -> Result<(), TensorAutodiffError> {
        let Dims { t_q, t_k, d, block, .. } = self.dims;
        let (mut p, mut ds) = (vec![0.0; block * block], vec![0.0; block * block]);
        for i0 in (0..t_q).step_by(block) {
            let i1 = (i0 + block).min(t_q);
            for j0 in (0..t_k).step_by(block) {
                let j1 = (j0 + block).min(t_k);
                if self.vis.block_hidden(i0, i1, j0, j1) {
                    continue;
                }
                self.block(lane, (i0, i1), (j0, j1), &mut p, &mut ds)?;
                let dsm = MatRef::row_major(&ds, i1 - i0, j1 - j0)?;
                add_product(&mut dq[i0 * d..i1 * d], dsm, MatRef::row_major(&lane.ops.k[j0 * d..], j1 - j0, d)?)?;
            }
        }
        Ok(())
    }

    /// `dK`, `dV` of one (batch, kv head) lane, summing the query heads of its group in order;
    /// with `dq` (the group's query lanes) also their `dQ`, from the same recomputed blocks.
    fn kv_lane(
        &self,
        kv_lane: usize,
        mut dq: Option<&mut [f64]>,
        dk: &mut [f64],
        dv: &mut [f64],
    ) -> Result<(), TensorAutodiffError> {
        let Dims { g: g_n, t_q, t_k, d, block, .. } = self.dims;
        let group = self.dims.group();
        let (b, gi) = (kv_lane / g_n, kv_lane % g_n);
        let (mut p, mut ds) = (vec![0.0; block * block], vec![0.0; block * block]);
        for j0 in (0..t_k).step_by(block) {
            let j1 = (j0 + block).min(t_k);
            let w = j1 - j0;
            for r in 0..group {
                let lane = self.lane(b, gi * group + r);
                for i0 in (0..t_q).step_by(block) {
                    let i1 = (i0 + block).min(t_q);
                    if self.vis.block_hidden(i0, i1, j0, j1) {
                        continue;
                    }
                    let n = i1 - i0;
                    self.block(&lane, (i0, i1), (j0, j1), &mut p, &mut ds)?;
                    let (pm, dsm) = (MatRef::row_major(&p, n, w)?, MatRef::row_major(&ds, n, w)?);
                    // dV += Pᵀ · dO and dK += dSᵀ · Q
                    add_product(&mut dv[j0 * d..j1 * d], pm.t(), MatRef::row_major(&lane.ops.g[i0 * d..], n, d)?)?;
                    add_product(&mut dk[j0 * d..j1 * d], dsm.t(), MatRef::row_major(&lane.ops.q[i0 * d..], n, d)?)?;
                    if let Some(dq) = dq.as_deref_mut() {
                        let rows = &mut dq[r * t_q * d..(r + 1) * t_q * d];
                        add_product(&mut rows[i0 * d..i1 * d], dsm, MatRef::row_major(&lane.ops.k[j0 * d..], w, d)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// With at least this many (batch, kv head) lanes the backward runs as one pass per kv lane (each
/// block recomputed once for `dQ`, `dK` and `dV`); with fewer, as two passes that also spread the
/// work over query lanes. The choice depends only on the shapes, so results never depend on the
/// thread count.
pub(super) const FUSED_BACKWARD_LANES: usize = 8;

/// `c += a · b`.
fn add_product(c: &mut [f64], a: MatRef<'_>, b: MatRef<'_>) -> Result<(), TensorAutodiffError> {
    matmul(c, a, b, true, false)
}

/// The gradient buffers of `q`, `k` and `v`, each written by one task per slice.
struct Adjoints<'g> {
    dq: &'g mut [f64],
    dk: &'g mut [f64],
    dv: &'g mut [f64],
}

/// The gradients of `tiled_attention` from the saved `log Σ eˢ`: `[dq, dk, dv]` and, with sinks,
/// `d sinks`, for the upstream adjoint `g` of the output.
pub(super) fn backward(
    dims: Dims,
    vis: &Visibility,
    saved: Saved<'_>,
    g: &Tensor,
    path: TiledPath,
) -> Result<Vec<Option<Tensor>>, TensorAutodiffError> {
    let Saved { q, k, v, sinks, o, lse, operands_finite } = saved;
    if q.is_empty() || k.is_empty() {
        // nothing attended: every adjoint is zero (and the sinks received no mass)
        let zeros = |t: &Tensor| Tensor::zeros(t.shape()).map(Some);
        let mut grads = vec![zeros(q)?, zeros(k)?, zeros(v)?];
        if sinks.is_some() {
            grads.push(Some(Tensor::zeros(&[dims.h])?));
        }
        return Ok(grads);
    }
    if matches!(path, TiledPath::Plain) || !operands_finite {
        return Ok(plain_backward(dims, vis, saved, g));
    }
    let delta = row_constants(g.as_slice(), o.as_slice(), dims.d);
    if !upstream_finite(&delta) {
        return Ok(plain_backward(dims, vis, saved, g));
    }
    let fused = dims.b * dims.g >= FUSED_BACKWARD_LANES;
    if let TiledPath::Strips(kernel) = path
        && fused
    {
        return lane_strips_backward(Rows::Heads, (dims, vis), saved, (g, &delta), kernel);
    }
    let (q_all, k_all, v_all, g_all) = (q.as_slice(), k.as_slice(), v.as_slice(), g.as_slice());
    let (v_stride, g_stride) = (dims.d, dims.d);
    let all = Operands { q: q_all, k: k_all, v: v_all, g: g_all, lse, delta: &delta, v_stride, g_stride };
    let run = Backward { dims, vis, all };
    let zeros = crate::tensor::dense::zeros;
    let (mut dq, mut dk, mut dv) = (zeros(q.len()), zeros(k.len()), zeros(v.len()));
    let adjoints = Adjoints { dq: &mut dq, dk: &mut dk, dv: &mut dv };
    match path {
        TiledPath::Strips(strips) => run.two_pass_strips(strips, adjoints),
        _ if fused => run.fused_blocks(adjoints)?,
        _ => run.two_pass_blocks(adjoints)?,
    }
    let mut grads =
        vec![Some(Tensor::new(q.shape(), dq)?), Some(Tensor::new(k.shape(), dk)?), Some(Tensor::new(v.shape(), dv)?)];
    if let Some(s) = sinks {
        grads.push(Some(Tensor::new(&[dims.h], sink_gradients(dims, lse, &delta, s))?));
    }
    Ok(grads)
}

/// The four ways to run the backward's lanes in parallel: one pass per kv lane (a task owns `dK`,
/// `dV` of the lane and `dQ` of its group's query heads), or two passes (`dQ` per query lane,
/// then `dK`, `dV` per kv lane); each on the strip kernel or on block products.
impl Backward<'_> {
    /// The query heads of kv lane `kv_lane`, in order.
    fn group_heads(&self, kv_lane: usize) -> Vec<Operands<'_>> {
        let (g_n, group) = (self.dims.g, self.dims.group());
        let (b, gi) = (kv_lane / g_n, kv_lane % g_n);
        (0..group).map(|r| self.lane(b, gi * group + r).ops).collect()
    }

    fn two_pass_strips(&self, kernel: strips::StripKernel, out: Adjoints<'_>) {
        let Dims { h: h_n, g: g_n, t_q, t_k, d, block, .. } = self.dims;
        let (dims, vis) = (self.dims, self.vis.rule());
        // pass 1: dQ per (query lane, query block)
        out.dq.par_chunks_mut(t_q * d).enumerate().for_each(|(lane, dq)| {
            let (b, h) = (lane / h_n, lane % h_n);
            let lane = self.lane(b, h).ops;
            dq.par_chunks_mut(block * d).enumerate().for_each(|(qb, dq)| {
                kernel.query_gradients(strips::QueryGradients { dq, lane, dims, b, i0: qb * block, vis });
            });
        });
        // pass 2: dK, dV per (kv lane, key block)
        let kv_lanes = out.dk.par_chunks_mut(t_k * d).zip(out.dv.par_chunks_mut(t_k * d)).enumerate();
        kv_lanes.for_each(|(kv_lane, (dk, dv))| {
            let (heads, b) = (self.group_heads(kv_lane), kv_lane / g_n);
            dk.par_chunks_mut(block * d).zip(dv.par_chunks_mut(block * d)).enumerate().for_each(|(kb, (dk, dv))| {
                let (dk, dv) = (Band::whole(dk, d), Band::whole(dv, d));
                let task = strips::KeyValueGradients { dk, dv, heads: &heads, dims, b, j0: kb * block, vis };
                kernel.key_value_gradients(task);
            });
        });
    }

    // The block paths' products and exponentials run on the target read where each begins.

    fn fused_blocks(&self, out: Adjoints<'_>) -> Result<(), TensorAutodiffError> {
        let target = llm_kernels::active();
        let lane_len = self.dims.t_k * self.dims.d;
        let kv_lanes = out.dk.par_chunks_mut(lane_len).zip(out.dv.par_chunks_mut(lane_len)).enumerate();
        let groups = out.dq.par_chunks_mut(self.dims.group() * self.dims.t_q * self.dims.d);
        kv_lanes
            .zip(groups)
            .try_for_each(|((lane, (dk, dv)), dq)| target.within(|| self.kv_lane(lane, Some(dq), dk, dv)))
    }

    fn two_pass_blocks(&self, out: Adjoints<'_>) -> Result<(), TensorAutodiffError> {
        let target = llm_kernels::active();
        let Dims { h: h_n, t_q, t_k, d, .. } = self.dims;
        // pass 1: dQ per query lane; pass 2: dK and dV per kv lane
        out.dq
            .par_chunks_mut(t_q * d)
            .enumerate()
            .try_for_each(|(lane, dq)| target.within(|| self.query_lane(&self.lane(lane / h_n, lane % h_n), dq)))?;
        let kv_lanes = out.dk.par_chunks_mut(t_k * d).zip(out.dv.par_chunks_mut(t_k * d)).enumerate();
        kv_lanes.try_for_each(|(lane, (dk, dv))| target.within(|| self.kv_lane(lane, None, dk, dv)))
    }
}

/// The backward on the plain loop (module `plain`), for operands holding NaN or ±∞: hidden keys
/// are skipped, so their values never reach a gradient they take no part in.
fn plain_backward(dims: Dims, vis: &Visibility, saved: Saved<'_>, g: &Tensor) -> Vec<Option<Tensor>> {
    let Saved { q, k, v, sinks, o, .. } = saved;
    let Dims { b: b_n, h: h_n, t_q, d, .. } = dims;
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    let mut dsink = vec![0.0; h_n];
    let lane_len = t_q * d;
    for b in 0..b_n {
        for (h, dsink) in dsink.iter_mut().enumerate() {
            let (ql, kl) = (dims.q_lane(b, h), dims.kv_lane(b, h));
            let kv = kl..kl + dims.t_k * d;
            let lane = LaneInputs {
                q: &q.as_slice()[ql..ql + lane_len],
                k: &k.as_slice()[kv.clone()],
                v: &v.as_slice()[kv.clone()],
                sink: sinks.map(|s| s.as_slice()[h]),
                b,
            };
            let upstream = (&o.as_slice()[ql..ql + lane_len], &g.as_slice()[ql..ql + lane_len]);
            let grads = plain::PlainGradients {
                dq: &mut dq[ql..ql + lane_len],
                dk: &mut dk[kv.clone()],
                dv: &mut dv[kv],
                dsink,
            };
            plain::backward_lane(&lane, upstream, dims, vis, grads);
        }
    }
    let mut grads = vec![
        Some(Tensor::from_parts(q.shape().to_vec(), dq)),
        Some(Tensor::from_parts(k.shape().to_vec(), dk)),
        Some(Tensor::from_parts(v.shape().to_vec(), dv)),
    ];
    if sinks.is_some() {
        grads.push(Some(Tensor::from_parts(vec![h_n], dsink)));
    }
    grads
}
