//! What the forward of tiled attention keeps for its backward ([`Saved`]), and what every
//! backward path computes from it first: the row constants `D_i = dO_i · O_i`, whether the
//! upstream gradient is finite (read off them), and the sinks' gradients.

use rayon::prelude::*;

use super::shapes::Dims;
use crate::tensor::Tensor;
use crate::tensor::exp::exp;

/// What the forward saved for the backward: `q`, `k`, `v`, the sinks, the output `o` and each
/// query row's `log Σ eˢ`.
#[derive(Clone, Copy)]
pub(super) struct Saved<'a> {
    pub(super) q: &'a Tensor,
    pub(super) k: &'a Tensor,
    pub(super) v: &'a Tensor,
    pub(super) sinks: Option<&'a Tensor>,
    pub(super) o: &'a Tensor,
    pub(super) lse: &'a [f64],
    /// `q`, `k` and `v` hold no NaN or ±∞ (checked by the forward).
    pub(super) operands_finite: bool,
}

/// Rows of `dO · O` per parallel task of the backward's row constants (each row's sum runs left
/// to right on one thread, so the constants do not depend on the thread count).
const DELTA_ROWS_PER_TASK: usize = 1024;

/// Whether the upstream gradient `dO` is finite, read from its row constants `D_i = dO_i · O_i`
/// ([`row_constants`]), which read every value of it: a NaN or ±∞ in a row of `dO` makes that
/// row's `D_i` NaN or ±∞ (`±∞ · x` is ±∞ or NaN for every `x`, and no later term makes a sum
/// finite again), so where every `D_i` is finite, so is `dO`, and no pass of its own checks it.
/// (The converse fails where `dO_i · O_i` overflows, or `O_i` itself is ±∞; such rows take
/// the plain loop too.)
pub(super) fn upstream_finite(delta: &[f64]) -> bool {
    crate::tensor::dense::all_finite(delta)
}

/// `D_i = dO_i · O_i`, the softmax adjoint's row constant, for every row of `d` values, in the
/// order of memory.
pub(super) fn row_constants(g: &[f64], o: &[f64], d: usize) -> Vec<f64> {
    g.par_chunks(d)
        .zip(o.par_chunks(d))
        .with_min_len(DELTA_ROWS_PER_TASK)
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum())
        .collect()
}

/// `d sink_h = −Σ_{b,i} p_sink · D_i` with `p_sink = e^{s_h − lse_i}`, summed per head in order,
/// from each query row's `log Σ eˢ` and `D_i` (`[B, H, T_q]`).
pub(super) fn sink_gradients(dims: Dims, lse: &[f64], delta: &[f64], sinks: &Tensor) -> Vec<f64> {
    let Dims { b: b_n, h: h_n, t_q, .. } = dims;
    let mut grad = vec![0.0; h_n];
    for b in 0..b_n {
        for (h, g) in grad.iter_mut().enumerate() {
            let (row, s) = ((b * h_n + h) * t_q, sinks.as_slice()[h]);
            *g += lse[row..row + t_q]
                .iter()
                .zip(&delta[row..row + t_q])
                .filter(|(l, _)| **l != f64::NEG_INFINITY)
                .map(|(l, dl)| -exp(s - l) * dl)
                .sum::<f64>();
        }
    }
    grad
}
