//! The grouped layout: the same blocks with sixteen rows' bytes side by side, so that one load
//! brings the same input of sixteen outputs and the product needs no gather and no transposition.
//!
//! A file stores a weight row after row. Decoding one token sums each output in input order (the
//! one-row path's order, see the parent module), so the vector lanes must hold different outputs
//! — and in the stored layout the sixteen values of one input lie a row apart. Here every run of
//! [`GROUP`] rows is rearranged, block by block, and two such groups ([`PAIR`]) share each block:
//!
//! ```text
//! a pair of groups, block b (2 · GROUP · block_bytes bytes, the same as the 32 stored blocks):
//! Q8_0  [16 d: f16 of group 0][16 d of group 1]                  then 32 lines of 32 bytes
//! Q4_0  [16 d: f16 of group 0][16 d of group 1]                  then 16 lines of 32 bytes
//! Q4_1  [16 d][16 m: f16 of group 0][16 d][16 m of group 1]      then 16 lines of 32 bytes
//! line i: [group 0's 16 rows' byte i][group 1's 16 rows' byte i]
//! byte i: Q8_0 the i8 of input i; Q4_x q[2i] | q[2i+1] << 4
//! ```
//!
//! A matrix with an odd number of groups ends with a lone group: the same with one group, its
//! lines 16 bytes. A group keeps the bytes of its sixteen stored rows (it is a permutation of
//! them, done in place, [`group_rows`]), so a matrix takes exactly the bytes its file gives it;
//! rows after the last whole group stay as stored. In a stored 4-bit block byte `j` holds inputs
//! `j` and `j + 16`; here byte `i` holds inputs `2i` and `2i + 1`, so each byte loaded gives two
//! consecutive terms of the sums.
//!
//! The pairs are for the AVX-512 kernel: with one group its sixteen sums are two chains of
//! additions in two registers, and each step waits for the previous one's latency (four cycles
//! for a fused multiply-add, one input of sixteen outputs per four cycles); with a pair, four
//! chains interleave. Where the groups of a pair kept their blocks apart the kernel read two
//! streams of memory and ran slower than one group from memory (`docs/performance.md`,
//! 2026-12-04, night); sharing each line, a pair is read front to back.

use crate::isa::{Isa, Kernel};

use super::{BLOCK, BlockFormat, INPUTS_PER_SUM, QuantRows, f16_bits, value, values};

/// Rows whose bytes are laid side by side: the outputs one input's line of a group holds (two
/// registers of eight `f64` with AVX-512, four of four with AVX2; the AVX-512 kernel sums a
/// [`PAIR`] of groups at once).
pub const GROUP: usize = 16;

/// Groups laid side by side a second time: the rows of a pair of groups share each block, the
/// first group's scales (and minimums), the second's, then each line of values as the first
/// group's sixteen bytes and the second's. One line is one input of 32 outputs, so a kernel can
/// sum them at once (four chains of additions with AVX-512, where one group has two and waits on
/// their latency) while reading the matrix front to back. A matrix with an odd number of groups
/// ends with a lone one, laid out as above.
pub const PAIR: usize = 2;

/// How far ahead of the block it reads a token's kernel asks for the unit's bytes: about two
/// blocks of the head's `Q8_0` pairs of groups (1 088 bytes each), three of `Q4_1`'s (640).
/// The bytes are read once, front to back, yet on an Intel Xeon (Sapphire Rapids or later) the
/// processor's own prefetching left the kernels waiting on their loads: `real-decode` took
/// 12.5–14.4 ms a token without this and 8.8–10.1 with it; 1 024 and 4 096 bytes ahead were
/// slower than 2 048 (`docs/performance.md`, 2026-12-05, tenth).
#[cfg(target_arch = "x86_64")]
const FETCH_AHEAD: usize = 2048;

/// Asks for the bytes [`FETCH_AHEAD`] past the start of `block`, as many as it holds: the
/// block that a token's kernel reads about two blocks later.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fetch_ahead(block: &[u8]) {
    crate::fetch::fetch_bytes(block.as_ptr().wrapping_add(FETCH_AHEAD).cast(), block.len());
}

/// Bytes of the largest block ([`BlockFormat::Q8_0`]).
pub(super) const MAX_BLOCK_BYTES: usize = 34;

/// Rearranges the whole groups of `rows` stored rows in `bytes` (the layout of
/// [`QuantRows::new`]) into the grouped layout of [`QuantRows::grouped`], in place, each pair of
/// groups through a copy of its own bytes. The inverse is [`QuantRows::stored_row`].
///
/// # Errors
/// As [`QuantRows::new`].
pub fn group_rows(format: BlockFormat, bytes: &mut [u8], rows: usize, cols: usize) -> Result<(), super::QuantError> {
    use rayon::prelude::*;
    let row_bytes = QuantRows::new(format, bytes, rows, cols)?.row_bytes();
    let whole = rows / GROUP * GROUP * row_bytes;
    if row_bytes == 0 {
        return Ok(());
    }
    bytes[..whole].par_chunks_mut(PAIR * GROUP * row_bytes).for_each(|unit| {
        let stored = unit.to_vec();
        let block_bytes = format.block_bytes();
        let groups = unit.len() / (GROUP * row_bytes); // a pair, or a last lone group
        for (b, out) in unit.chunks_exact_mut(groups * GROUP * block_bytes).enumerate() {
            let block = |c: usize| &stored[c * row_bytes + b * block_bytes..][..block_bytes];
            group_block(format, groups, block, out);
        }
    });
    Ok(())
}

/// Writes the grouped bytes of one block of a unit of `groups` groups (`block(c)` = row `c`'s
/// stored block).
fn group_block<'s>(format: BlockFormat, groups: usize, block: impl Fn(usize) -> &'s [u8], out: &mut [u8]) {
    let head = format.head_bytes();
    let (heads, lines) = out.split_at_mut(groups * GROUP * head);
    for (g, heads) in heads.chunks_exact_mut(GROUP * head).enumerate() {
        for c in 0..GROUP {
            for h in (0..head).step_by(2) {
                heads[GROUP * h + 2 * c..][..2].copy_from_slice(&block(g * GROUP + c)[h..h + 2]);
            }
        }
    }
    for (p, line) in lines.chunks_exact_mut(groups * GROUP).enumerate() {
        for (c, byte) in line.iter_mut().enumerate() {
            let qs = &block(c)[head..];
            *byte = match format {
                BlockFormat::Q8_0 => qs[p],
                BlockFormat::Q4_0 | BlockFormat::Q4_1 => nibble(qs, 2 * p) | nibble(qs, 2 * p + 1) << 4,
            };
        }
    }
}

/// Value `i` (0–31) of a stored 4-bit block's sixteen bytes `qs`: byte `i % 16`, its low half
/// for `i < 16`.
#[inline(always)]
pub(super) fn nibble(qs: &[u8], i: usize) -> u8 {
    if i < 16 { qs[i] & 0x0f } else { qs[i - 16] >> 4 }
}

/// One group's part of a grouped block: its sixteen scales (and sixteen minimums), and its lines
/// of sixteen bytes, `stride` bytes apart (16 for a lone group, 32 in a pair).
#[derive(Clone, Copy)]
struct Part<'a> {
    heads: &'a [u8],
    lines: &'a [u8],
    stride: usize,
}

impl<'a> Part<'a> {
    /// Part `h` of a block of a unit of `groups` groups (`block`: that block's bytes).
    #[inline(always)]
    fn of(format: BlockFormat, block: &'a [u8], groups: usize, h: usize) -> Self {
        let head = GROUP * format.head_bytes();
        let (heads, lines) = block.split_at(groups * head);
        Self { heads: &heads[h * head..][..head], lines: &lines[h * GROUP..], stride: groups * GROUP }
    }

    /// Line `l`: the sixteen rows' byte `l`.
    #[inline(always)]
    fn line(&self, l: usize) -> &'a [u8] {
        &self.lines[l * self.stride..][..GROUP]
    }

    /// Every line in turn.
    #[inline(always)]
    fn lines(self, count: usize) -> impl Iterator<Item = &'a [u8]> {
        (0..count).map(move |l| self.line(l))
    }

    /// Value `i` of row `c` in a 4-bit block: byte `i / 2` of the row, its high half for odd `i`.
    #[inline(always)]
    fn nibble(&self, c: usize, i: usize) -> u8 {
        self.line(i / 2)[c] >> (4 * (i % 2)) & 0x0f
    }
}

/// Row `r`'s block `b` of `w` (grouped; `r` below the last whole group): its group's part and
/// `r`'s lane in it.
#[inline(always)]
fn place<'a>(w: &QuantRows<'a>, r: usize, b: usize) -> (Part<'a>, usize) {
    let g = r / GROUP;
    let unit = g / PAIR * PAIR; // the unit's first group
    let groups = (w.rows / GROUP - unit).min(PAIR);
    let block_bytes = groups * GROUP * w.format.block_bytes();
    let block = &w.bytes[unit * GROUP * w.row_bytes() + b * block_bytes..][..block_bytes];
    (Part::of(w.format, block, groups, g - unit), r % GROUP)
}

/// The bytes of block `b` of row `r` of `w` (grouped; `r` below the last whole group) as a file
/// stores them, written into `out`: the inverse of [`group_block`].
pub(super) fn stored_block<'o>(w: &QuantRows<'_>, r: usize, b: usize, out: &'o mut [u8; MAX_BLOCK_BYTES]) -> &'o [u8] {
    let (format, head) = (w.format, w.format.head_bytes());
    let (part, c) = place(w, r, b);
    for h in (0..head).step_by(2) {
        out[h..h + 2].copy_from_slice(&part.heads[GROUP * h + 2 * c..][..2]);
    }
    for j in 0..format.quant_bytes() {
        out[head + j] = match format {
            BlockFormat::Q8_0 => part.line(j)[c],
            BlockFormat::Q4_0 | BlockFormat::Q4_1 => part.nibble(c, j) | part.nibble(c, j + 16) << 4,
        };
    }
    &out[..format.block_bytes()]
}

/// The values of block `b` of group row `r` of `w`, read where the group keeps them: the same
/// numbers as the stored block's (the parent's `values`).
#[inline(always)]
pub(super) fn block_values(w: &QuantRows<'_>, r: usize, b: usize, out: &mut [f64; BLOCK]) {
    let format = w.format;
    let (part, c) = place(w, r, b);
    let heads = part.heads;
    // half `h` (0: the scale, 1: the minimum) of row `c`
    let half = |h: usize| f16_bits(u16::from_le_bytes([heads[2 * (h * GROUP + c)], heads[2 * (h * GROUP + c) + 1]]));
    let m = if format == BlockFormat::Q4_1 { half(1) } else { 0.0 };
    match format {
        BlockFormat::Q8_0 => values(format, half(0), m, |i| part.line(i)[c], out),
        BlockFormat::Q4_0 | BlockFormat::Q4_1 => values(format, half(0), m, |i| part.nibble(c, i), out),
    }
}

/// Every value of block `b` of the group starting at row `first` of `w` (grouped; a whole
/// group), written where a transposed panel keeps them: value `i` of row `first + c` at
/// `out[i · stride + c]`, sixteen lanes at a time.
#[inline(always)]
pub(super) fn group_values(w: &QuantRows<'_>, first: usize, b: usize, out: &mut [f64], stride: usize) {
    let mut runs = out.chunks_mut(stride).filter_map(|line| <&mut [f64; GROUP]>::try_from(&mut line[..GROUP]).ok());
    let format = w.format;
    let (part, _) = place(w, first, b);
    let d = halves(part.heads);
    let m = if format == BlockFormat::Q4_1 { halves(&part.heads[2 * GROUP..]) } else { [0.0; GROUP] };
    let lines = part.lines(format.quant_bytes());
    // each format's loops apart, so that `value` is compiled for one format, sixteen lanes at once
    match format {
        BlockFormat::Q8_0 => {
            for (run, line) in (&mut runs).zip(lines) {
                // the line's bytes copied into an array of the function's own: read through the
                // slice, the loop ran a value at a time (a line is sixteen bytes: `Part::line`)
                let mut q = [0; GROUP];
                q.copy_from_slice(line);
                for c in 0..GROUP {
                    run[c] = value(BlockFormat::Q8_0, d[c], 0.0, q[c]);
                }
            }
        }
        BlockFormat::Q4_0 => pairs::<{ BlockFormat::Q4_0 as u8 }>(lines, &d, &m, runs),
        BlockFormat::Q4_1 => pairs::<{ BlockFormat::Q4_1 as u8 }>(lines, &d, &m, runs),
    }
}

/// [`group_values`] of a 4-bit format (`F`, as `BlockFormat as u8`): each line of sixteen bytes
/// holds two inputs.
#[inline(always)]
fn pairs<'l, 'o, const F: u8>(
    lines: impl Iterator<Item = &'l [u8]>,
    d: &[f32; GROUP],
    m: &[f32; GROUP],
    mut runs: impl Iterator<Item = &'o mut [f64; GROUP]>,
) {
    let format = if F == BlockFormat::Q4_1 as u8 { BlockFormat::Q4_1 } else { BlockFormat::Q4_0 };
    for line in lines {
        let (Some(low), Some(high)) = (runs.next(), runs.next()) else { return };
        // each half of the line's sixteen bytes in an array of the function's own, then each
        // half's values in a loop of its own: read through the slice, or both halves in one
        // loop, the values took longer to make
        let (mut lo, mut hi) = ([0u8; GROUP], [0u8; GROUP]);
        for c in 0..GROUP {
            (lo[c], hi[c]) = (line[c] & 0x0f, line[c] >> 4);
        }
        for c in 0..GROUP {
            low[c] = value(format, d[c], m[c], lo[c]);
        }
        for c in 0..GROUP {
            high[c] = value(format, d[c], m[c], hi[c]);
        }
    }
}

/// The whole groups of `w` from output `first` on (a multiple of [`PAIR`] · [`GROUP`]), a unit
/// at a time: a pair of groups, or the last lone one — its bytes, its number of groups and its
/// outputs in `outs`. The walk every grouped kernel makes; inlined into each, so that it is
/// compiled with the kernel's instructions.
#[inline(always)]
fn units<'w, 'o>(
    w: &QuantRows<'w>,
    first: usize,
    outs: &'o mut [f64],
) -> impl Iterator<Item = (&'w [u8], usize, &'o mut [f64])> {
    debug_assert!(outs.len().is_multiple_of(GROUP), "whole groups of outputs");
    debug_assert!(first.is_multiple_of(PAIR * GROUP), "from the first group of a pair");
    // a row of no bytes (no inputs) still takes one unit per pair of groups
    let unit_bytes = (PAIR * GROUP * w.row_bytes()).max(1);
    let bytes = &w.bytes[first * w.row_bytes()..][..outs.len() * w.row_bytes()];
    let (mut units, mut outs) = (bytes.chunks(unit_bytes), outs.chunks_mut(PAIR * GROUP));
    std::iter::from_fn(move || {
        let outs = outs.next().filter(|outs| outs.len() >= GROUP)?; // whole groups only
        Some((units.next().unwrap_or_default(), outs.len() / GROUP, outs))
    })
}

/// Outputs `first..first + outs.len()` of `x · wᵀ` (`w` grouped, `first` the first output of a
/// pair of groups, the length whole groups), compiled per target: the one-row path's sums,
/// sixteen outputs at a time.
pub(super) struct GroupSums<'x, 'w, 'o> {
    pub(super) x: &'x [f64],
    pub(super) w: &'w QuantRows<'w>,
    pub(super) first: usize,
    pub(super) outs: &'o mut [f64],
}

impl Kernel for GroupSums<'_, '_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) {
        let Self { x, w, first, outs } = self;
        for (unit, groups, outs) in units(w, first, outs) {
            for (h, outs) in outs.chunks_exact_mut(GROUP).enumerate() {
                let totals = match w.format {
                    BlockFormat::Q8_0 => sums::<Q8_0>(w.format, unit, groups, h, x),
                    BlockFormat::Q4_0 => sums::<Q4_0>(w.format, unit, groups, h, x),
                    BlockFormat::Q4_1 => sums::<Q4_1>(w.format, unit, groups, h, x),
                };
                outs.copy_from_slice(&totals);
            }
        }
    }
}

/// The sixteen outputs of group `h` of a unit of `groups`: for each run of [`INPUTS_PER_SUM`]
/// inputs `s = 0; s ← x·w + s` in input order (`F::add` adds one block's 32 terms), then the runs'
/// sums in order.
#[inline(always)]
fn sums<F: GroupedBlock>(format: BlockFormat, unit: &[u8], groups: usize, h: usize, x: &[f64]) -> [f64; GROUP] {
    let mut totals = [0.0; GROUP];
    let mut blocks = unit.chunks_exact(groups * GROUP * format.block_bytes());
    for (s, inputs) in x.chunks(INPUTS_PER_SUM).enumerate() {
        let mut partial = [0.0; GROUP];
        for (xs, block) in inputs.chunks_exact(BLOCK).zip(&mut blocks) {
            if let Ok(xs) = xs.try_into() {
                F::add(Part::of(format, block, groups, h), xs, &mut partial);
            }
        }
        for (total, p) in totals.iter_mut().zip(partial) {
            *total = if s == 0 { p } else { *total + p };
        }
    }
    totals
}

/// The sixteen halves at `head[2c..]`, widened exactly.
#[inline(always)]
fn halves(head: &[u8]) -> [f32; GROUP] {
    let mut out = [0.0; GROUP];
    for (c, v) in out.iter_mut().enumerate() {
        *v = f16_bits(u16::from_le_bytes([head[2 * c], head[2 * c + 1]]));
    }
    out
}

/// One format's part of a grouped block: its 32 terms added to the sixteen sums. (A trait of
/// zero-sized types, not functions passed by value: a function called through a pointer or a
/// closure is compiled for the baseline, outside the target's function.)
trait GroupedBlock {
    /// `partial[c] ← xs[i] · value i of row c + partial[c]`, `i` in input order: each value made
    /// by the parent module's `value` (and so as `gguf::dequantize_into` makes it), the product
    /// and the sum one fused multiply-add. Plain loops over the sixteen lanes, which the compiler makes vector
    /// instructions for the target they are compiled in.
    fn add(part: Part<'_>, xs: &[f64; BLOCK], partial: &mut [f64; GROUP]);
}

#[allow(non_camel_case_types)] // ggml's names
struct Q8_0;
#[allow(non_camel_case_types)]
struct Q4_0;
#[allow(non_camel_case_types)]
struct Q4_1;

impl GroupedBlock for Q8_0 {
    #[inline(always)]
    fn add(part: Part<'_>, xs: &[f64; BLOCK], partial: &mut [f64; GROUP]) {
        let d = halves(part.heads);
        for (line, &a) in part.lines(BLOCK).zip(xs) {
            for c in 0..GROUP {
                partial[c] = a.mul_add(value(BlockFormat::Q8_0, d[c], 0.0, line[c]), partial[c]);
            }
        }
    }
}

impl GroupedBlock for Q4_0 {
    #[inline(always)]
    fn add(part: Part<'_>, xs: &[f64; BLOCK], partial: &mut [f64; GROUP]) {
        let d = halves(part.heads);
        for (line, pair) in part.lines(BLOCK / 2).zip(xs.chunks_exact(2)) {
            for c in 0..GROUP {
                partial[c] = pair[0].mul_add(value(BlockFormat::Q4_0, d[c], 0.0, line[c] & 0x0f), partial[c]);
            }
            for c in 0..GROUP {
                partial[c] = pair[1].mul_add(value(BlockFormat::Q4_0, d[c], 0.0, line[c] >> 4), partial[c]);
            }
        }
    }
}

impl GroupedBlock for Q4_1 {
    #[inline(always)]
    fn add(part: Part<'_>, xs: &[f64; BLOCK], partial: &mut [f64; GROUP]) {
        let (d, m) = (halves(part.heads), halves(&part.heads[2 * GROUP..]));
        for (line, pair) in part.lines(BLOCK / 2).zip(xs.chunks_exact(2)) {
            for c in 0..GROUP {
                partial[c] = pair[0].mul_add(value(BlockFormat::Q4_1, d[c], m[c], line[c] & 0x0f), partial[c]);
            }
            for c in 0..GROUP {
                partial[c] = pair[1].mul_add(value(BlockFormat::Q4_1, d[c], m[c], line[c] >> 4), partial[c]);
            }
        }
    }
}

/// Whether no sum of inputs `x` can ever be −0, so that the sign of a zero value cannot change
/// an output: every input is zero, NaN, infinite or at least 2⁻⁹⁹⁸ in magnitude.
///
/// Every zero value the x86 kernels' exact values make (`x86::ExactValues`) is +0, where `value`
/// gives −0 in some cases (e.g. `Q8_0`'s `q = 0` or `Q4_0`'s `q = 8` under a negative scale,
/// `Q4_1`'s `d·q = −0` beside `m = −0`). A term `a·v + s` shows the sign of a zero `v` only when
/// `s` is −0 (then −0 + −0 = −0 against −0 + +0 = +0; an infinite `a` gives the same NaN either
/// way, and a NaN `a` propagates). A sum starts at +0 and becomes −0 only when a nonzero exact
/// result is rounded to zero (in round-to-nearest, the only mode these kernels run in). A value
/// is a multiple of 2⁻²⁴ (a half's unit, times an integer), and an input of magnitude 2⁻⁹⁹⁸ or
/// more a multiple of 2⁻¹⁰⁵⁰, so every exact result is a multiple of 2⁻¹⁰⁷⁴ and none is rounded
/// to zero. Smaller inputs send the kernels to their other paths, which make `value`'s zeros.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code, reason = "only the x86 kernels make exact values"))]
pub(super) fn sums_never_reach_minus_zero(x: &[f64]) -> bool {
    const SMALLEST: f64 = f64::MIN_POSITIVE * 16_777_216.0; // 2⁻⁹⁹⁸
    x.iter().all(|a| *a == 0.0 || a.is_nan() || a.abs() >= SMALLEST)
}

/// The grouped kernel written with AVX-512 instructions — a pair of groups at a time (or a lone
/// last group), its values made in `f64` where they are the same numbers (`unit_sums`) — and with
/// AVX2 ones. The same values and sums in the same order as [`GroupSums`], so the same bits.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    #[cfg(test)]
    thread_local! {
        /// Blocks whose values byte shuffles made on this thread (`exact_part`, `exact_block_512`):
        /// tests read it to check that the dispatch takes them where it can, which the outputs
        /// alone cannot show (the other paths give the same bits).
        pub(in super::super) static SHUFFLED_BLOCKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        /// Groups' blocks the explicit dequantizing kernels (`group_values_512`,
        /// `group_values_avx2`) made on this thread: for the tests, as above.
        pub(in super::super) static EXPLICIT_GROUPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    use std::ops::Range;

    use super::super::{GroupValues, transposed_block};
    use super::{BLOCK, BlockFormat, GROUP, INPUTS_PER_SUM, PAIR, Part, QuantRows, fetch_ahead, units};

    /// Outputs `first..first + outs.len()` of `x · wᵀ` (`w` grouped, `first` the first output of a
    /// pair of groups, the length whole groups): [`group_sums_as`], with AVX512BW's byte shuffle
    /// where the processor has it and `no_minus_zero` ([`super::sums_never_reach_minus_zero`] of `x`),
    /// and a pair's bytes picked by AVX512VBMI and GFNI ([`exact_pair_512`]) where it has those too.
    ///
    /// # Safety
    /// The processor has AVX-512F.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(in super::super) unsafe fn group_sums(
        x: &[f64],
        w: &QuantRows<'_>,
        first: usize,
        outs: &mut [f64],
        no_minus_zero: bool,
    ) {
        // SAFETY: AVX-512F (the caller), and AVX512BW, AVX512VBMI and GFNI where they are used
        // (checked).
        unsafe {
            if picks_available() {
                group_sums_as::<true, true>(x, w, first, outs, no_minus_zero)
            } else if std::arch::is_x86_feature_detected!("avx512bw") {
                group_sums_as::<true, false>(x, w, first, outs, no_minus_zero)
            } else {
                group_sums_as::<false, false>(x, w, first, outs, no_minus_zero)
            }
        }
    }

    /// Whether the processor has what [`exact_pair_512`] and its callers need beside AVX-512F:
    /// AVX512BW, AVX512VBMI and GFNI (`PICKS` of [`group_sums_as`]).
    pub(in super::super) fn picks_available() -> bool {
        std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vbmi")
            && std::arch::is_x86_feature_detected!("gfni")
    }

    /// [`group_sums`], the blocks that [`exact_head`] admits made by [`exact_block_512`] if `BW`
    /// and `no_minus_zero` ([`super::sums_never_reach_minus_zero`] of `x`) — a pair's by
    /// [`exact_pair_512`] if `PICKS` too — else by lookups and conversions (`unit_sums`): the same
    /// bits either way.
    ///
    /// # Safety
    /// The processor has AVX-512F, AVX512BW if `BW`, and AVX512VBMI and GFNI if `PICKS`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(in super::super) unsafe fn group_sums_as<const BW: bool, const PICKS: bool>(
        x: &[f64],
        w: &QuantRows<'_>,
        first: usize,
        outs: &mut [f64],
        no_minus_zero: bool,
    ) {
        for (unit, groups, outs) in units(w, first, outs) {
            const { assert!(PAIR == 2) };
            const Q8: u8 = BlockFormat::Q8_0 as u8;
            const Q4: u8 = BlockFormat::Q4_0 as u8;
            const Q4M: u8 = BlockFormat::Q4_1 as u8;
            // SAFETY: AVX512BW if `BW`, AVX512VBMI and GFNI if `PICKS` (the caller).
            let sums = unsafe {
                match (w.format, groups) {
                    (BlockFormat::Q8_0, 2) => unit_sums::<Q8, 2, BW, PICKS>(unit, x, no_minus_zero),
                    (BlockFormat::Q4_0, 2) => unit_sums::<Q4, 2, BW, PICKS>(unit, x, no_minus_zero),
                    (BlockFormat::Q4_1, 2) => unit_sums::<Q4M, 2, BW, PICKS>(unit, x, no_minus_zero),
                    (BlockFormat::Q8_0, _) => unit_sums::<Q8, 1, BW, PICKS>(unit, x, no_minus_zero),
                    (BlockFormat::Q4_0, _) => unit_sums::<Q4, 1, BW, PICKS>(unit, x, no_minus_zero),
                    (BlockFormat::Q4_1, _) => unit_sums::<Q4M, 1, BW, PICKS>(unit, x, no_minus_zero),
                }
            };
            // two registers of eight outputs per group
            for (eight, sums) in outs.chunks_exact_mut(8).zip(sums) {
                // SAFETY: eight outputs.
                unsafe { _mm512_storeu_pd(eight.as_mut_ptr(), sums) };
            }
        }
    }

    /// The factors of [`exact_block_512`]'s values for `G` groups' heads, in the order of the sums'
    /// registers ([rows 0–7, 8–15] of each group): `A` (the scales times 2¹⁰¹², or 2¹² for
    /// `Q8_0`) and `C` (`m − 16·d`, `−24·d` or `−4224·d`), each exact.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    fn exact_factors<const G: usize>(
        format: BlockFormat,
        heads: [&[u8]; G],
    ) -> ([__m512d; 2 * PAIR], [__m512d; 2 * PAIR]) {
        let (big, factor) = match format {
            BlockFormat::Q8_0 => (4096.0, -4224.0),
            BlockFormat::Q4_0 => (f64::from_bits(2035 << 52), -24.0), // 2¹⁰¹²
            BlockFormat::Q4_1 => (f64::from_bits(2035 << 52), -16.0),
        };
        let big = _mm512_set1_pd(big);
        let mut scale = [_mm512_setzero_pd(); 2 * PAIR];
        let mut offset = [_mm512_setzero_pd(); 2 * PAIR];
        for (g, head) in heads.iter().enumerate() {
            // SAFETY: sixteen halves of scales, and for `Q4_1` sixteen of minimums after them:
            // `exact_head` passed only heads of 32 bytes, and of 64 for `Q4_1` (the caller).
            let d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(head.as_ptr().cast()) });
            let m = if format == BlockFormat::Q4_1 {
                _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(head.as_ptr().add(2 * GROUP).cast()) })
            } else {
                _mm512_setzero_ps()
            };
            // rows 0–7, then 8–15, in `f64`
            let (d_high, m_high) =
                (_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(d)), _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(m)));
            let halves = [
                (_mm512_castps512_ps256(d), _mm512_castps512_ps256(m)),
                (_mm256_castpd_ps(d_high), _mm256_castpd_ps(m_high)),
            ];
            for (h, (d, m)) in halves.into_iter().enumerate() {
                let (d, m) = (_mm512_cvtps_pd(d), _mm512_cvtps_pd(m));
                scale[2 * g + h] = _mm512_mul_pd(d, big);
                offset[2 * g + h] = _mm512_fmadd_pd(d, _mm512_set1_pd(factor), m);
            }
        }
        (scale, offset)
    }

    /// One block of `G` groups' terms added to `sums` ([rows 0–7, 8–15] of each group), the
    /// values made as [`ExactValues`] makes them, eight at a time, each by one byte shuffle
    /// (AVX512BW) and one exact fused multiply-add `A·u + C`:
    ///
    /// - 4-bit formats: the byte `0xf0 | q` placed in a double `u = 2⁻¹⁰⁰⁸·(1 + q/16)`, with
    ///   `A = 2¹⁰¹²·d`, `C = m − 16·d` or `−24·d`;
    /// - `Q8_0`: the byte `q + 128` placed in byte 5 of the bits of 1.0, `u = 1 + (q + 128)·2⁻¹²`,
    ///   with `A = 2¹²·d`, `C = −4224·d`. The shuffle is merge-masked: it writes byte 5 of each
    ///   lane and keeps the other seven from the bits of 1.0, so no operation ors them in (with
    ///   AVX2, [`ExactValues::of`] needs one). Per sixteen weights one exclusive or (`q + 128`),
    ///   two shuffles and four fused multiply-adds, where the conversions took two widenings,
    ///   two two-part conversions, two multiplications and two fused multiply-adds.
    ///
    /// # Safety
    /// The processor has AVX-512F and AVX512BW, and every group's head passes [`exact_head`]
    /// (which also makes it long enough for the loads below).
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
    unsafe fn exact_block_512<const G: usize>(
        format: BlockFormat,
        heads: [&[u8]; G],
        lines: &[u8],
        xs: &[f64],
        sums: &mut [__m512d; 2 * PAIR],
    ) {
        #[cfg(test)]
        SHUFFLED_BLOCKS.with(|count| count.set(count.get() + 1));
        let (scale, offset) = exact_factors::<G>(format, heads);
        // byte 8h + k of a group's sixteen into byte `at` of lane k
        const fn control(h: usize, at: usize) -> [i8; 64] {
            let mut c = [-128i8; 64];
            let mut k = 0;
            while k < 8 {
                c[8 * k + at] = (8 * h + k) as i8;
                k += 1;
            }
            c
        }
        const NIBBLES: [[i8; 64]; 2] = [control(0, 6), control(1, 6)];
        const BYTES: [[i8; 64]; 2] = [control(0, 5), control(1, 5)];
        let mut s = *sums;
        if format == BlockFormat::Q8_0 {
            // SAFETY: 64 bytes each.
            let controls =
                unsafe { [_mm512_loadu_si512(BYTES[0].as_ptr().cast()), _mm512_loadu_si512(BYTES[1].as_ptr().cast())] };
            let one = _mm512_set1_epi64(0x3ff0_0000_0000_0000); // the bits of 1.0
            let sign = _mm512_set1_epi8(-128);
            const BYTE_5: __mmask64 = 0x2020_2020_2020_2020; // byte 5 of each lane
            for (line, &a) in lines.chunks_exact(G * GROUP).zip(xs) {
                let a = _mm512_set1_pd(a);
                for g in 0..G {
                    // SAFETY: the group's sixteen bytes of the line's `G · 16`.
                    let bytes = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(line.as_ptr().add(g * GROUP).cast()) });
                    let bytes = _mm512_xor_si512(bytes, sign); // q + 128
                    for h in 0..2 {
                        let u = _mm512_castsi512_pd(_mm512_mask_shuffle_epi8(one, BYTE_5, bytes, controls[h]));
                        s[2 * g + h] =
                            _mm512_fmadd_pd(a, _mm512_fmadd_pd(scale[2 * g + h], u, offset[2 * g + h]), s[2 * g + h]);
                    }
                }
            }
            *sums = s;
            return;
        }
        // SAFETY: 64 bytes each.
        let controls =
            unsafe { [_mm512_loadu_si512(NIBBLES[0].as_ptr().cast()), _mm512_loadu_si512(NIBBLES[1].as_ptr().cast())] };
        let high = _mm512_set1_epi8(0xf0u8 as i8);
        for (line, pair) in lines.chunks_exact(G * GROUP).zip(xs.chunks_exact(2)) {
            let (a, b) = (_mm512_set1_pd(pair[0]), _mm512_set1_pd(pair[1]));
            for g in 0..G {
                // SAFETY: the group's sixteen bytes of the line's `G · 16`.
                let bytes = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(line.as_ptr().add(g * GROUP).cast()) });
                let first = _mm512_or_si512(bytes, high);
                let second = _mm512_or_si512(_mm512_srli_epi64::<4>(bytes), high);
                for h in 0..2 {
                    let u = _mm512_castsi512_pd(_mm512_shuffle_epi8(first, controls[h]));
                    s[2 * g + h] =
                        _mm512_fmadd_pd(a, _mm512_fmadd_pd(scale[2 * g + h], u, offset[2 * g + h]), s[2 * g + h]);
                }
                for h in 0..2 {
                    let u = _mm512_castsi512_pd(_mm512_shuffle_epi8(second, controls[h]));
                    s[2 * g + h] =
                        _mm512_fmadd_pd(b, _mm512_fmadd_pd(scale[2 * g + h], u, offset[2 * g + h]), s[2 * g + h]);
                }
            }
        }
        *sums = s;
    }

    /// [`exact_block_512`] for a pair of groups, both groups' bytes of a line made ready at once
    /// and each register's eight picked from them by one `vpermb` (AVX512VBMI: any byte of the
    /// register, where `vpshufb` picks within 128 bits, so one group's sixteen bytes had to fill
    /// all four quarters and be made ready apart from the other's). Per line of a 4-bit block,
    /// 64 terms: one or (`0xf0 | q` of the first input) and one `gf2p8affineqb` (GFNI: `0xf0 | q`
    /// of the second, where a shift and an or took two operations), eight `vpermb` and sixteen
    /// fused multiply-adds — 26 operations where the byte shuffles take 30; `Q8_0`, 32 terms a
    /// line: 13 where they take 14. The same values in the same registers and the same order of
    /// sums, so the same bits. One core of an Intel Xeon (Sapphire Rapids or later), alternating
    /// with the byte shuffles in one process: 4-bit products 3–7 % faster by the picks and 2 % more
    /// by GFNI, `Q8_0`'s 2–4 % (`docs/performance.md`, "2026-12-06, eleventh").
    ///
    /// # Safety
    /// The processor has AVX-512F, AVX512BW, AVX512VBMI and GFNI, and both groups' heads pass
    /// [`exact_head`] (which also makes them long enough for the loads below).
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,gfni,avx2,fma")]
    unsafe fn exact_pair_512(
        format: BlockFormat,
        heads: [&[u8]; PAIR],
        lines: &[u8],
        xs: &[f64],
        sums: &mut [__m512d; 2 * PAIR],
    ) {
        #[cfg(test)]
        SHUFFLED_BLOCKS.with(|count| count.set(count.get() + 1));
        let (scale, offset) = exact_factors::<PAIR>(format, heads);
        // register j (group j / 2, rows 8·(j % 2)..): lane k takes the line's byte 8j + k at byte
        // `at`, and its other bytes from the upper half of the register the bytes are picked
        // from, bytes `upper` (zeros, and `Q8_0`'s bits of 1.0) — not by a mask, which the
        // compiler made an and after the `vpermb`
        const fn control(j: usize, at: usize, upper: [i8; 8]) -> [i8; 64] {
            let mut c = [0i8; 64];
            let mut k = 0;
            while k < 8 {
                let mut b = 0;
                while b < 8 {
                    c[8 * k + b] = if b == at { (8 * j + k) as i8 } else { upper[b] };
                    b += 1;
                }
                k += 1;
            }
            c
        }
        // 4-bit: byte 6, zeros from byte 32; `Q8_0`: byte 5 in the bits of 1.0 (bytes 33, 34 hold
        // its 0xf0 and 0x3f)
        const ZEROS: [i8; 8] = [32; 8];
        const ONE: [i8; 8] = [32, 32, 32, 32, 32, 32, 33, 34];
        const NIBBLES: [[i8; 64]; 2 * PAIR] =
            [control(0, 6, ZEROS), control(1, 6, ZEROS), control(2, 6, ZEROS), control(3, 6, ZEROS)];
        const BYTES: [[i8; 64]; 2 * PAIR] =
            [control(0, 5, ONE), control(1, 5, ONE), control(2, 5, ONE), control(3, 5, ONE)];
        let load = |table: &[[i8; 64]; 2 * PAIR]| {
            // SAFETY: 64 bytes each.
            table.map(|c| unsafe { _mm512_loadu_si512(c.as_ptr().cast()) })
        };
        // a line's 32 bytes (both groups' sixteen)
        let line = |line: &[u8]| {
            debug_assert_eq!(line.len(), PAIR * GROUP);
            // SAFETY: 32 bytes.
            unsafe { _mm256_loadu_si256(line.as_ptr().cast()) }
        };
        let mut s = *sums;
        if format == BlockFormat::Q8_0 {
            let controls = load(&BYTES);
            // `q + 128` below (each byte's sign flipped), and above, 0 at byte 32 and the bytes
            // 0xf0, 0x3f of 1.0 at 33 and 34: one constant (built in memory a byte at a time and
            // loaded whole, it waited on its stores every block)
            let flip = -0x7f7f_7f7f_7f7f_7f80; // 0x8080_8080_8080_8080
            let sign = _mm512_set_epi64(0, 0, 0, 0x3f_f000, flip, flip, flip, flip);
            for (bytes, &a) in lines.chunks_exact(PAIR * GROUP).zip(xs) {
                let bytes = _mm512_xor_si512(_mm512_zextsi256_si512(line(bytes)), sign);
                let a = _mm512_set1_pd(a);
                for j in 0..2 * PAIR {
                    let u = _mm512_castsi512_pd(_mm512_permutexvar_epi8(controls[j], bytes));
                    s[j] = _mm512_fmadd_pd(a, _mm512_fmadd_pd(scale[j], u, offset[j]), s[j]);
                }
            }
            *sums = s;
            return;
        }
        let controls = load(&NIBBLES);
        let high = _mm256_set1_epi8(0xf0u8 as i8);
        // `gf2p8affineqb` with this matrix and 0xf0 maps each byte `b` to `0xf0 | b >> 4`: row i
        // of the matrix (byte 7 − i) picks bit i + 4 of `b` for bit i, rows 4–7 nothing
        let high_nibble = _mm256_set1_epi64x(0x1020_4080_0000_0000);
        for (bytes, pair) in lines.chunks_exact(PAIR * GROUP).zip(xs.chunks_exact(2)) {
            let bytes = line(bytes);
            // `0xf0 | q` for the first input of each byte, then the second; zeros above
            let first = _mm512_zextsi256_si512(_mm256_or_si256(bytes, high));
            let second = _mm512_zextsi256_si512(_mm256_gf2p8affine_epi64_epi8::<0xf0>(bytes, high_nibble));
            for (values, &a) in [first, second].into_iter().zip(pair) {
                let a = _mm512_set1_pd(a);
                for j in 0..2 * PAIR {
                    let u = _mm512_castsi512_pd(_mm512_permutexvar_epi8(controls[j], values));
                    s[j] = _mm512_fmadd_pd(a, _mm512_fmadd_pd(scale[j], u, offset[j]), s[j]);
                }
            }
        }
        *sums = s;
    }

    /// Whether every `Q4_1` value `d · q + m` of a grouped block's sixteen rows (its head: sixteen
    /// scales, sixteen minimums) is exact in `f32`, by the halves' exponents alone — so that the
    /// same sum in `f64` gives the bits of `value`'s `f32` roundings.
    ///
    /// A half is `D·2^a` with an integer `|D| ≤ 2047` and `a = max(e, 1) − 25` for its exponent
    /// field `e`. With `d = D·2^a`, `m = M·2^b` and `q ≤ 15`, `d·q + m` is an integer multiple of
    /// `2^min(a, b)`, at most `30 705·2^(a − b) + 2047` of them when `a ≥ b` and
    /// `30 705 + 2047·2^(b − a)` when `b > a`: below `2²⁴`, so exact in `f32`, when `a − b ≤ 9`
    /// and `b − a ≤ 12`. Infinite and NaN halves (`e = 31`) are left to the `f32` path, and so is
    /// a ±0 beside a half far from it (exact, but rare in a model; testing for it cost 2 % of the
    /// kernel's speed).
    #[target_feature(enable = "avx2")]
    pub(in super::super) fn exact_q4_1(head: &[u8; 4 * GROUP]) -> bool {
        // SAFETY: 32 bytes each.
        let (d, m) = unsafe {
            (_mm256_loadu_si256(head.as_ptr().cast()), _mm256_loadu_si256(head.as_ptr().add(2 * GROUP).cast()))
        };
        let field = _mm256_set1_epi16(31);
        let (d, m) =
            (_mm256_and_si256(_mm256_srli_epi16::<10>(d), field), _mm256_and_si256(_mm256_srli_epi16::<10>(m), field));
        let infinite = _mm256_or_si256(_mm256_cmpeq_epi16(d, field), _mm256_cmpeq_epi16(m, field));
        let one = _mm256_set1_epi16(1);
        let apart = _mm256_sub_epi16(_mm256_max_epi16(d, one), _mm256_max_epi16(m, one)); // a − b
        let far = _mm256_or_si256(
            _mm256_cmpgt_epi16(apart, _mm256_set1_epi16(9)),
            _mm256_cmpgt_epi16(_mm256_set1_epi16(-12), apart),
        );
        let bad = _mm256_or_si256(infinite, far);
        _mm256_testz_si256(bad, bad) == 1
    }

    /// `$name`: a task of [`super::super::dequantize_rows_transposed`] (block `b` of stored rows
    /// `rows`, into `lines`), compiled with `$features`, its whole groups made by `$kernel`.
    macro_rules! transposed_block_with {
        ($(#[$doc:meta])* $name:ident, $features:literal, $kernel:ident) => {
            $(#[$doc])*
            #[target_feature(enable = $features)]
            pub(in super::super) unsafe fn $name(w: &QuantRows<'_>, rows: Range<usize>, b: usize, lines: &mut [f64]) {
                /// The explicit kernel, whose caller has checked its instructions.
                struct Groups;
                impl GroupValues for Groups {
                    #[inline(always)]
                    fn write(w: &QuantRows<'_>, first: usize, b: usize, out: &mut [f64], stride: usize) {
                        // SAFETY: only the function this type is declared in uses it, and its
                        // caller checked the instructions the kernel needs (the same features).
                        unsafe { $kernel(w, first, b, out, stride) }
                    }
                }
                transposed_block::<Groups>(w, rows, b, lines);
            }
        };
    }

    transposed_block_with!(
        /// A task of [`super::super::dequantize_rows_transposed`] (block `b` of stored rows
        /// `rows`, into `lines`), its whole groups made by [`group_values_512`].
        ///
        /// # Safety
        /// The processor has AVX-512F.
        transposed_block_512,
        "avx512f,avx2,fma",
        group_values_512
    );

    transposed_block_with!(
        /// [`transposed_block_512`] with [`group_values_avx2`].
        ///
        /// # Safety
        /// The processor has AVX2, FMA and F16C.
        transposed_block_avx2,
        "avx2,fma,f16c",
        group_values_avx2
    );

    /// Asks for the bytes of block `b + 1` of the group from row `first` (its head and lines)
    /// while block `b`'s values are made. A prefill's stripe reads each of its pairs of groups
    /// block by block, a few hundred bytes from each; the processor's own prefetching left the
    /// explicit kernels waiting on memory: on a Zen 4 core, with weights from memory, 5.2–5.3 G
    /// values a second without this against 5.3–5.5 with it (`Q4_1`, 576 inputs; 4.4 against
    /// 5.0–5.2 with 1536).
    #[inline(always)]
    fn fetch_next_block(w: &QuantRows<'_>, first: usize, b: usize) {
        if b + 1 >= w.cols / BLOCK {
            return;
        }
        let (next, _) = super::place(w, first, b + 1);
        let lines = (w.format.quant_bytes() - 1) * next.stride + GROUP;
        for (start, len) in [(next.heads.as_ptr(), next.heads.len()), (next.lines.as_ptr(), lines)] {
            // every cache line the bytes touch, from the one the first byte is in
            let skew = start as usize % 64;
            for at in (0..skew + len).step_by(64) {
                // SAFETY: a prefetch reads nothing and cannot fault (the address may start a
                // cache line before the block's bytes).
                unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_sub(skew).wrapping_add(at).cast()) };
            }
        }
    }

    /// The part an explicit kernel makes block `b` of, for the group from row `first`, once its
    /// bytes are asked for ahead ([`fetch_next_block`]); `None` where `out` cannot hold the block's
    /// 32 runs of sixteen values `stride` apart, or the head is too short for the kernels' loads,
    /// and the plain loops should run instead.
    #[inline(always)]
    fn explicit_part<'a>(w: &QuantRows<'a>, first: usize, b: usize, out: &[f64], stride: usize) -> Option<Part<'a>> {
        let (part, _) = super::place(w, first, b);
        let fits = stride >= GROUP && out.len() >= (BLOCK - 1) * stride + GROUP;
        if !fits || part.heads.len() < GROUP * w.format.head_bytes() {
            return None;
        }
        #[cfg(test)]
        EXPLICIT_GROUPS.with(|count| count.set(count.get() + 1));
        fetch_next_block(w, first, b);
        Some(part)
    }

    /// [`super::group_values`] written with AVX-512 instructions: a group's sixteen values of an
    /// input in one register of `f32`, made by the operations of `value` in its order (`Q4_1`'s
    /// `d · q` rounded, then `+ m` rounded; `Q8_0`'s `q · d`; `Q4_0`'s `d · (q − 8)`), each half
    /// widened into eight `f64` and stored. The same values, bitwise — a zero's sign included, and
    /// a NaN wherever the plain loops make one (with its payload where one operand is NaN), since
    /// every operation is the scalar one, lane by lane (the scales widened by `vcvtph2ps`, as the
    /// decoding kernels' `f32` path widens them). Compiled by hand because the compiler made the
    /// plain loops' values eight `f32` lanes to an operation and stored them through a slice:
    /// 4.0–4.5 G values a second on a Zen 4 core with the weights from memory
    /// (`docs/performance.md`).
    ///
    /// `out` must hold the block's 32 runs of sixteen values, `stride` apart (the caller's panel);
    /// shorter, the plain loops run instead.
    ///
    /// # Safety
    /// The processor has AVX-512F.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(in super::super) unsafe fn group_values_512(
        w: &QuantRows<'_>,
        first: usize,
        b: usize,
        out: &mut [f64],
        stride: usize,
    ) {
        let format = w.format;
        let Some(part) = explicit_part(w, first, b, out, stride) else {
            return super::group_values(w, first, b, out, stride);
        };
        // SAFETY: sixteen halves from byte `at` (0, or 32 for `Q4_1`'s minimums) of a head of
        // `16 · head_bytes` bytes (`explicit_part` checked).
        let halves = |at: usize| _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(part.heads.as_ptr().add(at).cast()) });
        let d = halves(0);
        let m = if format == BlockFormat::Q4_1 { halves(2 * GROUP) } else { _mm512_setzero_ps() };
        let dst = out.as_mut_ptr();
        // run `i` of the output: sixteen `f32` widened, then stored
        macro_rules! put {
            ($i:expr, $v:expr) => {{
                let v: __m512 = $v;
                let low = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
                let high = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))));
                // SAFETY: run `i < 32` ends at `31 · stride + 16 ≤ out.len()` (`explicit_part` checked).
                unsafe {
                    _mm512_storeu_pd(dst.add($i * stride), low);
                    _mm512_storeu_pd(dst.add($i * stride + 8), high);
                }
            }};
        }
        let lines = part.lines(format.quant_bytes());
        match format {
            BlockFormat::Q8_0 => {
                for (i, line) in lines.enumerate() {
                    // SAFETY: a line is sixteen bytes (`Part::line`).
                    let q = _mm512_cvtepi8_epi32(unsafe { _mm_loadu_si128(line.as_ptr().cast()) });
                    put!(i, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
                }
            }
            BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
                let (low_bits, eight) = (_mm512_set1_epi32(0x0f), _mm512_set1_epi32(8));
                for (l, line) in lines.enumerate() {
                    // SAFETY: as above.
                    let bytes = _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(line.as_ptr().cast()) });
                    let (low, high) = (_mm512_and_si512(bytes, low_bits), _mm512_srli_epi32::<4>(bytes));
                    if format == BlockFormat::Q4_1 {
                        put!(2 * l, _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(low)), m));
                        put!(2 * l + 1, _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(high)), m));
                    } else {
                        put!(2 * l, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(low, eight))));
                        put!(2 * l + 1, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(high, eight))));
                    }
                }
            }
        }
    }

    /// [`group_values_512`] with AVX2 and F16C instructions: eight rows' values to a register of
    /// `f32`, each widened into two registers of four `f64`.
    ///
    /// # Safety
    /// The processor has AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in super::super) unsafe fn group_values_avx2(
        w: &QuantRows<'_>,
        first: usize,
        b: usize,
        out: &mut [f64],
        stride: usize,
    ) {
        let format = w.format;
        let Some(part) = explicit_part(w, first, b, out, stride) else {
            return super::group_values(w, first, b, out, stride);
        };
        // rows 0–7, then 8–15, of the sixteen halves from byte `at` of the head
        // SAFETY: 32 bytes from `at` (0, or 32 for `Q4_1`'s minimums) of a head of
        // `16 · head_bytes` bytes (`explicit_part` checked).
        let halves = |at: usize| unsafe {
            let h = part.heads.as_ptr().add(at);
            [_mm256_cvtph_ps(_mm_loadu_si128(h.cast())), _mm256_cvtph_ps(_mm_loadu_si128(h.add(16).cast()))]
        };
        let d = halves(0);
        let m = if format == BlockFormat::Q4_1 { halves(2 * GROUP) } else { [_mm256_setzero_ps(); 2] };
        let dst = out.as_mut_ptr();
        // rows 8h..8h + 8 of run `i`: eight `f32` widened, then stored
        macro_rules! put {
            ($i:expr, $h:expr, $v:expr) => {{
                let v: __m256 = $v;
                let (low, high) =
                    (_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)));
                // SAFETY: run `i < 32` ends at `31 · stride + 16 ≤ out.len()` (`explicit_part` checked).
                unsafe {
                    _mm256_storeu_pd(dst.add($i * stride + 8 * $h), low);
                    _mm256_storeu_pd(dst.add($i * stride + 8 * $h + 4), high);
                }
            }};
        }
        let lines = part.lines(format.quant_bytes());
        match format {
            BlockFormat::Q8_0 => {
                for (i, line) in lines.enumerate() {
                    // SAFETY: a line is sixteen bytes (`Part::line`).
                    let bytes = unsafe { _mm_loadu_si128(line.as_ptr().cast()) };
                    for (h, bytes) in [bytes, _mm_srli_si128::<8>(bytes)].into_iter().enumerate() {
                        let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
                        put!(i, h, _mm256_mul_ps(q, d[h]));
                    }
                }
            }
            BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
                let (low_bits, eight) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(8));
                for (l, line) in lines.enumerate() {
                    // SAFETY: as above.
                    let bytes = unsafe { _mm_loadu_si128(line.as_ptr().cast()) };
                    for (h, bytes) in [bytes, _mm_srli_si128::<8>(bytes)].into_iter().enumerate() {
                        let bytes = _mm256_cvtepu8_epi32(bytes);
                        let (low, high) = (_mm256_and_si256(bytes, low_bits), _mm256_srli_epi32::<4>(bytes));
                        if format == BlockFormat::Q4_1 {
                            put!(2 * l, h, _mm256_add_ps(_mm256_mul_ps(d[h], _mm256_cvtepi32_ps(low)), m[h]));
                            put!(2 * l + 1, h, _mm256_add_ps(_mm256_mul_ps(d[h], _mm256_cvtepi32_ps(high)), m[h]));
                        } else {
                            let (low, high) = (_mm256_sub_epi32(low, eight), _mm256_sub_epi32(high, eight));
                            put!(2 * l, h, _mm256_mul_ps(d[h], _mm256_cvtepi32_ps(low)));
                            put!(2 * l + 1, h, _mm256_mul_ps(d[h], _mm256_cvtepi32_ps(high)));
                        }
                    }
                }
            }
        }
    }

    /// The sums of a unit of `G` groups — a pair, or a lone last group — in the order of
    /// [`super::sums`]: two registers of eight outputs per group (rows 0–7, 8–15 of the first,
    /// then of the second), so a pair has four chains of additions where one group has two and
    /// waits on their latency. Registers past `2·G` stay zero.
    ///
    /// Each value is made in `f64` and equals `value`'s: `Q8_0`'s `d · q` and `Q4_0`'s
    /// `d · (q − 8)` are exact in `f32` (at most 19 significant bits), so exact in `f64` too;
    /// `Q4_1`'s `d · q + m` is, where [`exact_q4_1`] says so for every group's block, and is made
    /// in `f32` and widened where it does not. A 4-bit value is looked up in a register of the
    /// sixteen numbers `0..16` (or `−8..8`), its byte as the index (`vpermt2pd` reads the low four
    /// bits). Compiled per format (`F`, as `BlockFormat as u8`) and group count, so that neither is
    /// tested in a loop.
    ///
    /// With `BW` and `no_minus_zero` ([`super::sums_never_reach_minus_zero`] of `x`), the blocks
    /// whose heads pass [`exact_head`] (a pair's both at once: [`exact_pair_heads`]) go to
    /// [`exact_block_512`] instead, or with `PICKS` a pair's to [`exact_pair_512`].
    ///
    /// # Safety
    /// If `BW`, the processor has AVX512BW; if `PICKS`, AVX512VBMI and GFNI.
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn unit_sums<const F: u8, const G: usize, const BW: bool, const PICKS: bool>(
        unit: &[u8],
        x: &[f64],
        no_minus_zero: bool,
    ) -> [__m512d; 2 * PAIR] {
        const { assert!(G >= 1 && G <= PAIR) };
        let format = match F {
            0 => BlockFormat::Q8_0,
            1 => BlockFormat::Q4_0,
            _ => BlockFormat::Q4_1,
        };
        let block_bytes = GROUP * format.block_bytes();
        let head_bytes = GROUP * format.head_bytes();
        let mut totals = [_mm512_setzero_pd(); 2 * PAIR];
        let mut blocks = unit.chunks_exact(G * block_bytes);
        let shift = if format == BlockFormat::Q4_0 { -8.0 } else { 0.0 };
        let numbers = |from: f64| {
            _mm512_setr_pd(from, from + 1.0, from + 2.0, from + 3.0, from + 4.0, from + 5.0, from + 6.0, from + 7.0)
        };
        let (table_low, table_high) = (numbers(shift), numbers(shift + 8.0));
        for (s, inputs) in x.chunks(INPUTS_PER_SUM).enumerate() {
            let mut sums = [_mm512_setzero_pd(); 2 * PAIR];
            for (xs, block) in inputs.chunks_exact(BLOCK).zip(&mut blocks) {
                fetch_ahead(block);
                let (heads, lines) = block.split_at(G * head_bytes);
                let heads = {
                    let mut each: [&[u8]; G] = [&[]; G];
                    for (h, head) in each.iter_mut().enumerate() {
                        *head = &heads[h * head_bytes..][..head_bytes];
                    }
                    each
                };
                // the halves at byte `at` of each group's head, in `f64`: [rows 0–7, 8–15] of each
                macro_rules! widened {
                    ($at:expr) => {{
                        let mut out = [_mm512_setzero_pd(); 2 * PAIR];
                        for (h, head) in heads.iter().enumerate() {
                            // SAFETY: sixteen halves.
                            let v = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(head.as_ptr().add($at).cast()) });
                            out[2 * h] = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
                            out[2 * h + 1] =
                                _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))));
                        }
                        out
                    }};
                }
                // a line's eight bytes of each register's rows (the line: each group's sixteen
                // rows in turn)
                macro_rules! bytes {
                    ($line:expr) => {{
                        let line: &[u8] = $line;
                        debug_assert_eq!(line.len(), G * GROUP);
                        let mut out = [_mm_setzero_si128(); 2 * PAIR];
                        for (j, o) in out.iter_mut().enumerate().take(2 * G) {
                            // SAFETY: the line's `G · 16` bytes.
                            *o = unsafe { _mm_loadl_epi64(line.as_ptr().add(8 * j).cast()) };
                        }
                        out
                    }};
                }
                let admitted = BW
                    && no_minus_zero
                    && if G == PAIR {
                        // SAFETY: the caller checked AVX512BW (`BW`).
                        unsafe { exact_pair_heads(format, &block[..G * head_bytes]) }
                    } else {
                        heads.iter().all(|head| exact_head(format, head))
                    };
                if admitted {
                    if let (true, Ok(pair)) = (PICKS, <[&[u8]; PAIR]>::try_from(&heads[..])) {
                        // SAFETY: the caller checked AVX512BW, AVX512VBMI and GFNI (`BW`, `PICKS`).
                        unsafe { exact_pair_512(format, pair, lines, xs, &mut sums) };
                    } else {
                        // SAFETY: the caller checked AVX512BW (`BW`).
                        unsafe { exact_block_512::<G>(format, heads, lines, xs, &mut sums) };
                    }
                    continue;
                }
                let lines = lines.chunks_exact(G * GROUP);
                let mut exact = true;
                if format == BlockFormat::Q4_1 {
                    for head in heads {
                        exact &= <&[u8; 4 * GROUP]>::try_from(head).is_ok_and(|head| exact_q4_1(head));
                    }
                }
                let d = widened!(0);
                match format {
                    BlockFormat::Q8_0 => {
                        for (line, &a) in lines.zip(xs) {
                            let (a, q) = (_mm512_set1_pd(a), bytes!(line));
                            for j in 0..2 * G {
                                let q = _mm512_cvtepi32_pd(_mm256_cvtepi8_epi32(q[j]));
                                sums[j] = _mm512_fmadd_pd(a, _mm512_mul_pd(d[j], q), sums[j]);
                            }
                        }
                    }
                    BlockFormat::Q4_0 | BlockFormat::Q4_1 if exact => {
                        let m = if format == BlockFormat::Q4_1 {
                            widened!(2 * GROUP)
                        } else {
                            [_mm512_setzero_pd(); 2 * PAIR]
                        };
                        for (line, pair) in lines.zip(xs.chunks_exact(2)) {
                            // each byte in a lane of its own, once for both of its values
                            let bytes = bytes!(line).map(|eight| _mm512_cvtepu8_epi64(eight));
                            for (i, &a) in pair.iter().enumerate() {
                                let a = _mm512_set1_pd(a);
                                for (j, &index) in bytes.iter().enumerate().take(2 * G) {
                                    let index = if i == 0 { index } else { _mm512_srli_epi64::<4>(index) };
                                    let q = _mm512_permutex2var_pd(table_low, index, table_high);
                                    let v = if format == BlockFormat::Q4_1 {
                                        _mm512_fmadd_pd(d[j], q, m[j])
                                    } else {
                                        _mm512_mul_pd(d[j], q)
                                    };
                                    sums[j] = _mm512_fmadd_pd(a, v, sums[j]);
                                }
                            }
                        }
                    }
                    BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
                        // values made in `f32` as in `super::sums`, then widened (only `Q4_1`'s come
                        // here, `Q4_0`'s being always exact; written for both all the same)
                        let mut dm = [[_mm512_setzero_ps(); 2]; PAIR];
                        for (h, head) in heads.iter().enumerate() {
                            // SAFETY: 32 bytes of halves (the scales), and for `Q4_1` 32 more (the
                            // minimums).
                            dm[h] = unsafe {
                                [
                                    _mm512_cvtph_ps(_mm256_loadu_si256(head.as_ptr().cast())),
                                    if format == BlockFormat::Q4_1 {
                                        _mm512_cvtph_ps(_mm256_loadu_si256(head.as_ptr().add(2 * GROUP).cast()))
                                    } else {
                                        _mm512_setzero_ps()
                                    },
                                ]
                            };
                        }
                        for (line, pair) in lines.zip(xs.chunks_exact(2)) {
                            debug_assert_eq!(line.len(), G * GROUP);
                            for (i, &a) in pair.iter().enumerate() {
                                let a = _mm512_set1_pd(a);
                                for (h, [d, m]) in dm.into_iter().enumerate().take(G) {
                                    // SAFETY: group `h`'s sixteen bytes of the line's `G · 16`.
                                    let bytes = _mm512_cvtepu8_epi32(unsafe {
                                        _mm_loadu_si128(line.as_ptr().add(h * GROUP).cast())
                                    });
                                    let q = if i == 0 {
                                        _mm512_and_si512(bytes, _mm512_set1_epi32(0x0f))
                                    } else {
                                        _mm512_srli_epi32::<4>(bytes)
                                    };
                                    let q = _mm512_cvtepi32_ps(q);
                                    let v = if format == BlockFormat::Q4_1 {
                                        _mm512_fmadd_ps(d, q, m)
                                    } else {
                                        _mm512_mul_ps(d, _mm512_sub_ps(q, _mm512_set1_ps(8.0)))
                                    };
                                    let low = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
                                    let high = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                                        _mm512_castps_pd(v),
                                    )));
                                    sums[2 * h] = _mm512_fmadd_pd(a, low, sums[2 * h]);
                                    sums[2 * h + 1] = _mm512_fmadd_pd(a, high, sums[2 * h + 1]);
                                }
                            }
                        }
                    }
                }
            }
            for (total, sum) in totals.iter_mut().zip(sums).take(2 * G) {
                *total = if s == 0 { sum } else { _mm512_add_pd(*total, sum) };
            }
        }
        totals
    }

    /// [`exact_head`] of both groups of a pair's block at once (`heads`: the block's heads, each
    /// group's sixteen scales, and for `Q4_1` its sixteen minimums after them), with AVX512BW's
    /// comparisons of 32 halves into a mask: the same answer in about a third of the operations.
    /// The two checks took about a tenth of the kernel's time; on one core of the Xeon, alternating
    /// in one process, 4-bit products ran 6–9 % faster with this one, `Q8_0`'s 2 %.
    ///
    /// # Safety
    /// The processor has AVX-512F and AVX512BW.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
    unsafe fn exact_pair_heads(format: BlockFormat, heads: &[u8]) -> bool {
        // the exponent fields of 32 halves
        let field = |v: __m512i| _mm512_and_si512(_mm512_srli_epi16::<10>(v), _mm512_set1_epi16(31));
        // SAFETY: 64 bytes each.
        let load = |bytes: &[u8; 64]| unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) };
        match format {
            BlockFormat::Q8_0 | BlockFormat::Q4_0 => {
                let Some(scales) = heads.first_chunk::<{ 2 * 2 * GROUP }>() else { return false };
                let most = if format == BlockFormat::Q8_0 { 30 } else { 26 };
                _mm512_cmpgt_epu16_mask(field(load(scales)), _mm512_set1_epi16(most)) == 0
            }
            BlockFormat::Q4_1 => {
                let Some((first, rest)) = heads.split_first_chunk::<{ 4 * GROUP }>() else { return false };
                let Some(second) = rest.first_chunk::<{ 4 * GROUP }>() else { return false };
                let (first, second) = (load(first), load(second));
                // both groups' scales, then both groups' minimums
                let d = field(_mm512_shuffle_i64x2::<0b01_00_01_00>(first, second));
                let m = field(_mm512_shuffle_i64x2::<0b11_10_11_10>(first, second));
                let one = _mm512_set1_epi16(1);
                let apart = _mm512_sub_epi16(_mm512_max_epu16(d, one), _mm512_max_epu16(m, one)); // a − b
                let bad = _mm512_cmpgt_epu16_mask(d, _mm512_set1_epi16(26))
                    | _mm512_cmpeq_epi16_mask(m, _mm512_set1_epi16(31))
                    | _mm512_cmpgt_epi16_mask(apart, _mm512_set1_epi16(9))
                    | _mm512_cmplt_epi16_mask(apart, _mm512_set1_epi16(-12));
                bad == 0
            }
        }
    }

    /// Whether [`ExactValues`] makes the values of a group's block, given its head (sixteen
    /// scales, and for `Q4_1` sixteen minimums): `Q4_1`'s blocks that pass [`exact_q4_1`], and
    /// of those and `Q4_0`'s the ones whose scales are below 2¹² in magnitude (an exponent field
    /// of at most 26, so that `2¹⁰¹²·d` is finite); `Q8_0`'s whose scales are finite.
    #[target_feature(enable = "avx2")]
    fn exact_head(format: BlockFormat, head: &[u8]) -> bool {
        let Some(scales) = head.first_chunk::<{ 2 * GROUP }>() else { return false };
        // SAFETY: 32 bytes.
        let d = unsafe { _mm256_loadu_si256(scales.as_ptr().cast()) };
        let field = _mm256_and_si256(_mm256_srli_epi16::<10>(d), _mm256_set1_epi16(31));
        let most = if format == BlockFormat::Q8_0 { 30 } else { 26 };
        let over = _mm256_cmpgt_epi16(field, _mm256_set1_epi16(most));
        let small = _mm256_testz_si256(over, over) == 1;
        match format {
            BlockFormat::Q4_1 => small && head.first_chunk::<{ 4 * GROUP }>().is_some_and(|head| exact_q4_1(head)),
            BlockFormat::Q4_0 | BlockFormat::Q8_0 => small,
        }
    }

    /// The values of one group's block in `f64` with AVX2 instructions, each one fused multiply-add
    /// of exact operands and so exactly the number `value` makes in `f32`, where [`exact_head`]
    /// says so.
    ///
    /// - A 4-bit `q` is placed by one byte shuffle in bits 48–51 of a double whose exponent field
    ///   is 15 (the byte `0xf0 | q` at byte 6, zeros above): `u = 2⁻¹⁰⁰⁸·(1 + q/16)`, exactly.
    ///   With `A = 2¹⁰¹²·d` (exact, and finite for `|d| < 2¹²`), `A·u = 16·d + q·d`.
    /// - `Q8_0`'s byte `q + 128` goes in bits 40–47 of 1.0 (the same shuffle, then the bits of 1.0
    ///   ored in): `u = 1 + (q + 128)·2⁻¹²`; with `A = 2¹²·d`, `A·u = 4096·d + (q + 128)·d`.
    /// - `C` takes the extra terms away: `m − 16·d` (`Q4_1`), `−24·d` (`Q4_0`), `−4224·d`
    ///   (`Q8_0`). Each is exact in `f64`: `24·d` and `4224·d` have at most 17 significant bits
    ///   (a half has 11), and `m − 16·d` spans at most 51 bits for any two finite halves.
    /// - So the fused multiply-add's exact result `A·u + C` is `d·q + m`, `d·(q − 8)` or `d·q`,
    ///   the real number `value` rounds in `f32`; it is exact in `f32` (always for `Q8_0` and
    ///   `Q4_0`, at most 19 significant bits; for `Q4_1` where [`exact_q4_1`] says so), hence in
    ///   `f64`, and nothing is rounded.
    /// - A zero value comes out as +0 where `value` may give −0. That cannot change an output
    ///   when [`super::sums_never_reach_minus_zero`] holds for the inputs, which the callers
    ///   check.
    ///
    /// One shuffle and one fused multiply-add per four values, where widening `f32` values took
    /// about twice the operations (`docs/performance.md`, "2026-12-05, fourth").
    // Aligned to a cache line and made by the caller: made inside `exact_part`, in the
    // compiler's unaligned stack slots (loads split across lines), the `Q8_0` kernel ran 6.8 G
    // weights/s on one core against 8.8.
    #[repr(C, align(64))]
    struct ExactValues {
        /// `A`, rows 4r..4r + 4 in register `r`.
        scale: [__m256d; 4],
        /// `C`, likewise.
        offset: [__m256d; 4],
    }

    impl ExactValues {
        /// From a group's head (sixteen scales, for `Q4_1` then sixteen minimums).
        #[target_feature(enable = "avx2,fma,f16c")]
        fn new(format: BlockFormat, head: &[u8]) -> Self {
            // eight halves from byte `at` of the head, in `f32` (exact)
            let halves = |at: usize| {
                let eight: &[u8] = &head[at..][..GROUP];
                // SAFETY: sixteen bytes.
                _mm256_cvtph_ps(unsafe { _mm_loadu_si128(eight.as_ptr().cast()) })
            };
            let (big, factor) = match format {
                BlockFormat::Q8_0 => (4096.0, -4224.0),
                BlockFormat::Q4_0 => (f64::from_bits(2035 << 52), -24.0), // 2¹⁰¹²
                BlockFormat::Q4_1 => (f64::from_bits(2035 << 52), -16.0),
            };
            let (mut scale, mut offset) = ([_mm256_setzero_pd(); 4], [_mm256_setzero_pd(); 4]);
            for h in 0..2 {
                let d = halves(h * GROUP);
                let m = if format == BlockFormat::Q4_1 { halves((2 + h) * GROUP) } else { _mm256_setzero_ps() };
                let quarters = [
                    (_mm256_castps256_ps128(d), _mm256_castps256_ps128(m)),
                    (_mm256_extractf128_ps::<1>(d), _mm256_extractf128_ps::<1>(m)),
                ];
                for (k, (d, m)) in quarters.into_iter().enumerate() {
                    let (d, m) = (_mm256_cvtps_pd(d), _mm256_cvtps_pd(m));
                    scale[2 * h + k] = _mm256_mul_pd(d, _mm256_set1_pd(big));
                    offset[2 * h + k] = _mm256_fmadd_pd(d, _mm256_set1_pd(factor), m);
                }
            }
            Self { scale, offset }
        }

        /// The values of rows `4r..4r + 4` from `bytes`: each row's byte (sixteen rows, in both
        /// halves of the register), for 4-bit formats (`NIBBLE`) already `0xf0 | q`, for `Q8_0`
        /// `q + 128`.
        ///
        /// `vpshufb` picks bytes within each 128-bit half of the register, by the control's
        /// bytes, and writes zero where a control byte is negative: so the line's sixteen bytes
        /// are in both halves, the lanes 0–1 reading the lower copy and 2–3 the upper.
        ///
        /// # Safety
        /// The processor has AVX2 and FMA (it is called only from functions that enable them,
        /// into which it is inlined).
        #[inline(always)]
        unsafe fn of<const NIBBLE: bool>(&self, bytes: __m256i, r: usize) -> __m256d {
            // byte 4r + k of the sixteen into byte `at` of the 64-bit lane k, zeros elsewhere
            const fn control(r: usize, at: usize) -> [i8; 32] {
                let mut c = [-128i8; 32];
                let mut k = 0;
                while k < 4 {
                    c[8 * k + at] = (4 * r + k) as i8;
                    k += 1;
                }
                c
            }
            const NIBBLES: [[i8; 32]; 4] = [control(0, 6), control(1, 6), control(2, 6), control(3, 6)];
            const BYTES: [[i8; 32]; 4] = [control(0, 5), control(1, 5), control(2, 5), control(3, 5)];
            // SAFETY: AVX2 and FMA (the caller); 32 bytes of control.
            unsafe {
                let u = if NIBBLE {
                    _mm256_shuffle_epi8(bytes, _mm256_loadu_si256(NIBBLES[r].as_ptr().cast()))
                } else {
                    let placed = _mm256_shuffle_epi8(bytes, _mm256_loadu_si256(BYTES[r].as_ptr().cast()));
                    _mm256_or_si256(placed, _mm256_set1_epi64x(0x3ff0_0000_0000_0000))
                };
                _mm256_fmadd_pd(self.scale[r], _mm256_castsi256_pd(u), self.offset[r])
            }
        }
    }

    /// `sums` (rows 4r..4r + 4 in register `r`) plus one group's terms of a block, its values made
    /// by `values`: the group's sixteen bytes at the start of each line of `lines` (`stride`
    /// apart), `xs` the block's inputs.
    ///
    /// A function of its own, not inlined, so that the four sums stay in registers: inlined beside
    /// the `f32` path's sums, one chain went through the stack and ran at half the speed. Both
    /// groups of a pair at once (eight chains) ran slower too: sixteen registers do not hold
    /// their sums with their scales and offsets.
    #[inline(never)]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn exact_part(
        format: BlockFormat,
        values: &ExactValues,
        lines: &[u8],
        stride: usize,
        xs: &[f64],
        sums: &mut [__m256d; 4],
    ) {
        #[cfg(test)]
        SHUFFLED_BLOCKS.with(|count| count.set(count.get() + 1));
        let mut s = *sums;
        // a line's sixteen bytes of this group, in both halves of a register
        macro_rules! line {
            ($l:expr) => {{
                let line: &[u8] = &lines[$l * stride..][..GROUP];
                // SAFETY: sixteen bytes.
                _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(line.as_ptr().cast()) })
            }};
        }
        match format {
            BlockFormat::Q8_0 => {
                for (i, &a) in xs.iter().enumerate() {
                    let (a, bytes) = (_mm256_set1_pd(a), _mm256_xor_si256(line!(i), _mm256_set1_epi8(-128))); // q + 128
                    for (r, sum) in s.iter_mut().enumerate() {
                        // SAFETY: this function enables AVX2 and FMA.
                        *sum = _mm256_fmadd_pd(a, unsafe { values.of::<false>(bytes, r) }, *sum);
                    }
                }
            }
            BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
                let high = _mm256_set1_epi8(0xf0u8 as i8);
                for (p, pair) in xs.chunks_exact(2).enumerate() {
                    let bytes = line!(p);
                    // both inputs' bytes first (the line's register is then free); all four
                    // registers' terms of the first input, then of the second
                    let first = _mm256_or_si256(bytes, high);
                    let second = _mm256_or_si256(_mm256_srli_epi16::<4>(bytes), high);
                    let (a, b) = (_mm256_set1_pd(pair[0]), _mm256_set1_pd(pair[1]));
                    for (r, sum) in s.iter_mut().enumerate() {
                        // SAFETY: this function enables AVX2 and FMA.
                        *sum = _mm256_fmadd_pd(a, unsafe { values.of::<true>(first, r) }, *sum);
                    }
                    for (r, sum) in s.iter_mut().enumerate() {
                        // SAFETY: this function enables AVX2 and FMA.
                        *sum = _mm256_fmadd_pd(b, unsafe { values.of::<true>(second, r) }, *sum);
                    }
                }
            }
        }
        *sums = s;
    }

    /// [`group_sums`] with AVX2 instructions: a group's values of a block made exactly in `f64`
    /// where `no_minus_zero` ([`super::sums_never_reach_minus_zero`] of `x`) and [`exact_head`] allow it
    /// ([`ExactValues`], every block of the models tried), else
    /// the sixteen values of one input made in two registers of eight `f32` (the scales widened
    /// by F16C), each widened into two registers of four `f64`. The compiled
    /// [`super::GroupSums`] makes the values four at a time instead.
    ///
    /// # Safety
    /// The processor has AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in super::super) unsafe fn group_sums_avx2(
        x: &[f64],
        w: &QuantRows<'_>,
        first: usize,
        outs: &mut [f64],
        no_minus_zero: bool,
    ) {
        for (unit, groups, outs) in units(w, first, outs) {
            let sums = sums_avx2(w.format, unit, groups, x, no_minus_zero);
            for (quarter, sums) in outs.chunks_exact_mut(4).zip(sums.as_flattened()) {
                // SAFETY: four outputs.
                unsafe { _mm256_storeu_pd(quarter.as_mut_ptr(), *sums) };
            }
        }
    }

    /// The sixteen sums of each group of a unit of `groups`, four rows to a register, in the
    /// order of [`super::sums`]: block by block, each group's part in turn, so that the unit is
    /// read once, front to back.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn sums_avx2(
        format: BlockFormat,
        unit: &[u8],
        groups: usize,
        x: &[f64],
        no_minus_zero: bool,
    ) -> [[__m256d; 4]; PAIR] {
        let block_bytes = GROUP * format.block_bytes();
        let head_bytes = GROUP * format.head_bytes();
        let mut totals = [[_mm256_setzero_pd(); 4]; PAIR];
        let mut blocks = unit.chunks_exact(groups * block_bytes);
        for (s, inputs) in x.chunks(INPUTS_PER_SUM).enumerate() {
            // one variable per group, not an array indexed by it, so that the sums stay in registers
            let [mut first, mut second] = [[_mm256_setzero_pd(); 4]; PAIR];
            for (xs, block) in inputs.chunks_exact(BLOCK).zip(&mut blocks) {
                fetch_ahead(block);
                let (heads, lines) = block.split_at(groups * head_bytes);
                let stride = groups * GROUP;
                // `sums` plus one group's terms of the block: its scales (and minimums) `head`,
                // its sixteen bytes at the start of each line of `lines` (a macro, not a function:
                // a function with the kernel's target features may not be inlined always)
                macro_rules! part {
                    ($head:expr, $lines:expr, $sums:ident) => {{
                        let (head, lines): (&[u8], &[u8]) = ($head, $lines);
                        let sums = &mut $sums;
                        // eight halves from byte `at` of the head, widened
                        macro_rules! halves {
                            ($at:expr) => {{
                                let halves: &[u8] = &head[$at..][..GROUP];
                                // SAFETY: sixteen bytes.
                                _mm256_cvtph_ps(unsafe { _mm_loadu_si128(halves.as_ptr().cast()) })
                            }};
                        }
                        let d = [halves!(0), halves!(GROUP)];
                        let m = if format == BlockFormat::Q4_1 {
                            [halves!(2 * GROUP), halves!(3 * GROUP)]
                        } else {
                            [_mm256_setzero_ps(); 2]
                        };
                        // sums += x_i · (value i of the sixteen rows, f32 widened)
                        macro_rules! add {
                            ($a:expr, $v:expr) => {{
                                let (a, v): (__m256d, [__m256; 2]) = (_mm256_set1_pd($a), $v);
                                for (h, v) in v.into_iter().enumerate() {
                                    let low = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
                                    let high = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v));
                                    sums[2 * h] = _mm256_fmadd_pd(a, low, sums[2 * h]);
                                    sums[2 * h + 1] = _mm256_fmadd_pd(a, high, sums[2 * h + 1]);
                                }
                            }};
                        }
                        // the eight bytes of rows 8h..8h + 8 in line `l`
                        macro_rules! line {
                            ($l:expr, $h:expr) => {{
                                let line: &[u8] = &lines[$l * stride + 8 * $h..][..8];
                                // SAFETY: eight bytes.
                                unsafe { _mm_loadl_epi64(line.as_ptr().cast()) }
                            }};
                        }
                        {
                            match format {
                                BlockFormat::Q8_0 => {
                                    for (i, &a) in xs.iter().enumerate() {
                                        let q = [line!(i, 0), line!(i, 1)];
                                        let v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q[0])), d[0]);
                                        let v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q[1])), d[1]);
                                        add!(a, [v0, v1]);
                                    }
                                }
                                BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
                                    for (p, pair) in xs.chunks_exact(2).enumerate() {
                                        let bytes =
                                            [_mm256_cvtepu8_epi32(line!(p, 0)), _mm256_cvtepu8_epi32(line!(p, 1))];
                                        let low = _mm256_set1_epi32(0x0f);
                                        let quants = [
                                            [_mm256_and_si256(bytes[0], low), _mm256_and_si256(bytes[1], low)],
                                            [_mm256_srli_epi32::<4>(bytes[0]), _mm256_srli_epi32::<4>(bytes[1])],
                                        ];
                                        for (q, &a) in quants.into_iter().zip(pair) {
                                            let mut v = [_mm256_setzero_ps(); 2];
                                            for h in 0..2 {
                                                let q = _mm256_cvtepi32_ps(q[h]);
                                                v[h] = if format == BlockFormat::Q4_1 {
                                                    _mm256_fmadd_ps(d[h], q, m[h]) // exact as in `sums`
                                                } else {
                                                    _mm256_mul_ps(d[h], _mm256_sub_ps(q, _mm256_set1_ps(8.0)))
                                                };
                                            }
                                            add!(a, v);
                                        }
                                    }
                                }
                            }
                        }
                    }};
                }
                // each group's values made exactly in `f64` where they can be (`ExactValues`),
                // else in `f32` and widened
                let head = [&heads[..head_bytes], heads.get(head_bytes..).unwrap_or_default()];
                if no_minus_zero && exact_head(format, head[0]) {
                    exact_part(format, &ExactValues::new(format, head[0]), lines, stride, xs, &mut first);
                } else {
                    part!(head[0], lines, first);
                }
                if groups == PAIR {
                    if no_minus_zero && exact_head(format, head[1]) {
                        exact_part(
                            format,
                            &ExactValues::new(format, head[1]),
                            &lines[GROUP..],
                            stride,
                            xs,
                            &mut second,
                        );
                    } else {
                        part!(head[1], &lines[GROUP..], second);
                    }
                }
            }
            for (total, sum) in totals.as_flattened_mut().iter_mut().zip(first.into_iter().chain(second)) {
                *total = if s == 0 { sum } else { _mm256_add_pd(*total, sum) };
            }
        }
        totals
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// [`exact_pair_heads`] admits a pair's block exactly when [`exact_head`] admits both of
        /// its groups: over heads whose halves take every exponent field (the thresholds 9, 12,
        /// 26, 30 and 31 among them), of either sign, for all three formats.
        #[test]
        fn a_pairs_heads_are_admitted_as_each_groups_are() {
            if !(std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw")) {
                return;
            }
            let mut state = 0x9e37_79b9_7f4a_7c15_u64;
            let mut next = || {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (state >> 33) as u16
            };
            let mut admitted = [0usize; 3];
            for (f, format) in [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::Q4_1].into_iter().enumerate() {
                let head_bytes = GROUP * format.head_bytes();
                for case in 0..20_000 {
                    // fields near one centre, so that most heads pass and every rule is crossed
                    let centre = case % 32;
                    let mut heads = vec![0u8; PAIR * head_bytes];
                    for half in heads.chunks_exact_mut(2) {
                        let field = (centre + next() as usize % 15).saturating_sub(7).min(31) as u16;
                        let bits = (next() & 0x8000) | field << 10 | (next() & 0x3ff);
                        half.copy_from_slice(&bits.to_le_bytes());
                    }
                    // SAFETY: AVX-512F and AVX512BW (checked), so AVX2 too.
                    let each = heads.chunks_exact(head_bytes).all(|head| unsafe { exact_head(format, head) });
                    // SAFETY: as above.
                    let pair = unsafe { exact_pair_heads(format, &heads) };
                    assert_eq!(pair, each, "{format:?}, case {case}");
                    admitted[f] += usize::from(each);
                }
            }
            // both answers came often for every format
            assert!(admitted.iter().all(|&n| n > 2_000 && n < 18_000), "{admitted:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{QuantError, dequantize_rows, dequantize_rows_transposed, row_times_quantized};
    use super::*;
    use crate::target::{Target, with_target};

    /// `rows` rows of `cols` values in `format`, from a fixed sequence, with finite scales of
    /// either sign.
    fn stored(format: BlockFormat, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        let mut bytes: Vec<u8> = (0..rows * cols / BLOCK * format.block_bytes())
            .map(|_| {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (state >> 33) as u8
            })
            .collect();
        for block in bytes.chunks_exact_mut(format.block_bytes()) {
            block[1] &= 0xbb; // finite halves, some negative
            block[3] &= 0xbb;
        }
        bytes
    }

    const FORMATS: [BlockFormat; 3] = [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::Q4_1];

    #[test]
    fn grouping_keeps_every_stored_row() {
        // whole groups and a tail of 3; one group; fewer rows than a group
        for format in FORMATS {
            for (rows, cols) in [(35, 64), (16, 32), (5, 96)] {
                let original = stored(format, rows, cols, 3);
                let mut grouped = original.clone();
                group_rows(format, &mut grouped, rows, cols).unwrap();
                if rows >= GROUP {
                    assert_ne!(grouped, original, "{format:?}: the groups were rearranged");
                }
                let (a, b) = (
                    QuantRows::new(format, &original, rows, cols).unwrap(),
                    QuantRows::grouped(format, &grouped, rows, cols).unwrap(),
                );
                for r in 0..rows {
                    assert_eq!(b.stored_row(r).unwrap(), a.stored_row(r).unwrap(), "{format:?} row {r}");
                }
                assert!(matches!(b.stored_row(rows), Err(QuantError::Length { .. })));
            }
        }
    }

    #[test]
    fn grouped_rows_dequantize_as_stored_on_every_target() {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for format in FORMATS {
            let (rows, cols) = (53, 64); // a pair, a lone group, five rows as stored
            let original = stored(format, rows, cols, 5);
            let mut grouped = original.clone();
            group_rows(format, &mut grouped, rows, cols).unwrap();
            let a = QuantRows::new(format, &original, rows, cols).unwrap();
            let b = QuantRows::grouped(format, &grouped, rows, cols).unwrap();
            for range in [0..rows, 3..35, 17..37, 32..48, 30..53] {
                let n = range.len() * cols;
                // the stored rows on the portable target, then both layouts on every target
                let (mut want, mut want_t) = (vec![0.0; n], vec![0.0; n]);
                with_target(Target::Portable, || {
                    dequantize_rows(&a, range.clone(), &mut want).unwrap();
                    dequantize_rows_transposed(&a, range.clone(), &mut want_t, true).unwrap();
                })
                .unwrap();
                for (k, r) in (0..cols).flat_map(|k| (0..range.len()).map(move |r| (k, r))) {
                    assert_eq!(want_t[k * range.len() + r].to_bits(), want[r * cols + k].to_bits());
                }
                for target in Target::available() {
                    for w in [&a, &b] {
                        let (mut x, mut y) = (vec![0.0; n], vec![0.0; n]);
                        with_target(target, || {
                            dequantize_rows(w, range.clone(), &mut x).unwrap();
                            dequantize_rows_transposed(w, range.clone(), &mut y, false).unwrap();
                        })
                        .unwrap();
                        let layout = w.layout();
                        assert_eq!(bits(&x), bits(&want), "{format:?} {layout:?} rows {range:?} on {target:?}");
                        assert_eq!(
                            bits(&y),
                            bits(&want_t),
                            "{format:?} {layout:?} rows {range:?} transposed, {target:?}"
                        );
                    }
                }
            }
        }
    }

    /// Scales and minimums of every kind — zeros of both signs, the smallest subnormal, the largest
    /// finite half, both infinities, a signalling and a quiet NaN — dequantized into a prefill's
    /// transposed panel by every target (the explicit AVX-512 and AVX2 kernels among them) with
    /// the bits of the plain loops on the rows as stored: a zero's sign and a NaN's payload too
    /// (no value here has two NaN operands). On x86, the explicit kernels must have made the
    /// whole groups wherever the target has them.
    #[test]
    fn special_halves_dequantize_transposed_as_stored_on_every_target() {
        let specials: [u16; 8] = [0x0000, 0x8000, 0x0001, 0x7bff, 0x7c00, 0xfc00, 0x7c01, 0xfe00];
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for format in FORMATS {
            let (rows, cols) = (53, 128); // a pair, a lone group, five rows as stored
            let mut original = stored(format, rows, cols, 13);
            for (i, block) in original.chunks_exact_mut(format.block_bytes()).enumerate() {
                if i % 3 == 0 {
                    block[..2].copy_from_slice(&specials[i / 3 % 8].to_le_bytes());
                }
                if format == BlockFormat::Q4_1 && i % 3 != 2 {
                    // beside the specials, and beside ordinary scales of either sign: −0 for q = 0
                    let m = if i % 3 == 0 { specials[(i / 3 + 3) % 8] } else { 0x8000 };
                    block[2..4].copy_from_slice(&m.to_le_bytes());
                }
            }
            let mut grouped = original.clone();
            group_rows(format, &mut grouped, rows, cols).unwrap();
            let a = QuantRows::new(format, &original, rows, cols).unwrap();
            let b = QuantRows::grouped(format, &grouped, rows, cols).unwrap();
            // whole groups from row 0, from 16 (a pair's second group), from 8 (a lone group after
            // stored rows); rows 7..41 as stored around groups the walk never starts
            for range in [0..rows, 16..48, 8..53, 7..41] {
                let mut want = vec![0.0; range.len() * cols];
                with_target(Target::Portable, || dequantize_rows_transposed(&a, range.clone(), &mut want, false))
                    .unwrap()
                    .unwrap();
                assert!(want.iter().any(|v| v.is_nan()) && want.contains(&f64::INFINITY), "{format:?}");
                assert!(want.iter().any(|v| v.to_bits() == (-0.0f64).to_bits()), "{format:?}: a −0 among the values");
                for target in Target::available() {
                    let mut got = vec![0.0; want.len()];
                    #[cfg(target_arch = "x86_64")]
                    let (explicit, before) = {
                        let explicit = || x86::EXPLICIT_GROUPS.with(std::cell::Cell::get);
                        (explicit, explicit())
                    };
                    with_target(target, || dequantize_rows_transposed(&b, range.clone(), &mut got, false))
                        .unwrap()
                        .unwrap();
                    assert_eq!(bits(&got), bits(&want), "{format:?} rows {range:?} on {target:?}");
                    // the explicit kernels made the whole groups where the target has them
                    #[cfg(target_arch = "x86_64")]
                    {
                        let has_kernel = target == Target::Avx512
                            || target == Target::Avx2 && std::arch::is_x86_feature_detected!("f16c");
                        let whole_groups = range != (7..41);
                        let context = format!("{format:?} rows {range:?} on {target:?}: explicit kernels");
                        assert_eq!(explicit() > before, has_kernel && whole_groups, "{context}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_grouped_product_is_the_stored_one_on_every_target() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        // a tail after the groups; sums whose last run is 32 wide; more outputs than a task
        for format in FORMATS {
            for (rows, cols) in [(35, 64), (48, 96), (531, 128)] {
                let original = stored(format, rows, cols, 7);
                let mut grouped = original.clone();
                group_rows(format, &mut grouped, rows, cols).unwrap();
                let a = QuantRows::new(format, &original, rows, cols).unwrap();
                let b = QuantRows::grouped(format, &grouped, rows, cols).unwrap();
                let x: Vec<f64> = (0..cols).map(|k| ((k * 7919 % 211) as f64 - 105.0) / 37.0).collect();
                let mut want = vec![0.0; rows];
                with_target(Target::Portable, || row_times_quantized(&x, &a, &mut want, false)).unwrap().unwrap();
                for target in Target::available() {
                    for parallel in [false, true] {
                        let mut got = vec![0.0; rows];
                        pool.install(|| with_target(target, || row_times_quantized(&x, &b, &mut got, parallel)))
                            .unwrap()
                            .unwrap();
                        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&got), bits(&want), "{format:?} {rows}×{cols} on {target:?}");
                    }
                }
            }
        }
    }

    /// Every target's `x · wᵀ` through the dispatch, and both AVX-512 variants called directly,
    /// have the bits of `want` (the plain loops'); `context` names the case in a failure.
    fn every_kernel_gives(x: &[f64], w: &QuantRows<'_>, want: &[f64], context: &str) {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for target in Target::available() {
            let mut got = vec![0.0; want.len()];
            with_target(target, || row_times_quantized(x, w, &mut got, false)).unwrap().unwrap();
            assert_eq!(bits(&got), bits(want), "{context} on {target:?}");
        }
        #[cfg(target_arch = "x86_64")]
        for (name, got) in avx512_variants(x, w) {
            assert_eq!(bits(&got), bits(&want[..got.len()]), "{context}, {name}");
        }
    }

    /// The AVX-512 kernel's outputs for all of `w`'s rows, without the byte shuffles (lookups
    /// and conversions) and (where the processor has AVX512BW) with them; none where it lacks
    /// AVX-512. The dispatch takes the byte shuffles wherever it can, so the kernel without them
    /// is tested only here.
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    fn avx512_variants(x: &[f64], w: &QuantRows<'_>) -> Vec<(&'static str, Vec<f64>)> {
        let whole = w.grouped_rows();
        let mut out = Vec::new();
        if Target::Avx512.is_available() {
            let mut got = vec![0.0; whole];
            // SAFETY: the processor runs AVX-512 (checked).
            unsafe { x86::group_sums_as::<false, false>(x, w, 0, &mut got, sums_never_reach_minus_zero(x)) };
            out.push(("AVX-512 without byte shuffles", got));
            if std::arch::is_x86_feature_detected!("avx512bw") {
                let mut got = vec![0.0; whole];
                // SAFETY: the processor runs AVX-512 and AVX512BW (checked).
                unsafe { x86::group_sums_as::<true, false>(x, w, 0, &mut got, sums_never_reach_minus_zero(x)) };
                out.push(("AVX-512 with byte shuffles", got));
            }
            if x86::picks_available() {
                let mut got = vec![0.0; whole];
                // SAFETY: the processor runs AVX-512, AVX512BW, AVX512VBMI and GFNI (checked).
                unsafe { x86::group_sums_as::<true, true>(x, w, 0, &mut got, sums_never_reach_minus_zero(x)) };
                out.push(("AVX-512 with a pair's bytes picked (VBMI, GFNI)", got));
            }
        }
        out
    }

    /// The explicit kernels called directly — the dispatch falls back to the compiled loops where
    /// F16C is missing, and records the same target either way — on scales and minimums of +0,
    /// −0, the smallest subnormal, the largest finite half and ±∞, and inputs of ±0: every output
    /// the plain loops' bits (NaN for NaN: its payload is not specified).
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[allow(unsafe_code)]
    fn the_explicit_kernels_sum_as_the_plain_loops_even_on_special_halves() {
        let specials: [u16; 6] = [0x0000, 0x8000, 0x0001, 0x7bff, 0x7c00, 0xfc00];
        let same =
            |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan());
        for format in FORMATS {
            let (rows, cols) = (48, 96);
            let mut bytes = stored(format, rows, cols, 11);
            for (i, block) in bytes.chunks_exact_mut(format.block_bytes()).enumerate().filter(|(i, _)| i % 7 == 0) {
                block[..2].copy_from_slice(&specials[i / 7 % 6].to_le_bytes());
                if format == BlockFormat::Q4_1 {
                    block[2..4].copy_from_slice(&specials[(i / 7 + 1) % 6].to_le_bytes());
                }
            }
            group_rows(format, &mut bytes, rows, cols).unwrap();
            let w = QuantRows::grouped(format, &bytes, rows, cols).unwrap();
            let mut x: Vec<f64> = (0..cols).map(|k| ((k * 7919 % 211) as f64 - 105.0) / 37.0).collect();
            (x[3], x[40]) = (-0.0, 0.0);
            let mut want = vec![0.0; rows];
            crate::isa::run(Target::Portable, GroupSums { x: &x, w: &w, first: 0, outs: &mut want });
            assert!(want.iter().any(|v| v.is_finite()) && want.iter().any(|v| !v.is_finite()), "{format:?}");
            for (name, got) in avx512_variants(&x, &w) {
                assert!(same(&got, &want), "{format:?} {name}");
            }
            if Target::Avx2.is_available() && std::arch::is_x86_feature_detected!("f16c") {
                let mut got = vec![0.0; rows];
                // SAFETY: the processor runs AVX2, FMA and F16C (checked).
                unsafe { x86::group_sums_avx2(&x, &w, 0, &mut got, sums_never_reach_minus_zero(&x)) };
                assert!(same(&got, &want), "{format:?} AVX2");
            }
        }
    }

    /// Blocks whose scales are ±∞, 2¹² or the largest finite half, with values and inputs of one sign,
    /// so that the plain loops' sums are infinite and not NaN: every target gives the same bits.
    /// The AVX2 kernel's exact `f64` values (`x86::ExactValues`) would make NaN (`∞ · u − ∞`) or
    /// overflow (`2¹⁰¹²` times a scale of 2¹² or more) where the blocks were not sent to the
    /// `f32` path.
    #[test]
    fn infinite_and_largest_scales_sum_as_the_plain_loops_on_every_target() {
        let scales: [u16; 4] = [0x7c00, 0xfc00, 0x6c00, 0x7bff]; // +∞, −∞, 2¹², 65504
        for format in FORMATS {
            let (rows, cols) = (56, 64); // a pair, a lone group and eight rows after it, as stored
            let mut bytes = stored(format, rows, cols, 5);
            for (i, block) in bytes.chunks_exact_mut(format.block_bytes()).enumerate() {
                let (head, row) = (format.head_bytes(), i / (cols / BLOCK));
                // the first group's blocks with ±∞ among their scales, the others' with 2¹² or
                // 65504: a unit's block goes to one path or the other as a whole (with AVX2 a
                // group's, with AVX-512 a pair's), so the lone group's finite scales reach the
                // exact values where their format admits them (`Q8_0`'s)
                if i % 3 == 0 {
                    let scale = if row / GROUP >= 1 { scales[2 + i / 3 % 2] } else { scales[i / 3 % 2] };
                    block[..2].copy_from_slice(&scale.to_le_bytes());
                }
                if format == BlockFormat::Q4_1 {
                    // a minimum equal to the scale, so that `exact_q4_1` admits every finite pair
                    // and only the bound on the scale sends a block to the `f32` path; 1 beside ±∞
                    let d = u16::from_le_bytes([block[0], block[1]]);
                    let m = if d & 0x7c00 == 0x7c00 { 0x3c00 } else { d };
                    block[2..4].copy_from_slice(&m.to_le_bytes());
                }
                // Q8_0's q = 5; Q4_0's q − 8 = 2; Q4_1's q = 10
                block[head..].fill(if format == BlockFormat::Q8_0 { 5 } else { 0xaa });
            }
            group_rows(format, &mut bytes, rows, cols).unwrap();
            let w = QuantRows::grouped(format, &bytes, rows, cols).unwrap();
            let x: Vec<f64> = (0..cols).map(|k| 0.25 + k as f64 / 64.0).collect();
            let mut want = vec![0.0; rows];
            with_target(Target::Portable, || row_times_quantized(&x, &w, &mut want, false)).unwrap().unwrap();
            assert!(want.iter().any(|v| v.is_infinite()), "{format:?} {want:?}");
            assert!(want.iter().all(|v| !v.is_nan()), "{format:?} {want:?}");
            every_kernel_gives(&x, &w, &want, &format!("{format:?}"));
        }
    }

    /// Inputs so small that a term's exact product is rounded to −0 (a subnormal input, or one
    /// near 2⁻¹⁰⁰⁰ whose product has bits below 2⁻¹⁰⁷⁴) leave a sum at −0, where the sign of a
    /// zero value then shows: every target, and both AVX-512 variants, give the plain loops' bits
    /// all the same (the exact values give +0 where `value` gives −0, so they must not be used).
    #[test]
    fn sums_rounded_to_minus_zero_keep_the_sign_of_zero_values_on_every_target() {
        let tiny = f64::from_bits((1023 - 1000) << 52 | 1); // 2⁻¹⁰⁰⁰·(1 + 2⁻⁵²), normal
        let inputs: [&[(usize, f64)]; 2] = [&[(0, f64::from_bits(1)), (1, 0.0)], &[(0, -tiny), (1, tiny)]];
        for format in FORMATS {
            let (rows, cols) = (48, 64); // a pair and a lone group
            // every row: scale −2⁻²⁴ (the smallest negative subnormal), for Q4_1 minimum −0;
            // values 0 and 1 equal to the scale, the others −0
            let (one, zero) = match format {
                BlockFormat::Q8_0 => (1u8, 0u8),
                BlockFormat::Q4_0 => (9, 8),
                BlockFormat::Q4_1 => (1, 0),
            };
            let block = |nonzero: usize| {
                let mut block = 0x8001u16.to_le_bytes().to_vec();
                if format == BlockFormat::Q4_1 {
                    block.extend(0x8000u16.to_le_bytes());
                }
                match format {
                    BlockFormat::Q8_0 => block.extend((0..32).map(|i| if i < nonzero { one } else { zero })),
                    _ => block.extend((0..16).map(|j| if j < nonzero { one | zero << 4 } else { zero | zero << 4 })),
                }
                block
            };
            let mut bytes = [block(2), block(0)].concat().repeat(rows); // the second block's values all −0
            group_rows(format, &mut bytes, rows, cols).unwrap();
            let w = QuantRows::grouped(format, &bytes, rows, cols).unwrap();
            for set in inputs {
                let mut x = vec![1.0; cols];
                for &(k, v) in set {
                    x[k] = v;
                }
                assert!(!sums_never_reach_minus_zero(&x));
                let mut want = vec![0.0; rows];
                with_target(Target::Portable, || row_times_quantized(&x, &w, &mut want, false)).unwrap().unwrap();
                assert!(want.iter().all(|v| v.to_bits() == (-0.0f64).to_bits()), "{format:?} {want:?}");
                every_kernel_gives(&x, &w, &want, &format!("{format:?} {set:?}"));
            }
        }
    }

    /// The dispatch takes the byte shuffles wherever they can run: on each x86 target that can
    /// (AVX-512 with AVX512BW, AVX2 with F16C, each for all three formats), a product of admitted
    /// blocks makes some of its values by them, and none when an input is tiny
    /// (`sums_never_reach_minus_zero`). The products run on this thread (`parallel` false), whose
    /// count of shuffled blocks the kernels keep in test builds.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_dispatch_takes_the_byte_shuffles_where_it_can() {
        let shuffled = || x86::SHUFFLED_BLOCKS.with(std::cell::Cell::get);
        let avx2 = Target::Avx2.is_available() && std::arch::is_x86_feature_detected!("f16c");
        let bw = Target::Avx512.is_available() && std::arch::is_x86_feature_detected!("avx512bw");
        for format in FORMATS {
            let (rows, cols) = (48, 128);
            let mut bytes = stored(format, rows, cols, 17);
            if format == BlockFormat::Q4_1 {
                for block in bytes.chunks_exact_mut(format.block_bytes()) {
                    block.copy_within(0..2, 2); // a minimum equal to the scale: the rule admits it
                }
            }
            group_rows(format, &mut bytes, rows, cols).unwrap();
            let w = QuantRows::grouped(format, &bytes, rows, cols).unwrap();
            let mut x: Vec<f64> = (0..cols).map(|k| ((k * 7919 % 211) as f64 - 105.0) / 37.0).collect();
            let targets = [(Target::Avx512, bw), (Target::Avx2, avx2)];
            for (target, expected) in targets.into_iter().filter(|(t, _)| t.is_available()) {
                let mut out = vec![0.0; rows];
                let before = shuffled();
                with_target(target, || row_times_quantized(&x, &w, &mut out, false)).unwrap().unwrap();
                assert_eq!(shuffled() > before, expected, "{format:?} on {target:?}");
                x[5] = 1e-301; // below 2⁻⁹⁹⁸: a sum could reach −0
                let before = shuffled();
                with_target(target, || row_times_quantized(&x, &w, &mut out, false)).unwrap().unwrap();
                assert_eq!(shuffled(), before, "{format:?} on {target:?} with a tiny input");
                x[5] = 0.5;
            }
        }
    }

    /// Scales of ±0, the smallest and largest subnormal halves of either sign and the smallest
    /// normal one, in blocks with no infinite scale beside them, take the byte shuffles as an
    /// ordinary model's scales do, and sum as the plain loops, inputs of ±0 among them. (The
    /// special-halves test puts ±∞ in every unit, so there such scales reach only the
    /// conversions.)
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn zero_and_subnormal_scales_take_the_byte_shuffles_and_sum_as_the_plain_loops() {
        let specials: [u16; 7] = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400];
        let shuffled = || x86::SHUFFLED_BLOCKS.with(std::cell::Cell::get);
        let avx2 = Target::Avx2.is_available() && std::arch::is_x86_feature_detected!("f16c");
        let bw = Target::Avx512.is_available() && std::arch::is_x86_feature_detected!("avx512bw");
        // the formats whose blocks the scale's exponent alone admits (`Q4_1`'s rule also weighs
        // its minimum: `a_pair_sums_as_the_plain_loops_whether_its_values_are_made_in_f64_or_in_f32`)
        for format in [BlockFormat::Q8_0, BlockFormat::Q4_0] {
            let (rows, cols) = (56, 128); // a pair, a lone group and eight rows after it, as stored
            let ordinary = stored(format, rows, cols, 23);
            let mut special = ordinary.clone();
            for (i, block) in special.chunks_exact_mut(format.block_bytes()).enumerate() {
                block[..2].copy_from_slice(&specials[i % specials.len()].to_le_bytes());
            }
            let mut x: Vec<f64> = (0..cols).map(|k| ((k * 7919 % 211) as f64 - 105.0) / 37.0).collect();
            (x[2], x[77]) = (-0.0, 0.0);
            assert!(sums_never_reach_minus_zero(&x));
            let mut counts = Vec::new();
            for mut bytes in [ordinary, special] {
                group_rows(format, &mut bytes, rows, cols).unwrap();
                let w = QuantRows::grouped(format, &bytes, rows, cols).unwrap();
                let mut want = vec![0.0; rows];
                with_target(Target::Portable, || row_times_quantized(&x, &w, &mut want, false)).unwrap().unwrap();
                assert!(want.iter().all(|v| v.is_finite()), "{format:?} {want:?}");
                every_kernel_gives(&x, &w, &want, &format!("{format:?}"));
                let targets = [(Target::Avx512, bw), (Target::Avx2, avx2)];
                for (target, _) in targets.into_iter().filter(|&(t, shuffles)| shuffles && t.is_available()) {
                    let before = shuffled();
                    with_target(target, || row_times_quantized(&x, &w, &mut want, false)).unwrap().unwrap();
                    counts.push((target, shuffled() - before));
                }
            }
            // as many blocks shuffled with the special scales as with ordinary ones, and some
            let (with_ordinary, with_special) = counts.split_at(counts.len() / 2);
            assert_eq!(with_ordinary, with_special, "{format:?}");
            assert!(with_special.iter().all(|&(_, n)| n > 0), "{format:?} {counts:?}");
        }
    }

    /// The inputs that keep sums from −0: zeros, NaN, ±∞ and magnitudes from 2⁻⁹⁹⁸ up; not a
    /// nonzero input below that.
    #[test]
    fn the_inputs_that_keep_sums_from_minus_zero() {
        let smallest = f64::MIN_POSITIVE * 16_777_216.0;
        for fine in [0.0, -0.0, f64::NAN, f64::INFINITY, -f64::INFINITY, smallest, -smallest, 1.0, f64::MAX] {
            assert!(sums_never_reach_minus_zero(&[1.0, fine]), "{fine:e}");
        }
        for small in [f64::from_bits(1), -f64::MIN_POSITIVE, smallest * (1.0 - f64::EPSILON / 2.0), -1e-301] {
            assert!(!sums_never_reach_minus_zero(&[1.0, small]), "{small:e}");
        }
    }

    /// The exponents' rule of `x86::exact_q4_1`, one scale and minimum at a time.
    fn exact_by_exponents(d: u16, m: u16) -> bool {
        let (e, f) = (d >> 10 & 31, m >> 10 & 31);
        let apart = i32::from(e.max(1)) - i32::from(f.max(1));
        e < 31 && f < 31 && (-12..=9).contains(&apart)
    }

    /// Where the rule says exact, `d·q + m` in `f32` (`value`) is the same number as in `f64`,
    /// for every pair of exponents, the extreme fractions and both signs; the explicit test of a
    /// block's sixteen rows agrees with the rule; and just past each bound some value is not
    /// exact, so the rule could not be looser.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_exactness_rule_holds_and_is_tight() {
        let fractions = [0u16, 1, 511, 1023];
        let halves = || {
            (0..32u16).flat_map(move |e| fractions.into_iter().flat_map(move |f| [e << 10 | f, 0x8000 | e << 10 | f]))
        };
        let mut past = [false; 2]; // an inexact value at a − b = 10, at b − a = 13
        for d in halves() {
            for m in halves() {
                let (df, mf) = (f16_bits(d), f16_bits(m));
                let exact = (0..16u8).all(|q| {
                    let v = value(BlockFormat::Q4_1, df, mf, q);
                    v.to_bits() == f64::from(df).mul_add(f64::from(q), f64::from(mf)).to_bits()
                });
                let rule = exact_by_exponents(d, m);
                assert!(!rule || exact, "{d:#06x} {m:#06x}");
                let apart = i32::from((d >> 10 & 31).max(1)) - i32::from((m >> 10 & 31).max(1));
                if !exact && (d >> 10 & 31) < 31 && (m >> 10 & 31) < 31 {
                    past[0] |= apart == 10;
                    past[1] |= apart == -13;
                }
                if Target::Avx2.is_available() {
                    let mut head = [0u8; 4 * GROUP];
                    for c in 0..GROUP {
                        // row 5 carries the pair under test; the others an exact pair
                        let (dc, mc) = if c == 5 { (d, m) } else { (0x2000, 0xa400) };
                        head[2 * c..][..2].copy_from_slice(&dc.to_le_bytes());
                        head[2 * (GROUP + c)..][..2].copy_from_slice(&mc.to_le_bytes());
                    }
                    // SAFETY: the processor runs AVX2 (checked).
                    #[allow(unsafe_code)]
                    let got = unsafe { x86::exact_q4_1(&head) };
                    assert_eq!(got, rule, "{d:#06x} {m:#06x}");
                }
            }
        }
        assert_eq!(past, [true, true]);
    }

    /// Blocks of a real model's kind (a scale and a minimum near it) take the `f64` values in the
    /// AVX-512 pair kernel, and so do rows with a subnormal or ±0 half; a few rows whose minimum
    /// is far larger, or with a ±0 beside a half far from it, send their pair's block to the `f32`
    /// values. Both give the plain loops' bits, beside a lone last group and a tail.
    #[test]
    fn a_pair_sums_as_the_plain_loops_whether_its_values_are_made_in_f64_or_in_f32() {
        let (rows, cols) = (83, 256); // two pairs, a lone group, three rows after it
        let mut bytes = stored(BlockFormat::Q4_1, rows, cols, 13);
        for (i, block) in bytes.chunks_exact_mut(20).enumerate() {
            let d = 0.001 + (i % 97) as f32 * 1e-4;
            let m = if i % 61 == 7 { d * 40_000.0 } else { -d * (7.0 + (i % 5) as f32 * 0.1) };
            let half = |v: f32| {
                let bits = v.to_bits();
                (bits >> 16 & 0x8000) as u16 | ((((bits >> 23 & 0xff) - 112) << 10) | (bits >> 13 & 0x3ff)) as u16
            };
            // (scale, minimum): a model's kind; subnormals and zeros; a zero beside a far half
            let (d, m) = match i % 40 {
                11 => (0x0003, 0x8000),
                23 => (0x8000, 0x0201),
                29 => (0x0000, 0x3a00), // +0 and 0.75: exponents 13 apart
                37 => (0x2c00, 0x8000), // 2⁻⁴ and −0: 10 apart
                _ => (half(d), half(m)),
            };
            block[..2].copy_from_slice(&u16::to_le_bytes(d));
            block[2..4].copy_from_slice(&u16::to_le_bytes(m));
        }
        let original = bytes.clone();
        group_rows(BlockFormat::Q4_1, &mut bytes, rows, cols).unwrap();
        let a = QuantRows::new(BlockFormat::Q4_1, &original, rows, cols).unwrap();
        let b = QuantRows::grouped(BlockFormat::Q4_1, &bytes, rows, cols).unwrap();
        let x: Vec<f64> = (0..cols).map(|k| ((k * 7919 % 211) as f64 - 105.0) / 37.0).collect();
        let mut want = vec![0.0; rows];
        with_target(Target::Portable, || row_times_quantized(&x, &a, &mut want, false)).unwrap().unwrap();
        // both kinds of pair block are there, and exact ones with a zero or subnormal half: the
        // rule, block by block, on the stored rows
        let pair_blocks = (0..2 * PAIR * GROUP).step_by(PAIR * GROUP).flat_map(|r0| {
            let a = &a;
            (0..cols / BLOCK).map(move |blk| {
                let halves = (r0..r0 + PAIR * GROUP).map(|r| {
                    let block = &a.row(r)[blk * 20..];
                    (u16::from_le_bytes([block[0], block[1]]), u16::from_le_bytes([block[2], block[3]]))
                });
                let exact = halves.clone().all(|(d, m)| exact_by_exponents(d, m));
                (exact, halves.clone().any(|(d, m)| d & 0x7c00 == 0 || m & 0x7c00 == 0))
            })
        });
        let kinds: Vec<(bool, bool)> = pair_blocks.collect();
        assert!(kinds.iter().any(|&(e, _)| !e), "{kinds:?}");
        assert!(kinds.iter().any(|&(e, special)| e && special), "{kinds:?}");
        every_kernel_gives(&x, &b, &want, "Q4_1");
    }

    /// Rows of no inputs: every grouped output is the empty sum.
    #[test]
    fn rows_of_no_inputs_sum_to_zero_on_every_target() {
        for format in FORMATS {
            // a pair, a lone group, eight rows as stored
            let w = QuantRows::grouped(format, &[], 56, 0).unwrap();
            for target in Target::available() {
                let mut got = vec![f64::NAN; 56];
                with_target(target, || row_times_quantized(&[], &w, &mut got, true)).unwrap().unwrap();
                assert_eq!(got, vec![0.0; 56], "{format:?} {target:?}");
            }
        }
    }

    #[test]
    fn rows_that_do_not_fit_are_not_grouped() {
        let mut bytes = vec![7; 20 * 17];
        assert!(matches!(group_rows(BlockFormat::Q4_1, &mut bytes, 16, 32), Err(QuantError::Bytes { .. })));
        assert!(matches!(group_rows(BlockFormat::Q4_1, &mut bytes, 17, 31), Err(QuantError::RowLength { .. })));
        assert_eq!(bytes, vec![7; 20 * 17]);
    }
}
