//! The tiled forward as one kernel over *strips* of 32 queries held across vector lanes.
//!
//! `super::forward_block` spells the algorithm out with block matrix products. Here the same
//! steps run in the processor's registers and first-level cache: a strip's queries are
//! transposed once (`Qᵀ`, `d × 32`), so that each score row `Sᵀ[j] = K[j] · Qᵀ`, each running
//! maximum and normaliser, and each output column `Oᵀ[c] += Σ_j V[j,c] · Pᵀ[j]` is a row of 32
//! numbers — one per query, four AVX-512 registers. Every key and value element is read once
//! as a scalar and multiplied into all 32 queries, and the softmax of a block needs no
//! reductions across lanes:
//!
//! ```text
//! for each key block j0..j1, for each strip (32 queries):
//!     Sᵀ[j]   = Σ_p K[j,p] · (scale · Qᵀ[p])        (fused multiply-adds, 6 key rows at a time)
//!     hidden entries = −∞                           (only in blocks that are not fully visible)
//!     M       = max(m, max_j Sᵀ[j]),  α = e^{m−M}
//!     Pᵀ[j]   = e^{Sᵀ[j] − M},        ℓ = α·ℓ + Σ_j Pᵀ[j]
//!     Oᵀ[c]   = α·Oᵀ[c] + Σ_j V[j,c] · Pᵀ[j]         (6 value columns at a time)
//! O = (Oᵀ / ℓ)ᵀ,  log Σ eˢ = M + ln ℓ
//! ```
//!
//! A register tile is 6 rows × 4 registers: 24 accumulators, and per step 4 vector loads and 6
//! scalar broadcasts. Measured on the benchmark machine with its data in first-level cache, such
//! a tile runs at 85–90 % of the processor's multiply-add peak (8 rows × 2 registers: 80–85 %);
//! inside the kernel, with keys and values coming from the second-level cache, the two products
//! run at about 75 %, and the exponentials take about a sixth of the time. Key blocks (60 keys,
//! ten whole tiles) run in the outer loop so that a block of keys and values is read from memory
//! once for all strips of a task (several query blocks).
//!
//! The gradients run on the same tiles with keys across the lanes (module `backward`). On
//! processors without AVX-512 the block path runs instead. The result equals the block path
//! to rounding (tests: 1e-12 relative) and, as every number is computed by one task in a fixed
//! order, does not depend on the thread count.

mod backward;

pub(super) use backward::{KeyValueGradients, LaneGradients, QueryGradients};

use super::{Dims, Visibility};
use crate::tensor::exp::exp_weight;

/// Queries per strip: the vector lanes of the kernel (four AVX-512 registers).
pub(super) const STRIP: usize = 32;

/// Key rows (scores) or value columns (outputs) per register tile: 6 × 4 accumulators, plus 4
/// loaded registers and a broadcast, of AVX-512's 32 vector registers.
const TILE: usize = 6;

/// Query blocks ([`super::block_size`]) per forward task. The strips of a task share each block
/// of keys and values read from memory, so with 4 blocks they are fetched from the last-level
/// cache a quarter as often (`long-causal`: 5 % faster than one block per task, in paired runs).
pub(super) const TASK_BLOCKS: usize = 4;

/// Keys per block: ten whole tiles of scores. (Measured: blocks of 30, 60 and 120 keys take the
/// same time on `long-causal`.)
const KEYS: usize = 60;

/// One number per query of a strip, aligned to a cache line so that each quarter is one aligned
/// vector load.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(super) struct Lanes([f64; STRIP]);

impl Lanes {
    const fn splat(x: f64) -> Self {
        Self([x; STRIP])
    }
}

/// Proof, found at run time, that the processor runs the strip kernel (AVX-512F with FMA).
#[derive(Clone, Copy, Debug)]
pub(super) struct StripKernel(());

impl StripKernel {
    /// The kernel, if this processor has the instructions it is written in.
    pub(super) fn detect() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma") {
            return Some(Self(()));
        }
        None
    }

    /// Output rows and `log Σ eˢ` of one task's query rows.
    pub(super) fn forward_block(self, task: QueryBlock<'_>) {
        #[cfg(target_arch = "x86_64")]
        with_scratch(self, &SCRATCH, task, run);
        #[cfg(not(target_arch = "x86_64"))]
        let _ = task;
    }

    /// `dQ` of one query block (the backward's first pass).
    pub(super) fn query_gradients(self, task: QueryGradients<'_>) {
        #[cfg(target_arch = "x86_64")]
        with_scratch(self, &BACKWARD_SCRATCH, task, backward::query_gradients);
        #[cfg(not(target_arch = "x86_64"))]
        let _ = task;
    }

    /// `dQ`, `dK` and `dV` of one kv lane (the one-pass backward).
    pub(super) fn lane_gradients(self, task: LaneGradients<'_>) {
        #[cfg(target_arch = "x86_64")]
        with_scratch(self, &BACKWARD_SCRATCH, task, backward::lane_gradients);
        #[cfg(not(target_arch = "x86_64"))]
        let _ = task;
    }

    /// `dK` and `dV` of one key block (the backward's second pass).
    pub(super) fn key_value_gradients(self, task: KeyValueGradients<'_>) {
        #[cfg(target_arch = "x86_64")]
        with_scratch(self, &BACKWARD_SCRATCH, task, backward::key_value_gradients);
        #[cfg(not(target_arch = "x86_64"))]
        let _ = task;
    }
}

/// Runs `kernel` (one of this module's AVX-512 functions) on `task` with this thread's buffers
/// from `scratch`; the `StripKernel` is the proof that the processor runs it.
#[cfg(target_arch = "x86_64")]
fn with_scratch<S: 'static, T>(
    _proof: StripKernel,
    scratch: &'static std::thread::LocalKey<std::cell::RefCell<S>>,
    task: T,
    kernel: unsafe fn(T, &mut S),
) {
    scratch.with_borrow_mut(|buffers| {
        // SAFETY: the kernels passed here require AVX-512F and FMA and nothing else; a
        // `StripKernel` exists only where `detect` found both.
        #[allow(unsafe_code)]
        unsafe {
            kernel(task, buffers)
        }
    });
}

thread_local! {
    /// Each thread's buffers, kept between calls and sized by the largest task the thread has
    /// run: `2·d` rows of 32 values per strip (16 strips at most) and one block of scores and
    /// values, about 0.56 MiB for `d = 64`. A call then allocates nothing but its output, and the memory it adds while it
    /// runs is O(T) even where the allocator hands the buffers freed by one call to the next
    /// call's output.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
    /// The same for the backward: `4·d + 124` rows of 32 values per strip of a task (4 strips
    /// at most), under 0.3 MiB for `d = 64`.
    static BACKWARD_SCRATCH: std::cell::RefCell<backward::Scratch> =
        std::cell::RefCell::new(backward::Scratch::default());
}

/// Per-thread buffers; every entry is written before it is read.
#[derive(Debug, Default)]
struct Scratch {
    /// `Qᵀ` of each strip: `d` rows of [`Lanes`] per strip.
    queries: Vec<Lanes>,
    /// Un-normalised `Oᵀ` of each strip: `d` rows per strip.
    outputs: Vec<Lanes>,
    /// Scores, then weights, of the current (key block, strip): one row per key.
    scores: Vec<Lanes>,
    /// The current block of values, by [`pack_values`].
    values: Vec<[f64; TILE]>,
    /// Running maximum `m` of each strip.
    max: Vec<Lanes>,
    /// Running normaliser `ℓ` of each strip.
    sum: Vec<Lanes>,
}

/// One (batch, head, query rows) task: queries `i0..i0 + out.len() / d` of one lane.
pub(super) struct QueryBlock<'a> {
    /// `[n, d]` output rows.
    pub out: &'a mut [f64],
    /// `[n]` `log Σ eˢ` per row (−∞ where no key was visible), where a backward needs them.
    pub lse: Option<&'a mut [f64]>,
    /// The lane's `[T_q, d]` queries, `[T_k, d]` keys and values.
    pub q: &'a [f64],
    pub k: &'a [f64],
    pub v: &'a [f64],
    pub sink: Option<f64>,
    pub dims: Dims,
    /// Batch row (for key padding) and first query row of the block.
    pub b: usize,
    pub i0: usize,
    pub vis: &'a Visibility,
}

/// The kernel (see the module docs).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn run(task: QueryBlock<'_>, s: &mut Scratch) {
    let QueryBlock { out, lse, q, k, v, sink, dims, b, i0, vis } = task;
    let Dims { t_k, d, .. } = dims;
    let n = out.len() / d;
    let strips = n.div_ceil(STRIP);
    let scale = 1.0 / (d as f64).sqrt();
    let mut lse = lse;
    s.queries.resize(strips * d, Lanes::splat(0.0));
    s.outputs.clear();
    s.outputs.resize(strips * d, Lanes::splat(0.0));
    s.scores.resize(KEYS, Lanes::splat(0.0));
    // a sink is a key with score `sink` and a zero value vector, seen by every query
    s.max.clear();
    s.max.resize(strips, Lanes::splat(sink.unwrap_or(f64::NEG_INFINITY)));
    s.sum.clear();
    s.sum.resize(strips, Lanes::splat(if sink.is_some() { 1.0 } else { 0.0 }));
    for (strip, qt) in s.queries.chunks_mut(d).enumerate() {
        // scale·Qᵀ; the lanes of a last, partial strip hold zeros and are never written out
        transpose_in(qt, q, i0 + strip * STRIP, STRIP.min(n - strip * STRIP), scale);
    }
    for j0 in (0..t_k).step_by(KEYS) {
        // the keys of the block some query of the task sees (causality); their values regrouped
        // by column tile, so that each tile reads one contiguous run
        let j_end = (j0 + KEYS).min(t_k).min(vis.query_offset + i0 + n);
        if j_end <= j0 {
            break;
        }
        if vis.block_hidden(i0, i0 + n, j0, j_end) {
            continue; // older than every query's window
        }
        pack_values(&mut s.values, &v[j0 * d..j_end * d], d);
        for strip in 0..strips {
            let Some(((a0, a1), j1)) = strip_block(vis, (i0, n), strip, j0, t_k) else {
                continue;
            };
            let w = j1 - j0;
            let qt = &s.queries[strip * d..(strip + 1) * d];
            score_tiles(&mut s.scores[..w], &k[j0 * d..j1 * d], qt);
            let scores = &mut s.scores[..w];
            if !vis.block_open(a0, a1, j0, j1) {
                hide_keys_in_rows(scores, j0, (a0, a1), vis, b, t_k);
            }
            let alpha = softmax_block(scores, &mut s.max[strip], &mut s.sum[strip]);
            // once the maxima settle (most blocks), nothing needs rescaling
            let alpha = alpha.0.iter().any(|&a| a != 1.0).then_some(alpha);
            let ot = &mut s.outputs[strip * d..(strip + 1) * d];
            weighted_packed(ot, &s.values, j_end - j0, scores, alpha);
        }
    }
    for (strip, ot) in s.outputs.chunks(d).enumerate() {
        let rows = STRIP.min(n - strip * STRIP);
        for c in 0..rows {
            let (r, sum, max) = (strip * STRIP + c, s.sum[strip].0[c], s.max[strip].0[c]);
            let row = &mut out[r * d..(r + 1) * d];
            if sum == 0.0 {
                row.fill(0.0); // no visible key: zeros, as in the explicit path
            } else {
                for (o, lanes) in row.iter_mut().zip(ot) {
                    *o = lanes.0[c] / sum;
                }
            }
            if let Some(lse) = lse.as_deref_mut() {
                lse[r] = if sum == 0.0 { f64::NEG_INFINITY } else { max + sum.ln() };
            }
        }
    }
}

/// The query rows `a0..a1` of strip `strip` of a task (rows `i0..i0 + n`), and the end `j1` of
/// the keys from `j0` on (one block at most) that some of them see; `None` when they see none.
fn strip_block(
    vis: &Visibility,
    (i0, n): (usize, usize),
    strip: usize,
    j0: usize,
    t_k: usize,
) -> Option<((usize, usize), usize)> {
    let (a0, a1) = (i0 + strip * STRIP, (i0 + (strip + 1) * STRIP).min(i0 + n));
    // causality: no query of the strip sees a key after its own position
    let j1 = (j0 + KEYS).min(t_k).min(vis.query_offset + a1);
    (j1 > j0 && !vis.block_hidden(a0, a1, j0, j1)).then_some(((a0, a1), j1))
}

/// `lanes[p].0[c] = scale · rows[(first + c)·d + p]` for the `count ≤ 32` rows from `first`
/// (`d = lanes.len()`), zeros in the other lanes.
fn transpose_in(lanes: &mut [Lanes], rows: &[f64], first: usize, count: usize, scale: f64) {
    let d = lanes.len();
    let block = &rows[first * d..(first + count) * d];
    for lane in lanes.iter_mut() {
        lane.0[count..].fill(0.0);
    }
    // row by row: each row is read once, front to back, and written down one lane
    for (c, row) in block.chunks_exact(d).enumerate() {
        for (lane, &y) in lanes.iter_mut().zip(row) {
            lane.0[c] = scale * y;
        }
    }
}

/// Sets to −∞ the entries a query does not see, where row `r` is key `j0 + r` and lane `c` is
/// query row `a0 + c` (lanes past `a1` hold no query and are never written out: the general
/// test leaves them alone, the causal one treats them like the rest). With causality alone it
/// compares positions lane by lane, without the per-entry test of windows and padding.
fn hide_keys_in_rows(rows: &mut [Lanes], j0: usize, (a0, a1): (usize, usize), vis: &Visibility, b: usize, t_k: usize) {
    if vis.window.is_none() && vis.key_padding.is_none() {
        // key j is hidden from query row i when j > offset + i: keys up to the first query's
        // position are hidden from none of the strip's lanes
        let first = vis.query_offset + a0;
        let skip = (first + 1).saturating_sub(j0).min(rows.len());
        for (j, row) in (j0 + skip..).zip(rows[skip..].iter_mut()) {
            for (c, x) in row.0.iter_mut().enumerate() {
                *x = if j > first + c { f64::NEG_INFINITY } else { *x };
            }
        }
        return;
    }
    for (j, row) in (j0..).zip(rows.iter_mut()) {
        for (c, x) in row.0.iter_mut().enumerate().take(a1 - a0) {
            if !vis.sees(b, t_k, a0 + c, j) {
                *x = f64::NEG_INFINITY;
            }
        }
    }
}

/// Sets to −∞ the entries a query does not see, where row `r` is query row `i0 + r` and lane `c`
/// is key `k0 + c`; lanes at or past `k1` (no key) too.
fn hide_queries_in_rows(
    rows: &mut [Lanes],
    i0: usize,
    (k0, k1): (usize, usize),
    vis: &Visibility,
    b: usize,
    t_k: usize,
) {
    let causal_only = vis.window.is_none() && vis.key_padding.is_none();
    for (i, row) in (i0..).zip(rows.iter_mut()) {
        if causal_only {
            if k1 >= k0 + STRIP && vis.query_offset + i >= k0 + STRIP - 1 {
                break; // this row and every later one see all 32 keys of the strip
            }
            let last = (vis.query_offset + i).min(k1.saturating_sub(1)); // the last key row i sees
            for (c, x) in row.0.iter_mut().enumerate() {
                *x = if k0 + c > last { f64::NEG_INFINITY } else { *x };
            }
        } else {
            for (c, x) in row.0.iter_mut().enumerate() {
                if k0 + c >= k1 || !vis.sees(b, t_k, i, k0 + c) {
                    *x = f64::NEG_INFINITY;
                }
            }
        }
    }
}

/// `scores[j] = K[j] · Qᵀ` (`Qᵀ` already scaled) for the key rows `k` (`[w, d]`, `w = scores.len()`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn score_tiles(scores: &mut [Lanes], k: &[f64], qt: &[Lanes]) {
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
fn score_tile<const G: usize>(tile: &mut [Lanes], keys: &[f64], qt: &[Lanes]) {
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
fn softmax_block(scores: &mut [Lanes], max: &mut Lanes, sum: &mut Lanes) -> Lanes {
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
fn pack_values(packed: &mut Vec<[f64; TILE]>, v: &[f64], d: usize) {
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
fn weighted_packed(ot: &mut [Lanes], values: &[[f64; TILE]], w: usize, weights: &[Lanes], alpha: Option<Lanes>) {
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
fn packed_tile<const G: usize>(tile: &mut [Lanes], values: &[[f64; TILE]], weights: &[Lanes], alpha: Option<Lanes>) {
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
fn weighted_tiles(ot: &mut [Lanes], v: &[f64], weights: &[Lanes]) {
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
fn weighted_tile<const G: usize>(tile: &mut [Lanes], v: &[f64], d: usize, c0: usize, weights: &[Lanes]) {
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

/// The AVX-512 operations on one [`Lanes`]: four 8-wide registers.
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::{
        __m512d, _mm512_fmadd_pd, _mm512_load_pd, _mm512_loadu_pd, _mm512_mul_pd, _mm512_set1_pd, _mm512_setzero_pd,
        _mm512_store_pd, _mm512_storeu_pd,
    };

    use super::Lanes;

    pub(super) type Wide = [__m512d; 4];

    /// Values per vector register.
    pub(super) const WIDTH: usize = 8;

    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn zero() -> __m512d {
        _mm512_setzero_pd()
    }

    /// The 8 values `values[at..at + 8]`, without a bounds check.
    ///
    /// # Safety
    /// `at + 8 <= values.len()`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    #[allow(unsafe_code)]
    pub(super) unsafe fn load_at(values: &[f64], at: usize) -> __m512d {
        debug_assert!(at + WIDTH <= values.len());
        // SAFETY: the 8 values lie in `values` (the caller's promise); no alignment is needed.
        unsafe { _mm512_loadu_pd(values.as_ptr().add(at)) }
    }

    /// Writes `values[at..at + 8]`, without a bounds check.
    ///
    /// # Safety
    /// `at + 8 <= values.len()`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    #[allow(unsafe_code)]
    pub(super) unsafe fn store_at(values: &mut [f64], at: usize, v: __m512d) {
        debug_assert!(at + WIDTH <= values.len());
        // SAFETY: as in `load_at`.
        unsafe { _mm512_storeu_pd(values.as_mut_ptr().add(at), v) }
    }

    /// `x · y + a` in one register, rounded once.
    #[inline]
    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn mul_add_one(x: f64, y: __m512d, a: __m512d) -> __m512d {
        _mm512_fmadd_pd(_mm512_set1_pd(x), y, a)
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn splat(x: f64) -> Wide {
        [_mm512_set1_pd(x); 4]
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn load(x: &Lanes) -> Wide {
        let p = x.0.as_ptr();
        // SAFETY: `Lanes` holds 32 values aligned to 64 bytes: the four aligned 8-wide loads
        // stay inside it.
        #[allow(unsafe_code)]
        unsafe {
            [_mm512_load_pd(p), _mm512_load_pd(p.add(8)), _mm512_load_pd(p.add(16)), _mm512_load_pd(p.add(24))]
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn store(v: Wide, x: &mut Lanes) {
        let p = x.0.as_mut_ptr();
        // SAFETY: as in `load`, the four aligned 8-wide stores stay inside the 32 values.
        #[allow(unsafe_code)]
        unsafe {
            for (i, v) in v.into_iter().enumerate() {
                _mm512_store_pd(p.add(8 * i), v);
            }
        }
    }

    /// `values[i]` without a bounds check: callers check once per tile instead of once per
    /// multiply-add in the innermost loop.
    ///
    /// # Safety
    /// `i < values.len()`.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) unsafe fn element(values: &[f64], i: usize) -> f64 {
        debug_assert!(i < values.len());
        // SAFETY: the caller's promise.
        unsafe { *values.get_unchecked(i) }
    }

    /// `x · y + a` in every lane, rounded once.
    #[inline]
    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn mul_add(x: f64, y: Wide, a: Wide) -> Wide {
        let x = _mm512_set1_pd(x);
        [
            _mm512_fmadd_pd(x, y[0], a[0]),
            _mm512_fmadd_pd(x, y[1], a[1]),
            _mm512_fmadd_pd(x, y[2], a[2]),
            _mm512_fmadd_pd(x, y[3], a[3]),
        ]
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn mul(x: Wide, y: Wide) -> Wide {
        [_mm512_mul_pd(x[0], y[0]), _mm512_mul_pd(x[1], y[1]), _mm512_mul_pd(x[2], y[2]), _mm512_mul_pd(x[3], y[3])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::SlidingWindow;
    use crate::attention::tiled::{block_size, forward_block as block_path, tiled_attention_on};
    use crate::nn::SplitMix64;
    use crate::{Tensor, TensorValue};

    #[derive(Clone, Default)]
    struct Case {
        t_q: usize,
        t_k: usize,
        d: usize,
        window: Option<SlidingWindow>,
        padding: bool,
        sink: Option<f64>,
    }

    fn case(t_q: usize, t_k: usize, d: usize) -> Case {
        Case { t_q, t_k, d, ..Case::default() }
    }

    /// Every query block of one lane through both paths: outputs and `log Σ eˢ` to 1e-12.
    fn compare(c: &Case, seed: u64) {
        let Some(kernel) = StripKernel::detect() else {
            eprintln!("no AVX-512 here: the strip kernel is not compared");
            return;
        };
        let mut rng = SplitMix64::new(seed);
        let mut random = |n: usize, scale: f64| (0..n).map(|_| rng.uniform(-scale, scale)).collect::<Vec<f64>>();
        let (q, k, v) = (random(c.t_q * c.d, 3.0), random(c.t_k * c.d, 3.0), random(c.t_k * c.d, 1.0));
        let dims = Dims { b: 1, h: 1, g: 1, t_q: c.t_q, t_k: c.t_k, d: c.d, block: block_size(c.t_k) };
        let vis = Visibility {
            query_offset: c.t_k - c.t_q,
            window: c.window,
            // key 0 hidden, so that the first query of a self-attention case sees nothing
            key_padding: c.padding.then(|| (0..c.t_k).map(|j| j % 5 == 0).collect()),
        };
        let mut scratch = Vec::new();
        for i0 in (0..c.t_q).step_by(dims.block) {
            let n = dims.block.min(c.t_q - i0);
            let (mut want, mut want_lse) = (vec![0.0; n * c.d], vec![0.0; n]);
            block_path(&mut want, &mut want_lse, &q, &k, &v, c.sink, dims, 0, i0, &vis, &mut scratch).unwrap();
            let (mut got, mut got_lse) = (vec![f64::NAN; n * c.d], vec![f64::NAN; n]);
            let task = QueryBlock {
                out: &mut got,
                lse: Some(&mut got_lse),
                q: &q,
                k: &k,
                v: &v,
                sink: c.sink,
                dims,
                b: 0,
                i0,
                vis: &vis,
            };
            kernel.forward_block(task);
            for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "output {i} of block {i0}: {x} vs {y}");
            }
            for (i, (x, y)) in got_lse.iter().zip(&want_lse).enumerate() {
                let same = x == y || (x - y).abs() <= 1e-12 * (1.0 + y.abs());
                assert!(same, "log-sum-exp {i} of block {i0}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn strips_equal_the_block_path_for_head_widths_around_the_register_tile() {
        // tiles of 6 columns and 6 keys: widths below, at and past a tile, and the benchmarks' 32 and 64
        for (seed, d) in [1, 2, 5, 6, 7, 12, 13, 32, 64, 65].into_iter().enumerate() {
            compare(&case(70, 70, d), seed as u64);
        }
    }

    #[test]
    fn strips_equal_the_block_path_for_partial_strips_and_key_blocks() {
        // lengths that leave partial strips (32 queries), key blocks (60 keys) and query blocks
        for (seed, t) in [1, 2, 31, 32, 33, 59, 61, 97, 130].into_iter().enumerate() {
            compare(&case(t, t, 8), 100 + seed as u64);
        }
        // queries at the end of a longer stream (chunked prefill, decode)
        compare(&case(1, 75, 16), 120);
        compare(&case(40, 300, 16), 121);
        // long sequences: query blocks of 128
        compare(&case(150, 2100, 8), 122);
    }

    #[test]
    fn strips_equal_the_block_path_with_windows_padding_and_sinks() {
        let mut c = case(140, 140, 9);
        c.window = Some(SlidingWindow::Exclusive(37));
        compare(&c, 200);
        c.window = Some(SlidingWindow::Inclusive(64));
        compare(&c, 201);
        // the first query sees only the padded key 0: its row is zeros with log-sum-exp −∞
        let mut c = case(70, 70, 7);
        c.padding = true;
        compare(&c, 202);
        c.sink = Some(0.7);
        compare(&c, 203);
        c.window = Some(SlidingWindow::Exclusive(3));
        c.sink = Some(-40.0);
        compare(&c, 204);
        // a window over a long stream, the last queries only (chunked prefill, decode): the key
        // blocks older than every window are skipped
        let mut c = case(3, 400, 8);
        c.window = Some(SlidingWindow::Exclusive(50));
        compare(&c, 205);
        c.t_q = 1;
        compare(&c, 206);
    }

    /// The whole operation on the strip kernel and on block products: outputs and the gradients
    /// of `q`, `k`, `v` and the sinks, to 1e-12.
    fn compare_op(shape: [usize; 6], vis: &Visibility, sinks: bool, seed: u64) {
        let Some(kernel) = StripKernel::detect() else {
            eprintln!("no AVX-512 here: the strip kernel is not compared");
            return;
        };
        let [b, h, g, t_q, t_k, d] = shape;
        let mut rng = SplitMix64::new(seed);
        let mut leaf = |dims: &[usize], scale: f64| {
            let n = dims.iter().product();
            let values = (0..n).map(|_| rng.uniform(-scale, scale)).collect();
            TensorValue::leaf(Tensor::new(dims, values).unwrap(), true)
        };
        let (q, k, v) = (leaf(&[b, h, t_q, d], 2.0), leaf(&[b, g, t_k, d], 2.0), leaf(&[b, g, t_k, d], 1.0));
        let s = sinks.then(|| leaf(&[h], 1.0));
        let upstream = leaf(&[b, h, t_q, d], 1.0).value().unwrap();
        let run = |kernel| {
            let out = tiled_attention_on(&q, &k, &v, s.as_ref(), vis, kernel).unwrap();
            let grads = out.backward_with(&upstream).unwrap();
            let mut all =
                vec![out.value().unwrap(), grads.get_or_zeros(&q), grads.get_or_zeros(&k), grads.get_or_zeros(&v)];
            all.extend(s.as_ref().map(|s| grads.get_or_zeros(s)));
            all
        };
        for (name, (x, y)) in
            ["output", "dq", "dk", "dv", "dsinks"].iter().zip(run(Some(kernel)).iter().zip(&run(None)))
        {
            for (i, (x, y)) in x.as_slice().iter().zip(y.as_slice()).enumerate() {
                assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{name}[{i}] of {shape:?}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn the_strip_backward_equals_the_block_backward_in_one_pass_and_in_two() {
        let causal = |t_q: usize, t_k: usize| Visibility { query_offset: t_k - t_q, ..Visibility::default() };
        // 8 kv lanes or more: one pass per kv lane, with groups of 1 and 2 query heads
        compare_op([2, 4, 4, 70, 70, 32], &causal(70, 70), false, 300);
        compare_op([4, 4, 2, 33, 33, 7], &causal(33, 33), true, 301);
        compare_op([8, 1, 1, 61, 130, 65], &causal(61, 130), false, 302);
        // fewer: two passes
        compare_op([1, 2, 1, 97, 97, 64], &causal(97, 97), true, 303);
        compare_op([1, 3, 3, 130, 130, 13], &causal(130, 130), false, 304);
        compare_op([1, 2, 2, 1, 40, 6], &causal(1, 40), false, 305);
        // windows and padding (a query whose only key is padded: zero gradients)
        let mut vis = causal(70, 70);
        vis.window = Some(SlidingWindow::Exclusive(23));
        compare_op([2, 4, 4, 70, 70, 5], &vis, true, 306);
        compare_op([1, 2, 1, 70, 70, 5], &vis, false, 307);
        vis.window = None;
        vis.key_padding = Some((0..140).map(|j| j % 5 == 0).collect());
        compare_op([2, 4, 4, 70, 70, 12], &vis, true, 308);
        compare_op([2, 2, 2, 70, 70, 12], &vis, false, 309);
    }

    #[test]
    fn a_sink_keeps_the_row_of_a_query_that_sees_no_key() {
        let Some(kernel) = StripKernel::detect() else {
            eprintln!("no AVX-512 here: the strip kernel is not compared");
            return;
        };
        let (q, k, v) = (vec![1.0; 3], vec![2.0; 3], vec![5.0; 3]);
        let dims = Dims { b: 1, h: 1, g: 1, t_q: 1, t_k: 1, d: 3, block: block_size(1) };
        let vis = Visibility { key_padding: Some(vec![true]), ..Visibility::default() };
        let (mut out, mut lse) = (vec![f64::NAN; 3], vec![f64::NAN]);
        let task = QueryBlock {
            out: &mut out,
            lse: Some(&mut lse),
            q: &q,
            k: &k,
            v: &v,
            sink: Some(0.25),
            dims,
            b: 0,
            i0: 0,
            vis: &vis,
        };
        kernel.forward_block(task);
        // all the mass goes to the sink, whose value vector is zero
        assert_eq!(out, [0.0; 3]);
        assert_eq!(lse, [0.25]);
    }
}
