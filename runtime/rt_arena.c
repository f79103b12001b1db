/* rt_arena.c — the arena (one allocation for parameters, gradients,
 * optimizer state, inputs and activations, carved from a size table built
 * from the value descriptors), shapes of local shards, and parameter
 * initialisation that does not depend on the sharding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

enum { RT_ALIGN = 64 };

static size_t rt_align_up(size_t n) { return (n + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN; }

static const char *const rt_mem_names[RT_MEM_NCATS] = {"params", "grads", "optimizer", "inputs", "activations"};

/* Gradients are named d.<value> by lowering; everything else produced by an
 * op is an activation. */
static rt_mem_cat rt_value_cat(const rt_value_desc *d) {
    if (d->kind == RT_PARAM) return RT_MEM_PARAM;
    if (d->kind == RT_INPUT) return RT_MEM_INPUT;
    if (strncmp(d->name, "d.", 2) == 0) return RT_MEM_GRAD;
    return RT_MEM_ACT;
}

/* The size table first, then one aligned allocation: the offsets are known
 * before anything is placed, so the arena's size is printed exactly. */
void rt_arena_build(rt_ctx *rt) {
    const rt_program *p = rt->p;
    size_t *off = RT_MALLOC(sizeof(size_t) * (size_t)(p->nvalues + 2 * p->nopt + 1));
    size_t total = 0;
    memset(rt->cat_bytes, 0, sizeof rt->cat_bytes);
    for (int v = 0; v < p->nvalues; v++) {
        const rt_value_desc *d = &p->values[v];
        RT_CHECK(d->local_elems >= 1, "value %s has %lld local elements", d->name, (long long)d->local_elems);
        size_t n = rt_align_up((size_t)d->local_elems * 4);
        off[v] = total;
        total += n;
        rt->cat_bytes[rt_value_cat(d)] += n;
    }
    for (int i = 0; i < p->nopt; i++) {
        const rt_value_desc *d = &p->values[p->opt[i].param];
        size_t n = rt_align_up((size_t)d->local_elems * 4);
        off[p->nvalues + 2 * i] = total;
        off[p->nvalues + 2 * i + 1] = total + n;
        total += 2 * n;
        rt->cat_bytes[RT_MEM_OPT] += 2 * n;
    }
    rt->arena_bytes = total;
    rt->arena = aligned_alloc(RT_ALIGN, total ? total : RT_ALIGN);
    RT_CHECK(rt->arena, "cannot allocate the arena: %.1f MiB", (double)total / (1 << 20));
    memset(rt->arena, 0, total);
    rt->buf = RT_MALLOC(sizeof(void *) * (size_t)(p->nvalues + 1));
    rt->live = RT_MALLOC(sizeof(bool) * (size_t)(p->nvalues + 1));
    for (int v = 0; v < p->nvalues; v++) {
        rt->buf[v] = rt->arena + off[v];
        rt->live[v] = true;
    }
    rt->opt_m = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    rt->opt_v = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    for (int i = 0; i < p->nopt; i++) {
        rt->opt_m[i] = (float *)(rt->arena + off[p->nvalues + 2 * i]);
        rt->opt_v[i] = (float *)(rt->arena + off[p->nvalues + 2 * i + 1]);
    }
    rt->live_bytes = total;
    free(off);
}

static void rt_fmt_bytes(char *out, size_t n, size_t bytes) {
    if (bytes >= (size_t)1 << 30) snprintf(out, n, "%.2f GiB", (double)bytes / (1 << 30));
    else if (bytes >= (size_t)1 << 20) snprintf(out, n, "%.2f MiB", (double)bytes / (1 << 20));
    else if (bytes >= 1024) snprintf(out, n, "%.1f KiB", (double)bytes / 1024);
    else snprintf(out, n, "%zu B", bytes);
}

void rt_arena_report(rt_ctx *rt, FILE *f) {
    char s[32];
    rt_fmt_bytes(s, sizeof s, rt->arena_bytes);
    fprintf(f, "arena: %s per rank (", s);
    for (int c = 0; c < RT_MEM_NCATS; c++) {
        rt_fmt_bytes(s, sizeof s, rt->cat_bytes[c]);
        fprintf(f, "%s%s %s", c ? ", " : "", rt_mem_names[c], s);
    }
    fprintf(f, ")\n");
}

/* ---- buffers --------------------------------------------------------------- */
float *rt_f32(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    RT_CHECK(rt->p->values[value].dtype == RT_F32, "value %s is not f32", rt->p->values[value].name);
    return rt->buf[value];
}

int32_t *rt_i32(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    RT_CHECK(rt->p->values[value].dtype == RT_I32, "value %s is not i32", rt->p->values[value].name);
    return rt->buf[value];
}

/* ---- host access (CPU: the buffers are host memory) ---------------------------- */
void rt_host_read(rt_ctx *rt, int v, void *dst) {
    memcpy(dst, rt->buf[v], (size_t)rt->p->values[v].local_elems * 4);
}

void rt_host_write(rt_ctx *rt, int v, const void *src) {
    memcpy(rt->buf[v], src, (size_t)rt->p->values[v].local_elems * 4);
}

void rt_host_read_opt(rt_ctx *rt, int pair, float *m, float *v) {
    size_t n = (size_t)rt->p->values[rt->p->opt[pair].param].local_elems * 4;
    memcpy(m, rt->opt_m[pair], n);
    memcpy(v, rt->opt_v[pair], n);
}

void rt_host_write_opt(rt_ctx *rt, int pair, const float *m, const float *v) {
    size_t n = (size_t)rt->p->values[rt->p->opt[pair].param].local_elems * 4;
    memcpy(rt->opt_m[pair], m, n);
    memcpy(rt->opt_v[pair], v, n);
}

int rt_group_pos(rt_ctx *rt, int g) {
    RT_CHECK(g >= 0 && g < rt->p->ngroups, "group index %d out of range", g);
    return rt->gpos[g];
}

/* Bookkeeping only: every value keeps its own slot, so a freed value's bytes
 * are counted as released but never reused (the end-of-run report says how
 * much the schedule frees, i.e. what slot reuse could save). */
void rt_free(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    if (!rt->live[value]) return;
    rt->live[value] = false;
    rt->live_bytes -= rt_align_up((size_t)rt->p->values[value].local_elems * 4);
}

void *rt_scratch(rt_ctx *rt, int which, size_t bytes) {
    if (bytes > rt->scratch_bytes[which]) {
        free(rt->scratch[which]);
        rt->scratch[which] = RT_MALLOC(bytes);
        rt->scratch_bytes[which] = bytes;
    }
    return rt->scratch[which];
}

/* ---- shapes ------------------------------------------------------------------ */
int rt_pos_of_rank(const rt_program *p, int g, int r) {
    const rt_group_desc *gd = &p->groups[g];
    for (int i = 0; i < gd->nsets * gd->set_size; i++)
        if (gd->ranks[i] == r) return i % gd->set_size;
    rt_die(__FILE__, __LINE__, "rank %d is not in group %s", r, gd->name);
}

/* Balanced split of n = u*m entries over K positions in whole units of u
 * (u = 0: even, n/K each). */
int64_t rt_dim_len(const rt_program *p, const rt_value_desc *d, int i, int pos) {
    int g = d->shard[i];
    if (g < 0) return d->dims[i];
    int64_t K = p->groups[g].set_size, u = d->unit[i];
    if (u < 1) return d->dims[i] / K;
    int64_t m = d->dims[i] / u;
    return u * (m / K + (pos < m % K));
}

int64_t rt_dim_start(const rt_program *p, const rt_value_desc *d, int i, int pos) {
    int g = d->shard[i];
    if (g < 0) return 0;
    int64_t K = p->groups[g].set_size, u = d->unit[i];
    if (u < 1) return pos * (d->dims[i] / K);
    int64_t m = d->dims[i] / u, r = m % K;
    return u * (pos * (m / K) + (pos < r ? pos : r));
}

bool rt_value_uneven(const rt_value_desc *d) {
    for (int i = 0; i < d->rank; i++)
        if (d->unit[i] != 0) return true;
    return false;
}

int rt_local_dims(const rt_ctx *rt, int v, int64_t ldims[RT_MAX_RANK]) {
    const rt_value_desc *d = &rt->p->values[v];
    for (int i = 0; i < d->rank; i++) {
        int g = d->shard[i];
        ldims[i] = rt_dim_len(rt->p, d, i, g < 0 ? 0 : rt->gpos[g]);
    }
    return d->rank;
}

int64_t rt_local_dim(rt_ctx *rt, int value, int dim) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    const rt_value_desc *d = &rt->p->values[value];
    RT_CHECK(dim >= 0 && dim < d->rank, "value %s has no dim %d", d->name, dim);
    int g = d->shard[dim];
    return rt_dim_len(rt->p, d, dim, g < 0 ? 0 : rt->gpos[g]);
}

void rt_global_offset(const rt_program *p, int v, int r, int64_t off[RT_MAX_RANK]) {
    const rt_value_desc *d = &p->values[v];
    for (int i = 0; i < d->rank; i++) {
        int g = d->shard[i];
        off[i] = g < 0 ? 0 : rt_dim_start(p, d, i, rt_pos_of_rank(p, g, r));
    }
}

/* Row-major N-d box copy: the innermost dimension is one memcpy, the outer
 * ones advance like an odometer. */
void rt_copy_box(void *dst, const int64_t *ddims, const int64_t *doff, const void *src, const int64_t *sdims,
                 const int64_t *soff, const int64_t *box, int nd) {
    if (nd == 0) {
        memcpy(dst, src, 4);
        return;
    }
    int64_t idx[RT_MAX_RANK] = {0};
    for (int i = 0; i < nd; i++)
        if (box[i] <= 0) return;
    for (;;) {
        int64_t so = 0, dof = 0;
        for (int i = 0; i < nd; i++) {
            so = so * sdims[i] + soff[i] + idx[i];
            dof = dof * ddims[i] + doff[i] + idx[i];
        }
        memcpy((char *)dst + dof * 4, (const char *)src + so * 4, (size_t)box[nd - 1] * 4);
        int i = nd - 2;
        while (i >= 0 && ++idx[i] == box[i]) idx[i--] = 0;
        if (i < 0) return;
    }
}

/* ---- initialisation ------------------------------------------------------------ */
uint64_t rt_splitmix64(uint64_t x) {
    uint64_t z = x + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t rt_hash_str(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* N(0, 1) as a pure function of (key, i): the element's value does not
 * depend on which rank computes it, so every layout starts from the same
 * weights. */
static double rt_normal(uint64_t key, uint64_t i) {
    uint64_t a = rt_splitmix64(key + 2 * i), b = rt_splitmix64(key + 2 * i + 1);
    double u1 = ((double)(a >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(b >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static bool rt_ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Initial std of a parameter: GPT-2/llm.c style, residual projections scaled
 * down by the depth; rank-1 params are norm weights (= 1, std 0). */
static double rt_init_std(const rt_program *p, const rt_value_desc *d) {
    if (d->rank <= 1) return 0.0;
    double std = 0.02;
    if (rt_ends_with(d->name, ".wo") || rt_ends_with(d->name, ".w_down"))
        std /= sqrt(2.0 * (double)(p->layers > 0 ? p->layers : 1));
    return std;
}

static void rt_init_one(rt_ctx *rt, int v, uint64_t seed) {
    const rt_value_desc *d = &rt->p->values[v];
    float *w = RT_MALLOC((size_t)d->local_elems * 4);
    if (d->rank <= 1) {
        for (int64_t i = 0; i < d->local_elems; i++) w[i] = 1.0f;
        rt_host_write(rt, v, w);
        free(w);
        return;
    }
    double std = rt_init_std(rt->p, d);
    uint64_t key = rt_splitmix64(seed ^ rt_splitmix64(rt_hash_str(d->name)));
    int64_t ld[RT_MAX_RANK], off[RT_MAX_RANK], idx[RT_MAX_RANK] = {0};
    int nd = rt_local_dims(rt, v, ld);
    rt_global_offset(rt->p, v, rt->rank, off);
    int64_t inner = ld[nd - 1], k = 0;
    for (;;) { /* one run of the innermost dim per iteration */
        int64_t g = 0;
        for (int i = 0; i < nd; i++) g = g * d->dims[i] + off[i] + idx[i];
        for (int64_t j = 0; j < inner; j++) w[k++] = (float)(std * rt_normal(key, (uint64_t)(g + j)));
        int i = nd - 2;
        while (i >= 0 && ++idx[i] == ld[i]) idx[i--] = 0;
        if (i < 0) break;
    }
    RT_CHECK(k == d->local_elems, "init of %s wrote %lld of %lld elements", d->name, (long long)k,
             (long long)d->local_elems);
    rt_host_write(rt, v, w);
    free(w);
}

void rt_init_params(rt_ctx *rt, uint64_t seed) {
    for (int v = 0; v < rt->p->nvalues; v++) {
        const rt_value_desc *d = &rt->p->values[v];
        if (d->kind != RT_PARAM) continue;
        RT_CHECK(d->dtype == RT_F32, "parameter %s must be f32", d->name);
        rt_init_one(rt, v, seed);
    }
}
