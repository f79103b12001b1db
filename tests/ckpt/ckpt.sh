#!/usr/bin/env bash
# ckpt.sh — checkpoint, resume and failure tests of generated training
# binaries (tests/ckpt/CMakeLists.txt, ckpt.*).  Every command prints what it
# checks and exits non-zero on the first failure.
#
#   ckpt.sh setup BASPC SPECDIR CORPUS W     builds the binaries into W
#   ckpt.sh exact W BIN NP [DATA]            6 steps vs 3 + resume + 3: bitwise
#   ckpt.sh reshard W                        a 4-rank ZeRO-3 checkpoint resumed on 1 rank and
#                                            on 4 Ulysses ranks: losses within 1e-5
#   ckpt.sh crash W                          kill -9 during saves, resume, compare bitwise
#   ckpt.sh bad W EXPECT                     corrupt / truncated / other-model checkpoints,
#                                            --keep-checkpoints
#   ckpt.sh nonfinite W EXPECT               NaN: stop naming step and tensor / skip
#   ckpt.sh dead W                           kill -9 of one rank: the job ends, names it
#   ckpt.sh hang W                           a stopped rank: the watchdog ends the job
#   ckpt.sh diskfull W EXPECT                disk full while saving (root: tmpfs)
#   ckpt.sh hf W PYTHON SCRIPT EXPECT        --init-from a Hugging Face directory (Llama, Qwen2
#                                            with q/k/v biases, Qwen3 with q/k norms)
#   ckpt.sh epoch W EXPECT                   --sampler epoch: resume mid-epoch bitwise
#   ckpt.sh sched W EXPECT                   a cosine schedule: lr = closed form, resume bitwise
#   ckpt.sh startstop W                      a signal in start-up ends the job at once; SIGTERM
#                                            to mpirun with a line per step keeps its checkpoint
#   ckpt.sh compat W PYTHON SCRIPT EXPECT    config.json against the program on --init-from and
#                                            --resume: every differing field named, both values
#   ckpt.sh owner W EXPECT                   DIR/lock: a second run refused naming the first;
#                                            other runs' step-*.tmp survive a save
#   ckpt.sh latestfail W EXPECT              `latest` (or the parent's sync) fails: the new
#                                            checkpoint withdrawn; report, latest, --resume agree
#   ckpt.sh metrics W EXPECT                 kill -9, --resume onto the same --metrics: 1..N once
set -euo pipefail
MPI=(mpirun --allow-run-as-root --oversubscribe)

setup() {
    local baspc=$1 specdir=$2 corpus=$3 w=$4
    rm -rf "$w" && mkdir -p "$w"
    ln -s "$corpus" "$w/corpus.bin"
    local m4=(--set mesh.nodes=2 --set mesh.devices_per_node=2) one=(--set mesh.nodes=1 --set mesh.devices_per_node=1)
    "$baspc" "$specdir/tiny_mha.basp" -q -o "$w/mha1" "${one[@]}"
    "$baspc" "$specdir/tiny_mha.basp" -q -o "$w/mha_uly_z0" "${m4[@]}" --set layout.batch_aware=off
    "$baspc" "$specdir/tiny_mha.basp" -q -o "$w/mha_basp_z3" "${m4[@]}" --set "layout.batch_aware=groups 2" \
        --set train.zero=3
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/gqa_basp_z1" "${m4[@]}" --set "layout.batch_aware=groups 2" \
        --set train.zero=1
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/gqa_uly_z2" "${m4[@]}" --set layout.batch_aware=off --set train.zero=2
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/gqa_basp_z0" "${m4[@]}" --set "layout.batch_aware=groups 2"
    # Qwen's features: q/k/v biases (Qwen2), q/k norms (Qwen3); llama3 RoPE
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/qwen2_basp_z3" "${m4[@]}" --set "layout.batch_aware=groups 2" \
        --set train.zero=3 --set model.qkv_bias=true
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/qwen2_1" "${one[@]}" --set model.qkv_bias=true
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/qwen3_uly_z1" "${m4[@]}" --set layout.batch_aware=off \
        --set train.zero=1 --set model.qk_norm=true
    "$baspc" "$specdir/tiny_mha.basp" -q -o "$w/mha1_llama3" "${one[@]}" --set model.rope_scaling=llama3
    # Packed documents (balanced packing over 2 groups): the step's packing
    # is drawn from (seed, step), so a resumed run packs the same rows.
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/docs_basp_z1" "${m4[@]}" --set "layout.batch_aware=groups 2" \
        --set train.zero=1 --set train.documents=on --set train.eot_token=0
    # Gradient accumulation (3 micro-steps, ZeRO-2): the accumulators start
    # every step at zero, so a checkpoint needs nothing more.
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/acc_basp_z2" "${m4[@]}" --set "layout.batch_aware=groups 2" \
        --set train.zero=2 --set train.global_batch=6
    # Everything offloaded (ZeRO-3, offload all): the parameters, AdamW's
    # state and the gradients live in the host arena, and a checkpoint reads
    # and writes them there.
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/gqa_uly_z3_offall" "${m4[@]}" --set layout.batch_aware=off \
        --set train.zero=3 --set train.recompute=full --set train.offload=all
    # batch_aware dynamic: each micro-step's groups come from (seed, step),
    # so a resumed run assigns and trains the same.
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/dyn_z2" "${m4[@]}" --set layout.batch_aware=dynamic \
        --set train.zero=2 --set train.global_batch=4 --set train.documents=on --set train.eot_token=0
}

# accnote W EXPECT: resuming a checkpoint of another global batch warns.
accnote() {
    local w=$1 expect=$2 docs=$3 d=$1/accnote
    rm -rf "$d" && mkdir -p "$d"
    "${MPI[@]}" -np 4 "$w/acc_basp_z2" --data "$w/corpus.bin" --quiet --steps 3 --checkpoint-dir "$d/ck"
    "$expect" ok "warning: the checkpoint was trained with a global batch of 6 sequences per step; this program takes 2 \(train\.global_batch\)" \
        "${MPI[@]}" -np 4 "$w/gqa_basp_z1" --data "$w/corpus.bin" --steps 4 --resume "$d/ck/step-00000003" \
        --checkpoint-dir "$d/other"
    # Packed documents: state.json names their sampler and settings; a
    # program without them resuming is warned, one with them is not.
    "${MPI[@]}" -np 4 "$w/docs_basp_z1" --data "$docs" --quiet --steps 1 --checkpoint-dir "$d/docs" >/dev/null
    python3 - "$d/docs/step-00000001/state.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["data"]
want = {"sampler": "documents: splitmix64(seed, step, document)", "documents": True, "eot_token": 0,
        "packing": "balanced", "seq_len": 64, "micro_batch": 2}
bad = {k: (d.get(k), v) for k, v in want.items() if d.get(k) != v}
assert not bad, f"state.json data: got/want {bad}"
PY
    "$expect" ok "warning: the checkpoint was trained with packed documents; this program reads one token stream \(train\.documents\)" \
        "${MPI[@]}" -np 4 "$w/gqa_basp_z1" --data "$docs" --steps 2 --resume "$d/docs/step-00000001" \
        --checkpoint-dir "$d/other2"
    local out
    out=$("${MPI[@]}" -np 4 "$w/docs_basp_z1" --data "$docs" --steps 2 --resume "$d/docs/step-00000001" \
        --checkpoint-dir "$d/other3" 2>&1) || { echo "$out"; exit 1; }
    ! grep -q "warning: the checkpoint" <<<"$out" || { echo "$out"; echo "FAIL: a warning for the same settings"; exit 1; }
    echo "ckpt.sh: global batch and packed-document changes on --resume are named; none for the same program"
}

losses() { python3 -c 'import json,sys; [print(repr(json.loads(l)["loss"])) for l in open(sys.argv[1])]' "$1"; }

# same_ckpt A B: two checkpoint directories hold identical files.
same_ckpt() {
    for f in model.safetensors optimizer.safetensors config.json state.json; do
        cmp "$1/$f" "$2/$f" || { echo "FAIL: $1/$f and $2/$f differ"; exit 1; }
    done
}

exact() {
    local w=$1 bin=$2 np=$3 data=${4:-$1/corpus.bin} d
    d=$w/exact-$bin && rm -rf "$d" && mkdir -p "$d"
    local run=("${MPI[@]}" -np "$np" "$w/$bin" --data "$data" --quiet)
    "${run[@]}" --steps 6 --save-every 3 --checkpoint-dir "$d/ref" --metrics "$d/ref.jsonl" --save-weights "$d/ref.w" >/dev/null
    "${run[@]}" --steps 3 --checkpoint-dir "$d/res" --metrics "$d/res.jsonl" >/dev/null
    "${run[@]}" --steps 6 --checkpoint-dir "$d/res" --resume --metrics "$d/res.jsonl" --save-weights "$d/res.w" \
        | grep "resumed from"
    diff <(losses "$d/ref.jsonl") <(losses "$d/res.jsonl") || { echo "FAIL: losses differ"; exit 1; }
    cmp "$d/ref.w" "$d/res.w"
    same_ckpt "$d/ref/step-00000006" "$d/res/step-00000006"
    same_ckpt "$d/ref/step-00000003" "$d/res/step-00000003"
    echo "ckpt.sh: $bin on $np ranks: 6 steps and 3 + resume + 3 give bitwise-identical losses ($(wc -l <"$d/ref.jsonl") steps), weights, moments and checkpoints"
}

reshard() {
    local w=$1
    local d=$w/reshard
    rm -rf "$d" && mkdir -p "$d"
    "${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$w/corpus.bin" --quiet --steps 6 --save-every 3 \
        --checkpoint-dir "$d/ref" --metrics "$d/ref.jsonl" >/dev/null
    "${MPI[@]}" -np 1 "$w/mha1" --data "$w/corpus.bin" --quiet --steps 6 --resume "$d/ref/step-00000003" \
        --metrics "$d/one.jsonl" | grep "resumed from"
    "${MPI[@]}" -np 4 "$w/mha_uly_z0" --data "$w/corpus.bin" --quiet --steps 6 --resume "$d/ref/step-00000003" \
        --metrics "$d/uly.jsonl" | grep "resumed from"
    python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
ref = [json.loads(l)["loss"] for l in open(d + "/ref.jsonl")][3:]
for name in ("one", "uly"):
    got = [json.loads(l)["loss"] for l in open("%s/%s.jsonl" % (d, name))]
    err = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    assert len(got) == len(ref) == 3 and err <= 1e-5, (name, got, ref)
    print("ckpt.sh: resumed on %s: steps 4-6 within %.1e of the 4-rank ZeRO-3 run (bound 1e-5)" % (name, err))
PY
}

# The pid of world rank r of a job running binary bin.
rank_pid() {
    local bin=$1 r=$2 p
    for p in $(pgrep -f "$bin" || true); do
        if { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$r"; then
            echo "$p"
            return
        fi
    done
}

# wait_for FILE REGEX [SECONDS]: until FILE matches.
wait_for() {
    local i
    for ((i = 0; i < ${3:-300}; i++)); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "FAIL: $1 never matched $2"
    cat "$1"
    exit 1
}

crash() {
    local w=$1
    local d=$w/crash bin=$w/mha_basp_z3
    rm -rf "$d" && mkdir -p "$d"
    local run=("${MPI[@]}" -np 4 "$bin" --data "$w/corpus.bin" --quiet --steps 10 --save-every 1)
    "${run[@]}" --checkpoint-dir "$d/ref" >/dev/null
    local k delay midsave=0
    for k in 1 2 3 4 5 6; do
        # Each save sleeps 3 x 40 ms between its files; kill rank 0 (the
        # writer) at a different moment of a different save each time.
        rm -rf "$d/run$k"
        delay=$(python3 -c "print('%.2f' % (0.15 + 0.11 * $k))")
        BASP_TEST_SAVE_DELAY=40 "${run[@]}" --checkpoint-dir "$d/run$k" >"$d/run$k.log" 2>&1 &
        local job=$!
        wait_for "$d/run$k.log" "checkpoint: step 1 saved"
        sleep "$delay"
        local pid
        pid=$(rank_pid "$bin" 0)
        [[ -n $pid ]] && kill -9 "$pid"
        wait "$job" || true
        local state="latest=$(cat "$d/run$k/latest" 2>/dev/null || echo none) $(cd "$d/run$k" && ls -d *.tmp 2>/dev/null | tr '\n' ' ')"
        [[ $state == *.tmp* ]] && midsave=$((midsave + 1))
        "${MPI[@]}" -np 4 "$bin" --data "$w/corpus.bin" --quiet --steps 10 --save-every 1 \
            --checkpoint-dir "$d/run$k" --resume >"$d/resume$k.log" 2>&1 || { cat "$d/resume$k.log"; exit 1; }
        echo "ckpt.sh: kill $k after +${delay}s: $state-> $(grep -o 'resumed from [^:]*' "$d/resume$k.log")"
        same_ckpt "$d/ref/step-00000010" "$d/run$k/step-00000010"
    done
    echo "ckpt.sh: 6 runs killed with kill -9 ($midsave in the middle of writing a checkpoint) resumed to checkpoints identical to the uninterrupted run's"
    [[ $midsave -ge 1 ]] || { echo "FAIL: no kill hit a save in progress"; exit 1; }
}

bad() {
    local w=$1 expect=$2
    local d=$w/bad
    rm -rf "$d" && mkdir -p "$d"
    local run=("${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$w/corpus.bin" --quiet)
    "${run[@]}" --steps 2 --checkpoint-dir "$d/good" >/dev/null
    "${MPI[@]}" -np 4 "$w/gqa_basp_z0" --data "$w/corpus.bin" --quiet --steps 1 --checkpoint-dir "$d/gqa" >/dev/null
    local g=$d/good/step-00000002
    mkcase() { rm -rf "$d/$1" && cp -r "$g" "$d/$1"; }
    mkcase flipped
    printf '\x01' | dd of="$d/flipped/model.safetensors" bs=1 seek=5000 conv=notrunc status=none
    "$expect" fail "flipped/model.safetensors: checksum mismatch: the file's FNV-1a-64 is [0-9a-f]+, state.json says [0-9a-f]+: the file is corrupt" \
        "${run[@]}" --steps 3 --resume "$d/flipped"
    mkcase truncated
    truncate -s 100000 "$d/truncated/optimizer.safetensors"
    "$expect" fail "truncated/optimizer.safetensors: truncated or damaged: 100000 bytes, state.json says 924736" \
        "${run[@]}" --steps 3 --resume "$d/truncated"
    mkcase nostate
    echo '{"format": "basp-checkpoint", "version": 1, "step": ' >"$d/nostate/state.json"
    "$expect" fail "nostate/state.json: not a JSON object" "${run[@]}" --steps 3 --resume "$d/nostate"
    # `latest` names a damaged checkpoint: the error points to the newest
    # older one that is intact (never taken silently).
    "$w/mha1" --data "$w/corpus.bin" --quiet --steps 3 --save-every 1 --checkpoint-dir "$d/older" >/dev/null
    printf '\x01' | dd of="$d/older/step-00000003/model.safetensors" bs=1 seek=5000 conv=notrunc status=none
    truncate -s 1000 "$d/older/step-00000002/optimizer.safetensors"
    "$expect" fail "older/step-00000003/model.safetensors: checksum mismatch: .*; the older checkpoint .*older/step-00000001 is intact: --resume .*older/step-00000001 continues from it" \
        "$w/mha1" --data "$w/corpus.bin" --steps 4 --resume "$d/older"
    # A key twice (cJSON takes the first, Python's json the last): refused.
    mkcase dupkey
    sed -i '0,/"step":/s//"step":\t1,\n\t"step":/' "$d/dupkey/state.json"
    "$expect" fail "dupkey/state.json: key step is repeated \(first 1, then 2\): Python's json, and so transformers, would silently take the last; remove one" \
        "${run[@]}" --steps 3 --resume "$d/dupkey"
    # A FIFO (named pipe) where a file is read: refused, not waited on.
    mkcase fifo
    rm "$d/fifo/state.json" && mkfifo "$d/fifo/state.json" "$d/fifo.bin"
    "$expect" fail "fifo/state.json: cannot read: a FIFO \(named pipe\), not a regular file" \
        timeout 60 "${run[@]}" --steps 3 --resume "$d/fifo"
    "$expect" fail "--data .*/fifo\.bin: cannot read: a FIFO \(named pipe\), not a regular file" \
        timeout 60 "$w/mha1" --data "$d/fifo.bin" --steps 1
    "$expect" fail "--init-from .*/fifo\.bin: cannot read: a FIFO \(named pipe\), not a regular file" \
        timeout 60 "$w/mha1" --data "$w/corpus.bin" --init-from "$d/fifo.bin" --steps 1
    "$expect" fail "gqa/step-00000001/config.json differs from this program \(compiled from .*tiny_mha.basp\) in 4 field\(s\): num_attention_heads 8 \(program 4\), num_key_value_heads 2 \(program 4\), head_dim 8 \(program 16\), tie_word_embeddings true \(program false\)" \
        "${run[@]}" --steps 3 --resume "$d/gqa"
    "$expect" fail "no checkpoint to resume from" "${run[@]}" --steps 3 --resume "$d/empty-dir-that-does-not-exist"
    # A stray .tmp (a save that died) and a `latest` pointing nowhere: the
    # newest complete checkpoint is taken.
    mkdir -p "$d/good/step-00000003.tmp" && echo step-00000009 >"$d/good/latest"
    "$expect" ok "resumed from .*good/step-00000002: step 2" "${run[@]}" --steps 3 --checkpoint-dir "$d/good" --resume
    echo "ckpt.sh: nothing lost: the good checkpoint still resumes"
    "${run[@]}" --steps 4 --save-every 1 --keep-checkpoints 2 --checkpoint-dir "$d/keep" >/dev/null
    [[ $(cd "$d/keep" && echo step-*) == "step-00000003 step-00000004" ]] ||
        { echo "FAIL: --keep-checkpoints 2 left $(ls "$d/keep")"; exit 1; }
    echo "ckpt.sh: --keep-checkpoints 2 kept step-00000003 and step-00000004"
    # A run resumed from an earlier checkpoint finds the interrupted run's
    # later ones: the checkpoint it just wrote (which `latest` names) is kept,
    # and a stale .tmp of a step it never writes again is removed.
    "${run[@]}" --steps 4 --save-every 2 --checkpoint-dir "$d/keep1" >/dev/null
    # (the .tmp of a process of this host that is gone: a save removes it)
    sleep 0 &
    local gone=$!
    wait "$gone"
    mkdir -p "$d/keep1/step-00000007.$(hostname | tr '/ ' '__')-$gone.tmp"
    "${run[@]}" --steps 3 --save-every 1 --keep-checkpoints 1 --checkpoint-dir "$d/keep1" \
        --resume "$d/keep1/step-00000002" >/dev/null
    [[ $(cd "$d/keep1" && echo step-*) == "step-00000003" && $(cat "$d/keep1/latest") == step-00000003 ]] ||
        { echo "FAIL: resumed from step 2, --keep-checkpoints 1 left $(ls "$d/keep1") and latest=$(cat "$d/keep1/latest")"; exit 1; }
    "$expect" ok "resumed from .*keep1/step-00000003: step 3" "${run[@]}" --steps 3 --checkpoint-dir "$d/keep1" --resume
    echo "ckpt.sh: resumed from step 2 with step 4 present, --keep-checkpoints 1 kept the step 3 it wrote"
}

nonfinite() {
    local w=$1 expect=$2
    local d=$w/nonfinite
    rm -rf "$d" && mkdir -p "$d"
    local run=("${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$w/corpus.bin" --quiet)
    BASP_TEST_POISON=5 "$expect" fail \
        "error: step 5: loss nan, gradient norm nan; first non-finite gradient: d\.[a-z0-9_.]+ \(of parameter [a-z0-9_.]+\); stopping .* The last good checkpoint is .*stop/step-00000004 \(continue with --resume\)" \
        "${run[@]}" --steps 8 --save-every 2 --checkpoint-dir "$d/stop"
    [[ $(cat "$d/stop/latest") == step-00000004 ]] || { echo "FAIL: latest is not step 4"; exit 1; }
    # Resumed into another --checkpoint-dir: no message names a checkpoint
    # there that does not exist.
    BASP_TEST_POISON=5 "$expect" fail "error: step 5: loss nan, .* No checkpoint was saved yet\." \
        "${run[@]}" --steps 8 --resume "$d/stop/step-00000004" --checkpoint-dir "$d/other"
    "$expect" ok "resumed from .*stop/step-00000004: step 4" "${run[@]}" --steps 5 --checkpoint-dir "$d/stop" --resume
    BASP_TEST_POISON=4 "$expect" ok "warning: step 4: loss nan, gradient norm nan; .* step skipped \(no update\)" \
        "${run[@]}" --steps 5 --save-every 1 --checkpoint-dir "$d/skip" --skip-nonfinite
    cmp "$d/skip/step-00000003/model.safetensors" "$d/skip/step-00000004/model.safetensors"
    cmp "$d/skip/step-00000003/optimizer.safetensors" "$d/skip/step-00000004/optimizer.safetensors"
    echo "ckpt.sh: the skipped step 4 left weights and moments bit for bit as after step 3; step 5 trained on"
}

dead() {
    local w=$1
    local d=$w/dead bin=$w/gqa_basp_z0
    rm -rf "$d" && mkdir -p "$d"
    timeout 60 "${MPI[@]}" -np 4 "$bin" --data "$w/corpus.bin" --steps 1000000 --log-every 1000 >"$d/log" 2>&1 &
    local job=$! t0 rc=0
    wait_for "$d/log" "step +1/"
    kill -9 "$(rank_pid "$bin" 2)"
    t0=$(date +%s.%N)
    wait "$job" || rc=$?
    cat "$d/log" | grep -vE "^(step|  )" | tail -n 12
    [[ $rc -ne 0 && $rc -ne 124 ]] || { echo "FAIL: exit status $rc (124: the job hung)"; exit 1; }
    grep -qE "process rank 2 .*exited on signal 9" "$d/log" || { echo "FAIL: rank 2 is not named"; exit 1; }
    echo "ckpt.sh: rank 2 killed: every rank stopped $(python3 -c "import time; print('%.1f' % (time.time() - $t0))") s later (status $rc), rank 2 named"
}

hang() {
    local w=$1
    local d=$w/hang bin=$w/gqa_basp_z0
    rm -rf "$d" && mkdir -p "$d"
    timeout 60 "${MPI[@]}" -np 4 "$bin" --data "$w/corpus.bin" --steps 1000000 --log-every 1000 --timeout 3 \
        >"$d/log" 2>&1 &
    local job=$! t0 rc=0 pid
    wait_for "$d/log" "step +1/"
    pid=$(rank_pid "$bin" 2)
    kill -STOP "$pid"
    t0=$(date +%s.%N)
    wait "$job" || rc=$?
    kill -9 "$pid" 2>/dev/null || true
    grep -E "watchdog|error" "$d/log" | head -n 6
    [[ $rc -ne 0 && $rc -ne 124 ]] || { echo "FAIL: exit status $rc (124: the job hung)"; exit 1; }
    grep -qE "rank [013]: error: watchdog: no progress for [0-9]+ s while running a step \(step [0-9]+\)" "$d/log" ||
        { echo "FAIL: no watchdog message"; exit 1; }
    echo "ckpt.sh: rank 2 stopped (SIGSTOP): the watchdog ended the job $(python3 -c "import time; print('%.1f' % (time.time() - $t0))") s later (--timeout 3, status $rc)"
}

diskfull() {
    local w=$1 expect=$2
    local d=$w/diskfull
    if [[ $(id -u) -ne 0 ]]; then
        echo "ckpt.sh: SKIPPED: mounting a small tmpfs needs root"
        exit 77
    fi
    # A run killed before its trap ran leaves the mount: take it away first.
    if mountpoint -q "$d/mnt" 2>/dev/null; then umount "$d/mnt"; fi
    rm -rf "$d" && mkdir -p "$d/mnt"
    # One checkpoint of tiny_mha is 1.39 MB: 2 MiB holds one, not two.
    mount -t tmpfs -o size=2m none "$d/mnt" || { echo "ckpt.sh: SKIPPED: cannot mount tmpfs"; exit 77; }
    # Unmount on every way out: a timeout's SIGTERM or Ctrl-C too (bash runs
    # the EXIT trap on a signal only when the signal is trapped).
    trap "umount '$d/mnt'" EXIT
    trap "exit 143" TERM INT HUP
    local run=("${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$w/corpus.bin" --quiet)
    "$expect" fail "error: step 4: checkpoint not saved: cannot write .*step-00000004\.[^/]*tmp/[a-z]+.safetensors: No space left on device; the previous checkpoint .*mnt/step-00000002 is intact; stopping" \
        "${run[@]}" --steps 6 --save-every 2 --checkpoint-dir "$d/mnt"
    ls "$d/mnt"
    [[ -z $(ls -d "$d"/mnt/step-00000004*.tmp 2>/dev/null) && $(cat "$d/mnt/latest") == step-00000002 ]] ||
        { echo "FAIL: the partial checkpoint was not removed"; exit 1; }
    "$expect" ok "resumed from .*mnt/step-00000002: step 2" "${run[@]}" --steps 3 --resume "$d/mnt" \
        --checkpoint-dir "$d/elsewhere"
    echo "ckpt.sh: disk full: the previous checkpoint survived and resumes"
    # A full disk under --save-weights and --metrics: the file and the reason,
    # --metrics at its first failed write.  (The 2 MiB above holds one
    # checkpoint: filled up, nothing more fits.)
    head -c 4000000 /dev/zero >"$d/mnt/fill" 2>/dev/null || true
    local one=("$w/mha1" --data "$w/corpus.bin" --steps 3)
    "$expect" fail "error: --save-weights .*mnt/w\.bin: cannot write .*mnt/w\.bin\.tmp: No space left on device \(the file was not written\)" \
        "${one[@]}" --quiet --save-weights "$d/mnt/w.bin"
    local out
    out=$("$expect" fail "error: --metrics .*mnt/m\.jsonl: cannot write the record of step 1: No space left on device; training goes on without metrics, the run will exit with status 1" \
        "${one[@]}" --metrics "$d/mnt/m.jsonl") || { echo "$out"; exit 1; }
    echo "$out"
    # Said at once (before step 2), and again at the end.
    grep -A1 "cannot write the record of step 1" <<<"$out" | grep -q "^step    2/3" &&
        grep -q "error: --metrics .*mnt/m\.jsonl is incomplete: the records from step 1 on are missing" <<<"$out" ||
        { echo "FAIL: the metrics failure was not said at once and at the end"; exit 1; }
    echo "ckpt.sh: disk full: --save-weights and --metrics name the file and the reason"
}

hf() {
    local w=$1 py=$2 script=$3 expect=$4
    local d=$w/hf
    rm -rf "$d" && mkdir -p "$d"
    # An independent (Python) writer of Hugging Face directories: sharded,
    # BF16/F16/F32 mixed, and the weights it expects us to load, in our layout.
    "$py" "$script" mha "$d/mha" "$d/mha.expected"
    "$py" "$script" gqa "$d/gqa" "$d/gqa.expected"
    "$py" "$script" gqa_tied "$d/gqa_tied" "$d/gqa_tied.expected"
    "$py" "$script" qwen2_tied "$d/qwen2" "$d/qwen2.expected"
    "$py" "$script" qwen3_tied "$d/qwen3" "$d/qwen3.expected"
    "$expect" ok "loaded 21 parameters from .*hf/mha \(Hugging Face safetensors, 2 file\(s\), (BF16|F16|F32| )+; the optimizer state starts fresh\)" \
        "${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$w/corpus.bin" --steps 0 --init-from "$d/mha" --save-weights "$d/mha.got"
    cmp "$d/mha.expected" "$d/mha.got"
    echo "ckpt.sh: a sharded BF16/F16/F32 Hugging Face directory loaded into ZeRO-3 batch-aware ranks exactly"
    # Shards made wrong: each named for what it is.
    local how one=("$w/mha1" --data "$w/corpus.bin" --steps 0)
    for how in twoshards drop f64big; do cp -r "$d/mha" "$d/mha_$how" && "$py" "$script" damage "$d/mha_$how" "$how"; done
    "$expect" fail "tensor model.embed_tokens.weight is in two weight files, .*mha_twoshards/model-00001-of-00002.safetensors and .*mha_twoshards/model-00002-of-00002.safetensors: each tensor must be in exactly one" \
        "${one[@]}" --init-from "$d/mha_twoshards"
    "$expect" fail "this program \(compiled from .*tiny_mha.basp\) has parameter final_norm \(model.norm.weight \[64\]\), which none of the 2 weight files \(.*mha_drop/model-00001-of-00002.safetensors, ...\) holds" \
        "${one[@]}" --init-from "$d/mha_drop"
    "$expect" fail "mha_f64big/model-0000[12]-of-00002.safetensors: tensor model.norm.weight holds 1e\+300 at element 3, outside the float32 range \(\|x\| <= 3.4e38\) that basp trains in" \
        "${one[@]}" --init-from "$d/mha_f64big"
    echo "ckpt.sh: a tensor in two shards, a tensor in none, an F64 value beyond float32: each named"
    "$expect" fail "hf/gqa/config.json differs from this program \(compiled from .*tiny_mha.basp\) in 3 field\(s\): num_attention_heads 8 \(program 4\), num_key_value_heads 2 \(program 4\), head_dim 8 \(program 16\)" \
        "${MPI[@]}" -np 1 "$w/mha1" --data "$w/corpus.bin" --steps 0 --init-from "$d/gqa"
    # A config.json that claims the program's model over tensors of another:
    # the first differing tensor is named.
    cp -r "$d/gqa" "$d/gqa_as_mha"
    "$py" "$script" edit "$d/gqa_as_mha" num_attention_heads=4 num_key_value_heads=4 head_dim=16
    "$expect" fail "checkpoint is of a different model: model.layers.0.self_attn.k_proj.weight is \[16,64\] in .*hf/gqa_as_mha/model-00001-of-00002.safetensors but this program \(compiled from .*tiny_mha.basp\) needs \[64,64\] \(parameter l0.wk\)" \
        "${MPI[@]}" -np 1 "$w/mha1" --data "$w/corpus.bin" --steps 0 --init-from "$d/gqa_as_mha"
    # A tied program: an lm_head.weight equal to the embedding is what a tied
    # model may store; an untied model's head is refused, not dropped.
    "$expect" ok "loaded 20 parameters from .*hf/gqa_tied " \
        "${MPI[@]}" -np 4 "$w/gqa_basp_z0" --data "$w/corpus.bin" --steps 0 --init-from "$d/gqa_tied" \
        --save-weights "$d/gqa_tied.got"
    cmp "$d/gqa_tied.expected" "$d/gqa_tied.got"
    "$expect" fail "hf/gqa/config.json differs from this program \(compiled from .*tiny_gqa.basp\) in 1 field\(s\): tie_word_embeddings false \(program true\)" \
        "${MPI[@]}" -np 4 "$w/gqa_basp_z0" --data "$w/corpus.bin" --steps 0 --init-from "$d/gqa"
    cp -r "$d/gqa" "$d/gqa_claims_tied"
    "$py" "$script" edit "$d/gqa_claims_tied" tie_word_embeddings=true
    "$expect" fail "checkpoint is of a different model: .*hf/gqa_claims_tied/model-00002-of-00002.safetensors holds an lm_head.weight that differs from model.embed_tokens.weight \(untied embeddings\), but this program \(compiled from .*tiny_gqa.basp\) ties" \
        "${MPI[@]}" -np 4 "$w/gqa_basp_z0" --data "$w/corpus.bin" --steps 0 --init-from "$d/gqa_claims_tied"
    echo "ckpt.sh: a tied program loads a tied model (its stored head equal to the embedding) and refuses an untied one"
    # Qwen2 (q/k/v_proj.bias [H*Dh] -> l<i>.bq [H,Dh] ...) into ZeRO-3 batch-aware
    # ranks, Qwen3 (q_norm/k_norm.weight) into ZeRO-1 Ulysses ranks.
    "$expect" ok "loaded 26 parameters from .*hf/qwen2 " \
        "${MPI[@]}" -np 4 "$w/qwen2_basp_z3" --data "$w/corpus.bin" --steps 0 --init-from "$d/qwen2" \
        --save-weights "$d/qwen2.got"
    "$py" "$script" same "$d/qwen2.expected" "$d/qwen2.got"
    "$expect" ok "loaded 24 parameters from .*hf/qwen3 " \
        "${MPI[@]}" -np 4 "$w/qwen3_uly_z1" --data "$w/corpus.bin" --steps 0 --init-from "$d/qwen3" \
        --save-weights "$d/qwen3.got"
    "$py" "$script" same "$d/qwen3.expected" "$d/qwen3.got"
    echo "ckpt.sh: Qwen2 (q/k/v biases) and Qwen3 (q/k norms) Hugging Face directories loaded exactly"
    # Our Qwen2 checkpoint back on one rank: the biases' names and layout round-trip.
    "${MPI[@]}" -np 4 "$w/qwen2_basp_z3" --data "$w/corpus.bin" --quiet --steps 2 --checkpoint-dir "$d/own_qwen2" \
        --save-weights "$d/own_qwen2.w" >/dev/null
    grep -q '"model_type":.*"qwen2"' "$d/own_qwen2/step-00000002/config.json"
    "${MPI[@]}" -np 1 "$w/qwen2_1" --data "$w/corpus.bin" --steps 0 --init-from "$d/own_qwen2/step-00000002" \
        --save-weights "$d/own_qwen2.reloaded" >/dev/null
    cmp "$d/own_qwen2.w" "$d/own_qwen2.reloaded"
    echo "ckpt.sh: a Qwen2 checkpoint of 4 ZeRO-3 ranks loads with --init-from on 1 rank, byte-identical weights"
    # Our checkpoints are Hugging Face directories too: a warm start from one.
    "${MPI[@]}" -np 1 "$w/mha1" --data "$w/corpus.bin" --quiet --steps 2 --checkpoint-dir "$d/own" \
        --save-weights "$d/own.w" >/dev/null
    "${MPI[@]}" -np 4 "$w/mha_uly_z0" --data "$w/corpus.bin" --steps 0 --init-from "$d/own/step-00000002" \
        --save-weights "$d/own.reloaded" >/dev/null
    cmp "$d/own.w" "$d/own.reloaded"
    echo "ckpt.sh: a checkpoint directory loads with --init-from on another layout, byte-identical weights"
}

# compat W PYTHON SCRIPT EXPECT: config.json edited one way at a time (make_hf.py
# edit, which keeps state.json's checksum right): --init-from and --resume
# both refuse, naming every differing field with both values; programs
# compiled with other features refuse real checkpoints the same way.
compat() {
    local w=$1 py=$2 script=$3 expect=$4
    local d=$w/compat
    rm -rf "$d" && mkdir -p "$d"
    # One rank as an MPI singleton, without mpirun: a failing mpirun job takes
    # seconds to tear down, and there are 40 of them here.
    local one=("$w/mha1" --data "$w/corpus.bin" --quiet)
    local l3=("$w/mha1_llama3" --data "$w/corpus.bin" --quiet)
    "${one[@]}" --steps 1 --checkpoint-dir "$d/base" >/dev/null
    "${l3[@]}" --steps 1 --checkpoint-dir "$d/base3" >/dev/null
    local n=0
    # edited BASE NAME FIELDS EDIT...: --resume of the edited copy fails with
    # "…/NAME/config.json differs … in FIELDS" (FIELDS: an ERE), and so does
    # --init-from when BOTH=1.  Both loads call the one check
    # (rt_ckpt_load.c ck_check_config): every field is checked through
    # --resume, both paths with one edit per base program.
    edited() {
        local base=$1 name=$2 fields=$3 bin
        shift 3
        rm -rf "$d/$name" && cp -r "$d/$base/step-00000001" "$d/$name"
        "$py" "$script" edit "$d/$name" "$@"
        [[ $base == base ]] && bin=("${one[@]}") || bin=("${l3[@]}")
        local want="compat/$name/config.json differs from this program \(compiled from [^)]*tiny_mha.basp\) in $fields"
        : >"$d/$name.init.log"
        if [[ ${BOTH:-0} == 1 ]]; then
            "$expect" fail "$want" "${bin[@]}" --steps 2 --init-from "$d/$name" >"$d/$name.init.log" ||
                { cat "$d/$name.init.log"; exit 1; }
        fi
        "$expect" fail "$want" "${bin[@]}" --steps 2 --resume "$d/$name" >"$d/$name.resume.log" ||
            { cat "$d/$name.resume.log"; exit 1; }
        if grep -qE "^step +1/" "$d/$name.init.log" "$d/$name.resume.log"; then echo "FAIL: $name trained"; exit 1; fi
        grep -hE "differs from this program" "$d/$name.resume.log" | head -n 1
        n=$((n + 1))
    }
    edited base theta "1 field\(s\): rope_parameters.rope_theta 500000 \(program 10000\)$" \
        rope_theta=500000 rope_parameters.rope_theta=500000
    edited base theta_legacy "1 field\(s\): rope_theta 1e\+06 \(program 10000\)$" \
        rope_parameters=null rope_theta=1e6
    edited base eps "1 field\(s\): rms_norm_eps 1e-06 \(program 1e-05\)$" rms_norm_eps=1e-6
    edited base eps_default "1 field\(s\): rms_norm_eps 1e-06 \(program 1e-05\)$" rms_norm_eps=null
    BOTH=1 edited base theta_eps "2 field\(s\): rope_theta 500000 \(program 10000\), rms_norm_eps 1e-06 \(program 1e-05\)$" \
        rope_parameters=null rope_theta=500000 rms_norm_eps=1e-6
    edited base rope_kind "1 field\(s\): rope_scaling.rope_type llama3 \(program default\)$" \
        'rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}'
    edited base3 rope_none "1 field\(s\): rope_parameters.rope_type default \(program llama3\)$" \
        rope_scaling=null rope_parameters.rope_type='"default"'
    edited base3 rope_factor "1 field\(s\): rope_scaling.factor 32 \(program 8\)$" rope_scaling.factor=32
    BOTH=1 edited base3 rope_all "4 field\(s\): rope_scaling.factor 32 \(program 8\), rope_scaling.low_freq_factor 2 \(program 1\), rope_scaling.high_freq_factor 8 \(program 4\), rope_scaling.original_max_position_embeddings 4096 \(program 8192\)$" \
        rope_scaling.factor=32 rope_scaling.low_freq_factor=2 rope_scaling.high_freq_factor=8 \
        rope_scaling.original_max_position_embeddings=4096
    edited base act "1 field\(s\): hidden_act gelu \(program silu\)$" hidden_act='"gelu"'
    edited base tie "1 field\(s\): tie_word_embeddings true \(program false\)$" tie_word_embeddings=true
    edited base qwen2 "1 field\(s\): qkv_bias true \(model_type qwen2; program false\)$" model_type='"qwen2"'
    edited base qwen3 "1 field\(s\): qk_norm true \(model_type qwen3; program false\)$" model_type='"qwen3"'
    edited base attn_bias "1 field\(s\): qkv_bias true \(model_type llama, attention_bias true; program false\)$" \
        attention_bias=true
    edited base mlp_bias "1 field\(s\): mlp_bias true \(program false\)$" mlp_bias=true
    edited base dropout "1 field\(s\): attention_dropout 0.1 \(program 0\)$" attention_dropout=0.1
    edited base sliding "2 field\(s\): qkv_bias true \(model_type qwen2; program false\), use_sliding_window true \(program false\)$" \
        model_type='"qwen2"' use_sliding_window=true sliding_window=16 max_window_layers=1
    # 4 heads of 16 and 8 heads of 8: the tensors have the same shapes
    edited base heads "3 field\(s\): num_attention_heads 8 \(program 4\), num_key_value_heads 8 \(program 4\), head_dim 8 \(program 16\)$" \
        num_attention_heads=8 num_key_value_heads=8 head_dim=8
    edited base shapes "4 field\(s\): hidden_size 128 \(program 64\), num_hidden_layers 3 \(program 2\), intermediate_size 256 \(program 128\), vocab_size 512 \(program 256\)$" \
        hidden_size=128 num_hidden_layers=3 intermediate_size=256 vocab_size=512
    cp -r "$d/base/step-00000001" "$d/gemma" && "$py" "$script" edit "$d/gemma" model_type='"gemma"'
    "$expect" fail "gemma/config.json: model_type gemma is not supported \(basp reads llama, qwen2 and qwen3\)" \
        "${one[@]}" --steps 2 --resume "$d/gemma" >/dev/null
    echo "ckpt.sh: $n edited config.json files refused by --resume (2 by --init-from too), every differing field named; model_type gemma refused"
    # Real checkpoints against programs compiled with other features.
    "${MPI[@]}" -np 4 "$w/qwen3_uly_z1" --data "$w/corpus.bin" --quiet --steps 1 --checkpoint-dir "$d/q3" >/dev/null
    "${MPI[@]}" -np 4 "$w/gqa_basp_z0" --data "$w/corpus.bin" --quiet --steps 1 --checkpoint-dir "$d/gqa" >/dev/null
    "$expect" fail "q3/step-00000001/config.json differs from this program \(compiled from [^)]*tiny_gqa.basp\) in 1 field\(s\): qk_norm true \(model_type qwen3; program false\)$" \
        "${MPI[@]}" -np 4 "$w/gqa_basp_z0" --data "$w/corpus.bin" --steps 2 --resume "$d/q3/step-00000001"
    "$expect" fail "gqa/step-00000001/config.json differs from this program \(compiled from [^)]*tiny_gqa.basp\) in 1 field\(s\): qkv_bias false \(model_type llama; program true\)$" \
        "${MPI[@]}" -np 4 "$w/qwen2_basp_z3" --data "$w/corpus.bin" --steps 2 --init-from "$d/gqa/step-00000001"
    "$expect" fail "q3/step-00000001/config.json differs from this program \(compiled from [^)]*tiny_gqa.basp\) in 2 field\(s\): qkv_bias false \(model_type qwen3; program true\), qk_norm true \(model_type qwen3; program false\)$" \
        "${MPI[@]}" -np 4 "$w/qwen2_basp_z3" --data "$w/corpus.bin" --steps 2 --resume "$d/q3/step-00000001"
    echo "ckpt.sh: Qwen3 and Llama checkpoints refused by programs without q/k norms or with q/k/v biases"
}

# ---- graceful stop, non-finite checkpoints, overridden options -----------------------
#   ckpt.sh stop W EXPECT       SIGTERM to mpirun and SIGINT/SIGTERM to the ranks: the step
#                               finishes, a checkpoint is written, exit 143 / 130; the
#                               checkpoint resumes to the uninterrupted run's result; a
#                               second signal stops at once
#   ckpt.sh loadnan W EXPECT    NaN/Inf in --resume weights and moments, --init-from DIR and
#                               --init-from FILE: refused by tensor and file
#   ckpt.sh seednote W EXPECT   --resume --seed N: a note naming both seeds
#   ckpt.sh accnote W EXPECT DOCS   --resume under another global batch or without packed
#                                   documents: a warning naming both

# stop_run LOG DIR DELAY_MS [ARGS...]: a 4-rank run of 40 steps in the background.
# Open MPI 4's mpirun, when signalled, sends the ranks SIGCONT, waits
# odls_base_sigkill_timeout seconds, sends SIGTERM, waits as long, then
# SIGKILL: STOP_TIMEOUT s (3 unless set), so the ranks have that long for
# the step and the save.
stop_run() {
    local log=$1 dir=$2 ms=$3
    shift 3
    BASP_TEST_STEP_DELAY_MS=$ms OMPI_MCA_odls_base_sigkill_timeout=${STOP_TIMEOUT:-3} "${MPI[@]}" -np 4 "$W/mha_basp_z3" \
        --data "$W/corpus.bin" --steps 40 --metrics "$dir.jsonl" --checkpoint-dir "$dir" "$@" >"$log" 2>&1 &
    STOP_JOB=$!
}

# signal_ranks SIG: SIG to every rank of the stop test's binary.  The pids
# are found first and signalled in one kill: one signalled rank makes all of
# them stop after the step, so a rank looked up later may already be gone.
signal_ranks() {
    local r pid pids=()
    for r in 0 1 2 3; do
        pid=$(rank_pid "$W/mha_basp_z3" "$r")
        [[ -n $pid ]] || { echo "FAIL: rank $r of $W/mha_basp_z3 is not running"; exit 1; }
        pids+=("$pid")
    done
    kill "-$1" "${pids[@]}"
}

stop() {
    W=$1
    local expect=$2 d=$1/stop rc
    rm -rf "$d" && mkdir -p "$d"
    "${MPI[@]}" -np 4 "$W/mha_basp_z3" --data "$W/corpus.bin" --quiet --steps 40 --checkpoint-dir "$d/ref" >/dev/null
    # 1. SIGTERM to mpirun.  Open MPI 4.1 sends the ranks SIGCONT, waits
    #    odls_base_sigkill_timeout, sends SIGTERM, waits as long again, then
    #    SIGKILL; it does not forward output while it waits, so the ranks'
    #    last lines may be lost.  The timeout (8 s) leaves a loaded or
    #    sanitized run room for a step and a save; the metrics file's stop
    #    record (written by rank 0 itself) says where the run ended.
    STOP_TIMEOUT=8 stop_run "$d/term.log" "$d/term" 300
    wait_for "$d/term.log" "step +4/40"
    kill -TERM "$STOP_JOB"
    rc=0 && wait "$STOP_JOB" || rc=$?
    [[ $rc -ne 0 ]] || { cat "$d/term.log"; echo "FAIL: exit status 0 after SIGTERM"; exit 1; }
    local rec n
    rec=$(grep '"event":"stop"' "$d/term.jsonl") ||
        { cat "$d/term.log"; echo "FAIL: no stop record in the metrics file"; exit 1; }
    n=$(sed -nE 's/.*"signal":"SIGTERM","step":([0-9]+),"checkpoint":"step-[0-9]{8}","exit_status":143.*/\1/p' <<<"$rec")
    [[ -n $n ]] || { echo "FAIL: stop record: $rec"; exit 1; }
    [[ $(cat "$d/term/latest") == "step-$(printf %08d "$n")" ]] || { echo "FAIL: latest is not step $n"; exit 1; }
    ! grep "received SIGTERM" "$d/term.log" ||
        grep -E "received SIGTERM: step $n finished, checkpoint written to .*term/step-[0-9]{8} \(continue with --resume\); stopping \(exit status 143\)" "$d/term.log" ||
        { cat "$d/term.log"; echo "FAIL: wrong stop message"; exit 1; }
    [[ $n -lt 40 ]] || { echo "FAIL: the run was not stopped early (step $n)"; exit 1; }
    "${MPI[@]}" -np 4 "$W/mha_basp_z3" --data "$W/corpus.bin" --quiet --steps 40 --checkpoint-dir "$d/term" \
        --resume | grep "resumed from .*step-$(printf %08d "$n")"
    same_ckpt "$d/ref/step-00000040" "$d/term/step-00000040"
    echo "ckpt.sh: SIGTERM to mpirun: stopped after step $n (mpirun exit status $rc), the checkpoint resumed to the uninterrupted run's step 40, bitwise"
    # 2. SIGINT to every rank (as srun / scancel --signal deliver it): exit 130.
    stop_run "$d/int.log" "$d/int" 150 --quiet
    wait_for "$d/int.jsonl" '"step":4,'
    signal_ranks INT
    rc=0 && wait "$STOP_JOB" || rc=$?
    [[ $rc -eq 130 ]] || { cat "$d/int.log"; echo "FAIL: exit status $rc after SIGINT, wanted 130"; exit 1; }
    grep -E "received SIGINT: step [0-9]+ finished, checkpoint written to" "$d/int.log"
    n=$(sed -nE 's/.*received SIGINT: step ([0-9]+) finished.*/\1/p' "$d/int.log")
    "${MPI[@]}" -np 4 "$W/mha_basp_z3" --data "$W/corpus.bin" --quiet --steps 40 --checkpoint-dir "$d/int" \
        --resume >/dev/null
    same_ckpt "$d/ref/step-00000040" "$d/int/step-00000040"
    echo "ckpt.sh: SIGINT to the ranks: exit status 130 after step $n, resumed bitwise to the uninterrupted run's"
    # 3. SIGTERM to the ranks without --checkpoint-dir: said, exit 143.
    BASP_TEST_STEP_DELAY_MS=150 "${MPI[@]}" -np 4 "$W/mha_basp_z3" --data "$W/corpus.bin" --steps 40 \
        --metrics "$d/nock.jsonl" >"$d/nock.log" 2>&1 &
    STOP_JOB=$!
    wait_for "$d/nock.jsonl" '"step":3,'
    signal_ranks TERM
    rc=0 && wait "$STOP_JOB" || rc=$?
    [[ $rc -eq 143 ]] || { cat "$d/nock.log"; echo "FAIL: exit status $rc, wanted 143"; exit 1; }
    grep -E "received SIGTERM: step [0-9]+ finished, no checkpoint written \(no --checkpoint-dir\); stopping \(exit status 143\)" "$d/nock.log"
    grep -E '^\{"event":"stop","signal":"SIGTERM","step":[0-9]+,"checkpoint":null,"exit_status":143\}$' "$d/nock.jsonl"
    # 4. A second signal during a long step: at once, no checkpoint.
    stop_run "$d/twice.log" "$d/twice" 3000 --quiet
    wait_for "$d/twice.jsonl" '"step":1,'
    signal_ranks TERM
    sleep 0.3
    signal_ranks TERM
    rc=0 && wait "$STOP_JOB" || rc=$?
    [[ $rc -eq 143 ]] || { cat "$d/twice.log"; echo "FAIL: exit status $rc after two signals, wanted 143"; exit 1; }
    grep "received a second signal: stopping at once, no checkpoint" "$d/twice.log"
    [[ ! -e $d/twice/latest ]] || { echo "FAIL: a checkpoint was written after the second signal"; exit 1; }
    echo "ckpt.sh: a second signal stops at once (exit 143, no checkpoint)"
}

# poison_st FILE TENSOR VALUE [STATE]: one f32 element of TENSOR becomes
# VALUE (nan, inf); with STATE (a state.json), its size and FNV-1a-64 of
# FILE are updated so that only the value is wrong.
poison_st() {
    python3 - "$@" <<'PY'
import json, os, struct, sys
path, name, value = sys.argv[1:4]
b = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
t = h[name]
assert t["dtype"] == "F32", t
off = 8 + n + t["data_offsets"][0] + 4
b[off:off + 4] = struct.pack("<f", float(value))
open(path, "wb").write(b)
if len(sys.argv) > 4:
    st = json.load(open(sys.argv[4]))
    x = 0xcbf29ce484222325
    for c in b:
        x = ((x ^ c) * 0x100000001b3) & 0xffffffffffffffff
    e = st["files"][os.path.basename(path)]
    e["fnv64"], e["bytes"] = "%016x" % x, len(b)
    json.dump(st, open(sys.argv[4], "w"))
PY
}

loadnan() {
    local w=$1 expect=$2
    local d=$w/loadnan
    rm -rf "$d" && mkdir -p "$d"
    local run=("${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$w/corpus.bin" --quiet)
    "${run[@]}" --steps 2 --checkpoint-dir "$d/good" >/dev/null
    local g=$d/good/step-00000002
    cp -r "$g" "$d/wnan" && poison_st "$d/wnan/model.safetensors" model.norm.weight nan "$d/wnan/state.json"
    "$expect" fail "wnan/model.safetensors: tensor model.norm.weight holds a non-finite value \(nan at element 1\): refusing to train from it" \
        "${run[@]}" --steps 3 --resume "$d/wnan"
    cp -r "$g" "$d/minf" &&
        poison_st "$d/minf/optimizer.safetensors" exp_avg_sq.model.layers.0.mlp.down_proj.weight inf "$d/minf/state.json"
    "$expect" fail "minf/optimizer.safetensors: tensor exp_avg_sq.model.layers.0.mlp.down_proj.weight holds a non-finite value \(inf at element 1\)" \
        "${run[@]}" --steps 3 --resume "$d/minf"
    "$expect" fail "wnan/model.safetensors: tensor model.norm.weight holds a non-finite value \(nan at element 1\)" \
        "${run[@]}" --steps 3 --init-from "$d/wnan"
    "${MPI[@]}" -np 1 "$w/mha1" --data "$w/corpus.bin" --quiet --steps 1 --save-weights "$d/w.bin" >/dev/null
    python3 -c 'import struct,sys; f=open(sys.argv[1],"r+b"); f.seek(-4,2); f.write(struct.pack("<f",float("-inf")))' "$d/w.bin"
    "$expect" fail "w\.bin: tensor [a-z0-9_.]+ holds a non-finite value \(-inf at element [0-9]+\): refusing to train from it" \
        "${run[@]}" --steps 3 --init-from "$d/w.bin"
    "$expect" ok "resumed from .*good/step-00000002: step 2" "${run[@]}" --steps 3 --resume "$g"
    echo "ckpt.sh: NaN/Inf in resumed weights and moments, an HF directory and a weights file refused by name"
}

seednote() {
    local w=$1 expect=$2
    local d=$w/seednote
    rm -rf "$d" && mkdir -p "$d"
    local run=("${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$w/corpus.bin" --quiet)
    "${run[@]}" --steps 2 --seed 7 --checkpoint-dir "$d/a" >/dev/null
    "$expect" ok "note: --seed 99 is ignored: the checkpoint's seed 7 wins" \
        "${run[@]}" --steps 3 --seed 99 --resume "$d/a/step-00000002"
    local out
    out=$("${run[@]}" --steps 3 --seed 7 --resume "$d/a/step-00000002" 2>&1)
    ! grep -q "note: --seed" <<<"$out" || { echo "FAIL: a note for the checkpoint's own seed"; exit 1; }
    echo "ckpt.sh: --resume --seed N names both seeds; the same seed gives no note"
}

# sched W EXPECT: a cosine schedule with warmup (the command-line options)
# over 6 steps on 4 ranks (batch-aware, ZeRO-3): every step's lr in the
# JSONL equals the closed form (computed here in Python); resumed from the
# step-3 checkpoint with the same --steps 6, steps 4-6 and the final weights
# are bitwise the uninterrupted run's; a resume with another schedule, warmup
# or step count names each change.
sched() {
    local w=$1 expect=$2
    local d=$w/sched
    rm -rf "$d" && mkdir -p "$d"
    local opt=(--schedule cosine --warmup 2 --min-lr 1e-4 --lr 2e-3)
    local run=("${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$w/corpus.bin" --quiet --steps 6 "${opt[@]}")
    "${run[@]}" --save-every 3 --checkpoint-dir "$d/ref" --metrics "$d/ref.jsonl" --save-weights "$d/ref.w" >/dev/null
    python3 - "$d/ref.jsonl" <<'PY'
import json, math, sys
lrs = [json.loads(l)["lr"] for l in open(sys.argv[1])]
T, W, L, m = 6, 2, 2e-3, 1e-4
want = [L * t / W if t < W else m + (L - m) * 0.5 * (1 + math.cos(math.pi * (t - W) / (T - W))) for t in range(T)]
assert len(lrs) == T and all(abs(a - b) <= 1e-15 + 1e-12 * b for a, b in zip(lrs, want)), (lrs, want)
print("ckpt.sh: cosine lr per step", " ".join("%.4g" % x for x in lrs), "= the closed form")
PY
    "${run[@]}" --resume "$d/ref/step-00000003" --metrics "$d/res.jsonl" --save-weights "$d/res.w" | grep "resumed from"
    diff <(tail -n 3 "$d/ref.jsonl" | python3 -c 'import json,sys; [print(repr(json.loads(l)["loss"]), repr(json.loads(l)["lr"])) for l in sys.stdin]') \
         <(python3 -c 'import json,sys; [print(repr(json.loads(l)["loss"]), repr(json.loads(l)["lr"])) for l in open(sys.argv[1])]' "$d/res.jsonl") \
        || { echo "FAIL: the resumed schedule differs"; exit 1; }
    cmp "$d/ref.w" "$d/res.w"
    grep -q '"schedule":[[:space:]]*"cosine"' "$d/ref/step-00000003/state.json"
    "$expect" ok "note: the checkpoint was trained with schedule cosine; this run uses linear" \
        "${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$w/corpus.bin" --quiet --steps 6 --lr 2e-3 --min-lr 1e-4 \
        --schedule linear --warmup 2 --resume "$d/ref/step-00000003"
    "$expect" ok "note: the checkpoint was trained with steps 6; this run uses 8 \(the schedule is stretched" \
        "${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$w/corpus.bin" --quiet --steps 8 "${opt[@]}" \
        --resume "$d/ref/step-00000003"
    echo "ckpt.sh: resumed mid-schedule: steps 4-6 (loss and lr) and the weights bitwise the uninterrupted run's; changes named"
}

# epoch W EXPECT: --sampler epoch on 4 ranks (batch-aware, ZeRO-3) over a
# corpus cut short so that an epoch is 5 steps: 8 steps, resumed from the
# step-3 checkpoint (inside the first epoch), give bitwise the same losses
# (steps 4-8, across the epoch boundary) and weights; the banner counts the
# epochs; a resume with the other sampler warns.
epoch() {
    local w=$1 expect=$2
    local d=$w/epoch
    rm -rf "$d" && mkdir -p "$d"
    # 10 windows of 64 tokens (+1 target): 641 tokens.
    python3 -c 'import struct,sys; t=[(i*7)%251 for i in range(641)]; open(sys.argv[1],"wb").write(struct.pack("<256i",20240520,1,len(t),*[0]*253)+struct.pack("<%dH"%len(t),*t))' "$d/c.bin"
    local run=("${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$d/c.bin" --quiet --steps 8 --sampler epoch)
    "$expect" ok "sampler epoch: 10 window\(s\) of 64 tokens, each once per epoch; 8 steps cover 1\.600 epoch\(s\)" \
        "${run[@]}" --save-every 3 --checkpoint-dir "$d/ref" --metrics "$d/ref.jsonl" --save-weights "$d/ref.w"
    "${run[@]}" --resume "$d/ref/step-00000003" --metrics "$d/res.jsonl" --save-weights "$d/res.w" | grep "resumed from"
    diff <(tail -n 5 "$d/ref.jsonl" | python3 -c 'import json,sys; [print(repr(json.loads(l)["loss"])) for l in sys.stdin]') \
         <(losses "$d/res.jsonl") || { echo "FAIL: the resumed epoch differs"; exit 1; }
    cmp "$d/ref.w" "$d/res.w"
    "$expect" ok "warning: the checkpoint drew its batches with --sampler epoch; this run uses random" \
        "${MPI[@]}" -np 4 "$w/mha_basp_z3" --data "$d/c.bin" --quiet --steps 4 --resume "$d/ref/step-00000003"
    echo "ckpt.sh: --sampler epoch resumed inside the first epoch: steps 4-8 (across the epoch boundary) and the weights bitwise the uninterrupted run's"
}

# startstop W: a signal during start-up ends the job at once (1 rank
# without mpirun under `timeout`, and SIGINT to the 4 ranks as srun delivers
# it), and SIGTERM to mpirun stops a job that prints a line per step with
# its checkpoint: with fast steps rank 0 fills the terminal that mpirun no
# longer reads and, before rt_signal.c, blocked there until SIGKILL.
startstop() {
    W=$1
    local d=$1/startstop rc t0 n
    rm -rf "$d" && mkdir -p "$d"
    t0=$SECONDS
    rc=0 && BASP_TEST_STARTUP_DELAY_MS=60000 timeout --preserve-status -s TERM 2 "$W/mha1" --data "$W/corpus.bin" \
        --steps 5 >"$d/one.log" 2>&1 || rc=$?
    cat "$d/one.log"
    [[ $rc -eq 143 && $((SECONDS - t0)) -lt 20 ]] || { echo "FAIL: exit status $rc after $((SECONDS - t0)) s, wanted 143 at once"; exit 1; }
    grep -q "received SIGTERM during start-up, before the first step: stopping, nothing was trained" "$d/one.log"
    BASP_TEST_STARTUP_DELAY_MS=60000 "${MPI[@]}" -np 4 "$W/mha_basp_z3" --data "$W/corpus.bin" --steps 5 \
        >"$d/four.log" 2>&1 &
    STOP_JOB=$!
    local i
    for ((i = 0; i < 200; i++)); do [[ -n $(rank_pid "$W/mha_basp_z3" 3) ]] && break; sleep 0.1; done
    sleep 1 # past MPI_Init: in the start-up delay
    signal_ranks INT
    rc=0 && wait "$STOP_JOB" || rc=$?
    cat "$d/four.log"
    [[ $rc -ne 0 ]] || { echo "FAIL: exit status 0 after SIGINT in start-up"; exit 1; }
    grep -q "received SIGINT during start-up, before the first step: stopping, nothing was trained" "$d/four.log"
    echo "ckpt.sh: a signal during start-up ends the job at once (1 rank: 143; 4 ranks: mpirun exit $rc)"
    # Fast steps, a line per step, SIGTERM to mpirun (3 s before it forwards).
    OMPI_MCA_odls_base_sigkill_timeout=3 "${MPI[@]}" -np 4 "$W/mha_basp_z3" --data "$W/corpus.bin" --steps 100000 \
        --log-every 1 --metrics "$d/fast.jsonl" --checkpoint-dir "$d/fast" >"$d/fast.log" 2>&1 &
    STOP_JOB=$!
    wait_for "$d/fast.jsonl" '"step":20,'
    kill -TERM "$STOP_JOB"
    rc=0 && wait "$STOP_JOB" || rc=$?
    n=$(sed -nE 's/.*"event":"stop","signal":"SIGTERM","step":([0-9]+),"checkpoint":"step-[0-9]{8}".*/\1/p' "$d/fast.jsonl")
    [[ -n $n ]] || { tail -n 3 "$d/fast.log" "$d/fast.jsonl"; echo "FAIL: no stop record with a checkpoint"; exit 1; }
    [[ $(cat "$d/fast/latest") == "step-$(printf %08d "$n")" ]] || { echo "FAIL: latest is not step $n"; exit 1; }
    echo "ckpt.sh: SIGTERM to mpirun with a line per step: checkpoint of step $n written (mpirun exit $rc)"
}

# owner W EXPECT: a run holds its --checkpoint-dir: a second run there is
# refused naming the first (host, pid, command); a save leaves the
# temporary directories of others (another host, a live process, one
# without an identity) alone and removes one of a gone process of this host.
owner() {
    local w=$1 expect=$2 d=$1/owner
    rm -rf "$d" && mkdir -p "$d/ck"
    local host gone
    host=$(hostname | tr '/ ' '__')
    sleep 0 &
    gone=$!
    wait "$gone"
    mkdir "$d/ck/step-00000001.otherhost-5.tmp" "$d/ck/step-00000001.tmp" "$d/ck/step-00000002.$host-$$.tmp" \
        "$d/ck/step-00000003.$host-$gone.tmp"
    touch "$d/ck/step-00000001.otherhost-5.tmp/model.safetensors"
    # One rank, started without mpirun (an MPI singleton); 40 steps of 50 ms.
    BASP_TEST_STEP_DELAY_MS=50 "$w/mha1" --data "$w/corpus.bin" --steps 40 --save-every 2 --quiet \
        --checkpoint-dir "$d/ck" >"$d/first.log" 2>&1 &
    local first=$!
    wait_for "$d/first.log" "checkpoint: step 2 saved"
    "$expect" fail "--checkpoint-dir .*/ck is in use by another run \(.*/ck/lock: host $host, pid $first, started [0-9-]+ [0-9:]+ .*, command .*mha1 --data .* --steps 40 .*\): wait for it to end" \
        "$w/mha1" --data "$w/corpus.bin" --steps 1 --checkpoint-dir "$d/ck"
    wait "$first" || { cat "$d/first.log"; exit 1; }
    cat "$d/first.log"
    grep -q "checkpoint: removed .*step-00000003\.$host-$gone\.tmp, left by $host-$gone, which is no longer running" \
        "$d/first.log" || { echo "FAIL: the gone run's directory was not removed with a note"; exit 1; }
    [[ ! -e $d/ck/step-00000003.$host-$gone.tmp ]] || { echo "FAIL: step-00000003.$host-$gone.tmp left"; exit 1; }
    local t
    for t in step-00000001.otherhost-5.tmp/model.safetensors step-00000001.tmp step-00000002.$host-$$.tmp; do
        [[ -e $d/ck/$t ]] || { echo "FAIL: a save removed another run's $t"; exit 1; }
    done
    ls "$d/ck" | grep -q "\.$host-$first\.tmp" && { echo "FAIL: the run left its own .tmp"; exit 1; }
    # The lock goes with the process: a run killed with kill -9 resumes at once.
    BASP_TEST_STEP_DELAY_MS=50 "$w/mha1" --data "$w/corpus.bin" --steps 40 --save-every 2 --quiet \
        --checkpoint-dir "$d/ck2" >"$d/killed.log" 2>&1 &
    first=$!
    wait_for "$d/killed.log" "checkpoint: step 2 saved"
    kill -9 "$first"
    wait "$first" || true
    "$expect" ok "resumed from .*/ck2/step-000000[0-9]+: step" "$w/mha1" --data "$w/corpus.bin" --steps 6 --quiet \
        --checkpoint-dir "$d/ck2" --resume
    echo "ckpt.sh: a second run on a held --checkpoint-dir is refused naming the first; other runs' .tmp survive a save"
}

# latestfail W EXPECT: a failure after the step directory is in place
# (`latest` not written, the parent not synced): the run says the
# checkpoint was not saved, `latest` names the previous one, the new
# directory is gone, and --resume takes what `latest` names.
latestfail() {
    local w=$1 expect=$2 d=$1/latestfail
    rm -rf "$d" && mkdir -p "$d"
    local run=("$w/mha1" --data "$w/corpus.bin" --quiet --steps 4 --save-every 1)
    BASP_TEST_FAIL_AT=latest:2 "$expect" fail "error: step 2: checkpoint not saved: cannot update .*/a/latest: No space left on device \(step-00000002 withdrawn: \`latest\` still names step-00000001, which --resume takes\); the previous checkpoint .*/a/step-00000001 is intact; stopping" \
        "${run[@]}" --checkpoint-dir "$d/a"
    [[ $(cat "$d/a/latest") == step-00000001 && ! -e $d/a/step-00000002 ]] ||
        { ls "$d/a"; echo "FAIL: step-00000002 published while latest names $(cat "$d/a/latest")"; exit 1; }
    "$expect" ok "resumed from .*/a/step-00000001: step 1" "${run[@]}" --checkpoint-dir "$d/a" --resume
    # A same-step checkpoint replaced by a resumed run comes back when latest fails.
    cp -r "$d/a/step-00000003" "$d/a3.copy"
    BASP_TEST_FAIL_AT=latest:3 "$expect" fail "step 3: checkpoint not saved: cannot update .*latest: .*withdrawn: \`latest\` still names step-00000004" \
        "${run[@]}" --checkpoint-dir "$d/a" --resume "$d/a/step-00000002"
    diff -r "$d/a3.copy" "$d/a/step-00000003" >/dev/null || { echo "FAIL: the replaced step 3 did not come back"; exit 1; }
    BASP_TEST_FAIL_AT=publish:1 "$expect" fail "error: step 1: checkpoint not saved: cannot sync .*/b: Input/output error \(step-00000001 withdrawn: no \`latest\` yet, --resume starts from step 0\)" \
        "${run[@]}" --checkpoint-dir "$d/b"
    [[ ! -e $d/b/step-00000001 && ! -e $d/b/latest ]] || { ls "$d/b"; echo "FAIL: step-00000001 left"; exit 1; }
    "$expect" ok "resume: no checkpoint in .*/b yet: starting from step 0" "${run[@]}" --checkpoint-dir "$d/b" --resume
    echo "ckpt.sh: a failed latest or parent sync withdraws the new checkpoint: report, latest and --resume agree"
}

# metrics W EXPECT: kill -9 once --metrics holds records past the last
# checkpoint (and a torn last line), resume onto the same file: steps 1..N
# once each, the resumed records equal to an uninterrupted run's losses.
metrics() {
    local w=$1 expect=$2 d=$1/metrics
    rm -rf "$d" && mkdir -p "$d"
    local run=("$w/mha1" --data "$w/corpus.bin" --quiet --steps 10 --save-every 4)
    "${run[@]}" --checkpoint-dir "$d/ref" --metrics "$d/ref.jsonl" >/dev/null
    BASP_TEST_STEP_DELAY_MS=100 "${run[@]}" --checkpoint-dir "$d/ck" --metrics "$d/m.jsonl" >"$d/log" 2>&1 &
    local job=$!
    wait_for "$d/m.jsonl" '"step":7,'
    kill -9 "$job"
    wait "$job" || true
    printf '{"step":8,"loss":' >>"$d/m.jsonl" # a record cut short
    "$expect" ok "metrics: .*m\.jsonl: kept 4 record\(s\) up to step 4, dropped [34] written after it" \
        "${run[@]}" --checkpoint-dir "$d/ck" --metrics "$d/m.jsonl" --resume
    python3 - "$d/m.jsonl" "$d/ref.jsonl" <<'PY'
import json, sys
got = [json.loads(l) for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in got] == list(range(1, 11)), [r["step"] for r in got]
assert [r["loss"] for r in got] == [r["loss"] for r in ref], "losses differ from the uninterrupted run"
print("ckpt.sh: metrics after kill -9 and --resume: steps 1..10 once each, losses as the uninterrupted run's")
PY
}

cmd=$1
shift
"$cmd" "$@"
