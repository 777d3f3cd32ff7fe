//! The two matrix products of attention, with the pairs a mask hides taking no part.
//!
//! ```text
//! scores = q · kᵀ          hidden (i, j): the score is computed, but its adjoint is never used
//! output = weights · v     hidden (i, j): the weight is skipped, not multiplied by v_j
//! ```
//!
//! A hidden key gets weight exactly 0, so an ordinary product adds `0 · v_j` — and
//! `0 · NaN = NaN`, `0 · ∞ = NaN`: a key that a query cannot see (a future token, a padding
//! token) would poison that query's output, and through the backward every gradient. Here a
//! hidden pair is *skipped*, so what a query cannot see cannot change its output or its
//! gradients.
//!
//! The fast path is the ordinary product: when the operands a hidden pair would touch are all
//! finite, its term is exactly `±0` (its weight, or its score's adjoint, is 0) and skipping it
//! changes nothing. The explicit loop below runs only when some operand holds NaN or ±∞.
//!
//! # Shapes
//! As [`TensorValue::matmul`]: `lhs [..., m, k] · rhs [..., k, n] → [..., m, n]` with
//! broadcasting over the leading axes; the lhs must carry every leading axis of the output (as
//! the scores and weights of attention do). The mask broadcasts to `[..., m, k]` for
//! [`TensorValue::matmul_visible`] (it hides weights) and to `[..., m, n]` for
//! [`TensorValue::matmul_scores`] (it hides scores).

use crate::autodiff::TensorValue;
use std::borrow::Cow;

use llm_kernels::masked::{hidden_are_zero, zero_hidden};
use rayon::prelude::*;

use crate::autodiff::ops::masked_fill::MaskRows;
use crate::autodiff::ops::matmul::Plan;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::dense::all_finite;
use crate::tensor::{Mask, Tensor};

/// Which entries of a batch of `[m, n]` matrices a mask hides, without expanding a mask that
/// broadcasts over the batch (a `[T, T]` causal mask over `[B, H, T, T]` scores stays `[T, T]`):
/// the mask's rows ([`MaskRows`]), each matrix's `m` rows one run of flags.
struct Hidden {
    rows: MaskRows,
    /// Rows per matrix.
    m: usize,
    /// `m·n`.
    size: usize,
}

impl Hidden {
    fn new(op: &'static str, mask: &Mask, shape: &[usize]) -> Result<Self> {
        let r = shape.len(); // ≥ 2: both products are of matrices
        let (m, size) = (shape[r - 2], shape[r - 2] * shape[r - 1]);
        let rows = MaskRows::of(op, mask, shape)?.in_runs_of(m, mask, shape);
        Ok(Self { rows, m, size })
    }

    /// The flags of matrix `t`, `m·n` of them.
    fn lane(&self, t: usize) -> &[bool] {
        if self.size == 0 { &[] } else { self.rows.run(t * self.m, self.m) }
    }

    /// `true` when every hidden entry of `values` (the whole batch) is exactly 0: for each
    /// matrix, `m.iter().zip(lane).all(|(&x, &h)| !h || x == 0.0)`, the loop compiled for the
    /// target (`llm_kernels::masked`).
    fn all_zero(&self, values: &[f64]) -> bool {
        let target = llm_kernels::active();
        values.par_chunks(self.size.max(1)).enumerate().all(|(t, m)| target.within(|| hidden_are_zero(m, self.lane(t))))
    }

    /// `values` with the hidden entries replaced by 0 (select, never multiply); borrowed when
    /// they already are.
    fn select<'a>(&self, values: &'a [f64]) -> Cow<'a, [f64]> {
        if self.all_zero(values) { Cow::Borrowed(values) } else { Cow::Owned(self.zeroed(values)) }
    }

    /// A copy of `values` with the hidden entries replaced by 0.
    fn zeroed(&self, values: &[f64]) -> Vec<f64> {
        let mut owned = values.to_vec();
        self.zero(&mut owned);
        owned
    }

    /// Sets the hidden entries of `values` to 0, in place: for each matrix, `if h { *x = 0.0 }`
    /// beside each flag, the loop compiled for the target (`llm_kernels::masked`).
    fn zero(&self, values: &mut [f64]) {
        let target = llm_kernels::active();
        values
            .par_chunks_mut(self.size.max(1))
            .enumerate()
            .for_each(|(t, m)| target.within(|| zero_hidden(m, self.lane(t))));
    }
}

/// The plan of `lhs · rhs`, refusing a lhs that is broadcast over the output's leading axes
/// (each output matrix then reads its own lhs matrix, whose entries the mask addresses).
fn plan(op: &'static str, lhs: &[usize], rhs: &[usize]) -> Result<Plan> {
    let plan = Plan::new(lhs, rhs)?;
    if plan.lhs_count != plan.pairs.len() {
        return Err(TensorAutodiffError::ShapeMismatch {
            op,
            lhs: Shape::from(lhs),
            rhs: Shape::from(rhs),
            reason: "the lhs must carry every leading axis of the product",
        });
    }
    Ok(plan)
}

impl TensorValue {
    /// `weights · values` over the visible pairs only: `out[i] = Σ_{j visible to i} w_ij · v_j`,
    /// where `mask [..., m, k]` (broadcast to `self`'s shape) is true for the hidden pairs.
    ///
    /// ```
    /// use llm_from_scratch::{Mask, constant};
    /// // query 0 cannot see key 1, whose value is NaN: its output stays finite
    /// let w = constant(&[2, 2], &[1.0, 0.0, 0.5, 0.5])?;
    /// let v = constant(&[2, 1], &[2.0, f64::NAN])?;
    /// let out = w.matmul_visible(&v, &Mask::causal(2, 2, 0)?)?.value()?;
    /// assert_eq!(out.as_slice()[0], 2.0);
    /// assert!(out.as_slice()[1].is_nan()); // query 1 sees it
    /// assert!(w.matmul(&v)?.value()?.as_slice()[0].is_nan()); // the ordinary product leaks
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    ///
    /// # Shapes
    /// `self [..., m, k] · values [..., k, n] → [..., m, n]`, `mask` broadcasting to `[..., m, k]`;
    /// `values` may broadcast over leading axes (one kv head for a group of query heads), `self`
    /// may not.
    ///
    /// # Errors
    /// As [`TensorValue::matmul`]; [`TensorAutodiffError::ShapeMismatch`] if the mask does not
    /// broadcast to `self`'s shape or `self` is broadcast over the output's leading axes.
    pub fn matmul_visible(&self, values: &TensorValue, mask: &Mask) -> Result<TensorValue> {
        let op = "matmul_visible";
        let plan = plan(op, self.shape(), values.shape())?;
        let hidden = Hidden::new(op, mask, self.shape())?;
        let (w, v) = (self.read(op)?, values.read(op)?);
        let w = hidden.select(w.as_slice());
        // the weights' hidden entries were already 0 (as a masked softmax leaves them): the
        // backward can use the weights as they are, without checking again
        let weights_clean = matches!(w, Cow::Borrowed(_));
        let out = if all_finite(v.as_slice()) {
            plan.products(&w, v.as_slice())?
        } else {
            visible_products(&plan, &w, v.as_slice(), &hidden)
        };
        let out = Tensor::from_parts(plan.out_shape.clone(), out);
        Ok(TensorValue::record(op, vec![self.clone(), values.clone()], out, move |ctx| {
            let (v, g) = (ctx.input(1)?, ctx.grad());
            let (v, g) = (v.as_slice(), g.as_slice());
            let mut grads = vec![None, None];
            if ctx.wants(0) {
                // forward: out[i] = Σ_j w_ij v_j (visible j)  =>  dw_ij = visible ? dout_i · v_j : 0
                // (the product computes every entry; a hidden one is replaced, never used)
                let mut dw = plan.lhs_adjoint(g, v)?;
                hidden.zero(&mut dw);
                grads[0] = Some(Tensor::from_parts(ctx.input_shape(0).to_vec(), dw));
            }
            if ctx.wants(1) {
                // forward: out[i] = Σ_j w_ij v_j (visible j)  =>  dv_j = Σ_{i sees j} w_ij · dout_i
                let w = ctx.input(0)?;
                let w =
                    if weights_clean { Cow::Borrowed(w.as_slice()) } else { Cow::Owned(hidden.zeroed(w.as_slice())) };
                let dv = if all_finite(g) {
                    plan.rhs_adjoint(&w, g)?
                } else {
                    visible_values_adjoint(&plan, &w, g, &hidden)
                };
                grads[1] = Some(Tensor::from_parts(ctx.input_shape(1).to_vec(), dv));
            }
            Ok(grads)
        }))
    }

    /// `queries · keysᵀ` (pass the keys already transposed, `[..., d, T_k]`) whose backward skips
    /// the pairs `mask [..., m, n]` hides: their scores are computed as usual (a later masked
    /// softmax hides them), but a hidden score's adjoint never meets the key or query it pairs.
    ///
    /// ```
    /// use llm_from_scratch::{Mask, Tensor, constant, parameter};
    /// // key 1 is NaN and hidden from both queries (padding): their gradients stay finite
    /// let q = parameter(&[2, 1], &[1.0, 1.0])?;
    /// let kt = constant(&[1, 2], &[0.5, f64::NAN])?;
    /// let padding = Mask::new(&[2, 2], vec![false, true, false, true])?;
    /// let scores = q.matmul_scores(&kt, &padding)?;
    /// let grads = scores.backward_with(&Tensor::new(&[2, 2], vec![1.0, 0.0, 0.0, 0.0])?)?;
    /// assert_eq!(grads.get(&q).unwrap().as_slice(), &[0.5, 0.0]);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    ///
    /// # Shapes
    /// `self [..., m, d] · keys_t [..., d, n] → scores [..., m, n]`, `mask` broadcasting to
    /// `[..., m, n]`; `keys_t` may broadcast over leading axes, `self` may not.
    ///
    /// # Errors
    /// As [`TensorValue::matmul_visible`], with the mask broadcast to the scores' shape.
    pub fn matmul_scores(&self, keys_t: &TensorValue, mask: &Mask) -> Result<TensorValue> {
        let op = "matmul_scores";
        let plan = plan(op, self.shape(), keys_t.shape())?;
        let hidden = Hidden::new(op, mask, &plan.out_shape)?;
        let (q, kt) = (self.read(op)?, keys_t.read(op)?);
        let out = Tensor::from_parts(plan.out_shape.clone(), plan.products(q.as_slice(), kt.as_slice())?);
        Ok(TensorValue::record(op, vec![self.clone(), keys_t.clone()], out, move |ctx| {
            let (q, kt) = (ctx.input(0)?, ctx.input(1)?);
            let (q, kt) = (q.as_slice(), kt.as_slice());
            // forward: s_ij = q_i · k_j  =>  dq_i = Σ_{j visible} ds_ij k_j,  dk_j = Σ_{i sees j} ds_ij q_i
            let ds = hidden.select(ctx.grad().as_slice());
            let mut grads = vec![None, None];
            if ctx.wants(0) {
                let dq = if all_finite(kt) {
                    plan.lhs_adjoint(&ds, kt)?
                } else {
                    scores_adjoint(&plan, &ds, kt, &hidden, Side::Lhs)
                };
                grads[0] = Some(Tensor::from_parts(ctx.input_shape(0).to_vec(), dq));
            }
            if ctx.wants(1) {
                let dk = if all_finite(q) {
                    plan.rhs_adjoint(q, &ds)?
                } else {
                    scores_adjoint(&plan, &ds, q, &hidden, Side::Rhs)
                };
                grads[1] = Some(Tensor::from_parts(ctx.input_shape(1).to_vec(), dk));
            }
            Ok(grads)
        }))
    }
}

/// The explicit loop of [`TensorValue::matmul_visible`]'s forward: `out[t][i] = Σ_{j visible}
/// w[t][i][j] · v[r][j]`, hidden pairs skipped.
fn visible_products(plan: &Plan, w: &[f64], v: &[f64], hidden: &Hidden) -> Vec<f64> {
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let mut out = vec![0.0; plan.pairs.len() * m * n];
    for (t, &(_, r)) in plan.pairs.iter().enumerate() {
        for i in 0..m {
            let row = &mut out[(t * m + i) * n..(t * m + i + 1) * n];
            for j in (0..k).filter(|&j| !hidden.lane(t)[i * k + j]) {
                let weight = w[(t * m + i) * k + j];
                for (o, &x) in row.iter_mut().zip(&v[(r * k + j) * n..(r * k + j + 1) * n]) {
                    *o += weight * x;
                }
            }
        }
    }
    out
}

/// The explicit loop of `dv[r][j] = Σ_t Σ_{i sees j} w[t][i][j] · dout[t][i]`.
fn visible_values_adjoint(plan: &Plan, w: &[f64], g: &[f64], hidden: &Hidden) -> Vec<f64> {
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let mut dv = vec![0.0; plan.rhs_count * k * n];
    for (t, &(_, r)) in plan.pairs.iter().enumerate() {
        for i in 0..m {
            let upstream = &g[(t * m + i) * n..(t * m + i + 1) * n];
            for j in (0..k).filter(|&j| !hidden.lane(t)[i * k + j]) {
                let weight = w[(t * m + i) * k + j];
                for (d, &x) in dv[(r * k + j) * n..(r * k + j + 1) * n].iter_mut().zip(upstream) {
                    *d += weight * x;
                }
            }
        }
    }
    dv
}

/// Which operand of the scores product an adjoint is for.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    /// The queries `[..., m, k]`.
    Lhs,
    /// The transposed keys `[..., k, n]`.
    Rhs,
}

/// The explicit loops of [`TensorValue::matmul_scores`]'s backward over visible pairs only:
/// `dq[t][i][c] = Σ_j ds[t][i][j] kt[r][c][j]` (side `Lhs`, `other` = kt) or
/// `dkt[r][c][j] = Σ_{t, i} q[t][i][c] ds[t][i][j]` (side `Rhs`, `other` = q).
fn scores_adjoint(plan: &Plan, ds: &[f64], other: &[f64], hidden: &Hidden, side: Side) -> Vec<f64> {
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let len = if side == Side::Lhs { plan.lhs_count * m * k } else { plan.rhs_count * k * n };
    let mut grad = vec![0.0; len];
    for (t, &(l, r)) in plan.pairs.iter().enumerate() {
        for i in 0..m {
            for j in (0..n).filter(|&j| !hidden.lane(t)[i * n + j]) {
                let s = ds[(t * m + i) * n + j];
                for c in 0..k {
                    match side {
                        Side::Lhs => grad[(l * m + i) * k + c] += s * other[(r * k + c) * n + j],
                        Side::Rhs => grad[(r * k + c) * n + j] += s * other[(l * m + i) * k + c],
                    }
                }
            }
        }
    }
    grad
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{GradcheckConfig, constant, gradcheck, parameter};
    use crate::tensor::SplitMix64;
    use crate::tensor::{Mask, Tensor};

    fn random(shape: &[usize], seed: u64) -> Tensor {
        let mut rng = SplitMix64::new(seed);
        let n = shape.iter().product();
        Tensor::new(shape, (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()).unwrap()
    }

    /// A mask `[T, T]` hiding the future and, for every query, key 1 (padding).
    fn padded_causal(t: usize) -> Mask {
        Mask::new(&[t, t], (0..t * t).map(|e| e % t > e / t || e % t == 1).collect()).unwrap()
    }

    #[test]
    fn gradcheck_both_products_with_broadcast_lanes() {
        // weights [2,3,4,4] over values [2,1,4,2] broadcast over 3 heads; a causal mask
        let mask = Mask::causal(4, 4, 0).unwrap();
        let inputs = vec![("w", random(&[2, 3, 4, 4], 1)), ("v", random(&[2, 1, 4, 2], 2))];
        let report = gradcheck(&inputs, &GradcheckConfig::default(), |x| x[0].matmul_visible(&x[1], &mask)).unwrap();
        assert!(report.passed(), "{report:?}");
        let inputs = vec![("q", random(&[2, 3, 4, 2], 3)), ("kt", random(&[2, 1, 2, 4], 4))];
        let report = gradcheck(&inputs, &GradcheckConfig::default(), |x| {
            x[0].matmul_scores(&x[1], &mask)?.masked_softmax_last_axis(&mask)
        })
        .unwrap();
        assert!(report.passed(), "{report:?}");
    }

    #[test]
    fn a_mask_that_broadcasts_within_the_matrix_hides_the_same_pairs() {
        // a [1, 4] padding mask (key 2 hidden from every query) is expanded; the same mask
        // written out as [4, 4] is read block by block: both skip the same pairs, forward and
        // backward, with key 2 poisoned
        let narrow = Mask::new(&[1, 4], vec![false, false, true, false]).unwrap();
        let wide = Mask::new(&[4, 4], (0..16).map(|e| e % 4 == 2).collect()).unwrap();
        let run = |mask: &Mask| {
            let w = parameter(&[2, 4, 4], random(&[2, 4, 4], 11).as_slice()).unwrap();
            let mut v = random(&[2, 4, 3], 12).into_vec();
            v[6..9].fill(f64::NAN);
            v[18..21].fill(f64::INFINITY);
            let v = parameter(&[2, 4, 3], &v).unwrap();
            let out = w.matmul_visible(&v, mask).unwrap();
            let grads = out.backward_with(&random(&[2, 4, 3], 13)).unwrap();
            let (dw, dv) = (grads.get(&w).unwrap().clone(), grads.get(&v).unwrap().clone());
            (out.value().unwrap(), dw, dv)
        };
        let (a, b) = (run(&narrow), run(&wide));
        for (x, y) in [(&a.0, &b.0), (&a.1, &b.1), (&a.2, &b.2)] {
            assert!(x.all_finite() && x.bitwise_eq(y), "{x:?} {y:?}");
        }
        // hidden weights get no adjoint; the hidden value rows get none either
        assert!(a.1.as_slice().iter().skip(2).step_by(4).all(|&g| g == 0.0));
        assert!(a.2.as_slice()[6..9].iter().chain(&a.2.as_slice()[18..21]).all(|&g| g == 0.0));
    }

    #[test]
    fn finite_operands_take_the_ordinary_product_bitwise() {
        let (w, v) = (constant(&[3, 5, 5], random(&[3, 5, 5], 5).as_slice()).unwrap(), random(&[3, 5, 2], 6));
        let v = constant(v.shape(), v.as_slice()).unwrap();
        let w = w.masked_softmax_last_axis(&Mask::causal(5, 5, 0).unwrap()).unwrap();
        let masked = w.matmul_visible(&v, &Mask::causal(5, 5, 0).unwrap()).unwrap().value().unwrap();
        assert!(masked.bitwise_eq(&w.matmul(&v).unwrap().value().unwrap()));
    }

    #[test]
    fn a_poisoned_hidden_key_changes_nothing_forward_or_backward() {
        // key/value row 1 hidden from every query (padding) and future keys hidden (causal):
        // NaN or ∞ there must give exactly what any finite value gives, the explicit loop
        // agreeing with the ordinary product to rounding
        let t = 4;
        let mask = padded_causal(t);
        let run = |poison: f64| {
            let q = parameter(&[1, t, 3], random(&[1, t, 3], 7).as_slice()).unwrap();
            let mut k = random(&[1, t, 3], 8).into_vec();
            let mut v = random(&[1, t, 2], 9).into_vec();
            k[3..6].fill(poison);
            v[2..4].fill(poison);
            let (k, v) = (parameter(&[1, t, 3], &k).unwrap(), parameter(&[1, t, 2], &v).unwrap());
            let scores = q.matmul_scores(&k.transpose(1, 2).unwrap(), &mask).unwrap();
            let w = scores.masked_softmax_last_axis(&mask).unwrap();
            let out = w.matmul_visible(&v, &mask).unwrap();
            let grads = out.backward_with(&random(&[1, t, 2], 10)).unwrap();
            let grad = |x| grads.get(x).unwrap().clone();
            (out.value().unwrap(), grad(&q), grad(&k), grad(&v))
        };
        let (clean, poisoned, infinite) = (run(0.25), run(f64::NAN), run(f64::INFINITY));
        for other in [&poisoned, &infinite] {
            for (a, b) in [(&clean.0, &other.0), (&clean.1, &other.1), (&clean.2, &other.2), (&clean.3, &other.3)] {
                assert!(b.all_finite(), "{b:?}");
                assert!(a.as_slice().iter().zip(b.as_slice()).all(|(x, y)| (x - y).abs() <= 1e-12), "{a:?} {b:?}");
            }
            // the hidden key receives no adjoint at all
            assert!(other.2.as_slice()[3..6].iter().chain(&other.3.as_slice()[2..4]).all(|&x| x == 0.0));
        }
    }
}
