#!/usr/bin/env python3
"""Writes the float64 reference logits of the GGUF models, for the Rust tests to compare with.

A plain LLaMA forward pass in torch float64, written here from the equations and independent of
the Rust code: the weights are dequantized by the reference reader (`gguf.quants.dequantize`,
float32, widened to float64), the rows of W_Q and W_K are put back in Hugging Face order (llama.cpp's
converter interleaves them within each head) and RoPE rotates split halves (`rotate_half`).
Every step is float64: RMSNorm, the RoPE angles, softmax.

Into `crates/llm-from-scratch/tests/fixtures/gguf/`:

- `smollm2-reference.json` (needs the real model: `scripts/fetch-model`, or LLM_MODEL=<path>):
  SmolLM2-135M-Instruct (Q4_1). For four prompts given as token ids (made with the model's own
  tokenizer through `transformers`; the text is kept for readers): the logits of the last
  position at 256 fixed vocabulary indices, the top five (id, logit), and 16 greedy tokens.
- `tiny-expected.json`: every logit of the two tiny fixtures of `make_gguf_fixtures.py` for two
  token rows each.

Floats are written with repr(): the shortest text that reads back exactly. Run once, from the
repository root, and commit the output (CI never runs Python):

    pip install torch gguf numpy transformers
    python3 scripts/reference_logits.py

Tested with torch 2.15.0, gguf 0.19.0, numpy 2.4.6, transformers 5.24.0.
"""

import json
import os
import subprocess

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "crates", "llm-from-scratch", "tests", "fixtures", "gguf")
PROMPTS = [
    ("short", "The capital of France is", False),
    (
        "long",
        "Photosynthesis is the process by which green plants and some other organisms use sunlight to "
        "synthesize foods from carbon dioxide and water. It generally involves the green pigment",
        False,
    ),
    ("repeated", "dog dog dog dog dog dog dog dog dog", False),
    ("chatml", "What is the capital of France?", True),
]
STEPS = 16


def read_model(path):
    """The configuration and the float64 weights (PyTorch layout `[out, in]`) of a GGUF LLaMA."""
    reader = GGUFReader(path)

    def field(key, default=None):
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    assert field("general.architecture") == "llama"
    c = {
        "d": int(field("llama.embedding_length")),
        "layers": int(field("llama.block_count")),
        "heads": int(field("llama.attention.head_count")),
        "kv_heads": int(field("llama.attention.head_count_kv")),
        "eps": float(field("llama.attention.layer_norm_rms_epsilon")),  # the f32 in the file, widened
        "theta": float(field("llama.rope.freq_base", 10000.0)),
    }
    c["head_width"] = c["d"] // c["heads"]
    w = {}
    for t in reader.tensors:
        values = dequantize(t.data, t.tensor_type).astype(np.float32)
        w[t.name] = torch.from_numpy(values.astype(np.float64)).reshape([int(n) for n in reversed(t.shape)])
    d_h = c["head_width"]
    for i in range(c["layers"]):
        for name, heads in ((f"blk.{i}.attn_q.weight", c["heads"]), (f"blk.{i}.attn_k.weight", c["kv_heads"])):
            # stored row 2i + s of a head is Hugging Face row s·d_h/2 + i
            rows, cols = w[name].shape
            w[name] = w[name].reshape(heads, d_h // 2, 2, cols).transpose(1, 2).reshape(rows, cols)
    c["vocab"] = w["token_embd.weight"].shape[0]
    return c, w


def logits_of(c, w, ids):
    """Logits `[T, V]` of one token row: LLaMA in plain float64."""
    d_h, heads, kv_heads = c["head_width"], c["heads"], c["kv_heads"]

    def norm(x, gain):
        return gain * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + c["eps"]))

    def rope(x):  # [h, T, d_h], split halves
        t = x.shape[1]
        inv_freq = 1.0 / (c["theta"] ** (torch.arange(0, d_h, 2, dtype=torch.float64) / d_h))
        angle = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq  # [T, d_h/2]
        cos, sin = angle.cos(), angle.sin()
        x1, x2 = x[..., : d_h // 2], x[..., d_h // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    t = len(ids)
    x = w["token_embd.weight"][torch.tensor(ids)]  # [T, d]
    mask = torch.triu(torch.full((t, t), float("-inf"), dtype=torch.float64), diagonal=1)
    for i in range(c["layers"]):
        p = f"blk.{i}."
        h = norm(x, w[p + "attn_norm.weight"])
        q = (h @ w[p + "attn_q.weight"].T).view(t, heads, d_h).transpose(0, 1)  # [H, T, d_h]
        k = (h @ w[p + "attn_k.weight"].T).view(t, kv_heads, d_h).transpose(0, 1)  # [G, T, d_h]
        v = (h @ w[p + "attn_v.weight"].T).view(t, kv_heads, d_h).transpose(0, 1)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        weights = torch.softmax(q @ k.transpose(1, 2) / d_h**0.5 + mask, dim=-1)
        context = (weights @ v).transpose(0, 1).reshape(t, heads * d_h)
        x = x + context @ w[p + "attn_output.weight"].T
        h = norm(x, w[p + "ffn_norm.weight"])
        gate = torch.nn.functional.silu(h @ w[p + "ffn_gate.weight"].T)
        x = x + (gate * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    head = w.get("output.weight", w["token_embd.weight"])  # tied: the embedding table
    return norm(x, w["output_norm.weight"]) @ head.T


def greedy(c, w, ids, steps):
    """`steps` tokens, each the argmax (lowest id on a tie) of a full pass over the text so far."""
    ids, out = list(ids), []
    for _ in range(steps):
        nxt = int(torch.argmax(logits_of(c, w, ids)[-1]))
        out.append(nxt)
        ids.append(nxt)
    return out


def real_model_path():
    path = os.environ.get("LLM_MODEL")
    if path:
        return path
    out = subprocess.run([os.path.join(ROOT, "scripts", "fetch-model")], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def real_model():
    path = real_model_path()
    c, w = read_model(path)
    from transformers import AutoTokenizer  # only to turn the prompts into ids (and back, for readers)

    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    indices = sorted(set(np.random.default_rng(7).choice(c["vocab"], 250, replace=False).tolist()) | {0, 1, 2, 198})
    indices = sorted(set(indices) | {c["vocab"] - 1})[:256]
    prompts = []
    for name, text, chat in PROMPTS:
        if chat:
            text = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text)["input_ids"]
        with torch.no_grad():
            last = logits_of(c, w, ids)[-1]
            continuation = greedy(c, w, ids, STEPS)
        top = torch.topk(last, 5)
        prompts.append(
            {
                "name": name,
                "text": text,
                "ids": ids,
                "logits": [float(last[i]) for i in indices],
                "top5": [[int(i), float(v)] for v, i in zip(top.values, top.indices)],
                "greedy": continuation,
                "greedy_text": tokenizer.decode(continuation),
            }
        )
        print(f"{name}: {len(ids)} tokens, top {prompts[-1]['top5'][0]}, continues {tokenizer.decode(continuation)!r}")
    fixture = {
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf (sha256 b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53)",
        "indices": indices,
        "prompts": prompts,
    }
    with open(os.path.join(FIXTURES, "smollm2-reference.json"), "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")


def tiny_models():
    expected = {}
    for name, rows in [
        ("tiny-llama.gguf", [[1, 5, 9, 47, 0, 7, 7, 2, 18, 25], [30, 4, 4, 4, 16, 8, 23, 1, 0, 12]]),
        ("tiny-llama-tied.gguf", [[1, 39, 2, 2, 17, 5, 0, 33], [12, 12, 12, 3, 9, 21, 38, 6]]),
    ]:
        c, w = read_model(os.path.join(FIXTURES, name))
        with torch.no_grad():
            logits = [logits_of(c, w, row).flatten().tolist() for row in rows]
        expected[name] = {"tokens": rows, "vocab": c["vocab"], "logits": logits}
        print(f"{name}: logits of {len(rows)} rows of {len(rows[0])} tokens over {c['vocab']} ids")
    with open(os.path.join(FIXTURES, "tiny-expected.json"), "w") as f:
        json.dump(expected, f)
        f.write("\n")


def main():
    torch.set_num_threads(1)  # the result must not depend on it; one thread is plenty here
    tiny_models()
    real_model()


if __name__ == "__main__":
    main()
