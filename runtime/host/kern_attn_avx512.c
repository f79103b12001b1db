/* kern_attn_avx512.c — the fused attention kernels (kern_attn_fused.h) on
 * AVX-512: zmm vectors of 16 floats, micro-kernels up to 6 x 4, 12 x 2 and
 * 16 x 1 vectors (24 of the 32 registers), the exponential's 2^n by scalef
 * and the ring/document mask by mask-register compares, 16 queries at a
 * time.  Needs AVX-512 F, VL, DQ, BW and Dh % 16 == 0 (kern_attention_fused
 * checks both). */
#include "kern_exp_coef.h"
#include "rt_host.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>
/* Every function below is compiled for the ISA (clang ignores GCC's
 * target pragma and takes its own; the pop is after the ops table). */
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"))),                   \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")
#endif

typedef __m512 FV;
enum { FVL = 16, F_MR4 = 6, F_MR2 = 12, F_MR1 = 16, F_NV_MAX = 4 };
#define F_NAME(x) attn512_##x
static inline FV f_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void f_store(float *p, FV v) { _mm512_storeu_ps(p, v); }
static inline FV f_set1(float a) { return _mm512_set1_ps(a); }
static inline FV f_zero(void) { return _mm512_setzero_ps(); }
static inline FV f_fma(FV a, FV b, FV c) { return _mm512_fmadd_ps(a, b, c); }
static inline FV f_mul(FV a, FV b) { return _mm512_mul_ps(a, b); }
static inline FV f_add(FV a, FV b) { return _mm512_add_ps(a, b); }
static inline FV f_sub(FV a, FV b) { return _mm512_sub_ps(a, b); }
static inline FV f_max(FV a, FV b) { return _mm512_max_ps(a, b); }

/* exp_neg's ISA steps (kern_attn_fused.h): round to nearest, c - a b, and
 * y 2^n by scalef where x is live (x >= -87 or NaN: an unordered compare),
 * 0 elsewhere. */
static inline FV f_round(FV a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline FV f_fnma(FV a, FV b, FV c) { return _mm512_fnmadd_ps(a, b, c); }
static inline FV f_scale2n_live(FV y, FV n, FV x) {
    return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(KERN_EXP_MIN), _CMP_NLT_UQ), y, n);
}

/* -inf over the score tile st[nk][KERN_TILE] where key t's position exceeds
 * query r's (kpos set) or its document differs (kdoc set); qpos/qdoc: the
 * query tile's, padded to KERN_TILE (padding: never masked by position). */
static void f_mask_ids(const int64_t *kpos, const int32_t *kdoc, const int64_t *qpos, const int32_t *qdoc, float *st,
                       int64_t j0, int nk) {
    const FV ninf = _mm512_set1_ps(-INFINITY);
    for (int t = 0; t < nk; t++) {
        __m512i kp = _mm512_set1_epi64(kpos ? kpos[j0 + t] : INT64_MIN);
        __m512i kd = _mm512_set1_epi32(kdoc ? kdoc[j0 + t] : 0);
        for (int c = 0; c < KERN_TILE; c += 16) {
            __mmask8 lo = _mm512_cmpgt_epi64_mask(kp, _mm512_loadu_si512(qpos + c));
            __mmask8 hi = _mm512_cmpgt_epi64_mask(kp, _mm512_loadu_si512(qpos + c + 8));
            __mmask16 off = (__mmask16)(lo | ((unsigned)hi << 8));
            if (kdoc) off |= _mm512_cmpneq_epi32_mask(kd, _mm512_loadu_si512(qdoc + c));
            float *p = st + t * KERN_TILE + c;
            _mm512_storeu_ps(p, _mm512_mask_mov_ps(_mm512_loadu_ps(p), off, ninf));
        }
    }
}

#include "kern_attn_fused.h"

const kern_attn_fused_ops kern_attn_fused_avx512 = {"fused-avx512",  FVL, attn512_fwd, attn512_bwd, attn512_ring_fwd,
                                                    attn512_ring_bwd};
#ifdef __clang__
#pragma clang attribute pop
#endif

#else /* not x86-64 with GCC/clang: never chosen */
const kern_attn_fused_ops kern_attn_fused_avx512 = {NULL, 16, NULL, NULL, NULL, NULL};
#endif
