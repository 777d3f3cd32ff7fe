//! Matrix products: the naive loop that says what a product is, and the call into the fast
//! kernel that every chapter's products run through.
//!
//! Both compute `dst (+)= lhs · rhs` for a row-major `dst` of `m × n` and strided views
//! ([`MatRef`]) of `lhs` (`m × k`) and `rhs` (`k × n`). Strides make transposes free: `q · kᵀ`
//! reads `k` with its strides swapped instead of copying it.
//!
//! [`matmul_naive`] is the definition, one dot product per output element. [`matmul`] computes
//! the same with the kernels crate's product ([`llm_kernels::gemm`]: packed, cache-blocked,
//! per instruction set, on several threads, with paths of its own for one row and for tiny
//! products); it agrees with the naive loop to rounding and is bitwise reproducible whatever the
//! thread count and the target (tests below hold it to both).

use crate::error::{Result, Shape, TensorAutodiffError};
use llm_kernels::gemm;

pub use llm_kernels::gemm::{MatRef, SMALL_PRODUCT};

impl From<gemm::ShapeError> for TensorAutodiffError {
    fn from(error: gemm::ShapeError) -> Self {
        TensorAutodiffError::ShapeMismatch {
            op: "matmul kernel",
            lhs: Shape(error.lhs),
            rhs: Shape(error.rhs),
            reason: error.reason,
        }
    }
}

/// The reference product: one dot product per output element, `k` summed left to right.
///
/// ```text
/// dst[i][j] (+)= Σ_p lhs[i][p] · rhs[p][j]
/// ```
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if the dimensions do not chain.
pub fn matmul_naive(dst: &mut [f64], lhs: MatRef<'_>, rhs: MatRef<'_>, accumulate: bool) -> Result<()> {
    gemm::check_dims(dst.len(), &lhs, &rhs)?;
    let (m, k, n) = (lhs.rows(), lhs.cols(), rhs.cols());
    for i in 0..m {
        for j in 0..n {
            let mut sum = 0.0;
            for p in 0..k {
                sum += lhs.at(i, p) * rhs.at(p, j);
            }
            let out = &mut dst[i * n + j];
            *out = if accumulate { *out + sum } else { sum };
        }
    }
    Ok(())
}

/// The fast product: the contract of [`matmul_naive`], on the threads of the current rayon pool
/// when `parallel` is true ([`gemm::matmul`]).
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if the dimensions do not chain.
pub fn matmul(dst: &mut [f64], lhs: MatRef<'_>, rhs: MatRef<'_>, accumulate: bool, parallel: bool) -> Result<()> {
    Ok(gemm::matmul(dst, lhs, rhs, accumulate, parallel)?)
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
    Ok(gemm::matmul_scaled(dst, lhs, rhs, scale, accumulate, parallel)?)
}

/// `lhs · rhs` as a new row-major `m × n` vector, written without a first pass of zeros
/// ([`gemm::matmul_new`]).
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if the dimensions do not chain, or the product has
/// more than [`gemm::MAX_VALUES`] values.
pub fn matmul_new(lhs: MatRef<'_>, rhs: MatRef<'_>, parallel: bool) -> Result<Vec<f64>> {
    Ok(gemm::matmul_new(lhs, rhs, parallel)?)
}

/// Products of one output shape side by side in one new vector, product `t` (`m × n`) in values
/// `t·m·n..`, each the bits of [`matmul`] of it alone on one thread, written without a first pass
/// of zeros ([`gemm::matmul_new_batch`]).
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if a product's dimensions do not chain or its output
/// is not `m × n`, or the batch holds more than [`gemm::MAX_VALUES`] values.
pub fn matmul_new_batch(
    shape: (usize, usize),
    products: &[(MatRef<'_>, MatRef<'_>)],
    parallel: bool,
) -> Result<Vec<f64>> {
    Ok(gemm::matmul_new_batch(shape, products, parallel)?)
}

/// `row [k] · matrixᵢ [k, nᵢ] → [nᵢ]` for one row and several matrices in one parallel pass
/// (decoding one token: its query, key and value projections); each equals [`matmul`] of the row
/// with that matrix, bitwise ([`gemm::row_times_matrices`]).
///
/// # Errors
/// [`TensorAutodiffError::ShapeMismatch`] if a matrix does not have `row.len()` rows.
pub fn row_times_matrices(row: &[f64], matrices: &[MatRef<'_>], parallel: bool) -> Result<Vec<Vec<f64>>> {
    Ok(gemm::row_times_matrices(row, matrices, parallel)?)
}

#[cfg(test)]
mod tests;
