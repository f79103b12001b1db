"""What the Python test drivers (tests/train/equiv.py, tests/ref/check_ref.py)
share: running a command into a log, reading the runtime's --save-weights /
--save-grads files (runtime/README.md, "Tensor dumps"), the verdict.
Standard library only."""
import struct
import subprocess
import sys


def run(cmd, log):
    """Runs cmd with its output in the file log; on failure prints the
    command and the log's tail and exits 1."""
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.stderr.write("command failed (%d): %s\n" % (r.returncode, " ".join(cmd)))
        sys.stderr.write(open(log).read()[-4000:])
        sys.exit(1)


def read_tensors(path):
    """{name: tuple of floats} of a basp tensor file; exits on a bad file."""
    data = open(path, "rb").read()
    magic, version, count = struct.unpack_from("<III", data, 0)
    if magic not in (0x54505342, 0x47505342) or version != 1:  # weights "BSPT", gradients "BSPG"
        sys.exit("%s: not a basp tensor file" % path)
    off, heads = 12, []
    for _ in range(count):
        (nlen,) = struct.unpack_from("<I", data, off)
        name = data[off + 4:off + 4 + nlen].decode()
        off += 4 + nlen
        (nd,) = struct.unpack_from("<I", data, off)
        dims = struct.unpack_from("<%dq" % nd, data, off + 4)
        off += 4 + 8 * nd
        heads.append((name, dims))
    out = {}
    for name, dims in heads:
        n = 1
        for d in dims:
            n *= d
        out[name] = struct.unpack_from("<%df" % n, data, off)
        off += 4 * n
    if off != len(data):
        sys.exit("%s: %d trailing bytes" % (path, len(data) - off))
    return out


def verdict(bad, expect_mismatch, planted="the runs were expected to differ but matched"):
    """Prints up to 20 mismatches and the outcome; the exit status: 0 when
    the runs matched, or, with expect_mismatch (a planted difference), when
    they did not."""
    for b in bad[:20]:
        print("  MISMATCH " + b)
    if len(bad) > 20:
        print("  ... and %d more" % (len(bad) - 20))
    if expect_mismatch:
        if bad:
            print("  mismatch detected, as expected")
            return 0
        print("  FAIL: " + planted)
        return 1
    print("  %s" % ("FAIL" if bad else "OK"))
    return 1 if bad else 0


def tensor_errors(ref, got):
    """Per tensor of ref: max|got - ref| / max|ref| (max|ref| floored at
    1e-12), the measure the equivalence tests bound.  Returns (errors,
    problems): errors {name: relative error} for the tensors both hold with
    the same element count, problems a list of messages for names missing
    on either side and element counts that differ."""
    errors, problems = {}, []
    for name in sorted(set(ref) ^ set(got)):
        problems.append("%s only in the %s" % (name, "reference" if name in ref else "compared run"))
    for name in ref:
        if name not in got:
            continue
        a, b = got[name], ref[name]
        if len(a) != len(b):
            problems.append("%s: %d vs %d elements" % (name, len(a), len(b)))
            continue
        scale = max(max((abs(x) for x in b), default=0.0), 1e-12)
        errors[name] = max((abs(x - y) for x, y in zip(a, b)), default=0.0) / scale
    return errors, problems
