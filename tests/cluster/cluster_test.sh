#!/usr/bin/env bash
# cluster_test.sh CLUSTER HELLO: bring up a 2 × 2 emulated cluster, run the
# MPI hello across it, and check that
#   - the 4 ranks ran on two distinct hosts (one per emulated node), 2 each,
#     and the all-to-all between them delivered the right data;
#   - afterwards no namespace, state directory, host link or process of the
#     cluster is left.
# Exit 77 (skip) when the machine cannot do it: not root, or no namespaces.
set -euo pipefail
cluster=$1 hello=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

[[ $(id -u) == 0 ]] || skip "needs root (network namespaces, veth links, tc)"
command -v ip >/dev/null || skip "no 'ip' command (Debian: iproute2)"
name="t$(( $$ % 10000000 ))"   # a cluster of its own: never touches another run's
links_before=$(ip -o link show | awk -F': ' '{print $2}' | sort)

set +e
out=$("$cluster" --name "$name" --nodes 2 --ranks-per-node 2 --bandwidth 1gbit -- "$hello" 2>&1)
status=$?
set -e
echo "$out"
[[ $status != 4 ]] || skip "$(grep 'not available here' <<<"$out" | head -1)"
[[ $status == 0 ]] || fail "bench/cluster exited with status $status"

grep -q '^all-to-all ok$' <<<"$out" || fail "the all-to-all across the nodes did not deliver the right data"
[[ $(grep -c '^hello from rank [0-3] of 4 on ' <<<"$out") == 4 ]] || fail "expected 4 hello lines"
hosts=$(sed -n 's/^hello from rank [0-3] of 4 on //p' <<<"$out" | sort | uniq -c)
[[ $(wc -l <<<"$hosts") == 2 ]] || fail "expected 2 distinct host names, got: $hosts"
[[ $(awk '{print $1}' <<<"$hosts" | sort -u) == 2 ]] || fail "expected 2 ranks per host, got: $hosts"
{ grep -q "bc-$name-n0" <<<"$hosts" && grep -q "bc-$name-n1" <<<"$hosts"; } ||
    fail "host names are not the emulated nodes' (bc-$name-n0, bc-$name-n1): $hosts"

left=$(ip netns list | awk '{print $1}' | grep "^bc-$name-" || true)
[[ -z $left ]] || fail "namespaces left behind: $left"
[[ ! -e /run/basp-cluster/$name ]] || fail "state directory /run/basp-cluster/$name left behind"
links_after=$(ip -o link show | awk -F': ' '{print $2}' | sort)
new=$(comm -13 <(echo "$links_before") <(echo "$links_after"))
[[ -z $new ]] || fail "new links in the host namespace: $new"
# ranks (by executable) and mpirun/orted (their command lines name the agent)
procs=$(pgrep -f -- "basp-cluster/$name/" || true)
for exe in /proc/[0-9]*/exe; do
    [[ $(readlink "$exe" 2>/dev/null) == "$(readlink -f "$hello")" ]] && procs+=" $(cut -d/ -f3 <<<"$exe")"
done
procs=$(xargs <<<"$procs")
[[ -z $procs ]] || fail "processes left running: $(ps -o pid,args -p "${procs// /,}")"
echo "PASS: 2 nodes ($(awk '{print $2}' <<<"$hosts" | paste -sd' ')), nothing left behind"
