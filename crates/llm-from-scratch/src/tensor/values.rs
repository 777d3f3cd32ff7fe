//! Elementwise passes over the values of a tensor, on every thread of the pool once they are long.
//!
//! Each output value is computed from its own inputs alone, so how the values are split between
//! threads cannot change a bit: the results are the same on one thread or many. A pass over a few
//! thousand values is faster on one thread than the hand-off to another, so short passes stay
//! serial; the threshold depends only on the length.

use llm_kernels::rows::{BlockWritten, RowBlock, RowTasks, build_rows};
use rayon::prelude::*;

/// From this many values on, a pass runs on every thread (the SwiGLU hidden layer of chapter 37's
/// model, `1,024 × 176` values, does; a row of a few hundred does not).
pub(crate) const PARALLEL_VALUES: usize = 1 << 14;

/// Values per task of a parallel pass: long runs, so that splitting costs little.
const VALUES_PER_TASK: usize = 1 << 12;

/// `f(x[i])` for every value.
pub(crate) fn map_values(x: &[f64], f: impl Fn(f64) -> f64 + Sync) -> Vec<f64> {
    if x.len() < PARALLEL_VALUES {
        return x.iter().map(|&v| f(v)).collect();
    }
    let mut out = Vec::with_capacity(x.len());
    x.par_iter().with_min_len(VALUES_PER_TASK).map(|&v| f(v)).collect_into_vec(&mut out);
    out
}

/// `f(a[i], b[i])` for every pair of values of two slices of the same length.
pub(crate) fn zip_values(a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64 + Sync) -> Vec<f64> {
    debug_assert_eq!(a.len(), b.len());
    if a.len() < PARALLEL_VALUES {
        return a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect();
    }
    let mut out = Vec::with_capacity(a.len());
    a.par_iter().zip(b).with_min_len(VALUES_PER_TASK).map(|(&x, &y)| f(x, y)).collect_into_vec(&mut out);
    out
}

/// Rows of `width` values (`len / width` of them), row `r` written by `f(r, row, spare)` — `spare`
/// a second row of scratch — into storage that is never filled first: each row is computed in
/// a scratch row and copied once ([`llm_kernels::rows::build_rows`]), where a vector of zeros
/// would be written over whole before the real values (a pass of its own, on one thread, while
/// the others wait). On every thread from [`PARALLEL_VALUES`] values on, `rows_per_task` rows a
/// task; each row is computed alone, so the bits do not depend on the threads.
pub(crate) fn map_rows(
    (len, width): (usize, usize),
    rows_per_task: usize,
    f: impl Fn(usize, &mut [f64], &mut [f64]) + Sync + Send,
) -> Vec<f64> {
    let scratch = || (vec![0.0; width], vec![0.0; width]);
    row_blocks((len, width), rows_per_task, scratch, |(row_buf, spare), block| {
        block.write_rows(|r, row| {
            f(r, row_buf, spare);
            row.copy_from(row_buf)
        })
    })
}

/// Rows of `width` values (`len / width` of them) in blocks of `rows_per_task` rows, each block
/// written whole by `fill` ([`llm_kernels::rows::build_rows`], `init` making each task's
/// scratch), on every thread from [`PARALLEL_VALUES`] values on; no values (or rows of none)
/// give zeros.
pub(crate) fn row_blocks<S>(
    (len, width): (usize, usize),
    rows_per_task: usize,
    init: impl Fn() -> S + Sync + Send,
    fill: impl for<'a> Fn(&mut S, RowBlock<'a>) -> BlockWritten<'a> + Sync + Send,
) -> Vec<f64> {
    if width == 0 || len == 0 {
        return vec![0.0; len];
    }
    let tasks = RowTasks { rows_per_task, parallel: len >= PARALLEL_VALUES };
    build_rows((len, width), tasks, init, fill)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap()
    }

    #[test]
    fn the_same_bits_as_a_plain_loop_on_any_thread_count() {
        // long enough to run in parallel, and a short one that stays serial
        for len in [PARALLEL_VALUES * 3 + 17, 100] {
            let a: Vec<f64> = (0..len).map(|i| (i as f64 * 0.37).sin() * 3.0).collect();
            let b: Vec<f64> = (0..len).map(|i| (i as f64 * 0.11).cos()).collect();
            let f = |x: f64| x * (1.0 / (1.0 + (-x).exp()));
            let g = |x: f64, y: f64| x * y + x.exp();
            let plain_map: Vec<u64> = a.iter().map(|&x| f(x).to_bits()).collect();
            let plain_zip: Vec<u64> = a.iter().zip(&b).map(|(&x, &y)| g(x, y).to_bits()).collect();
            for threads in [1, 2, 3] {
                let (mapped, zipped) = pool(threads).install(|| (map_values(&a, f), zip_values(&a, &b, g)));
                assert_eq!(mapped.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), plain_map);
                assert_eq!(zipped.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), plain_zip);
            }
        }
    }

    #[test]
    fn rows_are_written_whole_and_alike_on_any_thread_count() {
        // rows of 37 (a last task shorter than the others), past the parallel threshold and under
        // it; each row made in the scratch row from the spare one, whatever either held before
        let width = 37;
        for rows in [PARALLEL_VALUES / width * 3 + 5, 3] {
            let x: Vec<f64> = (0..rows * width).map(|i| (i as f64 * 0.29).sin()).collect();
            let f = |r: usize, row: &mut [f64], spare: &mut [f64]| {
                for (j, s) in spare.iter_mut().enumerate() {
                    *s = x[r * width + j].exp();
                }
                for (j, v) in row.iter_mut().enumerate() {
                    *v = spare[j] * r as f64 - spare[width - 1 - j];
                }
            };
            let want: Vec<u64> = (0..rows)
                .flat_map(|r| {
                    let (mut row, mut spare) = (vec![0.0; width], vec![0.0; width]);
                    f(r, &mut row, &mut spare);
                    row.into_iter().map(f64::to_bits)
                })
                .collect();
            for threads in [1, 2, 3] {
                let got = pool(threads).install(|| map_rows((rows * width, width), 64, f));
                assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "{rows} rows, {threads} threads");
            }
        }
        assert!(map_rows((0, 4), 64, |_, _, _| unreachable!()).is_empty());
        assert!(map_rows((0, 0), 64, |_, _, _| unreachable!()).is_empty());
    }
}
