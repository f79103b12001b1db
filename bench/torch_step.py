#!/usr/bin/env python3
"""torch_step.py — the PyTorch reference for basp's one-GPU numbers: one
training step of the same model, batch and sequence in plain PyTorch, and
scaled_dot_product_attention alone at gpu_attention_bench's shapes.

    python3 bench/torch_step.py [--model examples/llama3_2_1b.basp]
        [--impl plain|hf|both] [--batch 1] [--seq 8192] [--layers N]
        [--steps 8] [--peak 989] [--compile [--compile-mode MODE]] [--attention] [--reps 3]
        [--max-seq 16384] [--basp-metrics FILE] [--json FILE]
        [--gqa native|repeat] [--sdpa-backend auto|flash|efficient|cudnn|math]
        [--no-step] [--device cuda|cpu] [--tiny] [--dtype bf16|fp32] [--threads N]

Model.  The shapes come from the `model NAME { key value ... }` block of a
basp spec (imports are followed; the last model block wins): hidden, layers,
heads, kv_heads, head_dim, ffn, vocab, rope_theta, norm_eps, tie_embeddings,
rope_scaling none|llama3 with rope_factor, rope_low_freq_factor,
rope_high_freq_factor, rope_original_max_pos, and qkv_bias (Qwen1.5/Qwen2)
and qk_norm (Qwen3).  Absent keys take basp's defaults; an unknown key, or a
`model ... from "config.json"` block, is an error.

Step.  `--impl plain` (default) is a Llama written with torch.nn only:
token embedding, pre-norm RMSNorm (computed in fp32, as transformers does),
RoPE (rotate-half, llama3 frequency scaling when the spec asks for it),
grouped-query attention through F.scaled_dot_product_attention(is_causal=True,
enable_gqa=True) (`--gqa repeat` repeats K/V instead), SwiGLU MLP, tied or
untied LM head, and cross-entropy (logits upcast to fp32) averaged over the
tokens.  `--impl hf` builds transformers' LlamaForCausalLM (Qwen2ForCausalLM
for qkv_bias, Qwen3ForCausalLM for qk_norm) from the equivalent config with
attn_implementation="sdpa"; it is skipped with a message when transformers is
not installed.  Parameters, gradients and optimizer state are all bf16 ("pure
bf16"; no fp32 master weights; `--dtype fp32` makes them all fp32, as basp's
CPU backend runs), the optimizer is torch.optim.AdamW(lr=3e-4, fused=True on
CUDA).  `--threads N` sets torch's CPU threads.  The batch is --batch x --seq random tokens (targets:
the next token), the same batch every step.

Timing.  Each step (zero_grad, forward, backward, optimizer step) is timed
with CUDA events (time.perf_counter on the CPU); tokens/s is the median over
steps 3..N (steps 1 and 2 are warm-up, as in scripts/gpu-check).  Peak
memory is torch.cuda.max_memory_allocated over the whole run (parameters,
gradients, optimizer state, activations; the peak resident set on the CPU).

FLOPs per token, forward + backward, as scripts/gpu-check counts them for
basp:

    6 * params + 6 * layers * seq * heads * head_dim

6 * params: 2 FLOPs per parameter per token forward and 4 backward (every
parameter counted once, the embedding too; with tied embeddings it is the LM
head's matrix).  Attention: Q K^T and P V are 2 * 2 * seq * heads * head_dim
FLOPs per token and layer forward if dense; causal halves it, and forward +
backward is 3 times the forward.  MFU = tokens/s * FLOPs per token / --peak
(bf16 dense TFLOP/s, default 989: H100/H200 SXM).

Attention (`--attention`).  SDPA alone, causal, bf16, b = 1, the shapes of
bench/gpu_attention_bench.c: head dim 64 with 32 query heads over 8 kv heads,
head dim 128 with 16 over 8, sequence 4K, 8K, 16K (up to --max-seq).  FLOPs:
forward 4 * b * H * S^2 * Dh / 2, backward 2.5 times that, forward + backward
3.5 times.  The forward runs without autograd; the backward is timed alone
(torch.autograd.grad on a kept graph) and with its forward.  Median of --reps
runs after one warm-up.

Output: one line per result, flushed as it finishes — "torch ..." for the
step, "torch-sdpa ..." for attention, "ratio ..." for --basp-metrics (basp's
metrics JSONL from `--metrics`; median of "tokens_per_s" over steps 3..N).
--json FILE writes every result.  Exit status: 0 when everything ran; 1 on a
failure (out of memory, a non-finite loss, a bad spec, ...), after the other
parts have run; 77 when torch cannot be imported or --device cuda finds no
GPU.

`--device cpu --tiny` runs a small model of the same kind (hidden 64, 2
layers, 4 heads over 2, head dim 16, ffn 128, vocab 256, seq 64, attention at
S = 128, 256) in seconds: a smoke test, not a measurement.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
import time

# ---- the basp spec -----------------------------------------------------------

COUNT_KEYS = ("hidden", "layers", "heads", "kv_heads", "head_dim", "ffn", "vocab", "rope_original_max_pos")
FLOAT_KEYS = ("rope_theta", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor", "norm_eps")
BOOL_KEYS = ("tie_embeddings", "qkv_bias", "qk_norm")
NAME_KEYS = ("rope_scaling",)
REQUIRED = ("hidden", "layers", "heads", "vocab", "ffn")
COUNT_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

TOKEN_RE = re.compile(r'"[^"\n]*"|#[^\n]*|//[^\n]*|[{}]|[^\s{}"#]+')
NUMBER_RE = re.compile(r"^(-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)([A-Za-z/]*)$")


class SpecError(Exception):
    pass


def _tokens(path):
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise SpecError("cannot read %s: %s" % (path, e.strerror or e))
    return [t for t in TOKEN_RE.findall(text) if not t.startswith("#") and not t.startswith("//")]


def _value(key, tok, path):
    if key in BOOL_KEYS:
        if tok not in ("true", "false"):
            raise SpecError("%s: model key '%s' wants true or false, got '%s'" % (path, key, tok))
        return tok == "true"
    if key in NAME_KEYS:
        return tok
    m = NUMBER_RE.match(tok)
    if not m:
        raise SpecError("%s: model key '%s' wants a number, got '%s'" % (path, key, tok))
    num, unit = m.groups()
    if key in FLOAT_KEYS:
        if unit:
            raise SpecError("%s: model key '%s' takes no unit, got '%s'" % (path, key, tok))
        return float(num)
    if unit not in COUNT_SUFFIX or not re.match(r"^-?\d+$", num):
        raise SpecError("%s: model key '%s' wants an integer count (suffix K, M or G), got '%s'" % (path, key, tok))
    return int(num) * COUNT_SUFFIX[unit]


def _parse_file(path, seen, found):
    """Walks one spec file; fills found (the last model block: name, keys, file)."""
    real = os.path.realpath(path)
    if real in seen:
        return
    seen.add(real)
    toks, i = _tokens(path), 0
    while i < len(toks):
        t = toks[i]
        if t == "import":
            if i + 1 >= len(toks) or not toks[i + 1].startswith('"'):
                raise SpecError("%s: 'import' wants a quoted file name" % path)
            _parse_file(os.path.join(os.path.dirname(path), toks[i + 1][1:-1]), seen, found)
            i += 2
            continue
        # block head: KIND NAME? ("from" STRING)? { ... }
        kind, j, name = t, i + 1, "default"
        if j < len(toks) and toks[j] not in ("{", "from"):
            name, j = toks[j], j + 1
        if j < len(toks) and toks[j] == "from":
            if kind == "model":
                raise SpecError(
                    "%s: 'model %s from %s' reads a Hugging Face config; this script reads only an inline "
                    "model block (write the shapes as 'model NAME { hidden ... }', or print them with "
                    "'baspc FILE --print-spec')" % (path, name, toks[j + 1] if j + 1 < len(toks) else "?"))
            j += 2
        if j >= len(toks) or toks[j] != "{":
            raise SpecError("%s: cannot read the spec near '%s' (expected a block '{')" % (path, t))
        depth, k = 1, j + 1
        while k < len(toks) and depth:
            depth += {"{": 1, "}": -1}.get(toks[k], 0)
            k += 1
        if depth:
            raise SpecError("%s: block '%s' is not closed with '}'" % (path, kind))
        if kind == "model":
            body = toks[j + 1:k - 1]
            if len(body) % 2:
                raise SpecError("%s: model %s: every key needs one value" % (path, name))
            keys = {}
            for key, tok in zip(body[0::2], body[1::2]):
                if key not in COUNT_KEYS + FLOAT_KEYS + BOOL_KEYS + NAME_KEYS:
                    raise SpecError(
                        "%s: model %s: unknown key '%s' (this script knows %s)"
                        % (path, name, key, ", ".join(COUNT_KEYS + FLOAT_KEYS + BOOL_KEYS + NAME_KEYS)))
                keys[key] = _value(key, tok, path)
            found.clear()
            found.update(name=name, keys=keys, file=path)
        i = k


def read_model_spec(path):
    """The model block of a basp spec with basp's defaults filled in (frontend/sema.c)."""
    found = {}
    _parse_file(path, set(), found)
    if not found:
        raise SpecError("%s: no 'model NAME { ... }' block" % path)
    m = dict(found["keys"])
    missing = [k for k in REQUIRED if k not in m]
    if missing:
        raise SpecError("%s: model %s lacks %s" % (path, found["name"], ", ".join(missing)))
    m.setdefault("kv_heads", m["heads"])
    m.setdefault("rope_theta", 10000.0)
    m.setdefault("norm_eps", 1e-5)
    m.setdefault("rope_scaling", "none")
    m.setdefault("rope_factor", 8.0)
    m.setdefault("rope_low_freq_factor", 1.0)
    m.setdefault("rope_high_freq_factor", 4.0)
    m.setdefault("rope_original_max_pos", 8192)
    for k in BOOL_KEYS:
        m.setdefault(k, False)
    if "head_dim" not in m:
        if m["hidden"] % m["heads"]:
            raise SpecError("%s: hidden %d is not divisible by heads %d: give head_dim" % (path, m["hidden"], m["heads"]))
        m["head_dim"] = m["hidden"] // m["heads"]
    if m["rope_scaling"] not in ("none", "llama3"):
        raise SpecError("%s: rope_scaling '%s' is not supported (none or llama3)" % (path, m["rope_scaling"]))
    if m["heads"] % m["kv_heads"]:
        raise SpecError("%s: heads %d is not divisible by kv_heads %d" % (path, m["heads"], m["kv_heads"]))
    m["name"] = found["name"]
    return m


def param_count(m):
    """Parameters of the model (tied embeddings counted once)."""
    h, hd, nq, nkv = m["hidden"], m["head_dim"], m["heads"], m["kv_heads"]
    attn = h * nq * hd * 2 + h * nkv * hd * 2
    if m["qkv_bias"]:
        attn += nq * hd + 2 * nkv * hd
    if m["qk_norm"]:
        attn += 2 * hd
    layer = attn + 3 * h * m["ffn"] + 2 * h
    emb = m["vocab"] * h
    return m["layers"] * layer + h + emb * (1 if m["tie_embeddings"] else 2)


def flops_per_token(params, m, seq):
    return 6 * params + 6 * m["layers"] * seq * m["heads"] * m["head_dim"]


# ---- output --------------------------------------------------------------------

RESULTS = []


def emit(line, **record):
    print(line, flush=True)
    if record:
        RESULTS.append(record)


def median_steps(xs):
    """Median over steps 3..N (all of them when there are fewer than 3)."""
    return statistics.median(xs[2:] or xs)


# ---- the model (torch only below) ---------------------------------------------------


def build_plain(torch, m, device, dtype, gqa):
    nn, F = torch.nn, torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, n, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n, device=device, dtype=dtype))
            self.eps = eps

        def forward(self, x):
            dt = x.dtype
            x = x.float()
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * x.to(dt)

    def linear(i, o, bias=False):
        return nn.Linear(i, o, bias=bias, device=device, dtype=dtype)

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            h, hd = m["hidden"], m["head_dim"]
            self.nq, self.nkv, self.hd = m["heads"], m["kv_heads"], hd
            self.q_proj = linear(h, self.nq * hd, m["qkv_bias"])
            self.k_proj = linear(h, self.nkv * hd, m["qkv_bias"])
            self.v_proj = linear(h, self.nkv * hd, m["qkv_bias"])
            self.o_proj = linear(self.nq * hd, h)
            if m["qk_norm"]:
                self.q_norm = RMSNorm(hd, m["norm_eps"])
                self.k_norm = RMSNorm(hd, m["norm_eps"])

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            q = self.q_proj(x).view(b, s, self.nq, self.hd)
            k = self.k_proj(x).view(b, s, self.nkv, self.hd)
            v = self.v_proj(x).view(b, s, self.nkv, self.hd)
            if m["qk_norm"]:
                q, k = self.q_norm(q), self.k_norm(k)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if self.nkv == self.nq:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            elif gqa == "native":
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                r = self.nq // self.nkv
                k, v = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(o.transpose(1, 2).reshape(b, s, self.nq * self.hd))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = linear(m["hidden"], m["ffn"])
            self.up_proj = linear(m["hidden"], m["ffn"])
            self.down_proj = linear(m["ffn"], m["hidden"])

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm(m["hidden"], m["norm_eps"])
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm(m["hidden"], m["norm_eps"])
            self.mlp = MLP()

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(m["vocab"], m["hidden"], device=device, dtype=dtype)
            self.layers = nn.ModuleList(Layer() for _ in range(m["layers"]))
            self.norm = RMSNorm(m["hidden"], m["norm_eps"])

    class Llama(nn.Module):
        """Parameter names as transformers' LlamaForCausalLM (state dicts load across)."""

        def __init__(self):
            super().__init__()
            self.model = Body()
            self.lm_head = None if m["tie_embeddings"] else linear(m["hidden"], m["vocab"])
            self.register_buffer("inv_freq", rope_inv_freq(torch, m, device), persistent=False)

        def forward(self, ids):
            s = ids.shape[1]
            freqs = torch.outer(torch.arange(s, device=ids.device, dtype=torch.float32), self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            x = self.model.embed_tokens(ids)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
            for layer in self.model.layers:
                x = layer(x, cos, sin)
            x = self.model.norm(x)
            w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
            return F.linear(x, w)

    model = Llama()
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                mod.weight.normal_(0.0, 0.02)
                if getattr(mod, "bias", None) is not None:
                    mod.bias.zero_()
    return model


def rope_inv_freq(torch, m, device):
    """RoPE inverse frequencies, fp32; llama3 scaling as transformers computes it."""
    hd = m["head_dim"]
    inv = 1.0 / (m["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32, device=device) / hd))
    if m["rope_scaling"] != "llama3":
        return inv
    factor, lo, hi = m["rope_factor"], m["rope_low_freq_factor"], m["rope_high_freq_factor"]
    old = m["rope_original_max_pos"]
    low_wl, high_wl = old / lo, old / hi
    wl = 2 * math.pi / inv
    scaled = torch.where(wl > low_wl, inv / factor, inv)
    smooth = (old / wl - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wl < high_wl) & ~(wl > low_wl)
    return torch.where(medium, smoothed, scaled)


def build_hf(torch, m, device, dtype, seq):
    import transformers

    if m["qkv_bias"] and m["qk_norm"]:
        raise RuntimeError("no transformers class has both qkv_bias and qk_norm")
    cls_name, cfg_name = (("Qwen2ForCausalLM", "Qwen2Config") if m["qkv_bias"] else
                          ("Qwen3ForCausalLM", "Qwen3Config") if m["qk_norm"] else
                          ("LlamaForCausalLM", "LlamaConfig"))
    cls, cfg_cls = getattr(transformers, cls_name), getattr(transformers, cfg_name)
    rope = {"rope_type": "default", "rope_theta": m["rope_theta"]}
    if m["rope_scaling"] == "llama3":
        rope.update(rope_type="llama3", factor=m["rope_factor"], low_freq_factor=m["rope_low_freq_factor"],
                    high_freq_factor=m["rope_high_freq_factor"],
                    original_max_position_embeddings=m["rope_original_max_pos"])
    kw = dict(vocab_size=m["vocab"], hidden_size=m["hidden"], intermediate_size=m["ffn"],
              num_hidden_layers=m["layers"], num_attention_heads=m["heads"], num_key_value_heads=m["kv_heads"],
              head_dim=m["head_dim"], rms_norm_eps=m["norm_eps"], tie_word_embeddings=m["tie_embeddings"],
              max_position_embeddings=max(seq, 131072), use_cache=False, hidden_act="silu")
    if cls_name == "LlamaForCausalLM":
        kw.update(attention_bias=False, mlp_bias=False)
    try:
        cfg = cfg_cls(rope_parameters=rope, **kw)  # transformers 5
    except TypeError:
        legacy = {k: v for k, v in rope.items() if k != "rope_theta"}
        cfg = cfg_cls(rope_theta=m["rope_theta"], rope_scaling=legacy if m["rope_scaling"] == "llama3" else None, **kw)
    with torch.device(device):
        try:
            model = cls._from_config(cfg, attn_implementation="sdpa", dtype=dtype)
        except TypeError:
            model = cls._from_config(cfg, attn_implementation="sdpa", torch_dtype=dtype)
    model = model.to(device=device, dtype=dtype)
    attn = getattr(model.config, "_attn_implementation", "?")
    if attn != "sdpa":
        raise RuntimeError("transformers chose attention '%s', not sdpa" % attn)
    return model, cls_name, transformers.__version__


# ---- timing ---------------------------------------------------------------------


class Timer:
    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            self.a = self.torch.cuda.Event(enable_timing=True)
            self.b = self.torch.cuda.Event(enable_timing=True)
            self.a.record()
        else:
            self.t = time.perf_counter()
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is not None:  # let the step's own error through
            return False
        if self.cuda:
            self.b.record()
            self.b.synchronize()
            self.ms = self.a.elapsed_time(self.b)
        else:
            self.ms = (time.perf_counter() - self.t) * 1e3
        return False


def peak_mem(torch, device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def is_oom(torch, e):
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e).lower()


def run_step(torch, args, m, impl, device, label):
    """One timed training run; returns True when it ran."""
    F = torch.nn.functional
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    params = param_count(m)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    extra = ""
    if impl == "hf":
        try:
            model, cls_name, tv = build_hf(torch, m, device, dtype, args.seq)
        except ImportError as e:
            emit("torch hf: skipped: transformers is not importable (%s)" % e, kind="step", impl="hf", skipped=str(e))
            return True
        extra = ", transformers %s %s sdpa" % (tv, cls_name)
    else:
        model = build_plain(torch, m, device, dtype, args.gqa)
        gqa = m["kv_heads"] != m["heads"]
        q = torch.empty(args.batch, m["heads"], args.seq, m["head_dim"], device=device, dtype=dtype)
        kv = torch.empty(args.batch, m["heads"] if args.gqa == "repeat" else m["kv_heads"], args.seq, m["head_dim"],
                         device=device, dtype=dtype)
        extra = ", gqa %s, sdpa %s" % (args.gqa if gqa else "none",
                                       sdpa_backend(torch, q, kv, kv, gqa and args.gqa == "native"))
        del q, kv
    model.train()
    n = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    if n != params:
        raise RuntimeError("%s model has %d parameters, the spec's count is %d" % (impl, n, params))
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=fused) if fused else \
        torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator(device=device).manual_seed(1234)
    tok = torch.randint(0, m["vocab"], (args.batch, args.seq + 1), device=device, generator=g)
    x, y = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()

    if impl == "hf":
        def forward_loss(x, y):
            logits = model(input_ids=x, use_cache=False).logits
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))
    else:
        def forward_loss(x, y):
            logits = model(x)
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))
    if args.compile:
        # max-autotune: Inductor tries several kernels per op (GEMM
        # templates, Triton configurations) and keeps the fastest; its
        # compile takes minutes where the default's takes seconds.
        forward_loss = torch.compile(forward_loss, mode=None if args.compile_mode == "default" else args.compile_mode)
        extra += ", torch.compile" + ("" if args.compile_mode == "default" else " mode=" + args.compile_mode)

    print("  %s: %s" % (label, extra.lstrip(", ")), flush=True)
    ms, losses = [], []
    for step in range(args.steps):
        with Timer(torch, device) as t:
            opt.zero_grad(set_to_none=True)
            loss = forward_loss(x, y)
            loss.backward()
            opt.step()
        lv = loss.item()
        ms.append(t.ms)
        losses.append(lv)
        print("  %s step %d/%d: %.1f ms, %.0f tok/s, loss %.4f"
              % (label, step + 1, args.steps, t.ms, args.batch * args.seq / (t.ms * 1e-3), lv), flush=True)
        if not math.isfinite(lv):
            raise RuntimeError("loss is %s at step %d" % (lv, step + 1))
    if args.profile:
        # One more step under torch.profiler: where PyTorch's step goes, op
        # by op, to set beside basp's --profile table.
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=acts) as prof:
            opt.zero_grad(set_to_none=True)
            loss = forward_loss(x, y)
            loss.backward()
            opt.step()
        key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=args.profile), flush=True)
    tps = median_steps([args.batch * args.seq / (t * 1e-3) for t in ms])
    fpt = flops_per_token(params, m, args.seq)
    mfu = tps * fpt / (args.peak * 1e12)
    mem = peak_mem(torch, device)
    n_med = len(ms[2:] or ms)
    steps_txt = "steps 3-%d" % args.steps if args.steps >= 3 else "steps 1-%d" % args.steps
    emit("torch %s %s batch %d seq %d: %.0f tokens/s (median of %s), step %.1f ms, %.3fM params, "
         "%.3g GFLOP/token, MFU %.1f%% of %.0f TFLOP/s, peak mem %.2f GiB, loss %.3f -> %.3f%s"
         % (label, m["name"], args.batch, args.seq, tps, steps_txt, median_steps(ms), params / 1e6, fpt / 1e9,
            100 * mfu, args.peak, mem / 2 ** 30, losses[0], losses[-1], extra),
         kind="step", impl=impl, model=m["name"], batch=args.batch, seq=args.seq, layers=m["layers"],
         tokens_per_s=tps, step_ms=ms, median_step_ms=median_steps(ms), median_of=n_med, params=params,
         flops_per_token=fpt, mfu=mfu, peak_tflops=args.peak, peak_mem_bytes=mem, losses=losses,
         compile=args.compile and args.compile_mode, gqa=args.gqa if impl == "plain" else None)
    del model, opt, x, y, tok
    return True


def sdpa_backend(torch, q, k, v, gqa):
    try:
        from torch.nn.attention import SDPBackend

        c = torch._fused_sdp_choice(q, k, v, is_causal=True, enable_gqa=gqa)
        return SDPBackend(c).name.lower()
    except Exception:
        return "?"


def bench_attention(torch, args, device, S, H, Hkv, Dh):
    F = torch.nn.functional
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    g = torch.Generator(device=device).manual_seed(S + H + Dh)

    def rnd(*shape):
        return (torch.rand(*shape, device=device, generator=g, dtype=torch.float32) * 2 - 1).to(dtype)

    q = rnd(1, H, S, Dh).requires_grad_()
    k = rnd(1, Hkv, S, Dh).requires_grad_()
    v = rnd(1, Hkv, S, Dh).requires_grad_()
    dout = rnd(1, H, S, Dh)
    gqa = H != Hkv
    if gqa and args.gqa == "repeat":
        def attn():
            r = H // Hkv
            return F.scaled_dot_product_attention(q, k.repeat_interleave(r, 1), v.repeat_interleave(r, 1),
                                                  is_causal=True)
    else:
        def attn():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    def med(fn):
        times = []
        for r in range(-1, args.reps):
            with Timer(torch, device) as t:
                fn()
            if r >= 0:
                times.append(t.ms)
        return sorted(times)[len(times) // 2]  # as gpu_attention_bench: ms[reps / 2]

    def fwd():
        with torch.no_grad():
            attn()

    out = attn()

    def bwd():
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    def fwd_bwd():
        torch.autograd.grad(attn(), (q, k, v), dout)

    f, b, fb = med(fwd), med(bwd), med(fwd_bwd)
    fl = 4.0 * H * S * S * Dh / 2.0
    tf, tb, tfb = fl / (f * 1e-3) / 1e12, 2.5 * fl / (b * 1e-3) / 1e12, 3.5 * fl / (fb * 1e-3) / 1e12
    be = sdpa_backend(torch, q.detach(), k.detach(), v.detach(), gqa and args.gqa == "native")
    p = args.peak
    emit("torch-sdpa Dh=%-3d S=%-6d H=%d/%d  fwd %8.2f ms %7.1f TFLOP/s (%4.1f%% of %.0f)  bwd %8.2f ms %7.1f "
         "TFLOP/s (%4.1f%%)  fwd+bwd %8.2f ms %7.1f TFLOP/s (%4.1f%%)  [%s%s]"
         % (Dh, S, H, Hkv, f, tf, 100 * tf / p, p, b, tb, 100 * tb / p, fb, tfb, 100 * tfb / p, be,
            ", repeat_kv" if gqa and args.gqa == "repeat" else ""),
         kind="sdpa", head_dim=Dh, seq=S, heads=H, kv_heads=Hkv, batch=1, backend=be, gqa=args.gqa,
         fwd_ms=f, bwd_ms=b, fwd_bwd_ms=fb, fwd_tflops=tf, bwd_tflops=tb, fwd_bwd_tflops=tfb, peak_tflops=p)
    del q, k, v, dout, out


def basp_ratio(path):
    """basp's median tokens/s over steps 3..N of a --metrics JSONL."""
    try:
        rows = [json.loads(l) for l in open(path) if l.strip()]
    except OSError as e:
        raise RuntimeError("cannot read basp metrics %s: %s" % (path, e.strerror or e))
    except ValueError as e:
        raise RuntimeError("basp metrics %s: not JSON lines (%s)" % (path, e))
    if not rows:
        raise RuntimeError("basp metrics %s is empty (did the basp run fail?)" % path)
    try:
        return median_steps([float(r["tokens_per_s"]) for r in rows]), len(rows)
    except (KeyError, TypeError, ValueError):
        raise RuntimeError("basp metrics %s: a line lacks a numeric tokens_per_s" % path)


# ---- main ------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description="PyTorch side of basp's one-GPU step and attention benchmarks.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--model", default=os.path.join(os.path.dirname(here), "examples", "llama3_2_1b.basp"),
                    help="basp spec whose model block gives the shapes")
    ap.add_argument("--impl", choices=("plain", "hf", "both"), default="plain")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=None, help="sequence length (default 8192; 64 with --tiny)")
    ap.add_argument("--layers", type=int, default=None, help="override the spec's layer count")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--peak", type=float, default=989.0, help="bf16 dense peak, TFLOP/s")
    ap.add_argument("--compile", action="store_true", help="torch.compile the forward + loss")
    ap.add_argument("--compile-mode", choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                    default="default", help="torch.compile's mode (with --compile)")
    ap.add_argument("--gqa", choices=("native", "repeat"), default="native",
                    help="SDPA enable_gqa=True, or K/V repeated to the query heads")
    ap.add_argument("--sdpa-backend", choices=("auto", "flash", "efficient", "cudnn", "math"), default="auto",
                    help="restrict SDPA to one backend (torch.nn.attention.sdpa_kernel)")
    ap.add_argument("--attention", action="store_true", help="also time SDPA alone at gpu_attention_bench's shapes")
    ap.add_argument("--no-step", action="store_true", help="skip the training step")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-seq", type=int, default=16384, help="longest attention sequence")
    ap.add_argument("--basp-metrics", metavar="FILE", help="basp --metrics JSONL to compare tokens/s with")
    ap.add_argument("--json", metavar="FILE", help="write all results here")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny model of the spec's kind, for a smoke test")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16",
                    help="parameters, gradients and optimizer state (fp32: basp's CPU precision)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: its default)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the timed steps, profile one more and print its N costliest ops")
    args = ap.parse_args()
    args.reps = max(1, args.reps)
    if args.seq is None:
        args.seq = 64 if args.tiny else 8192
    if args.batch < 1 or args.seq < 2 or args.steps < 1:
        ap.error("--batch, --seq and --steps must be positive (--seq at least 2)")

    try:
        m = read_model_spec(args.model)
    except SpecError as e:
        print("torch: bad spec: %s" % e, flush=True)
        return 1
    if args.tiny:
        m.update(hidden=64, layers=2, heads=4, kv_heads=2 if m["kv_heads"] != m["heads"] else 4, head_dim=16,
                 ffn=128, vocab=256)
        m["name"] += "-tiny"
    if args.layers is not None:
        if args.layers < 1:
            ap.error("--layers must be positive")
        m["layers"] = args.layers

    try:
        import torch
    except ImportError as e:
        print("torch: skipped: torch is not importable (%s)" % e, flush=True)
        return 77
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("torch: skipped: no CUDA device visible (torch %s, CUDA %s): use --device cpu"
                  % (torch.__version__, torch.version.cuda), flush=True)
            return 77
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        dev_name = torch.cuda.get_device_name(device)
    else:
        dev_name = "cpu (%d threads)" % torch.get_num_threads()
    params = param_count(m)
    emit("torch setup: torch %s (CUDA %s) on %s; model %s from %s: hidden %d, layers %d, heads %d/%d x %d, ffn %d, "
         "vocab %d, tie %s, rope %s%s%s; %.3fM params (%d), %.4g GFLOP/token at seq %d"
         % (torch.__version__, torch.version.cuda, dev_name, m["name"], args.model, m["hidden"], m["layers"],
            m["heads"], m["kv_heads"], m["head_dim"], m["ffn"], m["vocab"], str(m["tie_embeddings"]).lower(),
            m["rope_scaling"], ", qkv_bias" if m["qkv_bias"] else "", ", qk_norm" if m["qk_norm"] else "",
            params / 1e6, params, flops_per_token(params, m, args.seq) / 1e9, args.seq))
    meta = dict(torch=torch.__version__, cuda=torch.version.cuda, device=dev_name, spec=args.model,
                model=m, args=vars(args))

    ctx = None
    if args.sdpa_backend != "auto":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        ctx = sdpa_kernel([{"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[args.sdpa_backend]])
        ctx.__enter__()

    failed = False
    torch_tps = {}
    impls = ("plain", "hf") if args.impl == "both" else (args.impl,)
    for impl in ([] if args.no_step else impls):
        label = "plain" if impl == "plain" else "hf"
        try:
            run_step(torch, args, m, impl, device, label)
            rec = RESULTS[-1]
            if rec.get("kind") == "step" and "tokens_per_s" in rec:
                torch_tps[impl] = rec["tokens_per_s"]
        except Exception as e:  # OOM, a non-finite loss, a transformers mismatch ...
            failed = True
            what = ("out of memory at batch %d seq %d (peak %.2f GiB): try a smaller --seq or --batch"
                    % (args.batch, args.seq, peak_mem(torch, device) / 2 ** 30)) if is_oom(torch, e) else \
                "%s: %s" % (type(e).__name__, e)
            emit("torch %s %s batch %d seq %d: FAILED: %s" % (label, m["name"], args.batch, args.seq,
                                                              what.splitlines()[0] if what else "?"),
                 kind="step", impl=impl, error=what)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    if args.attention:
        seqs = (128, 256) if args.tiny else tuple(s for s in (4096, 8192, 16384) if s <= args.max_seq)
        shapes = ((4, 2, 16),) if args.tiny else ((32, 8, 64), (16, 8, 128))
        for S in seqs:
            for H, Hkv, Dh in shapes:
                try:
                    bench_attention(torch, args, device, S, H, Hkv, Dh)
                except Exception as e:
                    failed = True
                    what = "out of memory" if is_oom(torch, e) else "%s: %s" % (type(e).__name__, e)
                    emit("torch-sdpa Dh=%-3d S=%-6d H=%d/%d  FAILED: %s" % (Dh, S, H, Hkv, what.splitlines()[0]),
                         kind="sdpa", head_dim=Dh, seq=S, heads=H, kv_heads=Hkv, error=what)
                if device.type == "cuda":
                    torch.cuda.empty_cache()

    if ctx is not None:
        ctx.__exit__(None, None, None)

    if args.basp_metrics:
        try:
            basp, nrows = basp_ratio(args.basp_metrics)
            if not torch_tps:
                raise RuntimeError("no torch step result to compare with")
            for impl, tps in torch_tps.items():
                name = "torch" if impl == "plain" else "torch-" + impl
                emit("ratio basp/%s tokens/s: %.2f (basp %.0f tok/s, %s %.0f tok/s, same model, batch, seq)"
                     % (name, basp / tps, basp, name, tps),
                     kind="ratio", impl=impl, basp_tokens_per_s=basp, basp_steps=nrows, torch_tokens_per_s=tps,
                     ratio=basp / tps)
        except RuntimeError as e:
            failed = True
            emit("ratio basp/torch tokens/s: FAILED: %s" % e, kind="ratio", error=str(e))

    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(dict(meta, results=RESULTS, failed=failed), f, indent=1)
                f.write("\n")
        except OSError as e:
            print("torch: cannot write %s: %s" % (args.json, e.strerror or e), flush=True)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
