#!/usr/bin/env bash
# recompute.sh — activation recomputation changes memory, never numbers.
#
#   recompute.sh same BASPC MPIRUN CORPUS SPEC WORKDIR
#     For several layouts of SPEC on 4 ranks (batch-aware G=2 x K=2 with
#     ZeRO 0 and ZeRO 3, Ulysses over 4 ranks with the tiled MLP), builds the
#     program three times (train.recompute none, selective, full), trains 3
#     steps each, and requires every --metrics line's loss and grad_norm and
#     the --save-weights / --save-grads files of selective and full to be
#     identical, byte for byte, to none's.  The selective and full IR must
#     hold recomputed ops (and full re-run all-to-alls); none's must not.
#     Prints the planned arena and the median step time of each mode.
#   recompute.sh arena BASPC SPEC[|KEY=VALUE...]...
#     For each spec (with those --set overrides; one where the activations
#     dominate), the planned arena (config mem.peak of --emit=ir) must fall
#     strictly from none to selective to full.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=same_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/same_lib.sh"

planned() { "$BASPC" "$@" -q --emit=ir | sed -n 's/^config mem.peak = //p'; }

same() {
    local layouts=(
        "layout.batch_aware=groups 2"
        "layout.batch_aware=groups 2;train.zero=3"
        "layout.batch_aware=off;train.seq_len=512"
    )
    each_layout same_one "${layouts[@]}"
}

# same_one LAYOUT Q: the none, selective and full runs, their IR's
# recomputed ops, and their losses, arenas and step times.
same_one() {
    local l=$1 q=$2 mode nrc nrc_a2a
    layout "$l"
    for mode in none selective full; do
        build "$q.$mode" --set "train.recompute=$mode"
        nrc=$(grep -c 'recompute = 1' "$q.$mode.ir" || true)
        nrc_a2a=$(grep 'recompute = 1' "$q.$mode.ir" | grep -c '= all_to_all' || true)
        if [[ $mode == none && $nrc != 0 ]] || [[ $mode != none && $nrc == 0 ]] ||
           [[ $mode == full && $l == *groups* && $nrc_a2a == 0 ]]; then
            fail "recompute $mode: $nrc recomputed op(s), $nrc_a2a all-to-all(s)"
        fi
        train "$q.$mode" --quiet
    done
    for mode in selective full; do
        same_bits "$q.none" "$q.$mode" || fail "recompute $mode: weights or gradients differ from none"
    done
    # Loss and gradient norm step by step, and each mode's arena and median
    # step time: this prints the layout's ok or FAIL line itself.
    python3 - "$q" "$l" <<'EOF' || fails=$((fails + 1))
import json, re, statistics, sys
p, layout = sys.argv[1], sys.argv[2]
ok = True
runs = {m: [json.loads(x) for x in open(f"{p}.{m}.jsonl")] for m in ("none", "selective", "full")}
arena = {m: int(re.search(r"^config mem.peak = (\d+)$", open(f"{p}.{m}.ir").read(), re.M).group(1))
         for m in runs}
for m in ("selective", "full"):
    if len(runs[m]) != len(runs["none"]) or not runs["none"]:
        print(f"FAIL {layout}: {m}: {len(runs[m])} metrics lines, none has {len(runs['none'])}")
        ok = False
    for a, b in zip(runs["none"], runs[m]):
        if (a["loss"], a["grad_norm"]) != (b["loss"], b["grad_norm"]):
            print(f"FAIL {layout}: {m}: step {a['step']}: loss {b['loss']!r} grad_norm {b['grad_norm']!r}, "
                  f"none {a['loss']!r} {a['grad_norm']!r}")
            ok = False
print(f"{'ok  ' if ok else 'FAIL'} {layout:42s} losses {[r['loss'] for r in runs['none']]}")
for m, r in runs.items():
    print(f"     {m:9s} arena {arena[m]:9d} B  median step {statistics.median(x['step_ms'] for x in r):7.2f} ms")
sys.exit(0 if ok else 1)
EOF
}

arena() {
    local fails=0
    for item in "$@"; do
        local parts spec n s f
        IFS='|' read -ra parts <<<"$item"
        spec=${parts[0]}
        local sets=()
        for kv in "${parts[@]:1}"; do sets+=(--set "$kv"); done
        n=$(planned "$spec" "${sets[@]}" --set train.recompute=none)
        s=$(planned "$spec" "${sets[@]}" --set train.recompute=selective)
        f=$(planned "$spec" "${sets[@]}" --set train.recompute=full)
        local what
        what="$(basename "$spec")${parts[1]:+ ${parts[*]:1}}"
        if [[ -n $n && -n $s && -n $f ]] && ((n > s && s > f)); then
            echo "ok   $what: arena none $n > selective $s > full $f"
        else
            echo "FAIL $what: arena none $n, selective $s, full $f (want none > selective > full)"
            fails=$((fails + 1))
        fi
    done
    [[ $fails == 0 ]]
}

cmd=$1
shift
case $cmd in
same)
    BASPC=$1 MPIRUN=$2 CORPUS=$3 SPEC=$4 W=$5
    rm -rf "$W" && mkdir -p "$W"
    same
    ;;
arena)
    BASPC=$1
    shift
    arena "$@"
    ;;
*) echo "recompute.sh: unknown command $cmd" >&2; exit 2 ;;
esac
