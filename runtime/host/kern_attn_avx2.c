/* kern_attn_avx2.c — the fused attention kernels (kern_attn_fused.h) on
 * AVX2 + FMA, for CPUs without AVX-512 (and BASP_SIMD=avx2): ymm vectors of
 * 8 floats, micro-kernels up to 3 x 4, 6 x 2 and 12 x 1 vectors (12 of the
 * 16 registers), the exponential's 2^n built in the exponent bits, and the
 * ring/document mask element by element (only the tiles a boundary
 * crosses).  Needs AVX2, FMA and Dh % 8 == 0 (kern_attention_fused checks
 * both). */
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
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#endif

typedef __m256 FV;
enum { FVL = 8, F_MR4 = 3, F_MR2 = 6, F_MR1 = 12, F_NV_MAX = 2 };
#define F_NAME(x) attn256_##x
static inline FV f_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void f_store(float *p, FV v) { _mm256_storeu_ps(p, v); }
static inline FV f_set1(float a) { return _mm256_set1_ps(a); }
static inline FV f_zero(void) { return _mm256_setzero_ps(); }
static inline FV f_fma(FV a, FV b, FV c) { return _mm256_fmadd_ps(a, b, c); }
static inline FV f_mul(FV a, FV b) { return _mm256_mul_ps(a, b); }
static inline FV f_add(FV a, FV b) { return _mm256_add_ps(a, b); }
static inline FV f_sub(FV a, FV b) { return _mm256_sub_ps(a, b); }
static inline FV f_max(FV a, FV b) { return _mm256_max_ps(a, b); }

/* exp_neg's ISA steps (kern_attn_fused.h): round to nearest, c - a b, and
 * y 2^n from the exponent bits where x is live (x >= -87 or NaN: an
 * unordered compare), 0 elsewhere. */
static inline FV f_round(FV a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline FV f_fnma(FV a, FV b, FV c) { return _mm256_fnmadd_ps(a, b, c); }
static inline FV f_scale2n_live(FV y, FV n, FV x) {
    FV live = _mm256_cmp_ps(x, _mm256_set1_ps(KERN_EXP_MIN), _CMP_NLT_UQ);
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), live);
}

/* As kern_attn_avx512.c's, one element at a time. */
static void f_mask_ids(const int64_t *kpos, const int32_t *kdoc, const int64_t *qpos, const int32_t *qdoc, float *st,
                       int64_t j0, int nk) {
    for (int t = 0; t < nk; t++) {
        float *row = st + t * KERN_TILE;
        int64_t kp = kpos ? kpos[j0 + t] : INT64_MIN;
        for (int r = 0; r < KERN_TILE; r++)
            if (kp > qpos[r] || (kdoc && kdoc[j0 + t] != qdoc[r])) row[r] = -INFINITY;
    }
}

#include "kern_attn_fused.h"

const kern_attn_fused_ops kern_attn_fused_avx2 = {"fused-avx2",    FVL, attn256_fwd, attn256_bwd, attn256_ring_fwd,
                                                  attn256_ring_bwd};
#ifdef __clang__
#pragma clang attribute pop
#endif

#else /* not x86-64 with GCC/clang: never chosen */
const kern_attn_fused_ops kern_attn_fused_avx2 = {NULL, 8, NULL, NULL, NULL, NULL};
#endif
