/* rt_blas.c — which BLAS the CPU kernels' GEMMs run on, and whether it runs
 * the kernels this CPU is built for.
 *
 * Debian 12's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernel set from the
 * CPU model at load time; a CPU newer than the library (a Xeon whose VM
 * reports a generic model) gets the Prescott (SSE3) kernels, several times
 * slower than the AVX-512 ones on the same core (sgemm 1024^3 on one core:
 * 27.3 against 92.6 GFLOP/s, runtime/README.md), and nothing says so.  The kernel set
 * cannot be changed once the library is loaded, so the banner names it and,
 * when it is a generic one on a CPU with AVX2 or AVX-512, says how to get
 * the right one: OPENBLAS_CORETYPE in every rank's environment.
 *
 * OpenBLAS's functions are weak references: a runtime linked against
 * another BLAS (the GPU kit's, one found at run time) links and says it
 * does not know the kernel set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rt_internal.h"

extern char *openblas_get_corename(void) __attribute__((weak));
extern char *openblas_get_config(void) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));

/* OpenBLAS's x86 kernel sets without AVX2: what it falls back to on a CPU
 * model it does not know. */
static bool rt_blas_generic(const char *core)
{
    static const char *const generic[] = {"prescott", "core2",   "penryn",  "dunnington", "nehalem",
                                          "atom",     "katmai",  "coppermine", "northwood", "banias",
                                          "opteron",  "opteron_sse3", "barcelona", "bobcat", "generic"};
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (!strcasecmp(core, generic[i]))
            return true;
    return false;
}

/* The kernel set this CPU is for, NULL when it has neither AVX2 nor
 * AVX-512 (the compiler's cpu checks include the OS's register state). */
static const char *rt_blas_best_core(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

bool rt_blas_describe(char *line, size_t n, char *warn, size_t nw)
{
    if (nw)
        warn[0] = '\0';
    if (!openblas_get_corename || !openblas_get_config) {
        snprintf(line, n, "blas: not OpenBLAS (its kernel set is not known to basp)");
        return true;
    }
    const char *core = openblas_get_corename(), *config = openblas_get_config();
    char version[32] = "?";
    sscanf(config ? config : "", "OpenBLAS %31s", version);
    int threads = openblas_get_num_threads ? openblas_get_num_threads() : 0;
    snprintf(line, n, "blas: OpenBLAS %s%s, %s kernels, %d thread(s)", version,
             config && strstr(config, "DYNAMIC_ARCH") ? " (DYNAMIC_ARCH)" : "", core ? core : "?", threads);
    const char *best = rt_blas_best_core();
    if (!core || !best || !rt_blas_generic(core))
        return true;
    const char *set = getenv("OPENBLAS_CORETYPE");
    snprintf(warn, nw,
             "OpenBLAS runs its generic %s kernels on this CPU, which has %s: every GEMM runs several times "
             "slower than it could.  %s: set OPENBLAS_CORETYPE=%s for every rank (mpirun -x "
             "OPENBLAS_CORETYPE=%s), or install an OpenBLAS that knows this CPU",
             core, !strcmp(best, "SkylakeX") ? "AVX-512" : "AVX2 and FMA",
             set ? "OPENBLAS_CORETYPE is set to it in this environment" : "The library did not recognise the CPU",
             best, best);
    return false;
}
