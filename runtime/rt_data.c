/* rt_data.c — training data: llm.c token files or raw text (byte-level
 * tokens), and the deterministic sampler that gives every layout the same
 * global batch at every step.
 *
 * llm.c token file: 256 int32 header (magic 20240520, version, token count,
 * rest 0), then the tokens: version 1 = uint16, version 2 = uint32. */
#include <errno.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "rt_internal.h"

bool rt_read_file(const char *path, unsigned char **out, int64_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    /* fopen succeeds on a directory; its size is meaningless (ftell may say
     * 2^63 - 1), so check the kind and never allocate from an unchecked size. */
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        bool dir = S_ISDIR(st.st_mode);
        fclose(f);
        snprintf(err, errlen, "%s: cannot read: %s", path,
                 dir ? "is a directory" : (e ? strerror(e) : "not a regular file"));
        return false;
    }
    errno = 0;
    bool ok = fseek(f, 0, SEEK_END) == 0;
    long n = ok ? ftell(f) : -1;
    ok = ok && n >= 0 && (off_t)n == st.st_size && fseek(f, 0, SEEK_SET) == 0;
    unsigned char *b = ok ? malloc((size_t)n + 1) : NULL;
    ok = b && fread(b, 1, (size_t)n, f) == (size_t)n;
    int e = errno ? errno : (ferror(f) ? EIO : 0);
    fclose(f);
    if (!ok) {
        free(b);
        snprintf(err, errlen, "%s: cannot read: %s", path,
                 e ? strerror(e) : (n >= 0 && !b ? "out of memory" : "short read (file changed while reading?)"));
        return false;
    }
    *out = b;
    *len = n;
    return true;
}

/* Validates header, size and token range (rt_tokens.c); fills rt->tokens. */
static bool rt_parse_llmc(rt_ctx *rt, const char *path, const unsigned char *b, int64_t len, char *err,
                          size_t errlen) {
    return rt_tokens_parse(b, (size_t)len, path, rt->p->vocab, &rt->tokens, &rt->ntokens, err, errlen);
}

bool rt_data_load(rt_ctx *rt, const char *data, const char *text, char *err, size_t errlen) {
    const char *path = data ? data : text;
    if (text && rt->p->vocab < 256) {
        snprintf(err, errlen, "--text uses byte-level tokens and needs a vocabulary of at least 256; the model has %lld",
                 (long long)rt->p->vocab);
        return false;
    }
    unsigned char *b;
    int64_t len;
    if (!rt_read_file(path, &b, &len, err, errlen)) return false;
    bool ok = true;
    if (data) {
        ok = rt_parse_llmc(rt, path, b, len, err, errlen);
    } else {
        rt->tokens = RT_MALLOC((size_t)(len ? len : 1) * sizeof(int32_t));
        rt->ntokens = len;
        for (int64_t i = 0; i < len; i++) rt->tokens[i] = b[i];
    }
    free(b);
    /* Documents are drawn with replacement: any data holding one will do. */
    if (ok && rt->p->documents) return rt_docs_load(rt, path, err, errlen);
    int64_t need = rt->p->seq_len + 2;
    if (ok && rt->ntokens < need) {
        snprintf(err, errlen, "%s: %lld tokens, too few for one sequence of seq_len %lld (need at least %lld)", path,
                 (long long)rt->ntokens, (long long)rt->p->seq_len, (long long)need);
        ok = false;
    }
    return ok;
}

/* A counter-based position: the same (seed, step, sequence) gives the same
 * start on any rank of any layout. */
int64_t rt_data_position(uint64_t seed, int64_t t, int64_t b, int64_t ntokens, int64_t seq_len) {
    uint64_t h = rt_splitmix64(seed);
    h = rt_splitmix64(h ^ (uint64_t)t);
    h = rt_splitmix64(h ^ (uint64_t)b);
    return (int64_t)(h % (uint64_t)(ntokens - seq_len - 1));
}

void rt_seq_positions(const rt_ctx *rt, int64_t start, int64_t n, int64_t *pos) {
    int R = rt->p->seq_ring;
    for (int64_t t = 0; t < n; t++) pos[t] = R > 1 ? kern_zigzag_pos(start + t, rt->p->seq_len, R) : start + t;
}

/* Fills the local [b, s] slice of one [B, S] i32 input; shift = 1 for the
 * targets (the token after each input token, also across shard borders). */
static void rt_fill_input(rt_ctx *rt, int v, int64_t t, int shift) {
    const rt_program *p = rt->p;
    const rt_value_desc *d = &p->values[v];
    RT_CHECK(d->rank == 2 && d->dtype == RT_I32 && d->dims[0] == p->micro_batch && d->dims[1] == p->seq_len,
             "input %s must be i32[%lld,%lld]", d->name, (long long)p->micro_batch, (long long)p->seq_len);
    int64_t ld[RT_MAX_RANK], off[RT_MAX_RANK];
    rt_local_dims(rt, v, ld);
    rt_global_offset(p, v, rt->rank, off);
    int32_t *out = RT_MALLOC((size_t)d->local_elems * sizeof(int32_t));
    int64_t *seq = RT_MALLOC((size_t)ld[1] * sizeof(int64_t));
    rt_seq_positions(rt, off[1], ld[1], seq);
    for (int64_t bi = 0; bi < ld[0]; bi++) {
        if (rt->docs) { /* the step's packed rows */
            for (int64_t s = 0; s < ld[1]; s++) out[bi * ld[1] + s] = rt_docs_token(rt, off[0] + bi, seq[s], shift);
            continue;
        }
        int64_t pos = rt_data_position((uint64_t)rt->opt.seed, t, off[0] + bi, rt->ntokens, p->seq_len);
        for (int64_t s = 0; s < ld[1]; s++) out[bi * ld[1] + s] = rt->tokens[pos + seq[s] + shift];
    }
    free(seq);
    rt_host_write(rt, v, out);
    free(out);
}

void rt_data_fill(rt_ctx *rt, int64_t t) {
    rt_docs_step(rt, t);
    if (rt->p->tokens >= 0) rt_fill_input(rt, rt->p->tokens, t, 0);
    if (rt->p->targets >= 0) rt_fill_input(rt, rt->p->targets, t, 1);
}
