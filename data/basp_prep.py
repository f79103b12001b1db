#!/usr/bin/env python3
r"""basp_prep.py — turns text or JSONL into an llm.c token file for `--data`.

    basp_prep.py -o train.bin --tokenizer tokenizer.json corpus.jsonl more.txt
    basp_prep.py -o train.bin --bytes --eot 0 notes.txt

Documents: a .jsonl file holds one JSON object per line, its --field
(default "text") one document; any other file is one document (or one per
line with --lines, one per blank-line-separated paragraph with
--paragraphs); "-" reads standard input.  Every document is followed by the
end-of-text token, so `train { documents on  eot_token ID }` splits them
again (docs/data.md, "Packed documents").  Inputs are regular files (or "-"): a
directory, FIFO or device is refused.

Text is read as it is, byte for byte, as the binaries' --text reads it: no
newline translation (a "\r\n" or a lone "\r" stays in the document).
--lines ends a line at "\n" (a "\r" just before it goes with it);
--paragraphs splits at empty lines ("\n\n" or "\r\n\r\n").  The text must
be UTF-8, and a JSONL string must be Unicode text (a lone surrogate such as
"\ud800" is refused with its line).

Tokens: --tokenizer FILE encodes with a Hugging Face tokenizer.json through
the `tokenizers` library (pip install tokenizers; a development aid, not
needed by basp itself), without special tokens; the end-of-text id is
--eot, else the tokenizer's own (<|endoftext|>, <|end_of_text|>, </s>, ...).
--bytes gives one token per byte (ids 0..255, exactly the bytes the
binaries' --text trains on), with --eot (default 0) between documents.
A document must not hold the end-of-text token, or packed training would
split it in two: with --bytes a document holding that byte, with
--tokenizer one whose text encodes to that id (e.g. a literal
"<|endoftext|>" inside it), is refused, naming the file, line and offset.

Output: the llm.c format the binaries read: a header of 256 int32 (magic
20240520, version 1 = uint16 tokens or 2 = uint32 when an id exceeds 65535,
the token count), then the tokens, little-endian.  The file is written to
OUT.tmp and renamed to OUT at the end, so a failed run leaves no partial
file.  Before any work, -o is refused when it (or OUT.tmp) is one of the
inputs or the tokenizer file, as the binaries refuse an output that is one
of their inputs: two paths are the same file when both exist with one
device and inode (hard and symbolic links included), or, when neither
exists, when their directories are one and the names agree.
--vocab V refuses ids >= V.  Progress goes to standard error every few
seconds on long inputs.  Only the standard library is needed for --bytes.
Exit status: 0 done, 1 a refused input (one line on standard error, naming
the file and line), 2 a bad command line.
"""
import argparse
import array
import json
import os
import re
import stat
import sys
import time

MAGIC = 20240520
HEADER_INTS = 256
MAX_TOKENS = 2**31 - 1  # the header's count is an int32
MAX_ID = 2**32 - 1  # uint32 tokens
EOT_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>", "<eos>")


class PrepError(Exception):
    pass


def one_line(e):
    """An exception's message on one line (library messages may span several)."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


# ---- outputs against inputs (the binaries' rule, runtime/core/rt_paths.c) ---

def _stat(path):
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def same_file(a, b):
    """Paths a and b name one file: both exist with one device and inode, or
    neither exists and their directories are one with the same last name."""
    sa, sb = _stat(a), _stat(b)
    if sa or sb:
        return bool(sa and sb and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino))
    pa, pb = _stat(os.path.dirname(a) or "."), _stat(os.path.dirname(b) or ".")
    return bool(pa and pb and (pa.st_dev, pa.st_ino) == (pb.st_dev, pb.st_ino)
                and os.path.basename(a) == os.path.basename(b))


def check_input(path, what):
    """An input must be a readable regular file ("-": standard input)."""
    if path == "-":
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise PrepError("%s%s: no such file" % (what, path))
    except (OSError, ValueError) as e:
        raise PrepError("%s%s: cannot read: %s" % (what, path, getattr(e, "strerror", None) or one_line(e)))
    if stat.S_ISDIR(st.st_mode):
        raise PrepError("%s%s: is a directory" % (what, path))
    if not stat.S_ISREG(st.st_mode):
        raise PrepError("%s%s: not a regular file (a FIFO, socket or device): pass - to read standard input"
                        % (what, path))


def check_output(args):
    """-o and the OUT.tmp written first against every input, before any work."""
    out = args.output
    if not out or out.endswith("/"):
        raise PrepError("-o %r: not a file name" % out)
    st = _stat(out)
    if st and stat.S_ISDIR(st.st_mode):
        raise PrepError("-o %s: is a directory" % out)
    if st and not stat.S_ISREG(st.st_mode):
        raise PrepError("-o %s: not a regular file" % out)
    parent = os.path.dirname(out) or "."
    pst = _stat(parent)
    if not pst or not stat.S_ISDIR(pst.st_mode):
        raise PrepError("-o %s: no directory %s" % (out, parent))
    inputs = [("input ", p) for p in args.inputs if p != "-"]
    if args.tokenizer:
        inputs.append(("--tokenizer ", args.tokenizer))
    for mine, name in ((out, "-o %s" % out), (args.tmp, "-o %s: its temporary file %s" % (out, args.tmp))):
        for what, path in inputs:
            if same_file(mine, path):
                raise PrepError("%s is the same file as the %s%s: the output would overwrite what it reads"
                                % (name, what, path))


# ---- reading ---------------------------------------------------------------

def decode(raw, where, of=""):
    """UTF-8 bytes to text, or a located error."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PrepError("%s: not UTF-8 text (byte %d%s): %s" % (where, e.start, of, e.reason))


def check_unicode(text, where, field):
    """A JSON string may hold lone surrogates ("\\ud800"), which no UTF-8 encodes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise PrepError("%s: field \"%s\" holds a lone surrogate \\u%04x at character %d: not Unicode text"
                        % (where, field, ord(text[e.start]), e.start))


def strip_eol(raw):
    """A line without its newline byte (and a carriage return just before it)."""
    if raw.endswith(b"\n"):
        raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
    return raw


PARA_SPLIT = re.compile(r"(?:\r?\n){2,}")
PARA_EDGE = re.compile(r"\A(?:\r?\n)+|(?:\r?\n)+\Z")


def documents(path, args):
    """Yields (where, text) for every document of one input, its bytes as they are."""
    try:
        f = sys.stdin.buffer if path == "-" else open(path, "rb")
    except OSError as e:
        raise PrepError("%s: cannot read: %s" % (path, e.strerror or one_line(e)))
    name = "standard input" if path == "-" else path
    try:
        if path.endswith(".jsonl"):
            for n, raw in enumerate(f, 1):
                where = "%s:%d" % (name, n)
                line = decode(raw, where, of=" of the line")
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except RecursionError:
                    raise PrepError("%s: not JSON: nested too deeply" % where)
                except json.JSONDecodeError as e:
                    raise PrepError("%s: not JSON: %s (column %d)" % (where, e.msg, e.colno))
                except ValueError as e:  # e.g. an integer too long to convert
                    raise PrepError("%s: not JSON: %s" % (where, one_line(e)))
                text = obj.get(args.field) if isinstance(obj, dict) else None
                if not isinstance(text, str):
                    raise PrepError("%s: no string field \"%s\"" % (where, args.field))
                check_unicode(text, where, args.field)
                yield where, text
        elif args.lines:
            for n, raw in enumerate(f, 1):
                where = "%s:%d" % (name, n)
                line = decode(strip_eol(raw), where, of=" of the line")
                if line.strip():
                    yield where, line
        else:
            text = decode(f.read(), name)
            if not args.paragraphs:
                yield name, text
                return
            n = 0
            for para in PARA_SPLIT.split(text):
                if para.strip():
                    n += 1
                    yield "%s paragraph %d" % (name, n), PARA_EDGE.sub("", para)
    except OSError as e:
        raise PrepError("%s: cannot read: %s" % (name, e.strerror or one_line(e)))
    finally:
        if f is not sys.stdin.buffer:
            f.close()


# ---- encoding --------------------------------------------------------------

def _guard(call, what):
    """Runs a tokenizer call; the library's failures (its Rust panics are not
    Exceptions) become one-line errors."""
    try:
        return call()
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except BaseException as e:
        raise PrepError("%s: %s" % (what, one_line(e)))


def make_encoder(args):
    """Returns (encode(text) -> list of ids, eot id, description)."""
    if args.bytes:
        eot = 0 if args.eot is None else args.eot
        if not 0 <= eot <= 255:
            raise PrepError("--eot %d: byte-level ids run from 0 to 255" % eot)

        def encode_bytes(text):
            b = text.encode("utf-8")
            at = b.find(eot)
            if at >= 0:
                raise PrepError("holds byte %d, the end-of-text token, at byte offset %d: pick another --eot"
                                % (eot, at))
            return b

        return encode_bytes, eot, "bytes (one token per byte)"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise PrepError("--tokenizer needs the `tokenizers` library (pip install tokenizers); "
                        "--bytes needs nothing")
    path = args.tokenizer
    tok = _guard(lambda: Tokenizer.from_file(path), "%s: cannot load the tokenizer" % path)
    eot = args.eot
    if eot is None:
        for name in EOT_NAMES:
            eot = _guard(lambda: tok.token_to_id(name), "%s: cannot look up %s" % (path, name))
            if eot is not None:
                break
        if eot is None:
            raise PrepError("%s: no end-of-text token among %s: pass --eot ID" % (path, ", ".join(EOT_NAMES)))
        if not isinstance(eot, int) or not 0 <= eot <= MAX_ID:
            raise PrepError("%s: end-of-text id %r is not a uint32: pass --eot ID" % (path, eot))
    eot_text = None
    if hasattr(tok, "id_to_token"):
        try:
            eot_text = tok.id_to_token(eot)
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
    vocab = _guard(lambda: tok.get_vocab_size(), "%s: cannot read the vocabulary size" % path)

    def encode_tok(text):
        enc = _guard(lambda: tok.encode(text, add_special_tokens=False),
                     "the tokenizer %s cannot encode it" % path)
        ids = _guard(lambda: list(enc.ids), "the tokenizer %s returned no ids" % path)
        if eot in ids:
            i = ids.index(eot)
            offsets = getattr(enc, "offsets", None)
            try:
                at = ", at character %d" % offsets[i][0]
            except (TypeError, IndexError, KeyError, ValueError):
                at = ", as token %d" % i
            raise PrepError("encodes to %d, the end-of-text token%s%s: the document would split in two "
                            "in packed training; remove it from the text or pass another --eot"
                            % (eot, " (%s)" % json.dumps(eot_text) if isinstance(eot_text, str) else "", at))
        return ids

    return encode_tok, eot, "%s (%s ids)" % (path, vocab)


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
    args.tmp = args.output + ".tmp"
    for path in args.inputs:
        check_input(path, "")
    if args.tokenizer:
        check_input(args.tokenizer, "--tokenizer ")
    check_output(args)
    encode, eot, what = make_encoder(args)
    tokens = array.array("I")  # uint32 while collecting; narrowed to uint16 when every id fits
    progress = Progress(args.quiet)
    chars = ndocs = 0
    for path in args.inputs:
        for where, text in documents(path, args):
            try:
                ids = encode(text)
            except PrepError as e:
                raise PrepError("%s: %s" % (where, e))
            try:
                tokens.extend(ids)
            except (OverflowError, TypeError, ValueError):
                bad = next((t for t in ids if not isinstance(t, int) or not 0 <= t <= MAX_ID), None)
                raise PrepError("%s: the tokenizer returned id %r, not a uint32" % (where, bad))
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
    tmp = args.tmp
    try:
        with open(tmp, "wb") as f:
            header.tofile(f)
            body.tofile(f)
        os.replace(tmp, args.output)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise PrepError("%s: cannot write: %s" % (args.output, e.strerror or one_line(e)))
        raise
    progress.tick(chars, len(tokens), ndocs, final=True)
    if not args.quiet:
        print("basp_prep: wrote %s: %d tokens (uint%d) from %d document(s), end-of-text token %d, tokenizer %s" %
              (args.output, len(tokens), 16 if version == 1 else 32, ndocs, eot, what), file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Text or JSONL to an llm.c token file for basp's --data.",
                                 epilog="Text is read byte for byte, as the binaries' --text (no newline "
                                 "translation); a document holding the end-of-text token is refused; -o must "
                                 "not be an input or the tokenizer file.")
    ap.add_argument("inputs", nargs="+", help=".jsonl (one document per line), any other text file, or -")
    ap.add_argument("-o", "--output", required=True,
                    help="the token file to write (via OUT.tmp); must not be an input or the tokenizer")
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--tokenizer", help="a Hugging Face tokenizer.json (needs the tokenizers library)")
    how.add_argument("--bytes", action="store_true", help="one token per byte (ids 0..255), as the binaries' --text")
    ap.add_argument("--eot", type=int, help="the end-of-text id written after every document (0..2^32-1; "
                    "--bytes: 0..255); a document holding it is refused")
    ap.add_argument("--field", default="text", help="the JSONL field holding the text (default: text)")
    split = ap.add_mutually_exclusive_group()
    split.add_argument("--lines", action="store_true", help="text files: one document per non-empty line")
    split.add_argument("--paragraphs", action="store_true", help="text files: one document per paragraph")
    ap.add_argument("--vocab", type=int, help="refuse token ids >= VOCAB (the model's vocab)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress or summary")
    args = ap.parse_args(argv)
    if args.eot is not None and not 0 <= args.eot <= MAX_ID:
        ap.error("--eot %d: ids run from 0 to %d (uint32)" % (args.eot, MAX_ID))
    if args.vocab is not None and not 1 <= args.vocab <= MAX_ID + 1:
        ap.error("--vocab %d: must be from 1 to %d" % (args.vocab, MAX_ID + 1))
    try:
        prepare(args)
    except PrepError as e:
        print("basp_prep: error: %s" % e, file=sys.stderr)
        return 1
    except MemoryError:
        print("basp_prep: error: out of memory; split the input into several files", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("basp_prep: interrupted; nothing written", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
