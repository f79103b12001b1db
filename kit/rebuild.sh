#!/usr/bin/env bash
# rebuild.sh — the GPU kit's fallback on the GPU machine itself: compiles
# the CUDA backend again there with only nvcc and cc (no CMake, MPI, BLAS,
# flex or bison needed), for that machine's GPU, and relinks the kit's GPU
# programs.  scripts/gpu-check runs it when the packed programs cannot start
# (a library or driver the packing machine's build does not suit).  The CPU
# runtime, the CPU kernels and baspc are kept from the kit: they need only
# the C library.  Source env.sh first (the CUDA libraries, BASP_LIBS).
#
#   kit/rebuild.sh REPO KIT [ARCH]     (ARCH e.g. 90; default: the GPU's)
set -euo pipefail
repo=$(cd "$1" && pwd) kit=$(cd "$2" && pwd)
arch=${3:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}
arch=${arch:-90}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cc=${CC:-cc}
jobs=$(nproc 2>/dev/null || echo 4)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Headers: the toolkit's, then NCCL's and cuDNN's wherever their libraries
# were found (a Python package keeps include/ beside lib/), then the kit's cJSON.
inc=(-I"$repo/runtime/include" -I"$repo/runtime/cuda" -I"$repo/runtime/host" -I"$repo/runtime" -I"$repo" -I"$kit/include")
cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
inc+=(-I"$cuda_home/include")
for so in libnccl.so.2 libcudnn.so.9; do
  f=$(readlink -f "$kit/lib/dev/$so" 2>/dev/null || true)
  [[ -n $f && -d $(dirname "$(dirname "$f")")/include ]] && inc+=(-I"$(dirname "$(dirname "$f")")/include")
done
defs=(-D_POSIX_C_SOURCE=200809L)
cudnn_src=()
if [[ -e $kit/lib/dev/libcudnn.so.9 ]] && printf '#include <cudnn.h>\n' | $cc -E "${inc[@]}" - >/dev/null 2>&1; then
  defs+=(-DBASP_HAVE_CUDNN)
  cudnn_src=("$repo"/runtime/cuda/rt_attn_cudnn*.c)
fi
echo "rebuild: sm_$arch, nvcc $($nvcc --version | tail -1), ${#cudnn_src[@]} cuDNN source(s)" >&2

# Device code, one nvcc per kernel file in parallel.
for f in "$repo"/runtime/cuda/kcu_*.cu; do
  echo "$nvcc -O3 -std=c++17 -lineinfo -gencode=arch=compute_$arch,code=sm_$arch ${inc[*]} -c $f -o $work/$(basename "$f").o"
done | xargs -P "$jobs" -I{} sh -c '{}'
# Host code against the one-process MPI.
# Every rt_*.c of the CUDA backend but the cuDNN ones (above, when cuDNN is
# there), so a new backend file needs no edit here.
host_src=()
for f in "$repo"/runtime/cuda/rt_*.c; do
  [[ $(basename "$f") == rt_attn_cudnn* ]] || host_src+=("$f")
done
for f in "$repo"/runtime/{core,data,ckpt,obs}/*.c "$repo"/common/*.c "${host_src[@]}" "${cudnn_src[@]}"; do
  echo "$cc -O2 -std=c17 ${defs[*]} -I$repo/kit/mpi1 ${inc[*]} -c $f -o $work/$(basename "$f").o"
done | xargs -P "$jobs" -I{} sh -c '{}'
rm -f "$kit/rt/libbasp_rt_cuda.a"
ar rcs "$kit/rt/libbasp_rt_cuda.a" "$work"/*.o

# The GPU programs, linked as the kit links generated programs (BASP_LIBS).
read -r -a libs <<<"$BASP_LIBS"
link() { # OUT SOURCE...
  local out=$1
  shift
  $cc -O2 -std=c17 "${defs[@]}" "${inc[@]}" -I"$repo/kit/blas" -I"$repo/tests/gpu" "$@" -o "$kit/bin/$out" \
    "$kit/rt/libbasp_rt_cuda.a" "$kit/rt/libbasp_kernels.a" "${libs[@]}"
}
link test_gpu_kernels "$repo/tests/gpu/test_gpu_kernels.c" "$repo/tests/gpu/gpu_attn_cases.c" \
  "$repo/tests/gpu/gpu_test_util.c"
link gpu_attention_bench "$repo/bench/gpu_attention_bench.c"
link gpu_gemm_bench "$repo/bench/gpu_gemm_bench.c"
link gpu_probe "$repo/tests/gpu/gpu_probe.c"
echo "rebuild: done ($kit/rt/libbasp_rt_cuda.a and 4 programs)" >&2
