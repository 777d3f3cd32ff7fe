//! The configuration as JSON: Hugging Face's `config.json` fields, read with every field checked
//! and named in errors, and written into our checkpoints' metadata.

use serde_json::{Map, Value, json};

use super::CheckpointError;
use crate::attention::SlidingWindow;
use crate::model::DecoderConfig;
use crate::nn::RopeLayout;

/// The JSON of `config` stored in our checkpoints: Hugging Face's field names plus ours.
pub(crate) fn config_to_json(c: &DecoderConfig) -> String {
    let mut fields = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.model_width,
        "num_hidden_layers": c.layers,
        "num_attention_heads": c.query_heads,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_width,
        "intermediate_size": c.ffn_width,
        "hidden_act": "silu",
        "max_position_embeddings": c.max_positions,
        "rope_theta": c.rope_base,
        "rms_norm_eps": c.rms_eps,
        "tie_word_embeddings": c.tie_embeddings,
        "rope_layout": match c.rope_layout {
            RopeLayout::SplitHalves => "split_halves",
            RopeLayout::AdjacentPairs => "adjacent_pairs",
        },
    });
    if let (Some(window), Value::Object(map)) = (c.window, &mut fields) {
        let (w, convention) = match window {
            SlidingWindow::Exclusive(w) => (w, "exclusive"),
            SlidingWindow::Inclusive(w) => (w, "inclusive"),
        };
        map.insert("sliding_window".to_string(), json!(w));
        map.insert("sliding_window_convention".to_string(), json!(convention));
    }
    fields.to_string()
}

/// The fields of one JSON object, with the file and the path of the object for messages.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    source: &'a str,
    prefix: &'static str,
}

impl<'a> Fields<'a> {
    fn error(&self, key: &str, reason: impl Into<String>) -> CheckpointError {
        CheckpointError::Config {
            source_name: self.source.to_string(),
            field: format!("{}{key}", self.prefix),
            reason: reason.into(),
        }
    }

    /// The value of `key`; `null` counts as absent.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn count(&self, key: &str) -> Result<Option<usize>, CheckpointError> {
        self.get(key)
            .map(|v| {
                v.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| self.error(key, format!("= {v} is not a count")))
            })
            .transpose()
    }

    fn required_count(&self, key: &str) -> Result<usize, CheckpointError> {
        self.count(key)?.ok_or_else(|| self.error(key, "is missing"))
    }

    fn number(&self, key: &str) -> Result<Option<f64>, CheckpointError> {
        self.get(key).map(|v| v.as_f64().ok_or_else(|| self.error(key, format!("= {v} is not a number")))).transpose()
    }

    fn flag(&self, key: &str) -> Result<Option<bool>, CheckpointError> {
        self.get(key).map(|v| v.as_bool().ok_or_else(|| self.error(key, format!("= {v} is not a boolean")))).transpose()
    }

    fn text(&self, key: &str) -> Result<Option<&'a str>, CheckpointError> {
        self.get(key).map(|v| v.as_str().ok_or_else(|| self.error(key, format!("= {v} is not a string")))).transpose()
    }

    /// Refuses `key` unless it is absent or one of `allowed`.
    fn only(&self, key: &str, allowed: &[&str]) -> Result<Option<&'a str>, CheckpointError> {
        match self.text(key)? {
            Some(found) if !allowed.contains(&found) => {
                Err(self.error(key, format!("= \"{found}\" is not supported (only {allowed:?})")))
            }
            found => Ok(found),
        }
    }

    /// Refuses a feature this decoder does not have.
    fn not_enabled(&self, key: &str) -> Result<(), CheckpointError> {
        match self.get(key) {
            None | Some(Value::Bool(false)) => Ok(()),
            Some(v) => Err(self.error(key, format!("= {v} is not supported by this decoder"))),
        }
    }
}

/// The configuration in `text` (a `config.json`, or our metadata); see [`hf_llama_config`].
pub(crate) fn config_from_json(text: &str, source: &str) -> Result<DecoderConfig, CheckpointError> {
    let whole = |reason: String| CheckpointError::Config {
        source_name: source.to_string(),
        field: "the text".to_string(),
        reason,
    };
    let root: Value = serde_json::from_str(text).map_err(|e| whole(format!("is not JSON: {e}")))?;
    let map = root.as_object().ok_or_else(|| whole("is not a JSON object".to_string()))?;
    let top = Fields { map, source, prefix: "" };
    let vocab = top.required_count("vocab_size")?;
    let width = top.required_count("hidden_size")?;
    let layers = top.required_count("num_hidden_layers")?;
    let heads = top.required_count("num_attention_heads")?;
    let ffn = top.required_count("intermediate_size")?;
    let kv_heads = top.count("num_key_value_heads")?.unwrap_or(heads);
    let head_width = top.count("head_dim")?.unwrap_or(width.checked_div(heads).unwrap_or(0));
    let max_positions = top.count("max_position_embeddings")?.unwrap_or(2048);
    top.only("hidden_act", &["silu"])?;
    for feature in ["attention_bias", "mlp_bias", "rope_scaling"] {
        top.not_enabled(feature)?;
    }
    // transformers ≥ 5 keeps RoPE's settings in `rope_parameters`, earlier versions at the top
    let rope = match top.get("rope_parameters") {
        Some(Value::Object(map)) => Fields { map, source, prefix: "rope_parameters." },
        Some(v) => return Err(top.error("rope_parameters", format!("= {v} is not an object"))),
        None => Fields { map, source, prefix: "" },
    };
    rope.only("rope_type", &["default"])?;
    let rope_base = rope.number("rope_theta")?.unwrap_or(10_000.0);
    let layout = match top.only("rope_layout", &["split_halves", "adjacent_pairs"])? {
        Some("adjacent_pairs") => RopeLayout::AdjacentPairs,
        _ => RopeLayout::SplitHalves,
    };
    let mut config = DecoderConfig::new(vocab, width, layers, heads)
        .with_kv_heads(kv_heads)
        .with_head_width(head_width)
        .with_ffn_width(ffn)
        .with_rope(max_positions, rope_base)
        .with_rope_layout(layout)
        .with_rms_eps(top.number("rms_norm_eps")?.unwrap_or(1e-6))
        .with_tied_embeddings(top.flag("tie_word_embeddings")?.unwrap_or(false));
    if let Some(w) = top.count("sliding_window")? {
        config = config.with_window(match top.only("sliding_window_convention", &["exclusive", "inclusive"])? {
            Some("inclusive") => SlidingWindow::Inclusive(w),
            _ => SlidingWindow::Exclusive(w),
        });
    }
    config.validate()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hf_llama_config;

    #[test]
    fn config_round_trips_through_json() {
        let config = DecoderConfig::new(11, 12, 3, 6)
            .with_kv_heads(2)
            .with_head_width(4)
            .with_ffn_width(20)
            .with_rope(40, 123.456)
            .with_rms_eps(1.0 / 3.0)
            .with_rope_layout(RopeLayout::AdjacentPairs)
            .with_window(SlidingWindow::Inclusive(5));
        assert_eq!(config_from_json(&config_to_json(&config), "test").unwrap(), config);
    }

    #[test]
    fn config_errors_name_the_field() {
        let base = r#""vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2"#;
        let err = hf_llama_config(&format!("{{{base}}}")).unwrap_err();
        assert_eq!(err.to_string(), "checkpoint config: config.json: intermediate_size is missing");
        let err = hf_llama_config(&format!("{{{base}, \"intermediate_size\": -3}}")).unwrap_err();
        assert_eq!(err.to_string(), "checkpoint config: config.json: intermediate_size = -3 is not a count");
        let scaled =
            format!("{{{base}, \"intermediate_size\": 8, \"rope_parameters\": {{\"rope_type\": \"llama3\"}}}}");
        let err = hf_llama_config(&scaled).unwrap_err();
        assert!(err.to_string().contains("rope_parameters.rope_type = \"llama3\" is not supported"), "{err}");
        let biased = format!("{{{base}, \"intermediate_size\": 8, \"attention_bias\": true}}");
        assert!(hf_llama_config(&biased).unwrap_err().to_string().contains("attention_bias = true"));
        assert!(matches!(hf_llama_config("{\"vocab_size\": "), Err(CheckpointError::Config { .. })));
        assert!(matches!(hf_llama_config("[1]"), Err(CheckpointError::Config { .. })));
    }
}
