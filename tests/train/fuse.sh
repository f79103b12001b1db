#!/usr/bin/env bash
# fuse.sh — a fusion pass's fused ops compute what the separate ops compute.
#
#   fuse.sh same KEY BASPC MPIRUN CORPUS DOCS SPEC WORKDIR
#     KEY: loss (train.fuse_loss, passes/pass_fuse_loss.c: the LM head's
#     loss and gradient in one op) or elem (train.fuse_elem,
#     passes/pass_fuse_elem.c: each residual add and the RMSNorm next to it
#     in one op, forward and backward).
#     For layouts of SPEC covering one rank, batch-aware, Ulysses, ring,
#     hybrid, ZeRO 0-3, recomputation with offload, overlap, gradient
#     accumulation and packed documents (DOCS: a token file with
#     end-of-text tokens 0) — for elem also selective recomputation, head
#     chunks, the fused MLP, parameter offload and batch_aware dynamic —
#     builds the program with the KEY's setting off and on and trains 3 steps
#     each with a validation after every step, and requires the losses,
#     gradient norms and validation losses of --metrics and the
#     --save-weights / --save-grads files to be identical, byte for byte:
#     the fused kernels do the separate kernels' arithmetic in the same
#     order (tests/kernels: "lm_head grad ... = fwd / bwd", "add_rmsnorm ...
#     = add then rmsnorm").
#     loss: the "on" IR must hold one lm_head_loss_grad and no lm_head_loss
#     or lm_head_loss_bwd, the "off" IR none; with ZeRO-3 the "on" IR
#     gathers the head (SPEC's tied embedding table, or its lm_head) once,
#     the "off" IR twice.
#     elem: the "on" IR must hold an add_rmsnorm_bwd for each of SPEC's two
#     norms per layer and at least one add_rmsnorm per layer (recompute
#     adds clones), in each variant of a dynamic program, the "off" IR none.
#   KEY rope: train.fuse_rope (passes/pass_fuse_rope.c: each RoPE rotation
#     done by the sequence exchange next to it as it packs, or unpacks in
#     the backward); the same layouts (but plain hybrid and batch-aware
#     ZeRO-3, trained below with documents and with recompute and overlap),
#     and two-level exchanges, a kv
#     fan-out (Ulysses over 8 ranks: 2 KV heads each sent to 4; over 4
#     with overlap, so a started exchange sums and rotates back at its
#     wait), Llama 3
#     RoPE scaling, hybrid with documents (the ring's zig-zag positions
#     within documents) and batch_aware dynamic.  The "on" IR must have no
#     rope or rope_bwd op left and its exchanges rotate (rope = 3, rope_bwd
#     = 3, or their split parts under overlap); where no exchange rotates
#     (one rank, the pure ring) the two IRs must be the same program.
#   KEY lse: train.attention_lse (passes/pass_attention_lse.c: each
#     attention forward's softmax statistics a value its backward reads, in
#     the arena, instead of the backend's entry per output address); the
#     same layouts, selective recomputation, and offload without
#     recomputation.  The "on" IR must give every attention forward an lse
#     output and every attention_bwd an lse input, the "off" IR none; where
#     the pass has nothing to do (ring and hybrid layouts, whose ring
#     attention carries its statistics anyway, and packed documents) the
#     two IRs must be the same program, which is then not trained twice.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=same_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/same_lib.sh"

# The IR checks of each KEY: on, off, layout; prints what failed.
ir_check_loss() {
    local p=$1 n=$2 l=$3 fused sep gathers_on gathers_off
    fused=$(grep -c '= lm_head_loss_grad ' "$p" || true)
    sep=$(grep -c '= lm_head_loss \|= lm_head_loss_bwd ' "$p" || true)
    if [[ $fused != 1 || $sep != 0 ]] || grep -q 'lm_head_loss_grad' "$n"; then
        echo "fuse_loss on: $fused fused op(s) and $sep separate one(s) (off must have no fused op)"
    fi
    gathers_on=$(grep -c '= all_gather %\(lm_head\|embed\) ' "$p" || true)
    gathers_off=$(grep -c '= all_gather %\(lm_head\|embed\) ' "$n" || true)
    if [[ $l == *zero=3* ]] && [[ $gathers_on != 1 || $gathers_off != 2 ]]; then
        echo "ZeRO-3 gathers the head $gathers_on time(s) fused, $gathers_off unfused (want 1 and 2)"
    fi
}

ir_check_lse() {
    local p=$1 n=$2 l=$3 att with bwd bwdl
    att=$(grep -c '= attention ' "$p" || true)
    with=$(grep -c '\.lse[a-z0-9.]* = attention ' "$p" || true)
    bwd=$(grep -c '= attention_bwd ' "$p" || true)
    bwdl=$(grep -c '= attention_bwd .*\.lse[a-z0-9.]* {' "$p" || true)
    if lse_untouched "$l"; then
        # ring attention carries its statistics whatever the setting, and
        # packed documents keep none: the pass leaves the program as it is
        cmp -s <(grep -v '^config attention_lse ' "$p") <(grep -v '^config attention_lse ' "$n") ||
            echo "attention_lse on changed a program it must leave alone"
    elif [[ $att == 0 || $with != "$att" || $bwd == 0 || $bwdl != "$bwd" ]]; then
        echo "attention_lse on: $with of $att attention forward(s) and $bwdl of $bwd backward(s) with an lse"
    fi
    if grep -q '\.lse[a-z0-9.]* = attention \|= attention_bwd .*\.lse[a-z0-9.]* {' "$n"; then
        echo "attention_lse off: an attention or attention_bwd with an lse"
    fi
}

ir_check_rope() {
    local p=$1 n=$2 l=$3 left fwd bwd
    if rope_untouched "$l"; then
        cmp -s <(grep -v '^config fuse_rope ' "$p") <(grep -v '^config fuse_rope ' "$n") ||
            echo "fuse_rope on changed a program it must leave alone"
        return
    fi
    # rotations left next to an exchange (batch_aware dynamic's variants
    # of one rank per group keep theirs: they have no exchange)
    left=$(python3 -c '
import re, sys
defs, uses = {}, []
for line in open(sys.argv[1]):
    m = re.match(r"(%\S.*?) = (\w+) (.*?) \{", line)
    if not m:
        continue
    outs = [v.strip() for v in m.group(1).split(",")]
    ins = re.findall(r"%[\w.]+", m.group(3))
    for v in outs:
        defs[v] = m.group(2)
    uses.append((m.group(2), ins))
print(sum(1 for op, ins in uses for v in ins
          if (op == "all_to_all" and defs.get(v) == "rope") or (op == "rope_bwd" and defs.get(v) == "all_to_all")))
' "$p")
    fwd=$(grep -c '= all_to_all .*[{ ]rope = ' "$p" || true)
    bwd=$(grep -c '= all_to_all .*rope_bwd = ' "$p" || true)
    if [[ $left != 0 || $fwd == 0 || $bwd == 0 ]]; then
        echo "fuse_rope on: $left rotation(s) left next to an exchange, $fwd exchange(s) rotating, $bwd rotating back"
    fi
    if grep -q '= all_to_all .*rope' "$n"; then
        echo "fuse_rope off: an exchange that rotates"
    fi
}

# Layouts with no sequence exchange (one rank, the pure ring): pass
# fuse-rope has nothing to fuse.
rope_untouched() { [[ $1 == np=1 || $1 == *sequence=ring* ]]; }

# Layouts where pass attention-lse has nothing to do (ring attention, packed documents).
lse_untouched() { [[ $1 == *sequence=ring* || $1 == *sequence=hybrid* || $1 == *documents=on* ]]; }

ir_check_elem() {
    local p=$1 n=$2 layers variants fwd bwd
    # batch_aware dynamic: each variant (attr variant = K) is a step of its own
    variants=$(grep -o 'variant = [0-9]*' "$p" | sort -u | wc -l)
    layers=$(($(grep -c '^param %l[0-9]*\.mlp_norm ' "$p" || true) * (variants > 0 ? variants : 1)))
    fwd=$(grep -c '= add_rmsnorm ' "$p" || true)
    bwd=$(grep -c '= add_rmsnorm_bwd ' "$p" || true)
    if [[ $layers == 0 || $bwd != $((2 * layers)) || $fwd -lt $layers ]] || grep -q 'add_rmsnorm' "$n"; then
        echo "fuse_elem on: $fwd add_rmsnorm and $bwd add_rmsnorm_bwd for $layers layer(s) in all variants (off must have none)"
    fi
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
    [[ $KEY == elem ]] && layouts+=(
        "layout.batch_aware=off;train.zero=1;train.recompute=selective;train.attention_chunks=2"
        "layout.batch_aware=groups 2;train.mlp_chunk=32;train.recompute=full"
        "layout.batch_aware=off;train.zero=3;train.offload=all;train.recompute=full"
        "layout.batch_aware=dynamic;train.zero=1;train.documents=on;train.eot_token=0;data=docs"
    )
    [[ $KEY == rope ]] && layouts+=(
        "np=8;layout.a2a=two_level;layout.batch_aware=off;train.zero=1"
        "mesh.nodes=1;mesh.devices_per_node=4;layout.batch_aware=off;train.zero=3;train.overlap=on;train.recompute=full"
        "model.rope_scaling=llama3;layout.batch_aware=off;train.zero=2"
        "layout.sequence=hybrid;layout.ring_degree=2;layout.batch_aware=off;train.documents=on;train.eot_token=0;data=docs"
        "layout.batch_aware=dynamic;train.zero=1;train.documents=on;train.eot_token=0;data=docs"
    )
    if [[ $KEY == rope ]]; then # hybrid is trained with documents, batch-aware ZeRO-3 with recompute and overlap
        local keep=() x
        for x in "${layouts[@]}"; do
            [[ $x == "layout.batch_aware=groups 2;train.zero=3" || $x == layout.sequence=hybrid*train.zero=0 ]] ||
                keep+=("$x")
        done
        layouts=("${keep[@]}")
    fi
    [[ $KEY == lse ]] && layouts+=(
        "layout.batch_aware=off;train.zero=1;train.recompute=selective"
        "layout.batch_aware=groups 2;train.zero=0;train.recompute=none;train.offload=activations"
    )
    each_layout same_one "${layouts[@]}"
}

# np=1: one rank; np=8: 8 ranks as 2 nodes x 4.
layout_key() {
    case $1 in
    np=1) np=1 && sets=(--set mesh.nodes=1 --set mesh.devices_per_node=1) ;;
    np=8) np=8 && sets=(--set mesh.nodes=2 --set mesh.devices_per_node=4) ;;
    *) return 1 ;;
    esac
}

# same_one LAYOUT Q: the IR checks of KEY, and the off and on runs.
same_one() {
    local l=$1 q=$2 o bad
    layout "$l"
    for o in off on; do
        compile --set "train.$NAME=$o" --emit=ir -o "$q.$o.ir"
    done
    bad=$("ir_check_$KEY" "$q.on.ir" "$q.off.ir" "$l")
    [[ -z $bad ]] || fail "$bad"
    if { [[ $KEY == lse ]] && lse_untouched "$l"; } || { [[ $KEY == rope ]] && rope_untouched "$l"; }; then
        # one program: nothing to train twice
        [[ -n $bad ]] || ok "the same program on and off"
        return
    fi
    for o in off on; do
        compile --set "train.$NAME=$o" -o "$q.$o.train"
        train "$q.$o" --val-data "$data" --val-every 1 --val-tokens 300
    done
    if ! grep -q '"val_loss"' "$q.on.jsonl"; then
        fail "no validation loss in the fused run's metrics"
    else
        agree "$q.off" "$q.on" "$NAME on: losses, validation losses, weights or gradients differ from off" \
            "losses $(fields "$q.on.jsonl" | cut -d' ' -f2 | tr '\n' ' ')"
    fi
}

cmd=$1
shift
case $cmd in
same)
    KEY=$1 BASPC=$2 MPIRUN=$3 CORPUS=$4 DOCS=$5 SPEC=$6 W=$7
    case $KEY in
    loss | elem | rope) NAME=fuse_$KEY ;;
    lse) NAME=attention_lse ;;
    *) echo "fuse.sh: KEY is loss, elem, rope or lse, not '$KEY'" >&2 && exit 2 ;;
    esac
    rm -rf "$W" && mkdir -p "$W"
    same
    ;;
*)
    echo "usage: fuse.sh same KEY BASPC MPIRUN CORPUS DOCS SPEC WORKDIR" >&2
    exit 2
    ;;
esac
