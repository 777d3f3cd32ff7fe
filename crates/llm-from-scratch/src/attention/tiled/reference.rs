//! The tiled forward written with block matrix products: the reference the strip kernel is tested
//! against (the strip kernel runs in its place on every processor).
//!
//! ```text
//! for each query block i0..i1 of a lane, each row starting from its (m, ℓ) and n = 0:
//!     for each key block j0..j1 that some query of the block sees:
//!         S = scale · Q[i0..i1] · K[j0..j1]ᵀ       hidden entries −∞
//!         per row: M = max(m, max_j S_j),  P = e^{S − M},  ℓ = ℓ e^{m−M} + Σ_j P_j,  n *= e^{m−M}
//!         n += P · V[j0..j1]
//!     O = n / ℓ,  log Σ eˢ = M + ln ℓ
//! ```
//!
//! The per-row step is [`RunningRow::absorb`], the online softmax's merge.

use super::online_softmax::RunningRow;
use super::shapes::{Dims, LaneInputs};
use crate::attention::Visibility;
use crate::error::TensorAutodiffError;
use crate::tensor::matmul::{MatRef, matmul, matmul_scaled};

/// Where one block of scores lies: batch row `b`, query rows `i0..i1`, key rows `j0..j1`.
#[derive(Clone, Copy, Debug)]
pub(super) struct BlockAt {
    pub(super) b: usize,
    pub(super) rows: (usize, usize),
    pub(super) keys: (usize, usize),
}

/// Scores of one block `scale · Q[i0..i1] · K[j0..j1]ᵀ` into `s` (row-major, `j1 − j0` wide),
/// hidden entries set to −∞; `q` and `k` are one lane's `[T_q, d]` and `[T_k, d]`.
pub(super) fn score_block(
    s: &mut [f64],
    (q, k): (&[f64], &[f64]),
    dims: Dims,
    vis: &Visibility,
    at: BlockAt,
) -> Result<(), TensorAutodiffError> {
    let BlockAt { b, rows: (i0, i1), keys: (j0, j1) } = at;
    let d = dims.d;
    let (n, m) = (i1 - i0, j1 - j0);
    let scale = dims.scale();
    let qv = MatRef::row_major(&q[i0 * d..], n, d)?;
    let kv = MatRef::row_major(&k[j0 * d..], m, d)?.t();
    matmul_scaled(&mut s[..n * m], qv, kv, scale, false, false)?;
    if !vis.block_open(i0, i1, j0, j1) {
        for r in 0..n {
            for c in 0..m {
                if !vis.sees(b, dims.t_k, i0 + r, j0 + c) {
                    s[r * m + c] = f64::NEG_INFINITY;
                }
            }
        }
    }
    Ok(())
}

/// The forward of one query block of one lane: rows `i0..i0 + lse.len()`.
#[derive(Clone, Copy)]
pub(super) struct BlockForward<'a> {
    pub(super) lane: LaneInputs<'a>,
    pub(super) dims: Dims,
    pub(super) vis: &'a Visibility,
    pub(super) i0: usize,
}

impl BlockForward<'_> {
    /// Writes the block's output rows into `out` and their `log Σ eˢ` into `lse`; `scratch` is a
    /// buffer of the worker thread, every entry of which is written before it is read.
    pub(super) fn run(
        &self,
        out: &mut [f64],
        lse: &mut [f64],
        scratch: &mut Vec<f64>,
    ) -> Result<(), TensorAutodiffError> {
        let Self { lane, dims, vis, i0 } = *self;
        let (d, n) = (dims.d, lse.len());
        let i1 = i0 + n;
        // per row: m and ℓ; `out` holds the numerators n until the end
        let mut rows = vec![RunningRow::start(lane.sink); n];
        out.fill(0.0);
        scratch.resize(n * dims.block, 0.0);
        let s = scratch.as_mut_slice();
        for j0 in (0..dims.t_k).step_by(dims.block) {
            let j1 = (j0 + dims.block).min(dims.t_k);
            if vis.block_hidden(i0, i1, j0, j1) {
                continue;
            }
            let w = j1 - j0;
            score_block(s, (lane.q, lane.k), dims, vis, BlockAt { b: lane.b, rows: (i0, i1), keys: (j0, j1) })?;
            for (r, row) in rows.iter_mut().enumerate() {
                // merging a block with a larger maximum rescales what came before by e^{m − M}
                if let Some(alpha) = row.absorb(&mut s[r * w..(r + 1) * w])
                    && alpha != 1.0
                {
                    out[r * d..(r + 1) * d].iter_mut().for_each(|o| *o *= alpha);
                }
            }
            // n += P · V_block
            let p = MatRef::row_major(s, n, w)?;
            matmul(out, p, MatRef::row_major(&lane.v[j0 * d..], w, d)?, true, false)?;
        }
        for ((row, numerator), lse) in rows.iter().zip(out.chunks_mut(d)).zip(lse.iter_mut()) {
            *lse = row.finish(numerator);
        }
        Ok(())
    }
}
