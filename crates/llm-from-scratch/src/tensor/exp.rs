//! `eˣ` for softmax, the inner loop of attention, computed with arithmetic a compiler can
//! vectorise instead of a library call per value.
//!
//! Every softmax of the crate and the loss use it; chapter 34's tiled attention at `T = 4096`
//! computes tens of millions of exponentials per pass. The method, for one value
//! ([`exp_plain`], the plain twin of the kernels crate's vector code in [`llm_kernels::exp`]):
//!
//! ```text
//! eˣ = 2ᵏ · 2^{j/16} · eʳ,   n = 16·k + j = round(16·x / ln 2),   r = x − n·ln 2 / 16
//!                            (|r| ≤ ln 2 / 32, ln 2 / 16 split in two parts)
//! 2^{j/16}  from a table of 16 numbers (POWERS), each the f64 nearest the exact value
//! eʳ − 1 ≈ Σ_{m=1}^{7} rᵐ / m! = q      (truncation < 1.3·10⁻¹⁸ relative)
//! eˣ = (2^{j/16} + 2^{j/16} · q) · 2ᵏ,   2ᵏ = the bits (k + 1023) << 52
//! ```
//!
//! The table keeps `r` small, so seven terms of the series are enough (with `r` up to `ln 2 / 2`
//! it took fourteen). Writing `eʳ = 1 + q` and adding the `1` last, as `2^{j/16} + 2^{j/16}·q` in one
//! fused multiply-add, keeps the result within about an ulp.
//!
//! It agrees with `f64::exp` to about an ulp (under 4e-16 relative over the range softmax uses),
//! returns exactly 1 at 0 and exactly 0 below −745.2. The reduction and the polynomial use fused
//! multiply-adds (`a·b + c` rounded once, `f64::mul_add`), which IEEE 754 specifies exactly, and
//! the table lookup is exact: so the vector kernels, compiled for AVX-512, AVX2 or plain code,
//! give bitwise the values of [`exp_plain`] (tests below).

pub use llm_kernels::exp::{POWERS, exp, exp_shifted_sum};

/// Below this, `eˣ` is 0 in f64 (the smallest subnormal is 4.9e-324 = e^−744.4).
const UNDERFLOW: f64 = -745.2;
/// Above this, `eˣ` overflows to +∞.
const OVERFLOW: f64 = 709.78;
/// Below this, `2ᵏ` would be subnormal and is built in two steps.
const SUBNORMAL: f64 = -708.0;
/// `ln 2` rounded to 32 significant bits, divided by 16 (exactly), so that `n · LN2_HI` is exact
/// for every `n` in use.
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000) / 16.0;
/// `ln 2 / 16 − LN2_HI`.
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76) / 16.0;
/// `1.5 · 2⁵²`: adding it rounds to an integer (ties to even), left in the low bits of the sum.
const ROUNDER: f64 = 6_755_399_441_055_744.0;

/// `2ᵏ` from an `n = 16·k + j` held in the low bits of `ROUNDER + n`, for `k` in
/// `[-1022, 1023]`: the bits from the fifth up hold `k`.
fn pow2(rounded: f64) -> f64 {
    f64::from_bits(((rounded.to_bits() >> 4).wrapping_add(1023)) << 52)
}

/// `eˣ` one value at a time, step by step (see the module docs): the plain twin of [`exp`].
/// NaN gives NaN, +∞ gives +∞, −∞ gives 0.
pub fn exp_plain(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > OVERFLOW {
        return f64::INFINITY;
    }
    if x < UNDERFLOW {
        return 0.0;
    }
    // n = round(16·x / ln 2) = 16·k + j, kept as ROUNDER + n
    let rounded = x.mul_add(16.0 * std::f64::consts::LOG2_E, ROUNDER);
    let n = rounded - ROUNDER;
    // r = x − n·ln 2 / 16, in two steps, each rounded once
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    // Horner's rule for Σ rᵐ⁻¹/m!, m = 7 down to 1; then q = r · that = eʳ − 1
    let mut factorial: f64 = 5_040.0; // 7!
    let mut h = 1.0 / factorial;
    for m in (1..7).rev() {
        factorial /= f64::from(m + 1);
        h = h.mul_add(r, 1.0 / factorial);
    }
    let q = h * r;
    // 2^{j/16} from the table; j is the low four bits of n
    let power = POWERS[(rounded.to_bits() & 15) as usize];
    // 2ᵏ in two factors where one would be subnormal (k < −1022) or overflow (k = 1024), counted
    // in sixteenths
    let shift = if x < SUBNORMAL {
        1600.0
    } else if x > 709.0 {
        -32.0
    } else {
        0.0
    };
    power.mul_add(q, power) * pow2(rounded + shift) * pow2(ROUNDER - shift)
}

#[cfg(test)]
mod tests {
    use super::*;
    use llm_kernels::target::{Target, with_target};

    #[test]
    fn the_kernel_exp_equals_the_plain_one_bitwise_on_every_target() {
        let mut inputs: Vec<f64> = (0..200_000).map(|i| -745.5 + 1455.4 * i as f64 / 200_000.0).collect();
        inputs.extend([0.0, -0.0, 1.0, -708.0, -708.000_000_1, 709.0, 709.5, 709.78, 710.0, -746.0]);
        inputs.extend([f64::INFINITY, f64::NEG_INFINITY, 1e-300, -1e-300]);
        for target in Target::available() {
            for &x in &inputs {
                let (plain, kernel) = (exp_plain(x), with_target(target, || exp(x)).unwrap());
                assert_eq!(plain.to_bits(), kernel.to_bits(), "{target} at {x}: {plain} vs {kernel}");
            }
            // the far tail (every value takes the value-by-value path) and the softmax range
            // around 0 (the vector path)
            let middle = inputs.iter().position(|&x| x > -30.0).unwrap();
            for window in [&inputs[..1001], &inputs[middle..middle + 1001]] {
                let mut values = window.to_vec();
                let sum = with_target(target, || exp_shifted_sum(&mut values, -1.5)).unwrap();
                for (v, &x) in values.iter().zip(window) {
                    assert_eq!(v.to_bits(), exp_plain(x + 1.5).to_bits(), "{target}: shifted at {x}");
                }
                assert!((sum - values.iter().sum::<f64>()).abs() <= 1e-12 * sum);
            }
        }
        assert!(exp_plain(f64::NAN).is_nan());
    }
}
