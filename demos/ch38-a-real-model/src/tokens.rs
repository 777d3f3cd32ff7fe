//! Tokens as a reader sees them, and the most likely ones.
//!
//! A byte-level BPE spells a space as `Ġ` and a newline as `Ċ` (GPT-2's byte alphabet keeps every
//! spelling printable). Here a token is written as the text it stands for, with a space shown as
//! `␣` and a newline as `↵` so that neither disappears; a special token by its name
//! (`<|im_start|>`); a token that is not whole UTF-8 (a piece of a character) by its spelling.

use llm_from_scratch::bpe::{BpeError, BpeTokenizer};

/// `id` as a reader sees it: `␣capital`, `↵`, `<|im_end|>`.
///
/// # Errors
/// [`BpeError::UnknownId`] for an id outside the vocabulary.
pub fn shown(tokenizer: &BpeTokenizer, id: usize) -> Result<String, BpeError> {
    if tokenizer.is_special(id) {
        return Ok(tokenizer.token_text(id)?.to_string());
    }
    Ok(match std::str::from_utf8(tokenizer.token_bytes(id)?) {
        Ok(text) => text.replace(' ', "␣").replace('\n', "↵"),
        Err(_) => tokenizer.token_text(id)?.to_string(),
    })
}

/// The ids of the `k` largest `logits`, largest first; equal logits in increasing id order.
///
/// ```
/// assert_eq!(ch38_a_real_model::tokens::top(&[0.5, 2.0, 0.5, -1.0], 3), [1, 0, 2]);
/// ```
pub fn top(logits: &[f64], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    order.truncate(k);
    order
}
