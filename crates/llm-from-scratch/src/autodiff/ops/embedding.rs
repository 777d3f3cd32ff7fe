//! Embedding lookup: token ids pick rows of a table, `out[n, :] = table[ids[n], :]`.
//!
//! A lookup is a matrix product with one-hot rows (`onehot(ids) · table`) without forming the
//! one-hot matrix. Its backward is therefore a *scatter-add*: every output row's adjoint is added
//! to the table row it was read from, so a token that appears twice receives both contributions.

use crate::autodiff::TensorValue;
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::Tensor;

impl TensorValue {
    /// The rows `ids` of the table `self [V, d]`, arranged as `[..ids_shape, d]`.
    ///
    /// ```
    /// use llm_from_scratch::parameter;
    /// // a table of 3 tokens of width 2; the sequence [2, 0, 2] reads rows 2, 0, 2
    /// let table = parameter(&[3, 2], &[0.0, 0.1, 1.0, 1.1, 2.0, 2.1])?;
    /// let x = table.embedding(&[2, 0, 2], &[1, 3])?;
    /// assert_eq!(x.shape(), &[1, 3, 2]);
    /// assert_eq!(x.value()?.as_slice(), &[2.0, 2.1, 0.0, 0.1, 2.0, 2.1]);
    /// // token 2 was read twice: its row receives both adjoints
    /// let grads = x.sum()?.backward()?;
    /// assert_eq!(grads.get(&table).unwrap().as_slice(), &[1.0, 1.0, 0.0, 0.0, 2.0, 2.0]);
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    ///
    /// # Shapes
    /// `table [V, d]`, `ids` of shape `ids_shape` (e.g. `[B, T]`) → `[..ids_shape, d]`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::RankMismatch`] if the table is not rank 2;
    /// [`TensorAutodiffError::LengthMismatch`] if `ids` does not fill `ids_shape`;
    /// [`TensorAutodiffError::InvalidArgument`] for an id `≥ V`; [`TensorAutodiffError::Released`].
    pub fn embedding(&self, ids: &[usize], ids_shape: &[usize]) -> Result<TensorValue> {
        let table_shape = self.shape();
        if table_shape.len() != 2 {
            return Err(TensorAutodiffError::RankMismatch {
                op: "embedding",
                expected: "2 (a table [V, d])".into(),
                shape: Shape::from(table_shape),
            });
        }
        let (vocab, d) = (table_shape[0], table_shape[1]);
        let expected = crate::tensor::dense::element_count("embedding", ids_shape)?;
        if expected != ids.len() {
            return Err(TensorAutodiffError::LengthMismatch {
                op: "embedding",
                shape: Shape::from(ids_shape),
                expected,
                actual: ids.len(),
            });
        }
        if let Some(&bad) = ids.iter().find(|&&id| id >= vocab) {
            return Err(TensorAutodiffError::InvalidArgument {
                op: "embedding",
                name: "token id",
                value: bad as f64,
                reason: "must be below the number of rows of the table",
            });
        }
        let mut out_shape = ids_shape.to_vec();
        out_shape.push(d);
        crate::tensor::dense::element_count("embedding", &out_shape)?;
        let table = self.read("embedding")?;
        let mut out = Vec::with_capacity(ids.len() * d);
        for &id in ids {
            out.extend_from_slice(&table.as_slice()[id * d..(id + 1) * d]);
        }
        let ids = ids.to_vec();
        Ok(TensorValue::record("embedding", vec![self.clone()], Tensor::from_parts(out_shape, out), move |ctx| {
            // forward: out[n, :] = table[ids[n], :]  =>  dtable[ids[n], :] += dout[n, :]
            // (rows are added in the order of the ids: the result never depends on scheduling)
            let g = ctx.grad().as_slice();
            let mut dtable = vec![0.0; vocab * d];
            for (n, &id) in ids.iter().enumerate() {
                for (acc, &v) in dtable[id * d..(id + 1) * d].iter_mut().zip(&g[n * d..(n + 1) * d]) {
                    *acc += v;
                }
            }
            Ok(vec![Some(Tensor::from_parts(vec![vocab, d], dtable))])
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};
    use crate::tensor::Tensor;

    #[test]
    fn errors_are_typed() {
        let table = constant(&[3, 2], &[0.0; 6]).unwrap();
        let err = table.embedding(&[0, 3], &[2]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "embedding: token id = 3 is invalid (must be below the number of rows of the table)"
        );
        let err = table.embedding(&[0, 1], &[3]).unwrap_err();
        assert!(err.to_string().starts_with("embedding: shape [3] holds 3 values but 2 were given"), "{err}");
        let err = constant(&[6], &[0.0; 6]).unwrap().embedding(&[0], &[1]).unwrap_err();
        assert!(err.to_string().starts_with("embedding: expected rank 2"), "{err}");
        // an empty sequence is a valid (empty) lookup
        assert_eq!(table.embedding(&[], &[1, 0]).unwrap().shape(), &[1, 0, 2]);
        table.release();
        assert!(matches!(table.embedding(&[0], &[1]), Err(crate::error::TensorAutodiffError::Released { .. })));
    }

    #[test]
    fn gradcheck_embedding_with_repeated_ids() {
        let table = Tensor::new(&[4, 3], (0..12).map(|i| (i as f64 * 0.61).sin()).collect()).unwrap();
        let report = gradcheck(&[("table", table)], &GradcheckConfig::default(), |v| {
            // ids repeat (1 twice, 3 three times) and id 2 is never read
            let x = v[0].embedding(&[1, 3, 0, 3, 1, 3], &[2, 3])?;
            x.mul(&x)
        })
        .unwrap();
        assert!(report.passed(), "{report:?}");
        assert_eq!(report.coordinates(), 12);
    }
}
