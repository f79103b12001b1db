#!/usr/bin/env python3
"""test_prep.py — data/basp_prep.py against an independent reading of its
output.  `bytes`: the byte-level path (standard library only): JSONL,
paragraphs and lines, the llm.c header and every token, the file's bytes
exactly as the binaries' --text reads them ("\r\n" and a lone "\r" kept),
and the bad inputs (a lone surrogate, deep nesting, a bad --eot, FIFOs and
directories, an output that is one of the inputs by name, hard link, symbolic
link or its OUT.tmp), each a located error with exit status 1 (2 for the
command line), no traceback, no file left and the inputs untouched.
`stub`: the --tokenizer path through a stand-in `tokenizers` module written
here (standard library only): ids, a literal end-of-text text refused with
its line and offset, a tokenizer that loads but cannot encode (an Exception
or a Rust panic), one that cannot load, -o naming the tokenizer file.
`tokenizer`: a BPE tokenizer trained here with the `tokenizers` library
(nothing is downloaded); the file must hold exactly each document's ids
followed by the end-of-text id, and a literal "<|endoftext|>" in a document
is refused.  Exits 77 (skipped) when `tokenizers` is missing."""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PREP = os.path.join(HERE, "..", "..", "data", "basp_prep.py")


def run(*args, ok=True, status=1, env=None):
    p = subprocess.run([sys.executable, PREP, *args], capture_output=True, text=True, env=env, timeout=60,
                       stdin=subprocess.DEVNULL)
    if "Traceback" in p.stderr:
        sys.exit("FAIL: basp_prep %s: a traceback\n%s" % (" ".join(args), p.stderr))
    if ok and p.returncode != 0:
        sys.exit("FAIL: basp_prep %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    if not ok and p.returncode != status:
        sys.exit("FAIL: basp_prep %s: exit %d, wanted %d\n%s" % (" ".join(args), p.returncode, status, p.stderr))
    lines = p.stderr.strip().splitlines()
    if not ok and (len(lines) != 1 if status == 1 else not lines[-1].startswith("basp_prep.py: error: ")):
        sys.exit("FAIL: basp_prep %s: wanted a one-line error:\n%s" % (" ".join(args), p.stderr))
    return p.stderr


def read_tokens(path):
    """The llm.c format, read independently of the tool."""
    b = open(path, "rb").read()
    magic, version, count = struct.unpack_from("<3i", b, 0)
    assert magic == 20240520 and version in (1, 2), (magic, version)
    assert struct.unpack_from("<253i", b, 12) == (0,) * 253, "header padding"
    width = 2 if version == 1 else 4
    assert len(b) == 1024 + count * width, "size %d vs count %d" % (len(b), count)
    return list(struct.unpack_from("<%d%s" % (count, "H" if width == 2 else "I"), b, 1024)), version


def expect_error(d, regex_part, *args, out=None, status=1, env=None):
    out = out or os.path.join(d, "bad.bin")
    before = {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)
              if os.path.isfile(os.path.join(d, f))}
    err = run("-o", out, *args, ok=False, status=status, env=env)
    if regex_part not in err:
        sys.exit("FAIL: wanted %r in:\n%s" % (regex_part, err))
    if os.path.exists(os.path.join(d, "bad.bin")) or any(f.startswith("bad.bin.tmp") for f in os.listdir(d)):
        sys.exit("FAIL: a failed run left a file")
    for f, b in before.items():
        if open(os.path.join(d, f), "rb").read() != b:
            sys.exit("FAIL: a failed run changed %s" % f)
    return err


def toks(*docs, eot=0):
    """The byte-level tokens of documents given as bytes."""
    return sum((list(t) + [eot] for t in docs), [])


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_bytes():
    with tempfile.TemporaryDirectory() as d:
        docs = ["Hello, world.", "Zweite Zeile: äöü ✓", "third"]
        jl = os.path.join(d, "c.jsonl")
        with open(jl, "w", encoding="utf-8") as f:
            for t in docs:
                f.write(json.dumps({"id": 1, "text": t}) + "\n")
            f.write("\n")  # a blank line is skipped
        txt = os.path.join(d, "p.txt")
        with open(txt, "w", encoding="utf-8") as f:
            f.write("para one\nstill one\n\n\npara two\n")
        out = os.path.join(d, "out.bin")
        log = run("-o", out, "--bytes", "--eot", "0", jl, txt, "--paragraphs")
        assert "wrote" in log and "5 document(s)" in log, log
        want = []
        for t in docs + ["para one\nstill one", "para two"]:
            want += list(t.encode("utf-8")) + [0]
        got, version = read_tokens(out)
        assert version == 1 and got == want, (got[:40], want[:40])
        run("-o", out, "--bytes", "--lines", "-q", txt)
        got, _ = read_tokens(out)
        lines = ["para one", "still one", "para two"]
        assert got == sum((list(t.encode()) + [0] for t in lines), []), got
        # Bad inputs, each named where it is.
        with open(os.path.join(d, "nul.txt"), "wb") as f:
            f.write(b"a\x00b")
        expect_error(d, "nul.txt: holds byte 0, the end-of-text token", "--bytes", os.path.join(d, "nul.txt"))
        with open(os.path.join(d, "broken.jsonl"), "w") as f:
            f.write('{"text": "ok"}\n{"text": \n')
        expect_error(d, "broken.jsonl:2: not JSON", "--bytes", os.path.join(d, "broken.jsonl"))
        with open(os.path.join(d, "nofield.jsonl"), "w") as f:
            f.write('{"body": "x"}\n')
        expect_error(d, "nofield.jsonl:1: no string field \"text\"", "--bytes", os.path.join(d, "nofield.jsonl"))
        with open(os.path.join(d, "latin1.txt"), "wb") as f:
            f.write(b"caf\xe9")
        expect_error(d, "latin1.txt: not UTF-8 text (byte 3)", "--bytes", os.path.join(d, "latin1.txt"))
        expect_error(d, "missing.txt: no such file", "--bytes", os.path.join(d, "missing.txt"))
        expect_error(d, "is outside --vocab 100", "--bytes", "--vocab", "100", txt)
        expect_error(d, "--eot 300: byte-level ids run from 0 to 255", "--bytes", "--eot", "300", txt)
        with open(os.path.join(d, "empty.jsonl"), "w") as f:
            f.write("\n")
        expect_error(d, "no documents in", "--bytes", os.path.join(d, "empty.jsonl"))
    with tempfile.TemporaryDirectory() as d:
        test_bytes_exact(d)
    with tempfile.TemporaryDirectory() as d:
        test_bad_inputs(d)
    with tempfile.TemporaryDirectory() as d:
        test_aliases(d)
    print("test_prep: byte-level JSONL, paragraphs and lines read back token for token, CR bytes kept as "
          "--text keeps them; bad inputs and outputs that alias inputs refused")


def test_bytes_exact(d):
    """--bytes writes the file's bytes as the binaries' --text reads them."""
    out = os.path.join(d, "out.bin")
    raw = b"one\r\ntwo\rthree\n"
    f = write(os.path.join(d, "crlf.txt"), raw)
    run("-o", out, "--bytes", "-q", f)
    got, _ = read_tokens(out)
    assert got == toks(raw), ("the whole file, byte for byte", got)
    f = write(os.path.join(d, "lines.txt"), b"a\r\nb\rc\n\r\n  \nlast")
    run("-o", out, "--bytes", "--lines", "-q", f)
    got, _ = read_tokens(out)
    assert got == toks(b"a", b"b\rc", b"last"), ("--lines ends a line at \\n; a lone \\r is text", got)
    f = write(os.path.join(d, "paras.txt"), b"p1\r\nstill p1\r\n\r\n\r\np2 has \r inside\r\n\np3\n")
    run("-o", out, "--bytes", "--paragraphs", "-q", f)
    got, _ = read_tokens(out)
    assert got == toks(b"p1\r\nstill p1", b"p2 has \r inside", b"p3"), ("--paragraphs", got)
    # The end-of-text byte inside a document is refused with its offset, in a text file and in JSONL.
    expect_error(d, "crlf.txt: holds byte 10, the end-of-text token, at byte offset 4", "--bytes", "--eot", "10",
                 os.path.join(d, "crlf.txt"))
    jl = write(os.path.join(d, "nul.jsonl"), b'{"text": "fine"}\n{"text": "ab\\u0000c"}\n')
    expect_error(d, "nul.jsonl:2: holds byte 0, the end-of-text token, at byte offset 2", "--bytes", jl)


def test_bad_inputs(d):
    """Hostile inputs: a one-line error naming the file (and line), never a traceback."""
    txt = write(os.path.join(d, "ok.txt"), b"fine\n")
    jl = write(os.path.join(d, "sur.jsonl"), b'{"text": "ok"}\n{"text": "a\\ud800b"}\n')
    expect_error(d, 'sur.jsonl:2: field "text" holds a lone surrogate \\ud800 at character 1', "--bytes", jl)
    jl = write(os.path.join(d, "deep.jsonl"), b'{"text": "ok"}\n' + b"[" * 100000 + b"\n")
    expect_error(d, "deep.jsonl:2: not JSON: nested too deeply", "--bytes", jl)
    jl = write(os.path.join(d, "bigint.jsonl"), b'{"text": "x", "n": ' + b"9" * 5000 + b"}\n")
    expect_error(d, "bigint.jsonl:1: not JSON", "--bytes", jl)
    jl = write(os.path.join(d, "badutf.jsonl"), b'{"text": "ok"}\n{"text": "\xff"}\n')
    expect_error(d, "badutf.jsonl:2: not UTF-8 text (byte 10 of the line)", "--bytes", jl)
    expect_error(d, "--eot 4294967296: ids run from 0 to 4294967295", "--bytes", "--eot", str(2**32), txt, status=2)
    expect_error(d, "--eot -1: ids run from 0 to 4294967295", "--bytes", "--eot", "-1", txt, status=2)
    expect_error(d, "argument --eot: invalid int value: '1.5'", "--bytes", "--eot", "1.5", txt, status=2)
    expect_error(d, "--vocab 0: must be from 1", "--bytes", "--vocab", "0", txt, status=2)
    os.mkdir(os.path.join(d, "sub"))
    expect_error(d, os.path.join(d, "sub") + ": is a directory", "--bytes", os.path.join(d, "sub"))
    os.mkfifo(os.path.join(d, "fifo"))
    expect_error(d, "fifo: not a regular file", "--bytes", os.path.join(d, "fifo"))
    os.unlink(os.path.join(d, "fifo"))
    expect_error(d, ": is a directory", "--bytes", txt, out=os.path.join(d, "sub"))
    expect_error(d, ": no directory", "--bytes", txt, out=os.path.join(d, "nowhere", "x.bin"))


def test_aliases(d):
    """-o (or OUT.tmp) naming an input, through any path to it, is refused before any work."""
    txt = write(os.path.join(d, "in.txt"), b"some text\n")
    jl = write(os.path.join(d, "in.jsonl"), b'{"text": "doc"}\n')
    os.link(txt, os.path.join(d, "hard.txt"))
    os.symlink("in.jsonl", os.path.join(d, "sym.bin"))
    os.mkdir(os.path.join(d, "sub"))
    cases = [(txt, [txt], "is the same file as the input"),
             (os.path.join(d, "sub", "..", "in.txt"), [txt], "is the same file as the input"),
             (os.path.join(d, "hard.txt"), [jl, txt], "is the same file as the input"),
             (os.path.join(d, "sym.bin"), [txt, jl], "is the same file as the input"),
             (os.path.join(d, "in"), [os.path.join(d, "in.tmp")], "its temporary file")]
    write(os.path.join(d, "in.tmp"), b"the input named like the output's temporary file\n")
    for out, inputs, want in cases:
        err = expect_error(d, want, "--bytes", *inputs, out=out)
        assert "in." in err, err
    assert not os.path.exists(os.path.join(d, "in")), "nothing written"
    assert open(txt, "rb").read() == b"some text\n" and os.path.islink(os.path.join(d, "sym.bin"))


STUB = r'''"""A stand-in for the `tokenizers` library (tests only): one id per
character (2 + its code point), its special tokens matched first."""
import json


class PanicException(BaseException):  # as the library's Rust panics: not an Exception
    pass


class Encoding:
    def __init__(self, ids, offsets):
        self.ids, self.offsets = ids, offsets


class Tokenizer:
    def __init__(self, spec):
        self.spec = spec

    @staticmethod
    def from_file(path):
        with open(path) as f:
            spec = json.load(f)
        if not isinstance(spec, dict) or "special" not in spec:
            raise Exception("data did not match any variant of untagged enum ModelWrapper\nat line 1 column 1")
        return Tokenizer(spec)

    def token_to_id(self, name):
        return self.spec["special"].get(name)

    def id_to_token(self, i):
        return next((k for k, v in self.spec["special"].items() if v == i), None)

    def get_vocab_size(self):
        return 0x110000 + 2

    def encode(self, text, add_special_tokens=True):
        if self.spec.get("fail") and self.spec["fail"] in text:
            raise Exception("WordLevel error: Missing [UNK] token from the vocabulary")
        if self.spec.get("panic") and self.spec["panic"] in text:
            raise PanicException("called `Option::unwrap()` on a `None` value")
        ids, offsets, i = [], [], 0
        while i < len(text):
            name = next((k for k in self.spec["special"] if text.startswith(k, i)), None)
            if name:
                ids.append(self.spec["special"][name])
                offsets.append((i, i + len(name)))
                i += len(name)
            else:
                ids.append(2 + ord(text[i]))
                offsets.append((i, i + 1))
                i += 1
        return Encoding(ids, offsets)
'''


def stub_env(d):
    """A directory holding the stand-in `tokenizers` module, and the environment that finds it."""
    os.makedirs(os.path.join(d, "stubs", "tokenizers"))
    with open(os.path.join(d, "stubs", "tokenizers", "__init__.py"), "w") as f:
        f.write(STUB)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(d, "stubs")
    return env


def stub_tokenizer(d, name="tokenizer.json", **extra):
    spec = {"special": {"<unk>": 0, "<|endoftext|>": 1}}
    spec.update(extra)
    path = os.path.join(d, name)
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def test_stub():
    """The --tokenizer path, through the stand-in module (standard library only)."""
    with tempfile.TemporaryDirectory() as d:
        env = stub_env(d)
        tok = stub_tokenizer(d, fail="\x07", panic="\x08")
        docs = ["plain", "two\r\nlines", "\u00e9t\u00e9 \U0001f600"]
        jl = os.path.join(d, "c.jsonl")
        with open(jl, "w") as f:
            for t in docs:
                f.write(json.dumps({"text": t}) + "\n")
        crlf = write(os.path.join(d, "crlf.txt"), b"a\r\nb\rc")
        out = os.path.join(d, "out.bin")
        log = run("-o", out, "--tokenizer", tok, jl, crlf, env=env)
        assert "end-of-text token 1" in log, log
        got, version = read_tokens(out)
        want = sum(([2 + ord(c) for c in t] + [1] for t in docs + ["a\r\nb\rc"]), [])
        assert got == want and version == 2, (got, want, version)
        # A literal end-of-text text inside a document would split it: refused, located.
        bad = os.path.join(d, "eot.jsonl")
        with open(bad, "w") as f:
            f.write(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": "ab <|endoftext|> cd"}) + "\n")
        expect_error(d, 'eot.jsonl:2: encodes to 1, the end-of-text token ("<|endoftext|>"), at character 3',
                     "--tokenizer", tok, bad, env=env)
        txt = write(os.path.join(d, "eot.txt"), b"line one\nline <|endoftext|> two\n")
        expect_error(d, "eot.txt:2: encodes to 1, the end-of-text token", "--tokenizer", tok, "--lines", txt, env=env)
        # --eot names another id: the same rule for that id.
        expect_error(d, "c.jsonl:1: encodes to 114, the end-of-text token, at character 0",
                     "--tokenizer", tok, "--eot", str(2 + ord("p")), jl, env=env)
        # A tokenizer that loads but cannot encode, an Exception or a panic.
        write(os.path.join(d, "bell.txt"), b"ring \x07 ring")
        expect_error(d, "bell.txt: the tokenizer %s cannot encode it: WordLevel error" % tok,
                     "--tokenizer", tok, os.path.join(d, "bell.txt"), env=env)
        write(os.path.join(d, "bs.txt"), b"back \x08 space")
        expect_error(d, "bs.txt: the tokenizer %s cannot encode it: called `Option::unwrap()`" % tok,
                     "--tokenizer", tok, os.path.join(d, "bs.txt"), env=env)
        broken = write(os.path.join(d, "broken.json"), b"[]")
        expect_error(d, "broken.json: cannot load the tokenizer: data did not match any variant of untagged enum "
                     "ModelWrapper at line 1", "--tokenizer", broken, jl, env=env)
        expect_error(d, "--tokenizer %s: no such file" % os.path.join(d, "none.json"),
                     "--tokenizer", os.path.join(d, "none.json"), jl, env=env)
        sur = write(os.path.join(d, "sur.jsonl"), b'{"text": "\\udfff"}\n')
        expect_error(d, 'sur.jsonl:1: field "text" holds a lone surrogate \\udfff', "--tokenizer", tok, sur, env=env)
        # The output may not be the tokenizer file, by name or by link.
        os.link(tok, os.path.join(d, "tok-link.bin"))
        for out in (tok, os.path.join(d, "tok-link.bin")):
            expect_error(d, "is the same file as the --tokenizer %s" % tok, "--tokenizer", tok, jl, out=out, env=env)
        assert json.load(open(tok))["special"]["<|endoftext|>"] == 1, "the tokenizer file is untouched"
    print("test_prep: --tokenizer through a stand-in module: ids, a literal end-of-text refused with its line and "
          "offset, encode and load failures and an output naming the tokenizer refused cleanly")


def test_tokenizer():
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError:
        print("test_prep: the tokenizers library is not installed: skipped")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        corpus = ["the quick brown fox jumps over the lazy dog %d" % i for i in range(200)]
        tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|endoftext|>"],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        path = os.path.join(d, "tokenizer.json")
        tok.save(path)
        eot = tok.token_to_id("<|endoftext|>")
        docs = ["the lazy fox", "quick brown dog 17 jumps", "over"]
        jl = os.path.join(d, "c.jsonl")
        with open(jl, "w") as f:
            for t in docs:
                f.write(json.dumps({"text": t}) + "\n")
        out = os.path.join(d, "out.bin")
        log = run("-o", out, "--tokenizer", path, "--vocab", "300", jl)
        assert "end-of-text token %d" % eot in log, log
        want = sum((Tokenizer.from_file(path).encode(t, add_special_tokens=False).ids + [eot] for t in docs), [])
        got, _ = read_tokens(out)
        assert got == want, (got, want)
        # The library matches "<|endoftext|>" in text even without special tokens: refused, as --bytes refuses
        # the end-of-text byte.
        with open(jl, "a") as f:
            f.write(json.dumps({"text": "the dog <|endoftext|> the fox"}) + "\n")
        expect_error(d, "c.jsonl:4: encodes to %d, the end-of-text token" % eot, "--tokenizer", path, jl)
        # A tokenizer that loads but cannot encode (a word-level one without its unknown token).
        wl = Tokenizer(models.WordLevel({"a": 0, "<|endoftext|>": 1}, unk_token="[UNK]"))
        wl.pre_tokenizer = pre_tokenizers.Whitespace()
        wl_path = os.path.join(d, "wordlevel.json")
        wl.save(wl_path)
        txt = write(os.path.join(d, "words.txt"), b"a b\n")
        expect_error(d, "words.txt: the tokenizer %s cannot encode it" % wl_path, "--tokenizer", wl_path, txt)
    print("test_prep: tokenizer.json path: %d tokens equal the library's ids plus end-of-text %d" % (len(got), eot))


if __name__ == "__main__":
    {"bytes": test_bytes, "stub": test_stub, "tokenizer": test_tokenizer}[sys.argv[1]]()
