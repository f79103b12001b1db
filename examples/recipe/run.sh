#!/usr/bin/env bash
# examples/recipe/run.sh [BUILD] [OUT] — the training recipe (docs/training.md) end to
# end: text → byte-level token shards and a held-out file (data/basp_prep.py),
# compile (examples/recipe/tiny_recipe.basp: warmup + cosine, 4 micro-steps
# per optimizer step, packed documents), train on 4 CPU ranks with
# validation every 25 steps and checkpoints, then plot the losses
# (scripts/plot_metrics.py).  About 3 minutes on 2 cores.  Replace
# corpus.txt with your own text (one document per line) to train on it.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=${2:-$build/recipe}
rm -rf "$out" && mkdir -p "$out/shards"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

# 1. Data: the demo text (one document per line), 5% held out; the rest in
#    two shards.  --eot 0 after every document (byte 0 never occurs in text).
"$build/data/mkcorpus" "$out/corpus.bin" "$out/corpus.txt" >/dev/null
n=$(wc -l <"$out/corpus.txt")
val=$((n / 20)) train=$((n - n / 20))
head -n $((train / 2)) "$out/corpus.txt" >"$out/train_a.txt"
sed -n "$((train / 2 + 1)),${train}p" "$out/corpus.txt" >"$out/train_b.txt"
tail -n "$val" "$out/corpus.txt" >"$out/val.txt"
prep=(python3 data/basp_prep.py --bytes --lines --eot 0 --vocab 256 -q)
"${prep[@]}" -o "$out/shards/train_00.bin" "$out/train_a.txt"
"${prep[@]}" -o "$out/shards/train_01.bin" "$out/train_b.txt"
"${prep[@]}" -o "$out/val.bin" "$out/val.txt"

# 2. Compile: the schedule and the memory plan first, then the binary.
"$build/baspc" examples/recipe/tiny_recipe.basp --schedule | sed -n '/^totals/,$p'
"$build/baspc" examples/recipe/tiny_recipe.basp -q -o "$out/train"

# 3. Train: 300 steps of 8 sequences (4 micro-steps of 2), warmup 30 then
#    cosine to min_lr; validation on 16 batches every 25 steps; a checkpoint
#    every 100 (best.json names the best validation among the saved steps).
mpirun --oversubscribe -np 4 "$out/train" --data "$out/shards" --val-data "$out/val.bin" --val-every 25 \
    --metrics "$out/metrics.jsonl" --checkpoint-dir "$out/ckpt" --save-every 100 --log-every 25

# 4. Plot.
python3 scripts/plot_metrics.py "$out/metrics.jsonl" "$out/loss.png" \
    --title "recipe_tiny: 4 ranks, global batch 8 x 256, warmup 30 + cosine"
cat "$out/ckpt/best.json"
