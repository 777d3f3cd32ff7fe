//! GGUF: dequantization bit for bit against the reference reader, the tiny fixtures read back and
//! give the reference logits in both orders of the W_Q/W_K rows, and every broken file is a typed
//! error naming what is wrong.
//!
//! The fixtures in `tests/fixtures/gguf/` were written by `scripts/make_gguf_fixtures.py` (blocks
//! and models, with the `gguf` Python package) and `scripts/reference_logits.py` (float64 logits
//! of an independent torch forward pass); these tests need no Python.

mod gguf_edit;

use gguf_edit::*;
use llm_from_scratch::gguf::{
    Gguf, GgufError, GgufRope, MetadataArray, MetadataValue, TensorType, dequantize_into, gguf_llama_from_bytes,
    load_gguf_llama,
};
use llm_from_scratch::model::Decoder;

fn json(name: &str) -> serde_json::Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn every_dequantized_value_is_bitwise_the_reference() {
    let fixture = json("dequantize.json");
    let mut compared = Vec::new();
    for entry in fixture["types"].as_array().unwrap() {
        let name = entry["type"].as_str().unwrap();
        let tensor_type = TensorType::from_id(entry["id"].as_u64().unwrap() as u32).unwrap();
        assert_eq!(tensor_type.name(), name);
        let blocks = hex(entry["blocks"].as_str().unwrap());
        let expected: Vec<f32> = hex(entry["f32"].as_str().unwrap())
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let mut got = vec![0.0; entry["values"].as_u64().unwrap() as usize];
        dequantize_into(name, tensor_type, &blocks, &mut got).unwrap();
        assert_eq!(got.len(), expected.len());
        for (i, (&x, &want)) in got.iter().zip(&expected).enumerate() {
            // each value is an f32 widened to f64: the same f32, bit for bit (NaN: any NaN)
            let same = if want.is_nan() { x.is_nan() } else { f64::from(want).to_bits() == x.to_bits() };
            assert!(same, "{name} value {i}: {x:e} but the reference computed {want:e}");
        }
        compared.push(format!("{name} {}", got.len()));
    }
    assert_eq!(compared.len(), 8);
    println!("bitwise equal to gguf.quants.dequantize: {}", compared.join(", "));
}

#[test]
fn the_tiny_fixture_reads_back() {
    let bytes = tiny();
    let file = Gguf::parse(&bytes).unwrap();
    let m = file.metadata();
    assert_eq!((file.version(), file.alignment(), m.len(), file.tensors().len()), (3, 32, 20, 21));
    assert_eq!(m.string("general.name").unwrap(), "tiny-llama");
    assert_eq!(m.count("llama.attention.head_count_kv").unwrap(), 2);
    assert_eq!(m.float("llama.attention.layer_norm_rms_epsilon").unwrap(), f64::from(1e-5f32));
    assert_eq!(m.string_array("tokenizer.ggml.tokens").unwrap()[..3], ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]);
    assert_eq!(m.i32_array("tokenizer.ggml.token_type").unwrap(), [1; 48]);
    assert_eq!(m.f32_array("tokenizer.ggml.scores").unwrap()[47], -47.0);
    assert_eq!(m.get("fixture.bytes"), Some(&MetadataValue::Array(MetadataArray::U8(vec![0, 1, 254, 255]))));
    assert_eq!((m.bool("fixture.flag").unwrap(), m.integer("fixture.big").unwrap()), (true, -(1 << 40)));
    assert_eq!((m.float("fixture.third").unwrap(), m.string("fixture.text").unwrap()), (1.0 / 3.0, "ünïcödé ✓"));
    let down = file.tensor("blk.1.ffn_down.weight").unwrap();
    assert_eq!((down.dims(), down.tensor_type(), down.values()), (&[256, 32][..], TensorType::Q6_K, 8192));
    assert_eq!(down.byte_range().len(), 32 * 210);
    let types: std::collections::BTreeSet<&str> = file.tensors().iter().map(|t| t.tensor_type().name()).collect();
    assert_eq!(types.into_iter().collect::<Vec<_>>(), ["BF16", "F16", "F32", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "Q8_0"]);
    // version 2 has the same layout (3 only added big-endian files, which are refused)
    let mut v2 = tiny();
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(Gguf::parse(&v2).unwrap().version(), 2);
    let mut big_endian = tiny();
    big_endian[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert_eq!(parse_error(&big_endian), GgufError::Version { version: 3 << 24 });
    // the tied fixture: alignment 64, no token list
    let bytes = fixture("tiny-llama-tied.gguf");
    let file = Gguf::parse(&bytes).unwrap();
    assert_eq!(file.alignment(), 64);
    assert!(file.tensors().iter().all(|t| t.offset() % 64 == 0 && t.byte_range().start % 64 == 0));
    assert!(file.metadata().get("tokenizer.ggml.tokens").is_none());
}

/// The largest `|got − expected|` over the largest `|expected|`.
fn relative_gap(got: &[f64], expected: &[f64]) -> f64 {
    assert_eq!(got.len(), expected.len());
    let scale = expected.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    got.iter().zip(expected).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())) / scale
}

fn logits(model: &Decoder, row: &[usize]) -> Vec<f64> {
    model.forward(row, [1, row.len()]).unwrap().value().unwrap().as_slice().to_vec()
}

#[test]
fn tiny_models_give_the_reference_logits_in_both_row_orders() {
    let expected = json("tiny-expected.json");
    for (name, tied, layout_vocab) in [("tiny-llama.gguf", false, 48), ("tiny-llama-tied.gguf", true, 40)] {
        let case = &expected[name];
        let bytes = fixture(name);
        let stored = gguf_llama_from_bytes(&bytes, GgufRope::AsStored).unwrap();
        let hf = gguf_llama_from_bytes(&bytes, GgufRope::HuggingFace).unwrap();
        assert_eq!((stored.config().vocab_size, stored.config().tie_embeddings), (layout_vocab, tied));
        let rows: Vec<Vec<usize>> = serde_json::from_value(case["tokens"].clone()).unwrap();
        let reference: Vec<Vec<f64>> = serde_json::from_value(case["logits"].clone()).unwrap();
        for (row, want) in rows.iter().zip(&reference) {
            let (a, b) = (logits(&stored, row), logits(&hf, row));
            let (gap_stored, gap_hf, gap_between) =
                (relative_gap(&a, want), relative_gap(&b, want), relative_gap(&a, &b));
            println!(
                "{name}: vs torch {gap_stored:.2e} (as stored), {gap_hf:.2e} (Hugging Face rows); between {gap_between:.2e}"
            );
            assert!(gap_stored <= 1e-12 && gap_hf <= 1e-12, "{name}: {gap_stored:e} {gap_hf:e}");
            assert!(gap_between <= 1e-12, "{name}: the two row orders differ by {gap_between:e}");
        }
    }
}

#[test]
fn loading_gives_the_same_bits_on_any_number_of_threads() {
    // the tensors are dequantized on the pool's threads: each one alone, whatever thread takes it
    let bytes = tiny();
    let bits = |threads: usize, rope: GgufRope| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let model = gguf_llama_from_bytes(&bytes, rope).unwrap();
            logits(&model, &[3, 1, 4, 1, 5]).iter().map(|v| v.to_bits()).collect::<Vec<u64>>()
        })
    };
    for rope in [GgufRope::AsStored, GgufRope::HuggingFace] {
        let one = bits(1, rope);
        assert_eq!(bits(2, rope), one, "{rope:?}");
        assert_eq!(bits(3, rope), one, "{rope:?}");
    }
}

#[test]
fn loading_a_file_equals_loading_its_bytes() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf/tiny-llama.gguf");
    let from_file = load_gguf_llama(path, GgufRope::AsStored).unwrap();
    let from_bytes = gguf_llama_from_bytes(&tiny(), GgufRope::AsStored).unwrap();
    assert_eq!(logits(&from_file, &[3, 1, 4]), logits(&from_bytes, &[3, 1, 4]));
    let err = load_gguf_llama("/nonexistent/model.gguf", GgufRope::AsStored).unwrap_err();
    assert!(matches!(err, GgufError::Io { ref path, .. } if path == "/nonexistent/model.gguf"), "{err}");
}

/// `edit` applied to a copy of `bytes`.
fn edited(bytes: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut copy = bytes.to_vec();
    edit(&mut copy);
    copy
}

fn parse_error(bytes: &[u8]) -> GgufError {
    Gguf::parse(bytes).expect_err("a broken file was accepted")
}

fn load_error(bytes: &[u8]) -> GgufError {
    gguf_llama_from_bytes(bytes, GgufRope::AsStored).expect_err("a broken model was accepted")
}

#[test]
fn every_broken_layout_is_a_typed_error_naming_the_place() {
    let tiny = tiny();
    let cases: Vec<(&str, GgufError, &str)> = vec![
        ("magic", parse_error(&edited(&tiny, |b| b[0] = b'X')), "not the magic"),
        ("short magic", parse_error(&tiny[..2]), "[71, 71]"),
        ("version 1", parse_error(&edited(&tiny, |b| put(b, 4, &1u32.to_le_bytes()))), "version 1 is not supported"),
        ("truncated", parse_error(&tiny[..300]), "file ends at 300"),
        ("key count", parse_error(&edited(&tiny, |b| put(b, 16, &u64::MAX.to_le_bytes()))), "metadata entries"),
        ("tensor count", parse_error(&edited(&tiny, |b| put(b, 8, &(1u64 << 40).to_le_bytes()))), "tensor infos"),
        (
            "array length",
            parse_error(&edited(&tiny, |b| set_array_len(b, "tokenizer.ggml.tokens", 1 << 40))),
            "tokenizer.ggml.tokens declares 1099511627776 elements",
        ),
        (
            "not UTF-8",
            parse_error(&edited(&tiny, |b| {
                let at = value_at(b, "fixture.text") + 8;
                b[at] = 0xff
            })),
            "fixture.text is not UTF-8",
        ),
        (
            "value type",
            parse_error(&edited(&tiny, |b| set_value_type(b, "fixture.flag", 13))),
            "fixture.flag has value type 13, which GGUF does not define",
        ),
        (
            "nested array",
            parse_error(&edited(&tiny, |b| {
                let at = value_at(b, "fixture.bytes");
                put(b, at, &9u32.to_le_bytes())
            })),
            "an array of arrays",
        ),
        (
            "bool",
            parse_error(&edited(&tiny, |b| {
                let at = value_at(b, "fixture.flag");
                b[at] = 2
            })),
            "fixture.flag = 2 is invalid",
        ),
        (
            "duplicate key",
            parse_error(&edited(&tiny, |b| rename(b, "fixture.flag", "fixture.text"))),
            "the key fixture.text appears twice",
        ),
        ("rank", parse_error(&edited(&tiny, |b| set_rank(b, "blk.0.attn_q.weight", 5))), "rank 5 is not 1 to 4"),
        (
            "type id",
            parse_error(&edited(&tiny, |b| set_type(b, "blk.0.attn_q.weight", 99))),
            "blk.0.attn_q.weight: type id 99",
        ),
        (
            "overflow",
            parse_error(&edited(&tiny, |b| {
                set_dim(b, "blk.0.attn_q.weight", 0, 1 << 32);
                set_dim(b, "blk.0.attn_q.weight", 1, 1 << 32)
            })),
            "product past 2^64",
        ),
        (
            "block",
            parse_error(&edited(&tiny, |b| set_dim(b, "blk.0.attn_q.weight", 0, 16))),
            "not a whole number of blocks of 32",
        ),
        (
            "past the end",
            parse_error(&edited(&tiny, |b| set_offset(b, "output_norm.weight", 1 << 20))),
            "output_norm.weight: data at offset 1048576 (128 bytes) ends past the end",
        ),
        (
            "misaligned",
            parse_error(&edited(&tiny, |b| {
                let o = offset(b, "blk.0.attn_k.weight");
                set_offset(b, "blk.0.attn_k.weight", o + 4)
            })),
            "not a multiple of the alignment 32",
        ),
        (
            "overlap",
            parse_error(&edited(&tiny, |b| {
                let o = offset(b, "blk.0.attn_q.weight");
                set_offset(b, "blk.0.attn_k.weight", o)
            })),
            "overlaps the data of tensor blk.0.attn_q.weight",
        ),
        (
            "duplicate tensor",
            parse_error(&edited(&tiny, |b| rename(b, "blk.0.attn_k.weight", "blk.0.attn_v.weight"))),
            "the tensor blk.0.attn_v.weight appears twice",
        ),
        (
            "alignment",
            parse_error(&edited(&fixture("tiny-llama-tied.gguf"), |b| set_u32(b, "general.alignment", 48))),
            "general.alignment = 48 is invalid",
        ),
    ];
    for (what, err, part) in &cases {
        assert!(err.to_string().contains(part), "{what}: {err}");
    }
    assert!(matches!(cases[0].1, GgufError::Magic { .. }) && matches!(cases[3].1, GgufError::Truncated { .. }));
    assert!(matches!(cases[6].1, GgufError::CountTooLarge { count: 1_099_511_627_776, .. }));
}

#[test]
fn every_model_that_does_not_fit_is_a_typed_error() {
    let tiny = tiny();
    let arch = |b: &mut Vec<u8>| {
        let at = value_at(b, "general.architecture") + 8;
        put(b, at, b"qwen2");
    };
    let cases: Vec<(&str, GgufError, &str)> = vec![
        ("architecture", load_error(&edited(&tiny, arch)), "general.architecture = \"qwen2\" is not supported"),
        (
            "too many layers",
            load_error(&edited(&tiny, |b| set_u32(b, "llama.block_count", 10_000))),
            "more than twice the 58528 values",
        ),
        (
            "a missing layer",
            load_error(&edited(&tiny, |b| set_u32(b, "llama.block_count", 3))),
            "tensor blk.2.attn_norm.weight is missing",
        ),
        (
            "a shape",
            load_error(&edited(&tiny, |b| set_dim(b, "blk.1.ffn_norm.weight", 0, 16))),
            "blk.1.ffn_norm.weight has dimensions [16] in the file but [32] was needed",
        ),
        (
            "a type",
            load_error(&edited(&tiny, |b| set_type(b, "blk.0.attn_norm.weight", TensorType::I8.id()))),
            "blk.0.attn_norm.weight: type I8 cannot be dequantized",
        ),
        (
            "a tensor too many",
            load_error(&edited(&tiny, |b| rename(b, "output.weight", "outpux.weight"))),
            "tensor outpux.weight is not used",
        ),
        ("kv heads", load_error(&edited(&tiny, |b| set_u32(b, "llama.attention.head_count_kv", 3))), "4 query heads"),
        (
            "rope width",
            load_error(&edited(&tiny, |b| set_u32(b, "llama.rope.dimension_count", 4))),
            "llama.rope.dimension_count = 4 is invalid",
        ),
        (
            "a key's type",
            load_error(&edited(&tiny, |b| set_value_type(b, "llama.context_length", 6))),
            "llama.context_length is f32, not an integer",
        ),
        (
            "a missing key",
            load_error(&edited(&tiny, |b| rename(b, "llama.feed_forward_length", "llama.feed_forward_lengtX"))),
            "llama.feed_forward_length is missing",
        ),
    ];
    for (what, err, part) in &cases {
        assert!(err.to_string().contains(part), "{what}: {err}");
    }
    assert!(
        matches!(cases[0].1, GgufError::Architecture { .. })
            && matches!(cases[1].1, GgufError::TooManyParameters { .. })
    );
    assert!(matches!(cases[6].1, GgufError::Model(_)) && matches!(cases[5].1, GgufError::UnexpectedTensor { .. }));
    // the dequantizer refuses a type it does not read, naming the tensor
    let file = Gguf::parse(&tiny).unwrap();
    assert!(matches!(file.tensor("nope"), Err(GgufError::MissingTensor { .. })));
    let bytes = edited(&tiny, |b| set_type(b, "blk.0.attn_norm.weight", TensorType::I8.id()));
    let err = Gguf::parse(&bytes).unwrap().dequantize("blk.0.attn_norm.weight").unwrap_err();
    assert_eq!(err, GgufError::UnsupportedTensorType { tensor: "blk.0.attn_norm.weight".to_string(), type_name: "I8" });
}

/// The child half of [`the_model_path_follows_the_variables`]: prints what the lookup finds.
#[test]
fn model_path_child() {
    if std::env::var_os("GGUF_MODEL_PATH_CHILD").is_some() {
        let found = llm_from_scratch::gguf::model_path_from_env();
        println!("found={}", found.map(|p| p.display().to_string()).unwrap_or_default());
    }
}

#[test]
fn the_model_path_follows_the_variables() {
    // the variables are set for a child process: a test cannot change its own environment safely
    let cache = std::env::temp_dir().join(format!("gguf-cache-{}", std::process::id()));
    std::fs::create_dir_all(&cache).unwrap();
    let run = |vars: &[(&str, &str)]| {
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command.args(["model_path_child", "--exact", "--nocapture", "--test-threads=1"]);
        command.env("GGUF_MODEL_PATH_CHILD", "1").env_remove("LLM_MODEL").env_remove("LLM_CACHE_DIR");
        command.env_remove("XDG_CACHE_HOME");
        for (k, v) in vars {
            command.env(k, v);
        }
        let out = String::from_utf8(command.output().unwrap().stdout).unwrap();
        // the line may start with the harness's "test model_path_child ... "
        out.lines().find_map(|l| l.split_once("found=")).map(|(_, path)| path.to_string()).unwrap()
    };
    let dir = cache.display().to_string();
    assert_eq!(run(&[("LLM_MODEL", "/some/model.gguf"), ("LLM_CACHE_DIR", &dir)]), "/some/model.gguf");
    assert_eq!(run(&[("LLM_CACHE_DIR", &dir)]), "", "no file in the cache: nothing found");
    let file = cache.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::fs::write(&file, b"GGUF").unwrap();
    assert_eq!(run(&[("LLM_CACHE_DIR", &dir)]), file.display().to_string());
    assert_eq!(run(&[("LLM_MODEL", ""), ("LLM_CACHE_DIR", &dir)]), file.display().to_string(), "empty is unset");
    std::fs::remove_dir_all(&cache).unwrap();
}
