//! The tokenizer a GGUF file carries: read into a `BpeTokenizer` when it is byte-level BPE with
//! SmolLM's pre-tokenizer, a named error otherwise. The files are written here, metadata only.

use llm_from_scratch::gguf::{Gguf, GgufError, gguf_tokenizer};

/// One metadata value of the little writer below.
enum Value<'a> {
    Text(&'a str),
    Texts(&'a [&'a str]),
    Ints(&'a [i32]),
}

/// A GGUF version 3 file with these metadata pairs and no tensors.
fn gguf(pairs: &[(&str, Value)]) -> Vec<u8> {
    fn text(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes()); // tensors
    out.extend((pairs.len() as u64).to_le_bytes());
    for (key, value) in pairs {
        text(&mut out, key);
        match value {
            Value::Text(s) => {
                out.extend(8u32.to_le_bytes());
                text(&mut out, s);
            }
            Value::Texts(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                items.iter().for_each(|s| text(&mut out, s));
            }
            Value::Ints(items) => {
                out.extend(9u32.to_le_bytes());
                out.extend(5u32.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                items.iter().for_each(|i| out.extend(i.to_le_bytes()));
            }
        }
    }
    out
}

/// A tokenizer of four tokens: `a`, `b`, their merge `ab`, and the control token `<|im_start|>`.
fn file(model: &str, pre: &str, merges: &[&str]) -> Vec<u8> {
    gguf(&[
        ("tokenizer.ggml.model", Value::Text(model)),
        ("tokenizer.ggml.pre", Value::Text(pre)),
        ("tokenizer.ggml.tokens", Value::Texts(&["a", "b", "ab", "<|im_start|>"])),
        ("tokenizer.ggml.merges", Value::Texts(merges)),
        ("tokenizer.ggml.token_type", Value::Ints(&[1, 1, 1, 3])),
    ])
}

#[test]
fn a_byte_level_bpe_with_smollms_pre_tokenizer_is_read() {
    let bytes = file("gpt2", "smollm", &["a b"]);
    let tokenizer = gguf_tokenizer(&Gguf::parse(&bytes).unwrap()).unwrap();
    assert_eq!(tokenizer.vocab_size(), 4);
    assert_eq!(tokenizer.encode("ab"), [2]);
    assert_eq!(tokenizer.encode("<|im_start|>ba"), [3, 1, 0]);
}

#[test]
fn another_tokenizer_or_a_broken_vocabulary_is_a_named_error() {
    let error = |bytes: Vec<u8>| gguf_tokenizer(&Gguf::parse(&bytes).unwrap()).unwrap_err();
    let sentencepiece = error(file("llama", "default", &["a b"]));
    assert!(
        matches!(&sentencepiece, GgufError::UnsupportedTokenizer { key: "tokenizer.ggml.model", found, .. } if found == "llama")
    );
    assert_eq!(
        sentencepiece.to_string(),
        "gguf tokenizer: tokenizer.ggml.model = \"llama\" is not supported (only \"gpt2\" (byte-level BPE))"
    );
    let pre = error(file("gpt2", "llama-bpe", &["a b"]));
    assert!(
        matches!(&pre, GgufError::UnsupportedTokenizer { key: "tokenizer.ggml.pre", found, .. } if found == "llama-bpe")
    );
    let merge = error(file("gpt2", "smollm", &["a c"]));
    assert!(matches!(merge, GgufError::Tokenizer(_)), "{merge}");
    assert!(merge.to_string().starts_with("gguf tokenizer: "), "{merge}");
    let missing = error(gguf(&[("tokenizer.ggml.model", Value::Text("gpt2"))]));
    assert!(missing.to_string().contains("tokenizer.ggml.pre is missing"), "{missing}");
}
