//! Building a tensor's values row by row, in parallel, straight into storage that was never
//! filled: no pass of zeros before the real values, no copy after.
//!
//! RoPE's rotation ([`crate::rope`]) and the teaching crate's row copies of a permutation build
//! their outputs this way. The one
//! `unsafe` step — telling the vector its values are there — is here, and the types make it
//! true: each row reaches the caller as a [`RowOut`], whose only methods write every value of
//! the row and hand back the [`Written`] receipt that the caller must return for that row.

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::target::active;

/// One output row not yet written. Each method writes all of its values and returns the receipt.
pub struct RowOut<'a>(&'a mut [MaybeUninit<f64>]);

/// Proof that one [`RowOut`] was written whole. Only `RowOut`'s methods make one, and the lifetime
/// is invariant, so a receipt cannot stand for another row.
pub struct Written<'a>(PhantomData<fn(&'a ()) -> &'a ()>);

impl<'a> RowOut<'a> {
    /// Copies `src`, which must be exactly as wide as the row (else a panic).
    pub fn copy_from(self, src: &[f64]) -> Written<'a> {
        self.0.write_copy_of_slice(src);
        Written(PhantomData)
    }

    /// Writes the pairs `(i, i + w/2)` from `pairs`, the `i`-th item to pair `i`; `pairs` must
    /// yield at least `w/2` items and the width must be even (else a panic).
    ///
    /// A zip of slice iterators, not indices: the loop carries no bounds checks and vectorises.
    #[inline(always)]
    pub fn pairs_apart(self, pairs: impl IntoIterator<Item = (f64, f64)>) -> Written<'a> {
        assert!(self.0.len().is_multiple_of(2), "a row of pairs has an even width");
        let (lo, hi) = self.0.split_at_mut(self.0.len() / 2);
        let mut written = 0;
        for ((a, b), (x, y)) in lo.iter_mut().zip(hi.iter_mut()).zip(pairs) {
            a.write(x);
            b.write(y);
            written += 1;
        }
        assert_eq!(written, lo.len(), "every pair of the row is written");
        Written(PhantomData)
    }

    /// Writes the pairs `(2i, 2i + 1)` from `pairs`, as [`RowOut::pairs_apart`] does.
    #[inline(always)]
    pub fn pairs_adjacent(self, pairs: impl IntoIterator<Item = (f64, f64)>) -> Written<'a> {
        let (out, odd) = self.0.as_chunks_mut::<2>();
        assert!(odd.is_empty(), "a row of pairs has an even width");
        let mut written = 0;
        for ([a, b], (x, y)) in out.iter_mut().zip(pairs) {
            a.write(x);
            b.write(y);
            written += 1;
        }
        assert_eq!(written, out.len(), "every pair of the row is written");
        Written(PhantomData)
    }
}

/// How [`build_rows`] spreads the rows over threads.
#[derive(Clone, Copy, Debug)]
pub struct RowTasks {
    /// Rows per task.
    pub rows_per_task: usize,
    /// `false`: every row on the calling thread.
    pub parallel: bool,
}

/// `len` values as rows of `row_len`, row `r` written by `fill(state, r, row)`; `init` makes the
/// state of each task (scratch it may reuse across rows). The rows of a task run in order; each
/// value is computed the same way whatever the thread count.
///
/// # Panics
/// If `row_len` is 0 or does not divide `len` (callers pass whole rows).
pub fn build_rows<S>(
    (len, row_len): (usize, usize),
    tasks: RowTasks,
    init: impl Fn() -> S + Sync + Send,
    fill: impl for<'a> Fn(&mut S, usize, RowOut<'a>) -> Written<'a> + Sync + Send,
) -> Vec<f64> {
    assert!(row_len > 0 && len.is_multiple_of(row_len), "{len} values are not whole rows of {row_len}");
    let rows_per_task = tasks.rows_per_task.max(1);
    let task = |state: &mut S, (index, block): (usize, &mut [MaybeUninit<f64>])| {
        for (k, row) in block.chunks_exact_mut(row_len).enumerate() {
            let Written(_) = fill(state, index * rows_per_task + k, RowOut(row));
        }
    };
    let mut out: Vec<f64> = Vec::with_capacity(len);
    let unfilled = &mut out.spare_capacity_mut()[..len];
    if tasks.parallel {
        // the workers run the kernels `fill` calls on the caller's target
        let target = active();
        let task = |state: &mut S, block| target.within(|| task(state, block));
        unfilled.par_chunks_mut(rows_per_task * row_len).enumerate().for_each_init(&init, task);
    } else {
        let mut state = init();
        unfilled.chunks_mut(rows_per_task * row_len).enumerate().for_each(|block| task(&mut state, block));
    }
    // SAFETY: the capacity holds `len` values. The blocks cover `0..len`, and as `len` and the
    // block size are multiples of `row_len`, each block is whole rows, every one of which went to
    // `fill` as a `RowOut`. `fill` returned that row's `Written`, which (invariant in its lifetime,
    // with a private field) only a `RowOut` method makes after writing every value of its row. A
    // panic in `fill` leaves the length at 0.
    #[allow(unsafe_code)]
    unsafe {
        out.set_len(len)
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_writes_whole_rows_on_one_thread_and_on_many() {
        for parallel in [false, true] {
            let tasks = RowTasks { rows_per_task: 3, parallel };
            let pairs = |r: usize| (0..2).map(move |i| (r as f64, i as f64));
            let apart = build_rows((8 * 4, 4), tasks, || (), |_, r, row| row.pairs_apart(pairs(r)));
            assert_eq!(&apart[4..8], &[1.0, 1.0, 0.0, 1.0]);
            let adjacent = build_rows((8 * 4, 4), tasks, || (), |_, r, row| row.pairs_adjacent(pairs(r)));
            assert_eq!(&adjacent[28..], &[7.0, 0.0, 7.0, 1.0]);
            let src: Vec<f64> = (0..10).map(f64::from).collect();
            let copied = build_rows((10, 2), tasks, || (), |_, r, row| row.copy_from(&src[r * 2..r * 2 + 2]));
            assert_eq!(copied, src);
        }
    }

    #[test]
    fn too_few_pairs_panic_instead_of_leaving_values_unwritten() {
        let tasks = RowTasks { rows_per_task: 2, parallel: false };
        for adjacent in [false, true] {
            let short = std::panic::catch_unwind(|| {
                build_rows(
                    (4 * 4, 4),
                    tasks,
                    || (),
                    |_, _, row| {
                        let one_pair = std::iter::once((1.0, 2.0));
                        if adjacent { row.pairs_adjacent(one_pair) } else { row.pairs_apart(one_pair) }
                    },
                )
            });
            assert!(short.is_err(), "adjacent {adjacent}");
        }
    }
}
