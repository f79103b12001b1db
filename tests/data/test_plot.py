#!/usr/bin/env python3
"""data.plot_metrics: scripts/plot_metrics.py draws a metrics file as a PNG.

The PNG is decoded here (zlib, filter type 0 rows) and checked: its size,
blue pixels (the training loss line) and orange ones (the validation loss),
the training line falling from left to right as the losses do, the stop
record skipped; a file that is not JSON lines is refused naming the line.
Standard library only.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "..", "..", "scripts", "plot_metrics.py")
BLUE, ORANGE = (31, 119, 180), (255, 127, 14)


def decode(path):
    b = open(path, "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(b):
        n, kind = struct.unpack(">I4s", b[pos:pos + 8])
        data = b[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h = struct.unpack(">II", data[:8])
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    raw = zlib.decompress(idat)
    rows = [raw[y * (3 * w + 1) + 1:(y + 1) * (3 * w + 1)] for y in range(h)]
    return w, h, rows


def pixels(w, h, rows, c):
    return [(x, y) for y in range(h) for x in range(w) if tuple(rows[y][3 * x:3 * x + 3]) == c]


def main():
    d = tempfile.mkdtemp()
    m = os.path.join(d, "m.jsonl")
    with open(m, "w") as f:
        for s in range(1, 41):
            r = {"step": s, "loss": 5.0 - 0.1 * s, "lr": 1e-3}
            if s % 10 == 0:
                r["val_loss"] = 5.2 - 0.1 * s
            f.write(json.dumps(r) + "\n")
        f.write('{"event":"stop","signal":"SIGTERM","step":40,"checkpoint":null,"exit_status":143}\n')
    out = os.path.join(d, "m.png")
    r = subprocess.run([sys.executable, PLOT, m, out, "--width", "400", "--height", "300"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "40 training steps, 4 validations" in r.stdout, r.stdout
    w, h, rows = decode(out)
    assert (w, h) == (400, 300), (w, h)
    blue = [p for p in pixels(w, h, rows, BLUE) if p[1] > 80]  # below the legend
    orange = [p for p in pixels(w, h, rows, ORANGE) if p[1] > 80]
    assert len(blue) > 200 and len(orange) > 50, (len(blue), len(orange))
    left = [y for x, y in blue if x < 150]
    right = [y for x, y in blue if x > 300]
    assert left and right and min(left) < min(right), "the falling loss must start high (small y) on the left"
    with open(m, "a") as f:
        f.write("not json\n")
    r = subprocess.run([sys.executable, PLOT, m, out], capture_output=True, text=True)
    assert r.returncode != 0 and "m.jsonl:42: not JSON" in r.stderr, (r.returncode, r.stderr)
    print("data.plot_metrics: a 400x300 PNG with %d training and %d validation pixels; bad input refused"
          % (len(blue), len(orange)))


if __name__ == "__main__":
    main()
