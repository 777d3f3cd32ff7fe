//! The pretrained SmolLM2-135M-Instruct (GGUF, Q4_1) against a float64 reference: the logits of
//! an independent torch forward pass over the same dequantized weights, and its greedy
//! continuations, token for token.
//!
//! The model is not in the repository (98 MB): `scripts/fetch-model` downloads it and prints its
//! path; these tests load `LLM_MODEL`, or the file where the script puts it
//! ([`model_path_from_env`]). Without it, each test prints one line saying so, and passes. The
//! reference (`tests/fixtures/gguf/smollm2-reference.json`) was written by
//! `scripts/reference_logits.py`.
//!
//! Each test loads the model once: about 1.1 GB of f64 weights.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use llm_from_scratch::gguf::{GgufRope, QuantizedLlama, load_gguf_llama, model_path_from_env};
use llm_from_scratch::model::{Decoder, Decoding, Sampling};
use llm_from_scratch::nn::{RopeLayout, SplitMix64};

/// The model's path, or `None` after saying on stderr how to get it.
fn model_path(test: &str) -> Option<PathBuf> {
    let path = model_path_from_env();
    if path.is_none() {
        // straight to the stream: the test harness captures `eprintln!` of a passing test
        let line = format!("{test}: skipped, no model file (run scripts/fetch-model, then set LLM_MODEL=<path>)\n");
        std::io::stderr().write_all(line.as_bytes()).ok();
    }
    path
}

fn load(path: &PathBuf, rope: GgufRope) -> Decoder {
    let start = Instant::now();
    let model = load_gguf_llama(path, rope).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    println!("loaded {} ({rope:?}) in {:.2} s", path.display(), start.elapsed().as_secs_f64());
    model
}

/// The logits `[V]` of the last position of `ids`.
fn last_logits(model: &Decoder, ids: &[usize]) -> Vec<f64> {
    let logits = model.forward(ids, [1, ids.len()]).unwrap().value().unwrap();
    let v = model.config().vocab_size;
    logits.as_slice()[(ids.len() - 1) * v..].to_vec()
}

/// One prompt of the reference: its ids, the logits at the fixture's indices, the top five and
/// the greedy continuation.
struct Prompt {
    name: String,
    ids: Vec<usize>,
    logits: Vec<f64>,
    top5: Vec<(usize, f64)>,
    greedy: Vec<usize>,
}

fn reference() -> (Vec<usize>, Vec<Prompt>) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf/smollm2-reference.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let indices = serde_json::from_value(json["indices"].clone()).unwrap();
    let prompts = json["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Prompt {
            name: p["name"].as_str().unwrap().to_string(),
            ids: serde_json::from_value(p["ids"].clone()).unwrap(),
            logits: serde_json::from_value(p["logits"].clone()).unwrap(),
            top5: serde_json::from_value(p["top5"].clone()).unwrap(),
            greedy: serde_json::from_value(p["greedy"].clone()).unwrap(),
        })
        .collect();
    (indices, prompts)
}

#[test]
fn real_model_logits_and_greedy_tokens_match_the_float64_reference() {
    let Some(path) = model_path("real_model_logits_and_greedy_tokens_match_the_float64_reference") else { return };
    let model = load(&path, GgufRope::AsStored);
    let c = model.config();
    assert_eq!((c.vocab_size, c.model_width, c.layers, c.query_heads, c.kv_heads), (49152, 576, 30, 9, 3));
    assert_eq!((c.head_width, c.ffn_width, c.max_positions, c.tie_embeddings), (64, 1536, 8192, true));
    assert_eq!((c.rope_base, c.rms_eps, c.rope_layout), (100_000.0, f64::from(1e-5f32), RopeLayout::AdjacentPairs));
    let (indices, prompts) = reference();
    for prompt in &prompts {
        let logits = last_logits(&model, &prompt.ids);
        // relative to the largest reference logit compared
        let scale = prompt.logits.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let gap = indices.iter().zip(&prompt.logits).fold(0.0f64, |m, (&i, &want)| m.max((logits[i] - want).abs()));
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        for (&(id, want), &got) in prompt.top5.iter().zip(&order) {
            assert_eq!(got, id, "{}: the top five differ", prompt.name);
            assert!((logits[id] - want).abs() <= 1e-9 * scale, "{}: top logit of {id}", prompt.name);
        }
        let started = Instant::now();
        let generated = model.generate(
            &prompt.ids,
            prompt.greedy.len(),
            Sampling::Greedy,
            Decoding::KvCache,
            &mut SplitMix64::new(0),
        );
        let generated = generated.unwrap().tokens;
        println!(
            "{} ({} tokens): max |ours − torch| / max |logit| = {:.2e}; top {:?}; {} greedy tokens in {:.2} s",
            prompt.name,
            prompt.ids.len(),
            gap / scale,
            prompt.top5[0],
            generated.len(),
            started.elapsed().as_secs_f64()
        );
        assert!(gap <= 1e-9 * scale, "{}: logits differ by {:e} relative", prompt.name, gap / scale);
        assert_eq!(generated, prompt.greedy, "{}: the greedy continuation differs", prompt.name);
    }
}

/// The peak resident memory of this process so far (`VmHWM`, Linux), for the message below.
fn peak_resident() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmHWM:")).map_or("unknown".to_string(), |v| v.trim().to_string())
}

/// Loading alone, to measure it: `/usr/bin/time -v` on this test (`--exact real_model_loads`).
#[test]
fn real_model_loads() {
    let Some(path) = model_path("real_model_loads") else { return };
    let model = load(&path, GgufRope::AsStored);
    let weights = model.parameter_count();
    assert_eq!(weights, 134_515_008);
    println!(
        "{weights} parameters ({:.2} GB of f64); peak resident after loading {}",
        weights as f64 * 8e-9,
        peak_resident()
    );
    let started = Instant::now();
    let logits = last_logits(&model, &[1, 9690, 198]);
    println!("a 3-token forward in {:.2} s; peak resident {}", started.elapsed().as_secs_f64(), peak_resident());
    assert!(logits.iter().all(|x| x.is_finite()));
}

#[test]
fn real_model_both_row_orders_give_the_same_logits() {
    let Some(path) = model_path("real_model_both_row_orders_give_the_same_logits") else { return };
    let (_, prompts) = reference();
    let ids = &prompts.iter().find(|p| p.name == "chatml").unwrap().ids;
    // one model in memory at a time: the logits of the first are kept, the model dropped
    let stored = last_logits(&load(&path, GgufRope::AsStored), ids);
    let hf = last_logits(&load(&path, GgufRope::HuggingFace), ids);
    let scale = hf.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let gap = stored.iter().zip(&hf).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())) / scale;
    println!("as stored vs Hugging Face rows: max relative difference {gap:.2e} over {} logits", hf.len());
    assert!(gap <= 1e-12, "{gap:e}");
}

/// Generating from the file's blocks gives the same bits as the f64 decoder: a prompt's prefill
/// (every position's logits, the head included), one token at a time, then two at once (the
/// head's table striped for two rows), in both row orders.
#[test]
fn real_model_quantized_decoding_is_bitwise_the_f64_decoding() {
    let Some(path) = model_path("real_model_quantized_decoding_is_bitwise_the_f64_decoding") else { return };
    let (_, prompts) = reference();
    let ids = &prompts.iter().find(|p| p.name == "chatml").unwrap().ids;
    let steps: [&[usize]; 5] = [ids, &[28], &[3_000], &[17], &[5, 900]];
    for rope in [GgufRope::AsStored, GgufRope::HuggingFace] {
        let quantized = QuantizedLlama::load(&path, rope).unwrap();
        println!("{rope:?}: {:.1} MB of weights held in blocks", quantized.weight_bytes() as f64 * 1e-6);
        let mut caches = quantized.new_caches(1);
        let logits: Vec<_> = steps
            .iter()
            .map(|tokens| quantized.forward_cached(tokens, [1, tokens.len()], &mut caches).unwrap())
            .collect();
        // what a generator reads: each step's last logits alone, bitwise the full pass's last row,
        // the caches moving alike; and two sequences at once
        let mut caches = quantized.new_caches(1);
        for (step, (tokens, full)) in steps.iter().zip(&logits).enumerate() {
            let last = quantized.forward_cached_last(tokens, [1, tokens.len()], &mut caches).unwrap();
            let v = last.len();
            assert_eq!(last.shape(), [1, 1, v]);
            let same =
                last.as_slice().iter().zip(&full.as_slice()[full.len() - v..]).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{rope:?}, step {step}: the last logits alone differ from the full pass's last row");
        }
        let two: Vec<usize> = ids.iter().chain(ids.iter().rev()).copied().collect();
        let full = quantized.forward_cached(&two, [2, ids.len()], &mut quantized.new_caches(2)).unwrap();
        let last = quantized.forward_cached_last(&two, [2, ids.len()], &mut quantized.new_caches(2)).unwrap();
        let v = last.len() / 2;
        for (b, sequence) in full.as_slice().chunks(full.len() / 2).enumerate() {
            let row = &last.as_slice()[b * v..(b + 1) * v];
            let same = row.iter().zip(&sequence[sequence.len() - v..]).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{rope:?}, sequence {b} of two: the last logits alone differ");
        }
        drop(quantized);
        let dense = load(&path, rope);
        let mut caches = dense.new_caches(1);
        let expected: Vec<_> =
            steps.iter().map(|tokens| dense.forward_cached(tokens, [1, tokens.len()], &mut caches).unwrap()).collect();
        for (step, (got, want)) in logits.iter().zip(&expected).enumerate() {
            let same = got.as_slice().iter().zip(want.as_slice()).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{rope:?}, step {step} (0: the prompt's prefill): the logits differ");
        }
    }
}

/// Decoding past 256 positions, where a step attends each kv head's three query heads together
/// (`attention::cached_forward`'s grouped tasks): the last tokens' logits equal those of one
/// full pass over the same tokens (whose attention is the tiled kernel's) to 1e-12 of the largest.
#[test]
fn real_model_decoding_over_a_long_cache_gives_the_full_pass_logits() {
    let Some(path) = model_path("real_model_decoding_over_a_long_cache_gives_the_full_pass_logits") else { return };
    let (_, prompts) = reference();
    let chat = &prompts.iter().find(|p| p.name == "chatml").unwrap().ids;
    let ids: Vec<usize> = chat.iter().cycle().take(260).copied().collect();
    let quantized = QuantizedLlama::load(&path, GgufRope::AsStored).unwrap();
    let full = quantized.forward_cached(&ids, [1, ids.len()], &mut quantized.new_caches(1)).unwrap();
    let v = full.len() / ids.len();
    let mut caches = quantized.new_caches(1);
    quantized.forward_cached(&ids[..257], [1, 257], &mut caches).unwrap();
    let mut worst = 0.0f64;
    for position in 257..ids.len() {
        let step = quantized.forward_cached(&ids[position..=position], [1, 1], &mut caches).unwrap();
        let want = &full.as_slice()[position * v..(position + 1) * v];
        let largest = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let diff = step.as_slice().iter().zip(want).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        worst = worst.max(diff / largest);
    }
    println!("positions 257–259 decoded over the cache: max |decoded − full pass| / max |logit| = {worst:.2e}");
    assert!(worst < 1e-12, "{worst:e}");
}
