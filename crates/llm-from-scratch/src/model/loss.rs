//! Cross-entropy over next tokens: a fused, numerically stable log-softmax and pick.
//!
//! For a row of logits `z` (one position) with target `t`:
//!
//! ```text
//! m    = max_j z_j
//! lse  = m + ln Σ_j e^{z_j − m}          log-sum-exp without overflow: every exponent ≤ 0
//! loss = lse − z_t                        = −ln softmax(z)_t
//! ```
//!
//! The result is the mean over the scored rows (rows whose target is `None` are ignored — e.g. the
//! prompt half of a copy task, whose tokens are random and cannot be predicted). Fusing the two
//! steps keeps the backward one line: `∂loss/∂z_j = (softmax(z)_j − [j = t]) / M`.

use llm_kernels::target::active;
use rayon::prelude::*;

use crate::autodiff::TensorValue;
use crate::error::{Shape, TensorAutodiffError};
use crate::tensor::Tensor;
use crate::tensor::exp::exp_shifted_sum;
use crate::tensor::values::PARALLEL_VALUES;

/// Rows per task when the rows run on every thread.
const ROWS_PER_TASK: usize = 64;

/// `log Σ_j e^{z_j}` of one row, and `e^{z_j − max}` written into `scratch`.
fn log_sum_exp(row: &[f64], scratch: &mut [f64]) -> (f64, f64) {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    scratch.copy_from_slice(row);
    let total = exp_shifted_sum(scratch, max);
    (max + total.ln(), total)
}

/// The mean cross-entropy of `logits [..., V]` (one row per position) against `targets`, one per
/// row, `None` for a row that is not scored. A rank-0 value.
///
/// # Shapes
/// `logits [..., V]` with `R` rows in all (`R = B·T` for `[B, T, V]`), `targets` of length `R` →
/// `[]` (rank 0).
///
/// # Example
/// ```
/// use llm_from_scratch::{constant, model::cross_entropy};
/// // uniform logits over 4 tokens: −ln(1/4) = ln 4 whatever the target; the second row is ignored
/// let logits = constant(&[2, 4], &[0.0, 0.0, 0.0, 0.0, 5.0, -1.0, 2.0, 0.0])?;
/// let loss = cross_entropy(&logits, &[Some(2), None])?;
/// assert!((loss.value()?.as_slice()[0] - 4f64.ln()).abs() < 1e-15);
/// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
/// ```
///
/// # Errors
/// [`TensorAutodiffError::RankMismatch`] for a scalar; [`TensorAutodiffError::LengthMismatch`] if
/// there is not one target per row; [`TensorAutodiffError::InvalidArgument`] for a target `≥ V`,
/// for no scored row, or for a non-finite logit in a scored row; [`TensorAutodiffError::Released`].
pub fn cross_entropy(logits: &TensorValue, targets: &[Option<usize>]) -> Result<TensorValue, TensorAutodiffError> {
    let op = "cross_entropy";
    let vocab = match logits.shape().last() {
        Some(&v) if v > 0 => v,
        _ => {
            return Err(TensorAutodiffError::RankMismatch {
                op,
                expected: "at least 1 with a non-empty last axis [..., V]".into(),
                shape: Shape::from(logits.shape()),
            });
        }
    };
    let rows = logits.len() / vocab;
    if targets.len() != rows {
        let shape = Shape::from(&logits.shape()[..logits.shape().len() - 1]);
        return Err(TensorAutodiffError::LengthMismatch { op, shape, expected: rows, actual: targets.len() });
    }
    let invalid = |name, value: f64, reason| TensorAutodiffError::InvalidArgument { op, name, value, reason };
    if let Some(bad) = targets.iter().flatten().find(|&&t| t >= vocab) {
        return Err(invalid("target", *bad as f64, "must be below the vocabulary size (the last axis)"));
    }
    let scored = targets.iter().flatten().count();
    if scored == 0 {
        return Err(invalid("scored rows", 0.0, "at least one target must be given"));
    }
    let z = logits.read(op)?;
    if let Some(&bad) = z
        .as_slice()
        .chunks(vocab)
        .zip(targets)
        .filter(|(_, t)| t.is_some())
        .flat_map(|(row, _)| row)
        .find(|v| !v.is_finite())
    {
        return Err(invalid("logit", bad, "logits of a scored row must be finite"));
    }
    // each scored row's lse(z) − z_t (on every thread when there are many rows), then their sum
    // in row order on this thread: the same bits on any number of threads
    let target = active();
    let scratch = || vec![0.0; vocab];
    let row_loss = |scratch: &mut Vec<f64>, (row, t): (&[f64], &Option<usize>)| {
        t.map(|t| target.within(|| log_sum_exp(row, scratch).0 - row[t]))
    };
    let losses: Vec<Option<f64>> = if z.len() < PARALLEL_VALUES {
        let mut scratch = scratch();
        z.as_slice().chunks(vocab).zip(targets).map(|row| row_loss(&mut scratch, row)).collect()
    } else {
        let rows = z.as_slice().par_chunks(vocab).zip(targets).with_min_len(ROWS_PER_TASK);
        rows.map_init(scratch, row_loss).collect()
    };
    let total = losses.iter().flatten().fold(0.0, |total, loss| total + loss);
    let inverse_count = 1.0 / scored as f64;
    let targets = targets.to_vec();
    Ok(TensorValue::record(op, vec![logits.clone()], Tensor::scalar(total * inverse_count), move |ctx| {
        // forward: loss = (1/M) Σ_rows (lse(z) − z_t)
        //   =>  dz_j = dloss · (softmax(z)_j − [j = t]) / M,  0 for an ignored row
        let (z, g) = (ctx.input(0)?, ctx.grad().as_slice()[0] * inverse_count);
        let mut dz = vec![0.0; z.len()];
        // rows are independent: on every thread when there are many
        let target = active();
        let row_adjoint = |((drow, row), t): ((&mut [f64], &[f64]), &Option<usize>)| {
            let Some(t) = *t else { return };
            let (_, sum) = target.within(|| log_sum_exp(row, drow)); // drow = e^{z − max}
            for d in drow.iter_mut() {
                *d *= g / sum;
            }
            drow[t] -= g;
        };
        if z.len() < PARALLEL_VALUES {
            dz.chunks_mut(vocab).zip(z.as_slice().chunks(vocab)).zip(&targets).for_each(row_adjoint);
        } else {
            let rows = dz.par_chunks_mut(vocab).zip(z.as_slice().par_chunks(vocab)).zip(&targets);
            rows.with_min_len(ROWS_PER_TASK).for_each(row_adjoint);
        }
        Ok(vec![Some(Tensor::from_parts(z.shape().to_vec(), dz))])
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::{GradcheckConfig, constant, gradcheck};

    #[test]
    fn many_rows_on_any_thread_count_give_the_plain_rows_bits() {
        // 400 rows of 57 (past the threshold of running on every thread), every third ignored:
        // the loss and its adjoint against each row's formula written out, summed in row order
        let (rows, vocab) = (400, 57);
        let mut rng = crate::nn::SplitMix64::new(57);
        let z: Vec<f64> = (0..rows * vocab).map(|_| rng.uniform(-6.0, 6.0)).collect();
        let targets: Vec<Option<usize>> = (0..rows).map(|r| (r % 3 != 1).then_some((r * 7) % vocab)).collect();
        let scored = targets.iter().flatten().count() as f64;
        let (mut total, mut dz) = (0.0, vec![0.0; rows * vocab]);
        for ((row, drow), t) in z.chunks(vocab).zip(dz.chunks_mut(vocab)).zip(&targets) {
            let Some(t) = *t else { continue };
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            drow.copy_from_slice(row);
            let sum = exp_shifted_sum(drow, max);
            total += max + sum.ln() - row[t];
            let g = 1.0 / scored;
            for d in drow.iter_mut() {
                *d *= g / sum;
            }
            drow[t] -= g;
        }
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let (loss, grad) = pool.install(|| {
                let p = crate::autodiff::parameter(&[rows, vocab], &z).unwrap();
                let loss = cross_entropy(&p, &targets).unwrap();
                let grads = loss.backward().unwrap();
                (loss.value().unwrap().as_slice()[0], grads.get(&p).unwrap().clone().into_vec())
            });
            assert_eq!(loss.to_bits(), (total * (1.0 / scored)).to_bits(), "{threads} threads");
            assert_eq!(bits(&grad), bits(&dz), "{threads} threads");
        }
    }

    #[test]
    fn hand_values_and_stability() {
        // [0, ln 3]: softmax [1/4, 3/4]; target 1 → −ln(3/4); huge logits do not overflow
        let x = constant(&[2, 2], &[0.0, 3f64.ln(), 1000.0, 1000.0 + 3f64.ln()]).unwrap();
        let loss = cross_entropy(&x, &[Some(1), Some(1)]).unwrap().value().unwrap();
        assert!((loss.as_slice()[0] - (4.0f64 / 3.0).ln()).abs() < 1e-12);
        // gradient of the mean over 2 rows: row 0 → ([1/4, 3/4] − [0, 1]) / 2
        let p = crate::autodiff::parameter(&[1, 2], &[0.0, 3f64.ln()]).unwrap();
        let grads = cross_entropy(&p, &[Some(1)]).unwrap().backward().unwrap();
        let g = grads.get(&p).unwrap().as_slice();
        assert!((g[0] - 0.25).abs() < 1e-15 && (g[1] + 0.25).abs() < 1e-15, "{g:?}");
    }

    #[test]
    fn errors_are_typed() {
        let x = constant(&[2, 3], &[0.0; 6]).unwrap();
        let err = cross_entropy(&x, &[Some(3), None]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cross_entropy: target = 3 is invalid (must be below the vocabulary size (the last axis))"
        );
        assert!(cross_entropy(&x, &[None, None]).unwrap_err().to_string().contains("scored rows = 0"));
        assert!(cross_entropy(&x, &[Some(0)]).unwrap_err().to_string().starts_with("cross_entropy: shape [2] holds 2"));
        assert!(cross_entropy(&constant(&[], &[1.0]).unwrap(), &[Some(0)]).is_err());
        let inf = constant(&[1, 2], &[f64::INFINITY, 0.0]).unwrap();
        assert!(cross_entropy(&inf, &[Some(0)]).unwrap_err().to_string().contains("logit = inf"));
    }

    #[test]
    fn gradcheck_cross_entropy_with_ignored_rows() {
        let z = Tensor::new(&[2, 3, 5], (0..30).map(|i| (i as f64 * 0.77).sin() * 3.0).collect()).unwrap();
        let targets = [Some(4), None, Some(0), Some(2), None, Some(2)];
        let report =
            gradcheck(&[("logits", z)], &GradcheckConfig::default(), |v| cross_entropy(&v[0], &targets)).unwrap();
        assert!(report.passed(), "{report:?}");
    }
}
