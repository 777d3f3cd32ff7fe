//! [`RotaryEmbedding::rotate_heads`]: a projection's output split into heads and rotated in one
//! pass.
//!
//! An attention layer splits its projected queries `[B, T, n·d_h]` into heads `[B, n, T, d_h]`
//! (a copy that moves rows) and then rotates every row (a second pass). Both move whole rows of
//! `d_h` values, so one pass can do both: output row `(b, h, t)` is input row `(b, t, h)`,
//! rotated. The backward does the same in reverse: the adjoint row `(b, h, t)` rotated back
//! becomes row `(b, t, h)` of `dx`. Each value is computed exactly as the two steps compute it,
//! so the result is bitwise theirs (tests); the tensors are moved once instead of twice.

use super::{RopeError, RotaryEmbedding, RowWalk};
use crate::autodiff::TensorValue;
use crate::error::Shape;

impl RotaryEmbedding {
    /// `x [B, T, n·d_h]` split into `n` heads and rotated at `positions`: `[B, n, T, d_h]`, bit for
    /// bit `rotate_at(&split_heads(x, n)?, positions)`, in one pass over the values (and one in
    /// the backward). `positions` are `T` (shared by the batch) or `B·T` (one row per batch row).
    ///
    /// # Shapes
    /// `x [B, T, n·d_h]` → `[B, n, T, d_h]`.
    ///
    /// # Errors
    /// [`RopeError::InputShape`] if `x` is not `[B, T, n·d_h]` or the positions fit neither form;
    /// [`RopeError::PositionOutOfRange`] for a position at or past capacity;
    /// [`RopeError::Tensor`] for a released input.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::{attention::split_heads, constant, nn::RotaryEmbedding};
    /// let rope = RotaryEmbedding::new(2, 8, 100.0)?;
    /// // B = 1, T = 3 tokens, 2 heads of width 2
    /// let x = constant(&[1, 3, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0])?;
    /// let fused = rope.rotate_heads(&x, 2, &[4, 5, 6])?.value()?;
    /// let two_steps = rope.rotate_at(&split_heads(&x, 2)?, &[4, 5, 6])?.value()?;
    /// assert_eq!(fused.shape(), &[1, 2, 3, 2]);
    /// assert_eq!(fused.as_slice(), two_steps.as_slice());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rotate_heads(&self, x: &TensorValue, heads: usize, positions: &[usize]) -> Result<TensorValue, RopeError> {
        let shape = x.shape();
        let d = self.head_width;
        if shape.len() != 3 || heads == 0 || Some(shape[2]) != heads.checked_mul(d) {
            return Err(RopeError::InputShape {
                shape: Shape::from(shape),
                reason: format!("expected [B, T, {heads}·{d}] to split into {heads} heads of {d}"),
            });
        }
        let (b, t) = (shape[0], shape[1]);
        let heads_shape = vec![b, heads, t, d];
        self.check_positions(&heads_shape, positions)?;
        let positions = positions.to_vec();
        // heads row (b, h, t) ← token row (b, t, h), at the position of (b, t); the positions
        // are T shared by the batch, or B·T, a row per batch row
        let per_row = if positions.len() > t { t } else { 0 };
        let split = RowWalk { extents: [b, heads, t], source: [t * heads, 1, heads], position: [per_row, 0, 1] };
        let out = self.apply_rows(x.read("rope_heads")?.as_slice(), heads_shape, split, &positions, 1.0);
        let rope = self.clone();
        Ok(TensorValue::record("rope_heads", vec![x.clone()], out, move |ctx| {
            // dx row (b, t, h) = R(−pθ) · dy row (b, h, t), p the position of token t
            let merge = RowWalk { extents: [b, t, heads], source: [heads * t, 1, t], position: [per_row, 1, 0] };
            Ok(vec![Some(rope.apply_rows(ctx.grad().as_slice(), vec![b, t, heads * d], merge, &positions, -1.0))])
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::attention::split_heads;
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::nn::{RopeError, RopeLayout, RotaryEmbedding, SplitMix64};
    use crate::tensor::Tensor;
    use llm_kernels::target::{Target, with_target};

    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = SplitMix64::new(seed);
        (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()
    }

    /// Forward and backward bitwise the split followed by the rotation, both layouts, shared and
    /// per-batch positions, below and above the parallel threshold, positions past the tables.
    #[test]
    fn one_pass_is_bitwise_the_split_then_the_rotation() {
        for (b, t, n, d, layout) in [
            (2, 5, 3, 4, RopeLayout::AdjacentPairs),
            (1, 7, 2, 6, RopeLayout::SplitHalves),
            (4, 256, 8, 32, RopeLayout::AdjacentPairs),
        ] {
            let rope = RotaryEmbedding::new(d, 300, 10_000.0).unwrap().with_layout(layout);
            for positions in [(3..3 + t).collect::<Vec<_>>(), (0..b * t).map(|i| (i * 7) % 299).collect()] {
                let x = Tensor::new(&[b, t, n * d], values(b * t * n * d, 1)).unwrap();
                let up = Tensor::new(&[b, n, t, d], values(b * t * n * d, 2)).unwrap();
                let run = |fused: bool| {
                    let x = crate::autodiff::TensorValue::leaf(x.clone(), true);
                    let y = if fused {
                        rope.rotate_heads(&x, n, &positions).unwrap()
                    } else {
                        rope.rotate_at(&split_heads(&x, n).unwrap(), &positions).unwrap()
                    };
                    let grads = y.backward_with(&up).unwrap();
                    (y.value().unwrap(), grads.get(&x).unwrap().clone())
                };
                let bits = |t: &Tensor| t.as_slice().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                // every kernel target, forward and backward (both capture it at entry)
                for target in Target::available() {
                    let ((y1, g1), (y2, g2)) = with_target(target, || (run(true), run(false))).unwrap();
                    assert_eq!(y1.shape(), y2.shape());
                    assert_eq!(bits(&y1), bits(&y2), "forward {b} {t} {n} {d} on {target:?}");
                    assert_eq!(bits(&g1), bits(&g2), "backward {b} {t} {n} {d} on {target:?}");
                }
            }
        }
        // a position past the tables is computed, with the same bits
        let rope = RotaryEmbedding::new(4, 1 << 20, 10_000.0).unwrap();
        let x = constant(&[1, 2, 8], &values(16, 3)).unwrap();
        let far = [1 << 19, (1 << 20) - 1];
        let fused = rope.rotate_heads(&x, 2, &far).unwrap().value().unwrap();
        let split = rope.rotate_at(&split_heads(&x, 2).unwrap(), &far).unwrap().value().unwrap();
        assert_eq!(fused.as_slice(), split.as_slice());
    }

    #[test]
    fn gradcheck_rotate_heads() {
        let rope = RotaryEmbedding::new(4, 16, 100.0).unwrap();
        let x = Tensor::new(&[2, 3, 8], values(48, 4)).unwrap();
        let report = gradcheck(&[("x", x)], &GradcheckConfig::default(), |v| {
            rope.rotate_heads(&v[0], 2, &[1, 2, 3]).map_err(|e| match e {
                RopeError::Tensor(t) => t,
                other => panic!("{other}"),
            })
        })
        .unwrap();
        assert!(report.passed(), "{report:?}");
    }

    #[test]
    fn bad_shapes_and_positions_are_errors() {
        let rope = RotaryEmbedding::new(4, 8, 100.0).unwrap();
        let x = constant(&[1, 3, 8], &values(24, 5)).unwrap();
        let shape_error = |r: Result<_, RopeError>| matches!(r, Err(RopeError::InputShape { .. }));
        assert!(shape_error(rope.rotate_heads(&x, 3, &[0, 1, 2]))); // 8 is not 3 heads of 4
        assert!(shape_error(rope.rotate_heads(&x, 0, &[0, 1, 2])));
        assert!(shape_error(rope.rotate_heads(&x, usize::MAX, &[0, 1, 2])));
        assert!(shape_error(rope.rotate_heads(&constant(&[3, 8], &values(24, 5)).unwrap(), 2, &[0, 1, 2])));
        assert!(shape_error(rope.rotate_heads(&x, 2, &[0, 1])));
        assert!(matches!(rope.rotate_heads(&x, 2, &[0, 1, 8]), Err(RopeError::PositionOutOfRange { start: 8, .. })));
    }
}
