#!/usr/bin/env bash
# data_rss.sh BASPC MKCORPUS SPEC [MIB [MAX_DIFF_MIB]] — a rank's memory
# does not grow with the corpus: the same 1-rank binary (SPEC) trains 3
# steps, with a checkpoint (which hashes the whole data file), on the
# 2M-token demo corpus and on a token file of MIB MiB (default 1024: 512M
# uint16 tokens), and the peak resident sets (the JSONL's rss_peak_bytes,
# from getrusage) are printed side by side; fails when the larger file's is
# more than MAX_DIFF_MIB (default 8) above the small one's.  Needs MIB MiB
# in $TMPDIR.  CTest runs it at 128 MiB (train.data_rss); bench/README.md
# has the 1 GiB figure.
set -euo pipefail
baspc=$1 mkcorpus=$2 spec=$3 mib=${4:-1024} maxdiff=${5:-8}
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
"$baspc" "$spec" -q -o "$w/train" --set mesh.nodes=1 --set mesh.devices_per_node=1
"$mkcorpus" "$w/small.bin" "$w/small.txt" >/dev/null
python3 - "$w/big.bin" "$mib" <<'PY'
import struct, sys
n = int(sys.argv[2]) * 1024 * 1024 // 2
chunk = bytes(b for i in range(1 << 19) for b in ((i * 7) % 251, 0))  # 1 MiB of uint16 ids < 256
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *[0] * 253))
    for _ in range(n * 2 // len(chunk)):
        f.write(chunk)
PY
for d in small big; do
    OPENBLAS_NUM_THREADS=1 "$w/train" --data "$w/$d.bin" --steps 3 --quiet --metrics "$w/$d.jsonl" \
        --checkpoint-dir "$w/ck-$d" >/dev/null
done
python3 - "$w" "$maxdiff" <<'PY'
import json, os, sys
w, maxdiff = sys.argv[1], float(sys.argv[2])
rss = {d: json.loads(open(os.path.join(w, d + ".jsonl")).read().splitlines()[-1])["rss_peak_bytes"] / 2**20
       for d in ("small", "big")}
size = {d: os.path.getsize(os.path.join(w, d + ".bin")) / 2**20 for d in ("small", "big")}
for d in ("small", "big"):
    print("data_rss: %-5s %8.1f MiB token file: peak resident set %6.2f MiB" % (d, size[d], rss[d]))
diff = rss["big"] - rss["small"]
print("data_rss: difference %+.2f MiB for a %.0fx larger file (bound %g MiB)" % (diff, size["big"] / size["small"], maxdiff))
sys.exit(1 if diff > maxdiff else 0)
PY
