//! The differentiable operations, one family per file: each forward with its backward below it.

mod concat_slice;
mod dropout;
mod elementwise;
mod embedding;
pub(crate) mod masked_fill;
mod matmul;
mod reduce;
mod rms_norm;
mod shape;
mod softmax;
mod unary;

pub use concat_slice::concat;
