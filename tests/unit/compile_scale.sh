#!/usr/bin/env bash
# compile_scale.sh BASPC EXAMPLES — the compiler scales with layers and ranks.
#  1. tiny_llama at 512 layers with recompute auto (three trial plans and
#     the final one) compiles within 15 s (about 1 s; 20 s and more when
#     the memory plan, recompute and zero were quadratic in the layers).
#  2. llama3_1_8b at 16384 ranks (4096 nodes x 4, micro-batch 2 per node,
#     batch_aware auto: every legal G is costed) prints its schedule within
#     15 s (under 1 s; hours when the cost model compared every pair of
#     ranks of @world for every collective).
#  3. At 8, 32 and 256 ranks the chosen layout and every candidate's
#     predicted time are those of the pairwise reference
#     (BASP_COST_SPAN_PAIRS=1).
set -u
baspc=${1:?usage: compile_scale.sh BASPC EXAMPLES}
ex=${2:?usage: compile_scale.sh BASPC EXAMPLES}
fail=0
timed() { # LIMIT WHAT CMD...: runs CMD, fails when it errs or takes longer than LIMIT seconds
    local limit=$1 what=$2 t0 t1
    shift 2
    t0=$(date +%s.%N)
    timeout "$limit" "$@" >/dev/null 2>/tmp/compile_scale.$$ </dev/null
    local rc=$?
    t1=$(date +%s.%N)
    if [ $rc -eq 124 ]; then
        echo "FAIL: $what: still running after ${limit} s"
        fail=1
    elif [ $rc -ne 0 ]; then
        echo "FAIL: $what: exit $rc"; cat /tmp/compile_scale.$$
        fail=1
    else
        awk -v w="$what" -v a="$t0" -v b="$t1" 'BEGIN { printf "ok: %s: %.2f s\n", w, b - a }'
    fi
    rm -f /tmp/compile_scale.$$
}
timed 15 "tiny_llama 512 layers, recompute auto" \
    "$baspc" "$ex/tiny_llama.basp" --emit=ir -q --set model.layers=512 --set train.recompute=auto -o /dev/null
timed 15 "llama3_1_8b --schedule at 16384 ranks" \
    "$baspc" "$ex/llama3_1_8b.basp" --schedule -q --set mesh.nodes=4096 --set train.micro_batch=8192
for nodes in 2 8 64; do
    args=("$ex/llama3_1_8b.basp" --schedule --set mesh.nodes=$nodes --set train.micro_batch=$((2 * nodes)))
    a=$("$baspc" "${args[@]}" 2>&1 >/dev/null | grep 'remark: layout:')
    b=$(BASP_COST_SPAN_PAIRS=1 "$baspc" "${args[@]}" 2>&1 >/dev/null | grep 'remark: layout:')
    if [ -z "$a" ] || [ "$a" != "$b" ]; then
        echo "FAIL: $((4 * nodes)) ranks: the layout choice differs from the pairwise reference"
        echo "  got:       $a"
        echo "  reference: $b"
        fail=1
    else
        echo "ok: $((4 * nodes)) ranks: ${a#remark: layout: }" | cut -c1-160
    fi
done
exit $fail
