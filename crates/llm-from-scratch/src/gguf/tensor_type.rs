//! [`TensorType`]: how a tensor's numbers are stored — as plain floats, or quantized in blocks.
//!
//! A quantized type stores a row in blocks of `block` values, each block `bytes` long: a few
//! scales (f16) and small integers (4, 6 or 8 bits). Every ggml type is listed here with its block
//! layout, so that the reader can locate every tensor of a file, including those this crate does
//! not dequantize ([`TensorType::dequantizable`]).

/// A ggml tensor type, as numbered in the file (`Q4_1` is 3).
#[allow(non_camel_case_types)] // the names ggml, llama.cpp and the gguf package use
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TensorType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// 32 values: an f16 scale `d` and 4-bit `q`; `d·(q − 8)`.
    Q4_0,
    /// 32 values: f16 scale `d` and minimum `m`, 4-bit `q`; `d·q + m`.
    Q4_1,
    /// 32 values, 5 bits, one scale.
    Q5_0,
    /// 32 values, 5 bits, scale and minimum.
    Q5_1,
    /// 32 values: an f16 scale `d` and 8-bit signed `q`; `q·d`.
    Q8_0,
    /// 32 values, 8 bits, scale and sum.
    Q8_1,
    /// 256 values, 2 bits ("k-quant").
    Q2_K,
    /// 256 values, 3 bits.
    Q3_K,
    /// 256 values in 8 sub-blocks of 32: f16 `d` and `dmin`, 6-bit scale and minimum per
    /// sub-block, 4-bit `q`; `(d·sc)·q − dmin·m`.
    Q4_K,
    /// 256 values, 5 bits.
    Q5_K,
    /// 256 values in 16 sub-blocks of 16: 6-bit `q` (4 low bits, 2 high), an 8-bit signed scale per
    /// sub-block, f16 `d`; `(d·sc)·(q − 32)`.
    Q6_K,
    /// 256 values, 8 bits (intermediate results of ggml).
    Q8_K,
    /// Importance-matrix quantization, 2.06 bits.
    IQ2_XXS,
    /// 2.31 bits.
    IQ2_XS,
    /// 3.06 bits.
    IQ3_XXS,
    /// 1.56 bits.
    IQ1_S,
    /// 4.5 bits, non-linear.
    IQ4_NL,
    /// 3.44 bits.
    IQ3_S,
    /// 2.5 bits.
    IQ2_S,
    /// 4.25 bits.
    IQ4_XS,
    /// 8-bit integer.
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// 64-bit float.
    F64,
    /// 1.75 bits.
    IQ1_M,
    /// bfloat16: the upper half of an f32.
    BF16,
    /// Ternary, 1.69 bits.
    TQ1_0,
    /// Ternary, 2.06 bits.
    TQ2_0,
    /// Microscaling 4-bit float.
    MXFP4,
    /// NVIDIA 4-bit float.
    NVFP4,
    /// 1 bit.
    Q1_0,
}

/// `(type, id, name, values per block, bytes per block)` of every ggml type.
const TABLE: [(TensorType, u32, &str, u64, u64); 34] = {
    use TensorType::*;
    [
        (F32, 0, "F32", 1, 4),
        (F16, 1, "F16", 1, 2),
        (Q4_0, 2, "Q4_0", 32, 18),
        (Q4_1, 3, "Q4_1", 32, 20),
        (Q5_0, 6, "Q5_0", 32, 22),
        (Q5_1, 7, "Q5_1", 32, 24),
        (Q8_0, 8, "Q8_0", 32, 34),
        (Q8_1, 9, "Q8_1", 32, 40),
        (Q2_K, 10, "Q2_K", 256, 84),
        (Q3_K, 11, "Q3_K", 256, 110),
        (Q4_K, 12, "Q4_K", 256, 144),
        (Q5_K, 13, "Q5_K", 256, 176),
        (Q6_K, 14, "Q6_K", 256, 210),
        (Q8_K, 15, "Q8_K", 256, 292),
        (IQ2_XXS, 16, "IQ2_XXS", 256, 66),
        (IQ2_XS, 17, "IQ2_XS", 256, 74),
        (IQ3_XXS, 18, "IQ3_XXS", 256, 98),
        (IQ1_S, 19, "IQ1_S", 256, 50),
        (IQ4_NL, 20, "IQ4_NL", 32, 18),
        (IQ3_S, 21, "IQ3_S", 256, 110),
        (IQ2_S, 22, "IQ2_S", 256, 82),
        (IQ4_XS, 23, "IQ4_XS", 256, 136),
        (I8, 24, "I8", 1, 1),
        (I16, 25, "I16", 1, 2),
        (I32, 26, "I32", 1, 4),
        (I64, 27, "I64", 1, 8),
        (F64, 28, "F64", 1, 8),
        (IQ1_M, 29, "IQ1_M", 256, 56),
        (BF16, 30, "BF16", 1, 2),
        (TQ1_0, 34, "TQ1_0", 256, 54),
        (TQ2_0, 35, "TQ2_0", 256, 66),
        (MXFP4, 39, "MXFP4", 32, 17),
        (NVFP4, 40, "NVFP4", 64, 36),
        (Q1_0, 41, "Q1_0", 128, 18),
    ]
};

impl TensorType {
    /// The type numbered `id` in the file, if ggml defines one.
    pub fn from_id(id: u32) -> Option<Self> {
        TABLE.iter().find(|row| row.1 == id).map(|row| row.0)
    }

    fn row(self) -> &'static (TensorType, u32, &'static str, u64, u64) {
        // the table lists every variant in declaration order
        &TABLE[self as usize]
    }

    /// Its number in the file.
    pub fn id(self) -> u32 {
        self.row().1
    }

    /// Its ggml name (`Q4_1`).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Values per block (1 for plain numbers).
    pub fn block_values(self) -> u64 {
        self.row().3
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        self.row().4
    }

    /// Whether [`crate::gguf::dequantize_into`] reads it: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K
    /// and Q6_K.
    pub fn dequantizable(self) -> bool {
        use TensorType::*;
        matches!(self, F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 | Q4_K | Q6_K)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_the_declaration_and_ids_round_trip() {
        for (index, row) in TABLE.iter().enumerate() {
            assert_eq!(row.0 as usize, index, "{}", row.2);
            assert_eq!(TensorType::from_id(row.1), Some(row.0));
            assert_eq!(format!("{:?}", row.0), row.2);
        }
        assert_eq!(TensorType::from_id(4), None, "Q4_2 was removed from ggml");
        assert_eq!((TensorType::Q4_K.block_values(), TensorType::Q4_K.block_bytes()), (256, 144));
    }
}
