#!/usr/bin/env python3
"""basp_prep.py — turns text or JSONL into an llm.c token file for `--data`.

    basp_prep.py -o train.bin --tokenizer tokenizer.json corpus.jsonl more.txt
    basp_prep.py -o train.bin --bytes --eot 0 notes.txt

Documents: a .jsonl file holds one JSON object per line, its --field
(default "text") one document; any other file is one document (or one per
line with --lines, one per blank-line-separated paragraph with
--paragraphs); "-" reads standard input.  Every document is followed by the
end-of-text token, so `train { documents on  eot_token ID }` splits them
again (README "Packed documents").

Tokens: --tokenizer FILE encodes with a Hugging Face tokenizer.json through
the `tokenizers` library (pip install tokenizers; a development aid, not
needed by basp itself), without special tokens; the end-of-text id is
--eot, else the tokenizer's own (<|endoftext|>, <|end_of_text|>, </s>, ...).
--bytes gives one token per UTF-8 byte (ids 0..255, as the binaries'
--text), with --eot (default 0) between documents; a document that holds
that byte is refused.

Output: the llm.c format the binaries read: a header of 256 int32 (magic
20240520, version 1 = uint16 tokens or 2 = uint32 when an id exceeds 65535,
the token count), then the tokens, little-endian.  The file is written next
to -o and renamed at the end, so a failed run leaves no partial file.
--vocab V refuses ids >= V.  Progress goes to standard error every few
seconds on long inputs.  Only the standard library is needed for --bytes.
"""
import argparse
import array
import json
import os
import sys
import time

MAGIC = 20240520
HEADER_INTS = 256
MAX_TOKENS = 2**31 - 1  # the header's count is an int32
EOT_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>", "<eos>")


class PrepError(Exception):
    pass


def documents(path, args):
    """Yields (where, text) for every document of one input."""
    f = sys.stdin if path == "-" else open(path, encoding="utf-8", errors="strict")
    try:
        if path.endswith(".jsonl"):
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise PrepError("%s:%d: not JSON: %s" % (path, n, e.msg))
                text = obj.get(args.field) if isinstance(obj, dict) else None
                if not isinstance(text, str):
                    raise PrepError("%s:%d: no string field \"%s\"" % (path, n, args.field))
                yield "%s:%d" % (path, n), text
        elif args.lines:
            for n, line in enumerate(f, 1):
                if line.strip():
                    yield "%s:%d" % (path, n), line.rstrip("\n")
        elif args.paragraphs:
            text = f.read()
            for n, para in enumerate(p for p in text.split("\n\n") if p.strip()):
                yield "%s paragraph %d" % (path, n + 1), para.strip("\n")
        else:
            yield path, f.read()
    except UnicodeDecodeError as e:
        raise PrepError("%s: not UTF-8 text (byte %d): %s" % (path, e.start, e.reason))
    finally:
        if f is not sys.stdin:
            f.close()


def make_encoder(args):
    """Returns (encode(text) -> list of ids, eot id, description)."""
    if args.bytes:
        eot = 0 if args.eot is None else args.eot
        if not 0 <= eot <= 255:
            raise PrepError("--eot %d: byte-level ids run from 0 to 255" % eot)

        def encode_bytes(text):
            b = text.encode("utf-8")
            if eot in b:
                raise PrepError("holds byte %d, the end-of-text token: pick another --eot" % eot)
            return b

        return encode_bytes, eot, "bytes (one token per UTF-8 byte)"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise PrepError("--tokenizer needs the `tokenizers` library (pip install tokenizers); "
                        "--bytes needs nothing")
    try:
        tok = Tokenizer.from_file(args.tokenizer)
    except Exception as e:  # the library raises its own exception types
        raise PrepError("%s: cannot load the tokenizer: %s" % (args.tokenizer, e))
    eot = args.eot
    if eot is None:
        for name in EOT_NAMES:
            eot = tok.token_to_id(name)
            if eot is not None:
                break
        if eot is None:
            raise PrepError("%s: no end-of-text token among %s: pass --eot ID" % (args.tokenizer, ", ".join(EOT_NAMES)))

    def encode_tok(text):
        return tok.encode(text, add_special_tokens=False).ids

    return encode_tok, eot, "%s (%d ids)" % (args.tokenizer, tok.get_vocab_size())


class Progress:
    def __init__(self, quiet):
        self.quiet, self.t0, self.last = quiet, time.monotonic(), time.monotonic()

    def tick(self, chars, ntok, ndocs, final=False):
        now = time.monotonic()
        if self.quiet or (not final and now - self.last < 2.0):
            return
        self.last = now
        dt = max(now - self.t0, 1e-9)
        print("basp_prep: %d document(s), %.1f MB of text, %d tokens, %.1f MB/s%s" %
              (ndocs, chars / 1e6, ntok, chars / 1e6 / dt, "" if final else " ..."), file=sys.stderr, flush=True)


def prepare(args):
    encode, eot, what = make_encoder(args)
    tokens = array.array("I")  # uint32 while collecting; narrowed to uint16 when every id fits
    progress = Progress(args.quiet)
    chars = ndocs = 0
    for path in args.inputs:
        if path != "-" and not os.path.isfile(path):
            raise PrepError("%s: %s" % (path, "is a directory" if os.path.isdir(path) else "no such file"))
        for where, text in documents(path, args):
            try:
                ids = encode(text)
            except PrepError as e:
                raise PrepError("%s: %s" % (where, e))
            tokens.extend(ids)
            tokens.append(eot)
            ndocs += 1
            chars += len(text)
            if len(tokens) > MAX_TOKENS:
                raise PrepError("more than %d tokens: the llm.c header holds an int32 count; split the input "
                                "into several files" % MAX_TOKENS)
            progress.tick(chars, len(tokens), ndocs)
    if ndocs == 0:
        raise PrepError("no documents in %s" % ", ".join(args.inputs))
    top = max(tokens)
    if args.vocab is not None and top >= args.vocab:
        i = next(i for i, t in enumerate(tokens) if t >= args.vocab)
        raise PrepError("token %d at position %d is outside --vocab %d" % (tokens[i], i, args.vocab))
    version = 1 if top < 65536 else 2
    body = array.array("H", tokens) if version == 1 else tokens
    if sys.byteorder != "little":
        body.byteswap()
    header = array.array("i", [MAGIC, version, len(tokens)] + [0] * (HEADER_INTS - 3))
    if sys.byteorder != "little":
        header.byteswap()
    tmp = "%s.tmp%d" % (args.output, os.getpid())
    try:
        with open(tmp, "wb") as f:
            header.tofile(f)
            body.tofile(f)
        os.replace(tmp, args.output)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise PrepError("%s: cannot write: %s" % (args.output, e.strerror))
    progress.tick(chars, len(tokens), ndocs, final=True)
    if not args.quiet:
        print("basp_prep: wrote %s: %d tokens (uint%d) from %d document(s), end-of-text token %d, tokenizer %s" %
              (args.output, len(tokens), 16 if version == 1 else 32, ndocs, eot, what), file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Text or JSONL to an llm.c token file for basp's --data.")
    ap.add_argument("inputs", nargs="+", help=".jsonl (one document per line), any other text file, or -")
    ap.add_argument("-o", "--output", required=True, help="the token file to write")
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--tokenizer", help="a Hugging Face tokenizer.json (needs the tokenizers library)")
    how.add_argument("--bytes", action="store_true", help="one token per UTF-8 byte (ids 0..255)")
    ap.add_argument("--eot", type=int, help="the end-of-text id written after every document")
    ap.add_argument("--field", default="text", help="the JSONL field holding the text (default: text)")
    split = ap.add_mutually_exclusive_group()
    split.add_argument("--lines", action="store_true", help="text files: one document per non-empty line")
    split.add_argument("--paragraphs", action="store_true", help="text files: one document per paragraph")
    ap.add_argument("--vocab", type=int, help="refuse token ids >= VOCAB (the model's vocab)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress or summary")
    args = ap.parse_args(argv)
    if args.eot is not None and args.eot < 0:
        ap.error("--eot must be >= 0")
    try:
        prepare(args)
    except PrepError as e:
        print("basp_prep: error: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("basp_prep: interrupted; nothing written", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
