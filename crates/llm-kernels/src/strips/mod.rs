//! The tiled forward as one kernel over *strips* of 32 queries held across vector lanes.
//!
//! The teaching crate's `attention::tiled` spells the algorithm out twice — one query row at a
//! time (`plain`) and with block matrix products (`reference`) — and holds this kernel to both. Here the same
//! steps run in the processor's registers and first-level cache: a strip's queries are
//! transposed once (`Qᵀ`, `d × 32`), so that each score row `Sᵀ[j] = K[j] · Qᵀ`, each running
//! maximum and normaliser, and each output column `Oᵀ[c] += Σ_j V[j,c] · Pᵀ[j]` is a row of 32
//! numbers — one per query, four AVX-512 registers. Every key and value element is read once
//! per register chunk as a scalar and multiplied into its queries, and the softmax of a block needs no
//! reductions across lanes:
//!
//! ```text
//! for each key block j0..j1, for each strip (32 queries):
//!     Sᵀ[j]   = Σ_p K[j,p] · (scale · Qᵀ[p])        (fused multiply-adds, 6 key rows at a time)
//!     hidden entries = −∞                           (only in blocks that are not fully visible)
//!     M       = max(m, max_j Sᵀ[j]),  α = e^{m−M}
//!     Pᵀ[j]   = e^{Sᵀ[j] − M},        ℓ = α·ℓ + Σ_j Pᵀ[j]
//!     Oᵀ[c]   = α·Oᵀ[c] + Σ_j V[j,c] · Pᵀ[j]         (6 value columns at a time)
//! O = (Oᵀ / ℓ)ᵀ,  log Σ eˢ = M + ln ℓ
//! ```
//!
//! A register tile is 6 rows × 4 registers: 24 accumulators, and per step 4 vector loads and 6
//! scalar broadcasts: the most accumulators that leave registers for the loads, so the loop runs
//! close to the processor's multiply-add peak (`docs/performance.md`). Key blocks (60 keys,
//! ten whole tiles) run in the outer loop so that a block of keys and values is read from memory
//! once for all strips of a task (several query blocks).
//!
//! The gradients run on the same tiles with keys across the lanes (module `backward`).
//!
//! The kernel is written once, generic over the dispatch module's lane trait, and compiled for
//! each target: on AVX-512 a register tile is 6 rows × 4 registers of 8 (all 32 lanes); AVX2
//! has 16 registers, so a tile is 6 rows × 2 registers of 4 and a row of 32 lanes is covered in
//! four chunks of 8; the portable version works on pairs. Each lane's numbers go through the
//! same fused multiply-adds in the same order on every target, so the three agree bitwise
//! (tests), and they equal the block path to rounding (tests: 1e-12 relative). As every number is
//! computed by one task in a fixed order, results do not depend on the thread count.

mod backward;
mod shapes;
mod tiles;

pub use backward::{KeyValueGradients, LaneGradients, QueryGradients};
pub use shapes::{Dims, LONG_BLOCK, LONG_SEQUENCE, Operands, SHORT_BLOCK, block_size};

use crate::bands::Band;
use crate::visibility::Visibility;

use crate::isa::{self, Isa, Kernel};
use crate::target::Target;
use tiles::{pack_values, score_tiles, softmax_block, weighted_packed, weighted_tiles};

/// Queries per strip: the vector lanes of the kernel (four AVX-512 registers, eight AVX2 ones).
pub const STRIP: usize = 32;

/// Key rows (scores) or value columns (outputs) per register tile: 6 × 4 accumulators, plus 4
/// loaded registers and a broadcast, of AVX-512's 32 vector registers (on AVX2, 6 × 2 of 16).
const TILE: usize = 6;

/// Query blocks ([`block_size`]) per forward task. The strips of a task share each block
/// of keys and values read from memory, so with 4 blocks they are fetched from the last-level
/// cache a quarter as often.
pub const TASK_BLOCKS: usize = 4;

/// Keys per block: ten whole tiles of scores (the time hardly depends on it:
/// `docs/performance.md`).
const KEYS: usize = 60;

/// One number per query of a strip, aligned to a cache line so that each quarter is one aligned
/// vector load.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(crate) struct Lanes([f64; STRIP]);

impl Lanes {
    const fn splat(x: f64) -> Self {
        Self([x; STRIP])
    }
}

/// The strip kernel compiled for one [`Target`]: made where a call begins, from
/// [`active`](crate::target::active), and handed to every task, so that worker threads run the
/// same one.
///
/// A task's sizes ([`Dims`], strides, first rows) must describe its slices: the teaching crate's
/// `attention::tiled` builds them from checked shapes (`shapes.rs`). With any other task the
/// kernel stays sound — every unchecked read is behind a bounds test done in checked arithmetic
/// (`tests/hostile.rs` feeds strides whose products wrap) — but its results are unspecified.
///
/// # Panics
/// Each entry point panics on a task whose sizes do not describe its slices where a slice is
/// indexed (a head width of 0, `lse` or `delta` shorter than the rows, a band with too few
/// rows), on positions past `usize::MAX` in builds with overflow checks (a query offset within
/// a strip of it), and, like `Vec::with_capacity`, fails to allocate scratch that a task's sizes
/// put past the memory there is.
#[derive(Clone, Copy, Debug)]
pub struct StripKernel(Target);

impl StripKernel {
    /// The kernel for `target` (a target the processor lacks runs the portable version).
    pub fn new(target: Target) -> Self {
        Self(target)
    }

    /// Output rows and `log Σ eˢ` of one task's query rows.
    pub fn forward_block(self, task: QueryBlock<'_>) {
        SCRATCH.with_borrow_mut(|s| isa::run(self.0, Forward(task, s)));
    }

    /// `dQ` of one query block (the backward's first pass).
    pub fn query_gradients(self, task: QueryGradients<'_>) {
        BACKWARD_SCRATCH.with_borrow_mut(|s| isa::run(self.0, QueryPass(task, s)));
    }

    /// `dQ`, `dK` and `dV` of one kv lane (the one-pass backward).
    pub fn lane_gradients(self, task: LaneGradients<'_>) {
        BACKWARD_SCRATCH.with_borrow_mut(|s| isa::run(self.0, LanePass(task, s)));
    }

    /// `dK` and `dV` of one key block (the backward's second pass).
    pub fn key_value_gradients(self, task: KeyValueGradients<'_>) {
        BACKWARD_SCRATCH.with_borrow_mut(|s| isa::run(self.0, KeyValuePass(task, s)));
    }
}

/// The four entry points as [`Kernel`]s: each body is compiled once per target.
struct Forward<'t, 's>(QueryBlock<'t>, &'s mut Scratch);
struct QueryPass<'t, 's>(QueryGradients<'t>, &'s mut backward::Scratch);
struct LanePass<'t, 's>(LaneGradients<'t>, &'s mut backward::Scratch);
struct KeyValuePass<'t, 's>(KeyValueGradients<'t>, &'s mut backward::Scratch);

impl Kernel for Forward<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) {
        run(isa, self.0, self.1);
    }
}

impl Kernel for QueryPass<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) {
        backward::query_gradients(isa, self.0, self.1);
    }
}

impl Kernel for LanePass<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) {
        backward::lane_gradients(isa, self.0, self.1);
    }
}

impl Kernel for KeyValuePass<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<I: Isa>(self, isa: I) {
        backward::key_value_gradients(isa, self.0, self.1);
    }
}

thread_local! {
    /// Each thread's buffers, kept between calls and sized by the largest task the thread has
    /// run: `2·d` rows of 32 values per strip (16 strips at most) and one block of scores and
    /// values, about 0.56 MiB for `d = 64`. A call then allocates nothing but its output, and the memory it adds while it
    /// runs is O(T) even where the allocator hands the buffers freed by one call to the next
    /// call's output.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
    /// The same for the backward: `4·d + 124` rows of 32 values per strip of a task (4 strips
    /// at most), under 0.3 MiB for `d = 64`.
    static BACKWARD_SCRATCH: std::cell::RefCell<backward::Scratch> =
        std::cell::RefCell::new(backward::Scratch::default());
}

/// Per-thread buffers; every entry is written before it is read.
#[derive(Debug, Default)]
struct Scratch {
    /// `Qᵀ` of each strip: `d` rows of [`Lanes`] per strip.
    queries: Vec<Lanes>,
    /// Un-normalised `Oᵀ` of each strip: `d` rows per strip.
    outputs: Vec<Lanes>,
    /// Scores, then weights, of the current (key block, strip): one row per key.
    scores: Vec<Lanes>,
    /// The current block of values, by [`pack_values`].
    values: Vec<[f64; TILE]>,
    /// Running maximum `m` of each strip.
    max: Vec<Lanes>,
    /// Running normaliser `ℓ` of each strip.
    sum: Vec<Lanes>,
}

/// One (batch, head, query rows) task: the queries from `i0` of one lane, as many as `out` holds
/// rows.
///
/// Values are rows of `d` numbers a *stride* apart, and the output a [`Band`] of `d` columns:
/// rows side by side where a lane stands alone (`[B, G, T_k, d]`, `[B, H, T_q, d]`), or one
/// head's part of each row in the layout of a layer's projections (`[B, T_k, G·d]`,
/// `[B, T_q, H·d]`). Reading and writing them in place spares a layer the copies that split
/// values into heads and merge the outputs back.
#[derive(Debug)]
pub struct QueryBlock<'a> {
    /// The block's output rows, `d` values each, not yet written: the kernel writes each whole.
    pub out: Band<'a>,
    /// `[n]` `log Σ eˢ` per row (−∞ where no key was visible), where a backward needs them.
    pub lse: Option<&'a mut [f64]>,
    /// The lane's `[T_q, d]` queries.
    pub q: &'a [f64],
    /// The lane's `[T_k, d]` keys.
    pub k: &'a [f64],
    /// The lane's `T_k` value rows, `v_stride` apart.
    pub v: &'a [f64],
    /// The distance between two value rows (at least `d`).
    pub v_stride: usize,
    /// The head's sink logit, if any (a key with a zero value vector that every query sees).
    pub sink: Option<f64>,
    /// The shapes of the call.
    pub dims: Dims,
    /// Batch row (for key padding).
    pub b: usize,
    /// First query row of the block.
    pub i0: usize,
    /// Which keys each query sees.
    pub vis: Visibility<'a>,
}

/// The kernel (see the module docs).
#[inline(always)]
fn run<I: Isa>(isa: I, task: QueryBlock<'_>, s: &mut Scratch) {
    let QueryBlock { mut out, lse, q, k, v, v_stride, sink, dims, b, i0, vis } = task;
    let Dims { t_k, d, .. } = dims;
    let n = out.rows();
    let strips = n.div_ceil(STRIP);
    let scale = dims.scale();
    let mut lse = lse;
    s.queries.resize(strips * d, Lanes::splat(0.0));
    s.outputs.clear();
    s.outputs.resize(strips * d, Lanes::splat(0.0));
    s.scores.resize(KEYS, Lanes::splat(0.0));
    // a sink is a key with score `sink` and a zero value vector, seen by every query
    s.max.clear();
    s.max.resize(strips, Lanes::splat(sink.unwrap_or(f64::NEG_INFINITY)));
    s.sum.clear();
    s.sum.resize(strips, Lanes::splat(if sink.is_some() { 1.0 } else { 0.0 }));
    for (strip, qt) in s.queries.chunks_mut(d).enumerate() {
        // scale·Qᵀ; the lanes of a last, partial strip hold zeros and are never written out
        transpose_in(qt, (q, d), i0 + strip * STRIP, STRIP.min(n - strip * STRIP), scale);
    }
    for j0 in (0..t_k).step_by(KEYS) {
        // the keys of the block some query of the task sees (causality); their values regrouped
        // by column tile, so that each tile reads one contiguous run
        let j_end = (j0 + KEYS).min(t_k).min(vis.query_offset + i0 + n);
        if j_end <= j0 {
            break;
        }
        if vis.block_hidden(i0, i0 + n, j0, j_end) {
            continue; // older than every query's window
        }
        pack_values(&mut s.values, &v[j0 * v_stride..], (j_end - j0, d, v_stride));
        if v_stride != d {
            // the next block's value rows, while this block's strips run
            crate::fetch::fetch_rows(v, (j_end, KEYS), d, v_stride);
        }
        for strip in 0..strips {
            let Some(((a0, a1), j1)) = strip_block(&vis, (i0, n), strip, j0, t_k) else {
                continue;
            };
            let w = j1 - j0;
            let qt = &s.queries[strip * d..(strip + 1) * d];
            score_tiles(isa, &mut s.scores[..w], &k[j0 * d..j1 * d], d, qt);
            let scores = &mut s.scores[..w];
            if !vis.block_open(a0, a1, j0, j1) {
                hide_keys_in_rows(scores, j0, (a0, a1), &vis, b, t_k);
            }
            let alpha = softmax_block(isa, scores, &mut s.max[strip], &mut s.sum[strip]);
            // once the maxima settle (most blocks), nothing needs rescaling
            let alpha = alpha.0.iter().any(|&a| a != 1.0).then_some(alpha);
            let ot = &mut s.outputs[strip * d..(strip + 1) * d];
            weighted_packed(isa, ot, &s.values, j_end - j0, scores, alpha);
        }
    }
    for (strip, ot) in s.outputs.chunks(d).enumerate() {
        let rows = STRIP.min(n - strip * STRIP);
        for c in 0..rows {
            let (r, sum, max) = (strip * STRIP + c, s.sum[strip].0[c], s.max[strip].0[c]);
            // rows in order, r = 0..n: the band's next row is row r
            out.write_row(|row| {
                if sum == 0.0 {
                    row.write_with(|_| 0.0) // no visible key: zeros, as in the explicit path
                } else {
                    row.write_with(|p| ot[p].0[c] / sum)
                }
            });
            if let Some(lse) = lse.as_deref_mut() {
                lse[r] = if sum == 0.0 { f64::NEG_INFINITY } else { max + sum.ln() };
            }
        }
    }
}

/// The query rows `a0..a1` of strip `strip` of a task (rows `i0..i0 + n`), and the end `j1` of
/// the keys from `j0` on (one block at most) that some of them see; `None` when they see none.
fn strip_block(
    vis: &Visibility<'_>,
    (i0, n): (usize, usize),
    strip: usize,
    j0: usize,
    t_k: usize,
) -> Option<((usize, usize), usize)> {
    let (a0, a1) = (i0 + strip * STRIP, (i0 + (strip + 1) * STRIP).min(i0 + n));
    // causality: no query of the strip sees a key after its own position
    let j1 = (j0 + KEYS).min(t_k).min(vis.query_offset + a1);
    (j1 > j0 && !vis.block_hidden(a0, a1, j0, j1)).then_some(((a0, a1), j1))
}

/// `lanes[p].0[c] = scale · rows[(first + c)·stride + p]` for the `count ≤ 32` rows from
/// `first` (`p < d = lanes.len()`), zeros in the other lanes.
fn transpose_in(lanes: &mut [Lanes], (rows, stride): (&[f64], usize), first: usize, count: usize, scale: f64) {
    let d = lanes.len();
    if stride != d {
        // rows apart: ask for all of them first, so that their loads overlap
        crate::fetch::fetch_rows(rows, (first, count), d, stride);
    }
    for lane in lanes.iter_mut() {
        lane.0[count..].fill(0.0);
    }
    // row by row: each row is read once, front to back, and written down one lane
    for c in 0..count {
        let row = &rows[(first + c) * stride..(first + c) * stride + d];
        for (lane, &y) in lanes.iter_mut().zip(row) {
            lane.0[c] = scale * y;
        }
    }
}

/// Sets to −∞ the entries a query does not see, where row `r` is key `j0 + r` and lane `c` is
/// query row `a0 + c` (lanes past `a1` hold no query and are never written out: the general
/// test leaves them alone, the causal one treats them like the rest). With causality alone it
/// compares positions lane by lane, without the per-entry test of windows and padding.
fn hide_keys_in_rows(
    rows: &mut [Lanes],
    j0: usize,
    (a0, a1): (usize, usize),
    vis: &Visibility<'_>,
    b: usize,
    t_k: usize,
) {
    if vis.window_keys.is_none() && vis.key_padding.is_none() {
        // key j is hidden from query row i when j > offset + i: keys up to the first query's
        // position are hidden from none of the strip's lanes
        let first = vis.query_offset + a0;
        let skip = (first + 1).saturating_sub(j0).min(rows.len());
        for (j, row) in (j0 + skip..).zip(rows[skip..].iter_mut()) {
            for (c, x) in row.0.iter_mut().enumerate() {
                *x = if j > first + c { f64::NEG_INFINITY } else { *x };
            }
        }
        return;
    }
    for (j, row) in (j0..).zip(rows.iter_mut()) {
        for (c, x) in row.0.iter_mut().enumerate().take(a1 - a0) {
            if !vis.sees(b, t_k, a0 + c, j) {
                *x = f64::NEG_INFINITY;
            }
        }
    }
}

/// Sets to −∞ the entries a query does not see, where row `r` is query row `i0 + r` and lane `c`
/// is key `k0 + c`; lanes at or past `k1` (no key) too.
fn hide_queries_in_rows(
    rows: &mut [Lanes],
    i0: usize,
    (k0, k1): (usize, usize),
    vis: &Visibility<'_>,
    b: usize,
    t_k: usize,
) {
    let causal_only = vis.window_keys.is_none() && vis.key_padding.is_none();
    for (i, row) in (i0..).zip(rows.iter_mut()) {
        if causal_only {
            if k1 >= k0 + STRIP && vis.query_offset + i >= k0 + STRIP - 1 {
                break; // this row and every later one see all 32 keys of the strip
            }
            let last = (vis.query_offset + i).min(k1.saturating_sub(1)); // the last key row i sees
            for (c, x) in row.0.iter_mut().enumerate() {
                *x = if k0 + c > last { f64::NEG_INFINITY } else { *x };
            }
        } else {
            for (c, x) in row.0.iter_mut().enumerate() {
                if k0 + c >= k1 || !vis.sees(b, t_k, i, k0 + c) {
                    *x = f64::NEG_INFINITY;
                }
            }
        }
    }
}
