#!/usr/bin/env bash
# recipe.sh BASPC SPECDIR CORPUS W EXAMPLES — runs the cluster launch scripts
# (examples/cluster) on one machine with a tiny CPU model compiled for their
# 8 ranks (2 nodes x 4), as a scheduler would: stopped with SIGTERM to the
# ranks (the time-limit signal), then run again.
#   - mpirun_llama3_2_1b.sh: the stop writes a checkpoint and exits 143; the
#     second run resumes from it, with --metrics inside --checkpoint-dir, and
#     its losses and learning rates equal an uninterrupted run's bit for bit;
#   - slurm_llama3_2_1b.sbatch, with shim srun (local mpirun) and scontrol
#     (records the requeue) first on PATH: on 143 it requeues, the rerun
#     resumes and ends with status 0 without requeueing;
#   - INIT_FROM (a fine-tune): the first run starts from those weights, the
#     requeued one from its checkpoint.
set -euo pipefail
baspc=$1 specdir=$2 corpus=$3 w=$4 ex=$5
d=$w/recipe
rm -rf "$d" && mkdir -p "$d/bin"
bin=$d/tiny8
"$baspc" "$specdir/tiny_mha.basp" -q -o "$bin" --set mesh.nodes=2 --set mesh.devices_per_node=4
export BIN=$bin DATA=$corpus STEPS=8 WARMUP=2 SAVE_EVERY=3 HOSTFILE=
export MPIRUN_ARGS="--allow-run-as-root --oversubscribe"

fail() { echo "FAIL: $*" >&2; exit 1; }
# records CKPT: "step loss lr" of each step record of CKPT/metrics.jsonl
records() {
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "event" not in r: print(r["step"], repr(r["loss"]), repr(r["lr"]))' "$1/metrics.jsonl"
}
# stop_ranks LOG: once LOG's run has finished step 3, SIGTERM every rank
# (the processes of this test's binary), as srun's --signal does.
stop_ranks() {
    local ck=$1 i p
    for ((i = 0; i < 600; i++)); do grep -qs '"step":3,' "$ck/metrics.jsonl" && break; sleep 0.1; done
    for p in $(pgrep -f "^$bin " || true); do kill -TERM "$p" 2>/dev/null || true; done
}

# The uninterrupted run.
export CKPT=$d/ref
"$ex/mpirun_llama3_2_1b.sh" >"$d/ref.log" 2>&1 || { cat "$d/ref.log"; fail "the uninterrupted run failed"; }
[[ $(records "$d/ref" | wc -l) == 8 ]] || fail "the uninterrupted run logged $(records "$d/ref" | wc -l) steps"

# mpirun: stopped, then run again.
export CKPT=$d/mpi
rc=0
BASP_TEST_STEP_DELAY_MS=300 "$ex/mpirun_llama3_2_1b.sh" >"$d/mpi1.log" 2>&1 &
job=$!
stop_ranks "$CKPT"
wait "$job" || rc=$?
[[ $rc == 143 ]] || { tail -n 20 "$d/mpi1.log"; fail "the stopped run exited with $rc, not 143"; }
n=$(sed -nE 's/.*"event":"stop","signal":"SIGTERM","step":([0-9]+),"checkpoint":"step-[0-9]{8}".*/\1/p' "$CKPT/metrics.jsonl")
[[ -n $n && $n -lt 8 && $(cat "$CKPT/latest") == step-$(printf %08d "$n") ]] ||
    fail "no checkpoint of the stop (stop record: ${n:-none}, latest: $(cat "$CKPT/latest" 2>/dev/null))"
"$ex/mpirun_llama3_2_1b.sh" >"$d/mpi2.log" 2>&1 || { tail -n 20 "$d/mpi2.log"; fail "the second run failed"; }
grep -q "resumed from $CKPT/step-$(printf %08d "$n"): step $n" "$d/mpi2.log" || fail "the second run did not resume step $n"
diff <(records "$d/ref") <(records "$CKPT") || fail "stopped at step $n and resumed: the records differ from the uninterrupted run's"
echo "recipe.sh: mpirun recipe stopped after step $n (exit 143), run again: steps 1-8 once each, losses and lr bitwise the uninterrupted run's"

# sbatch with shim srun and scontrol.
cat >"$d/bin/srun" <<'SH'
#!/bin/bash
# srun shim: the options before the program dropped, the ranks started by a local mpirun.
while [[ $1 == -* ]]; do shift; done
OMPI_MCA_mpi_yield_when_idle=1 exec mpirun --allow-run-as-root --oversubscribe -np 8 "$@"
SH
printf '#!/bin/bash\necho "$*" >>"%s"\n' "$d/scontrol.log" >"$d/bin/scontrol"
chmod +x "$d/bin/srun" "$d/bin/scontrol"
export CKPT=$d/slurm SLURM_JOB_NAME=basp-test SLURM_JOB_ID=4242
rc=0
PATH=$d/bin:$PATH BASP_TEST_STEP_DELAY_MS=300 bash "$ex/slurm_llama3_2_1b.sbatch" >"$d/slurm1.log" 2>&1 &
job=$!
stop_ranks "$CKPT"
wait "$job" || rc=$?
[[ $rc == 143 ]] || { tail -n 20 "$d/slurm1.log"; fail "the stopped job exited with $rc, not 143"; }
[[ $(cat "$d/scontrol.log") == "requeue 4242" ]] || fail "the job did not requeue itself: $(cat "$d/scontrol.log" 2>/dev/null)"
PATH=$d/bin:$PATH bash "$ex/slurm_llama3_2_1b.sbatch" >"$d/slurm2.log" 2>&1 || { tail -n 20 "$d/slurm2.log"; fail "the requeued job failed"; }
grep -q "resumed from $CKPT/step-" "$d/slurm2.log" || fail "the requeued job did not resume"
[[ $(wc -l <"$d/scontrol.log") == 1 ]] || fail "a finished job requeued itself"
diff <(records "$d/ref") <(records "$CKPT") || fail "the requeued job's records differ from the uninterrupted run's"
echo "recipe.sh: sbatch recipe stopped (exit 143) requeued itself once; the rerun resumed and matches the uninterrupted run bitwise"

# A fine-tune: INIT_FROM while nothing is saved, the checkpoint after.
export CKPT=$d/ft INIT_FROM=$d/ref/step-00000006 STEPS=2
"$ex/mpirun_llama3_2_1b.sh" >"$d/ft1.log" 2>&1 || { tail -n 20 "$d/ft1.log"; fail "the fine-tune failed"; }
grep -q "resume: no checkpoint in $CKPT yet: starting from the weights of --init-from $INIT_FROM" "$d/ft1.log" ||
    fail "the fine-tune did not say it starts from --init-from"
STEPS=4 "$ex/mpirun_llama3_2_1b.sh" >"$d/ft2.log" 2>&1 || { tail -n 20 "$d/ft2.log"; fail "the fine-tune's rerun failed"; }
grep -q "resume: $CKPT holds a checkpoint: continuing from it; --init-from $INIT_FROM is not used" "$d/ft2.log" &&
    grep -q "resumed from $CKPT/step-00000002: step 2" "$d/ft2.log" || fail "the fine-tune's rerun did not resume its checkpoint"
echo "recipe.sh: INIT_FROM: the first run started from the weights, the rerun from its own checkpoint"
