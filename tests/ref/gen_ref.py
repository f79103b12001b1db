#!/usr/bin/env python3
"""Development aid (not run by the tests): writes the committed reference
that tests/ref/check_ref.py compares basp against, computed by an
implementation that shares nothing with basp (Hugging Face transformers on
PyTorch).

    pip install torch transformers safetensors
    python3 tests/ref/gen_ref.py [OUTDIR]        # OUTDIR defaults to tests/ref

For each of three tiny models -- llama (GQA, untied head), qwen2 (q/k/v
biases, tied), qwen3 (q/k RMSNorm, tied) -- it

  1. builds the transformers model from its config, initialises it from a
     fixed seed (std 0.1, then norm weights and biases moved away from 1 and
     0 so that they matter), rounds every weight to bf16 and saves it with
     save_pretrained(..., safe_serialization=True) in bf16 to OUTDIR/hf/NAME
     (the directory basp loads with --init-from; bf16 halves the committed
     size and the values are exact, so the fp32 model below sees the same
     weights as basp);
  2. trains it for STEPS steps on OUTDIR/tokens.bin (an llm.c token file
     written here) exactly as basp's runtime does: the same sampler
     (runtime/data/rt_data.c: splitmix64 positions from (seed, step, sequence)),
     the loss as the sum of the token cross-entropies over B*S, the global
     gradient norm (in double) and clipping at 1.0 with 1/(norm + 1e-6),
     and AdamW with basp's constants (runtime/core/rt_sched.c, rt_optim.c,
     runtime/host/kern_adamw.c: beta1 0.9, beta2 0.95, eps 1e-8 added to
     sqrt(v)/sqrt(1-beta2^t), bias-corrected, decoupled weight decay 0.1 on
     every matrix -- not on the norm weights nor on the q/k/v biases --,
     constant lr);
  3. writes OUTDIR/NAME.ref.json: per-step loss and gradient norm, and for
     every parameter (in basp's names and layout) the L2 norm of its
     first-step gradient plus up to SAMPLES of its elements (gradient of the
     first step, weight after the last step) as base64 little-endian fp32.

The model runs in float64 (model.double()): the reference is then closer to
the exact values than basp's fp32, so the tolerances in check_ref.py measure
basp's rounding, not the sum of two fp32 implementations' rounding.
transformers still computes RMSNorm, the RoPE angles and the eager softmax
in fp32 internally; the fp32 run's losses are recorded too
("loss_torch_fp32") to show the two agree.
"""
import base64
import json
import math
import os
import struct
import sys

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))

# Shapes shared by the three models and tests/ref/*.basp.
SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=128, vocab_size=256, rope_theta=10000.0, rms_norm_eps=1e-6,
             max_position_embeddings=256)
MODELS = [
    # name, config class, model class, tied head, init seed
    ("llama", LlamaConfig, LlamaForCausalLM, False, 101),
    ("qwen2", Qwen2Config, Qwen2ForCausalLM, True, 202),
    ("qwen3", Qwen3Config, Qwen3ForCausalLM, True, 303),
]
B, S = 4, 32            # train.micro_batch, train.seq_len of tests/ref/*.basp
STEPS = 3
LR = 5e-4               # train.lr of tests/ref/*.basp
DATA_SEED = 7           # --seed: drives only the batch sampler with --init-from
NTOKENS = 1024          # tokens in tokens.bin
INIT_STD = 0.1
SAMPLES = 256           # sampled elements per tensor (all of a smaller tensor)

# basp's optimizer (runtime/core/rt_sched.c, rt_optim_defaults)
BETA1, BETA2, EPS, WD, MAX_NORM = 0.9, 0.95, 1e-8, 0.1, 1.0
M64 = (1 << 64) - 1


def splitmix64(x):
    """rt_splitmix64 (runtime/core/rt_arena.c)."""
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def position(seed, t, b, ntokens, seq_len):
    """rt_data_position (runtime/data/rt_data.c): where sequence b of step t starts."""
    h = splitmix64(seed)
    h = splitmix64(h ^ t)
    h = splitmix64(h ^ b)
    return h % (ntokens - seq_len - 1)


def write_tokens(path, tokens):
    """llm.c token file, version 1 (uint16): 256 int32 header, then the tokens."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def basp_name(hf):
    """Hugging Face tensor name -> (basp parameter name, transpose?) -- the
    mapping of runtime/ckpt/rt_hf.c, written independently."""
    if hf == "model.embed_tokens.weight":
        return "embed", False
    if hf == "model.norm.weight":
        return "final_norm", False
    if hf == "lm_head.weight":
        return "lm_head", False
    parts = hf.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf
    layer, rest = parts[2], ".".join(parts[3:])
    table = {
        "input_layernorm.weight": ("attn_norm", False),
        "post_attention_layernorm.weight": ("mlp_norm", False),
        "self_attn.q_proj.weight": ("wq", True), "self_attn.k_proj.weight": ("wk", True),
        "self_attn.v_proj.weight": ("wv", True), "self_attn.o_proj.weight": ("wo", True),
        "mlp.gate_proj.weight": ("w_gate", True), "mlp.up_proj.weight": ("w_up", True),
        "mlp.down_proj.weight": ("w_down", True),
        "self_attn.q_proj.bias": ("bq", False), "self_attn.k_proj.bias": ("bk", False),
        "self_attn.v_proj.bias": ("bv", False),
        "self_attn.q_norm.weight": ("q_norm", False), "self_attn.k_norm.weight": ("k_norm", False),
    }
    ours, tr = table[rest]
    return "l%s.%s" % (layer, ours), tr


def basp_flat(t, transpose):
    """A tensor in basp's layout ([in, out] for linear weights), flattened row-major."""
    t = t.detach().to(torch.float64)
    if transpose:
        t = t.t()
    return t.contiguous().reshape(-1)


def sample_indices(n):
    """The elements recorded of a tensor of n elements (check_ref.py recomputes them)."""
    if n <= SAMPLES:
        return list(range(n))
    return sorted({(k * 7919 + 13) % n for k in range(SAMPLES)})


def pack(vals):
    return base64.b64encode(struct.pack("<%df" % len(vals), *vals)).decode()


def build(cfg_cls, model_cls, tied, seed):
    cfg = cfg_cls(**SHAPE, tie_word_embeddings=tied, initializer_range=INIT_STD, attention_dropout=0.0)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(cfg).to(torch.float32)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or n.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.5 * (torch.rand(p.shape, generator=g) - 0.5))   # in [0.75, 1.25)
            elif n.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(INIT_STD * torch.randn(p.shape, generator=g))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))   # exact in the committed bf16 file
    return model


def check_rope(model):
    """The model's RoPE frequencies are theta^(-2i/Dh) with theta 10000 (what basp uses)."""
    inv = model.model.rotary_emb.inv_freq.double()
    dh = SHAPE["head_dim"]
    want = torch.tensor([SHAPE["rope_theta"] ** (-2.0 * i / dh) for i in range(dh // 2)], dtype=torch.float64)
    assert torch.allclose(inv, want, rtol=1e-6), (inv, want)


def train(model, tokens, dtype):
    """STEPS steps as basp's runtime takes them; returns the losses, gradient norms, batch positions, the
    gradients of the first step and the weights after the last."""
    model = model.to(dtype)
    model.train()
    params = list(model.named_parameters())   # a tied head is one parameter (listed once)
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in params}
    V = SHAPE["vocab_size"]
    losses, norms, positions = [], [], []
    grads = None
    for t in range(STEPS):
        pos = [position(DATA_SEED, t, b, len(tokens), S) for b in range(B)]
        positions.append(pos)
        x = torch.tensor([tokens[p:p + S] for p in pos], dtype=torch.long)
        y = torch.tensor([tokens[p + 1:p + S + 1] for p in pos], dtype=torch.long)
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=x, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V).to(dtype), y.reshape(-1),
                                                 reduction="sum") / (B * S)
        loss.backward()
        norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for _, p in params))
        losses.append(float(loss.detach()))
        norms.append(norm)
        if t == 0:
            grads = {n: p.grad.detach().clone() for n, p in params}
        clip = MAX_NORM / (norm + 1e-6) if norm > MAX_NORM else 1.0
        step = t + 1
        bc1, bc2 = 1.0 - BETA1 ** step, 1.0 - BETA2 ** step
        with torch.no_grad():
            for n, p in params:
                m, v = state[n]
                gr = p.grad * clip
                m.mul_(BETA1).add_((1 - BETA1) * gr)
                v.mul_(BETA2).add_((1 - BETA2) * gr * gr)
                bn = basp_name(n)[0]
                wd = 0.0 if bn.endswith("norm") or bn.endswith((".bq", ".bk", ".bv")) else WD
                p.mul_(1.0 - LR * wd)
                p.sub_((LR / bc1) * m / (v.sqrt() / math.sqrt(bc2) + EPS))
    weights = {n: p.detach().clone() for n, p in params}
    return losses, norms, positions, grads, weights


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    os.makedirs(out, exist_ok=True)
    rnd = torch.Generator().manual_seed(12345)
    tokens = torch.randint(0, SHAPE["vocab_size"], (NTOKENS,), generator=rnd).tolist()
    write_tokens(os.path.join(out, "tokens.bin"), tokens)
    for name, cfg_cls, model_cls, tied, seed in MODELS:
        model = build(cfg_cls, model_cls, tied, seed)
        check_rope(model)
        hfdir = os.path.join(out, "hf", name)
        model.to(torch.bfloat16).save_pretrained(hfdir, safe_serialization=True)
        if os.path.exists(os.path.join(hfdir, "generation_config.json")):   # not read by basp
            os.remove(os.path.join(hfdir, "generation_config.json"))
        # Train what was saved: the directory loaded back (bf16 values, exact
        # in fp32 and float64), after checking that it holds the built weights.
        def load():
            m = model_cls.from_pretrained(hfdir, attn_implementation="eager").to(torch.float32)
            built = build(cfg_cls, model_cls, tied, seed).state_dict()
            for k, v in m.state_dict().items():
                assert torch.equal(v, built[k]), k
            assert tied == (m.lm_head.weight is m.model.embed_tokens.weight)
            return m
        l32, n32, _, _, _ = train(load(), tokens, torch.float32)
        losses, norms, positions, grads, weights = train(load(), tokens, torch.float64)
        tensors = {}
        for n in grads:
            ours, tr = basp_name(n)
            gf, wf = basp_flat(grads[n], tr), basp_flat(weights[n], tr)
            idx = sample_indices(gf.numel())
            tensors[ours] = {
                "hf": n, "elems": gf.numel(), "hf_shape": list(grads[n].shape),
                "grad_l2": float(gf.norm()), "grad_absmax": float(gf.abs().max()),
                "weight_absmax": float(wf.abs().max()),
                "grad": pack([float(gf[i]) for i in idx]), "weight": pack([float(wf[i]) for i in idx]),
            }
        ref = {
            "model": name, "architecture": model_cls.__name__, "tie_embeddings": tied,
            "generated_by": "tests/ref/gen_ref.py with torch %s, transformers %s (float64)"
                            % (torch.__version__, transformers.__version__),
            "shape": SHAPE, "micro_batch": B, "seq_len": S, "steps": STEPS, "lr": LR, "seed": DATA_SEED,
            "samples_per_tensor": SAMPLES, "sample_rule": "all, or sorted({(k*7919+13) % n : k < samples})",
            "positions": positions, "loss": losses, "grad_norm": norms,
            "loss_torch_fp32": l32, "grad_norm_torch_fp32": n32, "tensors": tensors,
        }
        with open(os.path.join(out, "%s.ref.json" % name), "w") as f:
            json.dump(ref, f, indent=1, sort_keys=True)
            f.write("\n")
        print("%-6s loss %s  grad_norm %s  (fp32 torch: loss %s)" % (
            name, " ".join("%.7f" % v for v in losses), " ".join("%.5f" % v for v in norms),
            " ".join("%.7f" % v for v in l32)))


if __name__ == "__main__":
    main()
