//! The BPE tokenizer fed anything: random vocabularies (empty, repeated, unspellable tokens), random
//! merges (malformed, naming missing tokens, repeated), random special ids, random text and bytes,
//! random ids to decode. Each call ends in `Ok` or a typed error, never a panic. And with a
//! vocabulary built to be consistent, any bytes, UTF-8 or not, special tokens in them or not,
//! encode and decode back to themselves, at once or streamed.

use llm_from_scratch::bpe::{BpeTokenizer, StreamDecoder, byte_to_char};
use proptest::prelude::*;

/// Short strings over a few characters that matter: byte-alphabet letters, `Ġ` (a space), a real
/// space (not in the alphabet), `<`, `>` (to make special-looking tokens) and `é`.
fn spelling() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!['a', 'b', 'Ġ', ' ', '<', '>', 'é', 'Ã', '©']), 0..4)
        .prop_map(|chars| chars.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_vocabulary_is_accepted_or_refused_and_then_works(
        tokens in prop::collection::vec(spelling(), 0..12),
        merges in prop::collection::vec(spelling(), 0..8),
        special in prop::collection::vec(0usize..14, 0..3),
        text in "[ab <>é!\\u{4}]{0,16}",
        bytes in prop::collection::vec(any::<u8>(), 0..16),
        ids in prop::collection::vec(0usize..16, 0..8),
    ) {
        let Ok(tokenizer) = BpeTokenizer::new(tokens, &merges, &special) else { return Ok(()) };
        let vocab_size = tokenizer.vocab_size();
        for encoded in [tokenizer.encode(&text), tokenizer.encode_bytes(&bytes)] {
            prop_assert!(encoded.iter().all(|&id| id < vocab_size));
            tokenizer.decode(&encoded).unwrap();
        }
        // any ids: decoded, or refused as unknown
        let _ = tokenizer.decode(&ids);
        let mut stream = StreamDecoder::new(&tokenizer);
        for &id in &ids {
            prop_assert_eq!(stream.push(id).is_ok(), id < vocab_size);
        }
        let _ = stream.finish();
    }

    #[test]
    fn a_consistent_vocabulary_gives_any_bytes_back(
        pairs in prop::collection::vec((0usize..64, 0usize..64), 0..16),
        specials in prop::collection::vec("<[ab]{0,2}>", 0..3),
        text in "[ab<> é]{0,24}",
        noise in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        let tokenizer = consistent_vocabulary(&pairs, &specials);
        prop_assert_eq!(tokenizer.encode_bytes(text.as_bytes()), tokenizer.encode(&text));
        let mut bytes = text.into_bytes();
        bytes.extend(noise);
        let ids = tokenizer.encode_bytes(&bytes);
        prop_assert_eq!(tokenizer.decode_bytes(&ids).unwrap(), bytes.clone());
        let mut stream = StreamDecoder::new(&tokenizer);
        let mut printed: String = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
        printed.push_str(&stream.finish());
        prop_assert_eq!(printed, String::from_utf8_lossy(&bytes));
    }
}

/// Every byte as a token, then a merge for each pair (of a few bytes that matter and the tokens the
/// merges made so far), then the special tokens: a vocabulary that must be accepted.
fn consistent_vocabulary(pairs: &[(usize, usize)], specials: &[String]) -> BpeTokenizer {
    let mut tokens: Vec<String> = (0..=255u8).map(|byte| byte_to_char(byte).to_string()).collect();
    let mut pickable: Vec<usize> = b"ab<> ".iter().chain(&[0xC3, 0xA9]).map(|&byte| usize::from(byte)).collect();
    let mut merges: Vec<String> = Vec::new();
    for &(left, right) in pairs {
        let (left, right) = (pickable[left % pickable.len()], pickable[right % pickable.len()]);
        let merge = format!("{} {}", tokens[left], tokens[right]);
        if merges.contains(&merge) {
            continue;
        }
        let merged = format!("{}{}", tokens[left], tokens[right]);
        if !tokens.contains(&merged) {
            tokens.push(merged);
            pickable.push(tokens.len() - 1);
        }
        merges.push(merge);
    }
    let mut special = Vec::new();
    for spelling in specials {
        if !tokens.contains(spelling) {
            tokens.push(spelling.clone());
            special.push(tokens.len() - 1);
        }
    }
    BpeTokenizer::new(tokens, &merges, &special).expect("a consistent vocabulary")
}

#[test]
fn the_strategies_do_build_tokenizers() {
    // a vocabulary the first property can draw, accepted: that property is not only about refusals
    let tokens = ["a", "b", "ab", "Ġ", "<ab>"].map(String::from).to_vec();
    let tokenizer = BpeTokenizer::new(tokens, &["a b".to_string()], &[4]).unwrap();
    // "ab " is the pieces "ab" (merged) and " "; then the special token whole; then "ab"
    assert_eq!(tokenizer.encode("ab <ab>ab"), [2, 3, 4, 2]);
}
