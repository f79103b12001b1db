#!/usr/bin/env bash
# chunked.sh W — whole-tensor gathers and scatters in chunks (rt_save.c,
# rt_chunk.h).  BASP_TEST_GATHER_CHUNK=N makes every collective move N
# elements per rank, so the tiny models' tensors take many chunks (and most
# are larger than one).  For a ZeRO-0 (replicated), a ZeRO-3 and a ZeRO-1
# GQA binary on 4 ranks (built by ckpt.sh setup into W):
#   - weights, gradients and checkpoints saved with small chunks are
#     byte-identical to the unchunked ones;
#   - save -> load (--init-from a weights file and a checkpoint directory,
#     scattered in chunks) -> save is byte-identical;
#   - a resume in chunks writes the same next checkpoint as one without.
set -euo pipefail
MPI=(mpirun --allow-run-as-root --oversubscribe)
w=$1
same_ckpt() {
    for f in model.safetensors optimizer.safetensors config.json state.json; do
        cmp "$1/$f" "$2/$f" || { echo "FAIL: $1/$f and $2/$f differ"; exit 1; }
    done
}
for bin in mha_uly_z0 mha_basp_z3 gqa_basp_z1; do
    d=$w/chunked-$bin && rm -rf "$d" && mkdir -p "$d"
    run=("${MPI[@]}" -np 4 "$w/$bin" --data "$w/corpus.bin" --quiet)
    # 7 (many chunks, a short last one) everywhere; 61 once more on ZeRO-0.
    modes=(ref c7)
    [[ $bin == mha_uly_z0 ]] && modes+=(c61)
    for mode in "${modes[@]}"; do
        case $mode in ref) env=() ;; c7) env=(-x BASP_TEST_GATHER_CHUNK=7) ;; c61) env=(-x BASP_TEST_GATHER_CHUNK=61) ;; esac
        run=("${MPI[@]}" "${env[@]}" -np 4 "$w/$bin" --data "$w/corpus.bin" --quiet)
        "${run[@]}" --steps 2 --save-every 2 --checkpoint-dir "$d/$mode" --save-weights "$d/$mode.w" \
            --save-grads "$d/$mode.g" >/dev/null 2>"$d/$mode.err"
        if grep -q "differ" "$d/$mode.err"; then echo "FAIL: replicas reported different"; cat "$d/$mode.err"; exit 1; fi
        # load in chunks, save again
        "${run[@]}" --steps 0 --init-from "$d/$mode.w" --save-weights "$d/$mode.w2" >/dev/null
        "${run[@]}" --steps 0 --init-from "$d/$mode/step-00000002" --save-weights "$d/$mode.w3" >/dev/null
        cp -r "$d/$mode" "$d/$mode-res"
        "${run[@]}" --steps 3 --save-every 3 --checkpoint-dir "$d/$mode-res" --resume >/dev/null
        if [[ $mode != ref ]]; then
            cmp "$d/ref.w" "$d/$mode.w" && cmp "$d/ref.g" "$d/$mode.g"
            same_ckpt "$d/ref/step-00000002" "$d/$mode/step-00000002"
            same_ckpt "$d/ref-res/step-00000003" "$d/$mode-res/step-00000003"
        fi
        cmp "$d/$mode.w" "$d/$mode.w2" && cmp "$d/$mode.w" "$d/$mode.w3"
    done
    echo "chunked.sh: $bin on 4 ranks: chunks (${modes[*]:1}) save, load and resume byte-identically to unchunked"
done
