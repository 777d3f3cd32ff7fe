//! RoPE's row loop: every coordinate pair of a row turned by its angle, compiled per target.
//!
//! The teaching crate's `nn::rope` says what a rotation is (`rotate_pair`, the angle tables, the
//! positions of each row). For each block of rows it builds with [`crate::rows::build_rows`], it
//! calls [`RowRotation::rotate_rows`] once, with a [`RotationRows`] that names each row's input
//! and angles: the loop over the block's rows, and the pairs of each row in blocks of four, run in
//! one function compiled for the target. Its tests hold the two to the same bits.

use crate::isa::{Checked, Isa, Kernel};
use crate::rows::{BlockWritten, FillRow, RowBlock, RowOut, Written};
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

    /// Whether the rows' inputs run on at one step, far apart, for more than [`AHEAD`] rows at a
    /// time (as when a rotation splits heads): then the loop fetches ahead (`prefetch_ahead`).
    /// Rows read in order are fetched by the processor itself, and where the step changes within
    /// [`AHEAD`] rows a guess would fetch the wrong rows.
    fn fetch_ahead(&self) -> bool {
        false
    }
}

/// How many rows ahead the row loop asks the memory for its input (`prefetch_ahead`): fetching
/// eight rows ahead made the rotation of a query tensor just written by a product about 30 %
/// faster (`docs/performance.md`).
pub const AHEAD: usize = 8;

/// Asks the processor to bring into its caches the row as wide as `row` that lies [`AHEAD`] steps
/// past `row`, a step being the distance from the address `last` (the previous row's start) to
/// `row`'s start: a guess that the rows go on as they went, a cache line at a time. A hint, which
/// reads nothing and changes nothing, whatever the address (on processors other than x86-64,
/// nothing at all).
#[inline(always)]
fn prefetch_ahead(row: &[f64], last: usize) {
    let step = row.as_ptr().addr().wrapping_sub(last);
    let ahead = row.as_ptr().cast::<i8>().wrapping_add(step.wrapping_mul(AHEAD));
    crate::fetch::fetch_bytes(ahead.cast(), std::mem::size_of_val(row));
}

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
        let fetch = rows.fetch_ahead();
        out.fill_rows(&mut TurnRows { layout, rows, sign, fetch, last: None })
    }
}

/// Every row of a block turned by the row loop of `layout` ([`FillRow`], not a closure, so that
/// the loop is inlined into the kernel and compiled for its target). Where the rows say so
/// ([`RotationRows::fetch_ahead`]), it asks the memory for the input [`AHEAD`] rows further on
/// before turning a row, guessing that the rows keep the step between the last two: a rotation
/// that splits heads reads its rows 2 KiB apart, where the processor's own prefetching does not
/// follow, and a row's work is short, so that few rows' loads are in flight at once. A wrong
/// guess (where the rows change plane) costs a wasted fetch, never a different result.
struct TurnRows<'r, R> {
    layout: PairLayout,
    rows: &'r mut R,
    sign: f64,
    fetch: bool,
    /// Where the last row's input began.
    last: Option<usize>,
}

impl<R: RotationRows> FillRow for TurnRows<'_, R> {
    #[inline(always)]
    fn fill<'o>(&mut self, r: usize, row: RowOut<'o>) -> Written<'o> {
        let (cos, sin, input) = self.rows.row(r);
        assert_eq!(input.len(), row.len(), "an input row as wide as the output's");
        if let (true, Some(last)) = (self.fetch, self.last) {
            prefetch_ahead(input, last);
        }
        self.last = Some(input.as_ptr().addr());
        match self.layout {
            PairLayout::Apart => rotate_row_apart(cos, sin, input, row, self.sign),
            PairLayout::Adjacent => rotate_row_adjacent(cos, sin, input, row, self.sign),
        }
    }
}
