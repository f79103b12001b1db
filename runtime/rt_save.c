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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_internal.h"

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

/* Collective: every rank's shard (`mine`, laid out as value v) goes to
 * rank 0, which places each at its global offset (replicated shards
 * overwrite each other with equal data).  Checkpoints gather optimizer
 * moments through it too: they share their parameter's layout. */
void rt_gather_local(rt_ctx *rt, int v, const float *mine, float *full) {
    const rt_value_desc *d = &rt->p->values[v];
    int64_t n = d->local_elems;
    RT_CHECK(n * rt->world <= 0x7fffffff, "saving %s: too large to gather in one MPI call", d->name);
    float *all = rt->rank == 0 ? RT_MALLOC((size_t)(n * rt->world) * 4) : NULL;
    RT_MPI(MPI_Gather(mine, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD));
    if (rt->rank != 0) return;
    int64_t ld[RT_MAX_RANK], off[RT_MAX_RANK], zero[RT_MAX_RANK] = {0};
    int nd = rt_local_dims(rt, v, ld);
    int64_t (*offs)[RT_MAX_RANK] = RT_MALLOC(sizeof *offs * (size_t)rt->world);
    for (int r = 0; r < rt->world; r++) {
        rt_global_offset(rt->p, v, r, off);
        memcpy(offs[r], off, sizeof off);
        rt_copy_box(full, d->dims, off, all + r * n, ld, zero, ld, nd);
        /* Replicas must agree bit for bit (they were updated from identical
         * reduced gradients); say so loudly when they do not. */
        for (int q = 0; q < r; q++)
            if (memcmp(offs[q], off, sizeof off) == 0) {
                if (memcmp(all + q * n, all + r * n, (size_t)n * 4) != 0)
                    fprintf(stderr, "warning: the copies of %s on ranks %d and %d differ\n", d->name, q, r);
                break;
            }
    }
    free(offs);
    free(all);
}

static void rt_gather_full(rt_ctx *rt, int v, float *full) {
    float *mine = RT_MALLOC((size_t)rt->p->values[v].local_elems * 4);
    rt_host_read(rt, v, mine);
    rt_gather_local(rt, v, mine, full);
    free(mine);
}

static bool rt_write_u32(FILE *f, uint32_t x) { return fwrite(&x, 4, 1, f) == 1; }

static bool rt_write_headers(FILE *f, const rt_program *p, bool grads, int n, const int *vals,
                             const char **names) {
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

void rt_save_tensors(rt_ctx *rt, const char *path, bool grads) {
    int *vals = RT_MALLOC(sizeof(int) * (size_t)(rt->p->nvalues + 1));
    const char **names = RT_MALLOC(sizeof(char *) * (size_t)(rt->p->nvalues + 1));
    int n = rt_save_list(rt, grads, vals, names);
    char *tmp = RT_MALLOC(strlen(path) + 8);
    sprintf(tmp, "%s.tmp", path);
    FILE *f = NULL;
    bool ok = true;
    if (rt->rank == 0) {
        f = fopen(tmp, "wb");
        ok = f && rt_write_headers(f, rt->p, grads, n, vals, names);
    }
    for (int i = 0; i < n; i++) {
        const rt_value_desc *d = &rt->p->values[vals[i]];
        int64_t total = 1;
        for (int k = 0; k < d->rank; k++) total *= d->dims[k];
        float *full = rt->rank == 0 ? RT_MALLOC((size_t)total * 4) : NULL;
        rt_gather_full(rt, vals[i], full); /* collective: every rank takes part even after a write error */
        if (rt->rank == 0 && ok) ok = fwrite(full, 4, (size_t)total, f) == (size_t)total;
        free(full);
    }
    if (rt->rank == 0) {
        ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
        if (f) ok = fclose(f) == 0 && ok;
        ok = ok && rename(tmp, path) == 0;
        if (!ok) remove(tmp);
        RT_CHECK(ok, "cannot write %s (via %s)", path, tmp);
        printf("saved %d %s to %s\n", n, grads ? "gradients" : "parameters", path);
    }
    free(tmp);
    free(vals);
    free(names);
}
