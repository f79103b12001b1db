#!/usr/bin/env bash
# blas.sh MPIRUN... -- PROGRAM ARGS... — the banner names the BLAS and its
# kernel set, and a generic kernel set on a CPU with AVX2 or AVX-512 is
# said with its fix.  The generic case is made with OPENBLAS_CORETYPE=
# Prescott (what Debian 12's OpenBLAS picks by itself on CPU models it does
# not know); on a CPU without AVX2 nothing is to be said, and the check is
# that nothing is.
set -uo pipefail
mpirun=()
while [[ $1 != -- ]]; do mpirun+=("$1"); shift; done
shift
out=$("${mpirun[@]}" "$@" 2>&1) || { printf '%s\n' "$out"; echo "FAIL: the default run failed"; exit 1; }
line=$(grep -E '^blas: ' <<<"$out") || { printf '%s\n' "$out" | head -20; echo "FAIL: no blas line in the banner"; exit 1; }
echo "default:   $line"
if grep -q '^blas: OpenBLAS' <<<"$line"; then
    grep -qE '^blas: OpenBLAS [0-9.]+( \(DYNAMIC_ARCH\))?, [A-Za-z0-9_]+ kernels, [0-9]+ thread\(s\)$' <<<"$line" ||
        { echo "FAIL: the blas line does not name the version, kernel set and threads"; exit 1; }
    out=$("${mpirun[@]}" -x OPENBLAS_CORETYPE=Prescott "$@" 2>&1) || { printf '%s\n' "$out"; exit 1; }
    line=$(grep -E '^blas: ' <<<"$out")
    echo "Prescott:  $line"
    grep -q ', Prescott kernels' <<<"$line" || { echo "FAIL: OPENBLAS_CORETYPE=Prescott not reported"; exit 1; }
    warn=$(grep -c '^warning: OpenBLAS runs its generic Prescott kernels on this CPU' <<<"$out")
    if grep -qw avx2 /proc/cpuinfo; then
        best=Haswell
        grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && best=SkylakeX
        [[ $warn == 1 ]] || { printf '%s\n' "$out" | head; echo "FAIL: wanted one warning (rank 0), got $warn"; exit 1; }
        grep -q "set OPENBLAS_CORETYPE=$best for every rank" <<<"$out" ||
            { echo "FAIL: the warning does not name OPENBLAS_CORETYPE=$best"; exit 1; }
        echo "warned:    $(grep '^warning: OpenBLAS' <<<"$out" | cut -c1-120)..."
    else
        [[ $warn == 0 ]] || { echo "FAIL: a warning on a CPU without AVX2"; exit 1; }
    fi
fi
echo "blas.sh: ok"
