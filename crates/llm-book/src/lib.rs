//! # llm-from-scratch, the book
//!
//! How a modern LLM's attention works, built from the ground up in Rust and `f64`. Each chapter
//! below is a demo package: its page opens with the chapter's prose, then shows the figure it
//! draws from its own numbers, the report it prints (checked byte for byte by the tests), the
//! library items it uses, and the way to the next chapter. Read them in order; each builds on the
//! ones before.
//!
//! - Run a chapter: `cargo run -p ch30-multi-head-attention` (its report on standard output;
//!   `-- --figure out.svg` draws its figure).
//! - The library the chapters import: [`llm_from_scratch`](../llm_from_scratch/index.html), the
//!   plain, safe teaching crate; the speed lives apart in
//!   [`llm_kernels`](../llm_kernels/index.html), each kernel equal to a plain twin.
//! - This book: `cargo doc --workspace --no-deps --open`, then open `llm_book`.
//!
//! ## The chapters
//!
#![doc = r#"<div class="book-chapters" style="display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); gap: 24px 20px;">"#]
#![doc = r#"<div class="book-chapter"><a href="../ch27_scaled_dot_product_attention/index.html" title="Chapter 27: Scaled dot-product attention">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch27-scaled-dot-product-attention.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch27_scaled_dot_product_attention/index.html"><strong>27. Scaled dot-product attention</strong></a><br>scores q·kᵀ/√d_h, softmax, weighted values; why √d_h</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch28_causal_masking/index.html" title="Chapter 28: Causal masking">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch28-causal-masking.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch28_causal_masking/index.html"><strong>28. Causal masking</strong></a><br>hiding the future; a fully masked row gives zeros, not NaN</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch29_rotary_position_embedding/index.html" title="Chapter 29: Rotary position embedding">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch29-rotary-position-embedding.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch29_rotary_position_embedding/index.html"><strong>29. Rotary position embedding</strong></a><br>position as a rotation of coordinate pairs</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch30_multi_head_attention/index.html" title="Chapter 30: Multi-head attention">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch30-multi-head-attention.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch30_multi_head_attention/index.html"><strong>30. Multi-head attention</strong></a><br>heads side by side, split and merge, W_O</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch31_pre_norm_residual/index.html" title="Chapter 31: RMSNorm and the residual">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch31-pre-norm-residual.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch31_pre_norm_residual/index.html"><strong>31. RMSNorm and the residual</strong></a><br>x + MHA(RMSNorm(x)): half a transformer block</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch32_grouped_query_attention/index.html" title="Chapter 32: Grouped-query attention">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch32-grouped-query-attention.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch32_grouped_query_attention/index.html"><strong>32. Grouped-query attention</strong></a><br>H query heads over G key/value heads</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch33_kv_cache/index.html" title="Chapter 33: The KV cache">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch33-kv-cache.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch33_kv_cache/index.html"><strong>33. The KV cache</strong></a><br>prefill, decode, sliding windows</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch34_efficient_attention/index.html" title="Chapter 34: Efficient attention">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch34-efficient-attention.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch34_efficient_attention/index.html"><strong>34. Efficient attention</strong></a><br>online softmax, tiles, sinks</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch35_latent_attention/index.html" title="Chapter 35: Latent attention">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch35-latent-attention.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch35_latent_attention/index.html"><strong>35. Latent attention</strong></a><br>a small latent cached instead of K and V</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch36_tiny_decoder/index.html" title="Chapter 36: A tiny decoder">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch36-tiny-decoder.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch36_tiny_decoder/index.html"><strong>36. A tiny decoder</strong></a><br>a LLaMA-style model learns to reverse</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch37_train_on_text/index.html" title="Chapter 37: Training on text">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch37-train-on-text.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch37_train_on_text/index.html"><strong>37. Training on text</strong></a><br>a character model of Cicero</p></div>"#]
#![doc = r#"<div class="book-chapter"><a href="../ch38_a_real_model/index.html" title="Chapter 38: A real model">"#]
#![doc = include_str!("../../../docs/figures/thumbnails/ch38-a-real-model.svg")]
#![doc = r#"</a><p style="margin: 4px 0 0 0"><a href="../ch38_a_real_model/index.html"><strong>38. A real model</strong></a><br>SmolLM2-135M from its GGUF file</p></div>"#]
#![doc = "</div>"]
//!
//! Chapter 38 needs the pretrained model file (`scripts/fetch-model`); its page shows what it
//! printed when its golden file was made.
