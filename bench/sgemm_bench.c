/* sgemm_bench.c — single-thread cblas_sgemm throughput at given shapes.
 *
 *   bench_sgemm [--repeats R] [--min-ms T] SHAPE ...
 *   SHAPE = MxNxK[:TT]   C[M,N] = op(A) op(B), K the contraction; TT is two
 *                        letters, n or t, for op(A) and op(B) (default nn)
 *
 * Prints one line per shape, `SHAPE GFLOP/s`, the median of R samples (default
 * 5) after a warm-up; each sample times enough back-to-back calls to last at
 * least T ms (default 10), so small shapes are not lost in timer resolution.
 * bench/step_bench.py calls it with the shapes of a training step's GEMMs.
 * Operands stay in cache between calls, as they largely do for the small
 * per-rank GEMMs of the benchmarked models. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *frand(long n) {
    float *p = malloc((size_t)n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_sgemm: out of memory\n");
        exit(1);
    }
    unsigned s = 12345u;
    for (long i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

typedef struct shape {
    int M, N, K, ta, tb;
} shape;

static int parse_shape(const char *s, shape *g) {
    char tt[3] = "nn";
    int used = 0;
    if (sscanf(s, "%dx%dx%d%n", &g->M, &g->N, &g->K, &used) != 3 || g->M < 1 || g->N < 1 || g->K < 1) return 0;
    if (s[used] == ':') {
        if (strlen(s + used + 1) != 2) return 0;
        memcpy(tt, s + used + 1, 2);
    } else if (s[used] != '\0')
        return 0;
    for (int i = 0; i < 2; i++)
        if (tt[i] != 'n' && tt[i] != 't') return 0;
    g->ta = tt[0] == 't', g->tb = tt[1] == 't';
    return 1;
}

static void run(const shape *g, const float *a, const float *b, float *c) {
    /* row-major: A is M x K (K x M when transposed), B is K x N (N x K) */
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, g->M, g->N, g->K,
                1.0f, a, g->ta ? g->M : g->K, b, g->tb ? g->K : g->N, 0.0f, c, g->N);
}

static double gflops(const shape *g, int repeats, double min_sec) {
    float *a = frand((long)g->M * g->K), *b = frand((long)g->K * g->N), *c = frand((long)g->M * g->N);
    /* warm-up, and the number of calls per sample from its duration */
    double t0 = now();
    run(g, a, b, c);
    double one = now() - t0;
    long inner = one > 0 ? (long)(min_sec / one) + 1 : 1000;
    double *t = malloc((size_t)repeats * sizeof(double));
    if (!t) exit(1);
    for (int r = 0; r < repeats; r++) {
        t0 = now();
        for (long i = 0; i < inner; i++) run(g, a, b, c);
        t[r] = (now() - t0) / (double)inner;
    }
    qsort(t, (size_t)repeats, sizeof t[0], cmp_double);
    double med = t[repeats / 2];
    free(t), free(a), free(b), free(c);
    return 2.0 * g->M * g->N * g->K / med * 1e-9;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_sgemm [--repeats R] [--min-ms T] MxNxK[:nn|nt|tn|tt] ...\n");
    exit(2);
}

/* One thread in whichever BLAS this is linked against (OpenBLAS, BLIS):
 * their environment variables are read at load time; these calls are
 * authoritative.  Weak, so that either library links. */
extern void openblas_set_num_threads(int) __attribute__((weak));
extern void bli_thread_set_num_threads(long) __attribute__((weak));

int main(int argc, char **argv) {
    if (openblas_set_num_threads) openblas_set_num_threads(1);
    if (bli_thread_set_num_threads) bli_thread_set_num_threads(1);
    int repeats = 5;
    double min_ms = 10;
    int first = 1;
    for (; first < argc && strncmp(argv[first], "--", 2) == 0; first += 2) {
        if (first + 1 >= argc) usage();
        if (strcmp(argv[first], "--repeats") == 0)
            repeats = atoi(argv[first + 1]);
        else if (strcmp(argv[first], "--min-ms") == 0)
            min_ms = atof(argv[first + 1]);
        else
            usage();
    }
    if (first >= argc || repeats < 1 || min_ms <= 0) usage();
    for (int i = first; i < argc; i++) {
        shape g;
        if (!parse_shape(argv[i], &g)) {
            fprintf(stderr, "bench_sgemm: bad shape '%s' (want MxNxK or MxNxK:TT, TT in nn nt tn tt)\n", argv[i]);
            return 2;
        }
        printf("%s %.3f\n", argv[i], gflops(&g, repeats, min_ms * 1e-3));
        fflush(stdout);
    }
    return 0;
}
