#!/usr/bin/env bash
# chunks.sh — head-chunked attention (train.attention_chunks) changes which
# heads run together, never what is computed.
#
#   chunks.sh same BASPC MPIRUN CORPUS DOCS SPEC WORKDIR
#     For layouts of SPEC (a model whose chunks never share a kv head across
#     ranks: MHA, or GQA with at least K kv heads per chunk) on 4 ranks
#     (2 nodes x 2) covering Ulysses (flat and two-level), batch-aware, ring and hybrid, ZeRO 0-3, recompute
#     none, selective and full, offload, overlap, packed documents and
#     accumulation, builds the program with attention_chunks 1 and with the
#     case's chunks, trains 3 steps each and requires the --metrics losses
#     and gradient norms and the --save-weights / --save-grads files to be
#     identical, byte for byte: every head's attention, and every kv head's
#     gradient sum, runs the same kernels on the same rows in the same
#     order.  (With a kv fan-out that differs between the two, the partial
#     kv gradients are summed in another order: those cases are the
#     single-rank equivalence tests of CMakeLists.txt, within its
#     tolerances.)  The chunked IR must hold C head_slice-exchange-attention
#     groups per layer, the run's measured arena must be the plan's and its
#     workspace outside the arena at most the plan's (`baspc --memory --json`).
set -euo pipefail

mpi() { "$MPIRUN" --allow-run-as-root --oversubscribe "$@"; }
json_num() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | head -1; }

same() {
    local layouts=(
        "chunks=2;layout.batch_aware=off;train.zero=0"
        "chunks=4;layout.batch_aware=groups 2;train.zero=3;train.recompute=full"
        "chunks=2;layout.batch_aware=groups 2;train.zero=1;train.recompute=selective;train.global_batch=4"
        "chunks=2;layout.batch_aware=off;train.zero=2;train.offload=activations;train.recompute=full"
        "chunks=2;layout.batch_aware=groups 2;train.zero=3;train.overlap=on"
        "chunks=2;layout.batch_aware=off;train.zero=1;docs"
        "chunks=2;model.kv_heads=4;layout.batch_aware=groups 2;train.zero=0"
        "chunks=2;layout.sequence=hybrid;layout.ring_degree=2;layout.batch_aware=off;train.zero=3;train.recompute=full"
        "chunks=4;layout.sequence=ring;layout.batch_aware=off;train.zero=1"
        "chunks=2;layout.a2a=two_level;layout.batch_aware=off;train.zero=2"
    )
    local i=0 fails=0
    for l in "${layouts[@]}"; do
        local sets=(--set mesh.nodes=2 --set mesh.devices_per_node=2 --set model.heads=8 --set model.kv_heads=8)
        local C=2 data=$CORPUS
        IFS=';' read -ra kv <<<"$l"
        for s in "${kv[@]}"; do
            case $s in
            chunks=*) C=${s#chunks=} ;;
            docs) sets+=(--set train.documents=on --set train.eot_token=0); data=$DOCS ;;
            *) sets+=(--set "$s") ;;
            esac
        done
        for c in 1 "$C"; do
            local p="$W/l$i.c$c"
            "$BASPC" "$SPEC" -q "${sets[@]}" --set "train.attention_chunks=$c" -o "$p.train"
            "$BASPC" "$SPEC" -q "${sets[@]}" --set "train.attention_chunks=$c" --emit=ir -o "$p.ir"
            "$BASPC" "$SPEC" -q "${sets[@]}" --set "train.attention_chunks=$c" --memory --json >"$p.mem.json"
            mpi -np 4 "$p.train" --data "$data" --steps 3 --metrics "$p.jsonl" \
                --save-weights "$p.weights" --save-grads "$p.grads" >"$p.log"
        done
        local n="$W/l$i.c1" p="$W/l$i.c$C" slices attns arena planned
        # Per layer: C forward chunks (and C recomputed ones), C backward
        # chunks of two slices each.
        slices=$(grep -c '= head_slice ' "$p.ir" || true)
        attns=$(grep -cE '= (ring_)?attention ' "$p.ir" || true)
        if grep -q "= head_slice " "$n.ir" || ((slices < 2 * attns || attns % C)); then
            echo "FAIL $l: $attns attention(s), $slices head_slice(s) with $C chunks (unchunked must have none)"
            fails=$((fails + 1))
        fi
        arena=$(tail -1 "$p.jsonl" | json_num mem_arena_bytes)
        planned=$(tr -d '\n\t ' <"$p.mem.json" | json_num arena_bytes)
        if [[ -z $arena || $arena != "$planned" ]]; then
            echo "FAIL $l: chunked arena measured ${arena:-?}, planned ${planned:-?}"
            fails=$((fails + 1))
        fi
        # The workspace outside the arena: never more than the plan's (which
        # also counts the scratch a kernel this CPU does not pick may take).
        local ws pws
        ws=$(tail -1 "$p.jsonl" | json_num mem_workspace_bytes)
        pws=$(tr -d '\n\t ' <"$p.mem.json" | sed -n 's/.*"workspace":\([0-9]*\)[,}].*/\1/p' | head -1)
        if [[ -z $ws || -z $pws ]] || ((ws > pws)); then
            echo "FAIL $l: chunked workspace measured ${ws:-?}, planned ${pws:-?} (the plan must bound it)"
            fails=$((fails + 1))
        fi
        if ! cmp -s "$n.weights" "$p.weights" || ! cmp -s "$n.grads" "$p.grads" ||
           ! cmp -s <(cut -d, -f1-3 "$n.jsonl") <(cut -d, -f1-3 "$p.jsonl"); then
            echo "FAIL $l: losses, weights or gradients differ between 1 and $C chunks"
            fails=$((fails + 1))
        else
            echo "ok   $l: $C chunks, $attns attention call(s), arena $arena bytes (planned $planned, unchunked $(tail -1 "$n.jsonl" | json_num mem_arena_bytes)); losses $(cut -d, -f2 "$n.jsonl" | tr '\n' ' ')"
        fi
        i=$((i + 1))
    done
    ((fails == 0)) || { echo "chunks.sh: $fails failure(s)"; exit 1; }
    echo "chunks.sh: ${#layouts[@]} layouts identical with and without head chunks; arenas as planned"
}

mode=$1
BASPC=$2 MPIRUN=$3 CORPUS=$4 DOCS=$5 SPEC=$6 W=$7
rm -rf "$W" && mkdir -p "$W"
case $mode in
same) same ;;
*) echo "usage: chunks.sh same BASPC MPIRUN CORPUS DOCS SPEC WORKDIR" >&2; exit 2 ;;
esac
