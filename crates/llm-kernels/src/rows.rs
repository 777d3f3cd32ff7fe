//! Building a tensor's values row by row, in parallel, straight into storage that was never
//! filled: no pass of zeros before the real values, no copy after.
//!
//! RoPE's rotation ([`crate::rope`]), the softmax rows and their adjoints ([`crate::softmax`])
//! and the teaching crate's row copies of a permutation build their outputs this way. The one
//! `unsafe` step — telling the vector its values are there — is here, and the types make it
//! true: each task's rows reach the caller as a [`RowBlock`], which hands each row on as a
//! [`RowOut`], whose only methods write every value of the row and hand back the [`Written`]
//! receipt that the caller must return for that row; only after every row's receipt does the
//! block give its own ([`BlockWritten`]). A kernel compiled for one instruction set can so take a
//! whole block in one call. The bands of [`crate::bands`] hand their rows on as `RowOut`s too.

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::target::active;

/// One output row not yet written. Each method writes all of its values and returns the receipt.
pub struct RowOut<'a>(&'a mut [MaybeUninit<f64>]);

/// Proof that one [`RowOut`] was written whole. Only `RowOut`'s methods make one, and the lifetime
/// is invariant, so a receipt cannot stand for another row.
pub struct Written<'a>(PhantomData<fn(&'a ()) -> &'a ()>);

/// The rows of one task of [`build_rows`], not yet written: [`RowBlock::write_rows`] hands each to
/// a closure as a [`RowOut`], in order.
pub struct RowBlock<'a> {
    values: &'a mut [MaybeUninit<f64>],
    row_len: usize,
    first: usize,
}

/// Proof that every row of one [`RowBlock`] was written (made only by [`RowBlock::write_rows`]).
pub struct BlockWritten<'a>(PhantomData<fn(&'a ()) -> &'a ()>);

impl<'a> RowBlock<'a> {
    /// The indices of the block's rows in the whole output.
    pub fn rows(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.values.len() / self.row_len
    }

    /// The width of each row.
    pub fn width(&self) -> usize {
        self.row_len
    }

    /// Writes the block's rows in order, row `r` (its index in the whole output) by `fill(r, row)`.
    ///
    /// Inlined into its caller, so that a kernel compiled for one instruction set can run the
    /// whole block, and `fill` with it, in one call.
    #[inline(always)]
    pub fn write_rows(self, fill: impl for<'r> FnMut(usize, RowOut<'r>) -> Written<'r>) -> BlockWritten<'a> {
        /// A closure as a [`FillRow`].
        struct Closure<F>(F);
        impl<F: for<'r> FnMut(usize, RowOut<'r>) -> Written<'r>> FillRow for Closure<F> {
            #[inline(always)]
            fn fill<'r>(&mut self, r: usize, row: RowOut<'r>) -> Written<'r> {
                (self.0)(r, row)
            }
        }
        self.fill_rows(&mut Closure(fill))
    }

    /// [`RowBlock::write_rows`] with a [`FillRow`] in place of a closure: its `fill`, inlined,
    /// runs with the instruction set of the kernel that calls this. (A closure is compiled for the
    /// baseline where it is written, and a long one is called, not inlined: RoPE's rows ran in
    /// two-lane registers where AVX-512 has eight lanes.)
    #[inline(always)]
    pub fn fill_rows(self, fill: &mut impl FillRow) -> BlockWritten<'a> {
        for (k, row) in self.values.chunks_exact_mut(self.row_len).enumerate() {
            let Written(_) = fill.fill(self.first + k, RowOut(row));
        }
        BlockWritten(PhantomData)
    }
}

/// What writes each row of a [`RowBlock`] for [`RowBlock::fill_rows`]: row `r` (its index in the
/// whole output), written whole, its receipt returned.
pub trait FillRow {
    /// Writes `row`, output row `r`.
    fn fill<'r>(&mut self, r: usize, row: RowOut<'r>) -> Written<'r>;
}

impl<'a> RowOut<'a> {
    /// A row of storage not yet written (a [`crate::bands::Band`]'s row).
    pub(crate) fn new(values: &'a mut [MaybeUninit<f64>]) -> Self {
        Self(values)
    }

    /// Writes `value(p)` to each position `p` of the row, in order.
    #[inline(always)]
    pub fn write_with(self, mut value: impl FnMut(usize) -> f64) -> Written<'a> {
        for (p, x) in self.0.iter_mut().enumerate() {
            x.write(value(p));
        }
        Written(PhantomData)
    }

    /// The row's width.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the row has no values.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Copies `src` into the row.
    ///
    /// # Panics
    /// If `src` is not exactly as wide as the row.
    pub fn copy_from(self, src: &[f64]) -> Written<'a> {
        self.0.write_copy_of_slice(src);
        Written(PhantomData)
    }

    /// Copies `src` into the row, then hands the row, now written, to `then`, which may change
    /// its values in place (a softmax row made where it is stored).
    ///
    /// # Panics
    /// If `src` is not exactly as wide as the row.
    #[inline(always)]
    pub fn copy_from_then(self, src: &[f64], then: impl FnOnce(&mut [f64])) -> Written<'a> {
        then(self.0.write_copy_of_slice(src));
        Written(PhantomData)
    }

    /// Writes the pairs `(i, i + w/2)` of a row of width `w`: the first items of `blocks` to
    /// pairs `N·k .. N·k + N` (the row's halves, `N` values each), then `rest` to the pairs past
    /// the last whole block.
    ///
    /// Blocks of a fixed width let the compiler turn each into a few vector operations.
    ///
    /// # Panics
    /// If the width is odd, `N` is 0, or `blocks` and `rest` together do not write every pair.
    #[inline(always)]
    pub fn pairs_apart<const N: usize>(
        self,
        blocks: impl IntoIterator<Item = ([f64; N], [f64; N])>,
        rest: impl IntoIterator<Item = (f64, f64)>,
    ) -> Written<'a> {
        assert!(self.0.len().is_multiple_of(2), "a row of pairs has an even width");
        let (lo, hi) = self.0.split_at_mut(self.0.len() / 2);
        let ((lo_blocks, lo_rest), (hi_blocks, hi_rest)) = (lo.as_chunks_mut::<N>(), hi.as_chunks_mut::<N>());
        let mut written = 0;
        for ((a, b), (x, y)) in lo_blocks.iter_mut().zip(hi_blocks.iter_mut()).zip(blocks) {
            a.write_copy_of_slice(&x);
            b.write_copy_of_slice(&y);
            written += N;
        }
        for ((a, b), (x, y)) in lo_rest.iter_mut().zip(hi_rest.iter_mut()).zip(rest) {
            a.write(x);
            b.write(y);
            written += 1;
        }
        assert_eq!(written, lo.len(), "every pair of the row is written");
        Written(PhantomData)
    }

    /// Writes the pairs `(2i, 2i + 1)`: the first items of `blocks` to values `2N·k .. 2N·k + 2N`
    /// (`N` pairs each, interleaved), then `rest` to the pairs past the last whole block, as
    /// [`RowOut::pairs_apart`] does.
    ///
    /// # Panics
    /// As [`RowOut::pairs_apart`].
    #[inline(always)]
    pub fn pairs_adjacent<const N: usize>(
        self,
        blocks: impl IntoIterator<Item = [[f64; 2]; N]>,
        rest: impl IntoIterator<Item = (f64, f64)>,
    ) -> Written<'a> {
        let (out, odd) = self.0.as_chunks_mut::<2>();
        assert!(odd.is_empty(), "a row of pairs has an even width");
        let (out_blocks, out_rest) = out.as_chunks_mut::<N>();
        let mut written = 0;
        for (o, pairs) in out_blocks.iter_mut().zip(blocks) {
            o.as_flattened_mut().write_copy_of_slice(pairs.as_flattened());
            written += N;
        }
        for ([a, b], (x, y)) in out_rest.iter_mut().zip(rest) {
            a.write(x);
            b.write(y);
            written += 1;
        }
        assert_eq!(written, out.len(), "every pair of the row is written");
        Written(PhantomData)
    }
}

/// Eight sums side by side: `sums[l] = Σ_k term(l, k)` over `k` in `0..width`, each added in
/// order of `k` from −0, as `Iterator::sum` adds: the bits of eight plain loops. A plain loop's
/// additions form one chain, each waiting on the last; eight chains (eight rows of a block, one
/// per `l`) keep the adder busy while each waits.
#[inline(always)]
pub(crate) fn side_by_side_sums(width: usize, term: impl Fn(usize, usize) -> f64) -> [f64; 8] {
    let mut sums = [-0.0; 8];
    for k in 0..width {
        for (l, sum) in sums.iter_mut().enumerate() {
            *sum += term(l, k);
        }
    }
    sums
}

/// How [`build_rows`] spreads the rows over threads.
#[derive(Clone, Copy, Debug)]
pub struct RowTasks {
    /// Rows per task.
    pub rows_per_task: usize,
    /// `false`: every row on the calling thread.
    pub parallel: bool,
}

/// `len` values as rows of `row_len`, each task's block of rows written by `fill(state, block)`
/// ([`RowBlock::write_rows`]); `init` makes the state of each task (scratch it may reuse across
/// rows). The rows of a task run in order; each value is computed the same way whatever the
/// thread count.
///
/// # Panics
/// If `row_len` is 0 or does not divide `len` (callers pass whole rows); like
/// `Vec::with_capacity`, if `len` values cannot be allocated.
pub fn build_rows<S>(
    (len, row_len): (usize, usize),
    tasks: RowTasks,
    init: impl Fn() -> S + Sync + Send,
    fill: impl for<'a> Fn(&mut S, RowBlock<'a>) -> BlockWritten<'a> + Sync + Send,
) -> Vec<f64> {
    assert!(row_len > 0 && len.is_multiple_of(row_len), "{len} values are not whole rows of {row_len}");
    // at most every row in one task: a block is then at most `len` values, so its size cannot
    // wrap (a wrapped size would cut blocks that are not whole rows, which the safety of
    // `set_len` below rests on)
    let rows_per_task = tasks.rows_per_task.clamp(1, (len / row_len).max(1));
    let task = |state: &mut S, (index, values): (usize, &mut [MaybeUninit<f64>])| {
        let BlockWritten(_) = fill(state, RowBlock { values, row_len, first: index * rows_per_task });
    };
    // not `allocator::unfilled`: rows on huge pages made explicit attention's softmax over 1 GB
    // of scores 15–20 % slower (`docs/performance.md`, 2026-12-05)
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
    // block size are multiples of `row_len`, each block is whole rows. `fill` returned each
    // block's `BlockWritten`, which only `RowBlock::fill_rows` makes (`write_rows` through it),
    // after handing every row of the block on as a `RowOut` and receiving that row's `Written`;
    // a `Written` (invariant in its lifetime, with a private field) only a `RowOut` method makes,
    // after writing every value of its row. A panic in `fill` leaves the length at 0.
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
            // rows of 3 pairs: one block of 2 and one pair past it
            let pairs = |r: usize| (0..3).map(move |i| (r as f64, i as f64));
            let blocks = |r: usize| std::iter::once(([r as f64; 2], [0.0, 1.0]));
            let apart = build_rows(
                (8 * 6, 6),
                tasks,
                || (),
                |_, b| b.write_rows(|r, row| row.pairs_apart(blocks(r), pairs(r).skip(2))),
            );
            assert_eq!(&apart[6..12], &[1.0, 1.0, 1.0, 0.0, 1.0, 2.0]);
            let adjacent = build_rows(
                (8 * 6, 6),
                tasks,
                || (),
                |_, b| {
                    b.write_rows(|r, row| {
                        row.pairs_adjacent(blocks(r).map(|(a, b)| [[a[0], b[0]], [a[1], b[1]]]), pairs(r).skip(2))
                    })
                },
            );
            assert_eq!(&adjacent[42..], &[7.0, 0.0, 7.0, 1.0, 7.0, 2.0]);
            // without blocks: every pair from the rest
            let no_blocks = std::iter::empty::<[[f64; 2]; 4]>;
            let plain = build_rows(
                (8 * 6, 6),
                tasks,
                || (),
                |_, b| b.write_rows(|r, row| row.pairs_adjacent(no_blocks(), pairs(r))),
            );
            assert_eq!(plain, adjacent);
            let src: Vec<f64> = (0..10).map(f64::from).collect();
            let copied =
                build_rows((10, 2), tasks, || (), |_, b| b.write_rows(|r, row| row.copy_from(&src[r * 2..r * 2 + 2])));
            assert_eq!(copied, src);
        }
    }

    /// A [`FillRow`] that writes row `r` as `r, r + 1, …` and counts the rows it was given.
    struct Counting(usize);

    impl FillRow for Counting {
        fn fill<'r>(&mut self, r: usize, row: RowOut<'r>) -> Written<'r> {
            self.0 += 1;
            let values: Vec<f64> = (0..row.len()).map(|j| (r + j) as f64).collect();
            row.copy_from(&values)
        }
    }

    #[test]
    fn a_fill_row_writes_each_row_of_a_task_once_in_order() {
        for parallel in [false, true] {
            // 7 rows of 3 in tasks of 2: a last task of one row; each task's state counts its rows
            let tasks = RowTasks { rows_per_task: 2, parallel };
            let counts = std::sync::Mutex::new(Vec::new());
            let out = build_rows(
                (7 * 3, 3),
                tasks,
                || Counting(0),
                |state, block| {
                    let before = state.0;
                    let written = block.fill_rows(state);
                    counts.lock().unwrap().push(state.0 - before);
                    written
                },
            );
            let want: Vec<f64> = (0..7).flat_map(|r| (0..3).map(move |j| (r + j) as f64)).collect();
            assert_eq!(out, want, "parallel: {parallel}");
            let mut counts = counts.into_inner().unwrap();
            counts.sort_unstable();
            assert_eq!(counts, [1, 2, 2, 2], "rows per task, parallel: {parallel}");
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
                    |_, block| {
                        block.write_rows(|_, row| {
                            let one_pair = std::iter::once((1.0, 2.0));
                            if adjacent {
                                row.pairs_adjacent(std::iter::empty::<[[f64; 2]; 1]>(), one_pair)
                            } else {
                                row.pairs_apart(std::iter::empty::<([f64; 1], [f64; 1])>(), one_pair)
                            }
                        })
                    },
                )
            });
            assert!(short.is_err(), "adjacent {adjacent}");
        }
    }
}
