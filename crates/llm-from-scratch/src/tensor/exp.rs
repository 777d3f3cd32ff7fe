//! `eˣ` for softmax, the inner loop of attention, computed with arithmetic a compiler can
//! vectorise instead of a library call per value.
//!
//! Every softmax of the crate and the loss use it; chapter 34's tiled attention at `T = 4096`
//! computes tens of millions of exponentials per pass. The method, for one value
//! ([`exp_plain`], the plain twin of the kernels crate's vector code in [`llm_kernels::exp`]):
//!
//! ```text
//! eˣ = 2ᵏ · eʳ,   k = round(x / ln 2),   r = x − k·ln 2  (|r| ≤ ln 2 / 2, ln 2 split in two parts)
//! eʳ ≈ Σ_{n=0}^{13} rⁿ / n!              (truncation < 5·10⁻¹⁸ relative)
//! 2ᵏ  = the bits (k + 1023) << 52
//! ```
//!
//! It agrees with `f64::exp` to a few ulp (4e-16 relative over the range softmax uses), returns
//! exactly 1 at 0 and exactly 0 below −745.2. The reduction and the polynomial use fused
//! multiply-adds (`a·b + c` rounded once, `f64::mul_add`), which IEEE 754 specifies exactly: so
//! the vector kernels, compiled for AVX-512, AVX2 or plain code, give bitwise the values of
//! [`exp_plain`] (tests below).

pub use llm_kernels::exp::{exp, exp_shifted_sum};

/// Below this, `eˣ` is 0 in f64 (the smallest subnormal is 4.9e-324 = e^−744.4).
const UNDERFLOW: f64 = -745.2;
/// Above this, `eˣ` overflows to +∞.
const OVERFLOW: f64 = 709.78;
/// Below this, `2ᵏ` would be subnormal and is built in two steps.
const SUBNORMAL: f64 = -708.0;
/// `ln 2` rounded to 32 significant bits, so that `k · LN2_HI` is exact for the `k` in use.
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
/// `ln 2 − LN2_HI`.
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
/// `1.5 · 2⁵²`: adding it rounds to an integer (ties to even), left in the low bits of the sum.
const ROUNDER: f64 = 6_755_399_441_055_744.0;

/// `2ᵏ` from a `k` held in the low bits of `ROUNDER + k`, for `k` in `[-1022, 1023]`.
fn pow2(rounded: f64) -> f64 {
    f64::from_bits(rounded.to_bits().wrapping_add(1023) << 52)
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
    // k = round(x / ln 2), kept as ROUNDER + k
    let rounded = x.mul_add(std::f64::consts::LOG2_E, ROUNDER);
    let k = rounded - ROUNDER;
    // r = x − k·ln 2, in two steps, each rounded once
    let r = (-k).mul_add(LN2_LO, (-k).mul_add(LN2_HI, x));
    // Horner's rule for Σ rⁿ/n!, n = 13 down to 0
    let mut factorial: f64 = 6_227_020_800.0; // 13!
    let mut p = 1.0 / factorial;
    for n in (0..13).rev() {
        factorial /= f64::from(n + 1);
        p = p.mul_add(r, 1.0 / factorial);
    }
    // 2ᵏ in two factors where one would be subnormal (k < −1022) or overflow (k = 1024)
    let shift = if x < SUBNORMAL {
        100.0
    } else if x > 709.0 {
        -2.0
    } else {
        0.0
    };
    p * pow2(rounded + shift) * pow2(ROUNDER - shift)
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
            let mut values = inputs[..1001].to_vec();
            let sum = with_target(target, || exp_shifted_sum(&mut values, -1.5)).unwrap();
            for (v, &x) in values.iter().zip(&inputs) {
                assert_eq!(v.to_bits(), exp_plain(x + 1.5).to_bits(), "{target}: shifted at {x}");
            }
            assert!((sum - values.iter().sum::<f64>()).abs() <= 1e-12 * sum);
        }
        assert!(exp_plain(f64::NAN).is_nan());
    }
}
