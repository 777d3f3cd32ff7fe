//! GGUF, the file format of llama.cpp: a pretrained model in one file — its hyperparameters and
//! tokenizer as typed metadata, its weights as (mostly quantized) tensors.
//!
//! The format is short and worth reading, so it is read here by hand:
//!
//! - [`Gguf::parse`] checks the layout (header, [`Metadata`], [`TensorInfo`]s, alignment, where
//!   each tensor's bytes are) — every count, length, dimension and offset is held against the
//!   file's size before anything is allocated, so a truncated, mutated or lying file is a
//!   [`GgufError`] naming the key or the tensor;
//! - [`dequantize_into`] turns stored blocks into `f64` (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K,
//!   Q6_K), bit for bit what the reference Python reader computes;
//! - [`load_gguf_llama`] maps a LLaMA onto this crate's [`crate::model::Decoder`], in either
//!   order of the W_Q and W_K rows ([`GgufRope`]);
//! - [`QuantizedLlama`] generates from the file's blocks without an `f64` copy of the weights,
//!   with the same logits as the decoder;
//! - [`model_path_from_env`] finds the pretrained model `scripts/fetch-model` downloads.
//!
//! ```
//! use llm_from_scratch::gguf::{Gguf, GgufRope, TensorType, gguf_llama_from_bytes};
//! let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf/tiny-llama.gguf"))?;
//! let file = Gguf::parse(&bytes)?;
//! assert_eq!(file.metadata().string("general.architecture")?, "llama");
//! assert_eq!(file.metadata().count("llama.block_count")?, 2);
//! let q = file.tensor("blk.0.attn_q.weight")?;
//! assert_eq!((q.dims(), q.tensor_type()), (&[32, 32][..], TensorType::Q4_0));
//! assert_eq!(file.dequantize("blk.0.attn_q.weight")?.len(), 32 * 32);
//! let model = gguf_llama_from_bytes(&bytes, GgufRope::AsStored)?;
//! assert_eq!(model.forward(&[1, 2, 3], [1, 3])?.shape(), &[1, 3, 48]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cursor;
mod dequantize;
mod error;
mod llama;
mod llama_config;
mod metadata;
mod model_path;
mod quantized;
mod reader;
mod tensor_type;
mod tokenizer;
mod value;

pub use dequantize::dequantize_into;
pub use error::GgufError;
pub use llama::{GgufRope, gguf_llama_from_bytes, llama_from_gguf, load_gguf_llama};
pub use llama_config::gguf_llama_config;
pub use metadata::Metadata;
pub use model_path::{DEFAULT_MODEL_FILE, MODEL_ENV, default_cache_dir, model_path_from_env};
pub use quantized::{QuantizedLlama, QuantizedMatrix};
pub use reader::{DEFAULT_ALIGNMENT, Gguf, TensorInfo};
pub use tensor_type::TensorType;
pub use tokenizer::{SUPPORTED_PRE_TOKENIZERS, gguf_tokenizer};
pub use value::{MetadataArray, MetadataValue, ValueType};
