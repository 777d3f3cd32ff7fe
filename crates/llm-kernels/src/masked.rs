//! The hidden entries of attention's masked products, checked and cleared, compiled per target.
//!
//! The teaching crate's `autodiff::ops::masked_matmul` skips the pairs a mask hides. Its fast path
//! is the ordinary product, which it may take when the weights' hidden entries are exactly 0
//! ([`hidden_are_zero`]: as a masked softmax leaves them), and the adjoint of the weights has its
//! hidden entries set to 0 after the product ([`zero_hidden`]). Both pass over every score of a
//! step, a flag beside each value: written without an early exit and compiled for the target, so
//! that a register of values is checked or cleared at once. Neither computes a new value, so
//! every target gives the same answer.

use crate::isa::{self, Isa, Kernel};
use crate::target::active;

/// Whether every value whose flag is set is exactly 0 (either sign); a hidden NaN is not 0.
///
/// # Panics
/// If `values` and `hidden` differ in length.
pub fn hidden_are_zero(values: &[f64], hidden: &[bool]) -> bool {
    assert_eq!(values.len(), hidden.len(), "a flag beside each value");
    isa::run(active(), HiddenAreZero(values, hidden))
}

/// Sets every value whose flag is set to +0 (a select, never a product: a NaN becomes 0 too).
///
/// # Panics
/// If `values` and `hidden` differ in length.
pub fn zero_hidden(values: &mut [f64], hidden: &[bool]) {
    assert_eq!(values.len(), hidden.len(), "a flag beside each value");
    isa::run(active(), ZeroHidden(values, hidden));
}

/// [`hidden_are_zero`] as a kernel compiled per target.
struct HiddenAreZero<'a>(&'a [f64], &'a [bool]);

impl Kernel for HiddenAreZero<'_> {
    type Output = bool;
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) -> bool {
        // every pair looked at, no early exit, so that the loop becomes whole registers
        let mut stray = false;
        for (&x, &h) in self.0.iter().zip(self.1) {
            stray |= h & (x != 0.0);
        }
        !stray
    }
}

/// [`zero_hidden`] as a kernel compiled per target.
struct ZeroHidden<'a>(&'a mut [f64], &'a [bool]);

impl Kernel for ZeroHidden<'_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) {
        for (x, &h) in self.0.iter_mut().zip(self.1) {
            *x = if h { 0.0 } else { *x };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Target, with_target};

    #[test]
    fn every_target_finds_and_clears_the_same_entries() {
        // lengths around a register's width; a stray value (NaN, −0, a tiny one) in each place
        for len in [0, 1, 3, 4, 7, 8, 9, 31, 64, 65] {
            let hidden: Vec<bool> = (0..len).map(|i| i % 3 != 1).collect();
            let clean: Vec<f64> = (0..len).map(|i| if hidden[i] { 0.0 } else { i as f64 + 0.5 }).collect();
            for target in Target::available() {
                let check = |v: &[f64]| with_target(target, || hidden_are_zero(v, &hidden)).unwrap();
                assert!(check(&clean), "{target}, {len}");
                for at in (0..len).filter(|&i| hidden[i]) {
                    for stray in [f64::NAN, 1e-300, -2.0, f64::INFINITY] {
                        let mut v = clean.clone();
                        v[at] = stray;
                        assert!(!check(&v), "{target}, {len}, {stray} at {at}");
                        with_target(target, || zero_hidden(&mut v, &hidden)).unwrap();
                        assert_eq!(
                            v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                            clean.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                        );
                    }
                    let mut v = clean.clone();
                    v[at] = -0.0;
                    assert!(check(&v), "−0 is 0");
                }
            }
        }
    }
}
