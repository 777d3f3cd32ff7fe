//! Dequantization: the numbers of a tensor, block by block, as `f64`.
//!
//! Each block format is a few lines. The arithmetic is done exactly as the reference reader does
//! it (the `gguf` Python package, `gguf.quants.dequantize`): f16 scales are widened to f32, every
//! product and sum is an f32 operation in the same order (Rust never fuses `a·b + c` into one
//! rounding), and only the final f32 is widened to f64. So the weights are bit-identical to the
//! reference's (`tests/gguf_dequantize.rs` compares every value bitwise).
//!
//! ```text
//! Q8_0  [d: f16][q: 32 × i8]                         x = q·d
//! Q4_0  [d: f16][16 bytes: 32 × u4]                  x = d·(q − 8)     value j: byte j%16, low nibble for j < 16
//! Q4_1  [d: f16][m: f16][16 bytes: 32 × u4]          x = d·q + m
//! Q4_K  [d: f16][dmin: f16][12 bytes: 8 × (sc, m) of 6 bits][128 bytes: 256 × u4]
//!       sub-block s of 32:                            x = (d·sc_s)·q − dmin·m_s
//! Q6_K  [128 bytes: low 4 bits][64 bytes: high 2 bits][16 × i8 scales][d: f16]
//!       sub-block s of 16:                            x = (d·sc_s)·(q − 32)
//! ```

use super::{GgufError, TensorType};
use crate::model::{bf16_to_f64, f16_to_f64};

/// The f32 value of the little-endian f16 at the start of `bytes` (exact: every f16 is an f32).
fn f16(bytes: &[u8]) -> f32 {
    f16_to_f64(u16::from_le_bytes([bytes[0], bytes[1]])) as f32
}

/// `Q8_0`: `x = q·d`.
fn q8_0(block: &[u8; 34], out: &mut [f64]) {
    let d = f16(&block[..2]);
    for (x, &q) in out.iter_mut().zip(&block[2..]) {
        *x = f64::from(f32::from(q as i8) * d);
    }
}

/// The 4-bit value `j` of a 32-value block whose nibbles are in `qs` (16 bytes): the low nibbles
/// are values 0..16, the high nibbles values 16..32.
fn nibble(qs: &[u8], j: usize) -> u8 {
    (qs[j % 16] >> (4 * (j / 16))) & 0x0f
}

/// `Q4_0`: `x = d·(q − 8)`.
fn q4_0(block: &[u8; 18], out: &mut [f64]) {
    let d = f16(&block[..2]);
    for (j, x) in out.iter_mut().enumerate() {
        *x = f64::from(d * f32::from(nibble(&block[2..], j) as i8 - 8));
    }
}

/// `Q4_1`: `x = d·q + m` (the product rounded to f32, then the sum).
fn q4_1(block: &[u8; 20], out: &mut [f64]) {
    let (d, m) = (f16(&block[..2]), f16(&block[2..4]));
    for (j, x) in out.iter_mut().enumerate() {
        *x = f64::from(d * f32::from(nibble(&block[4..], j)) + m);
    }
}

/// The 6-bit scale and minimum of sub-block `s` (0..8) of a `Q4_K` block, from its 12 bytes:
///
/// ```text
/// bytes 0..4    sc of s = 0..4 (low 6 bits); bits 6–7: high bits of sc of s + 4
/// bytes 4..8    m  of s = 0..4 (low 6 bits); bits 6–7: high bits of m  of s + 4
/// bytes 8..12   low 4 bits: sc of s + 4; high 4 bits: m of s + 4
/// ```
fn q4_k_scale_min(scales: &[u8], s: usize) -> (u8, u8) {
    if s < 4 {
        (scales[s] & 0x3f, scales[s + 4] & 0x3f)
    } else {
        let packed = scales[s + 4];
        ((packed & 0x0f) | ((scales[s - 4] >> 6) << 4), (packed >> 4) | ((scales[s] >> 6) << 4))
    }
}

/// `Q4_K`: sub-block `s` of 32 values has `x = (d·sc_s)·q − dmin·m_s`. Its 4-bit values are the
/// low nibbles (even `s`) or the high nibbles (odd `s`) of the 32 bytes `32·(s/2)..`.
fn q4_k(block: &[u8; 144], out: &mut [f64]) {
    let (d, dmin) = (f16(&block[..2]), f16(&block[2..4]));
    let (scales, qs) = (&block[4..16], &block[16..]);
    for (s, sub) in out.chunks_exact_mut(32).enumerate() {
        let (sc, m) = q4_k_scale_min(scales, s);
        let (scale, min) = (d * f32::from(sc), dmin * f32::from(m));
        let bytes = &qs[32 * (s / 2)..][..32];
        for (x, &byte) in sub.iter_mut().zip(bytes) {
            let q = (byte >> (4 * (s % 2))) & 0x0f;
            *x = f64::from(scale * f32::from(q) - min);
        }
    }
}

/// `Q6_K`: value `e` of 256 is `(d·sc_{e/16})·(q − 32)` with the 6-bit `q` assembled from two
/// places. The block is two halves of 128 values; within a half, value `i` (0..128) takes
///
/// ```text
/// low 4 bits:   byte ql[64·half + i % 64],  low nibble for i < 64, high nibble after
/// high 2 bits:  byte qh[32·half + i % 32],  bits 2·(i / 32) and 2·(i / 32) + 1
/// ```
fn q6_k(block: &[u8; 210], out: &mut [f64]) {
    let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
    let d = f16(&block[208..]);
    for (e, x) in out.iter_mut().enumerate() {
        let (half, i) = (e / 128, e % 128);
        let low = (ql[64 * half + i % 64] >> (4 * (i / 64))) & 0x0f;
        let high = (qh[32 * half + i % 32] >> (2 * (i / 32))) & 0x03;
        let q = (low | (high << 4)) as i8 - 32;
        let scale = d * f32::from(scales[e / 16] as i8);
        *x = f64::from(scale * f32::from(q));
    }
}

/// Decodes the blocks of `bytes` with `block`, `N` bytes for `per_block` values.
fn blocks<const N: usize>(bytes: &[u8], out: &mut [f64], per_block: usize, block: fn(&[u8; N], &mut [f64])) {
    let (whole, _) = bytes.as_chunks::<N>(); // the lengths were checked: no remainder
    for (b, values) in whole.iter().zip(out.chunks_exact_mut(per_block)) {
        block(b, values);
    }
}

/// Decodes `out.len()` values of type `tensor_type` from `bytes` into `out`, as `f64`.
///
/// `out.len()` must be a whole number of blocks and `bytes` exactly those blocks. `tensor` names
/// the tensor in errors.
///
/// ```
/// use llm_from_scratch::gguf::{TensorType, dequantize_into};
/// // one Q8_0 block: scale d = 0.5 (f16 0x3800), then q = 0, 1, −2, 3, 0, …
/// let mut block = vec![0x00, 0x38, 0, 1, 0xfe, 3];
/// block.resize(34, 0);
/// let mut out = [0.0; 32];
/// dequantize_into("w", TensorType::Q8_0, &block, &mut out)?;
/// assert_eq!(out[..4], [0.0, 0.5, -1.0, 1.5]);
/// # Ok::<(), llm_from_scratch::gguf::GgufError>(())
/// ```
///
/// # Errors
/// [`GgufError::UnsupportedTensorType`] for a type other than F32, F16, BF16, Q8_0, Q4_0, Q4_1,
/// Q4_K and Q6_K; [`GgufError::TensorData`] when the lengths do not match.
pub fn dequantize_into(tensor: &str, tensor_type: TensorType, bytes: &[u8], out: &mut [f64]) -> Result<(), GgufError> {
    if !tensor_type.dequantizable() {
        return Err(GgufError::UnsupportedTensorType { tensor: tensor.to_string(), type_name: tensor_type.name() });
    }
    let (per_block, block_bytes) = (tensor_type.block_values() as usize, tensor_type.block_bytes() as usize);
    let expected = (out.len() / per_block).checked_mul(block_bytes);
    if !out.len().is_multiple_of(per_block) || expected != Some(bytes.len()) {
        return Err(GgufError::TensorData {
            tensor: tensor.to_string(),
            offset: 0,
            size: bytes.len() as u64,
            reason: format!("does not hold {} values of {} exactly", out.len(), tensor_type.name()),
        });
    }
    match tensor_type {
        TensorType::F32 => blocks::<4>(bytes, out, 1, |b, x| x[0] = f64::from(f32::from_le_bytes(*b))),
        TensorType::F16 => blocks::<2>(bytes, out, 1, |b, x| x[0] = f16_to_f64(u16::from_le_bytes(*b))),
        TensorType::BF16 => blocks::<2>(bytes, out, 1, |b, x| x[0] = bf16_to_f64(u16::from_le_bytes(*b))),
        TensorType::Q8_0 => blocks(bytes, out, 32, q8_0),
        TensorType::Q4_0 => blocks(bytes, out, 32, q4_0),
        TensorType::Q4_1 => blocks(bytes, out, 32, q4_1),
        TensorType::Q4_K => blocks(bytes, out, 256, q4_k),
        TensorType::Q6_K => blocks(bytes, out, 256, q6_k),
        other => return Err(GgufError::UnsupportedTensorType { tensor: tensor.to_string(), type_name: other.name() }),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_made_blocks() {
        // Q4_1: d = 0.5 (0x3800), m = −1 (0xbc00); byte 0 = 0x31: value 0 has q = 1, value 16 has q = 3
        let mut block = vec![0x00, 0x38, 0x00, 0xbc, 0x31];
        block.resize(20, 0);
        let mut out = [0.0; 32];
        dequantize_into("t", TensorType::Q4_1, &block, &mut out).unwrap();
        assert_eq!((out[0], out[1], out[16]), (-0.5, -1.0, 0.5));
        // Q4_0 with the same nibbles: d·(q − 8)
        let mut block = vec![0x00, 0x38, 0x31];
        block.resize(18, 0);
        dequantize_into("t", TensorType::Q4_0, &block, &mut out).unwrap();
        assert_eq!((out[0], out[1], out[16]), (-3.5, -4.0, -2.5));
        // Q4_K scales: sub-block 5 takes the low 4 bits of byte 9 and the top bits of byte 1 (sc),
        // the high 4 bits of byte 9 and the top bits of byte 5 (m)
        let scales = [0, 0b1100_0000, 0, 0, 0, 0b0100_0000, 0, 0, 0, 0x2a, 0, 0];
        assert_eq!(q4_k_scale_min(&scales, 5), (0x0a | 0x30, 0x02 | 0x10));
        assert_eq!(q4_k_scale_min(&scales, 1), (0, 0));
    }

    #[test]
    fn wrong_lengths_and_types_are_errors() {
        let mut out = [0.0; 32];
        let err = dequantize_into("w", TensorType::Q8_0, &[0; 33], &mut out).unwrap_err();
        assert!(matches!(err, GgufError::TensorData { ref tensor, .. } if tensor == "w"), "{err}");
        let err = dequantize_into("w", TensorType::Q5_K, &[0; 176], &mut [0.0; 256]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "gguf tensor w: type Q5_K cannot be dequantized (only F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K)"
        );
        assert!(dequantize_into("w", TensorType::Q4_K, &[0; 144], &mut out).is_err(), "32 is not a block of 256");
    }
}
