//! [`Evaluation`]: loss and accuracy of a model on a batch it is not trained on.
//!
//! Accuracy is measured with teacher forcing: every scored position sees the true tokens before it
//! and its prediction is the argmax of its logits. A sequence counts as correct when every one of
//! its scored positions is.

use crate::model::{Decoder, ModelError, TokenBatch, argmax, cross_entropy};

/// Loss and accuracy on one batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// Mean cross-entropy over the scored positions.
    pub loss: f64,
    /// Scored positions.
    pub scored: usize,
    /// Scored positions whose argmax is the target.
    pub correct: usize,
    /// Sequences (rows) with at least one scored position.
    pub sequences: usize,
    /// Of those, the sequences predicted entirely right.
    pub sequences_correct: usize,
}

impl Evaluation {
    /// `correct / scored`.
    pub fn token_accuracy(&self) -> f64 {
        self.correct as f64 / self.scored.max(1) as f64
    }

    /// `sequences_correct / sequences`.
    pub fn sequence_accuracy(&self) -> f64 {
        self.sequences_correct as f64 / self.sequences.max(1) as f64
    }
}

impl Decoder {
    /// Loss and teacher-forced accuracy on `batch`.
    ///
    /// # Errors
    /// The errors of [`Decoder::loss`].
    pub fn evaluate(&self, batch: &TokenBatch) -> Result<Evaluation, ModelError> {
        let logits = self.forward(batch.inputs(), batch.shape())?;
        self.check_targets(batch)?;
        let loss = cross_entropy(&logits, batch.targets())?.value()?.as_slice()[0];
        let logits = logits.value()?;
        let (vocab, tokens) = (self.config().vocab_size, batch.shape()[1]);
        let mut e = Evaluation { loss, scored: 0, correct: 0, sequences: 0, sequences_correct: 0 };
        // one row of logits per position, T positions per sequence
        let sequences = logits.as_slice().chunks(vocab * tokens.max(1)).zip(batch.targets().chunks(tokens.max(1)));
        for (rows, targets) in sequences {
            let hits: Vec<bool> =
                rows.chunks(vocab).zip(targets).filter_map(|(row, t)| t.map(|t| argmax(row) == Some(t))).collect();
            if hits.is_empty() {
                continue;
            }
            e.scored += hits.len();
            e.correct += hits.iter().filter(|&&hit| hit).count();
            e.sequences += 1;
            e.sequences_correct += usize::from(hits.iter().all(|&hit| hit));
        }
        Ok(e)
    }
}
