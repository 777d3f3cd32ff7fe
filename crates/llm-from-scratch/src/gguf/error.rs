//! [`GgufError`]: everything that can be wrong with a GGUF file, each case naming the key or the
//! tensor and printing the values.

use thiserror::Error;

use crate::error::Shape;
use crate::model::ModelError;

/// Errors of reading a GGUF file, dequantizing its tensors and mapping them onto a
/// [`crate::model::Decoder`].
///
/// Every size the file states (counts, string and array lengths, dimensions, tensor offsets and
/// sizes) is checked against the bytes that are really there before anything is allocated for
/// it: a truncated, mutated or lying file ends in one of these, never in a panic or an abort.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GgufError {
    /// The file could not be read.
    #[error("gguf file: cannot read {path}: {reason}")]
    Io {
        /// The path.
        path: String,
        /// What the system said.
        reason: String,
    },
    /// The first four bytes are not `GGUF`.
    #[error("gguf header: the file starts with {found:?}, not the magic \"GGUF\"")]
    Magic {
        /// The bytes found (fewer than four if the file is shorter).
        found: Vec<u8>,
    },
    /// A version this reader does not read (1, a big-endian file, or a future one).
    #[error("gguf header: version {version} is not supported (this reader reads versions 2 and 3, little-endian)")]
    Version {
        /// The version as read, little-endian.
        version: u32,
    },
    /// A field runs past the end of the file.
    #[error("gguf: {what} needs {needed} bytes at offset {offset} but the file ends at {len}")]
    Truncated {
        /// The field (`metadata general.name`, `tensor info 3 dimensions`).
        what: String,
        /// Where it starts.
        offset: usize,
        /// Its length in bytes.
        needed: u64,
        /// The file's length.
        len: usize,
    },
    /// A count (of keys, tensors, array elements) that the rest of the file cannot hold even if
    /// every item were as small as its type allows: refused before anything is reserved for it.
    #[error("gguf: {what} declares {count} {items}, more than the {remaining} bytes left in the file can hold")]
    CountTooLarge {
        /// Where the count is.
        what: String,
        /// The count as read.
        count: u64,
        /// What is counted.
        items: &'static str,
        /// Bytes from the count to the end of the file.
        remaining: usize,
    },
    /// A string that is not UTF-8.
    #[error("gguf: {what} is not UTF-8")]
    NotUtf8 {
        /// The field.
        what: String,
    },
    /// A metadata value type that GGUF does not define, or an array of arrays (which this reader
    /// does not read).
    #[error("gguf metadata: {key} has value type {type_id}, {reason}")]
    ValueType {
        /// The key.
        key: String,
        /// The type id as read.
        type_id: u32,
        /// `which GGUF does not define` or `an array of arrays is not read`.
        reason: &'static str,
    },
    /// The same key twice.
    #[error("gguf metadata: the key {key} appears twice")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A key a reader asked for is not in the file.
    #[error("gguf metadata: {key} is missing")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A key whose value has another type than the reader needs.
    #[error("gguf metadata: {key} is {found}, not {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What was needed (`a string`, `an array of i32`).
        expected: &'static str,
        /// What the file holds (`u32`, `an array of string`).
        found: String,
    },
    /// A value of the right type that cannot be used.
    #[error("gguf metadata: {key} = {value} is invalid ({reason})")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value, printed.
        value: String,
        /// What is required.
        reason: &'static str,
    },
    /// A tensor type id that ggml does not define: its size is unknown, so nothing after it can
    /// be located.
    #[error("gguf tensor {tensor}: type id {type_id} is not a ggml type")]
    UnknownTensorType {
        /// The tensor's name.
        tensor: String,
        /// The type id as read.
        type_id: u32,
    },
    /// A ggml type this crate does not dequantize.
    #[error(
        "gguf tensor {tensor}: type {type_name} cannot be dequantized (only F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K)"
    )]
    UnsupportedTensorType {
        /// The tensor's name.
        tensor: String,
        /// The ggml name of its type (`Q5_K`, `IQ2_XS`).
        type_name: &'static str,
    },
    /// Dimensions that cannot be a tensor: rank 0 or above 4, a product that overflows, a row
    /// that is not a whole number of blocks.
    #[error("gguf tensor {tensor}: dimensions {dims:?} {reason}")]
    TensorDims {
        /// The tensor's name.
        tensor: String,
        /// The dimensions as read, fastest-varying first.
        dims: Vec<u64>,
        /// What is wrong.
        reason: String,
    },
    /// Tensor data that is not inside the file's data section, not aligned, or overlaps another
    /// tensor's.
    #[error("gguf tensor {tensor}: data at offset {offset} ({size} bytes) {reason}")]
    TensorData {
        /// The tensor's name.
        tensor: String,
        /// The offset as read (relative to the data section).
        offset: u64,
        /// The byte size its type and dimensions give.
        size: u64,
        /// What is wrong.
        reason: String,
    },
    /// The same tensor name twice.
    #[error("gguf: the tensor {name} appears twice")]
    DuplicateTensor {
        /// The name.
        name: String,
    },
    /// A tensor a reader asked for is not in the file.
    #[error("gguf: tensor {name} is missing")]
    MissingTensor {
        /// The name.
        name: String,
    },
    /// A tensor has other dimensions than the configuration needs.
    #[error(
        "gguf: tensor {name} has dimensions {actual} in the file but {expected} was needed (fastest-varying first)"
    )]
    TensorShape {
        /// The name.
        name: String,
        /// The dimensions that fit, in the file's order.
        expected: Shape,
        /// The dimensions in the file.
        actual: Shape,
    },
    /// A tensor that a LLaMA model of this configuration does not use.
    #[error("gguf: tensor {name} is not used by a llama model of this configuration")]
    UnexpectedTensor {
        /// The name.
        name: String,
    },
    /// An architecture other than `llama`.
    #[error("gguf: general.architecture = {found:?} is not supported (only \"llama\")")]
    Architecture {
        /// The architecture the file names.
        found: String,
    },
    /// The configuration asks for far more parameters than the file holds values.
    #[error("gguf: the configuration asks for {needed} parameters, more than twice the {held} values the file holds")]
    TooManyParameters {
        /// Parameters the configuration needs.
        needed: u64,
        /// Values in all the file's tensors.
        held: u64,
    },
    /// Building the model failed (configuration rules, tensor errors).
    #[error("gguf: {0}")]
    Model(#[from] ModelError),
    /// The file's tokenizer is of a kind [`crate::bpe`] does not implement.
    #[error("gguf tokenizer: {key} = {found:?} is not supported (only {supported})")]
    UnsupportedTokenizer {
        /// The key (`tokenizer.ggml.model`, `tokenizer.ggml.pre`).
        key: &'static str,
        /// Its value in the file.
        found: String,
        /// What is supported.
        supported: &'static str,
    },
    /// The file's vocabulary or merges do not make a tokenizer.
    #[error("gguf tokenizer: {0}")]
    Tokenizer(#[from] crate::bpe::BpeError),
}

impl From<crate::attention::AttentionError> for GgufError {
    fn from(e: crate::attention::AttentionError) -> Self {
        Self::Model(ModelError::from(e))
    }
}

impl From<crate::error::TensorAutodiffError> for GgufError {
    fn from(e: crate::error::TensorAutodiffError) -> Self {
        Self::Model(ModelError::from(e))
    }
}
