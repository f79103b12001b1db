/* kern_exp_coef.h — the constants of exp(x) for x <= 0 that every SIMD
 * softmax and SwiGLU uses (kern_attention_simd.h, kern_attn_avx512.c,
 * kern_attn_avx2.c): Cephes expf.  x = n ln2 + r with n = round(x log2 e)
 * and ln2 split in two (HI has few mantissa bits, so n * HI is exact for
 * the n that occur), then e^r on |r| <= ln2/2 by a degree-6 polynomial,
 * e^r ~ 1 + r + r^2 (P5 + r (P4 + ... r P0)), relative error ~1e-7.
 * Arguments below KERN_EXP_MIN give 0 (exp(-87) ~ 1e-38, below any
 * softmax weight that matters, and 2^n stays a normal float).  One copy,
 * so the three implementations cannot drift apart. */
#ifndef KERN_EXP_COEF_H
#define KERN_EXP_COEF_H

#define KERN_EXP_MIN    (-87.0f)
#define KERN_EXP_LOG2E  1.44269504088896341f
#define KERN_EXP_LN2_HI 0.693359375f
#define KERN_EXP_LN2_LO (-2.12194440e-4f)
#define KERN_EXP_P0     1.9875691500e-4f
#define KERN_EXP_P1     1.3981999507e-3f
#define KERN_EXP_P2     8.3334519073e-3f
#define KERN_EXP_P3     4.1665795894e-2f
#define KERN_EXP_P4     1.6666665459e-1f
#define KERN_EXP_P5     5.0000001201e-1f

#endif
