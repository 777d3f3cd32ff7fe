//! Batched matrix product with broadcasting over leading axes.
//!
//! # Shapes
//! `lhs [..., m, k] · rhs [..., k, n] → [..., m, n]`; the leading (batch) axes broadcast like
//! elementwise operations, so `x [B,T,d] · W [d,e]` applies one weight to every row and
//! `q [B,h,T,d_h] · kᵀ [B,h,d_h,T]` runs one product per (batch, head) lane.
//!
//! Independent lanes run in parallel on the rayon pool; each output element is always summed by
//! the same kernel call in the same order, so results do not depend on the number of threads.

use rayon::prelude::*;

use crate::autodiff::TensorValue;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::broadcast::{broadcast_strides, for_each_broadcast};
use crate::tensor::matmul::{MatRef, matmul as kernel, matmul_new, matmul_new_batch};
use crate::tensor::{Tensor, broadcast_shapes};

/// Which lhs and rhs matrix every output matrix reads.
pub(crate) struct Plan {
    pub(crate) out_shape: Vec<usize>,
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) lhs_count: usize,
    pub(crate) rhs_count: usize,
    /// `(lhs matrix, rhs matrix)` for each output matrix, in row-major batch order.
    pub(crate) pairs: Vec<(usize, usize)>,
}

impl Plan {
    pub(crate) fn new(lhs: &[usize], rhs: &[usize]) -> Result<Self> {
        for shape in [lhs, rhs] {
            if shape.len() < 2 {
                return Err(TensorAutodiffError::RankMismatch {
                    op: "matmul",
                    expected: "at least 2".into(),
                    shape: Shape::from(shape),
                });
            }
        }
        let (lb, lm) = lhs.split_at(lhs.len() - 2);
        let (rb, rm) = rhs.split_at(rhs.len() - 2);
        if lm[1] != rm[0] {
            return Err(TensorAutodiffError::ShapeMismatch {
                op: "matmul",
                lhs: Shape::from(lhs),
                rhs: Shape::from(rhs),
                reason: "the last axis of lhs must equal the second-to-last axis of rhs",
            });
        }
        let batch = broadcast_shapes("matmul", lb, rb)?;
        // the output must be allocatable before anything is planned: [n,1]·[1,n] asks for n² values
        let full: Vec<usize> = batch.iter().copied().chain([lm[0], rm[1]]).collect();
        crate::tensor::dense::element_count("matmul", &full)?;
        crate::tensor::dense::element_count("matmul", &batch)?;
        let mut pairs = Vec::with_capacity(batch.iter().product());
        for_each_broadcast(&batch, &broadcast_strides(lb, &batch), &broadcast_strides(rb, &batch), |_, l, r| {
            pairs.push((l, r))
        });
        if batch.iter().product::<usize>() == 0 {
            pairs.clear();
        }
        let mut out_shape = batch;
        out_shape.extend([lm[0], rm[1]]);
        Ok(Self {
            out_shape,
            m: lm[0],
            k: lm[1],
            n: rm[1],
            lhs_count: lb.iter().product(),
            rhs_count: rb.iter().product(),
            pairs,
        })
    }

    /// One shared right matrix and one left matrix per output: the batch can be folded into the
    /// rows of a single large product (`[B·T, d] · [d, e]`), which the kernel runs fastest.
    fn folds_into_rows(&self) -> bool {
        self.rhs_count == 1 && self.lhs_count == self.pairs.len()
    }

    /// `C[t] = A[l]·B[r]` for every output matrix `t` reading `(l, r)`.
    pub(crate) fn products(&self, a: &[f64], b: &[f64]) -> Result<Vec<f64>> {
        let (m, k, n) = (self.m, self.k, self.n);
        if self.folds_into_rows() {
            let rows = self.pairs.len() * m;
            let (lhs, rhs) = (|_| MatRef::row_major(a, rows, k), |_| MatRef::row_major(b, k, n));
            return grouped_products(1, rows, n, std::iter::once((0, 0, 0)), lhs, rhs);
        }
        let jobs = self.pairs.iter().enumerate().map(|(t, &(l, r))| (t, l, r));
        let lhs = |l: usize| MatRef::row_major(&a[l * m * k..], m, k);
        grouped_products(self.pairs.len(), m, n, jobs, lhs, |r| MatRef::row_major(&b[r * k * n..], k, n))
    }

    /// `dA[l] = Σ_t dC[t]·B[r]ᵀ` over the output matrices reading `A[l]` (broadcast lanes add up).
    pub(crate) fn lhs_adjoint(&self, g: &[f64], b: &[f64]) -> Result<Vec<f64>> {
        let (m, k, n) = (self.m, self.k, self.n);
        let b_t = |r: usize| Ok(MatRef::row_major(&b[r * k * n..], k, n)?.t());
        if self.folds_into_rows() {
            let rows = self.pairs.len() * m;
            return grouped_products(1, rows, k, std::iter::once((0, 0, 0)), |_| MatRef::row_major(g, rows, n), b_t);
        }
        let jobs = self.pairs.iter().enumerate().map(|(t, &(l, r))| (l, t, r));
        grouped_products(self.lhs_count, m, k, jobs, |t| MatRef::row_major(&g[t * m * n..], m, n), b_t)
    }

    /// `dB[r] = Σ_t A[l]ᵀ·dC[t]` over the output matrices reading `B[r]`.
    pub(crate) fn rhs_adjoint(&self, a: &[f64], g: &[f64]) -> Result<Vec<f64>> {
        let (m, k, n) = (self.m, self.k, self.n);
        if self.folds_into_rows() {
            // all rows stacked: one product sums over every row
            let rows = self.pairs.len() * m;
            let a_t = |_| Ok(MatRef::row_major(a, rows, k)?.t());
            return grouped_products(1, k, n, std::iter::once((0, 0, 0)), a_t, |_| MatRef::row_major(g, rows, n));
        }
        let jobs = self.pairs.iter().enumerate().map(|(t, &(l, r))| (r, l, t));
        let a_t = |l: usize| Ok(MatRef::row_major(&a[l * m * k..], m, k)?.t());
        grouped_products(self.rhs_count, k, n, jobs, a_t, |t| MatRef::row_major(&g[t * m * n..], m, n))
    }
}

/// A view of one operand of a product, or why it cannot be made.
type View<'a> = std::result::Result<MatRef<'a>, llm_kernels::gemm::ShapeError>;

/// `dst[t] = Σ_j left(j) · right(j)` over the jobs `(t, left, right)` of each target `t`, summed in
/// job order. Targets run in parallel; a lone target lets the kernel use the threads instead.
fn grouped_products<'a>(
    targets: usize,
    rows: usize,
    cols: usize,
    jobs: impl Iterator<Item = (usize, usize, usize)>,
    left: impl Fn(usize) -> View<'a> + Sync,
    right: impl Fn(usize) -> View<'a> + Sync,
) -> Result<Vec<f64>> {
    let mut per_target: Vec<Vec<(usize, usize)>> = vec![Vec::new(); targets];
    for (t, l, r) in jobs {
        per_target[t].push((l, r));
    }
    let run = |dst: &mut [f64], list: &[(usize, usize)], parallel: bool| -> Result<()> {
        for (i, &(l, r)) in list.iter().enumerate() {
            kernel(dst, left(l)?, right(r)?, i > 0, parallel)?;
        }
        Ok(())
    };
    if let (Some([(l, r), rest @ ..]), true) = (per_target.first().map(Vec::as_slice), targets == 1 && rows * cols > 0)
    {
        // one target: the first product creates the output (no pass of zeros), the rest add to it
        let mut out = matmul_new(left(*l)?, right(*r)?, true)?;
        for &(l, r) in rest {
            kernel(&mut out, left(l)?, right(r)?, true, true)?;
        }
        return Ok(out);
    }
    if targets > 1 && rows * cols > 0 && per_target.iter().all(|list| !list.is_empty()) {
        // each target's first product creates its part of the output (no pass of zeros), on
        // every thread; the rest add to it, as below
        let firsts = per_target.iter().map(|list| Ok((left(list[0].0)?, right(list[0].1)?)));
        let mut out = matmul_new_batch((rows, cols), &firsts.collect::<Result<Vec<_>>>()?, true)?;
        if per_target.iter().any(|list| list.len() > 1) {
            let target = llm_kernels::active();
            out.par_chunks_mut(rows * cols).zip(per_target.par_iter()).try_for_each(|(dst, list)| {
                target.within(|| list[1..].iter().try_for_each(|&(l, r)| kernel(dst, left(l)?, right(r)?, true, false)))
            })?;
        }
        return Ok(out);
    }
    let mut out = vec![0.0; targets * rows * cols];
    if rows * cols == 0 {
        return Ok(out);
    }
    if targets == 1 {
        run(&mut out, &per_target[0], true)?;
    } else {
        // the workers run the products on the target read here (one rule for every kernel)
        let target = llm_kernels::active();
        out.par_chunks_mut(rows * cols)
            .zip(per_target.par_iter())
            .try_for_each(|(dst, list)| target.within(|| run(dst, list, false)))?;
    }
    Ok(out)
}

impl TensorValue {
    /// Batched matrix product `self · rhs`.
    ///
    /// # Shapes
    /// `self [..., m, k] · rhs [..., k, n] → [..., m, n]`; the leading (batch) axes broadcast, so
    /// `x [B, T, d] · W [d, e]` applies one weight to every row.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::constant;
    /// // [1 2; 3 4] · [5; 6] = [1·5 + 2·6; 3·5 + 4·6] = [17; 39]
    /// let a = constant(&[2, 2], &[1.0, 2.0, 3.0, 4.0])?;
    /// let b = constant(&[2, 1], &[5.0, 6.0])?;
    /// assert_eq!(a.matmul(&b)?.value()?.as_slice(), &[17.0, 39.0]);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    ///
    /// # Errors
    /// [`TensorAutodiffError::RankMismatch`] for an operand of rank < 2,
    /// [`TensorAutodiffError::ShapeMismatch`] when the inner axes differ or the batch axes do not
    /// broadcast; [`TensorAutodiffError::Released`] if an operand was released.
    pub fn matmul(&self, rhs: &TensorValue) -> Result<TensorValue> {
        let plan = Plan::new(self.shape(), rhs.shape())?;
        let (a, b) = (self.read("matmul")?, rhs.read("matmul")?);
        let out = Tensor::from_parts(plan.out_shape.clone(), plan.products(a.as_slice(), b.as_slice())?);
        Ok(TensorValue::record("matmul", vec![self.clone(), rhs.clone()], out, move |ctx| {
            let (a, b, g) = (ctx.input(0)?, ctx.input(1)?, ctx.grad());
            let (a, b, g) = (a.as_slice(), b.as_slice(), g.as_slice());
            let (lhs_shape, rhs_shape) = (ctx.input_shape(0), ctx.input_shape(1));
            // A feeds other products too (x into its Q, K and V projections): with the rows
            // folded, the kernel adds dC·Bᵀ onto their sum, with no new tensor and no extra pass
            let sum = if ctx.wants(0) && plan.folds_into_rows() { ctx.take_lhs_sum() } else { None };
            let lhs_grad = || -> Result<Tensor> {
                // forward: C[t] = A[l]·B[r]  =>  dA[l] += dC[t]·B[r]ᵀ (broadcast lanes accumulate)
                Ok(match sum {
                    Some(mut sum) => {
                        let (rows, k, n) = (plan.pairs.len() * plan.m, plan.k, plan.n);
                        let b_t = MatRef::row_major(b, k, n)?.t();
                        kernel(sum.as_mut_slice(), MatRef::row_major(g, rows, n)?, b_t, true, true)?;
                        sum
                    }
                    None => Tensor::from_parts(lhs_shape.to_vec(), plan.lhs_adjoint(g, b)?),
                })
            };
            // forward: C[t] = A[l]·B[r]  =>  dB[r] += A[l]ᵀ·dC[t]
            let rhs_grad = || -> Result<Tensor> { Ok(Tensor::from_parts(rhs_shape.to_vec(), plan.rhs_adjoint(a, g)?)) };
            // the two adjoints are independent products: side by side, neither waits for the other
            // to hand its threads back (each is computed as it would be alone, so the same bits);
            // a worker that takes one runs the kernels on the target read here
            if ctx.wants(0) && ctx.wants(1) {
                let target = llm_kernels::active();
                let (da, db) = rayon::join(|| target.within(lhs_grad), || target.within(rhs_grad));
                return Ok(vec![Some(da?), Some(db?)]);
            }
            Ok(vec![ctx.wants(0).then(lhs_grad).transpose()?, ctx.wants(1).then(rhs_grad).transpose()?])
        }))
    }
}

impl TensorValue {
    /// `self · rhsᵀ` for one shared matrix `rhs`, without copying it into its transpose: the tied
    /// LM head `h · Eᵀ` reads the embedding table `E [V, d]` as it is stored. The same numbers as
    /// `self.matmul(&rhs.transpose(0, 1)?)`, bit for bit (the same products summed in the same
    /// order; only the stride the kernel reads `rhs` with differs).
    ///
    /// # Shapes
    /// `self [..., m, k] · rhs [n, k]ᵀ → [..., m, n]`.
    ///
    /// ```
    /// use llm_from_scratch::constant;
    /// // [1 2] · [[5 6]; [7 8]]ᵀ = [1·5 + 2·6, 1·7 + 2·8] = [17, 23]
    /// let x = constant(&[1, 2], &[1.0, 2.0])?;
    /// let w = constant(&[2, 2], &[5.0, 6.0, 7.0, 8.0])?;
    /// assert_eq!(x.matmul_transposed(&w)?.value()?.as_slice(), &[17.0, 23.0]);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    ///
    /// # Errors
    /// [`TensorAutodiffError::RankMismatch`] when `self` has rank < 2 or `rhs` is not a matrix;
    /// [`TensorAutodiffError::ShapeMismatch`] when their last axes differ;
    /// [`TensorAutodiffError::Released`] if an operand was released.
    pub fn matmul_transposed(&self, rhs: &TensorValue) -> Result<TensorValue> {
        let op = "matmul_transposed";
        if rhs.shape().len() != 2 {
            return Err(TensorAutodiffError::RankMismatch {
                op,
                expected: "2".into(),
                shape: Shape::from(rhs.shape()),
            });
        }
        let (n, k) = (rhs.shape()[0], rhs.shape()[1]);
        // the plan of self · [k, n]: the shapes, their checks and the folded rows
        let plan = Plan::new(self.shape(), &[k, n]).map_err(|e| match e {
            TensorAutodiffError::ShapeMismatch { .. } => TensorAutodiffError::ShapeMismatch {
                op,
                lhs: Shape::from(self.shape()),
                rhs: Shape::from(rhs.shape()),
                reason: "the last axis of lhs must equal the last axis of rhs",
            },
            other => other,
        })?;
        let (a, w) = (self.read(op)?, rhs.read(op)?);
        let rows = plan.out_shape.iter().product::<usize>().checked_div(n).unwrap_or(0);
        // forward: C = A · Wᵀ, with Wᵀ read from W's rows
        let out = if rows * n == 0 {
            vec![0.0; rows * n]
        } else {
            matmul_new(MatRef::row_major(a.as_slice(), rows, k)?, MatRef::row_major(w.as_slice(), n, k)?.t(), true)?
        };
        let out = Tensor::from_parts(plan.out_shape.clone(), out);
        Ok(TensorValue::record(op, vec![self.clone(), rhs.clone()], out, move |ctx| {
            let (a, w, g) = (ctx.input(0)?, ctx.input(1)?, ctx.grad());
            let (a, w, g) = (a.as_slice(), w.as_slice(), g.as_slice());
            let mut grads = vec![None, None];
            if rows * n * k == 0 {
                let zeros =
                    |i: usize| if ctx.wants(i) { Tensor::zeros(ctx.input_shape(i)).map(Some) } else { Ok(None) };
                return Ok(vec![zeros(0)?, zeros(1)?]);
            }
            if ctx.wants(0) {
                // forward: C = A·Wᵀ  =>  dA += dC·W
                grads[0] = Some(match ctx.take_lhs_sum() {
                    Some(mut sum) => {
                        kernel(
                            sum.as_mut_slice(),
                            MatRef::row_major(g, rows, n)?,
                            MatRef::row_major(w, n, k)?,
                            true,
                            true,
                        )?;
                        sum
                    }
                    None => Tensor::from_parts(
                        ctx.input_shape(0).to_vec(),
                        matmul_new(MatRef::row_major(g, rows, n)?, MatRef::row_major(w, n, k)?, true)?,
                    ),
                });
            }
            if ctx.wants(1) {
                // forward: C = A·Wᵀ  =>  dWᵀ += Aᵀ·dC, summed over every row, then moved into W's
                // layout (the product of the explicit path, so the same bits)
                let dw_t = matmul_new(MatRef::row_major(a, rows, k)?.t(), MatRef::row_major(g, rows, n)?, true)?;
                grads[1] = Some(super::shape::permute_tensor(&Tensor::from_parts(vec![k, n], dw_t), &[1, 0]));
            }
            Ok(grads)
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::Tensor;
    use crate::tensor::matmul::{MatRef, matmul_naive};

    fn ramp(shape: &[usize], start: f64) -> Tensor {
        let len = shape.iter().product();
        Tensor::new(shape, (0..len).map(|i| start + 0.37 * ((i * 7 % 11) as f64) - 1.3).collect()).unwrap()
    }

    #[test]
    fn the_transposed_product_equals_the_product_with_the_transpose_bit_for_bit() {
        // small (the row path) and large enough for the blocked kernel, batched rows folded
        // the naive loop, the blocked kernel, one row (decoding), the weight gradient on the row
        // split (chapter 37's head: 1 024 rows), and one row of a real model's width
        let cases = [(vec![2, 3], 4), (vec![3, 40, 64], 130), (vec![1, 1, 576], 300), (vec![16, 64, 64], 57)];
        for (lhs, n) in cases.into_iter().chain([(vec![1, 1, 100], 1001), (vec![1, 7, 576], 700)]) {
            let k = *lhs.last().unwrap();
            let (a, w) = (ramp(&lhs, 0.1), ramp(&[n, k], -0.4));
            let (x, e) = (
                crate::autodiff::parameter(a.shape(), a.as_slice()).unwrap(),
                crate::autodiff::parameter(w.shape(), w.as_slice()).unwrap(),
            );
            let fast = x.matmul_transposed(&e).unwrap();
            let slow = x.matmul(&e.transpose(0, 1).unwrap()).unwrap();
            let (fv, sv) = (fast.value().unwrap(), slow.value().unwrap());
            assert_eq!(fv.shape(), sv.shape());
            let bits = |t: &Tensor| t.as_slice().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fv), bits(&sv), "{lhs:?} · [{n},{k}]ᵀ");
            let upstream = ramp(fv.shape(), 0.7);
            let (gf, gs) = (fast.backward_with(&upstream).unwrap(), slow.backward_with(&upstream).unwrap());
            for leaf in [&x, &e] {
                assert_eq!(bits(gf.get(leaf).unwrap()), bits(gs.get(leaf).unwrap()), "gradients of {lhs:?}");
            }
        }
    }

    #[test]
    fn the_transposed_product_passes_gradcheck_and_names_bad_shapes() {
        let inputs = vec![("x", ramp(&[2, 3, 4], 0.2)), ("w", ramp(&[5, 4], -0.3))];
        let report = gradcheck(&inputs, &GradcheckConfig::default(), |v| v[0].matmul_transposed(&v[1])).unwrap();
        assert!(report.passed(), "{report:?}");
        let x = constant(&[2, 3, 4], &[0.0; 24]).unwrap();
        let err = x.matmul_transposed(&constant(&[5, 3], &[0.0; 15]).unwrap()).unwrap_err();
        assert!(err.to_string().starts_with("matmul_transposed: shapes [2,3,4] and [5,3]"), "{err}");
        let err = x.matmul_transposed(&x).unwrap_err();
        assert!(matches!(err, crate::error::TensorAutodiffError::RankMismatch { op: "matmul_transposed", .. }));
    }

    #[test]
    fn errors_name_the_shapes() {
        let a = constant(&[2, 3], &[0.0; 6]).unwrap();
        let err = a.matmul(&a).unwrap_err();
        assert!(err.to_string().starts_with("matmul: shapes [2,3] and [2,3]"), "{err}");
        let v = constant(&[3], &[0.0; 3]).unwrap();
        assert!(matches!(a.matmul(&v), Err(crate::error::TensorAutodiffError::RankMismatch { .. })));
        let b = constant(&[2, 3, 2], &[0.0; 12]).unwrap();
        let c = constant(&[3, 2, 3], &[0.0; 18]).unwrap();
        assert!(b.matmul(&c).unwrap_err().to_string().contains("broadcast"));
    }

    #[test]
    fn batched_broadcast_product_matches_per_lane_naive_product() {
        // lhs [2,1,3,4] and rhs [3,4,5] broadcast to 6 lanes [2,3,3,5]
        let a = ramp(&[2, 1, 3, 4], 0.1);
        let b = ramp(&[3, 4, 5], -0.2);
        let c = constant(a.shape(), a.as_slice()).unwrap().matmul(&constant(b.shape(), b.as_slice()).unwrap()).unwrap();
        let c = c.value().unwrap();
        assert_eq!(c.shape(), &[2, 3, 3, 5]);
        for i in 0..2 {
            for j in 0..3 {
                let mut lane = vec![0.0; 15];
                let av = MatRef::row_major(&a.as_slice()[i * 12..], 3, 4).unwrap();
                let bv = MatRef::row_major(&b.as_slice()[j * 20..], 4, 5).unwrap();
                matmul_naive(&mut lane, av, bv, false).unwrap();
                let got = &c.as_slice()[(i * 3 + j) * 15..][..15];
                for (x, y) in got.iter().zip(&lane) {
                    assert!((x - y).abs() < 1e-12);
                }
            }
        }
    }

    #[test]
    fn broadcast_lanes_and_their_adjoints_are_each_targets_products_in_order_bitwise() {
        // lhs [2,1,m,k] and rhs [1,3,k,n]: six lanes; each lhs matrix feeds three of them and
        // each rhs matrix two, so the adjoints sum several products per target. Each target must
        // be its first product written alone, then the others added in lane order, whatever the
        // thread count; shapes small (the loop), large enough for the kernel, and with dB's
        // products long enough for the row split (64 × 260 · 260 × 16)
        let bits = |v: &[f64]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for (m, k, n) in [(3, 4, 5), (40, 33, 48), (260, 64, 16)] {
            let (a, b) = (ramp(&[2, 1, m, k], 0.1), ramp(&[1, 3, k, n], -0.2));
            let g = ramp(&[2, 3, m, n], 0.3);
            let lanes = |i: usize, j: usize| (i * 3 + j) * m * n;
            // the adjoints as plain sums of products per target, lanes in order
            let (mut da, mut db) = (vec![0.0; 2 * m * k], vec![0.0; 3 * k * n]);
            for i in 0..2 {
                for j in 0..3 {
                    let gv = MatRef::row_major(&g.as_slice()[lanes(i, j)..], m, n).unwrap();
                    let av = MatRef::row_major(&a.as_slice()[i * m * k..], m, k).unwrap();
                    let bv = MatRef::row_major(&b.as_slice()[j * k * n..], k, n).unwrap();
                    let da_i = &mut da[i * m * k..(i + 1) * m * k];
                    crate::tensor::matmul::matmul(da_i, gv, bv.t(), j > 0, false).unwrap();
                    let db_j = &mut db[j * k * n..(j + 1) * k * n];
                    crate::tensor::matmul::matmul(db_j, av.t(), gv, i > 0, false).unwrap();
                }
            }
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let (da_got, db_got) = pool.install(|| {
                    let x = crate::autodiff::parameter(a.shape(), a.as_slice()).unwrap();
                    let y = crate::autodiff::parameter(b.shape(), b.as_slice()).unwrap();
                    let grads = x.matmul(&y).unwrap().backward_with(&g).unwrap();
                    (grads.get(&x).unwrap().as_slice().to_vec(), grads.get(&y).unwrap().as_slice().to_vec())
                });
                assert_eq!(bits(&da_got), bits(&da), "dA, {m}x{k}x{n}, {threads} threads");
                assert_eq!(bits(&db_got), bits(&db), "dB, {m}x{k}x{n}, {threads} threads");
            }
        }
    }

    #[test]
    fn gradcheck_matmul_shared_weight_batched_and_broadcast() {
        let cfg = GradcheckConfig::default();
        let cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
            (vec![2, 3], vec![3, 4]),
            (vec![2, 3, 4], vec![4, 2]),          // shared weight, rows folded
            (vec![2, 2, 3, 4], vec![2, 2, 4, 3]), // one product per lane
            (vec![2, 1, 3, 2], vec![3, 2, 2]),    // broadcast on both sides
            (vec![3, 2], vec![2, 2, 3]),          // lhs shared by lanes of rhs
            (vec![2, 10, 16], vec![16, 20]),      // 6 400 multiply-adds: the fast kernel, output created unfilled
        ];
        for (ls, rs) in cases {
            let inputs = vec![("lhs", ramp(&ls, 0.2)), ("rhs", ramp(&rs, -0.1))];
            let report = gradcheck(&inputs, &cfg, |v| v[0].matmul(&v[1])).unwrap();
            assert!(report.passed(), "{ls:?}·{rs:?}: {report:?}");
        }
    }

    #[test]
    fn gradcheck_a_weight_gradient_on_the_row_split() {
        // x [2, 150, 64] folds to 300 rows: the weight's adjoint xᵀ·dy is 64 × 300 · 300 × 8, a
        // product the kernel runs as two halves of its 64 output rows (k = 300 ≥ 2·64), each
        // over a depth block of 256 and one of 44
        assert!(llm_kernels::gemm::splits_rows(64, 300, 8));
        let x = constant(&[2, 150, 64], ramp(&[2, 150, 64], 0.05).as_slice()).unwrap();
        let inputs = vec![("w", ramp(&[64, 8], -0.1))];
        let report = gradcheck(&inputs, &GradcheckConfig::default(), |v| x.matmul(&v[0])).unwrap();
        assert!(report.passed(), "{report:?}");
    }

    #[test]
    fn gradcheck_one_input_through_several_products_summed_in_place() {
        // x [2, 3, 4] into three projections (as Q, K and V): the sweep meets V's product first,
        // then K's and Q's add their dx onto the sum. W_Q also appears as both operands of one
        // product made before the projections, so its sum (from Q's product) arrives with the
        // first of the two.
        let inputs = vec![
            ("x", ramp(&[2, 3, 4], 0.2)),
            ("wq", ramp(&[4, 4], -0.1)),
            ("wk", ramp(&[4, 4], 0.3)),
            ("wv", ramp(&[4, 4], 0.05)),
        ];
        let report = gradcheck(&inputs, &GradcheckConfig::default(), |v| {
            let square = v[1].matmul(&v[1])?;
            let (q, k, val) = (v[0].matmul(&v[1])?, v[0].matmul(&v[2])?, v[0].matmul(&v[3])?);
            q.mul(&k)?.add(&val)?.matmul(&square)
        })
        .unwrap();
        assert!(report.passed(), "{report:?}");
    }

    #[test]
    fn gradcheck_value_used_twice_in_a_product() {
        // x·xᵀ: x reaches the output through both operands
        let inputs = vec![("x", ramp(&[3, 4], 0.3))];
        let report = gradcheck(&inputs, &GradcheckConfig::default(), |v| v[0].matmul(&v[0].transpose(0, 1)?)).unwrap();
        assert!(report.passed(), "{report:?}");
    }
}
