//! The differentiable operations, one family per file: each forward with its backward below it.

mod concat_slice;
mod dropout;
mod elementwise;
mod embedding;
pub(crate) mod masked_fill;
mod masked_matmul;
pub(crate) mod matmul;
mod reduce;
mod rms_norm;
mod shape;
pub(crate) mod softmax;
mod unary;

pub use concat_slice::concat;
