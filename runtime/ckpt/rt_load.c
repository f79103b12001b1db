/* rt_load.c — --init-from: start from the parameters of a --save-weights
 * file (format in rt_save.c).  The file holds full, unsharded tensors, so a
 * run of any layout (world size, ZeRO stage, batch-aware groups) can load a
 * file written by any other layout of the same model.
 *
 * Rank 0 alone reads the file and checks all of it — header, sizes, and every
 * tensor's name and dims against the program — before any parameter is
 * touched, then broadcasts its verdict, so every rank fails or proceeds
 * together and none is left waiting in a collective.  Each parameter then
 * reaches the ranks with chunked MPI_Scatter calls: rank 0 cuts every rank's box at its
 * global offset, the mirror of the gather in rt_save.c.
 *
 * A directory given to --init-from is a Hugging Face model directory
 * (safetensors), read by rt_hf_load_dir in rt_ckpt_load.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/rt_backend.h"
#include "../data/rt_data.h"
#include "../obs/rt_obs.h"
#include "rt_ckpt.h"

/* One tensor header of the file; data_off is the byte offset of its fp32 data. */
typedef struct rt_file_tensor {
    const char *name; /* points into the file buffer, not NUL-terminated */
    uint32_t name_len;
    int nd;
    int64_t dims[RT_MAX_RANK];
    int64_t elems, data_off;
} rt_file_tensor;

typedef struct rt_tensor_file {
    const char *path;
    unsigned char *bytes;
    int64_t len;
    uint32_t count;
    rt_file_tensor *t;
} rt_tensor_file;

/* Bounds-checked read of n bytes at *off. */
static bool rt_take(const rt_tensor_file *f, int64_t *off, void *out, int64_t n) {
    if (n < 0 || *off > f->len - n) return false;
    memcpy(out, f->bytes + *off, (size_t)n);
    *off += n;
    return true;
}

/* "[64,4,16]" */
static void rt_fmt_dims(char *out, size_t n, const int64_t *dims, int nd) {
    size_t k = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (k < n) snprintf(out + k, n - k, "]");
}

/* How much of a file tensor's name goes into a message: a damaged header
 * may claim a name of any length. */
static int rt_name_shown(const rt_file_tensor *t) { return (int)(t->name_len > 64 ? 64 : t->name_len); }

/* Parses tensor header i at *off (name, ndims, dims) and its element count. */
static bool rt_parse_head(rt_tensor_file *f, uint32_t i, int64_t *off, char *err, size_t errlen) {
    rt_file_tensor *t = &f->t[i];
    uint32_t nd;
    if (!rt_take(f, off, &t->name_len, 4) || t->name_len > f->len - *off)
        return rt_fail(err, errlen,
                       "%s: truncated: the header of tensor %u of %u runs past the end of the file (%lld bytes)",
                       f->path, i + 1, f->count, (long long)f->len);
    t->name = (const char *)f->bytes + *off;
    *off += t->name_len;
    if (!rt_take(f, off, &nd, 4))
        return rt_fail(err, errlen, "%s: truncated: the header of tensor %.*s runs past the end of the file", f->path,
                       rt_name_shown(t), t->name);
    if (nd > RT_MAX_RANK)
        return rt_fail(err, errlen, "%s: corrupt header: tensor %.*s has %u dims (at most %d)", f->path,
                       rt_name_shown(t), t->name, nd, RT_MAX_RANK);
    t->nd = (int)nd;
    if (!rt_take(f, off, t->dims, 8 * (int64_t)nd))
        return rt_fail(err, errlen, "%s: truncated: the header of tensor %.*s runs past the end of the file", f->path,
                       rt_name_shown(t), t->name);
    /* Dims that are negative or whose byte count overflows cannot come from
     * rt_save.c: the header is damaged. */
    t->elems = 1;
    bool bad = false;
    for (int k = 0; k < t->nd && !bad; k++) {
        bad = t->dims[k] < 0 || (t->dims[k] > 0 && t->elems > INT64_MAX / 4 / t->dims[k]);
        if (!bad) t->elems *= t->dims[k];
    }
    if (bad) {
        char shape[160];
        rt_fmt_dims(shape, sizeof shape, t->dims, t->nd);
        return rt_fail(err, errlen, "%s: corrupt header: tensor %.*s has dims %s", f->path, rt_name_shown(t), t->name,
                       shape);
    }
    return true;
}

/* Magic, version, headers, and the file length against what they describe. */
static bool rt_parse_file(rt_tensor_file *f, char *err, size_t errlen) {
    uint32_t h[3];
    int64_t off = 0;
    if (!rt_take(f, &off, h, sizeof h))
        return rt_fail(err, errlen, "%s: not a basp weights file: %lld bytes, shorter than the 12-byte header", f->path,
                       (long long)f->len);
    if (h[0] == RT_GRADS_MAGIC)
        return rt_fail(err, errlen,
                       "%s: holds gradients (written by --save-grads), not weights: --init-from takes a file "
                       "written by --save-weights, a checkpoint or a Hugging Face directory",
                       f->path);
    if (h[0] != RT_SAVE_MAGIC)
        return rt_fail(err, errlen,
                       "%s: not a basp weights file (written by --save-weights): magic 0x%08x, expected 0x%08x%s",
                       f->path, h[0], (unsigned)RT_SAVE_MAGIC,
                       h[0] == RT_DATA_MAGIC ? " (an llm.c token file: pass it with --data)" : "");
    if (h[1] != RT_SAVE_VERSION)
        return rt_fail(err, errlen, "%s: unsupported weights file version %u (this program reads version %d)", f->path,
                       h[1], RT_SAVE_VERSION);
    f->count = h[2];
    /* Each header takes at least 8 bytes: a larger count is a damaged file,
     * caught before it sizes an allocation. */
    if ((int64_t)f->count > (f->len - off) / 8)
        return rt_fail(err, errlen,
                       "%s: truncated: the header lists %u tensors, more than the file's %lld bytes can hold", f->path,
                       f->count, (long long)f->len);
    f->t = RT_MALLOC(sizeof *f->t * (size_t)(f->count ? f->count : 1));
    for (uint32_t i = 0; i < f->count; i++)
        if (!rt_parse_head(f, i, &off, err, errlen)) return false;
    int64_t need = off; /* saturates: only compared with the real length */
    for (uint32_t i = 0; i < f->count; i++) {
        f->t[i].data_off = need;
        need = need > INT64_MAX - 4 * f->t[i].elems ? INT64_MAX : need + 4 * f->t[i].elems;
    }
    if (need > f->len)
        return rt_fail(err, errlen, "%s: truncated: the header describes %lld bytes of %u tensors, the file holds %lld",
                       f->path, (long long)need, f->count, (long long)f->len);
    if (need < f->len)
        return rt_fail(err, errlen,
                       "%s: %lld bytes of trailing garbage after the last tensor (the header describes %lld bytes, "
                       "the file holds %lld)",
                       f->path, (long long)(f->len - need), (long long)need, (long long)f->len);
    return true;
}

static int rt_find_param(const rt_program *p, const rt_file_tensor *t) {
    for (int v = 0; v < p->nvalues; v++)
        if (p->values[v].kind == RT_PARAM && strlen(p->values[v].name) == t->name_len &&
            memcmp(p->values[v].name, t->name, t->name_len) == 0)
            return v;
    return -1;
}

/* Every file tensor is a parameter of this program with the same dims, and
 * every parameter is in the file; the first mismatch in file order (then
 * program order, for the missing ones) is reported.  which[v] = the file
 * tensor holding parameter v. */
static bool rt_match_params(const rt_program *p, const rt_tensor_file *f, int *which, char *err, size_t errlen) {
    const char *spec = p->spec ? p->spec : "its spec";
    char a[160], b[160];
    for (int v = 0; v < p->nvalues; v++) which[v] = -1;
    for (uint32_t i = 0; i < f->count; i++) {
        const rt_file_tensor *t = &f->t[i];
        int v = rt_find_param(p, t);
        rt_fmt_dims(a, sizeof a, t->dims, t->nd);
        if (v < 0)
            return rt_fail(err, errlen,
                           "checkpoint was saved from a different model: %.*s %s in %s is not a parameter "
                           "of this program (compiled from %s)",
                           rt_name_shown(t), t->name, a, f->path, spec);
        if (which[v] >= 0)
            return rt_fail(err, errlen, "%s: corrupt file: tensor %s appears twice", f->path, p->values[v].name);
        const rt_value_desc *d = &p->values[v];
        rt_fmt_dims(b, sizeof b, d->dims, d->rank);
        if (t->nd != d->rank || memcmp(t->dims, d->dims, sizeof(int64_t) * (size_t)d->rank) != 0)
            return rt_fail(err, errlen,
                           "checkpoint was saved from a different model: %s is %s in %s but %s in this "
                           "program (compiled from %s)",
                           d->name, a, f->path, b, spec);
        which[v] = (int)i;
    }
    for (int v = 0; v < p->nvalues; v++)
        if (p->values[v].kind == RT_PARAM && which[v] < 0) {
            rt_fmt_dims(b, sizeof b, p->values[v].dims, p->values[v].rank);
            return rt_fail(err, errlen,
                           "checkpoint was saved from a different model: this program (compiled from %s) "
                           "has parameter %s %s, which %s does not hold",
                           spec, p->values[v].name, b, f->path);
        }
    return true;
}

/* rt_scatter_local (rank 0 cuts every rank's box out of a full tensor and
 * scatters it, in chunks) lives in rt_save.c beside its mirror, the gather. */

/* Collective: parameter v from the full tensor at `src` (unaligned, inside
 * the file buffer). */
static void rt_scatter_param(rt_ctx *rt, int v, const unsigned char *src) {
    const rt_value_desc *d = &rt->p->values[v];
    float *full = NULL;
    if (rt->rank == 0) {
        int64_t total = 1;
        for (int k = 0; k < d->rank; k++) total *= d->dims[k];
        full = RT_MALLOC((size_t)total * 4); /* the file gives no alignment for the data */
        memcpy(full, src, (size_t)total * 4);
    }
    float *mine = RT_MALLOC((size_t)d->local_elems * 4);
    rt_scatter_local(rt, v, full, mine);
    rt_host_write(rt, v, mine);
    rt_watchdog_pulse(); /* a large model loads tensor by tensor */
    free(mine);
    free(full);
}

/* Rank 0: no NaN or Inf in any parameter of the file (named with the file). */
static bool rt_load_finite(const rt_program *p, const rt_tensor_file *f, const int *which, char *err, size_t errlen) {
    for (int v = 0; v < p->nvalues; v++) {
        if (p->values[v].kind != RT_PARAM) continue;
        const rt_value_desc *d = &p->values[v];
        int64_t total = 1;
        for (int k = 0; k < d->rank; k++) total *= d->dims[k];
        float *x = RT_MALLOC((size_t)total * 4); /* the file gives no alignment for the data */
        memcpy(x, f->bytes + f->t[which[v]].data_off, (size_t)total * 4);
        int64_t i = rt_first_nonfinite(x, total);
        float bad = i >= 0 ? x[i] : 0;
        free(x);
        if (i >= 0)
            return rt_fail(err, errlen,
                           "%s: tensor %s holds a non-finite value (%s at element %lld): refusing to "
                           "train from it",
                           f->path, d->name,
                           isnan(bad) ? "nan"
                           : bad > 0  ? "inf"
                                      : "-inf",
                           (long long)i);
    }
    return true;
}

/* Rank 0: read and check everything; the verdict and message go to all. */
static bool rt_load_check(rt_ctx *rt, rt_tensor_file *f, int *which, char *err, size_t errlen) {
    int ok = 1;
    if (rt->rank == 0)
        ok = rt_read_input("--init-from", f->path, &f->bytes, &f->len, err, errlen) && rt_parse_file(f, err, errlen) &&
             rt_match_params(rt->p, f, which, err, errlen) && rt_load_finite(rt->p, f, which, err, errlen);
    RT_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
    RT_CHECK(errlen <= 0x7fffffff, "error buffer too large");
    if (!ok) RT_MPI(MPI_Bcast(err, (int)errlen, MPI_CHAR, 0, MPI_COMM_WORLD));
    return ok;
}

/* A directory is a Hugging Face model (or one of our checkpoints, which
 * are also Hugging Face directories): rt_ckpt_load.c reads it.  Every rank
 * sees rank 0's answer, so all take the same branch. */
static bool rt_is_dir(rt_ctx *rt, const char *path) {
    int dir = 0;
    struct stat st;
    if (rt->rank == 0) dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    RT_MPI(MPI_Bcast(&dir, 1, MPI_INT, 0, MPI_COMM_WORLD));
    return dir;
}

bool rt_load_params(rt_ctx *rt, const char *path, char *err, size_t errlen) {
    if (rt_is_dir(rt, path)) return rt_hf_load_dir(rt, path, err, errlen);
    const rt_program *p = rt->p;
    rt_tensor_file f = {.path = path};
    int *which = RT_MALLOC(sizeof(int) * (size_t)(p->nvalues + 1));
    bool ok = rt_load_check(rt, &f, which, err, errlen);
    int n = 0;
    for (int v = 0; ok && v < p->nvalues; v++) { /* program order on every rank: the collectives line up */
        if (p->values[v].kind != RT_PARAM) continue;
        rt_scatter_param(rt, v, rt->rank == 0 ? f.bytes + f.t[which[v]].data_off : NULL);
        n++;
    }
    if (ok && rt->rank == 0) {
        printf("loaded %d parameters from %s (the optimizer state starts fresh)\n", n, path);
        fflush(stdout);
    }
    free(which);
    free(f.t);
    free(f.bytes);
    return ok;
}
