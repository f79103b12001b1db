#!/usr/bin/env python3
"""data.plot_metrics: scripts/plot_metrics.py draws a metrics file as a PNG.

The PNG is decoded here (zlib, filter type 0 rows) and checked: its size,
blue pixels (the training loss line) and orange ones (the validation loss),
the training line falling from left to right as the losses do, the stop
record skipped; a file that is not JSON lines is refused naming the line.
The runtime's own records: a --skip-nonfinite step ("loss": null,
"grad_norm": null), a null "val_loss", a last line cut short by a kill
(skipped with a warning, naming it); a corrupt middle line refused with
its number; --summary; values at the edges of a double (no hang, no
traceback); the output refused when it is the metrics file (by name, hard
or symbolic link, or through its OUT.tmp), the metrics file untouched.
Standard library only.
"""
import json
import os
import shutil
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


def plot(*args, script=PLOT):
    """Runs the plotting script (test_plot_assignments.py's too)."""
    r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def refused(want, *args, status=1, script=PLOT):
    r = plot(*args, script=script)
    assert r.returncode == status and want in r.stderr, (args, r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 or status == 2, r.stderr


def record(step, loss, **kw):
    """A step record as the runtime writes it (cJSON prints NaN and Inf as null)."""
    r = {"step": step, "loss": loss, "grad_norm": 1.5 if loss is not None else None, "lr": 1e-3, "step_ms": 10.0}
    r.update(kw)
    return json.dumps(r, separators=(",", ":")) + "\n"


def runtime_records(d):
    m = os.path.join(d, "rt.jsonl")
    with open(m, "w") as f:
        for s in range(1, 21):
            if s == 7:  # a step --skip-nonfinite skipped
                f.write(record(s, None))
            elif s == 10:
                f.write(record(s, 4.0, val_loss=None, val_ms=3.0))
            elif s == 20:
                f.write(record(s, 3.0, val_loss=3.4, val_ms=3.0, grad_norm=None))
            else:
                f.write(record(s, 5.0 - 0.1 * s))
        f.write('{"event":"stop","signal":"SIGTERM","step":20,"checkpoint":null,"exit_status":143}\n')
        f.write('{"step":21,"loss":2.9,"grad_n')  # killed while writing
    out = os.path.join(d, "rt.png")
    r = plot(m, out, "--summary")
    assert r.returncode == 0, r.stderr
    assert "rt.jsonl:22: the last line has no newline" in r.stderr and "skipped" in r.stderr, r.stderr
    assert "20 training step(s)" in r.stdout and "1 non-finite loss(es) (null) left out" in r.stdout, r.stdout
    assert "2 validation(s); best val_loss 3.4 at step 20; 1 non-finite val_loss(es)" in r.stdout, r.stdout
    assert "20 training steps, 1 validations" in r.stdout, r.stdout
    w, h, rows = decode(out)
    assert len(pixels(w, h, rows, BLUE)) > 200, "the training line is drawn around the null"
    odd = os.path.join(os.fsencode(d), b"\xff.png")  # a file name that is not UTF-8, said on stdout
    env = dict(os.environ, PYTHONIOENCODING="utf-8:strict")  # as in a UTF-8 locale
    r = subprocess.run([sys.executable, PLOT, m, odd], capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                       env=env)
    assert r.returncode == 0 and b"Traceback" not in r.stderr and os.path.exists(odd), r.stderr
    # A corrupt line in the middle is not a cut-short last line.
    lines = open(m).read().split("\n")
    lines[4] = lines[4][:15]
    with open(m, "w") as f:
        f.write("\n".join(lines))
    refused("rt.jsonl:5: not JSON", m, out)
    for bad, want in (('{"step":1,"loss":"5"}', '"loss" is "5", not a number'),
                      ('{"step":null,"loss":5}', '"step" is not a finite number'),
                      ('{"step":1,"loss":true}', '"loss" is true, not a number'),
                      ('{"step":1,"loss":1,"val_loss":[1]}', '"val_loss" is [1], not a number'),
                      ('[1, 2]', "not a JSON object"),
                      ('[' * 50000, "not JSON: nested too deeply")):
        with open(m, "w") as f:
            f.write(bad + "\n" + record(2, 1.0))
        refused("rt.jsonl:1: " + want, m, "--summary")
    # NaN and Infinity literals count as null; a file with no finite loss draws nothing.
    with open(m, "w") as f:
        f.write('{"step":1,"loss":NaN}\n{"step":2,"loss":Infinity}\n{"step":3,"loss":1e999}\n')
    r = plot(m, "--summary")
    assert r.returncode == 0 and "3 non-finite loss(es)" in r.stdout, (r.stdout, r.stderr)
    refused("no finite training loss among 3 step record(s)", m, out)
    # The edges of a double: a flat line far from 0, a span too wide, huge steps.
    for recs, ok in (([(1, 5.0), (2, 5.0 + 1e-15), (3, 5.0)], True), ([(1, 1e308), (2, -1e308)], False),
                     ([(1e300, 1.0), (1e300 + 1e285, 2.0)], True), ([(10**400, 1.0)], False), ([(5, 1e-320)], True)):
        with open(m, "w") as f:
            f.write("".join('{"step":%s,"loss":%r}\n' % (s, v) for s, v in recs))
        r = plot(m, out)
        assert r.returncode == (0 if ok else 1), (recs, r.returncode, r.stderr)
    return m


def aliases(d):
    m = os.path.join(d, "a.jsonl")
    data = record(1, 2.0) + record(2, 1.0)
    with open(m, "w") as f:
        f.write(data)
    os.link(m, os.path.join(d, "hard.png"))
    os.symlink("a.jsonl", os.path.join(d, "sym.png"))
    os.mkdir(os.path.join(d, "sub"))
    for out in (m, os.path.join(d, "sub", "..", "a.jsonl"), os.path.join(d, "hard.png"), os.path.join(d, "sym.png")):
        refused("is the same file as the metrics file", m, out)
    tmp_named = os.path.join(d, "b.png.tmp")
    with open(tmp_named, "w") as f:
        f.write(data)
    refused("its temporary file", tmp_named, os.path.join(d, "b.png"))
    assert open(m).read() == data and open(tmp_named).read() == data, "the metrics files are untouched"
    refused("only PNG is written", m, os.path.join(d, "a.svg"))
    refused(": is a directory", m, os.path.join(d, "sub"))
    refused(": is a directory", os.path.join(d, "sub"), "--summary")
    refused("none.jsonl: no such file", os.path.join(d, "none.jsonl"), "--summary")
    os.mkfifo(os.path.join(d, "fifo"))
    refused("fifo: not a regular file", os.path.join(d, "fifo"), "--summary")
    refused("name the PNG to write", m, status=2)
    refused("--width 10", m, os.path.join(d, "x.png"), "--width", "10", status=2)
    assert not os.path.exists(os.path.join(d, "b.png")) and not os.path.exists(os.path.join(d, "a.svg"))


def main():
    d = tempfile.mkdtemp()
    try:
        check(d)
    finally:
        shutil.rmtree(d)


def drawing_edges():
    """The drawing helpers on hostile numbers: bounded ticks, no endless line, no error on NaN."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("plot_metrics", PLOT)
    pm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pm)
    for lo, hi in ((5.0, 5.0 + 1e-15), (1e300, 1e300 + 1e285), (0.0, 1e-322), (1.0, 1.0), (-1e308, 1e308)):
        ticks = pm.nice_ticks(lo, hi)
        assert len(ticks) <= 24, (lo, hi, len(ticks))
    c = pm.Canvas(320, 160)
    c.line(0, 0, 1e18, 1e18, BLUE)  # clamped to the canvas, not 10^18 steps
    c.line(float("nan"), 0, 10, float("inf"), BLUE)
    c.dot(float("nan"), 3, BLUE)
    assert pm.axis(-1e308, 1e308, 0.05) is None and pm.axis(1e300, 1e300, 0.0)[1] > 1e300


def check(d):
    drawing_edges()
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
    runtime_records(d)
    aliases(d)
    print("data.plot_metrics: a 400x300 PNG with %d training and %d validation pixels; null losses, a cut-short "
          "last line and values at a double's edges handled; bad input and outputs that alias it refused"
          % (len(blue), len(orange)))


if __name__ == "__main__":
    main()
