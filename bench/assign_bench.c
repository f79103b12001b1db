/* assign_bench.c — what layout_dyn_assign (common/cm_assign.c) costs per
 * call and how well it balances: the runtime calls it every micro-step on
 * every rank, so it must stay well under a millisecond at 1024 ranks.
 *
 * Pieces from a long-tailed mix: 60% 40..2000 tokens, 30% 2000..16000,
 * 10% 16000..T * the largest size, log-uniform within a band (seeded).
 * "drawn": drawn until the total reaches world * T, the last one cut
 * there (as the loader draws; the count is what it comes to).  "n = X":
 * exactly X drawn, then all scaled to total world * T (so the count is
 * fixed; the lengths keep their shape, not their scale).  Per case: the
 * median time per call over 201 calls, the imbalance (max over mean
 * per-rank cost, 1 is perfect), the max over a floor no assignment of
 * whole pieces beats (the mean, and the longest piece alone in its
 * cheapest group size), the groups and the pieces cut. */
#include "common/common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_time.h"

enum { MAXN = 8192, MAXW = 1024, REPS = 201 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static double unit(void) { return (double)(next() >> 11) * 0x1p-53; }
static int64_t log_uniform(int64_t lo, int64_t hi) {
    int64_t l = (int64_t)exp(log((double)lo) + unit() * (log((double)hi) - log((double)lo)));
    return l < lo ? lo : l > hi ? hi : l;
}
static int64_t mix_len(int64_t most) {
    uint64_t u = next() % 10;
    if (u < 6) return log_uniform(40, 2000);
    if (u < 9) return log_uniform(2000, 16000);
    return log_uniform(16000, most > 16000 ? most : 16000);
}

/* Pieces one token apart in the stream (the end-of-text token between). */
static void lay_out(layout_doc *p, int n) {
    for (int i = 0, src = 0; i < n; i++) p[i].src = src, src += (int)p[i].len + 1;
}

/* Drawn until the total is need, the last cut there. */
static int draw_until(layout_doc *p, int64_t need, int64_t most) {
    int n = 0;
    for (int64_t total = 0; total < need && n < MAXN; n++) {
        int64_t l = mix_len(most);
        if (total + l > need || n == MAXN - 1) l = need - total;
        p[n].len = l, total += l;
    }
    lay_out(p, n);
    return n;
}

/* Exactly n drawn, then scaled to total need: each floor(l * need / sum),
 * at least 1 and at most most, the tokens left over one at a time to the
 * pieces with room, from the first. */
static int draw_scaled(layout_doc *p, int n, int64_t need, int64_t most) {
    double sum = 0;
    for (int i = 0; i < n; i++) p[i].len = mix_len(most), sum += (double)p[i].len;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        int64_t l = (int64_t)((double)p[i].len * (double)need / sum);
        p[i].len = l < 1 ? 1 : l > most ? most : l;
        total += p[i].len;
    }
    for (int i = 0; total != need; i = (i + 1) % n) {
        if (total < need && p[i].len < most)
            p[i].len++, total++;
        else if (total > need && p[i].len > 1)
            p[i].len--, total--;
    }
    lay_out(p, n);
    return n;
}

static void run_case(const char *name, int world, const int *sizes, int nsizes, int n_fixed, double comm) {
    static layout_doc p[MAXN];
    static layout_dyn_group g[MAXW];
    static layout_slot s[MAXN + MAXW];
    const int64_t T = 4096, most = sizes[nsizes - 1] * T;
    int n = n_fixed ? draw_scaled(p, n_fixed, world * T, most) : draw_until(p, world * T, most);
    /* A Llama-3.2-1B layer's per-token work; comm about what an exchange
     * of its q, k, v and o costs at NVLink speed in the same units. */
    layout_dyn_shape sh = {world, 8, T, sizes, nsizes, layout_doc_linear(2048, 32, 8, 64, 8192), comm, NULL};
    double t[REPS];
    int ng = 0, ns = 0;
    for (int r = 0; r < REPS; r++) {
        double t0 = bench_now();
        ng = layout_dyn_assign(&sh, p, n, g, s, &ns);
        t[r] = bench_now() - t0;
    }
    if (ng < 0) {
        printf("%-34s failed\n", name);
        return;
    }
    /* A floor under the max per-rank cost: the mean (pieces whole), and
     * the dearest piece in the group size that makes it cheapest. */
    int64_t longest = 0;
    int big = 0;
    double total = 0, worst = 0, floor_piece = INFINITY;
    for (int i = 0; i < n; i++) {
        longest = p[i].len > longest ? p[i].len : longest;
        total += layout_doc_cost(p[i].len, sh.linear);
    }
    for (int i = 0; i < nsizes; i++) {
        double K = sizes[i];
        if (sizes[i] * T >= longest)
            floor_piece = fmin(floor_piece, layout_doc_cost(longest, sh.linear) / K + comm * (double)T * (K - 1) / K);
    }
    for (int i = 0; i < ng; i++) {
        big = g[i].size > big ? g[i].size : big;
        worst = g[i].cost > worst ? g[i].cost : worst;
    }
    printf("%-40s n %4d longest %7lld comm %4.0f: %.3f ms/call, imbalance %.3f, max / floor %.3f, %4d groups "
           "(largest %4d), %3d cut\n",
           name, n, (long long)longest, comm, 1e3 * bench_median(t, REPS), layout_dyn_imbalance(g, ng),
           worst / fmax(total / world, floor_piece), ng, big, ns - n);
}

int main(void) {
    int pow2[11], all16[16], pow2_8[4] = {1, 2, 4, 8};
    for (int i = 0; i < 11; i++) pow2[i] = 1 << i;
    for (int i = 0; i < 16; i++) all16[i] = i + 1;
    for (int c = 0; c < 2; c++) {
        double comm = c ? 5000 : 0;
        run_case("1024 ranks, sizes 1..1024 pow2, drawn", 1024, pow2, 11, 0, comm);
        run_case("1024 ranks, sizes 1..1024 pow2, n = 1024", 1024, pow2, 11, 1024, comm);
        run_case("1024 ranks, sizes 1..16, drawn", 1024, all16, 16, 0, comm);
        run_case("1024 ranks, sizes 1..16, n = 1024", 1024, all16, 16, 1024, comm);
        run_case("8 ranks, sizes 1,2,4,8, n = 64", 8, pow2_8, 4, 64, comm);
    }
    return 0;
}
