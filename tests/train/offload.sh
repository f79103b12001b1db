#!/usr/bin/env bash
# offload.sh — offload (train.offload activations, optimizer, all) moves
# values to host memory and back, and the optimizer's update to the host,
# never what is computed.
#
#   offload.sh same BASPC MPIRUN CORPUS SPEC WORKDIR
#     For layouts of SPEC on 4 ranks (2 nodes x 2) covering batch-aware,
#     Ulysses, ring and hybrid, ZeRO 0-3, recompute none, selective and
#     full, and overlap (started gathers of fetched parameter shards),
#     builds the program with offload none and with the layout's mode
#     (activations unless it says mode=optimizer or mode=all), trains 3
#     steps each and validates (--val-data: the forward-only program, which
#     leaves the offloads out), and requires the --metrics losses, gradient
#     norms and validation losses and
#     the --save-weights / --save-grads files to be identical, byte for
#     byte.  An activations or all IR must fetch what it offloads; with the
#     optimizer offloaded, gradients go to the host and are not fetched;
#     with all, the parameters live on the host (config offload.params = 1)
#     and every gather of one reads a copy fetched for it;
#     a none IR does neither; the run's measured host arena peak
#     (mem_host_peak_bytes) must be the plan's host arena
#     (`baspc --memory --json` host_bytes_per_rank) exactly, and its device
#     arena the plan's (mem_arena_bytes = arena_bytes).
set -euo pipefail

mpi() { "$MPIRUN" --allow-run-as-root --oversubscribe "$@"; }

# The value of "key" in a one-line JSON object (numbers only).
json_num() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | head -1; }

same() {
    local layouts=(
        "layout.batch_aware=groups 2;train.zero=3;train.recompute=none"
        "layout.batch_aware=off;train.zero=0;train.recompute=full"
        "layout.sequence=ring;layout.batch_aware=off;train.zero=2;train.recompute=selective"
        "layout.sequence=hybrid;layout.ring_degree=2;layout.batch_aware=off;train.zero=1;train.recompute=full"
        "layout.batch_aware=groups 2;train.zero=1;train.recompute=selective;train.global_batch=4"
        "layout.batch_aware=groups 2;train.zero=2;train.recompute=none;mode=optimizer"
        "layout.sequence=ring;layout.batch_aware=off;train.zero=3;train.recompute=full;mode=all"
        "layout.sequence=hybrid;layout.ring_degree=2;layout.batch_aware=off;train.zero=1;mode=all"
        "layout.batch_aware=off;train.zero=3;train.recompute=full;train.overlap=on;mode=all"
    )
    local i=0 fails=0
    for l in "${layouts[@]}"; do
        local sets=(--set mesh.nodes=2 --set mesh.devices_per_node=2) mode=activations
        IFS=';' read -ra kv <<<"$l"
        for s in "${kv[@]}"; do
            case $s in
            mode=*) mode=${s#mode=} ;;
            *) sets+=(--set "$s") ;;
            esac
        done
        for o in none "$mode"; do
            local p="$W/l$i.$o"
            "$BASPC" "$SPEC" -q "${sets[@]}" --set "train.offload=$o" -o "$p.train"
            "$BASPC" "$SPEC" -q "${sets[@]}" --set "train.offload=$o" --emit=ir -o "$p.ir"
            "$BASPC" "$SPEC" -q "${sets[@]}" --set "train.offload=$o" --memory --json >"$p.mem.json"
            mpi -np 4 "$p.train" --data "$CORPUS" --steps 3 --metrics "$p.jsonl" \
                --save-weights "$p.weights" --save-grads "$p.grads" --val-data "$CORPUS" --val-tokens 1024 >"$p.log"
        done
        # Activations come back (a fetch per offload); gradients, with the
        # optimizer offloaded, stay on the host for the update (no fetch).
        local n="$W/l$i.none" p="$W/l$i.$mode" offs fetches acts=1 grads=1
        [[ $mode == optimizer ]] && acts=0
        [[ $mode == activations ]] && grads=0
        # With all, the parameters go too where every read of them is a
        # gather (offload.params = 1): each gather reads a fetched copy.
        local pfetch=0 direct=0 par
        for par in $(sed -n 's/^param %\([^ ]*\) .*/\1/p' "$p.ir"); do
            pfetch=$((pfetch + $(grep -cF "= fetch %$par {" "$p.ir" || true)))
            direct=$((direct + $(grep -cF "= all_gather %$par {" "$p.ir" || true)))
        done
        offs=$(grep -c '= offload ' "$p.ir" || true)
        fetches=$(($(grep -c '= fetch ' "$p.ir" || true) - pfetch))
        if (( (fetches > 0) != acts || (!grads && offs != fetches) || (grads && offs < fetches) )) ||
           grep -q '= offload \|= fetch ' "$n.ir"; then
            echo "FAIL $l: offload $mode: $offs offload(s), $fetches fetch(es) (none must have neither)"
            fails=$((fails + 1))
        fi
        if [[ $mode == all ]] && ! { grep -q '^config offload.params = 1$' "$p.ir" && ((pfetch > 0 && direct == 0)); }; then
            echo "FAIL $l: offload all: parameters not in host memory ($pfetch fetched for a gather, $direct gathered directly)"
            fails=$((fails + 1))
        elif [[ $mode != all ]] && ((pfetch > 0)); then
            echo "FAIL $l: offload $mode: $pfetch parameter fetch(es)"
            fails=$((fails + 1))
        fi
        local want got arena planned
        want=$(tr -d '\n\t ' <"$p.mem.json" | json_num host_bytes_per_rank)
        got=$(tail -1 "$p.jsonl" | json_num mem_host_peak_bytes)
        arena=$(tail -1 "$p.jsonl" | json_num mem_arena_bytes)
        planned=$(tr -d '\n\t ' <"$p.mem.json" | json_num arena_bytes)
        if [[ -z $want || $want != "$got" || $arena != "$planned" ]]; then
            echo "FAIL $l: host arena measured ${got:-?}, planned ${want:-?}; device arena ${arena:-?}, planned ${planned:-?}"
            fails=$((fails + 1))
        fi
        if ! grep -q '"val_loss"' "$p.jsonl"; then
            echo "FAIL $l: offload $mode: no validation in $p.jsonl"
            fails=$((fails + 1))
        fi
        if ! cmp "$n.weights" "$p.weights" || ! cmp "$n.grads" "$p.grads" ||
           ! cmp <(cut -d, -f1-3 "$n.jsonl") <(cut -d, -f1-3 "$p.jsonl"); then
            echo "FAIL $l: offload $mode: losses, weights or gradients differ from none"
            fails=$((fails + 1))
        else
            echo "ok   $l: $mode: $offs value(s) offloaded, $pfetch parameter fetch(es), host arena $got bytes per rank (planned $want); losses $(cut -d, -f2 "$n.jsonl" | tr '\n' ' ')"
        fi
        i=$((i + 1))
    done
    ((fails == 0)) || { echo "offload.sh: $fails failure(s)"; exit 1; }
    echo "offload.sh: ${#layouts[@]} layouts identical with activations, optimizer or both offloaded; host peaks as planned"
}

mode=$1
BASPC=$2 MPIRUN=$3 CORPUS=$4 SPEC=$5 W=$6
rm -rf "$W" && mkdir -p "$W"
case $mode in
same) same ;;
*) echo "usage: offload.sh same BASPC MPIRUN CORPUS SPEC WORKDIR" >&2; exit 2 ;;
esac
