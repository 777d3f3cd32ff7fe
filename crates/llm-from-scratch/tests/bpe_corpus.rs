//! The BPE tokenizer against Hugging Face's, token for token, with SmolLM2-135M-Instruct's real
//! vocabulary (49,152 tokens, 48,900 merges) on the varied texts of `fixtures/bpe/corpus.json`
//! (prose, accents, CJK, Devanagari, emoji, code, runs of spaces and newlines, tabs, digits,
//! contractions, special tokens inside text, the empty string; then 40 random texts drawn from
//! many scripts), written once by `scripts/make_bpe_fixtures.py`.
//!
//! The vocabulary is not in the repository: it lives in the model file, which
//! `scripts/fetch-model` downloads ([`smollm_tokenizer`] reads it with the GGUF reader); without
//! it, each test says so in one line on standard error and passes. The last test checks the
//! pre-tokenizer on every code point against a file the script writes with
//! `--export-code-points` (path in `LLM_BPE_CODE_POINTS`).
//!
//! ```text
//! python3 scripts/make_bpe_fixtures.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf \
//!     --export-code-points /tmp/smollm2-code-points.bin
//! LLM_BPE_CODE_POINTS=/tmp/smollm2-code-points.bin cargo test -p llm-from-scratch --test bpe_corpus
//! ```

use std::io::Write;
use std::time::Instant;

use llm_from_scratch::bpe::{BpeTokenizer, StreamDecoder, pre_tokenize};
use llm_from_scratch::gguf::{Gguf, gguf_tokenizer, model_path_from_env};
use serde_json::Value;

const CORPUS: &str = include_str!("fixtures/bpe/corpus.json");

/// Says on standard error, in one line, that `test` passes without checking anything because it
/// needs `what`. Written to the stream itself, not with `eprintln!`, which the test harness would
/// swallow for a passing test.
fn skipped(test: &str, what: &str) {
    let _ = writeln!(std::io::stderr(), "bpe_corpus::{test}: skipped, needs {what}");
}

/// SmolLM2-135M-Instruct's tokenizer, read from its GGUF file (`LLM_MODEL`, else the file
/// `scripts/fetch-model` puts in its cache), or `None` (with one line on standard error naming
/// `test`) when there is no model file.
fn smollm_tokenizer(test: &str) -> Option<BpeTokenizer> {
    let Some(path) = model_path_from_env() else {
        skipped(test, "the model file (run scripts/fetch-model, then set LLM_MODEL=<path>)");
        return None;
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    Some(gguf_tokenizer(&Gguf::parse(&bytes).expect("the model file")).expect("SmolLM2's tokenizer"))
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
fn the_fixture_reads_without_the_vocabulary() {
    let cases = corpus();
    assert!(cases.len() >= 50, "{} texts", cases.len());
    assert!(cases.iter().any(|(text, ids, _)| text.is_empty() && ids.is_empty()));
    // the pieces of every text join back to it, whatever the vocabulary
    assert!(cases.iter().all(|(text, _, _)| pre_tokenize(text).concat() == *text));
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
    // it still decodes to the text's bytes, but for those the vocabulary lacks (U+0004, U+001D, the
    // lead byte F1 of a character in plane 4, ...)
    let missing = tokenizer.missing_bytes();
    let kept: Vec<u8> = text.bytes().filter(|byte| !missing.contains(byte)).collect();
    assert_eq!(tokenizer.decode_bytes(&ids).expect("decode"), kept);
    // a very long piece (one line of CJK, no spaces) is merged in about linear time
    let long_piece = "你好世界".repeat(4_000);
    let start = Instant::now();
    let ids = tokenizer.encode(&long_piece);
    eprintln!("bpe encode: one piece of {} bytes in {:.1} ms", long_piece.len(), start.elapsed().as_secs_f64() * 1e3);
    assert_eq!(tokenizer.decode(&ids).expect("decode"), long_piece);
}

/// Every code point, cut as Hugging Face cuts it: the count of pieces of four probes around it
/// (`x?x`, `!?!`, `??`, ` ?`), which tells letter, number, whitespace and the rest apart; the file
/// is written by `scripts/make_bpe_fixtures.py --export-code-points` (one byte per probe).
#[test]
fn every_code_point_is_cut_as_hugging_face_cuts_it() {
    let Some(path) = std::env::var_os("LLM_BPE_CODE_POINTS") else {
        skipped(
            "every_code_point_is_cut_as_hugging_face_cuts_it",
            "LLM_BPE_CODE_POINTS=<file of scripts/make_bpe_fixtures.py --export-code-points>",
        );
        return;
    };
    let theirs = std::fs::read(&path).unwrap_or_else(|error| panic!("LLM_BPE_CODE_POINTS={path:?}: {error}"));
    let ours: Vec<u8> = (0..=0x10FFFF)
        .filter_map(char::from_u32)
        .flat_map(|c| [format!("x{c}x"), format!("!{c}!"), format!("{c}{c}"), format!(" {c}")])
        .map(|probe| u8::try_from(pre_tokenize(&probe).len()).expect("at most 4 pieces"))
        .collect();
    assert_eq!(ours.len(), theirs.len(), "one byte per probe, four probes per code point");
    let differ: Vec<String> = (0..ours.len() / 4)
        .filter(|&k| ours[4 * k..4 * k + 4] != theirs[4 * k..4 * k + 4])
        .map(|k| {
            let point = if k < 0xD800 { k } else { k + 0x800 }; // surrogates are skipped
            format!("U+{point:04X}: ours {:?} theirs {:?}", &ours[4 * k..4 * k + 4], &theirs[4 * k..4 * k + 4])
        })
        .collect();
    eprintln!("bpe code points: {} checked, {} cut differently", ours.len() / 4, differ.len());
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
