//! # llm-kernels
//!
//! The speed half of `llm-from-scratch`: every line that exists to make the teaching crate fast
//! and no line that teaches. The teaching crate (`crates/llm-from-scratch`) says each
//! computation plainly — a naive matrix product, a ten-line decoding row, block-by-block tiled
//! attention, RoPE's pair rotation, the exponential's Taylor polynomial — and calls the kernel
//! here that computes the same thing arranged for the processor. Its tests hold each pair
//! together on every target this processor runs (see the README beside this crate).
//!
//! | module | what | the plain twin in `llm-from-scratch` |
//! |---|---|---|
//! | [`target`] | which instruction set runs: [`Target`], `LLM_KERNELS`, [`with_target`] | — |
//! | [`gemm`] | the matrix product (`gemm-f64`, the one-row and split paths) | `tensor::matmul_naive` |
//! | [`exp`] | a vectorisable `eˣ` and the softmax's shifted sums | `tensor::exp::exp_plain` |
//! | [`logistic`] | `σ(x)` and SiLU over many values, the exponential with the C library's bits on x86-64 Linux | `TensorValue::silu`'s formula with `f64::exp` |
//! | [`strips`] | tiled attention on strips of 32 queries, forward and backward | `attention::tiled` (plain and block paths) |
//! | [`decode`] | one query row, or the query heads of a kv head, over a KV cache | `attention::decode::attend_row_naive` |
//! | [`masked`] | the hidden entries of a masked product checked to be 0, or set to 0 | `autodiff::ops::masked_matmul`'s `Hidden` (its loops in the docs) |
//! | [`quant`] | one row times weights kept in quantized blocks; blocks into an `f64` panel | `gguf::QuantizedMatrix::row_times_plain` |
//! | [`rope`] | rotating rows of pairs | `nn::rope::rotate_pair` |
//! | [`softmax`] | softmax rows and their adjoints, hidden keys skipped | `autodiff::ops::softmax::softmax_row`, `softmax_row_backward`, `masked_softmax_row_backward` |
//! | [`visibility`] | which keys a query sees, as plain data | `attention::Visibility`, `SlidingWindow` |
//! | [`rows`] | filling a new buffer row by row, in parallel, without zeroing it first | — |
//! | [`bands`] | tasks writing side by side in the same rows (heads in a token's row) | — |
//! | [`parallel`], [`allocator`] | keeping workers awake; keeping freed memory | — |
//! | [`aligned`] | growable `f64` storage that starts on a cache line (a KV cache's lanes) | — |
//!
//! One rule for the target: every entry point reads the target once, when it is called, and
//! hands it to the threads it uses; [`with_target`] runs its closure on a thread pool whose
//! workers carry the same target, so a kernel called from any worker inside it runs the forced
//! target too. Results never depend on the target or on the number of threads: every target
//! performs the same IEEE operations in the same order.
//!
//! This is the only crate of the workspace with `unsafe` code: unchecked vector loads and stores,
//! the `gemm-f64` call, buffers written before they are read, the allocator setting, and the view of
//! cache-line-aligned storage as a slice. Each
//! block states why it is sound.

#![warn(missing_docs)]

pub mod aligned;
pub mod allocator;
pub mod bands;
pub mod decode;
pub mod exp;
mod fetch;
pub mod gemm;
mod isa;
pub mod logistic;
pub mod masked;
pub mod parallel;
pub mod quant;
pub mod rope;
pub mod rows;
pub mod softmax;
pub mod strips;
pub mod target;
pub mod visibility;

pub use target::{KernelsError, Target, active, configured, force, with_target};
