#!/usr/bin/env bash
# bench/gpu_mlp_ab.sh — run on a GPU machine from the repository root, with
# gpu-kit/ packed (scripts/gpu-kit) and OUT set to a results folder:
# Llama-3.2-1B at 8K tokens on one GPU, tiled MLP (the default) against unfused.
set -u
: "${OUT:?set OUT to the folder for the logs}"
. gpu-kit/env.sh >/dev/null 2>&1
K=gpu-kit/bin W=/tmp/mlpab
mkdir -p $W
$K/mkcorpus $W/c.bin >/dev/null
S=(--set mesh.nodes=1 --set mesh.devices_per_node=1 --set train.micro_batch=1 --set train.seq_len=8192 --set train.zero=0)
$K/baspc examples/llama3_2_1b.basp --target=cuda -q -o $W/tiled "${S[@]}"
$K/baspc examples/llama3_2_1b.basp --target=cuda -q -o $W/unfused "${S[@]}" --set train.mlp_chunk=0
for v in tiled unfused; do
  $K/baspc examples/llama3_2_1b.basp --target=cuda -q --memory "${S[@]}" $([ $v = unfused ] && echo --set train.mlp_chunk=0) | grep -E "^memory|^  peak"
done
for r in 1 2; do for v in tiled unfused; do
  timeout 60 $K/mpirun -np 1 $W/$v --data $W/c.bin --steps 12 > $OUT/$v$r.log 2>&1
  grep -E "^done|^memory:|mlp" $OUT/$v$r.log | sed "s/^/$v $r: /"
done; done
