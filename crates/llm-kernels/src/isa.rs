//! The small lane trait the kernels are written against, its three implementations, and the one
//! place where a [`Target`] becomes compiled code.
//!
//! A kernel is written once as [`Kernel::run`], generic over an [`Isa`] value: a zero-sized proof
//! that the processor has the instructions. [`run`] (or [`Checked::run`], for kernels called once
//! per row, which checks the processor once) compiles that body three times — inside a function
//! with `#[target_feature(enable = "avx512f,avx2,fma")]`, one with `avx2,fma`, and a plain one —
//! and calls the version the target names. Everything the body calls is `#[inline(always)]`, so
//! it is compiled with the features of the function it lands in: the same source becomes
//! AVX-512, AVX2 or baseline code. [`Isa::outline`] gives a loop a function of its own, compiled
//! the same way.

use crate::target::{Target, note};

/// Vector operations on `f64` lanes. Every operation is lane-wise and exactly rounded, so a
/// kernel computes the same bits whatever the implementation.
#[allow(unsafe_code)] // `load` and `store` read and write without bounds checks
pub(crate) trait Isa: Copy + Send + Sync {
    /// One vector register of [`Self::WIDTH`] values.
    type V: Copy;
    /// Values per register.
    const WIDTH: usize;
    /// Registers per row of the strip kernels' register tiles: a row covers `TILE_VECTORS ·
    /// WIDTH` lanes, and a tile of 6 rows leaves registers for the loads (AVX-512 has 32, AVX2
    /// 16).
    const TILE_VECTORS: usize;

    /// `x` in every lane.
    fn splat(self, x: f64) -> Self::V;
    /// `values[at..at + WIDTH]`.
    ///
    /// # Safety
    /// `at + WIDTH <= values.len()`.
    unsafe fn load(self, values: &[f64], at: usize) -> Self::V;
    /// Writes `values[at..at + WIDTH]`.
    ///
    /// # Safety
    /// `at + WIDTH <= values.len()`.
    unsafe fn store(self, values: &mut [f64], at: usize, v: Self::V);
    /// `a · b + c` in every lane, rounded once.
    fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `a · b` in every lane.
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    /// `c − a · b` in every lane, rounded once (`(−a)·b + c`).
    fn neg_mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `a + b` in every lane.
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a − b` in every lane.
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    /// `floor` in the lanes where `x < floor`, else `x` (NaN stays NaN).
    fn raise_to(self, x: Self::V, floor: Self::V) -> Self::V;
    /// `0` in the lanes where `x < bound`, else `y` (NaN compares false).
    fn zero_where_less(self, x: Self::V, bound: Self::V, y: Self::V) -> Self::V;
    /// `table[b & 15]` in every lane, where `b` is the lane's bits of `index` as an integer: an
    /// exact lookup (the table of [`crate::exp`]'s `2^{j/16}`, indexed by `1.5·2⁵² + 16·k + j`).
    fn lookup16(self, table: &Table16, index: Self::V) -> Self::V;
    /// The lanes' bits of `x` as integers plus `b << 48` (wrapping), `b` the bits of `rounded`.
    /// For `rounded = 1.5·2⁵² + n` with `|n| < 2¹⁵`, `b << 48` is `n << 48`: with `n = 16·k + j`,
    /// `k` added to the exponent and `j` to the bits below it, which [`crate::exp`]'s table of
    /// the weights has taken off its values beforehand (one shift, where `(b >> 4) << 52` took
    /// two).
    fn plus_index_bits(self, x: Self::V, rounded: Self::V) -> Self::V;
    /// `a / b` in every lane.
    fn div(self, a: Self::V, b: Self::V) -> Self::V;
    /// `−|x|` in every lane: the sign bit set (NaN stays NaN).
    fn neg_abs(self, x: Self::V) -> Self::V;
    /// `a` in the lanes where `x ≥ 0` (−0 included), else `b` (NaN compares false: `b`).
    fn select_nonnegative(self, x: Self::V, a: Self::V, b: Self::V) -> Self::V;
    /// Whether `low ≤ |x| < high` in every lane (false where a lane is NaN).
    fn all_abs_within(self, x: Self::V, low: f64, high: f64) -> bool;
    /// With `b` a lane's bits of `rounded` as an integer and `j = b & 127`: the bits
    /// `table[j][0]`, and `table[j][1] + (b << 45)` (wrapping), as `f64` — an exact lookup (the
    /// table of [`crate::logistic`]'s `2^{j/128}`, indexed by `1.5·2⁵² + 128·k + j`, `k` added to
    /// the exponent by the shift).
    fn lookup128(self, table: &[[u64; 2]; 128], rounded: Self::V) -> (Self::V, Self::V);
    /// For eight rows, each holding its eight running sums `s₀…s₇` in the first `8 / WIDTH`
    /// registers of `sums[r]` (lane `i` of register `v` is `s_{v·WIDTH+i}`), each row's
    /// `((s₀+s₁)+(s₂+s₃))+((s₄+s₅)+(s₆+s₇))`. The plain form goes through memory, a row at a time;
    /// AVX-512 adds the eight rows' pairs side by side in registers (the same additions).
    #[inline(always)]
    fn sums_of_eight_rows(self, sums: &[[Self::V; 8]; 8]) -> [f64; 8] {
        let mut out = [0.0; 8];
        for (out, sums) in out.iter_mut().zip(sums) {
            *out = sum_of_eight(self, sums);
        }
        out
    }
    /// Runs `kernel` in a function of its own, compiled for this instruction set and never
    /// inlined: a kernel's innermost loops then get the registers to themselves instead of sharing
    /// them with everything their caller keeps alive. (A [`Kernel`], not a closure: a closure's
    /// body is compiled for the baseline before it is inlined, and its intrinsics would stay
    /// calls.)
    fn outline<K: Kernel>(self, kernel: K) -> K::Output;
}

/// `((s₀+s₁)+(s₂+s₃))+((s₄+s₅)+(s₆+s₇))` of the eight sums in the first `8 / WIDTH` registers of
/// `sums`, through memory.
#[inline(always)]
pub(crate) fn sum_of_eight<I: Isa>(isa: I, sums: &[I::V; 8]) -> f64 {
    // the stores below take `at + WIDTH ≤ 8` on this
    const { assert!(I::WIDTH <= 8 && 8 % I::WIDTH == 0) };
    let mut l = [0.0; 8];
    for (v, at) in (0..8).step_by(I::WIDTH).enumerate() {
        // SAFETY: at + WIDTH ≤ 8, the length of `l` (WIDTH divides 8).
        #[allow(unsafe_code)]
        unsafe {
            isa.store(&mut l, at, sums[v]);
        }
    }
    ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

/// Sixteen `f64` for [`Isa::lookup16`], kept twice: as they are, and with each value's bits cut
/// into its low and high 32 bits, eight values to a row. AVX2 has no permutation of 64-bit lanes
/// across a register by a variable index, but it has one of eight 32-bit lanes (`vpermd`): two
/// of them, one over the low halves and one over the high, then a blend, pick one of eight
/// values exactly, with no load per lane. (With a gather's four loads instead, the exponential
/// over a row, `exp_shifted_sum` on AVX2, took 1.52–1.57 ns a value against 1.36–1.37 on a Zen 4
/// core.)
#[derive(Clone, Copy, Debug)]
pub(crate) struct Table16 {
    /// The values, for the targets that index them directly.
    values: [f64; 16],
    /// `low[h][i]`: the low 32 bits of value `8·h + i` (read by AVX2 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    low: [[u32; 8]; 2],
    /// `high[h][i]`: the high 32 bits of value `8·h + i` (read by AVX2 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    high: [[u32; 8]; 2],
}

impl Table16 {
    /// The table of `values`, its halves cut at compile time.
    pub(crate) const fn new(values: [f64; 16]) -> Self {
        let (mut low, mut high) = ([[0; 8]; 2], [[0; 8]; 2]);
        let mut i = 0;
        while i < 16 {
            let bits = values[i].to_bits();
            low[i / 8][i % 8] = bits as u32;
            high[i / 8][i % 8] = (bits >> 32) as u32;
            i += 1;
        }
        Table16 { values, low, high }
    }
}

/// A kernel body, compiled once per target by [`run`].
///
/// A struct with an `#[inline(always)]` `run`, never a closure: a closure's body is optimised
/// as a function of its own, for the baseline instruction set, before it is inlined (its fused
/// multiply-adds become library calls and its loops stay narrow), which made the explicit
/// softmax 2.3× slower when this module first used closures.
pub(crate) trait Kernel {
    /// What the kernel returns.
    type Output;
    /// The body; mark it `#[inline(always)]` so that it is compiled inside each target's
    /// function.
    fn run<I: Isa>(self, isa: I) -> Self::Output;
}

/// Runs `kernel` compiled for `target`, or for the portable target when the processor cannot run
/// `target` (callers pass [`crate::target::active`], which is always available).
pub(crate) fn run<K: Kernel>(target: Target, kernel: K) -> K::Output {
    Checked::new(target).run(kernel)
}

/// A target the processor runs, checked once: [`Checked::run`] then only matches on it (for
/// kernels called once per row). The flag says whether the processor has the FMA instruction,
/// which the portable target then uses (see [`Pairs`]; only x86-64 reads it: elsewhere the
/// baseline has FMA or the portable build is the only one).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Checked(Target, #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] bool);

impl Checked {
    /// `target` if the processor runs it, else the widest narrower target it runs.
    pub(crate) fn new(target: Target) -> Self {
        Self(widest_within(target, Target::is_available), has_fma())
    }

    /// Runs `kernel` compiled for the checked target.
    #[inline]
    pub(crate) fn run<K: Kernel>(self, kernel: K) -> K::Output {
        note(self.0);
        match self.0 {
            #[cfg(target_arch = "x86_64")]
            Target::Avx512 => {
                #[target_feature(enable = "avx512f,avx2,fma")]
                fn avx512<K: Kernel>(kernel: K) -> K::Output {
                    kernel.run(x86::Avx512(()))
                }
                // SAFETY: a `Checked` holds only targets the processor runs (`new`).
                #[allow(unsafe_code)]
                unsafe {
                    avx512(kernel)
                }
            }
            #[cfg(target_arch = "x86_64")]
            Target::Avx2 => {
                #[target_feature(enable = "avx2,fma")]
                fn avx2<K: Kernel>(kernel: K) -> K::Output {
                    kernel.run(x86::Avx2(()))
                }
                // SAFETY: as above.
                #[allow(unsafe_code)]
                unsafe {
                    avx2(kernel)
                }
            }
            #[cfg(target_arch = "x86_64")]
            Target::Portable if self.1 => {
                #[target_feature(enable = "fma")]
                fn portable_fma<K: Kernel>(kernel: K) -> K::Output {
                    kernel.run(x86::PortableFma(()))
                }
                // SAFETY: `new` sets the flag only where the processor has FMA.
                #[allow(unsafe_code)]
                unsafe {
                    portable_fma(kernel)
                }
            }
            _ => kernel.run(Portable),
        }
    }
}

/// The widest target no wider than `target` for which `available` holds (portable at least).
fn widest_within(target: Target, available: impl Fn(Target) -> bool) -> Target {
    Target::ALL.into_iter().rev().find(|&t| t <= target && available(t)).unwrap_or(Target::Portable)
}

/// Whether an x86-64 processor has the FMA instruction (false elsewhere: aarch64's baseline has
/// it already).
fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Plain Rust on pairs of values: one NEON register on aarch64, one SSE2 register on x86-64.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Portable;

/// The portable target's code, compiled twice on x86-64: for the baseline ([`Portable`]), whose
/// fused multiply-adds are calls into the C library, and with the FMA instruction
/// (`x86::PortableFma`, on every x86-64 processor since 2013), where each is one instruction. A
/// fused multiply-add is rounded once either way, so both give the same bits; only the speed
/// differs (the portable golden run of `.ci/run` takes a fraction of the time).
pub(crate) trait Pairs: Copy + Send + Sync {
    /// [`Isa::outline`] for this compilation.
    fn outline_pairs<K: Kernel>(self, kernel: K) -> K::Output;
}

impl Pairs for Portable {
    #[inline(always)]
    fn outline_pairs<K: Kernel>(self, kernel: K) -> K::Output {
        #[inline(never)]
        fn portable<K: Kernel>(kernel: K) -> K::Output {
            kernel.run(Portable)
        }
        portable(kernel)
    }
}

impl<P: Pairs> Isa for P {
    type V = [f64; 2];
    const WIDTH: usize = 2;
    const TILE_VECTORS: usize = 4;

    #[inline(always)]
    fn splat(self, x: f64) -> Self::V {
        [x; 2]
    }
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn load(self, values: &[f64], at: usize) -> Self::V {
        debug_assert!(at + 2 <= values.len());
        // SAFETY: the caller's promise: both values lie in `values`.
        unsafe { [*values.get_unchecked(at), *values.get_unchecked(at + 1)] }
    }
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn store(self, values: &mut [f64], at: usize, v: Self::V) {
        debug_assert!(at + 2 <= values.len());
        // SAFETY: as in `load`.
        unsafe {
            *values.get_unchecked_mut(at) = v[0];
            *values.get_unchecked_mut(at + 1) = v[1];
        }
    }
    #[inline(always)]
    fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        [a[0].mul_add(b[0], c[0]), a[1].mul_add(b[1], c[1])]
    }
    #[inline(always)]
    fn mul(self, a: Self::V, b: Self::V) -> Self::V {
        [a[0] * b[0], a[1] * b[1]]
    }
    #[inline(always)]
    fn neg_mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        [(-a[0]).mul_add(b[0], c[0]), (-a[1]).mul_add(b[1], c[1])]
    }
    #[inline(always)]
    fn add(self, a: Self::V, b: Self::V) -> Self::V {
        [a[0] + b[0], a[1] + b[1]]
    }
    #[inline(always)]
    fn sub(self, a: Self::V, b: Self::V) -> Self::V {
        [a[0] - b[0], a[1] - b[1]]
    }
    #[inline(always)]
    fn raise_to(self, x: Self::V, floor: Self::V) -> Self::V {
        std::array::from_fn(|i| if x[i] < floor[i] { floor[i] } else { x[i] })
    }
    #[inline(always)]
    fn zero_where_less(self, x: Self::V, bound: Self::V, y: Self::V) -> Self::V {
        std::array::from_fn(|i| if x[i] < bound[i] { 0.0 } else { y[i] })
    }
    #[inline(always)]
    fn lookup16(self, table: &Table16, index: Self::V) -> Self::V {
        index.map(|i| table.values[(i.to_bits() & 15) as usize])
    }
    #[inline(always)]
    fn plus_index_bits(self, x: Self::V, rounded: Self::V) -> Self::V {
        std::array::from_fn(|i| f64::from_bits(x[i].to_bits().wrapping_add(rounded[i].to_bits() << 48)))
    }
    #[inline(always)]
    fn div(self, a: Self::V, b: Self::V) -> Self::V {
        [a[0] / b[0], a[1] / b[1]]
    }
    #[inline(always)]
    fn neg_abs(self, x: Self::V) -> Self::V {
        x.map(|x| -x.abs())
    }
    #[inline(always)]
    fn select_nonnegative(self, x: Self::V, a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|i| if x[i] >= 0.0 { a[i] } else { b[i] })
    }
    #[inline(always)]
    fn all_abs_within(self, x: Self::V, low: f64, high: f64) -> bool {
        x.iter().all(|x| (low..high).contains(&x.abs()))
    }
    #[inline(always)]
    fn lookup128(self, table: &[[u64; 2]; 128], rounded: Self::V) -> (Self::V, Self::V) {
        let entry = |x: f64| table[(x.to_bits() & 127) as usize];
        let low = rounded.map(|x| f64::from_bits(entry(x)[0]));
        let high = rounded.map(|x| f64::from_bits(entry(x)[1].wrapping_add(x.to_bits() << 45)));
        (low, high)
    }
    #[inline(always)]
    fn outline<K: Kernel>(self, kernel: K) -> K::Output {
        self.outline_pairs(kernel)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m256d, __m512d, _CMP_GE_OQ, _CMP_LT_OQ, _CMP_NLT_UQ, _mm256_add_epi64, _mm256_add_pd, _mm256_and_si256,
        _mm256_andnot_pd, _mm256_blend_epi32, _mm256_blendv_pd, _mm256_castpd_si256, _mm256_castsi256_pd,
        _mm256_cmp_pd, _mm256_div_pd, _mm256_fmadd_pd, _mm256_fnmadd_pd, _mm256_i64gather_epi64, _mm256_loadu_pd,
        _mm256_loadu_si256, _mm256_max_pd, _mm256_movemask_pd, _mm256_mul_pd, _mm256_or_pd,
        _mm256_permutevar8x32_epi32, _mm256_set1_epi64x, _mm256_set1_pd, _mm256_shuffle_epi32, _mm256_slli_epi64,
        _mm256_storeu_pd, _mm256_sub_pd, _mm512_add_epi64, _mm512_add_pd, _mm512_and_si512, _mm512_castpd_si512,
        _mm512_castsi512_pd, _mm512_cmp_pd_mask, _mm512_div_pd, _mm512_fmadd_pd, _mm512_fnmadd_pd,
        _mm512_i64gather_epi64, _mm512_loadu_pd, _mm512_mask_blend_pd, _mm512_maskz_mov_pd, _mm512_max_pd,
        _mm512_mul_pd, _mm512_or_si512, _mm512_permutex2var_pd, _mm512_set1_epi64, _mm512_set1_pd, _mm512_setr_epi64,
        _mm512_slli_epi64, _mm512_storeu_pd, _mm512_sub_pd, _mm512_unpackhi_pd, _mm512_unpacklo_pd,
    };

    use super::{Isa, Kernel, Table16};

    /// Proof that the processor has AVX-512F, AVX2 and FMA; only [`super::Checked::run`] makes
    /// one, after checking.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Avx512(pub(super) ());

    /// Proof that the processor has AVX2 and FMA; only [`super::Checked::run`] makes one, after
    /// checking.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Avx2(pub(super) ());

    /// Proof that the processor has FMA: the portable code compiled with the instruction (see
    /// [`super::Pairs`]); only [`super::Checked::run`] makes one, after checking.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct PortableFma(pub(super) ());

    impl super::Pairs for PortableFma {
        #[inline(always)]
        fn outline_pairs<K: Kernel>(self, kernel: K) -> K::Output {
            #[target_feature(enable = "fma")]
            #[inline(never)]
            fn portable_fma<K: Kernel>(kernel: K) -> K::Output {
                kernel.run(PortableFma(()))
            }
            // SAFETY: a `PortableFma` exists only where the processor has FMA.
            #[allow(unsafe_code)]
            unsafe {
                portable_fma(kernel)
            }
        }
    }

    // SAFETY (every intrinsic call below): an `Avx512` or `Avx2` value exists only where the
    // processor has the instructions (see `run`), and loads and stores stay inside the slice by
    // the caller's promise.
    #[allow(unsafe_code)]
    impl Isa for Avx512 {
        type V = __m512d;
        const WIDTH: usize = 8;
        const TILE_VECTORS: usize = 4;

        #[inline(always)]
        fn splat(self, x: f64) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_set1_pd(x) }
        }
        #[inline(always)]
        unsafe fn load(self, values: &[f64], at: usize) -> Self::V {
            debug_assert!(at + 8 <= values.len());
            // SAFETY: `self` proves the instructions; the caller promises the values lie in `values`.
            unsafe { _mm512_loadu_pd(values.as_ptr().add(at)) }
        }
        #[inline(always)]
        unsafe fn store(self, values: &mut [f64], at: usize, v: Self::V) {
            debug_assert!(at + 8 <= values.len());
            // SAFETY: `self` proves the instructions; the caller promises the values lie in `values`.
            unsafe { _mm512_storeu_pd(values.as_mut_ptr().add(at), v) }
        }
        #[inline(always)]
        fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_fmadd_pd(a, b, c) }
        }
        #[inline(always)]
        fn mul(self, a: Self::V, b: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_mul_pd(a, b) }
        }
        #[inline(always)]
        fn neg_mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_fnmadd_pd(a, b, c) }
        }
        #[inline(always)]
        fn add(self, a: Self::V, b: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_add_pd(a, b) }
        }
        #[inline(always)]
        fn sub(self, a: Self::V, b: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_sub_pd(a, b) }
        }
        #[inline(always)]
        fn raise_to(self, x: Self::V, floor: Self::V) -> Self::V {
            // `max` returns its second operand where either is NaN, and `x` where the two are equal
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_max_pd(floor, x) }
        }
        #[inline(always)]
        fn zero_where_less(self, x: Self::V, bound: Self::V, y: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_maskz_mov_pd(_mm512_cmp_pd_mask::<_CMP_NLT_UQ>(x, bound), y) }
        }
        #[inline(always)]
        fn lookup16(self, table: &Table16, index: Self::V) -> Self::V {
            // `vpermt2pd` reads the low four bits of each index: the fourth picks the second half
            // SAFETY: `self` proves the processor has the instructions; both loads lie in `table`.
            unsafe {
                let values = table.values.as_ptr();
                let (low, high) = (_mm512_loadu_pd(values), _mm512_loadu_pd(values.add(8)));
                _mm512_permutex2var_pd(low, _mm512_castpd_si512(index), high)
            }
        }
        #[inline(always)]
        fn plus_index_bits(self, x: Self::V, rounded: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe {
                let n = _mm512_slli_epi64::<48>(_mm512_castpd_si512(rounded));
                _mm512_castsi512_pd(_mm512_add_epi64(_mm512_castpd_si512(x), n))
            }
        }
        #[inline(always)]
        fn div(self, a: Self::V, b: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_div_pd(a, b) }
        }
        #[inline(always)]
        fn neg_abs(self, x: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(x), _mm512_set1_epi64(i64::MIN))) }
        }
        #[inline(always)]
        fn select_nonnegative(self, x: Self::V, a: Self::V, b: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm512_mask_blend_pd(_mm512_cmp_pd_mask::<_CMP_GE_OQ>(x, _mm512_set1_pd(0.0)), b, a) }
        }
        #[inline(always)]
        fn all_abs_within(self, x: Self::V, low: f64, high: f64) -> bool {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe {
                let magnitude =
                    _mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(x), _mm512_set1_epi64(i64::MAX)));
                let at_least = _mm512_cmp_pd_mask::<_CMP_GE_OQ>(magnitude, _mm512_set1_pd(low));
                let below = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(magnitude, _mm512_set1_pd(high));
                at_least & below == 0xff
            }
        }
        #[inline(always)]
        fn lookup128(self, table: &[[u64; 2]; 128], rounded: Self::V) -> (Self::V, Self::V) {
            // two gathers of eight lanes, at `2·j` and `2·j + 1` words from the table's start
            // SAFETY: `self` proves the processor has the instructions; `2·j + 1 < 256` words, so
            // every load lies in `table`.
            unsafe {
                let bits = _mm512_castpd_si512(rounded);
                let words = _mm512_slli_epi64::<1>(_mm512_and_si512(bits, _mm512_set1_epi64(127)));
                let first = table.as_ptr().cast::<i64>();
                let low = _mm512_i64gather_epi64::<8>(words, first);
                let high = _mm512_i64gather_epi64::<8>(words, first.add(1));
                let high = _mm512_add_epi64(high, _mm512_slli_epi64::<45>(bits));
                (_mm512_castsi512_pd(low), _mm512_castsi512_pd(high))
            }
        }
        #[inline(always)]
        fn sums_of_eight_rows(self, sums: &[[Self::V; 8]; 8]) -> [f64; 8] {
            // rows a…h, `a01` = a₀ + a₁: the sums of two rows' pairs, then of fours, then of all
            // eight (a macro, not a closure: a closure's body would not get the target's features)
            macro_rules! pairs {
                ($x:expr, $y:expr) => {
                    _mm512_add_pd(_mm512_unpacklo_pd($x, $y), _mm512_unpackhi_pd($x, $y))
                };
            }
            macro_rules! picked {
                ($first:expr, $second:expr, $x:expr, $y:expr) => {
                    _mm512_add_pd(_mm512_permutex2var_pd($x, $first, $y), _mm512_permutex2var_pd($x, $second, $y))
                };
            }
            // SAFETY: `self` proves the processor has the instructions; the store lies in `out`.
            unsafe {
                // [a01 b01 a23 b23 a45 b45 a67 b67], and c…d, e…f, g…h
                let ab = pairs!(sums[0][0], sums[1][0]);
                let cd = pairs!(sums[2][0], sums[3][0]);
                let ef = pairs!(sums[4][0], sums[5][0]);
                let gh = pairs!(sums[6][0], sums[7][0]);
                // [a0123 b0123 c0123 d0123 a4567 b4567 c4567 d4567], and e…h
                let (first, second) =
                    (_mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15));
                let abcd = picked!(first, second, ab, cd);
                let efgh = picked!(first, second, ef, gh);
                // [a b c d e f g h], each (0123) + (4567)
                let (low, high) =
                    (_mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11), _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15));
                let all = picked!(low, high, abcd, efgh);
                let mut out = [0.0; 8];
                _mm512_storeu_pd(out.as_mut_ptr(), all);
                out
            }
        }
        #[inline(always)]
        fn outline<K: Kernel>(self, kernel: K) -> K::Output {
            #[inline(never)]
            #[target_feature(enable = "avx512f,avx2,fma")]
            fn avx512<K: Kernel>(kernel: K) -> K::Output {
                kernel.run(Avx512(()))
            }
            // SAFETY: `self` proves the processor has AVX-512F, AVX2 and FMA.
            unsafe { avx512(kernel) }
        }
    }

    #[allow(unsafe_code)]
    impl Isa for Avx2 {
        type V = __m256d;
        const WIDTH: usize = 4;
        const TILE_VECTORS: usize = 2;

        #[inline(always)]
        fn splat(self, x: f64) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_set1_pd(x) }
        }
        #[inline(always)]
        unsafe fn load(self, values: &[f64], at: usize) -> Self::V {
            debug_assert!(at + 4 <= values.len());
            // SAFETY: `self` proves the instructions; the caller promises the values lie in `values`.
            unsafe { _mm256_loadu_pd(values.as_ptr().add(at)) }
        }
        #[inline(always)]
        unsafe fn store(self, values: &mut [f64], at: usize, v: Self::V) {
            debug_assert!(at + 4 <= values.len());
            // SAFETY: `self` proves the instructions; the caller promises the values lie in `values`.
            unsafe { _mm256_storeu_pd(values.as_mut_ptr().add(at), v) }
        }
        #[inline(always)]
        fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_fmadd_pd(a, b, c) }
        }
        #[inline(always)]
        fn mul(self, a: Self::V, b: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_mul_pd(a, b) }
        }
        #[inline(always)]
        fn neg_mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_fnmadd_pd(a, b, c) }
        }
        #[inline(always)]
        fn add(self, a: Self::V, b: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_add_pd(a, b) }
        }
        #[inline(always)]
        fn sub(self, a: Self::V, b: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_sub_pd(a, b) }
        }
        #[inline(always)]
        fn raise_to(self, x: Self::V, floor: Self::V) -> Self::V {
            // `max` returns its second operand where either is NaN, and `x` where the two are equal
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_max_pd(floor, x) }
        }
        #[inline(always)]
        fn zero_where_less(self, x: Self::V, bound: Self::V, y: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_andnot_pd(_mm256_cmp_pd::<_CMP_LT_OQ>(x, bound), y) }
        }
        #[inline(always)]
        fn lookup16(self, table: &Table16, index: Self::V) -> Self::V {
            // `vpermd` reads the low three bits of each 32-bit index: with the lane's index in both
            // its halves, one permutation over the low halves of eight values and one over the
            // high halves, blended, give one of those eight values whole; the fourth bit, moved to
            // the sign, picks between the first eight and the second
            // SAFETY: `self` proves the processor has the instructions; every load lies in `table`.
            unsafe {
                let index = _mm256_castpd_si256(index);
                let both = _mm256_shuffle_epi32::<0b10_10_00_00>(index);
                // a macro, not a closure: a closure's intrinsics would be calls (see `Kernel`)
                macro_rules! pick {
                    ($h:literal) => {
                        _mm256_blend_epi32::<0b1010_1010>(
                            _mm256_permutevar8x32_epi32(_mm256_loadu_si256(table.low[$h].as_ptr().cast()), both),
                            _mm256_permutevar8x32_epi32(_mm256_loadu_si256(table.high[$h].as_ptr().cast()), both),
                        )
                    };
                }
                let (first, second) = (pick!(0), pick!(1));
                let fourth_bit = _mm256_castsi256_pd(_mm256_slli_epi64::<60>(index));
                _mm256_blendv_pd(_mm256_castsi256_pd(first), _mm256_castsi256_pd(second), fourth_bit)
            }
        }
        #[inline(always)]
        fn plus_index_bits(self, x: Self::V, rounded: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe {
                let n = _mm256_slli_epi64::<48>(_mm256_castpd_si256(rounded));
                _mm256_castsi256_pd(_mm256_add_epi64(_mm256_castpd_si256(x), n))
            }
        }
        #[inline(always)]
        fn div(self, a: Self::V, b: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_div_pd(a, b) }
        }
        #[inline(always)]
        fn neg_abs(self, x: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_or_pd(x, _mm256_set1_pd(-0.0)) }
        }
        #[inline(always)]
        fn select_nonnegative(self, x: Self::V, a: Self::V, b: Self::V) -> Self::V {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe { _mm256_blendv_pd(b, a, _mm256_cmp_pd::<_CMP_GE_OQ>(x, _mm256_set1_pd(0.0))) }
        }
        #[inline(always)]
        fn all_abs_within(self, x: Self::V, low: f64, high: f64) -> bool {
            // SAFETY: `self` proves the processor has the instructions.
            unsafe {
                let magnitude = _mm256_andnot_pd(_mm256_set1_pd(-0.0), x);
                let at_least = _mm256_cmp_pd::<_CMP_GE_OQ>(magnitude, _mm256_set1_pd(low));
                let below = _mm256_cmp_pd::<_CMP_LT_OQ>(magnitude, _mm256_set1_pd(high));
                _mm256_movemask_pd(at_least) & _mm256_movemask_pd(below) == 0xf
            }
        }
        #[inline(always)]
        fn lookup128(self, table: &[[u64; 2]; 128], rounded: Self::V) -> (Self::V, Self::V) {
            // two gathers of four lanes, at `2·j` and `2·j + 1` words from the table's start
            // SAFETY: `self` proves the processor has the instructions; `2·j + 1 < 256` words, so
            // every load lies in `table`.
            unsafe {
                let bits = _mm256_castpd_si256(rounded);
                let words = _mm256_slli_epi64::<1>(_mm256_and_si256(bits, _mm256_set1_epi64x(127)));
                let first = table.as_ptr().cast::<i64>();
                let low = _mm256_i64gather_epi64::<8>(first, words);
                let high = _mm256_i64gather_epi64::<8>(first.add(1), words);
                let high = _mm256_add_epi64(high, _mm256_slli_epi64::<45>(bits));
                (_mm256_castsi256_pd(low), _mm256_castsi256_pd(high))
            }
        }
        #[inline(always)]
        fn outline<K: Kernel>(self, kernel: K) -> K::Output {
            #[inline(never)]
            #[target_feature(enable = "avx2,fma")]
            fn avx2<K: Kernel>(kernel: K) -> K::Output {
                kernel.run(Avx2(()))
            }
            // SAFETY: `self` proves the processor has AVX2 and FMA.
            unsafe { avx2(kernel) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lane by lane, through every operation of the trait: `(a·b + ½)·b`, `(a − b) − a·b`
    /// raised to −0.5, 0 where `a < b` else `b`, [`TABLE`] at `a`'s low four bits, `b`'s bits
    /// plus `a << 48`, `−|a| / b`, `a` where `b ≥ 0` else `b`, [`TABLE128`] at `a`'s low seven
    /// bits (both halves, the second plus `a << 45`), and 1 where every lane of the register has
    /// `¼ ≤ |a| < 2` else 0.
    struct Lanewise<'a>(&'a [f64], &'a [f64]);

    /// Operations [`Lanewise`] runs.
    const OPERATIONS: usize = 10;

    /// A table of 128 different pairs for [`Isa::lookup128`]: `j` and `3j + 1` as bits, mixed.
    const TABLE128: [[u64; 2]; 128] = {
        let mut table = [[0; 2]; 128];
        let mut j = 0;
        while j < 128 {
            table[j] = [(j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15), 0x3FF0_0000_0000_0000 + 3 * j as u64 + 1];
            j += 1;
        }
        table
    };

    /// A table of sixteen different values for [`Isa::lookup16`].
    const TABLE: Table16 =
        Table16::new([-3.0, -2.5, -2.0, -1.5, -1.0, -0.5, -0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 1e300]);

    impl Kernel for Lanewise<'_> {
        type Output = [Vec<f64>; OPERATIONS];
        #[inline(always)]
        fn run<I: Isa>(self, isa: I) -> [Vec<f64>; OPERATIONS] {
            let mut out = [(); OPERATIONS].map(|()| vec![0.0; self.0.len()]);
            for at in (0..self.0.len() - self.0.len() % I::WIDTH).step_by(I::WIDTH) {
                #[allow(unsafe_code)]
                // SAFETY: at + WIDTH ≤ len (the range stops at the last whole vector).
                unsafe {
                    let (a, b) = (isa.load(self.0, at), isa.load(self.1, at));
                    isa.store(&mut out[0], at, isa.mul(isa.mul_add(a, b, isa.splat(0.5)), b));
                    let difference = isa.neg_mul_add(a, b, isa.sub(a, b));
                    isa.store(&mut out[1], at, isa.raise_to(difference, isa.splat(-0.5)));
                    isa.store(&mut out[2], at, isa.zero_where_less(a, b, b));
                    isa.store(&mut out[3], at, isa.lookup16(&TABLE, a));
                    isa.store(&mut out[4], at, isa.plus_index_bits(b, a));
                    isa.store(&mut out[5], at, isa.div(isa.neg_abs(a), b));
                    isa.store(&mut out[6], at, isa.select_nonnegative(b, a, b));
                    let (low, high) = isa.lookup128(&TABLE128, a);
                    isa.store(&mut out[7], at, low);
                    isa.store(&mut out[8], at, high);
                    let within = if isa.all_abs_within(a, 0.25, 2.0) { 1.0 } else { 0.0 };
                    isa.store(&mut out[9], at, isa.splat(within));
                }
            }
            out
        }
    }

    #[test]
    fn a_target_the_processor_lacks_runs_the_widest_narrower_one() {
        // a processor with AVX2 only, and one with nothing but the baseline
        let avx2_only = |t: Target| t <= Target::Avx2;
        assert_eq!(widest_within(Target::Avx512, avx2_only), Target::Avx2);
        assert_eq!(widest_within(Target::Avx2, avx2_only), Target::Avx2);
        assert_eq!(widest_within(Target::Portable, avx2_only), Target::Portable);
        assert_eq!(widest_within(Target::Avx512, |t| t == Target::Portable), Target::Portable);
        assert_eq!(widest_within(Target::Avx512, |_| false), Target::Portable);
    }

    /// [`Lanewise`] in a function of its own, as the strip kernels run their tile loops.
    struct Outlined<'a>(&'a [f64], &'a [f64]);

    impl Kernel for Outlined<'_> {
        type Output = [Vec<f64>; OPERATIONS];
        #[inline(always)]
        fn run<I: Isa>(self, isa: I) -> [Vec<f64>; OPERATIONS] {
            isa.outline(Lanewise(self.0, self.1))
        }
    }

    #[test]
    fn the_portable_code_gives_the_same_bits_with_and_without_the_fma_instruction() {
        let a: Vec<f64> = (0..64).map(|i| (i as f64 * 0.731).sin() * 1e3).collect();
        let b: Vec<f64> = (0..64).map(|i| (i as f64 * 0.197).cos() / 7.0).collect();
        let baseline = Outlined(&a, &b).run(Portable);
        // through `run`, the portable target takes the FMA build where the processor has FMA
        let checked = Checked::new(Target::Portable);
        assert_eq!(checked.1, has_fma());
        let dispatched = checked.run(Outlined(&a, &b));
        for (op, (x, y)) in baseline.iter().zip(&dispatched).enumerate() {
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(x), bits(y), "operation {op}");
        }
    }

    #[test]
    fn every_available_target_gives_the_same_bits() {
        let mut a: Vec<f64> = (0..48).map(|i| (i as f64 * 0.37).sin()).collect();
        let mut b: Vec<f64> = (0..48).map(|i| (i as f64 * 0.11).cos()).collect();
        // NaN on either side of each comparison, and equal operands
        a[..4].copy_from_slice(&[f64::NAN, 0.25, f64::NAN, -0.0]);
        b[..6].copy_from_slice(&[0.25, f64::NAN, f64::NAN, 0.0, 0.5, -0.0]); // and −0 selects as ≥ 0
        // the range test's edges in registers that pass it otherwise, and a register that passes
        a[8..16].copy_from_slice(&[-0.5, 1.0, 2f64.next_down(), -0.25, 0.3, 0.4, 0.5, 0.6]);
        a[16..24].copy_from_slice(&[-0.5, 1.0, -2.0, 0.3, 0.4, 0.5, 0.6, 0.7]);
        a[24..32].copy_from_slice(&[0.5, 1.0, 0.25f64.next_down(), 0.3, 0.4, 0.5, 0.6, 0.7]);
        let raised = |x: f64| if x < -0.5 { -0.5 } else { x };
        let entry = |x: &f64| TABLE128[(x.to_bits() & 127) as usize];
        let want = |width: usize| -> [Vec<f64>; OPERATIONS] {
            // the range test holds for a whole register: 1 in each lane where all its lanes pass
            let within: Vec<bool> = a.iter().map(|x| (0.25..2.0).contains(&x.abs())).collect();
            let whole = within.chunks(width).flat_map(|lanes| vec![lanes.iter().all(|&w| w); lanes.len()]);
            [
                a.iter().zip(&b).map(|(x, y)| x.mul_add(*y, 0.5) * y).collect(),
                a.iter().zip(&b).map(|(x, y)| raised((-x).mul_add(*y, x - y))).collect(),
                a.iter().zip(&b).map(|(x, y)| if x < y { 0.0 } else { *y }).collect(),
                a.iter().map(|x| TABLE.values[(x.to_bits() & 15) as usize]).collect(),
                a.iter().zip(&b).map(|(x, y)| f64::from_bits(y.to_bits().wrapping_add(x.to_bits() << 48))).collect(),
                a.iter().zip(&b).map(|(x, y)| -x.abs() / y).collect(),
                a.iter().zip(&b).map(|(x, y)| if *y >= 0.0 { *x } else { *y }).collect(),
                a.iter().map(|x| f64::from_bits(entry(x)[0])).collect(),
                a.iter().map(|x| f64::from_bits(entry(x)[1].wrapping_add(x.to_bits() << 45))).collect(),
                whole.map(|w| if w { 1.0 } else { 0.0 }).collect(),
            ]
        };
        let bits = |v: &[f64]| v.iter().map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() }).collect::<Vec<_>>();
        for t in Target::available() {
            let want = want(match t {
                Target::Portable => 2,
                Target::Avx2 => 4,
                Target::Avx512 => 8,
            });
            let got = run(t, Lanewise(&a, &b));
            for (op, (got, want)) in got.iter().zip(&want).enumerate() {
                assert_eq!(bits(got), bits(want), "{t}, operation {op}");
            }
        }
    }

    /// [`Isa::lookup16`] of [`TABLE`] at each index.
    struct Lookup<'a>(&'a [f64]);

    impl Kernel for Lookup<'_> {
        type Output = Vec<f64>;
        #[inline(always)]
        fn run<I: Isa>(self, isa: I) -> Vec<f64> {
            let mut out = vec![0.0; self.0.len()];
            for at in (0..self.0.len() - self.0.len() % I::WIDTH).step_by(I::WIDTH) {
                #[allow(unsafe_code)]
                // SAFETY: at + WIDTH ≤ len (the range stops at the last whole vector).
                unsafe {
                    isa.store(&mut out, at, isa.lookup16(&TABLE, isa.load(self.0, at)))
                };
            }
            out
        }
    }

    #[test]
    fn the_lookup_reads_the_low_four_bits_and_nothing_else() {
        // every index in every lane, under upper bits of all kinds: none, all, the exponential's
        // `1.5·2⁵² + n` for negative and positive `n`, and one bit at a time from bit 4 to 63
        let mut uppers: Vec<u64> = vec![0, u64::MAX << 4, 6_755_399_441_055_744f64.to_bits() & !15];
        uppers.push((6_755_399_441_055_744f64 - 11_200.0).to_bits() & !15);
        uppers.extend((4..64).map(|b| 1u64 << b));
        let mut indices = Vec::new();
        for upper in &uppers {
            for lane in 0..8 {
                // the sixteen indices rotated, so that each lands in each lane
                indices.extend((0..16).map(|j| f64::from_bits(upper | ((j + lane) % 16))));
            }
        }
        let want: Vec<u64> = indices.iter().map(|x| TABLE.values[(x.to_bits() & 15) as usize].to_bits()).collect();
        for t in Target::available() {
            let got: Vec<u64> = run(t, Lookup(&indices)).iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "{t}");
        }
    }
}
