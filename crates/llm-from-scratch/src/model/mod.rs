//! A decoder-only language model of the LLaMA family, and what it takes to train it and to
//! generate with it: embedding, pre-norm blocks (grouped-query attention with RoPE, SwiGLU),
//! cross-entropy, AdamW, a learning-rate schedule, gradient clipping (a training [`Recipe`] holds
//! the three), and sampling with a KV cache;
//! a character tokenizer ([`CharTokenizer`]) and a training state that resumes bitwise
//! ([`save_train_state`], [`load_train_state`]).
//!
//! Chapter 36 (`ch36-tiny-decoder`) trains one to reverse sequences and generates with it; the
//! checkpoint functions ([`save_checkpoint`], [`load_hf_llama`]) connect it to Hugging Face weights,
//! and [`crate::gguf::load_gguf_llama`] to the quantized GGUF files of llama.cpp (a pretrained
//! SmolLM2-135M runs on it).
//!
//! ```
//! use llm_from_scratch::model::{
//!     AdamWConfig, Decoder, DecoderConfig, Decoding, LrSchedule, Sampling, TokenBatch, Trainer, TrainingConfig,
//! };
//! use llm_from_scratch::nn::SplitMix64;
//! let mut rng = SplitMix64::new(0);
//! let model = Decoder::new(DecoderConfig::new(8, 16, 1, 2).with_rope(16, 100.0), &mut rng)?;
//! let schedule = LrSchedule::warmup_cosine(1e-2, 1e-3, 5, 60)?;
//! let mut trainer = Trainer::new(model, TrainingConfig { adamw: AdamWConfig::default(), schedule, clip_norm: Some(1.0) })?;
//! // learn one sequence by heart: 0 1 2 3 4 5 6 7
//! let batch = TokenBatch::next_token(&[(0..8).collect()], 0)?;
//! let first = trainer.step(&batch)?.loss; // ≈ ln 8 = 2.08
//! for _ in 1..60 {
//!     trainer.step(&batch)?;
//! }
//! let model = trainer.into_model();
//! assert!(model.evaluate(&batch)?.loss < first / 10.0);
//! let generated = model.generate(&[0, 1, 2], 5, Sampling::Greedy, Decoding::KvCache, &mut rng)?;
//! assert_eq!(generated.tokens, [3, 4, 5, 6, 7]);
//! # Ok::<(), llm_from_scratch::model::ModelError>(())
//! ```

mod adamw;
mod batch;
mod block;
mod checkpoint;
mod clip;
mod config;
mod decoder;
mod embedding;
mod error;
mod evaluate;
mod feed_forward;
mod generate;
mod loss;
pub mod names;
mod recipe;
mod sampling;
mod schedule;
mod tokenizer;
mod train;
mod train_state;

pub use adamw::{AdamW, AdamWConfig, decays};
pub use batch::TokenBatch;
pub use block::DecoderBlock;
pub use checkpoint::{
    CheckpointError, checkpoint_from_bytes, hf_llama_config, hf_llama_from_bytes, load_checkpoint, load_hf_llama,
    save_checkpoint,
};
pub(crate) use checkpoint::{bf16_to_f64, f16_to_f64};
pub use clip::{clip_global_norm, global_norm};
pub use config::{DecoderConfig, MAX_PARAMETERS};
pub use decoder::{Decoder, DecoderTrace};
pub use embedding::TokenEmbedding;
pub use error::ModelError;
pub use evaluate::Evaluation;
pub use feed_forward::SwiGlu;
pub use generate::{Decoding, Generation, Generator, Overflow};
pub use loss::cross_entropy;
pub use names::parameter_shapes;
pub use recipe::Recipe;
pub use sampling::{Sampling, argmax, top_k_distribution, top_p_distribution};
pub use schedule::LrSchedule;
pub use tokenizer::{CharTokenizer, TokenizerError};
pub use train::{StepReport, Trainer, TrainingConfig};
pub use train_state::{TrainState, TrainStateError, load_train_state, save_train_state};
