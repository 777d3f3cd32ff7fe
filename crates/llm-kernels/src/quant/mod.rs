//! Products with weights that stay in a file's quantized blocks: one row times a quantized
//! matrix (decoding one token), and stored rows dequantized into an `f64` panel (prefill).
//!
//! A GGUF weight stores its `rows` outputs one after the other, each as `cols / 32` blocks of 32
//! inputs. A block is a scale (and for `Q4_1` a minimum) and 32 small integers; its values are
//! exact in `f32`, and this module computes them with the same `f32` operations as the teaching
//! crate's `gguf::dequantize_into`, so they are the same numbers as the `f64` weights a decoder
//! loads from that file.
//!
//! [`row_times_quantized`] computes `out[j] = Σₖ x[k] · w[j][k]` with exactly the sums of
//! [`crate::gemm`]'s one-row path on the dequantized, transposed matrix (the path a decoder's
//! `f64` weights take for one token): within each block of 64 inputs `s = 0; s ← x·w + s` in input
//! order, then the blocks' sums added in block order. So a model decoding from its quantized
//! blocks produces the same bits as the same model decoding from `f64` weights — while reading
//! 0.625 bytes per weight (`Q4_1`: 20 bytes for 32) instead of 8. The order fixes the
//! arrangement: each output's sum is a chain in input order, so the vector lanes hold different
//! outputs, their values for one input side by side.
//!
//! In a file those values lie a row apart. A model therefore rearranges its blocks once, in place,
//! into the [`Layout::Grouped`] layout ([`group_rows`]): each run of [`GROUP`] = 16 rows with their
//! scales together and their bytes interleaved, so that one 16-byte load holds one input of sixteen
//! outputs (two, for the 4-bit formats), and each [`PAIR`] of groups sharing each line, so that
//! the AVX-512 kernel reads 32 outputs' values front to back. The same bytes, the same size;
//! [`QuantRows::stored_row`] gives a row back as stored. The grouped product is written once as
//! plain loops over sixteen lanes, compiled per target, and again in AVX-512 and in AVX2 (with
//! F16C) instructions, with the same values and sums. Rows as stored
//! ([`QuantRows::new`], and the rows after a matrix's last whole group) take a kernel that reads
//! eight bytes of each of eight rows and transposes them as words, compiled per target too: a
//! model's matrices are grouped, so it only sums the few rows after their last whole group. (It
//! had AVX2 and AVX-512 twins that fetched four bytes of sixteen rows with one gather, after
//! copying each group's rows near; in a decode of 2026-12-03 the grouped kernel took about 5.5 ms a
//! token where they took about 12 with their copies, and they went.)
//!
//! What bounds it: per weight, the dequantization, the widening to `f64` where the value is made
//! in `f32`, and a fused multiply-add in `f64` (the one-row path's term); and each output's chain
//! of those additions, one after the other. With one group of sixteen outputs in two AVX-512
//! registers, each input waited for the previous one's multiply-add (four cycles for sixteen
//! weights): about 16 G weights/s on one core of the Zen 5 EPYC of `docs/performance.md`, in
//! cache or from memory. The AVX-512 kernel therefore sums a pair of groups, four chains at once,
//! and makes its values in `f64` where that gives the same numbers (always for `Q8_0` and
//! `Q4_0`; for `Q4_1` where the scale's and the minimum's exponents are close, as in every block
//! of the models tried): a 4-bit value was a lookup in a register of the numbers 0–15, then one
//! fused multiply-add with the scale and the minimum. That ran about 22 G weights/s (`Q4_1`) and
//! 20 (`Q8_0`) on the Zen 5's core, in cache or from memory, where that machine's memory would
//! deliver 70–80 G weights/s at 0.625 bytes each to the whole processor; the Zen 4 EPYC, which
//! runs 512-bit operations in two halves, ran it at 9.3.
//!
//! Both x86 kernels now make a 4-bit value with one byte shuffle and one exact fused multiply-add
//! (`grouped::x86::ExactValues` with AVX2; `exact_block_512`, the same values eight at a time,
//! with AVX-512 where the processor has AVX512BW), for blocks whose halves allow it and inputs
//! that keep every sum from −0 (`grouped::sums_never_reach_minus_zero`); the lookups, and the
//! AVX2 kernel's values made in `f32` and widened, stay for the rest. On the Zen 4, one core: the
//! AVX2 kernel went from 7.6 to 9.1 G weights/s, the AVX-512 one from 9.3 to 9.8 (not measured on
//! the Zen 5; `docs/performance.md`, "2026-12-05, fourth"). `Q8_0`'s values are made the same
//! way: with AVX2 since that change, with AVX-512 (by a merge-masked shuffle) since "2026-12-06,
//! later", where the head then read its bytes at the streaming rate on an Intel Xeon.
//!
//! Where the processor also has AVX512VBMI and GFNI, a pair of groups' bytes of a line are made
//! ready once for both groups and each register's eight picked from them by one `vpermb`
//! (`exact_pair_512`: 26 operations per 64 terms where the shuffles take 30), and a pair's heads
//! are checked at once (`exact_pair_heads`). On the Xeon, one core, the two alternating in one
//! process: 4-bit products 13–14 % faster, the head's `Q8_0` 10 %; a token of SmolLM2-135M 3–17 %
//! ("2026-12-06, eleventh").

use std::ops::Range;

use rayon::prelude::*;
use thiserror::Error;

use crate::isa::{self, Isa, Kernel};
use crate::target::active;
#[cfg(target_arch = "x86_64")]
use crate::target::{Target, note};

mod grouped;
pub use grouped::{GROUP, PAIR, group_rows};

/// The block formats the products here read, as ggml stores them.
///
/// ```text
/// Q8_0  [d: f16][q: 32 × i8]                  x = q·d
/// Q4_0  [d: f16][16 bytes: 32 × u4]           x = d·(q − 8)   value j: byte j % 16, low nibble for j < 16
/// Q4_1  [d: f16][m: f16][16 bytes: 32 × u4]   x = d·q + m
/// ```
#[allow(non_camel_case_types)] // ggml's names
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockFormat {
    /// 8-bit signed values and one scale.
    Q8_0,
    /// 4-bit values around 8 and one scale.
    Q4_0,
    /// 4-bit values, a scale and a minimum.
    Q4_1,
}

/// Values per block, in every [`BlockFormat`].
pub const BLOCK: usize = 32;

impl BlockFormat {
    /// Bytes per block of [`BLOCK`] values.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
        }
    }

    /// Bytes of a block's values (after its scale and minimum).
    fn quant_bytes(self) -> usize {
        match self {
            Self::Q8_0 => 32,
            Self::Q4_0 | Self::Q4_1 => 16,
        }
    }

    /// Bytes of a block's scale (and minimum): one half of 2 bytes, two for `Q4_1`.
    fn head_bytes(self) -> usize {
        self.block_bytes() - self.quant_bytes()
    }
}

/// A matrix that cannot be read as quantized rows.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum QuantError {
    /// The row length is not a whole number of blocks.
    #[error("quantized rows of {cols} values: not a whole number of blocks of {BLOCK}")]
    RowLength {
        /// Values per row.
        cols: usize,
    },
    /// The bytes are not exactly `rows` rows of blocks.
    #[error("{rows} quantized rows of {cols} values in {format:?} need {needed} bytes, not {actual}")]
    Bytes {
        /// The format.
        format: BlockFormat,
        /// Rows.
        rows: usize,
        /// Values per row.
        cols: usize,
        /// The bytes those rows take (saturated at `usize::MAX`).
        needed: usize,
        /// The bytes given.
        actual: usize,
    },
    /// A row or output of the wrong length was given.
    #[error("{what}: {actual} values where {expected} are needed")]
    Length {
        /// Which argument.
        what: &'static str,
        /// Its length.
        actual: usize,
        /// The length it must have.
        expected: usize,
    },
}

/// How a matrix's blocks are arranged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Row after row, as a GGUF file stores them.
    Stored,
    /// Each run of [`GROUP`] rows with their bytes side by side, block by block, and each
    /// [`PAIR`] of such groups sharing each line (see [`group_rows`]); rows after the last whole
    /// group as stored.
    Grouped,
}

/// `rows` rows of `cols` values each, in blocks of `format`: a weight `[out, in]` as a GGUF file
/// stores it (`rows` = outputs, `cols` = inputs), in either [`Layout`].
#[derive(Clone, Copy, Debug)]
pub struct QuantRows<'a> {
    format: BlockFormat,
    bytes: &'a [u8],
    rows: usize,
    cols: usize,
    layout: Layout,
}

impl<'a> QuantRows<'a> {
    /// The view of `bytes` as `rows` rows of `cols` values.
    ///
    /// # Errors
    /// [`QuantError::RowLength`] if `cols` is not a multiple of [`BLOCK`]; [`QuantError::Bytes`]
    /// if `bytes` is not exactly the rows.
    pub fn new(format: BlockFormat, bytes: &'a [u8], rows: usize, cols: usize) -> Result<Self, QuantError> {
        if !cols.is_multiple_of(BLOCK) {
            return Err(QuantError::RowLength { cols });
        }
        let needed = (cols / BLOCK).checked_mul(format.block_bytes()).and_then(|r| r.checked_mul(rows));
        if needed != Some(bytes.len()) {
            let needed = needed.unwrap_or(usize::MAX);
            return Err(QuantError::Bytes { format, rows, cols, needed, actual: bytes.len() });
        }
        Ok(Self { format, bytes, rows, cols, layout: Layout::Stored })
    }

    /// The view of `bytes` as `rows` rows of `cols` values that [`group_rows`] has rearranged.
    ///
    /// # Errors
    /// As [`QuantRows::new`].
    pub fn grouped(format: BlockFormat, bytes: &'a [u8], rows: usize, cols: usize) -> Result<Self, QuantError> {
        Ok(Self { layout: Layout::Grouped, ..Self::new(format, bytes, rows, cols)? })
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The bytes of row `r` as a file stores them, whatever the layout.
    ///
    /// # Errors
    /// [`QuantError::Length`] if `r` is not a row.
    pub fn stored_row(&self, r: usize) -> Result<Vec<u8>, QuantError> {
        if r >= self.rows {
            return Err(QuantError::Length { what: "row index", actual: r, expected: self.rows });
        }
        let mut buffer = [0; grouped::MAX_BLOCK_BYTES];
        Ok((0..self.cols / BLOCK).flat_map(|b| self.block(r, b, &mut buffer).to_vec()).collect())
    }

    /// Rows in whole groups (none when stored): the rows the grouped kernel sums.
    fn grouped_rows(&self) -> usize {
        match self.layout {
            Layout::Stored => 0,
            Layout::Grouped => self.rows / GROUP * GROUP,
        }
    }

    /// The rows after the whole groups, which are as stored, as a view of their own.
    fn stored_tail(&self) -> Self {
        let whole = self.grouped_rows();
        Self {
            bytes: &self.bytes[whole * self.row_bytes()..],
            rows: self.rows - whole,
            layout: Layout::Stored,
            ..*self
        }
    }

    /// The values of block `b` of row `r`, as [`block_values`] computes them from its stored bytes.
    #[inline(always)]
    fn block_values(&self, r: usize, b: usize, out: &mut [f64; BLOCK]) {
        if r < self.grouped_rows() {
            grouped::block_values(self, r, b, out);
        } else {
            let block_bytes = self.format.block_bytes();
            block_values(self.format, &self.row(r)[b * block_bytes..][..block_bytes], out);
        }
    }

    /// The bytes of block `b` of row `r` as a file stores them (copied into `buffer` when the
    /// row is in a group).
    fn block<'b>(&'b self, r: usize, b: usize, buffer: &'b mut [u8; grouped::MAX_BLOCK_BYTES]) -> &'b [u8] {
        if r < self.grouped_rows() {
            grouped::stored_block(self, r, b, buffer)
        } else {
            let block_bytes = self.format.block_bytes();
            &self.row(r)[b * block_bytes..][..block_bytes]
        }
    }

    /// Stored rows (outputs).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Values per row (inputs).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The format.
    pub fn format(&self) -> BlockFormat {
        self.format
    }

    /// Bytes per stored row.
    fn row_bytes(&self) -> usize {
        self.cols / BLOCK * self.format.block_bytes()
    }

    /// The bytes of stored row `r`.
    fn row(&self, r: usize) -> &'a [u8] {
        &self.bytes[r * self.row_bytes()..][..self.row_bytes()]
    }
}

/// The `f32` value of the little-endian IEEE half at `bytes[0..2]` (exact).
#[inline(always)]
fn f16(bytes: &[u8]) -> f32 {
    f16_bits(u16::from_le_bytes([bytes[0], bytes[1]]))
}

/// The `f32` value of the IEEE half with bits `h` (exact).
#[inline(always)]
fn f16_bits(h: u16) -> f32 {
    let (sign, exponent, fraction) = (u32::from(h >> 15), u32::from((h >> 10) & 0x1f), u32::from(h & 0x3ff));
    let magnitude = match exponent {
        0 => fraction as f32 * (1.0 / 16_777_216.0), // subnormal: fraction · 2⁻²⁴, exact
        0x1f => f32::from_bits(0x7f80_0000 | (fraction << 13)),
        _ => f32::from_bits(((exponent + 112) << 23) | (fraction << 13)),
    };
    if sign == 1 { -magnitude } else { magnitude }
}

/// The 32 values of one block, each computed as `gguf::dequantize_into` computes it.
#[inline(always)]
fn block_values(format: BlockFormat, block: &[u8], out: &mut [f64; BLOCK]) {
    let d = f16(block);
    let m = if format == BlockFormat::Q4_1 { f16(&block[2..]) } else { 0.0 };
    let qs = &block[format.head_bytes()..];
    match format {
        BlockFormat::Q8_0 => values(format, d, m, |i| qs[i], out),
        BlockFormat::Q4_0 | BlockFormat::Q4_1 => values(format, d, m, |i| grouped::nibble(qs, i), out),
    }
}

/// The 32 values of a block of `format` with scale `d` (and minimum `m`, for `Q4_1`) whose value
/// `i` is stored as `q(i)` (the byte, read as `i8`, for `Q8_0`; 0–15 for the 4-bit formats), each
/// computed as `gguf::dequantize_into` computes it.
#[inline(always)]
fn values(format: BlockFormat, d: f32, m: f32, q: impl Fn(usize) -> u8, out: &mut [f64; BLOCK]) {
    for (i, x) in out.iter_mut().enumerate() {
        *x = value(format, d, m, q(i));
    }
}

/// The value stored as `q` in a block of `format` with scale `d` (and minimum `m`), as
/// `gguf::dequantize_into` computes it: every kernel here makes its values with this (with
/// `format` a constant where they are compiled per format).
#[inline(always)]
fn value(format: BlockFormat, d: f32, m: f32, q: u8) -> f64 {
    match format {
        BlockFormat::Q8_0 => f64::from(f32::from(q as i8) * d),
        // q − 8 for Q4_0 is exact in f32, as the i8 subtraction is
        BlockFormat::Q4_0 => f64::from(d * f32::from(q as i8 - 8)),
        BlockFormat::Q4_1 => f64::from(d * f32::from(q) + m),
    }
}

/// Stored rows `rows` of `w`, dequantized into `out` (row-major, `rows.len() × cols`): a panel
/// for a prefill's product.
///
/// # Errors
/// [`QuantError::Length`] if the range passes the last row or `out` is not that panel's size.
pub fn dequantize_rows(w: &QuantRows<'_>, rows: Range<usize>, out: &mut [f64]) -> Result<(), QuantError> {
    if rows.end > w.rows || rows.start > rows.end {
        return Err(QuantError::Length { what: "rows to dequantize", actual: rows.end, expected: w.rows });
    }
    let expected = rows.len() * w.cols;
    if out.len() != expected {
        return Err(QuantError::Length { what: "dequantized panel", actual: out.len(), expected });
    }
    isa::run(active(), Dequantize { w, rows, out });
    Ok(())
}

/// [`dequantize_rows`]' loop, compiled per target (a plain function, or a closure, would be
/// compiled for the baseline: two lanes at a time where AVX-512 makes sixteen).
struct Dequantize<'w, 'o> {
    w: &'w QuantRows<'w>,
    rows: Range<usize>,
    out: &'o mut [f64],
}

impl Kernel for Dequantize<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) {
        let Self { w, rows, out } = self;
        let mut values = [0.0; BLOCK];
        for (r, dst) in rows.zip(out.chunks_exact_mut(w.cols.max(1))) {
            for (b, dst) in dst.chunks_exact_mut(BLOCK).enumerate() {
                w.block_values(r, b, &mut values);
                dst.copy_from_slice(&values);
            }
        }
    }
}

/// Stored rows `rows` of `w`, dequantized and transposed into `out` (`cols × rows.len()`,
/// row-major: each input's weights for every output in turn) — the `[in, out]` layout of a
/// decoder's `f64` weight, for a prefill's product. One task per block of 32 inputs writes those
/// 32 rows of `out`, a group's sixteen outputs at a time where `w` keeps them side by side, else
/// eight at a time (whole cache lines), so each weight is read from its blocks once and written
/// once. With `parallel` the tasks are spread over the current rayon pool; without, they run on
/// the calling thread (a stripe of a product that is itself one task of many).
///
/// A grouped matrix's whole groups are made by explicit kernels with AVX-512, and with AVX2 where
/// the processor has F16C: the operations of the plain loops, sixteen (eight) lanes to a
/// register, each block asking for the next one's bytes before its values are made. On a Zen 4
/// core, `Q4_1` matrices from memory in stripes of 96 rows, G values a second: 5.3–5.5 against
/// 4.3–4.5 (576 inputs) and 5.0–5.2 against 4.0–4.1 (1536) with AVX-512, 4.7–4.8 against 3.3–3.4
/// and 4.4–4.7 against 3.1 with AVX2; a two-token prompt of SmolLM2 took 22.0–24.9 ms against
/// 25.9–28.3 (`docs/performance.md`).
///
/// # Errors
/// As [`dequantize_rows`].
pub fn dequantize_rows_transposed(
    w: &QuantRows<'_>,
    rows: Range<usize>,
    out: &mut [f64],
    parallel: bool,
) -> Result<(), QuantError> {
    if rows.end > w.rows || rows.start > rows.end {
        return Err(QuantError::Length { what: "rows to dequantize", actual: rows.end, expected: w.rows });
    }
    let (n, expected) = (rows.len(), rows.len() * w.cols);
    if out.len() != expected {
        return Err(QuantError::Length { what: "dequantized panel", actual: out.len(), expected });
    }
    if n == 0 {
        return Ok(());
    }
    let target = active();
    let checked = isa::Checked::new(target);
    let block = |(b, lines): (usize, &mut [f64])| {
        let rows = rows.clone();
        #[cfg(target_arch = "x86_64")]
        if w.layout == Layout::Grouped {
            if target == Target::Avx512 && target.is_available() {
                note(target);
                // SAFETY: the processor runs AVX-512 (`is_available`).
                #[allow(unsafe_code)]
                return unsafe { grouped::x86::transposed_block_512(w, rows, b, lines) };
            }
            if target == Target::Avx2 && target.is_available() && std::arch::is_x86_feature_detected!("f16c") {
                note(target);
                // SAFETY: the processor runs AVX2 and FMA (`is_available`) and F16C (checked).
                #[allow(unsafe_code)]
                return unsafe { grouped::x86::transposed_block_avx2(w, rows, b, lines) };
            }
        }
        checked.run(TransposedBlock { w, rows, b, lines })
    };
    if parallel {
        out.par_chunks_mut(BLOCK * n).enumerate().for_each(block);
    } else {
        out.chunks_mut(BLOCK * n).enumerate().for_each(block);
    }
    Ok(())
}

/// Block `b` of stored rows `rows` of `w`, written transposed into `lines` (its 32 inputs' lines
/// of `rows.len()` values): [`dequantize_rows_transposed`]'s task, compiled per target.
struct TransposedBlock<'w, 'o> {
    w: &'w QuantRows<'w>,
    rows: Range<usize>,
    b: usize,
    lines: &'o mut [f64],
}

impl Kernel for TransposedBlock<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) {
        let Self { w, rows, b, lines } = self;
        transposed_block::<PlainGroups>(w, rows, b, lines);
    }
}

/// How [`transposed_block`] writes a whole group's values: [`grouped::group_values`]'s plain
/// loops, or an explicit kernel's. (A type, not a closure: a closure's body would be compiled for
/// the baseline instruction set, outside the target's function.)
trait GroupValues {
    /// Block `b` of the group from row `first` of `w`, value `i` of row `first + c` at
    /// `out[i · stride + c]`, as [`grouped::group_values`] writes it.
    fn write(w: &QuantRows<'_>, first: usize, b: usize, out: &mut [f64], stride: usize);
}

/// [`grouped::group_values`], compiled in the target's function.
struct PlainGroups;

impl GroupValues for PlainGroups {
    #[inline(always)]
    fn write(w: &QuantRows<'_>, first: usize, b: usize, out: &mut [f64], stride: usize) {
        grouped::group_values(w, first, b, out, stride);
    }
}

/// The body of [`TransposedBlock`], its whole groups written by `G`.
#[inline(always)]
fn transposed_block<G: GroupValues>(w: &QuantRows<'_>, rows: Range<usize>, b: usize, lines: &mut [f64]) {
    const SIDE: usize = 8;
    let n = rows.len();
    let mut square = [[0.0; BLOCK]; SIDE]; // [output][input]
    let mut i0 = 0;
    while i0 < n {
        let r = rows.start + i0;
        if r.is_multiple_of(GROUP) && r + GROUP <= w.grouped_rows() && i0 + GROUP <= n {
            // a whole group: its values already lie input by input
            G::write(w, r, b, &mut lines[i0..], n);
            i0 += GROUP;
        } else if i0 + SIDE <= n {
            for (i, values) in square.iter_mut().enumerate() {
                w.block_values(r + i, b, values);
            }
            for (c, line) in lines.chunks_exact_mut(n).enumerate() {
                for (i, values) in square.iter().enumerate() {
                    line[i0 + i] = values[c];
                }
            }
            i0 += SIDE;
        } else {
            w.block_values(r, b, &mut square[0]);
            for (c, line) in lines.chunks_exact_mut(n).enumerate() {
                line[i0] = square[0][c];
            }
            i0 += 1;
        }
    }
}

/// Inputs per partial sum: the block of the one-row path in [`crate::gemm`], whose order the
/// product here repeats.
const INPUTS_PER_SUM: usize = 64;
/// Outputs per parallel task (a fixed number: the split never changes a bit anyway, each output
/// being summed alone). Three pairs of groups: 96 divides the widths of SmolLM2's matrices (192,
/// 576, 1536 and 49152 outputs), so two threads get equal shares where tasks of 256 gave one of
/// them 320 of 576 outputs. A token decoded after 16 positions took 8.90–9.02 ms against
/// 9.07–9.32 with 256 (five alternations, Zen 4).
const OUTPUTS_PER_TASK: usize = 96;
const _: () =
    assert!(OUTPUTS_PER_TASK > 0 && OUTPUTS_PER_TASK.is_multiple_of(PAIR * GROUP), "tasks start at a pair of groups");
/// Outputs computed together: the panel's width.
const LANES: usize = 8;

/// `out[j] = Σₖ x[k] · w[j][k]` for every stored row `j` of `w`: one row (`cols` values) times
/// the transposed quantized matrix, with the sums of the one-row path (see the module's text),
/// on [`active`]'s target; `parallel` spreads the outputs over the current rayon pool.
///
/// # Errors
/// [`QuantError::Length`] if `x` is not `cols` long or `out` not `rows`.
pub fn row_times_quantized(x: &[f64], w: &QuantRows<'_>, out: &mut [f64], parallel: bool) -> Result<(), QuantError> {
    rows_times_quantized(x, &mut [(w, out)], parallel)
}

/// [`row_times_quantized`] of one row `x` by several matrices (a token's query, key and value
/// projections; the feed-forward's gate and up), in one parallel pass: one wake-up of the worker
/// threads instead of one per matrix. Each output equals [`row_times_quantized`]'s, bitwise.
///
/// # Errors
/// As [`row_times_quantized`], for the first pair that does not fit.
pub fn rows_times_quantized(
    x: &[f64],
    products: &mut [(&QuantRows<'_>, &mut [f64])],
    parallel: bool,
) -> Result<(), QuantError> {
    for (w, out) in products.iter() {
        if x.len() != w.cols {
            return Err(QuantError::Length {
                what: "row times quantized matrix: row",
                actual: x.len(),
                expected: w.cols,
            });
        }
        if out.len() != w.rows {
            return Err(QuantError::Length {
                what: "row times quantized matrix: output",
                actual: out.len(),
                expected: w.rows,
            });
        }
    }
    let target = active();
    // whether the x86 kernels may make a zero value +0 where `value` gives −0 (once per call)
    #[cfg(target_arch = "x86_64")]
    let no_minus_zero = grouped::sums_never_reach_minus_zero(x);
    // each task: a view, its first output and its outputs; a grouped matrix's whole groups, then
    // its rows after them as a stored view of their own
    let mut tasks: Vec<(QuantRows<'_>, usize, &mut [f64])> = Vec::new();
    for (w, out) in products.iter_mut() {
        let (groups, tail) = out.split_at_mut(w.grouped_rows());
        for (view, out) in [(**w, groups), (w.stored_tail(), tail)] {
            tasks.extend(
                out.chunks_mut(OUTPUTS_PER_TASK).enumerate().map(|(t, outs)| (view, t * OUTPUTS_PER_TASK, outs)),
            );
        }
    }
    let task = |(w, first, outs): (QuantRows<'_>, usize, &mut [f64])| {
        let w = &w;
        if w.layout == Layout::Grouped {
            #[cfg(target_arch = "x86_64")]
            if target == Target::Avx512 && target.is_available() {
                note(target);
                // SAFETY: the processor runs AVX-512 (`is_available`).
                #[allow(unsafe_code)]
                unsafe {
                    grouped::x86::group_sums(x, w, first, outs, no_minus_zero)
                };
                return;
            }
            #[cfg(target_arch = "x86_64")]
            if target == Target::Avx2 && target.is_available() && std::arch::is_x86_feature_detected!("f16c") {
                note(target);
                // SAFETY: the processor runs AVX2 and FMA (`is_available`) and F16C (checked).
                #[allow(unsafe_code)]
                unsafe {
                    grouped::x86::group_sums_avx2(x, w, first, outs, no_minus_zero)
                };
                return;
            }
            return isa::run(target, grouped::GroupSums { x, w, first, outs });
        }
        isa::run(target, Outputs { x, w, first, outs });
    };
    if parallel && tasks.len() > 1 {
        tasks.into_par_iter().for_each(task);
    } else {
        tasks.into_iter().for_each(task);
    }
    Ok(())
}

/// Outputs `first..first + outs.len()` of [`row_times_quantized`], compiled per target.
struct Outputs<'x, 'w, 'o> {
    x: &'x [f64],
    w: &'w QuantRows<'w>,
    first: usize,
    outs: &'o mut [f64],
}

impl Kernel for Outputs<'_, '_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, _isa: I) {
        let Self { x, w, first, outs } = self;
        let block_bytes = w.format.block_bytes();
        let mut panel = [[0.0; LANES]; INPUTS_PER_SUM];
        for (g, group) in outs.chunks_mut(LANES).enumerate() {
            // a group short of eight repeats its last row; the extra lanes are not written out
            let mut rows: [&[u8]; LANES] = [&[]; LANES];
            for (c, row) in rows.iter_mut().enumerate() {
                *row = w.row((first + g * LANES + c).min(w.rows - 1));
            }
            let mut totals = [0.0; LANES];
            for (s, inputs) in x.chunks(INPUTS_PER_SUM).enumerate() {
                // the panel: input i of this sum down, the eight outputs across
                for (h, half) in panel.chunks_exact_mut(BLOCK).take(inputs.len() / BLOCK).enumerate() {
                    let at = (s * (INPUTS_PER_SUM / BLOCK) + h) * block_bytes;
                    if let Ok(half) = <&mut [[f64; LANES]; BLOCK]>::try_from(half) {
                        block_panel(w.format, &rows, at, half);
                    }
                }
                let mut partial = [0.0; LANES];
                for (&a, line) in inputs.iter().zip(&panel) {
                    for (p, &v) in partial.iter_mut().zip(line) {
                        *p = a.mul_add(v, *p);
                    }
                }
                for (total, p) in totals.iter_mut().zip(partial) {
                    *total = if s == 0 { p } else { *total + p };
                }
            }
            for (out, total) in group.iter_mut().zip(totals) {
                *out = total;
            }
        }
    }
}

/// The block at byte `at` of eight rows, as a panel: `panel[i][c]` = value `i` of row `c`.
///
/// The bytes of the eight rows are read eight at a time as words and transposed
/// ([`transpose_bytes`]), so that each word holds one byte position of all eight rows; then every
/// step is the same operation on eight lanes (the rows), which the compiler turns into vector
/// instructions, with each value computed as [`block_values`] computes it. (Plain loops, no
/// closures: a closure would be compiled for the baseline instruction set, outside the kernel.)
#[inline(always)]
fn block_panel(format: BlockFormat, rows: &[&[u8]; LANES], at: usize, panel: &mut [[f64; LANES]; BLOCK]) {
    let mut d = [0.0f32; LANES];
    let mut m = [0.0f32; LANES];
    for c in 0..LANES {
        d[c] = f16(&rows[c][at..]);
        if format == BlockFormat::Q4_1 {
            m[c] = f16(&rows[c][at + 2..]);
        }
    }
    match format {
        BlockFormat::Q8_0 => {
            for k in 0..4 {
                let bytes = transposed_words(rows, at + 2 + 8 * k);
                for j in 0..8 {
                    let b = bytes[j].to_le_bytes();
                    let line = &mut panel[8 * k + j];
                    for c in 0..LANES {
                        line[c] = f64::from(f32::from(b[c] as i8) * d[c]);
                    }
                }
            }
        }
        BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
            let (offset, shift) = if format == BlockFormat::Q4_1 { (4, 0.0) } else { (2, 8.0) };
            for k in 0..2 {
                let bytes = transposed_words(rows, at + offset + 8 * k);
                for j in 0..8 {
                    let b = bytes[j].to_le_bytes();
                    let mut low = [0.0f32; LANES];
                    let mut high = [0.0f32; LANES];
                    for c in 0..LANES {
                        // q − 8 for Q4_0 is exact in f32, as the i8 subtraction is
                        low[c] = f32::from(b[c] & 0x0f) - shift;
                        high[c] = f32::from(b[c] >> 4) - shift;
                    }
                    let (first, second) = panel.split_at_mut(16);
                    let (low_line, high_line) = (&mut first[8 * k + j], &mut second[8 * k + j]);
                    for c in 0..LANES {
                        // Q4_0 has no minimum: adding 0 would turn a −0 into +0, so it is not added
                        let (lo, hi) = (d[c] * low[c], d[c] * high[c]);
                        if format == BlockFormat::Q4_1 {
                            low_line[c] = f64::from(lo + m[c]);
                            high_line[c] = f64::from(hi + m[c]);
                        } else {
                            low_line[c] = f64::from(lo);
                            high_line[c] = f64::from(hi);
                        }
                    }
                }
            }
        }
    }
}

/// The eight bytes at `at` of each of the eight rows, transposed: word `j` holds byte `j` of
/// row `c` in its byte `c`.
#[inline(always)]
fn transposed_words(rows: &[&[u8]; LANES], at: usize) -> [u64; 8] {
    let mut words = [0u64; 8];
    for c in 0..LANES {
        let b = &rows[c][at..at + 8];
        words[c] = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    }
    transpose_bytes(words)
}

/// An 8×8 matrix of bytes, row `r` the bytes of word `r` (least significant first), transposed:
/// byte `c` of word `r` becomes byte `r` of word `c`. Three rounds swap the off-diagonal halves of
/// 4×4, 2×2 and 1×1 blocks.
#[inline(always)]
fn transpose_bytes(mut x: [u64; 8]) -> [u64; 8] {
    /// Swaps the bytes of word `a` above `shift` bits (under `mask` after the shift) with those of
    /// word `b` below it.
    #[inline(always)]
    fn swap(x: &mut [u64; 8], a: usize, b: usize, shift: u32, mask: u64) {
        let t = ((x[a] >> shift) ^ x[b]) & mask;
        x[a] ^= t << shift;
        x[b] ^= t;
    }
    // written out, so that every shift and mask is a constant
    const HALVES: u64 = 0x0000_0000_ffff_ffff;
    const QUARTERS: u64 = 0x0000_ffff_0000_ffff;
    const EIGHTHS: u64 = 0x00ff_00ff_00ff_00ff;
    swap(&mut x, 0, 4, 32, HALVES);
    swap(&mut x, 1, 5, 32, HALVES);
    swap(&mut x, 2, 6, 32, HALVES);
    swap(&mut x, 3, 7, 32, HALVES);
    swap(&mut x, 0, 2, 16, QUARTERS);
    swap(&mut x, 1, 3, 16, QUARTERS);
    swap(&mut x, 4, 6, 16, QUARTERS);
    swap(&mut x, 5, 7, 16, QUARTERS);
    swap(&mut x, 0, 1, 8, EIGHTHS);
    swap(&mut x, 2, 3, 8, EIGHTHS);
    swap(&mut x, 4, 5, 8, EIGHTHS);
    swap(&mut x, 6, 7, 8, EIGHTHS);
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_widen_exactly() {
        for (bits, value) in
            [(0x3c00u16, 1.0f32), (0xbc00, -1.0), (0x3800, 0.5), (0x0001, 2f32.powi(-24)), (0x7bff, 65504.0)]
        {
            assert_eq!(f16(&bits.to_le_bytes()), value);
        }
    }

    #[test]
    fn bytes_transpose() {
        let x: [u64; 8] = std::array::from_fn(|r| u64::from_le_bytes(std::array::from_fn(|c| (16 * r + c) as u8)));
        let t = transpose_bytes(x);
        for (c, word) in t.iter().enumerate() {
            assert_eq!(word.to_le_bytes(), std::array::from_fn(|r| (16 * r + c) as u8));
        }
    }

    #[test]
    fn the_panel_holds_each_rows_values() {
        let mut seed = 1u64;
        let mut byte = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as u8
        };
        for format in [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::Q4_1] {
            let blocks: Vec<Vec<u8>> = (0..LANES)
                .map(|_| {
                    let mut b: Vec<u8> = (0..format.block_bytes()).map(|_| byte()).collect();
                    b[1] &= 0x3b; // finite scales
                    b[3] &= 0x3b;
                    b
                })
                .collect();
            let rows: [&[u8]; LANES] = std::array::from_fn(|c| blocks[c].as_slice());
            let mut panel = [[0.0; LANES]; BLOCK];
            block_panel(format, &rows, 0, &mut panel);
            for (c, block) in blocks.iter().enumerate() {
                let mut values = [0.0; BLOCK];
                block_values(format, block, &mut values);
                for (i, v) in values.iter().enumerate() {
                    assert_eq!(panel[i][c].to_bits(), v.to_bits(), "{format:?} row {c} value {i}");
                }
            }
        }
    }

    #[test]
    fn wrong_sizes_are_errors() {
        assert_eq!(QuantRows::new(BlockFormat::Q4_1, &[0; 20], 1, 31).unwrap_err(), QuantError::RowLength { cols: 31 });
        assert!(matches!(
            QuantRows::new(BlockFormat::Q4_1, &[0; 21], 1, 32),
            Err(QuantError::Bytes { needed: 20, .. })
        ));
        assert!(matches!(
            QuantRows::new(BlockFormat::Q8_0, &[], usize::MAX, 64),
            Err(QuantError::Bytes { needed: usize::MAX, .. })
        ));
        let w = QuantRows::new(BlockFormat::Q8_0, &[0; 68], 2, 32).unwrap();
        assert!(row_times_quantized(&[0.0; 31], &w, &mut [0.0; 2], false).is_err());
        assert!(row_times_quantized(&[0.0; 32], &w, &mut [0.0; 3], false).is_err());
        assert!(dequantize_rows(&w, 1..3, &mut [0.0; 64]).is_err());
        assert!(dequantize_rows(&w, 0..1, &mut [0.0; 33]).is_err());
        assert!(dequantize_rows_transposed(&w, 1..3, &mut [0.0; 64], true).is_err());
        assert!(dequantize_rows_transposed(&w, 0..1, &mut [0.0; 33], false).is_err());
    }

    #[test]
    fn the_transposed_panel_is_the_rows_transposed() {
        // 19 rows (two squares of eight and three alone) of 64 values, from the second row on
        let (rows, cols) = (20, 64);
        for format in [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::Q4_1] {
            let row_bytes = cols / BLOCK * format.block_bytes();
            let mut bytes: Vec<u8> = (0..rows * row_bytes).map(|i| (i * 37 % 251) as u8).collect();
            for block in bytes.chunks_exact_mut(format.block_bytes()) {
                block[1] &= 0x3b; // finite scales
                block[3] &= 0x3b;
            }
            let w = QuantRows::new(format, &bytes, rows, cols).unwrap();
            let mut plain = vec![0.0; 19 * cols];
            dequantize_rows(&w, 1..rows, &mut plain).unwrap();
            let mut transposed = vec![0.0; 19 * cols];
            dequantize_rows_transposed(&w, 1..rows, &mut transposed, true).unwrap();
            for (r, row) in plain.chunks_exact(cols).enumerate() {
                for (k, v) in row.iter().enumerate() {
                    assert_eq!(transposed[k * 19 + r].to_bits(), v.to_bits(), "{format:?} row {r} input {k}");
                }
            }
            assert!(dequantize_rows_transposed(&w, 3..3, &mut [], false).is_ok());
        }
    }
}
