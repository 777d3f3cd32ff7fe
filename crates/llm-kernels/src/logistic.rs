//! The logistic function `σ(x) = 1 / (1 + e^{−x})` and SiLU, `x · σ(x)`, over many values at a
//! time, with the bits of the C library's `exp` on x86-64 Linux.
//!
//! Every block of a LLaMA-style model applies SiLU to each hidden value of its feed-forward: a
//! 256-token prompt through SmolLM2-135M makes 11.8 million of them, and each training step of
//! chapter 37's model 360 thousand. With `f64::exp` each is a call into the C library (about
//! 4.7 ns a value on a Zen 4 core). Here σ is the formula that cannot overflow,
//!
//! ```text
//! e = e^{−|x|},   σ(x) = 1 / (1 + e)  for x ≥ 0,   e / (1 + e)  below,
//! ```
//!
//! computed a register at a time (eight values with AVX-512, four with AVX2, two in the portable
//! code), four registers a step. The exponential is the algorithm of the GNU C library's `exp`
//! (glibc 2.28 on; it came from Arm's optimized-routines), written out so that every value — and
//! with them the losses chapters 36 and 37 print, which depend on those bits through their
//! training — is what `f64::exp` gives on x86-64 Linux:
//!
//! ```text
//! n = round(128·a / ln 2) = 128·k + j,   r = a − n · ln 2 / 128      (ln 2 / 128 in two parts)
//! 2^{j/128} = H_j · (1 + T_j)            H_j the nearest double, T_j its rounded remainder
//! eʳ − 1 ≈ r + C₂r² + C₃r³ + C₄r⁴ + C₅r⁵   (|r| ≤ ln 2 / 256, the library's coefficients)
//! eᵃ = s + s · (T_j + r + r²·(C₂ + r·C₃) + r⁴·(C₄ + r·C₅)),   s = 2ᵏ · H_j
//! ```
//!
//! with each `a·b + c` one fused multiply-add where the library's build for processors with AVX2
//! and FMA (the one glibc picks on them) has one, eight in all, in its order. The table of `H_j`
//! and `T_j` is computed with exact arithmetic by `scripts/make_exp_table.py`. Only arguments with
//! `2⁻⁵⁴ ≤ |a| < 512` go this way, the range of the library's own fast path: for σ, every `x`
//! but those within `2⁻⁵⁴` of zero, beyond ±512, infinite or NaN, which call `f64::exp` itself.
//!
//! Elsewhere (another C library, or glibc's build for processors without FMA, which rounds some
//! products apart) the values can differ from `f64::exp`'s in the last bit, but they are the same
//! on every target and thread: the tape and the quantized decoder both call these functions, so
//! they still agree bit for bit.
//!
//! At `x = ±∞` SiLU and its slope take their limits (`+∞` and 1, 0 and 0), where the formula
//! would multiply an infinity by zero.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::isa::{self, Isa, Kernel, Portable};
use crate::target::active;

/// `128 / ln 2`.
const STEPS_PER_LN: f64 = f64::from_bits(0x4067_1547_652B_82FE);
/// `1.5 · 2⁵²`: added to `128·a / ln 2`, it rounds to an integer `n` held in the low bits.
const ROUNDER: f64 = f64::from_bits(0x4338_0000_0000_0000);
/// `−ln 2 / 128` rounded so that `n` times it is exact for every `n` in use.
const NEG_LN2_HI: f64 = f64::from_bits(0xBF76_2E42_FEFA_0000);
/// `−ln 2 / 128` less [`NEG_LN2_HI`].
const NEG_LN2_LO: f64 = f64::from_bits(0xBD0C_F79A_BC9E_3B3A);
/// The coefficients `C₂ … C₅` of `eʳ − 1` (close to `1/2, 1/6, 1/24, 1/120`).
const C: [f64; 4] = [
    f64::from_bits(0x3FDF_FFFF_FFFF_FDBD),
    f64::from_bits(0x3FC5_5555_5555_543C),
    f64::from_bits(0x3FA5_5555_CF17_2B91),
    f64::from_bits(0x3F81_1111_67A4_D017),
];
/// The smallest `|a|` the vector path takes: `2⁻⁵⁴` (below it `eᵃ` rounds to 1).
const SMALLEST: f64 = f64::from_bits(0x3C90_0000_0000_0000);
/// The bound `|a| < 512` of the vector path (beyond it the result may leave the normal range).
const LARGEST: f64 = 512.0;

/// `[bits of T_j, bits of H_j − (j << 45)]` for `j = 0..128` (module docs; printed by
/// `scripts/make_exp_table.py`).
const TABLE: [[u64; 2]; 128] = [
    [0x0000000000000000, 0x3FF0000000000000],
    [0x3C9B3B4F1A88BF6E, 0x3FEFF63DA9FB3335],
    [0xBC7160139CD8DC5D, 0x3FEFEC9A3E778061],
    [0xBC905E7A108766D1, 0x3FEFE315E86E7F85],
    [0x3C8CD2523567F613, 0x3FEFD9B0D3158574],
    [0xBC8BCE8023F98EFA, 0x3FEFD06B29DDF6DE],
    [0x3C60F74E61E6C861, 0x3FEFC74518759BC8],
    [0x3C90A3E45B33D399, 0x3FEFBE3ECAC6F383],
    [0x3C979AA65D837B6D, 0x3FEFB5586CF9890F],
    [0x3C8EB51A92FDEFFC, 0x3FEFAC922B7247F7],
    [0x3C3EBE3D702F9CD1, 0x3FEFA3EC32D3D1A2],
    [0xBC6A033489906E0B, 0x3FEF9B66AFFED31B],
    [0xBC9556522A2FBD0E, 0x3FEF9301D0125B51],
    [0xBC5080EF8C4EEA55, 0x3FEF8ABDC06C31CC],
    [0xBC91C923B9D5F416, 0x3FEF829AAEA92DE0],
    [0x3C80D3E3E95C55AF, 0x3FEF7A98C8A58E51],
    [0xBC801B15EAA59348, 0x3FEF72B83C7D517B],
    [0xBC8F1FF055DE323D, 0x3FEF6AF9388C8DEA],
    [0x3C8B898C3F1353BF, 0x3FEF635BEB6FCB75],
    [0xBC96D99C7611EB26, 0x3FEF5BE084045CD4],
    [0x3C9AECF73E3A2F60, 0x3FEF54873168B9AA],
    [0xBC8FE782CB86389D, 0x3FEF4D5022FCD91D],
    [0x3C8A6F4144A6C38D, 0x3FEF463B88628CD6],
    [0x3C807A05B0E4047D, 0x3FEF3F49917DDC96],
    [0x3C968EFDE3A8A894, 0x3FEF387A6E756238],
    [0x3C875E18F274487D, 0x3FEF31CE4FB2A63F],
    [0x3C80472B981FE7F2, 0x3FEF2B4565E27CDD],
    [0xBC96B87B3F71085E, 0x3FEF24DFE1F56381],
    [0x3C82F7E16D09AB31, 0x3FEF1E9DF51FDEE1],
    [0xBC3D219B1A6FBFFA, 0x3FEF187FD0DAD990],
    [0x3C8B3782720C0AB4, 0x3FEF1285A6E4030B],
    [0x3C6E149289CECB8F, 0x3FEF0CAFA93E2F56],
    [0x3C834D754DB0ABB6, 0x3FEF06FE0A31B715],
    [0x3C864201E2AC744C, 0x3FEF0170FC4CD831],
    [0x3C8FDD395DD3F84A, 0x3FEEFC08B26416FF],
    [0xBC86A3803B8E5B04, 0x3FEEF6C55F929FF1],
    [0xBC924AEDCC4B5068, 0x3FEEF1A7373AA9CB],
    [0xBC9907F81B512D8E, 0x3FEEECAE6D05D866],
    [0xBC71D1E83E9436D2, 0x3FEEE7DB34E59FF7],
    [0xBC991919B3CE1B15, 0x3FEEE32DC313A8E5],
    [0x3C859F48A72A4C6D, 0x3FEEDEA64C123422],
    [0xBC9312607A28698A, 0x3FEEDA4504AC801C],
    [0xBC58A78F4817895B, 0x3FEED60A21F72E2A],
    [0xBC7C2C9B67499A1B, 0x3FEED1F5D950A897],
    [0x3C4363ED60C2AC11, 0x3FEECE086061892D],
    [0x3C9666093B0664EF, 0x3FEECA41ED1D0057],
    [0x3C6ECCE1DAA10379, 0x3FEEC6A2B5C13CD0],
    [0x3C93FF8E3F0F1230, 0x3FEEC32AF0D7D3DE],
    [0x3C7690CEBB7AAFB0, 0x3FEEBFDAD5362A27],
    [0x3C931DBDEB54E077, 0x3FEEBCB299FDDD0D],
    [0xBC8F94340071A38E, 0x3FEEB9B2769D2CA7],
    [0xBC87DECCDC93A349, 0x3FEEB6DAA2CF6642],
    [0xBC78DEC6BD0F385F, 0x3FEEB42B569D4F82],
    [0xBC861246EC7B5CF6, 0x3FEEB1A4CA5D920F],
    [0x3C93350518FDD78E, 0x3FEEAF4736B527DA],
    [0x3C7B98B72F8A9B05, 0x3FEEAD12D497C7FD],
    [0x3C9063E1E21C5409, 0x3FEEAB07DD485429],
    [0x3C34C7855019C6EA, 0x3FEEA9268A5946B7],
    [0x3C9432E62B64C035, 0x3FEEA76F15AD2148],
    [0xBC8CE44A6199769F, 0x3FEEA5E1B976DC09],
    [0xBC8C33C53BEF4DA8, 0x3FEEA47EB03A5585],
    [0xBC845378892BE9AE, 0x3FEEA34634CCC320],
    [0xBC93CEDD78565858, 0x3FEEA23882552225],
    [0x3C5710AA807E1964, 0x3FEEA155D44CA973],
    [0xBC93B3EFBF5E2228, 0x3FEEA09E667F3BCD],
    [0xBC6A12AD8734B982, 0x3FEEA012750BDABF],
    [0xBC6367EFB86DA9EE, 0x3FEE9FB23C651A2F],
    [0xBC80DC3D54E08851, 0x3FEE9F7DF9519484],
    [0xBC781F647E5A3ECF, 0x3FEE9F75E8EC5F74],
    [0xBC86EE4AC08B7DB0, 0x3FEE9F9A48A58174],
    [0xBC8619321E55E68A, 0x3FEE9FEB564267C9],
    [0x3C909CCB5E09D4D3, 0x3FEEA0694FDE5D3F],
    [0xBC7B32DCB94DA51D, 0x3FEEA11473EB0187],
    [0x3C94ECFD5467C06B, 0x3FEEA1ED0130C132],
    [0x3C65EBE1ABD66C55, 0x3FEEA2F336CF4E62],
    [0xBC88A1C52FB3CF42, 0x3FEEA427543E1A12],
    [0xBC9369B6F13B3734, 0x3FEEA589994CCE13],
    [0xBC805E843A19FF1E, 0x3FEEA71A4623C7AD],
    [0xBC94D450D872576E, 0x3FEEA8D99B4492ED],
    [0x3C90AD675B0E8A00, 0x3FEEAAC7D98A6699],
    [0x3C8DB72FC1F0EAB4, 0x3FEEACE5422AA0DB],
    [0xBC65B6609CC5E7FF, 0x3FEEAF3216B5448C],
    [0x3C7BF68359F35F44, 0x3FEEB1AE99157736],
    [0xBC93091FA71E3D83, 0x3FEEB45B0B91FFC6],
    [0xBC5DA9B88B6C1E29, 0x3FEEB737B0CDC5E5],
    [0xBC6C23F97C90B959, 0x3FEEBA44CBC8520F],
    [0xBC92434322F4F9AA, 0x3FEEBD829FDE4E50],
    [0xBC85CA6CD7668E4B, 0x3FEEC0F170CA07BA],
    [0x3C71AFFC2B91CE27, 0x3FEEC49182A3F090],
    [0x3C6DD235E10A73BB, 0x3FEEC86319E32323],
    [0xBC87C50422622263, 0x3FEECC667B5DE565],
    [0x3C8B1C86E3E231D5, 0x3FEED09BEC4A2D33],
    [0xBC91BBD1D3BCBB15, 0x3FEED503B23E255D],
    [0x3C90CC319CEE31D2, 0x3FEED99E1330B358],
    [0x3C8469846E735AB3, 0x3FEEDE6B5579FDBF],
    [0xBC82DFCD978E9DB4, 0x3FEEE36BBFD3F37A],
    [0x3C8C1A7792CB3387, 0x3FEEE89F995AD3AD],
    [0xBC907B8F4AD1D9FA, 0x3FEEEE07298DB666],
    [0xBC55C3D956DCAEBA, 0x3FEEF3A2B84F15FB],
    [0xBC90A40E3DA6F640, 0x3FEEF9728DE5593A],
    [0xBC68D6F438AD9334, 0x3FEEFF76F2FB5E47],
    [0xBC91EEE26B588A35, 0x3FEF05B030A1064A],
    [0x3C74FFD70A5FDDCD, 0x3FEF0C1E904BC1D2],
    [0xBC91BDFBFA9298AC, 0x3FEF12C25BD71E09],
    [0x3C736EAE30AF0CB3, 0x3FEF199BDD85529C],
    [0x3C8EE3325C9FFD94, 0x3FEF20AB5FFFD07A],
    [0x3C84E08FD10959AC, 0x3FEF27F12E57D14B],
    [0x3C63CDAF384E1A67, 0x3FEF2F6D9406E7B5],
    [0x3C676B2C6C921968, 0x3FEF3720DCEF9069],
    [0xBC808A1883CCB5D2, 0x3FEF3F0B555DC3FA],
    [0xBC8FAD5D3FFFFA6F, 0x3FEF472D4A07897C],
    [0xBC900DAE3875A949, 0x3FEF4F87080D89F2],
    [0x3C74A385A63D07A7, 0x3FEF5818DCFBA487],
    [0xBC82919E2040220F, 0x3FEF60E316C98398],
    [0x3C8E5A50D5C192AC, 0x3FEF69E603DB3285],
    [0x3C843A59AC016B4B, 0x3FEF7321F301B460],
    [0xBC82D52107B43E1F, 0x3FEF7C97337B9B5F],
    [0xBC892AB93B470DC9, 0x3FEF864614F5A129],
    [0x3C74B604603A88D3, 0x3FEF902EE78B3FF6],
    [0x3C83C5EC519D7271, 0x3FEF9A51FBC74C83],
    [0xBC8FF7128FD391F0, 0x3FEFA4AFA2A490DA],
    [0xBC8DAE98E223747D, 0x3FEFAF482D8E67F1],
    [0x3C8EC3BC41AA2008, 0x3FEFBA1BEE615A27],
    [0x3C842B94C3A9EB32, 0x3FEFC52B376BBA97],
    [0x3C8A64A931D185EE, 0x3FEFD0765B6E4540],
    [0xBC8E37BAE43BE3ED, 0x3FEFDBFDAD9CBE14],
    [0x3C77893B4D91CD9D, 0x3FEFE7C1819E90D8],
    [0x3C5305C14160CC89, 0x3FEFF3C22B8F71F1],
];

/// Registers a step of the sweeps holds: four chains of the exponential overlap (1.25 ns a value
/// on a Zen 4 core with AVX-512, against 1.34 with two; AVX2 1.38 against 1.51).
const REGISTERS: usize = 4;

/// `eᵃ` in every lane of `N` registers whose lanes all satisfy `2⁻⁵⁴ ≤ |a| < 512` (module docs).
/// The `N` evaluations are interleaved, one step of each and then the next, so that the processor
/// has independent chains to overlap; each lane goes through the same IEEE operations whatever `N`
/// and the target, and the lookup is exact, so the bits depend on neither.
#[inline(always)]
fn exp_vectors<I: Isa, const N: usize>(isa: I, a: [I::V; N]) -> [I::V; N] {
    let (rounder, steps) = (isa.splat(ROUNDER), isa.splat(STEPS_PER_LN));
    let (hi, lo) = (isa.splat(NEG_LN2_HI), isa.splat(NEG_LN2_LO));
    let [c2, c3, c4, c5] = C.map(|c| isa.splat(c));
    let mut y = a;
    // loops, not closures: a closure's body may be compiled apart, without the target's features
    for (y, &a) in y.iter_mut().zip(&a) {
        let rounded = isa.mul_add(a, steps, rounder);
        let n = isa.sub(rounded, rounder);
        let r = isa.mul_add(n, lo, isa.mul_add(n, hi, a));
        let (remainder, scale) = isa.lookup128(&TABLE, rounded);
        let r2 = isa.mul(r, r);
        let low = isa.mul_add(isa.mul_add(r, c3, c2), r2, isa.add(remainder, r));
        let sum = isa.mul_add(isa.mul(r2, r2), isa.mul_add(r, c5, c4), low);
        *y = isa.mul_add(scale, sum, scale);
    }
    y
}

/// `σ(x)` in every lane of `N` registers, or `None` when a lane's `−|x|` lies outside the range
/// of [`exp_vectors`] (then the caller takes the values one at a time, [`sigmoid`]).
#[inline(always)]
fn sigmoid_vectors<I: Isa, const N: usize>(isa: I, x: [I::V; N]) -> Option<[I::V; N]> {
    let mut a = x;
    let mut in_range = true;
    for a in &mut a {
        *a = isa.neg_abs(*a);
        in_range &= isa.all_abs_within(*a, SMALLEST, LARGEST);
    }
    if !in_range {
        return None;
    }
    let mut s = exp_vectors(isa, a);
    let one = isa.splat(1.0);
    for (s, &x) in s.iter_mut().zip(&x) {
        *s = isa.div(isa.select_nonnegative(x, one, *s), isa.add(one, *s));
    }
    Some(s)
}

/// `eᵃ` of one value: [`exp_vectors`] on the first lane of a portable pair where `a` is in its
/// range, `f64::exp` elsewhere.
#[inline(always)]
fn exp_one(a: f64) -> f64 {
    if (SMALLEST..LARGEST).contains(&a.abs()) {
        let [[y, _]] = exp_vectors(Portable, [[a; 2]]);
        y
    } else {
        a.exp()
    }
}

/// `σ(x) = 1 / (1 + e^{−x})`, written so that it never overflows: with `e = e^{−|x|} ≤ 1`,
/// `1 / (1 + e)` for `x ≥ 0` and `e / (1 + e)` below. The same bits as every lane of the sweeps
/// below, on every target. One value in, one out.
pub fn sigmoid(x: f64) -> f64 {
    sigmoid_one(x)
}

/// [`sigmoid`], inlined into the sweeps (so compiled with their target's instructions).
#[inline(always)]
fn sigmoid_one(x: f64) -> f64 {
    let e = exp_one(-x.abs());
    let numerator = if x >= 0.0 { 1.0 } else { e };
    numerator / (1.0 + e)
}

/// `x · σ(x)` for one value, `x` at ±∞ its limit (`+∞`, `0`).
#[inline(always)]
fn silu_one(x: f64, s: f64) -> f64 {
    if x.is_infinite() { x.max(0.0) } else { x * s }
}

/// SiLU's derivative `σ + x·σ·(1 − σ)` for one value (rounded as written, left to right), `x` at
/// ±∞ its limit (1, 0).
#[inline(always)]
fn slope_one(x: f64, s: f64) -> f64 {
    if x.is_infinite() { s } else { s + x * s * (1.0 - s) }
}

/// Values per task of the parallel sweeps: long runs, so that splitting costs little.
const VALUES_PER_TASK: usize = 4096;

/// `x · σ(x)` for every value: SiLU, into a new vector (not zero-filled first). With `parallel`,
/// runs of 4096 values are spread over the current rayon pool, each computed alone and with the
/// caller's kernel target, so the bits do not depend on the threads.
///
/// Shapes: `x` of any length `n` (a tensor's values, any shape flattened) → `n` values.
#[allow(unsafe_code)]
pub fn silu(x: &[f64], parallel: bool) -> Vec<f64> {
    let target = active();
    let mut out = Vec::with_capacity(x.len());
    let spare = &mut out.spare_capacity_mut()[..x.len()];
    if parallel {
        let runs = spare.par_chunks_mut(VALUES_PER_TASK).zip(x.par_chunks(VALUES_PER_TASK));
        runs.for_each(|(out, x)| isa::run(target, Sweep(SiluInto::new(x, out))));
    } else {
        isa::run(target, Sweep(SiluInto::new(x, spare)));
    }
    // SAFETY: a sweep writes every value of its output (`Sweep::run`), and the runs cover all
    // `x.len()` of them (a panic before this line leaves the vector empty).
    unsafe { out.set_len(x.len()) };
    out
}

/// `x · σ(x)` for every value, and `σ + x·σ·(1 − σ)` (rounded as written, left to right), SiLU's
/// derivative at each `x`, which a tape keeps for the backward pass: two new vectors, made as
/// [`silu`] makes its one.
///
/// Shapes: `x` of any length `n` → (`n` values, `n` slopes).
#[allow(unsafe_code)]
pub fn silu_and_slope(x: &[f64], parallel: bool) -> (Vec<f64>, Vec<f64>) {
    let target = active();
    let (mut out, mut slope) = (Vec::with_capacity(x.len()), Vec::with_capacity(x.len()));
    let (spare_out, spare_slope) =
        (&mut out.spare_capacity_mut()[..x.len()], &mut slope.spare_capacity_mut()[..x.len()]);
    if parallel {
        let outputs = spare_out.par_chunks_mut(VALUES_PER_TASK).zip(spare_slope.par_chunks_mut(VALUES_PER_TASK));
        let runs = outputs.zip(x.par_chunks(VALUES_PER_TASK));
        runs.for_each(|((out, slope), x)| isa::run(target, Sweep(SiluSlopeInto::new(x, out, slope))));
    } else {
        isa::run(target, Sweep(SiluSlopeInto::new(x, spare_out, spare_slope)));
    }
    // SAFETY: as in `silu`, for both outputs.
    unsafe {
        out.set_len(x.len());
        slope.set_len(x.len());
    }
    (out, slope)
}

/// `g ← (g · σ(g)) · u` for every pair: the gated hidden values of a SwiGLU feed-forward, in
/// place of the gate's, with the bits of [`silu`] followed by a product with `up`. On the
/// calling thread, with the [`active`] target (a caller that splits many values over threads
/// hands its target on, `Target::within`).
///
/// Shapes: `gate` and `up` of one length `n` (a layer's hidden values, `[tokens, hidden]`
/// flattened); `gate` is overwritten.
///
/// # Panics
/// If `up` is not as long as `gate`.
pub fn gated(gate: &mut [f64], up: &[f64]) {
    isa::run(active(), Sweep(Gated::new(gate, up)));
}

/// What a sweep makes of each input `x` and its `σ(x)`: the whole registers' version and the
/// one-value version, which must perform the same operations. Every value of the output is
/// written once, by one of the two.
///
/// # Safety
/// Every slice an implementation loads from or writes to holds at least `input().len()` values
/// (each constructor checks it): `load` and `finish` do not check their bounds.
#[allow(unsafe_code)]
unsafe trait Finish {
    /// The inputs `x`.
    fn input(&self) -> &[f64];
    /// Writes the results of `x` and `s = σ(x)` at `at..at + WIDTH`.
    ///
    /// # Safety
    /// `at + WIDTH <= self.input().len()`.
    unsafe fn finish<I: Isa>(&mut self, isa: I, at: usize, x: I::V, s: I::V);
    /// Writes the results of `x` and `s = σ(x)` at `i`.
    fn finish_one(&mut self, i: usize, x: f64, s: f64);
}

/// [`silu`]'s inputs and output.
struct SiluInto<'a>(&'a [f64], &'a mut [MaybeUninit<f64>]);
/// [`silu_and_slope`]'s inputs, values and slopes.
struct SiluSlopeInto<'a>(&'a [f64], &'a mut [MaybeUninit<f64>], &'a mut [MaybeUninit<f64>]);
/// [`gated`]'s gate (input and output) and up values.
struct Gated<'a>(&'a mut [f64], &'a [f64]);

impl<'a> SiluInto<'a> {
    fn new(x: &'a [f64], out: &'a mut [MaybeUninit<f64>]) -> Self {
        assert_eq!(x.len(), out.len(), "an output for every input");
        Self(x, out)
    }
}

impl<'a> SiluSlopeInto<'a> {
    fn new(x: &'a [f64], out: &'a mut [MaybeUninit<f64>], slope: &'a mut [MaybeUninit<f64>]) -> Self {
        assert!(x.len() == out.len() && x.len() == slope.len(), "an output and a slope for every input");
        Self(x, out, slope)
    }
}

impl<'a> Gated<'a> {
    fn new(gate: &'a mut [f64], up: &'a [f64]) -> Self {
        assert_eq!(gate.len(), up.len(), "an up value for every gate value");
        Self(gate, up)
    }
}

/// Writes the `WIDTH` lanes of `v` at `out[at..at + WIDTH]`, through a register's worth of
/// values on the stack (the compiler stores them straight).
///
/// # Safety
/// `at + WIDTH <= out.len()`.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn write<I: Isa>(isa: I, out: &mut [MaybeUninit<f64>], at: usize, v: I::V) {
    let mut lanes = [0.0; 8];
    // SAFETY: WIDTH ≤ 8 on every target.
    unsafe { isa.store(&mut lanes, 0, v) };
    // SAFETY: the caller's promise.
    let out = unsafe { out.get_unchecked_mut(at..at + I::WIDTH) };
    for (out, &v) in out.iter_mut().zip(&lanes) {
        out.write(v);
    }
}

// SAFETY: `new` checks that the output is as long as the inputs.
#[allow(unsafe_code)]
unsafe impl Finish for SiluInto<'_> {
    fn input(&self) -> &[f64] {
        self.0
    }
    #[inline(always)]
    unsafe fn finish<I: Isa>(&mut self, isa: I, at: usize, x: I::V, s: I::V) {
        // SAFETY: the caller's promise, and the output is as long as the inputs.
        unsafe { write(isa, self.1, at, isa.mul(x, s)) }
    }
    #[inline(always)]
    fn finish_one(&mut self, i: usize, x: f64, s: f64) {
        self.1[i].write(silu_one(x, s));
    }
}

// SAFETY: `new` checks that both outputs are as long as the inputs.
#[allow(unsafe_code)]
unsafe impl Finish for SiluSlopeInto<'_> {
    fn input(&self) -> &[f64] {
        self.0
    }
    #[inline(always)]
    unsafe fn finish<I: Isa>(&mut self, isa: I, at: usize, x: I::V, s: I::V) {
        let out = isa.mul(x, s);
        let slope = isa.add(s, isa.mul(out, isa.sub(isa.splat(1.0), s)));
        // SAFETY: the caller's promise, and both outputs are as long as the inputs.
        unsafe {
            write(isa, self.1, at, out);
            write(isa, self.2, at, slope);
        }
    }
    #[inline(always)]
    fn finish_one(&mut self, i: usize, x: f64, s: f64) {
        self.1[i].write(silu_one(x, s));
        self.2[i].write(slope_one(x, s));
    }
}

// SAFETY: `new` checks that `up` is as long as the gate.
#[allow(unsafe_code)]
unsafe impl Finish for Gated<'_> {
    fn input(&self) -> &[f64] {
        self.0
    }
    #[inline(always)]
    unsafe fn finish<I: Isa>(&mut self, isa: I, at: usize, x: I::V, s: I::V) {
        // SAFETY: the caller's promise, and `up` is as long as the gate.
        unsafe { isa.store(self.0, at, isa.mul(isa.mul(x, s), isa.load(self.1, at))) }
    }
    #[inline(always)]
    fn finish_one(&mut self, i: usize, x: f64, s: f64) {
        self.0[i] = silu_one(x, s) * self.1[i];
    }
}

/// A sweep over the inputs of a [`Finish`], compiled per target: `REGISTERS` registers a step
/// through [`sigmoid_vectors`], a step with a value outside its range and the values after the
/// last whole step one at a time.
struct Sweep<F>(F);

impl<F: Finish> Kernel for Sweep<F> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) {
        let Sweep(mut values) = self;
        let (len, step) = (values.input().len(), REGISTERS * I::WIDTH);
        let whole = len - len % step;
        for at in (0..whole).step_by(step) {
            let mut x = [isa.splat(0.0); REGISTERS];
            for (k, x) in x.iter_mut().enumerate() {
                // SAFETY: at + (k + 1)·WIDTH ≤ at + step ≤ whole ≤ len.
                #[allow(unsafe_code)]
                unsafe {
                    *x = isa.load(values.input(), at + k * I::WIDTH);
                }
            }
            match sigmoid_vectors(isa, x) {
                Some(s) => {
                    for (k, (&x, &s)) in x.iter().zip(&s).enumerate() {
                        // SAFETY: as for the loads; `Finish`'s contract covers its other slices.
                        #[allow(unsafe_code)]
                        unsafe {
                            values.finish(isa, at + k * I::WIDTH, x, s);
                        }
                    }
                }
                None => {
                    for i in at..at + step {
                        let x = values.input()[i];
                        values.finish_one(i, x, sigmoid_one(x));
                    }
                }
            }
        }
        for i in whole..len {
            let x = values.input()[i];
            values.finish_one(i, x, sigmoid_one(x));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Target, with_target};

    /// A fixed stream of arguments: SplitMix64's steps as uniform numbers in `[0, 1)`.
    fn uniform(seed: u64, count: usize) -> impl Iterator<Item = f64> {
        let mut state = seed;
        std::iter::repeat_with(move || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as f64 / 2f64.powi(64)
        })
        .take(count)
    }

    /// Arguments across the vector path's range and beyond it: uniform over `(−745, 10)`, over
    /// `(−1, 1)` and over `(−30, 0)` (σ's usual ones), and every power of two's neighbourhood from
    /// `2⁻⁶⁰` to `2¹⁰` on both sides of both signs.
    fn arguments() -> Vec<f64> {
        let mut a: Vec<f64> = uniform(1, 200_000).map(|u| -745.0 + 755.0 * u).collect();
        a.extend(uniform(2, 200_000).map(|u| 2.0 * u - 1.0));
        a.extend(uniform(3, 200_000).map(|u| -30.0 * u));
        for e in -60..=10 {
            let p = 2f64.powi(e);
            for x in [p, p.next_down(), p.next_up()] {
                a.extend([x, -x]);
            }
        }
        a
    }

    #[test]
    fn the_table_holds_each_power_of_two_to_the_128th_and_its_remainder() {
        for (j, &[remainder, power]) in TABLE.iter().enumerate() {
            let nearest = f64::from_bits(power.wrapping_add((j as u64) << 45));
            let library = (j as f64 / 128.0).exp2();
            assert!(nearest.to_bits().abs_diff(library.to_bits()) <= 1, "2^({j}/128): {nearest} vs {library}");
            // the remainder of a nearest double is at most half an ulp of it, relative
            let remainder = f64::from_bits(remainder);
            assert!(remainder.abs() <= f64::EPSILON / 2.0, "T_{j} = {remainder:e}");
            assert_eq!(j == 0, remainder == 0.0, "only 2⁰ is exact");
        }
    }

    #[test]
    fn the_exponential_is_within_an_ulp_of_the_library_everywhere() {
        for a in arguments() {
            let (got, want) = (exp_one(a), a.exp());
            assert!(got.to_bits().abs_diff(want.to_bits()) <= 1, "e^{a}: {got:e} vs {want:e}");
        }
    }

    /// Where `f64::exp` is glibc's build for processors with FMA, the same bits everywhere: what
    /// keeps the losses chapters 36 and 37 print (module docs).
    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    fn the_exponential_has_the_c_librarys_bits_on_x86_64_linux_with_fma() {
        if !(std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2")) {
            return; // glibc then runs its build without FMA, which rounds some products apart
        }
        for a in arguments() {
            let (got, want) = (exp_one(a), a.exp());
            assert_eq!(got.to_bits(), want.to_bits(), "e^{a}: {got:e} vs {want:e}");
        }
    }

    /// The plain formula, with `exp` the one given.
    fn plain_sigmoid(x: f64, exp: impl Fn(f64) -> f64) -> f64 {
        if x >= 0.0 { 1.0 / (1.0 + exp(-x)) } else { exp(x) / (1.0 + exp(x)) }
    }

    #[test]
    fn sigmoid_is_the_plain_formula_with_this_exponential() {
        for x in arguments().into_iter().chain([0.0, -0.0, 1e-320, f64::INFINITY, f64::NEG_INFINITY]) {
            assert_eq!(sigmoid(x).to_bits(), plain_sigmoid(x, exp_one).to_bits(), "σ({x})");
        }
        assert!(sigmoid(f64::NAN).is_nan());
        assert_eq!((sigmoid(0.0), sigmoid(-0.0), sigmoid(800.0), sigmoid(-800.0)), (0.5, 0.5, 1.0, 0.0));
    }

    /// Inputs for the sweeps: in the vector path's range with a value outside it in some steps
    /// (zeros, a subnormal, NaN, infinities, beyond ±512, `2⁻⁵⁴` and the double below it), and
    /// lengths that leave values after the last whole step of every target.
    fn sweep_inputs() -> Vec<Vec<f64>> {
        let mut long: Vec<f64> = uniform(7, 3 * VALUES_PER_TASK + 99).map(|u| 24.0 * u - 12.0).collect();
        let specials = [0.0, -0.0, 4.9e-324, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 600.0, -600.0, 511.9];
        for (k, &v) in specials.iter().enumerate() {
            long[37 * k + 3] = v;
        }
        long[1000] = SMALLEST;
        long[1100] = -SMALLEST.next_down();
        long[1200] = -LARGEST.next_down();
        let mut inputs: Vec<Vec<f64>> = (0..=17).map(|n| long[..n].to_vec()).collect();
        inputs.push(long);
        inputs
    }

    /// The values' bits, every NaN as one (which NaN's payload an operation passes on is the
    /// compiler's choice).
    fn bits(values: &[f64]) -> Vec<u64> {
        values.iter().map(|v| if v.is_nan() { u64::MAX } else { v.to_bits() }).collect()
    }

    #[test]
    fn every_target_sweeps_with_the_bits_of_the_one_value_formulas() {
        for x in sweep_inputs() {
            let up: Vec<f64> = uniform(11, x.len()).map(|u| 4.0 * u - 2.0).collect();
            let s: Vec<f64> = x.iter().map(|&x| sigmoid(x)).collect();
            // the formulas, and at ±∞ their limits: SiLU +∞ and 0, its slope 1 and 0
            let limit = |x: f64, finite: f64, at_plus: f64, at_minus: f64| match x {
                f64::INFINITY => at_plus,
                f64::NEG_INFINITY => at_minus,
                _ => finite,
            };
            let want_silu: Vec<f64> = x.iter().zip(&s).map(|(&x, &s)| limit(x, x * s, x, 0.0)).collect();
            let want_slope: Vec<f64> =
                x.iter().zip(&s).map(|(&x, &s)| limit(x, s + x * s * (1.0 - s), 1.0, 0.0)).collect();
            let want_gated: Vec<f64> = want_silu.iter().zip(&up).map(|(&y, &u)| y * u).collect();
            assert!(want_silu.iter().chain(&want_slope).zip(x.iter().chain(&x)).all(|(y, x)| y.is_nan() == x.is_nan()));
            for target in Target::available() {
                let mut gated_out = x.clone();
                let ((silu_out, (slope_out, slope)), (silu_par, (slope_par_out, slope_par))) =
                    with_target(target, || {
                        gated(&mut gated_out, &up);
                        ((silu(&x, false), silu_and_slope(&x, false)), (silu(&x, true), silu_and_slope(&x, true)))
                    })
                    .unwrap();
                for (name, got) in [("silu", &silu_par), ("silu_and_slope's values", &slope_par_out)] {
                    assert_eq!(bits(got), bits(&silu_out), "{target}, {name} in parallel");
                }
                assert_eq!(bits(&slope_par), bits(&slope), "{target}, slopes in parallel");
                let n = x.len();
                assert_eq!(bits(&silu_out), bits(&want_silu), "{target}, silu of {n}");
                assert_eq!(bits(&slope_out), bits(&want_silu), "{target}, silu_and_slope's values of {n}");
                assert_eq!(bits(&slope), bits(&want_slope), "{target}, slopes of {n}");
                assert_eq!(bits(&gated_out), bits(&want_gated), "{target}, gated of {n}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "an up value for every gate value")]
    fn a_short_up_is_refused() {
        gated(&mut [1.0, 2.0], &[0.0]);
    }
}
