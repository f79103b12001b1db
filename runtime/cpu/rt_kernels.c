/* rt_kernels.c — the rt_ kernel calls of basp_rt.h: each forwards to its
 * pure kern_ function (host/rt_host.h) and adds its wall time to a per-kind
 * counter, so the end-of-run report splits the step into kernels and
 * collectives. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../data/rt_data.h"
#include "../host/rt_host.h"
#include "rt_cpu.h"

#define RT_TIMED(kind, call)                                                                                           \
    do {                                                                                                               \
        double t0_ = rt_now();                                                                                         \
        call;                                                                                                          \
        rt_kern_count(rt, kind, t0_);                                                                                  \
    } while (0)

void rt_embedding(rt_ctx *rt, float *out, const int32_t *tok, const float *w, int64_t N, int64_t V, int64_t D) {
    RT_TIMED(CM_K_EMBEDDING, kern_embedding_fwd(out, tok, w, N, V, D));
}

void rt_embedding_bwd(rt_ctx *rt, float *dw, const float *dout, const int32_t *tok, int64_t N, int64_t V, int64_t D) {
    RT_TIMED(CM_K_EMBEDDING_BWD, kern_embedding_bwd(dw, dout, tok, N, V, D));
}

void rt_rmsnorm(rt_ctx *rt, float *y, const float *x, const float *w, int64_t N, int64_t D, double eps) {
    RT_TIMED(CM_K_RMSNORM, kern_rmsnorm_fwd(y, x, w, N, D, eps));
}

void rt_add_rmsnorm(rt_ctx *rt, float *s, float *y, const float *a, const float *b, const float *w, int64_t N,
                    int64_t D, double eps) {
    RT_TIMED(CM_K_ADD_RMSNORM, kern_add_rmsnorm_fwd(s, y, a, b, w, N, D, eps));
}

void rt_add_rmsnorm_bwd(rt_ctx *rt, float *ds, float *dw, const float *dy, const float *s, const float *w,
                        const float *dr, int64_t N, int64_t D, double eps) {
    RT_TIMED(CM_K_ADD_RMSNORM_BWD, kern_add_rmsnorm_bwd(ds, dw, dy, s, w, dr, N, D, eps));
}

void rt_rmsnorm_bwd(rt_ctx *rt, float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N,
                    int64_t D, double eps) {
    RT_TIMED(CM_K_RMSNORM_BWD, kern_rmsnorm_bwd(dx, dw, dy, x, w, N, D, eps));
}

void rt_linear(rt_ctx *rt, float *y, const float *x, const float *w, int64_t N, int64_t I, int64_t O) {
    RT_TIMED(CM_K_LINEAR, kern_linear_fwd(y, x, w, N, I, O));
}

void rt_linear_bwd(rt_ctx *rt, float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N,
                   int64_t I, int64_t O) {
    RT_TIMED(CM_K_LINEAR_BWD, kern_linear_bwd(dx, dw, dy, x, w, N, I, O));
}

/* The scaling is a property of the model, not of one call: it comes from the
 * program table, so the generated rope calls are the same with or without
 * it. */
const kern_rope_scaling *cpu_rope_scaling_of(const rt_program *p, kern_rope_scaling *buf) {
    if (p->rope_scaling != RT_ROPE_LLAMA3) return NULL;
    *buf = (kern_rope_scaling){p->rope_factor, p->rope_low_freq_factor, p->rope_high_freq_factor,
                               p->rope_original_max_pos};
    return buf;
}

/* Packed documents: each row has its own positions (within its documents),
 * so the rows are rotated one at a time. */
static void cpu_rope_docs(rt_ctx *rt, bool bwd, float *y, const float *x, int64_t row0, int64_t b, int64_t s, int64_t H,
                          int64_t Dh, int64_t pos0, double theta, const kern_rope_scaling *sc) {
    int64_t *pos = RT_MALLOC(sizeof(int64_t) * (size_t)(s > 0 ? s : 1)), n = s * H * Dh;
    cm_kernel_kind kind = bwd ? CM_K_ROPE_BWD : CM_K_ROPE;
    for (int64_t bi = 0; bi < b; bi++) {
        rt_doc_slice(rt, row0 + bi, 1, pos0, s, NULL, pos);
        if (!bwd)
            RT_TIMED(kind, kern_rope_fwd_pos(y + bi * n, x + bi * n, 1, s, H, Dh, pos, theta, sc));
        else
            RT_TIMED(kind, kern_rope_bwd_pos(y + bi * n, x + bi * n, 1, s, H, Dh, pos, theta, sc));
    }
    free(pos);
}

/* In the natural order a slice's positions run on from pos0; in the ring's
 * zig-zag order they are looked up (rt_seq_positions). */
static void cpu_rope_any(rt_ctx *rt, bool bwd, float *y, const float *x, int64_t row0, int64_t b, int64_t s, int64_t H,
                         int64_t Dh, int64_t pos0, double theta) {
    kern_rope_scaling buf;
    const kern_rope_scaling *sc = cpu_rope_scaling_of(rt->p, &buf);
    cm_kernel_kind kind = bwd ? CM_K_ROPE_BWD : CM_K_ROPE;
    if (rt->docs) {
        cpu_rope_docs(rt, bwd, y, x, row0, b, s, H, Dh, pos0, theta, sc);
        return;
    }
    int64_t *pos = NULL;
    if (rt->p->seq_ring > 1) {
        pos = RT_MALLOC(sizeof(int64_t) * (size_t)(s > 0 ? s : 1));
        rt_seq_positions(rt, pos0, s, pos);
    }
    if (!pos && !bwd)
        RT_TIMED(kind, kern_rope_fwd(y, x, b, s, H, Dh, pos0, theta, sc));
    else if (!pos)
        RT_TIMED(kind, kern_rope_bwd(y, x, b, s, H, Dh, pos0, theta, sc));
    else if (!bwd)
        RT_TIMED(kind, kern_rope_fwd_pos(y, x, b, s, H, Dh, pos, theta, sc));
    else
        RT_TIMED(kind, kern_rope_bwd_pos(y, x, b, s, H, Dh, pos, theta, sc));
    free(pos);
}

void rt_rope(rt_ctx *rt, float *y, const float *x, int64_t row0, int64_t b, int64_t s, int64_t H, int64_t Dh,
             int64_t pos0, double theta) {
    cpu_rope_any(rt, false, y, x, row0, b, s, H, Dh, pos0, theta);
}

void rt_rope_bwd(rt_ctx *rt, float *dx, const float *dy, int64_t row0, int64_t b, int64_t s, int64_t H, int64_t Dh,
                 int64_t pos0, double theta) {
    cpu_rope_any(rt, true, dx, dy, row0, b, s, H, Dh, pos0, theta);
}

/* Packed documents: the rows' document ids [b,S] (the whole sequence, in
 * the natural order: attention runs after the exchange that gathers it). */
static int32_t *cpu_attn_docs(rt_ctx *rt, int64_t row0, int64_t b, int64_t S) {
    int32_t *doc = RT_MALLOC(sizeof(int32_t) * (size_t)(b * S > 0 ? b * S : 1));
    rt_doc_slice(rt, row0, b, 0, S, doc, NULL);
    return doc;
}

/* ---- the forwards' logsumexp, kept for their backwards ----------------------
 * Each forward leaves its rows' logsumexp [b,H,S] under its output's
 * address; the backward of that output finds it there and skips the pass
 * that would recompute it (about a fifth of its time).  An output's bytes
 * hold that output until its backward has read it (the memory plan keeps
 * o live), so the entry of the forward that last wrote o is o's; an
 * offload's copies carry it along (cpu_lse_moved).  The
 * entries live outside the arena; the plan counts one per attention
 * forward op (ir_op_attn.c, CM_WS_CPU_LSE).  Compiled programs pass the
 * statistics as a value instead (rt_attention_lse, pass attention-lse);
 * these entries serve rt_attention, i.e. train.attention_lse off. */
struct cpu_attn_lse {
    const float *o;
    float *lse;
    size_t bytes;
    int64_t shape[4]; /* b, S, H, Dh of the forward that wrote it */
};

static struct cpu_attn_lse *cpu_lse_find(rt_cpu_state *cs, const float *o) {
    for (int i = 0; i < cs->nlse; i++)
        if (cs->lse[i].o == o) return &cs->lse[i];
    return NULL;
}

/* o's entry, with room for its [b,H,S] statistics. */
static float *cpu_lse_slot(rt_cpu_state *cs, const float *o, int64_t b, int64_t S, int64_t H, int64_t Dh) {
    struct cpu_attn_lse *e = cpu_lse_find(cs, o);
    if (!e) {
        if (cs->nlse == cs->cap_lse) {
            cs->cap_lse = cs->cap_lse ? 2 * cs->cap_lse : 8;
            cs->lse = realloc(cs->lse, sizeof *cs->lse * (size_t)cs->cap_lse);
            RT_CHECK(cs->lse, "out of memory");
        }
        e = &cs->lse[cs->nlse++];
        *e = (struct cpu_attn_lse){.o = o};
    }
    size_t need = sizeof(float) * (size_t)(b * H * S);
    if (e->bytes < need) {
        free(e->lse);
        e->lse = RT_MALLOC(need);
        cs->lse_bytes += need - e->bytes;
        e->bytes = need;
    }
    e->shape[0] = b, e->shape[1] = S, e->shape[2] = H, e->shape[3] = Dh;
    return e->lse;
}

/* An offload or a fetch copied o's bytes to `to` (runtime/cpu/rt_buf_cpu.c):
 * the statistics follow the copy, which is what the backward reads, and
 * whatever entry `to` had is dropped, since its contents are gone.  The
 * entry at `to`, if any, takes o's old key, so that the entries stay as
 * many as before (the plan counts one per attention forward op). */
void cpu_lse_moved(rt_ctx *rt, const float *o, const float *to) {
    rt_cpu_state *cs = cpu_state(rt);
    if (o == to) return;
    struct cpu_attn_lse *e = cpu_lse_find(cs, o), *t = cpu_lse_find(cs, to);
    if (t) {
        t->o = o;
        memset(t->shape, 0, sizeof t->shape); /* describes nothing now */
    }
    if (e) e->o = to;
}

/* The statistics of the forward that wrote o with this shape, or NULL. */
static const float *cpu_lse_of(rt_cpu_state *cs, const float *o, int64_t b, int64_t S, int64_t H, int64_t Dh) {
    const struct cpu_attn_lse *e = cpu_lse_find(cs, o);
    if (!e || e->shape[0] != b || e->shape[1] != S || e->shape[2] != H || e->shape[3] != Dh) return NULL;
    return e->lse;
}

void cpu_lse_fini(rt_ctx *rt) {
    rt_cpu_state *cs = cpu_state(rt);
    for (int i = 0; i < cs->nlse; i++) free(cs->lse[i].lse);
    free(cs->lse);
    cs->lse = NULL, cs->nlse = cs->cap_lse = 0, cs->lse_bytes = 0;
}

/* Says once (rank 0) which attention kernels the run uses, as the CUDA
 * backend does; a bad BASP_CPU_ATTENTION stops here, at the first call
 * (dense, packed documents and ring attention alike: one choice). */
void cpu_attention_say(rt_ctx *rt, int64_t Dh) {
    static bool said;
    if (said) return;
    said = true;
    const char *impl = kern_attention_impl_name(Dh);
    if (rt->rank != 0) return;
    kern_attn_impl set = kern_attention_get_impl();
    printf("attention: %s (head_dim %lld%s; BASP_CPU_ATTENTION=%s)\n",
           !strcmp(impl, "fused-avx512") ? "fused AVX-512 kernels"
           : !strcmp(impl, "fused-avx2") ? "fused AVX2 kernels"
                                         : "blocked BLAS kernels",
           (long long)Dh, rt->docs ? ", packed documents" : "",
           set == KERN_ATTN_BLAS    ? "blas"
           : set == KERN_ATTN_FUSED ? "fused"
                                    : "auto");
    fflush(stdout);
}

void rt_attention(rt_ctx *rt, float *o, const float *q, const float *k, const float *v, int64_t row0, int64_t b,
                  int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    cpu_attention_say(rt, Dh);
    if (!rt->docs) {
        float *lse = cpu_lse_slot(cpu_state(rt), o, b, S, H, Dh);
        RT_TIMED(CM_K_ATTENTION, kern_attention_fwd_lse(o, lse, q, k, v, b, S, H, Hkv, Dh));
        return;
    }
    int32_t *doc = cpu_attn_docs(rt, row0, b, S);
    RT_TIMED(CM_K_ATTENTION, kern_docattn_fwd(o, NULL, q, k, v, doc, b, S, H, Hkv, Dh));
    free(doc);
}

void rt_attention_bwd(rt_ctx *rt, float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *o, int64_t row0, int64_t b, int64_t S, int64_t H, int64_t Hkv,
                      int64_t Dh) {
    if (!rt->docs) {
        const float *lse = cpu_state(rt)->lse_off ? NULL : cpu_lse_of(cpu_state(rt), o, b, S, H, Dh);
        RT_TIMED(CM_K_ATTENTION_BWD, kern_attention_bwd_lse(dq, dk, dv, dout, q, k, v, o, lse, b, S, H, Hkv, Dh));
        return;
    }
    int32_t *doc = cpu_attn_docs(rt, row0, b, S);
    RT_TIMED(CM_K_ATTENTION_BWD, kern_docattn_bwd(dq, dk, dv, dout, q, k, v, o, doc, b, S, H, Hkv, Dh));
    free(doc);
}

void rt_attention_lse(rt_ctx *rt, float *o, float *lse, const float *q, const float *k, const float *v, int64_t row0,
                      int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    cpu_attention_say(rt, Dh);
    if (!rt->docs) {
        RT_TIMED(CM_K_ATTENTION, kern_attention_fwd_lse(o, lse, q, k, v, b, S, H, Hkv, Dh));
        return;
    }
    int32_t *doc = cpu_attn_docs(rt, row0, b, S);
    RT_TIMED(CM_K_ATTENTION, kern_docattn_fwd(o, NULL, q, k, v, doc, b, S, H, Hkv, Dh));
    free(doc);
}

/* The document kernels recompute their statistics (kern_docattn_bwd reads
 * none): lse is read only without documents. */
void rt_attention_bwd_lse(rt_ctx *rt, float *dq, float *dk, float *dv, const float *dout, const float *q,
                          const float *k, const float *v, const float *o, const float *lse, int64_t row0, int64_t b,
                          int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    if (!rt->docs) {
        const float *l = cpu_state(rt)->lse_off ? NULL : lse;
        RT_TIMED(CM_K_ATTENTION_BWD, kern_attention_bwd_lse(dq, dk, dv, dout, q, k, v, o, l, b, S, H, Hkv, Dh));
        return;
    }
    int32_t *doc = cpu_attn_docs(rt, row0, b, S);
    RT_TIMED(CM_K_ATTENTION_BWD, kern_docattn_bwd(dq, dk, dv, dout, q, k, v, o, doc, b, S, H, Hkv, Dh));
    free(doc);
}

void rt_head_slice(rt_ctx *rt, float *y, const float *x, int64_t rows, int64_t H, int64_t Hc, int64_t Dh, int64_t h0) {
    double t0 = rt_now();
    size_t row = sizeof(float) * (size_t)(Hc * Dh);
    for (int64_t r = 0; r < rows; r++) memcpy(y + r * Hc * Dh, x + (r * H + h0) * Dh, row);
    rt_kern_count(rt, CM_K_HEAD_SLICE, t0);
}

void rt_head_concat(rt_ctx *rt, float *y, int64_t rows, int64_t Hc, int64_t Dh, int64_t n, ...) {
    double t0 = rt_now();
    va_list ap;
    va_start(ap, n);
    size_t row = sizeof(float) * (size_t)(Hc * Dh);
    for (int64_t c = 0; c < n; c++) {
        const float *x = va_arg(ap, const float *);
        for (int64_t r = 0; r < rows; r++) memcpy(y + (r * n + c) * Hc * Dh, x + r * Hc * Dh, row);
    }
    va_end(ap);
    rt_kern_count(rt, CM_K_HEAD_CONCAT, t0);
}

void rt_swiglu(rt_ctx *rt, float *y, const float *g, const float *u, int64_t n) {
    RT_TIMED(CM_K_SWIGLU, kern_swiglu_fwd(y, g, u, n));
}

void rt_swiglu_bwd(rt_ctx *rt, float *dg, float *du, const float *dy, const float *g, const float *u, int64_t n) {
    RT_TIMED(CM_K_SWIGLU_BWD, kern_swiglu_bwd(dg, du, dy, g, u, n));
}

void rt_mlp(rt_ctx *rt, float *y, const float *x, const float *wg, const float *wu, const float *wd, int64_t N,
            int64_t D, int64_t F, int64_t chunk) {
    RT_TIMED(CM_K_MLP, kern_mlp_fwd(y, x, wg, wu, wd, N, D, F, chunk));
}

void rt_mlp_bwd(rt_ctx *rt, float *dx, float *dwg, float *dwu, float *dwd, const float *dy, const float *x,
                const float *wg, const float *wu, const float *wd, int64_t N, int64_t D, int64_t F, int64_t chunk) {
    RT_TIMED(CM_K_MLP_BWD, kern_mlp_bwd(dx, dwg, dwu, dwd, dy, x, wg, wu, wd, N, D, F, chunk));
}

void rt_bias_add(rt_ctx *rt, float *y, const float *x, const float *b, int64_t N, int64_t M) {
    RT_TIMED(CM_K_BIAS_ADD, kern_bias_add_fwd(y, x, b, N, M));
}

void rt_bias_add_bwd(rt_ctx *rt, float *db, const float *dy, int64_t N, int64_t M) {
    RT_TIMED(CM_K_BIAS_ADD_BWD, kern_bias_add_bwd(db, dy, N, M));
}

void rt_add(rt_ctx *rt, float *y, const float *a, const float *b, int64_t n) {
    RT_TIMED(CM_K_ADD, kern_add(y, a, b, n));
}

void rt_lm_head_loss(rt_ctx *rt, float *loss, const float *x, const float *w, const int32_t *tgt, int64_t N, int64_t V,
                     int64_t D) {
    RT_TIMED(CM_K_LM_HEAD_LOSS, kern_lm_head_loss_fwd(loss, x, w, tgt, N, V, D));
}

void rt_lm_head_loss_bwd(rt_ctx *rt, float *dx, float *dw, const float *x, const float *w, const int32_t *tgt,
                         int64_t N, int64_t V, int64_t D, double scale) {
    RT_TIMED(CM_K_LM_HEAD_LOSS_BWD, kern_lm_head_loss_bwd(dx, dw, x, w, tgt, N, V, D, scale));
}

void rt_lm_head_loss_grad(rt_ctx *rt, float *loss, float *dx, float *dw, const float *x, const float *w,
                          const int32_t *tgt, int64_t N, int64_t V, int64_t D, double scale) {
    RT_TIMED(CM_K_LM_HEAD_LOSS_GRAD, kern_lm_head_loss_grad(loss, dx, dw, x, w, tgt, N, V, D, scale));
}
