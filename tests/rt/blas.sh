#!/usr/bin/env bash
# blas.sh MPIRUN... -- PROGRAM ARGS... — the banner names the BLAS and its
# kernel set; when OpenBLAS falls back to a generic set on a CPU with AVX2
# or AVX-512 the program re-executes itself with the right one; a generic
# set the user asks for (OPENBLAS_CORETYPE=Prescott) is kept and said with
# its fix.  OpenBLAS's own fallback (what Debian 12's OpenBLAS picks on CPU
# models it does not know) is played with BASP_TEST_BLAS_GENERIC=1, and
# BASP_BLAS_AUTO=0 must keep OpenBLAS's choice.  On a CPU without AVX2
# nothing is to be said or chosen, and the check is that nothing is.
set -uo pipefail
mpirun=()
while [[ $1 != -- ]]; do mpirun+=("$1"); shift; done
shift
out=$("${mpirun[@]}" "$@" 2>&1) || { printf '%s\n' "$out"; echo "FAIL: the default run failed"; exit 1; }
line=$(grep -E '^blas: ' <<<"$out") || { printf '%s\n' "$out" | head -20; echo "FAIL: no blas line in the banner"; exit 1; }
echo "default:   $line"
if grep -q '^blas: OpenBLAS' <<<"$line"; then
    grep -qE '^blas: OpenBLAS [0-9.]+( \(DYNAMIC_ARCH\))?, [A-Za-z0-9_]+ kernels( \(chosen by basp: [^)]*\))?, [0-9]+ thread\(s\)$' <<<"$line" ||
        { echo "FAIL: the blas line does not name the version, kernel set and threads"; exit 1; }
    out=$("${mpirun[@]}" -x OPENBLAS_CORETYPE=Prescott "$@" 2>&1) || { printf '%s\n' "$out"; exit 1; }
    line=$(grep -E '^blas: ' <<<"$out")
    echo "Prescott:  $line"
    grep -q ', Prescott kernels' <<<"$line" || { echo "FAIL: OPENBLAS_CORETYPE=Prescott not reported"; exit 1; }
    warn=$(grep -c '^warning: OpenBLAS runs its generic Prescott kernels on this CPU' <<<"$out")
    fell=$("${mpirun[@]}" -x BASP_TEST_BLAS_GENERIC=1 "$@" 2>&1) || { printf '%s\n' "$fell"; exit 1; }
    kept=$("${mpirun[@]}" -x BASP_TEST_BLAS_GENERIC=1 -x BASP_BLAS_AUTO=0 "$@" 2>&1) || { printf '%s\n' "$kept"; exit 1; }
    grep -q 'chosen by basp' <<<"$kept" && { echo "FAIL: BASP_BLAS_AUTO=0 did not keep OpenBLAS's choice"; exit 1; }
    if grep -qw avx2 /proc/cpuinfo; then
        best=Haswell
        grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && best=SkylakeX
        grep -q "^blas: OpenBLAS .*, $best kernels (chosen by basp: OpenBLAS picked Prescott on this CPU), " <<<"$fell" ||
            { printf '%s\n' "$fell" | head; echo "FAIL: the fallback was not replaced by $best kernels"; exit 1; }
        grep -q '^warning: OpenBLAS' <<<"$fell" && { echo "FAIL: a warning after basp chose the kernels"; exit 1; }
        echo "fallback:  $(grep '^blas: ' <<<"$fell")"
        [[ $warn == 1 ]] || { printf '%s\n' "$out" | head; echo "FAIL: wanted one warning (rank 0), got $warn"; exit 1; }
        grep -q "set OPENBLAS_CORETYPE=$best for every rank" <<<"$out" ||
            { echo "FAIL: the warning does not name OPENBLAS_CORETYPE=$best"; exit 1; }
        echo "warned:    $(grep '^warning: OpenBLAS' <<<"$out" | cut -c1-120)..."
    else
        [[ $warn == 0 ]] || { echo "FAIL: a warning on a CPU without AVX2"; exit 1; }
        grep -q 'chosen by basp' <<<"$fell" && { echo "FAIL: kernels chosen on a CPU without AVX2"; exit 1; }
    fi
fi
echo "blas.sh: ok"
