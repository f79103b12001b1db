/* cm_tokens.c — the llm.c token file reader on a memory buffer (format in
 * common.h and runtime/README.md).  No MPI, no file system: the runtime's
 * loader and the planner both read token files with it, and the fuzz
 * target tests/fuzz/fuzz_tokens.c links this file alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { TOK_MAGIC = 20240520, TOK_HEADER_INTS = 256 };

static int32_t tok_le32(const uint8_t *b) {
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}

bool rt_tokens_header(const uint8_t *buf, size_t len, const char *path, int *width_out, int64_t *ntokens, char *err,
                      size_t errlen) {
    const size_t hbytes = 4 * TOK_HEADER_INTS;
    if (len < hbytes) {
        snprintf(err, errlen, "%s: not an llm.c token file: %zu bytes, shorter than the 1024-byte header", path, len);
        return false;
    }
    int32_t magic = tok_le32(buf), version = tok_le32(buf + 4), count = tok_le32(buf + 8);
    if (magic != TOK_MAGIC) {
        snprintf(err, errlen, "%s: not an llm.c token file: magic %d, expected %d (raw text? use --text)", path, magic,
                 TOK_MAGIC);
        return false;
    }
    if (version != 1 && version != 2) {
        snprintf(err, errlen, "%s: unsupported version %d (1 = uint16 tokens, 2 = uint32 tokens)", path, version);
        return false;
    }
    int64_t width = version == 1 ? 2 : 4, n = count;
    size_t payload = len - hbytes;
    if (n < 0 || payload % (size_t)width != 0 || (uint64_t)payload / (uint64_t)width != (uint64_t)n) {
        /* llm.c requires the exact size: a count that disagrees with the file
         * means a truncated file, trailing data, or a wrong version field
         * (uint32 tokens labelled uint16 would train on interleaved zeros). */
        long long want = n < 0 ? -1LL : (long long)(hbytes + (uint64_t)n * (uint64_t)width);
        snprintf(err, errlen,
                 "%s: %s: header says %lld tokens, file holds %lld (%zu bytes; version %d = %lld-byte tokens needs "
                 "exactly %lld = 1024 + %lld x %lld)",
                 path, n >= 0 && (uint64_t)payload / (uint64_t)width < (uint64_t)n ? "truncated" : "size mismatch",
                 (long long)n, (long long)(payload / (size_t)width), len, version, (long long)width, want, (long long)n,
                 (long long)width);
        return false;
    }
    *width_out = (int)width;
    *ntokens = n;
    return true;
}

static uint32_t tok_at(const uint8_t *b, int width, int64_t i) {
    return width == 1 ? b[i] : width == 2 ? (uint32_t)(b[2 * i] | b[2 * i + 1] << 8) : (uint32_t)tok_le32(b + 4 * i);
}

bool rt_tokens_check_ids(const uint8_t *b, int width, int64_t n, int64_t first, int64_t vocab, const char *path,
                         char *err, size_t errlen) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = tok_at(b, width, i);
        if ((int64_t)v >= vocab) {
            snprintf(err, errlen, "%s: token %lld has id %u, outside the model's vocabulary of %lld", path,
                     (long long)(first + i), v, (long long)vocab);
            return false;
        }
    }
    return true;
}

bool rt_tokens_parse(const uint8_t *buf, size_t len, const char *path, int64_t vocab, int32_t **tokens,
                     int64_t *ntokens, char *err, size_t errlen) {
    *tokens = NULL;
    *ntokens = 0;
    const size_t hbytes = 4 * TOK_HEADER_INTS;
    int width;
    int64_t n;
    if (!rt_tokens_header(buf, len, path, &width, &n, err, errlen)) return false;
    const uint8_t *b = buf + hbytes;
    if (!rt_tokens_check_ids(b, width, n, 0, vocab, path, err, errlen)) return false;
    int32_t *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    if (!t) {
        snprintf(err, errlen, "%s: out of memory for %lld tokens", path, (long long)n);
        return false;
    }
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)tok_at(b, width, i);
    *tokens = t;
    *ntokens = n;
    return true;
}
