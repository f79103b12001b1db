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

mpi() { "$MPIRUN" --allow-run-as-root --oversubscribe "$@"; }

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
    local i=0 fails=0
    for l in "${layouts[@]}"; do
        local sets=(--set mesh.nodes=2 --set mesh.devices_per_node=2) data="$CORPUS" np=4 whole=0
        IFS=';' read -ra kv <<<"$l"
        for s in "${kv[@]}"; do
            case $s in
            data=docs) data="$DOCS" ;;
            whole) whole=1 ;;
            np=*) np=${s#np=} && sets+=(--set "mesh.devices_per_node=$np") ;;
            *) sets+=(--set "$s") ;;
            esac
        done
        for o in off on; do
            local p="$W/l$i.$o"
            "$BASPC" "$SPEC" -q "${sets[@]}" --set "train.overlap=$o" -o "$p.train"
            "$BASPC" "$SPEC" -q "${sets[@]}" --set "train.overlap=$o" --emit=ir -o "$p.ir"
            mpi -np "$np" "$p.train" --data "$data" --steps 3 --metrics "$p.jsonl" \
                --save-weights "$p.weights" --save-grads "$p.grads" >"$p.log"
        done
        local n="$W/l$i.off" p="$W/l$i.on" starts waits fused split
        starts=$(grep -c 'async = 1' "$p.ir" || true)
        waits=$(grep -c '^wait ' "$p.ir" || true)
        if [[ $starts == 0 || $starts != "$waits" ]] || grep -q 'async = 1\|^wait ' "$n.ir"; then
            echo "FAIL $l: overlap on: $starts started collective(s), $waits wait(s) (off must have none)"
            fails=$((fails + 1))
        fi
        # Fused exchanges (q, k, v in one all_to_all) are split, part started.
        fused=$(grep -c '^%[^=]*, %[^=]* = all_to_all' "$n.ir" || true)
        split=$(grep -c '= all_to_all .*async = 1' "$p.ir" || true)
        # "whole": exchanges that cross nodes, where ZeRO's collectives
        # cross too, stay whole (passes/README.md, "overlap"); the ones
        # inside a node find no split that pays.
        if ((fused > 0 && split == 0 && !whole)) || ((whole && split > 0)); then
            echo "FAIL $l: overlap on: $split of the $fused fused exchange(s) split"
            fails=$((fails + 1))
        fi
        # 2 ranks with a CPU each run the MPI progress thread (MPI_THREAD_MULTIPLE).
        if [[ $np == 2 ]] && (($(nproc) >= 2)) && ! grep -q 'MPI progress thread on' "$p.log"; then
            echo "FAIL $l: the banner does not say the progress thread runs: $(grep '^overlap:' "$p.log")"
            fails=$((fails + 1))
        fi
        if ! cmp "$n.weights" "$p.weights" || ! cmp "$n.grads" "$p.grads" ||
           ! cmp <(cut -d, -f1-3 "$n.jsonl") <(cut -d, -f1-3 "$p.jsonl"); then
            echo "FAIL $l: overlap on: losses, weights or gradients differ from off"
            fails=$((fails + 1))
        else
            echo "ok   $l: $starts collective(s) started ($split exchange(s)); losses $(cut -d, -f2 "$n.jsonl" | tr '\n' ' ')"
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
    echo "usage: overlap.sh same BASPC MPIRUN CORPUS DOCS SPEC WORKDIR" >&2
    exit 2
    ;;
esac
