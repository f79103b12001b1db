#!/usr/bin/env python3
"""Rewrites a CUDA source (.cu) into C++ that runs on the CPU under cuemu.

The two constructs that are not C++ are rewritten, and every __shared__
declaration gets a call that fills it with NaN bytes once per block;
everything else is compiled as written, with cuemu.h (included first)
supplying the CUDA built-ins:

  NAME<<<grid, block, smem, stream>>>(ARGS);
      ->  cuemu_launch("NAME", &NAME, cuemu_config(grid, block, smem, stream), ARGS);
  extern __shared__ T name[];
      ->  T *name = (T *)cuemu_dyn_smem();
  __shared__ T a[N], b[M];
      ->  __shared__ T a[N], b[M]; cuemu_shared(&a, sizeof a); cuemu_shared(&b, sizeof b);

A `#line` directive keeps compiler messages pointing at the .cu file.

usage: cu2cpp.py IN.cu OUT.cpp
"""
import re
import sys


def fail(src, pos, what):
    line = src.count("\n", 0, pos) + 1
    sys.exit("%s:%d: error: cu2cpp: %s" % (sys.argv[1], line, what))


def kernel_name_start(src, end):
    """Start of `ident` or `ident<...>` that ends at src[end-1]."""
    i = end
    if src[i - 1] == ">":  # template arguments: match < > backwards
        depth = 0
        while i > 0:
            i -= 1
            if src[i] == ">":
                depth += 1
            elif src[i] == "<":
                depth -= 1
                if depth == 0:
                    break
    while i > 0 and (src[i - 1].isalnum() or src[i - 1] in "_:"):
        i -= 1
    return i


def matching_paren(src, open_pos):
    depth = 0
    for i in range(open_pos, len(src)):
        if src[i] == "(":
            depth += 1
        elif src[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def rewrite_launches(src):
    out, pos = [], 0
    while True:
        lt = src.find("<<<", pos)
        if lt < 0:
            out.append(src[pos:])
            return "".join(out)
        end = lt  # the formatter may break a long launch before its <<<
        while end > 0 and src[end - 1] in " \t\n":
            end -= 1
        start = kernel_name_start(src, end)
        name = src[start:end].strip()
        if not name:
            fail(src, lt, "no kernel name before <<<")
        gt = src.find(">>>", lt)
        if gt < 0:
            fail(src, lt, "<<< without >>>")
        cfg = src[lt + 3:gt]
        op = gt + 3
        while src[op].isspace():
            op += 1
        if src[op] != "(":
            fail(src, gt, "no argument list after >>>")
        cp = matching_paren(src, op)
        if cp < 0:
            fail(src, op, "unbalanced argument list")
        args = src[op + 1:cp]
        out.append(src[pos:start])
        out.append('cuemu_launch("%s", &%s, cuemu_config(%s)%s)' % (name, name, cfg, ", " + args if args.strip() else ""))
        pos = cp + 1


DYN_SMEM = re.compile(r"extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;")
SHARED = re.compile(r"(?<!extern )__shared__\s+([^;]+);")


def poison_shared(m):
    """Appends a cuemu_shared() call for every declarator of a __shared__ declaration."""
    pieces, depth, cur = [], 0, ""
    for ch in m.group(1):
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            pieces.append(cur)
            cur = ""
        else:
            cur += ch
    pieces.append(cur)
    first = re.match(r"^\s*(.*?)\b(\w+)\s*((?:\[[^\]]*\]\s*)*)$", pieces[0], re.S)
    if not first or not first.group(1).strip():
        sys.exit("%s: error: cu2cpp: cannot read the __shared__ declaration '%s'" % (sys.argv[1], m.group(0)))
    names = [first.group(2)] + [re.match(r"\s*(\w+)", p).group(1) for p in pieces[1:]]
    return m.group(0) + "".join(" cuemu_shared(&%s, sizeof %s);" % (n, n) for n in names)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: cu2cpp.py IN.cu OUT.cpp")
    src = open(sys.argv[1]).read()
    body = rewrite_launches(src)
    body = SHARED.sub(poison_shared, body)
    body = DYN_SMEM.sub(lambda m: "%s *%s = (%s *)cuemu_dyn_smem();" % (m.group(1), m.group(2), m.group(1)), body)
    with open(sys.argv[2], "w") as f:
        f.write('#include "cuemu.h"\n#line 1 "%s"\n' % sys.argv[1])
        f.write(body)


if __name__ == "__main__":
    main()
