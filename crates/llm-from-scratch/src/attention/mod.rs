//! The attention family: scaled dot-product attention, heads, and the layers built from them.

mod error;
mod grouped_query;
mod heads;
mod kv_cache;
mod latent;
pub(crate) mod memory;
mod multi_head;
mod scaled_dot_product;
mod tiled;
mod window;

pub use error::{AttentionError, Branch, Stage};
pub use grouped_query::{AttentionConfig, AttentionKernel, AttentionOptions, AttentionTrace, GroupedQueryAttention};
pub use heads::{merge_heads, split_heads};
pub use kv_cache::{KvCache, generate_with_cache};
pub use latent::{LatentAttention, LatentConfig, LatentKvCache, LatentOutput, LatentWeights};
pub use memory::{CacheLayout, explicit_attention_bytes, kv_cache_bytes, receptive_field, tiled_attention_bytes};
pub use multi_head::{MultiHeadAttention, MultiHeadAttentionOutput};
pub use scaled_dot_product::{
    AttentionOutput, causal_scaled_dot_product_self_attention, grouped_attention, scaled_dot_product_attention,
};
pub use tiled::{LONG_BLOCK, LONG_SEQUENCE, OnlineSoftmax, SHORT_BLOCK, Visibility, block_size, tiled_attention};
pub use window::{SlidingWindow, attention_mask, visible};
