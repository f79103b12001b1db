/* rt_blas.c — which BLAS the CPU kernels' GEMMs run on, and whether it runs
 * the kernels this CPU is built for.
 *
 * Debian 12's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernel set from the
 * CPU model at load time; a CPU newer than the library (a Xeon whose VM
 * reports a generic model) gets the Prescott (SSE3) kernels, several times
 * slower than the AVX-512 ones on the same core (sgemm 1024^3 on one core:
 * 27.3 against 92.6 GFLOP/s, runtime/README.md).  The kernel set is read
 * from OPENBLAS_CORETYPE when the library loads and cannot be changed
 * after, so when OpenBLAS picked a generic set on a CPU with AVX2 or
 * AVX-512 and nobody set OPENBLAS_CORETYPE, the program re-executes itself
 * (first thing in main, before MPI_Init) with OPENBLAS_CORETYPE naming the
 * set the CPU's features call for: SkylakeX with AVX-512 F, BW, DQ and VL,
 * Haswell with AVX2 and FMA.  That is safe where OpenBLAS's own choice is
 * conservative: OpenBLAS identifies cores by family and model numbers and
 * falls back for a model its table lacks, while the choice here rests on
 * the very instructions those kernels use, as the CPU and the OS report
 * them (the compiler's cpu checks include the OS's register state).  A
 * user's OPENBLAS_CORETYPE is kept (the banner warns if it is generic), and
 * BASP_BLAS_AUTO=0 keeps OpenBLAS's own choice.  The banner names the
 * kernel set and who chose it.
 *
 * The BLAS is a build-time choice (CMake BASP_BLAS: OpenBLAS, the default,
 * or BLIS, which picks its kernels from the CPU's features at run time);
 * the libraries' functions are weak references, so a runtime linked
 * against either, or another (the GPU kit's, one found at run time),
 * links, and the banner names what it can. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <strings.h>

#include "rt_core.h"

extern char *openblas_get_corename(void) __attribute__((weak));
/* BLIS (CMake BASP_BLAS=BLIS): its version, the kernel configuration it
 * picked for this CPU (an arch_t, an enum), and its thread count. */
extern char *bli_info_get_version_str(void) __attribute__((weak));
extern int bli_arch_query_id(void) __attribute__((weak));
extern char *bli_arch_string(int id) __attribute__((weak));
extern long bli_thread_get_num_threads(void) __attribute__((weak));
extern char *openblas_get_config(void) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));

/* OpenBLAS's x86 kernel sets without AVX2: what it falls back to on a CPU
 * model it does not know. */
static bool rt_blas_generic(const char *core) {
    static const char *const generic[] = {"prescott", "core2",        "penryn",     "dunnington", "nehalem",
                                          "atom",     "katmai",       "coppermine", "northwood",  "banias",
                                          "opteron",  "opteron_sse3", "barcelona",  "bobcat",     "generic"};
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (!strcasecmp(core, generic[i])) return true;
    return false;
}

/* The kernel set this CPU is for, NULL when it has neither AVX2 nor
 * AVX-512 (the compiler's cpu checks include the OS's register state). */
static const char *rt_blas_best_core(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}

void rt_blas_autoselect(char **argv) {
    if (!openblas_get_corename || getenv("OPENBLAS_CORETYPE"))
        return; /* another BLAS, or a kernel set chosen already (by the user, or by us before the exec) */
    const char *auto_ = getenv("BASP_BLAS_AUTO");
    if (auto_ && !strcmp(auto_, "0")) return;
    const char *core = openblas_get_corename(), *best = rt_blas_best_core();
    /* The test hook (tests/rt/blas.sh): on this machine OpenBLAS may know
     * the CPU, so the fallback is played. */
    if (getenv("BASP_TEST_BLAS_GENERIC")) core = "Prescott";
    if (!core || !best || !rt_blas_generic(core)) return;
    setenv("OPENBLAS_CORETYPE", best, 1);
    setenv("BASP_BLAS_PICKED", core, 1); /* what OpenBLAS picked, for the banner */
    execv("/proc/self/exe", argv);
    /* The exec failed: go on with the generic set; the banner warns. */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("BASP_BLAS_PICKED");
}

bool rt_blas_describe(char *line, size_t n, char *warn, size_t nw) {
    if (nw) warn[0] = '\0';
    if (bli_info_get_version_str && bli_arch_query_id && bli_arch_string) {
        snprintf(line, n, "blas: BLIS %s, %s kernels, %ld thread(s)", bli_info_get_version_str(),
                 bli_arch_string(bli_arch_query_id()), bli_thread_get_num_threads ? bli_thread_get_num_threads() : 0);
        return true;
    }
    if (!openblas_get_corename || !openblas_get_config) {
        snprintf(line, n, "blas: neither OpenBLAS nor BLIS (its kernel set is not known to basp)");
        return true;
    }
    const char *core = openblas_get_corename(), *config = openblas_get_config();
    char version[32] = "?";
    sscanf(config ? config : "", "OpenBLAS %31s", version);
    int threads = openblas_get_num_threads ? openblas_get_num_threads() : 0;
    const char *picked = getenv("BASP_BLAS_PICKED");
    char why[96] = "";
    if (picked) snprintf(why, sizeof why, " (chosen by basp: OpenBLAS picked %.32s on this CPU)", picked);
    snprintf(line, n, "blas: OpenBLAS %s%s, %s kernels%s, %d thread(s)", version,
             config && strstr(config, "DYNAMIC_ARCH") ? " (DYNAMIC_ARCH)" : "", core ? core : "?", why, threads);
    const char *best = rt_blas_best_core();
    if (!core || !best || !rt_blas_generic(core)) return true;
    const char *set = getenv("OPENBLAS_CORETYPE");
    snprintf(warn, nw,
             "OpenBLAS runs its generic %s kernels on this CPU, which has %s: every GEMM runs several times "
             "slower than it could.  %s: set OPENBLAS_CORETYPE=%s for every rank (mpirun -x "
             "OPENBLAS_CORETYPE=%s), or install an OpenBLAS that knows this CPU",
             core, !strcmp(best, "SkylakeX") ? "AVX-512" : "AVX2 and FMA",
             set ? "OPENBLAS_CORETYPE is set to it in this environment" : "The library did not recognise the CPU", best,
             best);
    return false;
}
