#!/usr/bin/env bash
# fuse_loss.sh — the LM head's loss and gradient in one op (train.fuse_loss,
# passes/pass_fuse_loss.c) computes what the two ops compute.
#
#   fuse_loss.sh same BASPC MPIRUN CORPUS DOCS SPEC WORKDIR
#     For layouts of SPEC covering one rank, batch-aware, Ulysses, ring,
#     hybrid, ZeRO 0-3 (ZeRO-3 drops the backward's second gather of the
#     head), recomputation with offload, overlap, gradient accumulation and
#     packed documents (DOCS: a token file with end-of-text tokens 0),
#     builds the program with fuse_loss off and on and trains 3 steps each
#     with a validation after every step, and requires the losses, gradient
#     norms and validation losses of --metrics and the --save-weights /
#     --save-grads files to be identical, byte for byte: the fused kernel
#     forms the same logit blocks and sums them in the same order as the
#     two kernels (tests/kernels: "lm_head grad ... = fwd / bwd").  The "on"
#     IR must hold one lm_head_loss_grad and no lm_head_loss or
#     lm_head_loss_bwd, the "off" IR none; with ZeRO-3 the "on" IR gathers
#     the head (SPEC's tied embedding table, or its lm_head) once, the
#     "off" IR twice.
set -euo pipefail

mpi() { "$MPIRUN" --allow-run-as-root --oversubscribe "$@"; }

# The fields that must agree (not the timings).
fields() {
    python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["step"], r.get("loss"), r.get("grad_norm"), r.get("val_loss"))' "$1"
}

same() {
    local layouts=(
        "np=1"
        "layout.batch_aware=groups 2;train.zero=3"
        "layout.batch_aware=off;train.zero=1;train.global_batch=4"
        "layout.sequence=ring;layout.batch_aware=off;train.zero=2"
        "layout.sequence=hybrid;layout.ring_degree=2;layout.batch_aware=off;train.zero=0"
        "layout.batch_aware=groups 2;train.zero=3;train.recompute=full;train.offload=activations"
        "layout.batch_aware=groups 2;train.zero=3;train.overlap=on"
        "layout.batch_aware=groups 2;train.zero=2;train.documents=on;train.eot_token=0;data=docs"
    )
    local i=0 fails=0
    for l in "${layouts[@]}"; do
        local sets=(--set mesh.nodes=2 --set mesh.devices_per_node=2) data="$CORPUS" np=4
        IFS=';' read -ra kv <<<"$l"
        for s in "${kv[@]}"; do
            case $s in
            data=docs) data="$DOCS" ;;
            np=1) np=1 && sets=(--set mesh.nodes=1 --set mesh.devices_per_node=1) ;;
            *) sets+=(--set "$s") ;;
            esac
        done
        for o in off on; do
            local p="$W/l$i.$o"
            "$BASPC" "$SPEC" -q "${sets[@]}" --set "train.fuse_loss=$o" -o "$p.train"
            "$BASPC" "$SPEC" -q "${sets[@]}" --set "train.fuse_loss=$o" --emit=ir -o "$p.ir"
            mpi -np "$np" "$p.train" --data "$data" --steps 3 --val-data "$data" --val-every 1 --val-tokens 300 \
                --metrics "$p.jsonl" --save-weights "$p.weights" --save-grads "$p.grads" >"$p.log"
        done
        local n="$W/l$i.off" p="$W/l$i.on" fused sep gathers_on gathers_off
        fused=$(grep -c '= lm_head_loss_grad ' "$p.ir" || true)
        sep=$(grep -c '= lm_head_loss \|= lm_head_loss_bwd ' "$p.ir" || true)
        if [[ $fused != 1 || $sep != 0 ]] || grep -q 'lm_head_loss_grad' "$n.ir"; then
            echo "FAIL $l: fuse_loss on: $fused fused op(s) and $sep separate one(s) (off must have no fused op)"
            fails=$((fails + 1))
        fi
        gathers_on=$(grep -c '= all_gather %\(lm_head\|embed\) ' "$p.ir" || true)
        gathers_off=$(grep -c '= all_gather %\(lm_head\|embed\) ' "$n.ir" || true)
        if [[ $l == *zero=3* ]] && [[ $gathers_on != 1 || $gathers_off != 2 ]]; then
            echo "FAIL $l: ZeRO-3 gathers the head $gathers_on time(s) fused, $gathers_off unfused (want 1 and 2)"
            fails=$((fails + 1))
        fi
        if ! grep -q '"val_loss"' "$p.jsonl"; then
            echo "FAIL $l: no validation loss in the fused run's metrics"
            fails=$((fails + 1))
        elif ! cmp -s "$n.weights" "$p.weights" || ! cmp -s "$n.grads" "$p.grads" ||
            ! cmp -s <(fields "$n.jsonl") <(fields "$p.jsonl"); then
            echo "FAIL $l: fuse_loss on: losses, validation losses, weights or gradients differ from off"
            diff <(fields "$n.jsonl") <(fields "$p.jsonl") || true
            fails=$((fails + 1))
        else
            echo "ok   $l: losses $(fields "$p.jsonl" | cut -d' ' -f2 | tr '\n' ' ')"
        fi
        i=$((i + 1))
    done
    [[ $fails == 0 ]]
}

cmd=$1
shift
case $cmd in
same)
    BASPC=$1 MPIRUN=$2 CORPUS=$3 DOCS=$4 SPEC=$5 W=$6
    rm -rf "$W" && mkdir -p "$W"
    same
    ;;
*)
    echo "usage: fuse_loss.sh same BASPC MPIRUN CORPUS DOCS SPEC WORKDIR" >&2
    exit 2
    ;;
esac
