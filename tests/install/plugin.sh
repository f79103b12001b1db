#!/usr/bin/env bash
# plugin.sh BUILD SRC CORPUS WORK CFLAGS LIT LLVM_BIN — a pass plugin written, built and
# loaded outside the tree, against an installed basp only:
#   1. `cmake --install BUILD --prefix P`;
#   2. examples/hpz (the hpZ plugin) configured with find_package(basp)
#      from P alone (basp::plugin) and built;
#   3. P/bin/basp-opt and P/bin/baspc load it: --list-passes shows its pass,
#      --plan lists its strategy as a candidate with a cost, basp-opt runs it,
#      and the plugin's own lit tests (examples/hpz/test) pass against P;
#   4. P/bin/baspc builds training binaries with it (ZeRO 3, 2 nodes x 4
#      ranks, plain Ulysses and batch-aware G=2), and each one's losses,
#      gradients and weights equal the one-rank run (tests/train/equiv.py,
#      its tolerances).
set -euo pipefail
build=$1 src=$2 corpus=$3 w=$4 extra=${5:-} lit=${6:-lit} llvm_bin=${7:-/usr/lib/llvm-14/bin}
rm -rf "$w" && mkdir -p "$w"
p=$w/prefix
cmake --install "$build" --prefix "$p" >"$w/install.log"
[[ -f $p/include/basp/basp_pass.h ]] || { echo "FAIL: basp_pass.h not installed"; exit 1; }

cmake -S "$src/examples/hpz" -B "$w/hpz" -DCMAKE_PREFIX_PATH="$p" -DCMAKE_C_FLAGS="$extra" >"$w/hpz.log" 2>&1 ||
    { cat "$w/hpz.log"; exit 1; }
cmake --build "$w/hpz" >>"$w/hpz.log" 2>&1 || { cat "$w/hpz.log"; exit 1; }
so=$w/hpz/libbasp_hpz.so
# it binds to the loading program's basp_* functions, carrying none itself
nm -D --undefined-only "$so" | grep -q ' U basp_register_pass$' || { echo "FAIL: basp_register_pass not imported"; exit 1; }
if nm -D --defined-only "$so" | grep -q ' T basp_register'; then echo "FAIL: the plugin carries basp itself"; exit 1; fi
echo "plugin.sh: examples/hpz built outside the tree against $p (find_package(basp), basp::plugin)"

"$p/bin/basp-opt" --load-pass-plugin="$so" --list-passes | grep -q '^  hpz ' ||
    { echo "FAIL: basp-opt --list-passes does not list hpz"; exit 1; }
"$p/bin/baspc" --load-pass-plugin="$so" --list-passes | grep -q '^  hpz ' ||
    { echo "FAIL: baspc --list-passes does not list hpz"; exit 1; }
spec=$src/tests/lit/plugin/hpz.basp
"$p/bin/baspc" --load-pass-plugin="$so" "$spec" --plan --json >"$w/plan.json"
python3 - "$w/plan.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = {x["name"]: x for x in r["candidates"]}
for name in ("ulysses+hpz", "batch-aware G=2 ulysses+hpz"):
    assert name in c and c[name]["legal"] and c[name]["available"] and c[name]["step_ms"] > 0, c.get(name)
print("plugin.sh: --plan costs ulysses+hpz (%.1f ms/step) and batch-aware G=2 ulysses+hpz (%.1f ms/step); chosen: %s"
      % (c["ulysses+hpz"]["step_ms"], c["batch-aware G=2 ulysses+hpz"]["step_ms"], r["chosen"]))
PY
"$p/bin/baspc" "$spec" -q --set layout.a2a=flat --passes=batch-aware,ulysses,place,zero --emit=ir -o "$w/zero.bir"
sed -i 's/^config a2a = flat/config a2a = hpz/' "$w/zero.bir"
"$p/bin/basp-opt" "$w/zero.bir" -q --load-pass-plugin="$so" --passes=hpz -o "$w/hpz.bir"
grep -q 'all_gather %l0.wq.sec {group = @hpz_node' "$w/hpz.bir" || { echo "FAIL: basp-opt did not run hpz"; exit 1; }
read -ra litcmd <<<"$lit"
"${litcmd[@]}" -sv "$src/examples/hpz/test" --param prefix="$p" --param plugin="$so" --param llvm_bin="$llvm_bin" \
    --param work="$w/lit" >"$w/lit.log" 2>&1 || { cat "$w/lit.log"; exit 1; }
echo "plugin.sh: basp-opt and baspc load it, list its pass and run it; its lit tests pass: $(grep -o 'Passed: *[0-9]*' "$w/lit.log")"

mesh=(--layout mesh.nodes=2 --layout mesh.devices_per_node=4 --layout layout.a2a=hpz)
for ba in off "groups 2"; do
    python3 "$src/tests/train/equiv.py" --baspc "$p/bin/baspc" --baspc-arg=--load-pass-plugin="$so" \
        --mpirun "$(command -v mpirun)" --data "$corpus" --spec "$src/tests/train/tiny_gqa.basp" --np 8 \
        --workdir "$w/train_${ba// /_}" --set train.zero=3 "${mesh[@]}" --layout "layout.batch_aware=$ba" --steps 10
    grep -q 'hierarchical ZeRO-3 (hpZ)' "$w/train_${ba// /_}/layout.train.log" ||
        { echo "FAIL: the binary does not say hpZ"; exit 1; }
done
echo "plugin.sh: hpZ training binaries (ZeRO 3, Ulysses and batch-aware G=2) equal the one-rank run"
