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
    python3 -c 'import struct,sys; t=[1+i%200 for i in range(999)]+[0]; open(sys.argv[1],"wb").write(struct.pack("<256i",20240520,1,len(t),*[0]*253)+struct.pack("<%dH"%len(t),*t))' "$w/one_long_doc.bin"
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
PY
    mkdir -p "$w/a-directory"
}

cmd=$1
shift
case $cmd in
setup) setup "$@" ;;
roundtrip) roundtrip "$@" ;;
badinput) badinput "$@" ;;
*)
    echo "cli.sh: unknown command $cmd" >&2
    exit 2
    ;;
esac
