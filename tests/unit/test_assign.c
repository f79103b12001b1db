/* test_assign.c — layout_dyn_assign: the groups tile the ranks with allowed
 * sizes, each row exactly full, every token placed once, slots by (row,
 * col), groups off node boundaries; long pieces kept whole where they fit;
 * the same answer twice; the shapes of known cases; balance on a long tail
 * against a static baseline; every bad argument refused; and a seeded
 * sweep of random shapes. */
#include "common/common.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { MAXN = 2048, MAXW = 1024 };

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static int64_t uniform(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }

typedef struct result {
    int ng, ns;
    layout_dyn_group g[MAXW];
    layout_slot s[MAXN + MAXW];
} result;

static int run(const layout_dyn_shape *sh, const layout_doc *p, int n, result *r) {
    r->ns = -7;
    r->ng = layout_dyn_assign(sh, p, n, r->g, r->s, &r->ns);
    return r->ng;
}

static bool allowed(const layout_dyn_shape *sh, int k) {
    for (int i = 0; i < sh->nsizes; i++)
        if (sh->sizes[i] == k) return true;
    return false;
}

/* By src, for the every-token-once check. */
static int slot_src_cmp(const void *a, const void *b) {
    const layout_slot *x = a, *y = b;
    return (x->src > y->src) - (x->src < y->src);
}
static int doc_src_cmp(const void *a, const void *b) {
    const layout_doc *x = a, *y = b;
    return (x->src > y->src) - (x->src < y->src);
}

/* The invariants every answer keeps: groups numbered by first rank tile
 * the ranks with allowed sizes; each group's slots are its row, by column,
 * exactly full; its cost is what the slots cost; at most one cut per
 * group; every token of every piece placed exactly once (parts of a piece
 * consecutive).  nodes: also check that no group of at most node_size
 * ranks crosses a node boundary (where the shape lets one exist).  Pieces
 * must not overlap in the stream (the generators leave gaps). */
static void check_invariants(const layout_dyn_shape *sh, const layout_doc *p, int n, const result *r, bool nodes) {
    CHECK(r->ng >= 1 && r->ng <= sh->world);
    CHECK(r->ns >= n && r->ns <= n + r->ng);
    if (r->ng < 1 || r->ns < n || r->ns > n + r->ng) return;
    int rank = 0, at = 0;
    for (int g = 0; g < r->ng; g++) {
        const layout_dyn_group *G = &r->g[g];
        CHECK(G->first == rank && allowed(sh, G->size));
        CHECK(G->slot0 == at && G->nslots >= 1 && G->slot0 + G->nslots <= r->ns);
        rank += G->size, at += G->nslots;
        int64_t col = 0;
        double cost = 0;
        for (int i = G->slot0; i < G->slot0 + G->nslots && i < r->ns; i++) {
            CHECK(r->s[i].row == g && r->s[i].col == col && r->s[i].len >= 1);
            col += r->s[i].len;
            cost += layout_doc_cost(r->s[i].len, sh->linear);
        }
        CHECK(col == G->size * sh->T);
        double x = sh->comm * (double)sh->T * (G->size - 1) / G->size;
        for (int k = 0; sh->size_comm && k < sh->nsizes; k++)
            if (sh->sizes[k] == G->size) x = sh->size_comm[k] * (double)sh->T;
        CHECK_NEAR_FLOOR(G->cost, cost / G->size + x, 1);
        if (nodes && G->size <= sh->node_size)
            CHECK(G->first / sh->node_size == (G->first + G->size - 1) / sh->node_size);
    }
    CHECK(rank == sh->world && at == r->ns);
    static layout_slot bysrc[MAXN + MAXW];
    static layout_doc ps[MAXN];
    memcpy(bysrc, r->s, sizeof bysrc[0] * (size_t)r->ns);
    memcpy(ps, p, sizeof ps[0] * (size_t)n);
    qsort(bysrc, (size_t)r->ns, sizeof bysrc[0], slot_src_cmp);
    qsort(ps, (size_t)n, sizeof ps[0], doc_src_cmp);
    int k = 0;
    for (int i = 0; i < n; i++) {
        int64_t src = ps[i].src, end = ps[i].src + ps[i].len;
        while (src < end && k < r->ns && bysrc[k].src == src) src += bysrc[k++].len;
        CHECK(src == end);
    }
    CHECK(k == r->ns);
}

/* The slots that hold tokens of piece d. */
static int parts_of(const result *r, layout_doc d) {
    int c = 0;
    for (int i = 0; i < r->ns; i++) c += r->s[i].src >= d.src && r->s[i].src < d.src + d.len;
    return c;
}
/* The group whose row holds src. */
static int group_of(const result *r, int64_t src) {
    for (int i = 0; i < r->ns; i++)
        if (r->s[i].src == src) return (int)r->s[i].row;
    return -1;
}

/* Pieces back to back with a gap of one token (the end-of-text token),
 * lengths from len(), the last one cut so that the total is exactly need. */
static int make_pieces(layout_doc *p, int64_t need, int64_t (*len)(void)) {
    int n = 0;
    int64_t src = 0, total = 0;
    while (total < need && n < MAXN) {
        int64_t l = len();
        if (total + l > need || n == MAXN - 1) l = need - total;
        p[n++] = (layout_doc){src, l};
        src += l + 1, total += l;
    }
    return n;
}

static double unit(void) { return (double)(next() >> 11) * 0x1p-53; }
static int64_t log_uniform(int64_t lo, int64_t hi) {
    int64_t l = (int64_t)exp(log((double)lo) + unit() * (log((double)hi) - log((double)lo)));
    return l < lo ? lo : l > hi ? hi : l;
}

/* The long-tailed mix the benchmark draws: 60% 40..2000 tokens, 30%
 * 2000..16000, 10% 16000..tail_max, log-uniform within a band. */
static int64_t tail_max;
static int64_t tail_len(void) {
    uint64_t u = next() % 10;
    if (u < 6) return log_uniform(40, 2000);
    if (u < 9) return log_uniform(2000, 16000);
    return log_uniform(16000, tail_max);
}

static int64_t short_max;
static int64_t short_len(void) { return uniform(1, short_max); }

static void test_example(void) {
    /* 6 ranks of 4 tokens, pieces 12, 8 and 4, an exchange of 20 per token:
     * groups of 3, 2 and 1 in any order of the pieces, each piece whole in
     * its own group (per rank 48 + 40, 32 + 40, 16; one group of 6 would
     * cost 224 / 6 + 66.7 = 104 per rank).  Without an exchange the one
     * group of 6 is cheaper than the 3's 48, and is what it gives. */
    const int sizes[] = {1, 2, 3, 6};
    layout_dyn_shape sh = {6, 3, 4, sizes, 4, 0, 20, NULL};
    const int64_t lens[6][3] = {{12, 8, 4}, {12, 4, 8}, {8, 12, 4}, {8, 4, 12}, {4, 12, 8}, {4, 8, 12}};
    static result r;
    for (int o = 0; o < 6; o++) {
        layout_doc p[3];
        for (int i = 0, src = 0; i < 3; i++) p[i] = (layout_doc){src, lens[o][i]}, src += (int)lens[o][i] + 1;
        sh.comm = 20;
        CHECK(run(&sh, p, 3, &r) == 3);
        check_invariants(&sh, p, 3, &r, true);
        CHECK(r.ns == 3);
        for (int i = 0; i < 3; i++) {
            int g = group_of(&r, p[i].src);
            CHECK(g >= 0 && r.g[g].size * 4 == p[i].len);
        }
        sh.comm = 0;
        CHECK(run(&sh, p, 3, &r) == 1 && r.g[0].size == 6 && r.ns == 3);
        CHECK_NEAR_FLOOR(r.g[0].cost, 224.0 / 6, 1);
    }
}

/* Per-size exchange costs (size_comm): an exchange across nodes that costs
 * far more than one inside a node keeps the groups within a node, where a
 * flat comm, which saturates at comm * T, makes one group of the world. */
static void test_size_comm(void) {
    const int sizes[] = {1, 2, 4, 8};
    double x[] = {0, 2, 4, 400}; /* 8 ranks span both nodes of 4 */
    layout_dyn_shape sh = {8, 4, 8, sizes, 4, 0, 0, x};
    /* four pieces of 16 tokens: each needs 2 ranks of 8 */
    layout_doc p[4] = {{0, 16}, {20, 16}, {40, 16}, {60, 16}};
    static result r;
    CHECK(run(&sh, p, 4, &r) > 1);
    check_invariants(&sh, p, 4, &r, true);
    for (int g = 0; g < r.ng; g++) CHECK(r.g[g].size <= 4);
    /* the cost each group reports includes its own size's exchange */
    for (int g = 0; g < r.ng; g++) {
        double w = 0;
        for (int i = r.g[g].slot0; i < r.g[g].slot0 + r.g[g].nslots; i++) w += layout_doc_cost(r.s[i].len, 0);
        int k = 0;
        while (sizes[k] != r.g[g].size) k++;
        CHECK_NEAR_FLOOR(r.g[g].cost, w / r.g[g].size + x[k] * 8, 1);
    }
    x[3] = -1; /* a negative cost is refused */
    int ns;
    layout_dyn_group gs[8];
    layout_slot sl[16];
    CHECK(layout_dyn_assign(&sh, p, 4, gs, sl, &ns) == -1);
}

static void test_whole_world(void) {
    /* One piece of N * T: one group of N. */
    const int sizes[] = {1, 2, 4, 8}, sizes2[] = {1, 8};
    layout_dyn_shape sh = {8, 4, 16, sizes, 4, 50, 3, NULL};
    layout_doc p = {5, 128};
    static result r;
    CHECK(run(&sh, &p, 1, &r) == 1);
    check_invariants(&sh, &p, 1, &r, true);
    CHECK(r.g[0].first == 0 && r.g[0].size == 8 && r.ns == 1);
    CHECK_NEAR_FLOOR(r.g[0].cost, (128.0 * 128 + 50 * 128) / 8 + 3 * 16.0 * 7 / 8, 1);
    CHECK(layout_dyn_imbalance(r.g, r.ng) == 1.0);
    sh.sizes = sizes2, sh.nsizes = 2;
    CHECK(run(&sh, &p, 1, &r) == 1 && r.g[0].size == 8);
    /* world 1, T 1. */
    const int one[] = {1};
    layout_dyn_shape sh1 = {1, 1, 1, one, 1, 0, 0, NULL};
    layout_doc p1 = {0, 1};
    CHECK(run(&sh1, &p1, 1, &r) == 1 && r.ns == 1 && r.g[0].size == 1);
}

static void test_all_short(void) {
    /* Pieces of at most T on sizes {1, ...}: all groups of one rank, no
     * exchange (nothing else would be cheaper). */
    const int sizes[] = {1, 2, 4, 8, 16};
    layout_dyn_shape sh = {16, 4, 64, sizes, 5, 10, 1, NULL};
    static layout_doc p[MAXN];
    static result r;
    short_max = 64;
    for (int rep = 0; rep < 10; rep++) {
        int n = make_pieces(p, 16 * 64, short_len);
        CHECK(run(&sh, p, n, &r) == 16);
        check_invariants(&sh, p, n, &r, true);
        for (int g = 0; g < r.ng; g++) CHECK(r.g[g].size == 1);
    }
}

static void test_long_whole(void) {
    /* 5 ranks of 4 on sizes {1, 4}: 9 opens a group of 4 (room 7); no ranks
     * are left for a second group of 4, but 6 fits the first one's room
     * whole, so it must not be cut; 5 fits nowhere whole and is cut. */
    const int sizes[] = {1, 4};
    layout_dyn_shape sh = {5, 5, 4, sizes, 2, 0, 0, NULL};
    layout_doc p[3] = {{0, 5}, {10, 6}, {20, 9}};
    static result r;
    CHECK(run(&sh, p, 3, &r) == 2);
    check_invariants(&sh, p, 3, &r, true);
    CHECK(parts_of(&r, p[1]) == 1 && parts_of(&r, p[2]) == 1 && parts_of(&r, p[0]) == 2);
    CHECK(r.ns == 4 && group_of(&r, 10) == group_of(&r, 20));
    /* Sizes without 1: {2, 3} on 7 ranks of 4.  Pieces 10, 9 and 9 each
     * want 3 ranks, but after the 10's, a second group of 3 would leave
     * 7 - 3 - 3 = 1 rank no size can use: the 9s are cut into two groups
     * of 2 instead (3 + 2 + 2; never a group of 1). */
    const int s23[] = {2, 3};
    layout_dyn_shape sh2 = {7, 7, 4, s23, 2, 0, 0, NULL};
    layout_doc q[3] = {{0, 9}, {10, 9}, {20, 10}};
    CHECK(run(&sh2, q, 3, &r) == 3);
    check_invariants(&sh2, q, 3, &r, true);
    CHECK(r.g[0].size == 3 && r.g[1].size == 2 && r.g[2].size == 2);
    CHECK(parts_of(&r, q[2]) == 1 && r.ns == 5);
}

static void test_nodes(void) {
    /* Nodes of 3 ranks, groups 2, 2, 1, 1: back to back the second 2
     * would cross ranks 2 | 3; first-fit decreasing puts a 2 and a 1 on
     * each node. */
    const int s12[] = {1, 2};
    layout_dyn_shape sh = {6, 3, 4, s12, 2, 0, 0, NULL};
    layout_doc p[4] = {{0, 8}, {10, 8}, {20, 4}, {30, 4}};
    static result r;
    CHECK(run(&sh, p, 4, &r) == 4);
    check_invariants(&sh, p, 4, &r, true);
    CHECK(r.g[0].size == 2 && r.g[1].size == 1 && r.g[2].size == 2 && r.g[3].size == 1);
    /* Groups larger than a node take whole nodes first: on nodes of 2, the
     * group of 4 on nodes 0 and 1, the group of 2 on node 2. */
    const int s24[] = {2, 4};
    layout_dyn_shape sh2 = {6, 2, 4, s24, 2, 0, 50, NULL};
    layout_doc q[2] = {{0, 8}, {10, 16}};
    CHECK(run(&sh2, q, 2, &r) == 2);
    check_invariants(&sh2, q, 2, &r, true);
    CHECK(r.g[0].first == 0 && r.g[0].size == 4 && r.g[1].first == 4);
    /* Where first-fit decreasing finds no placement (nodes of 10, groups
     * 4, 4, 3, 3, 3, 3: it puts both 4s on the first node, though
     * 4 + 3 + 3 on each would do), the groups still tile the ranks. */
    const int s34[] = {3, 4};
    layout_dyn_shape sh3 = {20, 10, 4, s34, 2, 0, 0, NULL};
    layout_doc t[6] = {{0, 16}, {20, 16}, {40, 12}, {60, 12}, {80, 12}, {100, 12}};
    CHECK(run(&sh3, t, 6, &r) == 6);
    check_invariants(&sh3, t, 6, &r, false);
}

static void test_grow(void) {
    /* 8 ranks of 4 on sizes {1, 2, 4, 8}: one piece of 8 and 24 of one
     * token.  Its minimal group (2 ranks) would cost 64 / 2 = 32 per rank
     * against 4 for a rank of single tokens; the step waits for the
     * slowest, so the group grows while that lowers the maximum, here to
     * all 8 ranks: (64 + 24) / 8 = 11 per rank.  With an exchange of c per
     * token the sizes cost 32 + 2c, 18 + 3c and 11 + 3.5c: at c = 20 the
     * minimal group is the cheapest and stays. */
    const int sizes[] = {1, 2, 4, 8};
    layout_dyn_shape sh = {8, 8, 4, sizes, 4, 0, 0, NULL};
    static layout_doc p[25];
    p[0] = (layout_doc){0, 8};
    for (int i = 1; i < 25; i++) p[i] = (layout_doc){8 + 2 * i, 1};
    static result r;
    CHECK(run(&sh, p, 25, &r) == 1 && r.g[0].size == 8);
    check_invariants(&sh, p, 25, &r, true);
    CHECK_NEAR_FLOOR(r.g[0].cost, 11, 1);
    sh.comm = 20;
    CHECK(run(&sh, p, 25, &r) == 7);
    check_invariants(&sh, p, 25, &r, true);
    int g = group_of(&r, 0);
    CHECK(g >= 0 && r.g[g].size == 2 && r.g[g].nslots == 1);
    CHECK_NEAR_FLOOR(r.g[g].cost, 72, 1);
}

/* The static baseline: groups all of one size (the smallest allowed that
 * holds the longest piece and divides the world), the pieces concatenated
 * in draw order and cut at row ends.  *imb: its imbalance. */
static void baseline(const layout_dyn_shape *sh, const layout_doc *p, int n, double *imb) {
    int64_t longest = 0;
    for (int i = 0; i < n; i++) longest = p[i].len > longest ? p[i].len : longest;
    int K = sh->world;
    for (int i = sh->nsizes - 1; i >= 0; i--)
        if (sh->sizes[i] * sh->T >= longest && sh->world % sh->sizes[i] == 0) K = sh->sizes[i];
    int64_t row = K * sh->T, col = 0;
    double cost = 0, mx = 0, sum = 0;
    for (int i = 0; i < n; i++)
        for (int64_t left = p[i].len; left > 0;) {
            int64_t take = left < row - col ? left : row - col;
            cost += layout_doc_cost(take, sh->linear), col += take, left -= take;
            if (col == row) {
                double c = cost / K + sh->comm * (double)sh->T * (K - 1) / K;
                mx = c > mx ? c : mx, sum += c, col = 0, cost = 0;
            }
        }
    *imb = mx * (sh->world / K) / sum;
}

/* reps seeded cases of the long tail (pieces up to tail * T) on 64 ranks of
 * 4096 tokens, the exchange cycling through comms: every one within 1.25
 * of perfect balance and no worse than the static baseline.  The baseline
 * cuts documents at row ends, which lowers their cost (and is what the
 * dynamic groups are for avoiding), so only the balance is compared. */
static void check_balance(const char *what, int nsizes, int64_t tail, const double *comms, int reps) {
    const int sizes[] = {1, 2, 4, 8, 16, 32, 64};
    layout_dyn_shape sh = {64, 8, 4096, sizes, nsizes, 100, 0, NULL};
    static layout_doc p[MAXN];
    static result r;
    double worst = 0, sum = 0, base_sum = 0;
    tail_max = tail * 4096;
    for (int rep = 0; rep < reps; rep++) {
        sh.comm = comms[rep % 3];
        int n = make_pieces(p, 64 * 4096, tail_len);
        CHECK(run(&sh, p, n, &r) > 0);
        check_invariants(&sh, p, n, &r, true);
        double imb = layout_dyn_imbalance(r.g, r.ng), bimb;
        baseline(&sh, p, n, &bimb);
        CHECK(imb >= 1 - 1e-12 && imb <= 1.25 && imb <= bimb);
        worst = imb > worst ? imb : worst, sum += imb, base_sum += bimb;
    }
    printf("%s: imbalance mean %.3f (worst %.3f), static baseline %.3f\n", what, sum / reps, worst, base_sum / reps);
}

static void test_balance(void) {
    /* Groups of at most 16 ranks, pieces up to 4 T: the long pieces' groups
     * must be sized and shared to balance. */
    const double comms[3] = {0, 2000, 20000}, small[3] = {0, 200, 0};
    check_balance("long tail to 4 T, sizes to 16", 5, 4, comms, 30);
    /* Sizes up to the world, pieces up to 16 T and to 64 T. */
    check_balance("long tail to 16 T, sizes to 64", 7, 16, small, 20);
    check_balance("long tail to 64 T, sizes to 64", 7, 64, small, 20);
    /* Short pieces only (on one-rank groups): against concat-and-chunk of
     * the same rows, with the same cost model, as layout_pack balances. */
    const int one[] = {1};
    layout_dyn_shape sh = {64, 8, 4096, one, 1, 100, 0, NULL};
    static layout_doc p[MAXN];
    static result r;
    short_max = 1024;
    for (int rep = 0; rep < 10; rep++) {
        int n = make_pieces(p, 64 * 4096, short_len);
        CHECK(run(&sh, p, n, &r) == 64);
        check_invariants(&sh, p, n, &r, true);
        double imb = layout_dyn_imbalance(r.g, r.ng), bimb;
        baseline(&sh, p, n, &bimb);
        CHECK(imb <= 1.02 && imb <= bimb);
    }
}

static void test_deterministic(void) {
    /* The same answer twice, and for the pieces in another order. */
    const int sizes[] = {1, 2, 4, 8, 16, 32, 64};
    layout_dyn_shape sh = {64, 8, 1024, sizes, 7, 30, 10, NULL};
    static layout_doc p[MAXN], q[MAXN];
    static result a, b;
    tail_max = 64 * 1024;
    int n = make_pieces(p, 64 * 1024, tail_len);
    memcpy(q, p, sizeof p[0] * (size_t)n);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(next() % (uint64_t)(i + 1));
        layout_doc t = q[i];
        q[i] = q[j], q[j] = t;
    }
    run(&sh, p, n, &a);
    for (int t = 0; t < 2; t++) {
        memset(&b, 0x5a, sizeof b);
        run(&sh, t ? q : p, n, &b);
        CHECK(a.ng == b.ng && a.ns == b.ns);
        CHECK(!memcmp(a.g, b.g, sizeof a.g[0] * (size_t)a.ng) && !memcmp(a.s, b.s, sizeof a.s[0] * (size_t)a.ns));
    }
    check_invariants(&sh, p, n, &a, true);
}

static void test_bad_args(void) {
    const int sizes[] = {1, 2, 4}, down[] = {2, 1}, dup[] = {1, 1}, zero[] = {0, 1}, big[] = {1, 8}, s24[] = {2, 4};
    layout_dyn_shape sh = {4, 4, 4, sizes, 3, 0, 0, NULL}, b;
    layout_doc p[2] = {{0, 8}, {9, 8}};
    layout_dyn_group g[8];
    layout_slot s[16];
    int ns = 0;
    CHECK(layout_dyn_assign(&sh, p, 2, g, s, &ns) == 2 && ns == 2); /* the good call the others break */
    CHECK(layout_dyn_assign(&sh, p, -1, g, s, &ns) == -1);
    CHECK(layout_dyn_assign(NULL, p, 2, g, s, &ns) == -1);
    CHECK(layout_dyn_assign(&sh, NULL, 2, g, s, &ns) == -1);
    CHECK(layout_dyn_assign(&sh, p, 2, NULL, s, &ns) == -1);
    CHECK(layout_dyn_assign(&sh, p, 2, g, NULL, &ns) == -1);
    CHECK(layout_dyn_assign(&sh, p, 2, g, s, NULL) == -1);
    CHECK(layout_dyn_assign(&sh, p, 0, g, s, &ns) == -1 && ns == 0); /* no tokens */
    b = sh, b.T = 0;
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    b = sh, b.world = 0;
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    b = sh, b.node_size = 0;
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    b = sh, b.sizes = NULL;
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    b = sh, b.nsizes = 0;
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    b = sh, b.sizes = down, b.nsizes = 2;
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    b = sh, b.sizes = dup, b.nsizes = 2;
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    b = sh, b.sizes = zero, b.nsizes = 2;
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    b = sh, b.sizes = big, b.nsizes = 2; /* 8 > world */
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    b = sh, b.linear = -1;
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    b = sh, b.comm = NAN;
    CHECK(layout_dyn_assign(&b, p, 2, g, s, &ns) == -1);
    /* Sizes {2, 4} cannot split 5 ranks. */
    layout_doc p5[1] = {{0, 20}};
    b = (layout_dyn_shape){5, 5, 4, s24, 2, 0, 0, NULL};
    CHECK(layout_dyn_assign(&b, p5, 1, g, s, &ns) == -1);
    /* Pieces: one of 0 tokens, one longer than 4 * T, too few, too many. */
    layout_doc bad[3] = {{0, 8}, {9, 8}, {20, 0}};
    CHECK(layout_dyn_assign(&sh, bad, 3, g, s, &ns) == -1);
    const int s12[] = {1, 2};
    layout_doc longer[1] = {{0, 16}}; /* the right total, but 16 > 2 * T */
    b = sh, b.sizes = s12, b.nsizes = 2;
    CHECK(layout_dyn_assign(&b, longer, 1, g, s, &ns) == -1);
    layout_doc few[2] = {{0, 8}, {9, 7}}, many[2] = {{0, 8}, {9, 9}};
    CHECK(layout_dyn_assign(&sh, few, 2, g, s, &ns) == -1);
    CHECK(layout_dyn_assign(&sh, many, 2, g, s, &ns) == -1);
    CHECK(layout_dyn_imbalance(NULL, 1) == 0 && layout_dyn_imbalance(g, 0) == 0);
}

/* Random shapes: world 1..64, node_size 1..8, sizes {1} plus a random
 * subset (or, every fourth case, without 1 where the sizes still split the
 * world), T 1..64, lengths short and long.  The invariants everywhere;
 * off node boundaries where sizes and node size are powers of two (then
 * a placement exists and first-fit decreasing finds it); long pieces never
 * cut when every one can have its own group; all groups of one rank when
 * no piece is longer than T; the same answer twice. */
static int64_t sweep_T, sweep_max;
static int64_t sweep_len(void) { return next() % 3 ? uniform(1, sweep_T) : uniform(1, sweep_max); }

static bool pow2(int x) { return (x & (x - 1)) == 0; }

static void test_sweep(void) {
    static layout_doc p[MAXN];
    static result r, r2;
    int cases = 0;
    while (cases < 400) {
        int world = (int)uniform(1, 64), sizes[64], ns = 0;
        bool no_one = next() % 4 == 0, all_pow2 = true;
        for (int k = 1; k <= world; k++)
            if ((k == 1 && !no_one) || (k > 1 && next() % 4 == 0) || k == world) sizes[ns++] = k;
        layout_dyn_shape sh = {world, (int)uniform(1, 8), uniform(1, 64), sizes, ns, (double)uniform(0, 100), 0, NULL};
        sh.comm = next() % 2 ? (double)uniform(0, 3 * sh.T) : 0;
        for (int i = 0; i < ns; i++) all_pow2 = all_pow2 && pow2(sizes[i]);
        sweep_T = sh.T, sweep_max = sizes[ns - 1] * sh.T;
        int n = make_pieces(p, world * sh.T, sweep_len);
        int ng = run(&sh, p, n, &r);
        if (ng < 0) { /* only sizes that cannot split the world are refused */
            CHECK(no_one);
            continue;
        }
        cases++;
        check_invariants(&sh, p, n, &r, all_pow2 && pow2(sh.node_size));
        run(&sh, p, n, &r2);
        CHECK(r2.ng == r.ng && r2.ns == r.ns && !memcmp(r.s, r2.s, sizeof r.s[0] * (size_t)r.ns));
        int need = 0;
        int64_t longest = 0;
        for (int i = 0; i < n; i++) {
            longest = p[i].len > longest ? p[i].len : longest;
            if (p[i].len > sh.T)
                for (int k = 0; k < ns; k++)
                    if (sizes[k] * sh.T >= p[i].len) {
                        need += sizes[k];
                        break;
                    }
        }
        if (sizes[0] == 1 && need <= world)
            for (int i = 0; i < n; i++)
                if (p[i].len > sh.T) CHECK(parts_of(&r, p[i]) == 1);
        if (sizes[0] == 1 && longest <= sh.T) CHECK(r.ng == world);
    }
}

int main(void) {
    test_size_comm();
    test_example();
    test_whole_world();
    test_all_short();
    test_long_whole();
    test_nodes();
    test_grow();
    test_balance();
    test_deterministic();
    test_bad_args();
    test_sweep();
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
