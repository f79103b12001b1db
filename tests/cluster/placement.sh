#!/usr/bin/env bash
# placement.sh CLUSTER BASPC SPEC CORPUS DIR — on a 2 × 2 emulated cluster
# (bench/cluster: each node its own host name), a binary compiled for
# consecutive placement trains under mpirun's default mapping and is
# refused before step 1 under `mpirun --map-by node`, naming the nodes'
# hosts and the fix; compiled round_robin, --map-by node trains.
# Exit 77 (skip) where the cluster cannot come up (not root, no namespaces).
set -euo pipefail
cluster=$1 baspc=$2 spec=$3 corpus=$4 dir=$5
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
"$baspc" "$spec" -o cons 2>/dev/null
"$baspc" "$spec" --set mesh.placement=round_robin -o rr 2>/dev/null
name="p$(( $$ % 10000000 ))"
set +e
out=$("$cluster" --name "$name" --nodes 2 --ranks-per-node 2 --bandwidth none --quiet --exec -- bash -c "
    echo '== slot'; \$BASP_MPIRUN -np 4 ./cons --data $corpus --steps 2 2>&1; echo \"status \$?\"
    echo '== node'; \$BASP_MPIRUN --map-by node -np 4 ./cons --data $corpus --steps 2 2>&1; echo \"status \$?\"
    echo '== rr'; \$BASP_MPIRUN --map-by node -np 4 ./rr --data $corpus --steps 2 2>&1; echo \"status \$?\"" 2>&1)
status=$?
set -e
[[ $status != 4 ]] || { echo "SKIP: $(grep 'not available here' <<<"$out" | head -1)"; exit 77; }
[[ $status == 0 ]] || fail "bench/cluster exited with status $status: $out"
part() { awk -v p="== $1" '$0 == p {on = 1; next} /^== / {on = 0} on' <<<"$out"; }
grep -Eq '^step +2/2' <<<"$(part slot)" && grep -q '^status 0$' <<<"$(part slot)" || fail "--map-by slot: $(part slot)"
node=$(part node)
grep -q "error: the ranks do not run where .*: the compiler kept set 0 of group @sp on node 0, but its ranks run on bc-$name-n0 (rank 0), bc-$name-n1 (rank 1)" <<<"$node" ||
    fail "--map-by node was not refused naming the hosts: $node"
grep -q 'mpirun --map-by slot' <<<"$node" && ! grep -q '^step' <<<"$node" && ! grep -q '^status 0$' <<<"$node" ||
    fail "--map-by node: no fix named, or it trained: $node"
grep -Eq '^step +2/2' <<<"$(part rr)" && grep -q '^status 0$' <<<"$(part rr)" || fail "round_robin, --map-by node: $(part rr)"
echo "PASS: placement on the emulated cluster (hosts bc-$name-n0, bc-$name-n1)"
