//! The grouped layout: the same blocks with sixteen rows' bytes side by side, so that one load
//! brings the same input of sixteen outputs and the product needs no gather and no transposition.
//!
//! A file stores a weight row after row. Decoding one token sums each output in input order (the
//! one-row path's order, see the parent module), so the vector lanes must hold different outputs
//! — and in the stored layout the sixteen values of one input lie a row apart. Here every run of
//! [`GROUP`] rows is rearranged, block by block:
//!
//! ```text
//! group g, block b (GROUP · block_bytes bytes, the same as the sixteen stored blocks):
//! Q8_0  [16 scales d: f16][32 × (the 16 rows' i8 of input i)]
//! Q4_0  [16 scales d: f16][16 × (the 16 rows' byte p)]               byte p = q[2p] | q[2p+1] << 4
//! Q4_1  [16 scales d: f16][16 minimums m: f16][16 × (the 16 rows' byte p)]
//! ```
//!
//! A group keeps the bytes of its sixteen stored rows (it is a permutation of them, done in place,
//! [`group_rows`]), so a matrix takes exactly the bytes its file gives it; rows after the last whole
//! group stay as stored. In a stored 4-bit block byte `j` holds inputs `j` and `j + 16`; here byte
//! `p` holds inputs `2p` and `2p + 1`, so each byte loaded gives two consecutive terms of the sums.

use crate::isa::{Isa, Kernel};

use super::{BLOCK, BlockFormat, INPUTS_PER_SUM, QuantRows, f16_bits, value, values};

/// Rows whose bytes are laid side by side: the outputs one pass sums (two registers of eight
/// `f64` with AVX-512, four of four with AVX2).
pub const GROUP: usize = 16;

/// Bytes of the largest block ([`BlockFormat::Q8_0`]).
pub(super) const MAX_BLOCK_BYTES: usize = 34;

/// Rearranges the whole groups of `rows` stored rows in `bytes` (the layout of
/// [`QuantRows::new`]) into the grouped layout of [`QuantRows::grouped`], in place, each group
/// through a copy of its own bytes. The inverse is [`QuantRows::stored_row`].
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
    bytes[..whole].par_chunks_mut(GROUP * row_bytes).for_each(|group| {
        let stored = group.to_vec();
        let block_bytes = format.block_bytes();
        for (b, out) in group.chunks_exact_mut(GROUP * block_bytes).enumerate() {
            let block = |c: usize| &stored[c * row_bytes + b * block_bytes..][..block_bytes];
            group_block(format, block, out);
        }
    });
    Ok(())
}

/// Writes the grouped bytes of one block of sixteen rows (`block(c)` = row `c`'s stored block).
fn group_block<'s>(format: BlockFormat, block: impl Fn(usize) -> &'s [u8], out: &mut [u8]) {
    let head = format.head_bytes();
    let (heads, lines) = out.split_at_mut(GROUP * head);
    for c in 0..GROUP {
        for h in (0..head).step_by(2) {
            heads[GROUP * h + 2 * c..][..2].copy_from_slice(&block(c)[h..h + 2]);
        }
    }
    for (p, line) in lines.chunks_exact_mut(GROUP).enumerate() {
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

/// Value `i` of row `c` in a grouped 4-bit block's lines: byte `i / 2` of the row, its high half
/// for odd `i`.
#[inline(always)]
fn grouped_nibble(lines: &[u8], c: usize, i: usize) -> u8 {
    lines[i / 2 * GROUP + c] >> (4 * (i % 2)) & 0x0f
}

/// Row `r`'s block `b` of `w` (grouped; `r` below the last whole group): its scale (and
/// minimum) bytes, the group's lines of values, and `r`'s lane in them.
#[inline(always)]
fn place<'a>(w: &QuantRows<'a>, r: usize, b: usize) -> (&'a [u8], &'a [u8], usize) {
    let (block_bytes, head) = (w.format.block_bytes(), w.format.head_bytes());
    let at = r / GROUP * GROUP * w.row_bytes() + b * GROUP * block_bytes;
    let (heads, lines) = w.bytes[at..][..GROUP * block_bytes].split_at(GROUP * head);
    (heads, lines, r % GROUP)
}

/// The bytes of block `b` of row `r` of `w` (grouped; `r` below the last whole group) as a file
/// stores them, written into `out`: the inverse of [`group_block`].
pub(super) fn stored_block<'o>(w: &QuantRows<'_>, r: usize, b: usize, out: &'o mut [u8; MAX_BLOCK_BYTES]) -> &'o [u8] {
    let (format, head) = (w.format, w.format.head_bytes());
    let (heads, lines, c) = place(w, r, b);
    for h in (0..head).step_by(2) {
        out[h..h + 2].copy_from_slice(&heads[GROUP * h + 2 * c..][..2]);
    }
    for j in 0..format.quant_bytes() {
        out[head + j] = match format {
            BlockFormat::Q8_0 => lines[j * GROUP + c],
            BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
                grouped_nibble(lines, c, j) | grouped_nibble(lines, c, j + 16) << 4
            }
        };
    }
    &out[..format.block_bytes()]
}

/// The values of block `b` of group row `r` of `w`, read where the group keeps them: the same
/// numbers as the stored block's (the parent's `values`).
#[inline(always)]
pub(super) fn block_values(w: &QuantRows<'_>, r: usize, b: usize, out: &mut [f64; BLOCK]) {
    let format = w.format;
    let (heads, lines, c) = place(w, r, b);
    // half `h` (0: the scale, 1: the minimum) of row `c`
    let half = |h: usize| f16_bits(u16::from_le_bytes([heads[2 * (h * GROUP + c)], heads[2 * (h * GROUP + c) + 1]]));
    let m = if format == BlockFormat::Q4_1 { half(1) } else { 0.0 };
    match format {
        BlockFormat::Q8_0 => values(format, half(0), m, |i| lines[i * GROUP + c], out),
        BlockFormat::Q4_0 | BlockFormat::Q4_1 => values(format, half(0), m, |i| grouped_nibble(lines, c, i), out),
    }
}

/// Every value of block `b` of the group starting at row `first` of `w` (grouped; a whole
/// group), written where a transposed panel keeps them: value `i` of row `first + c` at
/// `out[i · stride + c]`, sixteen lanes at a time.
#[inline(always)]
pub(super) fn group_values(w: &QuantRows<'_>, first: usize, b: usize, out: &mut [f64], stride: usize) {
    let mut runs = out.chunks_mut(stride).filter_map(|line| <&mut [f64; GROUP]>::try_from(&mut line[..GROUP]).ok());
    let format = w.format;
    let (heads, lines, _) = place(w, first, b);
    let d = halves(heads);
    let m = if format == BlockFormat::Q4_1 { halves(&heads[2 * GROUP..]) } else { [0.0; GROUP] };
    // each format's loops apart, so that `value` is compiled for one format, sixteen lanes at once
    match format {
        BlockFormat::Q8_0 => {
            for (run, line) in (&mut runs).zip(lines.chunks_exact(GROUP)) {
                for c in 0..GROUP {
                    run[c] = value(BlockFormat::Q8_0, d[c], 0.0, line[c]);
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
fn pairs<'o, const F: u8>(
    lines: &[u8],
    d: &[f32; GROUP],
    m: &[f32; GROUP],
    mut runs: impl Iterator<Item = &'o mut [f64; GROUP]>,
) {
    let format = if F == BlockFormat::Q4_1 as u8 { BlockFormat::Q4_1 } else { BlockFormat::Q4_0 };
    for line in lines.chunks_exact(GROUP) {
        let (Some(low), Some(high)) = (runs.next(), runs.next()) else { return };
        for c in 0..GROUP {
            low[c] = value(format, d[c], m[c], line[c] & 0x0f);
            high[c] = value(format, d[c], m[c], line[c] >> 4);
        }
    }
}

/// The whole groups of `w` from output `first` on (a multiple of [`GROUP`]), each with its
/// sixteen outputs in `outs`: the walk every grouped kernel makes. Inlined into each, so that it
/// is compiled with the kernel's instructions.
#[inline(always)]
fn groups<'w, 'o>(
    w: &QuantRows<'w>,
    first: usize,
    outs: &'o mut [f64],
) -> impl Iterator<Item = (&'w [u8], &'o mut [f64])> {
    debug_assert!(outs.len().is_multiple_of(GROUP), "whole groups of outputs");
    let group_bytes = GROUP * w.row_bytes();
    w.bytes[first * w.row_bytes()..].chunks_exact(group_bytes).zip(outs.chunks_exact_mut(GROUP))
}

/// Outputs `first..first + outs.len()` of `x · wᵀ` (`w` grouped, `first` and the length whole
/// groups), compiled per target: the one-row path's sums, sixteen outputs at a time.
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
        for (group, outs) in groups(w, first, outs) {
            let totals = match w.format {
                BlockFormat::Q8_0 => sums::<{ 34 * GROUP }, Q8_0>(group, x),
                BlockFormat::Q4_0 => sums::<{ 18 * GROUP }, Q4_0>(group, x),
                BlockFormat::Q4_1 => sums::<{ 20 * GROUP }, Q4_1>(group, x),
            };
            outs.copy_from_slice(&totals);
        }
    }
}

/// The sixteen outputs of one group: for each run of [`INPUTS_PER_SUM`] inputs `s = 0; s ← x·w + s`
/// in input order (`block` adds one block's 32 terms), then the runs' sums in order.
#[inline(always)]
fn sums<const B: usize, F: GroupedBlock<B>>(group: &[u8], x: &[f64]) -> [f64; GROUP] {
    let mut totals = [0.0; GROUP];
    let mut blocks = group.chunks_exact(B);
    for (s, inputs) in x.chunks(INPUTS_PER_SUM).enumerate() {
        let mut partial = [0.0; GROUP];
        for (xs, grouped) in inputs.chunks_exact(BLOCK).zip(&mut blocks) {
            if let (Ok(grouped), Ok(xs)) = (grouped.try_into(), xs.try_into()) {
                F::add(grouped, xs, &mut partial);
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

/// One format's grouped block of `B` bytes: its 32 terms added to the sixteen sums. (A trait
/// of zero-sized types, not functions passed by value: a function called through a pointer or
/// a closure is compiled for the baseline, outside the target's function.)
trait GroupedBlock<const B: usize> {
    /// `partial[c] ← xs[i] · value i of row c + partial[c]`, `i` in input order: each value made
    /// by the parent module's `value` (and so as `gguf::dequantize_into` makes it), the product
    /// and the sum one fused multiply-add. Plain loops over the sixteen lanes, which the compiler makes vector
    /// instructions for the target they are compiled in.
    fn add(grouped: &[u8; B], xs: &[f64; BLOCK], partial: &mut [f64; GROUP]);
}

#[allow(non_camel_case_types)] // ggml's names
struct Q8_0;
#[allow(non_camel_case_types)]
struct Q4_0;
#[allow(non_camel_case_types)]
struct Q4_1;

impl GroupedBlock<{ 34 * GROUP }> for Q8_0 {
    #[inline(always)]
    fn add(grouped: &[u8; 34 * GROUP], xs: &[f64; BLOCK], partial: &mut [f64; GROUP]) {
        let (head, values) = grouped.split_at(2 * GROUP);
        let d = halves(head);
        for (line, &a) in values.chunks_exact(GROUP).zip(xs) {
            for c in 0..GROUP {
                partial[c] = a.mul_add(value(BlockFormat::Q8_0, d[c], 0.0, line[c]), partial[c]);
            }
        }
    }
}

impl GroupedBlock<{ 18 * GROUP }> for Q4_0 {
    #[inline(always)]
    fn add(grouped: &[u8; 18 * GROUP], xs: &[f64; BLOCK], partial: &mut [f64; GROUP]) {
        let (head, values) = grouped.split_at(2 * GROUP);
        let d = halves(head);
        for (line, pair) in values.chunks_exact(GROUP).zip(xs.chunks_exact(2)) {
            for c in 0..GROUP {
                partial[c] = pair[0].mul_add(value(BlockFormat::Q4_0, d[c], 0.0, line[c] & 0x0f), partial[c]);
            }
            for c in 0..GROUP {
                partial[c] = pair[1].mul_add(value(BlockFormat::Q4_0, d[c], 0.0, line[c] >> 4), partial[c]);
            }
        }
    }
}

impl GroupedBlock<{ 20 * GROUP }> for Q4_1 {
    #[inline(always)]
    fn add(grouped: &[u8; 20 * GROUP], xs: &[f64; BLOCK], partial: &mut [f64; GROUP]) {
        let (head, values) = grouped.split_at(4 * GROUP);
        let (d, m) = (halves(head), halves(&head[2 * GROUP..]));
        for (line, pair) in values.chunks_exact(GROUP).zip(xs.chunks_exact(2)) {
            for c in 0..GROUP {
                partial[c] = pair[0].mul_add(value(BlockFormat::Q4_1, d[c], m[c], line[c] & 0x0f), partial[c]);
            }
            for c in 0..GROUP {
                partial[c] = pair[1].mul_add(value(BlockFormat::Q4_1, d[c], m[c], line[c] >> 4), partial[c]);
            }
        }
    }
}

/// The grouped kernel written with AVX-512 instructions — each block's sixteen values of one
/// input made in one register of `f32` (the scales widened by one instruction), where the compiler
/// splits [`GroupSums`]'s lanes into two halves of eight — and with AVX2 ones. The same
/// roundings in the same order, so the same bits.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    use super::{BLOCK, BlockFormat, GROUP, INPUTS_PER_SUM, QuantRows, groups};

    /// Outputs `first..first + outs.len()` of `x · wᵀ` (`w` grouped, `first` and the length whole
    /// groups).
    ///
    /// # Safety
    /// The processor has AVX-512F.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(in super::super) unsafe fn group_sums(x: &[f64], w: &QuantRows<'_>, first: usize, outs: &mut [f64]) {
        for (group, outs) in groups(w, first, outs) {
            let (low, high) = sums(w.format, group, x);
            // SAFETY: sixteen outputs.
            unsafe {
                _mm512_storeu_pd(outs.as_mut_ptr(), low);
                _mm512_storeu_pd(outs.as_mut_ptr().add(GROUP / 2), high);
            }
        }
    }

    /// The sixteen sums of one group (rows 0–7, rows 8–15), in the order of [`super::sums`].
    #[target_feature(enable = "avx512f,avx2,fma")]
    fn sums(format: BlockFormat, group: &[u8], x: &[f64]) -> (__m512d, __m512d) {
        let block_bytes = GROUP * format.block_bytes();
        let head_bytes = GROUP * format.head_bytes();
        let (mut total_low, mut total_high) = (_mm512_setzero_pd(), _mm512_setzero_pd());
        let mut blocks = group.chunks_exact(block_bytes);
        for (s, inputs) in x.chunks(INPUTS_PER_SUM).enumerate() {
            let (mut low, mut high) = (_mm512_setzero_pd(), _mm512_setzero_pd());
            for (xs, grouped) in inputs.chunks_exact(BLOCK).zip(&mut blocks) {
                let (head, lines) = grouped.split_at(head_bytes);
                // SAFETY: 32 bytes of halves each (16 for the scales, 16 more for the minimums).
                let d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(head.as_ptr().cast()) });
                let m = if format == BlockFormat::Q4_1 {
                    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(head.as_ptr().add(2 * GROUP).cast()) })
                } else {
                    _mm512_setzero_ps()
                };
                // sums += x_i · (value i of the sixteen rows, f32 widened)
                macro_rules! add {
                    ($a:expr, $v:expr) => {{
                        let (a, v) = (_mm512_set1_pd($a), $v);
                        let v0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
                        let v1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))));
                        low = _mm512_fmadd_pd(a, v0, low);
                        high = _mm512_fmadd_pd(a, v1, high);
                    }};
                }
                // the sixteen bytes of one line, widened to integers
                macro_rules! line {
                    ($l:expr) => {{
                        let line: &[u8] = &lines[$l * GROUP..][..GROUP];
                        // SAFETY: sixteen bytes.
                        unsafe { _mm_loadu_si128(line.as_ptr().cast()) }
                    }};
                }
                match format {
                    BlockFormat::Q8_0 => {
                        for (i, &a) in xs.iter().enumerate() {
                            let q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(line!(i)));
                            add!(a, _mm512_mul_ps(q, d));
                        }
                    }
                    BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
                        for (p, pair) in xs.chunks_exact(2).enumerate() {
                            let bytes = _mm512_cvtepu8_epi32(line!(p));
                            let quants =
                                [_mm512_and_si512(bytes, _mm512_set1_epi32(0x0f)), _mm512_srli_epi32::<4>(bytes)];
                            for (q, &a) in quants.into_iter().zip(pair) {
                                let q = _mm512_cvtepi32_ps(q);
                                let v = if format == BlockFormat::Q4_1 {
                                    // `d · q + m` rounded once, which is `value`'s two roundings:
                                    // a half's 11 significant bits times 4 bits fit in `f32`'s 24,
                                    // and its range (2⁻²⁴ up to 65504 · 15) in `f32`'s normal
                                    // numbers, so `d · q` is exact (one instruction fewer per
                                    // input, 8 %)
                                    _mm512_fmadd_ps(d, q, m)
                                } else {
                                    _mm512_mul_ps(d, _mm512_sub_ps(q, _mm512_set1_ps(8.0)))
                                };
                                add!(a, v);
                            }
                        }
                    }
                }
            }
            if s == 0 {
                (total_low, total_high) = (low, high);
            } else {
                total_low = _mm512_add_pd(total_low, low);
                total_high = _mm512_add_pd(total_high, high);
            }
        }
        (total_low, total_high)
    }

    /// [`group_sums`] with AVX2 instructions: the sixteen values of one input made in two
    /// registers of eight `f32` (the scales widened by F16C), each widened into two registers of
    /// four `f64`. The compiled [`super::GroupSums`] makes the values four at a time instead.
    ///
    /// # Safety
    /// The processor has AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in super::super) unsafe fn group_sums_avx2(x: &[f64], w: &QuantRows<'_>, first: usize, outs: &mut [f64]) {
        for (group, outs) in groups(w, first, outs) {
            for (quarter, sums) in outs.chunks_exact_mut(4).zip(sums_avx2(w.format, group, x)) {
                // SAFETY: four outputs.
                unsafe { _mm256_storeu_pd(quarter.as_mut_ptr(), sums) };
            }
        }
    }

    /// The sixteen sums of one group, four rows to a register, in the order of [`super::sums`].
    #[target_feature(enable = "avx2,fma,f16c")]
    fn sums_avx2(format: BlockFormat, group: &[u8], x: &[f64]) -> [__m256d; 4] {
        let block_bytes = GROUP * format.block_bytes();
        let head_bytes = GROUP * format.head_bytes();
        let mut totals = [_mm256_setzero_pd(); 4];
        let mut blocks = group.chunks_exact(block_bytes);
        for (s, inputs) in x.chunks(INPUTS_PER_SUM).enumerate() {
            let mut sums = [_mm256_setzero_pd(); 4];
            for (xs, grouped) in inputs.chunks_exact(BLOCK).zip(&mut blocks) {
                let (head, lines) = grouped.split_at(head_bytes);
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
                        let line: &[u8] = &lines[$l * GROUP + 8 * $h..][..8];
                        // SAFETY: eight bytes.
                        unsafe { _mm_loadl_epi64(line.as_ptr().cast()) }
                    }};
                }
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
                            let bytes = [_mm256_cvtepu8_epi32(line!(p, 0)), _mm256_cvtepu8_epi32(line!(p, 1))];
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
            for (total, sum) in totals.iter_mut().zip(sums) {
                *total = if s == 0 { sum } else { _mm256_add_pd(*total, sum) };
            }
        }
        totals
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
    fn grouped_rows_dequantize_as_stored() {
        for format in FORMATS {
            let (rows, cols) = (37, 64);
            let original = stored(format, rows, cols, 5);
            let mut grouped = original.clone();
            group_rows(format, &mut grouped, rows, cols).unwrap();
            let a = QuantRows::new(format, &original, rows, cols).unwrap();
            let b = QuantRows::grouped(format, &grouped, rows, cols).unwrap();
            for range in [0..rows, 3..35, 17..37] {
                let n = range.len() * cols;
                let (mut x, mut y) = (vec![0.0; n], vec![0.0; n]);
                dequantize_rows(&a, range.clone(), &mut x).unwrap();
                dequantize_rows(&b, range.clone(), &mut y).unwrap();
                assert_eq!(x, y, "{format:?} rows {range:?}");
                dequantize_rows_transposed(&a, range.clone(), &mut x).unwrap();
                dequantize_rows_transposed(&b, range.clone(), &mut y).unwrap();
                assert_eq!(x, y, "{format:?} rows {range:?} transposed");
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
            if Target::Avx512.is_available() {
                let mut got = vec![0.0; rows];
                // SAFETY: the processor runs AVX-512 (checked).
                unsafe { x86::group_sums(&x, &w, 0, &mut got) };
                assert!(same(&got, &want), "{format:?} AVX-512");
            }
            if Target::Avx2.is_available() && std::arch::is_x86_feature_detected!("f16c") {
                let mut got = vec![0.0; rows];
                // SAFETY: the processor runs AVX2, FMA and F16C (checked).
                unsafe { x86::group_sums_avx2(&x, &w, 0, &mut got) };
                assert!(same(&got, &want), "{format:?} AVX2");
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
