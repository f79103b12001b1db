"""attention_ratio.py < plan.json: the ring candidate's predicted attention
time against Ulysses' (layout/presets.c's rates, H200, Dh 128, 4 ranks at
32K).  Both run cuDNN, the ring on sub-blocks of half its 8K slice: cuDNN's
rate at 4K (0.43 of peak forward, 0.38 backward) against 16K and above
(0.64, 0.58), so 1.2-2x.  Costed at basp's block kernels (0.05 and 0.006
of peak) the ring would be over 20x."""
import json, sys
c = {x["name"]: x for x in json.load(sys.stdin)["candidates"]}
u, r = c["ulysses"]["attention_ms"], c["ring"]["attention_ms"]
assert 1.2 * u <= r <= 2.0 * u, f"ring attention {r:.1f} ms is not 1.2-2x Ulysses' {u:.1f} ms"
print(f"ring {r:.1f} ms vs ulysses {u:.1f} ms: {r / u:.1f}x")
