"""The peers of `llm-bench`, measured on this machine in the same minutes as our own binary.

docs/performance.md sets each target as a ratio against the best of PyTorch and JAX on CPU in f64 with 2
threads, measured on the same machine in the same run. This script runs the same workloads with
the same shapes through both and prints lines in `llm-bench`'s format with the peer's name in
front, so that a run of both can be compared line by line:

    <peer> <workload> <variant> median_ms=<float> [gflops=<float>]

Set-up (not part of the build or the tests; nothing in `.ci/run` needs it):

    python3 -m venv /tmp/peer
    /tmp/peer/bin/pip install torch==2.15.0 jax==0.10.2 jaxlib==0.10.2 gguf==0.17.1
    /tmp/peer/bin/python crates/llm-bench/peer/peer.py [workload ...] [--threads N] [--kernels TARGET]

(PyPI's torch wheel for Linux brings about 2.8 GB of CUDA libraries with it, unused on CPU.)

Targets. `--kernels portable|avx2|avx512` (else `LLM_KERNELS`, as for `llm-bench`) holds the
peers to the instruction set our binary is forced to, so that `llm-bench --kernels avx2` is
compared with peers on AVX2 too; any other name, or a target this processor lacks, is a usage
error (exit code 2). Without a target the peers run as installed, on whatever the environment
says. PyTorch is held by two environment variables, set before torch is imported: ATen's
`ATEN_CPU_CAPABILITY` (`default`, `avx2`, `avx512`: its vectorised element-wise, softmax and
attention kernels) and MKL's `MKL_ENABLE_INSTRUCTIONS` (`SSE4_2`, `AVX2`, `AVX512`: the matrix
products; `SSE4_2`, the lowest MKL offers, is the nearest to our portable target: neither uses FMA on
x86-64). JAX can only be held in part: `--xla_cpu_max_isa` (appended to `XLA_FLAGS`)
caps the code XLA:CPU compiles, but most of its matrix products (and some reductions) run in
YNNPACK, which picks its micro-kernels from the processor at run time and ignores the cap (on an
AVX-512 machine JAX's gemm stays on `ynn::dot_fp64_*_avx512` whatever the target), the others in
Eigen as compiled into jaxlib. Before the measurements the script prints comment
lines, which `bench-rounds` and any reader of the format skip: the machine, then for each peer
what it was asked for and what it reports using —

    # machine cpu="<model>" threads=<N> simd=<features> kernels=<target or host>
    # peer torch-2.15.0 kernels=avx2 (ATEN_CPU_CAPABILITY=avx2 -> get_cpu_capability()=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2 -> MKL runs AVX2)
    # peer jax-0.10.2 kernels=avx2 only in part: ...

A peer that is not installed is skipped. Each figure is the median of at least 5 timed runs after
warm-ups, with inputs rotating between runs, as in `llm-bench`.

The workloads follow docs/performance.md:
- gemm: 1024×1024 · 1024×1024 in f64, measured as `llm-bench gemm` measures it: four input pairs
  (64 MiB) rotating from run to run, 3 warm-ups, the median of 15 timed runs; PyTorch writes into
  one output made beforehand, as ours does (JAX makes a new one each run: `jit` owns its outputs).
- mha-train: a multi-head attention layer, B=4, T=256, d=256, H=8, RoPE base 10000 on queries
  and keys (coordinate pairs (2i, 2i+1), as in our `nn::rope`), causal, no bias; `forward`, and
  `forward-backward` with one upstream adjoint, gradients for the input and the four weights.
  PyTorch uses `F.scaled_dot_product_attention` with autograd, JAX the attention written out in
  f64 (`jax.nn.dot_product_attention` runs its softmax in float32) under `jit` with `jax.vjp`.
- decode: d=512, H=8, one new token against 2047 cached positions: PyTorch with a cache that
  grows by concatenation (`cached`, the peer of an earlier target) and with a preallocated cache written in place
  (`cached-inplace`); JAX with a preallocated cache and `dynamic_update_slice` under `jit`.
  `recompute` runs the layer on all 2048 tokens.
- long-causal: the causal attention kernel alone, B=1, H=8, T=4096, d_h=64.
- train-text (PyTorch only): one optimiser step of chapter 37's character model, V=57, d=64,
  2 pre-norm blocks (RMSNorm eps 1e-6; grouped-query attention H=4 over G=2 key/value heads,
  d_h=16, RoPE base 10000 on pairs (2i, 2i+1), causal; SwiGLU width 176), final RMSNorm, tied
  head; B=16 windows of T=64 random ids, every position scored. A step: forward, cross-entropy,
  backward, `clip_grad_norm_(1.0)`, AdamW (0.9, 0.95, eps 1e-8, weight decay 0.1 on matrices
  only) with the chapter's learning rate; four batches rotate and the model keeps training.
- real-prefill, real-decode (PyTorch only): SmolLM2-135M-Instruct from its GGUF file (`--model`, else
  `LLM_MODEL`, else where `scripts/fetch-model` puts it; skipped with one line when absent), every
  weight dequantized to float64 with the `gguf` package (in the set-up above), a
  plain LLaMA forward (RMSNorm, RoPE on pairs (2i, 2i+1) as the file stores W_Q and W_K, grouped-query
  `F.scaled_dot_product_attention`, SwiGLU, tied head) with a preallocated KV cache written in place.
  `prefill`: the logits of all 256 positions of a prompt; `token`: one token against the cache of
  that prompt (positions 256 onwards, one more each run, as `llm-bench real-decode` does).
"""

import argparse
import math
import os
import platform
import re
import statistics
import sys
import tempfile
import time

B, T, D, H = 4, 256, 256, 8
DEC_D, DEC_CACHED = 512, 2047
LONG_H, LONG_T, LONG_DH = 8, 4096, 64
# both products over the causal triangle, as `llm-bench long-causal` counts them
CAUSAL_FLOPS = 2 * 2 * LONG_H * (LONG_T * (LONG_T + 1) // 2) * LONG_DH
TEXT_V, TEXT_D, TEXT_L, TEXT_H, TEXT_G, TEXT_FFN, TEXT_B, TEXT_T = 57, 64, 2, 4, 2, 176, 16, 64
# as `llm-bench train-text` counts them: products, attention, AdamW
TEXT_FLOPS = 690.6e6
REAL_PROMPT = 256
# as `llm-bench real-prefill` counts them: products of every position, attention over the triangle
REAL_PREFILL_FLOPS = 71.2e9
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


# target -> (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, --xla_cpu_max_isa, /proc/cpuinfo flags it needs);
# the flags are those `llm-bench` checks before it forces the same target
TARGETS = {
    "portable": ("default", "SSE4_2", "SSE4_2", ()),
    "avx2": ("avx2", "AVX2", "AVX2", ("avx2", "fma")),
    "avx512": ("avx512", "AVX512", "AVX512", ("avx2", "fma", "avx512f")),
}
KERNELS_VAR = "LLM_KERNELS"
TORCH_VARS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


def cpuinfo():
    """The processor's model name and its flags, from /proc/cpuinfo (Linux); (None, None) elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return None, None
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    return (model.group(1).strip() if model else None), (set(flags.group(1).split()) if flags else None)


def machine_line(threads, target):
    """A comment in the form of `llm-bench`'s first line."""
    model, flags = cpuinfo()
    model = (model or platform.machine() or "unknown").replace('"', "'")
    simd = ",".join(f for f in ("avx2", "fma", "avx512f") if flags and f in flags)
    return f'# machine cpu="{model}" threads={threads} simd={simd} kernels={target or "host"}'


def constrain(target):
    """Sets the variables that hold the peers to `target`, before either is imported.

    ATen reads ATEN_CPU_CAPABILITY at its first dispatch and MKL reads MKL_ENABLE_INSTRUCTIONS
    when it initialises, both with getenv, which sees what os.environ sets. Should torch or jax
    already be loaded (a sitecustomize, an embedding), the script runs itself again with the new
    environment.
    """
    aten, mkl, xla, _ = TARGETS[target]
    wanted = {"ATEN_CPU_CAPABILITY": aten, "MKL_ENABLE_INSTRUCTIONS": mkl}
    flags = os.environ.get("XLA_FLAGS", "")
    if f"--xla_cpu_max_isa={xla}" not in flags.split():
        # the last occurrence of a flag wins
        wanted["XLA_FLAGS"] = f"{flags} --xla_cpu_max_isa={xla}".strip()
    changed = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
    os.environ.update(changed)
    if changed and any(m in sys.modules for m in ("torch", "jax", "jaxlib")):
        os.execv(sys.executable, [sys.executable] + sys.argv)


def mkl_isa(torch):
    """The instruction set MKL dispatches to, from the first line of its verbose mode ("?" if none).

    MKL writes that line with C stdio on file descriptor 1: it is caught in a temporary file so
    that it cannot mix with the measurement lines.
    """
    import ctypes

    a = torch.ones(8, 8, dtype=torch.float64)
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with tempfile.TemporaryFile() as caught:
            os.dup2(caught.fileno(), 1)
            try:
                with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
                    torch.matmul(a, a)
                ctypes.CDLL(None).fflush(None)
            finally:
                os.dup2(saved, 1)
            caught.seek(0)
            text = caught.read().decode(errors="replace")
    except Exception:  # a build without MKL, or without its verbose mode
        return "?"
    finally:
        os.close(saved)
    # "... architecture Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled processors, Lnx 2.60GHz ..."
    header = re.search(r"architecture (.*?), \S+ [\d.]+GHz", text)
    if not header:
        return "?"
    names = re.findall(r"\(Intel\(R\) ([\w.-]+)\)", header.group(1))
    return "+".join(names) if names else header.group(1)


# `gemm`'s protocol, the same as `llm-bench gemm`'s (`crates/llm-bench/src/workloads.rs`)
GEMM_PAIRS = 4
GEMM_RUNS = {"warmups": 3, "timed": 15}


def median_ms(run, warmups=3, timed=11):
    """Median wall time of `run(i)` in milliseconds; `run` must wait for its own result."""
    for i in range(warmups):
        run(i)
    times = []
    for i in range(timed):
        start = time.perf_counter()
        run(warmups + i)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def line(peer, workload, variant, ms, flops=None):
    extra = f" gflops={flops / ms / 1e6:.1f}" if flops else ""
    print(f"{peer} {workload} {variant} median_ms={ms:.3f}{extra}", flush=True)


def rope_tables(positions, head_width, base=10_000.0):
    """cos and sin [positions, head_width/2] for pair i at angle p / base^(2i/d_h)."""
    pairs = head_width // 2
    cos, sin = [], []
    for p in range(positions):
        row_c, row_s = [], []
        for i in range(pairs):
            angle = p / base ** (2 * i / head_width)
            row_c.append(math.cos(angle))
            row_s.append(math.sin(angle))
        cos.append(row_c)
        sin.append(row_s)
    return cos, sin


def model_path(given):
    """`--model`, else LLM_MODEL, else the file scripts/fetch-model writes if it is there (as
    `llm_from_scratch::gguf::model_path_from_env`); None when there is none."""
    if given:
        return given
    if os.environ.get("LLM_MODEL"):
        return os.environ["LLM_MODEL"]
    home = os.environ.get("HOME", "")
    cache = os.environ.get("LLM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "llm-from-scratch"
    )
    path = os.path.join(cache, MODEL_FILE)
    return path if os.path.isfile(path) else None


# --------------------------------------------------------------------------------------------
# PyTorch


def torch_peer(workloads, threads, target, model=None):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch unavailable", file=sys.stderr)
        return
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    f64 = torch.float64
    peer = f"torch-{torch.__version__.split('+')[0]}"

    # what each library was asked for, and what it reports using
    aten, mkl = (os.environ.get(k) for k in TORCH_VARS)
    capability = torch.backends.cpu.get_cpu_capability()
    mkl_runs = mkl_isa(torch)
    print(
        f"# peer {peer} kernels={target or 'host'} (ATEN_CPU_CAPABILITY={aten or '(unset)'} -> "
        f"get_cpu_capability()={capability}, MKL_ENABLE_INSTRUCTIONS={mkl or '(unset)'} -> MKL runs {mkl_runs})",
        flush=True,
    )
    if target and capability.lower() != TARGETS[target][0]:
        print(f"peer.py: warning: torch runs {capability}, not the {target} target", file=sys.stderr)

    def rope(x, cos, sin):
        # x [B, H, T, d_h]; pairs (2i, 2i+1)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)

    def layer(x, w, cos, sin, heads):
        b, t, d = x.shape
        dh = d // heads
        q, k, v = (F.linear(x, wi).view(b, t, heads, dh).transpose(1, 2) for wi in w[:3])
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.linear(ctx.transpose(1, 2).reshape(b, t, d), w[3])

    def weights(d):
        return [torch.randn(d, d, dtype=f64) / math.sqrt(d) for _ in range(4)]

    def tables(t, dh):
        c, s = rope_tables(t, dh)
        return torch.tensor(c, dtype=f64), torch.tensor(s, dtype=f64)

    if "gemm" in workloads:
        pairs = [(torch.randn(1024, 1024, dtype=f64), torch.randn(1024, 1024, dtype=f64)) for _ in range(GEMM_PAIRS)]
        out = torch.empty(1024, 1024, dtype=f64)
        ms = median_ms(lambda i: torch.matmul(*pairs[i % GEMM_PAIRS], out=out), **GEMM_RUNS)
        line(peer, "gemm", "f64", ms, 2 * 1024**3)

    if "mha-train" in workloads:
        w = [wi.requires_grad_() for wi in weights(D)]
        cos, sin = tables(T, D // H)
        xs = [torch.randn(B, T, D, dtype=f64) for _ in range(2)]
        ups = [torch.randn(B, T, D, dtype=f64) for _ in range(2)]

        def forward(i):
            with torch.no_grad():
                layer(xs[i % 2], w, cos, sin, H)

        def forward_backward(i):
            x = xs[i % 2].clone().requires_grad_()
            layer(x, w, cos, sin, H).backward(ups[i % 2])
            for wi in w:
                wi.grad = None

        line(peer, "mha-train", "forward", median_ms(forward), 0.686e9)
        line(peer, "mha-train", "forward-backward", median_ms(forward_backward), 2.058e9)

    if "decode" in workloads:
        heads, dh = H, DEC_D // H
        w = weights(DEC_D)
        cos, sin = tables(DEC_CACHED + 1, dh)
        k_cache = torch.randn(1, heads, DEC_CACHED, dh, dtype=f64)
        v_cache = torch.randn(1, heads, DEC_CACHED, dh, dtype=f64)
        tokens = [torch.randn(1, 1, DEC_D, dtype=f64) for _ in range(2)]
        at = slice(DEC_CACHED, DEC_CACHED + 1)

        def project(x):
            q, k, v = (F.linear(x, wi).view(1, 1, heads, dh).transpose(1, 2) for wi in w[:3])
            return rope(q, cos[at], sin[at]), rope(k, cos[at], sin[at]), v

        def attend(q, keys, values):
            ctx = F.scaled_dot_product_attention(q, keys, values)
            return F.linear(ctx.transpose(1, 2).reshape(1, 1, DEC_D), w[3])

        def cached(i):
            with torch.no_grad():
                q, k, v = project(tokens[i % 2])
                attend(q, torch.cat((k_cache, k), dim=2), torch.cat((v_cache, v), dim=2))

        k_room = torch.cat((k_cache, torch.zeros(1, heads, 1, dh, dtype=f64)), dim=2)
        v_room = torch.cat((v_cache, torch.zeros(1, heads, 1, dh, dtype=f64)), dim=2)

        def cached_inplace(i):
            with torch.no_grad():
                q, k, v = project(tokens[i % 2])
                k_room[:, :, at] = k
                v_room[:, :, at] = v
                attend(q, k_room, v_room)

        full = torch.randn(1, DEC_CACHED + 1, DEC_D, dtype=f64)
        full_cos, full_sin = tables(DEC_CACHED + 1, dh)

        def recompute(_):
            with torch.no_grad():
                layer(full, w, full_cos, full_sin, heads)

        line(peer, "decode", "cached", median_ms(cached, timed=21))
        line(peer, "decode", "cached-inplace", median_ms(cached_inplace, timed=21))
        line(peer, "decode", "recompute", median_ms(recompute, warmups=1, timed=5))

    if "long-causal" in workloads:
        q, k, v = (torch.randn(1, LONG_H, LONG_T, LONG_DH, dtype=f64) for _ in range(3))

        def kernel(_):
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        line(peer, "long-causal", "sdpa", median_ms(kernel, warmups=1, timed=5), CAUSAL_FLOPS)

    if "train-text" in workloads:
        dh = TEXT_D // TEXT_H

        def matrix(rows, cols):
            return (torch.rand(rows, cols, dtype=f64) * 2 - 1) / math.sqrt(rows)

        embed = (torch.randn(TEXT_V, TEXT_D, dtype=f64) * 0.02).requires_grad_()
        blocks = []
        for _ in range(TEXT_L):
            blocks.append(
                {
                    "norm1": torch.ones(TEXT_D, dtype=f64, requires_grad=True),
                    "q": matrix(TEXT_D, TEXT_H * dh).requires_grad_(),
                    "k": matrix(TEXT_D, TEXT_G * dh).requires_grad_(),
                    "v": matrix(TEXT_D, TEXT_G * dh).requires_grad_(),
                    "o": matrix(TEXT_H * dh, TEXT_D).requires_grad_(),
                    "norm2": torch.ones(TEXT_D, dtype=f64, requires_grad=True),
                    "gate": matrix(TEXT_D, TEXT_FFN).requires_grad_(),
                    "up": matrix(TEXT_D, TEXT_FFN).requires_grad_(),
                    "down": matrix(TEXT_FFN, TEXT_D).requires_grad_(),
                }
            )
        final_norm = torch.ones(TEXT_D, dtype=f64, requires_grad=True)
        params = [embed, final_norm] + [p for b in blocks for p in b.values()]
        decay = [p for p in params if p.dim() >= 2]
        keep = [p for p in params if p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.1}, {"params": keep, "weight_decay": 0.0}],
            lr=4e-3,
            betas=(0.9, 0.95),
            eps=1e-8,
        )
        cos, sin = tables(TEXT_T, dh)

        def rms(x, gain):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gain

        def model_loss(ids):
            inputs, targets = ids[:, :-1], ids[:, 1:]
            b, t = inputs.shape
            x = embed[inputs]
            for blk in blocks:
                h = rms(x, blk["norm1"])
                q = (h @ blk["q"]).view(b, t, TEXT_H, dh).transpose(1, 2)
                k = (h @ blk["k"]).view(b, t, TEXT_G, dh).transpose(1, 2)
                v = (h @ blk["v"]).view(b, t, TEXT_G, dh).transpose(1, 2)
                q, k = rope(q, cos, sin), rope(k, cos, sin)
                k = k.repeat_interleave(TEXT_H // TEXT_G, dim=1)
                v = v.repeat_interleave(TEXT_H // TEXT_G, dim=1)
                ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + ctx.transpose(1, 2).reshape(b, t, TEXT_H * dh) @ blk["o"]
                h = rms(x, blk["norm2"])
                x = x + (F.silu(h @ blk["gate"]) * (h @ blk["up"])) @ blk["down"]
            logits = rms(x, final_norm) @ embed.T
            return F.cross_entropy(logits.reshape(-1, TEXT_V), targets.reshape(-1))

        batches = [torch.randint(0, TEXT_V, (TEXT_B, TEXT_T + 1)) for _ in range(4)]

        def step(i):
            optimizer.zero_grad(set_to_none=True)
            loss = model_loss(batches[i % 4])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            if not math.isfinite(loss.item()):
                raise RuntimeError(f"train-text: loss {loss.item()} at run {i}")

        line(peer, "train-text", "step", median_ms(step, warmups=3, timed=21), TEXT_FLOPS)


    if workloads & {"real-prefill", "real-decode"}:
        real_model_peer(torch, F, peer, workloads, model_path(model))


def real_model_peer(torch, F, peer, workloads, path):
    """SmolLM2-135M in float64: prefill of 256 tokens, then one token at a time, cache in place."""
    if path is None:
        for w in sorted(workloads & {"real-prefill", "real-decode"}):
            print(f"{w} skipped: no model file (run scripts/fetch-model, then pass --model PATH or set LLM_MODEL)")
        return
    try:
        from gguf import GGUFReader
        from gguf.quants import dequantize
    except ImportError:
        print("gguf unavailable (pip install gguf)", file=sys.stderr)
        return
    f64 = torch.float64
    reader = GGUFReader(path)

    def field(key, default=None):
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    d, layers = int(field("llama.embedding_length")), int(field("llama.block_count"))
    heads, kv_heads = int(field("llama.attention.head_count")), int(field("llama.attention.head_count_kv"))
    eps, theta = float(field("llama.attention.layer_norm_rms_epsilon")), float(field("llama.rope.freq_base", 1e4))
    dh = d // heads
    w = {}
    for t in reader.tensors:
        values = dequantize(t.data, t.tensor_type).astype("float32").astype("float64")
        w[t.name] = torch.from_numpy(values).reshape([int(n) for n in reversed(t.shape)])  # [out, in]
    emb = w["token_embd.weight"]
    head = w.get("output.weight", emb)
    vocab = emb.shape[0]
    blocks = [
        [w[f"blk.{i}.{n}.weight"] for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")]
        for i in range(layers)
    ]
    positions = REAL_PROMPT + 64
    inv = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=f64) / dh)
    angle = torch.arange(positions, dtype=f64)[:, None] * inv
    cos, sin = angle.cos(), angle.sin()
    k_cache = [torch.zeros(kv_heads, positions, dh, dtype=f64) for _ in range(layers)]
    v_cache = [torch.zeros(kv_heads, positions, dh, dtype=f64) for _ in range(layers)]

    def norm(x, gain):
        return gain * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rope(x, at):  # [h, T, d_h]; pairs (2i, 2i+1), the file's row order
        even, odd = x[..., 0::2], x[..., 1::2]
        c, s_ = cos[at], sin[at]
        return torch.stack((even * c - odd * s_, even * s_ + odd * c), dim=-1).flatten(-2)

    def forward(ids, pos):
        t = len(ids)
        at = slice(pos, pos + t)
        x = emb[torch.tensor(ids)]
        for i, (g1, wq, wk, wv, wo, g2, wg, wu, wd) in enumerate(blocks):
            h = norm(x, g1)
            q = rope(F.linear(h, wq).view(t, heads, dh).transpose(0, 1), at)
            k = rope(F.linear(h, wk).view(t, kv_heads, dh).transpose(0, 1), at)
            k_cache[i][:, at] = k
            v_cache[i][:, at] = F.linear(h, wv).view(t, kv_heads, dh).transpose(0, 1)
            keys, values = k_cache[i][:, : pos + t], v_cache[i][:, : pos + t]
            ctx = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1, enable_gqa=True)
            x = x + F.linear(ctx.transpose(0, 1).reshape(t, heads * dh), wo)
            h = norm(x, g2)
            x = x + F.linear(F.silu(F.linear(h, wg)) * F.linear(h, wu), wd)
        return F.linear(norm(x, w["output_norm.weight"]), head)  # [T, V]

    rng = torch.Generator().manual_seed(38)
    prompt = torch.randint(0, vocab, (REAL_PROMPT,), generator=rng).tolist()
    with torch.no_grad():
        if "real-prefill" in workloads:
            ms = median_ms(lambda _: forward(prompt, 0), warmups=1, timed=5)
            line(peer, "real-prefill", "prefill", ms, REAL_PREFILL_FLOPS)
        if "real-decode" in workloads:
            forward(prompt, 0)
            ms = median_ms(lambda i: forward([prompt[i % REAL_PROMPT]], REAL_PROMPT + i), warmups=3, timed=21)
            line(peer, "real-decode", "token", ms)


# --------------------------------------------------------------------------------------------
# JAX


def jax_peer(workloads, threads, target):
    # XLA sizes its thread pool to the cores the process may use: `--threads 1` pins the process
    # to one core (Linux), so both peers run on one thread
    if threads < (os.cpu_count() or 1) and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:threads]))
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("jax unavailable", file=sys.stderr)
        return
    jax.config.update("jax_enable_x64", True)
    peer = f"jax-{jax.__version__}"
    cap = re.findall(r"--xla_cpu_max_isa=(\S+)", os.environ.get("XLA_FLAGS", ""))
    if target:
        print(
            f"# peer {peer} kernels={target} only in part: XLA_FLAGS --xla_cpu_max_isa={cap[-1] if cap else '?'} caps "
            "the code XLA:CPU compiles, but its matrix products (and some reductions) run in YNNPACK, which "
            "picks its kernels from the host CPU and ignores the cap, or in Eigen as built into jaxlib "
            f"(jax reports device {jax.devices()[0].device_kind}, no instruction set)",
            flush=True,
        )
    else:
        print(
            f"# peer {peer} kernels=host (XLA:CPU compiles for "
            f"{'at most ' + cap[-1] if cap else 'the host CPU'}; its matrix products run in YNNPACK, which picks "
            "its kernels from the host CPU, or in Eigen as built into jaxlib)",
            flush=True,
        )
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 64))

    def normal(*shape):
        return jax.random.normal(next(keys), shape, dtype=jnp.float64)

    def attention(q, k, v, causal):
        # q [B, T_q, H, d_h], k and v [B, T_k, H, d_h]. Written out rather than
        # jax.nn.dot_product_attention, whose XLA path computes the scores and the softmax in float32
        # even for float64 inputs (1e-7 off an f64 softmax, measured): this peer stays in f64
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        if causal:
            t_q, t_k = q.shape[1], k.shape[1]
            seen = jnp.arange(t_k)[None, :] <= jnp.arange(t_k - t_q, t_k)[:, None]
            scores = jnp.where(seen, scores, -jnp.inf)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)

    def rope(x, cos, sin):
        # x [B, T, H, d_h]; cos/sin [T, 1, d_h/2]
        even, odd = x[..., 0::2], x[..., 1::2]
        return jnp.stack((even * cos - odd * sin, even * sin + odd * cos), axis=-1).reshape(x.shape)

    def tables(t, dh):
        c, s = rope_tables(t, dh)
        return jnp.asarray(c)[:, None, :], jnp.asarray(s)[:, None, :]

    def layer(w, x, cos, sin, heads):
        b, t, d = x.shape
        q, k, v = ((x @ wi).reshape(b, t, heads, d // heads) for wi in w[:3])
        ctx = attention(rope(q, cos, sin), rope(k, cos, sin), v, causal=True)
        return ctx.reshape(b, t, d) @ w[3]

    def weights(d):
        return [normal(d, d) / math.sqrt(d) for _ in range(4)]

    if "gemm" in workloads:
        pairs = [(normal(1024, 1024), normal(1024, 1024)) for _ in range(GEMM_PAIRS)]
        product = jax.jit(jnp.matmul)
        ms = median_ms(lambda i: product(*pairs[i % GEMM_PAIRS]).block_until_ready(), **GEMM_RUNS)
        line(peer, "gemm", "f64", ms, 2 * 1024**3)

    if "mha-train" in workloads:
        w = weights(D)
        cos, sin = tables(T, D // H)
        xs = [normal(B, T, D) for _ in range(2)]
        ups = [normal(B, T, D) for _ in range(2)]
        forward = jax.jit(lambda w, x: layer(w, x, cos, sin, H))

        @jax.jit
        def forward_backward(w, x, up):
            out, pullback = jax.vjp(lambda w, x: layer(w, x, cos, sin, H), w, x)
            return out, pullback(up)

        line(peer, "mha-train", "forward", median_ms(lambda i: forward(w, xs[i % 2]).block_until_ready()), 0.686e9)
        ms = median_ms(lambda i: jax.block_until_ready(forward_backward(w, xs[i % 2], ups[i % 2])))
        line(peer, "mha-train", "forward-backward", ms, 2.058e9)

    if "decode" in workloads:
        heads, dh = H, DEC_D // H
        w = weights(DEC_D)
        cos, sin = tables(DEC_CACHED + 1, dh)
        k_cache = jnp.concatenate((normal(1, DEC_CACHED, heads, dh), jnp.zeros((1, 1, heads, dh))), axis=1)
        v_cache = jnp.concatenate((normal(1, DEC_CACHED, heads, dh), jnp.zeros((1, 1, heads, dh))), axis=1)
        tokens = [normal(1, 1, DEC_D) for _ in range(2)]

        @jax.jit
        def step(w, x, k_cache, v_cache):
            at = DEC_CACHED
            q, k, v = ((x @ wi).reshape(1, 1, heads, dh) for wi in w[:3])
            c, s = cos[at : at + 1], sin[at : at + 1]
            q, k = rope(q, c, s), rope(k, c, s)
            k_cache = jax.lax.dynamic_update_slice(k_cache, k, (0, at, 0, 0))
            v_cache = jax.lax.dynamic_update_slice(v_cache, v, (0, at, 0, 0))
            ctx = attention(q, k_cache, v_cache, causal=False)
            return ctx.reshape(1, 1, DEC_D) @ w[3], k_cache, v_cache

        def cached(i):
            jax.block_until_ready(step(w, tokens[i % 2], k_cache, v_cache))

        full = normal(1, DEC_CACHED + 1, DEC_D)
        full_layer = jax.jit(lambda w, x: layer(w, x, cos, sin, heads))
        line(peer, "decode", "cached", median_ms(cached, timed=21))
        line(peer, "decode", "recompute", median_ms(lambda _: full_layer(w, full).block_until_ready(), 1, 5))

    if "long-causal" in workloads:
        # [B, T, H, d_h], as the layer above
        q, k, v = (normal(1, LONG_T, LONG_H, LONG_DH) for _ in range(3))
        kernel = jax.jit(lambda q, k, v: attention(q, k, v, causal=True))
        ms = median_ms(lambda _: kernel(q, k, v).block_until_ready(), warmups=1, timed=5)
        line(peer, "long-causal", "xla", ms, CAUSAL_FLOPS)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    everything = ["gemm", "mha-train", "decode", "long-causal", "train-text", "real-prefill", "real-decode"]
    parser.add_argument("workloads", nargs="*", help=f"any of {', '.join(everything)} (default: all)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--model", metavar="PATH", help="the GGUF file of SmolLM2-135M-Instruct (default: LLM_MODEL, else scripts/fetch-model's file)")
    parser.add_argument("--peer", choices=["torch", "jax", "both"], default="both")
    parser.add_argument(
        "--kernels",
        metavar="TARGET",
        help=f"{', '.join(TARGETS)}: hold the peers to that instruction set (default: {KERNELS_VAR}, else as installed)",
    )
    args = parser.parse_args()
    workloads = set(args.workloads or everything)
    if args.threads < 1:
        parser.error(f"--threads: expected a whole number from 1, not {args.threads}")
    if args.model is not None and not os.path.isfile(args.model):
        parser.error(f"--model {args.model}: expected the path of a GGUF model file")
    unknown = workloads - set(everything)
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}; choose from {', '.join(everything)}")
    target, source = args.kernels, "--kernels"
    if target is None:
        target, source = (os.environ.get(KERNELS_VAR) or "").strip() or None, KERNELS_VAR
    if target is not None:
        if target.strip() not in TARGETS:
            parser.error(f"{source}: unknown target `{target}`; choose from {', '.join(TARGETS)}")
        target = target.strip()
        _, flags = cpuinfo()
        missing = [f for f in TARGETS[target][3] if flags is not None and f not in flags]
        if missing:
            parser.error(f"{source}: this processor cannot run the {target} target (no {', '.join(missing)})")
        constrain(target)
    print(machine_line(args.threads, target), flush=True)
    if args.peer in ("torch", "both"):
        torch_peer(workloads, args.threads, target, args.model)
    if args.peer in ("jax", "both"):
        # last: it may pin the process to fewer cores
        jax_peer(workloads, args.threads, target)


if __name__ == "__main__":
    main()
