#!/usr/bin/env bash
# split_wait.sh PREFIX CMD... — runs the training command CMD twice, without
# and with --split-wait, and checks that
#   - the losses are identical (a barrier changes no number),
#   - every --metrics line of the second run has a2a_wait_ms >= 0 and the
#     first run's lines have none,
#   - the --profile of the second run gives wait_seconds for every
#     collective kind.
set -euo pipefail
prefix=$1
shift
"$@" --quiet --metrics "$prefix.plain.jsonl"
"$@" --quiet --split-wait --metrics "$prefix.split.jsonl" --profile "$prefix.profile.json"
python3 - "$prefix" <<'PY'
import json, sys
p = sys.argv[1]
plain = [json.loads(l) for l in open(p + ".plain.jsonl")]
split = [json.loads(l) for l in open(p + ".split.jsonl")]
assert len(plain) == len(split) > 0, "different numbers of steps"
for a, b in zip(plain, split):
    assert a["loss"] == b["loss"], f"step {a['step']}: loss {a['loss']} vs {b['loss']} with --split-wait"
    assert "a2a_wait_ms" not in a, "a2a_wait_ms without --split-wait"
    assert b["a2a_wait_ms"] >= 0, "a2a_wait_ms missing or negative"
prof = json.load(open(p + ".profile.json"))
colls = [k for k, v in prof["ops"].items() if "bytes" in v]
assert "all_to_all" in colls, "no all_to_all in the profile"
for k in colls:
    assert prof["ops"][k]["wait_seconds"] >= 0, f"{k}: no wait_seconds"
print(f"split_wait: {len(split)} steps, losses identical, wait per step "
      + ", ".join(f"{b['a2a_wait_ms']:.2f}" for b in split) + " ms")
PY
