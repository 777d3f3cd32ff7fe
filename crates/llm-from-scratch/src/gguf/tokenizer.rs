//! The tokenizer a GGUF file carries, as a [`BpeTokenizer`].
//!
//! A LLaMA-family GGUF keeps its tokenizer in the metadata: `tokenizer.ggml.model` names the
//! kind (`gpt2` for byte-level BPE), `tokenizer.ggml.pre` the pre-tokenizer, and three arrays hold
//! the vocabulary (`tokens`, id order), the merges by rank (`merges`, `"a b"`) and each token's
//! type (`token_type`: 3 control, 4 user-defined are matched whole). [`crate::bpe`] implements the
//! byte-level BPE with SmolLM's pre-tokenizer (digits one by one, then GPT-2's split), so other
//! pre-tokenizers, whose splits differ, are refused rather than tokenized a little wrong.

use crate::bpe::{BpeTokenizer, special_ids_from_token_types};
use crate::gguf::{Gguf, GgufError};

/// The `tokenizer.ggml.pre` values whose split [`crate::bpe`] implements.
pub const SUPPORTED_PRE_TOKENIZERS: &str = "\"smollm\"";

/// The byte-level BPE tokenizer of `file`.
///
/// ```
/// use llm_from_scratch::gguf::{Gguf, gguf_tokenizer};
/// // the tiny test file carries no tokenizer: a named error, not a guess
/// let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf/tiny-llama-tied.gguf"))?;
/// let error = gguf_tokenizer(&Gguf::parse(&bytes)?).unwrap_err();
/// assert!(error.to_string().contains("tokenizer.ggml"), "{error}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`GgufError::UnsupportedTokenizer`] for another model or pre-tokenizer; the metadata errors of
/// a missing or mistyped key; [`GgufError::Tokenizer`] when the vocabulary and merges do not make
/// a tokenizer (duplicate tokens, a merge of unknown tokens, …).
pub fn gguf_tokenizer(file: &Gguf<'_>) -> Result<BpeTokenizer, GgufError> {
    let metadata = file.metadata();
    let model = metadata.string("tokenizer.ggml.model")?;
    if model != "gpt2" {
        let supported = "\"gpt2\" (byte-level BPE)";
        return Err(GgufError::UnsupportedTokenizer { key: "tokenizer.ggml.model", found: model.into(), supported });
    }
    let pre = metadata.string("tokenizer.ggml.pre")?;
    if pre != "smollm" {
        let (key, supported) = ("tokenizer.ggml.pre", SUPPORTED_PRE_TOKENIZERS);
        return Err(GgufError::UnsupportedTokenizer { key, found: pre.into(), supported });
    }
    let tokens: Vec<String> = metadata.string_array("tokenizer.ggml.tokens")?.iter().map(|t| t.to_string()).collect();
    let merges: Vec<String> = metadata.string_array("tokenizer.ggml.merges")?.iter().map(|m| m.to_string()).collect();
    let special = special_ids_from_token_types(metadata.i32_array("tokenizer.ggml.token_type")?)?;
    Ok(BpeTokenizer::new(tokens, &merges, &special)?)
}
