/* kern_simd.c — the element-wise steps with exponentials, one instance per
 * ISA (kern_attention_simd.h), and the choice among them: the blocked
 * attention's block steps (kern_attention.c, kern_ring.c), SwiGLU
 * (kern_basic.c) and the LM head's gradient step (kern_lmhead.c).  Apart
 * from the attention files so that a program using SwiGLU alone (the CUDA
 * backend's host code) does not pull in the BLAS. */
#include "rt_host.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GCC notes that passing wide vectors by value depends on the ISA; the
 * helpers are always_inline within one instance, so no vector crosses a call
 * whose ABI could differ. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define SIMD_VL  4
#define SIMD_SFX _generic
#define SIMD_ISA
#include "kern_attention_simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTN_X86 1
#define SIMD_VL  8
#define SIMD_SFX _avx2
#define SIMD_ISA __attribute__((target("avx2,fma")))
#include "kern_attention_simd.h"
#define SIMD_VL  16
#define SIMD_SFX _avx512
#define SIMD_ISA __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#include "kern_attention_simd.h"
#endif

/* The widest instance this CPU runs, chosen once.  BASP_SIMD=generic|avx2
 * caps the choice (to test or compare the narrower instances); avx512 or
 * unset: the widest; anything else is refused. */
const kern_attn_simd_ops *kern_attn_simd(void) {
    static const kern_attn_simd_ops *ops;
    if (ops) return ops;
    const char *cap = getenv("BASP_SIMD");
    int level = !cap || !*cap || !strcmp(cap, "avx512") ? 2
                : !strcmp(cap, "avx2")                  ? 1
                : !strcmp(cap, "generic")               ? 0
                                                        : -1;
    if (level < 0) {
        fprintf(stderr, "basp: BASP_SIMD=%s: expected avx512, avx2 or generic (a cap on the CPU's own choice)\n", cap);
        exit(2);
    }
    ops = &attn_simd__generic;
#ifdef ATTN_X86
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
    if (level >= 2 && avx512)
        ops = &attn_simd__avx512;
    else if (level >= 1 && avx2)
        ops = &attn_simd__avx2;
#endif
    return ops;
}

int kern_attn_simd_width(void) {
#ifdef ATTN_X86
    if (kern_attn_simd() == &attn_simd__avx512) return 16;
    if (kern_attn_simd() == &attn_simd__avx2) return 8;
#endif
    return 4;
}
