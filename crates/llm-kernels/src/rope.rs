//! RoPE's row loop: every coordinate pair of a row turned by its angle, compiled per target.
//!
//! The teaching crate's `nn::rope` says what a rotation is (`rotate_pair`, the angle tables, the
//! positions of each row). For each block of rows it builds with [`crate::rows::build_rows`], it
//! calls [`RowRotation::rotate_rows`] once, with a [`RotationRows`] that names each row's input
//! and angles: the loop over the block's rows, and the pairs of each row in blocks of four, run in
//! one function compiled for the target. Its tests hold the two to the same bits.

use crate::isa::{Checked, Isa, Kernel};
use crate::rows::{BlockWritten, RowBlock, RowOut, Written, prefetch};
use crate::target::Target;

/// Which coordinates form a rotated pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairLayout {
    /// Pairs `(2i, 2i+1)`.
    Adjacent,
    /// Pairs `(i, i + d/2)`.
    Apart,
}

/// The rotation of one coordinate pair by the angle whose cosine and sine are `c` and `s`:
/// `(x_a, x_b) ↦ (x_a·c − x_b·s, x_a·s + x_b·c)` (the teaching crate's `rotate_pair`).
#[inline(always)]
fn rotate_pair((xa, xb): (f64, f64), c: f64, s: f64) -> (f64, f64) {
    (xa * c - xb * s, xa * s + xb * c)
}

/// What a block of rotated rows reads: for each output row, its input row and the angles it is
/// turned by.
pub trait RotationRows {
    /// `(cos, sin, input)` of output row `r`: the cosines and sines of its pairs' angles and the
    /// row they turn. Asked for in increasing `r`, one task's rows at a time.
    fn row(&mut self, r: usize) -> (&[f64], &[f64], &[f64]);

    /// The input row of output row `r + AHEAD`, if there is one, asked for just before row `r`:
    /// the loop asks the memory for it early ([`AHEAD`]). `None` asks for nothing.
    fn ahead(&mut self, _r: usize) -> Option<&[f64]> {
        None
    }
}

/// How many rows ahead the row loop asks the memory for an input row. A row's input may lie far
/// from the last one's (2 KiB apart when a rotation splits heads), where the processor's own
/// prefetching does not follow, and the loop's work per row is short enough that few rows' loads
/// are in flight at once: fetching eight rows ahead made the rotation of a query tensor just
/// written by a product about 30 % faster (`docs/performance.md`).
pub const AHEAD: usize = 8;

/// The row loop for one target, checked once: made where a rotation begins, from
/// [`active`](crate::target::active), and used for every block of rows (on every worker thread).
#[derive(Clone, Copy, Debug)]
pub struct RowRotation(Checked);

impl RowRotation {
    /// The row loop compiled for `target` (the portable one where the processor lacks it).
    pub fn new(target: Target) -> Self {
        Self(Checked::new(target))
    }

    /// Writes every row of `out`: output row `r` is the input row that `rows` gives for it, its
    /// pairs turned by the angles whose cosines are `cos` and sines `sign · sin` (sign −1 is the
    /// inverse rotation: the backward), pair `i` by `cos[i]`, `sin[i]`.
    ///
    /// The whole block runs in one call of the loop compiled for the target, `rows` included.
    ///
    /// # Panics
    /// If the row's width is odd, or an input row is not as wide as the output's rows, or `cos`
    /// and `sin` hold fewer than half its width (callers pass the tables of a checked head width).
    #[inline]
    pub fn rotate_rows<'o>(
        self,
        layout: PairLayout,
        rows: &mut impl RotationRows,
        out: RowBlock<'o>,
        sign: f64,
    ) -> BlockWritten<'o> {
        self.0.run(RotateRows { layout, rows, out, sign })
    }
}

/// Pairs per block of the row loops: four pairs are one AVX-512 register of each half (apart)
/// or one of interleaved pairs (adjacent).
const BLOCK: usize = 4;

/// One row of [`PairLayout::Apart`]: pair `(input[i], input[i + d/2])` turned by the angle whose
/// cosine is `cos[i]` and sine `sign · sin[i]`, written to the same places of `out`.
///
/// Whole blocks of [`BLOCK`] pairs first, each a fixed-size loop the compiler turns into a few
/// vector operations, then the pairs past the last block one at a time, by the same expression.
#[inline(always)]
fn rotate_row_apart<'a>(cos: &[f64], sin: &[f64], input: &[f64], out: RowOut<'a>, sign: f64) -> Written<'a> {
    let (lo, hi) = input.split_at(input.len() / 2);
    let (lo_blocks, lo_rest) = lo.as_chunks::<BLOCK>();
    let (hi_blocks, hi_rest) = hi.as_chunks::<BLOCK>();
    let (cos_blocks, cos_rest) = cos[..lo.len()].as_chunks::<BLOCK>();
    let (sin_blocks, sin_rest) = sin[..lo.len()].as_chunks::<BLOCK>();
    let blocks = lo_blocks.iter().zip(hi_blocks).zip(cos_blocks.iter().zip(sin_blocks)).map(|((xa, xb), (c, s))| {
        let (mut ya, mut yb) = ([0.0; BLOCK], [0.0; BLOCK]);
        for i in 0..BLOCK {
            (ya[i], yb[i]) = rotate_pair((xa[i], xb[i]), c[i], sign * s[i]);
        }
        (ya, yb)
    });
    let angles = cos_rest.iter().zip(sin_rest).map(|(&c, &s)| (c, sign * s));
    let rest = lo_rest.iter().zip(hi_rest).zip(angles).map(|((&xa, &xb), (c, s))| rotate_pair((xa, xb), c, s));
    out.pairs_apart(blocks, rest)
}

/// One row of [`PairLayout::Adjacent`]: pair `(input[2i], input[2i + 1])` turned as in
/// [`rotate_row_apart`], in blocks of [`BLOCK`] pairs too.
#[inline(always)]
fn rotate_row_adjacent<'a>(cos: &[f64], sin: &[f64], input: &[f64], out: RowOut<'a>, sign: f64) -> Written<'a> {
    let (pairs, _) = input.as_chunks::<2>(); // an even width: no remainder
    let (pair_blocks, pair_rest) = pairs.as_chunks::<BLOCK>();
    let (cos_blocks, cos_rest) = cos[..pairs.len()].as_chunks::<BLOCK>();
    let (sin_blocks, sin_rest) = sin[..pairs.len()].as_chunks::<BLOCK>();
    // value k of a block is x_k·c + x_{k^1}·(∓s): the first of a pair takes −s, the second +s
    // (`a·c − b·s` and `b·c + a·s`, the two terms of `rotate_pair` in the other order, the same
    // bits), so that a block is whole-register products and one swap of neighbours
    let blocks = pair_blocks.iter().zip(cos_blocks.iter().zip(sin_blocks)).map(|(x, (c, s))| {
        let x = x.as_flattened();
        let mut y = [[0.0; 2]; BLOCK];
        for (k, y) in y.as_flattened_mut().iter_mut().enumerate() {
            let turn = if k % 2 == 0 { -(sign * s[k / 2]) } else { sign * s[k / 2] };
            *y = x[k] * c[k / 2] + x[k ^ 1] * turn;
        }
        y
    });
    let angles = cos_rest.iter().zip(sin_rest).map(|(&c, &s)| (c, sign * s));
    let rest = pair_rest.iter().zip(angles).map(|(&[xa, xb], (c, s))| rotate_pair((xa, xb), c, s));
    out.pairs_adjacent(blocks, rest)
}

/// A block of rows' rotation as a kernel compiled per target.
struct RotateRows<'r, 'o, R> {
    layout: PairLayout,
    rows: &'r mut R,
    out: RowBlock<'o>,
    sign: f64,
}

impl<'o, R: RotationRows> Kernel for RotateRows<'_, 'o, R> {
    type Output = BlockWritten<'o>;
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) -> BlockWritten<'o> {
        let RotateRows { layout, rows, out, sign } = self;
        match layout {
            PairLayout::Apart => out.write_rows(|r, row| {
                if let Some(later) = rows.ahead(r) {
                    prefetch(later);
                }
                let (cos, sin, input) = rows.row(r);
                assert_eq!(input.len(), row.len(), "an input row as wide as the output's");
                rotate_row_apart(cos, sin, input, row, sign)
            }),
            PairLayout::Adjacent => out.write_rows(|r, row| {
                if let Some(later) = rows.ahead(r) {
                    prefetch(later);
                }
                let (cos, sin, input) = rows.row(r);
                assert_eq!(input.len(), row.len(), "an input row as wide as the output's");
                rotate_row_adjacent(cos, sin, input, row, sign)
            }),
        }
    }
}
