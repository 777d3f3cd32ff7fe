//! The product of one row and a matrix — decoding one token — which is limited by reading the
//! matrix, not by arithmetic: the matrix is streamed once, row by row, in blocks of rows whose
//! partial sums are added in a fixed order.

use rayon::prelude::*;

use super::{MatRef, Result, SMALL_PRODUCT, check_dims, matmul};
use crate::isa::{self, Isa, Kernel};
use crate::target::{Target, active};

/// Whether [`matmul_scaled`](super::matmul_scaled) computes an `m × k · k × n` product (right side with column stride
/// `col_stride`, `k, n > 0`) by [`row_times_matrix`].
///
/// The rows must not overlap (`row_stride ≥ n`), so that `k` is bounded by the storage: the path
/// keeps a partial result per block of rows, and a zero-stride view could describe billions of rows
/// over one value.
pub(super) fn takes_row_path(m: usize, k: usize, n: usize, row_stride: usize, col_stride: usize) -> bool {
    m == 1 && col_stride == 1 && row_stride >= n && n.saturating_mul(k) >= SMALL_PRODUCT
}

/// Rows of the matrix per task of [`row_times_matrix`]: a fixed number, so that the order of the
/// sums never depends on the thread count.
const ROWS_PER_TASK: usize = 64;

/// One row times a row-major matrix (decoding one token): streams the matrix once, row by row,
/// with no packing — the product is limited by reading the weights.
///
/// Tasks take blocks of [`ROWS_PER_TASK`] whole rows, so each reads one contiguous stretch of
/// memory (blocks of columns would read a short piece of every row and leave the prefetcher
/// guessing). Each task sums its rows into a partial result, each term a fused multiply-add
/// `s ← a·w + s` (rounded once, as in the general path's AVX2 and AVX-512 micro-kernels, and one
/// instruction where two would round twice), and the partials are added in block order at the
/// end: the same sums in the same order whatever the thread count.
pub(super) fn row_times_matrix(
    target: Target,
    dst: &mut [f64],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    scale: f64,
    accumulate: bool,
    parallel: bool,
) {
    let row: Vec<f64> = (0..lhs.cols).map(|p| scale * lhs.at(0, p)).collect();
    let partials = row_block_partials(target, &[(&row, rhs)], parallel);
    add_partials(dst, &partials[0], accumulate);
}

/// For each `(row, matrix)`: the partial products of [`ROWS_PER_TASK`]-row blocks, block after
/// block (`blocks × n` values), all blocks of all products in one parallel pass.
fn row_block_partials(target: Target, jobs: &[(&[f64], MatRef<'_>)], parallel: bool) -> Vec<Vec<f64>> {
    let mut partials: Vec<Vec<f64>> =
        jobs.iter().map(|(row, m)| vec![0.0; row.len().div_ceil(ROWS_PER_TASK) * m.cols]).collect();
    let mut tasks: Vec<(usize, usize, &mut [f64])> = Vec::new();
    for (job, partial) in partials.iter_mut().enumerate() {
        let n = jobs[job].1.cols;
        tasks.extend(partial.chunks_mut(n.max(1)).enumerate().map(|(b, sums)| (job, b, sums)));
    }
    let block = |(job, b, sums): (usize, usize, &mut [f64])| {
        let (row, m) = jobs[job];
        let rows = b * ROWS_PER_TASK..row.len().min((b + 1) * ROWS_PER_TASK);
        axpy_rows(target, sums, rows.map(|p| (row[p], &m.data[p * m.row_stride..][..m.cols])));
    };
    if parallel && tasks.len() > 1 {
        tasks.into_par_iter().for_each(block);
    } else {
        tasks.into_iter().for_each(block);
    }
    partials
}

/// Whether [`matmul_scaled`](super::matmul_scaled) computes a one-row product whose right side is
/// a transposed row-major matrix (row stride 1: the tied LM head `h · Eᵀ` reading the embedding
/// table `E [V, d]` as stored) by [`row_times_transposed`].
pub(super) fn takes_transposed_row_path(m: usize, k: usize, n: usize, row_stride: usize, col_stride: usize) -> bool {
    m == 1 && row_stride == 1 && col_stride >= k && n.saturating_mul(k) >= SMALL_PRODUCT
}

/// Outputs per task of [`row_times_transposed`]: a fixed number, like [`ROWS_PER_TASK`] (each
/// output is summed alone, so the split could not change a bit anyway).
const COLUMNS_PER_TASK: usize = 512;
/// Outputs whose sums [`row_times_transposed`] interleaves.
const COLUMNS_AT_ONCE: usize = 8;

/// [`row_times_matrix`] for a right side stored transposed: each output `j` is the row times
/// column `j`, a contiguous stretch of `k` values. It performs exactly the sums of
/// [`row_times_matrix`] on the transposed copy — within each block of [`ROWS_PER_TASK`] rows,
/// `s = 0; s ← a·w + s` fused in row order, then the blocks' sums added in block order — so the
/// result is the same bits, without writing the copy (226 MB for a real model's head, on every
/// token).
/// [`COLUMNS_AT_ONCE`] outputs run interleaved, so that their sums overlap instead of each
/// waiting on its own additions.
pub(super) fn row_times_transposed(
    target: Target,
    dst: &mut [f64],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    scale: f64,
    accumulate: bool,
    parallel: bool,
) {
    let row: Vec<f64> = (0..lhs.cols).map(|p| scale * lhs.at(0, p)).collect();
    let task = |(t, outs): (usize, &mut [f64])| {
        isa::run(target, TransposedColumns { row: &row, rhs, first: t * COLUMNS_PER_TASK, outs, accumulate });
    };
    if parallel && dst.len() > COLUMNS_PER_TASK {
        dst.par_chunks_mut(COLUMNS_PER_TASK).enumerate().for_each(task);
    } else {
        dst.chunks_mut(COLUMNS_PER_TASK).enumerate().for_each(task);
    }
}

/// Outputs `first..first + outs.len()` of [`row_times_transposed`], compiled per target: the same
/// operations in the same order on every target. (Compiled once for the build's baseline, which on
/// x86-64 has no FMA instruction, each fused multiply-add was a call into the C library: the tied
/// head of a real model took 30 ms a token instead of 6–7.)
struct TransposedColumns<'a> {
    row: &'a [f64],
    rhs: MatRef<'a>,
    first: usize,
    outs: &'a mut [f64],
    accumulate: bool,
}

impl Kernel for TransposedColumns<'_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) {
        let Self { row, rhs, first, outs, accumulate } = self;
        let k = row.len();
        for (g, group) in outs.chunks_mut(COLUMNS_AT_ONCE).enumerate() {
            // output j reads column j of the right side: k values from j·col_stride
            let start = first + g * COLUMNS_AT_ONCE;
            let mut columns: [&[f64]; COLUMNS_AT_ONCE] = [&[]; COLUMNS_AT_ONCE];
            for (c, column) in columns.iter_mut().enumerate().take(group.len()) {
                *column = &rhs.data[(start + c) * rhs.col_stride..][..k];
            }
            let mut totals = [0.0; COLUMNS_AT_ONCE];
            for (b, block) in row.chunks(ROWS_PER_TASK).enumerate() {
                let mut partials = [0.0; COLUMNS_AT_ONCE];
                for (i, &a) in block.iter().enumerate() {
                    let p = b * ROWS_PER_TASK + i;
                    for (partial, column) in partials.iter_mut().zip(&columns).take(group.len()) {
                        *partial = a.mul_add(column[p], *partial);
                    }
                }
                for (total, partial) in totals.iter_mut().zip(partials) {
                    *total = if b == 0 { partial } else { *total + partial };
                }
            }
            for (out, total) in group.iter_mut().zip(totals) {
                *out = if accumulate { *out + total } else { total };
            }
        }
    }
}

/// `dst (+)=` the sum of the `blocks × n` partials, added in block order (block by block, so the
/// loops run along contiguous rows; each element sees the same additions in the same order).
fn add_partials(dst: &mut [f64], partial: &[f64], accumulate: bool) {
    let n = dst.len();
    let (first, rest) = partial.split_at(n);
    let mut sum = first.to_vec();
    for part in rest.chunks_exact(n) {
        sum.iter_mut().zip(part).for_each(|(s, p)| *s += p);
    }
    for (out, s) in dst.iter_mut().zip(sum) {
        *out = if accumulate { *out + s } else { s };
    }
}

/// `row [k] · matrixᵢ [k, nᵢ] → [nᵢ]` for one row and several matrices (decoding one token: its
/// query, key and value projections), with the products that [`matmul`](super::matmul) computes one row at a
/// time sharing a single parallel pass: one wake-up of the worker threads instead of one per
/// product. Every product equals `matmul` of the row with that matrix, bitwise.
///
/// # Errors
/// [`ShapeError`](super::ShapeError) if a matrix does not have `row.len()` rows, or its outputs
/// and the others' before it pass [`MAX_VALUES`](super::MAX_VALUES); checked before anything is
/// allocated.
pub fn row_times_matrices(row: &[f64], matrices: &[MatRef<'_>], parallel: bool) -> Result<Vec<Vec<f64>>> {
    let lhs = MatRef::row_major(row, 1, row.len())?;
    let mut total: usize = 0;
    for m in matrices {
        check_dims(m.cols, &lhs, m)?;
        total = total.checked_add(m.cols).filter(|&t| t <= super::MAX_VALUES).ok_or_else(|| super::ShapeError {
            lhs: vec![1, row.len()],
            rhs: vec![m.rows, m.cols],
            reason: "the products have more values than the ceiling (gemm::MAX_VALUES)",
        })?;
    }
    let target = active();
    let mut outputs: Vec<Vec<f64>> = Vec::with_capacity(matrices.len());
    // the products `matmul` sends to the one-row path share the pass; the rest go through it
    let mut shared = Vec::new();
    for (i, &m) in matrices.iter().enumerate() {
        let mut out = vec![0.0; m.cols];
        if takes_row_path(1, lhs.cols, m.cols, m.row_stride, m.col_stride) {
            shared.push((i, m));
        } else {
            matmul(&mut out, lhs, m, false, parallel)?;
        }
        outputs.push(out);
    }
    let jobs: Vec<(&[f64], MatRef<'_>)> = shared.iter().map(|&(_, m)| (row, m)).collect();
    for ((i, _), partial) in shared.iter().zip(row_block_partials(target, &jobs, parallel)) {
        add_partials(&mut outputs[*i], &partial, false);
    }
    Ok(outputs)
}

/// `sums += Σ a · row` over `(a, row)` pairs, in order, each term a fused multiply-add; compiled
/// for `target` (the same operations in the same order on every target, so the same bits; one
/// instruction wherever the processor has FMA, a call into the C library on an x86-64 without it).
fn axpy_rows<'a>(target: Target, sums: &mut [f64], rows: impl Iterator<Item = (f64, &'a [f64])>) {
    isa::run(target, AxpyRows { sums, rows });
}

/// [`axpy_rows`] as a kernel compiled per target.
struct AxpyRows<'s, R> {
    sums: &'s mut [f64],
    rows: R,
}

impl<'a, R: Iterator<Item = (f64, &'a [f64])>> Kernel for AxpyRows<'_, R> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) {
        for (a, row) in self.rows {
            for (sum, &w) in self.sums.iter_mut().zip(row) {
                *sum = a.mul_add(w, *sum);
            }
        }
    }
}
