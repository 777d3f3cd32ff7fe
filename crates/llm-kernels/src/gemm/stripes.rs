//! A product whose right side is made a stripe of columns at a time, each stripe used while it
//! is still in the cache of the thread that made it.
//!
//! A prefill multiplies a few hundred rows by weights that live as quantized blocks: the `f64`
//! right side has to be made (dequantized) before a product can read it. Made whole, a matrix of
//! SmolLM2 is 3 to 9 MB of `f64` written to memory, then read back by `gemm-f64`, which copies it
//! into its own packed panels: three passes over the largest operand, none of them from the
//! thread's own cache. Here each task makes the columns of one stripe ([`STRIPE_OUTPUTS`]
//! outputs, 0.4 to 1.2 MB) into a buffer of its thread and runs the product of those columns on
//! that thread at once, while the stripe is in its cache; the tasks share the output's rows, each
//! writing its own columns.
//!
//! The sums are those of [`super::matmul`] on the whole right side, bitwise. `gemm-f64` splits
//! only the outputs, never the inner dimension, except into blocks whose length depends on the
//! inner dimension and the cache alone, so each output is summed alone and which stripe or thread
//! computes it changes nothing — but for two kinds of small products, which it sums another way:
//! those of at most 64 × 64 outputs (blocks of 512 of the inner dimension) and those of at most
//! [`SMALL_OUTPUT`] outputs with both operands read along the inner dimension (each output's sum
//! in vector lanes, reduced at the end). A stripe is never one of them unless the whole product
//! is (wider than 64 columns, and, read along the inner dimension, than `SMALL_OUTPUT / m`), and
//! a product that [`super::splits_rows`] runs over blocks of 256 of its inner dimension runs so
//! stripe by stripe.

use std::cell::Cell;
use std::ops::Range;

use rayon::prelude::*;

use super::{MatRef, ShapeError, active, is_small, matmul_new, note, splits_rows};

/// Outputs of a stripe: a multiple of `gemm-f64`'s register tile of 32 rows and of the 16 rows
/// a quantized group keeps side by side, above 64 (see the module's text). A product of two rows
/// on a right side laid out [`StripeLayout::OutputsByInputs`] takes stripes of twice as many, so
/// that no stripe is a product of at most [`SMALL_OUTPUT`] outputs, which `gemm-f64` sums another
/// way when both sides are read along the inner dimension. Laid out
/// [`StripeLayout::InputsByOutputs`], the right side is not, and two rows take stripes of 96: a
/// two-token prompt of SmolLM2 took 29 ms where stripes of 192 took 39–46 (Zen 4).
pub const STRIPE_OUTPUTS: usize = 96;

/// `gemm-f64` sums a product of at most this many outputs whose operands are both read along the
/// inner dimension in vector lanes, reduced at the end: another order than its other products'.
pub const SMALL_OUTPUT: usize = 256;

/// How the `make` of [`matmul_in_stripes`] lays out the stripe of `width` outputs it writes.
///
/// Where the product runs in stripes ([`stripe_route`] gives `Some`), each stripe is
/// `gemm-f64`'s general product (or, for an inner dimension of at most 2, its plain loop), which
/// reads its right side through strides or packs it with the same sums: the bits are the same in
/// either layout, and the same as the whole product's with the right side in either layout
/// (tested). Where the right side is made whole, the layout decides the route of small products
/// (at most 256 outputs with both sides read along the inner dimension take `gemm-f64`'s kernel
/// that sums in vector lanes), and so their bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StripeLayout {
    /// `k × width`, row-major: each input's weights of the stripe's outputs (the `[in, out]`
    /// layout of a decoder's weight).
    InputsByOutputs,
    /// `width × k`, row-major: each output's weights (an embedding table as stored, read
    /// transposed as the head).
    OutputsByInputs,
}

thread_local! {
    /// A thread's stripe buffer, kept between products (taken out while in use, so a task that
    /// runs inside another's `make` on the same thread takes a buffer of its own).
    static STRIPE: Cell<Vec<f64>> = const { Cell::new(Vec::new()) };
}

/// The route [`matmul_in_stripes`] takes for a left side of `m` rows and `k` columns and `n`
/// outputs: `None` where it makes the right side whole and hands the product to
/// [`super::matmul_new`] (whose own route depends on `m`), `Some(split)` where it runs stripes,
/// `split` saying whether each stripe's product runs in depth blocks ([`super::splits_rows`]).
///
/// The route depends on the stripes' `layout` (how wide they are for two rows: see
/// [`STRIPE_OUTPUTS`]).
///
/// Two products with the same `k`, `n` and right side that both take `Some(false)` (stripes,
/// each one `gemm-f64`'s general product over the whole inner dimension) give each row of the
/// left side the same bits, whatever the number of rows and the stripes' layout: a caller that
/// needs only some rows of such a product (a generator, the last position's logits) may multiply
/// those alone.
pub fn stripe_route(m: usize, k: usize, n: usize, layout: StripeLayout) -> Option<bool> {
    if m < 2 || k == 0 || is_small(m, k, n) || n / stripe_step(m, layout) < 2 {
        return None;
    }
    Some(splits_rows(m, k, n))
}

/// Outputs of a stripe for `m` rows in `layout`: [`STRIPE_OUTPUTS`], or for a right side laid
/// out [`StripeLayout::OutputsByInputs`] the fewest whole [`STRIPE_OUTPUTS`] that make a stripe
/// of more than [`SMALL_OUTPUT`] outputs.
fn stripe_step(m: usize, layout: StripeLayout) -> usize {
    match layout {
        StripeLayout::InputsByOutputs => STRIPE_OUTPUTS,
        StripeLayout::OutputsByInputs => STRIPE_OUTPUTS * (SMALL_OUTPUT / (m.max(1) * STRIPE_OUTPUTS) + 1),
    }
}

/// `lhs [m, k] · rhs [k, n]` as a new row-major `m × n` vector, where `make(columns, panel)`
/// writes the columns `columns` of `rhs` into `panel` in `layout` (`k · columns.len()` values,
/// every one of them): the same values as [`super::matmul`] with the whole right side, bitwise.
///
/// Products the general kernel does not run (one row, fewer than [`super::SMALL_PRODUCT`]
/// multiply-adds, no inner dimension) and right sides of less than two stripes ([`STRIPE_OUTPUTS`]
/// columns each, twice as many for two rows laid out [`StripeLayout::OutputsByInputs`]) are made
/// whole, `k · n` values at once. With
/// `parallel`, the stripes are spread over the current rayon pool; `make` runs with the caller's
/// kernel target ([`crate::active`]) in force on whichever thread runs it.
///
/// # Errors
/// The first error of `make`, or a [`ShapeError`] (as `E`) if the output (`m · n` values) or a
/// panel of the right side (`k · n` made whole, `k` times a stripe's columns in stripes) passes
/// [`MAX_VALUES`](super::MAX_VALUES) (checked before anything is allocated), or a panel does not
/// hold its columns.
#[allow(unsafe_code)]
pub fn matmul_in_stripes<E>(
    lhs: MatRef<'_>,
    n: usize,
    layout: StripeLayout,
    make: impl Fn(Range<usize>, &mut [f64]) -> Result<(), E> + Sync,
    parallel: bool,
) -> Result<Vec<f64>, E>
where
    E: From<ShapeError> + Send,
{
    let (m, k) = (lhs.rows, lhs.cols);
    let overflow = || ShapeError {
        lhs: vec![m, k],
        rhs: vec![k, n],
        reason: "the product or a panel of its right side has more values than the ceiling (gemm::MAX_VALUES)",
    };
    let len = super::values_within_ceiling(m, n).ok_or_else(overflow)?;
    let Some(split) = stripe_route(m, k, n, layout) else {
        // the right side made whole
        let mut panel = vec![0.0; super::values_within_ceiling(k, n).ok_or_else(overflow)?];
        make(0..n, &mut panel)?;
        return Ok(matmul_new(lhs, view(layout, &panel, k, n)?, parallel)?);
    };
    let step = stripe_step(m, layout);
    let count = n / step;
    // a stripe's panel: at most `k` inputs of fewer than two steps of columns
    super::values_within_ceiling(k, (2 * step).min(n)).ok_or_else(overflow)?;
    let target = active();
    note(target);
    // stripes of `step` columns, the last one taking the rest (narrower than two)
    let columns = |s: usize| s * step..if s + 1 == count { n } else { (s + 1) * step };
    // a head's logits are 100 MB for a prompt of 256 tokens: 24 000 first touches in small pages
    let mut out = crate::allocator::unfilled(len);
    let dst = Shared(out.as_mut_ptr());
    let stripe = |s: usize| -> Result<(), E> {
        let columns = columns(s);
        let width = columns.len();
        let mut panel = STRIPE.take();
        if panel.len() < k * width {
            panel.resize(k * width, 0.0);
        }
        // the caller's target on whichever thread runs the stripe (one rule for every kernel)
        let made = target.within(|| make(columns.clone(), &mut panel[..k * width])).and_then(|()| {
            let rhs = view(layout, &panel[..k * width], k, width)?;
            let dst = dst.at(columns.start);
            // SAFETY: the product writes the columns `columns` of the m rows of n values at `out`
            // (capacity m·n) and nothing else: the stripes' columns are disjoint, so no two tasks
            // write the same value; `lhs` is a checked view, `rhs` one of the panel's k·width
            // values, and k > 0.
            unsafe {
                if split {
                    super::gemm_in_depth_blocks(target, dst, n, lhs, rhs, 1.0, false);
                } else {
                    super::gemm_raw_strided(target, dst, n, lhs, rhs, 1.0, false, false);
                }
            }
            Ok(())
        });
        STRIPE.set(panel);
        made
    };
    if parallel {
        (0..count).into_par_iter().with_max_len(1).try_for_each(stripe)?;
    } else {
        (0..count).try_for_each(stripe)?;
    }
    // SAFETY: every stripe ran (an error returned above), and without accumulation the kernel
    // writes every value of its destination columns before it reads any (the first depth block
    // of a split product writes them all); the stripes cover the n columns of every row.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// The output's storage, written by every stripe's task in columns of its own.
#[derive(Clone, Copy)]
struct Shared(*mut f64);

// SAFETY: the tasks write disjoint columns (see `matmul_in_stripes`).
#[allow(unsafe_code)]
unsafe impl Send for Shared {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Sync for Shared {}

impl Shared {
    /// The pointer to column `first` of row 0 (inside the storage: `first < n`).
    fn at(self, first: usize) -> *mut f64 {
        self.0.wrapping_add(first)
    }
}

/// The right side's `k × width` columns as `layout` keeps them in `panel`.
fn view(layout: StripeLayout, panel: &[f64], k: usize, width: usize) -> Result<MatRef<'_>, ShapeError> {
    match layout {
        StripeLayout::InputsByOutputs => MatRef::row_major(panel, k, width),
        StripeLayout::OutputsByInputs => MatRef::row_major(panel, width, k).map(MatRef::t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::matmul;
    use crate::target::{Target, with_target};

    fn values(len: usize, seed: usize) -> Vec<f64> {
        (0..len).map(|i| (((i + seed) * 7919 % 1000) as f64 - 500.0) / 77.0).collect()
    }

    /// The columns `columns` of the `k × n` matrix `b` (row-major) in `layout`.
    fn stripe_of(b: &[f64], n: usize, layout: StripeLayout, columns: Range<usize>, panel: &mut [f64]) {
        let (k, width) = (b.len() / n, columns.len());
        for (p, row) in b.chunks_exact(n).enumerate() {
            for (j, &value) in row[columns.clone()].iter().enumerate() {
                match layout {
                    StripeLayout::InputsByOutputs => panel[p * width + j] = value,
                    StripeLayout::OutputsByInputs => panel[j * k + p] = value,
                }
            }
        }
    }

    #[test]
    fn a_product_in_stripes_is_the_whole_product_bitwise_on_every_path_layout_and_target() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        // stripes of the crate's kernel (few rows with an inner dimension past 512, where a
        // product of at most 64 × 64 would be blocked otherwise; two rows, whose stripes of 96
        // laid [out, in] would be products of at most 256 outputs; more than 64 rows), stripes
        // of the split product (64 rows, a long inner dimension), a last stripe wider than the
        // others, and the shapes made whole: one row, a small product, a single stripe (of 192
        // for two rows laid [out, in]; three of 96 and more laid [in, out]), no inner dimension
        let shapes =
            [(8, 600, 290), (2, 300, 200), (2, 64, 400), (3, 70, 2 * STRIPE_OUTPUTS), (100, 130, 400), (64, 600, 200)];
        let whole = [(1, 300, 300), (3, 4, 5), (5, 30, 150), (2, 30, 300), (6, 0, 200)];
        for (m, k, n) in shapes.into_iter().chain(whole) {
            let (a, b) = (values(m * k, 1), values(k * n, 2));
            // the right side as a decoder holds it in each layout: an `[in, out]` weight, and a
            // table of `[out, in]` read transposed
            let mut table = vec![0.0; k * n];
            stripe_of(&b, n, StripeLayout::OutputsByInputs, 0..n, &mut table);
            let lhs = MatRef::row_major(&a, m, k).unwrap();
            let layouts = [
                (StripeLayout::InputsByOutputs, MatRef::row_major(&b, k, n).unwrap()),
                (StripeLayout::OutputsByInputs, MatRef::row_major(&table, n, k).unwrap().t()),
            ];
            for target in Target::available() {
                for parallel in [false, true] {
                    let run = || {
                        with_target(target, || {
                            for (layout, rhs) in layouts {
                                let mut want = vec![0.0; m * n];
                                matmul(&mut want, lhs, rhs, false, parallel).unwrap();
                                // in stripes, the stripes may lie either way for either whole
                                // product (the kernel reads them through strides or packs them):
                                // a quantized table's are made [in, out]
                                let made_in = [StripeLayout::InputsByOutputs, StripeLayout::OutputsByInputs];
                                let in_stripes = |made| stripe_route(m, k, n, made).is_some();
                                for made in made_in.into_iter().filter(|&made| made == layout || in_stripes(made)) {
                                    // each stripe made by a parallel loop of its own, as the
                                    // dequantizer may (a task may then run inside another's `make`)
                                    let make = |columns: Range<usize>, panel: &mut [f64]| -> Result<(), ShapeError> {
                                        assert_eq!(panel.len(), k * columns.len(), "a panel holds its columns");
                                        let ((), ()) = rayon::join(|| (), || ());
                                        stripe_of(&b, n, made, columns, panel);
                                        Ok(())
                                    };
                                    let got = matmul_in_stripes(lhs, n, made, make, parallel).unwrap();
                                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                                    let case =
                                        format!("{m}×{k}·{k}×{n} {layout:?} made {made:?} {target:?} {parallel}");
                                    assert_eq!(bits(&got), bits(&want), "{case}");
                                }
                            }
                        })
                        .unwrap()
                    };
                    pool.install(run);
                }
            }
        }
    }

    #[test]
    fn a_stripe_that_cannot_be_made_is_the_products_error() {
        #[derive(Debug, PartialEq)]
        enum Failure {
            Made(usize),
            Shape,
        }
        impl From<ShapeError> for Failure {
            fn from(_: ShapeError) -> Self {
                Failure::Shape
            }
        }
        let (m, k, n) = (4, 40, 5 * STRIPE_OUTPUTS);
        let a = values(m * k, 1);
        let lhs = MatRef::row_major(&a, m, k).unwrap();
        for parallel in [false, true] {
            // the third stripe fails: its error, whichever stripe ran first
            let make = |columns: Range<usize>, _: &mut [f64]| match columns.start / STRIPE_OUTPUTS {
                2 => Err(Failure::Made(2)),
                _ => Ok(()),
            };
            let got = matmul_in_stripes(lhs, n, StripeLayout::InputsByOutputs, make, parallel);
            assert_eq!(got.unwrap_err(), Failure::Made(2));
            // and where the right side is made whole
            let small =
                matmul_in_stripes(lhs, 3, StripeLayout::OutputsByInputs, |_, _| Err(Failure::Made(0)), parallel);
            assert_eq!(small.unwrap_err(), Failure::Made(0));
        }
        // outputs past the ceiling (and past what memory can address, as values or as bytes)
        for n in [usize::MAX, usize::MAX / 16] {
            let huge = matmul_in_stripes(lhs, n, StripeLayout::InputsByOutputs, |_, _| Ok::<(), Failure>(()), false);
            assert_eq!(huge.unwrap_err(), Failure::Shape);
        }
    }

    #[test]
    fn rows_that_take_the_whole_products_route_alone_have_its_bits() {
        // the route a generator checks before multiplying a prompt's last rows alone
        for layout in [StripeLayout::InputsByOutputs, StripeLayout::OutputsByInputs] {
            let route = |m, k, n| stripe_route(m, k, n, layout);
            assert_eq!(route(2, 576, 49_152), Some(false)); // SmolLM2's head, two rows
            assert_eq!(route(256, 576, 49_152), Some(false)); // and a prompt of 256
            assert_eq!(route(1, 576, 49_152), None); // one row: the one-row path
            assert_eq!(route(2, 32, 48), None); // a small product: the plain loop
            assert_eq!(route(3, 70, 150), None); // less than two stripes
            assert_eq!(route(64, 600, 200), Some(true)); // stripes of the split product
        }
        // two rows: stripes of 96 laid [in, out], of 192 the other way
        assert_eq!(stripe_route(2, 300, 200, StripeLayout::InputsByOutputs), Some(false));
        assert_eq!(stripe_route(2, 300, 200, StripeLayout::OutputsByInputs), None);
        for (m, k, n) in [(40, 70, 600), (150, 300, 400), (3, 600, 400)] {
            let (a, b) = (values(m * k, 3), values(k * n, 4));
            let lhs = MatRef::row_major(&a, m, k).unwrap();
            let last = MatRef::row_major(&a[(m - 2) * k..], 2, k).unwrap();
            for layout in [StripeLayout::InputsByOutputs, StripeLayout::OutputsByInputs] {
                let route = |m| stripe_route(m, k, n, layout);
                assert_eq!((route(m), route(2)), (Some(false), Some(false)));
                for target in Target::available() {
                    with_target(target, || {
                        let make = |columns: Range<usize>, panel: &mut [f64]| -> Result<(), ShapeError> {
                            stripe_of(&b, n, layout, columns, panel);
                            Ok(())
                        };
                        let all = matmul_in_stripes(lhs, n, layout, make, true).unwrap();
                        let alone = matmul_in_stripes(last, n, layout, make, true).unwrap();
                        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&all[(m - 2) * n..]), bits(&alone), "{m}×{k}·{k}×{n} {layout:?} {target:?}");
                    })
                    .unwrap();
                }
            }
        }
    }
}
