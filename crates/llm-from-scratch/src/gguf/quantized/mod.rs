//! Generating from the file's blocks: a weight stays as GGUF stores it ([`QuantizedMatrix`]) and
//! the products read it block by block, so a model holds and reads about 0.63 bytes per weight
//! (`Q4_1`: 20 bytes for 32 weights) instead of 8 — and computes the same bits as the `f64`
//! decoder ([`QuantizedLlama`]).

mod matrix;
mod model;

pub use matrix::QuantizedMatrix;
pub use model::QuantizedLlama;
