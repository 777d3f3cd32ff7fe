//! The attention family: scaled dot-product attention, heads, and the layers built from them.

mod error;
mod heads;
mod multi_head;
mod scaled_dot_product;

pub use error::{AttentionError, Branch, Stage};
pub use heads::{merge_heads, split_heads};
pub use multi_head::{MultiHeadAttention, MultiHeadAttentionOutput};
pub use scaled_dot_product::{
    AttentionOutput, causal_scaled_dot_product_self_attention, scaled_dot_product_attention,
};
