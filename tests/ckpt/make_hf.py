#!/usr/bin/env python3
"""Writes safetensors test inputs with the Python standard library only, as an
implementation independent of the runtime's (rt_safetensors.c, rt_hf.c).

  make_hf.py mha|gqa|gqa_tied DIR EXPECTED
      A Hugging Face Llama directory for tests/train/tiny_mha.basp or
      tiny_gqa.basp (gqa: an untied head, gqa_tied: tied, storing an
      lm_head.weight equal to the embedding): config.json, two shards with model.safetensors.index.json,
      tensors in F32, BF16 and F16 by turns (values exact in their dtype), a
      rotary_emb.inv_freq buffer (to be ignored), and EXPECTED: the same
      weights in the runtime's --save-weights format and layout ([in, out]
      linear weights), which --init-from DIR --save-weights must reproduce.
  make_hf.py handmade FILE
      tests/ckpt/handmade.safetensors (committed): three tiny tensors with
      known values (checked by test_safetensors.c) and a __metadata__ entry.
"""
import json
import os
import struct
import sys

SHAPES = {  # hidden, layers, heads, kv_heads, head_dim, ffn, vocab
    "mha": (64, 2, 4, 4, 16, 128, 256),
    "gqa": (64, 2, 8, 2, 8, 128, 256),
    "gqa_tied": (64, 2, 8, 2, 8, 128, 256),
}


def rng_values(n, seed):
    """Deterministic values in [-0.125, 0.125), multiples of 2^-10: exact in F16 and BF16."""
    x, out = seed * 2654435761 % 2**32, []
    for _ in range(n):
        x = (1103515245 * x + 12345) % 2**31
        out.append(((x >> 8) % 256 - 128) / 1024.0)
    return out


def encode(vals, dtype):
    if dtype == "F32":
        return struct.pack("<%df" % len(vals), *vals)
    if dtype == "F16":
        return struct.pack("<%de" % len(vals), *vals)
    bits = struct.unpack("<%dI" % len(vals), struct.pack("<%df" % len(vals), *vals))
    return struct.pack("<%dH" % len(vals), *[b >> 16 for b in bits])  # BF16: exact for these values


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, off = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for t in tensors:
            f.write(t[3])


def transpose(vals, rows, cols):
    """vals [rows, cols] row-major -> [cols, rows]."""
    return [vals[r * cols + c] for c in range(cols) for r in range(rows)]


def model_tensors(kind):
    D, L, H, KV, Dh, F, V = SHAPES[kind]
    # (our name, our dims, HF name, HF [out, in] or None when stored alike)
    ts = [("embed", [V, D], "model.embed_tokens.weight", None)]
    for l in range(L):
        p = "model.layers.%d." % l
        ts += [("l%d.attn_norm" % l, [D], p + "input_layernorm.weight", None),
               ("l%d.wq" % l, [D, H, Dh], p + "self_attn.q_proj.weight", [H * Dh, D]),
               ("l%d.wk" % l, [D, KV, Dh], p + "self_attn.k_proj.weight", [KV * Dh, D]),
               ("l%d.wv" % l, [D, KV, Dh], p + "self_attn.v_proj.weight", [KV * Dh, D]),
               ("l%d.wo" % l, [H, Dh, D], p + "self_attn.o_proj.weight", [D, H * Dh]),
               ("l%d.mlp_norm" % l, [D], p + "post_attention_layernorm.weight", None),
               ("l%d.w_gate" % l, [D, F], p + "mlp.gate_proj.weight", [F, D]),
               ("l%d.w_up" % l, [D, F], p + "mlp.up_proj.weight", [F, D]),
               ("l%d.w_down" % l, [F, D], p + "mlp.down_proj.weight", [D, F])]
    ts += [("final_norm", [D], "model.norm.weight", None)]
    if not kind.endswith("_tied"):
        ts += [("lm_head", [V, D], "lm_head.weight", None)]
    return ts


def write_hf(kind, out, expected):
    D, L, H, KV, Dh, F, V = SHAPES[kind]
    os.makedirs(out, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
              "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": Dh,
              "intermediate_size": F, "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "tie_word_embeddings": kind.endswith("_tied"), "torch_dtype": "bfloat16"}
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
    shards, ours = ([], []), []
    for i, (name, dims, hf, hf_shape) in enumerate(model_tensors(kind)):
        n = 1
        for d in dims:
            n *= d
        vals = rng_values(n, i + 1)  # in the HF layout
        dtype = ("F32", "BF16", "F16")[i % 3]
        shape = hf_shape or dims
        shards[0 if i < 12 else 1].append((hf, dtype, shape, encode(vals, dtype)))
        ours.append((name, dims, transpose(vals, shape[0], shape[1]) if hf_shape else vals))
    shards[1].append(("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", [Dh // 2],
                      encode([1.0] * (Dh // 2), "F32")))
    if kind.endswith("_tied"):  # a tied model may store its head: the embedding again, here as BF16
        shards[1].append(("lm_head.weight", "BF16", [V, D], encode(rng_values(V * D, 1), "BF16")))
    weight_map = {}
    for k, ts in enumerate(shards):
        fname = "model-%05d-of-00002.safetensors" % (k + 1)
        write_safetensors(os.path.join(out, fname), ts, {"format": "pt"})
        weight_map.update({t[0]: fname for t in ts})
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
    with open(expected, "wb") as f:  # runtime/rt_save.c's format
        f.write(struct.pack("<III", 0x54505342, 1, len(ours)))
        for name, dims, _ in ours:
            f.write(struct.pack("<I", len(name)) + name.encode() + struct.pack("<I", len(dims)))
            f.write(struct.pack("<%dq" % len(dims), *dims))
        for _, _, vals in ours:
            f.write(struct.pack("<%df" % len(vals), *vals))


def write_handmade(path):
    write_safetensors(path, [
        ("a.f32", "F32", [2, 3], encode([1.0, -2.0, 0.5, 3.25, -0.125, 100.0], "F32")),
        ("b.bf16", "BF16", [4], encode([1.0, -2.0, 0.5, 3.25], "BF16")),
        ("c.f16", "F16", [2, 2], encode([1.0, -2.0, 0.5, 65504.0], "F16")),
    ], {"made_by": "tests/ckpt/make_hf.py handmade"})


if __name__ == "__main__":
    if sys.argv[1] == "handmade":
        write_handmade(sys.argv[2])
    else:
        write_hf(sys.argv[1], sys.argv[2], sys.argv[3])
