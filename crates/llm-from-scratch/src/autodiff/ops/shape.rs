//! Rearrangements: `reshape`, `transpose`, `permute`. They move values, never change them, so
//! their backward moves the adjoint back the same way.

use crate::autodiff::TensorValue;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::Tensor;
use llm_kernels::rows::{RowTasks, build_rows};

/// Copies `x` into the axis order `perm`: `out.shape[i] = x.shape[perm[i]]`.
pub(crate) fn permute_tensor(x: &Tensor, perm: &[usize]) -> Tensor {
    let shape = x.shape();
    let rank = shape.len();
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let mut in_strides = vec![1usize; rank];
    for i in (0..rank.saturating_sub(1)).rev() {
        in_strides[i] = in_strides[i + 1] * shape[i + 1];
    }
    // stride of the input when walking output axis i
    let walk: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let total = x.len();
    let inner = *out_shape.last().unwrap_or(&1);
    if total >= PARALLEL_PERMUTE && walk.last() == Some(&1) {
        // the last axis stays last (splitting or merging heads): whole rows move, in parallel
        let out = copy_rows(x.as_slice(), &out_shape[..rank - 1], &walk[..rank - 1], inner);
        return Tensor::from_parts(out_shape, out);
    }
    let swaps_last_two =
        rank >= 2 && perm[..rank - 2].iter().enumerate().all(|(i, &p)| p == i) && perm[rank - 2] == rank - 1;
    if total >= PARALLEL_PERMUTE && swaps_last_two {
        // [.., r, c] → [.., c, r] (the tied LM head's [V, d] → [d, V]): in square tiles
        let (r, c) = (shape[rank - 2], shape[rank - 1]);
        return Tensor::from_parts(out_shape, transpose_tiles(x.as_slice(), r, c));
    }
    let src = x.as_slice();
    let mut out = Vec::with_capacity(total);
    if total > 0 {
        let inner_stride = *walk.last().unwrap_or(&1);
        let outer_rank = rank.saturating_sub(1);
        let mut index = vec![0usize; outer_rank];
        let mut base = 0usize;
        for _ in 0..total / inner.max(1) {
            if inner_stride == 1 {
                out.extend_from_slice(&src[base..base + inner]);
            } else {
                out.extend((0..inner).map(|j| src[base + j * inner_stride]));
            }
            next_row(&mut index, &mut base, &out_shape[..outer_rank], &walk[..outer_rank]);
        }
    }
    Tensor::from_parts(out_shape, out)
}

/// Each `[r, c]` matrix of `src` transposed to `[c, r]`, a tile of `TILE × TILE` at a time: one
/// output row at a time would read the input with a stride of `c` values, a cache miss per value
/// once a matrix outgrows the cache (the 49 152 × 576 embedding table of a real model: 28 M
/// misses on every tied LM head). A tile's rows and columns both stay in the cache.
fn transpose_tiles(src: &[f64], r: usize, c: usize) -> Vec<f64> {
    const TILE: usize = 32;
    let mut out = vec![0.0; src.len()];
    for (from, to) in src.chunks_exact(r * c).zip(out.chunks_exact_mut(r * c)) {
        for i0 in (0..r).step_by(TILE) {
            for j0 in (0..c).step_by(TILE) {
                for j in j0..(j0 + TILE).min(c) {
                    for i in i0..(i0 + TILE).min(r) {
                        to[j * r + i] = from[i * c + j];
                    }
                }
            }
        }
    }
    out
}

/// Steps `index` to the next row over the `outer` axes (last fastest, like an odometer) and keeps
/// `base`, the input offset `Σ index[a]·walk[a]`, in step with it.
fn next_row(index: &mut [usize], base: &mut usize, outer: &[usize], walk: &[usize]) {
    for axis in (0..index.len()).rev() {
        index[axis] += 1;
        *base += walk[axis];
        if index[axis] < outer[axis] {
            return;
        }
        *base -= walk[axis] * outer[axis];
        index[axis] = 0;
    }
}

/// From this many values on, [`permute_tensor`] moves rows on every thread: the split and merge
/// of heads in `mha-train` (2 MiB each, eight a step) otherwise run on one core while the other
/// waits.
const PARALLEL_PERMUTE: usize = 1 << 16;

/// Output rows copied per parallel task of [`copy_rows`].
const ROWS_PER_COPY: usize = 512;

/// The rows of `inner > 0` values of a permuted tensor whose last axis stays last: output row `r`,
/// at index `(i₀, i₁, …)` over the `outer` axes, is `src[Σ iₐ·walk[a]..][..inner]`. Built in
/// parallel blocks of rows, without filling the storage first.
fn copy_rows(src: &[f64], outer: &[usize], walk: &[usize], inner: usize) -> Vec<f64> {
    let len = outer.iter().product::<usize>() * inner;
    let tasks = RowTasks { rows_per_task: ROWS_PER_COPY, parallel: true };
    // per task: the next row's index over the outer axes (last fastest) and its input offset
    let odometer = || RowCursor { row: usize::MAX, index: vec![0; outer.len()], base: 0 };
    build_rows((len, inner), tasks, odometer, |at, block| {
        block.write_rows(|r, row| {
            if at.row != r {
                // a task's first row: its index from the row number
                let mut rest = r;
                for (i, &extent) in at.index.iter_mut().zip(outer).rev() {
                    (*i, rest) = (rest % extent, rest / extent);
                }
                at.base = at.index.iter().zip(walk).map(|(i, w)| i * w).sum();
            }
            let written = row.copy_from(&src[at.base..at.base + inner]);
            next_row(&mut at.index, &mut at.base, outer, walk);
            at.row = r + 1;
            written
        })
    })
}

/// Where [`copy_rows`] stands: the row it expects next, its index and its input offset.
struct RowCursor {
    row: usize,
    index: Vec<usize>,
    base: usize,
}

fn check_permutation(op: &'static str, shape: &[usize], perm: &[usize]) -> Result<()> {
    let mut seen = vec![false; shape.len()];
    let valid =
        perm.len() == shape.len() && perm.iter().all(|&p| p < seen.len() && !std::mem::replace(&mut seen[p], true));
    if valid {
        Ok(())
    } else {
        Err(TensorAutodiffError::InvalidPermutation { op, permutation: perm.to_vec(), shape: Shape::from(shape) })
    }
}

impl TensorValue {
    /// The same values under a new shape with the same number of elements (row-major order kept).
    ///
    /// # Shapes
    /// `[...] → shape`, with the same product of axes: `[B, T, H·d_h] → [B, T, H, d_h]`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::ReshapeMismatch`] if the element counts differ;
    /// [`TensorAutodiffError::Released`] if an operand was released.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::constant;
    /// let x = constant(&[1, 2, 4], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])?;
    /// let heads = x.reshape(&[1, 2, 2, 2])?; // two heads of width 2 per token
    /// assert_eq!(heads.value()?.as_slice(), x.value()?.as_slice());
    /// assert!(x.reshape(&[3, 3]).is_err()); // 9 values asked for, 8 held
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn reshape(&self, shape: &[usize]) -> Result<TensorValue> {
        let out = self.read("reshape")?.reshaped(shape)?;
        Ok(TensorValue::record("reshape", vec![self.clone()], out, |ctx| {
            // forward: out = x viewed as a new shape  =>  dx = dout viewed as x's shape
            Ok(vec![Some(ctx.grad().reshaped(ctx.input_shape(0))?)])
        }))
    }

    /// Reorders the axes: output axis `i` is input axis `perm[i]`.
    ///
    /// # Shapes
    /// `[a_0, …, a_{r−1}] → [a_perm[0], …, a_perm[r−1]]`: `[B, T, H, d_h]` with `perm = [0, 2, 1, 3]`
    /// gives `[B, H, T, d_h]`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::InvalidPermutation`] if `perm` is not a permutation of `0..rank`.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::constant;
    /// let x = constant(&[1, 2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0])?;
    /// let y = x.permute(&[0, 2, 1])?;
    /// assert_eq!((y.shape(), y.value()?.as_slice()), (&[1usize, 3, 2][..], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0][..]));
    /// assert!(x.permute(&[0, 0, 1]).is_err());
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn permute(&self, perm: &[usize]) -> Result<TensorValue> {
        check_permutation("permute", self.shape(), perm)?;
        self.permute_unchecked("permute", perm)
    }

    fn permute_unchecked(&self, op: &'static str, perm: &[usize]) -> Result<TensorValue> {
        let out = permute_tensor(&self.read(op)?, perm);
        let mut inverse = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        Ok(TensorValue::record(op, vec![self.clone()], out, move |ctx| {
            // forward: out[.. i ..] = x[.. perm[i] ..]  =>  dx = dout permuted by perm⁻¹
            Ok(vec![Some(permute_tensor(ctx.grad(), &inverse))])
        }))
    }

    /// Swaps axes `a` and `b` (a permutation with one exchange).
    ///
    /// # Shapes
    /// `k [..., T, d_h]` with `(a, b)` the last two axes gives `kᵀ [..., d_h, T]`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::AxisOutOfRange`] if either axis is not below the rank.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::constant;
    /// let k = constant(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    /// let kt = k.transpose(0, 1)?;
    /// assert_eq!((kt.shape(), kt.value()?.as_slice()), (&[3usize, 2][..], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0][..]));
    /// assert!(k.transpose(0, 2).is_err());
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn transpose(&self, a: usize, b: usize) -> Result<TensorValue> {
        let rank = self.shape().len();
        for axis in [a, b] {
            if axis >= rank {
                return Err(TensorAutodiffError::AxisOutOfRange {
                    op: "transpose",
                    axis,
                    shape: Shape::from(self.shape()),
                });
            }
        }
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(a, b);
        self.permute_unchecked("transpose", &perm)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::Tensor;

    #[test]
    fn large_permutes_match_the_definition() {
        // perms keeping the last axis (whole rows move, in parallel blocks of rows: 1050 rows, the
        // last block partial) and moving it (value by value)
        let shape = [3, 50, 7, 64];
        let x = Tensor::new(&shape, (0..67_200).map(|i| i as f64).collect()).unwrap();
        // [0, 1, 3, 2] swaps the last two axes (in tiles; 7 × 64 leaves partial tiles)
        for perm in [[0, 2, 1, 3], [1, 2, 0, 3], [0, 1, 2, 3], [3, 1, 0, 2], [2, 3, 0, 1], [0, 1, 3, 2]] {
            let out = super::permute_tensor(&x, &perm);
            let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            assert_eq!(out.shape(), out_shape.as_slice());
            for (flat, &v) in out.as_slice().iter().enumerate() {
                // the output index of `flat`, then the input value it must hold (its own index)
                let (mut rest, mut index) = (flat, [0; 4]);
                for axis in (0..4).rev() {
                    index[axis] = rest % out_shape[axis];
                    rest /= out_shape[axis];
                }
                let mut source = [0; 4];
                for (axis, &p) in perm.iter().enumerate() {
                    source[p] = index[axis];
                }
                let want = ((source[0] * 50 + source[1]) * 7 + source[2]) * 64 + source[3];
                assert_eq!(v, want as f64, "perm {perm:?} at {flat}");
            }
        }
    }

    #[test]
    fn transpose_by_hand_and_errors() {
        // [[1,2,3],[4,5,6]]ᵀ = [[1,4],[2,5],[3,6]]
        let x = constant(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let t = x.transpose(0, 1).unwrap().value().unwrap();
        assert_eq!((t.shape(), t.as_slice()), (&[3usize, 2][..], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0][..]));
        let err = x.transpose(0, 2).unwrap_err();
        assert!(err.to_string().contains("transpose: axis 2 is out of range for shape [2,3]"), "{err}");
        let err = x.permute(&[0, 0]).unwrap_err();
        assert!(matches!(err, crate::error::TensorAutodiffError::InvalidPermutation { .. }), "{err}");
        let err = x.reshape(&[4]).unwrap_err();
        assert!(err.to_string().contains("cannot reshape [2,3] (6 values) into [4]"), "{err}");
    }

    #[test]
    fn gradcheck_reshape_transpose_chain() {
        let x = Tensor::new(&[2, 3, 4], (0..24).map(|i| (i as f64 * 0.37).sin()).collect()).unwrap();
        let report = gradcheck(&[("x", x)], &GradcheckConfig::default(), |v| {
            v[0].reshape(&[2, 3, 2, 2])?.transpose(1, 2)?.permute(&[3, 0, 2, 1])?.reshape(&[4, 6])
        })
        .unwrap();
        assert!(report.passed(), "{report:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn reshape_transpose_round_trip_is_bitwise(dims in proptest::collection::vec(1usize..4, 1..5), a in 0usize..4, b in 0usize..4, seed in any::<u64>()) {
            let len: usize = dims.iter().product();
            let mut rng = crate::nn::SplitMix64::new(seed);
            let values: Vec<f64> = (0..len).map(|_| rng.uniform(-3.0, 3.0)).collect();
            let x = constant(&dims, &values).unwrap();
            let (a, b) = (a % dims.len(), b % dims.len());
            let back = x.transpose(a, b).unwrap().transpose(a, b).unwrap().value().unwrap();
            prop_assert!(back.bitwise_eq(&x.value().unwrap()));
            let flat = x.reshape(&[len]).unwrap().reshape(&dims).unwrap().value().unwrap();
            prop_assert!(flat.bitwise_eq(&x.value().unwrap()));
        }
    }
}
