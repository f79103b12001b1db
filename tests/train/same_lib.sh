# shellcheck shell=bash
# same_lib.sh — sourced by the tests that build SPEC two or more ways under a
# list of layouts and require the programs to train to the same bits
# (fuse.sh, overlap.sh, recompute.sh).  The caller sets BASPC, MPIRUN,
# CORPUS, SPEC and W (the work directory), and DOCS if a layout says
# data=docs.
#
# A layout is a string "k=v;k=v": each key a --set override of SPEC, except
# data=docs (train on DOCS, not CORPUS) and the keys the caller's layout_key
# takes.  Without a key that says otherwise, 4 ranks as 2 nodes x 2.

mpi() { "$MPIRUN" --allow-run-as-root --oversubscribe "$@"; }

# The --metrics fields that must agree (not the timings).
fields() {
    python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["step"], r.get("loss"), r.get("grad_norm"), r.get("val_loss"))' "$1"
}

# layout L: sets (the --set arguments), np and data of layout L.  Each key
# goes first to the caller's layout_key where it defines one (the tests read
# np=N as different meshes), which returns 1 for a key it does not take.
layout() {
    local kv s
    sets=(--set mesh.nodes=2 --set mesh.devices_per_node=2) np=4 data=$CORPUS
    IFS=';' read -ra kv <<<"$1"
    for s in "${kv[@]}"; do
        if [[ $s == data=docs ]]; then
            data=$DOCS
        elif ! { declare -F layout_key >/dev/null && layout_key "$s"; }; then
            sets+=(--set "$s")
        fi
    done
}

# compile ARG...: baspc on SPEC with the layout's overrides and ARG...
compile() { "$BASPC" "$SPEC" -q "${sets[@]}" "$@"; }

# build Q ARG...: the program Q.train and its IR Q.ir, compiled with ARG...
build() {
    local q=$1
    shift
    compile "$@" -o "$q.train"
    compile "$@" --emit=ir -o "$q.ir"
}

# train Q ARG...: Q.train for 3 steps on the layout's ranks and data, with
# ARG...; the metrics in Q.jsonl, the final weights in Q.weights, the last
# gradients in Q.grads, the output in Q.log.
train() {
    local q=$1
    shift
    mpi -np "$np" "$q.train" --data "$data" --steps 3 "$@" --metrics "$q.jsonl" \
        --save-weights "$q.weights" --save-grads "$q.grads" >"$q.log"
}

# The report of the layout in l: a line each, failures counted in fails.
ok() { echo "ok   $l: $*"; }
fail() {
    echo "FAIL $l: $*"
    fails=$((fails + 1))
}

# same_bits N P: runs N and P saved the same weights and gradients, byte for
# byte (cmp prints the first byte that differs).
same_bits() { cmp "$1.weights" "$2.weights" && cmp "$1.grads" "$2.grads"; }

# agree N P WHY OK: runs N and P agree bit for bit (weights, gradients and
# the metrics' fields): "ok" with OK, else "FAIL" with WHY and the metrics'
# differences.  A metrics file that does not parse stops the test.
agree() {
    local a b
    a=$(fields "$1.jsonl")
    b=$(fields "$2.jsonl")
    if same_bits "$1" "$2" && [[ $a == "$b" ]]; then
        ok "$4"
    else
        fail "$3"
        diff <(echo "$a") <(echo "$b") || true
    fi
}

# each_layout FN LAYOUT...: FN LAYOUT Q for each layout, Q its files' prefix
# in W (W/l0, W/l1, ...); FN reports with ok and fail (or adds to fails
# itself).  Fails if any layout failed.
each_layout() {
    local fn=$1 i=0 fails=0 l
    shift
    for l in "$@"; do
        "$fn" "$l" "$W/l$i"
        i=$((i + 1))
    done
    [[ $fails == 0 ]]
}
