/* rt_coll.c — what both backends' collectives share: argument checks, the
 * all_to_all geometry (which entries go to which peer, per-peer counts),
 * the shapes of gathers and reduce-scatters, and the per-kind counters of
 * collectives and kernels (the trace is told too, obs/rt_trace.c).  The
 * data movement itself is the backend's (cpu/rt_comm.c: MPI on host
 * buffers; cuda/rt_comm_cuda.c: NCCL on device buffers). */
#include <string.h>

#include "../obs/rt_obs.h"
#include "rt_backend.h"
#include "rt_core.h"

const char *const rt_coll_names[RT_C_NKINDS] = {"all_to_all", "all_gather", "reduce_scatter", "all_reduce",
                                                "send",       "recv",       "offload",        "fetch"};
/* basp_rt.h is installed alone, so it states the rank bound itself; it
 * must be the one the compiler's tables are emitted with. */
_Static_assert((int)RT_MAX_RANK == (int)CM_MAX_RANK, "basp_rt.h and common/common.h disagree on the rank bound");

static void rt_coll_tally(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double sec) {
    rt->total.coll_calls[k]++;
    rt->total.coll_bytes[k] += bytes;
    rt->total.coll_sec[k] += sec;
    if (k != RT_C_OFFLOAD && k != RT_C_FETCH) rt->step_bytes += bytes; /* comm_bytes: the network's */
    if (k == RT_C_ALL_TO_ALL) rt->step_a2a_sec += sec;
}

void rt_coll_count(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double sec) {
    rt_coll_tally(rt, k, bytes, sec);
    rt_trace_coll(rt, k, bytes, sec);
}

void rt_coll_count_async(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double exposed, double t_start, double t_done) {
    rt_coll_tally(rt, k, bytes, exposed);
    rt_trace_span(rt, k, bytes, t_start, t_done);
}

void rt_kern_time(rt_ctx *rt, cm_kernel_kind k, double t0) {
    double t1 = rt_now();
    rt->total.kern_sec[k] += t1 - t0;
    rt_trace_kern(rt, k, t0, t1);
}

void rt_kern_count(rt_ctx *rt, cm_kernel_kind k, double t0) {
    rt->total.kern_calls[k]++;
    rt_kern_time(rt, k, t0);
    rt_comm_progress(rt); /* between kernels: the backend moves its started collectives (cpu/rt_async.c) */
}

double rt_coll_begin(rt_ctx *rt, int g, rt_coll_kind k) {
    double t0 = rt_now();
    if (!rt->opt.split_wait || rt_coll_set_size(rt, g) <= 1) return t0;
    RT_MPI(MPI_Barrier(rt->comm[g]));
    double t1 = rt_now();
    rt->total.coll_wait_sec[k] += t1 - t0;
    if (k == RT_C_ALL_TO_ALL) rt->step_a2a_wait_sec += t1 - t0;
    return t1;
}

const rt_value_desc *rt_coll_val(rt_ctx *rt, int v) {
    RT_CHECK(v >= 0 && v < rt->p->nvalues, "value index %d out of range", v);
    return &rt->p->values[v];
}

int rt_coll_set_size(rt_ctx *rt, int g) {
    RT_CHECK(g >= 0 && g < rt->p->ngroups, "group index %d out of range", g);
    return rt->p->groups[g].set_size;
}

void rt_outer_inner(const int64_t *ld, int nd, int dim, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < dim; i++) *outer *= ld[i];
    for (int i = dim + 1; i < nd; i++) *inner *= ld[i];
}

int rt_coll_peer(rt_ctx *rt, int g, int peer) {
    int K = rt_coll_set_size(rt, g);
    return (int)(((rt->gpos[g] + (int64_t)peer) % K + K) % K);
}

/* ---- all_to_all geometry --------------------------------------------------------- */
int64_t rt_a2a_send_count(const rt_a2a_geom *G, int q) {
    return G->O * G->M * G->I * G->lxc * rt_dim_len(G->p, G->yd, G->split, (int)G->spos0 + q);
}
int64_t rt_a2a_recv_count(const rt_a2a_geom *G, int p) {
    return G->O * G->M * G->I * G->nvy * rt_dim_len(G->p, G->xd, G->concat, (int)G->cpos0 + p);
}
int64_t rt_a2a_send_base(const rt_a2a_geom *G, int q) { return rt_dim_start(G->p, G->yd, G->split, (int)G->spos0 + q); }
int64_t rt_a2a_recv_base(const rt_a2a_geom *G, int p) {
    return rt_dim_start(G->p, G->xd, G->concat, (int)G->cpos0 + p);
}

/* The shard of one dim on the scattered side (`fine`) is the one on the
 * gathered side (`coarse`) times g: flat (coarse whole, fine = g) or
 * nested, where this rank's position in fine must be its position in
 * coarse times K plus its position in g (ir_group_nested, checked by the
 * compiler's verifier; here the part one rank can see). */
static bool rt_a2a_nested(rt_ctx *rt, int g, int coarse, int fine) {
    if (coarse < 0) return fine == g;
    if (fine < 0) return false;
    int K = rt->p->groups[g].set_size;
    return rt->p->groups[fine].set_size == rt->p->groups[coarse].set_size * K &&
           rt->gpos[fine] == rt->gpos[coarse] * K + rt->gpos[g];
}

/* all_gather / reduce_scatter: dim `dim` is sharded by g on one side and
 * whole on the other, or nested: sharded by W on one side and by O on the
 * other, W = O x g (hierarchical ZeRO's node-level gather, ir/README.md). */
void rt_check_dim_coll(rt_ctx *rt, const char *op, int g, int dim, int sharded, int whole) {
    rt_check_even(rt, op, sharded);
    rt_check_even(rt, op, whole);
    const rt_value_desc *s = rt_coll_val(rt, sharded), *w = rt_coll_val(rt, whole);
    RT_CHECK(s->rank == w->rank && dim >= 0 && dim < s->rank, "%s %s: bad dim %d", op, s->name, dim);
    RT_CHECK(rt_a2a_nested(rt, g, w->shard[dim], s->shard[dim]),
             "%s %s / %s: dim %d must be sharded by %s on one side only (or nested)", op, s->name, w->name, dim,
             rt->p->groups[g].name);
    RT_CHECK(s->dtype == w->dtype, "%s %s: dtypes differ", op, s->name);
    RT_CHECK(s->local_elems * rt->p->groups[g].set_size == w->local_elems, "%s %s / %s: local sizes disagree", op,
             s->name, w->name);
}

rt_a2a_geom rt_a2a_plan(rt_ctx *rt, int g, int split, int concat, int x, int y) {
    const rt_value_desc *xd = rt_coll_val(rt, x), *yd = rt_coll_val(rt, y);
    RT_CHECK(
        xd->rank == yd->rank && split < xd->rank && concat < xd->rank && split != concat && split >= 0 && concat >= 0,
        "all_to_all %s -> %s: bad dims split %d concat %d for rank %d", xd->name, yd->name, split, concat, xd->rank);
    RT_CHECK(xd->dtype == yd->dtype, "all_to_all %s -> %s: dtypes differ", xd->name, yd->name);
    RT_CHECK(rt_a2a_nested(rt, g, yd->shard[concat], xd->shard[concat]) &&
                 rt_a2a_nested(rt, g, xd->shard[split], yd->shard[split]),
             "all_to_all %s -> %s: layouts do not match split %d / concat %d over group %s", xd->name, yd->name, split,
             concat, rt->p->groups[g].name);
    bool nested = xd->shard[split] >= 0 || yd->shard[concat] >= 0;
    RT_CHECK(!nested || (!rt_value_uneven(xd) && !rt_value_uneven(yd)),
             "all_to_all %s -> %s: a nested exchange must split evenly", xd->name, yd->name);
    int64_t lx[RT_MAX_RANK], ly[RT_MAX_RANK];
    int nd = rt_local_dims(rt, x, lx);
    rt_local_dims(rt, y, ly);
    rt_a2a_geom G = {0};
    G.p = rt->p, G.xd = xd, G.yd = yd, G.split = split, G.concat = concat;
    int a = split < concat ? split : concat, b = split < concat ? concat : split;
    G.a_split = a == split;
    G.O = G.M = G.I = 1;
    for (int i = 0; i < nd; i++) {
        if (i == a || i == b) continue;
        RT_CHECK(lx[i] == ly[i], "all_to_all %s -> %s: dim %d differs", xd->name, yd->name, i);
        if (i < a)
            G.O *= lx[i];
        else if (i < b)
            G.M *= lx[i];
        else
            G.I *= lx[i];
    }
    G.xa = lx[a], G.xb = lx[b], G.ya = ly[a], G.yb = ly[b];
    G.nvy = ly[split], G.lxc = lx[concat];
    int hx = xd->shard[split], gy = yd->shard[concat], K = rt->p->groups[g].set_size;
    G.spos0 = hx < 0 ? 0 : (int64_t)rt->gpos[hx] * K;
    G.cpos0 = gy < 0 ? 0 : (int64_t)rt->gpos[gy] * K;
    G.xs0 = hx < 0 ? 0 : rt_dim_start(rt->p, xd, split, rt->gpos[hx]);
    G.yc0 = gy < 0 ? 0 : rt_dim_start(rt->p, yd, concat, rt->gpos[gy]);
    G.fo = yd->dims[split] / xd->dims[split];
    G.fi = xd->dims[concat] / yd->dims[concat];
    RT_CHECK(G.fo >= 1 && G.fi >= 1 && yd->dims[split] == G.fo * xd->dims[split] &&
                 xd->dims[concat] == G.fi * yd->dims[concat],
             "all_to_all %s -> %s: split/concat sizes are not a fanout/fanin multiple", xd->name, yd->name);
    RT_CHECK((yd->unit[split] == 0 || G.fo == 1) && (xd->unit[concat] == 0 || G.fi == 1),
             "all_to_all %s -> %s: an uneven split cannot fan out or in", xd->name, yd->name);
    return G;
}

void rt_a2a_plan_all(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                     const int *outs, rt_a2a_geom *G) {
    rt_coll_set_size(rt, g);
    RT_CHECK(n >= 1 && n <= RT_A2A_MAX, "all_to_all: %d fused exchanges (1..%d)", n, RT_A2A_MAX);
    RT_CHECK(fanout >= 1 && fanin >= 1, "all_to_all: fanout %d fanin %d", fanout, fanin);
    for (int i = 0; i < n; i++) {
        G[i] = rt_a2a_plan(rt, g, split, concat, ins[i], outs[i]);
        RT_CHECK((G[i].fo == 1 || G[i].fo == fanout) && (G[i].fi == 1 || G[i].fi == fanin),
                 "all_to_all %s: size ratio does not match fanout %d / fanin %d", rt->p->values[ins[i]].name, fanout,
                 fanin);
        RT_CHECK(rt->p->values[ins[i]].dtype == rt->p->values[ins[0]].dtype, "all_to_all: mixed dtypes");
        RT_CHECK(G[i].fi == 1 || rt->p->values[ins[i]].dtype == RT_F32, "all_to_all: fanin needs f32");
    }
}

void rt_a2a_rope_check(rt_ctx *rt, const rt_a2a_geom *G, int n, int rope, int rope_bwd, int64_t *b, int64_t *s,
                       int64_t *Dh) {
    RT_CHECK(!(rope & rope_bwd) && (rope | rope_bwd) >> n == 0, "all_to_all: rope pairs 0x%x / 0x%x of %d", rope,
             rope_bwd, n);
    *b = *s = *Dh = -1;
    for (int i = 0; i < n; i++) {
        bool fwd = rope >> i & 1, bwd = rope_bwd >> i & 1;
        if (!fwd && !bwd) continue;
        const rt_value_desc *v = fwd ? G[i].xd : G[i].yd;
        RT_CHECK(v->rank == 4 && G[i].split == (fwd ? 2 : 1) && G[i].concat == (fwd ? 1 : 2) && G[i].I == v->dims[3] &&
                     v->dims[3] % 2 == 0 && G[i].M == 1,
                 "all_to_all %s: RoPE fused into an exchange needs [b,s,H,Dh] (Dh even and whole) exchanged "
                 "%s",
                 v->name, fwd ? "seq -> heads (split 2, concat 1)" : "heads -> seq (split 1, concat 2)");
        int64_t ld[RT_MAX_RANK];
        rt_local_dims(rt, (int)(v - rt->p->values), ld);
        int64_t lb = ld[0], ls = ld[1];
        RT_CHECK(*b < 0 || (*b == lb && *s == ls && *Dh == v->dims[3]),
                 "all_to_all %s: the rotated values of one exchange differ in batch, sequence or head size", v->name);
        *b = lb, *s = ls, *Dh = v->dims[3];
    }
}

/* Both backends lay out their send and receive staging alike: chunk q
 * holds the n pairs' pieces for peer q one after the other. */
rt_a2a_sizes rt_a2a_counts(const rt_a2a_geom *G, int n, int K, int me, int64_t *cnt) {
    int64_t *scnt = cnt, *sdis = scnt + K, *rcnt = sdis + K, *rdis = rcnt + K;
    rt_a2a_sizes z = {.same = true};
    for (int q = 0; q < K; q++) {
        scnt[q] = rcnt[q] = 0;
        for (int i = 0; i < n; i++) scnt[q] += rt_a2a_send_count(&G[i], q), rcnt[q] += rt_a2a_recv_count(&G[i], q);
        sdis[q] = z.stot, rdis[q] = z.rtot;
        z.stot += scnt[q], z.rtot += rcnt[q];
        if (q != me) z.sent += scnt[q];
        z.same &= scnt[q] == scnt[0] && rcnt[q] == scnt[0];
    }
    return z;
}

/* ---- checks of the other collectives ---------------------------------------------- */
void rt_check_even(rt_ctx *rt, const char *op, int v) {
    const rt_value_desc *d = rt_coll_val(rt, v);
    RT_CHECK(!rt_value_uneven(d), "%s %s: the value is split unevenly; only all_to_all supports uneven splits", op,
             d->name);
}

rt_dimcoll rt_dimcoll_plan(rt_ctx *rt, rt_coll_kind kind, const char *op, int g, int dim, int block, int whole) {
    rt_dimcoll C = {.K = rt_coll_set_size(rt, g)};
    rt_check_dim_coll(rt, op, g, dim, block, whole);
    C.d = &rt->p->values[block];
    RT_CHECK(kind == RT_C_ALL_GATHER || C.d->dtype == RT_F32, "%s %s: needs f32", op, C.d->name);
    int64_t ld[RT_MAX_RANK], I;
    int nd = rt_local_dims(rt, block, ld);
    rt_outer_inner(ld, nd, dim, &C.O, &I);
    C.n = C.d->local_elems, C.run = ld[dim] * I;
    return C;
}

const rt_value_desc *rt_check_copy(rt_ctx *rt, int src, int dst, bool to_host, rt_same_elems_fn same) {
    const rt_program *p = rt->p;
    RT_CHECK(src >= 0 && src < p->nvalues && dst >= 0 && dst < p->nvalues, "value index out of range");
    const rt_value_desc *s = &p->values[src], *d = &p->values[dst];
    RT_CHECK(!s->on_host == to_host && !d->on_host == !to_host && s->local_elems == d->local_elems && same(s, d),
             "%s %s -> %s: wants a %s value and a %s one of the same size", to_host ? "rt_offload" : "rt_fetch",
             s->name, d->name, to_host ? "device" : "host", to_host ? "host" : "device");
    return s;
}
