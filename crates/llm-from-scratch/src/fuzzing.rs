//! Building and running attention layers, and loading checkpoints, configurations and GGUF files,
//! from raw bytes: the entry points of the cargo-fuzz targets in `fuzz/` and of property tests that feed
//! them random bytes on every `cargo test` (so the targets' bodies run in CI on stable Rust; a
//! longer fuzzing run needs nightly, see `docs/reliability.md`).
//!
//! No chapter uses it: it tests the promise every chapter relies on, that bad input gives a typed
//! error ([`crate::attention::AttentionError`]) and never a panic (`docs/reliability.md`).
//!
//! Every byte string is a valid request: the bytes pick sizes, options, positions and input values
//! (including NaN and ±∞). The contract under test is the crate's: each call returns `Ok` or a
//! typed error — it never panics, aborts or hangs.

use crate::attention::{
    AttentionConfig, AttentionOptions, AttentionPath, GroupedQueryAttention, MultiHeadAttention, SlidingWindow,
};
use crate::autodiff::constant;
use crate::nn::SplitMix64;
use crate::tensor::{Mask, Tensor};

/// Reads small numbers from the front of a byte string, then zeros.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    /// A number below 2^16 from the next two bytes (a position in a seed file).
    fn wide(&mut self) -> usize {
        usize::from(self.byte()) << 8 | usize::from(self.byte())
    }

    fn small(&mut self, below: u8) -> usize {
        (self.byte() % below.max(1)) as usize
    }

    fn value(&mut self) -> f64 {
        match self.byte() {
            250 => f64::NAN,
            251 => f64::INFINITY,
            252 => f64::NEG_INFINITY,
            253 => 1e300,
            b => (b as f64 - 125.0) / 25.0,
        }
    }
}

/// What one run did, for the test that drives it (how many calls succeeded).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FuzzOutcome {
    /// Calls that returned `Ok`.
    pub succeeded: usize,
    /// Calls that returned a typed error.
    pub rejected: usize,
}

/// Builds a multi-head and a grouped-query layer from `data` and runs a forward, a backward, and
/// a few cached decoding steps on an input also taken from `data`.
pub fn run_layer_from_bytes(data: &[u8]) -> FuzzOutcome {
    let mut bytes = Bytes(data);
    let mut outcome = FuzzOutcome::default();
    let mut note = |ok: bool| if ok { outcome.succeeded += 1 } else { outcome.rejected += 1 };
    let d = bytes.small(9);
    let h = bytes.small(5);
    let g = bytes.small(5);
    let dh = bytes.small(7);
    let capacity = bytes.small(12);
    let base = bytes.value().abs() * 1000.0;
    let window = match bytes.small(3) {
        0 => None,
        1 => Some(SlidingWindow::Inclusive(bytes.small(4))),
        _ => Some(SlidingWindow::Exclusive(bytes.small(4))),
    };
    let path = if bytes.byte() % 2 == 0 { AttentionPath::Explicit } else { AttentionPath::Tiled };
    let mut rng = SplitMix64::new(u64::from(bytes.byte()));
    let mut config = AttentionConfig::new(d, h, g, dh).with_rope(capacity, base).with_path(path);
    config.window = window;
    config.sinks = bytes.byte() % 2 == 1;
    let shape = [bytes.small(3), bytes.small(6), if bytes.byte() % 4 == 0 { bytes.small(9) } else { d }];
    let len: usize = shape.iter().product();
    let values: Vec<f64> = (0..len).map(|_| bytes.value()).collect();
    let offset = if bytes.byte() == 255 { usize::MAX - bytes.small(4) } else { bytes.small(8) };
    let Ok(x) = constant(&shape, &values) else {
        note(false);
        return outcome;
    };
    if bytes.byte() == 7 {
        x.release();
    }
    let mha = MultiHeadAttention::new("fuzz", d, h, capacity, base, &mut rng);
    note(mha.is_ok());
    if let Ok(mha) = mha {
        note(mha.forward(&x, offset).is_ok());
    }
    let layer = GroupedQueryAttention::new("fuzz", config, &mut rng);
    note(layer.is_ok());
    let Ok(layer) = layer else { return outcome };
    let padding: Vec<bool> = (0..shape[0] * shape[1]).map(|_| bytes.byte() % 5 == 0).collect();
    let padding = Mask::new(&[shape[0], shape[1]], padding).ok();
    let options =
        AttentionOptions { position_offset: offset, key_padding: padding.as_ref(), ..AttentionOptions::default() };
    match layer.forward_with(&x, options) {
        Ok(trace) => {
            note(true);
            let upstream = Tensor::new(trace.output.shape(), vec![1.0; trace.output.len()]);
            note(upstream.is_ok_and(|u| trace.output.backward_with(&u).is_ok()));
        }
        Err(_) => note(false),
    }
    let mut cache = layer.new_cache(shape[0]);
    for _ in 0..bytes.small(4) {
        note(layer.forward_cached(&x, &mut cache).is_ok());
    }
    outcome
}

/// A small valid checkpoint of ours (2 layers, vocabulary 6), made once: the seed that
/// [`run_checkpoint_from_bytes`] mutates.
pub fn seed_checkpoint() -> &'static [u8] {
    static SEED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SEED.get_or_init(|| {
        let config = crate::model::DecoderConfig::new(6, 4, 2, 2).with_ffn_width(8).with_rope(8, 100.0);
        let path = std::env::temp_dir().join(format!("fuzz-seed-{}.safetensors", std::process::id()));
        let bytes = crate::model::Decoder::new(config, &mut SplitMix64::new(0))
            .ok()
            .and_then(|model| crate::model::save_checkpoint(&model, &path).ok())
            .and_then(|()| std::fs::read(&path).ok())
            .unwrap_or_default();
        std::fs::remove_file(&path).ok();
        bytes
    })
}

/// Loads a checkpoint from `data` — as raw bytes, or as the seed checkpoint with bytes of it
/// (header included) overwritten, its configuration's numbers replaced, or cut short — and, if
/// it loads, runs a forward pass on two tokens. Every outcome must be `Ok` or a typed error.
pub fn run_checkpoint_from_bytes(data: &[u8]) -> FuzzOutcome {
    let mut bytes = Bytes(data);
    let mut outcome = FuzzOutcome::default();
    let file: Vec<u8> = match bytes.small(4) {
        0 => bytes.0.to_vec(),
        1 => overwritten(seed_checkpoint(), seed_checkpoint().len(), &mut bytes),
        2 => {
            // a well-formed file whose stored configuration has one number replaced
            let fields =
                ["vocab_size", "num_hidden_layers", "hidden_size", "max_position_embeddings", "intermediate_size"];
            let field = fields[bytes.small(5)];
            let number = [0u64, 1, 3, 1 << 20, 1 << 40, u64::MAX][bytes.small(6)];
            with_stored_config(seed_checkpoint(), field, number).unwrap_or_default()
        }
        _ => cut(seed_checkpoint(), &mut bytes),
    };
    run_loaded(crate::model::checkpoint_from_bytes(&file), &mut outcome);
    outcome
}

/// `seed` with up to 8 bytes overwritten, at positions below `span` taken from `bytes`.
fn overwritten(seed: &[u8], span: usize, bytes: &mut Bytes<'_>) -> Vec<u8> {
    let mut file = seed.to_vec();
    for _ in 0..bytes.small(8) {
        let at = bytes.wide() % span.max(1);
        if let Some(b) = file.get_mut(at) {
            *b = bytes.byte();
        }
    }
    file
}

/// The first bytes of `seed`, as many as `bytes` says.
fn cut(seed: &[u8], bytes: &mut Bytes<'_>) -> Vec<u8> {
    seed[..bytes.wide().min(seed.len())].to_vec()
}

/// Counts a load, and for a model that loaded, a forward pass on two tokens.
fn run_loaded<E>(loaded: Result<crate::model::Decoder, E>, outcome: &mut FuzzOutcome) {
    match loaded {
        Ok(model) => {
            outcome.succeeded += 1;
            let vocab = model.config().vocab_size;
            let ran = model.forward(&[1 % vocab, 2 % vocab], [1, 2]).and_then(|l| Ok(l.value()?));
            if ran.is_ok() { outcome.succeeded += 1 } else { outcome.rejected += 1 }
        }
        Err(_) => outcome.rejected += 1,
    }
}

/// `file` (a valid checkpoint of ours) written again with `field` of its stored configuration set
/// to `number`; `None` if `file` does not parse.
fn with_stored_config(file: &[u8], field: &str, number: u64) -> Option<Vec<u8>> {
    let (_, metadata) = safetensors::SafeTensors::read_metadata(file).ok()?;
    let mut metadata = metadata.metadata().clone()?;
    let mut config: serde_json::Value = serde_json::from_str(metadata.get("config")?).ok()?;
    config.as_object_mut()?.insert(field.to_string(), number.into());
    metadata.insert("config".to_string(), config.to_string());
    let tensors = safetensors::SafeTensors::deserialize(file).ok()?;
    safetensors::serialize(tensors.iter(), Some(metadata)).ok()
}

/// Reads a Hugging Face `config.json` from `data`: as text, or as a valid configuration with one
/// count replaced by a number taken from the data (zero, huge, overflowing, negative, a float).
pub fn run_config_from_text(data: &[u8]) -> FuzzOutcome {
    let mut bytes = Bytes(data);
    let mut outcome = FuzzOutcome::default();
    let text = if bytes.byte() % 2 == 0 {
        String::from_utf8_lossy(bytes.0).into_owned()
    } else {
        let keys = [
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "max_position_embeddings",
            "head_dim",
            "sliding_window",
        ];
        let values =
            ["0", "1", "3", "1073741824", "1000000000000", "18446744073709551615", "-1", "2.5", "1e400", "null"];
        let mut fields: Vec<String> = [
            ("vocab_size", "32"),
            ("hidden_size", "16"),
            ("num_hidden_layers", "2"),
            ("num_attention_heads", "4"),
            ("num_key_value_heads", "2"),
            ("intermediate_size", "32"),
            ("max_position_embeddings", "64"),
        ]
        .iter()
        .map(|(k, v)| format!("\"{k}\": {v}"))
        .collect();
        fields.push(format!("\"{}\": {}", keys[bytes.small(9)], values[bytes.small(10)]));
        format!("{{{}}}", fields.join(", "))
    };
    match crate::model::hf_llama_config(&text) {
        Ok(config) => {
            outcome.succeeded += 1;
            // a configuration that validates must also build within its own bounds
            if config.parameter_count() <= 1 << 16 {
                let built = crate::model::Decoder::new(config, &mut SplitMix64::new(0));
                if built.is_ok() { outcome.succeeded += 1 } else { outcome.rejected += 1 }
            }
        }
        Err(_) => outcome.rejected += 1,
    }
    outcome
}

/// The tied tiny LLaMA of `tests/fixtures/gguf/` (one layer, 16 KB): the seed that
/// [`run_gguf_from_bytes`] mutates.
pub fn seed_gguf() -> &'static [u8] {
    include_bytes!("../tests/fixtures/gguf/tiny-llama-tied.gguf")
}

/// Reads a GGUF file from `data` — as raw bytes, or as the seed file with up to 8 bytes
/// overwritten (anywhere, or within its header and tensor infos), or cut short — then maps it
/// onto a decoder and, if that works, runs a forward pass on two tokens. Every outcome must be
/// `Ok` or a typed error ([`crate::gguf::GgufError`]).
pub fn run_gguf_from_bytes(data: &[u8]) -> FuzzOutcome {
    let mut bytes = Bytes(data);
    let mut outcome = FuzzOutcome::default();
    let seed = seed_gguf();
    let file: Vec<u8> = match bytes.small(4) {
        0 => bytes.0.to_vec(),
        1 => overwritten(seed, seed.len(), &mut bytes),
        // only the first 1152 bytes (header, metadata, tensor infos), where the sizes are
        2 => overwritten(seed, 1152, &mut bytes),
        _ => cut(seed, &mut bytes),
    };
    let parsed = crate::gguf::Gguf::parse(&file);
    let Ok(parsed) = parsed else {
        outcome.rejected += 1;
        return outcome;
    };
    outcome.succeeded += 1;
    let rope = if bytes.byte() % 2 == 0 { crate::gguf::GgufRope::AsStored } else { crate::gguf::GgufRope::HuggingFace };
    run_loaded(crate::gguf::llama_from_gguf(&parsed, rope), &mut outcome);
    outcome
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_valid_request_runs() {
        // d 4, 2 heads, 1 kv head, d_h 2, capacity 8, window none, explicit, no sinks, [1,3,4]
        let data =
            [4, 2, 1, 2, 8, 130, 0, 0, 9, 0, 1, 3, 1, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 0, 0];
        let outcome = run_layer_from_bytes(&data);
        assert!(outcome.succeeded >= 4, "{outcome:?}");
    }

    #[test]
    fn the_seed_checkpoint_loads_and_runs() {
        assert!(!seed_checkpoint().is_empty());
        // mode 1 with no overwrites: the seed itself
        assert_eq!(run_checkpoint_from_bytes(&[1, 0]), FuzzOutcome { succeeded: 2, rejected: 0 });
        // mode 2: 2^40 layers in the stored configuration of a well-formed file: refused
        let file = with_stored_config(seed_checkpoint(), "num_hidden_layers", 1 << 40).unwrap();
        let err = crate::model::checkpoint_from_bytes(&file).err().unwrap();
        assert!(err.to_string().contains("parameter count"), "{err}");
        assert_eq!(run_checkpoint_from_bytes(&[2, 1, 4]).rejected, 1);
        // 3 layers where the file holds 2: the first missing tensor is named
        let file = with_stored_config(seed_checkpoint(), "num_hidden_layers", 3).unwrap();
        let err = crate::model::checkpoint_from_bytes(&file).err().unwrap();
        assert!(err.to_string().contains("model.layers.2"), "{err}");
        assert_eq!(run_config_from_text(&[1, 2, 4]), FuzzOutcome { succeeded: 0, rejected: 1 });
    }

    #[test]
    fn the_seed_gguf_loads_and_runs() {
        // mode 1 with no overwrites, then each row order: the seed itself
        assert_eq!(run_gguf_from_bytes(&[1, 0, 0]), FuzzOutcome { succeeded: 3, rejected: 0 });
        assert_eq!(run_gguf_from_bytes(&[1, 0, 1]), FuzzOutcome { succeeded: 3, rejected: 0 });
        // cut after 100 bytes: refused by the reader
        assert_eq!(run_gguf_from_bytes(&[3, 0, 100]), FuzzOutcome { succeeded: 0, rejected: 1 });
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = run_layer_from_bytes(&data);
        }

        #[test]
        fn hostile_checkpoints_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = run_checkpoint_from_bytes(&data);
        }

        #[test]
        fn hostile_gguf_files_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = run_gguf_from_bytes(&data);
        }

        #[test]
        fn hostile_configs_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = run_config_from_text(&data);
        }
    }
}
