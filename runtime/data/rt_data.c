/* rt_data.c — training data: the corpus (llm.c token shards or raw text,
 * mapped by rt_corpus.c), and the deterministic sampler that gives every
 * layout the same global batch at every step and micro-step.
 *
 * llm.c token file: 256 int32 header (magic 20240520, version, token count,
 * rest 0), then the tokens: version 1 = uint16, version 2 = uint32. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../core/rt_backend.h"
#include "../host/rt_host.h"
#include "../obs/rt_obs.h"
#include "rt_data.h"

/* The open file fd is a regular file (*st: its status); else false with the
 * reason (a directory, a FIFO, a device, a failed fstat). */
bool rt_regular_file(int fd, const char *path, struct stat *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    errno = 0;
    if (fstat(fd, st) == 0 && S_ISREG(st->st_mode)) return true;
    int e = errno;
    mode_t m = st->st_mode;
    const char *kind = e             ? NULL
                       : S_ISFIFO(m) ? "a FIFO (named pipe)"
                       : S_ISCHR(m)  ? "a character device"
                       : S_ISBLK(m)  ? "a block device"
                       : S_ISSOCK(m) ? "a socket"
                                     : NULL;
    if (S_ISDIR(m))
        snprintf(err, errlen, "%s: cannot read: is a directory", path);
    else if (kind) /* a pipe would be read until its writer closes it, not checked as a file */
        snprintf(err, errlen,
                 "%s: cannot read: %s, not a regular file: basp reads its inputs from regular files "
                 "only",
                 path, kind);
    else
        snprintf(err, errlen, "%s: cannot read: %s", path, e ? strerror(e) : "not a regular file");
    return false;
}

int rt_open_input(const char *opt, const char *path, struct stat *st, char *err, size_t errlen) {
    char who[4200];
    snprintf(who, sizeof who, "%s%s%s", opt ? opt : "", opt ? " " : "", path);
    /* O_NONBLOCK: open() of a FIFO without a writer would wait for one for
     * ever (a regular file ignores the flag); cleared once the file is
     * known to be regular. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", who, strerror(errno));
        return -1;
    }
    int fl = -1;
    if (!rt_regular_file(fd, who, st, err, errlen) || (fl = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        if (fl < 0 && S_ISREG(st->st_mode)) snprintf(err, errlen, "%s: cannot open: %s", who, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

bool rt_read_input(const char *opt, const char *path, unsigned char **out, int64_t *len, char *err, size_t errlen) {
    struct stat st;
    int fd = rt_open_input(opt, path, &st, err, errlen);
    if (fd < 0) return false;
    /* Sized from fstat of a regular file (never from an unchecked size);
     * one byte more is asked for, so a file that grew is noticed. */
    size_t n = (size_t)st.st_size, got = 0;
    unsigned char *b = (uint64_t)st.st_size < SIZE_MAX - 1 ? malloc(n + 2) : NULL;
    ssize_t r = 1;
    while (b && got <= n && (r = read(fd, b + got, n + 1 - got)) > 0) {
        got += (size_t)r;
        rt_watchdog_pulse(); /* a large checkpoint or model file */
    }
    int e = r < 0 ? errno : 0;
    close(fd);
    if (!b || r < 0 || got != n) {
        free(b);
        snprintf(err, errlen, "%s%s%s: cannot read: %s", opt ? opt : "", opt ? " " : "", path,
                 !b  ? "out of memory"
                 : e ? strerror(e)
                     : "short read (file changed while reading?)");
        return false;
    }
    b[n] = 0;
    *out = b;
    *len = (int64_t)n;
    return true;
}

bool rt_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

bool rt_read_file(const char *path, unsigned char **out, int64_t *len, char *err, size_t errlen) {
    return rt_read_input(NULL, path, out, len, err, errlen);
}

void rt_data_unmap(rt_ctx *rt) {
    rt_corpus_free(&rt->train);
    rt_corpus_free(&rt->val);
    rt->data = NULL;
}

bool rt_data_load(rt_ctx *rt, const rt_options *o, char *err, size_t errlen) {
    bool text = o->text != NULL;
    if (text && rt->p->vocab < 256) {
        snprintf(err, errlen,
                 "--text uses byte-level tokens and needs a vocabulary of at least 256; the model has %lld",
                 (long long)rt->p->vocab);
        return false;
    }
    const char *one[1] = {o->text};
    if (!rt_corpus_open(&rt->train, text ? one : o->data, text ? 1 : o->ndata, text, rt->p->vocab, err, errlen))
        return false;
    rt->data = &rt->train;
    const char *path = rt->train.shard[0].path;
    /* Documents are drawn with replacement: any data holding one will do. */
    if (rt->p->documents) return rt_docs_load(rt, path, err, errlen);
    int64_t need = rt->p->seq_len + 2;
    if (rt->train.ntokens < need) {
        snprintf(err, errlen, "%s%s: %lld tokens, too few for one sequence of seq_len %lld (need at least %lld)", path,
                 rt->train.nshards > 1 ? " and the other shards" : "", (long long)rt->train.ntokens,
                 (long long)rt->p->seq_len, (long long)need);
        return false;
    }
    return true;
}

/* A counter-based position: the same (seed, step, sequence) gives the same
 * start on any rank of any layout. */
int64_t rt_data_position(uint64_t seed, int64_t t, int64_t b, int64_t ntokens, int64_t seq_len) {
    uint64_t h = rt_splitmix64(seed);
    h = rt_splitmix64(h ^ (uint64_t)t);
    h = rt_splitmix64(h ^ (uint64_t)b);
    return (int64_t)(h % (uint64_t)(ntokens - seq_len - 1));
}

/* A keyed permutation of [0, n): a 4-round Feistel network on the
 * smallest even number of bits covering n, applied again while the result
 * is >= n (cycle walking: a bijection of [0, 2^bits) restricted to [0, n)
 * stays one; fewer than 4 rounds of walking on average, as 2^bits < 4n). */
static int64_t rt_permute(uint64_t key, int64_t x, int64_t n) {
    int bits = 2;
    while ((INT64_C(1) << bits) < n) bits += 2;
    int half = bits / 2;
    uint64_t mask = (UINT64_C(1) << half) - 1;
    do {
        uint64_t l = (uint64_t)x >> half, r = (uint64_t)x & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t f = rt_splitmix64(key ^ rt_splitmix64(r ^ ((uint64_t)round << 56))) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = (int64_t)(l << half | r);
    } while (x >= n);
    return x;
}

int64_t rt_epoch_window(uint64_t seed, int64_t i, int64_t nwin) {
    int64_t epoch = i / nwin;
    uint64_t key = rt_splitmix64(rt_splitmix64(seed ^ UINT64_C(0x65706f6368)) ^ (uint64_t)epoch);
    return rt_permute(key, i % nwin, nwin);
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
    for (int i = 0; i < d->rank; i++) /* this rank's block: its positions as bound now (dynamic groups too) */
        off[i] = d->shard[i] < 0 ? 0 : rt_dim_start(p, d, i, rt->gpos[d->shard[i]]);
    int32_t *out = RT_MALLOC((size_t)d->local_elems * sizeof(int32_t));
    int64_t *seq = RT_MALLOC((size_t)ld[1] * sizeof(int64_t));
    rt_seq_positions(rt, off[1], ld[1], seq);
    for (int64_t bi = 0; bi < ld[0]; bi++) {
        if (rt->docs) { /* the step's packed rows */
            for (int64_t s = 0; s < ld[1]; s++) out[bi * ld[1] + s] = rt_docs_token(rt, off[0] + bi, seq[s], shift);
            continue;
        }
        int64_t seqno = rt->micro * p->micro_batch + off[0] + bi; /* within the step's A·B sequences */
        int64_t pos = rt->val_batch >= 0 ? (rt->val_batch * p->micro_batch + off[0] + bi) * p->seq_len /* in order */
                      : rt->opt.epoch
                          ? rt_epoch_window((uint64_t)rt->opt.seed, t * rt_accum(rt) * p->micro_batch + seqno,
                                            (rt->data->ntokens - 1) / p->seq_len) *
                                p->seq_len
                          : rt_data_position((uint64_t)rt->opt.seed, t, seqno, rt->data->ntokens, p->seq_len);
        for (int64_t s = 0; s < ld[1]; s++) out[bi * ld[1] + s] = rt_token(rt, pos + seq[s] + shift);
    }
    free(seq);
    rt_host_write(rt, v, out);
    free(out);
}

void rt_data_fill(rt_ctx *rt, int64_t t) {
    if (rt->val_batch < 0) rt_docs_step(rt, t * rt_accum(rt) + rt->micro); /* validation: rt_validate packs */
    if (rt->p->tokens >= 0) rt_fill_input(rt, rt->p->tokens, t, 0);
    if (rt->p->targets >= 0) rt_fill_input(rt, rt->p->targets, t, 1);
}
