/* rt_host.h — the host room of the runtime: the fp32 host kernels
 * (kern_*.c), pure functions with no runtime context, built as one library
 * (basp_kernels) that both backends link: the CPU backend runs every op on
 * them; the CUDA backend takes the RoPE table (kern_rope_table) and, with
 * the optimizer offloaded, the AdamW update (kern_adamw) from them, and its
 * tests compare its kernels against them.  The host kernels use nothing of
 * the runtime but common/common.h (the workspace slots); the fused
 * attention's instances share the private kern_attn_fused.h,
 * kern_attention_simd.h and kern_exp_coef.h.
 *
 * Internal to runtime/: the runtime wraps each kern_ function in the rt_ API
 * of include/basp_rt.h (adding timing); the semantics are exactly those
 * documented there.  In short:
 *   - every function OVERWRITES its outputs (weight gradients included),
 *     except kern_adamw, which updates the parameter and its state in place;
 *   - arrays are row-major; the shape of each argument is given in brackets;
 *   - sizes are local (this rank's share).
 * Shape letters: N tokens (b*S), D hidden, V vocab, In/Out linear in/out
 * features, b batch, S sequence, H/Hkv q/kv heads, Dh head dim, n elements.
 *
 * Target ids: a negative target (-1) means "ignore this token": it adds
 * nothing to the loss and gets a zero gradient.  Token ids must lie in
 * [0, V); an id outside it aborts with a message (reading past the table
 * would silently corrupt the step).
 *
 * The kernels keep a few grow-only scratch buffers in static storage, so they
 * are not thread-safe: the runtime calls them from one thread per rank.  GEMMs
 * go through cblas_sgemm; the caller chooses OpenBLAS's thread count. */
#ifndef BASP_RT_HOST_H
#define BASP_RT_HOST_H

#include <stdint.h>
#include <stdbool.h>

#include "../../common/common.h"

/* ---- scratch (kern_basic.c) -------------------------------------------- */
/* A grow-only buffer per slot (one thread per rank): the rows of
 * common/common.h CM_WS_CPU_SLOTS, which the compiler sizes too (the LM
 * head's logits chunk, the tiled MLP's chunk of g, u, s, the attention's
 * statistics; the ROPE row is kern_rope_table's own table, never asked of
 * kern_scratch).  Out of memory aborts, naming `who`. */
float *kern_scratch(cm_ws_cpu_slot slot, int64_t nfloats, const char *who);
/* A kernel's own grow-only tile scratch (*buf, *cap floats; one thread per
 * rank), 64-byte aligned, bounded by its tile sizes and so not counted as
 * workspace: at least nfloats, reallocated only to grow.  Out of memory
 * aborts, naming `who`. */
float *kern_grow(float **buf, int64_t *cap, int64_t nfloats, const char *who);
/* Bytes the kernels hold outside the arena now: the scratch slots and the
 * RoPE table (what `baspc --memory` calls workspace on the cpu target). */
int64_t kern_scratch_bytes(void);

/* ---- embedding (kern_basic.c) ----------------------------------------- */
/* out[N,D] = w[tok[n], :] ; tok[N], w[V,D] */
void kern_embedding_fwd(float *out, const int32_t *tok, const float *w, int64_t N, int64_t V, int64_t D);
/* dw[V,D] = sum over n with tok[n]=v of dout[n,:]   (dw overwritten) */
void kern_embedding_bwd(float *dw, const float *dout, const int32_t *tok, int64_t N, int64_t V, int64_t D);

/* ---- rmsnorm (kern_basic.c) --------------------------------------------- */
/* y[N,D] = x[N,D] * rsqrt(mean_d(x^2) + eps) * w[D] */
void kern_rmsnorm_fwd(float *y, const float *x, const float *w, int64_t N, int64_t D, double eps);
/* dx[N,D], dw[D] (summed over the N rows, overwritten) from dy[N,D] */
void kern_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N, int64_t D,
                      double eps);
/* The residual add fused into the norm after it: s = a + b, y = rmsnorm(s),
 * row by row while the row is in cache; and its backward, ds = dr + the dx
 * of kern_rmsnorm_bwd (dw as there).  Bit for bit kern_add then
 * kern_rmsnorm_fwd, and kern_rmsnorm_bwd then kern_add (ds may be dr). */
void kern_add_rmsnorm_fwd(float *s, float *y, const float *a, const float *b, const float *w, int64_t N, int64_t D,
                          double eps);
void kern_add_rmsnorm_bwd(float *ds, float *dw, const float *dy, const float *s, const float *w, const float *dr,
                          int64_t N, int64_t D, double eps);

/* ---- rope (kern_basic.c) ------------------------------------------------- */
/* Llama 3 frequency scaling of the inverse frequencies, exactly as Hugging
 * Face transformers' _compute_llama3_parameters: with
 * wavelen = 2 pi / inv_freq, low = original_max_pos / low_freq_factor and
 * high = original_max_pos / high_freq_factor,
 *   wavelen > low   : inv_freq / factor            (long wavelengths)
 *   wavelen < high  : inv_freq                     (short wavelengths)
 *   otherwise       : (1 - s) inv_freq / factor + s inv_freq,
 *                     s = (original_max_pos / wavelen - low_freq_factor)
 *                         / (high_freq_factor - low_freq_factor).
 * Requires factor, low_freq_factor, original_max_pos > 0 and
 * high_freq_factor > low_freq_factor (a violation aborts). */
typedef struct kern_rope_scaling {
    double factor, low_freq_factor, high_freq_factor;
    int64_t original_max_pos;
} kern_rope_scaling;

/* The rotation table of one call's shape: cs, sn [S, Dh/2] =
 * cos/sin((pos0 + s) * inv_freq_i), angles in double.  kern_rope_fwd/bwd use
 * it (cached); the CUDA backend uploads it, so both rotate by the very same
 * floats. */
void kern_rope_table(float *cs, float *sn, int64_t S, int64_t Dh, int64_t pos0, double theta,
                     const kern_rope_scaling *scaling);

/* y, x [b,S,H,Dh], Dh even.  Token (bi, si) is at position pos0 + si; the
 * pair (i, i + Dh/2) is rotated by angle pos * inv_freq_i with
 * inv_freq_i = theta^(-2i/Dh) (Hugging Face Llama rotate_half), adjusted by
 * `scaling` unless it is NULL.  y may alias x. */
void kern_rope_fwd(float *y, const float *x, int64_t b, int64_t S, int64_t H, int64_t Dh, int64_t pos0, double theta,
                   const kern_rope_scaling *scaling);
/* dx[b,S,H,Dh] from dy: the inverse (transposed) rotation.  dx may alias dy. */
void kern_rope_bwd(float *dx, const float *dy, int64_t b, int64_t S, int64_t H, int64_t Dh, int64_t pos0, double theta,
                   const kern_rope_scaling *scaling);

/* ---- swiglu, add (kern_basic.c) ----------------------------------------- */
/* y[n] = silu(g[n]) * u[n],  silu(g) = g * sigmoid(g) */
void kern_swiglu_fwd(float *y, const float *g, const float *u, int64_t n);
/* dg[n], du[n] from dy[n] */
void kern_swiglu_bwd(float *dg, float *du, const float *dy, const float *g, const float *u, int64_t n);
/* y[n] = a[n] + b[n]; y may alias a or b */
void kern_add(float *y, const float *a, const float *b, int64_t n);

/* ---- tiled SwiGLU MLP (kern_mlp.c) --------------------------------------- */
/* y[N,D] = (silu(x@wg) * (x@wu)) @ wd ; x[N,D], wg, wu [D,F], wd [F,D];
 * `chunk` rows at a time (chunk < 1 or > N: all N at once) */
void kern_mlp_fwd(float *y, const float *x, const float *wg, const float *wu, const float *wd, int64_t N, int64_t D,
                  int64_t F, int64_t chunk);
/* dx[N,D], dwg, dwu [D,F], dwd [F,D] (overwritten) from dy[N,D]; recomputes
 * each chunk's x@wg and x@wu */
void kern_mlp_bwd(float *dx, float *dwg, float *dwu, float *dwd, const float *dy, const float *x, const float *wg,
                  const float *wu, const float *wd, int64_t N, int64_t D, int64_t F, int64_t chunk);
/* Floats of the kernels' workspace for N rows in chunks of `chunk`. */
int64_t kern_mlp_ws_floats(int64_t N, int64_t F, int64_t chunk);

/* ---- bias (kern_basic.c) -------------------------------------------------- */
/* y[N,M] = x[N,M] + b[M] */
void kern_bias_add_fwd(float *y, const float *x, const float *b, int64_t N, int64_t M);
/* db[M] = sum over n of dy[n,:] (overwritten; summed in double) */
void kern_bias_add_bwd(float *db, const float *dy, int64_t N, int64_t M);

/* ---- linear (kern_linear.c) ---------------------------------------------- */
/* y[N,Out] = x[N,In] @ w[In,Out] */
void kern_linear_fwd(float *y, const float *x, const float *w, int64_t N, int64_t In, int64_t Out);
/* dx[N,In] = dy[N,Out] @ w^T ; dw[In,Out] = x^T @ dy   (dw overwritten) */
void kern_linear_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N, int64_t In,
                     int64_t Out);

/* ---- the element-wise steps with exponentials (kern_simd.c) ----------------
 * kern_attention_simd.h written once per ISA; kern_attn_simd() is the widest
 * instance this CPU runs (BASP_SIMD=generic|avx2 caps it).  The blocked
 * attention's block steps (kern_attention.c, kern_ring.c), SwiGLU
 * (kern_basic.c) and the LM head's gradient step (kern_lmhead.c). */
typedef struct kern_attn_simd_ops {
    void (*softmax)(float *s, int nq, int w, float *m, float *l, float *alpha);
    void (*rowstats)(const float *s, int nq, int w, float *m, float *l);
    void (*grad)(float *s, float *dp, int nq, int w, const float *lse, const float *dsum, float scale);
    void (*swiglu_fwd)(float *y, const float *g, const float *u, int64_t n);
    void (*swiglu_bwd)(float *dg, float *du, const float *dy, const float *g, const float *u, int64_t n);
    void (*lm_expscale)(float *s, int nq, int w, const float *lse, const float *f); /* kern_lmhead.c */
} kern_attn_simd_ops;
const kern_attn_simd_ops *kern_attn_simd(void);
/* That instance's width in floats: 16 (AVX-512), 8 (AVX2) or 4 (SSE2 or
 * generic); the fused attention runs the instance of the same ISA. */
int kern_attn_simd_width(void);

/* ---- attention (kern_attention.c) ---------------------------------------- */
/* Causal grouped-query attention, softmax scale 1/sqrt(Dh).
 * o, q [b,S,H,Dh]; k, v [b,S,Hkv,Dh]; H % Hkv == 0; q head h reads kv head
 * h / (H/Hkv).  Tiled (blocks of queries x blocks of keys) with an online
 * softmax: no S x S matrix is ever stored. */
void kern_attention_fwd(float *o, const float *q, const float *k, const float *v, int64_t b, int64_t S, int64_t H,
                        int64_t Hkv, int64_t Dh);
/* The same, also writing each row's logsumexp to lse [b,H,S] (NULL: none). */
void kern_attention_fwd_lse(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t S,
                            int64_t H, int64_t Hkv, int64_t Dh);
/* dq[b,S,H,Dh], dk/dv [b,S,Hkv,Dh] from dout[b,S,H,Dh] and the forward's
 * inputs and output o.  The row logsumexp is recomputed; dk, dv sum over the
 * q heads that share a kv head.  All three outputs are overwritten. */
void kern_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *o, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh);
/* The same with the forward's lse [b,H,S] from kern_attention_fwd_lse
 * (NULL: recomputed): the results are bit for bit those without it, and
 * the first of the backward's two passes over the keys is skipped. */
void kern_attention_bwd_lse(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *o, const float *lse, int64_t b, int64_t S, int64_t H,
                            int64_t Hkv, int64_t Dh);

/* Which code the dense attention above runs.  KERN_ATTN_AUTO (the default):
 * the fused kernels where the CPU has AVX-512 (Dh % 16 == 0) or AVX2 (Dh %
 * 8 == 0), else the blocked BLAS ones; KERN_ATTN_FUSED: the fused
 * ones or stop (exit 2, saying why); KERN_ATTN_BLAS: always the blocked
 * BLAS ones.  BASP_CPU_ATTENTION=auto|fused|blas sets the start value
 * (anything else: exit 2).  set returns the previous choice; tests and
 * bench_attention compare the two side by side. */
typedef enum { KERN_ATTN_AUTO, KERN_ATTN_FUSED, KERN_ATTN_BLAS } kern_attn_impl;
kern_attn_impl kern_attention_set_impl(kern_attn_impl impl);
kern_attn_impl kern_attention_get_impl(void);
/* "fused-avx512", "fused-avx2" or "blas-blocked": what a call with this Dh
 * runs now (dense, ring blocks and packed documents alike); fused: the
 * fused kernels that run, or NULL for the blocked ones (KERN_ATTN_FUSED
 * where none can: exit 2). */
const char *kern_attention_impl_name(int64_t Dh);
typedef struct kern_attn_fused_ops kern_attn_fused_ops;
const kern_attn_fused_ops *kern_attention_fused(int64_t Dh);
/* The fused kernels themselves (kern_attn_fused.h, one instance per ISA:
 * kern_attn_avx512.c, kern_attn_avx2.c), for kern_attention.c and
 * kern_ring.c only: the entry points' contracts, no argument checks.  name
 * is NULL where the instance was not compiled (not x86-64 GCC); vl is the
 * vector width in floats, which Dh must be a multiple of. */
struct kern_attn_fused_ops {
    const char *name; /* "fused-avx512", "fused-avx2" */
    int vl;
    void (*fwd)(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t S, int64_t H,
                int64_t Hkv, int64_t Dh);
    void (*bwd)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
                const float *o, const float *lse, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh);
    void (*ring_fwd)(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t Sq,
                     int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos,
                     const int32_t *qdoc, const int32_t *kdoc);
    void (*ring_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
                     const float *lse, const float *D, int64_t b, int64_t Sq, int64_t Sk, int64_t H, int64_t Hk,
                     int64_t Dh, const int64_t *qpos, const int64_t *kpos, const int32_t *qdoc, const int32_t *kdoc);
};
extern const kern_attn_fused_ops kern_attn_fused_avx512, kern_attn_fused_avx2;

/* ---- tiles of ring blocks and packed documents (kern_ring.c) ---------------
 * Shared by both implementations: a tile pair (64 queries x KERN_TILE keys)
 * is skipped when every pair is masked, and left unmasked when none is,
 * judged from the tiles' extents of positions and document ids. */
enum { KERN_TILE = 64 };
typedef struct kern_tile_range {
    int64_t plo, phi;
    int32_t dlo, dhi;
} kern_tile_range;
typedef enum { KERN_TILE_SKIP, KERN_TILE_FULL, KERN_TILE_MASKED } kern_tile_kind;
/* The extent of n entries of pos and doc (NULL: that extent is left 0). */
kern_tile_range kern_tile_range_of(const int64_t *pos, const int32_t *doc, int n);
/* How key tile k meets query tile q; by_pos / by_doc: which conditions apply
 * (key after query; documents differ). */
kern_tile_kind kern_tile_classify(const kern_tile_range *q, const kern_tile_range *k, bool by_pos, bool by_doc);
/* The extents of the key tiles [ceil(Sk / KERN_TILE)] of batch row bi (kdoc
 * row bi); grow-only scratch, valid until the next call. */
const kern_tile_range *kern_tile_key_ranges(int64_t bi, int64_t Sk, const int64_t *kpos, const int32_t *kdoc);

/* ---- lm head + cross-entropy (kern_lmhead.c) ------------------------------ */
/* loss[0] = sum over n with tgt[n] >= 0 of logsumexp(l_n) - l_n[tgt[n]],
 * l_n = x[n,:] @ w^T; x[N,D], w[V,D], tgt[N].  Logits are formed a block of
 * rows by vocabulary columns at a time (never [N,V]); the sum is accumulated
 * in double. */
void kern_lm_head_loss_fwd(float *loss, const float *x, const float *w, const int32_t *tgt, int64_t N, int64_t V,
                           int64_t D);
/* Gradient of loss * scale: with dl = (softmax(l_n) - onehot(tgt[n])) * scale
 * (zero for ignored rows), dx[N,D] = dl @ w and dw[V,D] = dl^T @ x
 * (dw overwritten). */
void kern_lm_head_loss_bwd(float *dx, float *dw, const float *x, const float *w, const int32_t *tgt, int64_t N,
                           int64_t V, int64_t D, double scale);
/* Both at once: loss[0] as kern_lm_head_loss_fwd, dx and dw as
 * kern_lm_head_loss_bwd, the logits formed once. */
void kern_lm_head_loss_grad(float *loss, float *dx, float *dw, const float *x, const float *w, const int32_t *tgt,
                            int64_t N, int64_t V, int64_t D, double scale);

/* ---- optimizer (kern_adamw.c) -------------------------------------------- */
/* One AdamW step (decoupled weight decay, bias-corrected moments) on n
 * elements, in place on p[n], m[n], v[n].  The gradient used is
 * g[n] * gscale (gscale = the clip factor, 1 when not clipping); t >= 1 is the
 * step number counted from 1:
 *   p -= lr * wd * p
 *   m = beta1 m + (1 - beta1) g ;  v = beta2 v + (1 - beta2) g^2
 *   p -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) */
void kern_adamw(float *p, float *m, float *v, const float *g, int64_t n, double lr, double beta1, double beta2,
                double eps, double wd, int64_t t, double gscale);
/* sum of x[i]^2 over n elements, accumulated in double (for the global
 * gradient norm) */
double kern_sumsq(const float *x, int64_t n);

/* ---- ring attention (kern_ring.c) ------------------------------------------ */
/* The blocks of ring attention (sequence parallelism): the sequence is cut
 * over R ranks, each keeps its query block and meets every key/value block
 * in turn.  Tokens carry their ORIGINAL positions (the ranks hold them in
 * zig-zag order, below), and the causal mask compares positions: key j is
 * visible to query i iff kpos[j] <= qpos[i]; kpos == NULL: every key is
 * visible (qpos is then not read).  Softmax scale 1/sqrt(Dh); q head h reads
 * kv head h / (H/Hk).  Tiles of 64 queries x 64 keys whose keys are all
 * masked are skipped, so the work scales with the visible pairs. */

/* q [b,Sq,H,Dh]; k, v [b,Sk,Hk,Dh]; qpos [Sq], kpos [Sk].
 * (o, lse) is the running result, updated in place: o [b,Sq,H,Dh] the
 * normalised output so far, lse [b,Sq,H] its log-sum-exp (natural log;
 * -INFINITY: nothing seen yet, o then 0).  Afterwards it is the merge of the
 * running result with this block's: a chain of calls over all key blocks,
 * started from (0, -inf), gives the attention over all keys.  Rows with no
 * visible key in the block are left unchanged. */
void kern_ring_block_fwd(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t Sq,
                         int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos);
/* D[b,S,H] = sum_d dout[b,S,H,d] * o[b,S,H,d] (summed in double), once per
 * backward, with the final o. */
void kern_ring_rowdot(float *D, const float *dout, const float *o, int64_t b, int64_t S, int64_t H, int64_t Dh);
/* Backward of one block against the FINAL lse [b,Sq,H] of the whole
 * attention and D from kern_ring_rowdot: P = exp(s - lse),
 *   dv += P^T dout,  dP = dout v^T,  dS = P (dP - D),
 *   dq += scale dS k,  dk += scale dS^T q
 * dq [b,Sq,H,Dh], dk, dv [b,Sk,Hk,Dh] ACCUMULATE (the caller zeroes them
 * once); dk, dv sum over the q heads of a kv head.  Same mask and skipping
 * as the forward; a row with lse -inf gets no gradient. */
void kern_ring_block_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                         const float *v, const float *lse, const float *D, int64_t b, int64_t Sq, int64_t Sk, int64_t H,
                         int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos);
/* The causal load-balanced (zig-zag) order: the S tokens are cut into 2R
 * chunks of C = S/(2R); ring position r holds chunks r and 2R-1-r, in that
 * order.  Returns the original position of index i (0..S-1, ring order), so
 * rank r's block is indices [2rC, 2(r+1)C).  S % 2R != 0 aborts. */
int64_t kern_zigzag_pos(int64_t i, int64_t S, int64_t R);

/* ---- rope with explicit positions (kern_basic.c) ------------------------------- */
/* kern_rope_fwd/bwd with token (bi, si) at position pos[si] (pos [S], any
 * int64, not necessarily sorted or distinct) instead of pos0 + si: the same
 * rotation, bit for bit (the angle of position p is computed as in
 * kern_rope_table whatever the order).  The cached table is keyed by a copy
 * of pos, so it adds 8 S bytes to the workspace while in use. */
void kern_rope_fwd_pos(float *y, const float *x, int64_t b, int64_t S, int64_t H, int64_t Dh, const int64_t *pos,
                       double theta, const kern_rope_scaling *scaling);
void kern_rope_bwd_pos(float *dx, const float *dy, int64_t b, int64_t S, int64_t H, int64_t Dh, const int64_t *pos,
                       double theta, const kern_rope_scaling *scaling);

/* ---- rope one run at a time (kern_basic.c): the exchange's packing ---------------- */
/* The cached rotation table of kern_rope_fwd (_pos) for S tokens at positions
 * pos[S] (pos0 + si when pos is NULL): *cs, *sn [S, Dh/2], valid until the
 * next rope call. */
void kern_rope_rows(const float **cs, const float **sn, int64_t S, int64_t Dh, const int64_t *pos, int64_t pos0,
                    double theta, const kern_rope_scaling *scaling);
/* One head's Dh elements rotated by the angles cs, sn [Dh/2] of its token
 * (sign 1) or back (sign -1): the arithmetic of every CPU rotation, so a
 * run rotated here equals kern_rope_fwd's bit for bit.  y may alias x. */
static inline void kern_rope_run(float *y, const float *x, int64_t Dh, const float *cs, const float *sn, float sign) {
    int64_t half = Dh / 2;
    for (int64_t i = 0; i < half; i++) {
        float x0 = x[i], x1 = x[i + half], s = sign * sn[i];
        y[i] = x0 * cs[i] - x1 * s;
        y[i + half] = x1 * cs[i] + x0 * s;
    }
}

/* ---- ring blocks with document ids (kern_ring.c) ---------------------------------- */
/* kern_ring_block_fwd/bwd with a second mask condition for packed rows: key j
 * is visible to query i iff (kpos == NULL or kpos[j] <= qpos[i]) and
 * (kdoc == NULL or kdoc[bi, j] == qdoc[bi, i]).  qdoc [b,Sq], kdoc [b,Sk]
 * int32: both or neither (one alone aborts).  A tile pair is skipped when the
 * ranges of its key and query ids are disjoint, as well as when its keys all
 * come after its queries.  The plain entry points are these with no ids.
 * kern_ring_block_fwd_doc also takes o == NULL: only lse is updated (the
 * statistics a backward needs, without the P V products). */
void kern_ring_block_fwd_doc(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b,
                             int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos,
                             const int64_t *kpos, const int32_t *qdoc, const int32_t *kdoc);
void kern_ring_block_bwd_doc(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *lse, const float *D, int64_t b, int64_t Sq, int64_t Sk,
                             int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos,
                             const int32_t *qdoc, const int32_t *kdoc);

/* ---- document-masked causal attention (kern_docattn.c) ------------------------------ */
/* Causal attention within documents: q [b,S,H,Dh], k,v [b,S,Hk,Dh] (GQA h -> h/(H/Hk)), scale 1/sqrt(Dh);
 * doc [b,S] int32: the document index of every token, non-decreasing along S within a row (a packed row);
 * key j is visible to query i iff j <= i and doc[j] == doc[i].  doc == NULL: plain causal (equals
 * kern_attention_fwd up to fp32 reassociation: 64- against 128-key tiles).  Tiles whose keys lie wholly
 * in earlier documents than the tile's queries are skipped.
 * lse [b,S,H] (optional, may be NULL): the log-sum-exp per query (natural log), for a caller that keeps
 * it; kern_docattn_bwd does not read it.
 * Any ids give the exact result; non-decreasing rows are what make the skipping pay: the work is then
 * about sum_i l_i^2 / 2 score pairs per row (l_i the document lengths) instead of S^2 / 2.  Every query
 * sees at least itself, so no row is empty.  o is overwritten. */
void kern_docattn_fwd(float *o, float *lse, const float *q, const float *k, const float *v, const int32_t *doc,
                      int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh);
/* Backward: dq [b,S,H,Dh], dk, dv [b,S,Hk,Dh] (overwritten) from dout [b,S,H,Dh] and the forward's
 * inputs and output o.  Like kern_attention_bwd it recomputes the row log-sum-exp (a statistics-only
 * pass: Q K^T and the softmax sums, no P V), so nothing is kept between forward and backward: one
 * signature for callers with and without the forward's lse, at the cost of one Q K^T pass. */
void kern_docattn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *o, const int32_t *doc, int64_t b, int64_t S, int64_t H, int64_t Hk,
                      int64_t Dh);

#endif
