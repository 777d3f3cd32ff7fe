//! Asking the processor early for memory a loop will read soon.
//!
//! Rows a long stride apart (one head's part of each token's row, RoPE's rows when it splits
//! heads) defeat the processor's own guess of what comes next, and a loop that does much work per
//! row keeps only a few of their loads in flight. A loop that knows its rows asks for them first.

/// Asks for the cache lines of `bytes` bytes from `start`: a hint, which reads nothing and changes
/// nothing, whatever the address (on processors other than x86-64, nothing at all).
#[inline(always)]
pub(crate) fn fetch_bytes(start: *const f64, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..bytes).step_by(64) {
        // SAFETY: a prefetch reads no value and faults on no address, valid or not
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(start.cast::<i8>().wrapping_add(line))
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, bytes);
}

/// Asks for the `count` rows of `width` values from `first`, `stride` values apart, in `values`
/// (rows past the end are not asked for).
#[inline(always)]
pub(crate) fn fetch_rows(values: &[f64], (first, count): (usize, usize), width: usize, stride: usize) {
    for r in first..first + count {
        if let Some(row) = values.get(r * stride..r * stride + width) {
            fetch_bytes(row.as_ptr(), std::mem::size_of_val(row));
        }
    }
}
