#!/usr/bin/env bash
# golden.sh BASPC OUTDIR — the memory plans of every example and of the lit
# memory inputs, one file per case: the IR after the default pipeline (every
# value's arena offset, `at N`, and the mem.* config keys) and `--memory
# --json` (peak, peak op, breakdown).  Two runs of two compilers diff to
# nothing when their plans are identical:
#   bench/memplan/golden.sh build-old/baspc /tmp/a
#   bench/memplan/golden.sh build/baspc /tmp/b && diff -r /tmp/a /tmp/b
set -u
baspc=${1:?usage: golden.sh BASPC OUTDIR}
out=${2:?usage: golden.sh BASPC OUTDIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
# The plan's numbers in a --memory --json report (other keys may come and go).
plan_keys() {
    python3 -c '
import json, sys
text = sys.stdin.read()
try:
    r = json.loads(text)
except ValueError:
    print(text)
    sys.exit()
for k in ("peak_bytes_per_rank", "arena_bytes", "peak_op", "breakdown", "unused_bytes", "no_reuse_bytes",
          "top", "fits"):
    print(k, json.dumps(r.get(k), sort_keys=True))'
}
specs=$(ls "$root"/examples/*.basp "$root"/examples/recipe/*.basp | grep -v a100_2x4)
for f in $specs; do
    b=$(basename "$f" .basp)
    for t in cpu cuda; do
        for rc in none selective full auto; do
            o="$out/$b.$t.$rc"
            "$baspc" "$f" --target=$t --set train.recompute=$rc --emit=ir -q >"$o.ir" 2>&1
            echo "rc $?" >>"$o.ir"
            "$baspc" "$f" --target=$t --set train.recompute=$rc --memory --json -q 2>"$o.err" | plan_keys >"$o.json"
        done
    done
done
# Deeper models: more layers, more buffers live at once.
for spec in llama3_2_1b:64 tiny_zero3_b4:48 qwen2_5_3b:80; do
    b=${spec%:*} L=${spec#*:}
    for rc in none full auto; do
        o="$out/deep.$b.$L.$rc"
        "$baspc" "$root/examples/$b.basp" --target=cuda --set model.layers=$L --set train.recompute=$rc \
            --emit=ir -q >"$o.ir" 2>&1
        echo "rc $?" >>"$o.ir"
    done
done
for f in "$root"/tests/lit/memory/*.bir; do
    b=$(basename "$f" .bir)
    "$baspc" "$f" --passes=memplan --emit=ir -q >"$out/lit.$b.ir" 2>&1
    echo "rc $?" >>"$out/lit.$b.ir"
    "$baspc" "$f" --memory --json -q 2>"$out/lit.$b.err" | plan_keys >"$out/lit.$b.json"
done
