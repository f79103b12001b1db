#!/usr/bin/env python3
"""fuzz_tools.py — hostile inputs to data/basp_prep.py and scripts/plot_metrics.py.

    fuzz_tools.py [--seed N] [--cases N] [--keep-going]

A seeded random sweep (default seed 1, 400 cases; standard library only, a
few seconds): random bytes, bad UTF-8, lone surrogates, deep nesting, huge
numbers, NaN / Infinity / null fields, empty files, directories, FIFOs and
missing files as inputs, lines cut short, bad option values, and outputs
that are one of the inputs (by name, hard link, symbolic link or OUT.tmp).
The --tokenizer path runs through the stand-in `tokenizers` module of
test_prep.py (one that encodes, one that fails to encode, one that panics,
one that cannot load).

Each case runs the tool's main() in this process (a timeout of 10 s each
through SIGALRM) and asserts: the exit status is 0, 1 (a refused input,
one line on standard error) or 2 (the command line); no exception escapes
(a traceback); a failed run leaves no output and no OUT.tmp; the inputs are
unchanged; a token file or PNG written reads back (the llm.c header and its
count, the PNG signature); a --bytes run of one whole file holds exactly the
file's bytes and the end-of-text token.  A few cases run the tools as
programs too, to check the same through their real exit status and stderr.
A failure prints the seed, the case and its command line.
"""
import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
PREP = os.path.join(ROOT, "data", "basp_prep.py")
PLOT = os.path.join(ROOT, "scripts", "plot_metrics.py")
TIMEOUT = 10


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Hang(Exception):
    pass


def on_alarm(signum, frame):
    raise Hang("no answer in %d s" % TIMEOUT)


# ---- hostile content ---------------------------------------------------------

def rand_bytes(rng, n):
    return bytes(rng.randrange(256) for _ in range(n))


def rand_text(rng):
    pick = rng.randrange(8)
    if pick == 0:
        return ""
    if pick == 1:
        return "".join(rng.choice("ab \r\n\t\x00\x07<|>endoftx") for _ in range(rng.randrange(40)))
    if pick == 2:
        return "doc <|endoftext|> more"
    if pick == 3:
        return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x800), rng.randrange(0x10000, 0x10FFFF)]))
                       for _ in range(rng.randrange(1, 20)))
    return "some ordinary text %d\nwith two lines" % rng.randrange(1000)


def json_value(rng, depth=0):
    pick = rng.randrange(12)
    if pick == 0 or depth > 3:
        return rng.choice(["null", "true", "NaN", "Infinity", "-Infinity", "1e999", "-0", "9" * rng.randrange(1, 6000)])
    if pick == 1:
        return '"\\ud800"' if rng.random() < 0.5 else '"a\\udfffb\\u0000"'
    if pick == 2:
        return "[" * rng.randrange(1, 200000) if rng.random() < 0.5 else "[" * 50 + "1" + "]" * 50
    if pick == 3:
        return json.dumps(rand_text(rng))
    if pick == 4:
        return "{%s}" % ",".join('"%s":%s' % (rng.choice(["text", "step", "loss", "event", "x"]), json_value(rng, depth + 1))
                                 for _ in range(rng.randrange(4)))
    return repr(rng.uniform(-10, 10))


def jsonl_docs(rng):
    lines = []
    for _ in range(rng.randrange(0, 6)):
        if rng.random() < 0.6:
            lines.append(json.dumps({"text": rand_text(rng), "id": rng.randrange(10)}))
        else:
            lines.append('{"text": %s}' % json_value(rng) if rng.random() < 0.7 else json_value(rng))
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    return mutate(rng, data + (b"\n" if rng.random() < 0.7 else b""))


def metrics(rng):
    lines = []
    step = rng.choice([0, 1, 10**6])
    for _ in range(rng.randrange(0, 12)):
        step += rng.choice([1, 1, 1, 0, -1, 1e300])
        r = {"step": step, "loss": rng.choice([None, rng.uniform(0, 10), 5.0, 1e308, -1e308, 1e-320, 0.0])}
        if rng.random() < 0.2:
            r["grad_norm"] = None
        if rng.random() < 0.3:
            r["val_loss"] = rng.choice([None, rng.uniform(0, 10)])
        line = json.dumps(r, allow_nan=True)
        if rng.random() < 0.15:
            key = rng.choice(["step", "loss", "val_loss"])
            line = line.rstrip("}") + ', "%s": %s}' % (key, json_value(rng))
        if rng.random() < 0.05:
            line = '{"event":"stop","signal":"SIGTERM","step":%d,"checkpoint":null,"exit_status":143}' % step
        elif rng.random() < 0.04:
            line = json_value(rng)  # any JSON value, or deep nesting, as a whole line
        lines.append(line)
    data = "\n".join(lines).encode("utf-8", "surrogatepass") + (b"\n" if lines and rng.random() < 0.8 else b"")
    if rng.random() < 0.2 and data:
        data = data[:rng.randrange(len(data))]  # killed while writing
    return mutate(rng, data)


def mutate(rng, data):
    pick = rng.randrange(10)
    if pick == 0 and data:
        i = rng.randrange(len(data))
        return data[:i] + rand_bytes(rng, rng.randrange(1, 4)) + data[i + 1:]
    if pick == 1:
        return rand_bytes(rng, rng.randrange(200))
    if pick == 2:
        return b""
    if pick == 3:
        return data.replace(b"\n", b"\r\n")
    return data


# ---- one case ------------------------------------------------------------------

def digest(paths):
    out = {}
    for p in paths:
        try:
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    out[p] = hashlib.sha1(f.read()).hexdigest()
        except OSError:
            pass
    return out


def call(mod, argv, stdin=b""):
    """(status, stderr, stdout) of mod.main(argv); an escaping exception is returned as a traceback."""
    err, out = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    signal.alarm(TIMEOUT)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            status = mod.main(argv)
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
    except BaseException:
        status = None
        err.write(traceback.format_exc())
    finally:
        signal.alarm(0)
        sys.stdin = saved
    return status, err.getvalue(), out.getvalue()


class Case:
    def __init__(self, d, rng):
        self.d, self.rng, self.n = d, rng, 0

    def path(self, ext):
        self.n += 1
        return os.path.join(self.d, "f%d%s" % (self.n, ext))

    def file(self, data, ext):
        p = self.path(ext)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def odd_input(self):
        """A directory, a FIFO or a missing file."""
        pick = self.rng.randrange(3)
        p = self.path(self.rng.choice([".txt", ".jsonl"]))
        if pick == 0:
            os.mkdir(p)
        elif pick == 1:
            os.mkfifo(p)
        return p

    def output(self, inputs, ext):
        """A fresh path mostly; sometimes one that aliases an input, or cannot be written."""
        real = [p for p in inputs if os.path.isfile(p)]
        pick = self.rng.randrange(20)
        if real and pick == 0:
            return self.rng.choice(real)
        if real and pick == 1:
            p = self.path(ext)
            os.link(self.rng.choice(real), p)
            return p
        if real and pick == 2:
            p = self.path(ext)
            os.symlink(os.path.abspath(self.rng.choice(real)), p)
            return p
        if real and pick == 3:
            p = self.path(ext)
            os.link(self.rng.choice(real), p + ".tmp")
            return p
        if pick == 4:
            p = self.path("")
            os.mkdir(p)
            return p
        if pick == 5:
            return os.path.join(self.d, "no-such-dir", "out" + ext)
        return self.path(ext)


def prep_case(c, rng, tokenizers):
    inputs, stdin, whole = [], b"", None
    for _ in range(rng.randrange(1, 4)):
        pick = rng.randrange(10)
        if pick < 4:
            inputs.append(c.file(jsonl_docs(rng), ".jsonl"))
        elif pick < 8:
            data = mutate(rng, rand_text(rng).encode("utf-8", "surrogatepass"))
            inputs.append(c.file(data, ".txt"))
        elif pick == 8:
            inputs.append(c.odd_input())
        else:
            inputs.append("-")
            stdin = rand_bytes(rng, rng.randrange(50)) if rng.random() < 0.5 else b"text from stdin\r\n"
    argv = ["-q"]
    if rng.random() < 0.6:
        argv.append("--bytes")
        tok = None
    else:
        tok = rng.choice(tokenizers * 2 + [c.path(".json")])
        argv += ["--tokenizer", tok]
    if rng.random() < 0.5:
        argv += ["--eot", str(rng.choice([0, 1, 1, 10, 13, 255, 255, 256, 70000, 2**32 - 1, 2**32, -1, 10**30]))]
    elif rng.random() < 0.05:
        argv += ["--eot", rng.choice(["x", "1.5", "", "0x10"])]
    if rng.random() < 0.3:
        argv.append(rng.choice(["--lines", "--paragraphs"]))
    if rng.random() < 0.2:
        argv += ["--vocab", str(rng.choice([0, 1, 100, 256, 256, 2**32, 2**40, -5]))]
    if rng.random() < 0.1:
        argv += ["--field", rng.choice(["body", "", "text"])]
    out = c.output(inputs + ([tok] if tok else []), ".bin")
    argv += ["-o", out] + inputs
    if (len(inputs) == 1 and inputs[0] != "-" and os.path.isfile(inputs[0]) and inputs[0].endswith(".txt")
            and "--bytes" in argv and "--lines" not in argv and "--paragraphs" not in argv):
        whole = inputs[0]
    return argv, out, inputs + ([tok] if tok else []), stdin, whole


def check_tokens(out, whole, argv):
    with open(out, "rb") as f:
        b = f.read()
    magic, version, count = struct.unpack_from("<3i", b, 0)
    assert magic == 20240520 and version in (1, 2), "bad header"
    assert len(b) == 1024 + count * (2 if version == 1 else 4), "size does not match the count"
    if whole:
        eot = int(argv[argv.index("--eot") + 1]) if "--eot" in argv else 0
        with open(whole, "rb") as f:
            want = list(f.read()) + [eot]
        assert list(b[1024:][::2]) == want and version == 1, "--bytes of one file is not its bytes"


def plot_case(c, rng):
    m = c.odd_input() if rng.random() < 0.08 else c.file(metrics(rng), rng.choice([".jsonl", ".png.tmp"]))
    argv = [m]
    if rng.random() < 0.3:
        argv.append("--summary")
        out = None
    else:
        out = c.output([m], rng.choice([".png", ".png", ".svg"]))
        argv += [out, "--width", str(rng.choice([320] * 4 + [400] * 4 + [10, 100000])), "--height", "160"]
    if rng.random() < 0.1:
        argv += ["--title", rand_text(rng)]
    return argv, out, [m]


def run_case(i, c, rng, mods, tokenizers):
    tool = "plot" if i % 3 == 2 else "prep"
    if tool == "prep":
        argv, out, inputs, stdin, whole = prep_case(c, rng, tokenizers)
    else:
        (argv, out, inputs), stdin, whole = plot_case(c, rng), b"", None
    existed = bool(out) and os.path.lexists(out)
    before = digest(inputs)
    status, err, _ = call(mods[tool], argv, stdin)
    problem = None
    if status is None:
        problem = "an exception escaped"
    elif status not in (0, 1, 2):
        problem = "exit status %r" % status
    elif "Traceback" in err:
        problem = "a traceback on stderr"
    elif status == 1 and len(err.strip().splitlines()) != 1 + err.count("warning:"):
        problem = "not a one-line error"
    elif digest(inputs) != before:
        problem = "an input changed"
    elif out and os.path.lexists(out + ".tmp") and not any(os.path.samefile(out + ".tmp", p) for p in inputs
                                                           if os.path.exists(p) and os.path.exists(out + ".tmp")):
        problem = "OUT.tmp left behind"
    elif status != 0 and out and not existed and os.path.lexists(out):
        problem = "a failed run left its output"
    elif status == 0 and out:
        try:
            if tool == "prep":
                check_tokens(out, whole, argv)
            else:
                with open(out, "rb") as f:
                    assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
        except (AssertionError, OSError, struct.error) as e:
            problem = "the output does not read back: %s" % e
    return tool, argv, status, err, problem


def programs(d, tokenizers, env):
    """The same contract through real processes: exit status and stderr."""
    bad_jsonl = os.path.join(d, "p.jsonl")
    with open(bad_jsonl, "wb") as f:
        f.write(b'{"text": "\\ud800"}\n' + b"[" * 100000 + b"\n")
    mx = os.path.join(d, "p-metrics.jsonl")
    with open(mx, "wb") as f:
        f.write(b'{"step":1,"loss":null,"grad_norm":null}\n{"step":2,"loss":1.5}\n{"step":3,"lo')
    cases = [[PREP, "--bytes", "-o", os.path.join(d, "p.bin"), bad_jsonl],
             [PREP, "--bytes", "--eot", str(2**32), "-o", os.path.join(d, "p.bin"), bad_jsonl],
             [PREP, "--tokenizer", tokenizers[0], "-o", tokenizers[0], bad_jsonl],
             [PREP, "--tokenizer", tokenizers[1], "-o", os.path.join(d, "p.bin"), mx],
             [PREP, "--bytes", "-o", bad_jsonl, bad_jsonl],
             [PLOT, mx, "--summary"], [PLOT, mx, mx], [PLOT, d, "--summary"],
             [PLOT, mx, os.path.join(d, "p.png"), "--width", "320", "--height", "160"]]
    for argv in cases:
        try:
            p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=30, env=env,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            sys.exit("FAIL: %s: no answer in 30 s" % " ".join(argv))
        if p.returncode not in (0, 1, 2) or "Traceback" in p.stderr:
            sys.exit("FAIL: %s: exit %d\n%s" % (" ".join(argv), p.returncode, p.stderr))
    return len(cases)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--keep-going", action="store_true", help="run every case, then fail if any failed")
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    import test_prep  # the stand-in tokenizers module
    rng = random.Random(a.seed)
    d = tempfile.mkdtemp(prefix="fuzz_tools.")
    signal.signal(signal.SIGALRM, on_alarm)
    try:
        env = test_prep.stub_env(d)
        sys.path.insert(0, env["PYTHONPATH"])
        tokenizers = [test_prep.stub_tokenizer(d, "tok-ok.json"),
                      test_prep.stub_tokenizer(d, "tok-fail.json", fail="a"),
                      test_prep.stub_tokenizer(d, "tok-panic.json", panic="e")]
        with open(os.path.join(d, "tok-broken.json"), "w") as f:
            f.write('{"special": ')
        tokenizers.append(os.path.join(d, "tok-broken.json"))
        mods = {"prep": load("basp_prep_fuzzed", PREP), "plot": load("plot_metrics_fuzzed", PLOT)}
        counts, failed = {0: 0, 1: 0, 2: 0}, 0
        for i in range(a.cases):
            cd = os.path.join(d, "case%d" % i)
            os.mkdir(cd)
            tool, argv, status, err, problem = run_case(i, Case(cd, rng), rng, mods, tokenizers)
            if problem:
                failed += 1
                print("FAIL: seed %d case %d: %s: %s\n  %s %s\n%s" % (a.seed, i, tool, problem, tool,
                      " ".join(map(repr, argv)), err), file=sys.stderr)
                if not a.keep_going:
                    sys.exit(1)
            else:
                counts[status] += 1
            shutil.rmtree(cd)
        if failed:
            sys.exit("fuzz_tools: seed %d: %d of %d cases failed" % (a.seed, failed, a.cases))
        nprog = programs(d, tokenizers, env)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("fuzz_tools: seed %d, %d cases: %d written, %d refused (1), %d bad command lines (2); %d runs as "
          "programs; no traceback, hang, partial output or changed input"
          % (a.seed, a.cases, counts[0], counts[1], counts[2], nprog))


if __name__ == "__main__":
    main()
