#!/bin/bash
# Llama-3.2-1B on 2 nodes x 4 GPUs with Open MPI's mpirun and a host file
# (examples/cluster/hostfile), without a scheduler.  Run on node0, with the
# binary, the data and the checkpoint directory at the same path on every
# node (a shared file system) and passwordless ssh between the nodes.
#
#   baspc examples/llama3_2_1b.basp --target=cuda -o train_1b
#   examples/cluster/mpirun_llama3_2_1b.sh
#
# Run it again after a stop (SIGTERM to the ranks: they finish the step,
# write a checkpoint and exit 143) and it continues from the newest
# checkpoint in $CKPT (--resume; the first run finds none and starts from
# step 0).  With INIT_FROM set it fine-tunes: from those weights while $CKPT
# holds no checkpoint, from its own checkpoints after that.
#
# Settings (environment; the defaults are the recipe):
#   BIN=./train_1b  DATA=data/train.bin  CKPT=$PWD/ckpt/basp-1b
#   STEPS=20000  WARMUP=500  SAVE_EVERY=500
#   INIT_FROM=                 a Hugging Face directory or --save-weights file
#   HOSTFILE=<this dir>/hostfile   empty: no --hostfile (all ranks on this node)
#   MPIRUN=mpirun  MPIRUN_ARGS=    extra mpirun arguments, split at spaces
set -euo pipefail
here=$(dirname "$0")
BIN=${BIN:-./train_1b}
DATA=${DATA:-data/train.bin}
CKPT=${CKPT:-$PWD/ckpt/basp-1b}
HOSTFILE=${HOSTFILE-$here/hostfile}
read -r -a extra <<<"${MPIRUN_ARGS:-}"
init=()
[[ -z ${INIT_FROM:-} ]] || init=(--init-from "$INIT_FROM")

# -x exports a variable to every rank; --map-by slot fills node0 first, the
# rank order the spec's groups assume; --bind-to none leaves the CPU threads
# to the OS (the GPUs do the work).  Stop the ranks, not mpirun: mpirun sent
# SIGTERM itself kills them odls_base_sigkill_timeout seconds later (default
# 1, too short for a checkpoint; runtime/README.md, Stopping).
exec "${MPIRUN:-mpirun}" ${HOSTFILE:+--hostfile "$HOSTFILE"} -np 8 --map-by slot --bind-to none ${extra[@]+"${extra[@]}"} \
    -x NCCL_DEBUG=WARN -x NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-^lo,docker}" -x OPENBLAS_NUM_THREADS=1 \
    "$BIN" --data "$DATA" --steps "${STEPS:-20000}" \
    --schedule cosine --warmup "${WARMUP:-500}" --lr 3e-4 --min-lr 3e-5 \
    --checkpoint-dir "$CKPT" --save-every "${SAVE_EVERY:-500}" --keep-checkpoints 3 --resume ${init[@]+"${init[@]}"} \
    --metrics "$CKPT/metrics.jsonl" --timeout 900
