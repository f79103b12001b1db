/* rt_save.c — --save-weights / --save-grads: full (unsharded) fp32 tensors
 * gathered from the shards, so runs of different layouts compare exactly.
 *
 * File format (little-endian):
 *   uint32 magic 0x54505342 ("BSPT"; gradients 0x47505342 "BSPG"), uint32 version 1,
 *   uint32 count
 *   count × { uint32 name_len, name bytes (no NUL), uint32 ndims, int64 dims[ndims] }
 *   count × fp32 data, row-major over the global dims, in the same order
 * Tensors come in program order (parameters) or optimizer-table order
 * (gradients, named after their parameter).  Written to PATH.tmp, synced,
 * then renamed, so a crash never leaves a half-written file at PATH.
 * rt_load.c reads the parameter files back (--init-from). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/rt_backend.h"
#include "../obs/rt_obs.h"
#include "rt_chunk.h"
#include "rt_ckpt.h"

/* The tensors to save: value indices and the names to save them under. */
static int rt_save_list(rt_ctx *rt, bool grads, int *vals, const char **names) {
    int n = 0;
    if (grads) {
        for (int i = 0; i < rt->p->nopt; i++) {
            vals[n] = rt->p->opt[i].grad;
            names[n++] = rt->p->values[rt->p->opt[i].param].name;
        }
    } else {
        for (int v = 0; v < rt->p->nvalues; v++)
            if (rt->p->values[v].kind == RT_PARAM) {
                vals[n] = v;
                names[n++] = rt->p->values[v].name;
            }
    }
    return n;
}

/* Copies elements [start, start + count) of a local box (dims ld, at global
 * offset off of a tensor with dims gd) between the flat chunk `buf` and the
 * full tensor `full`: to_full says which way.  Runs along the last dim. */
static void rt_range_copy(float *full, const int64_t *gd, const int64_t *off, const int64_t *ld, int nd, float *buf,
                          int64_t start, int64_t count, bool to_full) {
    static const int64_t one = 1, zero = 0;
    if (nd == 0) { /* a scalar: one element */
        gd = ld = &one;
        off = &zero;
        nd = 1;
    }
    int64_t idx[RT_MAX_RANK], gstride[RT_MAX_RANK];
    gstride[nd - 1] = 1;
    for (int k = nd - 1; k > 0; k--) gstride[k - 1] = gstride[k] * gd[k];
    int64_t rem = start;
    for (int k = nd - 1; k >= 0; k--) {
        idx[k] = rem % ld[k];
        rem /= ld[k];
    }
    int64_t done = 0;
    while (done < count) {
        int64_t run = ld[nd - 1] - idx[nd - 1];
        if (run > count - done) run = count - done;
        int64_t g = 0;
        for (int k = 0; k < nd; k++) g += (off[k] + idx[k]) * gstride[k];
        if (to_full)
            memcpy(full + g, buf + done, (size_t)run * 4);
        else
            memcpy(buf + done, full + g, (size_t)run * 4);
        done += run;
        idx[nd - 1] += run;
        for (int k = nd - 1; k > 0 && idx[k] == ld[k]; k--) {
            idx[k] = 0;
            idx[k - 1]++;
        }
    }
}

/* Value v's layout on every rank: local dims, and each rank's global offset. */
static int rt_layout(rt_ctx *rt, int v, int64_t *ld, int64_t (**offs)[RT_MAX_RANK]) {
    int nd = rt_local_dims(rt, v, ld);
    *offs = RT_MALLOC(sizeof **offs * (size_t)rt->world);
    for (int r = 0; r < rt->world; r++) rt_global_offset(rt->p, v, r, (*offs)[r]);
    return nd;
}

/* The chunking of n local elements per rank: chunk elements per call
 * (never more than n), returns the number of calls. */
static int64_t rt_chunks_of(const rt_ctx *rt, int64_t n, int64_t *chunk) {
    *chunk = rt_chunk_per_rank(rt->world, rt_chunk_test_override());
    if (*chunk > n && n > 0) *chunk = n;
    return rt_chunk_count(n, *chunk);
}

/* Collective: every rank's shard (`mine`, laid out as value v) goes to
 * rank 0, which places each at its global offset (replicated shards
 * overwrite each other with equal data).  Checkpoints gather optimizer
 * moments through it too: they share their parameter's layout.
 *
 * In chunks (rt_chunk.h): each collective moves at most `chunk` elements
 * per rank, so no MPI count overflows an int whatever the tensor's size,
 * and rank 0 holds the full tensor plus one chunk from every rank, never
 * world copies of a shard.  The bytes are the same for any chunk size. */
void rt_gather_local(rt_ctx *rt, int v, const float *mine, float *full) {
    const rt_value_desc *d = &rt->p->values[v];
    int64_t n = d->local_elems, chunk, nchunks = rt_chunks_of(rt, n, &chunk);
    int64_t ld[RT_MAX_RANK], (*offs)[RT_MAX_RANK] = NULL;
    int nd = 0;
    /* The first rank holding the same box as rank r (replicas), or r. */
    int *first = NULL;
    bool *warned = NULL;
    float *all = NULL;
    if (rt->rank == 0) {
        nd = rt_layout(rt, v, ld, &offs);
        first = RT_MALLOC(sizeof(int) * (size_t)rt->world);
        warned = RT_MALLOC(sizeof(bool) * (size_t)rt->world);
        for (int r = 0; r < rt->world; r++) {
            first[r] = r;
            warned[r] = false;
            for (int q = 0; q < r; q++)
                if (memcmp(offs[q], offs[r], sizeof offs[r]) == 0) {
                    first[r] = q;
                    break;
                }
        }
        all = RT_MALLOC((size_t)chunk * (size_t)rt->world * 4);
    }
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t s;
        int len = rt_chunk_at(n, chunk, c, &s);
        RT_MPI(MPI_Gather(mine + s, len, MPI_FLOAT, all, len, MPI_FLOAT, 0, MPI_COMM_WORLD));
        if (rt->rank != 0) continue;
        for (int r = 0; r < rt->world; r++) {
            float *part = all + (size_t)r * (size_t)len;
            rt_range_copy(full, d->dims, offs[r], ld, nd, part, s, len, true);
            /* Replicas must agree bit for bit (they were updated from identical
             * reduced gradients); say so loudly when they do not. */
            int q = first[r];
            if (q != r && !warned[r] && memcmp(all + (size_t)q * (size_t)len, part, (size_t)len * 4) != 0) {
                fprintf(stderr, "warning: the copies of %s on ranks %d and %d differ\n", d->name, q, r);
                warned[r] = true;
            }
        }
    }
    free(all);
    free(first);
    free(warned);
    free(offs);
}

/* Collective: rank 0 cuts every rank's box of value v's layout out of the
 * full tensor `full` (aligned floats) and scatters them into `mine`, in
 * chunks as rt_gather_local (its mirror). */
void rt_scatter_local(rt_ctx *rt, int v, const float *full, float *mine) {
    const rt_value_desc *d = &rt->p->values[v];
    int64_t n = d->local_elems, chunk, nchunks = rt_chunks_of(rt, n, &chunk);
    int64_t ld[RT_MAX_RANK], (*offs)[RT_MAX_RANK] = NULL;
    int nd = 0;
    float *all = NULL;
    if (rt->rank == 0) {
        nd = rt_layout(rt, v, ld, &offs);
        all = RT_MALLOC((size_t)chunk * (size_t)rt->world * 4);
    }
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t s;
        int len = rt_chunk_at(n, chunk, c, &s);
        if (rt->rank == 0)
            for (int r = 0; r < rt->world; r++)
                rt_range_copy((float *)full, d->dims, offs[r], ld, nd, all + (size_t)r * (size_t)len, s, len, false);
        RT_MPI(MPI_Scatter(all, len, MPI_FLOAT, mine + s, len, MPI_FLOAT, 0, MPI_COMM_WORLD));
    }
    free(all);
    free(offs);
}

static void rt_gather_full(rt_ctx *rt, int v, float *full) {
    float *mine = RT_MALLOC((size_t)rt->p->values[v].local_elems * 4);
    rt_host_read(rt, v, mine);
    rt_gather_local(rt, v, mine, full);
    free(mine);
}

static bool rt_write_u32(FILE *f, uint32_t x) { return fwrite(&x, 4, 1, f) == 1; }

static bool rt_write_headers(FILE *f, const rt_program *p, bool grads, int n, const int *vals, const char **names) {
    bool ok = rt_write_u32(f, grads ? RT_GRADS_MAGIC : RT_SAVE_MAGIC) && rt_write_u32(f, RT_SAVE_VERSION) &&
              rt_write_u32(f, (uint32_t)n);
    for (int i = 0; ok && i < n; i++) {
        const rt_value_desc *d = &p->values[vals[i]];
        uint32_t len = (uint32_t)strlen(names[i]);
        ok = rt_write_u32(f, len) && fwrite(names[i], 1, len, f) == len && rt_write_u32(f, (uint32_t)d->rank);
        for (int k = 0; ok && k < d->rank; k++) ok = fwrite(&d->dims[k], 8, 1, f) == 1;
    }
    return ok;
}

/* The errno of a failed write, or EIO when the call left none. */
static int rt_save_errno(void) { return errno ? errno : EIO; }

/* BASP_TEST_WRITE_DELAY_MS=MS: rank 0 writes the first tensor of a --save-*
 * file in pieces of 1024 floats spread over MS milliseconds, as a slow disk
 * would, so that a test can make one tensor take longer than --timeout
 * while the other ranks wait for it. */
static long rt_save_test_delay_ms(void) {
    const char *e = getenv("BASP_TEST_WRITE_DELAY_MS");
    long ms = e ? atol(e) : 0;
    return ms > 0 ? ms : 0;
}

static void rt_save_nap(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Rank 0: n floats in pieces of 64 MiB, one beat each, so that a tensor of
 * many GiB on a slow disk is progress and not a hang.  The errno, or 0. */
static int rt_save_write(FILE *f, const float *x, int64_t n, long delay_ms, const char *what, const char *path,
                         int64_t step) {
    const int64_t piece = delay_ms > 0 ? 1024 : (int64_t)1 << 24;
    int64_t npieces = (n + piece - 1) / piece;
    for (int64_t s = 0; s < n; s += piece) {
        size_t len = (size_t)(n - s < piece ? n - s : piece);
        errno = 0;
        if (fwrite(x + s, 4, len, f) != len) return rt_save_errno();
        if (delay_ms > 0) rt_save_nap(delay_ms / npieces);
        rt_watchdog_beat_on(what, path, step);
    }
    return 0;
}

/* Rank 0: flushes, syncs, closes and renames the file into place. */
static int rt_save_finish(FILE *f, const char *tmp, const char *path, int err) {
    errno = 0;
    if (!err && (fflush(f) != 0 || fsync(fileno(f)) != 0)) err = rt_save_errno();
    if (f && fclose(f) != 0 && !err) err = rt_save_errno();
    if (!err && rename(tmp, path) != 0) err = rt_save_errno();
    return err;
}

bool rt_save_tensors(rt_ctx *rt, const char *path, bool grads, int64_t step) {
    const char *opt = grads ? "--save-grads" : "--save-weights";
    const char *what = grads ? "writing --save-grads" : "writing --save-weights";
    int *vals = RT_MALLOC(sizeof(int) * (size_t)(rt->p->nvalues + 1));
    const char **names = RT_MALLOC(sizeof(char *) * (size_t)(rt->p->nvalues + 1));
    int n = rt_save_list(rt, grads, vals, names);
    char *tmp = RT_MALLOC(strlen(path) + 8);
    sprintf(tmp, "%s.tmp", path);
    FILE *f = NULL;
    int err = 0; /* rank 0: errno of the first failure */
    rt_watchdog_beat_on(what, path, step);
    if (rt->rank != 0) rt_watchdog_hold(true); /* until rank 0 has the file in place */
    if (rt->rank == 0) {
        errno = 0;
        f = fopen(tmp, "wb");
        if (!f || !rt_write_headers(f, rt->p, grads, n, vals, names)) err = rt_save_errno();
    }
    for (int i = 0; i < n; i++) {
        const rt_value_desc *d = &rt->p->values[vals[i]];
        int64_t total = 1;
        for (int k = 0; k < d->rank; k++) total *= d->dims[k];
        float *full = rt->rank == 0 ? RT_MALLOC((size_t)total * 4) : NULL;
        rt_watchdog_beat_on(what, path, step);
        rt_gather_full(rt, vals[i], full); /* collective: every rank takes part even after a write error */
        long delay = i ? 0 : rt_save_test_delay_ms();
        if (rt->rank == 0 && !err) err = rt_save_write(f, full, total, delay, what, path, step);
        free(full);
    }
    if (rt->rank == 0) {
        rt_watchdog_beat_on(what, path, step);
        err = rt_save_finish(f, tmp, path, err);
        if (err) {
            remove(tmp);
            fprintf(stderr, "error: %s %s: cannot write %s: %s (the file was not written)\n", opt, path, tmp,
                    strerror(err));
        } else {
            printf("saved %d %s to %s\n", n, grads ? "gradients" : "parameters", path);
        }
    }
    /* Every rank leaves together, so none starts waiting in a later
     * collective while rank 0 is still syncing the file. */
    RT_MPI(MPI_Bcast(&err, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (rt->rank != 0) rt_watchdog_hold(false);
    rt_watchdog_beat_on(what, path, step);
    free(tmp);
    free(vals);
    free(names);
    return err == 0;
}
