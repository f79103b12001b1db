#!/usr/bin/env bash
# The GPU kit, checked on a machine without a GPU (kit/README.md):
#  1. scripts/gpu-kit packs it from the build and checks its contents, the
#     shared libraries its programs need (no MPI, no OpenBLAS) and its size;
#  2. with only the kit's environment (env.sh: its baspc, runtime, one-process
#     MPI and run-time BLAS), a CPU program compiled and trained on one rank
#     gives bitwise the losses of the same program from the normal build
#     under OpenMPI (same code, same OpenBLAS underneath, so any difference
#     is the kit's doing), and needs neither libmpi nor libopenblas;
#  3. a CUDA program links against the kit's runtime with the libraries
#     env.sh found (it cannot run here);
#  4. the kit's mpirun refuses two ranks with a message, and a BLAS that
#     cannot be opened stops the program with its name;
#  5. where python3 has NumPy, the same run on NumPy's bundled OpenBLAS
#     (64-bit integers, prefixed symbols) agrees within 1e-5;
#  6. scripts/gpu-check on the kit: without a GPU it finds the kit's
#     libraries and exits 0 ("no GPU: skipped"); when nvidia-smi lists a GPU
#     that CUDA cannot use, it exits 1 (skipped on a machine with a GPU,
#     where the check would run in full).
#
#   kit_test.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }

"$root/scripts/gpu-kit" --build "$build" --no-build --out "$work/kit"
# --out is removed and rewritten: never a directory that holds anything but
# a kit (the user's files, the build tree); nothing in it is touched.
mkdir -p "$work/mine" && echo precious >"$work/mine/notes.txt"
for o in "$work/mine" "$build" "$root"; do
  if "$root/scripts/gpu-kit" --build "$build" --no-build --out "$o" >"$work/refused.log" 2>&1; then
    fail "gpu-kit --out $o was accepted"
  fi
  grep -q "gpu-kit: error: --out $o holds" "$work/refused.log" || { cat "$work/refused.log"; fail "no message for --out $o"; }
done
[[ $(cat "$work/mine/notes.txt") == precious && -f $build/CMakeCache.txt ]] || fail "gpu-kit removed files of a refused --out"
[[ -f $work/kit/.basp-gpu-kit ]] || fail "the kit carries no .basp-gpu-kit marker"

spec=$root/tests/train/tiny_gqa.basp
one=(--set mesh.nodes=1 --set mesh.devices_per_node=1)
"$build/data/mkcorpus" "$work/corpus.bin" >/dev/null
# Reference: the normal build, OpenMPI's mpirun.
"$build/baspc" "$spec" -q -o "$work/ref" "${one[@]}"
mpirun -np 1 "$work/ref" --data "$work/corpus.bin" --steps 6 --quiet --metrics "$work/ref.jsonl"

# The kit alone: a fresh environment with nothing of the build on its paths.
# awk reads to the end: exiting at the first match could end ldconfig with
# SIGPIPE, which pipefail and set -e turn into a silent stop of this test.
openblas=$(ldconfig -p | awk '$1 == "libopenblas.so.0" && !found { print $NF; found = 1 }')
[[ -n $openblas ]] || fail "no libopenblas.so.0 to give the kit's BLAS"
# (The sanitizer build's options pass through: its programs are instrumented.)
env -i HOME="$HOME" PATH=/usr/bin:/bin TMPDIR="${TMPDIR:-/tmp}" BASP_BLAS_LIB="$openblas" OPENBLAS_NUM_THREADS=1 \
  ${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"} ${UBSAN_OPTIONS:+UBSAN_OPTIONS="$UBSAN_OPTIONS"} \
  bash -c '
  set -euo pipefail
  work=$1 spec=$2
  . "$work/kit/env.sh"
  [[ $(command -v baspc) == "$work/kit/bin/baspc" ]] || { echo "baspc is not the kit'"'"'s" >&2; exit 1; }
  baspc "$spec" -q -o "$work/kit_cpu" --set mesh.nodes=1 --set mesh.devices_per_node=1
  mpirun -np 1 "$work/kit_cpu" --data "$work/corpus.bin" --steps 6 --quiet --metrics "$work/kit.jsonl"
  baspc "$spec" -q --target=cuda -o "$work/kit_cuda" --set mesh.nodes=1 --set mesh.devices_per_node=1
  if mpirun -np 2 "$work/kit_cpu" --data "$work/corpus.bin" --steps 1 2>"$work/np2.err"; then
    echo "the kit mpirun ran two ranks" >&2; exit 1
  fi
  grep -q "exactly one process" "$work/np2.err"
  # A BLAS that cannot be opened stops the first BLAS call with its name.
  if BASP_BLAS_LIB=/nonexistent/libblas.so "$work/kit_cpu" --data "$work/corpus.bin" --steps 1 2>"$work/blas.err"; then
    echo "the kit ran without a BLAS" >&2; exit 1
  fi
  grep -q "cannot open BASP_BLAS_LIB=/nonexistent/libblas.so" "$work/blas.err"
' kit-env "$work" "$spec" || fail "the kit's own environment (above)"

for exe in kit_cpu kit_cuda; do
  if readelf -d "$work/$exe" | grep -E 'NEEDED.*(libmpi|libopen-|libopenblas)'; then
    fail "$exe needs MPI or OpenBLAS"
  fi
done
readelf -d "$work/kit_cuda" | grep -q 'NEEDED.*libcudart' || fail "kit_cuda does not link cudart"
python3 - "$work/ref.jsonl" "$work/kit.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if l.strip()] for p in sys.argv[1:])
print("losses, normal build:", a)
print("losses, kit:         ", b)
if len(a) != 6 or a != b:
    sys.exit("FAILED: the kit's CPU run differs from the normal build's")
print("kit: the CPU run equals the normal build's bitwise over %d steps" % len(a))
PY

# NumPy's bundled OpenBLAS (64-bit integers, prefixed symbols: what a GPU
# machine with PyTorch but no system BLAS has), where this python has NumPy.
numpy_blas=$(python3 -c 'import glob, os, numpy
d = os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)), "numpy.libs")
print((sorted(glob.glob(d + "/libscipy_openblas*.so")) or [""])[0])' 2>/dev/null || true)
if [[ -n $numpy_blas ]]; then
  env -i HOME="$HOME" PATH=/usr/bin:/bin BASP_BLAS_LIB="$numpy_blas" OPENBLAS_NUM_THREADS=1 \
    ${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"} bash -c '. "$1/kit/env.sh" 2>/dev/null &&
    mpirun -np 1 "$1/kit_cpu" --data "$1/corpus.bin" --steps 6 --quiet --metrics "$1/numpy.jsonl" >/dev/null' \
    kit-env "$work" || fail "the kit's CPU run on NumPy's OpenBLAS ($numpy_blas)"
  # Another OpenBLAS build may sum in another order: fp32 rounding, 1e-5.
  python3 - "$work/ref.jsonl" "$work/numpy.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if l.strip()] for p in sys.argv[1:])
err = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) == 6 else float("inf")
print("kit: on NumPy's OpenBLAS the losses are within %.2g of the normal build's" % err)
sys.exit("FAILED: over 1e-5" if not err <= 1e-5 else 0)
PY
else
  echo "kit: no NumPy here: the kit's run on NumPy's OpenBLAS not checked"
fi

if { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; } || [[ -e /dev/nvidia0 ]]; then
  echo "kit: a GPU is visible here: scripts/gpu-check not exercised"
  exit 0
fi
GPU_KIT=$work/kit "$root/scripts/gpu-check" "$work/gc" >"$work/gc.log" 2>&1 || fail "gpu-check without a GPU: $(cat "$work/gc.log")"
grep -q "programs: the GPU kit" "$work/gc/summary.txt" || fail "gpu-check did not take the kit"
grep -q "libcudart.so" "$work/gc/summary.txt" || fail "gpu-check did not list the libraries found"
grep -q "no GPU: skipped" "$work/gc/summary.txt" || fail "gpu-check did not skip"
mkdir -p "$work/fakebin"
printf '#!/bin/sh\necho "GPU 0: NVIDIA H200 (UUID: GPU-0)"\n' >"$work/fakebin/nvidia-smi"
chmod +x "$work/fakebin/nvidia-smi"
if PATH=$work/fakebin:$PATH GPU_KIT=$work/kit "$root/scripts/gpu-check" "$work/gc2" >"$work/gc2.log" 2>&1; then
  fail "gpu-check exited 0 with a GPU listed that CUDA cannot use"
fi
grep -q "FAIL: a GPU is visible but CUDA cannot use it" "$work/gc2/summary.txt" || fail "gpu-check: $(cat "$work/gc2.log")"
echo "kit: gpu-check skips without a GPU (exit 0) and fails on an unusable one (exit 1)"
