//! The backward of the strip kernel: the gradients of tiled attention with keys (and, for `dQ`
//! with few lanes, queries) held across vector lanes.
//!
//! With the saved `log Σ eˢ` (`lse`) and `D_i = dO_i · O_i`, one task per (batch, kv head) lane
//! walks the lane's keys in strips of 32 and, for every query head of the group and block of 60
//! query rows that see the strip, recomputes the weights and adds up all three gradients:
//!
//! ```text
//! S = Q · (scale·Kᵀ),   P = e^{S − lse},   dP = dO · Vᵀ,   dS = P ⊙ (dP − D)      (keys in lanes)
//! dVᵀ[c] += Σ_i dO[i,c] · P[i]      dKᵀ[p] += Σ_i Q[i,p] · dS[i]      dK = scale · (dKᵀ)ᵀ
//! dQ[i]  += Σ_c dS[i,c] · K[c]      (rows of K in lanes: 6 query rows × 32 columns per tile)
//! ```
//!
//! The task owns `dK`, `dV` of its lane and `dQ` of its group's heads, so every sum runs in one
//! fixed order and results do not depend on the thread count. With fewer lanes than threads can
//! share (`FUSED_BACKWARD_LANES`), two passes spread the work instead — `dQ` per (query lane,
//! query block) with queries in lanes, then `dK`, `dV` per (kv lane, key block) — at the price
//! of recomputing `S` and `dP` twice (seven products instead of five):
//!
//! ```text
//! pass 1 (dQ):  Sᵀ = K · (scale·Qᵀ),  Pᵀ = e^{Sᵀ − lse},  dPᵀ = V · dOᵀ,  dSᵀ = Pᵀ ⊙ (dPᵀ − D),
//!               dQᵀ[p] += Σ_j K[j,p] · dSᵀ[j],   dQ = scale · (dQᵀ)ᵀ
//! pass 2 (dK, dV): as above without the dQ line
//! ```

use super::shapes::{Dims, Operands};
use super::{KEYS, Lanes, STRIP};
use crate::bands::Band;
use crate::isa::Isa;
use crate::visibility::Visibility;

/// `dQ` of one (batch, query head) lane's query block: rows `i0..i0 + dq.len() / d`.
#[derive(Debug)]
pub struct QueryGradients<'a> {
    /// The block's `[n, d]` rows of `dQ`, written whole.
    pub dq: &'a mut [f64],
    /// The lane's queries, keys, values, upstream gradient, `lse` and `D`.
    pub lane: Operands<'a>,
    /// The shapes of the call.
    pub dims: Dims,
    /// Batch row (for key padding).
    pub b: usize,
    /// First query row of the block.
    pub i0: usize,
    /// Which keys each query sees.
    pub vis: Visibility<'a>,
}

/// `dK`, `dV` of one (batch, kv head) lane's key block: rows `j0..j0 + dk.rows()`.
#[derive(Debug)]
pub struct KeyValueGradients<'a> {
    /// The block's `[n, d]` rows of `dK`, not yet written: the kernel writes each whole.
    pub dk: Band<'a>,
    /// The block's rows of `dV` (`d` columns), not yet written: the kernel writes each whole.
    pub dv: Band<'a>,
    /// The query heads that read this kv head, in order (their `k`, `v` are this lane's).
    pub heads: &'a [Operands<'a>],
    /// The shapes of the call.
    pub dims: Dims,
    /// Batch row (for key padding).
    pub b: usize,
    /// First key row of the block.
    pub j0: usize,
    /// Which keys each query sees.
    pub vis: Visibility<'a>,
}

/// The gradients of one (batch, kv head) lane: `dK`, `dV` (`[T_k, d]`) and the `dQ` of its
/// group's query heads (`[H/G, T_q, d]`).
#[derive(Debug)]
pub struct LaneGradients<'a> {
    /// `dQ` of the group's query heads, zeroed by the caller.
    pub dq: &'a mut [f64],
    /// `dK` of the lane (`T_k` rows of `d` columns), not yet written: the kernel writes each whole.
    pub dk: Band<'a>,
    /// `dV` of the lane (`T_k` rows of `d` columns), not yet written: the kernel writes each whole.
    pub dv: Band<'a>,
    /// The query heads that read this kv head, in order (their `k`, `v` are this lane's).
    pub heads: &'a [Operands<'a>],
    /// The shapes of the call.
    pub dims: Dims,
    /// Batch row (for key padding).
    pub b: usize,
    /// Which keys each query sees.
    pub vis: Visibility<'a>,
}

/// Per-thread buffers of the backward; every entry is written before it is read.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    /// Pass 1: `scale·Qᵀ`; pass 2 and the one pass: `scale·Kᵀ` (`d` rows per strip).
    first: Vec<Lanes>,
    /// Pass 1: `dOᵀ`; pass 2: `Vᵀ`.
    second: Vec<Lanes>,
    /// Pass 1: `dQᵀ`; pass 2: `dKᵀ`.
    grad_a: Vec<Lanes>,
    /// Pass 2: `dVᵀ`.
    grad_b: Vec<Lanes>,
    /// Pass 1: `lse` and `D` of each strip's queries.
    lse: Vec<Lanes>,
    delta: Vec<Lanes>,
    /// Scores, then weights `P`, of the current block: one row per key (pass 1) or query (pass 2).
    weights: Vec<Lanes>,
    /// `dP`, then `dS`.
    dweights: Vec<Lanes>,
    /// One pass: the strip's key rows, `d` rounded up to whole vectors, zeros past the last key.
    key_rows: Vec<f64>,
    /// One pass: the group's `dO` rows side by side (`[H/G, T_q, d]`), where they arrive a stride
    /// apart.
    upstream: Vec<f64>,
}

/// `rows[r·d + p] = scale · lanes[p].0[r]` for the `rows.len() / d` rows (`d = lanes.len()`).
fn transpose_out(rows: &mut [f64], lanes: &[Lanes], scale: f64) {
    let d = lanes.len();
    for (r, row) in rows.chunks_exact_mut(d).enumerate() {
        for (x, lane) in row.iter_mut().zip(lanes) {
            *x = scale * lane.0[r];
        }
    }
}

/// [`transpose_out`] into the next `count` rows of a band: `scale · lanes[p].0[r]` (for a scale
/// of 1, the lane's value itself, every bit).
///
/// # Panics
/// If `lanes` is not one per column of the band.
fn transpose_out_band(band: &mut Band<'_>, count: usize, lanes: &[Lanes], scale: f64) {
    assert_eq!(lanes.len(), band.width(), "one lane per column");
    if band.stride() != band.width() {
        // rows apart: ask for all of them first, so that their stores overlap
        band.fetch_next_rows(count);
    }
    for r in 0..count {
        band.write_row(|row| row.write_with(|p| scale * lanes[p].0[r]));
    }
}

/// Zeros in the rows of `band` not yet written.
fn zero_rest(band: &mut Band<'_>) {
    while band.rows_written() < band.rows() {
        band.write_row(|row| row.write_with(|_| 0.0));
    }
}

/// `P = e^{S − lse}` (0 where `lse = −∞`: the query saw no key) into `weights`, and
/// `dS = P ⊙ (dP − D)` into `dweights`, with `lse` and `D` per lane or per row.
#[inline(always)]
fn weights_and_gradients<I: Isa>(isa: I, w: &mut Lanes, dw: &mut Lanes, lse: &Lanes, delta: &Lanes) {
    let exps = super::tiles::exp_shifted(isa, w, lse);
    for ((((p, ds), &l), &dd), &e) in w.0.iter_mut().zip(dw.0.iter_mut()).zip(&lse.0).zip(&delta.0).zip(&exps.0) {
        *p = if l == f64::NEG_INFINITY { 0.0 } else { e };
        *ds = *p * (*ds - dd);
    }
}

/// Pass 1 (see the module docs).
#[inline(always)]
pub(super) fn query_gradients<I: Isa>(isa: I, task: QueryGradients<'_>, s: &mut Scratch) {
    let QueryGradients { dq, lane, dims, b, i0, vis } = task;
    let Operands { q, k, v, g, lse, delta, v_stride, g_stride } = lane;
    let Dims { t_k, d, .. } = dims;
    let n = dq.len() / d;
    let strips = n.div_ceil(STRIP);
    let scale = dims.scale();
    s.first.resize(strips * d, Lanes::splat(0.0));
    s.second.resize(strips * d, Lanes::splat(0.0));
    s.grad_a.clear();
    s.grad_a.resize(strips * d, Lanes::splat(0.0));
    s.lse.resize(strips, Lanes::splat(0.0));
    s.delta.resize(strips, Lanes::splat(0.0));
    s.weights.resize(KEYS, Lanes::splat(0.0));
    s.dweights.resize(KEYS, Lanes::splat(0.0));
    for strip in 0..strips {
        let (first, count) = (i0 + strip * STRIP, STRIP.min(n - strip * STRIP));
        super::transpose_in(&mut s.first[strip * d..(strip + 1) * d], (q, d), first, count, scale);
        super::transpose_in(&mut s.second[strip * d..(strip + 1) * d], (g, g_stride), first, count, 1.0);
        // lanes past the block's rows: lse = −∞ gives them weight 0
        s.lse[strip] = Lanes::splat(f64::NEG_INFINITY);
        s.lse[strip].0[..count].copy_from_slice(&lse[first..first + count]);
        s.delta[strip] = Lanes::splat(0.0);
        s.delta[strip].0[..count].copy_from_slice(&delta[first..first + count]);
    }
    for j0 in (0..t_k).step_by(KEYS) {
        for strip in 0..strips {
            let Some(((a0, a1), j1)) = super::strip_block(&vis, (i0, n), strip, j0, t_k) else {
                continue;
            };
            let w = j1 - j0;
            let rows = strip * d..(strip + 1) * d;
            let (keys, values) = (&k[j0 * d..j1 * d], super::tiles::rows_from(v, j0, v_stride));
            super::score_tiles(isa, &mut s.weights[..w], keys, d, &s.first[rows.clone()]);
            if !vis.block_open(a0, a1, j0, j1) {
                super::hide_keys_in_rows(&mut s.weights[..w], j0, (a0, a1), &vis, b, t_k);
            }
            super::score_tiles(isa, &mut s.dweights[..w], values, v_stride, &s.second[rows.clone()]);
            for (p, ds) in s.weights[..w].iter_mut().zip(&mut s.dweights[..w]) {
                weights_and_gradients(isa, p, ds, &s.lse[strip], &s.delta[strip]);
            }
            super::weighted_tiles(isa, &mut s.grad_a[rows], keys, d, &s.dweights[..w]);
        }
    }
    for (strip, rows) in dq.chunks_mut(STRIP * d).enumerate() {
        transpose_out(rows, &s.grad_a[strip * d..(strip + 1) * d], scale);
    }
}

/// Pass 2 (see the module docs).
#[inline(always)]
pub(super) fn key_value_gradients<I: Isa>(isa: I, task: KeyValueGradients<'_>, s: &mut Scratch) {
    let KeyValueGradients { mut dk, mut dv, heads, dims, b, j0, vis } = task;
    let Dims { t_q, t_k, d, .. } = dims;
    let n = dk.rows();
    let strips = n.div_ceil(STRIP);
    let scale = dims.scale();
    assert_eq!(dv.rows(), n, "dK and dV of the same keys");
    let Some(lane) = heads.first() else {
        // no query head reads these keys: zero gradients
        return [dk, dv].iter_mut().for_each(zero_rest);
    };
    s.first.resize(strips * d, Lanes::splat(0.0));
    s.second.resize(strips * d, Lanes::splat(0.0));
    s.grad_a.clear();
    s.grad_a.resize(strips * d, Lanes::splat(0.0));
    s.grad_b.clear();
    s.grad_b.resize(strips * d, Lanes::splat(0.0));
    s.weights.resize(KEYS, Lanes::splat(0.0));
    s.dweights.resize(KEYS, Lanes::splat(0.0));
    for strip in 0..strips {
        let (first, count) = (j0 + strip * STRIP, STRIP.min(n - strip * STRIP));
        super::transpose_in(&mut s.first[strip * d..(strip + 1) * d], (lane.k, d), first, count, scale);
        super::transpose_in(&mut s.second[strip * d..(strip + 1) * d], (lane.v, lane.v_stride), first, count, 1.0);
    }
    // the first query row that sees key j0 (causality)
    let start = j0.saturating_sub(vis.query_offset);
    for head in heads {
        for i0 in (start..t_q).step_by(KEYS) {
            let i1 = (i0 + KEYS).min(t_q);
            for strip in 0..strips {
                let (k0, k1) = (j0 + strip * STRIP, (j0 + (strip + 1) * STRIP).min(j0 + n));
                let r0 = i0.max(k0.saturating_sub(vis.query_offset));
                if r0 >= i1 || vis.block_hidden(r0, i1, k0, k1) {
                    continue;
                }
                let rows = i1 - r0;
                let lanes = strip * d..(strip + 1) * d;
                let (queries, upstream) = (&head.q[r0 * d..i1 * d], super::tiles::rows_from(head.g, r0, head.g_stride));
                super::score_tiles(isa, &mut s.weights[..rows], queries, d, &s.first[lanes.clone()]);
                if !vis.block_open(r0, i1, k0, k1) || k1 - k0 < STRIP {
                    super::hide_queries_in_rows(&mut s.weights[..rows], r0, (k0, k1), &vis, b, t_k);
                }
                super::score_tiles(isa, &mut s.dweights[..rows], upstream, head.g_stride, &s.second[lanes.clone()]);
                for (i, (p, ds)) in (r0..i1).zip(s.weights[..rows].iter_mut().zip(&mut s.dweights[..rows])) {
                    weights_and_gradients(isa, p, ds, &Lanes::splat(head.lse[i]), &Lanes::splat(head.delta[i]));
                }
                super::weighted_tiles(isa, &mut s.grad_b[lanes.clone()], upstream, head.g_stride, &s.weights[..rows]);
                super::weighted_tiles(isa, &mut s.grad_a[lanes], queries, d, &s.dweights[..rows]);
            }
        }
    }
    for strip in 0..strips {
        let (count, lanes) = (STRIP.min(n - strip * STRIP), strip * d..(strip + 1) * d);
        transpose_out_band(&mut dk, count, &s.grad_a[lanes.clone()], scale);
        transpose_out_band(&mut dv, count, &s.grad_b[lanes], 1.0);
    }
}

/// The one-pass backward of a kv lane (see the module docs).
#[inline(always)]
pub(super) fn lane_gradients<I: Isa>(isa: I, task: LaneGradients<'_>, s: &mut Scratch) {
    let LaneGradients { dq, mut dk, mut dv, heads, dims, b, vis } = task;
    let Dims { t_q, t_k, d, .. } = dims;
    assert!(dk.rows() == t_k && dv.rows() == t_k, "dK and dV of the lane's {t_k} keys");
    let Some(lane) = heads.first() else {
        // no query head reads these keys: zero gradients
        return [dk, dv].iter_mut().for_each(zero_rest);
    };
    let scale = dims.scale();
    let width = d.div_ceil(I::WIDTH) * I::WIDTH;
    for buffer in [&mut s.first, &mut s.second, &mut s.grad_a, &mut s.grad_b] {
        buffer.resize(d, Lanes::splat(0.0));
    }
    s.weights.resize(KEYS, Lanes::splat(0.0));
    s.dweights.resize(KEYS, Lanes::splat(0.0));
    s.key_rows.resize(STRIP * width, 0.0);
    // dQ / scale accumulates in place (`dq` arrives zeroed), or where d is not a whole number of
    // vectors in rows padded to `width`, allocated per call: O(T·d), like the gradients
    let mut padded = Vec::new();
    let sums: &mut [f64] = if width == d {
        dq
    } else {
        padded.resize(heads.len() * t_q * width, 0.0);
        &mut padded
    };
    // each row of dO is read once per strip of keys; rows a stride apart (the projections'
    // layout, 2 KiB for 8 heads of 32) fall into a few sets of the caches and push each other
    // out, so they are first copied side by side, once per call
    let side_by_side = heads.iter().any(|head| head.g_stride != d);
    if side_by_side {
        s.upstream.clear();
        for head in heads {
            crate::fetch::fetch_rows(head.g, (0, t_q.min(AHEAD_ROWS)), d, head.g_stride);
            for i in 0..t_q {
                crate::fetch::fetch_rows(head.g, (i + AHEAD_ROWS, 1), d, head.g_stride);
                s.upstream.extend_from_slice(&head.g[i * head.g_stride..i * head.g_stride + d]);
            }
        }
    }
    for k0 in (0..t_k).step_by(STRIP) {
        let k1 = (k0 + STRIP).min(t_k);
        super::transpose_in(&mut s.first, (lane.k, d), k0, k1 - k0, scale);
        super::transpose_in(&mut s.second, (lane.v, lane.v_stride), k0, k1 - k0, 1.0);
        if lane.v_stride != d {
            // the next strip's value rows, while this strip's queries run
            crate::fetch::fetch_rows(lane.v, (k1, STRIP.min(t_k - k1)), d, lane.v_stride);
        }
        s.grad_a.fill(Lanes::splat(0.0));
        s.grad_b.fill(Lanes::splat(0.0));
        s.key_rows.fill(0.0);
        for (row, key) in s.key_rows.chunks_exact_mut(width).zip(lane.k[k0 * d..k1 * d].chunks_exact(d)) {
            row[..d].copy_from_slice(key);
        }
        // the first query row that sees key k0 (causality)
        let start = k0.saturating_sub(vis.query_offset);
        for (h, head) in heads.iter().enumerate() {
            let (g_rows, g_stride) =
                if side_by_side { (&s.upstream[h * t_q * d..], d) } else { (head.g, head.g_stride) };
            for i0 in (start..t_q).step_by(KEYS) {
                let i1 = (i0 + KEYS).min(t_q);
                if vis.block_hidden(i0, i1, k0, k1) {
                    continue;
                }
                let rows = i1 - i0;
                let (queries, upstream) = (&head.q[i0 * d..i1 * d], super::tiles::rows_from(g_rows, i0, g_stride));
                super::score_tiles(isa, &mut s.weights[..rows], queries, d, &s.first);
                if !vis.block_open(i0, i1, k0, k1) || k1 - k0 < STRIP {
                    super::hide_queries_in_rows(&mut s.weights[..rows], i0, (k0, k1), &vis, b, t_k);
                }
                super::score_tiles(isa, &mut s.dweights[..rows], upstream, g_stride, &s.second);
                for (i, (p, ds)) in (i0..i1).zip(s.weights[..rows].iter_mut().zip(&mut s.dweights[..rows])) {
                    weights_and_gradients(isa, p, ds, &Lanes::splat(head.lse[i]), &Lanes::splat(head.delta[i]));
                }
                super::weighted_tiles(isa, &mut s.grad_b, upstream, g_stride, &s.weights[..rows]);
                super::weighted_tiles(isa, &mut s.grad_a, queries, d, &s.dweights[..rows]);
                let dq_rows = &mut sums[(h * t_q + i0) * width..(h * t_q + i1) * width];
                row_products(isa, dq_rows, &s.dweights[..rows], &s.key_rows, width);
            }
        }
        // strips in order: the bands' next rows are k0..k1
        transpose_out_band(&mut dk, k1 - k0, &s.grad_a, scale);
        transpose_out_band(&mut dv, k1 - k0, &s.grad_b, 1.0);
    }
    if width == d {
        sums.iter_mut().for_each(|x| *x *= scale);
    } else {
        for (out, row) in dq.chunks_exact_mut(d).zip(padded.chunks_exact(width)) {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = scale * x;
            }
        }
    }
}

/// `dq[r] += Σ_c ds[r].0[c] · key_rows[c]` for rows of `width` values (a multiple of
/// `I::WIDTH`), in tiles of up to 6 rows × `I::TILE_VECTORS` vectors.
#[inline(always)]
fn row_products<I: Isa>(isa: I, dq: &mut [f64], ds: &[Lanes], key_rows: &[f64], width: usize) {
    for r0 in (0..ds.len()).step_by(ROW_TILE) {
        let rows = (ds.len() - r0).min(ROW_TILE);
        for c0 in (0..width).step_by(I::TILE_VECTORS * I::WIDTH) {
            let vectors = ((width - c0) / I::WIDTH).min(I::TILE_VECTORS);
            match rows {
                6 => row_tile_of::<I, 6>(isa, dq, ds, key_rows, width, (r0, c0), vectors),
                5 => row_tile_of::<I, 5>(isa, dq, ds, key_rows, width, (r0, c0), vectors),
                4 => row_tile_of::<I, 4>(isa, dq, ds, key_rows, width, (r0, c0), vectors),
                3 => row_tile_of::<I, 3>(isa, dq, ds, key_rows, width, (r0, c0), vectors),
                2 => row_tile_of::<I, 2>(isa, dq, ds, key_rows, width, (r0, c0), vectors),
                _ => row_tile_of::<I, 1>(isa, dq, ds, key_rows, width, (r0, c0), vectors),
            }
        }
    }
}

/// How many rows ahead the copy of strided `dO` rows asks for the next.
const AHEAD_ROWS: usize = 8;

/// Rows per tile of [`row_products`].
const ROW_TILE: usize = 6;

#[inline(always)]
fn row_tile_of<I: Isa, const R: usize>(
    isa: I,
    dq: &mut [f64],
    ds: &[Lanes],
    key_rows: &[f64],
    width: usize,
    at: (usize, usize),
    vectors: usize,
) {
    match vectors {
        4 => row_tile::<I, R, 4>(isa, dq, ds, key_rows, width, at),
        3 => row_tile::<I, R, 3>(isa, dq, ds, key_rows, width, at),
        2 => row_tile::<I, R, 2>(isa, dq, ds, key_rows, width, at),
        _ => row_tile::<I, R, 1>(isa, dq, ds, key_rows, width, at),
    }
}

/// `R` rows × `V` vectors of `dq` from column `c0`: per key `c`, `V` loads of its row and `R`
/// broadcasts of `dS[r, c]`.
#[inline(always)]
fn row_tile<I: Isa, const R: usize, const V: usize>(
    isa: I,
    dq: &mut [f64],
    ds: &[Lanes],
    key_rows: &[f64],
    width: usize,
    (r0, c0): (usize, usize),
) {
    // callers pass whole tiles; this check (its products checked: a width from a caller may be
    // anything) lets the loops below read without bounds checks
    let rows_end = (r0 + R).checked_mul(width);
    let keys_end = STRIP.checked_mul(width);
    if ds.len() < r0 + R
        || rows_end.is_none_or(|end| dq.len() < end)
        || keys_end.is_none_or(|end| key_rows.len() < end)
        || c0 + V * I::WIDTH > width
    {
        return;
    }
    // SAFETY (every `load` and `store` below): with r < R, v < V and c < STRIP, the W = I::WIDTH
    // values from (r0 + r)·width + c0 + W·v end by (r0 + R)·width ≤ dq.len(), and those from
    // c·width + c0 + W·v by STRIP·width ≤ key_rows.len(), as c0 + W·V ≤ width (checked above).
    let mut acc = [[isa.splat(0.0); V]; R];
    for (r, a) in acc.iter_mut().enumerate() {
        for (v, a) in a.iter_mut().enumerate() {
            #[allow(unsafe_code)]
            let x = unsafe { isa.load(dq, (r0 + r) * width + c0 + v * I::WIDTH) };
            *a = x;
        }
    }
    for c in 0..STRIP {
        let mut keys = [isa.splat(0.0); V];
        for (v, k) in keys.iter_mut().enumerate() {
            #[allow(unsafe_code)]
            let x = unsafe { isa.load(key_rows, c * width + c0 + v * I::WIDTH) };
            *k = x;
        }
        for (r, a) in acc.iter_mut().enumerate() {
            let x = isa.splat(ds[r0 + r].0[c]);
            for (a, &k) in a.iter_mut().zip(&keys) {
                *a = isa.mul_add(x, k, *a);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        for (v, &a) in a.iter().enumerate() {
            #[allow(unsafe_code)]
            unsafe {
                isa.store(dq, (r0 + r) * width + c0 + v * I::WIDTH, a);
            }
        }
    }
}
