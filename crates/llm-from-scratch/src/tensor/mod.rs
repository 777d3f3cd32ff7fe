//! Plain f64 tensors (no tape): a row-major shape and its values, plus the kernels the tape's
//! operations are built from.

pub(crate) mod broadcast;
pub(crate) mod dense;
pub mod exp;
pub mod kernels;
mod mask;

pub use broadcast::{broadcast_shapes, sum_to_shape};
pub use dense::{MAX_ELEMENTS, Tensor};
pub use mask::Mask;
