//! Softmax over rows, and its backward, compiled per target.
//!
//! The teaching crate's `autodiff::ops::softmax` says what a row's softmax is (`softmax_row`,
//! with its defined answers for rows of −∞, +∞ and NaN) and what its backward is
//! (`softmax_row_backward`, and the masked form that skips hidden keys). For each block of rows
//! it builds with [`crate::rows::build_rows`], it calls [`SoftmaxRows::forward`] or
//! [`SoftmaxRows::backward`] once: the loop over the block's rows runs in one function compiled
//! for the target, with the exponentials of [`crate::exp`] inlined into it. Its tests hold the
//! two to the same bits, on every target.
//!
//! Two things make these faster than the row closures they replace, neither changing a bit:
//! - **Each row is made where it is stored.** The input row is copied into the output once, the
//!   hidden keys set to −∞ there, and the maximum, the exponentials and the scaling run in place;
//!   no scratch row, no second copy.
//! - **The backward's dot products run eight rows side by side.** `Σ_k dy_k · y_k` is a chain of
//!   additions in key order, each waiting on the last. Eight rows' chains, one per lane, keep the
//!   adder busy where one chain left it waiting; each chain still adds its own row's terms in key
//!   order, so its sum is the one the plain loop gives.

use std::ops::Range;

use crate::exp::exp_shifted_sum_inline;
use crate::isa::{Checked, Isa, Kernel};
use crate::rows::{BlockWritten, FillRow, RowBlock, RowOut, Written, side_by_side_sums};
use crate::target::Target;

/// Which keys each row of a softmax hides: rows of flags (`true` = hidden), and for each row of
/// the scores the row of flags it takes (a causal `[T, T]` mask under `[B, H, T, T]` scores is
/// `T` rows of flags, each taken by `B·H` rows of scores).
#[derive(Clone, Copy, Debug)]
pub struct HiddenKeys<'a> {
    flags: &'a [bool],
    width: usize,
    row_of: &'a [usize],
}

impl<'a> HiddenKeys<'a> {
    /// Rows of `width` flags in `flags`; row `r` of the scores takes flag row `row_of[r]`.
    ///
    /// `None` if `width` is 0, `flags` is not whole rows of it, or an entry of `row_of` names a
    /// row past the last.
    pub fn new(flags: &'a [bool], width: usize, row_of: &'a [usize]) -> Option<Self> {
        let rows = flags.len().checked_div(width)?;
        let whole = flags.len().is_multiple_of(width);
        (whole && row_of.iter().all(|&m| m < rows)).then_some(Self { flags, width, row_of })
    }

    /// The flags of scores row `r`.
    ///
    /// # Panics
    /// If `r` is not a row of `row_of`.
    #[inline(always)]
    fn row(&self, r: usize) -> &'a [bool] {
        let m = self.row_of[r];
        &self.flags[m * self.width..(m + 1) * self.width]
    }

    /// How many rows of scores it covers.
    pub fn rows(&self) -> usize {
        self.row_of.len()
    }

    /// The width of its rows.
    pub fn width(&self) -> usize {
        self.width
    }
}

/// The row loops for one target, checked once: made where a softmax begins, from
/// [`active`](crate::target::active), and used for every block of rows (on every worker thread).
#[derive(Clone, Copy, Debug)]
pub struct SoftmaxRows(Checked);

impl SoftmaxRows {
    /// The row loops compiled for `target` (the portable one where the processor lacks it).
    pub fn new(target: Target) -> Self {
        Self(Checked::new(target))
    }

    /// Writes every row of `out`: row `r` is the softmax of row `r` of `x` (rows as wide as
    /// `out`'s), its keys hidden by `hidden` taken as −∞. A row with a NaN among its visible
    /// values is all NaN; a row with every key hidden or −∞ is all zeros; a row with +∞ among
    /// its values shares the weight equally among them.
    ///
    /// # Panics
    /// If `x` does not hold the block's rows, or `hidden` does not cover them or is narrower than
    /// the rows (callers pass checked shapes).
    #[inline]
    pub fn forward<'o>(self, x: &[f64], hidden: Option<HiddenKeys<'_>>, out: RowBlock<'o>) -> BlockWritten<'o> {
        check(&out, &[x], hidden);
        self.0.run(Forward { x, hidden, out })
    }

    /// Writes every row of `out`: the adjoint of row `r` of a softmax whose output is row `r` of
    /// `y` and whose output's adjoint is row `r` of `dy`: `dx_j = y_j · (dy_j − Σ_k dy_k · y_k)`,
    /// the sum over the visible keys in key order; a hidden key's `dx_j` is 0, and its `dy_j`
    /// (which may be NaN) takes no part.
    ///
    /// # Panics
    /// As [`SoftmaxRows::forward`], for `y` and `dy`.
    #[inline]
    pub fn backward<'o>(
        self,
        (y, dy): (&[f64], &[f64]),
        hidden: Option<HiddenKeys<'_>>,
        out: RowBlock<'o>,
    ) -> BlockWritten<'o> {
        check(&out, &[y, dy], hidden);
        self.0.run(Backward { y, dy, hidden, out })
    }
}

/// The contract of both entry points, checked before any row is written.
fn check(out: &RowBlock<'_>, inputs: &[&[f64]], hidden: Option<HiddenKeys<'_>>) {
    let (rows, width) = (out.rows(), out.width());
    for input in inputs {
        assert!(input.len() >= rows.end * width, "the input holds the block's rows");
    }
    if let Some(h) = hidden {
        assert!(h.rows() >= rows.end && h.width() == width, "the hidden keys cover the block's rows");
    }
}

/// Softmax of one row in place (see [`SoftmaxRows::forward`]): `v` holds the row's values, the
/// hidden ones already −∞.
#[inline(always)]
fn softmax_in_place<I: Isa>(isa: I, v: &mut [f64]) {
    // the maximum and whether a NaN is there, eight lanes side by side (the maximum of values
    // none of which is NaN is the same in any order)
    let (mut max, mut nan) = ([f64::NEG_INFINITY; 8], [false; 8]);
    let (chunks, rest) = v.as_chunks::<8>();
    for chunk in chunks {
        for l in 0..8 {
            nan[l] |= chunk[l].is_nan();
            max[l] = if chunk[l] > max[l] { chunk[l] } else { max[l] };
        }
    }
    let mut top = f64::NEG_INFINITY;
    let mut any_nan = nan.iter().any(|&n| n);
    for &m in max.iter().chain(rest) {
        any_nan |= m.is_nan();
        top = if m > top { m } else { top };
    }
    if any_nan {
        v.fill(f64::NAN);
    } else if top == f64::NEG_INFINITY {
        v.fill(0.0);
    } else if top == f64::INFINITY {
        let count = v.iter().filter(|&&a| a == f64::INFINITY).count() as f64;
        for a in v.iter_mut() {
            *a = if *a == f64::INFINITY { 1.0 / count } else { 0.0 };
        }
    } else {
        let inv = 1.0 / exp_shifted_sum_inline(isa, v, top);
        for a in v.iter_mut() {
            *a *= inv;
        }
    }
}

/// A block of softmax rows as a kernel compiled per target.
struct Forward<'x, 'h, 'o> {
    x: &'x [f64],
    hidden: Option<HiddenKeys<'h>>,
    out: RowBlock<'o>,
}

impl<'o> Kernel for Forward<'_, '_, 'o> {
    type Output = BlockWritten<'o>;
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) -> BlockWritten<'o> {
        let Forward { x, hidden, out } = self;
        out.fill_rows(&mut ForwardRows { isa, x, hidden })
    }
}

/// Each row of [`Forward`] ([`FillRow`], so that the loop is compiled for the kernel's target).
struct ForwardRows<'x, 'h, I> {
    isa: I,
    x: &'x [f64],
    hidden: Option<HiddenKeys<'h>>,
}

impl<I: Isa> FillRow for ForwardRows<'_, '_, I> {
    #[inline(always)]
    fn fill<'o>(&mut self, r: usize, row: RowOut<'o>) -> Written<'o> {
        let w = row.len();
        let (isa, hidden) = (self.isa, self.hidden);
        row.copy_from_then(&self.x[r * w..(r + 1) * w], |v| {
            if let Some(h) = hidden {
                for (a, &hide) in v.iter_mut().zip(h.row(r)) {
                    if hide {
                        *a = f64::NEG_INFINITY;
                    }
                }
            }
            softmax_in_place(isa, v);
        })
    }
}

/// Rows whose dot products [`Backward`] runs side by side ([`side_by_side_sums`]).
const SIDE_BY_SIDE: usize = 8;

/// A block of softmax adjoints as a kernel compiled per target.
struct Backward<'a, 'h, 'o> {
    y: &'a [f64],
    dy: &'a [f64],
    hidden: Option<HiddenKeys<'h>>,
    out: RowBlock<'o>,
}

impl<'o> Kernel for Backward<'_, '_, 'o> {
    type Output = BlockWritten<'o>;
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) -> BlockWritten<'o> {
        let Backward { y, dy, hidden, out } = self;
        let (rows, width) = (out.rows(), out.width());
        out.fill_rows(&mut BackwardRows { y, dy, hidden, width, rows, dots: [0.0; SIDE_BY_SIDE], first: None })
    }
}

/// Each row of [`Backward`]: the dot products of [`SIDE_BY_SIDE`] rows at a time, then each of
/// them written.
struct BackwardRows<'a, 'h> {
    y: &'a [f64],
    dy: &'a [f64],
    hidden: Option<HiddenKeys<'h>>,
    width: usize,
    /// The block's rows.
    rows: Range<usize>,
    /// `Σ_k dy_k · y_k` of rows `first..first + SIDE_BY_SIDE`.
    dots: [f64; SIDE_BY_SIDE],
    first: Option<usize>,
}

impl BackwardRows<'_, '_> {
    /// The dot products of rows `first..first + SIDE_BY_SIDE` (those past the block's last row
    /// repeat it), each a chain over its visible keys in key order, as `Iterator::sum` adds
    /// (from −0); a hidden key adds −0, which leaves every sum as it is.
    #[inline(always)]
    fn dots_from(&mut self, first: usize) {
        let w = self.width;
        let row = |l: usize| (first + l).min(self.rows.end - 1);
        let ys: [&[f64]; SIDE_BY_SIDE] = std::array::from_fn(|l| &self.y[row(l) * w..(row(l) + 1) * w]);
        let dys: [&[f64]; SIDE_BY_SIDE] = std::array::from_fn(|l| &self.dy[row(l) * w..(row(l) + 1) * w]);
        let sums = match self.hidden {
            None => side_by_side_sums(w, |l, k| ys[l][k] * dys[l][k]),
            Some(h) => {
                // a hidden key adds −0 (its term, perhaps NaN, takes no part)
                let hide: [&[bool]; SIDE_BY_SIDE] = std::array::from_fn(|l| h.row(row(l)));
                side_by_side_sums(w, |l, k| if hide[l][k] { -0.0 } else { ys[l][k] * dys[l][k] })
            }
        };
        self.dots = sums;
        self.first = Some(first);
    }
}

impl FillRow for BackwardRows<'_, '_> {
    #[inline(always)]
    fn fill<'o>(&mut self, r: usize, row: RowOut<'o>) -> Written<'o> {
        let within = self.first.is_some_and(|first| (first..first + SIDE_BY_SIDE).contains(&r));
        if !within {
            self.dots_from(r);
        }
        let dot = self.dots[r - self.first.unwrap_or(r)];
        let w = self.width;
        let dy = &self.dy[r * w..(r + 1) * w];
        let hide = self.hidden.map(|h| h.row(r));
        row.copy_from_then(&self.y[r * w..(r + 1) * w], |dx| match hide {
            None => {
                for (d, &g) in dx.iter_mut().zip(dy) {
                    *d *= g - dot;
                }
            }
            Some(hide) => {
                for ((d, &g), &hidden) in dx.iter_mut().zip(dy).zip(hide) {
                    *d = if hidden { 0.0 } else { *d * (g - dot) };
                }
            }
        })
    }
}
