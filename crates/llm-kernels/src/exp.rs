//! A vectorisable `eˣ` for softmax: the inner loop of attention.
//!
//! Its plain twin, one value at a time with `f64::mul_add`, is the teaching crate's
//! `tensor::exp::exp_plain` (bitwise equal, tests). Every softmax of the teaching crate and its
//! loss use this one; chapter 34's tiled attention at `T = 4096`
//! computes tens of millions of exponentials per pass.
//!
//! `f64::exp` is a library call per value (a few nanoseconds); attention over 4096 tokens needs
//! tens of millions of exponentials. [`exp`] computes the same function with plain arithmetic the
//! compiler can vectorise:
//!
//! ```text
//! eˣ = 2ᵏ · 2^{j/16} · eʳ,   n = 16·k + j = round(16·x / ln 2),   r = x − n·ln 2 / 16
//!                            (|r| ≤ ln 2 / 32, ln 2 / 16 split in two parts)
//! 2^{j/16}  from a table of 16 numbers, each the f64 nearest the exact value
//! eʳ − 1 ≈ Σ_{m=1}^{7} rᵐ / m! = q      (truncation < 1.3·10⁻¹⁸ relative)
//! eˣ = (2^{j/16} + 2^{j/16} · q) · 2ᵏ,   2ᵏ = the bits (k + 1023) << 52
//! ```
//!
//! The table is what makes the polynomial short: with `r` within `ln 2 / 32` instead of
//! `ln 2 / 2`, seven terms do what fourteen did, and the exponential costs about a third fewer
//! fused multiply-adds. The lookup is one instruction on AVX-512 (`vpermt2pd` over two registers
//! that hold the table) and four permutations of 32-bit halves on AVX2 (`vpermd`, with two blends
//! and a select; a gather's four loads made the whole exponential 12 % slower); all are exact, so
//! they change no bit.
//!
//! It agrees with `f64::exp` to about an ulp (a test checks 4e-16 relative over the range
//! softmax uses; the worst seen is 2.2e-16), returns exactly 1 at 0 and exactly 0 below −745.2,
//! and is a pure function of its input: the same value on every thread and for every slice
//! length. The reduction and the polynomial
//! use fused multiply-adds (`a·b + c` rounded once), which halves the work of the polynomial; a
//! fused multiply-add is exactly specified by IEEE 754, so every compiled version — AVX-512,
//! AVX2 with FMA, or the portable one, where the processor lacks FMA and the library computes it
//! — gives bitwise the same result. (Where the processor has no FMA instruction, each fused
//! multiply-add is a library call, and the exponential is many times slower: x86-64 processors
//! have had FMA since 2013, ARM64 always.)

use crate::isa::{self, Isa, Kernel, Portable, Table16};
use crate::target::active;

/// Below this, `eˣ` is 0 in f64 (the smallest subnormal is 4.9e-324 = e^−744.4).
const UNDERFLOW: f64 = -745.2;
/// Above this, `eˣ` overflows to +∞.
const OVERFLOW: f64 = 709.78;
/// Below this, `2ᵏ` would be subnormal and is built in two steps.
const SUBNORMAL: f64 = -708.0;

/// Steps per octave of the reduction: `x = (16·k + j) · ln 2 / 16 + r`.
pub const STEPS: usize = 16;

/// `ln 2` rounded to 32 significant bits, divided by [`STEPS`] (exactly), so that `n · LN2_HI`
/// is exact for every `n = 16·k + j` in use.
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000) / STEPS as f64;
/// `ln 2 / 16 − LN2_HI`.
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76) / STEPS as f64;
/// `16 / ln 2` (`log₂ e` times a power of two: exact).
const STEPS_PER_LN: f64 = STEPS as f64 * std::f64::consts::LOG2_E;

/// `2^{j/16}` for `j = 0..16`, each the `f64` nearest the exact value (computed once with 200-bit
/// arithmetic; a test parses each from 32 significant digits to the nearest double).
pub const POWERS: [f64; STEPS] = [
    f64::from_bits(0x3FF0_0000_0000_0000),
    f64::from_bits(0x3FF0_B558_6CF9_890F),
    f64::from_bits(0x3FF1_72B8_3C7D_517B),
    f64::from_bits(0x3FF2_387A_6E75_6238),
    f64::from_bits(0x3FF3_06FE_0A31_B715),
    f64::from_bits(0x3FF3_DEA6_4C12_3422),
    f64::from_bits(0x3FF4_BFDA_D536_2A27),
    f64::from_bits(0x3FF5_AB07_DD48_5429),
    f64::from_bits(0x3FF6_A09E_667F_3BCD),
    f64::from_bits(0x3FF7_A114_73EB_0187),
    f64::from_bits(0x3FF8_ACE5_422A_A0DB),
    f64::from_bits(0x3FF9_C491_82A3_F090),
    f64::from_bits(0x3FFA_E89F_995A_D3AD),
    f64::from_bits(0x3FFC_199B_DD85_529C),
    f64::from_bits(0x3FFD_5818_DCFB_A487),
    f64::from_bits(0x3FFE_A4AF_A2A4_90DA),
];

/// [`POWERS`] as the table lookups take it (with the halves AVX2 permutes).
const POWER_TABLE: Table16 = Table16::new(POWERS);

/// The table of the weights' exponentials ([`exp_weight_vectors`]): the bits of `2^{j/16}` less
/// `j << 48`, which [`Isa::plus_index_bits`] adds back with `k << 52` in one shift of
/// `1.5·2⁵² + 16·k + j`. Its entries are other doubles (between 0.5 and 1), never read as values.
const WEIGHT_TABLE: Table16 = {
    let mut less = [0.0; STEPS];
    let mut j = 0;
    while j < STEPS {
        less[j] = f64::from_bits(POWERS[j].to_bits() - ((j as u64) << 48));
        j += 1;
    }
    Table16::new(less)
};

/// `1.5 · 2⁵²`: adding it rounds to an integer (ties to even) and leaves that integer in the low
/// bits of the sum, with no float-to-int conversion (which would stop vectorisation).
const ROUNDER: f64 = 6_755_399_441_055_744.0;

/// `2ᵏ` from an `n = 16·k + j` held in the low bits of `ROUNDER + n`, for `k` in
/// `[-1022, 1023]`: the bits from the fifth up hold `k` (`2⁵¹ + n` is a multiple of 16 plus `j`).
#[inline(always)]
fn pow2(rounded: f64) -> f64 {
    f64::from_bits(((rounded.to_bits() >> 4).wrapping_add(1023)) << 52)
}

/// `a` where `take_a`, else `b`, as bit operations: no branch, so loops over it vectorise.
#[inline(always)]
fn select(take_a: bool, a: f64, b: f64) -> f64 {
    let mask = (take_a as u64).wrapping_neg();
    f64::from_bits((a.to_bits() & mask) | (b.to_bits() & !mask))
}

/// `eˣ` (see the module docs). NaN gives NaN, +∞ gives +∞, −∞ gives 0.
///
/// Compiled for the [`active`] target, like every kernel (all targets give the same bits).
#[inline]
pub fn exp(x: f64) -> f64 {
    isa::run(active(), Exp(x))
}

/// The body of [`exp`], inlined into each loop that is compiled for a given instruction set.
#[inline(always)]
pub(crate) fn exp_inline(x: f64) -> f64 {
    // bring x into the range the reduction handles; the selects at the end restore the edges.
    // Below UNDERFLOW (masked scores are −∞) compute with 0 instead: clamping to −745 would run
    // the whole evaluation on subnormal numbers, which many processors execute very slowly.
    let c = select(x < UNDERFLOW, 0.0, x.min(OVERFLOW));
    let (power, q, rounded) = reduced_one(c);
    // 2ᵏ in two factors when one would be subnormal (k < −1022: 2^(k+100) · 2^−100) or overflow
    // (k = 1024 just below the largest finite result: 2^(k−2) · 2^2); the shift counts sixteenths
    let shift = select(c < SUBNORMAL, 1600.0, select(c > 709.0, -32.0, 0.0));
    let y = power.mul_add(q, power) * pow2(rounded + shift) * pow2(ROUNDER - shift);
    let y = select(x < UNDERFLOW, 0.0, y);
    let y = select(x > OVERFLOW, f64::INFINITY, y);
    select(x.is_nan(), x, y)
}

/// The Taylor coefficients `1/n!` of `(eʳ − 1) / r = Σ_{n≥1} rⁿ⁻¹/n!` from `n = 7` down to
/// `n = 1`, in the order Horner's rule uses them.
const TAYLOR: [f64; 7] = [1.0 / 5_040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0];

/// `eᶜ = 2ᵏ · 2^{j/16} · (1 + q)` for each lane of `N` registers of values `c` in the range the
/// reduction handles: returns each `table[j]` (`2^{j/16}` from [`POWER_TABLE`], or the entry of
/// [`WEIGHT_TABLE`]), `q ≈ eʳ − 1` and `ROUNDER + n` (`n = 16·k + j`).
///
/// The `N` evaluations are written interleaved, one step of all of them and then the next, so
/// that the processor has `N` independent chains of fused multiply-adds to overlap: one chain
/// alone waits on each step's latency, and the compiler's automatic vectorisation of a loop over
/// single values lays each register's chain out whole. Each lane goes through the same IEEE
/// operations whatever `N` and the instruction set are (the table lookup is exact), so the results
/// do not depend on them.
#[inline(always)]
#[allow(clippy::type_complexity)]
fn reduced<I: Isa, const N: usize>(isa: I, c: [I::V; N], table: &Table16) -> ([I::V; N], [I::V; N], [I::V; N]) {
    let rounder = isa.splat(ROUNDER);
    let steps = isa.splat(STEPS_PER_LN);
    let rounded = c.map(|c| isa.mul_add(c, steps, rounder));
    let (hi, lo) = (isa.splat(LN2_HI), isa.splat(LN2_LO));
    let mut r = c;
    for (r, &rounded) in r.iter_mut().zip(&rounded) {
        let n = isa.sub(rounded, rounder);
        *r = isa.neg_mul_add(n, lo, isa.neg_mul_add(n, hi, *r));
    }
    // Horner form of Σ rⁿ⁻¹/n!, n = 1..=7, one fused multiply-add per degree; then q = r · that
    let mut q = [isa.splat(TAYLOR[0]); N];
    for &coefficient in &TAYLOR[1..] {
        let coefficient = isa.splat(coefficient);
        for (q, &r) in q.iter_mut().zip(&r) {
            *q = isa.mul_add(*q, r, coefficient);
        }
    }
    for (q, &r) in q.iter_mut().zip(&r) {
        *q = isa.mul(*q, r);
    }
    let mut power = rounded;
    for power in &mut power {
        *power = isa.lookup16(table, *power);
    }
    (power, q, rounded)
}

/// [`reduced`] of one value: the first lane of a portable pair (the compiler drops the second).
#[inline(always)]
fn reduced_one(c: f64) -> (f64, f64, f64) {
    let ([power], [q], [rounded]) = reduced(Portable, [[c; 2]], &POWER_TABLE);
    (power[0], q[0], rounded[0])
}

/// `eˣ` in every lane of `N` registers, for the exponents of softmax weights (`x = s − max s ≤
/// 0`, or a few ulp above 0 where a score is recomputed against a saved log-sum-exp), with fewer
/// edge cases than [`exp`]: bitwise equal to it on `[−708, 709]`, NaN for NaN, and 0 below −708
/// (where [`exp`] gives values of at most 3.4·10⁻³⁰⁸, which vanish next to the weight 1 of the
/// maximum). Not for `x > 709`. The `N` evaluations run interleaved ([`reduced`]), so kernels
/// pass whole rows of scores, four registers at a time.
///
/// Here `2ᵏ` goes into the table's value as an integer added to its exponent, and the result is
/// `s + s·q` with `s = 2ᵏ · 2^{j/16}`: a normal number times a power of two, so the same bits as
/// [`exp`]'s `(2^{j/16} + 2^{j/16}·q) · 2ᵏ` with one multiplication fewer. (The table holds
/// `2^{j/16}` less `j` in the bits it gets back with `k`: [`WEIGHT_TABLE`].)
#[inline(always)]
pub(crate) fn exp_weight_vectors<I: Isa, const N: usize>(isa: I, x: [I::V; N]) -> [I::V; N] {
    let low = isa.splat(SUBNORMAL);
    let mut c = x;
    for c in &mut c {
        *c = isa.raise_to(*c, low); // NaN stays NaN
    }
    let mut y = exp_weight_vectors_in_range(isa, c);
    // loops, not closures: a closure's body may be compiled apart, without the target's features
    for (y, &x) in y.iter_mut().zip(&x) {
        *y = isa.zero_where_less(x, low, *y);
    }
    y
}

/// [`exp_weight_vectors`] where every lane is known to lie in `[−708, 709]` or to be NaN: the
/// same bits there, without the raise to −708 and the zeros below it (three operations of about
/// twenty a register), for blocks of scores whose smallest is checked first.
#[inline(always)]
pub(crate) fn exp_weight_vectors_in_range<I: Isa, const N: usize>(isa: I, x: [I::V; N]) -> [I::V; N] {
    let (mut y, q, rounded) = reduced(isa, x, &WEIGHT_TABLE);
    for i in 0..N {
        let scaled = isa.plus_index_bits(y[i], rounded[i]);
        y[i] = isa.mul_add(scaled, q[i], scaled);
    }
    y
}

/// `xᵢ ← e^{xᵢ − shift}` for every value, returning their sum.
///
/// The sum runs over eight interleaved partial sums added in a fixed order, so it vectorises and
/// is the same on every machine. The loop is compiled for each target ([`crate::target`]) and
/// runs on the [`active`] one; every version performs the same IEEE operations in the same order,
/// so they agree bitwise.
#[inline]
pub fn exp_shifted_sum(values: &mut [f64], shift: f64) -> f64 {
    isa::run(active(), ExpShiftedSum(values, shift))
}

/// [`exp`] as a kernel compiled per target.
struct Exp(f64);

impl Kernel for Exp {
    type Output = f64;
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) -> f64 {
        exp_inline(self.0)
    }
}

/// [`exp_shifted_sum`] as a kernel compiled per target.
struct ExpShiftedSum<'a>(&'a mut [f64], f64);

impl Kernel for ExpShiftedSum<'_> {
    type Output = f64;
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) -> f64 {
        exp_shifted_sum_inline(isa, self.0, self.1)
    }
}

/// The body of [`exp_shifted_sum`], inlined into kernels that are already compiled per target.
///
/// Eight values at a time: a chunk whose every exponent lies below −745.2 (eight hidden scores'
/// −∞, as the end of a causal row has) is eight zeros, and adds nothing to the sums (adding
/// those zeros would leave them as they are: the same bits). Where every exponent of a chunk
/// lies in `[−708, 709]` or below −745.2 — in a softmax, nearly always — the chunk goes through
/// [`exp_weight_vectors`] in the target's registers, which gives [`exp`]'s bits there (0 below
/// −745.2); a chunk with a value elsewhere (NaN, the far tails) takes [`exp_inline`] value by
/// value. The table lookup keeps the compiler from vectorising the value-by-value loop by itself.
#[inline(always)]
pub(crate) fn exp_shifted_sum_inline<I: Isa>(isa: I, values: &mut [f64], shift: f64) -> f64 {
    const { assert!(8 % I::WIDTH == 0) };
    let mut lanes = [0.0; 8];
    let mut chunks = values.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut x = [0.0; 8];
        let (mut in_range, mut all_under) = (true, true);
        for (x, v) in x.iter_mut().zip(chunk.iter()) {
            *x = *v - shift;
            in_range &= (SUBNORMAL..=709.0).contains(x) || *x < UNDERFLOW;
            all_under &= *x < UNDERFLOW;
        }
        if all_under {
            // eight zeros (a causal row's hidden keys): the lanes stay as they are, as adding
            // +0 would leave them (a lane starts at +0 and only ever adds values ≥ +0 or NaN, so
            // it is never −0, the one value `x + 0` changes)
            chunk.fill(0.0);
        } else if in_range {
            for at in (0..8).step_by(I::WIDTH) {
                // SAFETY: at + WIDTH ≤ 8, the length of `x`, `chunk` and `lanes` (WIDTH divides 8).
                #[allow(unsafe_code)]
                unsafe {
                    let [e] = exp_weight_vectors(isa, [isa.load(&x, at)]);
                    isa.store(chunk, at, e);
                    let sum = isa.add(isa.load(&lanes, at), e);
                    isa.store(&mut lanes, at, sum);
                }
            }
        } else {
            for ((lane, v), x) in lanes.iter_mut().zip(chunk.iter_mut()).zip(x) {
                *v = exp_inline(x);
                *lane += *v;
            }
        }
    }
    let mut tail = 0.0;
    for v in chunks.into_remainder() {
        *v = exp_inline(*v - shift);
        tail += *v;
    }
    ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`exp_weight_vectors`] of one value, on the portable target.
    fn exp_weight(x: f64) -> f64 {
        let [[y, _]] = exp_weight_vectors(Portable, [[x; 2]]);
        y
    }

    #[test]
    fn agrees_with_the_library_exp() {
        let mut worst: f64 = 0.0;
        let mut x = -745.0;
        while x < 709.78 {
            for dx in [0.0, 1e-7, 0.31, 0.5, 0.77] {
                let (got, want) = (exp(x + dx), (x + dx).exp());
                if want > 1e-300 {
                    worst = worst.max(((got - want) / want).abs());
                }
            }
            x += 0.997;
        }
        for i in 0..100_000 {
            let x = -40.0 * (i as f64) / 100_000.0; // the softmax range (x ≤ 0)
            let (got, want) = (exp(x), x.exp());
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 4e-16, "worst relative error {worst:e}");
    }

    #[test]
    fn the_table_holds_the_doubles_nearest_two_to_the_sixteenths() {
        // 2^{j/16} to 32 significant digits (mpmath, 200 bits); parsing rounds to the nearest
        // double, and no value lies within 10⁻³⁰ of a tie, so these are the nearest doubles
        let exact = [
            "1.0",
            "1.0442737824274138403219664787399",
            "1.0905077326652576592070106557607",
            "1.1387886347566916537038302838415",
            "1.1892071150027210667174999705605",
            "1.2418578120734840485936774687266",
            "1.2968395546510096659337541177925",
            "1.3542555469368927282980147401407",
            "1.4142135623730950488016887242097",
            "1.476826145939499311386907480374",
            "1.5422108254079408236122918620907",
            "1.6104903319492543081795206673574",
            "1.6817928305074290860622509524664",
            "1.7562521603732994831121606193753",
            "1.8340080864093424634870831895883",
            "1.9152065613971472938726112702958",
        ];
        for (j, (&power, digits)) in POWERS.iter().zip(exact).enumerate() {
            let nearest: f64 = digits.parse().unwrap();
            assert_eq!(power.to_bits(), nearest.to_bits(), "2^({j}/16): {power} vs {nearest}");
            let library = (j as f64 / STEPS as f64).exp2();
            assert!(power.to_bits().abs_diff(library.to_bits()) <= 1, "2^({j}/16): {power} vs {library}");
        }
    }

    #[test]
    fn the_weights_table_and_one_shift_give_each_power_of_two_to_the_sixteenth_exactly() {
        // every n = 16·k + j the weights reach (x in [−708, 709]), negative ones included
        let (lowest, highest) =
            ((SUBNORMAL * STEPS_PER_LN).round() as i64 - 1, (709.0 * STEPS_PER_LN).round() as i64 + 1);
        for n in lowest..=highest {
            let rounded = f64::from_bits((ROUNDER + n as f64).to_bits());
            let (k, j) = (n.div_euclid(16), n.rem_euclid(16) as usize);
            // the portable target's operations (every target's give their bits: `isa`'s tests)
            let [got, _] = Portable.plus_index_bits(Portable.lookup16(&WEIGHT_TABLE, [rounded; 2]), [rounded; 2]);
            assert_eq!(got, POWERS[j] * 2f64.powi(k as i32), "n = {n}");
        }
    }

    #[test]
    fn subnormal_and_near_overflow_results_are_within_an_ulp_of_the_library() {
        // where 2ᵏ is built in two factors; the bits of adjacent doubles differ by one
        let mut x = -745.1;
        while x < -708.0 {
            for y in [x, x + 0.0123, x + 0.5] {
                let (got, want) = (exp(y), y.exp());
                assert!(got.to_bits().abs_diff(want.to_bits()) <= 1, "{y}: {got:e} vs {want:e}");
            }
            x += 0.0731;
        }
        for y in [709.0, 709.000_000_1, 709.3, 709.5, 709.7, 709.78] {
            let (got, want) = (exp(y), y.exp());
            assert!(got.to_bits().abs_diff(want.to_bits()) <= 1, "{y}: {got:e} vs {want:e}");
        }
    }

    #[test]
    fn every_target_agrees_bitwise_with_the_scalar_exp() {
        // the softmax range; chunks of eight with −∞ among in-range values (the vector path) and
        // with values between −745.2 and −708 or above 709 (the value-by-value path); both edges
        // of the vector path's range; and a length that leaves a tail after the chunks
        let mut base: Vec<f64> = (0..1000).map(|i| -0.037 * i as f64).collect();
        base.extend([f64::NEG_INFINITY, -0.25, -750.0, -1.0, f64::NEG_INFINITY, -3.0, -2e300, 0.5]);
        base.extend([-709.5, 707.5, -0.0, -1.25, -2.5, f64::NEG_INFINITY, -1.0, -2.0]); // x = −708, 709
        base.extend([-744.0, 0.0, 3.5, 709.5, -1.0, -2.0, -3.0, -4.0]);
        // a chunk whose every exponent lies below −745.2: eight zeros, the sums untouched
        base.extend([f64::NEG_INFINITY, -750.0, -2e300, f64::NEG_INFINITY, -800.0, -746.8, -746.71, -1e6]);
        base.extend([-2.0, f64::NAN, -1.0]);
        let shift = -1.5;
        let mut portable = base.clone();
        let sum = exp_shifted_sum_inline(Portable, &mut portable, shift);
        assert!(sum.is_nan(), "the NaN input poisons the sum");
        // a row whose chunks 40..64 are hidden keys (as the end of a causal row)
        let finite: Vec<f64> =
            (0..1001).map(|i| if (320..512).contains(&i) { f64::NEG_INFINITY } else { -0.037 * i as f64 }).collect();
        let finite_sum = exp_shifted_sum_inline(Portable, &mut finite.clone(), shift);
        // the sum in the documented order, one value at a time: eight lanes, the tail, then
        // the lanes in pairs
        let (mut lanes, mut tail) = ([0.0; 8], 0.0);
        for (i, v) in finite.iter().enumerate() {
            let e = exp(v - shift);
            if i < finite.len() / 8 * 8 {
                lanes[i % 8] += e;
            } else {
                tail += e;
            }
        }
        let plain =
            ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
        assert_eq!(finite_sum.to_bits(), plain.to_bits());
        for target in crate::target::Target::available() {
            let mut values = base.clone();
            let s = crate::target::with_target(target, || exp_shifted_sum(&mut values, shift)).unwrap();
            assert!(s.is_nan(), "{target}: the NaN input poisons the sum");
            for ((x, y), input) in values.iter().zip(&portable).zip(&base) {
                assert_eq!(x.to_bits(), y.to_bits(), "{target} at input {input}");
                let scalar = crate::target::with_target(target, || exp(input - shift)).unwrap();
                assert_eq!(y.to_bits(), scalar.to_bits(), "{target}: the scalar exp at input {input}");
            }
            let s = crate::target::with_target(target, || exp_shifted_sum(&mut finite.clone(), shift)).unwrap();
            assert_eq!(s.to_bits(), finite_sum.to_bits(), "{target}");
        }
    }

    #[test]
    fn the_weight_exponential_equals_exp_from_minus_708_to_709_and_is_zero_below() {
        let mut checked = 0;
        let mut x = 0.0;
        while x >= -708.0 {
            for dx in [0.0, -1e-9, -0.123_456_789] {
                let y = x + dx;
                if y >= -708.0 {
                    assert_eq!(exp_weight(y).to_bits(), exp(y).to_bits(), "at {y}");
                    checked += 1;
                }
            }
            x -= 0.0173;
        }
        assert!(checked > 100_000);
        // a recomputed score may sit a few ulp above the saved log-sum-exp
        for y in [1e-16, 4.4e-16, 1e-3, 1.0, 300.0, 708.9, 709.0] {
            assert_eq!(exp_weight(y).to_bits(), exp(y).to_bits(), "at {y}");
        }
        assert_eq!(exp_weight(-0.0), 1.0);
        assert_eq!(exp_weight(-708.0).to_bits(), exp(-708.0).to_bits());
        for y in [-708.000_000_1, -744.0, -746.0, -1e300, f64::NEG_INFINITY] {
            assert_eq!(exp_weight(y), 0.0, "at {y}");
        }
        assert!(exp_weight(f64::NAN).is_nan());
    }

    /// [`exp_weight_vectors`] of four registers at a time over `x` (whole groups only).
    struct WeightVectors<'a>(&'a [f64]);

    impl Kernel for WeightVectors<'_> {
        type Output = Vec<f64>;
        #[inline(always)]
        fn run<I: Isa>(self, isa: I) -> Vec<f64> {
            let group = 4 * I::WIDTH;
            let mut out = vec![0.0; self.0.len() - self.0.len() % group];
            for at in (0..out.len()).step_by(group) {
                #[allow(unsafe_code)]
                // SAFETY: at + 4·WIDTH ≤ out.len() ≤ self.0.len() (whole groups only).
                unsafe {
                    let x: [I::V; 4] = std::array::from_fn(|v| isa.load(self.0, at + v * I::WIDTH));
                    for (v, y) in exp_weight_vectors(isa, x).into_iter().enumerate() {
                        isa.store(&mut out, at + v * I::WIDTH, y);
                    }
                }
            }
            out
        }
    }

    #[test]
    fn the_vector_weight_exponential_equals_exp_or_zero_bitwise_on_every_target() {
        // the softmax range, both sides of the −708 cut, a few ulp above 0, and the special values
        let mut x: Vec<f64> = (0..4000).map(|i| -0.1771 * i as f64).collect();
        x.extend([-708.0, -708.000_000_1, -707.999_999_9, -744.0, -1e300, f64::NEG_INFINITY, -0.0, 0.0]);
        x.extend([1e-16, 4.4e-16, 0.5, 1.0, 300.0, 709.0, f64::NAN, f64::from_bits(0x7FF4_0000_0000_0001)]);
        x.resize(x.len().next_multiple_of(32), -1.25);
        for target in crate::target::Target::available() {
            let got = isa::run(target, WeightVectors(&x));
            assert_eq!(got.len(), x.len());
            for (y, &x) in got.iter().zip(&x) {
                let want = if x < SUBNORMAL { 0.0 } else { exp(x) };
                if x.is_nan() {
                    assert!(y.is_nan(), "{target}: NaN in, {y} out");
                } else {
                    assert_eq!(y.to_bits(), want.to_bits(), "{target} at {x}: {y} vs {want}");
                }
            }
        }
    }

    #[test]
    fn edges_are_exact() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(-746.0), 0.0);
        assert_eq!(exp(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp(-2e6), 0.0);
        assert_eq!(exp(710.0), f64::INFINITY);
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert!(exp(f64::NAN).is_nan());
        assert!(exp(-744.0) > 0.0, "subnormal results survive");
        assert!((exp(1.0) - std::f64::consts::E).abs() < 1e-15);
        for x in [709.0, 709.44, 709.5, 709.7, 709.78] {
            let (got, want) = (exp(x), x.exp());
            assert!(got.is_finite() && ((got - want) / want).abs() < 4e-16, "{x}: {got} vs {want}");
        }
    }
}
