//! The BPE tokenizer against Hugging Face's, token for token, with SmolLM2-135M-Instruct's real
//! vocabulary (49,152 tokens, 48,900 merges) on the varied texts of `fixtures/bpe/corpus.json`
//! (prose, accents, CJK, Devanagari, emoji, code, runs of spaces and newlines, tabs, digits,
//! contractions, special tokens inside text, the empty string), written once by
//! `scripts/make_bpe_fixtures.py`.
//!
//! The vocabulary is not in the repository: it lives in the model file. [`smollm_vocabulary`] is
//! the one place that fetches it. For now it reads the JSON export that the script writes with
//! `--export-vocab` (path in `LLM_BPE_VOCAB`); without it, each test says so in one line on
//! standard error and passes.
//!
//! ```text
//! python3 scripts/make_bpe_fixtures.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --export-vocab /tmp/smollm2-vocab.json
//! LLM_BPE_VOCAB=/tmp/smollm2-vocab.json cargo test -p llm-from-scratch --test bpe_corpus -- --nocapture
//! ```

use std::time::Instant;

use llm_from_scratch::bpe::{BpeTokenizer, StreamDecoder, special_ids_from_token_types};
use serde_json::Value;

const CORPUS: &str = include_str!("fixtures/bpe/corpus.json");

/// SmolLM2-135M-Instruct's tokens, merges and GGUF token types, or `None` (with one line on
/// standard error naming `test`) when they are not available.
///
/// The only function to change when the vocabulary comes from the GGUF file itself
/// (`tokenizer.ggml.tokens`, `tokenizer.ggml.merges`, `tokenizer.ggml.token_type`).
fn smollm_vocabulary(test: &str) -> Option<(Vec<String>, Vec<String>, Vec<i32>)> {
    let Some(path) = std::env::var_os("LLM_BPE_VOCAB") else {
        eprintln!(
            "{test}: skipped, needs SmolLM2's vocabulary: LLM_BPE_VOCAB=<export of scripts/make_bpe_fixtures.py --export-vocab>"
        );
        return None;
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("LLM_BPE_VOCAB={path:?}: {error}"));
    let export: Value = serde_json::from_str(&text).expect("LLM_BPE_VOCAB is not JSON");
    let strings = |key: &str| -> Vec<String> {
        export[key].as_array().expect(key).iter().map(|item| item.as_str().expect(key).to_string()).collect()
    };
    let token_types = export["token_types"]
        .as_array()
        .expect("token_types")
        .iter()
        .map(|item| item.as_i64().and_then(|value| i32::try_from(value).ok()).expect("token_types"))
        .collect();
    Some((strings("tokens"), strings("merges"), token_types))
}

fn smollm_tokenizer(test: &str) -> Option<BpeTokenizer> {
    let (tokens, merges, token_types) = smollm_vocabulary(test)?;
    let special = special_ids_from_token_types(&token_types).expect("token types");
    Some(BpeTokenizer::new(tokens, &merges, &special).expect("SmolLM2's vocabulary"))
}

/// `(text, ids, decoded)` of every case in the fixture.
fn corpus() -> Vec<(String, Vec<usize>, String)> {
    let fixture: Value = serde_json::from_str(CORPUS).expect("corpus.json");
    let field = |case: &Value, key: &str| case[key].as_str().expect(key).to_string();
    fixture["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|case| {
            let ids = case["ids"].as_array().expect("ids").iter();
            let ids = ids.map(|id| usize::try_from(id.as_u64().expect("id")).expect("id")).collect();
            (field(case, "text"), ids, field(case, "decoded"))
        })
        .collect()
}

#[test]
fn the_vocabulary_is_smollm2s() {
    let Some(tokenizer) = smollm_tokenizer("the_vocabulary_is_smollm2s") else { return };
    assert_eq!(tokenizer.vocab_size(), 49_152);
    // ids 0..=16 are the control tokens; <|im_start|> and <|im_end|> are 1 and 2
    assert!((0..17).all(|id| tokenizer.is_special(id)) && !tokenizer.is_special(17));
    assert_eq!(tokenizer.id_of("<|im_start|>"), Some(1));
    assert_eq!(tokenizer.id_of("<|im_end|>"), Some(2));
    // the first merge is "Ġ t", its token ` t`
    assert_eq!(tokenizer.token_bytes(tokenizer.id_of("Ġt").unwrap()).unwrap(), b" t");
    // 21 byte values have no token: six control characters, 0xC0, 0xC1, 0xF1, 0xF2 and 0xF5..=0xFF
    let mut missing = vec![0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2];
    missing.extend(0xF5..=0xFF);
    assert_eq!(tokenizer.missing_bytes(), missing);
}

#[test]
fn every_corpus_text_matches_hugging_face() {
    let Some(tokenizer) = smollm_tokenizer("every_corpus_text_matches_hugging_face") else { return };
    let cases = corpus();
    let mut failures = Vec::new();
    let mut tokens = 0;
    for (text, expected, decoded) in &cases {
        tokens += expected.len();
        let ids = tokenizer.encode(text);
        if &ids != expected {
            failures.push(format!("{text:?}\n  ours    {ids:?}\n  theirs  {expected:?}"));
        }
        let ours = tokenizer.decode(expected).expect("decode");
        if &ours != decoded {
            failures.push(format!("decode of {expected:?}\n  ours    {ours:?}\n  theirs  {decoded:?}"));
        }
        // generated one id at a time, the same text
        let mut stream = StreamDecoder::new(&tokenizer);
        let mut printed: String = expected.iter().map(|&id| stream.push(id).expect("stream")).collect();
        printed.push_str(&stream.finish());
        assert_eq!(&printed, decoded, "stream decode of {text:?}");
    }
    eprintln!("bpe corpus: {} texts, {tokens} tokens, {} mismatches", cases.len(), failures.len());
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn fifty_kilobytes_encode_quickly() {
    let Some(tokenizer) = smollm_tokenizer("fifty_kilobytes_encode_quickly") else { return };
    // the corpus, repeated to about 50 KB: every kind of text in the same proportions
    let one_pass: String = corpus().into_iter().map(|(text, _, _)| text + "\n").collect();
    let text = one_pass.repeat(50_000 / one_pass.len() + 1);
    let start = Instant::now();
    let ids = tokenizer.encode(&text);
    let elapsed = start.elapsed();
    eprintln!(
        "bpe encode: {} bytes into {} tokens in {:.1} ms ({:.1} MB/s)",
        text.len(),
        ids.len(),
        elapsed.as_secs_f64() * 1e3,
        text.len() as f64 / elapsed.as_secs_f64() / 1e6
    );
    // it still decodes to the text, but for the bytes the vocabulary lacks (U+0004, U+001D)
    let missing = tokenizer.missing_bytes();
    let kept: String = text.chars().filter(|&c| !(c.is_ascii() && missing.contains(&(c as u8)))).collect();
    assert_eq!(tokenizer.decode(&ids).expect("decode"), kept);
    // a very long piece (one line of CJK, no spaces) is merged in about linear time
    let long_piece = "你好世界".repeat(4_000);
    let start = Instant::now();
    let ids = tokenizer.encode(&long_piece);
    eprintln!("bpe encode: one piece of {} bytes in {:.1} ms", long_piece.len(), start.elapsed().as_secs_f64() * 1e3);
    assert_eq!(tokenizer.decode(&ids).expect("decode"), long_piece);
}
