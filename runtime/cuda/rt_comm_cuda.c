/* rt_comm_cuda.c — the collectives of basp_rt.h on NCCL, on the
 * communication stream (rt_cuda.h explains the stream discipline).
 *
 * Shapes, checks and the all_to_all geometry are core's, shared with the
 * CPU backend (core/rt_coll.c); only the data movement differs: pack
 * kernels build one contiguous chunk per peer, grouped ncclSend/ncclRecv
 * exchange them (per peer counts, so uneven splits need nothing special),
 * unpack kernels place (or, under fanin, sum) them.  Data travel as bf16 (fp32 for scalars).
 * rt_all_to_all_rope rotates in those kernels (kcu_a2a_pack_rope,
 * kcu_a2a_unpack_rope), reading the RoPE table and positions on ms.
 * Each collective's time is measured with CUDA events and added to the
 * counters when the step finishes. */
#include <stdlib.h>
#include <string.h>

#include "../data/rt_data.h"
#include "rt_cuda.h"

static ncclDataType_t cuda_nccl_type(const rt_value_desc *d) {
    if (d->dtype == RT_I32) return ncclInt32;
    return cuda_esize(d) == 4 ? ncclFloat32 : ncclBfloat16;
}

/* A collective under way: its kind, and its timer (-1: none). */
typedef struct cuda_coll {
    rt_coll_kind kind;
    int timer;
} cuda_coll;

/* The communication stream waits for every kernel issued so far (the
 * inputs), and the timer starts, unless a CUDA graph is being captured:
 * events recorded in a capture cannot be timed (rt_graph_cuda.c).  The
 * caller then names its inputs and outputs with cuda_coll_use (liveness,
 * reuse fences) before queueing. */
static cuda_coll cuda_coll_begin(rt_ctx *rt, rt_coll_kind kind) {
    rt_cuda_state *cu = cuda_state(rt);
    cuda_follow_cs(rt);
    cuda_coll c = {kind, -1};
    if (cuda_graph_capturing(rt)) return c;
    if (cu->ntimers == cu->cap_timers) {
        int cap = cu->cap_timers ? 2 * cu->cap_timers : 64;
        cu->timers = realloc(cu->timers, sizeof(cuda_timer) * (size_t)cap);
        RT_CHECK(cu->timers, "out of memory");
        for (int i = cu->cap_timers; i < cap; i++) {
            CU_CHECK(cudaEventCreate(&cu->timers[i].start));
            CU_CHECK(cudaEventCreate(&cu->timers[i].stop));
        }
        cu->cap_timers = cap;
    }
    cuda_timer *t = &cu->timers[cu->ntimers];
    t->kind = kind;
    CU_CHECK(cudaEventRecord(t->start, cu->ms));
    c.timer = cu->ntimers++;
    return c;
}

/* The timer stops; each input and output records that this collective is
 * its last ms access (the reuse fences), and the outputs become pending
 * until a kernel uses them. */
static void cuda_coll_end(rt_ctx *rt, cuda_coll c, const int *ins, int nin, const int *outs, int nout, int64_t bytes) {
    rt_cuda_state *cu = cuda_state(rt);
    if (c.timer >= 0) CU_CHECK(cudaEventRecord(cu->timers[c.timer].stop, cu->ms));
    for (int i = 0; i < nin; i++) cuda_coll_done(rt, ins[i], false);
    for (int i = 0; i < nout; i++) cuda_coll_done(rt, outs[i], true);
    rt_coll_count(rt, c.kind, bytes, 0.0);
}

static size_t cuda_bytes(const rt_value_desc *d) { return (size_t)d->local_elems * (size_t)cuda_esize(d); }

/* ---- all_to_all ------------------------------------------------------------------- */
static kcu_a2a cuda_pack_geom(const rt_a2a_geom *G, int q) {
    int64_t base = rt_a2a_send_base(G, q), ns = rt_dim_len(G->p, G->yd, G->split, (int)G->spos0 + q);
    kcu_a2a k = {G->O, G->M, G->I, G->xa, G->xb, G->ya, G->yb, 0, 0, base, G->fo, G->xs0, G->a_split};
    k.ca = G->a_split ? ns : G->lxc;
    k.cb = G->a_split ? G->lxc : ns;
    return k;
}

static kcu_a2a cuda_unpack_geom(const rt_a2a_geom *G, int p) {
    int64_t base = rt_a2a_recv_base(G, p), nc = rt_dim_len(G->p, G->xd, G->concat, (int)G->cpos0 + p);
    kcu_a2a k = {G->O, G->M, G->I, G->xa, G->xb, G->ya, G->yb, 0, 0, base, G->fi, G->yc0, G->a_split};
    k.ca = G->a_split ? G->nvy : nc;
    k.cb = G->a_split ? nc : G->nvy;
    return k;
}

/* RoPE fused into an exchange (rt_all_to_all_rope): bit k of rope (of
 * rope_bwd) rotates pair k while it is packed (unpacked).  The rotated
 * sides share b, s and Dh; token (bi, si) has position
 * pos[bi * pstride + si] (pstride s, or 0 when every row has the same
 * positions) in the table cs, sn of positions
 * 0 .. P-1.  All zero for a plain exchange. */
typedef struct cuda_a2a_rope {
    int rope, rope_bwd;
    int64_t b, s, Dh, P, pstride;
    const float *cs, *sn;
    const int64_t *pos;
    cm_ws_cuda_slot slot; /* the workspace pos lies in */
} cuda_a2a_rope;

/* core's checks of the rotated pairs (rt_a2a_rope_check: [b, s, H, Dh]
 * with Dh whole and even, the exchange of the direction, one b, s and Dh
 * for all), and the element size the kernels rotate. */
static void cuda_rope_check(rt_ctx *rt, const rt_a2a_geom *G, int n, cuda_a2a_rope *R) {
    rt_a2a_rope_check(rt, G, n, R->rope, R->rope_bwd, &R->b, &R->s, &R->Dh);
    for (int k = 0; k < n; k++) {
        if (!((R->rope | R->rope_bwd) >> k & 1)) continue;
        const rt_value_desc *d = R->rope >> k & 1 ? G[k].xd : G[k].yd;
        RT_CHECK(cuda_esize(d) == 2,
                 "all_to_all %s: the CUDA backend rotates bf16 activations only (this value has %d-byte elements)",
                 d->name, cuda_esize(d));
    }
}

/* The table of positions 0 .. seq_len-1 and every rotated token's
 * position, both in place on cs before the exchange's communication stream
 * follows it.  The table at position p is the one rt_rope builds from pos0
 * (the angle is computed in double from the integer position), so the
 * numbers agree.  Without packed documents every batch row has the same
 * positions, the slice's entries of the cached sequence order
 * (cuda_seq_pos: the ring's zig-zag order included), read with pstride 0:
 * nothing is uploaded per exchange.  With documents each token's position
 * within its document (rt_rope_positions) goes up to CM_WS_CUDA_DOC. */
static void cuda_rope_setup(rt_ctx *rt, cuda_a2a_rope *R, int64_t row0, int64_t pos0, double theta) {
    R->P = rt->p->seq_len;
    const float *t = cuda_rope_table(rt, R->P, R->Dh, 0, theta);
    R->cs = t, R->sn = t + R->P * (R->Dh / 2);
    if (!rt->docs) {
        RT_CHECK(pos0 >= 0 && pos0 + R->s <= R->P,
                 "all_to_all with RoPE: the slice [%lld, +%lld) is outside the "
                 "sequence of %lld",
                 (long long)pos0, (long long)R->s, (long long)R->P);
        R->pos = cuda_seq_pos(rt) + pos0, R->pstride = 0, R->slot = CM_WS_CUDA_POS;
        return;
    }
    int64_t n = R->b * R->s;
    int64_t *host = RT_MALLOC(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    rt_rope_positions(rt, row0, R->b, pos0, R->s, host);
    for (int64_t i = 0; i < n; i++)
        RT_CHECK(host[i] >= 0 && host[i] < R->P,
                 "all_to_all with RoPE: token %lld of the slice from %lld has position %lld, outside the sequence of "
                 "%lld",
                 (long long)i, (long long)pos0, (long long)host[i], (long long)R->P);
    R->pos = cuda_upload(rt, CM_WS_CUDA_DOC, host, sizeof(int64_t) * (size_t)n);
    R->pstride = R->s, R->slot = CM_WS_CUDA_DOC;
    free(host);
}

/* ms has just queued its reads of the table and positions: cs must not
 * overwrite them before those run. */
static void cuda_rope_read(rt_ctx *rt, const cuda_a2a_rope *R) {
    cuda_ws_read_ms(rt, CM_WS_CUDA_ROPE);
    cuda_ws_read_ms(rt, R->slot);
}

/* Chunk q: the n pairs' pieces for peer q, one after the other. */
static void cuda_a2a_pack_all(rt_ctx *rt, const rt_a2a_geom *G, int n, int K, const int *ins, char *sbuf,
                              const int64_t *sdis, int es, const cuda_a2a_rope *R) {
    cudaStream_t ms = cuda_state(rt)->ms;
    for (int q = 0; q < K; q++) {
        int64_t off = sdis[q];
        for (int i = 0; i < n; i++) {
            kcu_a2a k = cuda_pack_geom(&G[i], q);
            char *dst = sbuf + off * es;
            if (R->rope >> i & 1)
                CU_CHECK(kcu_a2a_pack_rope(dst, rt->buf[ins[i]], &k, R->cs, R->sn, R->P, R->pos, R->pstride, 1.0f, ms));
            else
                CU_CHECK(kcu_a2a_pack(dst, rt->buf[ins[i]], &k, es, ms));
            off += rt_a2a_send_count(&G[i], q);
        }
    }
    if (R->rope) cuda_rope_read(rt, R);
}

/* Under fanin the rotation cannot go into the unpack (the F partial
 * gradients are summed first): y [b, s, H, Dh] is rotated back in place
 * afterwards (kcu_rope_pos reads and writes each pair in one thread),
 * counted as the rope_bwd kernel it replaces. */
static void cuda_rope_in_place(rt_ctx *rt, kcu_bf16 *y, int64_t H, const cuda_a2a_rope *R) {
    double t0 = rt_now();
    int64_t n = R->s * H * R->Dh;
    for (int64_t bi = 0; bi < R->b; bi++) /* each batch row with its own positions */
        CU_CHECK(kcu_rope_pos(y + bi * n, y + bi * n, R->cs, R->sn, R->P, R->pos + bi * R->pstride, 1, R->s, H, R->Dh,
                              -1.0f, cuda_state(rt)->ms));
    rt_kern_count(rt, CM_K_ROPE_BWD, t0);
}

/* Pair i's piece inside each peer p's chunk goes to outs[i]. */
static void cuda_a2a_unpack_all(rt_ctx *rt, const rt_a2a_geom *G, int n, int K, const int *outs, char *rbuf,
                                const int64_t *rdis, int es, const cuda_a2a_rope *R) {
    cudaStream_t ms = cuda_state(rt)->ms;
    for (int i = 0; i < n; i++) {
        bool rot = R->rope_bwd >> i & 1, fused = rot && G[i].fi == 1;
        if (G[i].fi > 1) CU_CHECK(cudaMemsetAsync(rt->buf[outs[i]], 0, cuda_bytes(&rt->p->values[outs[i]]), ms));
        for (int p = 0; p < K; p++) {
            int64_t o = rdis[p];
            for (int j = 0; j < i; j++) o += rt_a2a_recv_count(&G[j], p);
            kcu_a2a k = cuda_unpack_geom(&G[i], p);
            if (fused)
                CU_CHECK(kcu_a2a_unpack_rope(rt->buf[outs[i]], rbuf + o * es, &k, R->cs, R->sn, R->P, R->pos,
                                             R->pstride, -1.0f, ms));
            else
                CU_CHECK(kcu_a2a_unpack(rt->buf[outs[i]], rbuf + o * es, &k, es, ms));
        }
        /* heads -> seq: dim b of the geometry is y's head dim */
        if (rot && !fused) cuda_rope_in_place(rt, rt->buf[outs[i]], G[i].yb, R);
    }
    if (R->rope_bwd) cuda_rope_read(rt, R);
}

/* The exchange of rt_all_to_all and rt_all_to_all_rope, planned (G). */
static void cuda_all_to_all(rt_ctx *rt, int g, int n, const int *ins, const int *outs, const rt_a2a_geom *G,
                            const cuda_a2a_rope *R) {
    rt_cuda_state *cu = cuda_state(rt);
    int K = rt_coll_set_size(rt, g), me = rt->gpos[g];
    const rt_value_desc *d0 = &rt->p->values[ins[0]];
    int es = cuda_esize(d0);
    int64_t *scnt = RT_MALLOC(sizeof(int64_t) * 4 * (size_t)K), *sdis = scnt + K, *rcnt = sdis + K, *rdis = rcnt + K;
    rt_a2a_sizes z = rt_a2a_counts(G, n, K, me, scnt);
    int64_t stot = z.stot, rtot = z.rtot, sent = z.sent;
    cuda_coll c = cuda_coll_begin(rt, RT_C_ALL_TO_ALL);
    for (int i = 0; i < n; i++) cuda_coll_use(rt, ins[i]), cuda_coll_use(rt, outs[i]);
    char *sbuf = cuda_ws(rt, CM_WS_CUDA_SEND, (size_t)(stot ? stot : 1) * (size_t)es);
    char *rbuf = cuda_ws(rt, CM_WS_CUDA_RECV, (size_t)(rtot ? rtot : 1) * (size_t)es);
    cuda_a2a_pack_all(rt, G, n, K, ins, sbuf, sdis, es, R);
    ncclDataType_t t = cuda_nccl_type(d0);
    CU_CHECK(cudaMemcpyAsync(rbuf + rdis[me] * es, sbuf + sdis[me] * es, (size_t)scnt[me] * (size_t)es,
                             cudaMemcpyDeviceToDevice, cu->ms));
    if (K > 1) {
        NCCL_CHECK(ncclGroupStart());
        for (int q = 0; q < K; q++) {
            if (q == me) continue;
            if (scnt[q]) NCCL_CHECK(ncclSend(sbuf + sdis[q] * es, (size_t)scnt[q], t, q, cu->comm[g], cu->ms));
            if (rcnt[q]) NCCL_CHECK(ncclRecv(rbuf + rdis[q] * es, (size_t)rcnt[q], t, q, cu->comm[g], cu->ms));
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    cuda_a2a_unpack_all(rt, G, n, K, outs, rbuf, rdis, es, R);
    free(scnt);
    cuda_coll_end(rt, c, ins, n, outs, n, sent * es);
}

void rt_all_to_all(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                   const int *outs) {
    rt_a2a_geom G[RT_A2A_MAX];
    rt_a2a_plan_all(rt, g, split, concat, fanout, fanin, n, ins, outs, G);
    cuda_a2a_rope none = {0};
    cuda_all_to_all(rt, g, n, ins, outs, G, &none);
}

/* The table and positions are set up on cs before the exchange begins
 * (cuda_coll_begin makes ms follow them); the rotations run in the pack
 * and unpack kernels on ms, timed as the exchange. */
void rt_all_to_all_rope(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                        const int *outs, int rope, int rope_bwd, int64_t row0, int64_t pos0, double theta) {
    rt_a2a_geom G[RT_A2A_MAX];
    rt_a2a_plan_all(rt, g, split, concat, fanout, fanin, n, ins, outs, G);
    cuda_a2a_rope R = {.rope = rope, .rope_bwd = rope_bwd};
    cuda_rope_check(rt, G, n, &R);
    if (rope | rope_bwd) cuda_rope_setup(rt, &R, row0, pos0, theta);
    cuda_all_to_all(rt, g, n, ins, outs, G, &R);
}

/* ---- all_gather / reduce_scatter / all_reduce ----------------------------------------- */
/* Blocks of K gathered (or to-be-scattered) shards are rank-major: along an
 * inner dim they are interleaved per outer index with one box copy each. */
static void cuda_interleave(rt_ctx *rt, char *dst, const char *src, int64_t O, int64_t run, int K, int es,
                            bool gather) {
    for (int k = 0; k < K; k++) {
        kcu_box bx = {.nd = 2, .box = {O, run}};
        int64_t blk[2] = {O, run}, full[2] = {O, run * K}, at[2] = {0, k * run};
        const char *s = gather ? src + (size_t)(k * O * run) * (size_t)es : src;
        char *d = gather ? dst : dst + (size_t)(k * O * run) * (size_t)es;
        memcpy(bx.sdims, gather ? blk : full, sizeof blk);
        memcpy(bx.ddims, gather ? full : blk, sizeof blk);
        memcpy(bx.soff, gather ? (int64_t[2]){0, 0} : at, sizeof at);
        memcpy(bx.doff, gather ? at : (int64_t[2]){0, 0}, sizeof at);
        CU_CHECK(kcu_copy_box(d, s, &bx, es, cuda_state(rt)->ms));
    }
}

void rt_all_gather(rt_ctx *rt, int g, int dim, int in, int out) {
    rt_cuda_state *cu = cuda_state(rt);
    rt_dimcoll C = rt_dimcoll_plan(rt, RT_C_ALL_GATHER, "all_gather", g, dim, in, out);
    int K = C.K, es = cuda_esize(C.d);
    int64_t O = C.O, n = C.n;
    cuda_coll c = cuda_coll_begin(rt, RT_C_ALL_GATHER);
    cuda_coll_use(rt, in), cuda_coll_use(rt, out);
    if (K == 1) {
        CU_CHECK(cudaMemcpyAsync(rt->buf[out], rt->buf[in], (size_t)n * es, cudaMemcpyDeviceToDevice, cu->ms));
    } else {
        char *dst = O == 1 ? rt->buf[out] : cuda_ws(rt, CM_WS_CUDA_COMM, (size_t)(n * K) * es);
        NCCL_CHECK(ncclAllGather(rt->buf[in], dst, (size_t)n, cuda_nccl_type(C.d), cu->comm[g], cu->ms));
        if (O > 1) cuda_interleave(rt, rt->buf[out], dst, O, C.run, K, es, true);
    }
    cuda_coll_end(rt, c, &in, 1, &out, 1, n * (K - 1) * es);
}

void rt_reduce_scatter(rt_ctx *rt, int g, int dim, int in, int out) {
    rt_cuda_state *cu = cuda_state(rt);
    rt_dimcoll C = rt_dimcoll_plan(rt, RT_C_REDUCE_SCATTER, "reduce_scatter", g, dim, out, in);
    int K = C.K, es = cuda_esize(C.d);
    int64_t O = C.O, n = C.n;
    cuda_coll c = cuda_coll_begin(rt, RT_C_REDUCE_SCATTER);
    cuda_coll_use(rt, in), cuda_coll_use(rt, out);
    if (K == 1) {
        CU_CHECK(cudaMemcpyAsync(rt->buf[out], rt->buf[in], (size_t)n * es, cudaMemcpyDeviceToDevice, cu->ms));
    } else {
        const char *src = rt->buf[in];
        if (O > 1) { /* make each destination's block contiguous */
            char *tmp = cuda_ws(rt, CM_WS_CUDA_COMM, (size_t)(n * K) * es);
            cuda_interleave(rt, tmp, src, O, C.run, K, es, false);
            src = tmp;
        }
        NCCL_CHECK(ncclReduceScatter(src, rt->buf[out], (size_t)n, cuda_nccl_type(C.d), ncclSum, cu->comm[g], cu->ms));
    }
    cuda_coll_end(rt, c, &in, 1, &out, 1, n * (K - 1) * es);
}

void rt_all_reduce(rt_ctx *rt, int g, int in, int out) {
    rt_cuda_state *cu = cuda_state(rt);
    int K = rt_coll_set_size(rt, g);
    rt_check_even(rt, "all_reduce", in);
    rt_check_even(rt, "all_reduce", out);
    const rt_value_desc *xd = rt_coll_val(rt, in), *yd = rt_coll_val(rt, out);
    RT_CHECK(xd->local_elems == yd->local_elems && xd->dtype == RT_F32 && yd->dtype == RT_F32 &&
                 cuda_esize(xd) == cuda_esize(yd),
             "all_reduce %s -> %s: needs two f32 values of one size", xd->name, yd->name);
    int64_t n = xd->local_elems;
    int es = cuda_esize(xd);
    cuda_coll c = cuda_coll_begin(rt, RT_C_ALL_REDUCE);
    cuda_coll_use(rt, in), cuda_coll_use(rt, out);
    ncclDataType_t t = cuda_nccl_type(xd);
    if (K == 1)
        CU_CHECK(cudaMemcpyAsync(rt->buf[out], rt->buf[in], (size_t)n * es, cudaMemcpyDeviceToDevice, cu->ms));
    else
        NCCL_CHECK(ncclAllReduce(rt->buf[in], rt->buf[out], (size_t)n, t, ncclSum, cu->comm[g], cu->ms));
    cuda_coll_end(rt, c, &in, 1, &out, 1, 2 * n * (K - 1) / K * es);
}

/* ---- send / recv ---------------------------------------------------------------------
 * A send is deferred: it joins the NCCL group of the rank's next recv (or
 * the end of the step), so a ring of sends followed by receives is matched
 * inside one group and cannot deadlock.  Until then it reads the value's
 * own bytes; if the value is freed first (under the memory plan a later
 * value may take those bytes), rt_free has it copied on ms into a per-send
 * staging buffer (cuda_stage_sends), which the send reads instead. */
static void cuda_flush_sends(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    for (int i = 0; i < cu->nsends; i++) {
        const rt_value_desc *d = &rt->p->values[cu->send_val[i]];
        NCCL_CHECK(ncclSend(cu->send_ptr[i], (size_t)d->local_elems, cuda_nccl_type(d),
                            rt_coll_peer(rt, cu->send_g[i], cu->send_peer[i]), cu->comm[cu->send_g[i]], cu->ms));
    }
}

/* After the group holding the flushed sends: each value still read in
 * place has its last ms access there. */
static void cuda_sends_done(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    for (int i = 0; i < cu->nsends; i++) {
        int v = cu->send_val[i];
        if (cu->send_ptr[i] == rt->buf[v]) cuda_coll_done(rt, v, false);
        cu->life[v].nsend = 0;
    }
    cu->nsends = 0;
}

void cuda_stage_sends(rt_ctx *rt, int v) {
    rt_cuda_state *cu = cuda_state(rt);
    size_t bytes = cuda_bytes(&rt->p->values[v]);
    for (int i = 0; i < cu->nsends; i++) {
        if (cu->send_val[i] != v || cu->send_ptr[i] != rt->buf[v]) continue;
        if (bytes > cu->stage_bytes[i]) { /* grow-only; the old one may be read by an earlier group's send */
            cuda_graph_invalidate(rt, "a send's staging copy");
            CU_CHECK(cudaDeviceSynchronize());
            CU_CHECK(cudaFree(cu->stage[i]));
            cudaError_t e = cudaMalloc(&cu->stage[i], bytes);
            RT_CHECK(e == cudaSuccess, "cannot allocate a %.1f MiB send staging buffer: %s", (double)bytes / (1 << 20),
                     cudaGetErrorString(e));
            cu->stage_bytes[i] = bytes;
        }
        /* ms follows the kernels that computed v (rt_send); the copy is on
         * ms, before the group that sends it. */
        CU_CHECK(cudaMemcpyAsync(cu->stage[i], rt->buf[v], bytes, cudaMemcpyDeviceToDevice, cu->ms));
        cu->send_ptr[i] = cu->stage[i];
    }
    cu->life[v].nsend = 0;
    cuda_coll_done(rt, v, false);
}

void rt_send(rt_ctx *rt, int g, int peer, int in) {
    rt_cuda_state *cu = cuda_state(rt);
    rt_check_even(rt, "send", in);
    const rt_value_desc *d = rt_coll_val(rt, in);
    rt_coll_set_size(rt, g);
    if (cu->nsends == cu->cap_sends) {
        int cap = cu->cap_sends ? 2 * cu->cap_sends : 8;
        cu->send_val = realloc(cu->send_val, sizeof(int) * (size_t)cap);
        cu->send_g = realloc(cu->send_g, sizeof(int) * (size_t)cap);
        cu->send_peer = realloc(cu->send_peer, sizeof(int) * (size_t)cap);
        cu->send_ptr = realloc(cu->send_ptr, sizeof(void *) * (size_t)cap);
        cu->stage = realloc(cu->stage, sizeof(void *) * (size_t)cap);
        cu->stage_bytes = realloc(cu->stage_bytes, sizeof(size_t) * (size_t)cap);
        RT_CHECK(cu->send_val && cu->send_g && cu->send_peer && cu->send_ptr && cu->stage && cu->stage_bytes,
                 "out of memory");
        for (int i = cu->cap_sends; i < cap; i++) cu->stage[i] = NULL, cu->stage_bytes[i] = 0;
        cu->cap_sends = cap;
    }
    /* The inputs must be complete before the group that sends them runs. */
    cuda_follow_cs(rt);
    cu->send_ptr[cu->nsends] = cuda_coll_use(rt, in);
    cu->send_val[cu->nsends] = in, cu->send_g[cu->nsends] = g, cu->send_peer[cu->nsends] = peer;
    cu->nsends++;
    cu->life[in].nsend++;
    rt_coll_count(rt, RT_C_SEND, (int64_t)cuda_bytes(d), 0.0);
}

void rt_recv(rt_ctx *rt, int g, int peer, int out) {
    rt_cuda_state *cu = cuda_state(rt);
    rt_check_even(rt, "recv", out);
    const rt_value_desc *d = rt_coll_val(rt, out);
    cuda_coll c = cuda_coll_begin(rt, RT_C_RECV);
    cuda_coll_use(rt, out);
    NCCL_CHECK(ncclGroupStart());
    cuda_flush_sends(rt);
    NCCL_CHECK(ncclRecv(rt->buf[out], (size_t)d->local_elems, cuda_nccl_type(d), rt_coll_peer(rt, g, peer), cu->comm[g],
                        cu->ms));
    NCCL_CHECK(ncclGroupEnd());
    cuda_sends_done(rt);
    cuda_coll_end(rt, c, NULL, 0, &out, 1, 0);
}

/* ---- offload and fetch: copies over the host link ---------------------------------
 * On the communication stream, as a collective: it follows the kernels
 * issued so far (the one that wrote the source among them), the compute
 * stream waits for a fetched copy at its first use (cuda_use: pending),
 * and the reuse fences keep a later value off an offloaded value's device
 * bytes until the copy has read them.  So the copies overlap the kernels
 * queued meanwhile: the rest of the forward after an offload, and the
 * backward block the pass puts between a fetch and its first reader.  The
 * element size is the device's (bf16, or fp32 for keep_f32 values). */
static bool cuda_same_elems(const rt_value_desc *a, const rt_value_desc *b) { return cuda_esize(a) == cuda_esize(b); }

static void cuda_copy_space(rt_ctx *rt, int src, int dst, bool to_host) {
    const rt_value_desc *s = rt_check_copy(rt, src, dst, to_host, cuda_same_elems);
    size_t bytes = cuda_bytes(s);
    cuda_coll c = cuda_coll_begin(rt, to_host ? RT_C_OFFLOAD : RT_C_FETCH);
    void *from = cuda_coll_use(rt, src), *into = cuda_coll_use(rt, dst);
    CU_CHECK(cudaMemcpyAsync(into, from, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                             cuda_state(rt)->ms));
#ifdef BASP_HAVE_CUDNN
    /* An attention output's cuDNN statistics follow it, so its backward
     * reads the fetched copy with them (else the basp kernels run it). */
    cuda_dnn_moved(rt, from, into);
#endif
    cuda_coll_end(rt, c, &src, 1, &dst, 1, (int64_t)bytes);
}

void rt_offload(rt_ctx *rt, int src, int dst) { cuda_copy_space(rt, src, dst, true); }

void rt_fetch(rt_ctx *rt, int src, int dst) { cuda_copy_space(rt, src, dst, false); }

/* The end of a step: remaining sends, then the device finishes everything;
 * the collectives' event times go to the counters and the device error
 * flag (a token or target outside the vocabulary) is checked. */
/* ---- started collectives ----------------------------------------------------------
 * Every collective of this backend is already asynchronous to the compute
 * stream: it is queued on the communication stream behind the kernels
 * issued so far, and the compute stream waits for its result's event at
 * the result's first use (cuda_use).  A start is therefore the collective
 * itself, and a wait makes the compute stream wait for the results' events
 * at the wait's place, as the IR says. */
void rt_all_gather_start(rt_ctx *rt, int g, int dim, int in, int out) { rt_all_gather(rt, g, dim, in, out); }
void rt_all_to_all_start(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                         const int *outs) {
    rt_all_to_all(rt, g, split, concat, fanout, fanin, n, ins, outs);
}
void rt_all_to_all_rope_start(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                              const int *outs, int rope, int rope_bwd, int64_t row0, int64_t pos0, double theta) {
    rt_all_to_all_rope(rt, g, split, concat, fanout, fanin, n, ins, outs, rope, rope_bwd, row0, pos0, theta);
}
void rt_reduce_scatter_start(rt_ctx *rt, int g, int dim, int in, int out) { rt_reduce_scatter(rt, g, dim, in, out); }
void rt_all_reduce_start(rt_ctx *rt, int g, int in, int out) { rt_all_reduce(rt, g, in, out); }

void rt_wait(rt_ctx *rt, int n, const int *vals) {
    for (int k = 0; k < n; k++) cuda_use(rt, vals[k]);
}

/* Nothing to move between kernels: the communication stream runs them. */
void rt_comm_progress(rt_ctx *rt) { (void)rt; }

void cuda_finish_sends(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    if (!cu->nsends) return;
    NCCL_CHECK(ncclGroupStart());
    cuda_flush_sends(rt);
    NCCL_CHECK(ncclGroupEnd());
    cuda_sends_done(rt);
}

void rt_comm_finish_step(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    if (!cu) return;
    cuda_finish_sends(rt);
    CU_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < cu->ntimers; i++) {
        float ms = 0.f;
        CU_CHECK(cudaEventElapsedTime(&ms, cu->timers[i].start, cu->timers[i].stop));
        rt->total.coll_sec[cu->timers[i].kind] += ms * 1e-3;
        if (cu->timers[i].kind == RT_C_ALL_TO_ALL) rt->step_a2a_sec += ms * 1e-3;
    }
    cu->ntimers = 0;
    cuda_synced(rt);
    int err = 0;
    CU_CHECK(cudaMemcpy(&err, cu->d_err, sizeof err, cudaMemcpyDeviceToHost));
    RT_CHECK(!err, "a token or target id outside the vocabulary [0, %lld) reached the device kernels",
             (long long)rt->p->vocab);
}

/* ---- batch_aware dynamic: the block groups' communicators ---------------------------
 * A block group's sets name positions of whichever K ranks a micro-step
 * gives its variant (core/rt_dyn.c).  NCCL needs a communicator per placed
 * set; each is made the first time its placement occurs, by one
 * ncclCommSplit over the world per block group with new placements: every
 * rank sees the same groups each micro-step, so every rank calls the same
 * splits in the same order (a rank outside the new placements passes
 * NCCL_SPLIT_NOCOLOR), and all of them know which placements exist.
 * Splitting over the world rather than bootstrapping each set from a
 * unique id sent over its MPI communicator costs every rank the call, but
 * needs no new id exchange; a run meets few placements (sizes times first
 * ranks at most), each made once. */
typedef struct cuda_dyn_comm {
    int g, first;
    ncclComm_t comm;
} cuda_dyn_comm;

void rt_backend_dyn_groups(rt_ctx *rt, const layout_dyn_group *gs, int ng) {
    rt_cuda_state *cu = cuda_state(rt);
    const rt_program *p = rt->base;
    int W = rt->world;
    if (!cu->dyn_seen) {
        cu->dyn_seen = RT_MALLOC((size_t)p->ngroups * (size_t)W);
        memset(cu->dyn_seen, 0, (size_t)p->ngroups * (size_t)W);
    }
    for (int g = 0; g < p->ngroups; g++) {
        const rt_group_desc *gd = &p->groups[g];
        if (gd->block <= 0) continue;
        bool fresh = false;
        int color = NCCL_SPLIT_NOCOLOR, key = 0, mine = -1;
        for (int i = 0; i < ng; i++) {
            int f = gs[i].first;
            if (gs[i].size != gd->block || cu->dyn_seen[(size_t)g * W + f]) continue;
            fresh = true;
            if (rt->rank >= f && rt->rank < f + gs[i].size) {
                int set, at;
                rt_dyn_block_pos(gd, rt->rank - f, &set, &at);
                color = f * gd->block + set, key = at, mine = f; /* unique: the groups are disjoint */
            }
        }
        if (!fresh) continue;
        ncclComm_t c = NULL;
        NCCL_CHECK(ncclCommSplit(cu->world, color, key, &c, NULL));
        for (int i = 0; i < ng; i++)
            if (gs[i].size == gd->block) cu->dyn_seen[(size_t)g * W + gs[i].first] = 1;
        if (mine < 0) continue;
        RT_CHECK(c, "group %s: ncclCommSplit made no communicator for the ranks from %d", gd->name, mine);
        if (cu->ndyn == cu->cap_dyn) {
            cu->cap_dyn = cu->cap_dyn ? 2 * cu->cap_dyn : 16;
            cu->dyn = realloc(cu->dyn, sizeof *cu->dyn * (size_t)cu->cap_dyn);
            RT_CHECK(cu->dyn, "out of memory");
        }
        cu->dyn[cu->ndyn++] = (cuda_dyn_comm){g, mine, c};
    }
}

void rt_backend_dyn_bind(rt_ctx *rt, int g, int first) {
    rt_cuda_state *cu = cuda_state(rt);
    for (int i = 0; i < cu->ndyn; i++)
        if (cu->dyn[i].g == g && cu->dyn[i].first == first) {
            cu->comm[g] = cu->dyn[i].comm;
            return;
        }
    RT_CHECK(false, "group %s at ranks from %d: no NCCL communicator was made (rt_backend_dyn_groups not called)",
             rt->base->groups[g].name, first);
}

void cuda_dyn_fini(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    for (int i = 0; i < cu->ndyn; i++) NCCL_CHECK(ncclCommDestroy(cu->dyn[i].comm));
    free(cu->dyn), free(cu->dyn_seen);
    cu->dyn = NULL, cu->dyn_seen = NULL, cu->ndyn = cu->cap_dyn = 0;
}
