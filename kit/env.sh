# env.sh — source it from bash (`. gpu-kit/env.sh`) to use the GPU kit on a
# machine without MPI, BLAS or cJSON (README.md beside the kit's sources).
#
# Finds the CUDA libraries the kit's programs were linked against (cudart,
# cuBLAS, cuBLASLt, NCCL and, where the kit has it, cuDNN) in the CUDA
# toolkit, the system's library path or the Python packages that carry them
# (nvidia-*), makes links to them in KIT/lib/dev, and sets:
#   PATH              KIT/bin first (baspc, mkcorpus, the one-process mpirun)
#   LD_LIBRARY_PATH   KIT/lib/dev, KIT/lib and the libraries' folders
#   BASP_RUNTIME_DIR  KIT/rt: the runtime baspc links programs against
#   BASP_CC           cc unless set
#   BASP_LIBS         the link words for those programs (mpi1, blas_dl, cJSON, CUDA)
#   BASP_BLAS_LIB     a CBLAS for the CPU reference runs: as set, else the
#                     system's OpenBLAS, else NumPy's bundled copy
# BASP_CUDA_LIB_DIRS (colon-separated) is searched first.  Returns 1, with a
# line per missing library, when a required one is not found.
kit_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# (Everything here also works under the caller's set -euo pipefail.)
kit_ldconfig() { # the dynamic linker's cache, wherever ldconfig is
  local l
  for l in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
    if command -v "$l" >/dev/null 2>&1; then "$l" -p 2>/dev/null || true; return 0; fi
  done
}

kit_find_lib() { # NAME: the first file NAME in the search folders (nothing if none)
  local d f
  for d in "${kit_dirs[@]}"; do
    [[ -d $d ]] || continue
    f=$(find -L "$d" -maxdepth 4 -name "$1" \( -type f -o -type l \) 2>/dev/null | head -1 || true)
    if [[ -n $f ]]; then echo "$f"; return 0; fi
  done
  kit_ldconfig | awk -v n="$1" '$1 == n { print $NF; exit }' || true
}

kit_setup() {
  local IFS_old=$IFS sp py=${PYTHON:-python3} missing=0 name so f d
  kit_lflags="" kit_libdirs=""
  kit_dirs=()
  IFS=:; for d in ${BASP_CUDA_LIB_DIRS:-}; do kit_dirs+=("$d"); done; IFS=$IFS_old
  if [[ -n ${CUDA_HOME:-} ]]; then kit_dirs+=("$CUDA_HOME/lib64" "$CUDA_HOME/lib"); fi
  kit_dirs+=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib)
  if command -v "$py" >/dev/null; then
    while read -r sp; do if [[ -d $sp/nvidia ]]; then kit_dirs+=("$sp/nvidia"); fi; done < <(
      "$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null)
  fi
  mkdir -p "$kit_dir/lib/dev"
  rm -f "$kit_dir"/lib/dev/*
  # sonames.txt: "soname required|optional", written when the kit was packed.
  while read -r so need; do
    f=$(kit_find_lib "$so")
    if [[ -z $f ]]; then
      if [[ $need == required ]]; then
        echo "kit: $so: not found (searched ${kit_dirs[*]} and ldconfig; set BASP_CUDA_LIB_DIRS)" >&2
        missing=1
      else
        echo "kit: $so: not found; the kit runs without it" >&2
      fi
      continue
    fi
    f=$(readlink -f "$f")
    echo "kit: $so: $f" >&2
    name=${so%%.so*}
    ln -sf "$f" "$kit_dir/lib/dev/$so"
    ln -sf "$f" "$kit_dir/lib/dev/$name.so"
    kit_lflags+=" -l${name#lib}"
    kit_libdirs="${kit_libdirs:+$kit_libdirs:}$(dirname "$f")"
  done <"$kit_dir/sonames.txt"
  ln -sf "$kit_dir/lib/libcjson.so.1" "$kit_dir/lib/dev/libcjson.so"
  if [[ -z ${BASP_BLAS_LIB:-} ]]; then
    BASP_BLAS_LIB=$(kit_find_lib libopenblas.so.0)
    if [[ -z $BASP_BLAS_LIB ]] && command -v "$py" >/dev/null; then
      BASP_BLAS_LIB=$("$py" -c 'import glob, os, numpy
d = os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)), "numpy.libs")
print((sorted(glob.glob(d + "/libscipy_openblas*.so")) or [""])[0])' 2>/dev/null || true)
    fi
  fi
  if [[ -n $BASP_BLAS_LIB ]]; then
    echo "kit: BLAS for the CPU references: $BASP_BLAS_LIB" >&2
  else
    echo "kit: no BLAS found (no libopenblas.so.0, no NumPy): CPU reference runs will stop; set BASP_BLAS_LIB" >&2
  fi
  export BASP_BLAS_LIB
  export PATH="$kit_dir/bin:$PATH"
  export LD_LIBRARY_PATH="$kit_dir/lib/dev:$kit_dir/lib${kit_libdirs:+:$kit_libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export BASP_RUNTIME_DIR="$kit_dir/rt"
  export BASP_CC=${BASP_CC:-cc}
  export BASP_LIBS="-Wl,--as-needed $kit_dir/rt/libbasp_mpi1.a $kit_dir/rt/libbasp_blas_dl.a -L$kit_dir/lib/dev \
-Wl,-rpath,$kit_dir/lib/dev -lcjson$kit_lflags -lstdc++ -lpthread -ldl -lrt -lm"
  export BASP_KIT="$kit_dir"
  return $missing
}
kit_setup
