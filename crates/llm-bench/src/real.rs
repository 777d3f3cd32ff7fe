//! The real-model workloads: SmolLM2-135M-Instruct from its GGUF file, generating from the file's
//! blocks ([`QuantizedLlama`]), and the machine's streaming rate that bounds its decoding.
//!
//! The model has P = 134 515 008 weights: 30 blocks of 3 540 096 (`576·576·2 + 576·192·2` attention,
//! `3·576·1536` feed-forward) and the tied embedding table `49 152 × 576` = 28 311 552, which the
//! head reads again for every token. As stored (Q4_1 blocks, the table Q8_0) the weights are
//! 96.4 MB; in f64 they would be 1.08 GB.

use std::hint::black_box;
use std::path::Path;

use llm_from_scratch::gguf::{GgufRope, QuantizedLlama};
use llm_from_scratch::nn::SplitMix64;
use rayon::prelude::*;

use crate::measure::{Measurement, Runs, alternating_medians_ms, median_ms};

/// Blocks of runs in which a decoding workload's steps alternate with [`StreamPass`]es over as
/// many bytes ([`alternating_medians_ms`]): the two rates of its `of_stream` from the same minutes.
pub const BLOCKS: usize = 3;

/// Prompt tokens of `real-prefill`, and the cache `real-decode` decodes against.
pub const PROMPT: usize = 256;

/// The weights as stored in SmolLM2-135M-Instruct's Q4_1 file: the size of `stream`'s buffer
/// when no model is given.
const SMOLLM2_WEIGHT_BYTES: usize = 96_444_672;

/// `PROMPT` token ids below `vocab`, the same in every run (the cost does not depend on which).
fn prompt(vocab: usize) -> Vec<usize> {
    let mut rng = SplitMix64::new(38);
    (0..PROMPT).map(|_| rng.below(vocab as u64) as usize).collect()
}

fn load(path: &Path) -> Result<QuantizedLlama, String> {
    QuantizedLlama::load(path, GgufRope::AsStored).map_err(|e| e.to_string())
}

/// `real-prefill prefill`: the logits of all 256 positions of a prompt, from empty caches.
///
/// - Flops: products `2·P·T` = 68.9 GFLOP (the head is 14.5 of them: every position's logits),
///   attention over the causal triangle `30 · 2 · 2·H·(T(T+1)/2)·d_h` (H = 9, d_h = 64) = 2.3
///   GFLOP → 71.2 GFLOP; compute-bound: 0.32 s at 220 GFLOP/s.
/// - Bytes: the weights once, dequantized into `f64` a stripe of 96 outputs at a time (0.4 to 1.2
///   MB) by the thread that multiplies it, which reads it from its own cache.
pub fn prefill(path: &Path) -> Result<Vec<Measurement>, String> {
    const FLOPS: f64 = 71.2e9;
    let model = load(path)?;
    let ids = prompt(model.config().vocab_size);
    let runs = Runs { warmups: 1, timed: 5 };
    let ms = median_ms(runs, |i| -> Result<(), String> {
        let mut caches = model.new_caches(1);
        let logits = model.forward_cached(&ids, [1, PROMPT], &mut caches).map_err(|e| e.to_string())?;
        check_in_warmups(runs, i, logits.as_slice())
    })?;
    Ok(vec![Measurement::new("real-prefill", "prefill", ms).with_flops(FLOPS)])
}

/// `real-decode token`: one token against the cache of a 256-token prompt (positions 256 to 284
/// over the runs: each run decodes the next token, as generation does).
///
/// - Bytes: every weight once, as stored: 96.4 MB (the embedding row looked up is noise), plus
///   the cache, `30 · 2 · G·T·d_h · 8` = 23.6 MB at T = 256 (G = 3) → 120 MB per token.
/// - Flops: `2·P` = 0.27 GFLOP in the products, their dequantization about as much again: at 25
///   GB/s from memory the floor is 4.8 ms, bandwidth-bound.
///
/// The line also gives the rate over those bytes (`gbs`), its fraction of the streaming rate over
/// a buffer of the same size (`of_stream`: [`StreamPass`]es timed in [`BLOCKS`] blocks that
/// alternate with the tokens') and the peak resident memory of the process (`rss_mib`, Linux's
/// `VmHWM`): the model loaded, a prefill in chunks of 32 tokens, two tokens decoded, read before
/// the stream's buffer is made.
pub fn decode(path: &Path) -> Result<Vec<Measurement>, String> {
    let model = load(path)?;
    let config = model.config().clone();
    let ids = prompt(config.vocab_size);
    let mut caches = model.new_caches(1);
    for chunk in ids.chunks(32) {
        model.forward_cached(chunk, [1, chunk.len()], &mut caches).map_err(|e| e.to_string())?;
    }
    let cache_bytes = 2 * config.layers * config.kv_heads * PROMPT * config.head_width * 8;
    let bytes = (model.weight_bytes() + cache_bytes) as f64;
    let mut token =
        |i: usize| model.forward_cached(&[ids[i % ids.len()]], [1, 1], &mut caches).map_err(|e| e.to_string());
    // the peak resident memory of loading, the prefill and decoding, read before the stream's
    // buffer exists: the first two tokens, checked
    for i in 0..2 {
        check_finite(token(i)?.as_slice())?;
    }
    let rss = peak_resident_mib();
    let stream = StreamPass::new(model.weight_bytes() + cache_bytes);
    let runs = Runs { warmups: 2, timed: 7 };
    let (ms, stream_ms) = alternating_medians_ms(
        BLOCKS,
        [runs, runs],
        |i| token(i + 2).map(|logits| drop(black_box(logits))),
        |_| {
            stream.read();
            Ok(())
        },
    )?;
    let gbs = bytes / (ms * 1e6);
    let line = Measurement::new("real-decode", "token", ms).with_bandwidth(gbs, Some(stream.gbs(stream_ms)));
    Ok(vec![line.with_rss_mib(rss)])
}

/// `stream read`: a read-only pass over a buffer the size of what `real-decode` reads (the model's
/// weights as stored and its cache at 256 positions; 96.4 MB of weights without a model), split
/// over the pool's threads: the machine's own ceiling for a bandwidth-bound decode, measured in
/// the same run.
pub fn stream(path: Option<&Path>) -> Result<Vec<Measurement>, String> {
    let bytes = match path {
        Some(path) => {
            let model = load(path)?;
            let c = model.config();
            model.weight_bytes() + 2 * c.layers * c.kv_heads * PROMPT * c.head_width * 8
        }
        None => SMOLLM2_WEIGHT_BYTES,
    };
    let (ms, gbs) = stream_pass(bytes)?;
    Ok(vec![Measurement::new("stream", "read", ms).with_bandwidth(gbs, None)])
}

/// A buffer of `bytes` (rounded down to whole 8-byte words) and one read-only pass over it, in
/// parallel chunks of 1 MiB. The words are summed (as integers, wrapping), so the loads cannot be
/// skipped; the buffer is written when made, so its pages are resident.
pub struct StreamPass {
    buffer: Vec<u64>,
}

impl StreamPass {
    /// The buffer, every word written (on the pool's threads).
    pub fn new(bytes: usize) -> Self {
        Self { buffer: (0..(bytes / 8) as u64).into_par_iter().collect() }
    }

    /// The bytes one pass reads.
    pub fn bytes(&self) -> usize {
        self.buffer.len() * 8
    }

    /// One pass over the buffer.
    pub fn read(&self) {
        let sum = self
            .buffer
            .par_chunks(1 << 17)
            .map(|c| c.iter().fold(0u64, |s, &w| s.wrapping_add(w)))
            .reduce(|| 0, u64::wrapping_add);
        black_box(sum);
    }

    /// The rate in GB/s of a pass that took `ms`.
    pub fn gbs(&self, ms: f64) -> f64 {
        self.bytes() as f64 / (ms * 1e6)
    }
}

/// The median time of a [`StreamPass`] over `bytes`, and its rate.
fn stream_pass(bytes: usize) -> Result<(f64, f64), String> {
    let pass = StreamPass::new(bytes);
    let ms = median_ms(Runs { warmups: 3, timed: 21 }, |_| -> Result<(), String> {
        pass.read();
        Ok(())
    })?;
    Ok((ms, pass.gbs(ms)))
}

/// [`check_finite`] in run `i` if it is a warm-up: the timed runs time the model alone, as the
/// peer's lines do (a scan of a prefill's 12.6 M logits on one thread took about 1 % of its
/// samples), and compute what the warm-ups checked (the same prompt; the next tokens).
fn check_in_warmups(runs: Runs, i: usize, logits: &[f64]) -> Result<(), String> {
    if i < runs.warmups {
        return check_finite(logits);
    }
    black_box(logits);
    Ok(())
}

fn check_finite(logits: &[f64]) -> Result<(), String> {
    match logits.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(format!("logit {i} is {}", logits[i])),
        None => Ok(()),
    }
}

/// The peak resident memory of this process so far, in MiB (`VmHWM` of `/proc/self/status`), or
/// `None` where there is no such file.
fn peak_resident_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib =
        status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().strip_suffix("kB")?.trim().parse::<f64>().ok()?;
    Some(kib / 1024.0)
}
