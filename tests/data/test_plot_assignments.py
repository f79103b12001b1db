#!/usr/bin/env python3
"""data.plot_assignments: scripts/plot_assignments.py draws a --assignments file as a PNG.

A synthetic file of 6 ranks and 12 micro-steps (the partitions 3+2+1, also
written as 1+2+3 and with its groups out of order, 3+3, 2+2+2, six groups
of 1 and one of 6; one null imbalance) is drawn and the PNG decoded here
(zlib, filter type 0 rows): its size, the colour of "groups of 3" and of
the other sizes present, and in the first column the group of ranks 0-2
above that of 3-4 above rank 5.  --summary counts the partitions and the
tokens per group size; --last keeps the last micro-steps; a run longer
than the image is wide draws its last micro-steps with a note.  Refused,
naming file:line and writing nothing: a line that is not JSON, a missing
field, groups that leave a rank out or cover one twice, a line with
another rank count than the first; a cut-short last line is skipped with a
warning.  The output is refused when it is the input (by name, hard or
symbolic link, or through OUT.tmp), the input unchanged.  Standard library
only.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "..", "..", "scripts", "plot_assignments.py")
sys.path.insert(0, HERE)
import test_plot  # noqa: E402  data.plot_metrics's runner
from test_plot import decode, pixels  # noqa: E402  the PNG decoder of data.plot_metrics

# The script's fixed palette: a group of K ranks takes entry K-1.
SIZE_COLOUR = {1: (31, 119, 180), 2: (255, 127, 14), 3: (44, 160, 44), 6: (140, 86, 75)}
PARTITIONS = ([3, 2, 1], [3, 3], [3, 2, 1], [2, 2, 2], [1, 2, 3], [3, 2, 1], [1] * 6, [3, 3], [6],
              [3, 2, 1], [2, 2, 2], [3, 3])


def record(step, micro, sizes, imbalance=1.05, reverse=False):
    """One micro-step as rank 0 writes it: groups tiling the ranks in the order of sizes, 32 tokens a rank."""
    groups, first = [], 0
    for k, size in enumerate(sizes):
        groups.append({"first": first, "size": size, "cost": 1000.0 * size,
                       "pieces": [[100 * step + k, 32 * size - 1], [7, 1]]})
        first += size
    if reverse:  # the tiling does not depend on the order the groups are listed in
        groups.reverse()
    return json.dumps({"step": step, "micro": micro, "imbalance": imbalance, "assign_ms": 0.002,
                       "groups": groups}) + "\n"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def synthetic(d):
    path = os.path.join(d, "a.jsonl")
    write(path, "".join(record(i // 3 + 1, i % 3, sizes, None if i == 7 else 1.0 + i / 100, reverse=(i == 5))
                        for i, sizes in enumerate(PARTITIONS)))
    return path


def plot(*args):
    return test_plot.plot(*args, script=PLOT)


def refused(want, *args, status=1):
    test_plot.refused(want, *args, status=status, script=PLOT)


def drawing(d, path):
    out = os.path.join(d, "a.png")
    r = plot(path, out, "--width", "400", "--height", "300", "--title", "six ranks")
    assert r.returncode == 0, r.stderr
    assert "a.png: 12 micro-steps, 6 ranks, groups of 1, 2, 3, 6" in r.stdout, r.stdout
    w, h, rows = decode(out)
    assert (w, h) == (400, 300), (w, h)
    found = {k: pixels(w, h, rows, c) for k, c in SIZE_COLOUR.items()}
    assert len(found[3]) > 2000, "groups of 3 fill the top half of most columns: %d pixels" % len(found[3])
    assert all(len(p) > 100 for p in found.values()), {k: len(p) for k, p in found.items()}
    # The first micro-step is 3+2+1 from rank 0 down: green above orange above blue in its column.
    x = min(x for x, _ in found[3]) + 2
    ys = {k: [y for px, y in found[k] if px == x] for k in (3, 2, 1)}
    assert ys[3] and ys[2] and ys[1] and max(ys[3]) < min(ys[2]) and max(ys[2]) < min(ys[1]), \
        {k: (min(v), max(v)) for k, v in ys.items() if v}
    assert not os.path.exists(out + ".tmp")
    return len(found[3])


def summary(path):
    r = plot(path, "--summary")
    assert r.returncode == 0 and not r.stderr, r.stderr
    for want in ("a.jsonl: 12 micro-steps, steps 1 to 4, 6 ranks", "  3+2+1: 5 micro-steps", "  3+3: 3 micro-steps",
                 "  2+2+2: 2 micro-steps", "  1+1+1+1+1+1: 1 micro-step", "  6: 1 micro-step",
                 "imbalance: mean ", "max 1.11 at step 4 (micro 2); 1 null left out", "assign_ms: mean 0.002 ms",
                 "groups of 3: 11 groups, 1056 tokens (96 per group, 32 per rank)",
                 "groups of 6: 1 group, 192 tokens (192 per group, 32 per rank)"):
        assert want in r.stdout, (want, r.stdout)
    r = plot(path, "--summary", "--last", "3")
    assert r.returncode == 0 and "12 micro-steps" not in r.stdout, r.stdout
    assert "3 micro-steps (the last 3 of 12), steps 4 to 4" in r.stdout and "3+3: 1 micro-step" in r.stdout, r.stdout


def long_run(d):
    """More micro-steps than pixel columns: the last ones that fit are drawn, with a note."""
    path = os.path.join(d, "long.jsonl")
    write(path, "".join(record(i // 2 + 1, i % 2, PARTITIONS[i % len(PARTITIONS)]) for i in range(500)))
    out = os.path.join(d, "long.png")
    r = plot(path, out, "--width", "320", "--height", "200")
    assert r.returncode == 0 and "note: only the last" in r.stderr, r.stderr
    assert "of 500 micro-steps drawn" in r.stderr, r.stderr
    assert decode(out)[:2] == (320, 200)
    r = plot(path, out, "--last", "40", "--no-imbalance")
    assert r.returncode == 0 and "long.png: 40 micro-steps" in r.stdout and not r.stderr, (r.stdout, r.stderr)


def bad_lines(d, path):
    """Each bad line goes in as line 4 of the good file: refused naming it, nothing written."""
    good = open(path).read().splitlines(True)
    bad, out = os.path.join(d, "bad.jsonl"), os.path.join(d, "bad.png")
    cases = (
        ("not json\n", "not JSON"),
        (record(2, 0, [3, 2, 1]).replace('"first": 3, "size": 2', '"first": 4, "size": 1'),
         "the groups do not tile the ranks: rank 3 is in no group"),
        (record(2, 0, [3, 2, 1]).replace('"first": 3', '"first": 2'),
         "the groups do not tile the ranks: rank 2 is in two groups"),
        (record(2, 0, [3, 2]), "the groups cover 5 ranks, but those of line 1 cover 6"),
        (record(2, 0, [2, 2]), "the groups cover 4 ranks, but those of line 1 cover 6"),
        (record(2, 0, [6]).replace('"groups"', '"grupos"'), 'no "groups"'),
        (record(2, 0, [6]).replace('"size": 6', '"size": 0'), 'groups[0]: "size" is 0, not a whole number from 1'),
        (record(2, 0, [6]).replace("[7, 1]", "[7]"), "groups[0]: pieces[1] is [7], not [src, len]"),
        ('{"step": 1}\n', 'no "micro"'),
        ("[1, 2]\n", "not a JSON object"),
    )
    for line, want in cases:
        write(bad, "".join(good[:3]) + line + "".join(good[3:]))
        refused("bad.jsonl:4: " + want, bad, out)
        assert not os.path.exists(out) and not os.path.exists(out + ".tmp"), "a refused input writes nothing"
    write(bad, "".join(good) + '{"step": 5, "micro": 0, "imbal')  # a run killed while writing
    r = plot(bad, out, "--summary")
    assert r.returncode == 0 and "bad.jsonl:13: the last line has no newline" in r.stderr, r.stderr
    assert "12 micro-steps" in r.stdout and "a cut-short last line skipped" in r.stdout, r.stdout
    write(bad, "\n")
    refused("bad.jsonl: no micro-step records", bad, "--summary")


def aliases(d, path):
    data = open(path).read()
    os.link(path, os.path.join(d, "hard.png"))
    os.symlink("a.jsonl", os.path.join(d, "sym.png"))
    os.mkdir(os.path.join(d, "sub"))
    for out in (path, os.path.join(d, "sub", "..", "a.jsonl"), os.path.join(d, "hard.png"),
                os.path.join(d, "sym.png")):
        refused("is the same file as the assignments file", path, out)
    tmp_named = os.path.join(d, "b.png.tmp")
    write(tmp_named, data)
    refused("its temporary file", tmp_named, os.path.join(d, "b.png"))
    assert open(path).read() == data and open(tmp_named).read() == data, "the inputs are untouched"
    assert not os.path.exists(os.path.join(d, "b.png"))
    refused("only PNG is written", path, os.path.join(d, "a.svg"))
    refused(": is a directory", os.path.join(d, "sub"), "--summary")
    refused("none.jsonl: no such file", os.path.join(d, "none.jsonl"), "--summary")
    refused("name the PNG to write", path, status=2)
    refused("--last 0", path, "--summary", "--last", "0", status=2)
    refused("--width 10", path, os.path.join(d, "x.png"), "--width", "10", status=2)


def check(d):
    path = synthetic(d)
    green = drawing(d, path)
    summary(path)
    long_run(d)
    bad_lines(d, path)
    aliases(d, path)
    print("data.plot_assignments: a 400x300 PNG of 12 micro-steps on 6 ranks with %d pixels of groups of 3; "
          "partitions counted; a long run capped at the width; bad lines named, inputs aliased by OUT refused"
          % green)


def main():
    d = tempfile.mkdtemp()
    try:
        check(d)
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
