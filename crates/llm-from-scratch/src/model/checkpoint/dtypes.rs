//! The number formats a checkpoint may store, widened to f64 exactly: every f32, bf16 and f16
//! value is an f64.

use safetensors::Dtype;

use super::CheckpointError;

/// Little-endian numbers of `dtype` as f64, exactly.
pub(super) fn widen(name: &str, dtype: Dtype, bytes: &[u8]) -> Result<Vec<f64>, CheckpointError> {
    /// `N`-byte little-endian words (the file's length was checked against the shape).
    fn words<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
        bytes.chunks_exact(N).map(|c| std::array::from_fn(|i| c[i]))
    }
    Ok(match dtype {
        Dtype::F64 => words(bytes).map(f64::from_le_bytes).collect(),
        Dtype::F32 => words(bytes).map(|w| f64::from(f32::from_le_bytes(w))).collect(),
        Dtype::BF16 => words(bytes).map(|w| bf16_to_f64(u16::from_le_bytes(w))).collect(),
        Dtype::F16 => words(bytes).map(|w| f16_to_f64(u16::from_le_bytes(w))).collect(),
        other => return Err(CheckpointError::UnsupportedDtype { name: name.to_string(), dtype: other.to_string() }),
    })
}

/// bfloat16 is the upper half of an f32: sign, 8 exponent bits, 7 fraction bits.
pub(crate) fn bf16_to_f64(bits: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(bits) << 16))
}

/// IEEE half: sign, 5 exponent bits (bias 15), 10 fraction bits. (A NaN's payload is not kept.)
pub(crate) fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 == 0 { 1.0 } else { -1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let fraction = f64::from(bits & 0x3ff);
    sign * match exponent {
        0 => fraction * 2f64.powi(-24), // subnormal: 0.fraction · 2^−14
        31 if fraction == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + fraction / 1024.0) * 2f64.powi(e - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_formats_widen_exactly() {
        // bf16 0x3fc0 = f32 0x3fc00000 = 1.5; 0xc000 = −2
        assert_eq!((bf16_to_f64(0x3fc0), bf16_to_f64(0xc000)), (1.5, -2.0));
        // f16: 0x3c00 = 1, 0xc500 = −(1 + 256/1024)·2 = −5, 0x0001 = 2^−24, 0x7bff = 65504
        assert_eq!((f16_to_f64(0x3c00), f16_to_f64(0xc500)), (1.0, -5.0));
        assert_eq!((f16_to_f64(0x0001), f16_to_f64(0x7bff)), (2f64.powi(-24), 65504.0));
        assert!(f16_to_f64(0x7c00).is_infinite() && f16_to_f64(0x7e00).is_nan());
    }
}
