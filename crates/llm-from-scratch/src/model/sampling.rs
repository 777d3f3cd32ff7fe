//! Choosing the next token from a row of logits: greedy, or temperature, top-k and top-p sampling.
//!
//! ```text
//! greedy:  argmax_j z_j                                   (the first one on a tie)
//! top-k:   keep the k largest z_j (ties: lower id first), p_j ∝ e^{(z_j − z_max)/τ},
//!          draw u ∈ [0, 1) and take the first j whose cumulative p exceeds u
//! top-p:   the top-k candidates, most likely first, cut after the shortest prefix whose
//!          probability reaches p (the "nucleus"), renormalised, then drawn the same way
//! ```
//!
//! Top-p adapts the number of candidates to the model's confidence: after `qu` the nucleus of
//! `p = 0.9` may be the single token `i`, after a space it may hold twenty word beginnings, where a
//! fixed `k` would be too many in the first case and too few in the second.
//!
//! A temperature `τ < 1` sharpens the distribution towards greedy, `τ > 1` flattens it; `k = 1` is
//! greedy whatever `τ`. Sampling draws exactly one number from the generator per token and greedy
//! draws none, so a run is reproducible from its seed.

use crate::model::ModelError;
use crate::nn::SplitMix64;
use crate::tensor::exp::exp;

/// The rule that turns logits into the next token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// The most likely token.
    Greedy,
    /// Sample among the `k` most likely tokens after dividing the logits by `temperature`.
    TopK {
        /// `τ > 0`.
        temperature: f64,
        /// `k ≥ 1` (more than `V` keeps every token).
        k: usize,
    },
    /// Nucleus sampling: among the `k` most likely tokens (after dividing the logits by
    /// `temperature`), keep the fewest, most likely first, whose probabilities add up to at least
    /// `p`, and sample among them. `k = usize::MAX` is pure top-p; `p = 1` is top-k.
    TopP {
        /// `τ > 0`.
        temperature: f64,
        /// `k ≥ 1` (more than `V` keeps every token).
        k: usize,
        /// `0 < p ≤ 1`.
        p: f64,
    },
}

impl std::fmt::Display for Sampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sampling::Greedy => f.write_str("greedy"),
            Sampling::TopK { temperature, k } => write!(f, "top_k(k:{k},temperature:{temperature})"),
            Sampling::TopP { temperature, k: usize::MAX, p } => write!(f, "top_p(p:{p},temperature:{temperature})"),
            Sampling::TopP { temperature, k, p } => write!(f, "top_p(p:{p},k:{k},temperature:{temperature})"),
        }
    }
}

/// The index of the largest value (the first on a tie), `None` for an empty row.
pub fn argmax(values: &[f64]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &v) in values.iter().enumerate() {
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i)
}

/// The `k` candidates of top-k sampling and their probabilities, most likely first.
///
/// ```
/// use llm_from_scratch::model::top_k_distribution;
/// // logits [0, ln 3, −5] at τ = 1, k = 2: the third token is dropped, then [1, 3]/4
/// let d = top_k_distribution(&[0.0, 3f64.ln(), -5.0], 1.0, 2)?;
/// assert_eq!(d.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 0]);
/// assert!((d[0].1 - 0.75).abs() < 1e-15 && (d[1].1 - 0.25).abs() < 1e-15);
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
///
/// # Errors
/// [`ModelError::InvalidSetting`] for `τ` not finite and positive, `k = 0` or an empty row;
/// [`ModelError::NonFiniteLogit`].
pub fn top_k_distribution(logits: &[f64], temperature: f64, k: usize) -> Result<Vec<(usize, f64)>, ModelError> {
    check_logits(logits)?;
    if !(temperature > 0.0 && temperature.is_finite()) {
        return Err(ModelError::setting("sampling", "temperature", temperature, "must be finite and positive"));
    }
    if k == 0 {
        return Err(ModelError::setting("sampling", "k", 0, "top-k needs at least one candidate"));
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    // descending logit, then ascending id: a total order, so ties never depend on the sort
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    order.truncate(k);
    let top = logits[order[0]];
    let weights: Vec<f64> = order.iter().map(|&i| exp((logits[i] - top) / temperature)).collect();
    let total: f64 = weights.iter().sum();
    Ok(order.into_iter().zip(weights).map(|(i, w)| (i, w / total)).collect())
}

/// The candidates of nucleus sampling and their renormalised probabilities, most likely first:
/// the [`top_k_distribution`] cut after the shortest prefix whose probability reaches `p`.
///
/// ```
/// use llm_from_scratch::model::top_p_distribution;
/// // probabilities [0.5, 0.3, 0.2]: p = 0.7 keeps the first two (0.5 < 0.7 ≤ 0.8), renormalised
/// let logits = [0.5f64.ln(), 0.3f64.ln(), 0.2f64.ln()];
/// let d = top_p_distribution(&logits, 1.0, usize::MAX, 0.7)?;
/// assert_eq!(d.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 1]);
/// assert!((d[0].1 - 0.625).abs() < 1e-12 && (d[1].1 - 0.375).abs() < 1e-12);
/// # Ok::<(), llm_from_scratch::model::ModelError>(())
/// ```
///
/// # Errors
/// As [`top_k_distribution`]; [`ModelError::InvalidSetting`] for `p` outside `(0, 1]`.
pub fn top_p_distribution(logits: &[f64], temperature: f64, k: usize, p: f64) -> Result<Vec<(usize, f64)>, ModelError> {
    if !(p > 0.0 && p <= 1.0) {
        return Err(ModelError::setting("sampling", "p", p, "top-p needs 0 < p ≤ 1"));
    }
    let mut candidates = top_k_distribution(logits, temperature, k)?;
    let mut cumulative = 0.0;
    let mut keep = candidates.len();
    for (i, &(_, q)) in candidates.iter().enumerate() {
        cumulative += q;
        if cumulative >= p {
            keep = i + 1;
            break;
        }
    }
    candidates.truncate(keep);
    let total: f64 = candidates.iter().map(|c| c.1).sum();
    Ok(candidates.into_iter().map(|(i, q)| (i, q / total)).collect())
}

fn check_logits(logits: &[f64]) -> Result<(), ModelError> {
    if logits.is_empty() {
        return Err(ModelError::setting("sampling", "logits", "[]", "needs at least one token"));
    }
    match logits.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        Some((index, &value)) => Err(ModelError::NonFiniteLogit { index, value }),
        None => Ok(()),
    }
}

impl Sampling {
    /// Checks the settings without drawing anything.
    ///
    /// # Errors
    /// [`ModelError::InvalidSetting`] for `τ` not finite and positive, `k = 0` or `p ∉ (0, 1]`.
    pub fn validate(&self) -> Result<(), ModelError> {
        match *self {
            Sampling::Greedy => Ok(()),
            Sampling::TopK { temperature, k } => top_k_distribution(&[0.0], temperature, k).map(|_| ()),
            Sampling::TopP { temperature, k, p } => top_p_distribution(&[0.0], temperature, k, p).map(|_| ()),
        }
    }

    /// The candidates this rule samples from and their probabilities, most likely first (greedy:
    /// the argmax with probability 1).
    ///
    /// # Errors
    /// As [`top_k_distribution`] and [`top_p_distribution`].
    pub fn distribution(&self, logits: &[f64]) -> Result<Vec<(usize, f64)>, ModelError> {
        match *self {
            Sampling::Greedy => {
                check_logits(logits)?;
                Ok(vec![(argmax(logits).unwrap_or(0), 1.0)])
            }
            Sampling::TopK { temperature, k } => top_k_distribution(logits, temperature, k),
            Sampling::TopP { temperature, k, p } => top_p_distribution(logits, temperature, k, p),
        }
    }

    /// The next token for a row of logits.
    ///
    /// # Errors
    /// As [`top_k_distribution`] (greedy checks only the logits).
    pub fn choose(&self, logits: &[f64], rng: &mut SplitMix64) -> Result<usize, ModelError> {
        match *self {
            Sampling::Greedy => {
                check_logits(logits)?;
                Ok(argmax(logits).unwrap_or(0))
            }
            Sampling::TopK { .. } | Sampling::TopP { .. } => {
                let candidates = self.distribution(logits)?;
                let u = rng.next_f64();
                let mut cumulative = 0.0;
                for &(token, p) in &candidates {
                    cumulative += p;
                    if u < cumulative {
                        return Ok(token);
                    }
                }
                // u rounds past the last cumulative sum (≈ 1 − 1e-16): the last candidate
                Ok(candidates.last().map_or(0, |c| c.0))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_and_errors() {
        let mut rng = SplitMix64::new(0);
        assert_eq!(Sampling::Greedy.choose(&[0.1, 0.7, 0.7, -1.0], &mut rng).unwrap(), 1);
        assert_eq!(rng, SplitMix64::new(0), "greedy draws nothing");
        let err = Sampling::Greedy.choose(&[0.0, f64::NAN], &mut rng).unwrap_err();
        assert_eq!(err.to_string(), "sampling: logit NaN at index 1 is not finite");
        let bad = Sampling::TopK { temperature: 0.0, k: 2 };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "sampling: temperature = 0 is invalid (must be finite and positive)"
        );
        assert!(Sampling::TopK { temperature: 1.0, k: 0 }.validate().is_err());
        assert!(Sampling::Greedy.choose(&[], &mut rng).is_err());
    }

    #[test]
    fn top_k_never_leaves_the_candidates_and_follows_the_probabilities() {
        // logits [2, 1, 0, −1], k = 2, τ = 1: only tokens 0 and 1, with p₀ = e/(e+1) ≈ 0.731
        let sampling = Sampling::TopK { temperature: 1.0, k: 2 };
        let mut rng = SplitMix64::new(7);
        let draws: Vec<usize> = (0..4000).map(|_| sampling.choose(&[2.0, 1.0, 0.0, -1.0], &mut rng).unwrap()).collect();
        assert!(draws.iter().all(|&t| t < 2));
        let share = draws.iter().filter(|&&t| t == 0).count() as f64 / 4000.0;
        let expected = 1f64.exp() / (1f64.exp() + 1.0);
        assert!((share - expected).abs() < 0.03, "{share} vs {expected}");
        // k = 1 is greedy; a low temperature concentrates on the maximum
        let mut rng = SplitMix64::new(8);
        assert!(
            (0..100).all(|_| Sampling::TopK { temperature: 5.0, k: 1 }.choose(&[0.0, 1.0], &mut rng).unwrap() == 1)
        );
        let cold = top_k_distribution(&[1.0, 0.0], 0.01, 2).unwrap();
        assert!(cold[0].1 == 1.0 && cold[1].1 < 1e-40, "{cold:?}");
        assert_eq!(top_k_distribution(&[0.0, 0.0, 0.0], 1.0, 10).unwrap().len(), 3);
    }

    #[test]
    fn top_p_keeps_the_nucleus_and_follows_its_probabilities() {
        // probabilities ∝ [4, 3, 2, 1]/10: p = 0.6 keeps tokens 0 and 1 (0.4 < 0.6 ≤ 0.7)
        let logits: Vec<f64> = [4.0f64, 3.0, 2.0, 1.0].iter().map(|w| w.ln()).collect();
        let sampling = Sampling::TopP { temperature: 1.0, k: usize::MAX, p: 0.6 };
        let mut rng = SplitMix64::new(11);
        let draws: Vec<usize> = (0..4000).map(|_| sampling.choose(&logits, &mut rng).unwrap()).collect();
        assert!(draws.iter().all(|&t| t < 2));
        let share = draws.iter().filter(|&&t| t == 0).count() as f64 / 4000.0;
        assert!((share - 4.0 / 7.0).abs() < 0.03, "{share}");
        // a tiny p is greedy; p = 1 keeps everything; k still caps the candidates
        assert_eq!(top_p_distribution(&logits, 1.0, usize::MAX, 1e-9).unwrap(), [(0, 1.0)]);
        assert_eq!(top_p_distribution(&logits, 1.0, usize::MAX, 1.0).unwrap().len(), 4);
        assert_eq!(top_p_distribution(&logits, 1.0, 3, 1.0).unwrap().len(), 3);
        assert_eq!(
            Sampling::TopP { temperature: 1.0, k: 2, p: 1.0 }.distribution(&logits).unwrap(),
            Sampling::TopK { temperature: 1.0, k: 2 }.distribution(&logits).unwrap()
        );
        assert_eq!(Sampling::Greedy.distribution(&logits).unwrap(), [(0, 1.0)]);
        assert_eq!(sampling.to_string(), "top_p(p:0.6,temperature:1)");
        assert_eq!(Sampling::TopP { temperature: 0.5, k: 3, p: 0.9 }.to_string(), "top_p(p:0.9,k:3,temperature:0.5)");
        for p in [0.0, -0.5, 1.5, f64::NAN] {
            let err = Sampling::TopP { temperature: 1.0, k: 5, p }.validate().unwrap_err();
            assert!(matches!(err, ModelError::InvalidSetting { setting: "p", .. }), "{p}: {err}");
        }
        assert!(Sampling::TopP { temperature: -1.0, k: 5, p: 0.5 }.validate().is_err());
    }
}
