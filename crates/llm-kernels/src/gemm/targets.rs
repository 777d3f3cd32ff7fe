//! The `gemm-f64` matrix product compiled for the [`Target`] in force.
//!
//! `gemm-f64` picks its micro-kernels once per process from what the processor has (AVX-512,
//! then FMA, then scalar; NEON on aarch64) and offers no switch. Its micro-kernels for each
//! instruction set and its generic driver are public, so where AVX2 is forced on an AVX-512
//! processor this module calls the driver with the AVX2 micro-kernels: `--kernels avx2` then
//! measures AVX2 products there.
//!
//! The portable target leaves the product to `gemm-f64`'s own choice. Its scalar micro-kernels
//! round `a·b + c` twice where the others fuse it; that changes the last bits of the products,
//! and a model trained for hundreds of steps (chapter 36) amplifies them into its sixth decimal.
//! The AVX2 and AVX-512 micro-kernels give reports identical to the byte (`.ci/run` checks both
//! where the processor runs them).

use crate::target::Target;

/// The signature of `gemm-f64`'s product: `dst = alpha·dst + beta·lhs·rhs` on strided views.
pub(super) type GemmFn = unsafe fn(
    usize,
    usize,
    usize,
    *mut f64,
    isize,
    isize,
    bool,
    *const f64,
    isize,
    isize,
    *const f64,
    isize,
    isize,
    f64,
    f64,
    bool,
    bool,
    bool,
    gemm_common::Parallelism,
);

/// The product for `target`: `gemm-f64`'s AVX2 micro-kernels where AVX2 is forced on an AVX-512
/// processor, its own choice otherwise (see the module docs).
pub(super) fn gemm_for(target: Target) -> GemmFn {
    #[cfg(target_arch = "x86_64")]
    if target == Target::Avx2 && Target::Avx512.is_available() {
        return fma;
    }
    let _ = target;
    gemm_f64::gemm::f64::get_gemm_fn()
}

/// The name of the micro-kernels [`gemm_for`] runs for `target`.
pub(crate) fn gemm_kernel(target: Target) -> &'static str {
    match target {
        Target::Avx2 if Target::Avx2.is_available() => "avx2",
        _ if Target::Avx512.is_available() => "avx512",
        _ if Target::Avx2.is_available() => "avx2",
        _ if cfg!(target_arch = "aarch64") => "neon",
        _ => "scalar",
    }
}

/// Defines a [`GemmFn`] that runs `gemm-common`'s driver with one module of `gemm-f64`'s
/// micro-kernels (`$lanes` values per register, `$simd` the driver's instruction-set token).
/// Only x86-64 has a target to force this way (aarch64 has the portable one alone).
#[cfg(target_arch = "x86_64")]
macro_rules! gemm_with {
    ($(#[$attr:meta])* $name:ident, $kernels:path, $simd:ty, $lanes:expr) => {
        $(#[$attr])*
        #[allow(unsafe_code, clippy::too_many_arguments)]
        unsafe fn $name(
            m: usize,
            n: usize,
            k: usize,
            dst: *mut f64,
            dst_cs: isize,
            dst_rs: isize,
            read_dst: bool,
            lhs: *const f64,
            lhs_cs: isize,
            lhs_rs: isize,
            rhs: *const f64,
            rhs_cs: isize,
            rhs_rs: isize,
            alpha: f64,
            beta: f64,
            conj_dst: bool,
            conj_lhs: bool,
            conj_rhs: bool,
            parallelism: gemm_common::Parallelism,
        ) {
            use $kernels as ukr;
            use gemm_common::simd::MixedSimd;
            let Some(simd) = <$simd as MixedSimd<f64, f64, f64, f64>>::try_new() else {
                // the processor lacks the instructions (callers check the target first): let
                // gemm-f64 choose
                // SAFETY: the caller's contract is that of the product itself.
                return unsafe {
                    gemm_f64::gemm::f64::get_gemm_fn()(
                        m, n, k, dst, dst_cs, dst_rs, read_dst, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs, alpha,
                        beta, conj_dst, conj_lhs, conj_rhs, parallelism,
                    )
                };
            };
            // SAFETY: the caller's contract is that of the product (`gemm_raw`); `simd` proves the
            // processor runs these micro-kernels.
            unsafe {
                gemm_common::gemm::gemm_basic_generic::<
                    _,
                    f64,
                    { $lanes },
                    { ukr::MR_DIV_N * $lanes },
                    { ukr::NR },
                    { ukr::MR_DIV_N },
                    { ukr::H_M },
                    { ukr::H_N },
                >(
                    simd,
                    m,
                    n,
                    k,
                    dst,
                    dst_cs,
                    dst_rs,
                    read_dst,
                    lhs,
                    lhs_cs,
                    lhs_rs,
                    rhs,
                    rhs_cs,
                    rhs_rs,
                    alpha,
                    beta,
                    conj_dst,
                    conj_lhs,
                    conj_rhs,
                    |a, b, c| a * b + c,
                    &ukr::UKR,
                    &ukr::H_UKR,
                    false,
                    parallelism,
                )
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
gemm_with!(
    /// `gemm-f64`'s AVX2 + FMA micro-kernels (4 values per register).
    fma,
    gemm_f64::microkernel::fma::f64,
    gemm_common::simd::V3,
    4
);
