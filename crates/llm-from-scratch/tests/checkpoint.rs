//! Checkpoints: the Hugging Face fixture gives the logits `transformers` computed, save → load is
//! bitwise, and every broken checkpoint is a typed error naming what is wrong.
//!
//! The fixture `tests/fixtures/tiny-llama/` (a random `LlamaForCausalLM` in float32, its
//! `config.json`, and its float64 logits for two token rows) was written by
//! `scripts/make_hf_fixture.py`; these tests need no Python.

use std::path::{Path, PathBuf};

use llm_from_scratch::Tensor;
use llm_from_scratch::attention::SlidingWindow;
use llm_from_scratch::model::{
    CheckpointError, Decoder, DecoderConfig, ModelError, checkpoint_from_bytes, hf_llama_config, hf_llama_from_bytes,
    load_checkpoint, load_hf_llama, save_checkpoint,
};
use llm_from_scratch::nn::{RopeLayout, SplitMix64};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama")
}

/// A path in the temporary folder, unique to this process and `name`.
fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("llm-checkpoint-{}-{name}", std::process::id()))
}

/// Token rows `[B, T]` and logits `[B, T, V]` from `expected_logits.json`.
fn expected_logits() -> (Vec<usize>, [usize; 2], Tensor) {
    let text = std::fs::read_to_string(fixture().join("expected_logits.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rows: Vec<Vec<usize>> = serde_json::from_value(json["tokens"].clone()).unwrap();
    let shape: Vec<usize> = serde_json::from_value(json["shape"].clone()).unwrap();
    let logits: Vec<f64> = serde_json::from_value(json["logits"].clone()).unwrap();
    let batch = [rows.len(), rows[0].len()];
    (rows.concat(), batch, Tensor::new(&shape, logits).unwrap())
}

fn logits(model: &Decoder, tokens: &[usize], shape: [usize; 2]) -> Tensor {
    model.forward(tokens, shape).unwrap().value().unwrap()
}

#[test]
fn the_hugging_face_fixture_gives_the_logits_of_transformers() {
    let model = load_hf_llama(fixture()).unwrap();
    let c = model.config();
    assert_eq!((c.vocab_size, c.model_width, c.layers, c.query_heads, c.kv_heads), (32, 16, 2, 4, 2));
    assert_eq!((c.head_width, c.ffn_width, c.max_positions, c.tie_embeddings), (4, 32, 32, false));
    assert_eq!((c.rope_base, c.rms_eps, c.rope_layout), (10_000.0, 1e-6, RopeLayout::SplitHalves));
    let (tokens, shape, expected) = expected_logits();
    let got = logits(&model, &tokens, shape);
    assert_eq!(got.shape(), expected.shape());
    let gap = got.max_abs_diff(&expected).unwrap();
    assert!(gap <= 1e-10, "max |ours − transformers| = {gap:e}");
    println!("max |ours − transformers| = {gap:e}");
    // the weights are float32 in the file: widened exactly, so a float32 round trip changes nothing
    let gain = model.parameters().get("model.norm.weight").unwrap().value().value().unwrap();
    assert!(gain.as_slice().iter().all(|&g| f64::from(g as f32) == g));
}

#[test]
fn loading_from_bytes_equals_loading_from_files() {
    let (tokens, shape, _) = expected_logits();
    let config = std::fs::read_to_string(fixture().join("config.json")).unwrap();
    let weights = std::fs::read(fixture().join("model.safetensors")).unwrap();
    let from_files = logits(&load_hf_llama(fixture()).unwrap(), &tokens, shape);
    let from_bytes = logits(&hf_llama_from_bytes(&config, &weights).unwrap(), &tokens, shape);
    assert!(from_files.bitwise_eq(&from_bytes));
    let err = hf_llama_from_bytes(&config, &weights[..weights.len() / 2]).unwrap_err();
    assert!(matches!(err, CheckpointError::Header { ref path, .. } if path == "model.safetensors"), "{err}");
    let err = hf_llama_from_bytes("{", &weights).unwrap_err();
    assert!(matches!(err, CheckpointError::Config { .. }), "{err}");
    // ours: the bytes save_checkpoint wrote load back bitwise
    let path = temp_path("bytes");
    save_checkpoint(&load_hf_llama(fixture()).unwrap(), &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(logits(&checkpoint_from_bytes(&bytes).unwrap(), &tokens, shape).bitwise_eq(&from_files));
    assert!(matches!(checkpoint_from_bytes(&bytes[..100]), Err(CheckpointError::Header { .. })));
}

#[test]
fn save_then_load_is_bitwise() {
    let (tokens, shape, _) = expected_logits();
    let hf = load_hf_llama(fixture()).unwrap();
    // a model of our own: adjacent-pair RoPE, tied head, a window, f64 weights from our generator
    let config = DecoderConfig::new(32, 16, 2, 4)
        .with_kv_heads(1)
        .with_rope(32, 100.0)
        .with_rope_layout(RopeLayout::AdjacentPairs)
        .with_window(SlidingWindow::Inclusive(3))
        .with_embedding_init_std(0.7);
    let ours = Decoder::new(config, &mut SplitMix64::new(5)).unwrap();
    for (name, model) in [("hf", hf), ("ours", ours)] {
        let path = temp_path(&format!("{name}.safetensors"));
        save_checkpoint(&model, &path).unwrap();
        let loaded = load_checkpoint(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        // the kernel and the initialisation are not properties of the weights: not stored
        let init_std = model.config().embedding_init_std;
        assert_eq!(loaded.config().clone().with_embedding_init_std(init_std), *model.config(), "{name}");
        for (a, b) in model.parameters().iter().zip(loaded.parameters().iter()) {
            assert_eq!(a.name(), b.name());
            assert!(a.value().value().unwrap().bitwise_eq(&b.value().value().unwrap()), "{}", a.name());
        }
        assert!(logits(&model, &tokens, shape).bitwise_eq(&logits(&loaded, &tokens, shape)), "{name}");
    }
}

#[test]
fn the_file_is_a_hugging_face_state_dict_in_f64() {
    let model = load_hf_llama(fixture()).unwrap();
    let path = temp_path("layout.safetensors");
    save_checkpoint(&model, &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let ours = SafeTensors::deserialize(&bytes).unwrap();
    let theirs_bytes = std::fs::read(fixture().join("model.safetensors")).unwrap();
    let theirs = SafeTensors::deserialize(&theirs_bytes).unwrap();
    let (mut a, mut b) = (ours.names(), theirs.names());
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b, "the same tensor names");
    for name in a {
        let (x, y) = (ours.tensor(name).unwrap(), theirs.tensor(name).unwrap());
        assert_eq!((x.dtype(), y.dtype()), (Dtype::F64, Dtype::F32));
        assert_eq!(x.shape(), y.shape(), "{name}: [out, in] as in the Hugging Face file");
        let widened = y.data().chunks_exact(4).map(|w| f64::from(f32::from_le_bytes([w[0], w[1], w[2], w[3]])));
        assert!(x.data().chunks_exact(8).map(|w| f64::from_le_bytes(w.try_into().unwrap())).eq(widened), "{name}");
    }
}

/// A tensor of a rewritten file: `(name, dtype, shape, bytes)`.
type Stored = (String, Dtype, Vec<usize>, Vec<u8>);

/// Writes to `path` the checkpoint of `model` with its tensors passed through `edit` (metadata kept).
fn write_edited(model: &Decoder, path: &Path, edit: impl Fn(Vec<Stored>) -> Vec<Stored>) {
    save_checkpoint(model, path).unwrap();
    let bytes = std::fs::read(path).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let (_, metadata) = SafeTensors::read_metadata(&bytes).unwrap();
    let mut tensors: Vec<Stored> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| (name, view.dtype(), view.shape().to_vec(), view.data().to_vec()))
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let edited = edit(tensors);
    let views = edited
        .iter()
        .map(|(name, dtype, shape, data)| (name.as_str(), TensorView::new(*dtype, shape.clone(), data).unwrap()));
    std::fs::write(path, safetensors::serialize(views, metadata.metadata().clone()).unwrap()).unwrap();
}

/// The error of loading `model`'s checkpoint after `edit`.
fn load_edited(model: &Decoder, name: &str, edit: impl Fn(Vec<Stored>) -> Vec<Stored>) -> CheckpointError {
    let path = temp_path(name);
    write_edited(model, &path, edit);
    let result = load_checkpoint(&path);
    std::fs::remove_file(&path).unwrap();
    result.unwrap_err()
}

fn small_model(tied: bool) -> Decoder {
    let config = DecoderConfig::new(6, 8, 2, 2).with_ffn_width(12).with_rope(8, 100.0).with_tied_embeddings(tied);
    Decoder::new(config, &mut SplitMix64::new(1)).unwrap()
}

#[test]
fn a_broken_checkpoint_is_a_typed_error_naming_the_tensor() {
    let model = small_model(false);
    const UP: &str = "model.layers.1.mlp.up_proj.weight";

    let err = load_edited(&model, "missing", |t| t.into_iter().filter(|s| s.0 != UP).collect());
    assert_eq!(err, CheckpointError::MissingTensor { name: UP.to_string() });
    assert_eq!(err.to_string(), format!("checkpoint: tensor {UP} is missing"));

    // up_proj is [in, out] = [8, 12] in memory, [12, 8] in the file; store it as [8, 12]
    let err = load_edited(&model, "shape", |t| {
        t.into_iter().map(|s| if s.0 == UP { (s.0, s.1, vec![8, 12], s.3) } else { s }).collect()
    });
    assert_eq!(err.to_string(), format!("checkpoint: tensor {UP} has shape [8,12] in the file but [12,8] was needed"));

    // the same bytes read as 64-bit integers
    let err = load_edited(&model, "dtype", |t| {
        t.into_iter().map(|s| if s.0 == UP { (s.0, Dtype::I64, s.2, s.3) } else { s }).collect()
    });
    assert_eq!(err, CheckpointError::UnsupportedDtype { name: UP.to_string(), dtype: "I64".to_string() });

    let err = load_edited(&model, "extra", |mut t| {
        t.push(("model.layers.2.input_layernorm.weight".to_string(), Dtype::F64, vec![1], vec![0; 8]));
        t
    });
    assert_eq!(
        err.to_string(),
        "checkpoint: tensor model.layers.2.input_layernorm.weight is not a parameter of this configuration"
    );
    // a stored RoPE table (older Hugging Face files) is not an error: it is recomputed
    let path = temp_path("inv-freq");
    write_edited(&model, &path, |mut t| {
        t.push(("model.layers.0.self_attn.rotary_emb.inv_freq".to_string(), Dtype::F32, vec![1], vec![0; 4]));
        t
    });
    assert!(load_checkpoint(&path).is_ok());
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn half_precision_tensors_are_widened_to_f64() {
    // every gain stored as bf16 1.5 (0x3fc0) or f16 −0.5 (0xb800): the model then holds exactly those
    let model = small_model(true);
    for (name, dtype, word, value) in [("bf16", Dtype::BF16, 0x3fc0u16, 1.5), ("f16", Dtype::F16, 0xb800, -0.5)] {
        let path = temp_path(name);
        write_edited(&model, &path, |t| {
            let gain = |s: &Stored| s.2.len() == 1;
            t.into_iter()
                .map(|s| if gain(&s) { (s.0, dtype, s.2.clone(), word.to_le_bytes().repeat(s.2[0])) } else { s })
                .collect()
        });
        let loaded = load_checkpoint(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let norm = loaded.parameters().get("model.norm.weight").unwrap().value().value().unwrap();
        assert_eq!(norm.as_slice(), [value; 8], "{name}");
    }
}

#[test]
fn a_broken_or_unreadable_file_is_a_typed_error() {
    let model = small_model(true);
    let path = temp_path("header.safetensors");
    save_checkpoint(&model, &path).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    // a header length past the end of the file
    let past_the_end = (bytes.len() as u64).to_le_bytes();
    bytes[..8].copy_from_slice(&past_the_end);
    std::fs::write(&path, &bytes).unwrap();
    let err = load_checkpoint(&path).unwrap_err();
    assert!(matches!(&err, CheckpointError::Header { path: p, .. } if p.ends_with("header.safetensors")), "{err}");
    // a header that is not JSON
    std::fs::write(&path, [&4u64.to_le_bytes()[..], b"{{{{"].concat()).unwrap();
    let err = load_checkpoint(&path).unwrap_err();
    assert!(err.to_string().starts_with("checkpoint header: "), "{err}");
    // a file cut in the middle of the data
    save_checkpoint(&model, &path).unwrap();
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, &whole[..whole.len() - 8]).unwrap();
    assert!(matches!(load_checkpoint(&path), Err(CheckpointError::Header { .. })));
    std::fs::remove_file(&path).unwrap();

    let err = load_checkpoint(&path).unwrap_err();
    assert!(matches!(&err, CheckpointError::Io { action: "read", .. }), "{err}");
    let err = load_hf_llama(temp_path("no-such-folder")).unwrap_err();
    assert!(err.to_string().contains("config.json"), "{err}");
    // a Hugging Face file has no configuration of ours
    let err = load_checkpoint(fixture().join("model.safetensors")).unwrap_err();
    assert!(err.to_string().contains("__metadata__.config is missing"), "{err}");
}

#[test]
fn a_config_that_does_not_fit_the_weights_is_an_error() {
    // the fixture's weights under a config with one more layer, or a tied head
    let dir = temp_path("hf-dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture().join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let config = std::fs::read_to_string(fixture().join("config.json")).unwrap();
    std::fs::write(dir.join("config.json"), config.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3"))
        .unwrap();
    let err = load_hf_llama(&dir).unwrap_err();
    assert_eq!(err, CheckpointError::MissingTensor { name: "model.layers.2.input_layernorm.weight".to_string() });
    std::fs::write(
        dir.join("config.json"),
        config.replace("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true"),
    )
    .unwrap();
    let err = load_hf_llama(&dir).unwrap_err();
    assert_eq!(err, CheckpointError::UnexpectedTensor { name: "lm_head.weight".to_string() });
    std::fs::write(dir.join("config.json"), config.replace("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3"))
        .unwrap();
    let err = load_hf_llama(&dir).unwrap_err();
    assert!(matches!(err, CheckpointError::Model(ModelError::Attention(_))), "{err}");
    // a config asking for far more than the file holds is refused before names or tensors are
    // built (today's main built the names of every layer first and aborted on 10¹² layers)
    std::fs::write(dir.join("config.json"), config.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000"))
        .unwrap();
    let err = load_hf_llama(&dir).unwrap_err();
    assert!(err.to_string().contains("more than twice the"), "{err}");
    let trillion = config.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000000000");
    std::fs::write(dir.join("config.json"), &trillion).unwrap();
    let err = load_hf_llama(&dir).unwrap_err();
    assert!(err.to_string().contains("parameter count"), "{err}");
    assert!(matches!(hf_llama_config(&trillion), Err(CheckpointError::Model(ModelError::InvalidSetting { .. }))));
    // a billion positions: validating the config builds no RoPE table (it did: 16 GiB)
    let far = config.replace("\"max_position_embeddings\": ", "\"max_position_embeddings\": 1073741824, \"unused\": ");
    assert_eq!(hf_llama_config(&far).unwrap().max_positions, 1 << 30);
    std::fs::remove_dir_all(&dir).unwrap();
}
