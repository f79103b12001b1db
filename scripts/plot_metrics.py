#!/usr/bin/env python3
"""plot_metrics.py — the training and validation loss of a run as a PNG.

    scripts/plot_metrics.py METRICS.jsonl OUT.png [--title TEXT] [--width 800] [--height 450]

Reads the training binary's --metrics file (one JSON object per step:
"loss", and "val_loss" after a validation; stop records are skipped) and
draws the training loss as a line (blue) and the validation loss as points
joined by a line (orange), with the step on the x axis and the loss on the y
axis, grid lines and labelled ticks.  Standard library only: the PNG is
written with zlib, the labels with a small built-in bitmap font.
"""
import argparse
import json
import math
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
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
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
        raw = b"".join(b"\x00" + bytes(self.px[3 * y * self.w:3 * (y + 1) * self.w]) for y in range(self.h))

        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)) +
                    chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def nice_ticks(lo, hi, n=6):
    """Round tick values covering [lo, hi]."""
    span = hi - lo if hi > lo else 1.0
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    ticks, v = [], first
    while v <= hi + 1e-9 * span:
        ticks.append(round(v, 10))
        v += step
    return ticks


def fmt(v):
    return ("%.0f" % v) if abs(v) >= 100 or v == int(v) else ("%.2f" % v).rstrip("0").rstrip(".")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("metrics")
    p.add_argument("out")
    p.add_argument("--title", default="")
    p.add_argument("--width", type=int, default=800)
    p.add_argument("--height", type=int, default=450)
    a = p.parse_args()
    train, val = [], []
    with open(a.metrics) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                sys.exit("%s:%d: not JSON: %s" % (a.metrics, n, e))
            if "event" in r or "loss" not in r:
                continue
            train.append((r["step"], r["loss"]))
            if "val_loss" in r:
                val.append((r["step"], r["val_loss"]))
    if not train:
        sys.exit("%s: no step records" % a.metrics)
    c = Canvas(a.width, a.height)
    left, right, top, bottom = 80, a.width - 20, 40, a.height - 60
    xs = [s for s, _ in train]
    ys = [v for _, v in train] + [v for _, v in val]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys)
    pad = 0.05 * (y1 - y0 if y1 > y0 else 1)
    y0, y1 = y0 - pad, y1 + pad

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
    for (sa, va), (sb, vb) in zip(train, train[1:]):
        c.line(X(sa), Y(va), X(sb), Y(vb), BLUE, 2)
    for (sa, va), (sb, vb) in zip(val, val[1:]):
        c.line(X(sa), Y(va), X(sb), Y(vb), ORANGE, 2)
    for s, v in val:
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
    print("%s: %d training steps%s" % (a.out, len(train), ", %d validations" % len(val) if val else ""))


if __name__ == "__main__":
    main()
