//! `f64` values stored from a cache-line boundary: a growable buffer for rows that a kernel reads
//! many times over, such as the keys and values of a KV cache.
//!
//! glibc's allocator (x86-64 Linux) returns memory 16 bytes past a 64-byte line, so a row of 64
//! values starts in the middle of a line and every 64-byte load of it (one AVX-512 register)
//! touches two lines. Where a kernel reads the same rows again and again from the first-level
//! cache — the queries of a chat turn taking turns over a long cache's keys and values — those
//! split loads cost a fifth of its time (`docs/performance.md`, "2026-12-06, fifth").
//! [`AlignedValues`] starts its first value on a line, so rows whose width is a multiple of eight
//! values all do.

use std::collections::TryReserveError;
use std::fmt;
use std::ops::{Deref, DerefMut};

/// Values in a cache line.
const LINE: usize = 8;

/// One cache line of values: its alignment is what places the buffer's first value on a line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f64; LINE]);

/// A growable buffer of `f64` whose first value starts a 64-byte cache line; it reads and
/// writes as a slice (`Deref<Target = [f64]>`), and grows like a `Vec` (by whole lines: the
/// values past [`AlignedValues::len`] in the last line are kept at zero and never seen).
///
/// ```
/// use llm_kernels::aligned::AlignedValues;
/// let mut lane = AlignedValues::new();
/// lane.try_reserve_exact(100).unwrap();
/// lane.extend_from_slice(&[1.0, 2.0, 3.0]);
/// lane[1] = 5.0;
/// assert_eq!(&lane[..], &[1.0, 5.0, 3.0]);
/// assert!((lane.as_ptr() as usize).is_multiple_of(64));
/// assert!(lane.capacity() >= 100);
/// ```
#[derive(Default)]
pub struct AlignedValues {
    lines: Vec<Line>,
    /// Values in use: at most `lines.len() · LINE`.
    len: usize,
}

impl AlignedValues {
    /// An empty buffer; nothing is allocated until values are reserved or added.
    pub const fn new() -> Self {
        Self { lines: Vec::new(), len: 0 }
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Values it can hold without allocating again.
    pub fn capacity(&self) -> usize {
        self.lines.capacity() * LINE
    }

    /// Lines to add for room for `additional` more values (saturating: a request past `usize`
    /// asks for more lines than any allocation can hold, and reserving them fails).
    fn more_lines(&self, additional: usize) -> usize {
        self.len.saturating_add(additional).div_ceil(LINE).saturating_sub(self.lines.len())
    }

    /// Room for at least `additional` more values, allocated exactly (up to a whole line), or the
    /// allocator's refusal, leaving the buffer as it was.
    ///
    /// # Errors
    /// When the size overflows or the allocator fails.
    pub fn try_reserve_exact(&mut self, additional: usize) -> Result<(), TryReserveError> {
        self.lines.try_reserve_exact(self.more_lines(additional))
    }

    /// Room for at least `additional` more values, growing as a `Vec` grows.
    ///
    /// # Panics
    /// As `Vec::reserve`: if the size overflows (the allocator's failure aborts).
    pub fn reserve(&mut self, additional: usize) {
        self.lines.reserve(self.more_lines(additional));
    }

    /// Appends `values`.
    ///
    /// # Panics
    /// As `Vec::extend_from_slice`: if the size overflows.
    pub fn extend_from_slice(&mut self, values: &[f64]) {
        let at = self.len;
        let len = at.checked_add(values.len()).expect("capacity overflow");
        self.lines.resize(len.div_ceil(LINE), Line([0.0; LINE]));
        self.len = len;
        self[at..].copy_from_slice(values);
    }

    /// Removes every value, keeping the allocation.
    pub fn clear(&mut self) {
        self.lines.clear();
        self.len = 0;
    }
}

impl Deref for AlignedValues {
    type Target = [f64];

    fn deref(&self) -> &[f64] {
        // SAFETY: `Line` is `repr(C)` around `[f64; 8]` (64 bytes, no padding), so `lines` is
        // `8 · lines.len()` initialised `f64` in a row, and `len ≤ 8 · lines.len()`.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.lines.as_ptr().cast::<f64>(), self.len)
        }
    }
}

impl DerefMut for AlignedValues {
    fn deref_mut(&mut self) -> &mut [f64] {
        // SAFETY: as in `deref`, borrowed mutably through `lines`.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f64>(), self.len)
        }
    }
}

impl Clone for AlignedValues {
    /// A copy with the same capacity (a derived clone would trim it, and the next append would
    /// then reallocate).
    fn clone(&self) -> Self {
        let mut lines = Vec::with_capacity(self.lines.capacity());
        lines.extend_from_slice(&self.lines);
        Self { lines, len: self.len }
    }
}

impl fmt::Debug for AlignedValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for AlignedValues {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aligned(values: &AlignedValues) -> bool {
        (values.as_ptr() as usize).is_multiple_of(64)
    }

    #[test]
    fn values_start_on_a_line_and_read_back_as_written() {
        let mut v = AlignedValues::new();
        assert!(v.is_empty() && v.capacity() == 0 && v[..].is_empty());
        let mut expected = Vec::new();
        // appends of every length around a line, through several reallocations
        for n in 0..40 {
            let more: Vec<f64> = (0..n).map(|i| (expected.len() + i) as f64 * 0.5 - 3.0).collect();
            v.extend_from_slice(&more);
            expected.extend_from_slice(&more);
            assert_eq!(&v[..], &expected[..], "after appending {n}");
            assert!(aligned(&v) && v.len() == expected.len() && v.capacity() >= v.len());
        }
        v[3] = 9.0;
        expected[3] = 9.0;
        assert_eq!(&v[..], &expected[..]);
        // a copy keeps the values, the capacity and the alignment
        let copy = v.clone();
        assert!(copy == v && copy.capacity() == v.capacity() && aligned(&copy));
        // cleared: empty, the allocation kept; what is appended next reads back alone (the values
        // past the end of the last line start at zero again)
        let capacity = v.capacity();
        v.clear();
        assert!(v.is_empty() && v.capacity() == capacity);
        v.extend_from_slice(&[1.0]);
        assert_eq!(&v[..], &[1.0]);
        assert_eq!(format!("{v:?}"), "[1.0]");
    }

    #[test]
    fn reservations_are_exact_up_to_a_line_and_refusals_leave_the_buffer() {
        let mut v = AlignedValues::new();
        v.try_reserve_exact(17).unwrap();
        assert_eq!(v.capacity(), 24);
        let before = v.as_ptr();
        v.extend_from_slice(&[2.0; 24]);
        assert_eq!(v.as_ptr(), before, "an append within the reservation does not move the values");
        v.reserve(1);
        assert!(v.capacity() >= 25 && aligned(&v));
        // sizes past any allocation: refused, the buffer unchanged
        for too_many in [usize::MAX, usize::MAX / 8, isize::MAX as usize] {
            assert!(v.try_reserve_exact(too_many).is_err());
            assert_eq!(&v[..], &[2.0; 24][..]);
        }
    }
}
