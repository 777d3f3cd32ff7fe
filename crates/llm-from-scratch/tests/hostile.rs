//! Hostile input that once aborted the process or leaked what a query cannot see.
//!
//! Two kinds of test:
//! - **Allocation cases** run one at a time in a child process (this test binary, started again
//!   with `HOSTILE_CASE=<name>`) under an address-space limit of 1 GiB on Linux. A call that tries
//!   to allocate what its arguments cannot justify aborts the child (Rust aborts when an
//!   allocation fails) and the parent reports the case by name; a call that panics fails the
//!   same way. Each case must end in a typed error, or in an answer computed within the limit.
//! - **Poisoned tokens**: a NaN or ±∞ in a token that a query cannot see (a future token, a
//!   padding token) must leave that query's output — and, for keys hidden from every query, every
//!   gradient — exactly what it is with ordinary numbers there, on the explicit and the tiled
//!   kernel alike.
//!
//! The GGUF cases edit the tiny fixture of `tests/fixtures/gguf/` where a key or a tensor info is
//! (`tests/gguf_edit/`). `docs/reliability.md` lists what was tried and what holds.

mod gguf_edit;

use std::path::PathBuf;
use std::process::Command;

use gguf_edit::{put_in_value, set_array_len, set_dim, set_offset, set_type, set_u32, tiny};
use llm_from_scratch::attention::{
    AttentionConfig, AttentionError, AttentionOptions, AttentionPath, GroupedQueryAttention, KvCache, LatentAttention,
    LatentConfig, SlidingWindow, Visibility, generate_with_cache, grouped_attention, tiled_attention,
};
use llm_from_scratch::gguf::{Gguf, GgufError, GgufRope, gguf_llama_from_bytes};
use llm_from_scratch::model::{
    AdamW, AdamWConfig, CheckpointError, Decoder, DecoderConfig, ModelError, hf_llama_config, load_hf_llama,
};
use llm_from_scratch::nn::{Linear, NamedParameter, NamedParameters, QkvProjections, RotaryEmbedding, SplitMix64};
use llm_from_scratch::{Mask, Tensor, TensorValue, constant, parameter};

/// The address-space limit of a child, in KiB (1 GiB): far below any of the allocations the
/// cases used to attempt (16 GiB to 1 TiB), far above what they need now.
const CHILD_LIMIT_KIB: u64 = 1 << 20;

/// One allocation case: `Ok` when the call ended as it must.
type Case = fn() -> Result<(), String>;

fn expect_err<T, E: std::fmt::Display>(what: &str, result: Result<T, E>) -> Result<(), String> {
    match result {
        Ok(_) => Err(format!("{what}: accepted")),
        Err(e) => {
            eprintln!("{what}: {e}");
            Ok(())
        }
    }
}

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama")
}

/// The fixture's weights beside an edited `config.json`, in a fresh folder.
fn fixture_with_config(tag: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hostile-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture().join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let config = std::fs::read_to_string(fixture().join("config.json")).unwrap();
    std::fs::write(dir.join("config.json"), edit(config)).unwrap();
    dir
}

fn small_layer() -> GroupedQueryAttention {
    let config = AttentionConfig::new(4, 2, 1, 2).with_rope(8, 100.0);
    GroupedQueryAttention::new("g", config, &mut SplitMix64::new(0)).unwrap()
}

const CASES: &[(&str, Case)] = &[
    ("a causal mask of 2^40 flags", || expect_err("Mask::causal", Mask::causal(1 << 20, 1 << 20, 0))),
    ("a decoder of 2^40 layers", || {
        expect_err("Decoder::new", Decoder::new(DecoderConfig::new(8, 8, 1 << 40, 2), &mut SplitMix64::new(0)))
    }),
    ("a decoder config of a trillion layers", || {
        expect_err("validate", DecoderConfig::new(8, 8, 1_000_000_000_000, 2).validate())
    }),
    ("generate_with_cache for usize::MAX steps", || {
        let prompt = Tensor::new(&[1, 1, 4], vec![0.1; 4]).unwrap();
        expect_err("steps", generate_with_cache(&small_layer(), &prompt, usize::MAX, 2, |r| r.to_vec()))
    }),
    ("generate_with_cache for 2^40 steps", || {
        let prompt = Tensor::new(&[1, 1, 4], vec![0.1; 4]).unwrap();
        expect_err("steps", generate_with_cache(&small_layer(), &prompt, 1 << 40, 2, |r| r.to_vec()))
    }),
    ("a config.json of a billion positions", || {
        // validating the config built RoPE tables of 16 GiB; now it allocates nothing
        let config = std::fs::read_to_string(fixture().join("config.json")).unwrap();
        let far = config.replace("\"max_position_embeddings\": 32", "\"max_position_embeddings\": 1073741824");
        let parsed = hf_llama_config(&far).map_err(|e| e.to_string())?;
        (parsed.max_positions == 1 << 30).then_some(()).ok_or_else(|| "capacity not read".to_string())
    }),
    ("a checkpoint with a billion positions runs", || {
        // the model loads and runs; RoPE's tables stay at their fixed size
        let dir = fixture_with_config("positions", |c| {
            c.replace("\"max_position_embeddings\": 32", "\"max_position_embeddings\": 1073741824")
        });
        let model = load_hf_llama(&dir).map_err(|e| e.to_string());
        std::fs::remove_dir_all(&dir).ok();
        let logits = model?.forward(&[1, 2, 3], [1, 3]).and_then(|l| Ok(l.value()?)).map_err(|e| e.to_string())?;
        logits.all_finite().then_some(()).ok_or_else(|| "non-finite logits".to_string())
    }),
    ("a checkpoint config of a trillion layers", || {
        let dir = fixture_with_config("trillion", |c| {
            c.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000000000")
        });
        let result = load_hf_llama(&dir);
        std::fs::remove_dir_all(&dir).ok();
        expect_err("load_hf_llama", result)
    }),
    ("a checkpoint config of ten thousand layers beside a two-layer file", || {
        let dir =
            fixture_with_config("million", |c| c.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 10000"));
        let result = load_hf_llama(&dir);
        std::fs::remove_dir_all(&dir).ok();
        match result {
            Err(CheckpointError::Config { reason, .. }) if reason.contains("more than twice") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    }),
    ("a KV cache for a layer of 2^40 positions decodes", || {
        // the cache reserved every position at the first append: 2^40 · d_h values aborted
        let config = AttentionConfig::new(4, 2, 1, 2).with_rope(1 << 40, 100.0);
        let layer = GroupedQueryAttention::new("g", config, &mut SplitMix64::new(0)).map_err(|e| e.to_string())?;
        let mut cache = KvCache::for_layer(&layer, 1);
        for step in 0..3 {
            let x = TensorValue::leaf(Tensor::new(&[1, 1, 4], vec![0.1 * step as f64; 4]).unwrap(), false);
            layer.forward_cached(&x, &mut cache).map_err(|e| e.to_string())?;
        }
        (cache.len() == 3).then_some(()).ok_or_else(|| "three positions not cached".to_string())
    }),
    ("a RoPE of 2^40 positions rotates a far position", || {
        let rope = RotaryEmbedding::new(64, 1 << 40, 10_000.0).map_err(|e| e.to_string())?;
        let x = constant(&[1, 64], &[1.0; 64]).unwrap();
        let y = rope.rotate(&x, (1 << 40) - 1).and_then(|y| Ok(y.value()?)).map_err(|e| e.to_string())?;
        y.all_finite().then_some(()).ok_or_else(|| "non-finite rotation".to_string())
    }),
    // GGUF files: every size the file states is held against its length before anything is
    // allocated; each lie below ends in a typed error within the limit
    ("gguf files cut at every length", || {
        let (bytes, refused) = (tiny(), |e: &GgufError| !matches!(e, GgufError::Model(_)));
        (0..600).chain((600..tiny().len()).step_by(97)).try_for_each(|n| expect_gguf("cut", &bytes[..n], refused))
    }),
    ("a gguf tensor of an unknown type", || {
        let bytes = edit_gguf(|b| set_type(b, "blk.0.attn_q.weight", 99));
        expect_gguf("type", &bytes, |e| matches!(e, GgufError::UnknownTensorType { type_id: 99, .. }))
    }),
    ("gguf tensors of 2^63 · 2^63 and of 2^31 · 2^31 values", || {
        let huge = |d| edit_gguf(|b| (0..2).for_each(|axis| set_dim(b, "blk.0.attn_q.weight", axis, d)));
        expect_gguf("overflow", &huge(1 << 63), |e| matches!(e, GgufError::TensorDims { .. }))?;
        expect_gguf("size", &huge(1 << 31), |e| matches!(e, GgufError::TensorData { .. }))
    }),
    ("a gguf tensor offset past the end", || {
        let bytes = edit_gguf(|b| set_offset(b, "token_embd.weight", u64::MAX - 31));
        expect_gguf("offset", &bytes, |e| matches!(e, GgufError::TensorData { .. }))
    }),
    ("gguf arrays of 2^40 strings and 2^60 bytes, a string of 2^62 bytes, 2^60 keys", || {
        let too_many = |e: &GgufError| matches!(e, GgufError::CountTooLarge { .. });
        expect_gguf("strings", &edit_gguf(|b| set_array_len(b, "tokenizer.ggml.tokens", 1 << 40)), too_many)?;
        expect_gguf("bytes", &edit_gguf(|b| set_array_len(b, "fixture.bytes", 1 << 60)), too_many)?;
        expect_gguf("keys", &edit_gguf(|b| b[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes())), too_many)?;
        let bytes = edit_gguf(|b| put_in_value(b, "general.name", 0, &(1u64 << 62).to_le_bytes()));
        expect_gguf("string", &bytes, |e| matches!(e, GgufError::Truncated { .. }))
    }),
    ("a gguf model of another architecture", || {
        let bytes = edit_gguf(|b| put_in_value(b, "general.architecture", 8, b"gpt2x"));
        expect_gguf("architecture", &bytes, |e| matches!(e, GgufError::Architecture { .. }))
    }),
    ("gguf models of 2^31 layers and of width 2^30 beside a two-layer file", || {
        let too_big = |e: &GgufError| matches!(e, GgufError::Model(_) | GgufError::TooManyParameters { .. });
        expect_gguf("layers", &edit_gguf(|b| set_u32(b, "llama.block_count", 1 << 31)), too_big)?;
        let wide = edit_gguf(|b| {
            set_u32(b, "llama.embedding_length", 1 << 30);
            set_u32(b, "llama.rope.dimension_count", 1 << 28)
        });
        expect_gguf("width", &wide, too_big)
    }),
];

/// The tiny GGUF fixture with `edit` applied.
fn edit_gguf(edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut bytes = tiny();
    edit(&mut bytes);
    bytes
}

/// `bytes` must be refused — by the reader, or by the mapping onto a decoder — with an error that
/// `expected` accepts.
fn expect_gguf(what: &str, bytes: &[u8], expected: impl Fn(&GgufError) -> bool) -> Result<(), String> {
    match Gguf::parse(bytes).and_then(|_| gguf_llama_from_bytes(bytes, GgufRope::AsStored)) {
        Err(e) if expected(&e) => Ok(()),
        Err(e) => Err(format!("{what}: unexpected error {e}")),
        Ok(_) => Err(format!("{what}: accepted")),
    }
}

/// Runs the case named by `HOSTILE_CASE` when this binary is a child; does nothing otherwise.
#[test]
fn child_case() {
    let Ok(name) = std::env::var("HOSTILE_CASE") else { return };
    let (_, case) = CASES.iter().find(|(n, _)| *n == name).expect("a known case");
    if let Err(message) = case() {
        panic!("{name}: {message}");
    }
}

#[test]
fn every_allocation_case_ends_in_a_typed_error_within_the_memory_limit() {
    let exe = std::env::current_exe().unwrap();
    let mut failed = Vec::new();
    for (name, _) in CASES {
        let mut command = if cfg!(target_os = "linux") {
            let mut c = Command::new("sh");
            c.arg("-c").arg(format!("ulimit -v {CHILD_LIMIT_KIB} && exec \"$0\" \"$@\"")).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let output = command
            .args(["child_case", "--exact", "--nocapture", "--test-threads=1"])
            .env("HOSTILE_CASE", name)
            .env("RAYON_NUM_THREADS", "2")
            .output()
            .unwrap();
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
            failed.push(format!(
                "{name}: {} — {}",
                output.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ));
        }
    }
    assert!(failed.is_empty(), "cases that did not end in a typed error:\n{}", failed.join("\n"));
}

#[test]
fn parts_with_biases_the_config_does_not_have_are_refused() {
    let mut rng = SplitMix64::new(3);
    let (d, h, g, dh) = (8, 2, 1, 4);
    let build = |bias: bool, rng: &mut SplitMix64| {
        let qkv = QkvProjections::with_widths("a", d, h * dh, g * dh, bias, rng).unwrap();
        let output = Linear::new("a.output", h * dh, d, bias, rng).unwrap();
        (qkv, output)
    };
    let config = AttentionConfig::new(d, h, g, dh).with_rope(8, 100.0);
    let (qkv, output) = build(true, &mut rng);
    let err = GroupedQueryAttention::from_parts("a", config.clone(), qkv, output).unwrap_err();
    assert!(matches!(err, AttentionError::BiasMismatch { config: false, .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "attention parameters: the configuration says bias = false but the query/key/value projections has biases"
    );
    let (qkv, output) = build(false, &mut rng);
    let err = GroupedQueryAttention::from_parts("a", config.clone().with_bias(true), qkv, output).unwrap_err();
    assert!(matches!(err, AttentionError::BiasMismatch { config: true, .. }), "{err}");
    // matching parts: the two parameter counts agree
    let (qkv, output) = build(true, &mut rng);
    let layer = GroupedQueryAttention::from_parts("a", config.clone().with_bias(true), qkv, output).unwrap();
    assert_eq!(layer.parameter_count(), layer.config().parameter_count());
}

#[test]
fn adamw_refuses_a_nan_gradient_and_changes_nothing() {
    let p = parameter(&[2], &[1.0, 2.0]).unwrap();
    let params = NamedParameters::try_new(vec![NamedParameter::new("w", p.clone())]).unwrap();
    let mut adamw = AdamW::new(AdamWConfig::default(), &params).unwrap();
    let err = adamw.update(&params, &[Tensor::new(&[2], vec![f64::NAN, 0.0]).unwrap()], 0.1).unwrap_err();
    assert!(matches!(err, ModelError::NonFiniteParameterGradient { index: 0, .. }), "{err}");
    assert_eq!(p.value().unwrap().as_slice(), &[1.0, 2.0]);
    assert_eq!(adamw.steps(), 0);
}

// ---- poisoned tokens -------------------------------------------------------------------------

fn random(shape: &[usize], seed: u64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    (0..shape.iter().product()).map(|_| rng.uniform(-1.0, 1.0)).collect()
}

fn close(a: &Tensor, b: &Tensor) -> bool {
    a.shape() == b.shape()
        && a.as_slice().iter().zip(b.as_slice()).all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + y.abs()))
}

/// What one attention call produced: the output and the gradients of `q`, `k`, `v` (and sinks).
struct Run {
    output: Tensor,
    grads: Vec<Tensor>,
}

/// Kernel-level attention of `q [B,H,T,d]` over `k, v [B,G,T,d]` whose token `poisoned` holds
/// `poison` in its keys and values, on the explicit or the tiled kernel.
fn kernel_run(kernel: AttentionPath, vis: &Visibility, sinks: bool, poisoned: usize, poison: f64) -> Run {
    let (b, h, g, t, d) = (2, 4, 2, 70, 3); // T past one block of 64, H/G = 2
    let q = parameter(&[b, h, t, d], &random(&[b, h, t, d], 1)).unwrap();
    let (mut k, mut v) = (random(&[b, g, t, d], 2), random(&[b, g, t, d], 3));
    for lane in 0..b * g {
        let row = (lane * t + poisoned) * d;
        k[row..row + d].fill(poison);
        v[row..row + d].fill(poison);
    }
    let (k, v) = (parameter(&[b, g, t, d], &k).unwrap(), parameter(&[b, g, t, d], &v).unwrap());
    let sink = sinks.then(|| parameter(&[h], &[0.5, -1.0, 0.0, 2.0]).unwrap());
    let output = match kernel {
        AttentionPath::Explicit => grouped_attention(&q, &k, &v, sink.as_ref(), vis).unwrap().output().clone(),
        AttentionPath::Tiled => tiled_attention(&q, &k, &v, sink.as_ref(), vis).unwrap(),
    };
    let upstream = Tensor::new(output.shape(), random(output.shape(), 4)).unwrap();
    let grads = output.backward_with(&upstream).unwrap();
    let mut list = vec![q, k, v];
    list.extend(sink);
    Run { output: output.value().unwrap(), grads: list.iter().map(|x| grads.get(x).unwrap().clone()).collect() }
}

#[test]
fn a_poisoned_padding_token_changes_no_output_and_no_gradient() {
    let (b, t, poisoned) = (2, 70, 5);
    let padding: Vec<bool> = (0..b * t).map(|i| i % t == poisoned).collect();
    let windows = [None, Some(SlidingWindow::Inclusive(9)), Some(SlidingWindow::Exclusive(40))];
    for kernel in [AttentionPath::Explicit, AttentionPath::Tiled] {
        for window in windows {
            for sinks in [false, true] {
                let vis = Visibility { key_padding: Some(padding.clone()), window, ..Visibility::default() };
                let clean = kernel_run(kernel, &vis, sinks, poisoned, 0.75);
                for poison in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                    let run = kernel_run(kernel, &vis, sinks, poisoned, poison);
                    let what = format!("{kernel:?} {window:?} sinks {sinks} poison {poison}");
                    assert!(run.output.all_finite() && close(&run.output, &clean.output), "{what}: output");
                    for (got, want) in run.grads.iter().zip(&clean.grads) {
                        assert!(got.all_finite() && close(got, want), "{what}: gradient");
                    }
                }
            }
        }
    }
}

#[test]
fn a_poisoned_future_token_changes_no_earlier_output() {
    let (t, poisoned) = (70, 66);
    for kernel in [AttentionPath::Explicit, AttentionPath::Tiled] {
        for window in [None, Some(SlidingWindow::Inclusive(9))] {
            let vis = Visibility { window, ..Visibility::default() };
            let clean = kernel_run(kernel, &vis, true, poisoned, 0.75);
            let run = kernel_run(kernel, &vis, true, poisoned, f64::NAN);
            // rows before the poisoned token, in every lane, are those of the clean run
            for (lane, (got, want)) in
                run.output.as_slice().chunks(t * 3).zip(clean.output.as_slice().chunks(t * 3)).enumerate()
            {
                let (got, want) = (&got[..poisoned * 3], &want[..poisoned * 3]);
                assert!(got.iter().all(|x| x.is_finite()), "{kernel:?} {window:?} lane {lane}");
                assert!(got.iter().zip(want).all(|(x, y)| (x - y).abs() <= 1e-12), "{kernel:?} {window:?} lane {lane}");
            }
        }
    }
}

/// A layer's output rows for an input whose token 3 of 4 is NaN, and for the first three tokens alone.
fn layer_rows(layer: &GroupedQueryAttention) -> (Tensor, Tensor) {
    let mut x = random(&[1, 4, 8], 5);
    let short = constant(&[1, 3, 8], &x[..24]).unwrap();
    x[24..].fill(f64::NAN);
    let full = layer.forward(&constant(&[1, 4, 8], &x).unwrap(), 0).unwrap().output.value().unwrap();
    (full, layer.forward(&short, 0).unwrap().output.value().unwrap())
}

#[test]
fn a_layer_with_a_nan_last_token_keeps_the_earlier_rows() {
    for kernel in [AttentionPath::Explicit, AttentionPath::Tiled] {
        for sinks in [false, true] {
            let config = AttentionConfig::new(8, 4, 2, 2).with_rope(16, 100.0).with_path(kernel).with_sinks(sinks);
            let layer = GroupedQueryAttention::new("p", config, &mut SplitMix64::new(7)).unwrap();
            let (full, short) = layer_rows(&layer);
            let rows = &full.as_slice()[..24];
            assert!(rows.iter().all(|x| x.is_finite()), "{kernel:?} sinks {sinks}");
            assert!(rows.iter().zip(short.as_slice()).all(|(x, y)| (x - y).abs() <= 1e-12), "{kernel:?}");
            assert!(full.as_slice()[24..].iter().all(|x| x.is_nan()), "the poisoned token's own row is NaN");
            // chunked prefill through the cache: the chunk's earlier rows stay finite too
            let mut cache = layer.new_cache(1);
            let mut x = random(&[1, 4, 8], 5);
            x[24..].fill(f64::NAN);
            let cached = layer.forward_cached(&constant(&[1, 4, 8], &x).unwrap(), &mut cache).unwrap();
            assert!(cached.as_slice()[..24].iter().zip(short.as_slice()).all(|(x, y)| (x - y).abs() <= 1e-12));
        }
    }
}

#[test]
fn padding_through_a_layer_hides_a_poisoned_token() {
    for kernel in [AttentionPath::Explicit, AttentionPath::Tiled] {
        let config = AttentionConfig::new(8, 4, 2, 2).with_rope(16, 100.0).with_path(kernel);
        let layer = GroupedQueryAttention::new("p", config, &mut SplitMix64::new(8)).unwrap();
        let padding = Mask::new(&[1, 5], vec![false, true, false, false, false]).unwrap();
        let run = |poison: f64| {
            let mut x = random(&[1, 5, 8], 6);
            x[8..16].fill(poison);
            let options = AttentionOptions { key_padding: Some(&padding), ..AttentionOptions::default() };
            layer.forward_with(&constant(&[1, 5, 8], &x).unwrap(), options).unwrap().output.value().unwrap()
        };
        let (clean, poisoned) = (run(0.5), run(f64::NAN));
        for row in [0, 2, 3, 4] {
            let (got, want) = (&poisoned.as_slice()[row * 8..][..8], &clean.as_slice()[row * 8..][..8]);
            assert!(got.iter().zip(want).all(|(x, y)| (x - y).abs() <= 1e-12), "{kernel:?} row {row}");
        }
    }
}

#[test]
fn latent_attention_keeps_rows_before_a_nan_token() {
    let config = LatentConfig {
        model_width: 8,
        heads: 2,
        head_width: 4,
        latent_width: 3,
        rope_width: 2,
        max_positions: 16,
        rope_base: 100.0,
    };
    let layer = LatentAttention::new(config, &mut SplitMix64::new(9)).unwrap();
    let mut x = random(&[1, 4, 8], 10);
    let short = layer.forward(&constant(&[1, 3, 8], &x[..24]).unwrap(), 0).unwrap().output.value().unwrap();
    x[24..].fill(f64::NAN);
    let x = constant(&[1, 4, 8], &x).unwrap();
    for out in [layer.forward(&x, 0).unwrap().output, layer.forward_absorbed(&x, 0).unwrap().output] {
        let out = out.value().unwrap();
        assert!(out.as_slice()[..24].iter().zip(short.as_slice()).all(|(a, b)| (a - b).abs() <= 1e-12));
    }
}
