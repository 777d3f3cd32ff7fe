//! The README's API sketch, kept compiling and checked: if the API changes, this fails first.

use llm_from_scratch::attention::{AttentionConfig, GroupedQueryAttention};
use llm_from_scratch::nn::SplitMix64;
use llm_from_scratch::{Tensor, constant};

#[test]
fn the_readme_sketch_runs() -> Result<(), Box<dyn std::error::Error>> {
    let mut rng = SplitMix64::new(0);
    // 8 query heads sharing 2 key/value heads of width 16, RoPE over 128 positions
    let config = AttentionConfig::new(64, 8, 2, 16).with_rope(128, 10_000.0);
    let layer = GroupedQueryAttention::new("layer0.attention", config, &mut rng)?;
    let x = constant(&[1, 5, 64], &vec![0.1; 320])?;
    let trace = layer.forward(&x, 0)?; // every intermediate, on the tape
    let grads = trace.output.backward_with(&Tensor::new(&[1, 5, 64], vec![1.0; 320])?)?;
    let mut cache = layer.new_cache(1); // generation: prefill, then decode
    let out = layer.forward_cached(&x, &mut cache)?;
    // what the sketch implies: gradients for every weight, and the cached prefill = the full pass
    assert_eq!(grads.len(), layer.parameters().len());
    assert!(out.max_abs_diff(&trace.output.value()?).is_some_and(|d| d < 1e-12));
    Ok(())
}
