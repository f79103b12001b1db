/* sequence.c — the three sequence families' own strategy rows: how the K
 * ranks of a batch-aware group share a sequence (Ulysses, ring, hybrid),
 * their legality rules and their choices for one G.  Written against
 * api/basp_pass.h only and registered with basp_register_strategy, as a
 * plugin's strategies are; the rows have no spec key (key NULL: a family's
 * own), so basp registers them first and no plugin can.  The passes that
 * build them (ulysses, ring) are passes/'s; the rules every layout shares
 * (G >= 1, G | N, G | B) are layout/'s.  layout/README.md has the table. */
#include "strategies.h"

#include <inttypes.h>
#include <stdio.h>

static int64_t kv_heads(const basp_layout_dims *d) { return d->Hk > 0 ? d->Hk : d->H; }

/* K = N/G, the ranks that share one sequence (0 when G does not divide N). */
static int64_t group_size(const basp_layout_dims *d, const basp_layout_choice *c) {
    return c->groups >= 1 && d->N % c->groups == 0 ? d->N / c->groups : 0;
}

/* "N=8" for plain Ulysses, "group size K=N/G=4" with groups: how the
 * reasons name the split. */
static const char *split_name(const basp_layout_dims *d, const basp_layout_choice *c, char *buf, size_t n) {
    if (c->groups == 1)
        snprintf(buf, n, "N=%" PRId64, d->N);
    else
        snprintf(buf, n, "group size K=N/G=%" PRId64, group_size(d, c));
    return buf;
}

/* ---- the rules -------------------------------------------------------------------- */
/* Ulysses over K: whole heads per rank (or an uneven head split), kv heads
 * split or shared evenly, whole tokens per rank.  K = 1 is pure data
 * parallelism. */
static const char *ulysses_legal(const basp_layout_dims *d, const basp_layout_choice *c, char *fix, size_t nfix) {
    int64_t K = group_size(d, c), H = d->H, Hk = kv_heads(d), S = d->S;
    char what[64], hint[224];
    split_name(d, c, what, sizeof what);
    bool uneven = basp_layout_heads_uneven(d, K);
    if (H % K && !uneven) {
        snprintf(hint, sizeof hint,
                 "each of the %" PRId64 " ranks sharing a sequence holds whole heads: heads "
                 "must be a multiple of %" PRId64 ", or kv_heads at least %" PRId64 " for an uneven split",
                 K, K, K);
        return basp_layout_reason(fix, nfix, hint, "heads (%" PRId64 ") not divisible by %s", H, what);
    }
    if (Hk % K && K % Hk && !uneven) {
        snprintf(hint, sizeof hint,
                 "KV heads are split when kv_heads is a multiple of %" PRId64 " or at least %" PRId64
                 " (uneven), or shared when kv_heads divides %" PRId64,
                 K, K, K);
        return basp_layout_reason(fix, nfix, hint, "kv_heads (%" PRId64 ") cannot be split over %s", Hk, what);
    }
    if (S % K) {
        snprintf(hint, sizeof hint,
                 "each rank holds seq_len/%" PRId64 " tokens of a sequence: make seq_len a "
                 "multiple of %" PRId64,
                 K, K);
        return basp_layout_reason(fix, nfix, hint, "seq_len (%" PRId64 ") not divisible by %s", S, what);
    }
    return NULL;
}

/* The causal, load-balanced zig-zag order cuts each sequence into 2R
 * chunks: rank r holds chunks r and 2R-1-r. */
static const char *zigzag(const basp_layout_dims *d, int64_t R, char *fix, size_t nfix) {
    if (d->S % (2 * R))
        return basp_layout_reason(fix, nfix, "ring attention's zig-zag order cuts each sequence into 2R chunks",
                                  "seq_len (%" PRId64 ") not divisible by 2*R=%" PRId64, d->S, 2 * R);
    return NULL;
}

static const char *ring_legal(const basp_layout_dims *d, const basp_layout_choice *c, char *fix, size_t nfix) {
    int64_t K = group_size(d, c);
    if (K < 2)
        return basp_layout_reason(fix, nfix, "a ring needs at least 2 ranks per group: fewer batch-aware groups",
                                  "ring attention needs K >= 2 ranks per group (K=%" PRId64 ")", K);
    if (c->ring_degree != K)
        return basp_layout_reason(fix, nfix, "sequence ring uses the whole group; use sequence hybrid for R < K",
                                  "ring_degree %d is not the group size K=%" PRId64, c->ring_degree, K);
    if (d->S % K)
        return basp_layout_reason(fix, nfix, "each rank holds seq_len/K tokens of a sequence",
                                  "seq_len (%" PRId64 ") not divisible by K=%" PRId64, d->S, K);
    return zigzag(d, K, fix, nfix);
}

/* Hybrid: U = K/R Ulysses ranks exchange heads, R ring ranks pass kv. */
static const char *hybrid_legal(const basp_layout_dims *d, const basp_layout_choice *c, char *fix, size_t nfix) {
    int64_t K = group_size(d, c), R = c->ring_degree, H = d->H, Hk = kv_heads(d);
    if (R < 2 || R >= K)
        return basp_layout_reason(fix, nfix, "hybrid needs 2 <= ring_degree < K; R = K is sequence ring",
                                  "ring_degree %" PRId64 " must satisfy 2 <= R < K=%" PRId64, R, K);
    if (K % R)
        return basp_layout_reason(fix, nfix, "R ring ranks times U Ulysses ranks make the group",
                                  "ring_degree %" PRId64 " does not divide the group size K=%" PRId64, R, K);
    int64_t U = K / R;
    if (H % U)
        return basp_layout_reason(fix, nfix, "each Ulysses rank holds whole heads",
                                  "heads (%" PRId64 ") not divisible by the U=K/R=%" PRId64 " Ulysses ranks", H, U);
    if (Hk % U && U % Hk)
        return basp_layout_reason(fix, nfix, "kv heads are split (a multiple of U) or shared (a divisor of U)",
                                  "kv_heads (%" PRId64 ") cannot be split over the U=K/R=%" PRId64 " Ulysses ranks", Hk,
                                  U);
    if (d->S % K)
        return basp_layout_reason(fix, nfix, "each rank holds seq_len/K tokens of a sequence",
                                  "seq_len (%" PRId64 ") not divisible by K=%" PRId64, d->S, K);
    return zigzag(d, R, fix, nfix);
}

/* ---- the choices for G groups ------------------------------------------------------- */
static int put(basp_layout_choice *out, int n, int max, basp_layout_choice c) {
    if (n < max) out[n] = c;
    return n + 1;
}

static int ulysses_cands(const basp_layout_dims *d, int G, basp_layout_choice *out, int max) {
    return put(out, 0, max, (basp_layout_choice){.groups = G, .ring_degree = 1});
}

static int ring_cands(const basp_layout_dims *d, int G, basp_layout_choice *out, int max) {
    return put(out, 0, max, (basp_layout_choice){.groups = G, .ring_degree = (int)(d->N / G)});
}

/* Every ring degree R with 1 < R < K that divides K, ascending. */
static int hybrid_cands(const basp_layout_dims *d, int G, basp_layout_choice *out, int max) {
    int n = 0, K = (int)(d->N / G);
    for (int R = 2; R < K; R++)
        if (K % R == 0) n = put(out, n, max, (basp_layout_choice){.groups = G, .ring_degree = R});
    return n;
}

/* ---- registration ------------------------------------------------------------------ */
static bool sequence_register(void) {
    /* in layout_seq's order: a family's row is its index in the registry */
    static const basp_strategy families[] = {
        {.name = "ulysses",
         .family = "ulysses",
         .legal = ulysses_legal,
         .candidates = ulysses_cands,
         .passes = "ulysses"},
        {.name = "ring", .family = "ring", .legal = ring_legal, .candidates = ring_cands, .passes = "ring"},
        {.name = "hybrid", .family = "hybrid", .legal = hybrid_legal, .candidates = hybrid_cands, .passes = "ring"},
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (!basp_register_strategy(&families[i])) return false;
    return true;
}

basp_plugin_info basp_strategies_sequence(void) {
    return (basp_plugin_info){BASP_PASS_API_VERSION, "sequence", BASP_VERSION, sequence_register};
}
