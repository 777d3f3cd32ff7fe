//! One query row of a decoding step: scores against the cached keys, softmax, weighted values.
//!
//! ```text
//! s_j = scale · q · k_j      for every kept key j the query sees (absolute positions), else −∞
//! p   = softmax(s ++ [sink])  the sink, if any, has a zero value vector
//! o   = Σ_j p_j v_j
//! ```
//!
//! [`attend_row_naive`] says it in ten lines; [`attend_row`] is the same computation arranged for
//! speed — decoding is bound by reading the cache, so it scores several stretches of keys side by
//! side — and the tests hold the two together.

use crate::attention::{SlidingWindow, visible};
use crate::autodiff::ops::softmax::softmax_row;
use crate::dispatch::Target;
use crate::dispatch::isa::{self, Isa, Kernel};
use crate::tensor::exp::{exp_inline, exp_shifted_sum_inline};

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
pub(super) type Run<'a> = (usize, &'a [f64], &'a [f64]);

/// One query row of a decoding step and how it attends.
#[derive(Clone, Copy)]
pub(super) struct RowQuery<'a> {
    /// The rotated query, `d_h` values.
    pub(super) q: &'a [f64],
    /// Its absolute position.
    pub(super) position: usize,
    pub(super) window: Option<SlidingWindow>,
    /// `1/√d_h`.
    pub(super) scale: f64,
    /// The head's sink logit, if any.
    pub(super) sink: Option<f64>,
    /// The instruction set to run on (the one in force when the step began).
    pub(super) target: Target,
}

/// Softmax-weighted sum for one query row over the keys of `runs` (chronological), with an
/// optional sink logit (a key with a zero value vector); `scores` is scratch space for at least
/// as many scores as there are keys.
pub(super) fn attend_row(query: &RowQuery<'_>, runs: &[Run<'_>], scores: &mut [f64], out: &mut [f64]) {
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
    fn run<I: Isa>(self, _isa: I) {
        attend_row_portable(self.query, self.runs, self.scores, self.out);
    }
}

/// The plain twin of [`attend_row`]: every visible key of `runs` scored, one softmax with the
/// sink, the weighted sum of their values.
#[cfg_attr(not(test), expect(dead_code, reason = "the twin the tests hold the fast row to"))]
fn attend_row_naive(query: &RowQuery<'_>, runs: &[Run<'_>], out: &mut [f64]) {
    let d = query.q.len();
    let keys = runs
        .iter()
        .flat_map(|&(first, k, v)| (0..k.len() / d).map(move |r| (first + r, &k[r * d..][..d], &v[r * d..][..d])));
    let seen: Vec<_> = keys.filter(|&(position, ..)| visible(query.position, position, query.window)).collect();
    let mut scores: Vec<f64> = seen.iter().map(|(_, k, _)| query.scale * dot(query.q, k)).collect();
    scores.extend(query.sink);
    let mut weights = vec![0.0; scores.len()];
    softmax_row(&scores, &mut weights);
    out.fill(0.0);
    for ((_, _, v), w) in seen.iter().zip(&weights) {
        out.iter_mut().zip(*v).for_each(|(o, x)| *o += w * x);
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

/// [`attend_row`] in portable code, compiled once per instruction set.
#[inline(always)]
fn attend_row_portable(query: &RowQuery<'_>, runs: &[Run<'_>], scores: &mut [f64], out: &mut [f64]) {
    let count = score_runs(query, runs, scores);
    let scores = &mut scores[..count];
    let max = scores.iter().copied().fold(query.sink.unwrap_or(f64::NEG_INFINITY), f64::max);
    out.fill(0.0);
    if max == f64::NEG_INFINITY {
        return; // no visible key: attend to nothing (zeros), as in the full pass
    }
    // the sink joins the normaliser but adds nothing to the output
    let total = exp_shifted_sum_inline(scores, max) + query.sink.map_or(0.0, |s| exp_inline(s - max));
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
    let &RowQuery { q, position: query_position, window, scale, .. } = query;
    let d = q.len(); // ≥ 1: the configuration rejects a head width of 0
    let mut count = 0;
    for &(first, keys, _) in runs {
        let run_scores = &mut scores[count..count + keys.len() / d];
        count += run_scores.len();
        let score = |position: usize, product: f64| {
            if visible(query_position, position, window) { product * scale } else { f64::NEG_INFINITY }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::SplitMix64;

    /// The fast row against its plain twin: 1e-12 over runs of several lengths (stretches and the
    /// keys left alone), windows, sinks, a row that sees no key, and a hidden key holding NaN.
    #[test]
    fn the_fast_row_equals_the_naive_row() {
        let mut rng = SplitMix64::new(7);
        let d = 5;
        let mut random = |n: usize| (0..n).map(|_| rng.uniform(-2.0, 2.0)).collect::<Vec<f64>>();
        let (k, mut v, q) = (random(40 * d), random(40 * d), random(d));
        v[..d].fill(f64::NAN); // position 0: outside every window below, so it must not reach an output
        let windows =
            [Some(SlidingWindow::Exclusive(30)), Some(SlidingWindow::Exclusive(7)), Some(SlidingWindow::Inclusive(20))];
        for (split, window, sink, position) in [
            (40, windows[0], None, 45),
            (17, windows[1], Some(0.3), 39),
            (3, windows[2], None, 39),
            (29, windows[2], None, 25),       // keys after position 25 are in its future
            (21, windows[1], Some(-1.0), 80), // sees no key: all the mass on the sink, zeros
            (10, windows[1], None, 100),      // sees no key and has no sink: zeros
            (0, windows[2], Some(2.0), 30),
        ] {
            let runs: Vec<Run<'_>> =
                vec![(0, &k[..split * d], &v[..split * d]), (split, &k[split * d..], &v[split * d..])];
            let mut first = None;
            for target in Target::available() {
                let scale = 1.0 / (d as f64).sqrt();
                let query = RowQuery { q: &q, position, window, scale, sink, target };
                let (mut fast, mut naive, mut scores) = (vec![0.0; d], vec![0.0; d], vec![0.0; 40]);
                attend_row(&query, &runs, &mut scores, &mut fast);
                attend_row_naive(&query, &runs, &mut naive);
                for (x, y) in fast.iter().zip(&naive) {
                    let case = format!("{target} {split} {window:?} {sink:?} {position}");
                    assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{case}: {x} vs {y}");
                }
                let bits: Vec<u64> = fast.iter().map(|x| x.to_bits()).collect();
                assert_eq!(first.get_or_insert_with(|| bits.clone()), &bits, "{target}: not bitwise the portable row");
            }
        }
    }
}
