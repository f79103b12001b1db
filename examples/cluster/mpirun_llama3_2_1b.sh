#!/bin/bash
# Llama-3.2-1B on 2 nodes x 4 GPUs with Open MPI's mpirun and a host file
# (examples/cluster/hostfile), without a scheduler.  Run on node0, with the
# binary, the data and the checkpoint directory at the same path on every
# node (a shared file system) and passwordless ssh between the nodes.
#
#   baspc examples/llama3_2_1b.basp --target=cuda -o train_1b
#   examples/cluster/mpirun_llama3_2_1b.sh
set -euo pipefail
here=$(dirname "$0")
BIN=${BIN:-./train_1b}
DATA=${DATA:-data/train.bin}
CKPT=${CKPT:-$PWD/ckpt/basp-1b}

# -x exports a variable to every rank; --map-by slot fills node0 first, the
# rank order the spec's groups assume; --bind-to none leaves the CPU threads
# to the OS (the GPUs do the work).
exec mpirun --hostfile "$here/hostfile" -np 8 --map-by slot --bind-to none \
    -x NCCL_DEBUG=WARN -x NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-^lo,docker}" -x OPENBLAS_NUM_THREADS=1 \
    "$BIN" --data "$DATA" --steps 20000 \
    --schedule cosine --warmup 500 --lr 3e-4 --min-lr 3e-5 \
    --checkpoint-dir "$CKPT" --save-every 500 --keep-checkpoints 3 --resume \
    --metrics "$CKPT/metrics.jsonl" --timeout 900
