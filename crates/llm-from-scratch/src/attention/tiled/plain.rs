//! The plain twin of the tiled kernels: one query row at a time, over the keys it sees.
//!
//! ```text
//! for each query i:   s_j = scale · q_i · k_j        for the keys j that i sees (the rest skipped)
//!                     p   = softmax(s ++ [sink])      the sink, if any, has a zero value vector
//!                     o_i = Σ_j p_j v_j
//! backward:           D_i = dO_i · O_i,  dS_ij = p_j (dO_i · v_j − D_i)
//!                     dQ_i += scale Σ_j dS_ij k_j,  dK_j += scale dS_ij q_i,  dV_j += p_j dO_i
//! ```
//!
//! Nothing here multiplies a hidden key by a zero weight, so a NaN or ∞ in a key or value that a
//! query cannot see never reaches that query. The block and strip kernels multiply whole blocks
//! (fast, and exact for finite numbers, where a hidden key's term is `0 · v = 0`); the tiled
//! attention runs this loop instead for the lanes whose keys or values are not all finite, and for
//! the whole backward when any operand is not. Tests compare it with the block path.

use super::shapes::{Dims, LaneInputs};
use crate::attention::Visibility;
use crate::autodiff::ops::softmax::softmax_row;

/// `Σ aᵢ bᵢ`, left to right.
fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Query `i`'s view: the keys it sees, their scores and weights (the sink's last, if any).
struct RowView {
    keys: Vec<usize>,
    scores: Vec<f64>,
    weights: Vec<f64>,
}

fn row_view(lane: &LaneInputs<'_>, dims: Dims, vis: &Visibility, i: usize) -> RowView {
    let d = dims.d;
    let scale = dims.scale();
    let q = &lane.q[i * d..(i + 1) * d];
    let keys: Vec<usize> = (0..dims.t_k).filter(|&j| vis.sees(lane.b, dims.t_k, i, j)).collect();
    let mut scores: Vec<f64> = keys.iter().map(|&j| scale * dot(q, &lane.k[j * d..(j + 1) * d])).collect();
    scores.extend(lane.sink);
    let mut weights = vec![0.0; scores.len()];
    softmax_row(&scores, &mut weights);
    RowView { keys, scores, weights }
}

/// Output rows `i0..i0 + out.len()/d` of one lane and their `log Σ e^s` (−∞ for a row that sees
/// no key and has no sink).
pub(super) fn forward_rows(
    lane: &LaneInputs<'_>,
    dims: Dims,
    vis: &Visibility,
    i0: usize,
    out: &mut [f64],
    lse: &mut [f64],
) {
    let d = dims.d;
    for (r, (row, lse)) in out.chunks_mut(d).zip(lse.iter_mut()).enumerate() {
        let view = row_view(lane, dims, vis, i0 + r);
        row.fill(0.0);
        for (&j, &p) in view.keys.iter().zip(&view.weights) {
            for (o, &x) in row.iter_mut().zip(&lane.v[j * d..(j + 1) * d]) {
                *o += p * x;
            }
        }
        // log Σ e^s over the same scores, shifted by their maximum
        let max = view.scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        *lse = if max == f64::NEG_INFINITY {
            f64::NEG_INFINITY
        } else {
            max + view.scores.iter().map(|s| (s - max).exp()).sum::<f64>().ln()
        };
    }
}

/// The adjoints of one query lane, added into `dq [T_q, d]`, `dk`, `dv [T_k, d]` (the kv lane's)
/// and `dsink`; `o` and `g` are the lane's output and upstream `[T_q, d]`.
pub(super) struct PlainGradients<'a> {
    pub(super) dq: &'a mut [f64],
    pub(super) dk: &'a mut [f64],
    pub(super) dv: &'a mut [f64],
    pub(super) dsink: &'a mut f64,
}

/// Adds one query lane's contribution to the gradients (see the module docs).
pub(super) fn backward_lane(
    lane: &LaneInputs<'_>,
    (o, g): (&[f64], &[f64]),
    dims: Dims,
    vis: &Visibility,
    grads: PlainGradients<'_>,
) {
    let d = dims.d;
    let scale = dims.scale();
    for i in 0..dims.t_q {
        let RowView { keys, weights, .. } = row_view(lane, dims, vis, i);
        let (gi, qi) = (&g[i * d..(i + 1) * d], &lane.q[i * d..(i + 1) * d]);
        let delta = dot(gi, &o[i * d..(i + 1) * d]);
        for (&j, &p) in keys.iter().zip(&weights) {
            let (kj, vj) = (&lane.k[j * d..(j + 1) * d], &lane.v[j * d..(j + 1) * d]);
            let ds = scale * p * (dot(gi, vj) - delta);
            for c in 0..d {
                grads.dq[i * d + c] += ds * kj[c];
                grads.dk[j * d + c] += ds * qi[c];
                grads.dv[j * d + c] += p * gi[c];
            }
        }
        if lane.sink.is_some() {
            // the sink's value vector is zero: dP_sink = 0, so d sink = p_sink · (0 − D_i)
            *grads.dsink -= weights[keys.len()] * delta;
        }
    }
}
