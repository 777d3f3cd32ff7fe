//! Column bands of a row-major matrix, each writable on its own: how tasks on different threads
//! write side by side in the same rows.
//!
//! A layer keeps its heads side by side in each token's row (`[B, T, H·d]`), but attention works
//! one head at a time. [`column_bands`] cuts such a buffer into `H` bands of `d` columns;
//! [`Band::split_rows`] cuts a band into runs of rows; each piece writes only its own values
//! ([`Band::row_mut`]), so pieces can go to different tasks, as slices from `chunks_mut` do for
//! runs of whole rows. A band of a whole row ([`Band::whole`]) is the plain case: rows side by
//! side.
//!
//! The one `unsafe` step is here: a band holds a pointer into the buffer rather than a slice,
//! since its values are not contiguous. The types keep the pieces apart — bands are made only by
//! cutting one `&mut` buffer into disjoint columns or one band into disjoint runs of rows — so no
//! two pieces ever reach the same value.

use std::marker::PhantomData;

/// Some rows of some columns of a row-major buffer: row `r` is `width` values starting `r ·
/// stride` values after the band's first.
#[derive(Debug)]
pub struct Band<'a> {
    first: *mut f64,
    rows: usize,
    width: usize,
    stride: usize,
    buffer: PhantomData<&'a mut [f64]>,
}

// SAFETY: a band is the only handle to its values (see the module docs), as a `&mut [f64]` would
// be, and `f64` is `Send`.
#[allow(unsafe_code)]
unsafe impl Send for Band<'_> {}

/// Cuts `buffer`, rows of `row_len` values, into `row_len / width` bands of `width` columns, in
/// order. Each band has every row of the buffer.
///
/// # Panics
/// If `width` is zero or does not divide `row_len` (so `row_len` of zero too), or `row_len` does
/// not divide the buffer's length.
pub fn column_bands(buffer: &mut [f64], row_len: usize, width: usize) -> Vec<Band<'_>> {
    assert!(
        width > 0 && row_len > 0 && row_len.is_multiple_of(width),
        "bands of {width} do not tile rows of {row_len}"
    );
    assert!(buffer.len().is_multiple_of(row_len), "{} values are not rows of {row_len}", buffer.len());
    let rows = buffer.len() / row_len;
    let start = buffer.as_mut_ptr();
    (0..row_len / width)
        .map(|c| Band {
            // in bounds (or one past the end of an empty buffer): c·width < row_len
            first: start.wrapping_add(c * width),
            rows,
            width,
            stride: row_len,
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

    /// The band's values of row `r`.
    ///
    /// # Panics
    /// If `r` is not below [`Band::rows`].
    pub fn row_mut(&mut self, r: usize) -> &mut [f64] {
        assert!(r < self.rows, "row {r} of a band of {} rows", self.rows);
        // SAFETY: rows below `self.rows` lie inside the buffer the band was cut from, and only this
        // band reaches these values; the `&mut self` borrow makes the slice the only handle while
        // it lives.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.first.add(r * self.stride), self.width)
        }
    }

    /// The first `at` rows and the rest, as two bands.
    ///
    /// # Panics
    /// If `at` exceeds [`Band::rows`].
    pub fn split_rows(self, at: usize) -> (Self, Self) {
        assert!(at <= self.rows, "split at {at} of a band of {} rows", self.rows);
        let rest = Band {
            // in bounds, or one past the band's last row where `at = rows`
            first: self.first.wrapping_add(at * self.stride),
            rows: self.rows - at,
            ..self
        };
        (Band { rows: at, ..self }, rest)
    }

    /// The band cut into runs of `rows` rows (the last may be shorter), in order.
    ///
    /// # Panics
    /// If `rows` is zero.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_write_their_own_columns_and_nothing_else() {
        // 3 rows of 6 values in bands of 2: band c writes 10·r + c into its columns of row r
        let mut buffer = vec![0.0; 18];
        for (c, band) in column_bands(&mut buffer, 6, 2).into_iter().enumerate() {
            for mut run in band.chunks(2) {
                for r in 0..run.rows() {
                    run.row_mut(r).fill(c as f64 + 10.0 * r as f64);
                }
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
        band.row_mut(1).copy_from_slice(&[1.0, 2.0, 3.0]);
        assert_eq!(buffer, [0.0, 0.0, 0.0, 1.0, 2.0, 3.0]);
        assert_eq!(Band::whole(&mut [], 4).rows(), 0);
    }

    #[test]
    fn bands_go_to_other_threads() {
        let mut buffer = vec![0.0; 64];
        std::thread::scope(|s| {
            for (c, mut band) in column_bands(&mut buffer, 8, 4).into_iter().enumerate() {
                s.spawn(move || (0..band.rows()).for_each(|r| band.row_mut(r).fill(c as f64)));
            }
        });
        assert!(buffer.chunks(4).enumerate().all(|(i, x)| x.iter().all(|&v| v == (i % 2) as f64)));
    }

    #[test]
    #[should_panic(expected = "row 2 of a band of 2 rows")]
    fn a_row_past_the_band_panics() {
        let mut buffer = vec![0.0; 8];
        column_bands(&mut buffer, 4, 2).remove(0).row_mut(2);
    }

    #[test]
    #[should_panic(expected = "bands of 3 do not tile rows of 4")]
    fn bands_must_tile_the_rows() {
        column_bands(&mut [0.0; 8], 4, 3);
    }
}
