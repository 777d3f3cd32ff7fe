//! Building and running attention layers from raw bytes: the entry point of the cargo-fuzz target
//! in `fuzz/` and of a property test that feeds it random bytes on every `cargo test`.
//!
//! No chapter uses it: it tests the promise every chapter relies on, that bad input gives a typed
//! error ([`crate::attention::AttentionError`]) and never a panic (`docs/reliability.md`).
//!
//! Every byte string is a valid request: the bytes pick sizes, options, positions and input values
//! (including NaN and ±∞). The contract under test is the crate's: each call returns `Ok` or a
//! typed error — it never panics, aborts or hangs.

use crate::attention::{
    AttentionConfig, AttentionKernel, AttentionOptions, GroupedQueryAttention, MultiHeadAttention, SlidingWindow,
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
    let kernel = if bytes.byte() % 2 == 0 { AttentionKernel::Explicit } else { AttentionKernel::Tiled };
    let mut rng = SplitMix64::new(u64::from(bytes.byte()));
    let mut config = AttentionConfig::new(d, h, g, dh).with_rope(capacity, base).with_kernel(kernel);
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

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = run_layer_from_bytes(&data);
        }
    }
}
