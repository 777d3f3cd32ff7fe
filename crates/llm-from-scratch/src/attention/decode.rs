//! One query row of a decoding step: scores against the cached keys, softmax, weighted values.
//!
//! ```text
//! s_j = scale · q · k_j      for every kept key j the query sees (absolute positions), else −∞
//! p   = softmax(s ++ [sink])  the sink, if any, has a zero value vector
//! o   = Σ_j p_j v_j
//! ```
//!
//! [`attend_row_naive`] says it in ten lines; the kernels crate's
//! [`attend_row`](llm_kernels::decode::attend_row) (and [`attend_rows`], for the query heads of
//! one kv head and the tokens of a step) is the same computation arranged for speed — decoding is bound by reading the
//! cache, so it scores several stretches of keys side by side — and the tests hold the two
//! together on every target.

pub(super) use llm_kernels::decode::{RowQuery, Run, attend_rows};

#[cfg(test)]
use llm_kernels::decode::attend_row;

#[cfg(test)]
use crate::attention::{SlidingWindow, visible};
#[cfg(test)]
use crate::autodiff::ops::softmax::softmax_row;

/// The plain twin of [`attend_row`](llm_kernels::decode::attend_row): every visible key of `runs` scored, one softmax with the
/// sink, the weighted sum of their values.
#[cfg(test)]
fn attend_row_naive(query: &RowQuery<'_>, runs: &[Run<'_>], out: &mut [f64]) {
    let d = query.q.len();
    let window = query.window_keys.map(SlidingWindow::Exclusive);
    let keys = runs
        .iter()
        .flat_map(|&(first, k, v)| (0..k.len() / d).map(move |r| (first + r, &k[r * d..][..d], &v[r * d..][..d])));
    let seen: Vec<_> = keys.filter(|&(position, ..)| visible(query.position, position, window)).collect();
    let dot = |k: &[f64]| query.q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>();
    let mut scores: Vec<f64> = seen.iter().map(|(_, k, _)| query.scale * dot(k)).collect();
    scores.extend(query.sink);
    let mut weights = vec![0.0; scores.len()];
    softmax_row(&scores, &mut weights);
    out.fill(0.0);
    for ((_, _, v), w) in seen.iter().zip(&weights) {
        out.iter_mut().zip(*v).for_each(|(o, x)| *o += w * x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::SplitMix64;
    use llm_kernels::Target;

    /// The fast row against its plain twin: 1e-12 over runs of several lengths (stretches and the
    /// keys left alone), windows, sinks, a row that sees no key, a hidden key holding NaN, and rows
    /// that see every key (without a window, or with a wider one) or all but their future.
    #[test]
    fn the_fast_row_equals_the_naive_row() {
        let mut rng = SplitMix64::new(7);
        let d = 5;
        let mut random = |n: usize| (0..n).map(|_| rng.uniform(-2.0, 2.0)).collect::<Vec<f64>>();
        let (k, seen, q) = (random(40 * d), random(40 * d), random(d));
        let mut v = seen.clone();
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
            // no window: every key seen, or all but those in the query's future
            (40, None, None, 45),
            (13, None, Some(0.5), 39),
            (24, None, None, 30),
            (0, Some(SlidingWindow::Exclusive(64)), None, 45), // a window wider than the cache
        ] {
            // where position 0 is seen, its values are finite
            let window_keys = window.map(SlidingWindow::visible_keys);
            let v = if window_keys.is_none_or(|w| position < w) { &seen } else { &v };
            let runs: Vec<Run<'_>> =
                vec![(0, &k[..split * d], &v[..split * d]), (split, &k[split * d..], &v[split * d..])];
            let mut first = None;
            for target in Target::available() {
                let scale = 1.0 / (d as f64).sqrt();
                let query = RowQuery { q: &q, position, window_keys, scale, sink, target };
                let (mut fast, mut naive, mut scores) = (vec![0.0; d], vec![0.0; d], vec![0.0; 40]);
                attend_row(&query, &runs, &mut scores, &mut fast).unwrap();
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
