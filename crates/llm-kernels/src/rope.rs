//! RoPE's row loop: every coordinate pair of a row turned by its angle, compiled per target.
//!
//! The teaching crate's `nn::rope` says what a rotation is (`rotate_pair`, the angle tables, the
//! positions of each row) and calls [`RowRotation::rotate`] for each row it builds with
//! [`crate::rows::build_rows`]; its tests hold the two to the same bits.

use crate::isa::{Checked, Isa, Kernel};
use crate::rows::{RowOut, Written};
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

/// The row loop for one target, checked once: made where a rotation begins, from
/// [`active`](crate::target::active), and used for every row (on every worker thread).
#[derive(Clone, Copy, Debug)]
pub struct RowRotation(Checked);

impl RowRotation {
    /// The row loop compiled for `target` (the portable one where the processor lacks it).
    pub fn new(target: Target) -> Self {
        Self(Checked::new(target))
    }

    /// Writes `input`'s pairs turned by the angles whose cosines are `cos` and sines
    /// `sign · sin` (sign −1 is the inverse rotation: the backward) into `out`, pair `i` by
    /// `cos[i]`, `sin[i]`.
    ///
    /// # Panics
    /// If the row's width is odd or `cos` and `sin` hold fewer than half its width (callers pass
    /// the tables of a checked head width).
    #[inline]
    pub fn rotate<'o>(
        self,
        layout: PairLayout,
        (cos, sin): (&[f64], &[f64]),
        input: &[f64],
        out: RowOut<'o>,
        sign: f64,
    ) -> Written<'o> {
        self.0.run(RotateRow { layout, cos, sin, input, out, sign })
    }
}

/// One row of [`PairLayout::Apart`]: pair `(input[i], input[i + d/2])` turned by the angle whose
/// cosine is `cos[i]` and sine `sign · sin[i]`, written to the same places of `out`.
///
/// A straight pass over four slices (no index arithmetic, no bounds checks), so that it
/// vectorises for the target it is compiled for.
#[inline(always)]
fn rotate_row_apart<'a>(cos: &[f64], sin: &[f64], input: &[f64], out: RowOut<'a>, sign: f64) -> Written<'a> {
    let (lo, hi) = input.split_at(input.len() / 2);
    let angles = cos.iter().zip(sin).map(|(&c, &s)| (c, sign * s));
    out.pairs_apart(lo.iter().zip(hi).zip(angles).map(|((&xa, &xb), (c, s))| rotate_pair((xa, xb), c, s)))
}

/// One row of [`PairLayout::Adjacent`]: pair `(input[2i], input[2i + 1])` turned as in
/// [`rotate_row_apart`].
#[inline(always)]
fn rotate_row_adjacent<'a>(cos: &[f64], sin: &[f64], input: &[f64], out: RowOut<'a>, sign: f64) -> Written<'a> {
    let (pairs, _) = input.as_chunks::<2>(); // an even width: no remainder
    let angles = cos.iter().zip(sin).map(|(&c, &s)| (c, sign * s));
    out.pairs_adjacent(pairs.iter().zip(angles).map(|(&[xa, xb], (c, s))| rotate_pair((xa, xb), c, s)))
}

/// One row's rotation as a kernel compiled per target.
struct RotateRow<'r, 'o> {
    layout: PairLayout,
    cos: &'r [f64],
    sin: &'r [f64],
    input: &'r [f64],
    out: RowOut<'o>,
    sign: f64,
}

impl<'o> Kernel for RotateRow<'_, 'o> {
    type Output = Written<'o>;
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) -> Written<'o> {
        let RotateRow { layout, cos, sin, input, out, sign } = self;
        match layout {
            PairLayout::Apart => rotate_row_apart(cos, sin, input, out, sign),
            PairLayout::Adjacent => rotate_row_adjacent(cos, sin, input, out, sign),
        }
    }
}
