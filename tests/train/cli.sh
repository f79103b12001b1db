#!/usr/bin/env bash
# cli.sh — helpers for the command-line tests of generated training binaries
# (tests/train/CMakeLists.txt, train.cli.*).
#
#   cli.sh setup BASPC MPIRUN CORPUS SPECDIR WORKDIR
#     builds, in WORKDIR: mha1 (tiny_mha, 1 rank), mha4 (tiny_mha, 4 ranks,
#     batch-aware 2 groups of 2, ZeRO-3: every parameter sharded), gqa1
#     (tiny_gqa, 1 rank), docs4 (tiny_mha, 4 ranks, packed documents with
#     end-of-text token 0) and one_long_doc.bin; trains mha1 for 3 steps into weights.bin; writes
#     damaged copies of the weights and of the corpus.
#   cli.sh roundtrip EXPECT MPIRUN WORKDIR CORPUS
#     loads weights.bin into the 4-rank ZeRO-3 binary with --steps 0 (under
#     another seed, so the seed's own initial weights would differ), saves
#     again, and requires the two files to be identical byte for byte.
set -euo pipefail

setup() {
    local baspc=$1 mpirun=$2 corpus=$3 specdir=$4 w=$5
    rm -rf "$w" && mkdir -p "$w"
    local one=(--set mesh.nodes=1 --set mesh.devices_per_node=1)
    "$baspc" "$specdir/tiny_mha.basp" -q -o "$w/mha1" "${one[@]}"
    "$baspc" "$specdir/tiny_mha.basp" -q -o "$w/mha4" --set mesh.nodes=2 --set mesh.devices_per_node=2 \
        --set "layout.batch_aware=groups 2" --set train.zero=3
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/gqa1" "${one[@]}"
    # Packed documents (end-of-text token 0) on 4 ranks, and their data: one
    # document of 1000 tokens (longer than a row and than a whole step).
    "$baspc" "$specdir/tiny_mha.basp" -q -o "$w/docs4" --set mesh.nodes=2 --set mesh.devices_per_node=2 \
        --set train.documents=on --set train.eot_token=0
    # batch_aware dynamic without a group of all 4 ranks, which validates
    # (train.cli.dynamic_val_data)
    "$baspc" "$specdir/tiny_gqa.basp" -q -o "$w/dyn4" --set mesh.nodes=2 --set mesh.devices_per_node=2 \
        --set train.documents=on --set train.eot_token=0 --set layout.batch_aware=dynamic \
        --set 'layout.group_sizes="1,2"'
    python3 -c 'import struct,sys; t=[1+i%200 for i in range(999)]+[0]; open(sys.argv[1],"wb").write(struct.pack("<256i",20240520,1,len(t),*[0]*253)+struct.pack("<%dH"%len(t),*t))' "$w/one_long_doc.bin"
    # Documents for validation: about 2100 tokens, which fill fewer whole
    # batches of 128 in file order than 2100 / 128 (each batch's last
    # document is cut); and 61 tokens of document plus lone end-of-text
    # tokens, which fill none.
    python3 "$specdir/mkdocs.py" "${corpus%.bin}.txt" "$w/val_docs.bin" --tokens 2100 >/dev/null
    python3 "$specdir/mkdocs.py" "${corpus%.bin}.txt" "$w/train_docs.bin" --tokens 20000 >/dev/null
    python3 -c 'import struct,sys; t=[1+i%200 for i in range(60)]+[0]*70; open(sys.argv[1],"wb").write(struct.pack("<256i",20240520,1,len(t),*[0]*253)+struct.pack("<%dH"%len(t),*t))' "$w/val_lone_eot.bin"
    # Trained, so that the weights differ from any seed's initial ones.
    "$mpirun" --allow-run-as-root --oversubscribe -np 1 "$w/mha1" --data "$corpus" --steps 3 --quiet \
        --save-weights "$w/weights.bin" --save-grads "$w/grads.bin"
    local size
    size=$(stat -c %s "$w/weights.bin")
    head -c $((size - 100)) "$w/weights.bin" >"$w/weights.truncated"
    { cat "$w/weights.bin"; printf 'garbage'; } >"$w/weights.trailing"
    # 512 tokens after the header; the header still says the whole corpus.
    head -c $((1024 + 1024)) "$corpus" >"$w/tokens.truncated"
    { printf '\x00\x00\x00\x00'; tail -c +5 "$corpus"; } >"$w/tokens.badmagic"
}

roundtrip() {
    local expect=$1 mpirun=$2 w=$3 corpus=$4
    rm -f "$w/reloaded.bin"
    "$expect" ok "loaded 21 parameters from .*weights\.bin \(the optimizer state starts fresh\)" \
        "$mpirun" --allow-run-as-root --oversubscribe -np 4 "$w/mha4" --data "$corpus" --steps 0 --seed 99 \
        --init-from "$w/weights.bin" --save-weights "$w/reloaded.bin"
    cmp "$w/weights.bin" "$w/reloaded.bin"
    echo "cli.sh: weights.bin and reloaded.bin are identical"
}

# cli.sh init_threads BASPC MPIRUN SPECDIR WORKDIR CORPUS
#   the initial weights of a model whose larger parameters (1M elements and
#   more) are drawn by several threads: byte-identical with 1 thread, 3
#   threads, and on 4 ranks with every parameter sharded (ZeRO-3); a bad
#   BASP_HOST_THREADS is refused.
init_threads() {
    local baspc=$1 mpirun=$2 specdir=$3 w=$4 corpus=$5
    rm -rf "$w" && mkdir -p "$w"
    local wide=(--set model.hidden=1024 --set model.ffn=1024 --set model.head_dim=256)
    "$baspc" "$specdir/tiny_mha.basp" -q -o "$w/one" "${wide[@]}" --set mesh.nodes=1 --set mesh.devices_per_node=1
    "$baspc" "$specdir/tiny_mha.basp" -q -o "$w/four" "${wide[@]}" --set train.zero=3
    local run=("$mpirun" --allow-run-as-root --oversubscribe)
    BASP_HOST_THREADS=1 "${run[@]}" -x BASP_HOST_THREADS -np 1 "$w/one" --data "$corpus" --steps 0 --quiet \
        --save-weights "$w/t1.bin"
    BASP_HOST_THREADS=3 "${run[@]}" -x BASP_HOST_THREADS -np 1 "$w/one" --data "$corpus" --steps 0 --quiet \
        --save-weights "$w/t3.bin"
    "${run[@]}" -np 4 "$w/four" --data "$corpus" --steps 0 --quiet --save-weights "$w/z3.bin"
    cmp "$w/t1.bin" "$w/t3.bin"
    cmp "$w/t1.bin" "$w/z3.bin"
    if BASP_HOST_THREADS=0 "${run[@]}" -x BASP_HOST_THREADS -np 1 "$w/one" --data "$corpus" --steps 0 \
        >"$w/bad.log" 2>&1; then
        echo "FAIL: BASP_HOST_THREADS=0 was accepted"; exit 1
    fi
    grep -q "error: BASP_HOST_THREADS=0: want a whole number from 1 to 64" "$w/bad.log" || { cat "$w/bad.log"; exit 1; }
    ! grep -q "rt_main\.c" "$w/bad.log" || { cat "$w/bad.log"; echo "FAIL: a source path"; exit 1; }
    echo "cli.sh: initial weights identical with 1 and 3 threads and on 4 ZeRO-3 ranks; BASP_HOST_THREADS=0 refused"
}

# cli.sh badinput WORKDIR
#   token files whose size disagrees with the header: a count of 100 with
#   1000 tokens after it, uint32 tokens labelled version 1 (uint16), and an
#   exact 1000-token file; a directory for --data.
badinput() {
    local w=$1
    python3 - "$w" <<'PY'
import struct, sys
w = sys.argv[1]
def tok(path, version, count, fmt, ids):
    head = struct.pack("<3i", 20240520, version, count) + bytes(4 * 253)
    open(path, "wb").write(head + b"".join(struct.pack(fmt, i) for i in ids))
ids = [(7 * i + 3) % 250 for i in range(1000)]
tok(w + "/tokens.count100", 1, 100, "<H", ids)
tok(w + "/tokens.u32_as_u16", 1, 1000, "<I", ids)
tok(w + "/tokens.exact", 1, 1000, "<H", ids)
# Shards, each good alone unless named for its fault.
import os
os.makedirs(w + "/shards", exist_ok=True)
tok(w + "/shards/good_a.bin", 1, 1000, "<H", ids)
tok(w + "/shards/good_b.bin", 1, 1000, "<H", ids)
tok(w + "/shards/u32.bin", 2, 1000, "<I", ids)
tok(w + "/shards/zero_count.bin", 1, 0, "<H", [])
tok(w + "/shards/truncated.bin", 1, 1000, "<H", ids[:600])
tok(w + "/shards/vocab.bin", 1, 1000, "<H", ids[:417] + [300] + ids[418:])
open(w + "/shards/empty.bin", "wb").close()
tok(w + "/shards/bracket[1].bin", 1, 1000, "<H", ids)  # a name with glob characters that exists
PY
    mkdir -p "$w/a-directory"
}

# cli.sh shards EXPECT MPIRUN WORKDIR CORPUS
#   the corpus cut into three shards (a directory, a glob, three --data) and
#   the one file give the same run bit for bit, with packed documents too:
#   the shards are one token stream.
shards() {
    local expect=$1 mpirun=$2 w=$3 corpus=$4 d=$3/split
    rm -rf "$d" && mkdir -p "$d/mha1" "$d/docs4"
    # mha1 reads the corpus; docs4 a document corpus made from it (every
    # token at a pseudo-random 1 in 97 becomes end-of-text 0).
    python3 - "$corpus" "$d" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<3i", b[:12])[2]
def write(path, t):
    open(path, "wb").write(struct.pack("<3i", 20240520, 1, len(t) // 2) + bytes(4 * 253) + t)
def split(t, d):
    m = len(t) // 2
    cuts = [0, m // 3 + 17, 2 * m // 3 - 5, m]  # uneven, not at window borders
    for k in range(3):
        write("%s/part_%d.bin" % (d, k), t[2 * cuts[k]:2 * cuts[k + 1]])
plain = b[1024:1024 + 2 * n]
write(sys.argv[2] + "/mha1.bin", plain)
split(plain, sys.argv[2] + "/mha1")
ids = list(struct.unpack("<%dH" % 200000, plain[:400000]))
for i in range(len(ids)):
    if (i * 2654435761) % 97 == 0:
        ids[i] = 0
docs = struct.pack("<%dH" % len(ids), *ids)
write(sys.argv[2] + "/docs4.bin", docs)
split(docs, sys.argv[2] + "/docs4")
PY
    local run=("$mpirun" --allow-run-as-root --oversubscribe)
    local exe args
    for exe in mha1 docs4; do
        local np=1 p=$d/$exe
        [[ $exe == docs4 ]] && np=4
        "${run[@]}" -np $np "$w/$exe" --data "$p.bin" --steps 3 --quiet --save-weights "$p.one"
        for args in "--data $p" "--data $p/part_*.bin" "--data $p/part_0.bin --data $p/part_1.bin --data $p/part_2.bin"; do
            set -f # split $args, but the glob is the binary's to expand
            # shellcheck disable=SC2086
            "$expect" ok "data 3 shards, .*part_0\.bin \.\. .*part_2\.bin \([0-9]+ tokens, uint16\)" \
                "${run[@]}" -np $np "$w/$exe" $args --steps 3 --save-weights "$p.shards"
            set +f
            cmp "$p.one" "$p.shards"
        done
        echo "cli.sh: $exe: three shards (directory, glob, three --data) train as the one file, bit for bit"
    done
}

# cli.sh val EXPECT MPIRUN WORKDIR CORPUS
#   validation changes nothing in training (the weights and gradients after
#   4 steps with a validation after every step equal those without, bit for
#   bit); with --checkpoint-dir, best.json holds the lowest val_loss of the
#   metrics and its step, also across a --resume.
val() {
    local expect=$1 mpirun=$2 w=$3 corpus=$4 d=$3/val
    rm -rf "$d" && mkdir -p "$d"
    local run=("$mpirun" --allow-run-as-root --oversubscribe -np 4 "$w/mha4" --data "$corpus")
    "${run[@]}" --steps 4 --quiet --save-weights "$d/plain.w" --save-grads "$d/plain.g"
    "$expect" ok "validation after step 3: val_loss [0-9.]+ \(2 batch\(es\), 256 tokens, " \
        "${run[@]}" --steps 4 --val-data "$corpus" --val-every 1 --val-tokens 300 --save-weights "$d/val.w" \
        --save-grads "$d/val.g"
    cmp "$d/plain.w" "$d/val.w"
    cmp "$d/plain.g" "$d/val.g"
    echo "cli.sh: a validation after every step leaves the weights and gradients as they were, bit for bit"
    "${run[@]}" --steps 2 --quiet --val-data "$corpus" --val-every 1 --checkpoint-dir "$d/ck" --metrics "$d/m.jsonl"
    "$expect" ok "validation: best val_loss [0-9.]+ after step 4 \(recorded in --checkpoint-dir's best\.json\)" \
        "${run[@]}" --steps 4 --val-data "$corpus" --val-every 1 --checkpoint-dir "$d/ck" --metrics "$d/m.jsonl" --resume
    python3 - "$d/m.jsonl" "$d/ck/best.json" <<'PY'
import json, sys
vals = [(r["val_loss"], r["step"]) for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r]
best = json.load(open(sys.argv[2]))
assert [s for _, s in vals] == [1, 2, 3, 4], vals
saved = [v for v in vals if v[1] in (2, 4)]  # the checkpoints: the end of each run
assert (best["val_loss"], best["step"]) == min(saved), (best, vals)
print("cli.sh: best.json %s is the lowest of the saved validations across the resume" % best)
PY
}

# cli.sh aliases EXPECT MPIRUN WORKDIR CORPUS
#   an output that names an input or another output is refused before step
#   1, naming both options and the path, and every input is left as it was
#   (checksums): output pairs, the --data file, a shard of a --data
#   directory and of a glob, --val-data, --text, --init-from (file), the
#   files of --resume DIR, PATH.tmp written first, a hard link, a symbolic
#   link, and --checkpoint-dir's own names (an output there, an input there).
aliases() {
    local expect=$1 w=$3 corpus=$4 d=$3/alias
    rm -rf "$d" && mkdir -p "$d/shards" "$d/ck1"
    cp "$corpus" "$d/data.bin" && cp "$corpus" "$d/shards/a.bin" && cp "$w/weights.bin" "$d/init.bin"
    head -c 70000 "$corpus" | tail -c 60000 >"$d/text.txt"
    ln "$d/data.bin" "$d/hard.bin" && ln -s data.bin "$d/sym.bin" && ln -s data.bin "$d/out.tmp"
    # One rank, started without mpirun (an MPI singleton): 0.4 s a run, not 2.
    local run=("$w/mha1" --steps 2)
    "${run[@]}" --data "$d/data.bin" --steps 1 --quiet --checkpoint-dir "$d/ck1" >/dev/null
    mkdir -p "$d/ck2/step-00000009" && cp "$corpus" "$d/ck2/step-00000009/d.bin"
    (cd "$d" && find . -type f | sort | xargs md5sum) >"$d.before"
    local n=0 regex args
    check() {
        regex=$1
        shift
        "$expect" fail "$regex" "${run[@]}" "$@" >"$d.out" || { cat "$d.out"; exit 1; }
        ! grep -q "^step " "$d.out" || { cat "$d.out"; echo "FAIL: a step ran"; exit 1; }
        n=$((n + 1))
    }
    local D=$d/data.bin
    check "--save-weights .*/x\.bin is the file of --save-grads .*/x\.bin: one output would overwrite the other" \
        --data "$D" --save-weights "$d/x.bin" --save-grads "$d/x.bin"
    check "--save-weights .*/m\.jsonl is the file of --metrics .*/m\.jsonl: one output" \
        --data "$D" --metrics "$d/m.jsonl" --save-weights "$d/m.jsonl"
    check "--save-grads .*/p\.json is the file of --profile .*/p\.json" --data "$D" --profile "$d/p.json" \
        --save-grads "$d/p.json"
    check "--save-weights .*/data\.bin is the file of --data .*/data\.bin: writing it destroys the input" \
        --data "$D" --save-weights "$D"
    check "--save-grads .*/init\.bin is the file of --init-from .*/init\.bin: writing it destroys the input" \
        --data "$D" --init-from "$d/init.bin" --save-grads "$d/init.bin"
    check "--metrics .*/hard\.bin is the file of --data .*/data\.bin" --data "$D" --metrics "$d/hard.bin"
    check "--profile .*/sym\.bin is the file of --data .*/data\.bin" --data "$D" --profile "$d/sym.bin"
    check "--save-weights .*/out \(written first as .*/out\.tmp\) is the file of --data .*/data\.bin" \
        --data "$D" --save-weights "$d/out"
    check "--metrics .*/shards/a\.bin is the file of --data .*/shards/a\.bin" --data "$d/shards" \
        --metrics "$d/shards/a.bin"
    check "--save-weights .*/shards/a\.bin is the file of --data .*/shards/a\.bin" --data "$d/shards/*.bin" \
        --save-weights "$d/shards/a.bin"
    check "--metrics .*/hard\.bin is the file of --val-data .*/data\.bin" --data "$d/shards" --val-data "$D" \
        --metrics "$d/hard.bin"
    check "--save-grads .*/text\.txt is the file of --text .*/text\.txt" --text "$d/text.txt" \
        --save-grads "$d/text.txt"
    check "--save-weights .*ck1/step-00000001/model\.safetensors is the file of --resume .*ck1/step-00000001/model\.safetensors: writing it destroys the checkpoint" \
        --data "$D" --resume "$d/ck1" --checkpoint-dir "$d/ck3" --save-weights "$d/ck1/step-00000001/model.safetensors"
    check "--metrics .*ck2/latest lies where --checkpoint-dir .*ck2 writes its checkpoints" --data "$D" \
        --checkpoint-dir "$d/ck2" --metrics "$d/ck2/latest"
    check "--data .*ck2/step-00000009/d\.bin lies where --checkpoint-dir .*ck2 writes its checkpoints .*, so a save could replace it" \
        --data "$d/ck2/step-00000009/d.bin" --checkpoint-dir "$d/ck2"
    rm -rf "$d/ck3" && (cd "$d" && find . -type f | sort | grep -v '^./ck[23]/lock$' | xargs md5sum) >"$d.after"
    diff "$d.before" "$d.after" || { echo "FAIL: an input changed"; exit 1; }
    echo "cli.sh: $n outputs naming an input or another output refused before step 1; every input unchanged"
}

# cli.sh best EXPECT MPIRUN WORKDIR CORPUS
#   --val-every 1 with --save-every 3 at a rate high enough that the first
#   validation is the best: best.json names the best validated step that has
#   a checkpoint, never an unsaved one; the banner says which steps count.
best() {
    local expect=$1 mpirun=$2 w=$3 corpus=$4 d=$3/best
    rm -rf "$d" && mkdir -p "$d"
    "$expect" ok "note: best\.json names the best validation among the steps saved as checkpoints: with --val-every 1 and --save-every 3 those are every 3 steps and the last" \
        "$mpirun" --allow-run-as-root --oversubscribe -np 4 "$w/mha4" --data "$corpus" --steps 5 --lr 0.3 --quiet \
        --val-data "$corpus" --val-tokens 256 --val-every 1 --save-every 3 --checkpoint-dir "$d/ck" \
        --metrics "$d/m.jsonl" >"$d/log"
    python3 - "$d/m.jsonl" "$d/ck" <<'PY'
import json, os, sys
vals = [(r["val_loss"], r["step"]) for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r]
best = json.load(open(os.path.join(sys.argv[2], "best.json")))
saved = [v for v in vals if v[1] in (3, 5)]
assert min(vals)[1] not in (3, 5), ("the best validation is saved: the case tests nothing", vals)
assert os.path.isdir(os.path.join(sys.argv[2], "step-%08d" % best["step"])), best
assert (best["val_loss"], best["step"]) == min(saved), (best, vals)
print("cli.sh: best.json %s names a checkpoint; the best validation %s has none" % (best, min(vals)))
PY
}

# cli.sh watchdog EXPECT MPIRUN WORKDIR CORPUS
#   --timeout 1 with saves that take longer: the first tensor of each
#   --save-* file written over 1.5 s in pieces on rank 0 (the other ranks
#   wait for it that long), every checkpoint file 400 ms late; the run
#   completes and writes its files.  A write that stalls (PATH.tmp a FIFO
#   nobody reads) ends the job with a message naming the file.
watchdog() {
    local expect=$1 mpirun=$2 w=$3 corpus=$4 d=$3/watchdog
    rm -rf "$d" && mkdir -p "$d"
    local run=("$mpirun" --allow-run-as-root --oversubscribe -x BASP_TEST_WRITE_DELAY_MS -x BASP_TEST_SAVE_DELAY
        -np 4 "$w/mha4" --data "$corpus" --steps 2 --quiet --timeout 1)
    BASP_TEST_WRITE_DELAY_MS=1500 BASP_TEST_SAVE_DELAY=400 "$expect" ok "saved 21 parameters to .*/w\.bin" \
        "${run[@]}" --save-weights "$d/w.bin" --save-grads "$d/g.bin" --checkpoint-dir "$d/ck" --save-every 2
    test -s "$d/w.bin" && test -s "$d/g.bin" && test -d "$d/ck/step-00000002"
    mkfifo "$d/stall.bin.tmp"
    BASP_TEST_WRITE_DELAY_MS=0 BASP_TEST_SAVE_DELAY=0 "$expect" fail \
        "rank 0: error: watchdog: no progress for [0-9]+ s while writing --save-weights .*/stall\.bin \(step 2\)" \
        "${run[@]}" --save-weights "$d/stall.bin"
    test ! -e "$d/stall.bin"
    echo "cli.sh: saves longer than --timeout complete; a stalled one is named"
}

cmd=$1
shift
case $cmd in
setup) setup "$@" ;;
roundtrip) roundtrip "$@" ;;
init_threads) init_threads "$@" ;;
badinput) badinput "$@" ;;
shards) shards "$@" ;;
val) val "$@" ;;
best) best "$@" ;;
watchdog) watchdog "$@" ;;
aliases) aliases "$@" ;;
*)
    echo "cli.sh: unknown command $cmd" >&2
    exit 2
    ;;
esac
