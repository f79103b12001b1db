/* rt_comm.c — collectives on IR values over the process groups.
 *
 * Every collective reads shapes from the value tables: a value's local
 * buffer is row-major over its local dims (global dims divided by the set
 * size of the group sharding each dim).  Each group has one communicator per
 * set (MPI_Comm_split, color = set, key = position), so an MPI rank inside
 * the communicator is the position inside the set. */
#include <stdlib.h>
#include <string.h>

#include "../data/rt_data.h"
#include "../host/rt_host.h"
#include "rt_cpu.h"

static void cpu_count(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double t0) {
    rt_coll_count(rt, k, bytes, rt_now() - t0);
}

static MPI_Datatype cpu_mpi_type(const rt_value_desc *d) { return d->dtype == RT_F32 ? MPI_FLOAT : MPI_INT32_T; }

/* ---- all_to_all ------------------------------------------------------------------
 * Geometry in core/rt_backend.h (rt_a2a_geom, shared with the CUDA backend).
 * With an uneven split (rt_value_desc.unit) the per-peer ranges differ, so
 * chunk sizes do too: the exchange is an MPI_Alltoallv with per-peer counts
 * and displacements (MPI_Alltoall when every chunk has one size). */

/* The chunk for the peer at position q: its (virtual) split entries
 * start(q) .. start(q)+len(q) map to the real entries v / fo of x. */
static void cpu_a2a_pack(const rt_a2a_geom *G, char *dst, const char *x, int q) {
    size_t run = (size_t)G->I * 4;
    int64_t base = rt_a2a_send_base(G, q), ns = rt_dim_len(G->p, G->yd, G->split, (int)G->spos0 + q);
    int64_t ca = G->a_split ? ns : G->lxc, cb = G->a_split ? G->lxc : ns;
    for (int64_t o = 0; o < G->O; o++)
        for (int64_t ka = 0; ka < ca; ka++) {
            int64_t xa = G->a_split ? (base + ka) / G->fo - G->xs0 : ka;
            for (int64_t m = 0; m < G->M; m++)
                for (int64_t kb = 0; kb < cb; kb++) {
                    int64_t xb = G->a_split ? kb : (base + kb) / G->fo - G->xs0;
                    int64_t s = (((o * G->xa + xa) * G->M + m) * G->xb + xb) * G->I;
                    int64_t d = (((o * ca + ka) * G->M + m) * cb + kb) * G->I;
                    memcpy(dst + d * 4, x + s * 4, run);
                }
        }
}

/* The chunk from the peer at position p: its concat entries are the global
 * (virtual, under fanin) entries start(p) + k, summed into real entry / fi. */
static void cpu_a2a_unpack(const rt_a2a_geom *G, char *y, const char *src, int p) {
    int64_t base = rt_a2a_recv_base(G, p), nc = rt_dim_len(G->p, G->xd, G->concat, (int)G->cpos0 + p);
    int64_t ca = G->a_split ? G->nvy : nc, cb = G->a_split ? nc : G->nvy;
    for (int64_t o = 0; o < G->O; o++)
        for (int64_t ka = 0; ka < ca; ka++) {
            int64_t ya = G->a_split ? ka : (base + ka) / G->fi - G->yc0;
            for (int64_t m = 0; m < G->M; m++)
                for (int64_t kb = 0; kb < cb; kb++) {
                    int64_t yb = G->a_split ? (base + kb) / G->fi - G->yc0 : kb;
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

/* ---- RoPE in the exchange (rt_all_to_all_rope) -------------------------------------
 * The rotated side of a pair is [b, s, H, Dh] sharded along s (checked by
 * rt_a2a_rope_check): a run of I = Dh elements is one head of one token,
 * token (o, xa) of the operand in the pack of a seq -> heads exchange
 * (dim a is the sequence, M = 1), token (o, ya) of the result in the
 * unpack of a heads -> seq one.  Each batch row's angles are the host
 * kernels' cached table of its positions (kern_rope_rows), the very floats
 * rt_rope would use, so a run rotated here equals rt_rope's bit for bit.
 * The rows are walked batch row by batch row, every peer's chunk inside,
 * so the table is made once per row even when each row has positions of
 * its own (packed documents). */
typedef struct cpu_a2a_rope {
    int fwd, bwd; /* bit k: pair k rotated while packed / rotated back while unpacked */
    int64_t row0, pos0, b, s, Dh;
    double theta;
    int64_t *pos; /* [b, s] explicit positions (documents, the ring's order); NULL: pos0 + si */
    kern_rope_scaling sc_buf;
    const kern_rope_scaling *sc;
} cpu_a2a_rope;

static void cpu_a2a_rope_init(rt_ctx *rt, cpu_a2a_rope *R, const rt_a2a_geom *G, int n, int rope, int rope_bwd,
                              int64_t row0, int64_t pos0, double theta) {
    *R = (cpu_a2a_rope){.fwd = rope, .bwd = rope_bwd, .row0 = row0, .pos0 = pos0, .theta = theta};
    if (!rope && !rope_bwd) return;
    rt_a2a_rope_check(rt, G, n, rope, rope_bwd, &R->b, &R->s, &R->Dh);
    R->sc = cpu_rope_scaling_of(rt->p, &R->sc_buf);
    if (rt->docs || rt->p->seq_ring > 1) {
        R->pos = RT_MALLOC(sizeof(int64_t) * (size_t)(R->b * R->s > 0 ? R->b * R->s : 1));
        rt_rope_positions(rt, row0, R->b, pos0, R->s, R->pos);
    }
}

/* Batch row o's table, [s, Dh/2] each. */
static void cpu_a2a_rope_row(const cpu_a2a_rope *R, int64_t o, const float **cs, const float **sn) {
    kern_rope_rows(cs, sn, R->s, R->Dh, R->pos ? R->pos + o * R->s : NULL, R->pos0, R->theta, R->sc);
}

/* Pair i's pieces of every chunk, rotated: dst + off[q] is peer q's piece
 * (cpu_a2a_pack's layout). */
static void cpu_a2a_pack_rope(const rt_a2a_geom *G, char *dst, const int64_t *off, const char *x, int K,
                              const cpu_a2a_rope *R) {
    int64_t half = R->Dh / 2, I = G->I;
    const float *xf = (const float *)(const void *)x;
    for (int64_t o = 0; o < G->O; o++) {
        const float *cs, *sn;
        cpu_a2a_rope_row(R, o, &cs, &sn);
        for (int q = 0; q < K; q++) {
            int64_t base = rt_a2a_send_base(G, q), ns = rt_dim_len(G->p, G->yd, G->split, (int)G->spos0 + q);
            float *d = (float *)(void *)(dst + off[q] * 4) + o * G->lxc * ns * I;
            for (int64_t ka = 0; ka < G->lxc; ka++)
                for (int64_t kb = 0; kb < ns; kb++, d += I) {
                    int64_t xb = (base + kb) / G->fo - G->xs0;
                    kern_rope_run(d, xf + ((o * G->xa + ka) * G->xb + xb) * I, I, cs + ka * half, sn + ka * half, 1.0f);
                }
        }
    }
}

/* Pair i's pieces of every received chunk (src + off[p]: peer p's), rotated
 * back into y (no fanin: each entry of y arrives once). */
static void cpu_a2a_unpack_rope(const rt_a2a_geom *G, char *y, const char *src, const int64_t *off, int K,
                                const cpu_a2a_rope *R) {
    int64_t half = R->Dh / 2, I = G->I;
    float *yf = (float *)(void *)y;
    for (int64_t o = 0; o < G->O; o++) {
        const float *cs, *sn;
        cpu_a2a_rope_row(R, o, &cs, &sn);
        for (int p = 0; p < K; p++) {
            int64_t base = rt_a2a_recv_base(G, p), nc = rt_dim_len(G->p, G->xd, G->concat, (int)G->cpos0 + p);
            const float *s = (const float *)(const void *)(src + off[p] * 4) + o * G->nvy * nc * I;
            for (int64_t ka = 0; ka < G->nvy; ka++)
                for (int64_t kb = 0; kb < nc; kb++, s += I) {
                    int64_t yb = base + kb - G->yc0;
                    kern_rope_run(yf + ((o * G->ya + ka) * G->yb + yb) * I, s, I, cs + ka * half, sn + ka * half,
                                  -1.0f);
                }
        }
    }
}

/* y [b, s, H, Dh] rotated back in place, every head of every token: after
 * a summing unpack (fanin), as rt_rope_bwd after the exchange would.  Not
 * through rt_rope_bwd itself: a started exchange unpacks inside rt_wait,
 * where a kernel call's progress of the collectives in flight must not
 * run again. */
static void cpu_a2a_rope_back(float *y, int64_t H, const cpu_a2a_rope *R) {
    int64_t half = R->Dh / 2;
    for (int64_t o = 0; o < R->b; o++) {
        const float *cs, *sn;
        cpu_a2a_rope_row(R, o, &cs, &sn);
        for (int64_t si = 0; si < R->s; si++)
            for (int64_t h = 0; h < H; h++) {
                float *r = y + ((o * R->s + si) * H + h) * R->Dh;
                kern_rope_run(r, r, R->Dh, cs + si * half, sn + si * half, -1.0f);
            }
    }
}

/* One exchange from its pack to its unpack: the blocking call does all of
 * it at once; a started one (IR async = 1) is posted here and unpacked at
 * its wait (rt_async.c calls cpu_a2a_finish), so everything the unpack and
 * a pending MPI_Ialltoallv read lives in this record until then.  The
 * staging areas stay the exchange's meanwhile: the verifier lets no other
 * staged collective run between the start and the wait
 * (ir_verify_async.c), and cpu_scratch checks it. */
typedef struct cpu_a2a_xfer {
    int n, K;
    int outs[RT_A2A_MAX];
    rt_a2a_geom G[RT_A2A_MAX];
    cpu_a2a_rope R; /* the pairs rotated (none for rt_all_to_all) */
    int64_t *cnt;   /* per peer: send counts, send displacements, receive counts, receive displacements */
    int *ic;        /* the same as MPI's ints, for an MPI_Alltoallv (NULL when every chunk has one size) */
    char *rbuf;
    int64_t sent; /* elements sent to other ranks */
} cpu_a2a_xfer;

/* Plans the exchange, packs the send staging area and posts it: blocking
 * (req NULL) or nonblocking (*req). */
static void cpu_a2a_post(rt_ctx *rt, cpu_a2a_xfer *X, int g, int split, int concat, int fanout, int fanin, int n,
                         const int *ins, const int *outs, MPI_Request *req) {
    int K = rt_coll_set_size(rt, g), me = rt->gpos[g];
    X->n = n, X->K = K, X->ic = NULL;
    memcpy(X->outs, outs, sizeof(int) * (size_t)n);
    /* Per-peer counts and displacements (elements). */
    int64_t *scnt = X->cnt = RT_MALLOC(sizeof(int64_t) * 4 * (size_t)K), *sdis = scnt + K, *rcnt = sdis + K,
            *rdis = rcnt + K;
    rt_a2a_sizes z = rt_a2a_counts(X->G, n, K, me, X->cnt);
    int64_t stot = z.stot, rtot = z.rtot;
    bool same = z.same;
    X->sent = z.sent;
    char *sbuf = cpu_scratch(rt, 0, (size_t)(stot ? stot : 1) * 4);
    char *rbuf = X->rbuf = cpu_scratch(rt, 1, (size_t)(rtot ? rtot : 1) * 4);
    int64_t *off = RT_MALLOC(sizeof(int64_t) * (size_t)K); /* pair i's piece in each chunk */
    for (int q = 0; q < K; q++) off[q] = sdis[q];
    for (int i = 0; i < n; i++) {
        if (X->R.fwd >> i & 1)
            cpu_a2a_pack_rope(&X->G[i], sbuf, off, rt->buf[ins[i]], K, &X->R);
        else
            for (int q = 0; q < K; q++) cpu_a2a_pack(&X->G[i], sbuf + off[q] * 4, rt->buf[ins[i]], q);
        for (int q = 0; q < K; q++) off[q] += rt_a2a_send_count(&X->G[i], q);
    }
    free(off);
    if (req) *req = MPI_REQUEST_NULL;
    if (K == 1) {
        memcpy(rbuf, sbuf, (size_t)stot * 4);
        return;
    }
    MPI_Datatype t = cpu_mpi_type(&rt->p->values[ins[0]]);
    if (same) {
        RT_CHECK(scnt[0] <= 0x7fffffff, "all_to_all: %lld elements per peer exceed MPI's int count",
                 (long long)scnt[0]);
        if (req)
            RT_MPI(MPI_Ialltoall(sbuf, (int)scnt[0], t, rbuf, (int)scnt[0], t, rt->comm[g], req));
        else
            RT_MPI(MPI_Alltoall(sbuf, (int)scnt[0], t, rbuf, (int)scnt[0], t, rt->comm[g]));
        return;
    }
    /* split-size all-to-all */
    RT_CHECK(stot <= 0x7fffffff && rtot <= 0x7fffffff, "all_to_all: %lld / %lld elements exceed MPI's int counts",
             (long long)stot, (long long)rtot);
    int *ic = X->ic = RT_MALLOC(sizeof(int) * 4 * (size_t)K);
    for (int q = 0; q < K; q++)
        ic[q] = (int)scnt[q], ic[K + q] = (int)sdis[q], ic[2 * K + q] = (int)rcnt[q], ic[3 * K + q] = (int)rdis[q];
    if (req)
        RT_MPI(MPI_Ialltoallv(sbuf, ic, ic + K, t, rbuf, ic + 2 * K, ic + 3 * K, t, rt->comm[g], req));
    else
        RT_MPI(MPI_Alltoallv(sbuf, ic, ic + K, t, rbuf, ic + 2 * K, ic + 3 * K, t, rt->comm[g]));
}

/* The received chunks into the results (the exchange has completed). */
static void cpu_a2a_unpack_all(rt_ctx *rt, const cpu_a2a_xfer *X) {
    const int64_t *rdis = X->cnt + 3 * X->K;
    const cpu_a2a_rope *R = &X->R;
    int64_t *off = RT_MALLOC(sizeof(int64_t) * (size_t)X->K); /* pair i's piece inside each peer's chunk */
    for (int p = 0; p < X->K; p++) off[p] = rdis[p];
    for (int i = 0; i < X->n; i++) {
        const rt_a2a_geom *G = &X->G[i];
        float *y = rt->buf[X->outs[i]];
        if (G->fi > 1) memset(y, 0, (size_t)rt->p->values[X->outs[i]].local_elems * 4);
        if ((R->bwd >> i & 1) && G->fi == 1) {
            cpu_a2a_unpack_rope(G, (char *)y, X->rbuf, off, X->K, R);
        } else {
            for (int p = 0; p < X->K; p++) cpu_a2a_unpack(G, (char *)y, X->rbuf + off[p] * 4, p);
            /* summed partial gradients are rotated once, after the sum */
            if (R->bwd >> i & 1) cpu_a2a_rope_back(y, G->yb, R);
        }
        for (int p = 0; p < X->K; p++) off[p] += rt_a2a_recv_count(G, p);
    }
    free(off);
    free(R->pos);
    free(X->cnt);
    free(X->ic);
}

/* rt_async.c's completion of a started exchange, at its wait. */
static void cpu_a2a_finish(rt_ctx *rt, void *arg) {
    cpu_a2a_xfer *X = arg;
    cpu_a2a_unpack_all(rt, X);
    cpu_state(rt)->scratch_held = false;
    free(X);
}

/* Every form of the exchange: blocking (unpacked here) or started (its
 * record kept until the wait unpacks it), rotating the pairs rope and
 * rope_bwd name (none for rt_all_to_all). */
static void cpu_a2a(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                    const int *outs, int rope, int rope_bwd, int64_t row0, int64_t pos0, double theta, bool start) {
    for (int i = 0; i < n; i++) rt_mem_touch(rt, ins[i]), rt_mem_touch(rt, outs[i]);
    double t0 = rt_coll_begin(rt, g, RT_C_ALL_TO_ALL);
    cpu_a2a_xfer here, *X = start ? RT_MALLOC(sizeof *X) : &here;
    MPI_Request req;
    rt_a2a_plan_all(rt, g, split, concat, fanout, fanin, n, ins, outs, X->G);
    cpu_a2a_rope_init(rt, &X->R, X->G, n, rope, rope_bwd, row0, pos0, theta);
    cpu_a2a_post(rt, X, g, split, concat, fanout, fanin, n, ins, outs, start ? &req : NULL);
    if (!start) {
        cpu_a2a_unpack_all(rt, X);
        cpu_count(rt, RT_C_ALL_TO_ALL, X->sent * 4, t0);
        return;
    }
    cpu_state(rt)->scratch_held = true;
    cpu_async_add(rt, req, n, outs, RT_C_ALL_TO_ALL, X->sent * 4, t0, cpu_a2a_finish, X);
}

void rt_all_to_all(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                   const int *outs) {
    cpu_a2a(rt, g, split, concat, fanout, fanin, n, ins, outs, 0, 0, 0, 0, 0.0, false);
}

void rt_all_to_all_rope(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                        const int *outs, int rope, int rope_bwd, int64_t row0, int64_t pos0, double theta) {
    cpu_a2a(rt, g, split, concat, fanout, fanin, n, ins, outs, rope, rope_bwd, row0, pos0, theta, false);
}

void rt_all_to_all_start(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                         const int *outs) {
    cpu_a2a(rt, g, split, concat, fanout, fanin, n, ins, outs, 0, 0, 0, 0, 0.0, true);
}

void rt_all_to_all_rope_start(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                              const int *outs, int rope, int rope_bwd, int64_t row0, int64_t pos0, double theta) {
    cpu_a2a(rt, g, split, concat, fanout, fanin, n, ins, outs, rope, rope_bwd, row0, pos0, theta, true);
}

/* ---- all_gather / reduce_scatter (checks and shapes: core/rt_coll.c) ------------ */
/* A gather or reduce-scatter along `dim`, in both forms: its operands made
 * live, its start time, and its shapes (rt_dimcoll_plan), which one MPI
 * call must be able to count. */
typedef struct cpu_dimcoll {
    double t0;
    int K;
    int64_t n, O, run;
    const rt_value_desc *d; /* the block's value */
} cpu_dimcoll;

static cpu_dimcoll cpu_dimcoll_begin(rt_ctx *rt, rt_coll_kind kind, const char *op, int g, int dim, int block,
                                     int whole) {
    rt_mem_touch(rt, block), rt_mem_touch(rt, whole);
    double t0 = rt_coll_begin(rt, g, kind);
    rt_dimcoll c = rt_dimcoll_plan(rt, kind, op, g, dim, block, whole);
    cpu_dimcoll C = {.t0 = t0, .K = c.K, .n = c.n, .O = c.O, .run = c.run, .d = c.d};
    RT_CHECK(C.K == 1 || C.n <= 0x7fffffff, "%s %s: too large for one MPI call", op, C.d->name);
    return C;
}

void rt_all_gather(rt_ctx *rt, int g, int dim, int in, int out) {
    cpu_dimcoll G = cpu_dimcoll_begin(rt, RT_C_ALL_GATHER, "all_gather", g, dim, in, out);
    int64_t n = G.n, O = G.O, run = G.run;
    int K = G.K;
    if (K == 1) {
        memcpy(rt->buf[out], rt->buf[in], (size_t)n * 4);
    } else {
        MPI_Datatype t = cpu_mpi_type(G.d);
        /* Gathered blocks are rank-major; along an inner dim they must be
         * interleaved per outer index. */
        char *dst = O == 1 ? rt->buf[out] : cpu_scratch(rt, 0, (size_t)(n * K) * 4);
        RT_MPI(MPI_Allgather(rt->buf[in], (int)n, t, dst, (int)n, t, rt->comm[g]));
        if (O > 1) {
            char *y = rt->buf[out];
            for (int k = 0; k < K; k++)
                for (int64_t o = 0; o < O; o++)
                    memcpy(y + ((o * K + k) * run) * 4, dst + (k * n + o * run) * 4, (size_t)run * 4);
        }
    }
    cpu_count(rt, RT_C_ALL_GATHER, n * (K - 1) * 4, G.t0);
}

/* The started form (cpu/rt_async.c keeps the request): straight into the
 * result's buffer, so only blocks that land in place. */
void rt_all_gather_start(rt_ctx *rt, int g, int dim, int in, int out) {
    cpu_dimcoll G = cpu_dimcoll_begin(rt, RT_C_ALL_GATHER, "all_gather", g, dim, in, out);
    RT_CHECK(G.O == 1,
             "all_gather %s (started): dim %d has %lld outer entries; a started gather must land in place "
             "(codegen admits only such)",
             G.d->name, dim, (long long)G.O);
    MPI_Request req = MPI_REQUEST_NULL;
    if (G.K == 1) {
        memcpy(rt->buf[out], rt->buf[in], (size_t)G.n * 4);
    } else {
        MPI_Datatype t = cpu_mpi_type(G.d);
        RT_MPI(MPI_Iallgather(rt->buf[in], (int)G.n, t, rt->buf[out], (int)G.n, t, rt->comm[g], &req));
    }
    cpu_async_add(rt, req, 1, &out, RT_C_ALL_GATHER, G.n * (G.K - 1) * 4, G.t0, NULL, NULL);
}

/* ---- reductions -------------------------------------------------------------------
 * A sum's order of additions is the algorithm's, and Open MPI's blocking and
 * nonblocking reductions use different ones (on 4 ranks their
 * reduce-scatters differ in the last bits).  So the blocking form is the
 * nonblocking one and an immediate wait: a started reduction (IR async = 1)
 * then sums exactly as the blocking schedule does, and overlap changes no
 * bit.  (Measured here, Open MPI 4.1: the nonblocking reduce-scatter is as
 * fast as the blocking one or faster, 1K to 1M floats on 4 and 8 ranks.)
 * Only a reduce-scatter along an inner dim, staged through the scratch
 * area, stays blocking; it has no started form. */
/* Posts the reduce-scatter of a dim that lands in place; null request when
 * the set has one rank. */
static MPI_Request cpu_reduce_scatter_post(rt_ctx *rt, int g, const cpu_dimcoll *R, int in, int out) {
    MPI_Request req = MPI_REQUEST_NULL;
    if (R->K == 1)
        memcpy(rt->buf[out], rt->buf[in], (size_t)R->n * 4);
    else
        RT_MPI(MPI_Ireduce_scatter_block(rt->buf[in], rt->buf[out], (int)R->n, MPI_FLOAT, MPI_SUM, rt->comm[g], &req));
    return req;
}

void rt_reduce_scatter(rt_ctx *rt, int g, int dim, int in, int out) {
    cpu_dimcoll R = cpu_dimcoll_begin(rt, RT_C_REDUCE_SCATTER, "reduce_scatter", g, dim, out, in);
    int64_t n = R.n, run = R.run;
    int K = R.K;
    if (R.O == 1 || K == 1) {
        MPI_Request req = cpu_reduce_scatter_post(rt, g, &R, in, out);
        RT_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    } else { /* make each destination's block contiguous */
        const char *src = rt->buf[in];
        char *tmp = cpu_scratch(rt, 0, (size_t)(n * K) * 4);
        for (int k = 0; k < K; k++)
            for (int64_t o = 0; o < R.O; o++)
                memcpy(tmp + (k * n + o * run) * 4, src + ((o * K + k) * run) * 4, (size_t)run * 4);
        RT_MPI(MPI_Reduce_scatter_block(tmp, rt->buf[out], (int)n, MPI_FLOAT, MPI_SUM, rt->comm[g]));
    }
    cpu_count(rt, RT_C_REDUCE_SCATTER, n * (K - 1) * 4, R.t0);
}

void rt_reduce_scatter_start(rt_ctx *rt, int g, int dim, int in, int out) {
    cpu_dimcoll R = cpu_dimcoll_begin(rt, RT_C_REDUCE_SCATTER, "reduce_scatter", g, dim, out, in);
    RT_CHECK(R.O == 1 || R.K == 1,
             "reduce_scatter %s (started): dim %d has %lld outer entries; a started "
             "reduce-scatter must land in place (codegen admits only such)",
             R.d->name, dim, (long long)R.O);
    MPI_Request req = cpu_reduce_scatter_post(rt, g, &R, in, out);
    cpu_async_add(rt, req, 1, &out, RT_C_REDUCE_SCATTER, R.n * (R.K - 1) * 4, R.t0, NULL, NULL);
}

/* The sum of in over the set into out; the bytes a ring all-reduce sends. */
static MPI_Request cpu_all_reduce_post(rt_ctx *rt, int g, int in, int out, int64_t *bytes, double *t0) {
    rt_mem_touch(rt, in), rt_mem_touch(rt, out);
    *t0 = rt_coll_begin(rt, g, RT_C_ALL_REDUCE);
    int K = rt_coll_set_size(rt, g);
    rt_check_even(rt, "all_reduce", in);
    rt_check_even(rt, "all_reduce", out);
    const rt_value_desc *xd = rt_coll_val(rt, in), *yd = rt_coll_val(rt, out);
    RT_CHECK(xd->local_elems == yd->local_elems && xd->dtype == RT_F32 && yd->dtype == RT_F32,
             "all_reduce %s -> %s: needs two f32 values of one size", xd->name, yd->name);
    int64_t n = xd->local_elems;
    *bytes = 2 * n * (K - 1) / K * 4;
    MPI_Request req = MPI_REQUEST_NULL;
    if (K == 1) {
        memcpy(rt->buf[out], rt->buf[in], (size_t)n * 4);
    } else {
        RT_CHECK(n <= 0x7fffffff, "all_reduce %s: too large for one MPI call", xd->name);
        RT_MPI(MPI_Iallreduce(rt->buf[in], rt->buf[out], (int)n, MPI_FLOAT, MPI_SUM, rt->comm[g], &req));
    }
    return req;
}

void rt_all_reduce(rt_ctx *rt, int g, int in, int out) {
    int64_t bytes;
    double t0;
    MPI_Request req = cpu_all_reduce_post(rt, g, in, out, &bytes, &t0);
    RT_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    cpu_count(rt, RT_C_ALL_REDUCE, bytes, t0);
}

void rt_all_reduce_start(rt_ctx *rt, int g, int in, int out) {
    int64_t bytes;
    double t0;
    MPI_Request req = cpu_all_reduce_post(rt, g, in, out, &bytes, &t0);
    cpu_async_add(rt, req, 1, &out, RT_C_ALL_REDUCE, bytes, t0, NULL, NULL);
}

/* ---- send / recv -----------------------------------------------------------------
 * peer is an offset inside the rank's set (send +1, recv -1 for a ring).  A
 * send copies its data and completes at the end of the step, so a ring of
 * sends followed by receives cannot deadlock. */
void rt_send(rt_ctx *rt, int g, int peer, int in) {
    rt_mem_touch(rt, in);
    double t0 = rt_now();
    rt_check_even(rt, "send", in);
    const rt_value_desc *d = rt_coll_val(rt, in);
    size_t bytes = (size_t)d->local_elems * 4;
    RT_CHECK(d->local_elems <= 0x7fffffff, "send %s: too large for one MPI call", d->name);
    rt_cpu_state *cs = cpu_state(rt);
    if (cs->nsends == cs->cap_sends) {
        cs->cap_sends = cs->cap_sends ? 2 * cs->cap_sends : 8;
        cs->sends = realloc(cs->sends, sizeof(cpu_pending_send) * (size_t)cs->cap_sends);
        RT_CHECK(cs->sends, "out of memory");
    }
    cpu_pending_send *s = &cs->sends[cs->nsends++];
    s->buf = RT_MALLOC(bytes ? bytes : 1);
    memcpy(s->buf, rt->buf[in], bytes);
    RT_MPI(MPI_Isend(s->buf, (int)d->local_elems, cpu_mpi_type(d), rt_coll_peer(rt, g, peer), 0, rt->comm[g], &s->req));
    cpu_count(rt, RT_C_SEND, (int64_t)bytes, t0);
}

void rt_recv(rt_ctx *rt, int g, int peer, int out) {
    rt_mem_touch(rt, out);
    double t0 = rt_now();
    rt_check_even(rt, "recv", out);
    const rt_value_desc *d = rt_coll_val(rt, out);
    RT_CHECK(d->local_elems <= 0x7fffffff, "recv %s: too large for one MPI call", d->name);
    RT_MPI(MPI_Recv(rt->buf[out], (int)d->local_elems, cpu_mpi_type(d), rt_coll_peer(rt, g, peer), 0, rt->comm[g],
                    MPI_STATUS_IGNORE));
    cpu_count(rt, RT_C_RECV, 0, t0);
}

/* The CPU backend runs every function as it is. */
void rt_backend_run(rt_ctx *rt, void (*fn)(rt_ctx *rt)) {
    fn(rt);
    rt_comm_finish_step(rt);
}

void rt_comm_finish_step(rt_ctx *rt) {
    rt_cpu_state *cs = cpu_state(rt);
    cpu_async_finish_step(rt);
    for (int i = 0; i < cs->nsends; i++) {
        RT_MPI(MPI_Wait(&cs->sends[i].req, MPI_STATUS_IGNORE));
        free(cs->sends[i].buf);
    }
    cs->nsends = 0;
}
