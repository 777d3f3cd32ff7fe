//! The attention family: scaled dot-product attention, heads, and the layers built from them.
//!
//! What each part teaches, and the chapters whose demos use it (`demos/chNN-<topic>`):
//!
//! | part | idea | chapters |
//! |---|---|---|
//! | [`scaled_dot_product_attention`] | scores `q·kᵀ/√d_h`, softmax over keys, weighted values | 27 |
//! | [`causal_scaled_dot_product_self_attention`] | hiding the future with −∞; fully masked rows give zeros | 28 |
//! | [`split_heads`], [`merge_heads`], [`MultiHeadAttention`] | heads side by side; `W_O` is where they mix | 30, 31 |
//! | [`GroupedQueryAttention`], [`AttentionConfig`] | `H` query heads over `G` key/value heads (multi-query at `G = 1`) | 32, 36 |
//! | [`KvCache`], [`generate_with_cache`], [`SlidingWindow`], [`visible`] | prefill and decode, windows from absolute positions | 33, 36 |
//! | [`tiled_attention`], [`OnlineSoftmax`], [`Visibility`], [`kv_cache_bytes`] | flash-style attention, sinks, memory as `T` grows | 34 |
//! | [`LatentAttention`] | a small latent per token, absorption, decoupled RoPE | 35 |
//!
//! Every layer records its forward on the tape ([`crate::autodiff`]), so its backward needs no code
//! here; the cached paths work on plain tensors, for generation.

mod cached_forward;
mod config;
mod decode;
mod error;
mod grouped_query;
mod heads;
mod input;
mod kv_cache;
mod latent;
pub(crate) mod memory;
mod multi_head;
mod scaled_dot_product;
mod tiled;
mod window;

pub(crate) use cached_forward::attend_cached;
pub use cached_forward::generate_with_cache;
pub use config::{AttentionConfig, AttentionPath};
pub use error::{AttentionError, Branch, Stage};
pub use grouped_query::{AttentionOptions, AttentionTrace, GroupedQueryAttention};
pub(crate) use heads::split_heads_of;
pub use heads::{merge_heads, split_heads};
pub use kv_cache::KvCache;
pub use latent::{LatentAttention, LatentConfig, LatentKvCache, LatentOutput, LatentWeights};
pub use memory::{CacheLayout, explicit_attention_bytes, kv_cache_bytes, receptive_field, tiled_attention_bytes};
pub use multi_head::{MultiHeadAttention, MultiHeadAttentionOutput};
pub use scaled_dot_product::{
    AttentionOutput, causal_scaled_dot_product_self_attention, grouped_attention, scaled_dot_product_attention,
};
pub use tiled::{
    LONG_BLOCK, LONG_SEQUENCE, OnlineSoftmax, SHORT_BLOCK, block_size, tiled_attention, tiled_attention_merged,
};
pub use window::{SlidingWindow, Visibility, attention_mask, visible};
