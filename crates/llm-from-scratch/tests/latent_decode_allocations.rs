//! A decoding step of latent attention reads its cache in place: what it allocates grows with the
//! cache only by its scores and weights (`2·H` values per cached token and batch row), never by
//! a copy of the cached latents and rotated keys (`d_c + d_r` values per token and row).
//!
//! The binary counts the bytes every thread allocates (the kernels crate's `CountingAllocator`, the system
//! allocator adding each request's size to a counter), so it holds this one test alone: another test running
//! beside it would add its own allocations.

use llm_from_scratch::attention::{LatentAttention, LatentConfig, LatentKvCache};
use llm_from_scratch::kernels::allocator::CountingAllocator;
use llm_from_scratch::{Tensor, constant, nn::SplitMix64};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator::new();

const BATCH: usize = 2;
const WIDTH: usize = 16;

fn config() -> LatentConfig {
    // a wide latent against few heads, so a copy of the cache would stand far above the scores
    LatentConfig {
        model_width: WIDTH,
        heads: 2,
        head_width: 4,
        latent_width: 64,
        rope_width: 8,
        max_positions: 1100,
        rope_base: 100.0,
    }
}

fn tokens(count: usize, seed: u64) -> Tensor {
    let mut rng = SplitMix64::new(seed);
    Tensor::uniform(&[BATCH, count, WIDTH], -1.0, 1.0, &mut rng).unwrap()
}

/// A cache holding `len` tokens, filled in chunks of 100.
fn filled(layer: &LatentAttention, len: usize) -> LatentKvCache {
    let x = tokens(len, 1);
    let mut cache = layer.new_cache(BATCH);
    for start in (0..len).step_by(100) {
        let end = len.min(start + 100);
        let chunk = constant(x.shape(), x.as_slice()).unwrap().slice_axis(1, start, end).unwrap();
        layer.forward_cached(&chunk, &mut cache).unwrap();
    }
    cache
}

/// The fewest bytes one of three consecutive decoding steps requested (a step whose append
/// regrew a buffer requests that buffer once more; with room doubling, at most one of the three).
fn bytes_per_step(layer: &LatentAttention, cache: &mut LatentKvCache) -> usize {
    (0..3)
        .map(|step| {
            let token = constant(&[BATCH, 1, WIDTH], tokens(1, 10 + step).as_slice()).unwrap();
            let before = ALLOCATOR.requested();
            layer.forward_cached(&token, cache).unwrap();
            ALLOCATOR.requested() - before
        })
        .min()
        .unwrap_or(0)
}

#[test]
fn a_decoding_step_allocates_no_copy_of_the_cache() {
    let layer = LatentAttention::new(config(), &mut SplitMix64::new(2)).unwrap();
    let (short, long) = (100, 1000);
    let (mut short_cache, mut long_cache) = (filled(&layer, short), filled(&layer, long));
    bytes_per_step(&layer, &mut short_cache); // warm up: the thread pool and the RoPE tables
    let (at_short, at_long) = (bytes_per_step(&layer, &mut short_cache), bytes_per_step(&layer, &mut long_cache));
    let c = config();
    let f64_bytes = std::mem::size_of::<f64>();
    let grown = (long - short) * BATCH;
    // scores and weights: 2·H values per cached token and batch row (a little slack for the rest)
    let reading = grown * 2 * c.heads * f64_bytes;
    // one copy of what was cached in between: d_c + d_r values per token and batch row
    let one_copy = grown * c.cached_per_token() * f64_bytes;
    let growth = at_long.saturating_sub(at_short);
    assert!(
        growth <= reading + reading / 4 && growth < one_copy / 4,
        "a step at {long} cached tokens requested {at_long} bytes and at {short} {at_short}: {growth} more, \
         where the scores need {reading} and one copy of the cache would be {one_copy}"
    );
}
