//! Building blocks with parameters: the generator that initialises them, named parameters, and
//! the layers the attention chapters stack.

mod error;
pub(crate) mod linear;
mod parameters;
mod qkv;

mod rms_norm;
mod rng;
mod rope;

pub use error::NnError;
pub use linear::Linear;
pub use parameters::{NamedParameter, NamedParameters};
pub use qkv::{QkvOutput, QkvProjections};

pub use rms_norm::RmsNorm;
pub use rng::SplitMix64;
pub use rope::{RopeError, RopeLayout, RotaryEmbedding, TABLE_VALUES as ROPE_TABLE_VALUES};
