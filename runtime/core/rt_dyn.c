/* rt_dyn.c — batch_aware dynamic at run time: each micro-step, this rank's
 * variant and the communicators of its group.
 *
 * The compiled program holds every variant (basp_rt.h rt_variant): the
 * values of all of them in one table, one memory plan, one set of
 * parameters, accumulators and optimizer state.  A variant's groups are
 * block groups (rt_group_desc.block = K): their sets name positions
 * 0..K-1 of whichever K consecutive ranks the micro-step's assignment gives
 * the variant.  Before each micro-step every rank packs the same documents
 * into the same groups (data/rt_docs.c, from the seed and the micro-step:
 * exact on --resume), the ranks check that they agree (one all-reduce of a
 * hash), and each binds its variant's block groups to its group's ranks.
 * Communicators are made once per (group, first rank) with
 * MPI_Comm_create_group — collective over the new communicator's ranks
 * only, which all reach it in the same micro-step in the same group order —
 * and kept for later micro-steps; a backend with communicators of its own
 * (CUDA's NCCL) makes and binds them in rt_backend_dyn_groups and
 * rt_backend_dyn_bind. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../data/rt_data.h"
#include "../obs/rt_obs.h"
#include "rt_backend.h"

typedef struct rt_dyn_comm {
    int group, key; /* key: the block's first rank * block + the set */
    MPI_Comm comm;
} rt_dyn_comm;

typedef struct rt_dyn {
    rt_program *vp; /* per variant: the base program with the variant's row, inputs, loss and step */
    rt_dyn_comm *cache;
    int ncache, cap;
    FILE *log; /* rank 0, --assignments */
    double assign_ms;
    /* The arena's high-water mark: after start-up (parameters, inputs,
     * accumulators), before the running micro-step, and the highest each
     * variant's micro-steps reached (--metrics, train.memplan.measured_dyn). */
    size_t base_hw, outer_hw, *hw;
    int cur;
    bool evaluating; /* a validation's forward: not a micro-step's high-water mark */
} rt_dyn;

void rt_dyn_init(rt_ctx *rt) {
    const rt_program *p = rt->base;
    if (p->nvariants <= 0) return;
    rt_dyn *d = RT_MALLOC(sizeof *d);
    memset(d, 0, sizeof *d);
    d->vp = RT_MALLOC(sizeof *d->vp * (size_t)p->nvariants);
    d->hw = RT_MALLOC(sizeof *d->hw * (size_t)p->nvariants);
    memset(d->hw, 0, sizeof *d->hw * (size_t)p->nvariants);
    d->base_hw = rt->mem_hw;
    for (int k = 0; k < p->nvariants; k++) {
        const rt_variant *v = &p->variants[k];
        rt_program *q = &d->vp[k];
        *q = *p;
        q->micro_batch = 1;
        q->seq_len = v->seq_len;
        q->sp_size = v->size;
        q->batch_groups = 1;
        q->seq_ring = v->seq_ring;
        q->tokens = v->tokens, q->targets = v->targets, q->loss = v->loss;
        q->step = v->step;
    }
    if (rt->rank == 0 && rt->opt.assignments) {
        d->log = fopen(rt->opt.assignments, "w");
        RT_CHECK(d->log, "--assignments %s: cannot open for writing", rt->opt.assignments);
    }
    rt->dyn = d;
}

void rt_dyn_fini(rt_ctx *rt) {
    rt_dyn *d = rt->dyn;
    if (!d) return;
    for (int i = 0; i < d->ncache; i++) MPI_Comm_free(&d->cache[i].comm);
    if (d->log) fclose(d->log);
    free(d->cache);
    free(d->vp);
    free(d->hw);
    free(d);
    rt->dyn = NULL;
}

void rt_dyn_block_pos(const rt_group_desc *gd, int pos, int *set, int *at) {
    *set = *at = 0;
    for (int i = 0; i < gd->nsets * gd->set_size; i++)
        if (gd->ranks[i] == pos) *set = i / gd->set_size, *at = i % gd->set_size;
}

/* The communicator of group g's set holding position `pos` of the block at
 * `first` (made on first use); *set, *at: the set and pos's place in it. */
static MPI_Comm rt_dyn_comm_of(rt_ctx *rt, int g, int first, int pos, int *set, int *at) {
    const rt_group_desc *gd = &rt->base->groups[g];
    rt_dyn_block_pos(gd, pos, set, at);
    rt_dyn *d = rt->dyn;
    int key = first * gd->block + *set; /* one communicator per set of each placed block */
    for (int i = 0; i < d->ncache; i++)
        if (d->cache[i].group == g && d->cache[i].key == key) return d->cache[i].comm;
    int *ranks = RT_MALLOC(sizeof(int) * (size_t)gd->set_size);
    for (int i = 0; i < gd->set_size; i++) ranks[i] = first + gd->ranks[*set * gd->set_size + i];
    MPI_Group world, grp;
    RT_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
    RT_MPI(MPI_Group_incl(world, gd->set_size, ranks, &grp));
    MPI_Comm c;
    RT_MPI(MPI_Comm_create_group(MPI_COMM_WORLD, grp, g, &c));
    MPI_Group_free(&grp);
    MPI_Group_free(&world);
    free(ranks);
    if (d->ncache == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 16;
        rt_dyn_comm *grown = RT_MALLOC(sizeof *grown * (size_t)d->cap);
        if (d->ncache) memcpy(grown, d->cache, sizeof *grown * (size_t)d->ncache);
        free(d->cache);
        d->cache = grown;
    }
    d->cache[d->ncache++] = (rt_dyn_comm){g, key, c};
    return c;
}

/* FNV-1a over the groups and slots: equal on every rank, or the ranks
 * would run different groups. */
static uint64_t rt_dyn_hash(const layout_dyn_group *gs, int ng, const layout_slot *sl, int ns) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)gs;
    for (size_t i = 0; i < sizeof *gs * (size_t)ng; i++) h = (h ^ b[i]) * 1099511628211ull;
    b = (const unsigned char *)sl;
    for (size_t i = 0; i < sizeof *sl * (size_t)ns; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void rt_dyn_check_same(const rt_ctx *rt, uint64_t h, int64_t j) {
    uint64_t mm[2] = {h, ~h};
    RT_MPI(MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
    RT_CHECK(mm[0] == h && mm[1] == ~h,
             "micro-step %lld: the ranks computed different group assignments (rank %d's hash %016llx); every rank "
             "must read the same data with the same seed",
             (long long)j + 1, rt->rank, (unsigned long long)h);
}

/* One JSON line per micro-step (rank 0): its groups and their pieces. */
static void rt_dyn_log(rt_ctx *rt, int64_t t, int64_t m, const layout_dyn_group *gs, int ng, const layout_slot *sl,
                       double imbalance) {
    FILE *f = rt->dyn->log;
    fprintf(f, "{\"step\": %lld, \"micro\": %lld, \"imbalance\": %.4f, \"assign_ms\": %.4f, \"groups\": [",
            (long long)t + 1, (long long)m, imbalance, rt->dyn->assign_ms);
    for (int g = 0; g < ng; g++) {
        fprintf(f, "%s{\"first\": %d, \"size\": %d, \"cost\": %.6g, \"pieces\": [", g ? ", " : "", gs[g].first,
                gs[g].size, gs[g].cost);
        for (int i = gs[g].slot0; i < gs[g].slot0 + gs[g].nslots; i++)
            fprintf(f, "%s[%lld, %lld]", i > gs[g].slot0 ? ", " : "", (long long)sl[i].src, (long long)sl[i].len);
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    fflush(f);
}

/* Variant k on the block of ranks from `first`: its block groups bound,
 * rt->p its program, the high-water mark its own from the start-up's. */
static void rt_dyn_bind(rt_ctx *rt, int k, int first) {
    rt_dyn *d = rt->dyn;
    int K = rt->base->variants[k].size;
    for (int gi = 0; gi < rt->base->ngroups; gi++) {
        if (rt->base->groups[gi].block != K) continue;
        int set, at;
        rt->comm[gi] = rt_dyn_comm_of(rt, gi, first, rt->rank - first, &set, &at);
        rt->gset[gi] = set, rt->gpos[gi] = at;
        rt_backend_dyn_bind(rt, gi, first);
    }
    rt->p = &d->vp[k];
    d->cur = k;
    d->outer_hw = rt->mem_hw; /* this micro-step's own high-water mark, from the start-up one */
    rt->mem_hw = d->base_hw;
}

void rt_dyn_begin(rt_ctx *rt, int64_t t, int64_t j) {
    rt_dyn *d = rt->dyn;
    rt->p = rt->base;
    double t0 = rt_now();
    rt_docs_step(rt, j);
    d->assign_ms = (rt_now() - t0) * 1e3;
    int ng, mine, ns;
    const layout_slot *sl;
    const layout_dyn_group *gs = rt_docs_groups(rt, &ng, &mine, &sl, &ns);
    rt_dyn_check_same(rt, rt_dyn_hash(gs, ng, sl, ns), j);
    rt_backend_dyn_groups(rt, gs, ng);
    if (d->log) {
        rt_docs_info info;
        rt_docs_stats(rt, &info);
        rt_dyn_log(rt, t, j - t * rt_accum(rt), gs, ng, sl, info.imbalance);
    }
    const layout_dyn_group *g = &gs[mine];
    int k = 0;
    while (k < rt->base->nvariants && rt->base->variants[k].size != g->size) k++;
    RT_CHECK(k < rt->base->nvariants, "the assignment made a group of %d ranks, which no variant runs", g->size);
    rt_dyn_bind(rt, k, g->first);
}

void rt_dyn_eval_begin(rt_ctx *rt) {
    int k = rt->base->eval_variant;
    RT_CHECK(k >= 0 && k < rt->base->nvariants && rt->base->variants[k].size == rt->world,
             "the program validates with variant %d, which is not one group of all %d ranks", k, rt->world);
    const layout_dyn_group all = {0, rt->world, 0, 0, 0};
    rt_backend_dyn_groups(rt, &all, 1);
    rt_dyn_bind(rt, k, 0);
    rt->dyn->evaluating = true;
}

void rt_dyn_end(rt_ctx *rt) {
    rt_dyn *d = rt->dyn;
    if (rt->mem_hw > d->hw[d->cur] && !d->evaluating) d->hw[d->cur] = rt->mem_hw;
    d->evaluating = false;
    if (d->outer_hw > rt->mem_hw) rt->mem_hw = d->outer_hw;
    rt->p = rt->base;
}

void rt_dyn_metrics(const rt_ctx *rt, cJSON *o) {
    const rt_dyn *d = rt->dyn;
    if (!d) return;
    cJSON *v = cJSON_AddObjectToObject(o, "variant_arena_peak_bytes");
    for (int k = 0; k < rt->base->nvariants; k++) {
        char key[16];
        snprintf(key, sizeof key, "%d", rt->base->variants[k].size);
        if (d->hw[k]) cJSON_AddNumberToObject(v, key, (double)d->hw[k]);
    }
}
