/* docattn_bench.c — document-masked causal attention against dense causal.
 *
 * Rows of S tokens are packed with documents of a long-tailed length mix;
 * one run times, on one thread and side by side (so the machine's load hits
 * every figure alike), forward and forward + backward of
 *   dense : kern_attention_fwd/bwd, causal over the whole row (what training
 *           on packed rows costs without document masking);
 *   plain : kern_docattn_fwd/bwd with doc = NULL (the same causal result on
 *           the ring block kernels' 64 x 64 tiles: separates the tile shape
 *           from the skipping);
 *   doc   : kern_docattn_fwd/bwd with the document ids;
 *   doc-blocked : doc on the blocked BLAS kernels, where the three above run
 *           the fused ones (kern_attention_set_impl), and the
 *           per-repeat speed-up doc-blocked / doc;
 * and prints the per-repeat ratios doc / dense and doc / plain (medians over
 * REPEATS after a warm-up) next to sum l_i^2 / S^2 (the ideal: attention work
 * is proportional to the visible pairs, ~l^2/2 per document against S^2/2)
 * and the fraction of 64 x 64 tile pairs the kernel visits (the work it does,
 * boundary tiles included).
 *
 * The document length mix: no measured distribution of a public corpus is
 * cited here; it is a stand-in long tail by token share:
 *   50% of tokens in documents of 16..512 tokens,
 *   30% in documents of 512..2048,
 *   20% in documents of 2048..4096,
 * lengths log-uniform within each band.  Rows are filled by drawing documents
 * (each from the band furthest below its token share: draw_length),
 * concatenated and cut into rows of S (concat-and-chunk:
 * a document crossing a row end continues in the next row).  b = 16384 / S
 * rows (at least 1), so every S sees the same number of tokens and about the
 * same sample of the mix; the realised shares are printed.
 *
 * Usage: docattn_bench [S ...]   (default S = 4096 8192; H=8 Hk=8 Dh=64) */
#include "rt_host.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"

enum { REPEATS = 5, TILE = 64 };

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static double urand(void) { /* splitmix64 -> [0, 1) */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}
static float *frand(int64_t n) {
    float *p = malloc((size_t)n * sizeof(float));
    if (!p) abort();
    for (int64_t i = 0; i < n; i++) p[i] = (float)(urand() - 0.5);
    return p;
}

/* ---- the length mix -------------------------------------------------------------- */

static const double band_lo[3] = {16, 512, 2048}, band_hi[3] = {512, 2048, 4096}, band_share[3] = {0.5, 0.3, 0.2};

/* Mean of a log-uniform length on [lo, hi]: (hi - lo) / ln(hi / lo). */
static double band_mean(int k) { return (band_hi[k] - band_lo[k]) / log(band_hi[k] / band_lo[k]); }

/* The next document's length: its band is the one that, with a document of
 * the band's mean length added, stays furthest below its token share
 * (stratified, so that a stream of only ~16k tokens, a few dozen documents,
 * still has the shares of the mix: random draws of the band gave 50/15/35%
 * and 65/35/0% on two such streams), its length log-uniform within the band.
 * tok[3]: the tokens drawn so far per band. */
static int64_t draw_length(const int64_t tok[3], int *band) {
    double total = (double)(tok[0] + tok[1] + tok[2]), best = -INFINITY;
    for (int k = 0; k < 3; k++) {
        double gap = band_share[k] - ((double)tok[k] + band_mean(k)) / (total + band_mean(k));
        if (gap > best) best = gap, *band = k;
    }
    int k = *band;
    return (int64_t)exp(log(band_lo[k]) + urand() * log(band_hi[k] / band_lo[k]));
}

/* doc [b,S]: one stream of documents, concatenated and cut into b rows of S
 * (concat-and-chunk: a document that crosses a row end continues, under a new
 * id, at the start of the next row).  Returns sum l_i^2 / S^2 over the pieces,
 * averaged over the rows; tok[3] gets the tokens per band of the drawn
 * (uncut) lengths. */
static double pack_rows(int32_t *doc, int64_t b, int64_t S, int64_t tok[3]) {
    double ideal = 0;
    int64_t left = 0; /* tokens of the current document not yet placed */
    int band = 0;
    for (int64_t bi = 0; bi < b; bi++) {
        int32_t id = 0;
        for (int64_t t = 0; t < S; id++) {
            if (left == 0) {
                left = draw_length(tok, &band);
            }
            int64_t l = left < S - t ? left : S - t;
            for (int64_t i = 0; i < l; i++) doc[bi * S + t + i] = id;
            tok[band] += l;
            ideal += (double)l * (double)l / ((double)S * (double)S);
            t += l, left -= l;
        }
    }
    return ideal / (double)b;
}

/* Fraction of the dense causal kernel's 64 x 64 tile pairs (keys not after
 * the queries) that also share a document range, i.e. that the document
 * kernel computes. */
static double tiles_visited(const int32_t *doc, int64_t b, int64_t S) {
    double causal = 0, visited = 0;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i0 = 0; i0 < S; i0 += TILE)
            for (int64_t j0 = 0; j0 <= i0; j0 += TILE) {
                const int32_t *r = doc + bi * S;
                int64_t je = (j0 + TILE < S ? j0 + TILE : S) - 1;
                causal += 1;
                visited += r[je] >= r[i0]; /* ids non-decreasing: the ranges meet iff last key id >= first query id */
            }
    return visited / causal;
}

/* ---- timing ---------------------------------------------------------------------- */

typedef struct att_ctx {
    int64_t b, S, H, Hk, Dh;
    const int32_t *doc;
    float *q, *k, *v, *o, *dout, *dq, *dk, *dv;
} att_ctx;

typedef enum { DENSE, PLAIN, DOC, DOC_BLOCKED, NKIND } kind;
static const char *kind_name[NKIND] = {"dense", "plain", "doc", "doc-blocked"};

/* DOC_BLOCKED: doc on the blocked BLAS kernels, where the others run the
 * fused ones (kern_attention_impl_name); skipped elsewhere. */
static double run(const att_ctx *a, kind kd, int backward) {
    kern_attn_impl was = kern_attention_set_impl(kd == DOC_BLOCKED ? KERN_ATTN_BLAS : KERN_ATTN_AUTO);
    if (kd == DOC_BLOCKED) kd = DOC;
    double t0 = bench_now();
    if (kd == DENSE) {
        kern_attention_fwd(a->o, a->q, a->k, a->v, a->b, a->S, a->H, a->Hk, a->Dh);
        if (backward)
            kern_attention_bwd(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->o, a->b, a->S, a->H, a->Hk, a->Dh);
    } else {
        const int32_t *doc = kd == DOC ? a->doc : NULL;
        kern_docattn_fwd(a->o, NULL, a->q, a->k, a->v, doc, a->b, a->S, a->H, a->Hk, a->Dh);
        if (backward)
            kern_docattn_bwd(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->o, doc, a->b, a->S, a->H, a->Hk, a->Dh);
    }
    double t = bench_now() - t0;
    kern_attention_set_impl(was);
    return t;
}

/* Each repeat times dense, plain and doc back to back (forward, then forward
 * + backward) and takes the ratios within the repeat before the median: load
 * from other processes drifts over seconds, and this cancels most of it. */
static void bench(int64_t S) {
    att_ctx a = {S < 16384 ? 16384 / S : 1, S, 8, 8, 64, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    int64_t nq = a.b * S * a.H * a.Dh, nk = a.b * S * a.Hk * a.Dh, tok[3] = {0, 0, 0};
    int32_t *doc = malloc((size_t)(a.b * S) * sizeof(int32_t));
    double ideal = pack_rows(doc, a.b, S, tok), tiles = tiles_visited(doc, a.b, S);
    a.doc = doc, a.q = frand(nq), a.k = frand(nk), a.v = frand(nk), a.o = frand(nq), a.dout = frand(nq);
    a.dq = frand(nq), a.dk = frand(nk), a.dv = frand(nk);
    int ndocs = 1;
    for (int64_t i = 1; i < a.b * S; i++) ndocs += doc[i] != doc[i - 1];
    printf("S=%lld b=%lld H=%lld Hk=%lld Dh=%lld: %d documents, "
           "tokens of documents <=512 / 512..2048 / >2048: %.0f%% / %.0f%% / %.0f%%\n",
           (long long)S, (long long)a.b, (long long)a.H, (long long)a.Hk, (long long)a.Dh, ndocs,
           100.0 * tok[0] / (a.b * S), 100.0 * tok[1] / (a.b * S), 100.0 * tok[2] / (a.b * S));
    double t[2][NKIND][REPEATS], rd[2][REPEATS], rp[2][REPEATS], rb[2][REPEATS];
    int nkind = kern_attention_fused(a.Dh) ? NKIND : DOC_BLOCKED;
    for (int bw = 0; bw < 2; bw++)
        for (int kd = 0; kd < nkind; kd++) run(&a, (kind)kd, bw); /* warm-up */
    for (int r = 0; r < REPEATS; r++)
        for (int bw = 0; bw < 2; bw++) {
            for (int kd = 0; kd < nkind; kd++) t[bw][kd][r] = run(&a, (kind)kd, bw);
            rd[bw][r] = t[bw][DOC][r] / t[bw][DENSE][r], rp[bw][r] = t[bw][DOC][r] / t[bw][PLAIN][r];
            rb[bw][r] = nkind == NKIND ? t[bw][DOC_BLOCKED][r] / t[bw][DOC][r] : 0.0;
        }
    printf("  sum l^2 / S^2 = %.3f   64x64 tile pairs visited / dense causal = %.3f\n", ideal, tiles);
    for (int bw = 0; bw < 2; bw++) {
        printf("  %-8s", bw ? "fwd+bwd" : "fwd");
        for (int kd = 0; kd < nkind; kd++)
            printf("  %s %7.1f ms", kind_name[kd], 1e3 * bench_median(t[bw][kd], REPEATS));
        printf("   doc/dense %.3f  doc/plain %.3f", bench_median(rd[bw], REPEATS), bench_median(rp[bw], REPEATS));
        if (nkind == NKIND) printf("  fused doc speed-up %.2fx", bench_median(rb[bw], REPEATS));
        printf("\n");
    }
    free(doc), free(a.q), free(a.k), free(a.v), free(a.o), free(a.dout), free(a.dq), free(a.dk), free(a.dv);
}

int main(int argc, char **argv) {
    openblas_set_num_threads(1); /* the environment variable is read at load time; this is authoritative */
    const char *simd = getenv("BASP_SIMD");
    printf("OpenBLAS %s (core %s), 1 thread, BASP_SIMD=%s, attention %s, median of %d\n", openblas_get_config(),
           openblas_get_corename(), simd ? simd : "(widest)", kern_attention_impl_name(64), REPEATS);
    if (argc > 1)
        for (int i = 1; i < argc; i++) bench(atoll(argv[i]));
    else {
        bench(4096);
        bench(8192);
    }
    return 0;
}
