/* rt_kernels_cuda.c — the rt_ kernel calls of basp_rt.h on the CUDA
 * backend: each launches its kcu_ kernel (kcu.h) on the compute stream.
 * The pointers come from rt_f32/rt_i32 and are device pointers to bf16
 * (int32) data whatever the C type says; only the loss scalar is fp32.
 *
 * Launches are asynchronous, so a kernel's wall time is its launch time
 * unless --profile asked for per-op times (then each op waits for the
 * device, which slows the step). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../data/rt_data.h"
#include "rt_cuda.h"

#define RT_TIMED(kind, call)                                                                                           \
    do {                                                                                                               \
        double t0_ = rt_now();                                                                                         \
        CU_CHECK(call);                                                                                                \
        if (cuda_state(rt)->sync_timing) CU_CHECK(cudaStreamSynchronize(cuda_state(rt)->cs));                          \
        rt_kern_count(rt, kind, t0_);                                                                                  \
    } while (0)

#define CS      (cuda_state(rt)->cs)
#define B16(p)  ((kcu_bf16 *)(void *)(p))
#define CB16(p) ((const kcu_bf16 *)(const void *)(p))

void rt_embedding(rt_ctx *rt, float *out, const int32_t *tok, const float *w, int64_t N, int64_t V, int64_t D) {
    RT_TIMED(CM_K_EMBEDDING, kcu_embedding_fwd(B16(out), tok, CB16(w), N, V, D, cuda_state(rt)->d_err, CS));
}

void rt_embedding_bwd(rt_ctx *rt, float *dw, const float *dout, const int32_t *tok, int64_t N, int64_t V, int64_t D) {
    float *ws = cuda_ws(rt, CM_WS_CUDA_F32, (size_t)(V * D) * sizeof(float));
    RT_TIMED(CM_K_EMBEDDING_BWD, kcu_embedding_bwd(B16(dw), CB16(dout), tok, N, V, D, ws, cuda_state(rt)->d_err, CS));
}

void rt_rmsnorm(rt_ctx *rt, float *y, const float *x, const float *w, int64_t N, int64_t D, double eps) {
    RT_TIMED(CM_K_RMSNORM, kcu_rmsnorm_fwd(B16(y), CB16(x), CB16(w), N, D, eps, CS));
}

void rt_rmsnorm_bwd(rt_ctx *rt, float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N,
                    int64_t D, double eps) {
    float *ws = cuda_ws(rt, CM_WS_CUDA_F32, (size_t)D * sizeof(float));
    RT_TIMED(CM_K_RMSNORM_BWD, kcu_rmsnorm_bwd(B16(dx), B16(dw), CB16(dy), CB16(x), CB16(w), N, D, eps, ws, CS));
}

void rt_add_rmsnorm(rt_ctx *rt, float *s, float *y, const float *a, const float *b, const float *w, int64_t N,
                    int64_t D, double eps) {
    RT_TIMED(CM_K_ADD_RMSNORM, kcu_add_rmsnorm_fwd(B16(s), B16(y), CB16(a), CB16(b), CB16(w), N, D, eps, CS));
}

void rt_add_rmsnorm_bwd(rt_ctx *rt, float *ds, float *dw, const float *dy, const float *s, const float *w,
                        const float *dr, int64_t N, int64_t D, double eps) {
    float *ws = cuda_ws(rt, CM_WS_CUDA_F32, (size_t)D * sizeof(float));
    RT_TIMED(CM_K_ADD_RMSNORM_BWD,
             kcu_add_rmsnorm_bwd(B16(ds), B16(dw), CB16(dy), CB16(s), CB16(w), CB16(dr), N, D, eps, ws, CS));
}

void rt_linear(rt_ctx *rt, float *y, const float *x, const float *w, int64_t N, int64_t I, int64_t O) {
    RT_TIMED(CM_K_LINEAR, kcu_linear_fwd(cuda_state(rt)->blas, B16(y), CB16(x), CB16(w), N, I, O));
}

void rt_linear_bwd(rt_ctx *rt, float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N,
                   int64_t I, int64_t O) {
    RT_TIMED(CM_K_LINEAR_BWD,
             kcu_linear_bwd(cuda_state(rt)->blas, B16(dx), B16(dw), CB16(dy), CB16(x), CB16(w), N, I, O));
}

/* ---- rope: the CPU kernel's own table (kern_rope_table), uploaded ------------------- */
static bool cuda_rope_key(const rt_cuda_state *cu, int64_t S, int64_t Dh, int64_t pos0, double theta,
                          const kern_rope_scaling *sc) {
    if (!cu->rope_valid || cu->rope_S != S || cu->rope_Dh != Dh || cu->rope_pos0 != pos0 || cu->rope_theta != theta ||
        cu->rope_scaled != (sc != NULL))
        return false;
    return !sc || memcmp(&cu->rope_sc, sc, sizeof *sc) == 0;
}

/* cs, sn [S, Dh/2] on the device, recomputed only when the key changes
 * (q and k, forward and backward of every layer share one). */
const float *cuda_rope_table(rt_ctx *rt, int64_t S, int64_t Dh, int64_t pos0, double theta) {
    rt_cuda_state *cu = cuda_state(rt);
    const rt_program *p = rt->p;
    kern_rope_scaling sc = {p->rope_factor, p->rope_low_freq_factor, p->rope_high_freq_factor,
                            p->rope_original_max_pos};
    const kern_rope_scaling *scp = p->rope_scaling == RT_ROPE_LLAMA3 ? &sc : NULL;
    size_t n = (size_t)(S * (Dh / 2));
    if (cuda_rope_key(cu, S, Dh, pos0, theta, scp)) return cu->ws[CM_WS_CUDA_ROPE];
    cuda_graph_invalidate(rt, "the RoPE table");
    float *host = RT_MALLOC(2 * n * sizeof(float) + 1);
    kern_rope_table(host, host + n, S, Dh, pos0, theta, scp);
    cuda_ws_write_cs(rt, CM_WS_CUDA_ROPE);   /* an exchange with RoPE fused in may read it on ms */
    CU_CHECK(cudaStreamSynchronize(cu->cs)); /* the old table may still be in use */
    float *dev = cuda_ws(rt, CM_WS_CUDA_ROPE, 2 * n * sizeof(float) + 1);
    /* On cs, and waited for: a legacy-stream cudaMemcpy from pageable memory
     * may still be in flight when the rope kernel on cs reads the table. */
    CU_CHECK(cudaMemcpyAsync(dev, host, 2 * n * sizeof(float), cudaMemcpyHostToDevice, cu->cs));
    CU_CHECK(cudaStreamSynchronize(cu->cs));
    free(host);
    cu->rope_S = S, cu->rope_Dh = Dh, cu->rope_pos0 = pos0, cu->rope_theta = theta;
    cu->rope_scaled = scp != NULL;
    memset(&cu->rope_sc, 0, sizeof cu->rope_sc);
    if (scp) cu->rope_sc = sc;
    cu->rope_valid = true;
    return dev;
}

const int64_t *cuda_seq_pos(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    int64_t S = rt->p->seq_len;
    size_t bytes = sizeof(int64_t) * (size_t)(S > 0 ? S : 1);
    /* Keyed by the row and the ring: batch_aware dynamic's variants differ in both. */
    if (cu->pos_S == S && cu->pos_ring == rt->p->seq_ring) return cu->ws[CM_WS_CUDA_POS];
    cuda_graph_invalidate(rt, "the table of sequence positions");
    int64_t *host = RT_MALLOC(bytes);
    rt_seq_positions(rt, 0, S, host);
    cuda_ws_write_cs(rt, CM_WS_CUDA_POS);    /* an exchange with RoPE fused in may read it on ms */
    CU_CHECK(cudaStreamSynchronize(cu->cs)); /* the old table may still be in use */
    int64_t *dev = cuda_ws(rt, CM_WS_CUDA_POS, bytes);
    CU_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, cu->cs));
    CU_CHECK(cudaStreamSynchronize(cu->cs));
    free(host);
    cu->pos_S = S, cu->pos_ring = rt->p->seq_ring;
    return dev;
}

/* In the ring's zig-zag order a slice's positions are not consecutive:
 * one table of positions 0 .. seq_len-1 and the slice's entries of the
 * position table (kcu_rope_pos). */
static void cuda_rope(rt_ctx *rt, cm_kernel_kind kind, float *y, const float *x, int64_t b, int64_t s, int64_t H,
                      int64_t Dh, int64_t pos0, double theta, float sign) {
    if (rt->p->seq_ring <= 1) {
        const float *t = cuda_rope_table(rt, s, Dh, pos0, theta);
        RT_TIMED(kind, kcu_rope(B16(y), CB16(x), t, t + s * (Dh / 2), b, s, H, Dh, sign, CS));
        return;
    }
    int64_t P = rt->p->seq_len;
    const int64_t *pos = cuda_seq_pos(rt) + pos0;
    const float *t = cuda_rope_table(rt, P, Dh, 0, theta);
    RT_TIMED(kind, kcu_rope_pos(B16(y), CB16(x), t, t + P * (Dh / 2), P, pos, b, s, H, Dh, sign, CS));
}

/* Packed documents: every token's position within its document (rows
 * row0.., sequence indices pos0..pos0+s-1, rt_doc_slice) is uploaded, and
 * each row is rotated with its own positions against the table of 0 ..
 * seq_len-1 (a document is at most seq_len long). */
static cudaError_t cuda_rope_docs(rt_ctx *rt, kcu_bf16 *y, const kcu_bf16 *x, int64_t row0, int64_t b, int64_t s,
                                  int64_t H, int64_t Dh, int64_t pos0, double theta, float sign) {
    int64_t P = rt->p->seq_len, n = s * H * Dh;
    const float *t = cuda_rope_table(rt, P, Dh, 0, theta);
    int64_t *host = RT_MALLOC(sizeof(int64_t) * (size_t)(b * s > 0 ? b * s : 1));
    rt_doc_slice(rt, row0, b, pos0, s, NULL, host);
    const int64_t *pos = cuda_upload(rt, CM_WS_CUDA_DOC, host, sizeof(int64_t) * (size_t)(b * s));
    free(host);
    cudaError_t e = cudaSuccess;
    for (int64_t bi = 0; bi < b && e == cudaSuccess; bi++)
        e = kcu_rope_pos(y + bi * n, x + bi * n, t, t + P * (Dh / 2), P, pos + bi * s, 1, s, H, Dh, sign, CS);
    return e;
}

void rt_rope(rt_ctx *rt, float *y, const float *x, int64_t row0, int64_t b, int64_t s, int64_t H, int64_t Dh,
             int64_t pos0, double theta) {
    if (rt->docs)
        RT_TIMED(CM_K_ROPE, cuda_rope_docs(rt, B16(y), CB16(x), row0, b, s, H, Dh, pos0, theta, 1.0f));
    else
        cuda_rope(rt, CM_K_ROPE, y, x, b, s, H, Dh, pos0, theta, 1.0f);
}

void rt_rope_bwd(rt_ctx *rt, float *dx, const float *dy, int64_t row0, int64_t b, int64_t s, int64_t H, int64_t Dh,
                 int64_t pos0, double theta) {
    if (rt->docs)
        RT_TIMED(CM_K_ROPE_BWD, cuda_rope_docs(rt, B16(dx), CB16(dy), row0, b, s, H, Dh, pos0, theta, -1.0f));
    else
        cuda_rope(rt, CM_K_ROPE_BWD, dx, dy, b, s, H, Dh, pos0, theta, -1.0f);
}

/* ---- attention -------------------------------------------------------------------- */
static void cuda_check_attn(int64_t H, int64_t Hkv, int64_t Dh) {
    RT_CHECK(Dh == 8 || Dh == 16 || Dh == 32 || Dh == 64 || Dh == 128,
             "attention: head_dim %lld is not supported by the CUDA kernels (8, 16, 32, 64 or 128)", (long long)Dh);
    RT_CHECK(Hkv > 0 && H % Hkv == 0, "attention: %lld q heads do not group over %lld kv heads", (long long)H,
             (long long)Hkv);
}

/* ---- attention within packed documents ----------------------------------------------
 * As the CPU's kern_docattn: the ring block kernels over the whole row,
 * positions 0..S-1 on both sides and the rows' document ids as the second
 * mask condition, so the masking and tile skipping exist once (kcu_ring.cu).
 * The running state and the gradient accumulators are fp32 in CM_WS_CUDA_ATTN,
 * converted to bf16 at the end. */
typedef struct {
    const int64_t *pos; /* 0 .. S-1 */
    const int32_t *doc; /* [b,S] */
} cuda_rowdocs;

/* Uploaded on cs, so they are in place before the kernels queued after. */
static cuda_rowdocs cuda_attn_docs(rt_ctx *rt, int64_t row0, int64_t b, int64_t S) {
    size_t pb = sizeof(int64_t) * (size_t)S, bytes = pb + sizeof(int32_t) * (size_t)(b * S);
    char *host = RT_MALLOC(bytes);
    int64_t *pos = (int64_t *)(void *)host;
    for (int64_t i = 0; i < S; i++) pos[i] = i;
    rt_doc_slice(rt, row0, b, 0, S, (int32_t *)(void *)(host + pb), NULL);
    char *dev = cuda_upload(rt, CM_WS_CUDA_DOC, host, bytes);
    free(host);
    return (cuda_rowdocs){(const int64_t *)(void *)dev, (const int32_t *)(void *)(dev + pb)};
}

cudaError_t cuda_docattn_fwd(rt_ctx *rt, kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                             int64_t row0, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    int64_t nq = b * S * H * Dh, nr = b * S * H;
    cuda_rowdocs d = cuda_attn_docs(rt, row0, b, S);
    float *o32 = cuda_ws(rt, CM_WS_CUDA_ATTN, (size_t)(nq + nr) * sizeof(float)), *lse = o32 + nq;
    CU_CHECK(cudaMemsetAsync(o32, 0, (size_t)nq * sizeof(float), CS));
    CU_CHECK(kcu_fill_f32(lse, -INFINITY, nr, CS));
    CU_CHECK(kcu_ring_block_fwd_doc(o32, lse, q, k, v, b, S, S, H, Hkv, Dh, d.pos, d.pos, d.doc, d.doc, CS));
    return kcu_f32_to_bf16(o, o32, nq, CS);
}

/* The statistics pass (lse only) as kern_docattn_bwd: nothing is kept
 * from the forward. */
cudaError_t cuda_docattn_bwd(rt_ctx *rt, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout,
                             const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, int64_t row0,
                             int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    int64_t nq = b * S * H * Dh, nkv = b * S * Hkv * Dh, nr = b * S * H;
    cuda_rowdocs d = cuda_attn_docs(rt, row0, b, S);
    float *lse = cuda_ws(rt, CM_WS_CUDA_ATTN, (size_t)(2 * nr + nq + 2 * nkv) * sizeof(float));
    float *D = lse + nr, *dq32 = D + nr, *dk32 = dq32 + nq, *dv32 = dk32 + nkv;
    CU_CHECK(kcu_fill_f32(lse, -INFINITY, nr, CS));
    CU_CHECK(kcu_ring_block_fwd_doc(NULL, lse, q, k, v, b, S, S, H, Hkv, Dh, d.pos, d.pos, d.doc, d.doc, CS));
    CU_CHECK(kcu_ring_rowdot(D, dout, o, b, S, H, Dh, CS));
    CU_CHECK(cudaMemsetAsync(dq32, 0, (size_t)(nq + 2 * nkv) * sizeof(float), CS));
    CU_CHECK(kcu_ring_block_bwd_doc(dq32, dk32, dv32, dout, q, k, v, lse, D, b, S, S, H, Hkv, Dh, d.pos, d.pos, d.doc,
                                    d.doc, CS));
    CU_CHECK(kcu_f32_to_bf16(dq, dq32, nq, CS));
    CU_CHECK(kcu_f32_to_bf16(dk, dk32, nkv, CS));
    return kcu_f32_to_bf16(dv, dv32, nkv, CS);
}

/* ---- which implementation: BASP_ATTENTION ------------------------------------------
 * Resolved on the first attention call (the handle needs the device and
 * the compute stream) and announced once by rank 0. */
static cuda_attn_mode cuda_attn_impl(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    if (cu->attn_mode != CUDA_ATTN_UNSET) return cu->attn_mode;
    const char *s = getenv("BASP_ATTENTION");
    cuda_attn_mode m = !s || !*s || !strcmp(s, "auto") ? CUDA_ATTN_AUTO
                       : !strcmp(s, "cudnn")           ? CUDA_ATTN_CUDNN
                       : !strcmp(s, "own")             ? CUDA_ATTN_OWN
                                                       : CUDA_ATTN_UNSET;
    RT_CHECK(m != CUDA_ATTN_UNSET, "BASP_ATTENTION=%s: expected auto, cudnn or own", s);
    char why[600] = "", line[1024];
#ifdef BASP_HAVE_CUDNN
    if (m != CUDA_ATTN_OWN && !cuda_dnn_init(rt, why, sizeof why)) {
        RT_CHECK(m != CUDA_ATTN_CUDNN, "attention: BASP_ATTENTION=cudnn, but cuDNN cannot be used: %s", why);
        m = CUDA_ATTN_OWN;
    }
    char ver[32];
    cuda_dnn_version(ver, sizeof ver);
    if (rt->docs && m != CUDA_ATTN_OWN)
        snprintf(line, sizeof line,
                 "cuDNN %s fused on packed documents (batches of one padded length, each shape checked once "
                 "against basp's document kernels; ring blocks with documents on basp's kernels; "
                 "BASP_ATTENTION=%s)",
                 ver, m == CUDA_ATTN_AUTO ? "auto" : "cudnn");
    else if (m == CUDA_ATTN_AUTO)
        snprintf(line, sizeof line,
                 "cuDNN %s fused (graph per shape, each checked once against the basp kernels; "
                 "BASP_ATTENTION=auto)",
                 ver);
    else if (m == CUDA_ATTN_CUDNN)
        snprintf(line, sizeof line, "cuDNN %s fused (graph per shape; BASP_ATTENTION=cudnn)", ver);
    else if (why[0])
        snprintf(line, sizeof line, "basp kernels (cuDNN unavailable: %s)", why);
    else
        snprintf(line, sizeof line, "basp kernels (BASP_ATTENTION=own)");
#else
    RT_CHECK(m != CUDA_ATTN_CUDNN, "attention: BASP_ATTENTION=cudnn, but this runtime was built without cuDNN");
    snprintf(line, sizeof line, "basp kernels (%s)",
             rt->docs             ? "packed documents"
             : m == CUDA_ATTN_OWN ? "BASP_ATTENTION=own"
                                  : "built without cuDNN");
#ifdef BASP_CUEMU
    /* The emulator's stand-in for cuDNN on the ring's sub-blocks and on
     * packed documents (tests/gpu/emu/cuemu_sub_ops.c), with the one-time
     * checks of BASP_ATTENTION=auto; plain attention stays on the basp
     * kernels (this build has no cuDNN graphs), though the rule
     * (rt_backend_attention_impl, --trace-run) names cuDNN for it. */
    extern const cuda_sub_ops cuemu_sub_ops, cuemu_sub_ops_flipped;
    const char *sub = getenv("CUEMU_SUB_OPS");
    if (sub && *sub && m != CUDA_ATTN_OWN) {
        cu->sub_ops = !strcmp(sub, "flipped") ? &cuemu_sub_ops_flipped : &cuemu_sub_ops;
        snprintf(line, sizeof line,
                 "basp kernels, and as the stand-in for cuDNN on the ring's sub-blocks and packed documents "
                 "(CUEMU_SUB_OPS=%s)",
                 sub);
    } else {
        m = CUDA_ATTN_OWN;
    }
#else
    m = CUDA_ATTN_OWN;
#endif
#endif
    (void)why;
    if (rt->rank == 0) {
        printf("attention: %s\n", line);
        fflush(stdout);
    }
    cu->attn_mode = m;
    return m;
}

/* cm_attention_impl on this run: cuDNN usable unless BASP_ATTENTION=own,
 * a build without it or its set-up failed (cuda_attn_impl). */
cm_attn_impl rt_backend_attention_impl(rt_ctx *rt, bool ring) {
    return cm_attention_impl(true, ring, rt->docs != NULL, cuda_attn_impl(rt) != CUDA_ATTN_OWN);
}

/* The end of RT_TIMED for calls that did not go through it. */
static void cuda_timed_end(rt_ctx *rt, cm_kernel_kind kind, double t0) {
    if (cuda_state(rt)->sync_timing) CU_CHECK(cudaStreamSynchronize(cuda_state(rt)->cs));
    rt_kern_count(rt, kind, t0);
}

void rt_attention(rt_ctx *rt, float *o, const float *q, const float *k, const float *v, int64_t row0, int64_t b,
                  int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    cuda_check_attn(H, Hkv, Dh);
    cm_attn_impl impl = rt_backend_attention_impl(rt, false);
    if (rt->docs) {
        double t0 = rt_now();
        if (cuda_doc_split_fwd(rt, B16(o), CB16(q), CB16(k), CB16(v), row0, b, S, H, Hkv, Dh))
            cuda_timed_end(rt, CM_K_ATTENTION, t0);
        else
            RT_TIMED(CM_K_ATTENTION, cuda_docattn_fwd(rt, B16(o), CB16(q), CB16(k), CB16(v), row0, b, S, H, Hkv, Dh));
        return;
    }
#ifdef BASP_HAVE_CUDNN
    double t0 = rt_now();
    if (impl == CM_ATTN_CUDNN && cuda_dnn_fwd(rt, B16(o), CB16(q), CB16(k), CB16(v), b, S, H, Hkv, Dh)) {
        cuda_timed_end(rt, CM_K_ATTENTION, t0);
        return;
    }
    cuda_dnn_forget(rt, o); /* o's contents now come from the basp kernel */
#else
    (void)impl;
#endif
    RT_TIMED(CM_K_ATTENTION, kcu_attention_fwd(B16(o), CB16(q), CB16(k), CB16(v), b, S, H, Hkv, Dh, CS));
}

/* The backward on basp's kernels (documents, or no cuDNN for the shape). */
static void cuda_attention_bwd_own(rt_ctx *rt, float *dq, float *dk, float *dv, const float *dout, const float *q,
                                   const float *k, const float *v, const float *o, int64_t row0, int64_t b, int64_t S,
                                   int64_t H, int64_t Hkv, int64_t Dh) {
    if (rt->docs) {
        double t0 = rt_now();
        if (cuda_doc_split_bwd(rt, B16(dq), B16(dk), B16(dv), CB16(dout), CB16(q), CB16(k), CB16(v), CB16(o), row0, b,
                               S, H, Hkv, Dh))
            cuda_timed_end(rt, CM_K_ATTENTION_BWD, t0);
        else
            RT_TIMED(CM_K_ATTENTION_BWD, cuda_docattn_bwd(rt, B16(dq), B16(dk), B16(dv), CB16(dout), CB16(q), CB16(k),
                                                          CB16(v), CB16(o), row0, b, S, H, Hkv, Dh));
        return;
    }
    float *ws = cuda_ws(rt, CM_WS_CUDA_ATTN, (size_t)kcu_attention_bwd_ws(b, S, H) * sizeof(float));
    RT_TIMED(CM_K_ATTENTION_BWD, kcu_attention_bwd(B16(dq), B16(dk), B16(dv), CB16(dout), CB16(q), CB16(k), CB16(v),
                                                   CB16(o), b, S, H, Hkv, Dh, ws, CS));
}

void rt_attention_bwd(rt_ctx *rt, float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *o, int64_t row0, int64_t b, int64_t S, int64_t H, int64_t Hkv,
                      int64_t Dh) {
    cuda_check_attn(H, Hkv, Dh);
    cm_attn_impl impl = rt_backend_attention_impl(rt, false);
#ifdef BASP_HAVE_CUDNN
    double t0 = rt_now();
    if (!rt->docs && impl == CM_ATTN_CUDNN &&
        cuda_dnn_bwd(rt, B16(dq), B16(dk), B16(dv), CB16(dout), CB16(q), CB16(k), CB16(v), CB16(o), b, S, H, Hkv, Dh)) {
        cuda_timed_end(rt, CM_K_ATTENTION_BWD, t0);
        return;
    }
#else
    (void)impl;
#endif
    cuda_attention_bwd_own(rt, dq, dk, dv, dout, q, k, v, o, row0, b, S, H, Hkv, Dh);
}

/* The statistics as the step's lse value: cuDNN writes and reads them
 * there; where cuDNN does not run the shape, the basp kernels recompute
 * them in the backward (lse is then not written). */
void rt_attention_lse(rt_ctx *rt, float *o, float *lse, const float *q, const float *k, const float *v, int64_t row0,
                      int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
#ifdef BASP_HAVE_CUDNN
    if (!rt->docs && rt_backend_attention_impl(rt, false) == CM_ATTN_CUDNN) {
        cuda_check_attn(H, Hkv, Dh);
        double t0 = rt_now();
        if (cuda_dnn_fwd_lse(rt, B16(o), lse, CB16(q), CB16(k), CB16(v), b, S, H, Hkv, Dh)) {
            cuda_timed_end(rt, CM_K_ATTENTION, t0);
            return;
        }
    }
#endif
    (void)lse;
    rt_attention(rt, o, q, k, v, row0, b, S, H, Hkv, Dh);
}

void rt_attention_bwd_lse(rt_ctx *rt, float *dq, float *dk, float *dv, const float *dout, const float *q,
                          const float *k, const float *v, const float *o, const float *lse, int64_t row0, int64_t b,
                          int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
#ifdef BASP_HAVE_CUDNN
    if (!rt->docs && rt_backend_attention_impl(rt, false) == CM_ATTN_CUDNN) {
        cuda_check_attn(H, Hkv, Dh);
        double t0 = rt_now();
        if (cuda_dnn_bwd_lse(rt, B16(dq), B16(dk), B16(dv), CB16(dout), CB16(q), CB16(k), CB16(v), CB16(o), lse, b, S,
                             H, Hkv, Dh)) {
            cuda_timed_end(rt, CM_K_ATTENTION_BWD, t0);
            return;
        }
    }
#endif
    (void)lse;
    cuda_check_attn(H, Hkv, Dh);
    cuda_attention_bwd_own(rt, dq, dk, dv, dout, q, k, v, o, row0, b, S, H, Hkv, Dh);
}

/* ---- head chunks ------------------------------------------------------------------- */
void rt_head_slice(rt_ctx *rt, float *y, const float *x, int64_t rows, int64_t H, int64_t Hc, int64_t Dh, int64_t h0) {
    RT_TIMED(CM_K_HEAD_SLICE, kcu_copy_rows(B16(y), Hc * Dh, CB16(x) + h0 * Dh, H * Dh, rows, Hc * Dh, CS));
}

void rt_head_concat(rt_ctx *rt, float *y, int64_t rows, int64_t Hc, int64_t Dh, int64_t n, ...) {
    va_list ap;
    va_start(ap, n);
    for (int64_t c = 0; c < n; c++) {
        const float *x = va_arg(ap, const float *);
        RT_TIMED(CM_K_HEAD_CONCAT,
                 kcu_copy_rows(B16(y) + c * Hc * Dh, n * Hc * Dh, CB16(x), Hc * Dh, rows, Hc * Dh, CS));
    }
    va_end(ap);
}

/* ---- element-wise ------------------------------------------------------------------ */
void rt_swiglu(rt_ctx *rt, float *y, const float *g, const float *u, int64_t n) {
    RT_TIMED(CM_K_SWIGLU, kcu_swiglu_fwd(B16(y), CB16(g), CB16(u), n, CS));
}

void rt_swiglu_bwd(rt_ctx *rt, float *dg, float *du, const float *dy, const float *g, const float *u, int64_t n) {
    RT_TIMED(CM_K_SWIGLU_BWD, kcu_swiglu_bwd(B16(dg), B16(du), CB16(dy), CB16(g), CB16(u), n, CS));
}

void rt_add(rt_ctx *rt, float *y, const float *a, const float *b, int64_t n) {
    RT_TIMED(CM_K_ADD, kcu_add(B16(y), CB16(a), CB16(b), n, CS));
}

/* ---- lm head --------------------------------------------------------------------- */
/* The LM head's workspaces.  The forward leaves each row's log-sum-exp in
 * CM_WS_CUDA_LSE and records for which x; the backward of that same x (the next
 * LM-head call on it: x is the saved final-norm output, unchanged until its
 * backward) takes them instead of a statistics pass, one logits GEMM fewer.
 * Any other order (a backward without its forward, a second forward
 * between) finds no match and recomputes them, so the cache can only save
 * work, never change a result.  Calls queue on one stream, so the
 * statistics are written before any later kernel reads them. */
static kcu_lmhead_ws cuda_lmhead_ws(rt_ctx *rt, const void *x, int64_t N, int64_t V, int64_t D, bool bwd) {
    rt_cuda_state *cu = cuda_state(rt);
    int64_t n = N > 0 ? N : 1, xc = kcu_lm_head_xchunk(N, V, D);
    kcu_lmhead_ws ws = {
        .chunk = kcu_lm_head_chunk(N, V), .xchunk = xc, .vchunk = kcu_lm_head_vchunk(xc, V), .err = cu->d_err};
    int64_t logits = ws.chunk * V;
    if (bwd && xc * ws.vchunk > logits) logits = xc * ws.vchunk;
    ws.logits = cuda_ws(rt, CM_WS_CUDA_LOGITS, (size_t)logits * sizeof(float));
    ws.lse = cuda_ws(rt, CM_WS_CUDA_LSE, (size_t)n * sizeof(float));
    bool same = cu->lse_valid && cu->lse_x == x && cu->lse_n == N && cu->lse_v == V && cu->lse_d == D;
    if (bwd) {
        ws.dl = cuda_ws(rt, CM_WS_CUDA_DL, (size_t)(xc * ws.vchunk) * sizeof(kcu_bf16));
        /* One block's fp32 dx, then (several blocks) dw's fp32 sum. */
        int64_t f32 = xc * D + (xc < N ? V * D : 0);
        ws.dx32 = cuda_ws(rt, CM_WS_CUDA_F32, (size_t)f32 * sizeof(float));
        ws.dw32 = xc < N ? ws.dx32 + xc * D : NULL;
        ws.lse_valid = same;
        cu->lse_valid = false;
    } else {
        ws.rowloss = cuda_ws(rt, CM_WS_CUDA_ROWS, (size_t)n * sizeof(float));
        cu->lse_x = x, cu->lse_n = N, cu->lse_v = V, cu->lse_d = D, cu->lse_valid = true;
    }
    return ws;
}

void rt_lm_head_loss(rt_ctx *rt, float *loss, const float *x, const float *w, const int32_t *tgt, int64_t N, int64_t V,
                     int64_t D) {
    kcu_lmhead_ws ws = cuda_lmhead_ws(rt, x, N, V, D, false);
    RT_TIMED(CM_K_LM_HEAD_LOSS,
             kcu_lm_head_loss_fwd(cuda_state(rt)->blas, loss, CB16(x), CB16(w), tgt, N, V, D, &ws, CS));
}

void rt_lm_head_loss_bwd(rt_ctx *rt, float *dx, float *dw, const float *x, const float *w, const int32_t *tgt,
                         int64_t N, int64_t V, int64_t D, double scale) {
    kcu_lmhead_ws ws = cuda_lmhead_ws(rt, x, N, V, D, true);
    RT_TIMED(CM_K_LM_HEAD_LOSS_BWD, kcu_lm_head_loss_bwd(cuda_state(rt)->blas, B16(dx), B16(dw), CB16(x), CB16(w), tgt,
                                                         N, V, D, scale, &ws, CS));
}

/* The forward, then the backward on the statistics it leaves (one logits
 * GEMM fewer than a statistics pass).  The backward's workspaces are taken
 * first: they are the larger, and growing a slot after the forward took it
 * would free what the forward was given. */
static cudaError_t cuda_lm_head_grad(rt_ctx *rt, float *loss, float *dx, float *dw, const float *x, const float *w,
                                     const int32_t *tgt, int64_t N, int64_t V, int64_t D, double scale) {
    kcu_lmhead_ws b = cuda_lmhead_ws(rt, x, N, V, D, true), f = cuda_lmhead_ws(rt, x, N, V, D, false);
    b.lse_valid = 1; /* the forward below writes these rows' statistics */
    cuda_state(rt)->lse_valid = false;
    cudaError_t e = kcu_lm_head_loss_fwd(cuda_state(rt)->blas, loss, CB16(x), CB16(w), tgt, N, V, D, &f, CS);
    if (e != cudaSuccess) return e;
    return kcu_lm_head_loss_bwd(cuda_state(rt)->blas, B16(dx), B16(dw), CB16(x), CB16(w), tgt, N, V, D, scale, &b, CS);
}

void rt_lm_head_loss_grad(rt_ctx *rt, float *loss, float *dx, float *dw, const float *x, const float *w,
                          const int32_t *tgt, int64_t N, int64_t V, int64_t D, double scale) {
    RT_TIMED(CM_K_LM_HEAD_LOSS_GRAD, cuda_lm_head_grad(rt, loss, dx, dw, x, w, tgt, N, V, D, scale));
}

void rt_mlp(rt_ctx *rt, float *y, const float *x, const float *wg, const float *wu, const float *wd, int64_t N,
            int64_t D, int64_t F, int64_t chunk) {
    kcu_bf16 *ws = cuda_ws(rt, CM_WS_CUDA_MLP, (size_t)kcu_mlp_ws_elems(N, F, chunk) * sizeof(kcu_bf16));
    RT_TIMED(CM_K_MLP,
             kcu_mlp_fwd(cuda_state(rt)->blas, B16(y), CB16(x), CB16(wg), CB16(wu), CB16(wd), N, D, F, chunk, ws, CS));
}

void rt_mlp_bwd(rt_ctx *rt, float *dx, float *dwg, float *dwu, float *dwd, const float *dy, const float *x,
                const float *wg, const float *wu, const float *wd, int64_t N, int64_t D, int64_t F, int64_t chunk) {
    kcu_bf16 *ws = cuda_ws(rt, CM_WS_CUDA_MLP, (size_t)kcu_mlp_ws_elems(N, F, chunk) * sizeof(kcu_bf16));
    RT_TIMED(CM_K_MLP_BWD, kcu_mlp_bwd(cuda_state(rt)->blas, B16(dx), B16(dwg), B16(dwu), B16(dwd), CB16(dy), CB16(x),
                                       CB16(wg), CB16(wu), CB16(wd), N, D, F, chunk, ws, CS));
}

void rt_bias_add(rt_ctx *rt, float *y, const float *x, const float *b, int64_t N, int64_t M) {
    RT_TIMED(CM_K_BIAS_ADD, kcu_bias_add(B16(y), CB16(x), CB16(b), N, M, CS));
}

void rt_bias_add_bwd(rt_ctx *rt, float *db, const float *dy, int64_t N, int64_t M) {
    RT_TIMED(CM_K_BIAS_ADD_BWD, kcu_bias_add_bwd(B16(db), CB16(dy), N, M, CS));
}
