//! Matrix-product kernels: the naive reference and the fast path, side by side.
//!
//! Every chapter's products run here (through [`crate::TensorValue::matmul`]); the naive kernel is
//! what the fast one is tested against.
//!
//! Both compute `dst (+)= lhs · rhs` for a row-major `dst` of `m × n` and strided views of
//! `lhs` (`m × k`) and `rhs` (`k × n`). Strides make transposes free: `q · kᵀ` reads `k` with its
//! strides swapped instead of copying it.
//!
//! The fast path is the `gemm-f64` crate (packed, cache-blocked, AVX-512 micro-kernels chosen at
//! run time, rayon threads). It splits work over output blocks only — never over `k` — so every
//! output element is summed in the same order whatever the number of threads. A product whose
//! inner dimension is long against a small output (a weight gradient `xᵀ·dy`: `B·T` rows summed
//! into `d × d`) runs as two single-threaded products on a fixed split of its output rows, which
//! beats the crate's own threads there, each over blocks of 256 of its inner dimension added one
//! after the other; the splits depend only on the sizes. One row times a
//! matrix (decoding) does split `k`, into blocks of a fixed 64 rows whose partial sums are added
//! in block order, which is just as independent of the thread count: results are bitwise the same
//! on 1 thread or many (tests check 1 against 2).

use rayon::prelude::*;

use crate::error::{Result, Shape, TensorAutodiffError};

/// Below this many multiply-adds (`m·n·k`) the naive loop beats the packing overhead of the fast
/// kernel, so [`matmul`] uses it. The choice depends only on the sizes, never on the machine load.
pub const SMALL_PRODUCT: usize = 4096;

/// A read-only strided view of an `rows × cols` matrix inside a slice.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    data: &'a [f64],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// A view of `rows × cols` values at the start of `data`, element `(i, j)` at
    /// `i·row_stride + j·col_stride`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::ShapeMismatch`] if the view would read past the end of `data`.
    pub fn new(data: &'a [f64], rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> Result<Self> {
        let last = if rows == 0 || cols == 0 {
            Some(0)
        } else {
            (rows - 1)
                .checked_mul(row_stride)
                .and_then(|r| (cols - 1).checked_mul(col_stride).and_then(|c| r.checked_add(c)))
                .and_then(|offset| offset.checked_add(1))
        };
        match last {
            Some(needed) if needed <= data.len() || rows == 0 || cols == 0 => {
                Ok(Self { data, rows, cols, row_stride, col_stride })
            }
            _ => Err(TensorAutodiffError::ShapeMismatch {
                op: "matmul kernel",
                lhs: Shape(vec![rows, cols]),
                rhs: Shape(vec![data.len()]),
                reason: "the strided view reads past the end of its storage",
            }),
        }
    }

    /// A contiguous row-major `rows × cols` view.
    ///
    /// # Errors
    /// As [`MatRef::new`].
    pub fn row_major(data: &'a [f64], rows: usize, cols: usize) -> Result<Self> {
        Self::new(data, rows, cols, cols, 1)
    }

    /// Rows `start..` of the view (`start ≤ rows`; an empty view past them).
    fn rows_from(self, start: usize) -> Self {
        let rows = self.rows.saturating_sub(start);
        // a view with rows and columns left starts its row `start` inside the storage (its last
        // element is in bounds); an empty one needs no storage
        let data = match start.checked_mul(self.row_stride).and_then(|at| self.data.get(at..)) {
            Some(data) if rows > 0 && self.cols > 0 => data,
            _ => &[],
        };
        Self { data, rows, ..self }
    }

    /// Rows `..end` of the view (`end ≤ rows`).
    fn rows_to(self, end: usize) -> Self {
        debug_assert!(end <= self.rows);
        Self { rows: end, ..self }
    }

    /// The transposed view (swaps rows/cols and their strides; copies nothing).
    pub fn t(self) -> Self {
        Self { rows: self.cols, cols: self.rows, row_stride: self.col_stride, col_stride: self.row_stride, ..self }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    #[inline]
    fn at(&self, i: usize, j: usize) -> f64 {
        self.data[i * self.row_stride + j * self.col_stride]
    }
}

fn check_dims(dst_len: usize, lhs: &MatRef<'_>, rhs: &MatRef<'_>) -> Result<()> {
    // checked: with zero strides a small slice can describe a huge view, and an overflowing m·n
    // must never pass for the destination's length
    if lhs.cols != rhs.rows || lhs.rows.checked_mul(rhs.cols) != Some(dst_len) {
        return Err(TensorAutodiffError::ShapeMismatch {
            op: "matmul kernel",
            lhs: Shape(vec![lhs.rows, lhs.cols]),
            rhs: Shape(vec![rhs.rows, rhs.cols]),
            reason: "need lhs [m,k], rhs [k,n] and a destination of m·n values",
        });
    }
    Ok(())
}

/// The reference kernel: one dot product per output element, `k` summed left to right.
///
/// ```text
/// dst[i][j] (+)= Σ_p lhs[i][p] · rhs[p][j]
/// ```
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if the dimensions do not chain.
pub fn matmul_naive(dst: &mut [f64], lhs: MatRef<'_>, rhs: MatRef<'_>, accumulate: bool) -> Result<()> {
    check_dims(dst.len(), &lhs, &rhs)?;
    let n = rhs.cols;
    for i in 0..lhs.rows {
        for j in 0..n {
            let mut sum = 0.0;
            for p in 0..lhs.cols {
                sum += lhs.at(i, p) * rhs.at(p, j);
            }
            let out = &mut dst[i * n + j];
            *out = if accumulate { *out + sum } else { sum };
        }
    }
    Ok(())
}

/// The fast kernel: same contract as [`matmul_naive`]; agrees with it to rounding (FMA and
/// blocked summation), and is bitwise reproducible for a given size whatever the thread count.
/// Uses the threads of the current rayon pool when `parallel` is true (two of them for a weight
/// gradient's shape, a long inner dimension against a small output, whose output rows it halves:
/// see the module docs).
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if the dimensions do not chain.
pub fn matmul(dst: &mut [f64], lhs: MatRef<'_>, rhs: MatRef<'_>, accumulate: bool, parallel: bool) -> Result<()> {
    matmul_scaled(dst, lhs, rhs, 1.0, accumulate, parallel)
}

/// `dst (+)= scale · lhs · rhs`: [`matmul`] with the product scaled inside the kernel (attention
/// scores `q·kᵀ/√d_h` without a separate pass over them).
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if the dimensions do not chain.
pub fn matmul_scaled(
    dst: &mut [f64],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    scale: f64,
    accumulate: bool,
    parallel: bool,
) -> Result<()> {
    check_dims(dst.len(), &lhs, &rhs)?;
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            dst.fill(0.0);
        }
        return Ok(());
    }
    if is_small(m, k, n) {
        return matmul_small(dst, lhs, rhs, scale, accumulate);
    }
    if takes_row_path(m, k, n, rhs.row_stride, rhs.col_stride) {
        row_times_matrix(dst, lhs, rhs, scale, accumulate, parallel);
        return Ok(());
    }
    if splits_rows(m, k, n) {
        // a fixed split, so the same sums run in the same order whatever the thread count
        let half = m / 2;
        let (top, bottom) = dst.split_at_mut(half * n);
        let (upper, lower) = (lhs.rows_to(half), lhs.rows_from(half));
        // SAFETY: each half of `dst` is exclusively borrowed and holds its rows·n values.
        #[allow(unsafe_code)]
        let half_product = |out: &mut [f64], rows: MatRef<'_>| unsafe {
            gemm_in_depth_blocks(out.as_mut_ptr(), rows, rhs, scale, accumulate)
        };
        if parallel {
            rayon::join(|| half_product(top, upper), || half_product(bottom, lower));
        } else {
            half_product(top, upper);
            half_product(bottom, lower);
        }
        return Ok(());
    }
    gemm_call(dst, lhs, rhs, scale, accumulate, parallel);
    Ok(())
}

/// Whether [`matmul_scaled`] runs an `m × k · k × n` product (not small, not one row) as two
/// single-threaded products over the upper and lower halves of its output rows.
///
/// `gemm-f64` splits a small output into few blocks and keeps its threads waiting on each other
/// while they run the long inner loop; two independent halves do not wait. For the weight
/// gradients of `mha-train` (256 × 1024 · 1024 × 256, the left side a transposed view) the halves
/// are faster; products with a larger output (`1024 × 256 · 256 × 256`, `1024³`) are as fast or
/// faster on the crate's own threads, so they keep them (`docs/performance.md`).
pub(crate) fn splits_rows(m: usize, k: usize, n: usize) -> bool {
    m >= SPLIT_ROWS_MIN && k >= 2 * m.max(n)
}

/// Output rows below which [`splits_rows`] leaves a product whole.
const SPLIT_ROWS_MIN: usize = 64;

/// The inner dimension of each half of a split product runs in blocks of this many (the last
/// one shorter), each block added onto the previous ones.
const SPLIT_DEPTH: usize = 256;

/// `dst (+)= scale · lhs · rhs` on the calling thread, as a sum of products over blocks of
/// [`SPLIT_DEPTH`] of the inner dimension, in block order. `gemm-f64` runs blocks of 512 by itself
/// on the halves of a weight gradient (`128 × 1024 · 1024 × 256`); blocks of 256 keep more of the
/// operands in cache and were faster (`docs/performance.md`).
///
/// # Safety
/// As [`gemm_raw`]: `dst` points at `m·n` writable values that nothing else accesses during the
/// call, initialised if `accumulate` (the first block writes every value before later blocks
/// read them); and `k > 0` (with no block at all, nothing would be written).
#[allow(unsafe_code)]
unsafe fn gemm_in_depth_blocks(dst: *mut f64, lhs: MatRef<'_>, rhs: MatRef<'_>, scale: f64, accumulate: bool) {
    let k = lhs.cols;
    debug_assert!(k > 0, "a split product has an inner dimension (k ≥ 2·max(m, n) ≥ 128)");
    for p0 in (0..k).step_by(SPLIT_DEPTH) {
        let depth = SPLIT_DEPTH.min(k - p0);
        // columns p0..p0 + depth of the left side, the same rows of the right side
        let (left, right) = (lhs.t().rows_from(p0).rows_to(depth).t(), rhs.rows_from(p0).rows_to(depth));
        // SAFETY: the caller's promise for `dst`; the views are sub-views of checked ones.
        unsafe { gemm_raw(dst, left, right, scale, accumulate || p0 > 0, false) };
    }
}

/// Whether [`matmul_scaled`] computes an `m × k · k × n` product (right side with column stride
/// `col_stride`, `k, n > 0`) by [`row_times_matrix`].
///
/// The rows must not overlap (`row_stride ≥ n`), so that `k` is bounded by the storage: the path
/// keeps a partial result per block of rows, and a zero-stride view could describe billions of rows
/// over one value.
fn takes_row_path(m: usize, k: usize, n: usize, row_stride: usize, col_stride: usize) -> bool {
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
/// guessing). Each task sums its rows into a partial result, and the partials are added in block
/// order at the end: the same sums in the same order whatever the thread count.
fn row_times_matrix(dst: &mut [f64], lhs: MatRef<'_>, rhs: MatRef<'_>, scale: f64, accumulate: bool, parallel: bool) {
    let row: Vec<f64> = (0..lhs.cols).map(|p| scale * lhs.at(0, p)).collect();
    let partials = row_block_partials(&[(&row, rhs)], parallel);
    add_partials(dst, &partials[0], accumulate);
}

/// For each `(row, matrix)`: the partial products of [`ROWS_PER_TASK`]-row blocks, block after
/// block (`blocks × n` values), all blocks of all products in one parallel pass.
fn row_block_partials(jobs: &[(&[f64], MatRef<'_>)], parallel: bool) -> Vec<Vec<f64>> {
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
        axpy_rows(sums, rows.map(|p| (row[p], &m.data[p * m.row_stride..][..m.cols])));
    };
    if parallel && tasks.len() > 1 {
        tasks.into_par_iter().for_each(block);
    } else {
        tasks.into_iter().for_each(block);
    }
    partials
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
/// query, key and value projections), with the products that [`matmul`] computes one row at a
/// time sharing a single parallel pass: one wake-up of the worker threads instead of one per
/// product. Every product equals `matmul` of the row with that matrix, bitwise.
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if a matrix does not have `row.len()` rows.
pub fn row_times_matrices(row: &[f64], matrices: &[MatRef<'_>], parallel: bool) -> Result<Vec<Vec<f64>>> {
    let lhs = MatRef::row_major(row, 1, row.len())?;
    let mut outputs: Vec<Vec<f64>> = Vec::with_capacity(matrices.len());
    // the products `matmul` sends to the one-row path share the pass; the rest go through it
    let mut shared = Vec::new();
    for (i, &m) in matrices.iter().enumerate() {
        check_dims(m.cols, &lhs, &m)?;
        let mut out = vec![0.0; m.cols];
        if takes_row_path(1, lhs.cols, m.cols, m.row_stride, m.col_stride) {
            shared.push((i, m));
        } else {
            matmul(&mut out, lhs, m, false, parallel)?;
        }
        outputs.push(out);
    }
    let jobs: Vec<(&[f64], MatRef<'_>)> = shared.iter().map(|&(_, m)| (row, m)).collect();
    for ((i, _), partial) in shared.iter().zip(row_block_partials(&jobs, parallel)) {
        add_partials(&mut outputs[*i], &partial, false);
    }
    Ok(outputs)
}

/// `sums += Σ a · row` over `(a, row)` pairs, in order; compiled for AVX-512 when the processor
/// has it (the same operations in the same order, so the same bits).
fn axpy_rows<'a>(sums: &mut [f64], rows: impl Iterator<Item = (f64, &'a [f64])>) {
    #[inline(always)]
    fn portable<'a>(sums: &mut [f64], rows: impl Iterator<Item = (f64, &'a [f64])>) {
        for (a, row) in rows {
            for (sum, &w) in sums.iter_mut().zip(row) {
                *sum += a * w;
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        #[target_feature(enable = "avx512f")]
        fn wide<'a>(sums: &mut [f64], rows: impl Iterator<Item = (f64, &'a [f64])>) {
            portable(sums, rows);
        }
        // SAFETY: the processor has AVX-512F (checked just above).
        #[allow(unsafe_code)]
        unsafe {
            wide(sums, rows)
        };
        return;
    }
    portable(sums, rows);
}

/// Row-by-row `i, p, j` loop for tiny products: reads `rhs` rows contiguously when it is row-major.
fn matmul_small(dst: &mut [f64], lhs: MatRef<'_>, rhs: MatRef<'_>, scale: f64, accumulate: bool) -> Result<()> {
    let n = rhs.cols;
    if !accumulate {
        dst.fill(0.0);
    }
    for i in 0..lhs.rows {
        let row = &mut dst[i * n..(i + 1) * n];
        for p in 0..lhs.cols {
            let a = scale * lhs.at(i, p);
            for (j, out) in row.iter_mut().enumerate() {
                *out += a * rhs.at(p, j);
            }
        }
    }
    Ok(())
}

/// `lhs · rhs` as a new row-major `m × n` vector: [`matmul`] without first filling a destination.
///
/// Products that take the fast kernel are written into storage that was never filled: the kernel
/// writes every value and reads none when it does not accumulate (a split product's first depth
/// block writes every value of its half before the later blocks read them). A pass of zeros over each output
/// is saved — 2 MiB per product of an `mha-train` step.
/// Other products (small ones and one row) go through [`matmul`] on zeros. The caller has
/// checked that `m·n` values can be allocated.
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if the dimensions do not chain.
#[allow(unsafe_code)]
pub(crate) fn matmul_new(lhs: MatRef<'_>, rhs: MatRef<'_>, parallel: bool) -> Result<Vec<f64>> {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    let len = m.checked_mul(n).ok_or_else(|| TensorAutodiffError::ShapeMismatch {
        op: "matmul kernel",
        lhs: Shape(vec![m, k]),
        rhs: Shape(vec![rhs.rows, n]),
        reason: "the product has more values than memory can address",
    })?;
    check_dims(len, &lhs, &rhs)?;
    if len == 0 || k == 0 || is_small(m, k, n) || takes_row_path(m, k, n, rhs.row_stride, rhs.col_stride) {
        let mut out = vec![0.0; len];
        matmul(&mut out, lhs, rhs, false, parallel)?;
        return Ok(out);
    }
    let mut out = Vec::with_capacity(len);
    if splits_rows(m, k, n) {
        // the halves of `matmul_scaled`, each written into its own unfilled rows
        let half = m / 2;
        let (top, bottom) = out.spare_capacity_mut()[..len].split_at_mut(half * n);
        // SAFETY: each part holds the rows·n values of its half of the product, and the halves
        // of the left side are views of its checked rows (as in `gemm_call`).
        let half_product = |part: &mut [std::mem::MaybeUninit<f64>], rows: MatRef<'_>| {
            // the product writes exactly `rows·n` values: the part must hold that many
            assert_eq!(part.len(), rows.rows * n, "a half of the product and its rows disagree");
            unsafe { gemm_in_depth_blocks(part.as_mut_ptr().cast(), rows, rhs, 1.0, false) }
        };
        let (upper, lower) = (lhs.rows_to(half), lhs.rows_from(half));
        if parallel {
            rayon::join(|| half_product(top, upper), || half_product(bottom, lower));
        } else {
            half_product(top, upper);
            half_product(bottom, lower);
        }
    } else {
        // SAFETY: the storage holds `len = m·n` values (capacity), the views were checked as in
        // `gemm_call`.
        unsafe { gemm_raw(out.as_mut_ptr(), lhs, rhs, 1.0, false, parallel) };
    }
    // SAFETY: without accumulation the kernel writes all the values of its destination before it
    // reads any (in a split product, the first depth block of each half writes them all); the
    // products above cover all m·n values (k > 0 here), so each is initialised.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// Below [`SMALL_PRODUCT`] multiply-adds: the naive loop.
fn is_small(m: usize, k: usize, n: usize) -> bool {
    m.saturating_mul(n).saturating_mul(k) < SMALL_PRODUCT
}

#[allow(unsafe_code)]
fn gemm_call(dst: &mut [f64], lhs: MatRef<'_>, rhs: MatRef<'_>, scale: f64, accumulate: bool, parallel: bool) {
    // SAFETY: `dst` is exclusively borrowed and holds m·n values (checked by the caller).
    unsafe { gemm_raw(dst.as_mut_ptr(), lhs, rhs, scale, accumulate, parallel) }
}

/// The `gemm-f64` call behind [`gemm_call`] and [`matmul_new`].
///
/// # Safety
/// `dst` points at `m·n` writable values that nothing else accesses during the call, initialised
/// if `accumulate`; the dimensions chain (`check_dims`).
#[allow(unsafe_code)]
unsafe fn gemm_raw(dst: *mut f64, lhs: MatRef<'_>, rhs: MatRef<'_>, scale: f64, accumulate: bool, parallel: bool) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    let parallelism = if parallel { gemm_common::Parallelism::Rayon(0) } else { gemm_common::Parallelism::None };
    let isz = |v: usize| v as isize;
    // The micro-kernel wants a column-major destination; a row-major `C = A·B` is the
    // column-major `Cᵀ = Bᵀ·Aᵀ`, so swap the operands and the strides (no data moves).
    // SAFETY: `MatRef::new` proved every strided read of both views in bounds; the caller
    // vouches for `dst` (see the function's contract).
    unsafe {
        gemm_f64::gemm::f64::get_gemm_fn()(
            n,
            m,
            k,
            dst,
            isz(n),
            1,
            accumulate,
            rhs.data.as_ptr(),
            isz(rhs.row_stride),
            isz(rhs.col_stride),
            lhs.data.as_ptr(),
            isz(lhs.row_stride),
            isz(lhs.col_stride),
            1.0,
            scale,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(len: usize, seed: u64) -> Vec<f64> {
        let mut rng = crate::nn::SplitMix64::new(seed);
        (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect()
    }

    #[test]
    fn naive_kernel_on_a_hand_example() {
        // [1 2; 3 4] · [5 6; 7 8] = [1·5+2·7, 1·6+2·8; 3·5+4·7, 3·6+4·8] = [19 22; 43 50]
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0];
        let mut c = [0.0; 4];
        let (a, b) = (MatRef::row_major(&a, 2, 2).unwrap(), MatRef::row_major(&b, 2, 2).unwrap());
        matmul_naive(&mut c, a, b, false).unwrap();
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        // with the transposed view of b: [1 2; 3 4] · [5 7; 6 8] = [17 23; 39 53]
        matmul_naive(&mut c, a, b.t(), false).unwrap();
        assert_eq!(c, [17.0, 23.0, 39.0, 53.0]);
    }

    #[test]
    fn fast_kernel_matches_naive_with_transposes_and_accumulation() {
        for &(m, k, n) in &[(1, 1, 1), (3, 5, 7), (17, 33, 9), (64, 64, 64), (70, 129, 31)] {
            let a = filled(m * k, 1);
            let b = filled(k * n, 2);
            let bt = filled(n * k, 3);
            for accumulate in [false, true] {
                let mut fast = filled(m * n, 4);
                let mut slow = fast.clone();
                let av = MatRef::row_major(&a, m, k).unwrap();
                let bv = MatRef::row_major(&b, k, n).unwrap();
                matmul(&mut fast, av, bv, accumulate, true).unwrap();
                matmul_naive(&mut slow, av, bv, accumulate).unwrap();
                for (f, s) in fast.iter().zip(&slow) {
                    assert!((f - s).abs() <= 1e-12 * (1.0 + s.abs()), "{m}x{k}x{n}: {f} vs {s}");
                }
                let btv = MatRef::row_major(&bt, n, k).unwrap().t();
                matmul(&mut fast, av, btv, false, true).unwrap();
                matmul_naive(&mut slow, av, btv, false).unwrap();
                for (f, s) in fast.iter().zip(&slow) {
                    assert!((f - s).abs() <= 1e-12 * (1.0 + s.abs()));
                }
            }
        }
    }

    #[test]
    fn fast_kernel_is_bitwise_independent_of_thread_count() {
        let (m, k, n) = (300, 257, 190);
        let a = filled(m * k, 5);
        let b = filled(k * n, 6);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                let mut out = vec![0.0; m * n];
                let av = MatRef::row_major(&a, m, k).unwrap();
                let bv = MatRef::row_major(&b, k, n).unwrap();
                matmul(&mut out, av, bv, false, true).unwrap();
                out
            })
        };
        let one = run(1);
        let two = run(2);
        let four = run(4);
        assert!(one.iter().zip(&two).all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(one.iter().zip(&four).all(|(x, y)| x.to_bits() == y.to_bits()));
    }

    #[test]
    fn long_inner_products_split_their_rows_and_match_naive_on_any_thread_count() {
        // (m, k, n) with k ≥ 2·max(m, n): a weight gradient's shape; odd m splits unevenly, and
        // k > SPLIT_DEPTH runs in depth blocks (a shorter last one for 300 and 1030, one or two
        // deep for 257 and 258, where the crate takes its short-depth routine). The left
        // side is xᵀ, a transposed view as in `xᵀ·dy`, or a row-major one (row stride k).
        for &(m, k, n, transposed) in &[
            (64, 128, 64, true),
            (97, 300, 40, true),
            (80, 512, 150, true),
            (97, 300, 40, false),
            (64, 1030, 8, true),
            (64, 257, 8, true),
            (64, 258, 8, false),
        ] {
            assert!(splits_rows(m, k, n));
            let x = filled(k * m, 11);
            let dy = filled(k * n, 12);
            let lhs = if transposed {
                MatRef::row_major(&x, k, m).unwrap().t()
            } else {
                MatRef::row_major(&x, m, k).unwrap()
            };
            let rhs = MatRef::row_major(&dy, k, n).unwrap();
            let scale = 0.375;
            for accumulate in [false, true] {
                let start = filled(m * n, 13);
                let mut product = vec![0.0; m * n];
                matmul_naive(&mut product, lhs, rhs, false).unwrap();
                let slow: Vec<f64> = start
                    .iter()
                    .zip(&product)
                    .map(|(s, p)| if accumulate { s + scale * p } else { scale * p })
                    .collect();
                let run = |threads: usize, parallel: bool| {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    pool.install(|| {
                        let mut out = start.clone();
                        matmul_scaled(&mut out, lhs, rhs, scale, accumulate, parallel).unwrap();
                        out
                    })
                };
                let fast = run(2, true);
                for (f, s) in fast.iter().zip(&slow) {
                    assert!((f - s).abs() <= 1e-12 * (1.0 + s.abs()), "{m}x{k}x{n}: {f} vs {s}");
                }
                for other in [run(1, true), run(2, false)] {
                    assert!(fast.iter().zip(&other).all(|(a, b)| a.to_bits() == b.to_bits()), "{m}x{k}x{n}");
                }
            }
        }
        // a wide output or a short inner dimension stays whole
        assert!(!splits_rows(1024, 256, 256) && !splits_rows(256, 1024, 768) && !splits_rows(32, 1024, 32));
        // row views past their end are empty, whatever their strides
        let x = filled(12, 14);
        let view = MatRef::row_major(&x, 3, 4).unwrap();
        assert_eq!(view.rows_from(1).data.len(), 8);
        assert!(view.rows_from(3).data.is_empty() && view.rows_from(3).rows == 0);
        let no_columns = MatRef::new(&x, 5, 0, 1_000, 1).unwrap();
        assert!(no_columns.rows_from(2).data.is_empty());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn fast_kernel_equals_the_naive_kernel(
            m in 1usize..40, k in 1usize..40, n in 1usize..40, seed in proptest::prelude::any::<u64>(),
            lhs_t in proptest::prelude::any::<bool>(), rhs_t in proptest::prelude::any::<bool>(),
            accumulate in proptest::prelude::any::<bool>(), scale in -2.0f64..2.0
        ) {
            let a = filled(m * k, seed);
            let b = filled(k * n, seed ^ 1);
            let av = if lhs_t { MatRef::row_major(&a, k, m).unwrap().t() } else { MatRef::row_major(&a, m, k).unwrap() };
            let bv = if rhs_t { MatRef::row_major(&b, n, k).unwrap().t() } else { MatRef::row_major(&b, k, n).unwrap() };
            let mut fast = filled(m * n, seed ^ 2);
            let mut slow = fast.clone();
            matmul_scaled(&mut fast, av, bv, scale, accumulate, true).unwrap();
            let mut product = vec![0.0; m * n];
            matmul_naive(&mut product, av, bv, false).unwrap();
            for (s, p) in slow.iter_mut().zip(&product) {
                *s = if accumulate { *s + scale * p } else { scale * p };
            }
            for (f, s) in fast.iter().zip(&slow) {
                proptest::prop_assert!((f - s).abs() <= 1e-12 * (1.0 + s.abs()), "{} vs {}", f, s);
            }
        }
    }

    #[test]
    fn one_row_times_a_matrix_equals_naive_and_ignores_the_thread_count() {
        // m = 1 with a row-major right side takes the streaming path (decoding one token)
        for &(k, n) in &[(300, 300), (512, 1000), (64, 129)] {
            let a = filled(k, 7);
            let b = filled(k * n, 8);
            let (av, bv) = (MatRef::row_major(&a, 1, k).unwrap(), MatRef::row_major(&b, k, n).unwrap());
            let mut slow = vec![0.0; n];
            matmul_naive(&mut slow, av, bv, false).unwrap();
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| {
                    let mut out = filled(n, 9);
                    matmul_scaled(&mut out, av, bv, 0.5, true, true).unwrap();
                    out
                })
            };
            let (one, two) = (run(1), run(2));
            assert!(one.iter().zip(&two).all(|(x, y)| x.to_bits() == y.to_bits()));
            for ((got, start), want) in one.iter().zip(filled(n, 9)).zip(&slow) {
                assert!((got - (start + 0.5 * want)).abs() <= 1e-12 * (1.0 + want.abs()));
            }
        }
    }

    #[test]
    fn several_matrices_in_one_pass_equal_one_product_each_bitwise() {
        let k = 300;
        let row = filled(k, 10);
        let shapes = [(k, 200), (k, 7), (k, 1000)];
        let data: Vec<Vec<f64>> = shapes.iter().enumerate().map(|(i, &(r, c))| filled(r * c, 11 + i as u64)).collect();
        let mut views: Vec<MatRef<'_>> =
            shapes.iter().zip(&data).map(|(&(r, c), d)| MatRef::row_major(d, r, c).unwrap()).collect();
        // a transposed view does not take the one-row path: it goes through `matmul` alone
        let t = filled(k * 9, 20);
        views.push(MatRef::row_major(&t, 9, k).unwrap().t());
        let lhs = MatRef::row_major(&row, 1, k).unwrap();
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let together = pool.install(|| row_times_matrices(&row, &views, true)).unwrap();
            for (got, &m) in together.iter().zip(&views) {
                let mut alone = vec![0.0; m.cols()];
                matmul(&mut alone, lhs, m, false, true).unwrap();
                assert!(got.iter().zip(&alone).all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
        let wrong = MatRef::row_major(&data[0], 200, 300).unwrap();
        assert!(row_times_matrices(&row, &[views[0], wrong], true).is_err());
    }

    #[test]
    fn a_new_product_equals_filling_zeros_bitwise_on_every_path() {
        // (m, k, n): small loop, one-row path, fast kernel (plain and transposed), halves of rows
        // (an odd m; the second in three depth blocks), empty depth
        for &(m, k, n, transposed) in &[
            (3, 4, 5, false),
            (1, 300, 200, false),
            (70, 129, 31, false),
            (64, 40, 90, true),
            (65, 200, 30, false),
            (65, 600, 30, true),
            (6, 0, 4, false),
        ] {
            let a = filled(m * k, 30);
            let b = filled(k * n, 31);
            let av = MatRef::row_major(&a, m, k).unwrap();
            let bv = if transposed {
                MatRef::row_major(&b, n, k).unwrap().t()
            } else {
                MatRef::row_major(&b, k, n).unwrap()
            };
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let (new, sequential, filled_in) = pool.install(|| {
                    let mut zeros = vec![0.0; m * n];
                    matmul(&mut zeros, av, bv, false, true).unwrap();
                    (matmul_new(av, bv, true).unwrap(), matmul_new(av, bv, false).unwrap(), zeros)
                });
                assert_eq!(new.len(), m * n);
                assert!(new.iter().zip(&filled_in).all(|(x, y)| x.to_bits() == y.to_bits()), "{m}x{k}x{n}");
                assert!(new.iter().zip(&sequential).all(|(x, y)| x.to_bits() == y.to_bits()), "{m}x{k}x{n}");
            }
        }
        let a = [1.0; 6];
        assert!(matmul_new(MatRef::row_major(&a, 2, 3).unwrap(), MatRef::row_major(&a, 2, 3).unwrap(), true).is_err());
    }

    #[test]
    fn the_row_path_never_takes_overlapping_rows() {
        // a zero-stride view describes 2³² rows over one value: the row path would keep a partial
        // result per 64 of them (gigabytes), so such products take the general kernel
        assert!(!takes_row_path(1, 1 << 32, 1, 0, 1));
        assert!(!takes_row_path(1, 1 << 20, 512, 511, 1));
        assert!(takes_row_path(1, 512, 512, 512, 1) && takes_row_path(1, 512, 512, 600, 1));
    }

    #[test]
    fn views_that_read_past_their_storage_are_rejected() {
        let data = [0.0; 5];
        assert!(MatRef::new(&data, 2, 3, 3, 1).is_err());
        assert!(MatRef::new(&data, 0, 3, 3, 1).is_ok());
        let a = [1.0; 6];
        let mut c = [0.0; 4];
        let av = MatRef::row_major(&a, 2, 3).unwrap();
        let err = matmul(&mut c, av, av, false, false).unwrap_err();
        assert!(err.to_string().contains("matmul kernel"));
    }
}
