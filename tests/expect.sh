#!/usr/bin/env bash
# expect.sh ok|fail REGEX CMD [ARGS...] — runs CMD, then checks both its exit
# status (0 for ok, non-zero for fail) and that its output (stdout + stderr)
# matches the extended regular expression REGEX.  CTest's
# PASS_REGULAR_EXPRESSION alone ignores the exit status.
want=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out" | tail -n 40
if [[ $want == ok && $rc -ne 0 ]]; then echo "expect.sh: exit status $rc, wanted 0"; exit 1; fi
if [[ $want == fail && $rc -eq 0 ]]; then echo "expect.sh: exit status 0, wanted non-zero"; exit 1; fi
if ! grep -qE -- "$regex" <<<"$out"; then echo "expect.sh: output does not match: $regex"; exit 1; fi
echo "expect.sh: exit status $rc and output as expected"
