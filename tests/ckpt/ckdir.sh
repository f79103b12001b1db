#!/usr/bin/env bash
# ckdir.sh — whose checkpoints a --checkpoint-dir holds (runtime/ckpt/rt_ckpt_dir.c)
# and the options around it (tests/ckpt/CMakeLists.txt, ckpt.dir_*).  One-rank
# binaries of the ckpt fixture (ckpt.sh setup), run without mpirun.
#
#   ckdir.sh others W EXPECT    two runs on one directory, with and without
#                               --resume: neither loses the other's checkpoints
#   ckdir.sh prune W EXPECT     --keep-checkpoints keeps best.json's checkpoint,
#                               never follows a symlinked step-*, prunes only
#                               this run's lineage
#   ckdir.sh options W EXPECT   --init-from with --resume (both branches),
#                               --metrics beside the checkpoints, messages
set -euo pipefail

# fingerprint DIR: every file under DIR (links followed) with its checksum,
# except the lock, which each run rewrites.
fingerprint() { (cd "$1" && find -L . -type f ! -name lock -print0 | sort -z | xargs -0 md5sum); }

losses() { python3 -c 'import json,sys; [print(repr(json.loads(l)["loss"])) for l in open(sys.argv[1])]' "$1"; }

# unchanged DIR BEFORE: DIR's fingerprint is still BEFORE.
unchanged() {
    diff <(echo "$2") <(fingerprint "$1") || { echo "FAIL: $1 changed"; exit 1; }
}

others() {
    local w=$1 expect=$2 d=$1/ckdir-others
    rm -rf "$d" && mkdir -p "$d"
    local one=("$w/mha1" --data "$w/corpus.bin" --quiet)
    "${one[@]}" --steps 3 --save-every 1 --checkpoint-dir "$d/a" >/dev/null
    local before
    before=$(fingerprint "$d/a")
    # Without --resume: the same model, then another model (Qwen2 biases).
    "$expect" fail "--checkpoint-dir .*/a already holds checkpoints: step-00000001, step-00000002, step-00000003 of model tiny_mha; \`latest\` names step-00000003; a run that starts from step 0 would replace and prune them: pass --resume to continue from them, or another --checkpoint-dir \(nothing was trained\)" \
        "${one[@]}" --steps 2 --save-every 1 --keep-checkpoints 1 --checkpoint-dir "$d/a"
    "$expect" fail "--checkpoint-dir .*/a already holds checkpoints: .*pass --resume" \
        "$w/qwen2_1" --data "$w/corpus.bin" --steps 4 --checkpoint-dir "$d/a"
    unchanged "$d/a" "$before"
    # --resume from another run's checkpoint into a directory holding this one's.
    "${one[@]}" --steps 1 --seed 5 --checkpoint-dir "$d/b" >/dev/null
    local b
    b=$(fingerprint "$d/b")
    "$expect" fail "--checkpoint-dir .*/b holds checkpoints of another run: step-00000001 \(model tiny_mha, lineage [0-9a-f]{32}\); this run continues .*/a/step-00000002, lineage [0-9a-f]{32}: its saves would replace or prune them: pass another --checkpoint-dir, or --resume .*/b to continue that run" \
        "${one[@]}" --steps 3 --save-every 1 --keep-checkpoints 1 --resume "$d/a/step-00000002" --checkpoint-dir "$d/b"
    unchanged "$d/b" "$b"
    unchanged "$d/a" "$before"
    # The same run continued in place, from its latest or an earlier step,
    # and into a fresh directory: accepted, one lineage throughout.
    "$expect" ok "resumed from .*/a/step-00000003: step 3" "${one[@]}" --steps 4 --checkpoint-dir "$d/a" --resume
    "$expect" ok "resumed from .*/a/step-00000001: step 1" "${one[@]}" --steps 2 --checkpoint-dir "$d/a" \
        --resume "$d/a/step-00000001"
    "$expect" ok "resumed from .*/a/step-00000002: step 2" "${one[@]}" --steps 3 --checkpoint-dir "$d/c" \
        --resume "$d/a/step-00000002"
    [[ $(cat "$d"/a/step-*/lineage "$d"/c/step-*/lineage | sort -u | wc -l) == 1 ]] ||
        { echo "FAIL: a resumed run did not continue the lineage"; exit 1; }
    [[ $(cat "$d/a/step-00000001/lineage") != $(cat "$d/b/step-00000001/lineage") ]] ||
        { echo "FAIL: two runs from step 0 share a lineage"; exit 1; }
    echo "ckdir.sh: a run from step 0 on another run's directory, and a resume of another run into one, are refused; nothing there changed"
}

prune() {
    local w=$1 expect=$2 d=$1/ckdir-prune
    rm -rf "$d" && mkdir -p "$d/elsewhere"
    local one=("$w/mha1" --data "$w/corpus.bin" --quiet)
    "${one[@]}" --steps 4 --save-every 1 --checkpoint-dir "$d/s" >/dev/null
    # step 1 moved to other storage behind a link (still this run's lineage),
    # step 2 without a lineage (written before lineages existed), best.json
    # naming step 3.
    mv "$d/s/step-00000001" "$d/elsewhere/" && ln -s "$d/elsewhere/step-00000001" "$d/s/step-00000001"
    rm "$d/s/step-00000002/lineage"
    printf '{\n\t"val_loss":\t1.5,\n\t"step":\t3\n}\n' >"$d/s/best.json"
    local far
    far=$(fingerprint "$d/elsewhere")
    "$expect" ok "checkpoint: kept step-00000003 beyond --keep-checkpoints 2: best.json names it" \
        "${one[@]}" --steps 7 --save-every 1 --keep-checkpoints 2 --checkpoint-dir "$d/s" --resume
    [[ $(cd "$d/s" && echo step-*) == "step-00000001 step-00000002 step-00000003 step-00000006 step-00000007" ]] ||
        { ls -l "$d/s"; echo "FAIL: --keep-checkpoints 2 left the above"; exit 1; }
    [[ -L $d/s/step-00000001 ]] || { echo "FAIL: the symlinked step-00000001 is gone"; exit 1; }
    unchanged "$d/elsewhere" "$far"
    echo "ckdir.sh: --keep-checkpoints 2 kept 6, 7, best.json's 3, and left the link and the unmarked step 2 alone"
    # A same-step save over a link replaces the link, never the linked files.
    "${one[@]}" --steps 7 --save-every 1 --checkpoint-dir "$d/t" >/dev/null
    mv "$d/t/step-00000005" "$d/elsewhere/t5" && ln -s "$d/elsewhere/t5" "$d/t/step-00000005"
    far=$(fingerprint "$d/elsewhere")
    "$expect" ok "resumed from .*/t/step-00000004: step 4" \
        "${one[@]}" --steps 5 --checkpoint-dir "$d/t" --resume "$d/t/step-00000004"
    [[ -d $d/t/step-00000005 && ! -L $d/t/step-00000005 && -f $d/t/step-00000005/state.json ]] ||
        { ls -l "$d/t"; echo "FAIL: step-00000005 was not saved in place of the link"; exit 1; }
    unchanged "$d/elsewhere" "$far"
    # A link to another run's checkpoint: refused at start-up, its files intact.
    "${one[@]}" --steps 1 --seed 9 --checkpoint-dir "$d/other" >/dev/null
    ln -s "$d/other/step-00000001" "$d/t/step-00000009"
    far=$(fingerprint "$d/other")
    "$expect" fail "--checkpoint-dir .*/t holds checkpoints of another run: step-00000009" \
        "${one[@]}" --steps 6 --save-every 1 --keep-checkpoints 1 --checkpoint-dir "$d/t" --resume
    unchanged "$d/other" "$far"
    echo "ckdir.sh: a same-step save replaced a link, not its files; a link to another run's checkpoint is refused"
}

options() {
    local w=$1 expect=$2 d=$1/ckdir-options
    rm -rf "$d" && mkdir -p "$d"
    local one=("$w/mha1" --data "$w/corpus.bin" --quiet)
    "${one[@]}" --steps 2 --checkpoint-dir "$d/base" >/dev/null
    # --init-from with --resume: the weights while nothing is saved, the
    # checkpoint once one is.
    "${one[@]}" --steps 2 --init-from "$d/base/step-00000002" --metrics "$d/plain.jsonl" >/dev/null
    "$expect" ok "resume: no checkpoint in .*/ft yet: starting from the weights of --init-from .*/base/step-00000002 \(step 0\)" \
        "${one[@]}" --steps 2 --init-from "$d/base/step-00000002" --checkpoint-dir "$d/ft" --resume \
        --metrics "$d/ft/m.jsonl"
    diff <(losses "$d/plain.jsonl") <(losses "$d/ft/m.jsonl") ||
        { echo "FAIL: the fine-tune did not start from --init-from's weights"; exit 1; }
    "$expect" ok "resume: .*/ft holds a checkpoint: continuing from it; --init-from .*/base/step-00000002 is not used" \
        "${one[@]}" --steps 4 --init-from "$d/base/step-00000002" --checkpoint-dir "$d/ft" --resume \
        --metrics "$d/ft/m.jsonl"
    [[ $(python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1])))' "$d/ft/m.jsonl") == "1 2 3 4" ]] ||
        { cat "$d/ft/m.jsonl"; echo "FAIL: --metrics in the checkpoint directory did not continue 1..4"; exit 1; }
    echo "ckdir.sh: --init-from + --resume: the weights first, the checkpoint after; --metrics in --checkpoint-dir continued"
    "$expect" fail "--resume .*/base and --init-from are exclusive: --resume DIR restores the weights too; --resume without DIR and --init-from" \
        "${one[@]}" --steps 4 --init-from "$d/base/step-00000002" --resume "$d/base"
    # Checkpoint files stay inputs: an output there is still refused.
    "$expect" fail "--metrics .*/base/latest is the file of --resume .*/base/latest: writing it destroys the checkpoint" \
        "${one[@]}" --steps 4 --resume "$d/base" --metrics "$d/base/latest"
    "$expect" fail "--keep-checkpoints needs --checkpoint-dir DIR" "${one[@]}" --steps 4 --keep-checkpoints 2
    "$expect" fail "--init-from .*/base is a checkpoint directory \(latest, step-\*\), not one model: pass one of its checkpoints, --init-from .*/base/step-00000002 \(the newest; weights only, the optimizer starts fresh\), or --resume .*/base to continue that run exactly" \
        "${one[@]}" --steps 4 --init-from "$d/base"
    echo "ckdir.sh: --resume DIR with --init-from, --keep-checkpoints alone and --init-from on a checkpoint root are named"
}

cmd=$1
shift
"$cmd" "$@"
