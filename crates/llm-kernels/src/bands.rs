//! Column bands of a row-major matrix, each written by its own task: how tasks on different
//! threads write side by side in the same rows, into storage that need not be filled first.
//!
//! A layer keeps its heads side by side in each token's row (`[B, T, H·d]`), but attention works
//! one head at a time. [`column_bands`] cuts such a buffer into `H` bands of `d` columns;
//! [`Band::split_rows`] cuts a band into runs of rows; each piece writes only its own values, so
//! pieces can go to different tasks, as slices from `chunks_mut` do for runs of whole rows. A
//! band of a whole row ([`Band::whole`]) is the plain case: rows side by side.
//!
//! A band is written row after row, each row whole ([`Band::write_row`], through the
//! [`RowOut`] of [`crate::rows`]), so a band never needs its values to be there before. That
//! lets a kernel write an output that was never filled: [`Unfilled`] holds storage for `len`
//! values, cuts it into bands, counts the values its bands write, and hands the values over
//! ([`Unfilled::finish`]) only when the count says every one was written — no pass of zeros
//! before the kernel writes them all anyway; else it returns an [`Unwritten`] error.
//!
//! The `unsafe` steps are here: a band holds a pointer into the buffer rather than a slice,
//! since its values are not contiguous, and [`Unfilled::finish`] tells the vector its values are
//! there. The types keep the pieces apart — bands are made only by cutting one `&mut` buffer
//! into disjoint columns or one band, before any row of it is written, into disjoint runs of
//! rows — so no two pieces ever reach the same value, and a count of the values each piece wrote
//! that reaches `len` means that every value was written.

use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::sync::atomic::{AtomicUsize, Ordering};

use thiserror::Error;

use crate::rows::{RowOut, Written};

/// Some rows of some columns of a row-major buffer: row `r` is `width` values starting `r ·
/// stride` values after the band's first. Its rows are written in order, each once.
#[derive(Debug)]
pub struct Band<'a> {
    first: *mut MaybeUninit<f64>,
    rows: usize,
    width: usize,
    stride: usize,
    /// Rows written so far, from the first.
    written: usize,
    /// Where an [`Unfilled`] buffer counts the values written, when the band was cut from one.
    tally: Option<&'a AtomicUsize>,
    buffer: PhantomData<&'a mut [f64]>,
}

// SAFETY: a band is the only handle to its values (see the module docs), as a `&mut [f64]` would
// be; `f64` is `Send` and the tally is an atomic counter.
#[allow(unsafe_code)]
unsafe impl Send for Band<'_> {}

/// Cuts `buffer`, rows of `row_len` values, into `row_len / width` bands of `width` columns, in
/// order. Each band has every row of the buffer.
///
/// # Panics
/// If `width` is zero or does not divide `row_len` (so `row_len` of zero too), or `row_len` does
/// not divide the buffer's length.
pub fn column_bands(buffer: &mut [f64], row_len: usize, width: usize) -> Vec<Band<'_>> {
    // writing an `f64` over an `f64` keeps the buffer's values initialised: a `&mut [f64]` seen
    // as storage to write
    let len = buffer.len();
    cut(buffer.as_mut_ptr().cast(), len, (row_len, width), None)
}

/// The bands of `len` values from `start` (see [`column_bands`]), counted into `tally` if any.
fn cut<'a>(
    start: *mut MaybeUninit<f64>,
    len: usize,
    (row_len, width): (usize, usize),
    tally: Option<&'a AtomicUsize>,
) -> Vec<Band<'a>> {
    assert!(
        width > 0 && row_len > 0 && row_len.is_multiple_of(width),
        "bands of {width} do not tile rows of {row_len}"
    );
    assert!(len.is_multiple_of(row_len), "{len} values are not rows of {row_len}");
    let rows = len / row_len;
    (0..row_len / width)
        .map(|c| Band {
            // in bounds (or one past the end of an empty buffer): c·width < row_len
            first: start.wrapping_add(c * width),
            rows,
            width,
            stride: row_len,
            written: 0,
            tally,
            buffer: PhantomData,
        })
        .collect()
}

impl<'a> Band<'a> {
    /// The rows of `buffer`, each `width` values, side by side: one band of whole rows.
    ///
    /// # Panics
    /// If `width` is zero or does not divide the buffer's length.
    pub fn whole(buffer: &'a mut [f64], width: usize) -> Self {
        column_bands(buffer, width, width).swap_remove(0)
    }

    /// Rows in the band.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Values per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The distance, in values, from the start of one row to the next (the width where rows lie
    /// side by side).
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Rows written so far: the next [`Band::write_row`] writes this one.
    pub fn rows_written(&self) -> usize {
        self.written
    }

    /// Writes the band's next row, whole, by `fill`, which returns the row's receipt.
    ///
    /// # Panics
    /// If every row of the band is written.
    #[inline(always)]
    pub fn write_row(&mut self, fill: impl for<'r> FnOnce(RowOut<'r>) -> Written<'r>) {
        assert!(self.written < self.rows, "a band of {} rows has no row left to write", self.rows);
        // SAFETY: rows below `self.rows` lie inside the buffer the band was cut from, and only this
        // band reaches these values; the `&mut self` borrow makes the slice the only handle while
        // it lives.
        #[allow(unsafe_code)]
        let row = unsafe { std::slice::from_raw_parts_mut(self.first.add(self.written * self.stride), self.width) };
        let _: Written<'_> = fill(RowOut::new(row));
        self.written += 1;
    }

    /// Asks the processor for the cache lines of the next `count` rows (those there are), before
    /// they are written: where rows lie a stride apart, their stores then wait on fewer loads.
    pub fn fetch_next_rows(&self, count: usize) {
        let bytes = self.width * size_of::<f64>();
        for r in self.written..self.written.saturating_add(count).min(self.rows) {
            crate::fetch::fetch_bytes(self.first.wrapping_add(r * self.stride).cast(), bytes);
        }
    }

    /// The first `at` rows and the rest, as two bands.
    ///
    /// # Panics
    /// If `at` exceeds [`Band::rows`], or a row of the band is written already.
    pub fn split_rows(self, at: usize) -> (Self, Self) {
        assert!(at <= self.rows, "split at {at} of a band of {} rows", self.rows);
        assert_eq!(self.written, 0, "a band is cut before its rows are written");
        // the two parts take over the band's rows: it counts none of them
        let band = ManuallyDrop::new(self);
        let part = |first, rows| Band { first, rows, written: 0, tally: band.tally, buffer: PhantomData, ..*band };
        // in bounds, or one past the band's last row where `at = rows`
        (part(band.first, at), part(band.first.wrapping_add(at * band.stride), band.rows - at))
    }

    /// The band cut into runs of `rows` rows (the last may be shorter), in order.
    ///
    /// # Panics
    /// If `rows` is zero, or a row of the band is written already.
    pub fn chunks(self, rows: usize) -> Vec<Self> {
        assert!(rows > 0, "runs of zero rows");
        let mut runs = Vec::with_capacity(self.rows.div_ceil(rows));
        let mut rest = self;
        while rest.rows > 0 {
            let take = rows.min(rest.rows);
            let (run, tail) = rest.split_rows(take);
            runs.push(run);
            rest = tail;
        }
        runs
    }
}

impl Drop for Band<'_> {
    fn drop(&mut self) {
        if let Some(tally) = self.tally {
            // the threads' joins order these additions before `Unfilled::finish` reads them
            tally.fetch_add(self.written * self.width, Ordering::Relaxed);
        }
    }
}

/// Storage for `len` values that bands write before anything reads them: a kernel's output
/// without a pass of zeros first.
///
/// ```
/// use llm_kernels::bands::Unfilled;
/// // 2 rows of 2 bands of 3 values; band c writes c + 10·r into row r
/// let mut out = Unfilled::new(12);
/// for (c, mut band) in out.column_bands(6, 3).into_iter().enumerate() {
///     for r in 0..band.rows() {
///         band.write_row(|row| row.write_with(|_| (c + 10 * r) as f64));
///     }
/// }
/// assert_eq!(out.finish()?, [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 10.0, 10.0, 10.0, 11.0, 11.0, 11.0]);
/// # Ok::<(), llm_kernels::bands::Unwritten>(())
/// ```
#[derive(Debug)]
pub struct Unfilled {
    /// Capacity for `len` values, none of them there yet.
    values: Vec<f64>,
    len: usize,
    /// Values written by the bands of the last [`Unfilled::column_bands`].
    written: AtomicUsize,
}

impl Unfilled {
    /// Storage for `len` values.
    ///
    /// # Panics
    /// As `Vec::with_capacity`, if `len` values cannot be allocated (callers check sizes first).
    pub fn new(len: usize) -> Self {
        Self { values: Vec::with_capacity(len), len, written: AtomicUsize::new(0) }
    }

    /// The storage, rows of `row_len` values, cut into `row_len / width` bands of `width`
    /// columns, as [`column_bands`] cuts a buffer; what they write counts towards
    /// [`Unfilled::finish`] (and what bands of an earlier call wrote no longer does).
    ///
    /// # Panics
    /// As [`column_bands`].
    pub fn column_bands(&mut self, row_len: usize, width: usize) -> Vec<Band<'_>> {
        let Self { values, len, written } = self;
        *written.get_mut() = 0;
        let start = values.spare_capacity_mut()[..*len].as_mut_ptr();
        cut(start, *len, (row_len, width), Some(written))
    }

    /// The values, once every one was written.
    ///
    /// # Errors
    /// [`Unwritten`] if the bands of the last [`Unfilled::column_bands`] did not write every value
    /// (a kernel that skipped rows, or a band leaked: a bug, which tests of every kernel path
    /// against the plain one catch); the storage is freed.
    pub fn finish(self) -> Result<Vec<f64>, Unwritten> {
        let Self { mut values, len, written } = self;
        let written = written.into_inner();
        if written != len {
            return Err(Unwritten { written, len });
        }
        // SAFETY: the capacity holds `len` values. The bands of the last cut cover disjoint values
        // (see the module docs): each counted, when dropped, only the rows it wrote, each written
        // whole (`write_row` counts a row after its `RowOut` returned the receipt, which only a
        // method that writes every value of the row makes), and bands of earlier cuts, all gone
        // before that cut began (it borrows `self` mutably), count nothing since. A count of
        // `len` is therefore every value.
        #[allow(unsafe_code)]
        unsafe {
            values.set_len(len)
        };
        Ok(values)
    }
}

/// [`Unfilled::finish`] where its bands did not write every value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("bands wrote {written} of {len} values")]
pub struct Unwritten {
    /// The values the bands wrote.
    pub written: usize,
    /// The values the storage holds.
    pub len: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `c + 10·r` into row `r` of band `c`.
    fn label(c: usize, band: &mut Band<'_>) {
        let r = band.rows_written();
        band.write_row(|row| row.write_with(|_| c as f64 + 10.0 * r as f64));
    }

    #[test]
    fn bands_write_their_own_columns_and_nothing_else() {
        // 3 rows of 6 values in bands of 2, each band in runs of 2 rows
        let mut buffer = vec![0.0; 18];
        for (c, band) in column_bands(&mut buffer, 6, 2).into_iter().enumerate() {
            for mut run in band.chunks(2) {
                (0..run.rows()).for_each(|_| label(c, &mut run));
            }
        }
        // runs of 2 rows: the third row is the first of the second run
        let want = [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 10.0, 10.0, 11.0, 11.0, 12.0, 12.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0];
        assert_eq!(buffer, want);
    }

    #[test]
    fn a_whole_band_is_rows_side_by_side() {
        let mut buffer = vec![0.0; 6];
        let mut band = Band::whole(&mut buffer, 3);
        assert_eq!((band.rows(), band.width()), (2, 3));
        band.write_row(|row| row.copy_from(&[1.0, 2.0, 3.0]));
        band.write_row(|row| row.copy_from(&[4.0, 5.0, 6.0]));
        drop(band);
        assert_eq!(buffer, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(Band::whole(&mut [], 4).rows(), 0);
    }

    #[test]
    fn bands_go_to_other_threads() {
        let mut out = Unfilled::new(64);
        std::thread::scope(|s| {
            for (c, mut band) in out.column_bands(8, 4).into_iter().enumerate() {
                s.spawn(move || (0..band.rows()).for_each(|_| band.write_row(|row| row.write_with(|_| c as f64))));
            }
        });
        let values = out.finish().unwrap();
        assert!(values.chunks(4).enumerate().all(|(i, x)| x.iter().all(|&v| v == (i % 2) as f64)));
    }

    #[test]
    fn unfilled_storage_is_handed_over_once_bands_in_runs_wrote_it_all() {
        // 5 rows of 3 bands of 2, bands cut into runs of 2, 2 and 1 rows
        let mut out = Unfilled::new(30);
        for (c, band) in out.column_bands(6, 2).into_iter().enumerate() {
            for mut run in band.chunks(2) {
                (0..run.rows()).for_each(|_| label(c, &mut run));
            }
        }
        let values = out.finish().unwrap();
        let want: Vec<f64> = (0..30).map(|i| ((i % 6) / 2) as f64 + 10.0 * (((i / 6) % 2) as f64)).collect();
        assert_eq!(values, want);
        // no values: nothing to write
        assert_eq!(Unfilled::new(0).finish(), Ok(Vec::new()));
    }

    #[test]
    fn a_row_left_unwritten_is_caught_before_the_values_are_read() {
        let mut out = Unfilled::new(30);
        for (c, mut band) in out.column_bands(6, 2).into_iter().enumerate() {
            // band 1 stops a row short
            let rows = if c == 1 { band.rows() - 1 } else { band.rows() };
            (0..rows).for_each(|_| label(c, &mut band));
        }
        assert_eq!(out.finish(), Err(Unwritten { written: 28, len: 30 }));
    }

    #[test]
    fn only_the_last_cut_counts() {
        // the first cut writes everything, the second only its first band: half the values,
        // whatever the first cut wrote
        let mut out = Unfilled::new(24);
        for (c, mut band) in out.column_bands(4, 2).into_iter().enumerate() {
            (0..band.rows()).for_each(|_| label(c, &mut band));
        }
        if let Some(mut band) = out.column_bands(4, 2).into_iter().next() {
            (0..band.rows()).for_each(|_| label(0, &mut band));
        }
        assert_eq!(out.finish(), Err(Unwritten { written: 12, len: 24 }));
    }

    #[test]
    fn a_leaked_band_is_an_unwritten_error_not_unread_storage() {
        let mut out = Unfilled::new(8);
        let mut bands = out.column_bands(4, 4);
        let mut band = bands.remove(0);
        (0..band.rows()).for_each(|_| label(0, &mut band));
        std::mem::forget(band); // its count never arrives
        drop(bands);
        assert_eq!(out.finish(), Err(Unwritten { written: 0, len: 8 }));
    }

    #[test]
    #[should_panic(expected = "a band of 2 rows has no row left to write")]
    fn a_row_past_the_band_panics() {
        let mut buffer = vec![0.0; 8];
        let mut band = column_bands(&mut buffer, 4, 2).remove(0);
        (0..3).for_each(|_| label(0, &mut band));
    }

    #[test]
    #[should_panic(expected = "a band is cut before its rows are written")]
    fn a_band_is_cut_only_before_it_is_written() {
        let mut buffer = vec![0.0; 8];
        let mut band = Band::whole(&mut buffer, 2);
        label(0, &mut band);
        band.chunks(2);
    }

    #[test]
    #[should_panic(expected = "bands of 3 do not tile rows of 4")]
    fn bands_must_tile_the_rows() {
        column_bands(&mut [0.0; 8], 4, 3);
    }
}
