//! [`tiled_attention`], the operation on the tape: it checks the shapes, runs one task per
//! (lane, query block) on the path that fits, keeps each row's `log Σ eˢ` when a backward may
//! need it, and records the backward (module `backward`).

use rayon::prelude::*;

use super::backward::backward;
use super::path::TiledPath;
use super::plain;
use super::reference::BlockForward;
use super::saved::Saved;
use super::shapes::{Dims, LaneInputs, check};
use super::strip_tasks::{Rows, strips_forward};
use crate::attention::error::AtStage;
use crate::attention::{AttentionError, Stage, Visibility};
use crate::autodiff::TensorValue;
use crate::error::TensorAutodiffError;
use crate::tensor::Tensor;
use llm_kernels::bands::Band;
use llm_kernels::strips;

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
    let path = TiledPath::Strips(strips::StripKernel::new(llm_kernels::active()));
    tiled_attention_on(q, k, v, sinks, visibility, path)
}

/// [`tiled_attention`] on the given path (tests compare the three).
pub(super) fn tiled_attention_on(
    q: &TensorValue,
    k: &TensorValue,
    v: &TensorValue,
    sinks: Option<&TensorValue>,
    visibility: &Visibility,
    path: TiledPath,
) -> Result<TensorValue, AttentionError> {
    let dims = check(q, k, v, sinks, visibility)?;
    let call = Call::read("tiled_attention", [q, k, v], sinks)?;
    let [qt, kt, vt] = &call.values;
    let poisoned = poisoned_lanes(dims, kt, vt);
    let operands_finite = call.operands_finite(&poisoned);
    let forward = Forward { dims, vis: visibility, q: qt, k: kt, v: vt, sinks: call.sinks(), path, poisoned };
    let (out, lse) = forward.run(call.needs_grad).at(Stage::Softmax)?;
    let output = Tensor::new(&[dims.b, dims.h, dims.t_q, dims.d], out).at(Stage::WeightedValues)?;
    Ok(call.record(output, (dims, visibility, path), (lse, operands_finite), backward))
}

/// One call's inputs read from the tape, what both layouts' operations share: the values of
/// `q`, `k`, `v` and the sinks, whether a backward may follow, and the record on the tape.
pub(super) struct Call<'t> {
    name: &'static str,
    inputs: [&'t TensorValue; 3],
    sink_input: Option<&'t TensorValue>,
    /// The values of `q`, `k` and `v`.
    pub(super) values: [Tensor; 3],
    sink_values: Option<Tensor>,
    /// Whether any input needs a gradient (then `log Σ eˢ` is kept: O(T) memory either way).
    pub(super) needs_grad: bool,
}

/// A backward of [`Call::record`]: the gradients of `q`, `k`, `v` (and the sinks) for an upstream.
pub(super) type BackwardOf =
    fn(Dims, &Visibility, Saved<'_>, &Tensor, TiledPath) -> Result<Vec<Option<Tensor>>, TensorAutodiffError>;

impl<'t> Call<'t> {
    /// Reads the inputs (an [`AttentionError::Stage`] error for a released one).
    pub(super) fn read(
        name: &'static str,
        inputs: [&'t TensorValue; 3],
        sink_input: Option<&'t TensorValue>,
    ) -> Result<Self, AttentionError> {
        let read = |x: &TensorValue| x.read(name).at(Stage::Scores);
        let [q, k, v] = inputs;
        let values = [read(q)?, read(k)?, read(v)?];
        let sink_values = sink_input.map(read).transpose()?;
        let needs_grad = inputs.iter().any(|x| x.requires_grad()) || sink_input.is_some_and(TensorValue::requires_grad);
        Ok(Self { name, inputs, sink_input, values, sink_values, needs_grad })
    }

    /// The sink logits, if any.
    pub(super) fn sinks(&self) -> Option<&Tensor> {
        self.sink_values.as_ref()
    }

    /// Whether `q`, `k` and `v` are all finite, for the backward: no poisoned kv lane and, where a
    /// backward may follow, finite queries (checked here, while they are at hand, so that the
    /// backward scans only its upstream).
    pub(super) fn operands_finite(&self, poisoned: &[bool]) -> bool {
        !poisoned.contains(&true) && (!self.needs_grad || crate::tensor::dense::all_finite(self.values[0].as_slice()))
    }

    /// Records `output` on the tape, with `backward` given what the forward saved.
    pub(super) fn record(
        self,
        output: Tensor,
        (dims, vis, path): (Dims, &Visibility, TiledPath),
        (lse, operands_finite): (Vec<f64>, bool),
        backward: BackwardOf,
    ) -> TensorValue {
        let mut parents = self.inputs.map(TensorValue::clone).to_vec();
        parents.extend(self.sink_input.cloned());
        let vis = vis.clone();
        TensorValue::record(self.name, parents, output, move |ctx| {
            let (q, k, v, o) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.output()?);
            let sinks = if ctx.inputs() > 3 { Some(ctx.input(3)?) } else { None };
            let saved = Saved { q: &q, k: &k, v: &v, sinks: sinks.as_ref(), o: &o, lse: &lse, operands_finite };
            backward(dims, &vis, saved, ctx.grad(), path)
        })
    }
}

/// Per (batch, kv head) lane: `true` when its keys or values hold NaN or ±∞. Such lanes run the
/// plain loop, which skips hidden keys instead of weighting them by 0 (`0 · NaN = NaN` would reach
/// queries that cannot see them).
fn poisoned_lanes(dims: Dims, k: &Tensor, v: &Tensor) -> Vec<bool> {
    let kv_len = dims.t_k * dims.d;
    let finite = crate::tensor::dense::all_finite;
    (0..dims.b * dims.g)
        .into_par_iter()
        .map(|l| {
            let lane = l * kv_len..(l + 1) * kv_len;
            !(finite(&k.as_slice()[lane.clone()]) && finite(&v.as_slice()[lane]))
        })
        .collect()
}

/// One call's forward: its inputs, and the path each (lane, query block) task runs on.
pub(super) struct Forward<'a> {
    pub(super) dims: Dims,
    pub(super) vis: &'a Visibility,
    pub(super) q: &'a Tensor,
    pub(super) k: &'a Tensor,
    pub(super) v: &'a Tensor,
    pub(super) sinks: Option<&'a Tensor>,
    pub(super) path: TiledPath,
    /// Per kv lane, from [`poisoned_lanes`].
    pub(super) poisoned: Vec<bool>,
}

/// A worker thread's buffers: the block path's scores, and `log Σ eˢ` rows when none are kept.
type Scratch = (Vec<f64>, Vec<f64>);

impl Forward<'_> {
    /// Query rows per task: a block, or on the strip kernel several blocks, whose strips then
    /// share each block of keys and values fetched from memory.
    fn rows_per_task(&self) -> usize {
        match self.path {
            TiledPath::Strips(_) => strips::TASK_BLOCKS * self.dims.block,
            TiledPath::Blocks | TiledPath::Plain => self.dims.block,
        }
    }

    /// Output `[B, H, T_q, d]` and, with `keep_lse`, each query row's `log Σ eˢ` `[B, H, T_q]`.
    pub(super) fn run(&self, keep_lse: bool) -> Result<(Vec<f64>, Vec<f64>), TensorAutodiffError> {
        if let TiledPath::Strips(kernel) = self.path
            && !self.poisoned.contains(&true)
        {
            // the kernel's tasks write every row: no zeros first
            let operands = (self.q, self.k, self.v, self.sinks);
            return strips_forward(Rows::Heads, (self.dims, self.vis), operands, kernel, keep_lse);
        }
        let Dims { b, h, t_q, d, .. } = self.dims;
        let mut out = crate::tensor::dense::zeros(b * h * t_q * d);
        let mut lse = vec![0.0; if keep_lse { b * h * t_q } else { 0 }];
        let rows = self.rows_per_task();
        let init = || (Vec::new(), Vec::new());
        // the block and plain paths' products and exponentials run on the target read here
        let target = llm_kernels::active();
        // lanes, then query blocks within a lane: no list of tasks is allocated
        if out.is_empty() {
            // no query rows: nothing to compute
        } else if keep_lse {
            out.par_chunks_mut(t_q * d).zip(lse.par_chunks_mut(t_q)).enumerate().try_for_each(|(lane, (o, l))| {
                o.par_chunks_mut(rows * d)
                    .zip(l.par_chunks_mut(rows))
                    .enumerate()
                    .try_for_each_init(init, |scratch, (qb, (o, l))| {
                        target.within(|| self.task(scratch, (lane, qb), o, Some(l)))
                    })
            })?;
        } else {
            out.par_chunks_mut(t_q * d).enumerate().try_for_each(|(lane, o)| {
                o.par_chunks_mut(rows * d).enumerate().try_for_each_init(init, |scratch, (qb, o)| {
                    target.within(|| self.task(scratch, (lane, qb), o, None))
                })
            })?;
        }
        Ok((out, lse))
    }

    /// Query block `qb` of (batch, head) lane `lane`: its output rows `o` and, if kept, their
    /// `log Σ eˢ` `lse`.
    fn task(
        &self,
        (scratch, own_lse): &mut Scratch,
        (lane, qb): (usize, usize),
        o: &mut [f64],
        lse: Option<&mut [f64]>,
    ) -> Result<(), TensorAutodiffError> {
        let (dims, vis) = (self.dims, self.vis);
        let (b, h) = (lane / dims.h, lane % dims.h);
        let (ql, kl) = (dims.q_lane(b, h), dims.kv_lane(b, h));
        let kv = kl..kl + dims.t_k * dims.d;
        let sink = self.sinks.map(|s| s.as_slice()[h]);
        let (q, k, v) =
            (&self.q.as_slice()[ql..ql + dims.t_q * dims.d], &self.k.as_slice()[kv.clone()], &self.v.as_slice()[kv]);
        let lane = LaneInputs { q, k, v, sink, b };
        let (i0, rows) = (qb * self.rows_per_task(), o.len() / dims.d);
        let plain = matches!(self.path, TiledPath::Plain) || self.poisoned[b * dims.g + h / dims.group()];
        match self.path {
            _ if plain => plain::forward_rows(&lane, dims, vis, i0, o, lse_or_scratch(lse, own_lse, rows)),
            TiledPath::Strips(kernel) => {
                let vis = vis.rule();
                let (out, v_stride) = (Band::whole(o, dims.d), dims.d);
                let task = strips::QueryBlock { out, lse, q, k, v, v_stride, sink, dims, b, i0, vis };
                kernel.forward_block(task);
            }
            TiledPath::Blocks | TiledPath::Plain => {
                BlockForward { lane, dims, vis, i0 }.run(o, lse_or_scratch(lse, own_lse, rows), scratch)?
            }
        }
        Ok(())
    }
}

/// The task's slice of saved `log Σ eˢ` when a backward will need them, else `rows` of scratch.
fn lse_or_scratch<'a>(saved: Option<&'a mut [f64]>, scratch: &'a mut Vec<f64>, rows: usize) -> &'a mut [f64] {
    match saved {
        Some(l) => l,
        None => {
            scratch.resize(rows, 0.0);
            scratch.as_mut_slice()
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::attention::SlidingWindow;
    use crate::nn::SplitMix64;

    /// The whole operation on two paths, `[B, H, G, T_q, T_k, d]`: outputs and the gradients of
    /// `q`, `k`, `v` and the sinks, to 1e-12 relative.
    pub(in crate::attention::tiled) fn assert_paths_agree(
        (a, b): (TiledPath, TiledPath),
        shape: [usize; 6],
        vis: &Visibility,
        sinks: bool,
        seed: u64,
    ) {
        let [b_n, h, g, t_q, t_k, d] = shape;
        let mut rng = SplitMix64::new(seed);
        let mut leaf = |dims: &[usize], scale: f64| {
            let n = dims.iter().product();
            let values = (0..n).map(|_| rng.uniform(-scale, scale)).collect();
            TensorValue::leaf(Tensor::new(dims, values).unwrap(), true)
        };
        let (q, k, v) = (leaf(&[b_n, h, t_q, d], 2.0), leaf(&[b_n, g, t_k, d], 2.0), leaf(&[b_n, g, t_k, d], 1.0));
        let s = sinks.then(|| leaf(&[h], 1.0));
        let upstream = leaf(&[b_n, h, t_q, d], 1.0).value().unwrap();
        let run = |path| {
            let out = tiled_attention_on(&q, &k, &v, s.as_ref(), vis, path).unwrap();
            let grads = out.backward_with(&upstream).unwrap();
            let mut all =
                vec![out.value().unwrap(), grads.get_or_zeros(&q), grads.get_or_zeros(&k), grads.get_or_zeros(&v)];
            all.extend(s.as_ref().map(|s| grads.get_or_zeros(s)));
            all
        };
        for (name, (x, y)) in ["output", "dq", "dk", "dv", "dsinks"].iter().zip(run(a).iter().zip(&run(b))) {
            for (i, (x, y)) in x.as_slice().iter().zip(y.as_slice()).enumerate() {
                assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{name}[{i}] of {shape:?}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn the_block_path_equals_the_plain_twin_in_outputs_and_gradients() {
        let both = (TiledPath::Blocks, TiledPath::Plain);
        let causal = |t_q: usize, t_k: usize| Visibility { query_offset: t_k - t_q, ..Visibility::default() };
        // causal over several blocks; GQA (2 query heads per kv head) with sinks, one and two passes
        assert_paths_agree(both, [1, 2, 2, 70, 70, 5], &causal(70, 70), false, 400);
        assert_paths_agree(both, [2, 4, 2, 33, 33, 7], &causal(33, 33), true, 401);
        assert_paths_agree(both, [4, 4, 2, 20, 20, 3], &causal(20, 20), true, 402);
        // the last queries of a longer stream (chunked prefill)
        assert_paths_agree(both, [1, 2, 1, 9, 80, 4], &causal(9, 80), true, 403);
        // windows and padding (a query whose only key is padded: a zero row, zero gradients)
        let mut vis = causal(70, 70);
        vis.window = Some(SlidingWindow::Exclusive(23));
        assert_paths_agree(both, [1, 2, 1, 70, 70, 5], &vis, true, 404);
        vis.window = Some(SlidingWindow::Inclusive(3));
        vis.key_padding = Some((0..140).map(|j| j % 5 == 0).collect());
        assert_paths_agree(both, [2, 2, 1, 70, 70, 6], &vis, true, 405);
        vis.window = None;
        assert_paths_agree(both, [2, 4, 4, 70, 70, 6], &vis, false, 406);
    }
}
