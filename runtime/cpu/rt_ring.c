/* rt_ring.c — ring attention on the CPU (IR ops ring_attention and
 * ring_attention_bwd, sequence ring / hybrid).
 *
 * The R ranks of group g each hold a slice of S tokens of q, k, v (in the
 * module's sequence order, rt_seq_positions).  The forward keeps its q and
 * passes the (k, v) blocks around the ring: at step s it works on the block
 * of position me - s while the block of step s + 1 arrives from the
 * previous rank (MPI_Irecv/Isend posted before the block's kernel, waited
 * after it; MPI moves a large message only inside its calls, so most of
 * the transfer happens in the wait, and the cost model charges block plus
 * hop on the CPU); the partial results merge by log-sum-exp
 * (kern_ring_block_fwd).  Every step pairs one send
 * with one receive on each rank, so the ring cannot deadlock.
 *
 * The backward passes (k, v) the same way together with the block's
 * (dk, dv) accumulators: each rank adds its queries' share to the block it
 * holds and hands the accumulators on; after R steps every block's
 * accumulators have visited all ranks and come back to its owner.  The
 * softmax statistics are the forward's lse, so nothing is recomputed
 * across ranks.
 *
 * With packed documents every rank knows the whole step's document ids
 * (rt_doc_slice), so a block's ids are looked up, never sent: the mask adds
 * "same document", and block tiles whose ids do not meet are skipped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../data/rt_data.h"
#include "../host/rt_host.h"
#include "rt_cpu.h"

/* Posts the exchange of one block: n floats of each of the `cnt` arrays
 * in src go to the next rank, the previous rank's arrive in dst. */
static int cpu_ring_post(rt_ctx *rt, int g, int tag, MPI_Request *req, float *const *dst, const float *const *src,
                         int cnt, int64_t n) {
    int R = rt_coll_set_size(rt, g), me = rt->gpos[g];
    int next = (me + 1) % R, prev = (me + R - 1) % R, k = 0;
    RT_CHECK(n <= 0x7fffffff, "ring attention: a block of %lld elements exceeds MPI's int count", (long long)n);
    for (int i = 0; i < cnt; i++) {
        RT_MPI(MPI_Irecv(dst[i], (int)n, MPI_FLOAT, prev, tag + i, rt->comm[g], &req[k++]));
        RT_MPI(MPI_Isend((void *)src[i], (int)n, MPI_FLOAT, next, tag + i, rt->comm[g], &req[k++]));
    }
    return k;
}

/* The document ids of ring position r's block ([b,S]), or NULL without
 * packed documents. */
static int32_t *cpu_ring_docs(rt_ctx *rt, int32_t *buf, int64_t row0, int64_t b, int64_t S, int r) {
    if (!rt->docs) return NULL;
    rt_doc_slice(rt, row0, b, (int64_t)r * S, S, buf, NULL);
    return buf;
}

/* Waits for posted exchanges; the time is the transfer not hidden. */
static void cpu_ring_wait(rt_ctx *rt, MPI_Request *req, int n, int64_t bytes) {
    if (n == 0) return;
    double t0 = rt_now();
    RT_MPI(MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
    rt_coll_count(rt, RT_C_SEND, bytes, rt_now() - t0);
}

void rt_ring_attention(rt_ctx *rt, int g, float *o, float *lse, const float *q, const float *k, const float *v,
                       int64_t row0, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    cpu_attention_say(rt, Dh);
    int R = rt_coll_set_size(rt, g), me = rt->gpos[g];
    int64_t nkv = b * S * Hkv * Dh;
    float *buf = cpu_scratch(rt, 0, (size_t)(4 * nkv > 0 ? 4 * nkv : 1) * sizeof(float));
    int64_t *qpos = RT_MALLOC(sizeof(int64_t) * 2 * (size_t)S), *kpos = qpos + S;
    int32_t *ids = RT_MALLOC(sizeof(int32_t) * 2 * (size_t)(b * S > 0 ? b * S : 1));
    const int32_t *qdoc = cpu_ring_docs(rt, ids, row0, b, S, me);
    rt_seq_positions(rt, (int64_t)me * S, S, qpos);
    memset(o, 0, sizeof(float) * (size_t)(b * S * H * Dh));
    for (int64_t i = 0; i < b * S * H; i++) lse[i] = -INFINITY;
    const float *cur[2] = {k, v};
    for (int s = 0; s < R; s++) {
        MPI_Request req[4];
        float *nxt[2] = {buf + (s % 2) * 2 * nkv, buf + (s % 2) * 2 * nkv + nkv};
        int nreq = s < R - 1 ? cpu_ring_post(rt, g, 40, req, nxt, cur, 2, nkv) : 0;
        rt_seq_positions(rt, (int64_t)((me - s + R) % R) * S, S, kpos);
        const int32_t *kdoc = cpu_ring_docs(rt, ids + b * S, row0, b, S, (me - s + R) % R);
        double t0 = rt_now();
        kern_ring_block_fwd_doc(o, lse, q, cur[0], cur[1], b, S, S, H, Hkv, Dh, qpos, kpos, qdoc, kdoc);
        rt_kern_time(rt, CM_K_RING_ATTENTION, t0);
        cpu_ring_wait(rt, req, nreq, 2 * nkv * 4);
        cur[0] = nxt[0], cur[1] = nxt[1];
    }
    rt->total.kern_calls[CM_K_RING_ATTENTION]++; /* one call per op, as on CUDA */
    free(qpos);
    free(ids);
}

void rt_ring_attention_bwd(rt_ctx *rt, int g, float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *o, const float *lse, int64_t row0, int64_t b,
                           int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    int R = rt_coll_set_size(rt, g), me = rt->gpos[g];
    int64_t nkv = b * S * Hkv * Dh, nq = b * S * H * Dh;
    int32_t *ids = RT_MALLOC(sizeof(int32_t) * 2 * (size_t)(b * S > 0 ? b * S : 1));
    const int32_t *qdoc = cpu_ring_docs(rt, ids, row0, b, S, me);
    float *kvbuf = cpu_scratch(rt, 0, (size_t)(4 * nkv > 0 ? 4 * nkv : 1) * sizeof(float));
    float *gbuf = cpu_scratch(rt, 1, (size_t)(4 * nkv + b * S * H) * sizeof(float)), *D = gbuf + 4 * nkv;
    int64_t *qpos = RT_MALLOC(sizeof(int64_t) * 2 * (size_t)S), *kpos = qpos + S;
    rt_seq_positions(rt, (int64_t)me * S, S, qpos);
    double t0 = rt_now();
    kern_ring_rowdot(D, dout, o, b, S, H, Dh);
    memset(dq, 0, sizeof(float) * (size_t)nq);
    memset(gbuf, 0, sizeof(float) * (size_t)(2 * nkv)); /* own block's (dk, dv) start at 0 */
    rt_kern_time(rt, CM_K_RING_ATTENTION_BWD, t0);
    const float *cur[2] = {k, v};
    float *acc[2] = {gbuf, gbuf + nkv};
    for (int s = 0; s < R; s++) {
        MPI_Request req[4];
        float *nxt[2] = {kvbuf + (s % 2) * 2 * nkv, kvbuf + (s % 2) * 2 * nkv + nkv};
        int nreq = s < R - 1 ? cpu_ring_post(rt, g, 40, req, nxt, cur, 2, nkv) : 0;
        rt_seq_positions(rt, (int64_t)((me - s + R) % R) * S, S, kpos);
        const int32_t *kdoc = cpu_ring_docs(rt, ids + b * S, row0, b, S, (me - s + R) % R);
        t0 = rt_now();
        kern_ring_block_bwd_doc(dq, acc[0], acc[1], dout, q, cur[0], cur[1], lse, D, b, S, S, H, Hkv, Dh, qpos, kpos,
                                qdoc, kdoc);
        rt_kern_time(rt, CM_K_RING_ATTENTION_BWD, t0);
        /* the accumulators go on only once this rank's share is in */
        if (R > 1) {
            float *other = acc[0] == gbuf ? gbuf + 2 * nkv : gbuf;
            float *gdst[2] = {other, other + nkv};
            MPI_Request greq[4];
            int ng = cpu_ring_post(rt, g, 50, greq, gdst, (const float *const *)acc, 2, nkv);
            cpu_ring_wait(rt, greq, ng, 2 * nkv * 4);
            acc[0] = gdst[0], acc[1] = gdst[1];
        }
        cpu_ring_wait(rt, req, nreq, 2 * nkv * 4);
        cur[0] = nxt[0], cur[1] = nxt[1];
    }
    /* after R hand-overs the accumulators of this rank's own block are here */
    memcpy(dk, acc[0], sizeof(float) * (size_t)nkv);
    memcpy(dv, acc[1], sizeof(float) * (size_t)nkv);
    rt->total.kern_calls[CM_K_RING_ATTENTION_BWD]++;
    free(qpos);
    free(ids);
}
