/* kcu.h — the CUDA kernels of the CUDA backend: a C interface to the
 * kernels in kcu_*.cu, for the runtime (rt_*_cuda.c), the GPU tests and the
 * benchmarks.
 *
 * Conventions (the same semantics as the fp32 CPU kernels of ../host/rt_host.h,
 * which are the reference):
 *   - pointers are device pointers; floating tensors are bf16 (kcu_bf16, the
 *     raw 16 bits) unless a parameter says float; arithmetic is fp32, sums
 *     over many terms in fp32 or double;
 *   - every function enqueues its work on `st` and returns the launch's
 *     cudaError_t (cudaSuccess, or the first error); callers check it with
 *     file and line (CU_CHECK in rt_cuda.h);
 *   - outputs are overwritten (weight gradients included), except kcu_adamw
 *     (in place) and kcu_sumsq (accumulates);
 *   - shapes: N tokens, D hidden, V vocab, I/O linear in/out features,
 *     b batch, S sequence, H/Hkv q/kv heads, Dh head dim, n elements. */
#ifndef BASP_KCU_H
#define BASP_KCU_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* For standalone programs without a runtime context (the GPU tests and
 * benchmarks): a failed CUDA call prints where and what, and exits 1.  The
 * runtime itself uses CU_CHECK (rt_cuda.h), which ends the MPI job. */
#define KCU_CHECK_EXIT(call)                                                                                           \
    do {                                                                                                               \
        cudaError_t kcu_e_ = (call);                                                                                   \
        if (kcu_e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(kcu_e_));          \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t kcu_bf16;

/* ---- conversions (kcu_basic.cu) --------------------------------------------- */
cudaError_t kcu_f32_to_bf16(kcu_bf16 *y, const float *x, int64_t n, cudaStream_t st);
cudaError_t kcu_bf16_to_f32(float *y, const kcu_bf16 *x, int64_t n, cudaStream_t st);
/* x[i] = v for i < n (fp32; e.g. -INFINITY to start a running lse) */
cudaError_t kcu_fill_f32(float *x, float v, int64_t n, cudaStream_t st);
/* Host-side conversion, round to nearest even (NaN stays NaN). */
kcu_bf16 kcu_host_to_bf16(float x);
float kcu_host_from_bf16(kcu_bf16 x);

/* ---- embedding ---------------------------------------------------------------- */
/* out[N,D] = w[tok[n], :].  A token outside [0, V) gives a zero row and sets
 * *err (device int) to 1. */
cudaError_t kcu_embedding_fwd(kcu_bf16 *out, const int32_t *tok, const kcu_bf16 *w, int64_t N, int64_t V, int64_t D,
                              int *err, cudaStream_t st);
/* dw[V,D] = sum over n with tok[n]=v of dout[n,:], summed in fp32 in ws32
 * [V,D] (atomics: the order of a token's rows is not fixed). */
cudaError_t kcu_embedding_bwd(kcu_bf16 *dw, const kcu_bf16 *dout, const int32_t *tok, int64_t N, int64_t V, int64_t D,
                              float *ws32, int *err, cudaStream_t st);

/* ---- rmsnorm ------------------------------------------------------------------- */
/* y[N,D] = x * rsqrt(mean_d(x^2) + eps) * w[D] */
cudaError_t kcu_rmsnorm_fwd(kcu_bf16 *y, const kcu_bf16 *x, const kcu_bf16 *w, int64_t N, int64_t D, double eps,
                            cudaStream_t st);
/* dx[N,D], dw[D] (summed over rows in fp32 in ws32 [D]) from dy[N,D] */
cudaError_t kcu_rmsnorm_bwd(kcu_bf16 *dx, kcu_bf16 *dw, const kcu_bf16 *dy, const kcu_bf16 *x, const kcu_bf16 *w,
                            int64_t N, int64_t D, double eps, float *ws32, cudaStream_t st);
/* s = a + b, y = rmsnorm(s) * w in one pass per row; and ds = dr + the dx of
 * kcu_rmsnorm_bwd (dw as there): the numbers of kcu_add and kcu_rmsnorm_*
 * one after the other (the norm reads s rounded to bf16; dx is rounded
 * before dr is added). */
cudaError_t kcu_add_rmsnorm_fwd(kcu_bf16 *s, kcu_bf16 *y, const kcu_bf16 *a, const kcu_bf16 *b, const kcu_bf16 *w,
                                int64_t N, int64_t D, double eps, cudaStream_t st);
cudaError_t kcu_add_rmsnorm_bwd(kcu_bf16 *ds, kcu_bf16 *dw, const kcu_bf16 *dy, const kcu_bf16 *s, const kcu_bf16 *w,
                                const kcu_bf16 *dr, int64_t N, int64_t D, double eps, float *ws32, cudaStream_t st);

/* ---- rope ------------------------------------------------------------------------ */
/* y, x [b,S,H,Dh]: pair (i, i+Dh/2) of token s rotated by +angle (sign 1) or
 * -angle (sign -1, the backward) with cs, sn [S, Dh/2] from kern_rope_table.
 * y may alias x. */
cudaError_t kcu_rope(kcu_bf16 *y, const kcu_bf16 *x, const float *cs, const float *sn, int64_t b, int64_t S, int64_t H,
                     int64_t Dh, float sign, cudaStream_t st);

/* ---- element-wise ------------------------------------------------------------------ */
cudaError_t kcu_swiglu_fwd(kcu_bf16 *y, const kcu_bf16 *g, const kcu_bf16 *u, int64_t n, cudaStream_t st);
cudaError_t kcu_swiglu_bwd(kcu_bf16 *dg, kcu_bf16 *du, const kcu_bf16 *dy, const kcu_bf16 *g, const kcu_bf16 *u,
                           int64_t n, cudaStream_t st);
cudaError_t kcu_add(kcu_bf16 *y, const kcu_bf16 *a, const kcu_bf16 *b, int64_t n, cudaStream_t st);
/* rows rows of width elements: y[r*ldy + i] = x[r*ldx + i] (head chunks). */
cudaError_t kcu_copy_rows(kcu_bf16 *y, int64_t ldy, const kcu_bf16 *x, int64_t ldx, int64_t rows, int64_t width,
                          cudaStream_t st);
/* y[N,M] = x + b[M]; db[M] = the sum of dy[N,M] over its rows (fp32 sums) */
cudaError_t kcu_bias_add(kcu_bf16 *y, const kcu_bf16 *x, const kcu_bf16 *b, int64_t N, int64_t M, cudaStream_t st);
cudaError_t kcu_bias_add_bwd(kcu_bf16 *db, const kcu_bf16 *dy, int64_t N, int64_t M, cudaStream_t st);

/* ---- optimizer ---------------------------------------------------------------------- */
/* AdamW as kern_adamw on the fp32 master w32[n] and moments m, v [n], the
 * gradient g[n] (bf16) times the clip factor; writes the rounded weight to
 * p[n].  What changes from step to step is read from device memory, *step
 * (so that a CUDA graph of the step reads each step's): the weight decay
 * factor 1 - lr wd (applied when decay), lr / (1 - beta1^t),
 * 1 / sqrt(1 - beta2^t) and the clip factor, as kcu_adamw_scalars computes
 * them on the host for step t (1-based) and the tensors' weight decay wd. */
typedef struct kcu_adamw_step {
    float decay, step, rbc2, gs;
} kcu_adamw_step;
kcu_adamw_step kcu_adamw_scalars(double lr, double beta1, double beta2, double wd, int64_t t, double gscale);
cudaError_t kcu_adamw(kcu_bf16 *p, float *w32, float *m, float *v, const kcu_bf16 *g, int64_t n, double beta1,
                      double beta2, double eps, const kcu_adamw_step *step, bool decay, cudaStream_t st);
/* *acc += sum of x[i]^2 (double, device) */
cudaError_t kcu_sumsq(const kcu_bf16 *x, int64_t n, double *acc, cudaStream_t st);

/* ---- data movement (collectives, ZeRO slices) ------------------------------------------ */
enum { KCU_MAX_RANK = 6 };
/* Copies a box of box[] elements per dim from src (dims sdims, at soff) to
 * dst (dims ddims, at doff); esize 2 or 4 bytes per element. */
typedef struct kcu_box {
    int nd;
    int64_t box[KCU_MAX_RANK], sdims[KCU_MAX_RANK], soff[KCU_MAX_RANK], ddims[KCU_MAX_RANK], doff[KCU_MAX_RANK];
} kcu_box;
cudaError_t kcu_copy_box(void *dst, const void *src, const kcu_box *bx, int esize, cudaStream_t st);

/* One all_to_all chunk ([O, ca, M, cb, I], rt_comm.c's geometry): pack reads
 * x [O, xa, M, xb, I] at split entries (base + k) / f (fanout f); unpack
 * writes y [O, ya, M, yb, I] at concat entries (base + k) / f, summing when
 * f > 1 (fanin; bf16 only).  a_split: dim a is the split dim. */
typedef struct kcu_a2a {
    /* off: the local start subtracted from (base + k) / f (nested groups) */
    int64_t O, M, I, xa, xb, ya, yb, ca, cb, base, f, off;
    int a_split;
} kcu_a2a;
cudaError_t kcu_a2a_pack(void *dst, const void *x, const kcu_a2a *g, int esize, cudaStream_t st);
cudaError_t kcu_a2a_unpack(void *y, const void *src, const kcu_a2a *g, int esize, cudaStream_t st);
/* The same with RoPE fused in (basp_rt.h rt_all_to_all_rope), bf16 only:
 * every chunk row is one token's head (I = Dh, even) and is rotated while
 * it is copied, as kcu_rope_pos rotates it, bit for bit (sign 1 in a pack
 * of the seq -> heads exchange, -1 in an unpack of heads -> seq).  The
 * rotated side is x for a pack, y for an unpack; its row at outer index o
 * and index a along dim a (the sequence) has position pos[o * pstride + a]
 * (device int64; pstride 0: one row of positions for every o), looked up
 * in cs, sn [P, Dh/2], the table of positions 0..P-1; a position outside
 * [0, P) gives NaN.  The unpack takes f == 1 only (else
 * cudaErrorInvalidValue): under fanin the caller sums with kcu_a2a_unpack
 * and rotates y afterwards with kcu_rope_pos, which may work in place. */
cudaError_t kcu_a2a_pack_rope(void *dst, const void *x, const kcu_a2a *g, const float *cs, const float *sn, int64_t P,
                              const int64_t *pos, int64_t pstride, float sign, cudaStream_t st);
cudaError_t kcu_a2a_unpack_rope(void *y, const void *src, const kcu_a2a *g, const float *cs, const float *sn, int64_t P,
                                const int64_t *pos, int64_t pstride, float sign, cudaStream_t st);

/* ---- GEMMs (kcu_gemm.cu): cuBLAS, bf16 in, fp32 compute, on the handle's stream ---- */
/* y[N,O] = x[N,I] @ w[I,O] */
cudaError_t kcu_linear_fwd(cublasHandle_t h, kcu_bf16 *y, const kcu_bf16 *x, const kcu_bf16 *w, int64_t N, int64_t I,
                           int64_t O);
/* dx[N,I] = dy @ w^T ; dw[I,O] = x^T @ dy */
cudaError_t kcu_linear_bwd(cublasHandle_t h, kcu_bf16 *dx, kcu_bf16 *dw, const kcu_bf16 *dy, const kcu_bf16 *x,
                           const kcu_bf16 *w, int64_t N, int64_t I, int64_t O);

/* The SwiGLU MLP fused and tiled over the tokens (basp_rt.h rt_mlp):
 * y[N,D] = (silu(x@wg) * (x@wu)) @ wd, wg, wu [D,F], wd [F,D], chunk rows at
 * a time through ws (kcu_mlp_ws_elems bf16 elements); the backward
 * recomputes each chunk's x@wg, x@wu and overwrites dx, dwg, dwu, dwd. */
int64_t kcu_mlp_ws_elems(int64_t N, int64_t F, int64_t chunk);
cudaError_t kcu_mlp_fwd(cublasHandle_t h, kcu_bf16 *y, const kcu_bf16 *x, const kcu_bf16 *wg, const kcu_bf16 *wu,
                        const kcu_bf16 *wd, int64_t N, int64_t D, int64_t F, int64_t chunk, kcu_bf16 *ws,
                        cudaStream_t st);
cudaError_t kcu_mlp_bwd(cublasHandle_t h, kcu_bf16 *dx, kcu_bf16 *dwg, kcu_bf16 *dwu, kcu_bf16 *dwd, const kcu_bf16 *dy,
                        const kcu_bf16 *x, const kcu_bf16 *wg, const kcu_bf16 *wu, const kcu_bf16 *wd, int64_t N,
                        int64_t D, int64_t F, int64_t chunk, kcu_bf16 *ws, cudaStream_t st);

/* LM head + cross-entropy.  Logits are formed `chunk` rows at a time
 * (fp32 [chunk, V] in ws->logits), never [N, V]. */
typedef struct kcu_lmhead_ws {
    int64_t chunk;  /* rows per chunk of the forward and the statistics pass (kcu_lm_head_chunk) */
    int64_t xchunk; /* rows per block of the backward (kcu_lm_head_xchunk(N, V, D)) */
    int64_t vchunk; /* vocabulary columns per chunk of the backward (kcu_lm_head_vchunk(xchunk, V)) */
    float *logits;  /* forward [chunk, V]; backward [max(chunk * V, xchunk * vchunk)] */
    kcu_bf16 *dl;   /* [xchunk, vchunk], backward */
    float *rowloss; /* [N], forward */
    float *lse;     /* [N] row log-sum-exp: written by the forward unless NULL, read by the backward */
    int lse_valid;  /* backward: lse already holds these rows' statistics (else computed first) */
    float *dx32;    /* [xchunk, D], backward: one block's dx */
    float *dw32;    /* [V, D], backward when xchunk < N: dw summed over the blocks (else unused) */
    int *err;       /* device flag: a target >= V */
} kcu_lmhead_ws;
int64_t kcu_lm_head_chunk(int64_t N, int64_t V);
int64_t kcu_lm_head_vchunk(int64_t N, int64_t V);
int64_t kcu_lm_head_xchunk(int64_t N, int64_t V, int64_t D);
/* loss[0] (fp32, device) = sum over n with tgt[n] >= 0 of logsumexp(l_n) - l_n[tgt[n]],
 * l_n = x[n,:] @ w^T ; x[N,D], w[V,D] */
cudaError_t kcu_lm_head_loss_fwd(cublasHandle_t h, float *loss, const kcu_bf16 *x, const kcu_bf16 *w,
                                 const int32_t *tgt, int64_t N, int64_t V, int64_t D, const kcu_lmhead_ws *ws,
                                 cudaStream_t st);
/* dx[N,D], dw[V,D] of loss * scale */
cudaError_t kcu_lm_head_loss_bwd(cublasHandle_t h, kcu_bf16 *dx, kcu_bf16 *dw, const kcu_bf16 *x, const kcu_bf16 *w,
                                 const int32_t *tgt, int64_t N, int64_t V, int64_t D, double scale,
                                 const kcu_lmhead_ws *ws, cudaStream_t st);

/* ---- attention (kcu_attention.cu) ------------------------------------------------------ */
/* Causal GQA, scale 1/sqrt(Dh): o, q [b,S,H,Dh]; k, v [b,S,Hkv,Dh]; q head h
 * reads kv head h / (H/Hkv).  Dh in {8, 16, 32, 64, 128} (else
 * cudaErrorInvalidValue).  Tiled with an online softmax: no S x S matrix. */
cudaError_t kcu_attention_fwd(kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, int64_t b,
                              int64_t S, int64_t H, int64_t Hkv, int64_t Dh, cudaStream_t st);
/* The forward kernels behind kcu_attention_fwd: KCU_ATTN_AUTO takes the
 * tensor-core kernel (kcu_attention_tc.cu: WMMA bf16, Dh 64 or 128) where
 * it applies and the device has the shared memory it needs, else the scalar
 * fp32 kernel; SCALAR and TC force one (TC with another Dh:
 * cudaErrorInvalidValue), for the tests and the benchmark. */
typedef enum { KCU_ATTN_AUTO, KCU_ATTN_SCALAR, KCU_ATTN_TC } kcu_attn_impl;
cudaError_t kcu_attention_fwd_impl(kcu_attn_impl impl, kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k,
                                   const kcu_bf16 *v, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh,
                                   cudaStream_t st);
/* Dynamic shared memory per block of the tensor-core forward (0: no such kernel for Dh). */
size_t kcu_attention_tc_smem(int64_t Dh);
/* Floats of workspace the backward needs (row logsumexp and rowsum(dO o O)). */
int64_t kcu_attention_bwd_ws(int64_t b, int64_t S, int64_t H);
/* dq [b,S,H,Dh], dk, dv [b,S,Hkv,Dh] (summed over the q heads of a kv head). */
cudaError_t kcu_attention_bwd(kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                              const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, int64_t b, int64_t S, int64_t H,
                              int64_t Hkv, int64_t Dh, float *ws, cudaStream_t st);

/* ---- ring attention and rope with positions (kcu_ring.cu, kcu_basic.cu) ---------------- */
/* The blocks of ring attention, as kern_ring_block_fwd/_bwd (../host/rt_host.h):
 * key j is visible to query i iff kpos[j] <= qpos[i] (kpos NULL: all
 * visible); scale 1/sqrt(Dh); q head h reads kv head h / (H/Hk); Dh in
 * {8, 16, 32, 64, 128}, kpos without qpos: cudaErrorInvalidValue.  Tile
 * pairs whose keys are all masked are skipped.
 * Dtypes: q, k, v, dout, o (for the rowdot) are bf16 activations; qpos
 * [Sq], kpos [Sk] are device int64; everything the ring carries from step
 * to step is fp32, so that R steps do not round R times:
 *   o [b,Sq,H,Dh] fp32 and lse [b,Sq,H] fp32 (natural log, -INFINITY:
 *   nothing seen, o then 0): the running result, updated in place; start
 *   from (0, -inf), and after the last block convert o with kcu_f32_to_bf16;
 *   D [b,S,H] fp32;
 *   dq [b,Sq,H,Dh], dk, dv [b,Sk,Hk,Dh] fp32 ACCUMULATORS (+=, zeroed by
 *   the caller once; convert to bf16 after the last block). */
cudaError_t kcu_ring_block_fwd(float *o, float *lse, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, int64_t b,
                               int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos,
                               const int64_t *kpos, cudaStream_t st);
/* D[b,S,H] = sum_d dout * o (fp32 sums), o the final output (bf16). */
cudaError_t kcu_ring_rowdot(float *D, const kcu_bf16 *dout, const kcu_bf16 *o, int64_t b, int64_t S, int64_t H,
                            int64_t Dh, cudaStream_t st);
/* One block of the backward against the FINAL lse of the whole attention:
 * P = exp(s - lse), dv += P^T dout, dS = P (dout v^T - D), dq += scale dS k,
 * dk += scale dS^T q (dk, dv summed over the q heads of a kv head). */
cudaError_t kcu_ring_block_bwd(float *dq, float *dk, float *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                               const kcu_bf16 *k, const kcu_bf16 *v, const float *lse, const float *D, int64_t b,
                               int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos,
                               const int64_t *kpos, cudaStream_t st);
/* The same with packed documents' ids (device int32 qdoc [b,Sq], kdoc
 * [b,Sk], both or neither, else cudaErrorInvalidValue): key j is visible to
 * query i only if also kdoc[bi,j] == qdoc[bi,i]; tile pairs whose id ranges
 * are disjoint are skipped.  No ids: exactly the plain entry points.  The
 * forward also takes o == NULL: only lse is updated (the statistics a
 * backward recomputes, without the P V products), as
 * kern_ring_block_fwd_doc. */
cudaError_t kcu_ring_block_fwd_doc(float *o, float *lse, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                                   int64_t b, int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh,
                                   const int64_t *qpos, const int64_t *kpos, const int32_t *qdoc, const int32_t *kdoc,
                                   cudaStream_t st);
cudaError_t kcu_ring_block_bwd_doc(float *dq, float *dk, float *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                                   const kcu_bf16 *k, const kcu_bf16 *v, const float *lse, const float *D, int64_t b,
                                   int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos,
                                   const int64_t *kpos, const int32_t *qdoc, const int32_t *kdoc, cudaStream_t st);
/* Ring blocks computed as sub-blocks by another attention (cuDNN's fused
 * graphs: runtime/cuda/rt_ring_split.c), on a window of L rows r0 ..
 * r0+L-1 of each of the b sequences of [b, ld, ...] storage (r0 + L <= ld):
 * kcu_ring_merge folds a sub-block's bf16 output ob (o's layout, the
 * window's rows) and fp32 statistics st [b,H,L] (natural log, cuDNN's
 * layout) into the running fp32 (o [b,ld,H,Dh], lse [b,ld,H]), as one
 * more key block would (kcu_ring_block_fwd); a row whose st is -inf is
 * left as it is.  kcu_ring_lse_rows copies the window of lse [b,ld,H] out
 * as st [b,H,L].  kcu_ring_acc_rows adds the window of bf16 x into the fp32
 * accumulator acc, both [b,ld,W]. */
cudaError_t kcu_ring_merge(float *o, float *lse, const kcu_bf16 *ob, const float *st, int64_t b, int64_t ld, int64_t r0,
                           int64_t L, int64_t H, int64_t Dh, cudaStream_t s);
cudaError_t kcu_ring_lse_rows(float *st, const float *lse, int64_t b, int64_t ld, int64_t r0, int64_t L, int64_t H,
                              cudaStream_t s);
cudaError_t kcu_ring_acc_rows(float *acc, const kcu_bf16 *x, int64_t b, int64_t ld, int64_t r0, int64_t L, int64_t W,
                              cudaStream_t s);
/* Packed documents as padded batches (runtime/cuda/rt_doc_split.c): nb
 * documents of at most L rows of width W; document j is rows off[j] ..
 * off[j]+len[j]-1 of src / dst (row stride W), off and len device int64
 * [nb], len 0 for a padding entry.  kcu_doc_gather writes dst [nb, L, W]
 * with each document's rows first and zeros after; kcu_doc_scatter copies
 * the first len[j] rows of src [nb, L, W] back to the documents' rows. */
cudaError_t kcu_doc_gather(kcu_bf16 *dst, const kcu_bf16 *src, const int64_t *off, const int64_t *len, int64_t nb,
                           int64_t L, int64_t W, cudaStream_t s);
cudaError_t kcu_doc_scatter(kcu_bf16 *dst, const kcu_bf16 *src, const int64_t *off, const int64_t *len, int64_t nb,
                            int64_t L, int64_t W, cudaStream_t s);
/* kcu_rope with token s at position pos[s] (device int64 [S]): cs, sn
 * [P, Dh/2] is the table of positions 0..P-1 (kern_rope_table with S = P,
 * pos0 = 0), so one table serves every permutation of the sequence and the
 * angles are the CPU kernel's floats.  A position outside [0, P) gives NaN.
 * y may alias x (each pair is read and written by one thread). */
cudaError_t kcu_rope_pos(kcu_bf16 *y, const kcu_bf16 *x, const float *cs, const float *sn, int64_t P,
                         const int64_t *pos, int64_t b, int64_t S, int64_t H, int64_t Dh, float sign, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
