//! The register tiles of the strip kernel: 6 key rows (scores) or 6 value columns (outputs)
//! × 32 queries, and the online softmax of one block of scores across the lanes.

#[cfg(target_arch = "x86_64")]
use super::simd;
use super::{Lanes, STRIP, TILE};
#[cfg(target_arch = "x86_64")]
use crate::tensor::exp::exp_weight;

/// `scores[j] = K[j] · Qᵀ` (`Qᵀ` already scaled) for the key rows `k` (`[w, d]`, `w = scores.len()`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
pub(super) fn score_tiles(scores: &mut [Lanes], k: &[f64], qt: &[Lanes]) {
    let d = qt.len();
    let full = scores.len() - scores.len() % TILE;
    for (tile, keys) in scores[..full].chunks_exact_mut(TILE).zip(k.chunks_exact(TILE * d)) {
        score_tile::<TILE>(tile, keys, qt);
    }
    let (tile, keys) = (&mut scores[full..], &k[full * d..]);
    match tile.len() {
        1 => score_tile::<1>(tile, keys, qt),
        2 => score_tile::<2>(tile, keys, qt),
        3 => score_tile::<3>(tile, keys, qt),
        4 => score_tile::<4>(tile, keys, qt),
        5 => score_tile::<5>(tile, keys, qt),
        _ => {}
    }
}

/// `G` score rows in `G` × 4 registers: per key element `p`, `G` scalars times `Qᵀ[p]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
pub(super) fn score_tile<const G: usize>(tile: &mut [Lanes], keys: &[f64], qt: &[Lanes]) {
    let d = qt.len();
    if tile.len() < G || keys.len() < G * d {
        return; // callers pass whole tiles; this check lets the loop below read without bounds checks
    }
    let mut acc = [simd::splat(0.0); G];
    for (p, query) in qt.iter().enumerate() {
        let y = simd::load(query);
        for (g, a) in acc.iter_mut().enumerate() {
            // SAFETY: g < G and p < d, so g·d + p < G·d ≤ keys.len() (checked above).
            #[allow(unsafe_code)]
            let x = unsafe { simd::element(keys, g * d + p) };
            *a = simd::mul_add(x, y, *a);
        }
    }
    for (out, a) in tile.iter_mut().zip(acc) {
        simd::store(a, out);
    }
}

/// Folds one block of scores into the running maximum and normaliser of a strip, turning the
/// scores into weights `e^{s − M}`; returns each lane's rescale factor `α = e^{m − M}`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
pub(super) fn softmax_block(scores: &mut [Lanes], max: &mut Lanes, sum: &mut Lanes) -> Lanes {
    let mut top = *max;
    for row in scores.iter() {
        for (t, &x) in top.0.iter_mut().zip(&row.0) {
            *t = if x > *t { x } else { *t }; // NaN never wins; it still poisons the weights
        }
    }
    let (mut alpha, mut shift) = (Lanes::splat(0.0), Lanes::splat(0.0));
    for c in 0..STRIP {
        let (m, t) = (max.0[c], top.0[c]);
        // e^{m − M}: exactly 1 when the maximum stays, 0 before the first visible key
        alpha.0[c] = if m == f64::NEG_INFINITY { 0.0 } else { exp_weight(m - t) };
        // a lane that has seen no key yet keeps −∞ scores, whose weights are e^{−∞} = 0
        shift.0[c] = if t == f64::NEG_INFINITY { 0.0 } else { t };
    }
    let mut total = Lanes::splat(0.0);
    for row in scores.iter_mut() {
        for ((x, t), &m) in row.0.iter_mut().zip(&mut total.0).zip(&shift.0) {
            *x = exp_weight(*x - m);
            *t += *x;
        }
    }
    for c in 0..STRIP {
        sum.0[c] = sum.0[c] * alpha.0[c] + total.0[c];
    }
    *max = top;
    alpha
}

/// Value rows `v` (`[w, d]`) regrouped by tiles of [`TILE`] columns: tile `t` holds, for each of
/// the `w` keys, its values in columns `t·TILE..(t+1)·TILE` (zeros past `d`).
pub(super) fn pack_values(packed: &mut Vec<[f64; TILE]>, v: &[f64], d: usize) {
    let (full, rest) = (d / TILE, d % TILE);
    packed.clear();
    for t in 0..full {
        packed.extend(v.chunks_exact(d).map(|row| {
            let mut tile = [0.0; TILE];
            tile.copy_from_slice(&row[t * TILE..(t + 1) * TILE]);
            tile
        }));
    }
    if rest > 0 {
        packed.extend(v.chunks_exact(d).map(|row| {
            let mut tile = [0.0; TILE];
            tile[..rest].copy_from_slice(&row[full * TILE..]);
            tile
        }));
    }
}

/// [`weighted_tiles`] over values from [`pack_values`] (`w ≥ weights.len()` keys per tile).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
pub(super) fn weighted_packed(
    ot: &mut [Lanes],
    values: &[[f64; TILE]],
    w: usize,
    weights: &[Lanes],
    alpha: Option<Lanes>,
) {
    let full = ot.len() - ot.len() % TILE;
    for (tile, values) in ot[..full].chunks_exact_mut(TILE).zip(values.chunks_exact(w)) {
        packed_tile::<TILE>(tile, values, weights, alpha);
    }
    let (tile, values) = (&mut ot[full..], &values[full / TILE * w..]);
    match tile.len() {
        1 => packed_tile::<1>(tile, values, weights, alpha),
        2 => packed_tile::<2>(tile, values, weights, alpha),
        3 => packed_tile::<3>(tile, values, weights, alpha),
        4 => packed_tile::<4>(tile, values, weights, alpha),
        5 => packed_tile::<5>(tile, values, weights, alpha),
        _ => {}
    }
}

/// `G` output columns in `G` × 4 registers: per key, `G` scalars of its packed values times its
/// weights.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
pub(super) fn packed_tile<const G: usize>(
    tile: &mut [Lanes],
    values: &[[f64; TILE]],
    weights: &[Lanes],
    alpha: Option<Lanes>,
) {
    let mut acc = [simd::splat(0.0); G];
    for (a, o) in acc.iter_mut().zip(tile.iter()) {
        *a = match &alpha {
            Some(alpha) => simd::mul(simd::load(o), simd::load(alpha)),
            None => simd::load(o),
        };
    }
    for (weight, value) in weights.iter().zip(values) {
        let y = simd::load(weight);
        for (a, &x) in acc.iter_mut().zip(value) {
            *a = simd::mul_add(x, y, *a);
        }
    }
    for (out, a) in tile.iter_mut().zip(acc) {
        simd::store(a, out);
    }
}

/// `Oᵀ[c] += Σ_j V[j,c] · weights[j]` for every value column `c` (`v` is `[w, d]`,
/// `w = weights.len()`), a tile of [`TILE`] columns at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
pub(super) fn weighted_tiles(ot: &mut [Lanes], v: &[f64], weights: &[Lanes]) {
    let d = ot.len();
    let full = d - d % TILE;
    for (c0, tile) in (0..full).step_by(TILE).zip(ot[..full].chunks_exact_mut(TILE)) {
        weighted_tile::<TILE>(tile, v, d, c0, weights);
    }
    let tile = &mut ot[full..];
    match tile.len() {
        1 => weighted_tile::<1>(tile, v, d, full, weights),
        2 => weighted_tile::<2>(tile, v, d, full, weights),
        3 => weighted_tile::<3>(tile, v, d, full, weights),
        4 => weighted_tile::<4>(tile, v, d, full, weights),
        5 => weighted_tile::<5>(tile, v, d, full, weights),
        _ => {}
    }
}

/// `G` output columns `c0..c0 + G` in `G` × 4 registers: per key, `G` scalars times its
/// weights.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
pub(super) fn weighted_tile<const G: usize>(tile: &mut [Lanes], v: &[f64], d: usize, c0: usize, weights: &[Lanes]) {
    let mut acc = [simd::splat(0.0); G];
    for (a, o) in acc.iter_mut().zip(tile.iter()) {
        *a = simd::load(o);
    }
    if c0 + G > d || v.len() < weights.len() * d {
        return; // callers pass whole rows; this check lets the loop below read without bounds checks
    }
    for (j, weight) in weights.iter().enumerate() {
        let y = simd::load(weight);
        for (g, a) in acc.iter_mut().enumerate() {
            // SAFETY: j < weights.len() and c0 + g < d, so the index is below
            // weights.len()·d ≤ v.len() (checked above).
            #[allow(unsafe_code)]
            let x = unsafe { simd::element(v, j * d + c0 + g) };
            *a = simd::mul_add(x, y, *a);
        }
    }
    for (out, a) in tile.iter_mut().zip(acc) {
        simd::store(a, out);
    }
}
