/* rt_comm.c — collectives on IR values over the process groups.
 *
 * Every collective reads shapes from the value tables: a value's local
 * buffer is row-major over its local dims (global dims divided by the set
 * size of the group sharding each dim).  Each group has one communicator per
 * set (MPI_Comm_split, color = set, key = position), so an MPI rank inside
 * the communicator is the position inside the set. */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

const char *const rt_coll_names[RT_C_NKINDS] = {"all_to_all", "all_gather", "reduce_scatter",
                                                "all_reduce", "send",       "recv"};

static void rt_count(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double t0) {
    double dt = rt_now() - t0;
    rt->total.coll_calls[k]++;
    rt->total.coll_bytes[k] += bytes;
    rt->total.coll_sec[k] += dt;
    rt->step_bytes += bytes;
    if (k == RT_C_ALL_TO_ALL) rt->step_a2a_sec += dt;
}

static MPI_Datatype rt_mpi_type(const rt_value_desc *d) { return d->dtype == RT_F32 ? MPI_FLOAT : MPI_INT32_T; }

static const rt_value_desc *rt_val(rt_ctx *rt, int v) {
    RT_CHECK(v >= 0 && v < rt->p->nvalues, "value index %d out of range", v);
    return &rt->p->values[v];
}

static int rt_set_size(rt_ctx *rt, int g) {
    RT_CHECK(g >= 0 && g < rt->p->ngroups, "group index %d out of range", g);
    return rt->p->groups[g].set_size;
}

/* Products of the local dims before and after `dim`. */
static void rt_outer_inner(const int64_t *ld, int nd, int dim, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < dim; i++) *outer *= ld[i];
    for (int i = dim + 1; i < nd; i++) *inner *= ld[i];
}

/* ---- all_to_all ------------------------------------------------------------------
 * Both buffers are viewed as 5-d [O, A, M, B, I] with A, B the split and
 * concat dims in dim order.  A chunk (what one rank sends one peer) has the
 * peer's range of the split dim and all local entries of the concat dim.
 * With an uneven split (rt_value_desc.unit) the ranges differ by peer, so
 * chunk sizes do too: the exchange is an MPI_Alltoallv with per-peer counts
 * and displacements (MPI_Alltoall when every chunk has one size). */
typedef struct rt_a2a_geom {
    const rt_program *p;
    const rt_value_desc *xd, *yd;
    int split, concat;
    int64_t O, M, I;
    int64_t xa, xb, ya, yb; /* local sizes of dims a, b in x and y */
    int64_t nvy, lxc;       /* y-local split size, x-local concat size */
    int64_t fo, fi;         /* this pair's fanout / fanin ratio (1 or F) */
    bool a_split;           /* dim a is the split dim */
} rt_a2a_geom;

/* Elements this rank sends the peer at position q / receives from p. */
static int64_t rt_a2a_send_count(const rt_a2a_geom *G, int q) {
    return G->O * G->M * G->I * G->lxc * rt_dim_len(G->p, G->yd, G->split, q);
}
static int64_t rt_a2a_recv_count(const rt_a2a_geom *G, int p) {
    return G->O * G->M * G->I * G->nvy * rt_dim_len(G->p, G->xd, G->concat, p);
}

static rt_a2a_geom rt_a2a_plan(rt_ctx *rt, int g, int split, int concat, int x, int y) {
    const rt_value_desc *xd = rt_val(rt, x), *yd = rt_val(rt, y);
    RT_CHECK(xd->rank == yd->rank && split < xd->rank && concat < xd->rank && split != concat && split >= 0 &&
                 concat >= 0,
             "all_to_all %s -> %s: bad dims split %d concat %d for rank %d", xd->name, yd->name, split, concat,
             xd->rank);
    RT_CHECK(xd->dtype == yd->dtype, "all_to_all %s -> %s: dtypes differ", xd->name, yd->name);
    RT_CHECK(xd->shard[concat] == g && yd->shard[concat] < 0 && xd->shard[split] < 0 && yd->shard[split] == g,
             "all_to_all %s -> %s: layouts do not match split %d / concat %d over group %s", xd->name, yd->name,
             split, concat, rt->p->groups[g].name);
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
        if (i < a) G.O *= lx[i];
        else if (i < b) G.M *= lx[i];
        else G.I *= lx[i];
    }
    G.xa = lx[a], G.xb = lx[b], G.ya = ly[a], G.yb = ly[b];
    G.nvy = ly[split], G.lxc = lx[concat];
    G.fo = yd->dims[split] / xd->dims[split];
    G.fi = xd->dims[concat] / yd->dims[concat];
    RT_CHECK(G.fo >= 1 && G.fi >= 1 && yd->dims[split] == G.fo * xd->dims[split] &&
                 xd->dims[concat] == G.fi * yd->dims[concat],
             "all_to_all %s -> %s: split/concat sizes are not a fanout/fanin multiple", xd->name, yd->name);
    RT_CHECK((yd->unit[split] == 0 || G.fo == 1) && (xd->unit[concat] == 0 || G.fi == 1),
             "all_to_all %s -> %s: an uneven split cannot fan out or in", xd->name, yd->name);
    return G;
}

/* The chunk for the peer at position q: its (virtual) split entries
 * start(q) .. start(q)+len(q) map to the real entries v / fo of x. */
static void rt_a2a_pack(const rt_a2a_geom *G, char *dst, const char *x, int q) {
    size_t run = (size_t)G->I * 4;
    int64_t base = rt_dim_start(G->p, G->yd, G->split, q), ns = rt_dim_len(G->p, G->yd, G->split, q);
    int64_t ca = G->a_split ? ns : G->lxc, cb = G->a_split ? G->lxc : ns;
    for (int64_t o = 0; o < G->O; o++)
        for (int64_t ka = 0; ka < ca; ka++) {
            int64_t xa = G->a_split ? (base + ka) / G->fo : ka;
            for (int64_t m = 0; m < G->M; m++)
                for (int64_t kb = 0; kb < cb; kb++) {
                    int64_t xb = G->a_split ? kb : (base + kb) / G->fo;
                    int64_t s = (((o * G->xa + xa) * G->M + m) * G->xb + xb) * G->I;
                    int64_t d = (((o * ca + ka) * G->M + m) * cb + kb) * G->I;
                    memcpy(dst + d * 4, x + s * 4, run);
                }
        }
}

/* The chunk from the peer at position p: its concat entries are the global
 * (virtual, under fanin) entries start(p) + k, summed into real entry / fi. */
static void rt_a2a_unpack(const rt_a2a_geom *G, char *y, const char *src, int p) {
    int64_t base = rt_dim_start(G->p, G->xd, G->concat, p), nc = rt_dim_len(G->p, G->xd, G->concat, p);
    int64_t ca = G->a_split ? G->nvy : nc, cb = G->a_split ? nc : G->nvy;
    for (int64_t o = 0; o < G->O; o++)
        for (int64_t ka = 0; ka < ca; ka++) {
            int64_t ya = G->a_split ? ka : (base + ka) / G->fi;
            for (int64_t m = 0; m < G->M; m++)
                for (int64_t kb = 0; kb < cb; kb++) {
                    int64_t yb = G->a_split ? (base + kb) / G->fi : kb;
                    int64_t d = (((o * G->ya + ya) * G->M + m) * G->yb + yb) * G->I;
                    int64_t s = (((o * ca + ka) * G->M + m) * cb + kb) * G->I;
                    if (G->fi == 1) {
                        memcpy(y + d * 4, src + s * 4, (size_t)G->I * 4);
                    } else {
                        float *yf = (float *)(void *)y + d;
                        const float *sf = (const float *)(const void *)src + s;
                        for (int64_t i = 0; i < G->I; i++) yf[i] += sf[i];
                    }
                }
        }
}

enum { RT_A2A_MAX = 8 };

void rt_all_to_all(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                   const int *outs) {
    double t0 = rt_now();
    int K = rt_set_size(rt, g), me = rt->gpos[g];
    RT_CHECK(n >= 1 && n <= RT_A2A_MAX, "all_to_all: %d fused exchanges (1..%d)", n, RT_A2A_MAX);
    RT_CHECK(fanout >= 1 && fanin >= 1, "all_to_all: fanout %d fanin %d", fanout, fanin);
    rt_a2a_geom G[RT_A2A_MAX];
    for (int i = 0; i < n; i++) {
        G[i] = rt_a2a_plan(rt, g, split, concat, ins[i], outs[i]);
        RT_CHECK((G[i].fo == 1 || G[i].fo == fanout) && (G[i].fi == 1 || G[i].fi == fanin),
                 "all_to_all %s: size ratio does not match fanout %d / fanin %d", rt->p->values[ins[i]].name,
                 fanout, fanin);
        RT_CHECK(rt->p->values[ins[i]].dtype == rt->p->values[ins[0]].dtype, "all_to_all: mixed dtypes");
        RT_CHECK(G[i].fi == 1 || rt->p->values[ins[i]].dtype == RT_F32, "all_to_all: fanin needs f32");
    }
    /* Per-peer counts and displacements (elements); chunk q holds the n
     * pairs' pieces for peer q one after the other. */
    int64_t *scnt = RT_MALLOC(sizeof(int64_t) * 4 * (size_t)K), *sdis = scnt + K, *rcnt = sdis + K,
            *rdis = rcnt + K;
    int64_t stot = 0, rtot = 0, sent = 0;
    bool same = true;
    for (int q = 0; q < K; q++) {
        scnt[q] = rcnt[q] = 0;
        for (int i = 0; i < n; i++) scnt[q] += rt_a2a_send_count(&G[i], q), rcnt[q] += rt_a2a_recv_count(&G[i], q);
        sdis[q] = stot, rdis[q] = rtot;
        stot += scnt[q], rtot += rcnt[q];
        if (q != me) sent += scnt[q];
        same &= scnt[q] == scnt[0] && rcnt[q] == scnt[0];
    }
    char *sbuf = rt_scratch(rt, 0, (size_t)(stot ? stot : 1) * 4);
    char *rbuf = rt_scratch(rt, 1, (size_t)(rtot ? rtot : 1) * 4);
    for (int q = 0; q < K; q++) {
        int64_t off = sdis[q];
        for (int i = 0; i < n; i++) {
            rt_a2a_pack(&G[i], sbuf + off * 4, rt->buf[ins[i]], q);
            off += rt_a2a_send_count(&G[i], q);
        }
    }
    if (K == 1) memcpy(rbuf, sbuf, (size_t)stot * 4);
    else {
        MPI_Datatype t = rt_mpi_type(&rt->p->values[ins[0]]);
        if (same) {
            RT_CHECK(scnt[0] <= 0x7fffffff, "all_to_all: %lld elements per peer exceed MPI's int count",
                     (long long)scnt[0]);
            RT_MPI(MPI_Alltoall(sbuf, (int)scnt[0], t, rbuf, (int)scnt[0], t, rt->comm[g]));
        } else { /* split-size all-to-all */
            RT_CHECK(stot <= 0x7fffffff && rtot <= 0x7fffffff,
                     "all_to_all: %lld / %lld elements exceed MPI's int counts", (long long)stot, (long long)rtot);
            int *ic = RT_MALLOC(sizeof(int) * 4 * (size_t)K);
            for (int q = 0; q < K; q++)
                ic[q] = (int)scnt[q], ic[K + q] = (int)sdis[q], ic[2 * K + q] = (int)rcnt[q],
                ic[3 * K + q] = (int)rdis[q];
            RT_MPI(MPI_Alltoallv(sbuf, ic, ic + K, t, rbuf, ic + 2 * K, ic + 3 * K, t, rt->comm[g]));
            free(ic);
        }
    }
    for (int i = 0; i < n; i++) {
        if (G[i].fi > 1) memset(rt->buf[outs[i]], 0, (size_t)rt->p->values[outs[i]].local_elems * 4);
        for (int p = 0; p < K; p++) { /* pair i's piece inside peer p's chunk */
            int64_t o = rdis[p];
            for (int j = 0; j < i; j++) o += rt_a2a_recv_count(&G[j], p);
            rt_a2a_unpack(&G[i], rt->buf[outs[i]], rbuf + o * 4, p);
        }
    }
    free(scnt);
    rt_count(rt, RT_C_ALL_TO_ALL, sent * 4, t0);
}

/* ---- all_gather / reduce_scatter ---------------------------------------------- */
/* Only all_to_all handles uneven splits; the other collectives refuse them
 * clearly (params and gradients are never uneven). */
static void rt_check_even(rt_ctx *rt, const char *op, int v) {
    const rt_value_desc *d = rt_val(rt, v);
    RT_CHECK(!rt_value_uneven(d), "%s %s: the value is split unevenly; only all_to_all supports uneven splits", op,
             d->name);
}

static void rt_check_dim_coll(rt_ctx *rt, const char *op, int g, int dim, int sharded, int whole) {
    rt_check_even(rt, op, sharded);
    rt_check_even(rt, op, whole);
    const rt_value_desc *s = rt_val(rt, sharded), *w = rt_val(rt, whole);
    RT_CHECK(s->rank == w->rank && dim >= 0 && dim < s->rank, "%s %s: bad dim %d", op, s->name, dim);
    RT_CHECK(s->shard[dim] == g && w->shard[dim] < 0, "%s %s / %s: dim %d must be sharded by %s on one side only",
             op, s->name, w->name, dim, rt->p->groups[g].name);
    RT_CHECK(s->dtype == w->dtype, "%s %s: dtypes differ", op, s->name);
    RT_CHECK(s->local_elems * rt->p->groups[g].set_size == w->local_elems, "%s %s / %s: local sizes disagree", op,
             s->name, w->name);
}

void rt_all_gather(rt_ctx *rt, int g, int dim, int in, int out) {
    double t0 = rt_now();
    int K = rt_set_size(rt, g);
    rt_check_dim_coll(rt, "all_gather", g, dim, in, out);
    const rt_value_desc *xd = &rt->p->values[in];
    int64_t lx[RT_MAX_RANK], O, I, n = xd->local_elems;
    int nd = rt_local_dims(rt, in, lx);
    rt_outer_inner(lx, nd, dim, &O, &I);
    if (K == 1) {
        memcpy(rt->buf[out], rt->buf[in], (size_t)n * 4);
    } else {
        RT_CHECK(n <= 0x7fffffff, "all_gather %s: too large for one MPI call", xd->name);
        MPI_Datatype t = rt_mpi_type(xd);
        /* Gathered blocks are rank-major; along an inner dim they must be
         * interleaved per outer index. */
        char *dst = O == 1 ? rt->buf[out] : rt_scratch(rt, 0, (size_t)(n * K) * 4);
        RT_MPI(MPI_Allgather(rt->buf[in], (int)n, t, dst, (int)n, t, rt->comm[g]));
        if (O > 1) {
            int64_t run = lx[dim] * I;
            char *y = rt->buf[out];
            for (int k = 0; k < K; k++)
                for (int64_t o = 0; o < O; o++)
                    memcpy(y + ((o * K + k) * run) * 4, dst + (k * n + o * run) * 4, (size_t)run * 4);
        }
    }
    rt_count(rt, RT_C_ALL_GATHER, n * (K - 1) * 4, t0);
}

void rt_reduce_scatter(rt_ctx *rt, int g, int dim, int in, int out) {
    double t0 = rt_now();
    int K = rt_set_size(rt, g);
    rt_check_dim_coll(rt, "reduce_scatter", g, dim, out, in);
    const rt_value_desc *yd = &rt->p->values[out];
    RT_CHECK(yd->dtype == RT_F32, "reduce_scatter %s: needs f32", yd->name);
    int64_t ly[RT_MAX_RANK], O, I, n = yd->local_elems;
    int nd = rt_local_dims(rt, out, ly);
    rt_outer_inner(ly, nd, dim, &O, &I);
    if (K == 1) {
        memcpy(rt->buf[out], rt->buf[in], (size_t)n * 4);
    } else {
        RT_CHECK(n <= 0x7fffffff, "reduce_scatter %s: too large for one MPI call", yd->name);
        const char *src = rt->buf[in];
        if (O > 1) { /* make each destination's block contiguous */
            int64_t run = ly[dim] * I;
            char *tmp = rt_scratch(rt, 0, (size_t)(n * K) * 4);
            for (int k = 0; k < K; k++)
                for (int64_t o = 0; o < O; o++)
                    memcpy(tmp + (k * n + o * run) * 4, src + ((o * K + k) * run) * 4, (size_t)run * 4);
            src = tmp;
        }
        RT_MPI(MPI_Reduce_scatter_block(src, rt->buf[out], (int)n, MPI_FLOAT, MPI_SUM, rt->comm[g]));
    }
    rt_count(rt, RT_C_REDUCE_SCATTER, n * (K - 1) * 4, t0);
}

void rt_all_reduce(rt_ctx *rt, int g, int in, int out) {
    double t0 = rt_now();
    int K = rt_set_size(rt, g);
    rt_check_even(rt, "all_reduce", in);
    rt_check_even(rt, "all_reduce", out);
    const rt_value_desc *xd = rt_val(rt, in), *yd = rt_val(rt, out);
    RT_CHECK(xd->local_elems == yd->local_elems && xd->dtype == RT_F32 && yd->dtype == RT_F32,
             "all_reduce %s -> %s: needs two f32 values of one size", xd->name, yd->name);
    int64_t n = xd->local_elems;
    if (K == 1) memcpy(rt->buf[out], rt->buf[in], (size_t)n * 4);
    else {
        RT_CHECK(n <= 0x7fffffff, "all_reduce %s: too large for one MPI call", xd->name);
        RT_MPI(MPI_Allreduce(rt->buf[in], rt->buf[out], (int)n, MPI_FLOAT, MPI_SUM, rt->comm[g]));
    }
    rt_count(rt, RT_C_ALL_REDUCE, 2 * n * (K - 1) / K * 4, t0);
}

/* ---- send / recv -----------------------------------------------------------------
 * peer is an offset inside the rank's set (send +1, recv -1 for a ring).  A
 * send copies its data and completes at the end of the step, so a ring of
 * sends followed by receives cannot deadlock. */
static int rt_peer(rt_ctx *rt, int g, int peer) {
    int K = rt_set_size(rt, g);
    return (int)(((rt->gpos[g] + (int64_t)peer) % K + K) % K);
}

void rt_send(rt_ctx *rt, int g, int peer, int in) {
    double t0 = rt_now();
    rt_check_even(rt, "send", in);
    const rt_value_desc *d = rt_val(rt, in);
    size_t bytes = (size_t)d->local_elems * 4;
    RT_CHECK(d->local_elems <= 0x7fffffff, "send %s: too large for one MPI call", d->name);
    if (rt->nsends == rt->cap_sends) {
        rt->cap_sends = rt->cap_sends ? 2 * rt->cap_sends : 8;
        rt->sends = realloc(rt->sends, sizeof(rt_pending_send) * (size_t)rt->cap_sends);
        RT_CHECK(rt->sends, "out of memory");
    }
    rt_pending_send *s = &rt->sends[rt->nsends++];
    s->buf = RT_MALLOC(bytes ? bytes : 1);
    memcpy(s->buf, rt->buf[in], bytes);
    RT_MPI(MPI_Isend(s->buf, (int)d->local_elems, rt_mpi_type(d), rt_peer(rt, g, peer), 0, rt->comm[g], &s->req));
    rt_count(rt, RT_C_SEND, (int64_t)bytes, t0);
}

void rt_recv(rt_ctx *rt, int g, int peer, int out) {
    double t0 = rt_now();
    rt_check_even(rt, "recv", out);
    const rt_value_desc *d = rt_val(rt, out);
    RT_CHECK(d->local_elems <= 0x7fffffff, "recv %s: too large for one MPI call", d->name);
    RT_MPI(MPI_Recv(rt->buf[out], (int)d->local_elems, rt_mpi_type(d), rt_peer(rt, g, peer), 0, rt->comm[g],
                    MPI_STATUS_IGNORE));
    rt_count(rt, RT_C_RECV, 0, t0);
}

void rt_comm_finish_step(rt_ctx *rt) {
    for (int i = 0; i < rt->nsends; i++) {
        RT_MPI(MPI_Wait(&rt->sends[i].req, MPI_STATUS_IGNORE));
        free(rt->sends[i].buf);
    }
    rt->nsends = 0;
}
