//! `masked_fill`: replace the masked entries by a constant (−∞ before a softmax hides a key).

use llm_kernels::softmax::HiddenKeys;

use crate::autodiff::TensorValue;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::broadcast::{broadcast_strides, for_each_broadcast};
use crate::tensor::{Mask, Tensor, broadcast_shapes};

/// Checks that `mask` broadcasts to `shape` (without expanding it).
pub(crate) fn check_mask(op: &'static str, mask: &Mask, shape: &[usize]) -> Result<()> {
    let out = broadcast_shapes(op, shape, mask.shape())?;
    if out != shape {
        return Err(TensorAutodiffError::ShapeMismatch {
            op,
            lhs: Shape::from(shape),
            rhs: Shape::from(mask.shape()),
            reason: "the mask must broadcast to the value's shape",
        });
    }
    Ok(())
}

/// A mask broadcast to a value's shape, kept as rows: the flags of each row of keys once, and for
/// each row of the value (every axis but the last) the row of flags it takes. A causal `[T, T]`
/// mask under `[B, H, T, T]` scores stays `T` rows of flags and `B·H·T` row numbers, where
/// expanding it would write a flag per score; a mask that broadcasts along the last axis is
/// expanded, each row of the value then taking its own row of flags.
pub(crate) struct MaskRows {
    flags: Vec<bool>,
    width: usize,
    row_of: Vec<usize>,
}

impl MaskRows {
    /// `mask` as rows of `shape` (checked to broadcast to it).
    pub(crate) fn of(op: &'static str, mask: &Mask, shape: &[usize]) -> Result<Self> {
        check_mask(op, mask, shape)?;
        let (ms, flags) = (mask.shape(), mask.as_slice());
        let (width, rows) = match shape.split_last() {
            Some((&width, rows)) => (width, rows),
            None => (1, &[][..]),
        };
        if shape.contains(&0) {
            // no values, so no flags; and no row numbers either, which a `[2³¹, 0]` value would
            // otherwise ask for before anything else
            return Ok(Self { flags: Vec::new(), width, row_of: Vec::new() });
        }
        match ms.split_last() {
            Some((&w, mask_rows)) if w == width && w > 0 => {
                // the mask's rows are whole rows of the value: broadcast only the row index
                let strides = broadcast_strides(mask_rows, rows);
                let mut row_of = Vec::with_capacity(rows.iter().product());
                for_each_broadcast(rows, &strides, &vec![0; rows.len()], |_, m, _| row_of.push(m));
                Ok(Self { flags: flags.to_vec(), width, row_of })
            }
            _ => Ok(Self::expanded(mask, shape)),
        }
    }

    /// `mask` expanded to a flag per value of `shape` (which it broadcasts to, checked by the
    /// caller, and which holds values), each row of the value taking its own row of flags.
    fn expanded(mask: &Mask, shape: &[usize]) -> Self {
        let (ms, flags) = (mask.shape(), mask.as_slice());
        let mut covered = vec![false; shape.iter().product()];
        let strides = broadcast_strides(ms, shape);
        for_each_broadcast(shape, &strides, &vec![0; shape.len()], |o, m, _| covered[o] = flags[m]);
        let width = shape.last().copied().unwrap_or(1);
        let rows = covered.len() / width;
        Self { flags: covered, width, row_of: (0..rows).collect() }
    }

    /// The same flags, with the rows of each block of `count` rows of the value one after another
    /// in the flags (so that [`MaskRows::run`] can hand a block over as one slice): as they are
    /// when every block's rows already are (a causal `[T, T]` under `[B, H, T, T]`, blocks of
    /// `T`), else expanded.
    pub(crate) fn in_runs_of(self, count: usize, mask: &Mask, shape: &[usize]) -> Self {
        let runs = self.row_of.chunks(count.max(1)).all(|block| block.windows(2).all(|p| p[1] == p[0] + 1));
        if runs { self } else { Self::expanded(mask, shape) }
    }

    /// The flags of rows `first..first + count` of the value, one after another (see
    /// [`MaskRows::in_runs_of`]).
    pub(crate) fn run(&self, first: usize, count: usize) -> &[bool] {
        let start = self.row_of[first] * self.width;
        &self.flags[start..start + count * self.width]
    }

    /// The flags of row `r` of the value.
    fn row(&self, r: usize) -> &[bool] {
        self.run(r, 1)
    }

    /// The view the softmax kernels read (`None` for rows of no keys).
    pub(crate) fn keys(&self) -> Option<HiddenKeys<'_>> {
        HiddenKeys::new(&self.flags, self.width, &self.row_of)
    }
}

/// For every element of `shape`, whether the (broadcast) mask covers it.
pub(crate) fn expand(op: &'static str, mask: &Mask, shape: &[usize]) -> Result<Vec<bool>> {
    let rows = MaskRows::of(op, mask, shape)?;
    Ok((0..rows.row_of.len()).flat_map(|r| rows.row(r)).copied().collect())
}

impl TensorValue {
    /// `out = fill` where `mask` is true, `x` elsewhere.
    ///
    /// # Shapes
    /// `x [...]`, `mask` broadcasting to `x`'s shape → `x`'s shape.
    ///
    /// # Errors
    /// [`TensorAutodiffError::ShapeMismatch`] if the mask does not broadcast to the value's
    /// shape; [`TensorAutodiffError::Released`] if an operand was released.
    ///
    /// # Example
    /// ```
    /// use llm_from_scratch::{Mask, constant};
    /// // the causal mask of 2 tokens hides key 1 from query 0
    /// let scores = constant(&[2, 2], &[0.1, 0.2, 0.3, 0.4])?;
    /// let hidden = scores.masked_fill(&Mask::causal(2, 2, 0)?, f64::NEG_INFINITY)?;
    /// assert_eq!(hidden.value()?.as_slice(), &[0.1, f64::NEG_INFINITY, 0.3, 0.4]);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    pub fn masked_fill(&self, mask: &Mask, fill: f64) -> Result<TensorValue> {
        let covered = expand("masked_fill", mask, self.shape())?;
        let x = self.read("masked_fill")?;
        let values = x.as_slice().iter().zip(&covered).map(|(&v, &m)| if m { fill } else { v }).collect();
        let out = Tensor::from_parts(x.shape().to_vec(), values);
        Ok(TensorValue::record("masked_fill", vec![self.clone()], out, move |ctx| {
            // forward: out = m ? fill : x  =>  dx = m ? 0 : dout
            let g = ctx.grad();
            let values = g.as_slice().iter().zip(&covered).map(|(&d, &m)| if m { 0.0 } else { d }).collect();
            Ok(vec![Some(Tensor::from_parts(g.shape().to_vec(), values))])
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::{Mask, Tensor};

    #[test]
    fn causal_fill_by_hand() {
        // 2×2 causal: query 0 may not see key 1
        let x = constant(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let y = x.masked_fill(&Mask::causal(2, 2, 0).unwrap(), f64::NEG_INFINITY).unwrap().value().unwrap();
        assert_eq!(y.as_slice(), &[1.0, f64::NEG_INFINITY, 3.0, 4.0]);
        let err = x.masked_fill(&Mask::causal(3, 3, 0).unwrap(), 0.0).unwrap_err();
        assert!(err.to_string().starts_with("masked_fill: shapes [2,2] and [3,3]"), "{err}");
        assert!(Mask::new(&[2], vec![true]).is_err());
    }

    #[test]
    fn expanding_row_by_row_equals_value_by_value() {
        // every mask shape that broadcasts to [2, 3, 4, 5]: whole rows copied, or one flag at a time
        let shape = [2, 3, 4, 5];
        let masks: [&[usize]; 6] = [&[4, 5], &[1, 4, 5], &[3, 1, 5], &[2, 3, 4, 5], &[4, 1], &[1]];
        for mask_shape in masks {
            let len: usize = mask_shape.iter().product();
            let mask = Mask::new(mask_shape, (0..len).map(|i| (i * 7) % 3 == 0).collect()).unwrap();
            let strides = super::broadcast_strides(mask_shape, &shape);
            let mut want = vec![false; shape.iter().product()];
            super::for_each_broadcast(&shape, &strides, &[0; 4], |o, m, _| want[o] = mask.as_slice()[m]);
            assert_eq!(super::expand("t", &mask, &shape).unwrap(), want, "mask {mask_shape:?}");
            // in runs of a matrix's 4 rows, each matrix's flags are its 20 expanded ones
            let rows = super::MaskRows::of("t", &mask, &shape).unwrap().in_runs_of(4, &mask, &shape);
            for t in 0..6 {
                assert_eq!(rows.run(4 * t, 4), &want[20 * t..20 * (t + 1)], "mask {mask_shape:?}, matrix {t}");
            }
        }
    }

    #[test]
    fn gradcheck_masked_fill_then_softmax_rows_with_minus_infinity() {
        let x = Tensor::new(&[2, 3, 3], (0..18).map(|i| (i as f64 * 0.53).sin()).collect()).unwrap();
        let mask = Mask::causal(3, 3, 0).unwrap();
        let report = gradcheck(&[("x", x)], &GradcheckConfig::default(), |v| {
            v[0].masked_fill(&mask, f64::NEG_INFINITY)?.softmax_last_axis()
        })
        .unwrap();
        assert!(report.passed(), "{report:?}");
    }
}
