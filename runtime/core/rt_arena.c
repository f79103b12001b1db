/* rt_arena.c — the arena's report by category, shapes of local shards, and
 * parameter initialisation that does not depend on the sharding.  The
 * allocation itself and host access to the buffers are the backend's
 * (cpu/rt_buf_cpu.c, cuda/rt_buf_cuda.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_backend.h"
#include "rt_core.h"

const char *const rt_mem_names[RT_MEM_NCATS] = {"params", "grads", "optimizer", "inputs", "activations"};

/* The compiler's category of the value (rt_value_desc.mem_cat); a table
 * without one (written by hand) goes by kind: parameters, inputs, gradient
 * accumulators, and everything else as activations. */
rt_mem_cat rt_value_cat(const rt_value_desc *d) {
    switch (d->mem_cat) {
    case RT_VCAT_PARAMS: return RT_MEM_PARAM;
    case RT_VCAT_GRADS: return RT_MEM_GRAD;
    case RT_VCAT_INPUTS: return RT_MEM_INPUT;
    case RT_VCAT_ACTS: return RT_MEM_ACT;
    case RT_VCAT_DEFAULT: break;
    }
    return d->kind == RT_PARAM   ? RT_MEM_PARAM
           : d->kind == RT_INPUT ? RT_MEM_INPUT
           : d->kind == RT_ACCUM ? RT_MEM_GRAD
                                 : RT_MEM_ACT;
}

static void rt_fmt_bytes(char *out, size_t n, size_t bytes) {
    if (bytes >= (size_t)1 << 30)
        snprintf(out, n, "%.2f GiB", (double)bytes / (1 << 30));
    else if (bytes >= (size_t)1 << 20)
        snprintf(out, n, "%.2f MiB", (double)bytes / (1 << 20));
    else if (bytes >= 1024)
        snprintf(out, n, "%.1f KiB", (double)bytes / 1024);
    else
        snprintf(out, n, "%zu B", bytes);
}

void rt_arena_report(rt_ctx *rt, FILE *f) {
    char s[32];
    rt_fmt_bytes(s, sizeof s, rt->arena_bytes);
    fprintf(f, "arena: %s per rank", s);
    size_t all = 0;
    for (int c = 0; c < RT_MEM_NCATS; c++) all += rt->cat_bytes[c];
    if (rt->planned) {
        rt_fmt_bytes(s, sizeof s, all);
        fprintf(f, ", the compiler's memory plan (one slot per buffer would need %s", s);
    }
    fprintf(f, "%s", rt->planned ? ": " : " (");
    for (int c = 0; c < RT_MEM_NCATS; c++) {
        rt_fmt_bytes(s, sizeof s, rt->cat_bytes[c]);
        fprintf(f, "%s%s %s", c ? ", " : "", rt_mem_names[c], s);
    }
    fprintf(f, ")\n");
    if (rt->host_bytes) {
        rt_fmt_bytes(s, sizeof s, rt->host_bytes);
        fprintf(f, "host arena: %s per rank for %s (%s)\n", s,
                rt->p->opt_on_host ? "the optimizer state and offloaded values" : "offloaded activations",
                rt->planned ? "the compiler's memory plan" : "one slot per value");
    }
}

int rt_group_pos(rt_ctx *rt, int g) {
    RT_CHECK(g >= 0 && g < rt->p->ngroups, "group index %d out of range", g);
    return rt->gpos[g];
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

/* How many ranks hold each element of v: the world divided by the ranks its
 * sharded dims spread it over. */
int64_t rt_replication(const rt_ctx *rt, int v) {
    const rt_value_desc *d = &rt->p->values[v];
    int64_t spread = 1;
    for (int i = 0; i < d->rank; i++)
        if (d->shard[i] >= 0) spread *= rt->p->groups[d->shard[i]].set_size;
    return rt->world / spread;
}

int rt_opt_index(const rt_ctx *rt, int param, int grad) {
    for (int i = 0; i < rt->p->nopt; i++)
        if (rt->p->opt[i].param == param && rt->p->opt[i].grad == grad) return i;
    rt_die(__FILE__, __LINE__, "adamw(%s, %s) is not in the program's optimizer table", rt->p->values[param].name,
           rt->p->values[grad].name);
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
 * down by the depth; rank-1 params are norm weights (= 1, std 0); biases
 * are 0. */
static double rt_init_std(const rt_program *p, const rt_value_desc *d) {
    if (d->rank <= 1) return 0.0;
    /* q/k/v biases start at zero, as Hugging Face initialises them */
    if (rt_ends_with(d->name, ".bq") || rt_ends_with(d->name, ".bk") || rt_ends_with(d->name, ".bv")) return 0.0;
    double std = 0.02;
    if (rt_ends_with(d->name, ".wo") || rt_ends_with(d->name, ".w_down"))
        std /= sqrt(2.0 * (double)(p->layers > 0 ? p->layers : 1));
    return std;
}

/* One thread's share of a parameter's initial values: runs [r0, r1) of
 * its innermost dimension.  Element j of run r of the local shard is the
 * global element g + j, whose value depends on (key, g + j) alone, so how
 * the runs are split between threads cannot change a bit. */
typedef struct {
    const rt_ctx *rt;
    int v, nd;
    uint64_t key;
    double std;
    float *w;
} rt_init_job;

static void rt_init_runs(void *arg, int64_t r0, int64_t r1) {
    const rt_init_job *j = arg;
    const rt_value_desc *d = &j->rt->p->values[j->v];
    int64_t ld[RT_MAX_RANK], off[RT_MAX_RANK], idx[RT_MAX_RANK];
    rt_local_dims(j->rt, j->v, ld);
    rt_global_offset(j->rt->p, j->v, j->rt->rank, off);
    int nd = j->nd;
    int64_t inner = ld[nd - 1];
    for (int64_t r = r0; r < r1; r++) {
        int64_t q = r, g = 0;
        for (int i = nd - 2; i >= 0; i--) idx[i] = q % ld[i], q /= ld[i];
        for (int i = 0; i < nd - 1; i++) g = g * d->dims[i] + off[i] + idx[i];
        g = g * d->dims[nd - 1] + off[nd - 1];
        float *w = j->w + r * inner;
        for (int64_t e = 0; e < inner; e++) w[e] = (float)(j->std * rt_normal(j->key, (uint64_t)(g + e)));
    }
}

/* Drawing a normal costs ~40 ns (splitmix64, log, cos): 1.2G parameters of
 * Llama-3.2-1B took 50 s on one core of an H200 machine before training
 * could start, so large parameters are drawn by rt->host_threads threads. */
static void rt_init_one(rt_ctx *rt, int v, uint64_t seed) {
    const rt_value_desc *d = &rt->p->values[v];
    float *w = RT_MALLOC((size_t)d->local_elems * 4);
    if (d->rank <= 1) {
        for (int64_t i = 0; i < d->local_elems; i++) w[i] = 1.0f;
        rt_host_write(rt, v, w);
        free(w);
        return;
    }
    int64_t ld[RT_MAX_RANK];
    int nd = rt_local_dims(rt, v, ld);
    int64_t inner = ld[nd - 1], runs = inner > 0 ? d->local_elems / inner : 0;
    RT_CHECK(runs * inner == d->local_elems, "init of %s: %lld elements are not runs of %lld", d->name,
             (long long)d->local_elems, (long long)inner);
    rt_init_job job = {.rt = rt, .v = v, .nd = nd, .std = rt_init_std(rt->p, d), .w = w};
    job.key = rt_splitmix64(seed ^ rt_splitmix64(rt_hash_str(d->name)));
    /* At least 2^16 values per thread: a thread's start costs about as much. */
    rt_parallel_for(rt, runs, inner > 0 ? (((int64_t)1 << 16) + inner - 1) / inner : 1, rt_init_runs, &job);
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
