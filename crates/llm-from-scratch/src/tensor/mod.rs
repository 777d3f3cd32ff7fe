//! Plain f64 tensors (no tape): a row-major shape and its values, plus the products and the
//! exponential the tape's operations are built from.
//!
//! Every chapter's numbers live in a [`Tensor`]; chapter 28's causal masks are [`Mask`]s. The
//! module teaches broadcasting ([`broadcast_shapes`], and [`sum_to_shape`] for its backward), a
//! vectorisable exponential ([`exp`], the inner loop of chapter 34's tiled attention) and matrix
//! products with a naive reference beside the call into the fast one ([`matmul`]).

pub(crate) mod broadcast;
pub(crate) mod dense;
pub mod exp;
mod mask;
pub mod matmul;
mod rng;
pub(crate) mod values;

pub use broadcast::{broadcast_shapes, sum_to_shape};
pub use dense::{MAX_ELEMENTS, Tensor};
pub use mask::Mask;
pub use rng::SplitMix64;
