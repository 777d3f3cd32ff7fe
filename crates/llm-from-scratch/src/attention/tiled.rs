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
//! Forward and backward above, written with block matrix products, are the reference. On
//! processors with AVX-512 both run instead on the *strip kernel* (module `strips`): the same
//! online softmax for 32 queries at a time held across vector lanes, with scores, weights and
//! the weighted sum of each key block computed in registers, and a backward with keys across the
//! lanes (one task per kv lane; two passes with fewer than 8 lanes). Measured on the benchmark
//! machine: the causal forward over T = 4096 (`long-causal`) takes 140 ms instead of 175, and
//! the backward 330 ms instead of 660; at the shapes of `mha-train` the backward takes 3.7 ms
//! instead of 4.8. The two implementations agree to 1e-12 (tests).
//!
//! Visibility (causality, sliding windows, key padding, a query offset for chunked prefill) is
//! decided per element from absolute positions; blocks that no query can see are skipped.
//! An optional per-head *sink* logit joins every softmax with a zero value vector: it can absorb
//! probability mass without adding to the output.

mod plain;
mod strips;

use rayon::prelude::*;

use crate::attention::{AttentionError, SlidingWindow, Stage, visible};
use crate::autodiff::TensorValue;
use crate::error::{Shape, TensorAutodiffError};
use crate::tensor::Tensor;
use crate::tensor::exp::{exp, exp_shifted_sum};
use crate::tensor::kernels::{MatRef, matmul, matmul_scaled};

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
/// take larger blocks, whose matrix products run faster. Measured on the benchmark machine:
/// blocks of 64 against 128 take 25 against 33 ms for the training step of `mha-train`
/// (T = 256), and 177 against 162 ms for `long-causal` (T = 4096). The size depends only on the
/// shapes, so results never depend on the machine load or the thread count.
pub fn block_size(t_k: usize) -> usize {
    if t_k >= LONG_SEQUENCE { LONG_BLOCK } else { SHORT_BLOCK }
}

/// The running state of a softmax-weighted sum over keys seen so far, for one query row.
///
/// `Σ_j e^{s_j} v_j / Σ_j e^{s_j}` is kept as `m = max s_j`, `ℓ = Σ e^{s_j − m}` and
/// `n = Σ e^{s_j − m} v_j`; [`OnlineSoftmax::merge`] combines two such states exactly.
///
/// A score of `+∞` takes all the weight (shared equally among the `+∞` scores), as in the
/// explicit softmax; a score of `−∞` takes none.
///
/// ```
/// use llm_from_scratch::attention::OnlineSoftmax;
/// // two blocks of one key each: scores 0 and ln 3, values [1] and [0] → weights 1/4, 3/4
/// let a = OnlineSoftmax::from_block(&[0.0], &[vec![1.0]])?;
/// let b = OnlineSoftmax::from_block(&[3f64.ln()], &[vec![0.0]])?;
/// let merged = a.merge(&b)?;
/// assert!((merged.output()[0] - 0.25).abs() < 1e-15);
/// // rows of different widths are refused, not truncated
/// assert!(OnlineSoftmax::from_block(&[0.0, 1.0], &[vec![1.0], vec![1.0, 2.0]]).is_err());
/// # Ok::<(), llm_from_scratch::attention::AttentionError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct OnlineSoftmax {
    /// Running maximum `m` (−∞ before any visible key).
    pub max: f64,
    /// Normaliser `ℓ = Σ e^{s_j − m}`.
    pub normaliser: f64,
    /// Numerator `n = Σ e^{s_j − m} v_j`.
    pub numerator: Vec<f64>,
}

impl OnlineSoftmax {
    /// The state of no key at all, for values of width `d`.
    pub fn empty(d: usize) -> Self {
        Self { max: f64::NEG_INFINITY, normaliser: 0.0, numerator: vec![0.0; d] }
    }

    /// The state of one block of scores and their value rows (one row per score, all of the
    /// first row's width `d`).
    ///
    /// # Errors
    /// [`AttentionError::OnlineSoftmaxShape`] if the counts differ or a row has another width.
    pub fn from_block(scores: &[f64], values: &[Vec<f64>]) -> Result<Self, AttentionError> {
        let shape_error = |what, expected, actual| AttentionError::OnlineSoftmaxShape { what, expected, actual };
        if scores.len() != values.len() {
            return Err(shape_error("value rows", scores.len(), values.len()));
        }
        let d = values.first().map_or(0, Vec::len);
        if let Some(row) = values.iter().find(|row| row.len() != d) {
            return Err(shape_error("value row width", d, row.len()));
        }
        let mut state = Self::empty(d);
        for (s, v) in scores.iter().zip(values) {
            state = state.merge(&Self { max: *s, normaliser: 1.0, numerator: v.clone() })?;
        }
        Ok(state)
    }

    /// Combines two states: with `M = max(m_a, m_b)`, `ℓ = ℓ_a e^{m_a−M} + ℓ_b e^{m_b−M}` and the
    /// same for the numerators.
    ///
    /// # Errors
    /// [`AttentionError::OnlineSoftmaxShape`] if the two numerators have different widths.
    pub fn merge(&self, other: &Self) -> Result<Self, AttentionError> {
        if self.numerator.len() != other.numerator.len() {
            return Err(AttentionError::OnlineSoftmaxShape {
                what: "merged state width",
                expected: self.numerator.len(),
                actual: other.numerator.len(),
            });
        }
        let max = self.max.max(other.max);
        if max == f64::NEG_INFINITY {
            return Ok(self.clone());
        }
        let (a, b) = (rescale(self.max, max), rescale(other.max, max));
        // a term scaled by 0 takes no part (it may hold ±∞ or NaN that a product by 0 would spread)
        let term = |x: f64, scale: f64| if scale == 0.0 { 0.0 } else { x * scale };
        Ok(Self {
            max,
            normaliser: term(self.normaliser, a) + term(other.normaliser, b),
            numerator: self.numerator.iter().zip(&other.numerator).map(|(&x, &y)| term(x, a) + term(y, b)).collect(),
        })
    }

    /// The weighted average `n / ℓ` (zeros when no key was visible).
    pub fn output(&self) -> Vec<f64> {
        if self.normaliser == 0.0 {
            return vec![0.0; self.numerator.len()];
        }
        self.numerator.iter().map(|x| x / self.normaliser).collect()
    }
}

/// `e^{m − M}`, with an empty state (`m = −∞`) contributing 0; exactly 1 when the maximum did not
/// move (most blocks after the first few), without evaluating the exponential.
///
/// A maximum of `+∞` keeps only the states whose maximum is `+∞` (factor 1), so a `+∞` score
/// takes all the weight instead of turning the state into `e^{∞−∞}` = NaN.
fn rescale(m: f64, max: f64) -> f64 {
    if m == max {
        1.0
    } else if m == f64::NEG_INFINITY || max == f64::INFINITY {
        0.0
    } else {
        exp(m - max)
    }
}

/// Which keys each query sees, decided from absolute positions.
#[derive(Clone, Debug, Default)]
pub struct Visibility {
    /// Stream position of query row 0 (key row `j` is at position `j`): `T_k − T_q` for chunked
    /// prefill and decode over keys `0..T_k`, 0 for self-attention.
    pub query_offset: usize,
    /// Sliding window, if any.
    pub window: Option<SlidingWindow>,
    /// `[B, T_k]`, `true` = padding key (never seen).
    pub key_padding: Option<Vec<bool>>,
}

impl Visibility {
    fn sees(&self, b: usize, t_k: usize, i: usize, j: usize) -> bool {
        visible(self.query_offset + i, j, self.window) && !self.key_padding.as_ref().is_some_and(|p| p[b * t_k + j])
    }

    /// `true` when no query in rows `i0..i1` can see a key in `j0..j1` (causality and window only).
    fn block_hidden(&self, i0: usize, i1: usize, j0: usize, j1: usize) -> bool {
        let (first_q, last_q) = (self.query_offset + i0, self.query_offset + i1 - 1);
        let future = j0 > last_q;
        let too_old = self.window.is_some_and(|w| (j1 - 1).saturating_add(w.visible_keys()) <= first_q);
        future || too_old
    }

    /// `true` when every query in `i0..i1` sees every key in `j0..j1` (no per-element test needed).
    fn block_open(&self, i0: usize, i1: usize, j0: usize, j1: usize) -> bool {
        let (first_q, last_q) = (self.query_offset + i0, self.query_offset + i1 - 1);
        let causal_ok = j1 - 1 <= first_q;
        let window_ok = self.window.is_none_or(|w| last_q.saturating_sub(j0) < w.visible_keys());
        causal_ok && window_ok && self.key_padding.is_none()
    }
}

/// The largest value of a row (−∞ for an empty or all-hidden row), over eight interleaved lanes
/// so that it vectorises. NaN never wins a comparison; it still poisons the exponentials after.
fn row_max(row: &[f64]) -> f64 {
    let mut lanes = [f64::NEG_INFINITY; 8];
    let mut chunks = row.chunks_exact(8);
    for chunk in &mut chunks {
        for (m, &x) in lanes.iter_mut().zip(chunk) {
            *m = if x > *m { x } else { *m };
        }
    }
    let tail = chunks.remainder().iter().fold(f64::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    lanes.iter().fold(tail, |m, &x| if x > m { x } else { m })
}

/// Shapes of one call: `q [B,H,T_q,d]`, `k, v [B,G,T_k,d]`.
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    h: usize,
    g: usize,
    t_q: usize,
    t_k: usize,
    d: usize,
    /// Query rows and key rows per block ([`block_size`]).
    block: usize,
}

impl Dims {
    fn group(&self) -> usize {
        self.h / self.g
    }
    fn q_lane(&self, b: usize, h: usize) -> usize {
        (b * self.h + h) * self.t_q * self.d
    }
    fn kv_lane(&self, b: usize, h: usize) -> usize {
        // repeat-interleave: query head h reads kv head ⌊h / (H/G)⌋
        (b * self.g + h / self.group()) * self.t_k * self.d
    }
}

fn check(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    vis: &Visibility,
) -> Result<Dims, AttentionError> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let fail = |reason| AttentionError::qkv_shapes(q, k, v, reason);
    if qs.len() != 4 || ks.len() != 4 || ks != vs {
        return Err(fail("tiled attention needs q [B,H,T_q,d] and k = v shapes [B,G,T_k,d]"));
    }
    let dims = Dims { b: qs[0], h: qs[1], g: ks[1], t_q: qs[2], t_k: ks[2], d: qs[3], block: block_size(ks[2]) };
    if ks[0] != dims.b || ks[3] != dims.d || dims.g == 0 || !dims.h.is_multiple_of(dims.g) {
        return Err(fail("batch and width must agree, and H must be a multiple of G"));
    }
    if dims.d == 0 {
        return Err(fail("the head width must be positive"));
    }
    if vis.query_offset.checked_add(dims.t_q).is_none() {
        return Err(AttentionError::PositionOverflow { offset: vis.query_offset, tokens: dims.t_q });
    }
    if let Some(s) = sinks
        && s.shape() != [dims.h]
    {
        return Err(AttentionError::ParameterShape {
            name: "sink logits",
            expected: Shape(vec![dims.h]),
            actual: Shape::from(s.shape()),
        });
    }
    if let Some(p) = &vis.key_padding
        && p.len() != dims.b * dims.t_k
    {
        return Err(AttentionError::PaddingShape {
            what: "key padding",
            expected: Shape(vec![dims.b, dims.t_k]),
            actual: Shape(vec![p.len()]),
        });
    }
    Ok(dims)
}

/// Scores of one block `scale · Q[i0..i1] · K[j0..j1]ᵀ` into `s`, hidden entries set to −∞.
#[allow(clippy::too_many_arguments)]
fn score_block(
    s: &mut [f64],
    q: &[f64],
    k: &[f64],
    dims: Dims,
    b: usize,
    (i0, i1): (usize, usize),
    (j0, j1): (usize, usize),
    scale: f64,
    vis: &Visibility,
) -> Result<(), TensorAutodiffError> {
    let d = dims.d;
    let (n, m) = (i1 - i0, j1 - j0);
    let qv = MatRef::row_major(&q[i0 * d..], n, d)?;
    let kv = MatRef::row_major(&k[j0 * d..], m, d)?.t();
    matmul_scaled(&mut s[..n * m], qv, kv, scale, false, false)?;
    if !vis.block_open(i0, i1, j0, j1) {
        for r in 0..n {
            for c in 0..m {
                if !vis.sees(b, dims.t_k, i0 + r, j0 + c) {
                    s[r * m + c] = f64::NEG_INFINITY;
                }
            }
        }
    }
    Ok(())
}

/// Forward of one (batch, head, query block): output rows and their `log Σ e^s`.
#[allow(clippy::too_many_arguments)]
fn forward_block(
    out: &mut [f64],
    lse: &mut [f64],
    q: &[f64],
    k: &[f64],
    v: &[f64],
    sink: Option<f64>,
    dims: Dims,
    b: usize,
    i0: usize,
    vis: &Visibility,
    scratch: &mut Vec<f64>,
) -> Result<(), TensorAutodiffError> {
    let d = dims.d;
    let n = lse.len();
    let i1 = i0 + n;
    let scale = 1.0 / (d as f64).sqrt();
    // per row: m (running max), l (normaliser); `out` holds the numerator until the end
    let mut m = vec![sink.unwrap_or(f64::NEG_INFINITY); n];
    let mut l = vec![if sink.is_some() { 1.0 } else { 0.0 }; n];
    out.fill(0.0);
    scratch.resize(n * dims.block, 0.0); // reused by the worker thread: every entry is written before it is read
    let s = scratch.as_mut_slice();
    for j0 in (0..dims.t_k).step_by(dims.block) {
        let j1 = (j0 + dims.block).min(dims.t_k);
        if vis.block_hidden(i0, i1, j0, j1) {
            continue;
        }
        let w = j1 - j0;
        score_block(s, q, k, dims, b, (i0, i1), (j0, j1), scale, vis)?;
        for r in 0..n {
            let row = &mut s[r * w..(r + 1) * w];
            let block_max = row_max(row);
            let new_max = m[r].max(block_max);
            if new_max == f64::NEG_INFINITY {
                row.fill(0.0);
                continue;
            }
            // merging a block with a larger maximum rescales what came before by e^{m − M}
            let alpha = rescale(m[r], new_max);
            let total = exp_shifted_sum(row, new_max); // hidden keys: e^{−∞} = 0
            l[r] = l[r] * alpha + total;
            m[r] = new_max;
            if alpha != 1.0 {
                out[r * d..(r + 1) * d].iter_mut().for_each(|o| *o *= alpha);
            }
        }
        // n += P · V_block
        let p = MatRef::row_major(s, n, w)?;
        matmul(out, p, MatRef::row_major(&v[j0 * d..], w, d)?, true, false)?;
    }
    for r in 0..n {
        let row = &mut out[r * d..(r + 1) * d];
        if l[r] == 0.0 {
            row.fill(0.0); // no visible key: zeros, as in the explicit path
            lse[r] = f64::NEG_INFINITY;
        } else {
            row.iter_mut().for_each(|o| *o /= l[r]);
            lse[r] = m[r] + l[r].ln();
        }
    }
    Ok(())
}

/// The task's slice of saved `log Σ e^s` when a backward will need them, else `rows` of scratch.
fn lse_or_scratch<'a>(saved: Option<&'a mut [f64]>, scratch: &'a mut Vec<f64>, rows: usize) -> &'a mut [f64] {
    match saved {
        Some(l) => l,
        None => {
            scratch.resize(rows, 0.0);
            scratch.as_mut_slice()
        }
    }
}

/// Attention of `q [B,H,T_q,d]` over `k, v [B,G,T_k,d]` (`H % G == 0`, grouped by
/// repeat-interleave), causal from absolute positions, with optional window, key padding and
/// per-head sink logits `[H]`. Returns `[B,H,T_q,d]` on the tape; equal to the explicit path to
/// rounding, in outputs and gradients.
///
/// # Shapes
/// `q [B, H, T_q, d]`, `k, v [B, G, T_k, d]`, sinks `[H]` → `[B, H, T_q, d]`; memory beyond the
/// inputs and output is O(T_q) (one `log Σ eˢ` per query row) plus a few blocks.
///
/// # Errors
/// [`AttentionError::QkvShapes`], [`AttentionError::ParameterShape`] (sinks),
/// [`AttentionError::PaddingShape`] (key padding), or an [`AttentionError::Stage`] error for a
/// released input.
///
/// # Example
/// ```
/// use llm_from_scratch::attention::{Visibility, grouped_attention, tiled_attention};
/// use llm_from_scratch::constant;
/// let values = |n: usize, step: f64| (0..n).map(|i| (i as f64 * step).sin()).collect::<Vec<_>>();
/// // 70 tokens: more than one block of 64; 2 query heads over 1 key/value head
/// let q = constant(&[1, 2, 70, 4], &values(560, 0.37))?;
/// let k = constant(&[1, 1, 70, 4], &values(280, 0.53))?;
/// let v = constant(&[1, 1, 70, 4], &values(280, 0.71))?;
/// let causal = Visibility::default();
/// let tiled = tiled_attention(&q, &k, &v, None, &causal)?.value()?;
/// let explicit = grouped_attention(&q, &k, &v, None, &causal)?.output().value()?;
/// assert_eq!(tiled.shape(), &[1, 2, 70, 4]);
/// assert!(tiled.max_abs_diff(&explicit).unwrap() < 1e-12);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn tiled_attention(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    visibility: &Visibility,
) -> Result<TensorValue, AttentionError> {
    tiled_attention_on(q, k, v, sinks, visibility, strips::StripKernel::detect())
}

/// [`tiled_attention`] on the strip kernel where given, else on block products (tests compare
/// the two).
fn tiled_attention_on(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    visibility: &Visibility,
    strip_kernel: Option<strips::StripKernel>,
) -> Result<TensorValue, AttentionError> {
    let dims = check(q, k, v, sinks, visibility)?;
    let read = |x: &TensorValue| x.read("tiled_attention").map_err(AttentionError::at(Stage::Scores));
    let (qt, kt, vt) = (read(q)?, read(k)?, read(v)?);
    let sink_values = sinks.map(read).transpose()?;
    let (b_n, h_n, t_q, d) = (dims.b, dims.h, dims.t_q, dims.d);
    // kv lanes holding NaN or ±∞ run the plain loop, which skips hidden keys instead of weighting
    // them by 0 (0 · NaN = NaN would reach queries that cannot see them)
    let kv_len = dims.t_k * d;
    let finite = crate::tensor::dense::all_finite;
    let poisoned: Vec<bool> = (0..dims.b * dims.g)
        .into_par_iter()
        .map(|l| {
            let (k, v) = (&kt.as_slice()[l * kv_len..(l + 1) * kv_len], &vt.as_slice()[l * kv_len..(l + 1) * kv_len]);
            !(finite(k) && finite(v))
        })
        .collect();
    let mut out = crate::tensor::dense::zeros(b_n * h_n * t_q * d);
    // log-sum-exps are kept only when a backward may need them (O(T) memory either way)
    let needs_grad =
        q.requires_grad() || k.requires_grad() || v.requires_grad() || sinks.is_some_and(TensorValue::requires_grad);
    let mut lse = vec![0.0; if needs_grad { b_n * h_n * t_q } else { 0 }];
    // query rows per task: a block, or on the strip kernel several blocks, whose strips then
    // share each block of keys and values fetched from memory
    let block = strip_kernel.map_or(dims.block, |_| strips::TASK_BLOCKS * dims.block);
    // one task per (lane, query block), owning its output rows (and their log-sum-exps)
    let run_block = |scratch: &mut Vec<f64>,
                     own_lse: &mut Vec<f64>,
                     (lane, qb): (usize, usize),
                     o: &mut [f64],
                     l: Option<&mut [f64]>| {
        let (b, h) = (lane / h_n, lane % h_n);
        let sink = sink_values.as_ref().map(|s| s.as_slice()[h]);
        let (ql, kl) = (dims.q_lane(b, h), dims.kv_lane(b, h));
        let lane_q = &qt.as_slice()[ql..ql + t_q * d];
        let (lane_k, lane_v) = (&kt.as_slice()[kl..kl + dims.t_k * d], &vt.as_slice()[kl..kl + dims.t_k * d]);
        if poisoned[kl / kv_len.max(1)] {
            let lane = plain::PlainLane { q: lane_q, k: lane_k, v: lane_v, sink, b };
            let rows = o.len() / d;
            plain::forward_rows(&lane, dims, visibility, qb * block, o, lse_or_scratch(l, own_lse, rows));
            return Ok(());
        }
        if let Some(kernel) = strip_kernel {
            let task = strips::QueryBlock {
                out: o,
                lse: l,
                q: lane_q,
                k: lane_k,
                v: lane_v,
                sink,
                dims,
                b,
                i0: qb * block,
                vis: visibility,
            };
            kernel.forward_block(task);
            return Ok(());
        }
        let l = lse_or_scratch(l, own_lse, o.len() / d);
        forward_block(o, l, lane_q, lane_k, lane_v, sink, dims, b, qb * block, visibility, scratch)
    };
    let init = || (Vec::new(), Vec::new());
    // lanes, then query blocks within a lane: no list of tasks is allocated
    if out.is_empty() {
        Ok(()) // no query rows: nothing to compute
    } else if needs_grad {
        out.par_chunks_mut(t_q * d).zip(lse.par_chunks_mut(t_q)).enumerate().try_for_each(|(lane, (o, l))| {
            o.par_chunks_mut(block * d)
                .zip(l.par_chunks_mut(block))
                .enumerate()
                .try_for_each_init(init, |(s, own), (qb, (o, l))| run_block(s, own, (lane, qb), o, Some(l)))
        })
    } else {
        out.par_chunks_mut(t_q * d).enumerate().try_for_each(|(lane, o)| {
            o.par_chunks_mut(block * d)
                .enumerate()
                .try_for_each_init(init, |(s, own), (qb, o)| run_block(s, own, (lane, qb), o, None))
        })
    }
    .map_err(AttentionError::at(Stage::Softmax))?;
    let output = Tensor::new(&[b_n, h_n, t_q, d], out).map_err(AttentionError::at(Stage::WeightedValues))?;
    let mut parents = vec![q.clone(), k.clone(), v.clone()];
    parents.extend(sinks.cloned());
    let vis = visibility.clone();
    Ok(TensorValue::record("tiled_attention", parents, output, move |ctx| {
        let (q, k, v, o) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.output()?);
        let sinks = if ctx.inputs() > 3 { Some(ctx.input(3)?) } else { None };
        let operands = (&q, &k, &v, sinks.as_ref(), &o);
        backward(dims, &vis, operands, &lse, ctx.grad(), strip_kernel)
    }))
}

/// What the backward reads: `q`, `k`, `v`, the upstream `dO` (`g`), the saved `log Σ e^s` and
/// `D_i = dO_i · O_i` — of the whole call, or the slices of one (batch, query head) lane.
#[derive(Clone, Copy)]
struct Operands<'a> {
    q: &'a [f64],
    k: &'a [f64],
    v: &'a [f64],
    g: &'a [f64],
    lse: &'a [f64],
    delta: &'a [f64],
}

/// The operands of one (batch, query head) lane.
struct Lane<'a> {
    b: usize,
    ops: Operands<'a>,
}

/// Everything the backward shares between lanes.
struct Backward<'a> {
    dims: Dims,
    vis: &'a Visibility,
    all: Operands<'a>,
}

impl<'a> Backward<'a> {
    fn lane(&self, b: usize, h: usize) -> Lane<'a> {
        let Dims { h: h_n, t_q, t_k, d, .. } = self.dims;
        let (ql, kl, row) = (self.dims.q_lane(b, h), self.dims.kv_lane(b, h), (b * h_n + h) * t_q);
        let all = self.all;
        let ops = Operands {
            q: &all.q[ql..ql + t_q * d],
            k: &all.k[kl..kl + t_k * d],
            v: &all.v[kl..kl + t_k * d],
            g: &all.g[ql..ql + t_q * d],
            lse: &all.lse[row..row + t_q],
            delta: &all.delta[row..row + t_q],
        };
        Lane { b, ops }
    }

    /// Recomputes one block's `P = exp(S − lse)` into `p` (hidden entries and rows that saw no key
    /// give 0) and `dS = scale · P ⊙ (dO·Vᵀ − D)` into `ds`.
    fn block(
        &self,
        lane: &Lane<'_>,
        (i0, i1): (usize, usize),
        (j0, j1): (usize, usize),
        p: &mut [f64],
        ds: &mut [f64],
    ) -> Result<(), TensorAutodiffError> {
        let d = self.dims.d;
        let (n, w) = (i1 - i0, j1 - j0);
        let scale = 1.0 / (d as f64).sqrt();
        score_block(p, lane.ops.q, lane.ops.k, self.dims, lane.b, (i0, i1), (j0, j1), scale, self.vis)?;
        for (r, row) in p[..n * w].chunks_mut(w).enumerate() {
            if lane.ops.lse[i0 + r] == f64::NEG_INFINITY {
                row.fill(0.0);
            } else {
                exp_shifted_sum(row, lane.ops.lse[i0 + r]);
            }
        }
        // dP = dO · Vᵀ, then dS = P ⊙ (dP − D), scaled once for the products that use it
        let go = MatRef::row_major(&lane.ops.g[i0 * d..], n, d)?;
        matmul(&mut ds[..n * w], go, MatRef::row_major(&lane.ops.v[j0 * d..], w, d)?.t(), false, false)?;
        for (r, row) in ds[..n * w].chunks_mut(w).enumerate() {
            for (x, &pv) in row.iter_mut().zip(&p[r * w..(r + 1) * w]) {
                *x = scale * pv * (*x - lane.ops.delta[i0 + r]);
            }
        }
        Ok(())
    }

    /// `dQ` of one query lane: `dQ += dS · K` over its key blocks, in order.
    fn query_lane(&self, lane: &Lane<'_>, dq: &mut [f64]) -> Result<(), TensorAutodiffError> {
        let Dims { t_q, t_k, d, block, .. } = self.dims;
        let (mut p, mut ds) = (vec![0.0; block * block], vec![0.0; block * block]);
        for i0 in (0..t_q).step_by(block) {
            let i1 = (i0 + block).min(t_q);
            for j0 in (0..t_k).step_by(block) {
                let j1 = (j0 + block).min(t_k);
                if self.vis.block_hidden(i0, i1, j0, j1) {
                    continue;
                }
                self.block(lane, (i0, i1), (j0, j1), &mut p, &mut ds)?;
                let dsm = MatRef::row_major(&ds, i1 - i0, j1 - j0)?;
                matmul(
                    &mut dq[i0 * d..i1 * d],
                    dsm,
                    MatRef::row_major(&lane.ops.k[j0 * d..], j1 - j0, d)?,
                    true,
                    false,
                )?;
            }
        }
        Ok(())
    }

    /// `dK`, `dV` of one (batch, kv head) lane, summing the query heads of its group in order;
    /// with `dq` (the group's query lanes) also their `dQ`, from the same recomputed blocks.
    fn kv_lane(
        &self,
        kv_lane: usize,
        mut dq: Option<&mut [f64]>,
        dk: &mut [f64],
        dv: &mut [f64],
    ) -> Result<(), TensorAutodiffError> {
        let Dims { g: g_n, t_q, t_k, d, block, .. } = self.dims;
        let group = self.dims.group();
        let (b, gi) = (kv_lane / g_n, kv_lane % g_n);
        let (mut p, mut ds) = (vec![0.0; block * block], vec![0.0; block * block]);
        for j0 in (0..t_k).step_by(block) {
            let j1 = (j0 + block).min(t_k);
            let w = j1 - j0;
            for r in 0..group {
                let lane = self.lane(b, gi * group + r);
                for i0 in (0..t_q).step_by(block) {
                    let i1 = (i0 + block).min(t_q);
                    if self.vis.block_hidden(i0, i1, j0, j1) {
                        continue;
                    }
                    let n = i1 - i0;
                    self.block(&lane, (i0, i1), (j0, j1), &mut p, &mut ds)?;
                    let (pm, dsm) = (MatRef::row_major(&p, n, w)?, MatRef::row_major(&ds, n, w)?);
                    // dV += Pᵀ · dO and dK += dSᵀ · Q
                    matmul(
                        &mut dv[j0 * d..j1 * d],
                        pm.t(),
                        MatRef::row_major(&lane.ops.g[i0 * d..], n, d)?,
                        true,
                        false,
                    )?;
                    matmul(
                        &mut dk[j0 * d..j1 * d],
                        dsm.t(),
                        MatRef::row_major(&lane.ops.q[i0 * d..], n, d)?,
                        true,
                        false,
                    )?;
                    if let Some(dq) = dq.as_deref_mut() {
                        let rows = &mut dq[r * t_q * d..(r + 1) * t_q * d];
                        matmul(
                            &mut rows[i0 * d..i1 * d],
                            dsm,
                            MatRef::row_major(&lane.ops.k[j0 * d..], w, d)?,
                            true,
                            false,
                        )?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `d sink_h = −Σ_{b,i} p_sink · D_i` with `p_sink = e^{s_h − lse_i}`, summed per head in order.
    fn sinks(&self, sinks: &Tensor) -> Vec<f64> {
        let Dims { b: b_n, h: h_n, .. } = self.dims;
        let mut grad = vec![0.0; h_n];
        for b in 0..b_n {
            for (h, g) in grad.iter_mut().enumerate() {
                let (lane, s) = (self.lane(b, h), sinks.as_slice()[h]);
                *g += lane
                    .ops
                    .lse
                    .iter()
                    .zip(lane.ops.delta)
                    .filter(|(l, _)| **l != f64::NEG_INFINITY)
                    .map(|(l, dl)| -exp(s - l) * dl)
                    .sum::<f64>();
            }
        }
        grad
    }
}

/// With at least this many (batch, kv head) lanes the backward runs as one pass per kv lane (each
/// block recomputed once for `dQ`, `dK` and `dV`); with fewer, as two passes that also spread the
/// work over query lanes. The choice depends only on the shapes, so results never depend on the
/// thread count.
const FUSED_BACKWARD_LANES: usize = 8;

/// Rows of `dO · O` per parallel task of the backward's row constants (each row's sum runs left
/// to right on one thread, so the constants do not depend on the thread count).
const DELTA_ROWS_PER_TASK: usize = 1024;

/// The gradients of [`tiled_attention`] from the saved `log Σ e^s`, on the strip kernel where
/// given (module `strips`), else on block products.
fn backward(
    dims: Dims,
    vis: &Visibility,
    (q, k, v, sinks, o): (&Tensor, &Tensor, &Tensor, Option<&Tensor>, &Tensor),
    lse: &[f64],
    g: &Tensor,
    kernel: Option<strips::StripKernel>,
) -> Result<Vec<Option<Tensor>>, TensorAutodiffError> {
    let Dims { h: h_n, g: g_n, t_q, t_k, d, .. } = dims;
    if q.is_empty() || k.is_empty() {
        // nothing attended: every adjoint is zero (and the sinks received no mass)
        let zeros = |t: &Tensor| Tensor::zeros(t.shape()).map(Some);
        let mut grads = vec![zeros(q)?, zeros(k)?, zeros(v)?];
        if sinks.is_some() {
            grads.push(Some(Tensor::zeros(&[h_n])?));
        }
        return Ok(grads);
    }
    if ![q, k, v, g].iter().all(|t| t.all_finite()) {
        return Ok(plain_backward(dims, vis, (q, k, v, sinks, o), g));
    }
    // D_i = dO_i · O_i: the softmax adjoint's row constant
    let delta: Vec<f64> = g
        .as_slice()
        .par_chunks(d)
        .zip(o.as_slice().par_chunks(d))
        .with_min_len(DELTA_ROWS_PER_TASK)
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum())
        .collect();
    let all = Operands { q: q.as_slice(), k: k.as_slice(), v: v.as_slice(), g: g.as_slice(), lse, delta: &delta };
    let run = Backward { dims, vis, all };
    let zeros = crate::tensor::dense::zeros;
    let (mut dq, mut dk, mut dv) = (zeros(q.len()), zeros(k.len()), zeros(v.len()));
    let kv_lanes = dk.par_chunks_mut(t_k * d).zip(dv.par_chunks_mut(t_k * d)).enumerate();
    if let Some(kernel) = kernel
        && dims.b * g_n >= FUSED_BACKWARD_LANES
    {
        // one task per kv lane owns dK, dV of the lane and dQ of its group's query heads
        let groups = dq.par_chunks_mut(dims.group() * t_q * d);
        kv_lanes.zip(groups).for_each(|((kv_lane, (dk, dv)), dq)| {
            let (b, gi, group) = (kv_lane / g_n, kv_lane % g_n, dims.group());
            let heads: Vec<Operands<'_>> = (0..group).map(|r| run.lane(b, gi * group + r).ops).collect();
            kernel.lane_gradients(strips::LaneGradients { dq, dk, dv, heads: &heads, dims, b, vis });
        });
    } else if let Some(kernel) = kernel {
        // pass 1: dQ per (query lane, query block); pass 2: dK, dV per (kv lane, key block)
        let block = dims.block;
        dq.par_chunks_mut(t_q * d).enumerate().for_each(|(lane, dq)| {
            let (b, h) = (lane / h_n, lane % h_n);
            let lane = run.lane(b, h).ops;
            dq.par_chunks_mut(block * d).enumerate().for_each(|(qb, dq)| {
                kernel.query_gradients(strips::QueryGradients { dq, lane, dims, b, i0: qb * block, vis });
            });
        });
        kv_lanes.for_each(|(kv_lane, (dk, dv))| {
            let (b, gi, group) = (kv_lane / g_n, kv_lane % g_n, dims.group());
            let heads: Vec<Operands<'_>> = (0..group).map(|r| run.lane(b, gi * group + r).ops).collect();
            dk.par_chunks_mut(block * d).zip(dv.par_chunks_mut(block * d)).enumerate().for_each(|(kb, (dk, dv))| {
                let task = strips::KeyValueGradients { dk, dv, heads: &heads, dims, b, j0: kb * block, vis };
                kernel.key_value_gradients(task);
            });
        });
    } else if dims.b * g_n >= FUSED_BACKWARD_LANES {
        // one task per kv lane owns dK, dV of the lane and dQ of its group's query heads
        let groups = dq.par_chunks_mut(dims.group() * t_q * d);
        kv_lanes.zip(groups).try_for_each(|((lane, (dk, dv)), dq)| run.kv_lane(lane, Some(dq), dk, dv))?;
    } else {
        // pass 1: dQ per query lane; pass 2: dK and dV per kv lane
        dq.par_chunks_mut(t_q * d)
            .enumerate()
            .try_for_each(|(lane, dq)| run.query_lane(&run.lane(lane / h_n, lane % h_n), dq))?;
        kv_lanes.try_for_each(|(lane, (dk, dv))| run.kv_lane(lane, None, dk, dv))?;
    }
    let mut grads =
        vec![Some(Tensor::new(q.shape(), dq)?), Some(Tensor::new(k.shape(), dk)?), Some(Tensor::new(v.shape(), dv)?)];
    if let Some(s) = sinks {
        grads.push(Some(Tensor::new(&[h_n], run.sinks(s))?));
    }
    Ok(grads)
}

/// The backward on the plain loop (module `plain`), for operands holding NaN or ±∞: hidden keys
/// are skipped, so their values never reach a gradient they take no part in.
fn plain_backward(
    dims: Dims,
    vis: &Visibility,
    (q, k, v, sinks, o): (&Tensor, &Tensor, &Tensor, Option<&Tensor>, &Tensor),
    g: &Tensor,
) -> Vec<Option<Tensor>> {
    let Dims { b: b_n, h: h_n, t_q, d, .. } = dims;
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    let mut dsink = vec![0.0; h_n];
    let lane_len = t_q * d;
    for b in 0..b_n {
        for (h, dsink) in dsink.iter_mut().enumerate() {
            let (ql, kl) = (dims.q_lane(b, h), dims.kv_lane(b, h));
            let kv = kl..kl + dims.t_k * d;
            let lane = plain::PlainLane {
                q: &q.as_slice()[ql..ql + lane_len],
                k: &k.as_slice()[kv.clone()],
                v: &v.as_slice()[kv.clone()],
                sink: sinks.map(|s| s.as_slice()[h]),
                b,
            };
            let upstream = (&o.as_slice()[ql..ql + lane_len], &g.as_slice()[ql..ql + lane_len]);
            let grads = plain::PlainGradients {
                dq: &mut dq[ql..ql + lane_len],
                dk: &mut dk[kv.clone()],
                dv: &mut dv[kv],
                dsink,
            };
            plain::backward_lane(&lane, upstream, dims, vis, grads);
        }
    }
    let mut grads = vec![
        Some(Tensor::from_parts(q.shape().to_vec(), dq)),
        Some(Tensor::from_parts(k.shape().to_vec(), dk)),
        Some(Tensor::from_parts(v.shape().to_vec(), dv)),
    ];
    if sinks.is_some() {
        grads.push(Some(Tensor::from_parts(vec![h_n], dsink)));
    }
    grads
}
