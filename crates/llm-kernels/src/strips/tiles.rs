//! The register tiles of the strip kernel: 6 key rows (scores) or 6 value columns (outputs)
//! × one chunk of the 32 queries (all 32 on AVX-512, 8 on AVX2 and portable), and the online
//! softmax of one block of scores across the lanes. Every function here is generic over the
//! [`Isa`] and `#[inline(always)]`, so it is compiled into each target's kernel; the three loops
//! over whole blocks ([`score_tiles`], [`weighted_packed`], [`weighted_tiles`]) run in functions
//! of their own ([`Isa::outline`]), which keeps their registers free of the caller's state
//! (long-causal 6–9 % faster than with everything inlined into one function).

use super::{Lanes, STRIP, TILE};
use crate::exp::{exp_weight_vectors, exp_weight_vectors_in_range};
use crate::isa::{Isa, Kernel};

/// The registers of one chunk of a row of [`Lanes`]: `I::TILE_VECTORS` of them (at most 4)
/// cover the lanes `c0..c0 + chunk::<I>()`.
type Chunk<I> = [<I as Isa>::V; 4];

/// Lanes per register chunk: 32 on AVX-512 (four registers, the whole row), 8 on AVX2 and on the
/// portable target.
#[inline(always)]
pub(super) const fn chunk<I: Isa>() -> usize {
    const { assert!(STRIP.is_multiple_of(I::WIDTH * I::TILE_VECTORS) && I::TILE_VECTORS <= 4) };
    I::WIDTH * I::TILE_VECTORS
}

/// The registers of lanes `c0..c0 + chunk::<I>()` of `x` (`c0` a multiple of the chunk).
#[inline(always)]
pub(super) fn load<I: Isa>(isa: I, x: &Lanes, c0: usize) -> Chunk<I> {
    let mut y = [isa.splat(0.0); 4];
    if c0 + chunk::<I>() <= STRIP {
        for (v, y) in y.iter_mut().enumerate().take(I::TILE_VECTORS) {
            // SAFETY: c0 + (v + 1)·WIDTH ≤ c0 + chunk ≤ STRIP = x.0.len() (checked above).
            #[allow(unsafe_code)]
            let loaded = unsafe { isa.load(&x.0, c0 + v * I::WIDTH) };
            *y = loaded;
        }
    }
    y
}

/// Writes the registers of lanes `c0..c0 + chunk::<I>()` of `x`.
#[inline(always)]
pub(super) fn store<I: Isa>(isa: I, v: Chunk<I>, x: &mut Lanes, c0: usize) {
    if c0 + chunk::<I>() <= STRIP {
        for (i, &v) in v.iter().enumerate().take(I::TILE_VECTORS) {
            // SAFETY: as in `load`.
            #[allow(unsafe_code)]
            unsafe {
                isa.store(&mut x.0, c0 + i * I::WIDTH, v);
            }
        }
    }
}

/// `x · y + a` in every lane of a chunk, rounded once.
#[inline(always)]
fn mul_add<I: Isa>(isa: I, x: f64, y: &Chunk<I>, a: &mut Chunk<I>) {
    let x = isa.splat(x);
    for (a, &y) in a.iter_mut().zip(y).take(I::TILE_VECTORS) {
        *a = isa.mul_add(x, y, *a);
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

/// `scores[j] = K[j] · Qᵀ` (`Qᵀ` already scaled) for the `w = scores.len()` key rows of `k`, row
/// `j` at `k[j·stride..j·stride + d]` (`stride = d` for rows side by side; wider where each row
/// is one head's part of a longer row).
#[inline(always)]
pub(super) fn score_tiles<I: Isa>(isa: I, scores: &mut [Lanes], k: &[f64], stride: usize, qt: &[Lanes]) {
    isa.outline(ScoreTiles { scores, k, stride, qt });
}

/// [`score_tiles`] as a [`Kernel`], compiled in a function of its own per target.
struct ScoreTiles<'a> {
    scores: &'a mut [Lanes],
    k: &'a [f64],
    stride: usize,
    qt: &'a [Lanes],
}

impl Kernel for ScoreTiles<'_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) {
        score_tiles_body(isa, self.scores, self.k, self.stride, self.qt);
    }
}

#[inline(always)]
fn score_tiles_body<I: Isa>(isa: I, scores: &mut [Lanes], k: &[f64], stride: usize, qt: &[Lanes]) {
    let full = scores.len() - scores.len() % TILE;
    for (t, tile) in scores[..full].chunks_exact_mut(TILE).enumerate() {
        score_tile::<I, TILE>(isa, tile, rows_from(k, t * TILE, stride), stride, qt);
    }
    let (tile, keys) = (&mut scores[full..], rows_from(k, full, stride));
    match tile.len() {
        1 => score_tile::<I, 1>(isa, tile, keys, stride, qt),
        2 => score_tile::<I, 2>(isa, tile, keys, stride, qt),
        3 => score_tile::<I, 3>(isa, tile, keys, stride, qt),
        4 => score_tile::<I, 4>(isa, tile, keys, stride, qt),
        5 => score_tile::<I, 5>(isa, tile, keys, stride, qt),
        _ => {}
    }
}

/// The rows of `x` from row `row` on, rows `stride` values apart: empty where they begin past
/// the end (the row after the last one of a strided view may), or where `row · stride` passes
/// `usize::MAX` (a stride from a caller may be anything).
#[inline(always)]
pub(super) fn rows_from(x: &[f64], row: usize, stride: usize) -> &[f64] {
    row.checked_mul(stride).and_then(|start| x.get(start..)).unwrap_or(&[])
}

/// Whether `G` rows of `d` values, `stride` apart, fit in `len` values (checked arithmetic: a
/// stride from a caller may be anything, and a product that wrapped would pass a plain test).
#[inline(always)]
pub(super) const fn rows_fit<const G: usize>(len: usize, d: usize, stride: usize) -> bool {
    if G == 0 {
        return true;
    }
    match (G - 1).checked_mul(stride) {
        Some(start) => match start.checked_add(d) {
            Some(end) => end <= len,
            None => false,
        },
        None => false,
    }
}

/// `G` score rows, a chunk of lanes at a time in `G` × `I::TILE_VECTORS` registers: per key
/// element `p`, `G` scalars times `Qᵀ[p]`.
#[inline(always)]
pub(super) fn score_tile<I: Isa, const G: usize>(
    isa: I,
    tile: &mut [Lanes],
    keys: &[f64],
    stride: usize,
    qt: &[Lanes],
) {
    let d = qt.len();
    if tile.len() < G || stride < d || !rows_fit::<G>(keys.len(), d, stride) {
        return; // callers pass whole tiles; this check lets the loop below read without bounds checks
    }
    for c0 in (0..STRIP).step_by(chunk::<I>()) {
        let mut acc = [[isa.splat(0.0); 4]; G];
        for (p, query) in qt.iter().enumerate() {
            let y = load(isa, query, c0);
            for (g, a) in acc.iter_mut().enumerate() {
                // SAFETY: g < G and p < d ≤ stride, so g·stride + p < (G − 1)·stride + d ≤
                // keys.len() (checked above).
                #[allow(unsafe_code)]
                let x = unsafe { element(keys, g * stride + p) };
                mul_add(isa, x, &y, a);
            }
        }
        for (out, a) in tile.iter_mut().zip(acc) {
            store(isa, a, out, c0);
        }
    }
}

/// Folds one block of scores into the running maximum and normaliser of a strip, turning the
/// scores into weights `e^{s − M}`; returns each lane's rescale factor `α = e^{m − M}`.
///
/// The pass that finds each lane's maximum also finds its minimum: where no lane's scores lie
/// more than 708 below its maximum (most blocks; a hidden key's −∞ is one that does), the
/// exponentials skip their clamp at −708 and the zeros below it
/// ([`exp_weight_vectors_in_range`]: the same bits; a NaN gives NaN either way).
#[inline(always)]
pub(super) fn softmax_block<I: Isa>(isa: I, scores: &mut [Lanes], max: &mut Lanes, sum: &mut Lanes) -> Lanes {
    let mut top = *max;
    let mut bottom = Lanes::splat(f64::INFINITY);
    for row in scores.iter() {
        for ((t, b), &x) in top.0.iter_mut().zip(bottom.0.iter_mut()).zip(&row.0) {
            *t = if x > *t { x } else { *t }; // NaN never wins; it still poisons the weights
            *b = if x < *b { x } else { *b };
        }
    }
    // e^{m − M}: exactly 1 when the maximum stays, 0 before the first visible key
    let mut alpha = exp_shifted(isa, max, &top);
    let mut shift = Lanes::splat(0.0);
    for c in 0..STRIP {
        let (m, t) = (max.0[c], top.0[c]);
        alpha.0[c] = if m == f64::NEG_INFINITY { 0.0 } else { alpha.0[c] };
        // a lane that has seen no key yet keeps −∞ scores, whose weights are e^{−∞} = 0
        shift.0[c] = if t == f64::NEG_INFINITY { 0.0 } else { t };
    }
    // the smallest score's exponent is the smallest of the lane (subtraction keeps the order)
    let mut in_range = true;
    for c in 0..STRIP {
        in_range &= bottom.0[c] - shift.0[c] >= -708.0;
    }
    #[cfg(test)]
    if in_range {
        tests::UNCLAMPED_BLOCKS.with(|count| count.set(count.get() + 1));
    }
    let total = if in_range {
        exp_rows_summed::<I, true>(isa, scores, &shift)
    } else {
        exp_rows_summed::<I, false>(isa, scores, &shift)
    };
    for c in 0..STRIP {
        sum.0[c] = sum.0[c] * alpha.0[c] + total.0[c];
    }
    *max = top;
    alpha
}

/// Registers of lanes per step of the exponentials: four, so that their polynomials overlap
/// ([`exp_weight_vectors`]).
const EXP_VECTORS: usize = 4;

/// The [`EXP_VECTORS`] registers of lanes `c0..` of `x`.
///
/// # Safety
/// `c0 + EXP_VECTORS · WIDTH ≤ STRIP`.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn load_exp_lanes<I: Isa>(isa: I, x: &Lanes, c0: usize) -> [I::V; EXP_VECTORS] {
    // SAFETY: the caller's promise.
    std::array::from_fn(|v| unsafe { isa.load(&x.0, c0 + v * I::WIDTH) })
}

/// Writes `v` to lanes `c0..` of `x`.
///
/// # Safety
/// As [`load_exp_lanes`].
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn store_exp_lanes<I: Isa>(isa: I, v: [I::V; EXP_VECTORS], x: &mut Lanes, c0: usize) {
    for (i, v) in v.into_iter().enumerate() {
        // SAFETY: the caller's promise.
        unsafe { isa.store(&mut x.0, c0 + i * I::WIDTH, v) };
    }
}

/// The steps `c0` of [`EXP_VECTORS`] registers that cover a row of lanes.
#[inline(always)]
fn exp_steps<I: Isa>() -> std::iter::StepBy<std::ops::Range<usize>> {
    const { assert!(STRIP.is_multiple_of(EXP_VECTORS * I::WIDTH)) };
    (0..STRIP).step_by(EXP_VECTORS * I::WIDTH)
}

/// `row ← e^{row − shift}` for every row, returning their sum in each lane (added in row order).
///
/// Four registers of lanes at a time through all the rows, so that the sums stay in registers
/// (summed lane by lane over [`Lanes`], the compiler rebuilt each row's registers from pieces of
/// the values it had just stored).
#[inline(always)]
fn exp_rows_summed<I: Isa, const IN_RANGE: bool>(isa: I, scores: &mut [Lanes], shift: &Lanes) -> Lanes {
    let mut total = Lanes::splat(0.0);
    for c0 in exp_steps::<I>() {
        #[allow(unsafe_code)]
        // SAFETY: `exp_steps` keeps every step within the row.
        unsafe {
            let shift = load_exp_lanes(isa, shift, c0);
            let mut sums = [isa.splat(0.0); EXP_VECTORS];
            for row in scores.iter_mut() {
                let x = load_exp_lanes(isa, row, c0);
                let x = std::array::from_fn(|v| isa.sub(x[v], shift[v]));
                let e = if IN_RANGE { exp_weight_vectors_in_range(isa, x) } else { exp_weight_vectors(isa, x) };
                store_exp_lanes(isa, e, row, c0);
                for (s, e) in sums.iter_mut().zip(e) {
                    *s = isa.add(*s, e);
                }
            }
            store_exp_lanes(isa, sums, &mut total, c0);
        }
    }
    total
}

/// `e^{x − shift}` in every lane of a row (`exp_weight` of each, bit for bit), four registers
/// at a time so that their polynomials overlap ([`exp_weight_vectors`]).
#[inline(always)]
pub(super) fn exp_shifted<I: Isa>(isa: I, x: &Lanes, shift: &Lanes) -> Lanes {
    let mut y = Lanes::splat(0.0);
    for c0 in exp_steps::<I>() {
        #[allow(unsafe_code)]
        // SAFETY: `exp_steps` keeps every step within the row.
        unsafe {
            let (x, shift) = (load_exp_lanes(isa, x, c0), load_exp_lanes(isa, shift, c0));
            let e = exp_weight_vectors(isa, std::array::from_fn(|v| isa.sub(x[v], shift[v])));
            store_exp_lanes(isa, e, &mut y, c0);
        }
    }
    y
}

/// The `w` value rows of `v` (row `j` at `v[j·stride..j·stride + d]`) regrouped by tiles of
/// [`TILE`] columns: tile `t` holds, for each of the `w` keys, its values in columns
/// `t·TILE..(t+1)·TILE` (zeros past `d`).
pub(super) fn pack_values(packed: &mut Vec<[f64; TILE]>, v: &[f64], (w, d, stride): (usize, usize, usize)) {
    if stride != d {
        // rows apart: ask for all of them first, so that their loads overlap
        crate::fetch::fetch_rows(v, (0, w), d, stride);
    }
    // every entry is written below; row by row, each row read once from front to back
    packed.resize(d.div_ceil(TILE) * w, [0.0; TILE]);
    for j in 0..w {
        let row = &v[j * stride..j * stride + d];
        let mut values = row.chunks_exact(TILE);
        for (t, values) in (&mut values).enumerate() {
            packed[t * w + j].copy_from_slice(values); // a fixed length: no call to `memmove`
        }
        let rest = values.remainder();
        if !rest.is_empty() {
            let tile = &mut packed[d / TILE * w + j];
            *tile = [0.0; TILE];
            for (t, &x) in tile.iter_mut().zip(rest) {
                *t = x;
            }
        }
    }
}

/// [`weighted_tiles`] over values from [`pack_values`] (`w ≥ weights.len()` keys per tile).
#[inline(always)]
pub(super) fn weighted_packed<I: Isa>(
    isa: I,
    ot: &mut [Lanes],
    values: &[[f64; TILE]],
    w: usize,
    weights: &[Lanes],
    alpha: Option<Lanes>,
) {
    isa.outline(WeightedPacked { ot, values, w, weights, alpha });
}

/// [`weighted_packed`] as a [`Kernel`], compiled in a function of its own per target.
struct WeightedPacked<'a> {
    ot: &'a mut [Lanes],
    values: &'a [[f64; TILE]],
    w: usize,
    weights: &'a [Lanes],
    alpha: Option<Lanes>,
}

impl Kernel for WeightedPacked<'_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) {
        let WeightedPacked { ot, values, w, weights, alpha } = self;
        let full = ot.len() - ot.len() % TILE;
        for (tile, values) in ot[..full].chunks_exact_mut(TILE).zip(values.chunks_exact(w)) {
            packed_tile::<I, TILE>(isa, tile, values, weights, alpha);
        }
        let (tile, values) = (&mut ot[full..], &values[full / TILE * w..]);
        match tile.len() {
            1 => packed_tile::<I, 1>(isa, tile, values, weights, alpha),
            2 => packed_tile::<I, 2>(isa, tile, values, weights, alpha),
            3 => packed_tile::<I, 3>(isa, tile, values, weights, alpha),
            4 => packed_tile::<I, 4>(isa, tile, values, weights, alpha),
            5 => packed_tile::<I, 5>(isa, tile, values, weights, alpha),
            _ => {}
        }
    }
}

/// `G` output columns, a chunk of lanes at a time in `G` × `I::TILE_VECTORS` registers: per key,
/// `G` scalars of its packed values times its weights.
#[inline(always)]
pub(super) fn packed_tile<I: Isa, const G: usize>(
    isa: I,
    tile: &mut [Lanes],
    values: &[[f64; TILE]],
    weights: &[Lanes],
    alpha: Option<Lanes>,
) {
    for c0 in (0..STRIP).step_by(chunk::<I>()) {
        let mut acc = [[isa.splat(0.0); 4]; G];
        for (a, o) in acc.iter_mut().zip(tile.iter()) {
            *a = load(isa, o, c0);
            if let Some(alpha) = &alpha {
                let alpha = load(isa, alpha, c0);
                for (a, &s) in a.iter_mut().zip(&alpha).take(I::TILE_VECTORS) {
                    *a = isa.mul(*a, s);
                }
            }
        }
        for (weight, value) in weights.iter().zip(values) {
            let y = load(isa, weight, c0);
            for (a, &x) in acc.iter_mut().zip(value) {
                mul_add(isa, x, &y, a);
            }
        }
        for (out, a) in tile.iter_mut().zip(acc) {
            store(isa, a, out, c0);
        }
    }
}

/// `Oᵀ[c] += Σ_j V[j,c] · weights[j]` for every value column `c`, row `j` of `V` at
/// `v[j·stride..j·stride + d]` (`d = ot.len()`, `w = weights.len()` rows), a tile of [`TILE`]
/// columns at a time.
#[inline(always)]
pub(super) fn weighted_tiles<I: Isa>(isa: I, ot: &mut [Lanes], v: &[f64], stride: usize, weights: &[Lanes]) {
    isa.outline(WeightedTiles { ot, v, stride, weights });
}

/// [`weighted_tiles`] as a [`Kernel`], compiled in a function of its own per target.
struct WeightedTiles<'a> {
    ot: &'a mut [Lanes],
    v: &'a [f64],
    stride: usize,
    weights: &'a [Lanes],
}

impl Kernel for WeightedTiles<'_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) {
        weighted_tiles_body(isa, self.ot, (self.v, self.stride), self.weights);
    }
}

#[inline(always)]
fn weighted_tiles_body<I: Isa>(isa: I, ot: &mut [Lanes], v: (&[f64], usize), weights: &[Lanes]) {
    let d = ot.len();
    let full = d - d % TILE;
    for (c0, tile) in (0..full).step_by(TILE).zip(ot[..full].chunks_exact_mut(TILE)) {
        weighted_tile::<I, TILE>(isa, tile, v, c0, weights);
    }
    let tile = &mut ot[full..];
    match tile.len() {
        1 => weighted_tile::<I, 1>(isa, tile, v, full, weights),
        2 => weighted_tile::<I, 2>(isa, tile, v, full, weights),
        3 => weighted_tile::<I, 3>(isa, tile, v, full, weights),
        4 => weighted_tile::<I, 4>(isa, tile, v, full, weights),
        5 => weighted_tile::<I, 5>(isa, tile, v, full, weights),
        _ => {}
    }
}

/// `G` output columns `c0..c0 + G`, a chunk of lanes at a time in `G` × `I::TILE_VECTORS`
/// registers: per key, `G` scalars times its weights. `v` holds rows `stride` apart.
#[inline(always)]
pub(super) fn weighted_tile<I: Isa, const G: usize>(
    isa: I,
    tile: &mut [Lanes],
    (v, stride): (&[f64], usize),
    c0: usize,
    weights: &[Lanes],
) {
    let w = weights.len();
    // callers pass whole rows; this check (its arithmetic checked: a stride from a caller may be
    // anything) lets the loop below read without bounds checks
    let fits = w > 0
        && c0.checked_add(G).is_some_and(|end| end <= stride)
        && (w - 1).checked_mul(stride).and_then(|start| start.checked_add(c0 + G)).is_some_and(|end| end <= v.len());
    if !fits {
        return;
    }
    for l0 in (0..STRIP).step_by(chunk::<I>()) {
        let mut acc = [[isa.splat(0.0); 4]; G];
        for (a, o) in acc.iter_mut().zip(tile.iter()) {
            *a = load(isa, o, l0);
        }
        for (j, weight) in weights.iter().enumerate() {
            let y = load(isa, weight, l0);
            for (g, a) in acc.iter_mut().enumerate() {
                // SAFETY: j < w and g < G, so the index is below (w − 1)·stride + c0 + G ≤
                // v.len() (checked above).
                #[allow(unsafe_code)]
                let x = unsafe { element(v, j * stride + c0 + g) };
                mul_add(isa, x, &y, a);
            }
        }
        for (out, a) in tile.iter_mut().zip(acc) {
            store(isa, a, out, l0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Target;

    thread_local! {
        /// Blocks whose exponentials skipped the clamp on this thread: the test below reads it to
        /// check that the fast path runs where it may, which the weights alone cannot show (both
        /// paths give the same bits).
        pub(super) static UNCLAMPED_BLOCKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// [`softmax_block`] on a copy of `scores`, from a strip that has seen no key yet.
    struct Block(Vec<Lanes>);

    impl Kernel for Block {
        type Output = (Vec<Lanes>, Lanes, Lanes);
        #[inline(always)]
        fn run<I: Isa>(self, isa: I) -> (Vec<Lanes>, Lanes, Lanes) {
            let (mut scores, mut max, mut sum) = (self.0, Lanes::splat(f64::NEG_INFINITY), Lanes::splat(0.0));
            softmax_block(isa, &mut scores, &mut max, &mut sum);
            (scores, max, sum)
        }
    }

    #[test]
    fn a_block_of_weights_is_the_exponential_of_each_score_on_both_paths_and_every_target() {
        // scores within 708 of each lane's maximum (also exactly 708 below, the edge, and a NaN,
        // which gives NaN on both) take the path without the clamp; a score 708.25, 708.5 or
        // 1e300 below, a hidden key and an infinite score send the block through the clamped
        // path: the same weights either way
        let rows = 60;
        let base: Vec<Lanes> = (0..rows)
            .map(|j| Lanes(std::array::from_fn(|c| (((j * 37 + c * 11) % 97) as f64 - 48.0) * 0.731)))
            .collect();
        let with = |row: usize, lane: usize, x: f64| {
            let mut s = base.clone();
            s[row].0[lane] = x;
            s
        };
        let top = |lane: usize| base.iter().map(|r| r.0[lane]).fold(f64::NEG_INFINITY, f64::max);
        let cases = [
            ("in range", base.clone()),
            ("708 below", with(5, 3, top(3) - 708.0)),
            ("708.25 below", with(7, 9, top(9) - 708.25)),
            ("708.5 below", with(7, 9, top(9) - 708.5)),
            ("1e300 below", with(2, 31, -1e300)),
            ("hidden", with(0, 0, f64::NEG_INFINITY)),
            ("a whole lane hidden", {
                let mut s = base.clone();
                s.iter_mut().for_each(|r| r.0[17] = f64::NEG_INFINITY);
                s
            }),
            ("NaN", with(11, 4, f64::NAN)),
            ("+∞", with(3, 6, f64::INFINITY)),
        ];
        let unclamped = || UNCLAMPED_BLOCKS.with(std::cell::Cell::get);
        for (name, scores) in cases {
            // the lanes' exponents all within [−708, 0] or NaN: the path without the clamp
            let fast = matches!(name, "in range" | "708 below" | "NaN");
            for target in Target::available() {
                let before = unclamped();
                let (weights, max, sum) = crate::isa::run(target, Block(scores.clone()));
                assert_eq!(unclamped() - before, usize::from(fast), "{name}, {target}: which path");
                for c in 0..STRIP {
                    let lane_max =
                        scores.iter().map(|r| r.0[c]).fold(f64::NEG_INFINITY, |m, x| if x > m { x } else { m });
                    assert_eq!(max.0[c].to_bits(), lane_max.to_bits(), "{name}, {target}, lane {c}");
                    let shift = if lane_max == f64::NEG_INFINITY { 0.0 } else { lane_max };
                    let mut total = 0.0;
                    for (j, (got, row)) in weights.iter().zip(&scores).enumerate() {
                        let x = row.0[c] - shift;
                        let want = if x < -708.0 { 0.0 } else { crate::exp::exp(x) };
                        let (got, what) = (got.0[c], format!("{name}, {target}, lane {c}, row {j}: {x}"));
                        assert!(got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(), "{what}");
                        total += want;
                    }
                    let same = sum.0[c].to_bits() == total.to_bits() || sum.0[c].is_nan() && total.is_nan();
                    assert!(same, "{name}, {target}, lane {c}: sum {} vs {total}", sum.0[c]);
                }
            }
        }
    }
}
