/* kern_attention_simd.h — the element-wise block steps of kern_attention.c,
 * written once over a vector width and instantiated once per ISA.
 *
 * kern_attention.c includes this file several times, each time defining
 *   SIMD_VL   floats per vector (the ISA's native width: a wider generic
 *             vector is lowered poorly and runs at about half speed)
 *   SIMD_SFX  the suffix of this instance's names
 *   SIMD_ISA  the function attribute that selects the ISA (may be empty)
 * and picks one instance at run time.  No include guard on purpose.
 *
 * Block rows are padded to a multiple of SIMD_VL (the caller pads to 16);
 * padding and masked scores hold -inf, whose exp is exactly 0. */

#include "kern_exp_coef.h"

#define SIMD_CAT2(a, b) a##b
#define SIMD_CAT(a, b)  SIMD_CAT2(a, b)
#define SIMD(name)      SIMD_CAT(name, SIMD_SFX)

#define vf      SIMD(vf_)
#define vi      SIMD(vi_)
#define VINLINE static inline __attribute__((always_inline)) SIMD_ISA

typedef float vf __attribute__((vector_size(SIMD_VL * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(SIMD_VL * sizeof(float))));

VINLINE vf SIMD(vload_)(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
VINLINE void SIMD(vstore_)(float *p, vf v) { memcpy(p, &v, sizeof v); }
VINLINE vf SIMD(vsplat_)(float a) { return (vf){0} + a; }
VINLINE vf SIMD(vmax_)(vf a, vf b) {
    vi gt = a > b;
    return (vf)(((vi)a & gt) | ((vi)b & ~gt));
}
VINLINE float SIMD(hmax_)(vf v) {
    float m = v[0];
    for (int i = 1; i < SIMD_VL; i++) m = v[i] > m ? v[i] : m;
    return m;
}
VINLINE float SIMD(hsum_)(vf v) {
    float s = 0.0f;
    for (int i = 0; i < SIMD_VL; i++) s += v[i];
    return s;
}

/* exp(x) for x <= 0 (softmax arguments after subtracting the row max),
 * x = -inf included (gives exactly 0), with kern_exp_coef.h's constants;
 * 2^n by building the exponent bits (x is clamped first, so n stays in
 * the normal range). */
VINLINE vf SIMD(vexp_neg_)(vf x) {
    vi dead = x < KERN_EXP_MIN;
    x = (vf)(((vi)x & ~dead) | ((vi)SIMD(vsplat_)(KERN_EXP_MIN) & dead));
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    vf n = (x * KERN_EXP_LOG2E + magic) - magic;
    vf r = x - n * KERN_EXP_LN2_HI - n * KERN_EXP_LN2_LO;
    vf p = SIMD(vsplat_)(KERN_EXP_P0);
    p = p * r + KERN_EXP_P1;
    p = p * r + KERN_EXP_P2;
    p = p * r + KERN_EXP_P3;
    p = p * r + KERN_EXP_P4;
    p = p * r + KERN_EXP_P5;
    vf y = p * r * r + r + 1.0f;
    vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    y = y * (vf)e;
    return (vf)((vi)y & ~dead);
}

/* Online softmax step on a score block s[nq, w]: for each row,
 * m_new = max(m, max_j s), p = exp(s - m_new) written over s,
 * l = l * alpha + sum p with alpha = exp(m - m_new) returned in alpha[r]. */
SIMD_ISA static void SIMD(block_softmax_)(float *s, int nq, int w, float *m, float *l, float *alpha) {
    for (int r = 0; r < nq; r++) {
        float *row = s + (int64_t)r * w;
        vf mx = SIMD(vsplat_)(-INFINITY);
        for (int c = 0; c < w; c += SIMD_VL) mx = SIMD(vmax_)(mx, SIMD(vload_)(row + c));
        float mnew = SIMD(hmax_)(mx);
        if (m[r] > mnew) mnew = m[r];
        vf sum = SIMD(vsplat_)(0.0f), mv = SIMD(vsplat_)(mnew);
        for (int c = 0; c < w; c += SIMD_VL) {
            vf p = SIMD(vexp_neg_)(SIMD(vload_)(row + c) - mv);
            SIMD(vstore_)(row + c, p);
            sum += p;
        }
        alpha[r] = SIMD(vexp_neg_)(SIMD(vsplat_)(m[r] - mnew))[0];
        l[r] = l[r] * alpha[r] + SIMD(hsum_)(sum);
        m[r] = mnew;
    }
}

/* The running (m, l) update alone, for the backward's logsumexp pass. */
SIMD_ISA static void SIMD(block_rowstats_)(const float *s, int nq, int w, float *m, float *l) {
    for (int r = 0; r < nq; r++) {
        const float *row = s + (int64_t)r * w;
        vf mx = SIMD(vsplat_)(-INFINITY);
        for (int c = 0; c < w; c += SIMD_VL) mx = SIMD(vmax_)(mx, SIMD(vload_)(row + c));
        float mnew = SIMD(hmax_)(mx);
        if (m[r] > mnew) mnew = m[r];
        vf sum = SIMD(vsplat_)(0.0f), mv = SIMD(vsplat_)(mnew);
        for (int c = 0; c < w; c += SIMD_VL) sum += SIMD(vexp_neg_)(SIMD(vload_)(row + c) - mv);
        l[r] = l[r] * SIMD(vexp_neg_)(SIMD(vsplat_)(m[r] - mnew))[0] + SIMD(hsum_)(sum);
        m[r] = mnew;
    }
}

/* Backward element-wise step: p = exp(s - lse) over s, and
 * ds = p (dp - dsum) * scale over dp. */
SIMD_ISA static void SIMD(block_grad_)(float *s, float *dp, int nq, int w, const float *lse, const float *dsum,
                                       float scale) {
    for (int r = 0; r < nq; r++) {
        float *srow = s + (int64_t)r * w, *drow = dp + (int64_t)r * w;
        vf lv = SIMD(vsplat_)(lse[r]), dv = SIMD(vsplat_)(dsum[r]);
        for (int c = 0; c < w; c += SIMD_VL) {
            vf p = SIMD(vexp_neg_)(SIMD(vload_)(srow + c) - lv);
            SIMD(vstore_)(srow + c, p);
            SIMD(vstore_)(drow + c, p * (SIMD(vload_)(drow + c) - dv) * scale);
        }
    }
}

/* The LM head's gradient step (kern_lmhead.c) on a logits block s[nq, w]:
 * s = exp(s - lse[r]) * f[r] in place (softmax times the row's factor; a
 * zero factor gives a zero row).  s - lse is <= 0 up to rounding, and
 * vexp_neg_ is exact enough a little above 0 (n rounds to 0 there). */
SIMD_ISA static void SIMD(lm_expscale_)(float *s, int nq, int w, const float *lse, const float *f) {
    for (int r = 0; r < nq; r++) {
        float *row = s + (int64_t)r * w;
        vf lv = SIMD(vsplat_)(lse[r]), fv = SIMD(vsplat_)(f[r]);
        for (int c = 0; c < w; c += SIMD_VL) SIMD(vstore_)(row + c, SIMD(vexp_neg_)(SIMD(vload_)(row + c) - lv) * fv);
    }
}

/* sigmoid(g) from exp(-|g|) (the exp above takes x <= 0 only):
 * 1 / (1 + e) for g >= 0, e / (1 + e) below. */
VINLINE vf SIMD(vsigmoid_)(vf g) {
    vi neg = g < 0.0f;
    vf a = (vf)((vi)g & ((vi){0} + 0x7fffffff));
    vf e = SIMD(vexp_neg_)(-a);
    vf r = 1.0f / (1.0f + e);
    return (vf)(((vi)(e * r) & neg) | ((vi)r & ~neg));
}

/* SwiGLU forward and backward (kern_basic.c's contracts), SIMD_VL elements
 * at a time; the last n % SIMD_VL go through one zero-padded vector. */
SIMD_ISA static void SIMD(swiglu_fwd_)(float *y, const float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + SIMD_VL <= n; i += SIMD_VL) {
        vf gv = SIMD(vload_)(g + i);
        SIMD(vstore_)(y + i, gv * SIMD(vsigmoid_)(gv) * SIMD(vload_)(u + i));
    }
    if (i == n) return;
    float tg[SIMD_VL] = {0}, tu[SIMD_VL] = {0}, ty[SIMD_VL];
    memcpy(tg, g + i, (size_t)(n - i) * sizeof(float)), memcpy(tu, u + i, (size_t)(n - i) * sizeof(float));
    SIMD(swiglu_fwd_)(ty, tg, tu, SIMD_VL);
    memcpy(y + i, ty, (size_t)(n - i) * sizeof(float));
}

/* d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g). */
SIMD_ISA static void SIMD(swiglu_bwd_)(float *dg, float *du, const float *dy, const float *g, const float *u,
                                       int64_t n) {
    int64_t i = 0;
    for (; i + SIMD_VL <= n; i += SIMD_VL) {
        vf gv = SIMD(vload_)(g + i), d = SIMD(vload_)(dy + i), s = SIMD(vsigmoid_)(gv);
        SIMD(vstore_)(dg + i, d * SIMD(vload_)(u + i) * s * (1.0f + gv * (1.0f - s)));
        SIMD(vstore_)(du + i, d * gv * s);
    }
    if (i == n) return;
    float tg[SIMD_VL] = {0}, tu[SIMD_VL] = {0}, td[SIMD_VL] = {0}, og[SIMD_VL], ou[SIMD_VL];
    size_t rest = (size_t)(n - i) * sizeof(float);
    memcpy(tg, g + i, rest), memcpy(tu, u + i, rest), memcpy(td, dy + i, rest);
    SIMD(swiglu_bwd_)(og, ou, td, tg, tu, SIMD_VL);
    memcpy(dg + i, og, rest), memcpy(du + i, ou, rest);
}

static const kern_attn_simd_ops SIMD(attn_simd_) = {SIMD(block_softmax_), SIMD(block_rowstats_), SIMD(block_grad_),
                                                    SIMD(swiglu_fwd_),    SIMD(swiglu_bwd_),     SIMD(lm_expscale_)};

#undef vf
#undef vi
#undef VINLINE
#undef SIMD
#undef SIMD_CAT
#undef SIMD_CAT2
#undef SIMD_VL
#undef SIMD_SFX
#undef SIMD_ISA
