//! Tiled ("flash") attention: the same result as the explicit path without ever materialising the
//! `[T_q, T_k]` score matrix.
//!
//! Chapter 34 (`ch34-efficient-attention`) teaches it; the `mha-train` and `long-causal`
//! benchmarks run it (`docs/performance.md`).
//!
//! Queries and keys are processed in square blocks ([`block_size`]: 64 rows, 128 from 2048 keys
//! on). For each query row the kernel keeps an [`OnlineSoftmax`] state — running maximum `m`,
//! normaliser `ℓ` and the un-normalised output `n` — and folds in one key block at a time. When a
//! block raises the maximum from `m` to `M`, everything accumulated so far is rescaled by
//! `e^{m−M}`, which makes the result exact, not approximate. Memory for attention is O(T): one `log Σ e^s` per query row
//! (kept for the backward) and a few block buffers.
//!
//! The backward recomputes each score block from `Q`, `K` and the saved `log Σ e^s` instead of
//! storing the weights:
//!
//! ```text
//! P  = exp(S − lse)                       (recomputed block)
//! dV += Pᵀ · dO
//! dP  = dO · Vᵀ
//! dS  = P ⊙ (dP − D),  D_i = dO_i · O_i
//! dQ += scale · dS · K,   dK += scale · dSᵀ · Q
//! ```
//!
//! With at least 8 (batch, kv head) lanes it runs as one parallel pass, a task per kv lane that
//! recomputes each block once for `dK`, `dV` and the `dQ` of its group's query heads; with fewer,
//! as two passes — `dQ` per (batch, head) lane, then `dK`/`dV` per (batch, kv head) lane — that
//! spread the work over more tasks. Either way each output element is summed by one task in a
//! fixed order: results do not depend on the number of threads.
//!
//! Forward and backward above, written with block matrix products, are the reference. Both run
//! instead on the kernels crate's *strip kernel* ([`llm_kernels::strips`]), compiled for each
//! instruction set: the same
//! online softmax for 32 queries at a time held across vector lanes, with scores, weights and
//! the weighted sum of each key block computed in registers, and a backward with keys across the
//! lanes (one task per kv lane; two passes with fewer than 8 lanes). It keeps data in registers
//! that the block products write to memory and read back, which makes it faster
//! (`docs/performance.md`). The two implementations agree to 1e-12 (tests).
//!
//! Visibility (causality, sliding windows, key padding, a query offset for chunked prefill) is
//! decided per element from absolute positions; blocks that no query can see are skipped.
//! An optional per-head *sink* logit joins every softmax with a zero value vector: it can absorb
//! probability mass without adding to the output.
//!
//! The files, in reading order:
//!
//! | file | idea |
//! |---|---|
//! | `online_softmax` | [`OnlineSoftmax`]: running maximum, normaliser and numerator; the rescale |
//! | `plain` | the plain twin: one query row at a time, over the keys it sees |
//! | `shapes` | the checks of one call, the slices of a lane the plain and block paths read |
//! | `reference` | the forward with block matrix products |
//! | `saved` | what the forward keeps for the backward; the row constants `D_i`; the sinks' gradients |
//! | `backward` | the backward with block matrix products, and how each path runs its lanes |
//! | `path` | which of the three runs a call: the strip kernel, block products, the plain twin |
//! | `operation` | [`tiled_attention`]: checks, a task per query block, the record on the tape |
//! | `merged` | [`tiled_attention_merged`]: values and output in the layer's merged rows, no copies |
//! | `strip_tasks` | the strip kernel's tasks over a call's lanes, in either layout, into storage never zeroed |
//!
//! The strip kernel itself lives in the kernels crate (`crates/llm-kernels`, module `strips`);
//! `strip_tests` holds it to the block path here, on every target.

mod backward;
mod merged;
mod online_softmax;
mod operation;
mod path;
mod plain;
mod reference;
mod saved;
mod shapes;
mod strip_tasks;
#[cfg(test)]
mod strip_tests;

pub use merged::tiled_attention_merged;
pub use online_softmax::OnlineSoftmax;
pub use operation::tiled_attention;
pub use shapes::{LONG_BLOCK, LONG_SEQUENCE, SHORT_BLOCK, block_size};
