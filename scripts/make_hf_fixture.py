#!/usr/bin/env python3
"""Writes the Hugging Face fixture of `crates/llm-from-scratch/tests/checkpoint.rs`.

A tiny random `LlamaForCausalLM` (vocab 32, hidden 16, 2 layers, 4 query heads sharing 2 key/value
heads of width 4, SwiGLU width 32, 32 positions, rope_theta 10000, rms_norm_eps 1e-6, untied head),
saved by `transformers` itself (`model.safetensors` in float32 + `config.json`), and the logits it
gives in float64 for two fixed token rows (`expected_logits.json`).

Run once, from the repository root, and commit the output (CI never runs Python):

    pip install torch transformers safetensors
    python3 scripts/make_hf_fixture.py

Tested with torch 2.15.0, transformers 5.24.0, safetensors 0.8.0. Random draws come from a fixed
seed, but a different torch version may draw other numbers: the Rust test only needs the files to
agree with each other, not with a previous run.

Why the model is patched before computing the expected logits: even after `model.to(float64)`,
transformers computes three things in float32 — RMSNorm (casts its input to float32), the RoPE
angles and their cos/sin, and the eager attention softmax. That leaves errors of about 1e-7 in the
logits, far above the 1e-10 the Rust test asks for. The patches below are the same formulas
without the casts, and a plain float64 re-implementation (`reference_logits`) checks to 1e-12 that
the patched model computes exactly LLaMA and nothing else.
"""

import json
import math
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "llm-from-scratch", "tests", "fixtures", "tiny-llama")
TOKENS = [
    [1, 5, 9, 31, 0, 7, 7, 2, 18, 25, 3, 11],
    [30, 4, 4, 4, 16, 8, 23, 1, 0, 12, 27, 6],
]


def rms_norm_f64(self, hidden_states):
    # LlamaRMSNorm.forward without the cast to float32
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def rotary_f64(self, x, position_ids):
    # LlamaRotaryEmbedding.forward with angles, cos and sin in float64
    dim = self.inv_freq.shape[0] * 2
    base = self.config.rope_parameters["rope_theta"]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = position_ids[..., None].to(torch.float64) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)  # split halves: coordinate i pairs with i + d_h/2
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def reference_logits(state, config, tokens):
    """LLaMA in plain float64 torch, from the state dict alone (weights `[out, in]`)."""
    d, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    d_h = d // heads
    eps, theta = config.rms_norm_eps, config.rope_parameters["rope_theta"]
    w = {k: v.to(torch.float64) for k, v in state.items()}

    def norm(x, gain):
        return gain * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    def rope(x):  # [B, h, T, d_h], split halves
        t = x.shape[2]
        inv_freq = 1.0 / (theta ** (torch.arange(0, d_h, 2, dtype=torch.float64) / d_h))
        angle = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq  # [T, d_h/2]
        cos, sin = angle.cos(), angle.sin()
        x1, x2 = x[..., : d_h // 2], x[..., d_h // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    ids = torch.tensor(tokens)
    b, t = ids.shape
    x = w["model.embed_tokens.weight"][ids]
    mask = torch.triu(torch.full((t, t), float("-inf"), dtype=torch.float64), diagonal=1)
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        h = norm(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(b, t, heads, d_h).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(b, t, kv_heads, d_h).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(b, t, kv_heads, d_h).transpose(1, 2)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        weights = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(d_h) + mask, dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(b, t, heads * d_h)
        x = x + context @ w[p + "self_attn.o_proj.weight"].T
        h = norm(x, w[p + "post_attention_layernorm.weight"])
        gate = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    return norm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def main():
    torch.manual_seed(31)
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    model = LlamaForCausalLM(config).eval()
    # the default initialisation (std 0.02, gains of ones) gives near-uniform logits: draw weights
    # large enough that attention is peaked and every gain matters
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.25 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)  # float32 weights, as a hub checkpoint

    # float64 from the saved (float32) weights: every weight is exactly representable
    model = model.to(torch.float64)
    ids = torch.tensor(TOKENS)
    with torch.no_grad():
        unpatched = model(ids).logits
        modeling_llama.LlamaRMSNorm.forward = rms_norm_f64
        modeling_llama.LlamaRotaryEmbedding.forward = rotary_f64
        # the eager softmax runs in float32; PyTorch's SDPA keeps float64
        model.config._attn_implementation = "sdpa"
        logits = model(ids).logits
        reference = reference_logits(model.state_dict(), config, TOKENS)
    gap = (logits - reference).abs().max().item()
    assert gap < 1e-12, f"patched transformers and the float64 reference differ by {gap}"
    print(f"max |patched - reference| = {gap:.3e}")
    print(f"max |unpatched - patched| = {(unpatched - logits).abs().max().item():.3e} (float32 inside)")
    expected = {
        "tokens": TOKENS,
        "shape": list(logits.shape),
        "logits": [float(v) for v in logits.flatten().tolist()],
    }
    with open(os.path.join(OUT, "expected_logits.json"), "w") as f:
        json.dump(expected, f)  # floats as repr(): the shortest text that reads back exactly
        f.write("\n")
    for name in sorted(os.listdir(OUT)):
        print(f"{name}: {os.path.getsize(os.path.join(OUT, name))} bytes")


if __name__ == "__main__":
    main()
