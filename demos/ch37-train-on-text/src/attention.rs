//! Where the trained model looks when it reads a phrase of the book: every head's attention
//! weights over [`PHRASE`], for the figure.

use llm_from_scratch::attention::AttentionPath;
use llm_from_scratch::model::{CharTokenizer, Decoder};

use crate::{CORPUS, DemoResult};

/// The phrase the figure draws attention on: the words lorem ipsum was cut from (book I, § 32).
pub const PHRASE: &str = "dolorem ipsum, quia dolor sit";

/// Every head's attention over a phrase.
#[derive(Clone, Debug, PartialEq)]
pub struct PhraseAttention {
    /// The phrase, one token per character.
    pub phrase: Vec<char>,
    /// Per layer, the weights `[H, T, T]` row-major (`T` = the phrase's characters).
    pub layers: Vec<Vec<f64>>,
}

impl PhraseAttention {
    /// The `T × T` map of head `head` of layer `layer` (`None` if there is no such head).
    pub fn head(&self, layer: usize, head: usize) -> Option<&[f64]> {
        let t = self.phrase.len();
        self.layers.get(layer)?.get(head * t * t..(head + 1) * t * t)
    }

    /// Heads per layer.
    pub fn heads(&self) -> usize {
        let t = self.phrase.len().max(1);
        self.layers.first().map_or(0, |w| w.len() / (t * t))
    }

    /// `(query, key)` pairs: each character after the first and the one before it.
    pub fn previous_characters(&self) -> Vec<(usize, usize)> {
        (1..self.phrase.len()).map(|q| (q, q - 1)).collect()
    }

    /// `(query, key)` pairs: each character of a word after the first and the space before that
    /// word (where the word began).
    pub fn word_starts(&self) -> Vec<(usize, usize)> {
        let mut start = None;
        let mut pairs = Vec::new();
        for (q, &c) in self.phrase.iter().enumerate() {
            if c == ' ' {
                start = Some(q);
            } else if let Some(k) = start.filter(|&k| k + 1 < q) {
                pairs.push((q, k));
            }
        }
        pairs
    }

    /// The mean weight head `(layer, head)` gives the keys of `pairs` (0 without such a head).
    pub fn share(&self, (layer, head): (usize, usize), pairs: &[(usize, usize)]) -> f64 {
        let t = self.phrase.len();
        let Some(map) = self.head(layer, head) else { return 0.0 };
        pairs.iter().map(|&(q, k)| map.get(q * t + k).copied().unwrap_or(0.0)).sum::<f64>() / pairs.len().max(1) as f64
    }

    /// The head, other than `except`, that gives the keys of `pairs` the most weight (the first
    /// of equals).
    pub fn most(&self, pairs: &[(usize, usize)], except: Option<(usize, usize)>) -> (usize, usize) {
        let heads = (0..self.layers.len()).flat_map(|l| (0..self.heads()).map(move |h| (l, h)));
        heads.filter(|&h| Some(h) != except).fold((0, 0), |best, h| {
            if Some(best) == except || self.share(h, pairs) > self.share(best, pairs) { h } else { best }
        })
    }
}

/// The attention of every head of `model` over [`PHRASE`]: the explicit kernel's weights on the
/// model's parameters (the tiled kernel it trains with never forms them).
///
/// # Errors
/// The phrase is not in the book, or has a character the tokenizer does not know; library errors.
pub fn phrase_attention(model: &Decoder, tokenizer: &CharTokenizer) -> DemoResult<PhraseAttention> {
    if !CORPUS.contains(PHRASE) {
        return Err(format!("{PHRASE:?} is not in the book").into());
    }
    let ids = tokenizer.encode(PHRASE)?;
    // the model trains on the tiled kernel, which never forms the weights: the explicit kernel
    // on the same parameters computes them (the same attention to 1e-12)
    let explicit = model.with_attention_path(AttentionPath::Explicit)?;
    let trace = explicit.forward_traced(&ids, [1, ids.len()])?;
    let mut layers = Vec::with_capacity(trace.attention.len());
    for layer in &trace.attention {
        let weights = layer.weights.as_ref().ok_or("the explicit kernel keeps its weights")?;
        layers.push(weights.value()?.as_slice().to_vec());
    }
    Ok(PhraseAttention { phrase: PHRASE.chars().collect(), layers })
}
