#!/usr/bin/env bash
# install.sh BUILD SRC CORPUS WORK [CFLAGS] — basp installed into a temporary prefix
# and used from there only (cmake/install.cmake):
#   1. `cmake --install BUILD --prefix P` lays out bin/, lib/, include/basp/,
#      lib/basp/ (the runtime), lib/cmake/basp/ and lib/pkgconfig/basp.pc;
#   2. P/bin/baspc builds a training binary against P/lib/basp (its link
#      line names P, not BUILD) whose losses equal, bit for bit, those of
#      the same spec built by BUILD/baspc;
#   3. a CMake project outside the tree finds basp with find_package(basp)
#      and builds the embedding example against libbasp.so and the
#      generated C program of a spec against basp::rt; both run;
#   4. pkg-config --cflags --libs basp builds the embedding example too.
# CFLAGS: what programs linked against this build need (the sanitizers of
# scripts/test --sanitize), for the two builds outside the tree.
set -euo pipefail
build=$1 src=$2 corpus=$3 w=$4 extra=${5:-}
rm -rf "$w" && mkdir -p "$w"
p=$w/prefix
cmake --install "$build" --prefix "$p" >"$w/install.log"
for f in bin/baspc bin/basp-opt lib/libbasp.so include/basp/basp.h include/basp/basp_rt.h \
    lib/basp/libbasp_rt.a lib/basp/libbasp_kernels.a lib/basp/include/basp_rt.h \
    lib/cmake/basp/basp-config.cmake lib/cmake/basp/basp-targets.cmake lib/pkgconfig/basp.pc; do
    [[ -e $p/$f ]] || { echo "FAIL: $p/$f not installed"; ls -R "$p"; exit 1; }
done
echo "install.sh: cmake --install laid out $(find "$p" -type f | wc -l) files under the prefix"

spec=$src/tests/train/tiny_mha.basp
one=(--set mesh.nodes=1 --set mesh.devices_per_node=1)
"$p/bin/baspc" "$spec" -v "${one[@]}" -o "$w/train_installed" >"$w/baspc.log" 2>&1 ||
    { cat "$w/baspc.log"; exit 1; }
grep -q "$p/bin/../lib/basp/libbasp_rt.a" "$w/baspc.log" ||
    { cat "$w/baspc.log"; echo "FAIL: the installed baspc did not link the installed runtime"; exit 1; }
! grep -q "$build/libbasp_rt.a" "$w/baspc.log" || { echo "FAIL: the build tree's runtime was linked"; exit 1; }
"$build/baspc" "$spec" -q "${one[@]}" -o "$w/train_build"
for t in installed build; do
    "$w/train_$t" --data "$corpus" --steps 3 --quiet --metrics "$w/$t.jsonl" >/dev/null
done
python3 - "$w/installed.jsonl" "$w/build.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:3])
assert len(a) == 3 and a == b, (a, b)
print("install.sh: the installed baspc's binary trains 3 steps with the build tree's losses, bit for bit")
PY

# A project outside the tree, with only the installed package.
mkdir -p "$w/proj"
"$p/bin/baspc" "$spec" -q "${one[@]}" --emit=c -o "$w/proj/train.c"
cat >"$w/proj/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(uses_basp C)
find_package(basp 0.1 REQUIRED)
add_executable(embed $src/examples/embed_layouts.c)
target_link_libraries(embed PRIVATE basp::basp)
add_executable(train train.c)
target_link_libraries(train PRIVATE basp::rt)
file(WRITE \${CMAKE_BINARY_DIR}/baspc.txt "\${BASP_BASPC}")
CM
cmake -S "$w/proj" -B "$w/proj/build" -DCMAKE_PREFIX_PATH="$p" -DCMAKE_C_FLAGS="$extra" >"$w/proj.log" 2>&1 || { cat "$w/proj.log"; exit 1; }
cmake --build "$w/proj/build" >>"$w/proj.log" 2>&1 || { cat "$w/proj.log"; exit 1; }
[[ $(cat "$w/proj/build/baspc.txt") == "$p/bin/baspc" ]] || { echo "FAIL: BASP_BASPC is $(cat "$w/proj/build/baspc.txt")"; exit 1; }
"$w/proj/build/embed" >"$w/embed.out"
grep -q "micro_batch" "$w/embed.out" || { cat "$w/embed.out"; echo "FAIL: the embedding example printed no table"; exit 1; }
"$w/proj/build/train" --data "$corpus" --steps 3 --quiet --metrics "$w/cmake.jsonl" >/dev/null
cmp <(python3 -c 'import json,sys; [print(json.loads(l)["loss"]) for l in open(sys.argv[1])]' "$w/cmake.jsonl") \
    <(python3 -c 'import json,sys; [print(json.loads(l)["loss"]) for l in open(sys.argv[1])]' "$w/build.jsonl")
echo "install.sh: find_package(basp) builds the embedding example (basp::basp) and a generated program (basp::rt); both run, the same losses"

# pkg-config, relocatable (the prefix comes from where basp.pc lies).
read -ra flags < <(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --cflags --libs basp)
read -ra more <<<"$extra"
cc "${more[@]}" -o "$w/embed_pc" "$src/examples/embed_layouts.c" "${flags[@]}" -Wl,-rpath,"$p/lib"
"$w/embed_pc" | cmp - "$w/embed.out"
echo "install.sh: pkg-config --cflags --libs basp builds the same embedding example"
