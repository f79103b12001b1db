#!/usr/bin/env bash
# placement.sh BASPC MPIEXEC SPEC CORPUS WORKDIR — the training binary
# checks where its ranks run against the placement it was compiled for.
# Each rank gets a host name of its own choosing (a UTS namespace per rank,
# `unshare --uts`), so "nodes" exist on one machine:
#   - compiled consecutive, ranks on hosts r / 2: runs;
#   - compiled consecutive, ranks on hosts r % 2 (mpirun --map-by node):
#     refused before step 1, exit 2, naming the set, the hosts and the fix;
#   - the same with --allow-placement-mismatch: warned, trains, and its
#     losses equal the first run's (placement changes no number);
#   - compiled round_robin on hosts r % 2: runs, same losses;
#     on hosts r / 2: refused, naming --map-by node;
#   - all ranks on one host: both programs run.
# Exit 77 (skip) without root or UTS namespaces.
set -euo pipefail
baspc=$1 mpiexec=$2 spec=$3 corpus=$4 dir=$5
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "SKIP: needs root (unshare --uts)"; exit 77; }
unshare --uts true 2>/dev/null || { echo "SKIP: no UTS namespaces here"; exit 77; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
"$baspc" "$spec" -o cons 2>/dev/null
"$baspc" "$spec" --set mesh.placement=round_robin -o rr 2>/dev/null
# run PROGRAM HOST_EXPR ARGS...: 4 ranks, rank r on host "h$((HOST_EXPR))"
run() {
    local prog=$1 host=$2
    shift 2
    "$mpiexec" --allow-run-as-root --oversubscribe -np 4 sh -c \
        "exec unshare --uts sh -c 'hostname h\$(( $host )); exec ./$prog --data $corpus --steps 2 $*'" 2>&1
}
losses() { grep -o 'loss [0-9.][0-9.]*' <<<"$1" | paste -sd' '; }
set +e
ok=$(run cons 'OMPI_COMM_WORLD_RANK / 2'); s_ok=$?
bad=$(run cons 'OMPI_COMM_WORLD_RANK % 2'); s_bad=$?
allow=$(run cons 'OMPI_COMM_WORLD_RANK % 2' --allow-placement-mismatch); s_allow=$?
rr=$(run rr 'OMPI_COMM_WORLD_RANK % 2'); s_rr=$?
rr_bad=$(run rr 'OMPI_COMM_WORLD_RANK / 2'); s_rr_bad=$?
one=$("$mpiexec" --allow-run-as-root --oversubscribe -np 4 ./rr --data "$corpus" --steps 2 2>&1); s_one=$?
set -e
[[ $s_ok == 0 && -n $(losses "$ok") ]] || fail "consecutive on consecutive hosts: status $s_ok: $ok"
grep -q 'warning\|error' <<<"$ok" && fail "consecutive on consecutive hosts warned: $ok"
[[ $s_bad != 0 ]] || fail "consecutive on round-robin hosts was not refused: $bad"
grep -q "error: the ranks do not run where .* was compiled for: the compiler kept set 0 of group @sp on node 0, but its ranks run on h0 (rank 0), h1 (rank 1)" <<<"$bad" ||
    fail "the refusal does not name the set and its hosts: $bad"
grep -q 'fix: launch consecutive ranks on one node (mpirun --map-by slot' <<<"$bad" || fail "no fix named: $bad"
grep -q 'recompile for this launch with --set mesh.placement=round_robin' <<<"$bad" || fail "no recompile hint: $bad"
[[ -z $(losses "$bad") ]] || fail "the refused run trained: $bad"
[[ $s_allow == 0 ]] && grep -q 'warning: the ranks do not run where' <<<"$allow" ||
    fail "--allow-placement-mismatch: status $s_allow: $allow"
[[ $(losses "$allow") == "$(losses "$ok")" ]] || fail "losses differ: $(losses "$allow") vs $(losses "$ok")"
[[ $s_rr == 0 && $(losses "$rr") == "$(losses "$ok")" ]] || fail "round_robin on round-robin hosts: $rr"
grep -q 'warning\|error' <<<"$rr" && fail "round_robin on round-robin hosts warned: $rr"
[[ $s_rr_bad != 0 ]] && grep -q 'fix: launch ranks round-robin over the nodes (mpirun --map-by node' <<<"$rr_bad" ||
    fail "round_robin on consecutive hosts: status $s_rr_bad: $rr_bad"
[[ $s_one == 0 && $(losses "$one") == "$(losses "$ok")" ]] || fail "one host: status $s_one: $one"
echo "PASS: placement checked (losses $(losses "$ok"))"
