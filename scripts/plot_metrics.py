#!/usr/bin/env python3
"""plot_metrics.py — the training and validation loss of a run as a PNG.

    scripts/plot_metrics.py METRICS.jsonl OUT.png [--title TEXT] [--width 800] [--height 450]
    scripts/plot_metrics.py METRICS.jsonl --summary

Reads the training binary's --metrics file (one JSON object per step:
"loss", and "val_loss" after a validation; stop records are skipped) and
draws the training loss as a line (blue) and the validation loss as points
joined by a line (orange), with the step on the x axis and the loss on the y
axis, grid lines and labelled ticks.  Standard library only: the PNG is
written with zlib, the labels with a small built-in bitmap font.

The runtime writes a non-finite number as null: a step that
--skip-nonfinite skipped has "loss": null (and "grad_norm": null), and a
validation may give "val_loss": null.  Such points are left out (the line
breaks there) and counted in the summary; fields the plot does not use
(grad_norm, lr, ...) may be null or absent.  A last line without its
newline (a run killed while writing it) is skipped with a warning; any
other line that is not a JSON object, or a "step", "loss" or "val_loss"
that is neither a number nor null, is refused naming the line.

--summary prints what the file holds (steps, losses, validations, skipped
points) and writes no image.  OUT is written to OUT.tmp first and renamed;
it is refused before any work when it (or OUT.tmp) is the metrics file
itself: two paths are the same file when both exist with one device and
inode (hard and symbolic links included), or, when neither exists, when
their directories are one and the names agree.  Exit status: 0 done, 1 a
refused input or output (one line on standard error), 2 a bad command line.
"""
import argparse
import json
import math
import os
import stat
import struct
import sys
import zlib

# 5 x 7 glyphs, one string of 7 rows of 5 bits each (MSB left).
FONT = {
    "0": "01110 10001 10011 10101 11001 10001 01110", "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111", "3": "11110 00001 00001 01110 00001 00001 11110",
    "4": "00010 00110 01010 10010 11111 00010 00010", "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110", "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110", "9": "01110 10001 10001 01111 00001 00010 01100",
    ".": "00000 00000 00000 00000 00000 01100 01100", "-": "00000 00000 00000 11111 00000 00000 00000",
    " ": "00000 00000 00000 00000 00000 00000 00000", ":": "00000 01100 01100 00000 01100 01100 00000",
    "(": "00010 00100 01000 01000 01000 00100 00010", ")": "01000 00100 00010 00010 00010 00100 01000",
    ",": "00000 00000 00000 00000 01100 00100 01000", "/": "00001 00010 00010 00100 01000 01000 10000",
    "=": "00000 00000 11111 00000 11111 00000 00000", "_": "00000 00000 00000 00000 00000 00000 11111", "+": "00000 00100 00100 11111 00100 00100 00000",
}
LETTERS = {
    "a": "00000 00000 01110 00001 01111 10001 01111", "b": "10000 10000 10110 11001 10001 10001 11110",
    "c": "00000 00000 01110 10000 10000 10001 01110", "d": "00001 00001 01101 10011 10001 10001 01111",
    "e": "00000 00000 01110 10001 11111 10000 01110", "f": "00110 01001 01000 11100 01000 01000 01000",
    "g": "00000 01111 10001 10001 01111 00001 01110", "h": "10000 10000 10110 11001 10001 10001 10001",
    "i": "00100 00000 01100 00100 00100 00100 01110", "j": "00010 00000 00110 00010 00010 10010 01100",
    "k": "10000 10000 10010 10100 11000 10100 10010", "l": "01100 00100 00100 00100 00100 00100 01110",
    "m": "00000 00000 11010 10101 10101 10001 10001", "n": "00000 00000 10110 11001 10001 10001 10001",
    "o": "00000 00000 01110 10001 10001 10001 01110", "p": "00000 00000 11110 10001 11110 10000 10000",
    "q": "00000 00000 01101 10011 01111 00001 00001", "r": "00000 00000 10110 11001 10000 10000 10000",
    "s": "00000 00000 01110 10000 01110 00001 11110", "t": "01000 01000 11100 01000 01000 01001 00110",
    "u": "00000 00000 10001 10001 10001 10011 01101", "v": "00000 00000 10001 10001 10001 01010 00100",
    "w": "00000 00000 10001 10001 10101 10101 01010", "x": "00000 00000 10001 01010 00100 01010 10001",
    "y": "00000 00000 10001 10001 01111 00001 01110", "z": "00000 00000 11111 00010 00100 01000 11111",
}
FONT.update(LETTERS)

WHITE, BLACK, GREY = (255, 255, 255), (40, 40, 40), (225, 225, 225)
BLUE, ORANGE = (31, 119, 180), (255, 127, 14)


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(bytes(WHITE) * (w * h))

    def set(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, width=1):
        """Bresenham, thickened by drawing width x width squares."""
        if not all(map(math.isfinite, (x0, y0, x1, y1))):
            return
        x0, y0, x1, y1 = (int(round(min(max(v, -lim), 2 * lim))) for v, lim in
                          ((x0, self.w), (y0, self.h), (x1, self.w), (y1, self.h)))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            for a in range(width):
                for b in range(width):
                    self.set(x0 + a - width // 2, y0 + b - width // 2, c)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def dot(self, x, y, c, r=3):
        if not (math.isfinite(x) and math.isfinite(y)):
            return
        for a in range(-r, r + 1):
            for b in range(-r, r + 1):
                if a * a + b * b <= r * r:
                    self.set(int(round(x)) + a, int(round(y)) + b, c)

    def text(self, x, y, s, c=BLACK, scale=2):
        """Left-aligned at (x, y) = the top-left corner."""
        for ch in s:
            g = FONT.get(ch, FONT.get(ch.lower(), FONT[" "]))
            for r, row in enumerate(g.split()):
                for k, bit in enumerate(row):
                    if bit == "1":
                        for a in range(scale):
                            for b in range(scale):
                                self.set(x + k * scale + a, y + r * scale + b, c)
            x += 6 * scale

    def png(self, path):
        """Written to path.tmp, then renamed over path."""
        raw = b"".join(b"\x00" + bytes(self.px[3 * y * self.w:3 * (y + 1) * self.w]) for y in range(self.h))

        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)) +
                        chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
            os.replace(tmp, path)
        except BaseException as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if isinstance(e, OSError):
                raise PlotError("%s: cannot write: %s" % (path, e.strerror or e))
            raise


class PlotError(Exception):
    pass


def nice_ticks(lo, hi, n=6):
    """Round tick values covering [lo, hi] (none when the range is degenerate)."""
    span = hi - lo
    if not (math.isfinite(span) and span > 0):
        return []
    step = 10.0 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    if not (math.isfinite(step) and step > 0) or not math.isfinite(lo / step):
        return []
    first = math.ceil(lo / step) * step
    ticks = []
    for i in range(4 * n):  # bounded: a step lost in rounding cannot loop forever
        v = first + i * step
        if v > hi + 1e-9 * span:
            break
        ticks.append(round(v, 10))
    return ticks


def fmt(v):
    a = abs(v)
    if a and (a >= 1e6 or a < 1e-3):
        return "%.2g" % v
    return ("%.0f" % v) if a >= 100 or v == int(v) else ("%.2f" % v).rstrip("0").rstrip(".")


def axis(lo, hi, pad):
    """The drawn range of values lo..hi: widened when flat, padded by a
    fraction of its width; an error when it does not fit in a double."""
    mag = max(abs(lo), abs(hi))
    w = hi - lo
    if not w > mag * 1e-9:  # one value, or values too close to tell apart
        w = mag * 0.1 if mag > 0 else 1.0
        mid = lo / 2 + hi / 2
        lo, hi = mid - w / 2, mid + w / 2
    lo, hi = lo - pad * w, hi + pad * w
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(hi - lo) and hi > lo):
        return None
    return lo, hi


# ---- reading the metrics file ----------------------------------------------

def same_file(a, b):
    """Both exist with one device and inode, or neither exists and their
    directories are one with the same last name (the binaries' rule)."""
    def st(p):
        try:
            return os.stat(p)
        except (OSError, ValueError):
            return None
    sa, sb = st(a), st(b)
    if sa or sb:
        return bool(sa and sb and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino))
    pa, pb = st(os.path.dirname(a) or "."), st(os.path.dirname(b) or ".")
    return bool(pa and pb and (pa.st_dev, pa.st_ino) == (pb.st_dev, pb.st_ino)
                and os.path.basename(a) == os.path.basename(b))


def number(r, key, where, nullable):
    """r[key] as a finite float; None for null, NaN, Infinity or out of range
    (when nullable); a PlotError for any other value."""
    v = r.get(key)
    if isinstance(v, bool) or not (v is None or isinstance(v, (int, float))):
        raise PlotError("%s: \"%s\" is %s, not a number" % (where, key, json.dumps(v)[:40]))
    if v is not None:
        try:
            v = float(v)
        except OverflowError:
            v = None
    if v is not None and not math.isfinite(v):
        v = None
    if v is None and not nullable:
        raise PlotError("%s: \"%s\" is not a finite number" % (where, key))
    return v


def read_bytes(path):
    """The whole file; refused when missing, a directory or not a regular
    file (a FIFO would block).  Also plot_assignments.py's."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise PlotError("%s: no such file" % path)
    except (OSError, ValueError) as e:
        raise PlotError("%s: cannot read: %s" % (path, getattr(e, "strerror", None) or e))
    if stat.S_ISDIR(st.st_mode):
        raise PlotError("%s: is a directory" % path)
    if not stat.S_ISREG(st.st_mode):
        raise PlotError("%s: not a regular file (a FIFO, socket or device)" % path)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise PlotError("%s: cannot read: %s" % (path, e.strerror or e))


def read_metrics(path):
    """(train, val, counts): (step, value or None) pairs in file order, and
    what was skipped."""
    data = read_bytes(path)
    lines = data.split(b"\n")
    cut = lines.pop() if lines else b""  # the bytes after the last newline: a line cut short, or nothing
    train, val, counts = [], [], {"events": 0, "other": 0, "cut": 0}
    for n, raw in enumerate(lines + ([cut] if cut.strip() else []), 1):
        if not raw.strip():
            continue
        where = "%s:%d" % (path, n)
        last = n > len(lines)
        try:
            r = json.loads(raw.decode("utf-8"))
            why = None if isinstance(r, dict) else "not a JSON object"
        except UnicodeDecodeError as e:
            why = "not UTF-8 text (byte %d)" % e.start
        except RecursionError:
            why = "not JSON: nested too deeply"
        except ValueError as e:
            why = ("not JSON: %s (column %d)" % (e.msg, e.colno) if isinstance(e, json.JSONDecodeError)
                   else "not JSON: %s" % " ".join(str(e).split()))
        if why and last:
            counts["cut"] += 1
            print("plot_metrics: warning: %s: the last line has no newline and is %s: skipped (a run killed "
                  "while writing it)" % (where, why), file=sys.stderr)
            continue
        if why:
            raise PlotError("%s: %s" % (where, why))
        if "event" in r:
            counts["events"] += 1
            continue
        if "loss" not in r:
            counts["other"] += 1
            continue
        step = number(r, "step", where, nullable=False)
        train.append((step, number(r, "loss", where, nullable=True)))
        if "val_loss" in r:
            val.append((step, number(r, "val_loss", where, nullable=True)))
    return train, val, counts


def runs(points):
    """The finite points as runs of neighbours (a null breaks the line)."""
    out, cur = [], []
    for s, v in points:
        if v is None:
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append((s, v))
    if cur:
        out.append(cur)
    return out


def summary(path, train, val, counts):
    fin = [(s, v) for s, v in train if v is not None]
    vfin = [(s, v) for s, v in val if v is not None]
    parts = ["%s: %d training step(s)" % (path, len(train))]
    if train:
        parts[0] += " (steps %s to %s)" % (fmt(min(s for s, _ in train)), fmt(max(s for s, _ in train)))
    if fin:
        lo = min(fin, key=lambda p: p[1])
        parts.append("loss %.6g -> %.6g, lowest %.6g at step %s" % (fin[0][1], fin[-1][1], lo[1], fmt(lo[0])))
    if len(fin) < len(train):
        parts.append("%d non-finite loss(es) (null) left out" % (len(train) - len(fin)))
    if val:
        parts.append("%d validation(s)" % len(val))
    if vfin:
        best = min(vfin, key=lambda p: p[1])
        parts.append("best val_loss %.6g at step %s" % (best[1], fmt(best[0])))
    if len(vfin) < len(val):
        parts.append("%d non-finite val_loss(es) (null) left out" % (len(val) - len(vfin)))
    if counts["events"]:
        parts.append("%d event record(s)" % counts["events"])
    if counts["cut"]:
        parts.append("a cut-short last line skipped")
    return "; ".join(parts)


IMAGE_EXTS = (".svg", ".pdf", ".jpg", ".jpeg", ".gif", ".eps", ".ps", ".webp", ".tif", ".tiff", ".bmp")


def check_output(metrics, out):
    """OUT and OUT.tmp against the metrics file, before any work."""
    if not out or out.endswith("/"):
        raise PlotError("%r: not a file name" % out)
    if os.path.splitext(out)[1].lower() in IMAGE_EXTS:
        raise PlotError("%s: only PNG is written: name the output .png" % out)
    try:
        st = os.stat(out)
    except (OSError, ValueError):
        st = None
    if st and stat.S_ISDIR(st.st_mode):
        raise PlotError("%s: is a directory" % out)
    if st and not stat.S_ISREG(st.st_mode):
        raise PlotError("%s: not a regular file" % out)
    parent = os.path.dirname(out) or "."
    if not os.path.isdir(parent):
        raise PlotError("%s: no directory %s" % (out, parent))
    for mine, name in ((out, out), (out + ".tmp", "%s: its temporary file %s.tmp" % (out, out))):
        if same_file(mine, metrics):
            raise PlotError("%s is the same file as the metrics file %s: the plot would overwrite it"
                            % (name, metrics))


def plot(a, train, val):
    fin = [(s, v) for s, v in train if v is not None]
    vfin = [(s, v) for s, v in val if v is not None]
    if not fin:
        raise PlotError("%s: no finite training loss among %d step record(s)" % (a.metrics, len(train)))
    c = Canvas(a.width, a.height)
    left, right, top, bottom = 80, a.width - 20, 40, a.height - 60
    xs = [s for s, _ in train]
    ys = [v for _, v in fin] + [v for _, v in vfin]
    xr, yr = axis(min(xs), max(xs), 0.0), axis(min(ys), max(ys), 0.05)
    if not xr or not yr:
        raise PlotError("%s: the %s span too wide a range to plot" % (a.metrics, "steps" if not xr else "losses"))
    (x0, x1), (y0, y1) = xr, yr

    def X(s):
        return left + (s - x0) / (x1 - x0) * (right - left)

    def Y(v):
        return bottom - (v - y0) / (y1 - y0) * (bottom - top)

    for t in nice_ticks(y0, y1):
        c.line(left, Y(t), right, Y(t), GREY)
        label = fmt(t)
        c.text(left - 8 - 12 * len(label), int(Y(t)) - 7, label)
    for t in nice_ticks(x0, x1):
        c.line(X(t), top, X(t), bottom, GREY)
        label = fmt(t)
        c.text(int(X(t)) - 6 * len(label), bottom + 10, label)
    c.line(left, top, left, bottom, BLACK)
    c.line(left, bottom, right, bottom, BLACK)
    c.line(left, top, right, top, BLACK)
    c.line(right, top, right, bottom, BLACK)
    for run in runs(train):
        for (sa, va), (sb, vb) in zip(run, run[1:]):
            c.line(X(sa), Y(va), X(sb), Y(vb), BLUE, 2)
        if len(run) == 1:
            c.dot(X(run[0][0]), Y(run[0][1]), BLUE, 1)
    for run in runs(val):
        for (sa, va), (sb, vb) in zip(run, run[1:]):
            c.line(X(sa), Y(va), X(sb), Y(vb), ORANGE, 2)
    for s, v in vfin:
        c.dot(X(s), Y(v), ORANGE)
    c.text(10, 10, (a.title or "loss")[:(a.width - 20) // 12])
    c.text((left + right) // 2 - 24, a.height - 28, "step")
    c.line(right - 230, top + 18, right - 200, top + 18, BLUE, 3)
    c.text(right - 192, top + 11, "train loss", BLUE)
    if val:
        c.line(right - 230, top + 42, right - 200, top + 42, ORANGE, 3)
        c.dot(right - 215, top + 42, ORANGE)
        c.text(right - 192, top + 35, "val loss", ORANGE)
    c.png(a.out)


def image_arguments(p):
    """OUT and the options every plot script shares (after its input)."""
    p.add_argument("out", nargs="?", help="the PNG to write (via OUT.tmp)")
    p.add_argument("--summary", action="store_true", help="print what the file holds; write no image")
    p.add_argument("--title", default="")
    p.add_argument("--width", type=int, default=800, help="pixels, 320 to 5000 (default 800)")
    p.add_argument("--height", type=int, default=450, help="pixels, 160 to 5000 (default 450)")


def check_image_arguments(p, a):
    if not 320 <= a.width <= 5000 or not 160 <= a.height <= 5000:
        p.error("--width %d --height %d: the width runs from 320 to 5000 pixels, the height from 160 to 5000"
                % (a.width, a.height))
    if a.out is None and not a.summary:
        p.error("name the PNG to write (OUT), or pass --summary")


def main(argv=None):
    try:
        sys.stdout.reconfigure(errors="backslashreplace")
    except (AttributeError, ValueError):
        pass
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Null (non-finite) losses are left out; a cut-short last line is skipped "
                                "with a warning; OUT must not be the metrics file.")
    p.add_argument("metrics", help="the training binary's --metrics file")
    image_arguments(p)
    a = p.parse_args(argv)
    check_image_arguments(p, a)
    def work():
        if a.out is not None:
            check_output(a.metrics, a.out)
        train, val, counts = read_metrics(a.metrics)
        if not train:
            raise PlotError("%s: no step records" % a.metrics)
        if a.summary:
            print(summary(a.metrics, train, val, counts))
        if a.out is not None:
            plot(a, train, val)
            nval = sum(v is not None for _, v in val)
            print("%s: %d training steps%s" % (a.out, len(train), ", %d validations" % nval if nval else ""))

    return guarded("plot_metrics", work)


def guarded(tool, work):
    """Runs work(); a refused input or output, running out of memory or an
    interrupt becomes one line on standard error and the exit status (also
    plot_assignments.py's)."""
    try:
        work()
    except PlotError as e:
        print("%s: error: %s" % (tool, e), file=sys.stderr)
        return 1
    except MemoryError:
        print("%s: error: out of memory" % tool, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("%s: interrupted" % tool, file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
