//! The AVX-512 operations on one [`Lanes`](super::Lanes): four 8-wide registers.

use std::arch::x86_64::{
    __m512d, _mm512_fmadd_pd, _mm512_load_pd, _mm512_loadu_pd, _mm512_mul_pd, _mm512_set1_pd, _mm512_setzero_pd,
    _mm512_store_pd, _mm512_storeu_pd,
};

use super::Lanes;

pub(super) type Wide = [__m512d; 4];

/// Values per vector register.
pub(super) const WIDTH: usize = 8;

#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn zero() -> __m512d {
    _mm512_setzero_pd()
}

/// The 8 values `values[at..at + 8]`, without a bounds check.
///
/// # Safety
/// `at + 8 <= values.len()`.
#[inline]
#[target_feature(enable = "avx512f")]
#[allow(unsafe_code)]
pub(super) unsafe fn load_at(values: &[f64], at: usize) -> __m512d {
    debug_assert!(at + WIDTH <= values.len());
    // SAFETY: the 8 values lie in `values` (the caller's promise); no alignment is needed.
    unsafe { _mm512_loadu_pd(values.as_ptr().add(at)) }
}

/// Writes `values[at..at + 8]`, without a bounds check.
///
/// # Safety
/// `at + 8 <= values.len()`.
#[inline]
#[target_feature(enable = "avx512f")]
#[allow(unsafe_code)]
pub(super) unsafe fn store_at(values: &mut [f64], at: usize, v: __m512d) {
    debug_assert!(at + WIDTH <= values.len());
    // SAFETY: as in `load_at`.
    unsafe { _mm512_storeu_pd(values.as_mut_ptr().add(at), v) }
}

/// `x · y + a` in one register, rounded once.
#[inline]
#[target_feature(enable = "avx512f,fma")]
pub(super) fn mul_add_one(x: f64, y: __m512d, a: __m512d) -> __m512d {
    _mm512_fmadd_pd(_mm512_set1_pd(x), y, a)
}

#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn splat(x: f64) -> Wide {
    [_mm512_set1_pd(x); 4]
}

#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn load(x: &Lanes) -> Wide {
    let p = x.0.as_ptr();
    // SAFETY: `Lanes` holds 32 values aligned to 64 bytes: the four aligned 8-wide loads
    // stay inside it.
    #[allow(unsafe_code)]
    unsafe {
        [_mm512_load_pd(p), _mm512_load_pd(p.add(8)), _mm512_load_pd(p.add(16)), _mm512_load_pd(p.add(24))]
    }
}

#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn store(v: Wide, x: &mut Lanes) {
    let p = x.0.as_mut_ptr();
    // SAFETY: as in `load`, the four aligned 8-wide stores stay inside the 32 values.
    #[allow(unsafe_code)]
    unsafe {
        for (i, v) in v.into_iter().enumerate() {
            _mm512_store_pd(p.add(8 * i), v);
        }
    }
}

/// `values[i]` without a bounds check: callers check once per tile instead of once per
/// multiply-add in the innermost loop.
///
/// # Safety
/// `i < values.len()`.
#[inline(always)]
#[allow(unsafe_code)]
pub(super) unsafe fn element(values: &[f64], i: usize) -> f64 {
    debug_assert!(i < values.len());
    // SAFETY: the caller's promise.
    unsafe { *values.get_unchecked(i) }
}

/// `x · y + a` in every lane, rounded once.
#[inline]
#[target_feature(enable = "avx512f,fma")]
pub(super) fn mul_add(x: f64, y: Wide, a: Wide) -> Wide {
    let x = _mm512_set1_pd(x);
    [
        _mm512_fmadd_pd(x, y[0], a[0]),
        _mm512_fmadd_pd(x, y[1], a[1]),
        _mm512_fmadd_pd(x, y[2], a[2]),
        _mm512_fmadd_pd(x, y[3], a[3]),
    ]
}

#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn mul(x: Wide, y: Wide) -> Wide {
    [_mm512_mul_pd(x[0], y[0]), _mm512_mul_pd(x[1], y[1]), _mm512_mul_pd(x[2], y[2]), _mm512_mul_pd(x[3], y[3])]
}
