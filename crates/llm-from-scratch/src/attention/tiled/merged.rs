//! [`tiled_attention_merged`]: tiled attention that reads the values and writes its output in
//! the layout of a layer's projections, heads side by side in each token's row.
//!
//! A layer projects `V = X·W_v` as `[B, T, G·d]` and multiplies the heads' outputs by `W_o` as
//! `[B, T, H·d]`. Between the two, [`super::tiled_attention`] wants `v [B, G, T, d]` and gives
//! `[B, H, T, d]`, so the layer splits the values into heads and merges the outputs back: two
//! passes over memory forward, and their two adjoints backward. The strip kernel reads a value
//! row and writes an output row wherever they lie (a row of `d` numbers and the distance to the
//! next), so here it reads `V` and writes `O` in place, and the backward reads `dO` and writes
//! `dV` in place too. Every number is computed by the same operations in the same order as on
//! the split path: the results are bitwise those of `split_heads → tiled_attention →
//! merge_heads` (tests).
//!
//! The tasks are the split path's — the same functions, told where the rows lie
//! (`super::strip_tasks`): one per (batch, head) lane and block of queries forward, one per
//! (batch, kv head) lane backward. A lane's output rows, and its rows of `dV`, are one band
//! of `d` columns in rows shared with the other heads ([`llm_kernels::bands`]), so tasks on
//! different threads write side by side in the same rows. The kernel writes every row of the
//! output, and of `dK` and `dV`, whole, so they are not filled with zeros first
//! ([`llm_kernels::bands::Unfilled`]); only `dQ`, which adds up, starts from zeros. And since
//! `D_i = dO_i · O_i` reads all of `dO`, its finiteness is read off the `D_i` rather than a pass
//! of its own. Where a lane holds NaN or ±∞, where `dO` does (or a `D_i` overflows), where the
//! backward runs as two passes (fewer than 8 kv lanes), or on the block and plain paths, the call
//! copies into heads, runs the split path's code and copies back: the same bits, with the copies.

use rayon::prelude::*;

use super::backward::{FUSED_BACKWARD_LANES, backward};
use super::operation::{Call, Forward};
use super::path::TiledPath;
use super::saved::{Saved, row_constants, upstream_finite};
use super::shapes::{Dims, check_merged};
use super::strip_tasks::{Rows, lane_strips_backward, strips_forward, swap_axes};
use crate::attention::error::AtStage;
use crate::attention::{AttentionError, Stage, Visibility};
use crate::autodiff::TensorValue;
use crate::error::TensorAutodiffError;
use crate::tensor::Tensor;
use llm_kernels::strips::StripKernel;

/// [`tiled_attention`](super::tiled_attention) with values `v [B, T_k, G·d]` and output
/// `[B, T_q, H·d]`: heads side by side in each token's row, as a layer projects them and
/// multiplies them by its output weight. Equal bit for bit to `merge_heads(tiled_attention(q,
/// k, split_heads(v, G)))`, in outputs and gradients, without the copies between the layouts.
///
/// # Shapes
/// `q [B, H, T_q, d]`, `k [B, G, T_k, d]`, `v [B, T_k, G·d]`, sinks `[H]` → `[B, T_q, H·d]`.
///
/// # Errors
/// [`AttentionError::QkvShapes`], [`AttentionError::ParameterShape`] (sinks),
/// [`AttentionError::PaddingShape`] (key padding), [`AttentionError::PositionOverflow`], or an
/// [`AttentionError::Stage`] error for a released input.
///
/// # Example
/// ```
/// use llm_from_scratch::attention::{Visibility, merge_heads, split_heads, tiled_attention, tiled_attention_merged};
/// use llm_from_scratch::constant;
/// let values = |n: usize, step: f64| (0..n).map(|i| (i as f64 * step).sin()).collect::<Vec<_>>();
/// // 2 batch rows of 9 tokens; 2 query heads over 1 key/value head of width 4
/// let q = constant(&[2, 2, 9, 4], &values(144, 0.37))?;
/// let k = constant(&[2, 1, 9, 4], &values(72, 0.53))?;
/// let v = constant(&[2, 9, 4], &values(72, 0.71))?; // the value projection, one head wide
/// let causal = Visibility::default();
/// let merged = tiled_attention_merged(&q, &k, &v, None, &causal)?;
/// assert_eq!(merged.shape(), &[2, 9, 8]);
/// let split = merge_heads(&tiled_attention(&q, &k, &split_heads(&v, 1)?, None, &causal)?)?;
/// assert!(merged.value()?.bitwise_eq(&split.value()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn tiled_attention_merged(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    visibility: &Visibility,
) -> Result<TensorValue, AttentionError> {
    let path = TiledPath::Strips(StripKernel::new(llm_kernels::active()));
    tiled_attention_merged_on(q, k, v, sinks, visibility, path)
}

/// [`tiled_attention_merged`] on the given path.
pub(super) fn tiled_attention_merged_on(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    visibility: &Visibility,
    path: TiledPath,
) -> Result<TensorValue, AttentionError> {
    let dims = check_merged(q, k, v, sinks, visibility)?;
    let call = Call::read("tiled_attention_merged", [q, k, v], sinks)?;
    let [qt, kt, vt] = &call.values;
    let poisoned = poisoned_lanes(dims, kt, vt);
    let operands_finite = call.operands_finite(&poisoned);
    let (out, lse) = match path {
        TiledPath::Strips(kernel) if !poisoned.contains(&true) => {
            let operands = (qt, kt, vt, call.sinks());
            strips_forward(Rows::Merged, (dims, visibility), operands, kernel, call.needs_grad).at(Stage::Softmax)?
        }
        _ => {
            // the split path's code, on value heads copied out of the merged rows
            let v_heads = swap_axes(vt.as_slice(), [dims.b, dims.t_k, dims.g, dims.d]);
            let v_heads = Tensor::new(&[dims.b, dims.g, dims.t_k, dims.d], v_heads).at(Stage::Scores)?;
            let (q, k, sinks) = (qt, kt, call.sinks());
            let forward = Forward { dims, vis: visibility, q, k, v: &v_heads, sinks, path, poisoned };
            let (heads, lse) = forward.run(call.needs_grad).at(Stage::Softmax)?;
            (swap_axes(&heads, [dims.b, dims.h, dims.t_q, dims.d]), lse)
        }
    };
    let output = Tensor::new(&[dims.b, dims.t_q, dims.h * dims.d], out).at(Stage::WeightedValues)?;
    Ok(call.record(output, (dims, visibility, path), (lse, operands_finite), merged_backward))
}

/// Per (batch, kv head) lane: `true` when its keys or values hold NaN or ±∞ (the split path runs
/// such lanes on the plain loop), with the values read in their merged rows.
fn poisoned_lanes(dims: Dims, k: &Tensor, v: &Tensor) -> Vec<bool> {
    let Dims { g, t_k, d, .. } = dims;
    let finite = crate::tensor::dense::all_finite;
    let (k, v) = (k.as_slice(), v.as_slice());
    if finite(k) && finite(v) {
        return vec![false; dims.b * g]; // the usual case, in one pass over each
    }
    (0..dims.b * g)
        .into_par_iter()
        .map(|l| {
            let (bi, gi) = (l / g, l % g);
            let keys = finite(&k[l * t_k * d..(l + 1) * t_k * d]);
            !(keys && (0..t_k).all(|t| finite(&v[((bi * t_k + t) * g + gi) * d..][..d])))
        })
        .collect()
}

/// The gradients `[dq, dk, dv]` (and `d sinks`) with `dO` read and `dV` written in place where
/// the split path would run its one-pass strip backward; else through that path's code, with
/// `v`, `o` and `dO` copied into heads and `dV` copied back.
fn merged_backward(
    dims: Dims,
    vis: &Visibility,
    saved: Saved<'_>,
    g: &Tensor,
    path: TiledPath,
) -> Result<Vec<Option<Tensor>>, TensorAutodiffError> {
    let Dims { b, h, g: g_n, t_q, t_k, d, .. } = dims;
    let in_place = match path {
        TiledPath::Strips(kernel)
            if b * g_n >= FUSED_BACKWARD_LANES
                && saved.operands_finite
                && !saved.q.is_empty()
                && !saved.k.is_empty() =>
        {
            Some(kernel)
        }
        _ => None,
    };
    if let Some(kernel) = in_place {
        // D_i row by row in memory, [B, T_q, H]; all finite where dO is (else through heads, whose
        // backward finds the same and runs the plain loop)
        let delta = row_constants(g.as_slice(), saved.o.as_slice(), d);
        if upstream_finite(&delta) {
            return lane_strips_backward(Rows::Merged, (dims, vis), saved, (g, &delta), kernel);
        }
    }
    let heads = |x: &Tensor, shape: [usize; 4]| {
        Tensor::new(&[shape[0], shape[2], shape[1], shape[3]], swap_axes(x.as_slice(), shape))
    };
    let v_heads = heads(saved.v, [b, t_k, g_n, d])?;
    let o_heads = heads(saved.o, [b, t_q, h, d])?;
    let g_heads = heads(g, [b, t_q, h, d])?;
    let mut grads = backward(dims, vis, Saved { v: &v_heads, o: &o_heads, ..saved }, &g_heads, path)?;
    if let Some(dv) = grads.get_mut(2).and_then(Option::take) {
        grads[2] = Some(Tensor::new(saved.v.shape(), swap_axes(dv.as_slice(), [b, g_n, t_k, d]))?);
    }
    Ok(grads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::{SlidingWindow, merge_heads, split_heads};
    use crate::autodiff::{GradcheckConfig, gradcheck};
    use crate::nn::SplitMix64;
    use llm_kernels::Target;

    /// Every path this processor runs: the strip kernel on each target, block products, the plain loop.
    fn paths() -> Vec<TiledPath> {
        let mut all: Vec<_> = Target::available().into_iter().map(|t| TiledPath::Strips(StripKernel::new(t))).collect();
        all.extend([TiledPath::Blocks, TiledPath::Plain]);
        all
    }

    /// What a test puts into the operands besides random values.
    #[derive(Clone, Copy, PartialEq)]
    enum Poison {
        None,
        /// A NaN in one value row.
        Value,
        /// Two values of the upstream gradient `dO`, the first in the first query's row: NaN and
        /// +∞, or, if the first is finite, a value so large that with a value of 2 there (the
        /// first query sees only the first key, so its output row is that value row) its row's
        /// `D_i = dO_i · O_i` overflows.
        Upstream(f64, f64),
    }

    /// `[B, H, G, T_q, T_k, d]` on every path: the merged call against `split_heads →
    /// tiled_attention → merge_heads` on the same path, outputs and every gradient bit for bit.
    /// A non-finite upstream gradient, or one whose `D_i` overflows, takes the plain loop's
    /// backward on every path: the gradients are those of the plain path too (to 1e-12, as each
    /// path's forward saved its own output).
    fn assert_merged_is_split(shape: [usize; 6], vis: &Visibility, sinks: bool, poison: Poison, seed: u64) {
        let [b, h, g, t_q, t_k, d] = shape;
        let mut rng = SplitMix64::new(seed);
        let mut leaf = |dims: &[usize], scale: f64| {
            let values = (0..dims.iter().product()).map(|_| rng.uniform(-scale, scale)).collect();
            TensorValue::leaf(Tensor::new(dims, values).unwrap(), true)
        };
        let (q, k) = (leaf(&[b, h, t_q, d], 2.0), leaf(&[b, g, t_k, d], 2.0));
        let mut v = leaf(&[b, t_k, g * d], 1.0);
        let mut poison_value = |at: usize, x: f64| {
            let mut values = v.value().unwrap();
            values.as_mut_slice()[at] = x;
            v = TensorValue::leaf(values, true);
        };
        match poison {
            // one value of kv head 0 of the last batch row: its lane runs the plain loop
            Poison::Value => poison_value((b * t_k - 1) * g * d, f64::NAN),
            Poison::Upstream(x, _) if x.is_finite() => poison_value(0, 2.0),
            _ => {}
        }
        let s = sinks.then(|| leaf(&[h], 1.0));
        let mut upstream = leaf(&[b, t_q, h * d], 1.0).value().unwrap();
        if let Poison::Upstream(x, y) = poison {
            let last = upstream.len() - 1;
            upstream.as_mut_slice()[0] = x;
            upstream.as_mut_slice()[last] = y;
        }
        let plain = |x: &TensorValue| {
            let out = tiled_attention_merged_on(&q, &k, &v, s.as_ref(), vis, TiledPath::Plain).unwrap();
            out.backward_with(&upstream).unwrap().get_or_zeros(x)
        };
        for path in paths() {
            let merged = tiled_attention_merged_on(&q, &k, &v, s.as_ref(), vis, path).unwrap();
            let split = split_heads(&v, g).unwrap();
            let split = merge_heads(
                &super::super::operation::tiled_attention_on(&q, &k, &split, s.as_ref(), vis, path).unwrap(),
            )
            .unwrap();
            assert!(merged.value().unwrap().bitwise_eq(&split.value().unwrap()), "output of {shape:?} on {path:?}");
            let (gm, gs) = (merged.backward_with(&upstream).unwrap(), split.backward_with(&upstream).unwrap());
            let mut inputs = vec![("dq", &q), ("dk", &k), ("dv", &v)];
            inputs.extend(s.as_ref().map(|s| ("dsinks", s)));
            for (name, x) in inputs {
                let (a, b) = (gm.get_or_zeros(x), gs.get_or_zeros(x));
                assert!(a.bitwise_eq(&b), "{name} of {shape:?} on {path:?}: {:?}", a.max_abs_diff(&b));
                if matches!(poison, Poison::Upstream(..)) {
                    // the plain loop's backward, from this path's forward: non-finite where the
                    // plain path's gradients are, and within 1e-12 of them elsewhere
                    let want = plain(x);
                    let close = a.as_slice().iter().zip(want.as_slice()).all(|(&a, &b)| {
                        (a.is_finite() == b.is_finite())
                            && (!b.is_finite() || (a - b).abs() <= 1e-12 * b.abs().max(1.0))
                    });
                    assert!(close, "{name} of {shape:?} on {path:?}: not the plain loop's");
                }
            }
        }
    }

    #[test]
    fn the_merged_call_is_the_split_call_bit_for_bit_on_every_path() {
        let causal = |t_q: usize, t_k: usize| Visibility { query_offset: t_k - t_q, ..Visibility::default() };
        // two batch rows, B·G = 8: in place forward and backward (several query and key blocks)
        assert_merged_is_split([2, 4, 4, 70, 70, 6], &causal(70, 70), false, Poison::None, 500);
        assert_merged_is_split([4, 8, 2, 33, 33, 12], &causal(33, 33), true, Poison::None, 501);
        // in place forward, the backward in two passes (B·G < 8), through heads
        assert_merged_is_split([3, 4, 2, 70, 70, 5], &causal(70, 70), true, Poison::None, 502);
        // one batch row: in place forward; the backward through heads, then in place (B·G = 8)
        assert_merged_is_split([1, 2, 1, 70, 70, 5], &causal(70, 70), false, Poison::None, 503);
        assert_merged_is_split([1, 8, 8, 40, 40, 4], &causal(40, 40), true, Poison::None, 507);
        // the last queries of a longer stream; windows and padding
        assert_merged_is_split([2, 4, 4, 9, 80, 4], &causal(9, 80), true, Poison::None, 504);
        let mut vis = causal(70, 70);
        vis.window = Some(SlidingWindow::Inclusive(3));
        vis.key_padding = Some((0..140).map(|j| j % 5 == 0).collect());
        assert_merged_is_split([2, 4, 4, 70, 70, 6], &vis, true, Poison::None, 505);
        // a lane holding NaN runs the plain loop, through heads
        assert_merged_is_split([2, 4, 4, 20, 20, 3], &causal(20, 20), false, Poison::Value, 506);
        // a NaN and a +∞ in dO, and a dO whose D_i overflows, in place otherwise (B·G = 8): the
        // plain loop's backward
        assert_merged_is_split(
            [2, 4, 4, 20, 20, 3],
            &causal(20, 20),
            true,
            Poison::Upstream(f64::NAN, f64::INFINITY),
            508,
        );
        assert_merged_is_split([2, 4, 4, 20, 20, 3], &causal(20, 20), false, Poison::Upstream(f64::MAX, 0.5), 509);
    }

    #[test]
    fn gradcheck_merged_in_place_and_through_heads() {
        let mut rng = SplitMix64::new(11);
        let mut random = |shape: &[usize]| {
            Tensor::new(shape, (0..shape.iter().product()).map(|_| rng.uniform(-1.0, 1.0)).collect()).unwrap()
        };
        // B·G = 8 (in place) and B·G = 2 (through heads), with sinks
        for [b, h, g] in [[2, 8, 4], [2, 2, 1]] {
            let inputs = [
                ("q", random(&[b, h, 5, 3])),
                ("k", random(&[b, g, 5, 3])),
                ("v", random(&[b, 5, g * 3])),
                ("sinks", random(&[h])),
            ];
            let report = gradcheck(
                &inputs,
                &GradcheckConfig::default(),
                |v| -> Result<TensorValue, Box<dyn std::error::Error>> {
                    Ok(tiled_attention_merged(&v[0], &v[1], &v[2], Some(&v[3]), &Visibility::default())?)
                },
            )
            .unwrap();
            assert!(report.passed(), "{b}·{g}: {report:?}");
        }
    }

    #[test]
    fn no_queries_or_no_keys_give_empty_outputs_and_zero_gradients() {
        let leaf = |shape: &[usize]| TensorValue::leaf(Tensor::zeros(shape).unwrap(), true);
        // [B, H, G, T_q, T_k, d]: no queries; no keys (a query that sees nothing: a zero row)
        for [b, h, g, t_q, t_k, d] in [[2, 4, 2, 0, 5, 3], [2, 4, 2, 3, 0, 3], [2, 8, 4, 0, 0, 3]] {
            let (q, k, v) = (leaf(&[b, h, t_q, d]), leaf(&[b, g, t_k, d]), leaf(&[b, t_k, g * d]));
            let vis = Visibility { query_offset: t_k.saturating_sub(t_q), ..Visibility::default() };
            for path in paths() {
                let out = tiled_attention_merged_on(&q, &k, &v, None, &vis, path).unwrap();
                assert_eq!(out.shape(), &[b, t_q, h * d]);
                assert!(out.value().unwrap().as_slice().iter().all(|&x| x == 0.0));
                let ones = Tensor::new(out.shape(), vec![1.0; b * t_q * h * d]).unwrap();
                let grads = out.backward_with(&ones).unwrap();
                for x in [&q, &k, &v] {
                    let grad = grads.get_or_zeros(x);
                    assert_eq!(grad.shape(), x.shape());
                    assert!(grad.as_slice().iter().all(|&x| x == 0.0));
                }
            }
        }
    }

    #[test]
    fn values_not_in_merged_rows_are_a_shape_error() {
        let zeros = |shape: &[usize]| TensorValue::leaf(Tensor::zeros(shape).unwrap(), false);
        let (q, k) = (zeros(&[2, 4, 6, 3]), zeros(&[2, 2, 6, 3]));
        let vis = Visibility::default();
        // heads instead of merged rows; the wrong width; another batch size; another length
        for v in [zeros(&[2, 2, 6, 3]), zeros(&[2, 6, 9]), zeros(&[1, 6, 6]), zeros(&[2, 5, 6])] {
            let err = tiled_attention_merged(&q, &k, &v, None, &vis).unwrap_err();
            assert!(matches!(err, AttentionError::QkvShapes { .. }), "{:?}: {err}", v.shape());
        }
        assert!(tiled_attention_merged(&q, &k, &zeros(&[2, 6, 6]), None, &vis).is_ok());
    }
}
