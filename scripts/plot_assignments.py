#!/usr/bin/env python3
"""plot_assignments.py — the rank groups a batch_aware dynamic run chose, per micro-step, as a PNG.

    scripts/plot_assignments.py ASSIGN.jsonl OUT.png [--title TEXT] [--width 800] [--height 450]
                                [--last N] [--no-imbalance]
    scripts/plot_assignments.py ASSIGN.jsonl --summary [--last N]

Reads the training binary's --assignments file (layout { batch_aware
dynamic }): one JSON object per micro-step with "step", "micro",
"imbalance", "assign_ms" and "groups", each group a rank range "first",
"size" with its documents as "pieces" [[src, len], ...] ("cost" and other
fields are not used).  It draws one column per micro-step, in file order
(the tick labels are step numbers), and the ranks 0..N-1 from the top
down: each group a rectangle over its ranks, coloured by its size (one
fixed colour per size, "groups of K" in the legend), groups parted by a
thin white line.  Under it a small panel draws the imbalance (max over
mean of the groups' predicted per-rank cost) as a line; --no-imbalance
leaves it out.  Standard library only: the PNG writer, the font and the
file checks are plot_metrics.py's.

--last N keeps the last N micro-steps (the summary too).  The image has
at most one micro-step per pixel column: a longer run draws its last
micro-steps that fit, with a note.  --summary prints the micro-steps, the
ranks, how often each partition of the ranks occurred ("3+2+1: 5
micro-steps", sizes largest first), the mean and max imbalance and
assign_ms, and the tokens per group size, and writes no image.

A null "imbalance" or "assign_ms" (the runtime writes a non-finite number
as null) is left out of the line and the means.  A last line without its
newline (a run killed while writing it) is skipped with a warning; any
other line that is not a JSON object, lacks a field, has groups that do
not cover every rank exactly once, or covers another number of ranks than
the first line, is refused naming file:line.  OUT is written to OUT.tmp
and renamed; it is refused before any work when it (or OUT.tmp) is the
assignments file (plot_metrics.py's rule).  Exit status: 0 done, 1 a
refused input or output (one line on standard error), 2 a bad command line.
"""
import argparse
import collections
import json
import math
import os
import sys

# The PNG writer, the bitmap font and the same-file rule live in plot_metrics.py, next to this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_metrics as pm  # noqa: E402

PlotError = pm.PlotError
WHITE, BLACK, GREY = pm.WHITE, pm.BLACK, pm.GREY
# One colour per group size, the same in every image (size K takes entry K-1, cycling past 10),
# so that plots of two runs can be compared by eye.
PALETTE = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
           (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207))
LIMIT = 2 ** 53  # whole numbers above this do not survive a double (the runtime's JSON numbers)


def plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def colour(size):
    return PALETTE[(size - 1) % len(PALETTE)]


# ---- reading the assignments file ------------------------------------------

def parse(raw):
    """(object, None), or (None, why the line is not a JSON object)."""
    try:
        r = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return None, "not UTF-8 text (byte %d)" % e.start
    except RecursionError:
        return None, "not JSON: nested too deeply"
    except json.JSONDecodeError as e:
        return None, "not JSON: %s (column %d)" % (e.msg, e.colno)
    except ValueError as e:  # an integer too long to convert
        return None, "not JSON: %s" % " ".join(str(e).split())
    return (r, None) if isinstance(r, dict) else (None, "not a JSON object")


def is_whole(v, lo):
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return not isinstance(v, bool) and isinstance(v, int) and lo <= v <= LIMIT


def field(obj, key, where):
    if key not in obj:
        raise PlotError('%s: no "%s"' % (where, key))
    return obj[key]


def whole(obj, key, where, lo):
    v = field(obj, key, where)
    if not is_whole(v, lo):
        raise PlotError('%s: "%s" is %s, not a whole number from %d' % (where, key, json.dumps(v)[:40], lo))
    return int(v)


def read_group(g, where):
    """(first, size, tokens) of one group; tokens is the sum of its pieces' lengths."""
    if not isinstance(g, dict):
        raise PlotError("%s: is %s, not a JSON object" % (where, json.dumps(g)[:40]))
    first, size = whole(g, "first", where, 0), whole(g, "size", where, 1)
    pieces = field(g, "pieces", where)
    if not isinstance(pieces, list):
        raise PlotError('%s: "pieces" is %s, not a list' % (where, json.dumps(pieces)[:40]))
    for k, p in enumerate(pieces):
        if not (isinstance(p, list) and len(p) == 2 and is_whole(p[0], 0) and is_whole(p[1], 0)):
            raise PlotError("%s: pieces[%d] is %s, not [src, len]" % (where, k, json.dumps(p)[:40]))
    return first, size, sum(int(p[1]) for p in pieces)


def tile(groups, where):
    """N, when the groups (sorted by first rank) cover the ranks 0..N-1 exactly once each."""
    end = 0
    for first, size, _ in groups:
        if first != end:
            ranges = " ".join("[%d,%d)" % (f, f + s) for f, s, _ in groups[:8])
            why = "rank %d is in no group" % end if first > end else "rank %d is in two groups" % first
            raise PlotError("%s: the groups do not tile the ranks: %s (%s%s)"
                            % (where, why, ranges, " ..." if len(groups) > 8 else ""))
        end = first + size
    return end


def read_record(r, where):
    rec = {"step": whole(r, "step", where, 1), "micro": whole(r, "micro", where, 0)}
    for key in ("imbalance", "assign_ms"):
        field(r, key, where)  # present, though it may be null
        rec[key] = pm.number(r, key, where, nullable=True)
    groups = field(r, "groups", where)
    if not isinstance(groups, list) or not groups:
        raise PlotError('%s: "groups" is %s, not a list of groups' % (where, json.dumps(groups)[:40]))
    rec["groups"] = sorted(read_group(g, "%s: groups[%d]" % (where, k)) for k, g in enumerate(groups))
    rec["ranks"] = tile(rec["groups"], where)
    return rec


def read_assignments(path):
    """(records in file order, the rank count, whether a cut-short last line was skipped)."""
    lines = pm.read_bytes(path).split(b"\n")
    cut = lines.pop()  # the bytes after the last newline: a line cut short, or nothing
    recs, ranks, skipped = [], None, False
    for n, raw in enumerate(lines + ([cut] if cut.strip() else []), 1):
        if not raw.strip():
            continue
        where = "%s:%d" % (path, n)
        r, why = parse(raw)
        if why and n > len(lines):
            skipped = True
            print("plot_assignments: warning: %s: the last line has no newline and is %s: skipped (a run "
                  "killed while writing it)" % (where, why), file=sys.stderr)
            continue
        if why:
            raise PlotError("%s: %s" % (where, why))
        rec = read_record(r, where)
        if ranks is None:
            ranks, ranks_line = rec["ranks"], n
        elif rec["ranks"] != ranks:
            raise PlotError("%s: the groups cover %d ranks, but those of line %d cover %d"
                            % (where, rec["ranks"], ranks_line, ranks))
        recs.append(rec)
    return recs, ranks, skipped


# ---- the summary -----------------------------------------------------------

def partition(rec):
    return "+".join(str(s) for s in sorted((s for _, s, _ in rec["groups"]), reverse=True))


def stat_line(recs, key, form, unit=""):
    """'KEY: mean M, max X at step S (micro U)', the nulls counted."""
    vals = [(r[key], r) for r in recs if r[key] is not None]
    if not vals:
        return "%s: none (all null)" % key
    top, at = max(vals, key=lambda p: p[0])
    text = "%s: mean %s%s, max %s%s at step %d (micro %d)" % (
        key, form % (sum(v for v, _ in vals) / len(vals)), unit, form % top, unit, at["step"], at["micro"])
    if len(vals) < len(recs):
        text += "; %d null left out" % (len(recs) - len(vals))
    return text


def token_lines(recs):
    """Per group size: how many groups, their tokens, per group and per rank."""
    count, tokens = collections.Counter(), collections.Counter()
    for r in recs:
        for _, size, t in r["groups"]:
            count[size] += 1
            tokens[size] += t
    return ["  groups of %d: %s, %s (%s per group, %s per rank)"
            % (k, plural(count[k], "group"), plural(tokens[k], "token"), pm.fmt(tokens[k] / count[k]),
               pm.fmt(tokens[k] / count[k] / k)) for k in sorted(count)]


def summary(path, recs, total, ranks, skipped):
    head = "%s: %s" % (path, plural(len(recs), "micro-step"))
    if len(recs) < total:
        head += " (the last %d of %d)" % (len(recs), total)
    steps = [r["step"] for r in recs]
    lines = [head + ", steps %d to %d, %s" % (min(steps), max(steps), plural(ranks, "rank")),
             "partitions of the ranks into groups (sizes, largest first):"]
    parts = collections.Counter(partition(r) for r in recs)
    lines += ["  %s: %s" % (p, plural(n, "micro-step"))
              for p, n in sorted(parts.items(), key=lambda pn: (-pn[1], pn[0]))]
    lines += [stat_line(recs, "imbalance", "%.6g"), stat_line(recs, "assign_ms", "%.3g", " ms"),
              "tokens per group size:"]
    lines += token_lines(recs)
    if skipped:
        lines.append("a cut-short last line skipped")
    return "\n".join(lines)


# ---- drawing ---------------------------------------------------------------

def fill(c, x0, y0, x1, y1, col):
    """The rectangle [x0, x1) x [y0, y1), clipped; a row at a time, as Canvas.set per pixel is slow."""
    x0, x1 = max(int(x0), 0), min(int(x1), c.w)
    if x1 <= x0:
        return
    row = bytes(col) * (x1 - x0)
    for y in range(max(int(y0), 0), min(int(y1), c.h)):
        i = 3 * (y * c.w + x0)
        c.px[i:i + len(row)] = row


def box(c, x0, y0, x1, y1):
    for a, b, d, e in ((x0, y0, x1, y0), (x0, y1, x1, y1), (x0, y0, x0, y1), (x1, y0, x1, y1)):
        c.line(a, b, d, e, BLACK)


def nice_stride(need):
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is at least need."""
    base = 1
    while True:
        for m in (1, 2, 5):
            if base * m >= need:
                return base * m
        base *= 10


def layout(a, sizes):
    """The panels' edges and the legend's text scale: the legend takes a column on the right, at
    half size when the full one would take more than a third of the width."""
    longest = max(len("groups of %d" % k) for k in sizes + [0])
    scale = 2 if 40 + 12 * longest <= a.width // 3 else 1
    f = {"left": 80, "right": a.width - (48 + 6 * scale * longest), "top": 48, "bottom": a.height - 56,
         "scale": scale}
    f["groups"] = (f["top"], f["bottom"])
    if a.imbalance:
        split = f["top"] + (f["bottom"] - f["top"]) * 3 // 4
        f["groups"], f["imbalance"] = (f["top"], split - 6), (split + 6, f["bottom"])
    return f


def draw_groups(c, recs, ranks, X, top, bottom):
    """One column per micro-step, one rectangle per group; white lines part groups (and columns)
    only where rows and columns are wide enough to keep their colour visible."""
    def Y(rank):
        return top + round(rank * (bottom - top) / ranks)
    row_h = (bottom - top) / ranks
    for i, r in enumerate(recs):
        x0, x1 = X(i), X(i + 1)
        if x1 - x0 >= 4:
            x1 -= 1
        for first, size, _ in r["groups"]:
            y0 = Y(first)
            fill(c, x0, y0, x1, max(Y(first + size), y0 + 1), colour(size))
            if first and row_h >= 3:
                fill(c, x0, y0, x1, y0 + 1, WHITE)
    box(c, X(0), top, X(len(recs)), bottom)


def draw_ranks(c, ranks, left, top, bottom):
    """Rank numbers down the left edge, every rank when there is room, else every 2nd, 5th, 10th, ..."""
    row_h = (bottom - top) / ranks
    stride = nice_stride(math.ceil(16 / row_h))
    for r in range(0, ranks, stride):
        label = str(r)
        c.text(left - 8 - 12 * len(label), max(int(top + (r + 0.5) * row_h) - 7, top), label)  # clear of "rank"
    c.text(left - 8 - 48, top - 18, "rank")


def step_spans(recs):
    """[step, first column, end column] for each run of micro-steps of one step."""
    spans = []
    for i, r in enumerate(recs):
        if spans and spans[-1][0] == r["step"]:
            spans[-1][2] = i + 1
        else:
            spans.append([r["step"], i, i + 1])
    return spans


def draw_steps(c, recs, X, y):
    """Step numbers under the columns: multiples of a round stride so that they fit, none overlapping
    (a file appended to by a resumed run starts its steps again)."""
    spans = step_spans(recs)
    widest = 12 * max(len(str(s)) for s, _, _ in spans) + 12
    stride = nice_stride(math.ceil(len(spans) * widest / max(X(len(recs)) - X(0), 1)))
    free = -10 ** 9  # the first x a label may use
    for s, i, j in spans:
        label = str(s)
        x = (X(i) + X(j)) // 2 - 6 * len(label)
        if (s % stride and len(spans) > 1) or x < free:
            continue
        c.line(X(i), y - 8, X(i), y - 4, BLACK)
        c.text(x, y, label)
        free = x + 12 * len(label) + 12


def draw_imbalance(c, recs, X, top, bottom):
    box(c, X(0), top, X(len(recs)), bottom)
    vals = [(i, r["imbalance"]) for i, r in enumerate(recs)]
    fin = [v for _, v in vals if v is not None]
    yr = pm.axis(min(fin), max(fin), 0.1) if fin else None
    if not yr:
        c.text(X(0) + 6, top + 4, "no finite imbalance" if not fin else "imbalance out of range", scale=1)
        return
    y0, y1 = yr

    def Y(v):
        return bottom - (v - y0) / (y1 - y0) * (bottom - top)
    if bottom - top >= 40:  # room for tick labels without overlap
        for t in pm.nice_ticks(y0, y1, 3):
            c.line(X(0) + 1, Y(t), X(len(recs)) - 1, Y(t), GREY)
            label = "%.4g" % t
            c.text(X(0) - 8 - 12 * len(label), int(Y(t)) - 7, label)
    for run in pm.runs(vals):
        pts = [((X(i) + X(i + 1)) / 2, Y(v)) for i, v in run]
        for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
            c.line(xa, ya, xb, yb, BLACK, 2)
        if len(pts) == 1:
            c.dot(pts[0][0], pts[0][1], BLACK, 1)


def draw_legend(c, sizes, f):
    s, x = f["scale"], f["right"] + 16
    top, bottom = f["groups"]
    for k, size in enumerate(sizes):
        y = top + 4 + k * 11 * s
        if y + 7 * s > bottom:  # more sizes than the panel is tall: the rest stay unnamed
            break
        fill(c, x, y, x + 8 * s, y + 7 * s, colour(size))
        c.text(x + 12 * s, y, "groups of %d" % size, BLACK, s)
    if "imbalance" in f:
        y = f["imbalance"][0] + 4
        c.line(x, y + 7 * s // 2, x + 8 * s, y + 7 * s // 2, BLACK, 2)
        c.text(x + 12 * s, y, "imbalance", BLACK, s)


def plot(a, recs, total, ranks):
    """Draws the last micro-steps that fit one per pixel column; returns how many."""
    sizes = sorted({s for r in recs for _, s, _ in r["groups"]})
    f = layout(a, sizes)
    left, right = f["left"], f["right"]
    recs = recs[-(right - left):]

    def X(i):
        return left + i * (right - left) // len(recs)
    c = pm.Canvas(a.width, a.height)
    draw_groups(c, recs, ranks, X, *f["groups"])
    draw_ranks(c, ranks, left, *f["groups"])
    if "imbalance" in f:
        draw_imbalance(c, recs, X, *f["imbalance"])
    draw_steps(c, recs, X, f["bottom"] + 12)
    draw_legend(c, sizes, f)
    c.text(10, 10, (a.title or "rank groups per micro-step")[:(a.width - 20) // 12])
    axis = "step" if len(recs) == total else "step (the last %d of %d micro-steps)" % (len(recs), total)
    s = 2 if 12 * len(axis) <= a.width - 8 else 1  # the note at half size rather than cut off
    c.text(max((left + right) // 2 - 3 * s * len(axis), 4), a.height - 24, axis, BLACK, s)
    c.png(a.out)
    return len(recs)


# ---- the command line ------------------------------------------------------

def check_output(src, out):
    """OUT and OUT.tmp against the assignments file, before any work; then plot_metrics' checks
    (a .png name, not a directory, its directory exists), whose own same-file test cannot fire."""
    if not out or out.endswith("/"):
        raise PlotError("%r: not a file name" % out)
    for mine, name in ((out, out), (out + ".tmp", "%s: its temporary file %s.tmp" % (out, out))):
        if pm.same_file(mine, src):
            raise PlotError("%s is the same file as the assignments file %s: the plot would overwrite it"
                            % (name, src))
    pm.check_output(src, out)


def arguments(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Null imbalances are left out; a cut-short last line is skipped with a "
                                "warning; OUT must not be the assignments file.")
    p.add_argument("assignments", help="the training binary's --assignments file")
    pm.image_arguments(p)
    p.add_argument("--last", type=int, metavar="N", help="only the last N micro-steps (default: all)")
    p.add_argument("--imbalance", action=argparse.BooleanOptionalAction, default=True,
                   help="the imbalance panel under the groups (default: drawn)")
    a = p.parse_args(argv)
    pm.check_image_arguments(p, a)
    if a.last is not None and a.last < 1:
        p.error("--last %d: give at least 1 micro-step" % a.last)
    return a


def run(a):
    if a.out is not None:
        check_output(a.assignments, a.out)
    recs, ranks, skipped = read_assignments(a.assignments)
    if not recs:
        raise PlotError("%s: no micro-step records" % a.assignments)
    total = len(recs)
    recs = recs[-a.last:] if a.last else recs
    if a.summary:
        print(summary(a.assignments, recs, total, ranks, skipped))
    if a.out is not None:
        drawn = plot(a, recs, total, ranks)
        if drawn < len(recs):
            print("plot_assignments: note: only the last %d of %d micro-steps drawn (one pixel column each); "
                  "--last or --width changes that" % (drawn, len(recs)), file=sys.stderr)
        sizes = sorted({s for r in recs[-drawn:] for _, s, _ in r["groups"]})
        print("%s: %s, %s, groups of %s" % (a.out, plural(drawn, "micro-step"), plural(ranks, "rank"),
                                            ", ".join(map(str, sizes))))


def main(argv=None):
    try:
        sys.stdout.reconfigure(errors="backslashreplace")
    except (AttributeError, ValueError):
        pass
    a = arguments(argv)
    return pm.guarded("plot_assignments", lambda: run(a))


if __name__ == "__main__":
    sys.exit(main())
