#!/usr/bin/env bash
# overlap.sh — starting ZeRO's weight gathers early, waiting for its
# gradient reductions late and splitting the sequence-parallel exchanges
# around compute (train.overlap) changes when bytes move, never what is
# computed.
#
#   overlap.sh same BASPC MPIRUN CORPUS DOCS SPEC WORKDIR
#     For layouts of SPEC on 4 ranks (and one on 2, each with a CPU: the
#     MPI progress thread runs there, with gradient accumulation) covering batch-aware, Ulysses, ring,
#     hybrid and two-level, ZeRO 0-3, recomputation, gradient accumulation
#     and packed documents (DOCS: a token file with end-of-text tokens 0),
#     builds the program with overlap off and on, trains 3 steps each, and
#     requires the --metrics losses and gradient norms and the
#     --save-weights / --save-grads files to be identical, byte for byte.
#     The "on" IR must start collectives (async = 1), one wait each, and
#     split a fused exchange where the "off" IR has one (except where the
#     layout says "whole": there the pass keeps them whole); the
#     "off" IR starts none.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=same_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/same_lib.sh"

same() {
    local layouts=(
        "layout.batch_aware=groups 2;train.zero=3"
        "mesh.nodes=1;layout.batch_aware=off;train.zero=3;train.recompute=full;np=4"
        "layout.sequence=ring;layout.batch_aware=off;train.zero=2"
        "layout.sequence=hybrid;layout.ring_degree=2;layout.batch_aware=off;train.zero=1"
        "layout.a2a=two_level;layout.batch_aware=off;train.zero=3;train.global_batch=4;whole"
        "layout.batch_aware=groups 2;train.zero=3;train.documents=on;train.eot_token=0;data=docs"
        "layout.batch_aware=groups 2;train.zero=0"
        "mesh.nodes=1;layout.batch_aware=off;train.zero=3;train.global_batch=4;np=2"
    )
    each_layout same_one "${layouts[@]}"
}

# np=N: N ranks on each node; whole: the exchanges stay whole.
layout_key() {
    case $1 in
    whole) whole=1 ;;
    np=*) np=${1#np=} && sets+=(--set "mesh.devices_per_node=$np") ;;
    *) return 1 ;;
    esac
}

# same_one LAYOUT Q: the off and on runs and the "on" IR's started
# collectives and split exchanges.
same_one() {
    local l=$1 q=$2 whole=0 o n p starts waits fused split
    layout "$l"
    for o in off on; do
        build "$q.$o" --set "train.overlap=$o"
        train "$q.$o"
    done
    n=$q.off p=$q.on
    starts=$(grep -c 'async = 1' "$p.ir" || true)
    waits=$(grep -c '^wait ' "$p.ir" || true)
    if [[ $starts == 0 || $starts != "$waits" ]] || grep -q 'async = 1\|^wait ' "$n.ir"; then
        fail "overlap on: $starts started collective(s), $waits wait(s) (off must have none)"
    fi
    # Fused exchanges (q, k, v in one all_to_all) are split, part started.
    fused=$(grep -c '^%[^=]*, %[^=]* = all_to_all' "$n.ir" || true)
    split=$(grep -c '= all_to_all .*async = 1' "$p.ir" || true)
    # "whole": exchanges that cross nodes, where ZeRO's collectives
    # cross too, stay whole (passes/README.md, "overlap"); the ones
    # inside a node find no split that pays.
    if ((fused > 0 && split == 0 && !whole)) || ((whole && split > 0)); then
        fail "overlap on: $split of the $fused fused exchange(s) split"
    fi
    # 2 ranks with a CPU each run the MPI progress thread (MPI_THREAD_MULTIPLE).
    if [[ $np == 2 ]] && (($(nproc) >= 2)) && ! grep -q 'MPI progress thread on' "$p.log"; then
        fail "the banner does not say the progress thread runs: $(grep '^overlap:' "$p.log")"
    fi
    agree "$n" "$p" "overlap on: losses, weights or gradients differ from off" \
        "$starts collective(s) started ($split exchange(s)); losses $(cut -d, -f2 "$n.jsonl" | tr '\n' ' ')"
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
    echo "usage: overlap.sh same BASPC MPIRUN CORPUS DOCS SPEC WORKDIR" >&2
    exit 2
    ;;
esac
