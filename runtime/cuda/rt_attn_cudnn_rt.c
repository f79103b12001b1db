/* rt_attn_cudnn_rt.c — cuDNN attention inside the runtime (rt_cuda.h,
 * cuda_dnn_*): the per-shape verdict, the one-time check against the
 * basp kernels, and the softmax statistics the forward leaves for the
 * backward.  Only built with cuDNN (BASP_HAVE_CUDNN).
 *
 * The statistics.  cuDNN's backward consumes the forward's row statistics
 * (max + log-sum-exp, fp32 [b,H,S]), but rt_attention / rt_attention_bwd
 * carry no such tensor.  They are kept here, keyed by the forward's output
 * pointer o: the backward of that forward receives the same o (the IR's
 * attention_bwd reads the forward's output value), so it finds them.  A
 * later forward that writes the same o (the next step, a recomputation, or
 * another layer's output placed on the same bytes by the memory plan)
 * overwrites the entry, which is exactly right: the statistics describe
 * o's current contents, and o's contents change with them.  Any other
 * kernel that writes o through the attention calls (the basp forward)
 * drops the entry (cuda_dnn_forget), and the entry also records its
 * shape, so a backward never uses statistics that do not belong to its o.
 *
 * Offloaded outputs.  With train.offload the backward reads a fetched
 * copy of o at another address, and the plan may put a later layer's
 * output on o's own bytes meanwhile.  So the statistics follow the copy
 * (cuda_dnn_moved, from rt_offload and rt_fetch): the entry is re-keyed
 * to the host copy, then to the fetched one; whatever entry the copy's
 * destination had is dropped, since its contents are gone.
 *
 * Bound.  A backward consumes its forward's statistics (the entry turns
 * invalid), and a forward that finds no entry for its o takes an invalid
 * one before allocating: an entry is allocated only while every existing
 * one holds statistics some backward may still read, and a forward op's
 * statistics are consumed before the same op runs again, so there are at
 * most as many entries as attention forward ops, which is how ir/ir_mem.c
 * bounds them (4 b S H bytes per attention forward).  They are
 * cudaMalloc'ed and counted in rt_backend_workspace_bytes, so the
 * measured peak includes them.
 *
 * The check (BASP_ATTENTION=auto).  The first forward and the first
 * backward of each shape also run the basp kernels into temporary buffers
 * and compare; a mismatch prints one warning and the shape uses the basp
 * kernels from then on, so a wrong cuDNN graph cannot silently change the
 * numbers.  Tolerance: max |cuDNN - basp| <= 5e-2 max |basp| per tensor.
 * Both sides read the same bf16 inputs and accumulate in fp32; they differ
 * by bf16 rounding of P and dS (2^-8 relative each), of the outputs (2^-9)
 * and by summation order — each is within 3e-2 of an fp32 reference in
 * tests/gpu/test_gpu_kernels.c, hence 5e-2 between them.  A wrong mask,
 * scale, head mapping or layout moves outputs by a large fraction of their
 * maximum (the tests' sharp inputs show it), far above that.  NaN or Inf on
 * either side is a mismatch.  The temporaries live only during the check;
 * when they cannot be allocated the shape uses the basp kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_attn_cudnn.h"
#include "rt_cuda.h"

/* Per shape: untried, checked (forward / backward), or refused. */
enum { SH_NEW = 0, SH_OK = 1, SH_OWN = 2 };

typedef struct cuda_dnn_shape_state {
    cuda_cudnn_shape s;
    int state;
    bool fwd_checked, bwd_checked;
} cuda_dnn_shape_state;

/* Statistics of the forward that last wrote o (valid false: none). */
typedef struct cuda_dnn_stats {
    const void *o;
    float *dev;
    size_t bytes;
    cuda_cudnn_shape s;
    bool valid;
} cuda_dnn_stats;

struct cuda_dnn {
    cuda_cudnn *c;
    cuda_dnn_shape_state *sh;
    int nsh, capsh;
    cuda_dnn_stats *st;
    int nst, capst;
    size_t st_bytes;
    bool warned_nostats;
};

static void *cuda_dnn_grow(void *p, int *cap, size_t elem) {
    int n = *cap ? 2 * *cap : 8;
    void *q = realloc(p, elem * (size_t)n);
    RT_CHECK(q, "out of host memory");
    memset((char *)q + elem * (size_t)*cap, 0, elem * (size_t)(n - *cap));
    *cap = n;
    return q;
}

bool cuda_dnn_init(rt_ctx *rt, char *why, size_t nwhy) {
    rt_cuda_state *cu = cuda_state(rt);
    if (cu->dnn) return true;
    cuda_cudnn *c = cuda_cudnn_create(cu->cs, why, nwhy);
    if (!c) return false;
    cu->dnn = calloc(1, sizeof *cu->dnn);
    RT_CHECK(cu->dnn, "out of host memory");
    cu->dnn->c = c;
    return true;
}

void cuda_dnn_version(char *buf, size_t n) {
    size_t v = cuda_cudnn_version();
    snprintf(buf, n, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
}

size_t cuda_dnn_bytes(const rt_ctx *rt) {
    const rt_cuda_state *cu = rt->be;
    return cu && cu->dnn ? cu->dnn->st_bytes : 0;
}

void cuda_dnn_fini(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    struct cuda_dnn *d = cu->dnn;
    if (!d) return;
    for (int i = 0; i < d->nst; i++) CU_CHECK(cudaFree(d->st[i].dev));
    cuda_cudnn_destroy(d->c);
    free(d->sh), free(d->st), free(d);
    cu->dnn = NULL;
}

static cuda_dnn_shape_state *cuda_dnn_shape(struct cuda_dnn *d, cuda_cudnn_shape s) {
    for (int i = 0; i < d->nsh; i++)
        if (!memcmp(&d->sh[i].s, &s, sizeof s)) return &d->sh[i];
    if (d->nsh == d->capsh) d->sh = cuda_dnn_grow(d->sh, &d->capsh, sizeof *d->sh);
    cuda_dnn_shape_state *x = &d->sh[d->nsh++];
    x->s = s;
    return x;
}

static const char *cuda_dnn_shape_str(const cuda_cudnn_shape *s, char *buf, size_t n) {
    snprintf(buf, n, "b=%lld S=%lld H=%lld Hkv=%lld Dh=%lld", (long long)s->b, (long long)s->S, (long long)s->H,
             (long long)s->Hkv, (long long)s->Dh);
    return buf;
}

/* The shape goes to the basp kernels for good; rank 0 says why, once. */
static void cuda_dnn_refuse(rt_ctx *rt, cuda_dnn_shape_state *x, const char *why) {
    char b[160];
    x->state = SH_OWN;
    if (rt->rank == 0)
        fprintf(stderr, "warning: attention: cuDNN not used for %s: %s; the basp kernels run this shape\n",
                cuda_dnn_shape_str(&x->s, b, sizeof b), why);
}

/* The shape's verdict before a call: true when cuDNN runs it. */
static bool cuda_dnn_usable(rt_ctx *rt, cuda_dnn_shape_state *x) {
    rt_cuda_state *cu = cuda_state(rt);
    if (x->state == SH_OWN) return false;
    if (x->state == SH_OK) return true;
    char b[160];
    if (cuda_cudnn_prepare(cu->dnn->c, &x->s) != 0) {
        RT_CHECK(cu->attn_mode != CUDA_ATTN_CUDNN, "attention: BASP_ATTENTION=cudnn, but cuDNN cannot run %s: %s",
                 cuda_dnn_shape_str(&x->s, b, sizeof b), cuda_cudnn_error(cu->dnn->c));
        cuda_dnn_refuse(rt, x, cuda_cudnn_error(cu->dnn->c));
        return false;
    }
    x->state = SH_OK;
    return true;
}

/* ---- the statistics table ------------------------------------------------------------- */
static cuda_dnn_stats *cuda_dnn_stats_find(struct cuda_dnn *d, const void *o) {
    for (int i = 0; i < d->nst; i++)
        if (d->st[i].o == o) return &d->st[i];
    return NULL;
}

void cuda_dnn_forget(rt_ctx *rt, const void *o) {
    struct cuda_dnn *d = cuda_state(rt)->dnn;
    cuda_dnn_stats *e = d ? cuda_dnn_stats_find(d, o) : NULL;
    if (e) e->valid = false;
}

/* o's contents were copied to `to` (rt_offload, rt_fetch): its statistics
 * go with them; `to`'s own entry, if any, describes overwritten contents
 * and takes o's key, invalid (so keys stay one entry each). */
void cuda_dnn_moved(rt_ctx *rt, const void *o, const void *to) {
    struct cuda_dnn *d = cuda_state(rt)->dnn;
    if (!d || o == to) return;
    cuda_dnn_stats *e = cuda_dnn_stats_find(d, o), *t = cuda_dnn_stats_find(d, to);
    if (t) t->valid = false;
    if (!e || !e->valid) return;
    if (t) t->o = o;
    e->o = to;
}

/* o's entry, with room for shape s's statistics and marked invalid until
 * the forward succeeds; NULL when the device memory cannot be had (fatal
 * with BASP_ATTENTION=cudnn). */
static cuda_dnn_stats *cuda_dnn_stats_slot(rt_ctx *rt, const void *o, const cuda_cudnn_shape *s) {
    rt_cuda_state *cu = cuda_state(rt);
    struct cuda_dnn *d = cu->dnn;
    size_t need = sizeof(float) * (size_t)(s->b * s->H * s->S);
    cuda_dnn_stats *e = cuda_dnn_stats_find(d, o);
    /* No entry for o: an invalid one (no backward reads it), the one with
     * room for s first, else a new one. */
    for (int i = 0; !e && i < 2; i++)
        for (int j = 0; j < d->nst && !e; j++)
            if (!d->st[j].valid && (i == 1 || d->st[j].bytes >= need)) e = &d->st[j];
    if (!e) {
        if (d->nst == d->capst) d->st = cuda_dnn_grow(d->st, &d->capst, sizeof *d->st);
        e = &d->st[d->nst++];
    }
    e->o = o;
    e->valid = false;
    e->s = *s;
    if (e->bytes >= need) return e;
    cuda_graph_invalidate(rt, "the buffer of cuDNN's softmax statistics");
    /* No kernel queued before may still read the old buffer. */
    CU_CHECK(cudaDeviceSynchronize());
    CU_CHECK(cudaFree(e->dev));
    d->st_bytes -= e->bytes;
    e->dev = NULL, e->bytes = 0;
    cudaError_t ce = cudaMalloc((void **)&e->dev, need);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the next CUDA call */
        e->dev = NULL;
        RT_CHECK(cu->attn_mode != CUDA_ATTN_CUDNN,
                 "attention: BASP_ATTENTION=cudnn, but %.1f MiB for the softmax statistics cannot be allocated: %s",
                 (double)need / (1 << 20), cudaGetErrorString(ce));
        return NULL;
    }
    e->bytes = need;
    d->st_bytes += need;
    return e;
}

/* ---- the one-time check against the basp kernels --------------------------------------- */

static bool cuda_dnn_check_fwd(rt_ctx *rt, cuda_dnn_shape_state *x, const kcu_bf16 *o, const kcu_bf16 *q,
                               const kcu_bf16 *k, const kcu_bf16 *v) {
    const cuda_cudnn_shape *s = &x->s;
    int64_t nq = s->b * s->S * s->H * s->Dh;
    kcu_bf16 *ref = cuda_try_malloc(sizeof(kcu_bf16) * (size_t)nq);
    if (!ref) {
        cuda_dnn_refuse(rt, x, "no device memory for its one-time check against the basp kernels");
        return false;
    }
    double rel = 0;
    CU_CHECK(kcu_attention_fwd(ref, q, k, v, s->b, s->S, s->H, s->Hkv, s->Dh, cuda_state(rt)->cs));
    bool ok = cuda_close_bf16(rt, o, ref, nq, &rel);
    CU_CHECK(cudaFree(ref));
    if (!ok) {
        char why[160];
        snprintf(why, sizeof why, "its forward differs from the basp kernels' (max error %.3g of max |o|, over 5e-2)",
                 rel);
        cuda_dnn_refuse(rt, x, why);
    }
    return ok;
}

static bool cuda_dnn_check_bwd(rt_ctx *rt, cuda_dnn_shape_state *x, const kcu_bf16 *const got[3], const kcu_bf16 *dout,
                               const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o) {
    const cuda_cudnn_shape *s = &x->s;
    int64_t nq = s->b * s->S * s->H * s->Dh, nkv = s->b * s->S * s->Hkv * s->Dh, n[3] = {nq, nkv, nkv};
    kcu_bf16 *ref[3] = {NULL, NULL, NULL};
    bool have = true;
    for (int i = 0; i < 3; i++) have = have && (ref[i] = cuda_try_malloc(sizeof(kcu_bf16) * (size_t)n[i])) != NULL;
    bool ok = have;
    double rel = 0;
    int bad = -1;
    if (have) {
        float *ws = cuda_ws(rt, CM_WS_CUDA_ATTN, (size_t)kcu_attention_bwd_ws(s->b, s->S, s->H) * sizeof(float));
        CU_CHECK(kcu_attention_bwd(ref[0], ref[1], ref[2], dout, q, k, v, o, s->b, s->S, s->H, s->Hkv, s->Dh, ws,
                                   cuda_state(rt)->cs));
        for (int i = 0; i < 3 && ok; i++)
            if (!cuda_close_bf16(rt, got[i], ref[i], n[i], &rel)) ok = false, bad = i;
    }
    for (int i = 0; i < 3; i++)
        if (ref[i]) CU_CHECK(cudaFree(ref[i]));
    if (!have) {
        cuda_dnn_refuse(rt, x, "no device memory for its one-time check against the basp kernels");
    } else if (!ok) {
        const char *name[3] = {"dq", "dk", "dv"};
        char why[160];
        snprintf(why, sizeof why,
                 "its backward differs from the basp kernels' (%s: max error %.3g of max |%s|, "
                 "over 5e-2)",
                 name[bad], rel, name[bad]);
        cuda_dnn_refuse(rt, x, why);
    }
    return ok;
}

/* ---- the calls ------------------------------------------------------------------------- */
/* The shape's cuDNN workspace (CM_WS_CUDA_CUDNN). */
static void *cuda_dnn_ws(rt_ctx *rt, const cuda_cudnn_shape *s) {
    size_t wsb = cuda_cudnn_ws_bytes(cuda_state(rt)->dnn->c, s);
    return cuda_ws(rt, CM_WS_CUDA_CUDNN, wsb ? wsb : 1);
}

/* A failed execution (dir: "forward" or "backward"): fatal under
 * BASP_ATTENTION=cudnn, else the shape goes back to the basp kernels.
 * Returns false: the caller runs them. */
static bool cuda_dnn_exec_failed(rt_ctx *rt, cuda_dnn_shape_state *x, const char *dir) {
    cuda_cudnn *c = cuda_state(rt)->dnn->c;
    char sb[160];
    RT_CHECK(cuda_state(rt)->attn_mode != CUDA_ATTN_CUDNN,
             "attention: BASP_ATTENTION=cudnn, but the cuDNN %s of %s failed: %s", dir,
             cuda_dnn_shape_str(&x->s, sb, sizeof sb), cuda_cudnn_error(c));
    cuda_dnn_refuse(rt, x, cuda_cudnn_error(c));
    return false;
}

/* The state of shape s when cuDNN may run it, else NULL. */
static cuda_dnn_shape_state *cuda_dnn_usable_shape(rt_ctx *rt, const cuda_cudnn_shape *s) {
    struct cuda_dnn *d = cuda_state(rt)->dnn;
    cuda_dnn_shape_state *x = d ? cuda_dnn_shape(d, *s) : NULL;
    return x && cuda_dnn_usable(rt, x) ? x : NULL;
}

/* cuDNN's forward with its statistics at stats, checked against the basp
 * kernels once per shape (BASP_ATTENTION=auto). */
static bool cuda_dnn_run_fwd(rt_ctx *rt, cuda_dnn_shape_state *x, const cuda_cudnn_shape *s, kcu_bf16 *o, float *stats,
                             const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v) {
    struct cuda_dnn *d = cuda_state(rt)->dnn;
    if (cuda_cudnn_fwd(d->c, s, o, stats, q, k, v, cuda_dnn_ws(rt, s)) != 0)
        return cuda_dnn_exec_failed(rt, x, "forward");
    if (cuda_state(rt)->attn_mode == CUDA_ATTN_AUTO && !x->fwd_checked) {
        x->fwd_checked = true;
        if (!cuda_dnn_check_fwd(rt, x, o, q, k, v)) return false;
    }
    return true;
}

/* cuDNN's backward from the statistics at stats, checked once per shape. */
static bool cuda_dnn_run_bwd(rt_ctx *rt, cuda_dnn_shape_state *x, const cuda_cudnn_shape *s, kcu_bf16 *dq, kcu_bf16 *dk,
                             kcu_bf16 *dv, const kcu_bf16 *dout, const kcu_bf16 *q, const kcu_bf16 *k,
                             const kcu_bf16 *v, const kcu_bf16 *o, const float *stats) {
    struct cuda_dnn *d = cuda_state(rt)->dnn;
    if (cuda_cudnn_bwd(d->c, s, dq, dk, dv, dout, q, k, v, o, stats, cuda_dnn_ws(rt, s)) != 0)
        return cuda_dnn_exec_failed(rt, x, "backward");
    if (cuda_state(rt)->attn_mode == CUDA_ATTN_AUTO && !x->bwd_checked) {
        x->bwd_checked = true;
        const kcu_bf16 *got[3] = {dq, dk, dv};
        if (!cuda_dnn_check_bwd(rt, x, got, dout, q, k, v, o)) return false;
    }
    return true;
}

bool cuda_dnn_fwd(rt_ctx *rt, kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, int64_t b,
                  int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    cuda_cudnn_shape s = {b, S, H, Hkv, Dh, 0, 0};
    cuda_dnn_shape_state *x = cuda_dnn_usable_shape(rt, &s);
    cuda_dnn_stats *e = x ? cuda_dnn_stats_slot(rt, o, &s) : NULL;
    if (!e || !cuda_dnn_run_fwd(rt, x, &s, o, e->dev, q, k, v)) return false;
    e->valid = true;
    return true;
}

bool cuda_dnn_bwd(rt_ctx *rt, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                  const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, int64_t b, int64_t S, int64_t H, int64_t Hkv,
                  int64_t Dh) {
    cuda_cudnn_shape s = {b, S, H, Hkv, Dh, 0, 0};
    cuda_dnn_shape_state *x = cuda_dnn_usable_shape(rt, &s);
    if (!x) return false;
    struct cuda_dnn *d = cuda_state(rt)->dnn;
    cuda_dnn_stats *e = cuda_dnn_stats_find(d, o);
    if (!e || !e->valid || memcmp(&e->s, &s, sizeof s) != 0) {
        /* Its forward did not run through cuDNN (no memory for the
         * statistics): the basp backward recomputes what it needs. */
        if (rt->rank == 0 && !d->warned_nostats)
            fprintf(stderr, "warning: attention: a backward found no cuDNN softmax statistics for its forward's "
                            "output; the basp kernels run such backwards\n");
        d->warned_nostats = true;
        return false;
    }
    /* Consumed: the next forward may take the entry (stream order keeps
     * this backward's read before that forward's write); a failure refuses
     * the shape, so no backward reads the entry again either way. */
    e->valid = false;
    return cuda_dnn_run_bwd(rt, x, &s, dq, dk, dv, dout, q, k, v, o, e->dev);
}

bool cuda_dnn_fwd_lse(rt_ctx *rt, kcu_bf16 *o, float *lse, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                      int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    cuda_cudnn_shape s = {b, S, H, Hkv, Dh, 0, 0};
    cuda_dnn_shape_state *x = cuda_dnn_usable_shape(rt, &s);
    return x && cuda_dnn_run_fwd(rt, x, &s, o, lse, q, k, v);
}

/* A shape whose forward cuDNN refused or failed its check is refused here
 * too (cuda_dnn_usable), so lse is read only where a cuDNN forward wrote it. */
bool cuda_dnn_bwd_lse(rt_ctx *rt, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                      const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, const float *lse, int64_t b, int64_t S,
                      int64_t H, int64_t Hkv, int64_t Dh) {
    cuda_cudnn_shape s = {b, S, H, Hkv, Dh, 0, 0};
    cuda_dnn_shape_state *x = cuda_dnn_usable_shape(rt, &s);
    return x && cuda_dnn_run_bwd(rt, x, &s, dq, dk, dv, dout, q, k, v, o, lse);
}

/* ---- the split attentions' sub-blocks (rt_ring_split.c, rt_doc_split.c) ----------------- */
static cuda_cudnn_shape cuda_dnn_sub_shape(const cuda_sub *sb) {
    return (cuda_cudnn_shape){sb->b, sb->L, sb->H, sb->Hkv, sb->Dh, sb->ld, sb->full};
}

/* The sub-block's graphs, built and planned once (cuDNN's verdict is
 * cached per shape in the handle's plans); the numbers are checked by the
 * splits' own one-time checks. */
static bool cuda_dnn_sub_prepare(rt_ctx *rt, const cuda_sub *sb, char *why, size_t nwhy) {
    struct cuda_dnn *d = cuda_state(rt)->dnn;
    cuda_cudnn_shape s = cuda_dnn_sub_shape(sb);
    if (!d) {
        snprintf(why, nwhy, "cuDNN is not set up");
        return false;
    }
    if (cuda_cudnn_prepare(d->c, &s) != 0) {
        snprintf(why, nwhy, "cuDNN cannot run its %s sub-blocks of %lld rows: %s", sb->full ? "full" : "causal",
                 (long long)sb->L, cuda_cudnn_error(d->c));
        return false;
    }
    return true;
}

/* The sub-block's plan (prepared by the split before: a lookup) and its
 * workspace, sized by that plan. */
static void *cuda_dnn_sub_ws(rt_ctx *rt, const cuda_sub *sb, const cuda_cudnn_shape *s) {
    cuda_cudnn *c = cuda_state(rt)->dnn->c;
    RT_CHECK(cuda_cudnn_prepare(c, s) == 0, "attention: cuDNN has no plan for a %s sub-block of %lld x %lld rows: %s",
             sb->full ? "full" : "causal", (long long)sb->b, (long long)sb->L, cuda_cudnn_error(c));
    return cuda_dnn_ws(rt, s);
}

static void cuda_dnn_sub_fwd(rt_ctx *rt, const cuda_sub *sb, kcu_bf16 *o, float *st, const kcu_bf16 *q,
                             const kcu_bf16 *k, const kcu_bf16 *v) {
    cuda_cudnn *c = cuda_state(rt)->dnn->c;
    cuda_cudnn_shape s = cuda_dnn_sub_shape(sb);
    void *ws = cuda_dnn_sub_ws(rt, sb, &s);
    RT_CHECK(cuda_cudnn_fwd(c, &s, o, st, q, k, v, ws) == 0,
             "attention: cuDNN's forward of a %s sub-block of %lld x %lld rows failed: %s (BASP_ATTENTION=own runs "
             "the basp kernels)",
             sb->full ? "full" : "causal", (long long)sb->b, (long long)sb->L, cuda_cudnn_error(c));
}

static void cuda_dnn_sub_bwd(rt_ctx *rt, const cuda_sub *sb, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv,
                             const kcu_bf16 *dout, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                             const kcu_bf16 *o, const float *st) {
    cuda_cudnn *c = cuda_state(rt)->dnn->c;
    cuda_cudnn_shape s = cuda_dnn_sub_shape(sb);
    void *ws = cuda_dnn_sub_ws(rt, sb, &s);
    RT_CHECK(cuda_cudnn_bwd(c, &s, dq, dk, dv, dout, q, k, v, o, st, ws) == 0,
             "attention: cuDNN's backward of a %s sub-block of %lld x %lld rows failed: %s (BASP_ATTENTION=own runs "
             "the basp kernels)",
             sb->full ? "full" : "causal", (long long)sb->b, (long long)sb->L, cuda_cudnn_error(c));
}

const cuda_sub_ops cuda_dnn_sub_ops = {cuda_dnn_sub_prepare, cuda_dnn_sub_fwd, cuda_dnn_sub_bwd};
