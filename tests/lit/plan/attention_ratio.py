"""attention_ratio.py < plan.json: the ring candidate's predicted attention
time is at least 5x Ulysses' (basp's CUDA kernels against cuDNN: measured
on the H200 at 0.05-0.06 of peak forward and under 0.01 backward, against
cuDNN's 0.35-0.64 and 0.31-0.58, layout/presets.c)."""
import json, sys
c = {x["name"]: x for x in json.load(sys.stdin)["candidates"]}
u, r = c["ulysses"]["attention_ms"], c["ring"]["attention_ms"]
assert r >= 5 * u, f"ring attention {r:.1f} ms is not several times Ulysses' {u:.1f} ms"
print(f"ring {r:.1f} ms vs ulysses {u:.1f} ms: {r / u:.1f}x")
