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
  make_hf.py qwen2_tied|qwen3_tied DIR EXPECTED
      The same for tiny_gqa.basp with `--set model.qkv_bias=true` (a Qwen2
      config: q/k/v_proj.bias [H*Dh] / [Hkv*Dh], ours [H,Dh] / [Hkv,Dh] in the
      same order; rope_theta at the top level, transformers 4's format) or
      `--set model.qk_norm=true` (a Qwen3 config: q_norm/k_norm.weight [Dh];
      rope_parameters, transformers 5's format).
  make_hf.py same A B
      Two --save-weights files hold the same tensors (names, dims, values),
      in any order; exits 1 naming the first difference.
  make_hf.py edit DIR KEY=JSON ...
      Sets top-level fields of DIR/config.json (JSON null deletes one; KEY
      a.b sets field b of object a) and, when DIR/state.json lists
      config.json, its size and FNV-1a-64 there, so that the edit is not
      taken for corruption.
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
    "qwen2_tied": (64, 2, 8, 2, 8, 128, 256),
    "qwen3_tied": (64, 2, 8, 2, 8, 128, 256),
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
               ("l%d.wo" % l, [H, Dh, D], p + "self_attn.o_proj.weight", [D, H * Dh])]
        if kind.startswith("qwen2"):  # flattened: the same elements in the same order
            ts += [("l%d.bq" % l, [H, Dh], p + "self_attn.q_proj.bias", [H * Dh]),
                   ("l%d.bk" % l, [KV, Dh], p + "self_attn.k_proj.bias", [KV * Dh]),
                   ("l%d.bv" % l, [KV, Dh], p + "self_attn.v_proj.bias", [KV * Dh])]
        if kind.startswith("qwen3"):
            ts += [("l%d.q_norm" % l, [Dh], p + "self_attn.q_norm.weight", None),
                   ("l%d.k_norm" % l, [Dh], p + "self_attn.k_norm.weight", None)]
        ts += [
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
    if kind.startswith("qwen2"):  # Qwen2Config: q/k/v biases always, no attention_bias field
        config.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu",
                      use_sliding_window=False, sliding_window=4096, max_window_layers=28)
    if kind.startswith("qwen3"):  # Qwen3Config, transformers 5: RoPE in rope_parameters
        del config["rope_theta"], config["torch_dtype"]
        config.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", attention_bias=False, dtype="bfloat16",
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, use_sliding_window=False,
                      sliding_window=None, layer_types=["full_attention"] * L)
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
        ours.append((name, dims, transpose(vals, shape[0], shape[1]) if hf_shape and len(shape) == 2 else vals))
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
    with open(expected, "wb") as f:  # runtime/ckpt/rt_save.c's format
        f.write(struct.pack("<III", 0x54505342, 1, len(ours)))
        for name, dims, _ in ours:
            f.write(struct.pack("<I", len(name)) + name.encode() + struct.pack("<I", len(dims)))
            f.write(struct.pack("<%dq" % len(dims), *dims))
        for _, _, vals in ours:
            f.write(struct.pack("<%df" % len(vals), *vals))


def read_weights(path):
    """A --save-weights file: {name: (dims, raw fp32 bytes)}."""
    b = open(path, "rb").read()
    magic, version, n = struct.unpack_from("<III", b, 0)
    assert magic == 0x54505342 and version == 1, path
    off, heads = 12, []
    for _ in range(n):
        (ln,) = struct.unpack_from("<I", b, off)
        name = b[off + 4:off + 4 + ln].decode()
        off += 4 + ln
        (nd,) = struct.unpack_from("<I", b, off)
        dims = list(struct.unpack_from("<%dq" % nd, b, off + 4))
        off += 4 + 8 * nd
        heads.append((name, dims))
    out = {}
    for name, dims in heads:
        size = 4
        for d in dims:
            size *= d
        out[name] = (dims, b[off:off + size])
        off += size
    assert off == len(b), path
    return out


def same(a, b):
    wa, wb = read_weights(a), read_weights(b)
    if sorted(wa) != sorted(wb):
        sys.exit("make_hf.py: %s and %s hold different tensors: %s" % (a, b, sorted(set(wa) ^ set(wb))))
    for name in wa:
        if wa[name] != wb[name]:
            sys.exit("make_hf.py: tensor %s differs between %s and %s" % (name, a, b))
    print("make_hf.py: %s and %s hold the same %d tensors" % (a, b, len(wa)))


def fnv64(data):
    h = 0xcbf29ce484222325
    for c in data:
        h = ((h ^ c) * 0x100000001b3) % 2**64
    return h


def edit(d, sets):
    path = os.path.join(d, "config.json")
    config = json.load(open(path))
    for kv in sets:
        key, val = kv.split("=", 1)
        obj, keys = config, key.split(".")
        for k in keys[:-1]:
            if not isinstance(obj.get(k), dict):
                obj[k] = {}
            obj = obj[k]
        val = json.loads(val)
        if val is None:
            obj.pop(keys[-1], None)
        else:
            obj[keys[-1]] = val
    text = (json.dumps(config, indent=2) + "\n").encode()
    open(path, "wb").write(text)
    state = os.path.join(d, "state.json")
    if os.path.exists(state):
        st = json.load(open(state))
        if "config.json" in st.get("files", {}):
            st["files"]["config.json"] = {"bytes": len(text), "fnv64": "%016x" % fnv64(text)}
            json.dump(st, open(state, "w"), indent=2)


def read_safetensors(path):
    """[(name, dtype, shape, bytes)] in file order, and the metadata."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    data = raw[8 + n:]
    ts = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in ts], meta


def damage(d, how):
    """A sharded directory of write_hf made wrong one way: `twoshards` (a
    tensor of the first shard also in the second), `drop` (model.norm.weight
    in no shard), `f64big` (model.norm.weight as F64 with 1e300 at element 3:
    finite, but beyond float32)."""
    names = ["model-%05d-of-00002.safetensors" % (k + 1) for k in range(2)]
    shards = [read_safetensors(os.path.join(d, f)) for f in names]
    index_path = os.path.join(d, "model.safetensors.index.json")
    index = json.load(open(index_path))
    if how == "twoshards":
        shards[1][0].append(shards[0][0][0])
    for ts, _ in shards:
        for i, t in enumerate(ts):
            if t[0] != "model.norm.weight":
                continue
            if how == "drop":
                del ts[i]
                del index["weight_map"][t[0]]
            elif how == "f64big":
                vals = [0.5] * (len(t[3]) // {"F32": 4, "BF16": 2, "F16": 2}[t[1]])
                vals[3] = 1e300
                ts[i] = (t[0], "F64", t[2], struct.pack("<%dd" % len(vals), *vals))
            break
    for f, (ts, meta) in zip(names, shards):
        write_safetensors(os.path.join(d, f), ts, meta)
    json.dump(index, open(index_path, "w"), indent=2)


def write_handmade(path):
    write_safetensors(path, [
        ("a.f32", "F32", [2, 3], encode([1.0, -2.0, 0.5, 3.25, -0.125, 100.0], "F32")),
        ("b.bf16", "BF16", [4], encode([1.0, -2.0, 0.5, 3.25], "BF16")),
        ("c.f16", "F16", [2, 2], encode([1.0, -2.0, 0.5, 65504.0], "F16")),
    ], {"made_by": "tests/ckpt/make_hf.py handmade"})


if __name__ == "__main__":
    if sys.argv[1] == "handmade":
        write_handmade(sys.argv[2])
    elif sys.argv[1] == "same":
        same(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "edit":
        edit(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "damage":
        damage(sys.argv[2], sys.argv[3])
    else:
        write_hf(sys.argv[1], sys.argv[2], sys.argv[3])
