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
//! `f64` weights take for one token): within each block of 64 inputs `s = 0; s += x·w` in input
//! order, then the blocks' sums added in block order. So a model decoding from its quantized
//! blocks produces the same bits as the same model decoding from `f64` weights — while reading
//! 0.56 bytes per weight (`Q4_1`) instead of 8. Eight outputs are computed together: their eight
//! stored rows are dequantized block by block into a small panel whose columns are the outputs,
//! and the sums run down the panel, one vector of eight outputs per input.

use std::ops::Range;

use rayon::prelude::*;
use thiserror::Error;

use crate::isa::{self, Isa, Kernel};
use crate::target::active;

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

/// `rows` stored rows of `cols` values each, in blocks of `format`: a weight `[out, in]` as a
/// GGUF file stores it (`rows` = outputs, `cols` = inputs).
#[derive(Clone, Copy, Debug)]
pub struct QuantRows<'a> {
    format: BlockFormat,
    bytes: &'a [u8],
    rows: usize,
    cols: usize,
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
        Ok(Self { format, bytes, rows, cols })
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

    /// The bytes of stored row `r`.
    fn row(&self, r: usize) -> &'a [u8] {
        let len = self.cols / BLOCK * self.format.block_bytes();
        &self.bytes[r * len..][..len]
    }
}

/// The `f32` value of the little-endian IEEE half at `bytes[0..2]` (exact).
#[inline(always)]
fn f16(bytes: &[u8]) -> f32 {
    let h = u16::from_le_bytes([bytes[0], bytes[1]]);
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
    match format {
        BlockFormat::Q8_0 => {
            let d = f16(block);
            for (x, &q) in out.iter_mut().zip(&block[2..34]) {
                *x = f64::from(f32::from(q as i8) * d);
            }
        }
        BlockFormat::Q4_0 => {
            let d = f16(block);
            let qs = &block[2..18];
            for j in 0..16 {
                out[j] = f64::from(d * f32::from((qs[j] & 0x0f) as i8 - 8));
                out[j + 16] = f64::from(d * f32::from((qs[j] >> 4) as i8 - 8));
            }
        }
        BlockFormat::Q4_1 => {
            let (d, m) = (f16(block), f16(&block[2..]));
            let qs = &block[4..20];
            for j in 0..16 {
                out[j] = f64::from(d * f32::from(qs[j] & 0x0f) + m);
                out[j + 16] = f64::from(d * f32::from(qs[j] >> 4) + m);
            }
        }
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
    let block_bytes = w.format.block_bytes();
    let mut values = [0.0; BLOCK];
    for (r, dst) in rows.zip(out.chunks_exact_mut(w.cols.max(1))) {
        for (block, dst) in w.row(r).chunks_exact(block_bytes).zip(dst.chunks_exact_mut(BLOCK)) {
            block_values(w.format, block, &mut values);
            dst.copy_from_slice(&values);
        }
    }
    Ok(())
}

/// Inputs per partial sum: the block of the one-row path in [`crate::gemm`], whose order the
/// product here repeats.
const INPUTS_PER_SUM: usize = 64;
/// Outputs per parallel task (a fixed number: the split never changes a bit anyway, each output
/// being summed alone).
const OUTPUTS_PER_TASK: usize = 256;
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
    let mut tasks: Vec<(&QuantRows<'_>, usize, &mut [f64])> = Vec::new();
    for (w, out) in products.iter_mut() {
        let w: &QuantRows<'_> = w;
        tasks.extend(out.chunks_mut(OUTPUTS_PER_TASK).enumerate().map(|(t, outs)| (w, t * OUTPUTS_PER_TASK, outs)));
    }
    let task = |(w, first, outs): (&QuantRows<'_>, usize, &mut [f64])| {
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
        let mut values = [0.0; BLOCK];
        for (g, group) in outs.chunks_mut(LANES).enumerate() {
            let rows: [&[u8]; LANES] = std::array::from_fn(|c| w.row((first + g * LANES + c).min(w.rows - 1)));
            let mut totals = [0.0; LANES];
            for (s, inputs) in x.chunks(INPUTS_PER_SUM).enumerate() {
                // the panel: input i of this sum down the rows, output c across
                let mut panel = [[0.0; LANES]; INPUTS_PER_SUM];
                for (c, row) in rows.iter().enumerate() {
                    for (h, half) in panel.chunks_exact_mut(BLOCK).take(inputs.len() / BLOCK).enumerate() {
                        let b = s * (INPUTS_PER_SUM / BLOCK) + h;
                        block_values(w.format, &row[b * block_bytes..][..block_bytes], &mut values);
                        for (line, &v) in half.iter_mut().zip(&values) {
                            line[c] = v;
                        }
                    }
                }
                let mut partial = [0.0; LANES];
                for (&a, line) in inputs.iter().zip(&panel) {
                    for (p, &v) in partial.iter_mut().zip(line) {
                        *p += a * v;
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
    }
}
