#!/usr/bin/env bash
# kit/rebuild.sh, the GPU kit's fallback on the GPU machine, run here on a
# packed kit in an environment holding only the kit and the CUDA toolkit:
# it must recompile the CUDA backend (sm_90) with nvcc and cc alone, and
# relink the GPU programs, which must then start (test_gpu_kernels exits
# 77, "no CUDA device", without a GPU; on a GPU it runs the kernel tests)
# and need no MPI; a CUDA training program must link against the rebuilt
# runtime.
#
#   rebuild_test.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
"$root/scripts/gpu-kit" --build "$build" --no-build --out "$work/kit" >/dev/null
before=$(stat -c %Y "$work/kit/rt/libbasp_rt_cuda.a")
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc ]] || fail "no nvcc (set NVCC)"
sleep 1
env -i HOME="$HOME" PATH="$(dirname "$nvcc"):/usr/bin:/bin" TMPDIR="${TMPDIR:-/tmp}" NVCC="$nvcc" \
  ${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"} bash -c '
  set -euo pipefail
  root=$1 work=$2
  . "$work/kit/env.sh"
  "$root/kit/rebuild.sh" "$root" "$work/kit" 90
  set +e
  "$work/kit/bin/test_gpu_kernels" >"$work/kernels.log" 2>&1
  rc=$?
  set -e
  echo "rebuilt test_gpu_kernels: exit $rc ($(head -1 "$work/kernels.log"))"
  [[ $rc == 0 || $rc == 77 ]] || { cat "$work/kernels.log" >&2; exit 1; }
  baspc "$root/tests/train/tiny_gqa.basp" -q --target=cuda -o "$work/prog" --set mesh.nodes=1 \
    --set mesh.devices_per_node=1
' kit-env "$root" "$work" || fail "kit/rebuild.sh in the kit's environment (above)"
(($(stat -c %Y "$work/kit/rt/libbasp_rt_cuda.a") > before)) || fail "rebuild.sh did not replace libbasp_rt_cuda.a"
for exe in kit/bin/test_gpu_kernels kit/bin/gpu_attention_bench prog; do
  if readelf -d "$work/$exe" | grep -E 'NEEDED.*(libmpi|libopen-|libopenblas)'; then fail "$exe needs MPI or OpenBLAS"; fi
done
echo "kit: rebuild.sh recompiled the CUDA backend; its programs start and a CUDA program links"
