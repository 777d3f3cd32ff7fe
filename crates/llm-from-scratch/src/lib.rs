//! # llm-from-scratch
//!
//! How a modern LLM's attention works, built from the ground up in `f64`: a small tape-based
//! autodiff ([`autodiff`]), the layers on top of it ([`nn`]), the attention family
//! ([`attention`]) and a small decoder-only language model built from them ([`model`]), which can
//! also load a pretrained LLaMA from a GGUF file ([`gguf`]) and read its text with the byte-level
//! BPE tokenizer of [`bpe`].
//!
//! ```
//! use llm_from_scratch::{constant, parameter};
//! // y = softmax(x · W) for one row; the tape gives ∂(Σ upstream ⊙ y)/∂W.
//! let x = constant(&[1, 2], &[1.0, -1.0])?;
//! let w = parameter(&[2, 2], &[0.5, 0.0, 0.0, 0.5])?;
//! let y = x.matmul(&w)?.softmax_last_axis()?;
//! let total: f64 = y.value()?.as_slice().iter().sum();
//! assert!((total - 1.0).abs() < 1e-15);
//! let grads = y.backward_with(&llm_from_scratch::Tensor::new(&[1, 2], vec![1.0, 0.0])?)?;
//! assert_eq!(grads.get(&w).unwrap().shape(), &[2, 2]);
//! # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
//! ```
//!
//! Conventions: shapes are row-major `Vec<usize>` and print as `[1,3,4]`; every fallible call
//! returns a typed error whose message names the stage and the values; results are bitwise
//! reproducible and independent of the number of threads.

#![warn(missing_docs)]

pub mod attention;
pub mod autodiff;
pub mod bpe;
pub mod error;
/// Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`); their property tests run in
/// every `cargo test`.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod gguf;
pub mod model;
pub mod nn;
pub mod tensor;

pub use autodiff::{
    GradcheckConfig, GradcheckReport, GradcheckTensor, Gradients, Tape, TensorValue, concat, constant, gradcheck,
    parameter,
};
pub use error::{TensorAutodiffError, fmt_shape};
/// The speed half of the workspace, `llm-kernels`: the per-instruction-set kernels this crate's
/// operations call, the target they run on ([`kernels::Target`], `LLM_KERNELS`), and the process
/// settings of the benchmarks. Each kernel has a plain twin here that its tests hold it to.
pub use llm_kernels as kernels;
pub use tensor::{Mask, Tensor};

/// The README's Rust example, compiled and run as a doctest of this crate: `cargo test --doc`
/// runs exactly the code the README shows, so the two cannot drift. Only built for doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExample;
