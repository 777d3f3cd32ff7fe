//! One query row of a decoding step (or the query rows of one kv head): scores against the
//! cached keys, softmax, weighted values.
//!
//! ```text
//! s_j = scale · q · k_j      for every kept key j the query sees (absolute positions), else −∞
//! p   = softmax(s ++ [sink])  the sink, if any, has a zero value vector
//! o   = Σ_j p_j v_j
//! ```
//!
//! The teaching crate's `attention::decode::attend_row_naive` says it in ten lines; [`attend_row`]
//! is the same computation arranged for speed — decoding is bound by reading the cache, so it
//! scores several stretches of keys side by side — and the tests there hold the two together.
//! [`attend_rows`] attends several query rows over the same keys and values (the query heads of
//! one key/value head, and the tokens of a step), reading each key and value row once for all of
//! them; each row gets the bits [`attend_row`] gives it alone.

use thiserror::Error;

use crate::exp::{exp_inline, exp_shifted_sum_inline};
use crate::isa::{self, Isa, Kernel};
use crate::target::Target;
use crate::visibility::visible;

/// `Σ aᵢ·bᵢ` with eight running partial sums combined in a fixed order: vectorisable, and the same
/// result on every run.
#[inline(always)]
fn dot<I: Isa>(isa: I, a: &[f64], b: &[f64]) -> f64 {
    dots::<I, 1>(isa, a, [b])[0]
}

/// `R` dot products of `a` with `rows`, each summed exactly as [`dot`] sums it, computed side by
/// side: the independent chains of additions overlap, and several rows stream from memory at once
/// (one dot product at a time waits on its own additions and reads too little to keep the memory
/// busy — decoding is bound by reading the cache).
#[inline(always)]
fn dots<I: Isa, const R: usize>(isa: I, a: &[f64], rows: [&[f64]; R]) -> [f64; R] {
    let mut products = [0.0; R];
    let mut r = 0;
    if I::WIDTH == 8 {
        while r + WIDE_ROWS_SIDE_BY_SIDE <= R {
            let group = std::array::from_fn::<_, WIDE_ROWS_SIDE_BY_SIDE, _>(|g| rows[r + g]);
            products[r..r + WIDE_ROWS_SIDE_BY_SIDE].copy_from_slice(&dots_side_by_side(isa, a, group));
            r += WIDE_ROWS_SIDE_BY_SIDE;
        }
    }
    while r + ROWS_SIDE_BY_SIDE <= R {
        let group = std::array::from_fn::<_, ROWS_SIDE_BY_SIDE, _>(|g| rows[r + g]);
        products[r..r + ROWS_SIDE_BY_SIDE].copy_from_slice(&dots_side_by_side(isa, a, group));
        r += ROWS_SIDE_BY_SIDE;
    }
    for r in r..R {
        products[r] = dots_side_by_side(isa, a, [rows[r]])[0];
    }
    products
}

/// Rows whose dot products [`dots`] runs in one loop where a row's eight sums take more than one
/// register: their sums fill eight AVX2 registers, leaving registers for the loads (AVX-512 takes
/// [`WIDE_ROWS_SIDE_BY_SIDE`]).
const ROWS_SIDE_BY_SIDE: usize = 4;

/// Rows side by side where a register holds a row's eight sums (AVX-512): eight chains of
/// additions in flight rather than four. 48 queries over 4112 keys took 10.6 ns a query and key
/// on one thread where four rows took 12.0, and the three query heads of a kv head over 256 keys
/// 12.1 against 13.2 (`docs/performance.md`, "2026-12-06, fourth").
const WIDE_ROWS_SIDE_BY_SIDE: usize = 8;

/// The `G` dot products of [`dots`] in one loop. Lane `i` of a row's eight sums adds `aₖ·bₖ` for
/// `k ≡ i (mod 8)` in order, each in one fused multiply-add (rounded once: half the operations of
/// a product and a sum, on the two ports every 512-bit operation shares; 48 queries over 4112
/// keys took 6.2 ns a pair on one thread where the two took 7.4–7.8, `docs/performance.md`,
/// "2026-12-06, fifth"); then `((s₀+s₁)+(s₂+s₃))+((s₄+s₅)+(s₆+s₇))`, plus the plain products
/// past the last whole eight. The lanes are the target's registers (one AVX-512 register, two AVX2
/// ones): left to itself, the compiler packed them into 128-bit registers two lanes apart, and
/// the scores took longer than the values.
#[inline(always)]
fn dots_side_by_side<I: Isa, const G: usize>(isa: I, a: &[f64], rows: [&[f64]; G]) -> [f64; G] {
    // the loads and stores below take `at + WIDTH ≤ 8` on this
    const { assert!(I::WIDTH <= 8 && 8 % I::WIDTH == 0) };
    let (body, tail) = a.as_chunks::<8>();
    let mut bodies: [&[[f64; 8]]; G] = [&[]; G];
    let mut tails: [&[f64]; G] = [&[]; G];
    for ((b, t), row) in bodies.iter_mut().zip(tails.iter_mut()).zip(rows) {
        let (row_body, row_tail) = row[..a.len()].as_chunks::<8>();
        (*b, *t) = (&row_body[..body.len()], row_tail);
    }
    let mut lanes = [[isa.splat(0.0); 8]; G];
    for (k, x) in body.iter().enumerate() {
        for (lanes, b) in lanes.iter_mut().zip(&bodies) {
            let y = &b[k];
            for (v, at) in (0..8).step_by(I::WIDTH).enumerate() {
                // SAFETY: at + WIDTH ≤ 8, the length of `x` and `y` (WIDTH divides 8).
                #[allow(unsafe_code)]
                let (x, y) = unsafe { (isa.load(x, at), isa.load(y, at)) };
                lanes[v] = isa.mul_add(x, y, lanes[v]);
            }
        }
    }
    // loops, not `array::from_fn`: a closure's body may be compiled apart, without the target's
    // features
    let mut products = [0.0; G];
    if let Ok(eight) = <&[[I::V; 8]; 8]>::try_from(&lanes[..]) {
        products.copy_from_slice(&isa.sums_of_eight_rows(eight));
    } else {
        for (product, lanes) in products.iter_mut().zip(&lanes) {
            *product = isa::sum_of_eight(isa, lanes);
        }
    }
    // an empty sum is −0, which adds nothing to any sum: rows whose length is a multiple of eight
    // skip the addition
    if !tail.is_empty() {
        for (product, row_tail) in products.iter_mut().zip(tails) {
            *product += tail.iter().zip(row_tail).map(|(x, y)| x * y).sum::<f64>();
        }
    }
    products
}

/// Keys and values of consecutive positions, stored contiguously: `(first position, keys,
/// values)`, `keys` and `values` holding `rows × d_h` values each.
pub type Run<'a> = (usize, &'a [f64], &'a [f64]);

/// One query row of a decoding step and how it attends.
#[derive(Clone, Copy, Debug)]
pub struct RowQuery<'a> {
    /// The rotated query, `d_h` values.
    pub q: &'a [f64],
    /// Its absolute position.
    pub position: usize,
    /// With a sliding window, how many keys it sees at most (itself included).
    pub window_keys: Option<usize>,
    /// `1/√d_h`.
    pub scale: f64,
    /// The head's sink logit, if any.
    pub sink: Option<f64>,
    /// The instruction set to run on (the one in force when the step began).
    pub target: Target,
}

/// Arguments [`attend_row`] and [`attend_rows`] cannot take; nothing is written when they return
/// one.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// A query of no values: a head is at least one value wide.
    #[error("decoding row: the query holds no values")]
    EmptyQuery,
    /// The output does not hold one head's width for each query.
    #[error("decoding row: an output of {actual} values where the queries need {expected}")]
    Output {
        /// The query width times the number of queries.
        expected: usize,
        /// The output's length.
        actual: usize,
    },
    /// A run whose keys and values are not the same whole rows of the query's width.
    #[error("decoding row: run {index} holds {keys} key and {values} value numbers, not equal whole rows of {width}")]
    Run {
        /// Which run.
        index: usize,
        /// Its key numbers.
        keys: usize,
        /// Its value numbers.
        values: usize,
        /// The query's width.
        width: usize,
    },
    /// A run whose last position would pass `usize::MAX`.
    #[error("decoding row: run {index} starts at position {first} and holds {rows} keys, past the largest position")]
    Positions {
        /// Which run.
        index: usize,
        /// Its first position.
        first: usize,
        /// Its keys.
        rows: usize,
    },
    /// A query of another width than the first of the same call.
    #[error("decoding rows: query {index} holds {width} values, the first {expected}")]
    Widths {
        /// Which query.
        index: usize,
        /// Its width.
        width: usize,
        /// The first query's width.
        expected: usize,
    },
    /// Scratch space for fewer scores than there are keys times queries.
    #[error("decoding row: scratch for {actual} scores where the runs' keys and the queries need {needed}")]
    Scratch {
        /// The keys of all runs times the number of queries.
        needed: usize,
        /// The scratch's length.
        actual: usize,
    },
}

/// Softmax-weighted sum for one query row over the keys of `runs` (chronological), with an
/// optional sink logit (a key with a zero value vector), written into `out` (one head wide);
/// `scores` is scratch space for at least as many scores as there are keys.
///
/// # Errors
/// [`DecodeError`] for an empty query, an output not as wide as the query, a run whose keys and
/// values are not the same whole rows or whose positions pass `usize::MAX`, or too little
/// scratch; checked before anything is written.
pub fn attend_row(
    query: &RowQuery<'_>,
    runs: &[Run<'_>],
    scores: &mut [f64],
    out: &mut [f64],
) -> Result<(), DecodeError> {
    attend_rows(std::slice::from_ref(query), runs, scores, out)
}

/// [`attend_row`] for several query rows over the same keys and values (the query heads that
/// share a key/value head, and the tokens of a step, each seeing the keys up to its position),
/// `out` holding their outputs one after the other and `scores` scratch
/// for their scores (as many per query as there are keys). Each key and value row is read from
/// memory once for all of them: where a lane's cache no longer fits in a core's cache, reading it
/// once rather than once per query head is what a decoding step saves. Every output has the bits
/// [`attend_row`] gives its query alone (the same operations in the same order; tests). The
/// kernel runs on the first query's target (every target gives the same bits).
///
/// # Errors
/// As [`attend_row`], for any of the queries; [`DecodeError::Widths`] if the queries are not all
/// as wide as the first. Checked before anything is written; no queries write nothing.
pub fn attend_rows(
    queries: &[RowQuery<'_>],
    runs: &[Run<'_>],
    scores: &mut [f64],
    out: &mut [f64],
) -> Result<(), DecodeError> {
    let Some(first) = queries.first() else {
        return Ok(());
    };
    let width = first.q.len();
    if width == 0 {
        return Err(DecodeError::EmptyQuery);
    }
    if let Some((index, query)) = queries.iter().enumerate().find(|(_, query)| query.q.len() != width) {
        return Err(DecodeError::Widths { index, width: query.q.len(), expected: width });
    }
    let wanted = width.saturating_mul(queries.len());
    if out.len() != wanted {
        return Err(DecodeError::Output { expected: wanted, actual: out.len() });
    }
    let mut keys = 0usize;
    for (index, &(run_first, run_keys, values)) in runs.iter().enumerate() {
        if run_keys.len() != values.len() || !run_keys.len().is_multiple_of(width) {
            return Err(DecodeError::Run { index, keys: run_keys.len(), values: values.len(), width });
        }
        let rows = run_keys.len() / width;
        if rows > 0 && run_first.checked_add(rows - 1).is_none() {
            return Err(DecodeError::Positions { index, first: run_first, rows });
        }
        // several runs may view the same memory, so their rows are added with a check
        keys = keys.saturating_add(rows);
    }
    let needed = keys.saturating_mul(queries.len());
    if scores.len() < needed {
        return Err(DecodeError::Scratch { needed, actual: scores.len() });
    }
    // every target performs the same IEEE operations in the same order (the scores' and the
    // weighted values' terms are fused multiply-adds on every target, as are the exponentials'):
    // the same bits
    isa::run(first.target, AttendRows { queries, runs, keys, scores, out });
    Ok(())
}

/// [`attend_rows`] as a kernel compiled per target.
struct AttendRows<'a, 'q> {
    queries: &'a [RowQuery<'q>],
    runs: &'a [Run<'q>],
    keys: usize,
    scores: &'a mut [f64],
    out: &'a mut [f64],
}

impl Kernel for AttendRows<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) {
        attend_rows_portable(isa, self.queries, self.runs, self.keys, self.scores, self.out);
    }
}

/// Stretches of a run of keys that [`attend_rows_portable`] scores side by side: each call of
/// [`dots`] takes [`AT_ONCE`] keys of every stretch, in one loop of eight rows (AVX-512) or two
/// of [`ROWS_SIDE_BY_SIDE`]. Their
/// values are summed into a partial output per stretch, one stretch after the other.
///
/// Decoding is bound by reading the cache, and one thread walking one stretch of memory has too few
/// reads in flight to use the bandwidth the cache hierarchy offers; four stretches at once keep
/// more reads in flight (`docs/performance.md` has the timings). Results stay the same whatever
/// the thread count.
const STREAMS: usize = 4;
/// Consecutive keys of each stretch scored in one call of [`dots`] (eight dot products).
const AT_ONCE: usize = 2;

/// [`attend_rows`] in portable code, compiled once per instruction set; its softmax's
/// exponentials run in the target's registers (`exp_shifted_sum_inline`). Query `g`'s scores are
/// `scores[g·keys..(g + 1)·keys]`, its output `out[g·d..(g + 1)·d]`.
#[inline(always)]
fn attend_rows_portable<I: Isa>(
    isa: I,
    queries: &[RowQuery<'_>],
    runs: &[Run<'_>],
    keys: usize,
    scores: &mut [f64],
    out: &mut [f64],
) {
    score_runs(isa, queries, runs, keys, scores);
    let d = out.len() / queries.len().max(1);
    // per query: `None` where it sees no key (zeros, as in the full pass), else its normaliser and
    // whether a weight is exactly 0
    let mut normalisers = Vec::with_capacity(queries.len());
    for (g, query) in queries.iter().enumerate() {
        let scores = &mut scores[g * keys..(g + 1) * keys];
        let max = scores.iter().copied().fold(query.sink.unwrap_or(f64::NEG_INFINITY), f64::max);
        out[g * d..(g + 1) * d].fill(0.0);
        if max == f64::NEG_INFINITY {
            normalisers.push(None);
            continue;
        }
        // the sink joins the normaliser but adds nothing to the output
        let total = exp_shifted_sum_inline(isa, scores, max) + query.sink.map_or(0.0, |s| exp_inline(s - max));
        // a weight of exactly 0 (a hidden key: e^−∞) must be skipped, not multiplied: 0 · NaN =
        // NaN would let a key the query cannot see change its output; rows with none take the
        // loop without the test (one-token decoding over a cache it sees whole)
        normalisers.push(Some((total, scores.contains(&0.0))));
    }
    add_weighted_values(runs, scores, keys, &normalisers, VALUE_BYTES_AT_ONCE.div_ceil(8 * d.max(1)), out);
    for (g, normaliser) in normalisers.iter().enumerate() {
        if let Some((total, _)) = normaliser {
            for o in out[g * d..(g + 1) * d].iter_mut() {
                *o /= total;
            }
        }
    }
}

/// The scores of every key of `runs` for each query into its `keys` scores (−∞ for the keys the
/// query does not see). The key rows of a step are read once for all the queries.
#[inline(always)]
fn score_runs<I: Isa>(isa: I, queries: &[RowQuery<'_>], runs: &[Run<'_>], keys: usize, scores: &mut [f64]) {
    let Some(d) = queries.first().map(|query| query.q.len()) else {
        return;
    };
    let mut at = 0;
    for &(first, run_keys, _) in runs {
        let rows = run_keys.len() / d;
        // the run as STREAMS equal stretches of `part` keys (the last few keys, past them, alone);
        // each step scores AT_ONCE consecutive keys of every stretch
        let part = rows / (STREAMS * AT_ONCE) * AT_ONCE;
        for i in (0..part).step_by(AT_ONCE) {
            let rows_now = std::array::from_fn::<_, { STREAMS * AT_ONCE }, _>(|j| {
                &run_keys[((j / AT_ONCE) * part + i + j % AT_ONCE) * d..][..d]
            });
            // the first and last position of the keys scored together
            let (earliest, latest) = (first + i, first + (STREAMS - 1) * part + i + AT_ONCE - 1);
            for (g, query) in queries.iter().enumerate() {
                let scores = &mut scores[g * keys + at..][..rows];
                let products = dots(isa, query.q, rows_now);
                // a query sees an interval of positions: where it sees the first and the last
                // key, it sees every key between, and each score is its product scaled
                let (window, position) = (query.window_keys, query.position);
                if visible(position, earliest, window) && visible(position, latest, window) {
                    for (s, products) in products.chunks_exact(AT_ONCE).enumerate() {
                        for (score, product) in scores[s * part + i..][..AT_ONCE].iter_mut().zip(products) {
                            *score = product * query.scale;
                        }
                    }
                } else {
                    for (j, product) in products.into_iter().enumerate() {
                        let r = (j / AT_ONCE) * part + i + j % AT_ONCE;
                        scores[r] = scaled_score(query, first + r, product);
                    }
                }
            }
        }
        for r in STREAMS * part..rows {
            let key = &run_keys[r * d..(r + 1) * d];
            for (g, query) in queries.iter().enumerate() {
                scores[g * keys + at + r] = scaled_score(query, first + r, dot(isa, query.q, key));
            }
        }
        at += rows;
    }
}

/// `scale · product` for a key at `position` the query sees, else −∞.
#[inline(always)]
fn scaled_score(query: &RowQuery<'_>, position: usize, product: f64) -> f64 {
    if visible(query.position, position, query.window_keys) { product * query.scale } else { f64::NEG_INFINITY }
}

/// `out_g += Σ_j w_gj v_j` over the values of `runs` for each query `g` that sees a key
/// (`normalisers[g]` is `Some((_, skip))`; zero weights skipped where `skip`), in the same
/// stretches as the scores: one partial output per stretch, added in stretch order after the
/// keys that were alone. The queries take turns over blocks of `block` value rows of a stretch
/// ([`VALUE_BYTES_AT_ONCE`]), so that each block is read from memory once for all of them and
/// from the first-level cache after that.
///
/// Each query's stretches are summed one after the other, each in registers ([`add_rows`]); each
/// sum adds its rows in the same order as when the stretches took turns row by row, through memory
/// (the tests hold the two together), which took 1.29–1.30 ms where this takes 1.06–1.11 for the
/// attention of one token over a 256-token cache held in cache (30 layers, 9 heads, one Zen 4
/// core; scores already [`dots_side_by_side`]).
#[inline(always)]
fn add_weighted_values(
    runs: &[Run<'_>],
    weights: &[f64],
    keys: usize,
    normalisers: &[Option<(f64, bool)>],
    block: usize,
    out: &mut [f64],
) {
    let d = out.len() / normalisers.len().max(1);
    let block = block.max(1);
    let mut partial = vec![0.0; normalisers.len() * STREAMS * d];
    let mut at = 0;
    for &(_, _, values) in runs {
        let rows = values.len() / d.max(1);
        let part = rows / (STREAMS * AT_ONCE) * AT_ONCE;
        for s in 0..STREAMS {
            let values = &values[s * part * d..][..part * d];
            for (r0, values) in (0..part).step_by(block).zip(values.chunks(block.saturating_mul(d))) {
                let rows = values.len() / d;
                for (g, normaliser) in normalisers.iter().enumerate() {
                    if let &Some((_, skip)) = normaliser {
                        let weights = &weights[g * keys + at + s * part + r0..][..rows];
                        add_rows_skipping(skip, weights, values, &mut partial[(g * STREAMS + s) * d..][..d]);
                    }
                }
            }
        }
        for (g, normaliser) in normalisers.iter().enumerate() {
            if let &Some((_, skip)) = normaliser {
                let weights = &weights[g * keys + at + STREAMS * part..g * keys + at + rows];
                add_rows_skipping(skip, weights, &values[STREAMS * part * d..rows * d], &mut out[g * d..(g + 1) * d]);
            }
        }
        at += rows;
    }
    for (g, normaliser) in normalisers.iter().enumerate() {
        if normaliser.is_some() {
            for sums in partial[g * STREAMS * d..(g + 1) * STREAMS * d].chunks_exact(d) {
                for (o, x) in out[g * d..(g + 1) * d].iter_mut().zip(sums) {
                    *o += x;
                }
            }
        }
    }
}

/// Bytes of value rows each query adds before the next one takes its turn (64 rows of a 64-wide
/// head), which stay in a core's first-level cache while the queries take their turns. A query's
/// sums go through memory between two blocks and add their rows in the same order, so the bits do
/// not depend on it. With a whole stretch at a time, the 48 queries of a 16-token step (three
/// query heads to a kv head) over 4112 positions read each value row 48 times from a farther
/// level: one thread took 2.71 ms for them where blocks of 32 KiB took 2.39 (8 and 64 KiB: 2.59
/// and 2.84), and a chat turn of those 16 tokens after 4096 positions of SmolLM2-135M
/// 239.2–260.6 ms where they took 214.3–242.3 (four rows side by side then;
/// `docs/performance.md`, "2026-12-06, fourth").
const VALUE_BYTES_AT_ONCE: usize = 32 << 10;

/// [`add_rows`], skipping zero weights where `skip`.
#[inline(always)]
fn add_rows_skipping(skip: bool, weights: &[f64], values: &[f64], sums: &mut [f64]) {
    if skip {
        add_rows::<true>(weights, values, sums);
    } else {
        add_rows::<false>(weights, values, sums);
    }
}

/// Sums [`add_rows`] holds in registers through a stretch's rows: a head of 64 values in one pass,
/// in eight AVX-512 registers. AVX2 has sixteen in all, so it keeps a few of them in memory; 32 at
/// a time (two passes over the rows) ran no faster on either target.
const SUMS_AT_ONCE: usize = 64;

/// `sums[e] += w_r · v_r[e]` for the rows `r` of `values` in order (`sums.len()` values a row),
/// each term one fused multiply-add (as [`dots_side_by_side`]'s), skipping zero weights with
/// `SKIP_ZEROS` (a fused `0 · NaN` is NaN too). The sums are taken [`SUMS_AT_ONCE`] at a time through
/// every row, in registers (those past the last whole [`SUMS_AT_ONCE`], through memory), rather
/// than row by row through memory: each sum still adds its rows in order, so the bits are the
/// same.
#[inline(always)]
fn add_rows<const SKIP_ZEROS: bool>(weights: &[f64], values: &[f64], sums: &mut [f64]) {
    let d = sums.len();
    let mut first = 0;
    for sums in sums.chunks_mut(SUMS_AT_ONCE) {
        let width = sums.len();
        if let Ok(sums) = <&mut [f64; SUMS_AT_ONCE]>::try_from(&mut *sums) {
            let mut held = *sums;
            for (&w, row) in weights.iter().zip(values.chunks_exact(d)) {
                if SKIP_ZEROS && w == 0.0 {
                    continue;
                }
                let Ok(v) = <&[f64; SUMS_AT_ONCE]>::try_from(&row[first..first + SUMS_AT_ONCE]) else { continue };
                for i in 0..SUMS_AT_ONCE {
                    held[i] = w.mul_add(v[i], held[i]);
                }
            }
            *sums = held;
        } else {
            for (&w, row) in weights.iter().zip(values.chunks_exact(d)) {
                if SKIP_ZEROS && w == 0.0 {
                    continue;
                }
                for (o, x) in sums.iter_mut().zip(&row[first..first + width]) {
                    *o = w.mul_add(*x, *o);
                }
            }
        }
        first += width;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random values in [−2, 2), the same on every run.
    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
            })
            .collect()
    }

    /// `Σ aᵢ·bᵢ` summed as [`dot`] documents it, one value at a time.
    fn plain_dot(a: &[f64], b: &[f64]) -> f64 {
        let whole = a.len() / 8 * 8;
        let mut l = [0.0; 8];
        for k in 0..whole {
            l[k % 8] = a[k].mul_add(b[k], l[k % 8]);
        }
        let tail: f64 = a[whole..].iter().zip(&b[whole..]).map(|(x, y)| x * y).sum();
        ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])) + tail
    }

    /// `out += Σ w v` in the stretches [`add_weighted_values`] documents, each term fused, written
    /// as the loop it replaced: every stretch's next row in turn, each row added into its stretch's partial; with
    /// `skip`, rows of weight 0 left out.
    fn plain_weighted_values(runs: &[Run<'_>], weights: &[f64], out: &mut [f64], skip: bool) {
        let d = out.len();
        let mut partial = vec![0.0; STREAMS * d];
        let mut at = 0;
        for &(_, _, values) in runs {
            let rows = values.len() / d;
            let part = rows / (STREAMS * AT_ONCE) * AT_ONCE;
            for i in 0..part {
                for s in 0..STREAMS {
                    let (w, v) = (weights[at + s * part + i], &values[(s * part + i) * d..][..d]);
                    if skip && w == 0.0 {
                        continue;
                    }
                    for (o, x) in partial[s * d..][..d].iter_mut().zip(v) {
                        *o = w.mul_add(*x, *o);
                    }
                }
            }
            for r in STREAMS * part..rows {
                if skip && weights[at + r] == 0.0 {
                    continue;
                }
                for (o, x) in out.iter_mut().zip(&values[r * d..][..d]) {
                    *o = weights[at + r].mul_add(*x, *o);
                }
            }
            at += rows;
        }
        for sums in partial.chunks_exact(d) {
            for (o, x) in out.iter_mut().zip(sums) {
                *o += x;
            }
        }
    }

    /// The kernels of one test case, compiled per target: eight rows' [`dots`], each row's
    /// [`dot`], and [`add_weighted_values`] over two runs, without and with skipping zeros.
    struct Case<'a> {
        a: &'a [f64],
        rows: [&'a [f64]; 8],
        runs: &'a [Run<'a>],
        /// `runs` with NaN in the values of the rows of weight 0, for the pass that skips them.
        hidden: &'a [Run<'a>],
        weights: &'a [f64],
    }

    impl Kernel for Case<'_> {
        type Output = ([f64; 8], [f64; 8], Vec<[Vec<f64>; 2]>, Vec<Vec<f64>>);
        fn run<I: Isa>(self, isa: I) -> Self::Output {
            let side_by_side = dots(isa, self.a, self.rows);
            let mut alone = [0.0; 8];
            for (product, row) in alone.iter_mut().zip(self.rows) {
                *product = dot(isa, self.a, row);
            }
            // value rows a block: a stretch's whole rows, several blocks and a shorter last one
            let sums = [usize::MAX, 1, 3]
                .map(|block| {
                    let (mut all, mut skipping) = (vec![0.0; self.a.len()], vec![0.0; self.a.len()]);
                    let keys = self.weights.len();
                    add_weighted_values(self.runs, self.weights, keys, &[Some((1.0, false))], block, &mut all);
                    add_weighted_values(self.hidden, self.weights, keys, &[Some((1.0, true))], block, &mut skipping);
                    [all, skipping]
                })
                .to_vec();
            // three queries taking turns over the blocks, the second seeing no key, the third
            // weighting the rows in reverse
            let keys = self.weights.len();
            let three: Vec<f64> =
                [self.weights, self.weights, &self.weights.iter().rev().copied().collect::<Vec<_>>()].concat();
            let normalisers = [Some((1.0, false)), None, Some((1.0, false))];
            let several = [usize::MAX, 1, 3]
                .map(|block| {
                    let mut out = vec![0.0; 3 * self.a.len()];
                    add_weighted_values(self.runs, &three, keys, &normalisers, block, &mut out);
                    out
                })
                .to_vec();
            (side_by_side, alone, sums, several)
        }
    }

    #[test]
    fn arguments_that_do_not_fit_are_typed_errors_and_nothing_is_written() {
        let (q, keys, values) = (vec![0.5; 4], vec![1.0; 12], vec![2.0; 12]);
        let query =
            |q| RowQuery { q, position: 5, window_keys: None, scale: 0.5, sink: None, target: Target::Portable };
        let runs: [Run<'_>; 2] = [(0, &keys[..8], &values[..8]), (2, &keys[8..], &values[8..])];
        let (mut scores, mut out) = (vec![0.0; 3], vec![7.0; 4]);
        let cases: [(RowQuery<'_>, &[Run<'_>], usize, usize, DecodeError); 6] = [
            (query(&[]), &runs, 3, 0, DecodeError::EmptyQuery),
            (query(&q), &runs, 3, 3, DecodeError::Output { expected: 4, actual: 3 }),
            (
                query(&q),
                &[(0, &keys[..8], &values[..4])],
                3,
                4,
                DecodeError::Run { index: 0, keys: 8, values: 4, width: 4 },
            ),
            (
                query(&q),
                &[runs[0], (2, &keys[..6], &values[..6])],
                3,
                4,
                DecodeError::Run { index: 1, keys: 6, values: 6, width: 4 },
            ),
            (query(&q), &runs, 2, 4, DecodeError::Scratch { needed: 3, actual: 2 }),
            (
                query(&q),
                &[(usize::MAX, &keys[..8], &values[..8])],
                3,
                4,
                DecodeError::Positions { index: 0, first: usize::MAX, rows: 2 },
            ),
        ];
        for (query, runs, scratch, width, error) in cases {
            let (scores, out) = (&mut scores[..scratch], &mut out[..width]);
            assert_eq!(attend_row(&query, runs, scores, out), Err(error));
            assert!(out.iter().all(|&x| x == 7.0) && scores.iter().all(|&x| x == 0.0));
        }
        // the same arguments fitting: the weights of three equal keys, the values' mean
        assert_eq!(attend_row(&query(&q), &runs, &mut scores, &mut out), Ok(()));
        assert_eq!(out, [2.0; 4]);
        // a run whose last key is at usize::MAX itself: in the query's future, so no key is seen
        let last = [(usize::MAX - 1, &keys[..8], &values[..8])];
        assert_eq!(attend_row(&query(&q), &last, &mut scores, &mut out), Ok(()));
        assert_eq!(out, [0.0; 4]);
    }

    #[test]
    fn scores_and_weighted_values_sum_as_documented_on_every_target() {
        for d in [1, 5, 8, 13, 31, 32, 33, 64, 67, 96, 128] {
            let a = values(d, 1);
            let keys = values(8 * d, 2);
            let rows: [&[f64]; 8] = std::array::from_fn(|r| &keys[r * d..(r + 1) * d]);
            // two runs: stretches and keys alone in each; weights with zeros among them, in a
            // stretch and among the keys alone
            let (first, second) = (values(21 * d, 3), values(40 * d, 4));
            let runs: Vec<Run<'_>> = vec![(0, &first, &first), (21, &second, &second)];
            let mut weights = values(61, 5);
            (weights[7], weights[19], weights[60]) = (0.0, 0.0, 0.0);
            // the rows of weight 0 hold NaN where zeros are skipped: they must not reach an output
            let (mut first_nan, mut second_nan) = (first.clone(), second.clone());
            for row in [7, 19] {
                first_nan[row * d..(row + 1) * d].fill(f64::NAN);
            }
            second_nan[39 * d..40 * d].fill(f64::NAN);
            let hidden: Vec<Run<'_>> = vec![(0, &first, &first_nan), (21, &second, &second_nan)];
            let plain: Vec<u64> = rows.iter().map(|row| plain_dot(&a, row).to_bits()).collect();
            let expected = [(&runs, false), (&hidden, true)].map(|(runs, skip)| {
                let mut out = vec![0.0; d];
                plain_weighted_values(runs, &weights, &mut out, skip);
                assert!(out.iter().all(|x| x.is_finite()));
                out.iter().map(|x| x.to_bits()).collect::<Vec<u64>>()
            });
            let reversed = {
                let backwards: Vec<f64> = weights.iter().rev().copied().collect();
                let mut out = vec![0.0; d];
                plain_weighted_values(&runs, &backwards, &mut out, false);
                out.iter().map(|x| x.to_bits()).collect::<Vec<u64>>()
            };
            for target in Target::available() {
                let case = Case { a: &a, rows, runs: &runs, hidden: &hidden, weights: &weights };
                let (side_by_side, alone, out, several) = isa::run(target, case);
                let bits = |xs: &[f64]| xs.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
                assert_eq!(bits(&side_by_side), plain, "{target}, d = {d}: dots");
                assert_eq!(bits(&alone), plain, "{target}, d = {d}: dot");
                for out in &out {
                    assert_eq!(bits(&out[0]), expected[0], "{target}, d = {d}: weighted values");
                    assert_eq!(bits(&out[1]), expected[1], "{target}, d = {d}: weighted values, zeros skipped");
                }
                for out in &several {
                    assert_eq!(bits(&out[..d]), expected[0], "{target}, d = {d}: the first of three queries");
                    assert!(
                        out[d..2 * d].iter().all(|&x| x.to_bits() == 0),
                        "{target}, d = {d}: a query that sees nothing"
                    );
                    assert_eq!(bits(&out[2 * d..]), reversed, "{target}, d = {d}: the third of three queries");
                }
            }
        }
    }

    /// The query heads of a key/value head attended together: every output has the bits of its
    /// query attended alone, on every target and for head widths below, at and past the
    /// registers' 64 sums — over a cache of two runs, an empty run and the step's own keys, with a
    /// window, a sink, keys in a query's future (weights of exactly 0, skipped), a query that sees
    /// no key before and after queries that do, NaN in a value row only some queries see, keys
    /// past the last whole stretch, and no runs at all.
    #[test]
    fn queries_attended_together_give_each_the_bits_it_gets_alone() {
        for d in [13, 64, 67] {
            let (cached, fresh) = (values(37 * d, 1), values(37 * d, 2));
            let (keys, mut vals) = (values(45 * d, 3), values(45 * d, 4));
            vals[(70 - 37) * d + 1] = f64::NAN; // position 70: seen by queries at 70 and later
            // positions 0–36, an empty run, 37–81, then the step's 3 keys at 82–84
            let runs: [Run<'_>; 4] =
                [(0, &cached, &fresh), (37, &[], &[]), (37, &keys, &vals), (82, &keys[..3 * d], &vals[..3 * d])];
            let q = values(6 * d, 5);
            for target in Target::available() {
                let query = |g: usize, position, window_keys, sink| RowQuery {
                    q: &q[g * d..(g + 1) * d],
                    position,
                    window_keys,
                    scale: 0.25 + g as f64 / 8.0,
                    sink,
                    target,
                };
                let groups = [
                    vec![query(0, 60, None, None), query(1, 61, None, None), query(2, 69, None, None)],
                    // a window, a sink, keys in the future, and a query that sees none of them
                    // between two that do
                    vec![query(0, 83, Some(20), Some(0.5)), query(5, 200, Some(10), None), query(1, 60, None, None)],
                    vec![query(3, 84, None, Some(-1.0)), query(4, 81, None, None), query(2, 84, Some(1), None)],
                ];
                let none = [(90, &keys[..2 * d], &vals[..2 * d])];
                for (case, group) in groups.iter().enumerate() {
                    for runs in [&runs[..], &none[..], &[][..]] {
                        let keys_total: usize = runs.iter().map(|r| r.1.len() / d).sum();
                        let mut together = vec![f64::NAN; group.len() * d];
                        let mut scores = vec![0.0; group.len() * keys_total];
                        attend_rows(group, runs, &mut scores, &mut together).unwrap();
                        for (g, query) in group.iter().enumerate() {
                            let mut alone = vec![f64::NAN; d];
                            attend_row(query, runs, &mut vec![0.0; keys_total], &mut alone).unwrap();
                            let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                            assert_eq!(
                                bits(&together[g * d..(g + 1) * d]),
                                bits(&alone),
                                "d = {d}, {target:?}, case {case}, query {g}, {} runs",
                                runs.len()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn queries_of_another_width_or_too_little_room_are_typed_errors_and_nothing_is_written() {
        let (keys, vals) = (vec![1.0; 12], vec![2.0; 12]);
        let runs: [Run<'_>; 1] = [(0, &keys, &vals)];
        let (wide, narrow) = (vec![0.5; 4], vec![0.5; 3]);
        let query =
            |q| RowQuery { q, position: 5, window_keys: None, scale: 0.5, sink: None, target: Target::Portable };
        let (mut scores, mut out) = (vec![0.0; 6], vec![7.0; 8]);
        let err = attend_rows(&[query(&wide), query(&narrow)], &runs, &mut scores, &mut out);
        assert_eq!(err, Err(DecodeError::Widths { index: 1, width: 3, expected: 4 }));
        let err = attend_rows(&[query(&wide), query(&wide)], &runs, &mut scores, &mut out[..7]);
        assert_eq!(err, Err(DecodeError::Output { expected: 8, actual: 7 }));
        let err = attend_rows(&[query(&wide), query(&wide)], &runs, &mut scores[..5], &mut out);
        assert_eq!(err, Err(DecodeError::Scratch { needed: 6, actual: 5 }));
        assert!(out.iter().all(|&x| x == 7.0) && scores.iter().all(|&x| x == 0.0));
        assert_eq!(
            err.unwrap_err().to_string(),
            "decoding row: scratch for 5 scores where the runs' keys and the queries need 6"
        );
        let err = DecodeError::Output { expected: 8, actual: 7 };
        assert_eq!(err.to_string(), "decoding row: an output of 7 values where the queries need 8");
        let err = DecodeError::Widths { index: 1, width: 3, expected: 4 };
        assert_eq!(err.to_string(), "decoding rows: query 1 holds 3 values, the first 4");
        // no queries: nothing to do
        assert_eq!(attend_rows(&[], &runs, &mut [], &mut []), Ok(()));
        // fitting: each query the values' mean
        assert_eq!(attend_rows(&[query(&wide), query(&wide)], &runs, &mut scores, &mut out), Ok(()));
        assert_eq!(out, [2.0; 8]);
    }
}
