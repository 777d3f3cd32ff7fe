//! The fast matrix product: `dst (+)= scale · lhs · rhs` on strided views.
//!
//! Its plain twin is the teaching crate's `tensor::matmul_naive` (one dot product per output
//! element), which its tests hold it to on every target; every product of the teaching crate
//! runs here.
//!
//! Both compute `dst (+)= lhs · rhs` for a row-major `dst` of `m × n` and strided views of
//! `lhs` (`m × k`) and `rhs` (`k × n`). Strides make transposes free: `q · kᵀ` reads `k` with its
//! strides swapped instead of copying it.
//!
//! The general path is the `gemm-f64` crate (packed, cache-blocked, AVX-512 or AVX2 micro-kernels
//! chosen at run time, rayon threads; `--kernels avx2` holds it to AVX2, module `targets`). It
//! splits work over output blocks only — never over `k` — so every output element is summed in
//! the same order whatever the number of threads. A product whose inner dimension is long against
//! a small output (a weight gradient `xᵀ·dy`: `B·T` rows summed into `d × d`) runs as two
//! single-threaded products on a fixed split of its output rows, which beats the crate's own
//! threads there, each over blocks of 256 of its inner dimension added one after the other; the
//! splits depend only on the sizes. One row times a matrix (decoding) does split `k`, into blocks
//! of a fixed 64 rows (each sum a chain of fused multiply-adds) whose partial sums are added in
//! block order, which is just as independent of
//! the thread count: results are bitwise the same on 1 thread or many (tests check 1 against 2).
//! Tiny products (under [`SMALL_PRODUCT`] multiply-adds) run a plain loop.

use thiserror::Error;

use std::mem::MaybeUninit;

use crate::target::{Target, active, note};

mod row_path;
mod stripes;
mod targets;

pub use row_path::row_times_matrices;
use row_path::{row_times_matrix, row_times_transposed, takes_row_path, takes_transposed_row_path};
pub use stripes::{SMALL_OUTPUT, STRIPE_OUTPUTS, StripeLayout, matmul_in_stripes, stripe_route};

/// The most values a product here allocates at once: its output, or a panel of its right side.
/// 2³¹, the teaching crate's ceiling for one tensor. A view may repeat one value any number of
/// times (a stride of 0), so a product's sizes are not bounded by its operands' storage: they
/// are held to this before anything is allocated.
pub const MAX_VALUES: usize = 1 << 31;

/// `a · b` values, where that is at most [`MAX_VALUES`].
pub(crate) fn values_within_ceiling(a: usize, b: usize) -> Option<usize> {
    a.checked_mul(b).filter(|&values| values <= MAX_VALUES)
}

/// Shapes a product cannot take: the views do not chain, or a view reads past its storage.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("matmul kernel: {lhs:?} and {rhs:?}: {reason}")]
pub struct ShapeError {
    /// The left side's `[rows, cols]` (or the view's, for a view past its storage).
    pub lhs: Vec<usize>,
    /// The right side's `[rows, cols]` (or the storage's `[len]`).
    pub rhs: Vec<usize>,
    /// What is wrong.
    pub reason: &'static str,
}

/// The result of a product.
pub type Result<T> = std::result::Result<T, ShapeError>;

/// The name of the micro-kernels the matrix product runs for `target` (`avx512`, `avx2`, `neon`
/// or `scalar`), as `llm-bench` prints it.
pub fn micro_kernel_name(target: Target) -> &'static str {
    targets::gemm_kernel(target)
}

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
    /// A stride along a dimension of one value, or of an empty view, is never used, so it may be
    /// anything; the view keeps it at most `max(data.len(), 2)`, so that every stride fits
    /// `gemm-f64`'s signed ones (a slice of `f64` holds at most `isize::MAX / 8` values; a used
    /// stride is within the storage). No product changes its route for that: `gemm-f64` asks of
    /// a stride only whether it is 1 (0, 1, and 2 or more stay apart), and this crate's paths
    /// also whether it is at least the view's other dimension, which a stride cut to
    /// `data.len()` still is where the question is asked (the other stride is then 1, and the
    /// storage holds that dimension's values).
    ///
    /// # Errors
    /// [`ShapeError`] if the view would read past the end of `data`.
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
                // an empty view moves along neither dimension
                let unused = |size: usize| size <= 1 || rows == 0 || cols == 0;
                let kept = |stride: usize, size| if unused(size) { stride.min(data.len().max(2)) } else { stride };
                Ok(Self { data, rows, cols, row_stride: kept(row_stride, rows), col_stride: kept(col_stride, cols) })
            }
            _ => Err(ShapeError {
                lhs: vec![rows, cols],
                rhs: vec![data.len()],
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

    /// Element `(i, j)`.
    ///
    /// # Panics
    /// Past the view (the plain loops index in bounds).
    #[inline]
    pub fn at(&self, i: usize, j: usize) -> f64 {
        self.data[i * self.row_stride + j * self.col_stride]
    }
}

/// Whether `lhs [m, k] · rhs [k, n]` chains into a destination of `dst_len = m·n` values (the
/// contract of every product here and of the teaching crate's naive loop).
///
/// # Errors
/// [`ShapeError`] when the inner sizes differ or `m·n` is not `dst_len` (or overflows).
pub fn check_dims(dst_len: usize, lhs: &MatRef<'_>, rhs: &MatRef<'_>) -> Result<()> {
    // checked: with zero strides a small slice can describe a huge view, and an overflowing m·n
    // must never pass for the destination's length
    if lhs.cols != rhs.rows || lhs.rows.checked_mul(rhs.cols) != Some(dst_len) {
        return Err(ShapeError {
            lhs: vec![lhs.rows, lhs.cols],
            rhs: vec![rhs.rows, rhs.cols],
            reason: "need lhs [m,k], rhs [k,n] and a destination of m·n values",
        });
    }
    Ok(())
}

/// `dst (+)= lhs · rhs`, `dst` row-major `m × n`: the same contract as the teaching crate's
/// `matmul_naive`, which it agrees with to rounding (FMA and blocked summation); bitwise
/// reproducible for a given size whatever the thread count and the target.
/// Uses the threads of the current rayon pool when `parallel` is true (two of them for a weight
/// gradient's shape, a long inner dimension against a small output, whose output rows it halves:
/// see the module docs).
///
/// # Errors
/// [`ShapeError`] if the dimensions do not chain.
pub fn matmul(dst: &mut [f64], lhs: MatRef<'_>, rhs: MatRef<'_>, accumulate: bool, parallel: bool) -> Result<()> {
    matmul_scaled(dst, lhs, rhs, 1.0, accumulate, parallel)
}

/// `dst (+)= scale · lhs · rhs`: [`matmul`] with the product scaled inside the kernel (attention
/// scores `q·kᵀ/√d_h` without a separate pass over them).
///
/// # Errors
/// [`ShapeError`] if the dimensions do not chain.
pub fn matmul_scaled(
    dst: &mut [f64],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    scale: f64,
    accumulate: bool,
    parallel: bool,
) -> Result<()> {
    check_dims(dst.len(), &lhs, &rhs)?;
    let target = active();
    note(target);
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
        row_times_matrix(target, dst, lhs, rhs, scale, accumulate, parallel);
        return Ok(());
    }
    if takes_transposed_row_path(m, k, n, rhs.row_stride, rhs.col_stride) {
        row_times_transposed(target, dst, lhs, rhs, scale, accumulate, parallel);
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
            gemm_in_depth_blocks(target, out.as_mut_ptr(), n, rows, rhs, scale, accumulate)
        };
        if parallel {
            rayon::join(|| half_product(top, upper), || half_product(bottom, lower));
        } else {
            half_product(top, upper);
            half_product(bottom, lower);
        }
        return Ok(());
    }
    gemm_call(target, dst, lhs, rhs, scale, accumulate, parallel);
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
pub fn splits_rows(m: usize, k: usize, n: usize) -> bool {
    m >= SPLIT_ROWS_MIN && k >= 2 * m.max(n)
}

/// Output rows below which [`splits_rows`] leaves a product whole.
const SPLIT_ROWS_MIN: usize = 64;

/// The inner dimension of each half of a split product runs in blocks of this many (the last
/// one shorter), each block added onto the previous ones.
const SPLIT_DEPTH: usize = 256;

/// `dst (+)= scale · lhs · rhs` on the calling thread, as a sum of products over blocks of
/// [`SPLIT_DEPTH`] of the inner dimension, in block order, into a destination whose rows start
/// `dst_stride` values apart. `gemm-f64` runs blocks of 512 by itself on the halves of a weight
/// gradient (`128 × 1024 · 1024 × 256`); blocks of 256 keep more of the operands in cache and
/// were faster (`docs/performance.md`).
///
/// # Safety
/// As [`gemm_raw_strided`]: `dst_stride ≥ n`; `dst` points at `m` rows of `n` writable values,
/// `dst_stride` apart, that nothing else accesses during the call, initialised if `accumulate`
/// (the first block writes every value before later blocks read them); and `k > 0` (with no
/// block at all, nothing would be written).
#[allow(unsafe_code)]
unsafe fn gemm_in_depth_blocks(
    target: Target,
    dst: *mut f64,
    dst_stride: usize,
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    scale: f64,
    accumulate: bool,
) {
    let k = lhs.cols;
    debug_assert!(k > 0, "a split product has an inner dimension (k ≥ 2·max(m, n) ≥ 128)");
    for p0 in (0..k).step_by(SPLIT_DEPTH) {
        let depth = SPLIT_DEPTH.min(k - p0);
        // columns p0..p0 + depth of the left side, the same rows of the right side
        let (left, right) = (lhs.t().rows_from(p0).rows_to(depth).t(), rhs.rows_from(p0).rows_to(depth));
        // SAFETY: the caller's promise for `dst`; the views are sub-views of checked ones.
        unsafe { gemm_raw_strided(target, dst, dst_stride, left, right, scale, accumulate || p0 > 0, false) };
    }
}

/// Row-by-row `i, p, j` loop for tiny products (the same sums as the naive kernel's, in the
/// order `p` runs): reads `rhs` rows contiguously when it is row-major.
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
/// Products that take `gemm-f64` are written into storage that was never filled: the kernel
/// writes every value and reads none when it does not accumulate (a split product's first depth
/// block writes every value of its half before the later blocks read them). A pass of zeros over
/// each output is saved — 2 MiB per product of an `mha-train` step. Other products (small ones
/// and one row) go through [`matmul`] on zeros. The caller has checked that
/// `m·n` values can be allocated.
///
/// # Errors
/// [`ShapeError`] if the dimensions do not chain, or the product has more than [`MAX_VALUES`]
/// values.
#[allow(unsafe_code)]
pub fn matmul_new(lhs: MatRef<'_>, rhs: MatRef<'_>, parallel: bool) -> Result<Vec<f64>> {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    let len = values_within_ceiling(m, n).ok_or_else(|| ShapeError {
        lhs: vec![m, k],
        rhs: vec![rhs.rows, n],
        reason: "the product has more values than the ceiling (gemm::MAX_VALUES)",
    })?;
    check_dims(len, &lhs, &rhs)?;
    if len == 0 {
        return Ok(Vec::new());
    }
    let target = active();
    note(target);
    let mut out = crate::allocator::unfilled(len);
    write_unfilled(target, &mut out.spare_capacity_mut()[..len], (lhs, rhs), parallel);
    // SAFETY: `write_unfilled` wrote all `len` values.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// Products side by side in one new vector: product `t`, `lhs_t · rhs_t` (each `m × n`), in
/// values `t·m·n..(t + 1)·m·n` — [`matmul_new`] for a batch (one product per head, say). Each
/// product runs on one thread, the products on every thread of the pool where `parallel`; each
/// part holds the bits [`matmul`] writes into it (`accumulate` and `parallel` false), without a
/// first pass of zeros where `gemm-f64` writes every value itself. The caller has checked that
/// the values can be allocated.
///
/// # Errors
/// [`ShapeError`] if a product's dimensions do not chain or its output is not `m × n`, or all
/// of them hold more than [`MAX_VALUES`] values.
#[allow(unsafe_code)]
pub fn matmul_new_batch(
    (m, n): (usize, usize),
    products: &[(MatRef<'_>, MatRef<'_>)],
    parallel: bool,
) -> Result<Vec<f64>> {
    let part = m.checked_mul(n);
    let Some(len) = part.and_then(|part| values_within_ceiling(products.len(), part)) else {
        return Err(ShapeError {
            lhs: vec![products.len(), m, n],
            rhs: vec![],
            reason: "the batch [products, m, n] has more values than the ceiling (gemm::MAX_VALUES)",
        });
    };
    let part = m * n;
    for (lhs, rhs) in products {
        if lhs.rows != m || rhs.cols != n {
            return Err(ShapeError {
                lhs: vec![lhs.rows, lhs.cols],
                rhs: vec![rhs.rows, rhs.cols],
                reason: "a product of the batch is not m × n, the batch's output shape",
            });
        }
        check_dims(part, lhs, rhs)?;
    }
    if len == 0 {
        return Ok(Vec::new());
    }
    let target = active();
    note(target);
    let mut out = crate::allocator::unfilled(len);
    let unfilled = &mut out.spare_capacity_mut()[..len];
    let write = |(dst, &product): (&mut [MaybeUninit<f64>], &(MatRef<'_>, MatRef<'_>))| {
        write_unfilled(target, dst, product, false)
    };
    if parallel {
        use rayon::prelude::*;
        unfilled.par_chunks_mut(part).zip(products.par_iter()).for_each(write);
    } else {
        unfilled.chunks_mut(part).zip(products).for_each(write);
    }
    // SAFETY: the parts cover `0..len` (`len = products · m·n`), and `write_unfilled` wrote
    // every value of each.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// Writes `lhs · rhs` into `dst` (its `m·n` values, none read first) by the path [`matmul`] takes
/// with `accumulate` false, so with its bits: the small loop, the one-row paths and an empty depth
/// on zeros (they run behind `matmul`'s `&mut [f64]`, which must hold values), the split halves
/// and `gemm-f64` straight into `dst`. The halves and `gemm-f64` use the pool's threads where
/// `parallel`. The caller checked the dimensions against `dst.len() = m·n > 0`.
#[allow(unsafe_code)]
fn write_unfilled(target: Target, dst: &mut [MaybeUninit<f64>], (lhs, rhs): (MatRef<'_>, MatRef<'_>), parallel: bool) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    debug_assert_eq!(dst.len(), m * n, "the destination holds the product");
    if cfg!(debug_assertions) {
        // NaN where nothing was written yet: a value a path below missed fails the tests' bitwise
        // comparisons instead of passing on whatever the allocator left there
        dst.fill(MaybeUninit::new(f64::NAN));
    }
    if k == 0 || is_small(m, k, n) || one_row(m, k, &rhs) {
        dst.fill(MaybeUninit::new(0.0));
        // SAFETY: every value of `dst` was just written.
        let dst = unsafe { &mut *(std::ptr::from_mut(dst) as *mut [f64]) };
        target.within(|| matmul(dst, lhs, rhs, false, parallel)).expect("dimensions checked by the caller");
    } else if splits_rows(m, k, n) {
        // the halves of `matmul_scaled`, each written into its own rows
        let (top, bottom) = dst.split_at_mut(m / 2 * n);
        let half_product = |part: &mut [MaybeUninit<f64>], rows: MatRef<'_>| {
            // the product writes exactly `rows·n` values: the part must hold that many
            assert_eq!(part.len(), rows.rows * n, "a half of the product and its rows disagree");
            // SAFETY: the part holds the rows·n values of its half, the halves of the left side
            // are views of its checked rows, and the first depth block writes every value before
            // later blocks read them (k > 0).
            unsafe { gemm_in_depth_blocks(target, part.as_mut_ptr().cast(), n, rows, rhs, 1.0, false) }
        };
        let (upper, lower) = (lhs.rows_to(m / 2), lhs.rows_from(m / 2));
        if parallel {
            rayon::join(|| half_product(top, upper), || half_product(bottom, lower));
        } else {
            half_product(top, upper);
            half_product(bottom, lower);
        }
    } else {
        // SAFETY: `dst` holds m·n values and the views were checked (as in `gemm_call`); without
        // accumulation the kernel writes every value before it reads any.
        unsafe { gemm_raw(target, dst.as_mut_ptr().cast(), lhs, rhs, 1.0, false, parallel) };
    }
}

/// Whether [`matmul_scaled`] runs `m × k · rhs` on one of its one-row paths.
fn one_row(m: usize, k: usize, rhs: &MatRef<'_>) -> bool {
    let n = rhs.cols;
    takes_row_path(m, k, n, rhs.row_stride, rhs.col_stride)
        || takes_transposed_row_path(m, k, n, rhs.row_stride, rhs.col_stride)
}

/// Below [`SMALL_PRODUCT`] multiply-adds: the naive loop.
fn is_small(m: usize, k: usize, n: usize) -> bool {
    m.saturating_mul(n).saturating_mul(k) < SMALL_PRODUCT
}

#[allow(unsafe_code)]
fn gemm_call(
    target: Target,
    dst: &mut [f64],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    scale: f64,
    accumulate: bool,
    parallel: bool,
) {
    // SAFETY: `dst` is exclusively borrowed and holds m·n values (checked by the caller).
    unsafe { gemm_raw(target, dst.as_mut_ptr(), lhs, rhs, scale, accumulate, parallel) }
}

/// The `gemm-f64` call behind [`gemm_call`] and [`matmul_new`].
///
/// # Safety
/// `dst` points at `m·n` writable values that nothing else accesses during the call, initialised
/// if `accumulate`; the dimensions chain (`check_dims`).
#[allow(unsafe_code)]
unsafe fn gemm_raw(
    target: Target,
    dst: *mut f64,
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    scale: f64,
    accumulate: bool,
    parallel: bool,
) {
    // SAFETY: the caller's contract, with rows of n values one after the other
    unsafe { gemm_raw_strided(target, dst, rhs.cols, lhs, rhs, scale, accumulate, parallel) }
}

/// [`gemm_raw`] into a destination whose rows start `dst_stride` values apart.
///
/// # Safety
/// `dst_stride ≥ n`; `dst` points at `m` rows of `n` writable values, `dst_stride` apart, that
/// nothing else accesses during the call, initialised if `accumulate`; the dimensions chain.
#[allow(unsafe_code, clippy::too_many_arguments)]
unsafe fn gemm_raw_strided(
    target: Target,
    dst: *mut f64,
    dst_stride: usize,
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    scale: f64,
    accumulate: bool,
    parallel: bool,
) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    let parallelism = if parallel { gemm_common::Parallelism::Rayon(0) } else { gemm_common::Parallelism::None };
    // every stride is within the storage (`MatRef::new`), and a slice never holds isize::MAX values
    let isz = |v: usize| {
        debug_assert!(isize::try_from(v).is_ok(), "a stride within the storage: {v}");
        v as isize
    };
    // The micro-kernel wants a column-major destination; a row-major `C = A·B` is the
    // column-major `Cᵀ = Bᵀ·Aᵀ`, so swap the operands and the strides (no data moves).
    // SAFETY: `MatRef::new` proved every strided read of both views in bounds; the caller
    // vouches for `dst` (see the function's contract).
    unsafe {
        targets::gemm_for(target)(
            n,
            m,
            k,
            dst,
            isz(dst_stride),
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
    //! The paths' choices and views; the products themselves are held to the teaching crate's
    //! naive loop by its tests (`tensor::matmul`).
    use super::*;

    #[test]
    fn a_wide_output_or_a_short_inner_dimension_stays_whole() {
        assert!(splits_rows(64, 1030, 8) && splits_rows(97, 300, 40));
        assert!(!splits_rows(1024, 256, 256) && !splits_rows(256, 1024, 768) && !splits_rows(32, 1024, 32));
    }

    #[test]
    fn row_views_past_their_end_are_empty_whatever_their_strides() {
        let x = [0.5; 12];
        let view = MatRef::row_major(&x, 3, 4).unwrap();
        assert_eq!(view.rows_from(1).data.len(), 8);
        assert!(view.rows_from(3).data.is_empty() && view.rows_from(3).rows == 0);
        let no_columns = MatRef::new(&x, 5, 0, 1_000, 1).unwrap();
        assert!(no_columns.rows_from(2).data.is_empty());
    }

    #[test]
    fn strides_a_view_never_moves_by_are_kept_within_its_storage() {
        let x = [0.5; 12];
        let one_row = MatRef::new(&x, 1, 4, usize::MAX, 2).unwrap();
        assert_eq!((one_row.row_stride, one_row.col_stride), (12, 2));
        let one_column = MatRef::new(&x, 4, 1, 3, 1 << 63).unwrap();
        assert_eq!((one_column.row_stride, one_column.col_stride), (3, 12));
        let empty = MatRef::new(&x, 0, 7, usize::MAX, usize::MAX).unwrap();
        assert_eq!((empty.row_stride, empty.col_stride), (12, 12));
        // a stride that is used stays as given, even where it is larger than the storage needs
        let wide = MatRef::new(&x, 2, 2, 10, 1).unwrap();
        assert_eq!((wide.row_stride, wide.col_stride), (10, 1));
        // `gemm-f64` asks whether a stride is 1: a stride of 2 or more over one stored value stays
        // 2 or more (cut to 1, a 1×k · k×1 product took its one-chain path, other bits)
        let one = [0.1];
        assert_eq!(MatRef::new(&one, 4096, 1, 0, 5).unwrap().col_stride, 2);
        assert_eq!(MatRef::new(&one, 1, 4096, 7, 0).unwrap().row_stride, 2);
        let (zero, unit) = (MatRef::new(&one, 1, 1, 0, 1).unwrap(), MatRef::new(&one, 1, 1, 1, 0).unwrap());
        assert_eq!((zero.row_stride, zero.col_stride, unit.row_stride, unit.col_stride), (0, 1, 1, 0));
    }

    #[test]
    fn the_row_path_never_takes_overlapping_rows() {
        // a zero-stride view describes 2³² rows over one value: the row path would keep a partial
        // result per 64 of them (gigabytes), so such products take the general kernel
        assert!(!takes_row_path(1, 1 << 32, 1, 0, 1));
        assert!(!takes_row_path(1, 1 << 20, 512, 511, 1));
        assert!(takes_row_path(1, 512, 512, 512, 1) && takes_row_path(1, 512, 512, 600, 1));
    }
}
