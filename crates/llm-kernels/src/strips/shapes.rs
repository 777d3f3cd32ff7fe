//! The plain data the strip kernels read: block sizes, the shapes of one call and the operands of
//! the backward (which keys each query sees is [`crate::visibility`]). The teaching crate checks them (`attention::tiled`)
//! before a kernel runs; here they are taken as given.

/// Query rows and key rows per block for sequences shorter than [`LONG_SEQUENCE`] keys.
pub const SHORT_BLOCK: usize = 64;
/// Query rows and key rows per block from [`LONG_SEQUENCE`] keys on.
pub const LONG_BLOCK: usize = 128;
/// Key count from which blocks are [`LONG_BLOCK`] rows.
pub const LONG_SEQUENCE: usize = 2048;

/// Query rows and key rows per block for attention over `t_k` keys (the strip kernel's forward
/// gives each task four such query blocks and walks the keys in its own blocks of 60).
///
/// A causal block on the diagonal is computed whole though half of it is hidden, so short
/// sequences, where the diagonal is a large share of the blocks, take smaller blocks; long ones
/// take larger blocks, whose matrix products run faster (`docs/performance.md` has the timings).
/// The size depends only on the shapes, so results never depend on the machine load or the thread
/// count.
pub fn block_size(t_k: usize) -> usize {
    if t_k >= LONG_SEQUENCE { LONG_BLOCK } else { SHORT_BLOCK }
}

/// Shapes of one call: `q [B,H,T_q,d]`, `k, v [B,G,T_k,d]`, with `G` dividing `H` and `d > 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Batch rows `B`.
    pub b: usize,
    /// Query heads `H`.
    pub h: usize,
    /// Key/value heads `G`.
    pub g: usize,
    /// Query rows `T_q`.
    pub t_q: usize,
    /// Key rows `T_k`.
    pub t_k: usize,
    /// Head width `d`.
    pub d: usize,
    /// Query rows and key rows per block ([`block_size`]).
    pub block: usize,
}

impl Dims {
    /// Query heads per key/value head, `H / G`.
    pub fn group(&self) -> usize {
        self.h / self.g
    }

    /// The scale of the scores, `1/√d`.
    pub fn scale(&self) -> f64 {
        1.0 / (self.d as f64).sqrt()
    }

    /// Where the queries of batch row `b`, head `h` start in `q`.
    pub fn q_lane(&self, b: usize, h: usize) -> usize {
        (b * self.h + h) * self.t_q * self.d
    }

    /// Where the keys (and values) that query head `h` of batch row `b` reads start in `k` (`v`).
    pub fn kv_lane(&self, b: usize, h: usize) -> usize {
        // repeat-interleave: query head h reads kv head ⌊h / (H/G)⌋
        (b * self.g + h / self.group()) * self.t_k * self.d
    }
}

/// What the backward reads: `q`, `k`, `v`, the upstream `dO` (`g`), the saved `log Σ e^s` and
/// `D_i = dO_i · O_i` — of the whole call, or the slices of one (batch, query head) lane.
///
/// Rows of `q` and `k` lie side by side (`d` apart); rows of `v` and `g` lie `v_stride` and
/// `g_stride` apart: `d`, or `G·d` and `H·d` where they stay in the projections' layout (as the
/// forward's [`QueryBlock`](super::QueryBlock) reads `v` and writes its output).
#[derive(Clone, Copy, Debug)]
pub struct Operands<'a> {
    /// Queries.
    pub q: &'a [f64],
    /// Keys.
    pub k: &'a [f64],
    /// Values.
    pub v: &'a [f64],
    /// The upstream gradient of the output.
    pub g: &'a [f64],
    /// `log Σ e^s` of each query row (−∞ where it saw no key).
    pub lse: &'a [f64],
    /// `D_i = dO_i · O_i` of each query row.
    pub delta: &'a [f64],
    /// The distance between two rows of `v`.
    pub v_stride: usize,
    /// The distance between two rows of `g`.
    pub g_stride: usize,
}
