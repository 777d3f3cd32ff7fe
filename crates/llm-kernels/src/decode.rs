//! One query row of a decoding step: scores against the cached keys, softmax, weighted values.
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

use crate::exp::{exp_inline, exp_shifted_sum_inline};
use crate::isa::{self, Isa, Kernel};
use crate::target::Target;
use crate::visibility::visible;

/// `Σ aᵢ·bᵢ` with eight running partial sums combined in a fixed order: vectorisable, and the same
/// result on every run.
#[inline(always)]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    dots::<1>(a, [b])[0]
}

/// `R` dot products of `a` with `rows`, each summed exactly as [`dot`] sums it, computed side by
/// side: the `R` independent chains of additions overlap, and `R` rows stream from memory at once
/// (one dot product at a time waits on its own additions and reads too little to keep the memory
/// busy — decoding is bound by reading the cache).
#[inline(always)]
fn dots<const R: usize>(a: &[f64], rows: [&[f64]; R]) -> [f64; R] {
    let mut lanes = [[0.0; 8]; R];
    let whole = a.len() / 8 * 8;
    for c in (0..whole).step_by(8) {
        let x = &a[c..c + 8];
        for (lane, row) in lanes.iter_mut().zip(&rows) {
            let y = &row[c..c + 8];
            for i in 0..8 {
                lane[i] += x[i] * y[i];
            }
        }
    }
    std::array::from_fn(|r| {
        let l = &lanes[r];
        let tail: f64 = a[whole..].iter().zip(&rows[r][whole..]).map(|(x, y)| x * y).sum();
        ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])) + tail
    })
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

/// Softmax-weighted sum for one query row over the keys of `runs` (chronological), with an
/// optional sink logit (a key with a zero value vector); `scores` is scratch space for at least
/// as many scores as there are keys.
pub fn attend_row(query: &RowQuery<'_>, runs: &[Run<'_>], scores: &mut [f64], out: &mut [f64]) {
    // every target performs the same IEEE operations in the same order (the scores and sums use
    // no fused multiply-add; the exponentials use the same fused ones everywhere): the same bits
    isa::run(query.target, AttendRow { query, runs, scores, out });
}

/// [`attend_row`] as a kernel compiled per target.
struct AttendRow<'a, 'q> {
    query: &'a RowQuery<'q>,
    runs: &'a [Run<'q>],
    scores: &'a mut [f64],
    out: &'a mut [f64],
}

impl Kernel for AttendRow<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) {
        attend_row_portable(isa, self.query, self.runs, self.scores, self.out);
    }
}

/// Stretches of a run of keys that [`attend_row_portable`] reads side by side.
///
/// Decoding is bound by reading the cache, and one thread walking one stretch of memory has too few
/// reads in flight to use the bandwidth the cache hierarchy offers; four stretches at once keep
/// more reads in flight (`docs/performance.md` has the timings). Results stay the same whatever
/// the thread count.
const STREAMS: usize = 4;
/// Consecutive keys of each stretch scored in one step (eight dot products side by side).
const AT_ONCE: usize = 2;

/// [`attend_row`] in portable code, compiled once per instruction set; its softmax's
/// exponentials run in the target's registers (`exp_shifted_sum_inline`).
#[inline(always)]
fn attend_row_portable<I: Isa>(isa: I, query: &RowQuery<'_>, runs: &[Run<'_>], scores: &mut [f64], out: &mut [f64]) {
    let count = score_runs(query, runs, scores);
    let scores = &mut scores[..count];
    let max = scores.iter().copied().fold(query.sink.unwrap_or(f64::NEG_INFINITY), f64::max);
    out.fill(0.0);
    if max == f64::NEG_INFINITY {
        return; // no visible key: attend to nothing (zeros), as in the full pass
    }
    // the sink joins the normaliser but adds nothing to the output
    let total = exp_shifted_sum_inline(isa, scores, max) + query.sink.map_or(0.0, |s| exp_inline(s - max));
    // a weight of exactly 0 (a hidden key: e^−∞) must be skipped, not multiplied: 0 · NaN = NaN
    // would let a key the query cannot see change its output; rows with none take the loop
    // without the test (one-token decoding over a cache it sees whole)
    if scores.contains(&0.0) {
        add_weighted_values::<true>(runs, scores, out);
    } else {
        add_weighted_values::<false>(runs, scores, out);
    }
    for o in out.iter_mut() {
        *o /= total;
    }
}

/// The scores of every key of `runs` into `scores` (−∞ for the keys the query does not see);
/// returns how many there are.
#[inline(always)]
fn score_runs(query: &RowQuery<'_>, runs: &[Run<'_>], scores: &mut [f64]) -> usize {
    let &RowQuery { q, position: query_position, window_keys, scale, .. } = query;
    let d = q.len(); // ≥ 1: the configuration rejects a head width of 0
    let mut count = 0;
    for &(first, keys, _) in runs {
        let run_scores = &mut scores[count..count + keys.len() / d];
        count += run_scores.len();
        let score = |position: usize, product: f64| {
            if visible(query_position, position, window_keys) { product * scale } else { f64::NEG_INFINITY }
        };
        // the run as STREAMS equal stretches of `part` keys (the last few keys, past them, alone);
        // each step scores AT_ONCE consecutive keys of every stretch
        let rows = run_scores.len();
        let part = rows / (STREAMS * AT_ONCE) * AT_ONCE;
        for i in (0..part).step_by(AT_ONCE) {
            let products = dots(
                q,
                std::array::from_fn::<_, { STREAMS * AT_ONCE }, _>(|j| {
                    &keys[((j / AT_ONCE) * part + i + j % AT_ONCE) * d..][..d]
                }),
            );
            for (j, product) in products.into_iter().enumerate() {
                let r = (j / AT_ONCE) * part + i + j % AT_ONCE;
                run_scores[r] = score(first + r, product);
            }
        }
        for r in STREAMS * part..rows {
            run_scores[r] = score(first + r, dot(q, &keys[r * d..(r + 1) * d]));
        }
    }
    count
}

/// `out += Σ_j w_j v_j` over the values of `runs`, in the same stretches as the scores: one
/// partial output per stretch, added in stretch order after the keys that were alone. With
/// `SKIP_ZEROS`, zero weights are skipped (the same sums for finite values).
#[inline(always)]
fn add_weighted_values<const SKIP_ZEROS: bool>(runs: &[Run<'_>], weights: &[f64], out: &mut [f64]) {
    let d = out.len();
    let mut partial = vec![0.0; STREAMS * d];
    let mut at = 0;
    for &(_, _, values) in runs {
        let rows = values.len() / d;
        let part = rows / (STREAMS * AT_ONCE) * AT_ONCE;
        let weights = &weights[at..at + rows];
        at += rows;
        for i in 0..part {
            for (s, sums) in partial.chunks_exact_mut(d).enumerate() {
                let (w, v) = (weights[s * part + i], &values[(s * part + i) * d..][..d]);
                if SKIP_ZEROS && w == 0.0 {
                    continue;
                }
                for (o, x) in sums.iter_mut().zip(v) {
                    *o += w * x;
                }
            }
        }
        for r in STREAMS * part..rows {
            let (w, v) = (weights[r], &values[r * d..(r + 1) * d]);
            if SKIP_ZEROS && w == 0.0 {
                continue;
            }
            for (o, x) in out.iter_mut().zip(v) {
                *o += w * x;
            }
        }
    }
    for sums in partial.chunks_exact(d) {
        for (o, x) in out.iter_mut().zip(sums) {
            *o += x;
        }
    }
}
