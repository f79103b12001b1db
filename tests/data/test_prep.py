#!/usr/bin/env python3
"""test_prep.py — data/basp_prep.py against an independent reading of its
output.  `bytes`: the byte-level path (standard library only): JSONL,
paragraphs and lines, the llm.c header and every token, and the bad inputs,
each a located error with exit status 1 and no file left.  `tokenizer`: a
BPE tokenizer trained here with the `tokenizers` library (nothing is
downloaded); the file must hold exactly each document's ids followed by the
end-of-text id.  Exits 77 (skipped) when `tokenizers` is missing."""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PREP = os.path.join(HERE, "..", "..", "data", "basp_prep.py")


def run(*args, ok=True):
    p = subprocess.run([sys.executable, PREP, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit("FAIL: basp_prep %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    if not ok and p.returncode != 1:
        sys.exit("FAIL: basp_prep %s: exit %d, wanted 1\n%s" % (" ".join(args), p.returncode, p.stderr))
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


def expect_error(d, regex_part, *args):
    out = os.path.join(d, "bad.bin")
    err = run("-o", out, *args, ok=False)
    if regex_part not in err:
        sys.exit("FAIL: wanted %r in:\n%s" % (regex_part, err))
    if os.path.exists(out) or any(f.startswith("bad.bin.tmp") for f in os.listdir(d)):
        sys.exit("FAIL: a failed run left a file")


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
    print("test_prep: byte-level JSONL, paragraphs and lines read back token for token; 8 bad inputs refused")


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
    print("test_prep: tokenizer.json path: %d tokens equal the library's ids plus end-of-text %d" % (len(got), eot))


if __name__ == "__main__":
    {"bytes": test_bytes, "tokenizer": test_tokenizer}[sys.argv[1]]()
