#!/usr/bin/env bash
# The GPU kit's fallback, end to end without a GPU: scripts/gpu-check on a
# packed kit whose gpu_probe cannot load (as when the packing machine's
# build does not suit the GPU machine), with an nvidia-smi that lists an
# H200.  gpu-check must see the loader error, run kit/rebuild.sh (which
# recompiles the CUDA backend for sm_90 with nvcc and cc alone and relinks
# the GPU programs), probe again, and then fail on the GPU CUDA cannot use
# (exit 1).  Then, in the kit's environment: the relinked test_gpu_kernels
# starts (exit 77, "no CUDA device", here; on a GPU it runs the kernel
# tests), no program needs MPI or OpenBLAS, and a CUDA training program
# links against the rebuilt runtime.
#
#   rebuild_test.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work/fakebin"
fail() { echo "FAILED: $*" >&2; exit 1; }
"$root/scripts/gpu-kit" --build "$build" --no-build --out "$work/kit" >/dev/null
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc ]] || fail "no nvcc (set NVCC)"
cat >"$work/kit/bin/gpu_probe" <<'SH'
#!/bin/sh
echo "$0: error while loading shared libraries: libcudart.so.13: cannot open shared object file" >&2
exit 127
SH
cat >"$work/fakebin/nvidia-smi" <<'SH'
#!/bin/sh
case "$*" in
  *-L*) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;;
  *compute_cap*) echo "9.0" ;;
  *) echo "NVIDIA H200, 143771 MiB, 580.159.03" ;;
esac
SH
chmod +x "$work/kit/bin/gpu_probe" "$work/fakebin/nvidia-smi"
clean_env=(env -i HOME="$HOME" TMPDIR="${TMPDIR:-/tmp}" NVCC="$nvcc" ${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"})
if "${clean_env[@]}" PATH="$work/fakebin:$(dirname "$nvcc"):/usr/bin:/bin" GPU_KIT="$work/kit" \
  "$root/scripts/gpu-check" "$work/gc" >"$work/gc.log" 2>&1; then
  fail "gpu-check exited 0 with a GPU listed that CUDA cannot use"
fi
sum=$work/gc/summary.txt
grep -q "rebuilding the CUDA backend" "$sum" || fail "gpu-check did not rebuild: $(cat "$work/gc.log")"
grep -q "^\[rebuild\] exit 0" "$sum" || fail "kit/rebuild.sh failed: $(cat "$work/gc.log")"
grep -q "FAIL: a GPU is visible but CUDA cannot use it" "$sum" || fail "gpu-check: $(cat "$work/gc.log")"
grep -E "rebuild" "$sum"

"${clean_env[@]}" PATH="$(dirname "$nvcc"):/usr/bin:/bin" bash -c '
  set -euo pipefail
  root=$1 work=$2
  . "$work/kit/env.sh" 2>/dev/null
  set +e
  "$work/kit/bin/test_gpu_kernels" >"$work/kernels.log" 2>&1
  rc=$?
  set -e
  echo "rebuilt test_gpu_kernels: exit $rc ($(head -1 "$work/kernels.log"))"
  [[ $rc == 0 || $rc == 77 ]] || { cat "$work/kernels.log" >&2; exit 1; }
  baspc "$root/tests/train/tiny_gqa.basp" -q --target=cuda -o "$work/prog" --set mesh.nodes=1 \
    --set mesh.devices_per_node=1
' kit-env "$root" "$work" || fail "the rebuilt kit (above)"
for exe in kit/bin/test_gpu_kernels kit/bin/gpu_probe kit/bin/gpu_attention_bench prog; do
  if readelf -d "$work/$exe" | grep -E 'NEEDED.*(libmpi|libopen-|libopenblas)'; then fail "$exe needs MPI or OpenBLAS"; fi
done
echo "kit: gpu-check rebuilt the CUDA backend on a loader error; its programs start and a CUDA program links"
