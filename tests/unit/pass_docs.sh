#!/usr/bin/env bash
# pass_docs.sh BASPC SRCDIR — the documentation's pass tables and pipeline
# against what the compiler registers (passes/passes.def):
#   - passes/README.md's pass table: the rows of `baspc --list-passes`
#     (name and summary), in order;
#   - docs/ARCHITECTURE.md's pass table: the same names, in order;
#   - docs/ARCHITECTURE.md's pipeline picture and the default pipeline that
#     passes/README.md quotes: `baspc --help`'s (every strategy's passes in
#     the skeleton).
# Each difference is printed with what the docs should say; exit 1 if any.
set -uo pipefail
[[ $# == 2 ]] || { echo "usage: $0 BASPC SRCDIR" >&2; exit 2; }
baspc=$1 src=$2
readme=$src/passes/README.md arch=$src/docs/ARCHITECTURE.md
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "  NAME   SUMMARY" -> "NAME|SUMMARY"
"$baspc" --list-passes | sed -E 's/^  ([^ ]+) +(.*)$/\1|\2/' >"$tmp/list" || { echo "FAIL: baspc --list-passes"; exit 1; }
[[ -s $tmp/list ]] || { echo "FAIL: baspc --list-passes printed nothing"; exit 1; }
cut -d'|' -f1 "$tmp/list" >"$tmp/names"

# The table rows after the "<!-- pass table" marker of FILE, up to the
# first line that is not a row: "| `NAME` ... | CELL |" -> "NAME|CELL",
# the last cell with markdown's backslash escapes undone.
table() {
    awk '/^<!-- pass table/ { on = 1; next }
         on && !/^\|/ { if (rows) exit; next }
         on && /^\| *`/ { rows++; print }' "$1" |
        sed -E 's/^\| *`([^`]+)`[^|]*\|(.*\|)? *([^|]*[^| ]) *\|$/\1|\3/; s/\\([][<>|*_`\\])/\1/g'
}

table "$readme" >"$tmp/readme"
if ! diff -u --label 'baspc --list-passes' --label "$readme (pass table)" "$tmp/list" "$tmp/readme" >"$tmp/d1"; then
    echo "FAIL: the pass table of passes/README.md is not what baspc --list-passes prints:"
    cat "$tmp/d1"
    echo "the table's rows (from passes/passes.def) should read:"
    sed -E 's/^([^|]+)\|(.*)$/| `\1` | \2 |/; s/<([a-z])/\\<\1/g; s/([a-z])>/\1\\>/g' "$tmp/list"
    fail=1
fi

table "$arch" | cut -d'|' -f1 >"$tmp/arch"
if ! diff -u --label 'baspc --list-passes' --label "$arch (pass table)" "$tmp/names" "$tmp/arch" >"$tmp/d2"; then
    echo "FAIL: the pass table of docs/ARCHITECTURE.md does not list the registered passes in their order:"
    cat "$tmp/d2"
    fail=1
fi

# The default pipeline: the line after "strategy's passes only:" in --help.
pipe=$("$baspc" --help | awk '/strategy.s passes only:/ { getline; print $1; exit }')
[[ $pipe == batch-aware,* ]] || { echo "FAIL: no default pipeline in baspc --help"; exit 1; }
# The picture: the words between "passes/    batch-aware" and "memplan".
picture=$(awk '/^  passes\/ +batch-aware/ { on = 1 } on { print } on && /memplan/ { exit }' "$arch" |
          sed -E 's/^  passes\/ //; s/[│▼]//g; s/─▶/ /g; s/\(\+ [^)]*\)//g' | tr -s ' \n' '\n\n' | sed '/^$/d' | paste -sd,)
if [[ $picture != "$pipe" ]]; then
    echo "FAIL: the pipeline picture of docs/ARCHITECTURE.md is '$picture'; baspc runs '$pipe'"
    fail=1
fi
if ! grep -qF "\`$pipe\`" "$readme"; then
    echo "FAIL: passes/README.md does not quote the default pipeline \`$pipe\` (baspc --help)"
    fail=1
fi
[[ $fail == 0 ]] && echo "pass_docs: $(wc -l <"$tmp/list") passes; the docs agree with baspc"
exit $fail
