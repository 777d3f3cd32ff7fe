//! The two-hop circuit the figure draws: how much of each head's weight lands on the cells each
//! query must copy, and the same for every pair of heads, layer 1 after layer 0 — the product of
//! their attention maps, which follows the weight through both hops.
//!
//! A head of layer 1 does not read the embedding of a token: it reads the residual stream at a
//! position, which layer 0 has already filled with what that position's heads fetched. If a
//! layer-1 query gives weight `a` to position `p`, and a layer-0 head at `p` gave weight `b` to
//! key `k`, then `a · b` of what reached the query came from `k`; summed over `p`, that is the
//! product of the two maps.

use crate::{LENGTH, SEPARATOR, TrainingFigure};

/// A token as the maps label it: its symbol, `|` for the separator.
pub fn token_label(token: usize) -> String {
    if token == SEPARATOR { "|".to_string() } else { token.to_string() }
}

/// `(query, key)` of the cells to copy in a sequence of `n` tokens: query `q` of the reversed
/// half (from the separator on) writes the symbol at position `2L − 1 − q`.
pub fn copy_targets(n: usize) -> Vec<(usize, usize)> {
    (LENGTH..(2 * LENGTH).min(n)).map(|q| (q, 2 * LENGTH - 1 - q)).collect()
}

/// The mean weight of an `n × n` map on the [`copy_targets`].
pub fn on_targets(map: &[f64], n: usize) -> f64 {
    let targets = copy_targets(n);
    targets.iter().map(|&(q, k)| map.get(q * n + k).copied().unwrap_or(0.0)).sum::<f64>() / targets.len().max(1) as f64
}

/// `a · b` of two `n × n` row-major maps.
pub fn compose(a: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * n];
    for i in 0..n {
        for k in 0..n {
            let weight = a.get(i * n + k).copied().unwrap_or(0.0);
            for j in 0..n {
                out[i * n + j] += weight * b.get(k * n + j).copied().unwrap_or(0.0);
            }
        }
    }
    out
}

/// What the figure reads off the trained model's attention.
#[derive(Clone, Debug, PartialEq)]
pub struct Circuit {
    /// Tokens of the sequence (`T`).
    pub n: usize,
    /// Per layer, per head: the head's `T × T` map.
    pub heads: Vec<Vec<Vec<f64>>>,
    /// Per layer, per head: [`on_targets`] of its map.
    pub single: Vec<Vec<f64>>,
    /// `[layer-1 head][layer-0 head]`: [`on_targets`] of the two maps composed.
    pub pairs: Vec<Vec<f64>>,
    /// `(layer-1 head, layer-0 head)` of the best pair (the first of equals).
    pub best: (usize, usize),
    /// The best pair's composed map.
    pub composed: Vec<f64>,
}

impl Circuit {
    /// Reads the maps of the first two layers of `figure` (the model has two).
    pub fn of(figure: &TrainingFigure) -> Self {
        let n = figure.attention_tokens.len();
        let heads: Vec<Vec<Vec<f64>>> = figure
            .attention_maps
            .iter()
            .map(|map| {
                let count = map.shape().get(1).copied().unwrap_or(0);
                map.as_slice().chunks(n * n).take(count).map(<[f64]>::to_vec).collect()
            })
            .collect();
        let single = heads.iter().map(|layer| layer.iter().map(|m| on_targets(m, n)).collect()).collect();
        let (empty, none) = (Vec::new(), Vec::new());
        let (first, second) = (heads.first().unwrap_or(&empty), heads.get(1).unwrap_or(&none));
        let pairs: Vec<Vec<f64>> = second
            .iter()
            .map(|late| first.iter().map(|early| on_targets(&compose(late, early, n), n)).collect())
            .collect();
        let mut best = (0, 0);
        for (h1, row) in pairs.iter().enumerate() {
            for (h0, &value) in row.iter().enumerate() {
                if value > pairs[best.0][best.1] {
                    best = (h1, h0);
                }
            }
        }
        let composed = match (second.get(best.0), first.get(best.1)) {
            (Some(late), Some(early)) => compose(late, early, n),
            _ => vec![0.0; n * n],
        };
        Circuit { n, heads, single, pairs, best, composed }
    }

    /// The largest [`on_targets`] of any single head.
    pub fn best_single(&self) -> f64 {
        self.single.iter().flatten().copied().fold(0.0, f64::max)
    }

    /// [`on_targets`] of the best pair.
    pub fn best_pair(&self) -> f64 {
        self.pairs.get(self.best.0).and_then(|row| row.get(self.best.1)).copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composing_follows_the_weight_through_both_hops() {
        // 2 tokens: the late map reads position 1, the early map at 1 reads position 0
        let late = [1.0, 0.0, 0.0, 1.0];
        let early = [1.0, 0.0, 1.0, 0.0];
        assert_eq!(compose(&late, &early, 2), vec![1.0, 0.0, 1.0, 0.0]);
        assert_eq!(copy_targets(2 * LENGTH + 1).first(), Some(&(LENGTH, LENGTH - 1)));
        assert_eq!(copy_targets(2 * LENGTH + 1).last(), Some(&(2 * LENGTH - 1, 0)));
    }
}
