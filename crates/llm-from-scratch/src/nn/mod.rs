//! Building blocks with parameters: the generator that initialises them, named parameters, and
//! the layers the attention chapters stack.
//!
//! - [`SplitMix64`] draws every initial weight, so a seed reproduces a run (every chapter).
//! - [`RotaryEmbedding`]: positions as rotations of coordinate pairs (chapter 29, then every
//!   attention layer).
//! - [`RmsNorm`]: the pre-norm of a transformer block (chapter 31, chapter 36).
//! - [`Linear`] and [`QkvProjections`]: `y = x·W (+ b)`, and the three projections of attention with
//!   a key/value width that may be narrower than the query's (chapter 32).
//! - [`NamedParameters`]: a dotted name for every trainable leaf, as checkpoints name them.

mod error;
pub(crate) mod linear;
mod parameters;
mod qkv;

mod rms_norm;
mod rope;

pub use error::NnError;
pub use linear::Linear;
pub use parameters::{NamedParameter, NamedParameters};
pub use qkv::{QkvOutput, QkvProjections};

/// The generator lives with the tensors (below the tape, which draws dropout masks from it); it is
/// named here too, where the layers' initial weights are drawn.
pub use crate::tensor::SplitMix64;
pub use rms_norm::RmsNorm;
pub use rope::{RopeError, RopeLayout, RotaryEmbedding, TABLE_VALUES as ROPE_TABLE_VALUES};
