/* rt_doc_split.c — attention over packed documents run by another
 * attention (cuDNN's fused graphs, rt_attn_cudnn_rt.c) instead of basp's
 * document-masked kernels (kcu_ring.cu's _doc entry points).
 *
 * Why it can.  A packed row is documents one after another, and a token
 * sees only the earlier tokens of its own document: each document is a
 * plain causal attention of its own length l.  Documents are gathered into
 * zero-padded batches [n, L, heads, Dh] by padded length L (the power of
 * two at or above l, at least 128: cm_docs_padded; a few plans serve every
 * mix of lengths), one fused call per batch, and the first l rows of each result
 * scattered back.  The padding is exact, not approximate: a real query
 * (row < l) sees only keys at or before it, all real; a padding row's
 * output is dropped; in the backward the padding rows' dO is 0, so their
 * P dO, dP = dO Vᵀ and D = rowsum(dO O) are 0, and they add nothing to dK,
 * dV or any real row.  Padding entries (the batch count rounded up to a
 * power of two, for the same reason) are all zeros.  A batch holds at most
 * b * S rows, or one document of the largest padded length (bounded
 * workspace: ir/ir_op_attn.c plans the same); a length with more documents
 * takes several calls.
 *
 * The backward recomputes each batch's forward for its statistics (cuDNN's
 * backward needs them; the op carries none): 40% more FLOPs than the
 * backward alone (layout/presets.c's DOCS_RECOMPUTE: 35% more time).
 *
 * Not taken (basp's kernels run the op): a sequence in the ring's order
 * (ring blocks with documents keep the block kernels), a document that is
 * not one run of the row, or no sub-block attention.
 *
 * The check.  A forward or backward op with a batch shape (n, L) not yet
 * checked in its direction (doc_check_wanted) also runs basp's document
 * kernels into temporaries and compares o, then dq, dk, dv:
 * within 5e-2 of the tensor's max |basp| (bf16 P and dS: plain attention's
 * tolerance; a wrong gather, length or mask is far above).  A mismatch
 * prints one warning, puts basp's results in place and keeps the shape on
 * basp's kernels.
 *
 * The sub-block attention is cuda_sub_ops_for(rt, CM_ATTN_CUDNN_DOCS):
 * cuDNN's, or a test's (cuemu: basp's block kernels, tests/gpu/emu). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../data/rt_data.h"
#include "rt_cuda.h"

/* The op shapes' verdicts, and the batch shapes (nb, L, direction) the
 * one-time check has compared: cuDNN runs batch shapes, and each is
 * checked once, as plain attention's shapes are. */
struct cuda_doc_split_state {
    cuda_split_shapes shapes;
    int64_t (*seen)[3];
    int nseen, capseen;
};

void cuda_doc_split_fini(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    if (!cu->doc_split) return;
    free(cu->doc_split->shapes.sh), free(cu->doc_split->seen), free(cu->doc_split);
    cu->doc_split = NULL;
}

static struct cuda_doc_split_state *doc_state(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    if (!cu->doc_split) {
        cu->doc_split = calloc(1, sizeof *cu->doc_split);
        RT_CHECK(cu->doc_split, "out of host memory");
    }
    return cu->doc_split;
}

static cuda_split_shape *doc_shape(rt_ctx *rt, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    return cuda_split_shape_of(&doc_state(rt)->shapes, b, S, H, Hkv, Dh);
}

/* Whether batch shape (nb, L) has been checked in direction dir; with
 * mark, it is from now on. */
static bool doc_seen(rt_ctx *rt, int64_t nb, int64_t L, int64_t dir, bool mark) {
    struct cuda_doc_split_state *s = doc_state(rt);
    for (int i = 0; i < s->nseen; i++)
        if (s->seen[i][0] == nb && s->seen[i][1] == L && s->seen[i][2] == dir) return true;
    if (!mark) return false;
    if (s->nseen == s->capseen) {
        s->capseen = s->capseen ? 2 * s->capseen : 16;
        s->seen = realloc(s->seen, sizeof *s->seen * (size_t)s->capseen);
        RT_CHECK(s->seen, "out of host memory");
    }
    s->seen[s->nseen][0] = nb, s->seen[s->nseen][1] = L, s->seen[s->nseen][2] = dir, s->nseen++;
    return false;
}

static void doc_refuse(rt_ctx *rt, cuda_split_shape *x, const char *why) {
    x->state = CUDA_SPLIT_OWN;
    RT_CHECK(cuda_state(rt)->attn_mode != CUDA_ATTN_CUDNN,
             "attention: BASP_ATTENTION=cudnn, but cuDNN cannot run the packed documents of b=%lld S=%lld H=%lld "
             "Hkv=%lld Dh=%lld: %s",
             (long long)x->b, (long long)x->S, (long long)x->H, (long long)x->Hkv, (long long)x->Dh, why);
    if (rt->rank == 0)
        fprintf(stderr,
                "warning: attention: packed documents not split for b=%lld S=%lld H=%lld Hkv=%lld Dh=%lld: %s; "
                "basp's document kernels run this shape\n",
                (long long)x->b, (long long)x->S, (long long)x->H, (long long)x->Hkv, (long long)x->Dh, why);
}

/* ---- the batches ------------------------------------------------------------------------ */
/* One call: nb entries of L rows, table entries [first, first + nb). */
typedef struct doc_batch {
    int64_t L, nb, first;
} doc_batch;

/* An op's batches and the (offset, length) table of their entries: off
 * then len, nent each, host and device. */
typedef struct doc_plan {
    doc_batch *batch;
    int nbatch;
    int64_t nent, rows; /* entries; the largest batch's nb * L */
    int64_t *tab;       /* host [2 nent] */
    const int64_t *dtab;
} doc_plan;

static int64_t pow2_at_least(int64_t x) {
    int64_t p = 1;
    while (p < x) p *= 2;
    return p;
}

/* Every document's first row (of the b x S rows) and length, or false when
 * a document id comes back after another (not one run). */
static bool doc_runs(rt_ctx *rt, int64_t row0, int64_t b, int64_t S, int64_t **off, int64_t **len, int64_t *ndoc) {
    int32_t *id = RT_MALLOC(sizeof(int32_t) * (size_t)(b * S));
    rt_doc_slice(rt, row0, b, 0, S, id, NULL);
    *off = RT_MALLOC(sizeof(int64_t) * (size_t)(b * S)), *len = RT_MALLOC(sizeof(int64_t) * (size_t)(b * S));
    int64_t n = 0;
    bool ok = true;
    for (int64_t r = 0; r < b && ok; r++)
        for (int64_t i = 0; i < S && ok; i++) {
            const int32_t *x = id + r * S;
            if (i > 0 && x[i] == x[i - 1]) {
                (*len)[n - 1]++;
                continue;
            }
            ok = i == 0 || x[i] > x[i - 1]; /* numbered in order along the row: a new one, never an old one */
            (*off)[n] = r * S + i, (*len)[n] = 1, n++;
        }
    free(id);
    *ndoc = n;
    return ok;
}

/* Groups the documents by padded length, each group cut into batches of
 * at most max(b * S, the longest padded length) rows, their entry counts
 * rounded up to a power of two. */
static bool doc_plan_make(rt_ctx *rt, doc_plan *P, int64_t row0, int64_t b, int64_t S) {
    memset(P, 0, sizeof *P);
    int64_t *off, *len, n;
    bool ok = doc_runs(rt, row0, b, S, &off, &len, &n);
    /* a batch's rows: at most the op's b * S, or one document's padded length */
    int64_t top = cm_docs_padded(S), placed = 0;
    int64_t cap = b * S > top ? b * S : top;
    P->tab = RT_MALLOC(sizeof(int64_t) * (size_t)(4 * n + 2));
    int64_t *eoff = RT_MALLOC(sizeof(int64_t) * (size_t)(2 * n + 1)),
            *elen = RT_MALLOC(sizeof(int64_t) * (size_t)(2 * n + 1));
    int capb = 0;
    for (int64_t L = cm_docs_padded(1); ok && L <= top; L *= 2) {
        int64_t per = 1; /* documents per batch at this length: a power of two, per * L <= cap */
        while (2 * per * L <= cap) per *= 2;
        for (int64_t i = 0; i < n;) {
            int64_t cnt = 0, first = P->nent;
            for (; i < n && cnt < per; i++)
                if (cm_docs_padded(len[i]) == L)
                    eoff[P->nent] = off[i], elen[P->nent] = len[i], P->nent++, cnt++, placed++;
            if (!cnt) continue;
            int64_t nb = pow2_at_least(cnt);
            for (int64_t j = cnt; j < nb; j++) eoff[P->nent] = 0, elen[P->nent] = 0, P->nent++;
            if (P->nbatch == capb) {
                capb = capb ? 2 * capb : 8;
                P->batch = realloc(P->batch, sizeof *P->batch * (size_t)capb);
                RT_CHECK(P->batch, "out of host memory");
            }
            P->batch[P->nbatch++] = (doc_batch){L, nb, first};
            if (nb * L > P->rows) P->rows = nb * L;
        }
    }
    RT_CHECK(!ok || placed == n, "packed documents: %lld of %lld documents in no batch", (long long)(n - placed),
             (long long)n);
    memcpy(P->tab, eoff, sizeof(int64_t) * (size_t)P->nent);
    memcpy(P->tab + P->nent, elen, sizeof(int64_t) * (size_t)P->nent);
    free(off), free(len), free(eoff), free(elen);
    return ok;
}

static void doc_plan_free(doc_plan *P) { free(P->batch), free(P->tab); }

/* This op checks (BASP_ATTENTION=auto) when one of its batch shapes has
 * not been checked in this direction; they all count as checked after. */
static bool doc_check_wanted(rt_ctx *rt, const doc_plan *P, int dir) {
    if (cuda_state(rt)->attn_mode != CUDA_ATTN_AUTO) return false;
    bool fresh = false;
    for (int i = 0; i < P->nbatch; i++) fresh = !doc_seen(rt, P->batch[i].nb, P->batch[i].L, dir, true) || fresh;
    return fresh;
}

/* The workspace: the table, then the batch buffers of P->rows rows (q, k,
 * v, o; with the backward dout, dq, dk, dv too) and the statistics. */
typedef struct doc_bufs {
    kcu_bf16 *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *st;
} doc_bufs;

static doc_bufs doc_bind(rt_ctx *rt, doc_plan *P, int64_t H, int64_t Hkv, int64_t Dh, bool bwd) {
    size_t wq = 2 * (size_t)(P->rows * H * Dh), wk = 2 * (size_t)(P->rows * Hkv * Dh), tb = 16 * (size_t)P->nent;
    size_t total = cuda_align(tb) + (bwd ? 4 : 2) * (cuda_align(wq) + cuda_align(wk)) + 4 * (size_t)(P->rows * H);
    char *w = cuda_ws(rt, CM_WS_CUDA_DOCS, total); /* first the whole: the upload below does not grow it */
    P->dtab = cuda_upload(rt, CM_WS_CUDA_DOCS, P->tab, tb);
    char *at = w + cuda_align(tb);
    doc_bufs d = {0};
    kcu_bf16 **qs[4] = {&d.q, &d.o, &d.dout, &d.dq}, **ks[4] = {&d.k, &d.v, &d.dk, &d.dv};
    for (int i = 0; i < (bwd ? 4 : 2); i++) {
        *qs[i] = (kcu_bf16 *)(void *)at, at += cuda_align(wq);
        *ks[i] = (kcu_bf16 *)(void *)at, at += cuda_align(wk);
    }
    d.st = (float *)(void *)at;
    return d;
}

/* The shape's verdict and whether this op checks; false: basp's kernels. */
static const cuda_sub_ops *doc_begin(rt_ctx *rt, cuda_split_shape **xp, doc_plan *P, int64_t row0, int64_t b, int64_t S,
                                     int64_t H, int64_t Hkv, int64_t Dh) {
    const cuda_sub_ops *ops = rt->p->seq_ring > 1 ? NULL : cuda_sub_ops_for(rt, CM_ATTN_CUDNN_DOCS);
    if (!ops) return NULL;
    cuda_split_shape *x = *xp = doc_shape(rt, b, S, H, Hkv, Dh);
    if (x->state == CUDA_SPLIT_OWN) return NULL;
    if (!doc_plan_make(rt, P, row0, b, S)) {
        doc_plan_free(P);
        return NULL; /* this step's layout only: basp's kernels run it */
    }
    char why[600] = "";
    for (int i = 0; i < P->nbatch; i++) {
        cuda_sub sb = {P->batch[i].nb, P->batch[i].L, P->batch[i].L, H, Hkv, Dh, false};
        if (!ops->prepare(rt, &sb, why, sizeof why)) {
            doc_refuse(rt, x, why);
            doc_plan_free(P);
            return NULL;
        }
    }
    x->state = CUDA_SPLIT_OK;
    return ops;
}

/* Batch i of P: q, k, v gathered (and dout with the backward). */
static void doc_gather(rt_ctx *rt, const doc_plan *P, int i, const doc_bufs *d, const kcu_bf16 *q, const kcu_bf16 *k,
                       const kcu_bf16 *v, const kcu_bf16 *dout, int64_t H, int64_t Hkv, int64_t Dh) {
    cudaStream_t cs = cuda_state(rt)->cs;
    const doc_batch *B = &P->batch[i];
    const int64_t *off = P->dtab + B->first, *len = P->dtab + P->nent + B->first;
    CU_CHECK(kcu_doc_gather(d->q, q, off, len, B->nb, B->L, H * Dh, cs));
    CU_CHECK(kcu_doc_gather(d->k, k, off, len, B->nb, B->L, Hkv * Dh, cs));
    CU_CHECK(kcu_doc_gather(d->v, v, off, len, B->nb, B->L, Hkv * Dh, cs));
    if (dout) CU_CHECK(kcu_doc_gather(d->dout, dout, off, len, B->nb, B->L, H * Dh, cs));
}

static void doc_scatter(rt_ctx *rt, const doc_plan *P, int i, kcu_bf16 *dst, const kcu_bf16 *src, int64_t W) {
    const doc_batch *B = &P->batch[i];
    CU_CHECK(kcu_doc_scatter(dst, src, P->dtab + B->first, P->dtab + P->nent + B->first, B->nb, B->L, W,
                             cuda_state(rt)->cs));
}

/* ---- the check ------------------------------------------------------------------------ */

/* The split's results got[0..cnt) (n[i] elements each) against basp's in
 * ref (all on the device); on a mismatch the shape is refused and basp's
 * results copied over the split's. */
static void doc_verdict(rt_ctx *rt, cuda_split_shape *x, kcu_bf16 *const *got, kcu_bf16 *const *ref, const int64_t *n,
                        int cnt, const char *dir) {
    static const char *const fwd_name[1] = {"o"}, *const bwd_name[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < cnt; i++) {
        double rel = 0;
        if (cuda_close_bf16(rt, got[i], ref[i], n[i], &rel)) continue;
        const char *name = cnt == 1 ? fwd_name[0] : bwd_name[i];
        char why[200];
        snprintf(why, sizeof why, "its %s differs from basp's document kernels' (%s: %.3g of max |%s|, over 5e-2)", dir,
                 name, rel, name);
        doc_refuse(rt, x, why);
        for (int j = 0; j < cnt; j++)
            CU_CHECK(cudaMemcpyAsync(got[j], ref[j], 2 * (size_t)n[j], cudaMemcpyDeviceToDevice, cuda_state(rt)->cs));
        return;
    }
}

/* ---- the calls ------------------------------------------------------------------------- */
bool cuda_doc_split_fwd(rt_ctx *rt, kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, int64_t row0,
                        int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    cuda_split_shape *x;
    doc_plan P;
    const cuda_sub_ops *ops = doc_begin(rt, &x, &P, row0, b, S, H, Hkv, Dh);
    if (!ops) return false;
    bool check = doc_check_wanted(rt, &P, 0);
    int64_t nq = b * S * H * Dh;
    kcu_bf16 *ref = check ? cuda_try_malloc(2 * (size_t)nq) : NULL;
    if (check && !ref) {
        doc_refuse(rt, x, "no device memory for its one-time check against basp's kernels");
        doc_plan_free(&P);
        return false;
    }
    if (ref) CU_CHECK(cuda_docattn_fwd(rt, ref, q, k, v, row0, b, S, H, Hkv, Dh));
    doc_bufs d = doc_bind(rt, &P, H, Hkv, Dh, false);
    for (int i = 0; i < P.nbatch; i++) {
        const doc_batch *B = &P.batch[i];
        cuda_sub sb = {B->nb, B->L, B->L, H, Hkv, Dh, false};
        doc_gather(rt, &P, i, &d, q, k, v, NULL, H, Hkv, Dh);
        ops->fwd(rt, &sb, d.o, d.st, d.q, d.k, d.v);
        doc_scatter(rt, &P, i, o, d.o, H * Dh);
    }
    if (ref) {
        doc_verdict(rt, x, &o, &ref, &nq, 1, "forward");
        CU_CHECK(cudaStreamSynchronize(cuda_state(rt)->cs));
        CU_CHECK(cudaFree(ref));
    }
    doc_plan_free(&P);
    return true;
}

bool cuda_doc_split_bwd(rt_ctx *rt, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                        const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, int64_t row0, int64_t b, int64_t S,
                        int64_t H, int64_t Hkv, int64_t Dh) {
    cuda_split_shape *x;
    doc_plan P;
    const cuda_sub_ops *ops = doc_begin(rt, &x, &P, row0, b, S, H, Hkv, Dh);
    if (!ops) return false;
    bool check = doc_check_wanted(rt, &P, 1);
    int64_t n[3] = {b * S * H * Dh, b * S * Hkv * Dh, b * S * Hkv * Dh};
    kcu_bf16 *ref[3] = {NULL, NULL, NULL};
    bool have = true;
    for (int i = 0; check && i < 3; i++) have = have && (ref[i] = cuda_try_malloc(2 * (size_t)n[i])) != NULL;
    if (check && !have) {
        for (int i = 0; i < 3; i++) cudaFree(ref[i]);
        doc_refuse(rt, x, "no device memory for its one-time check against basp's kernels");
        doc_plan_free(&P);
        return false;
    }
    if (check) CU_CHECK(cuda_docattn_bwd(rt, ref[0], ref[1], ref[2], dout, q, k, v, o, row0, b, S, H, Hkv, Dh));
    doc_bufs d = doc_bind(rt, &P, H, Hkv, Dh, true);
    for (int i = 0; i < P.nbatch; i++) {
        const doc_batch *B = &P.batch[i];
        cuda_sub sb = {B->nb, B->L, B->L, H, Hkv, Dh, false};
        doc_gather(rt, &P, i, &d, q, k, v, dout, H, Hkv, Dh);
        ops->fwd(rt, &sb, d.o, d.st, d.q, d.k, d.v); /* the statistics, and o as the backward reads it */
        ops->bwd(rt, &sb, d.dq, d.dk, d.dv, d.dout, d.q, d.k, d.v, d.o, d.st);
        doc_scatter(rt, &P, i, dq, d.dq, H * Dh);
        doc_scatter(rt, &P, i, dk, d.dk, Hkv * Dh);
        doc_scatter(rt, &P, i, dv, d.dv, Hkv * Dh);
    }
    if (check) {
        kcu_bf16 *got[3] = {dq, dk, dv};
        doc_verdict(rt, x, got, ref, n, 3, "backward");
        CU_CHECK(cudaStreamSynchronize(cuda_state(rt)->cs));
        for (int i = 0; i < 3; i++) CU_CHECK(cudaFree(ref[i]));
    }
    doc_plan_free(&P);
    return true;
}
