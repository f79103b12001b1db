/* layout.c — the legality rules of every sequence-parallel layout, the
 * strategy table and the enumeration of legal choices (see layout.h and
 * layout/README.md). */
#include "layout.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reasons live in a per-thread buffer so callers may keep one while they
 * print it, and so threads do not share it. */
static _Thread_local char why[224];

const char *layout_reason(char *fix, size_t nfix, const char *hint, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (fix && nfix)
        snprintf(fix, nfix, "%s", hint ? hint : "");
    return why;
}

static int64_t kv_heads(const layout_dims *d) { return d->Hk > 0 ? d->Hk : d->H; }

int64_t layout_group_size(const layout_dims *d, const layout_choice *c)
{
    return c->groups >= 1 && d->N % c->groups == 0 ? d->N / c->groups : 0;
}

layout_choice layout_ulysses(int groups)
{
    return (layout_choice){.seq = LAYOUT_ULYSSES, .ring_degree = 1, .variant = NULL, .groups = groups};
}

bool layout_heads_uneven(const layout_dims *d, int64_t K)
{
    int64_t H = d->H, Hk = kv_heads(d);
    return K >= 1 && Hk >= K && Hk % K != 0 && Hk > 0 && H % Hk == 0;
}

/* "N=8" for plain Ulysses, "group size K=N/G=4" with groups: how the
 * reasons name the split. */
static const char *split_name(const layout_dims *d, const layout_choice *c, char *buf, size_t n)
{
    int64_t K = layout_group_size(d, c);
    if (c->groups == 1)
        snprintf(buf, n, "N=%" PRId64, d->N);
    else
        snprintf(buf, n, "group size K=N/G=%" PRId64, K);
    return buf;
}

/* ---- the rules of each strategy -------------------------------------------- */
/* Ulysses over K: whole heads per rank (or an uneven head split), kv heads
 * split or shared evenly, whole tokens per rank.  K = 1 is pure data
 * parallelism. */
static const char *ulysses_legal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix)
{
    int64_t K = layout_group_size(d, c), H = d->H, Hk = kv_heads(d), S = d->S;
    char what[64], hint[224];
    split_name(d, c, what, sizeof what);
    bool uneven = layout_heads_uneven(d, K);
    if (H % K && !uneven) {
        snprintf(hint, sizeof hint, "each of the %" PRId64 " ranks sharing a sequence holds whole heads: heads "
                 "must be a multiple of %" PRId64 ", or kv_heads at least %" PRId64 " for an uneven split", K, K, K);
        return layout_reason(fix, nfix, hint, "heads (%" PRId64 ") not divisible by %s", H, what);
    }
    if (Hk % K && K % Hk && !uneven) {
        snprintf(hint, sizeof hint, "KV heads are split when kv_heads is a multiple of %" PRId64 " or at least %"
                 PRId64 " (uneven), or shared when kv_heads divides %" PRId64, K, K, K);
        return layout_reason(fix, nfix, hint, "kv_heads (%" PRId64 ") cannot be split over %s", Hk, what);
    }
    if (S % K) {
        snprintf(hint, sizeof hint, "each rank holds seq_len/%" PRId64 " tokens of a sequence: make seq_len a "
                 "multiple of %" PRId64, K, K);
        return layout_reason(fix, nfix, hint, "seq_len (%" PRId64 ") not divisible by %s", S, what);
    }
    return NULL;
}

/* The causal, load-balanced zig-zag order cuts each sequence into 2R
 * chunks: rank r holds chunks r and 2R-1-r. */
static const char *zigzag(const layout_dims *d, int64_t R, char *fix, size_t nfix)
{
    if (d->S % (2 * R))
        return layout_reason(fix, nfix, "ring attention's zig-zag order cuts each sequence into 2R chunks",
                             "seq_len (%" PRId64 ") not divisible by 2*R=%" PRId64, d->S, 2 * R);
    return NULL;
}

static const char *ring_legal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix)
{
    int64_t K = layout_group_size(d, c);
    if (K < 2)
        return layout_reason(fix, nfix, "a ring needs at least 2 ranks per group: fewer batch-aware groups",
                             "ring attention needs K >= 2 ranks per group (K=%" PRId64 ")", K);
    if (c->ring_degree != K)
        return layout_reason(fix, nfix, "sequence ring uses the whole group; use sequence hybrid for R < K",
                             "ring_degree %d is not the group size K=%" PRId64, c->ring_degree, K);
    if (d->S % K)
        return layout_reason(fix, nfix, "each rank holds seq_len/K tokens of a sequence",
                             "seq_len (%" PRId64 ") not divisible by K=%" PRId64, d->S, K);
    return zigzag(d, K, fix, nfix);
}

/* Hybrid: U = K/R Ulysses ranks exchange heads, R ring ranks pass kv. */
static const char *hybrid_legal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix)
{
    int64_t K = layout_group_size(d, c), R = c->ring_degree, H = d->H, Hk = kv_heads(d);
    if (R < 2 || R >= K)
        return layout_reason(fix, nfix, "hybrid needs 2 <= ring_degree < K; R = K is sequence ring",
                             "ring_degree %" PRId64 " must satisfy 2 <= R < K=%" PRId64, R, K);
    if (K % R)
        return layout_reason(fix, nfix, "R ring ranks times U Ulysses ranks make the group",
                             "ring_degree %" PRId64 " does not divide the group size K=%" PRId64, R, K);
    int64_t U = K / R;
    if (H % U)
        return layout_reason(fix, nfix, "each Ulysses rank holds whole heads",
                             "heads (%" PRId64 ") not divisible by the U=K/R=%" PRId64 " Ulysses ranks", H, U);
    if (Hk % U && U % Hk)
        return layout_reason(fix, nfix, "kv heads are split (a multiple of U) or shared (a divisor of U)",
                             "kv_heads (%" PRId64 ") cannot be split over the U=K/R=%" PRId64 " Ulysses ranks", Hk, U);
    if (d->S % K)
        return layout_reason(fix, nfix, "each rank holds seq_len/K tokens of a sequence",
                             "seq_len (%" PRId64 ") not divisible by K=%" PRId64, d->S, K);
    return zigzag(d, R, fix, nfix);
}

/* ---- candidates per strategy ------------------------------------------------ */
static int put(layout_choice *out, int n, int max, layout_choice c)
{
    if (n < max)
        out[n] = c;
    return n + 1;
}

static int ulysses_cands(const layout_strategy *self, const layout_dims *d, int G, layout_choice *out, int max)
{
    return put(out, 0, max, layout_ulysses(G));
}

static int ring_cands(const layout_strategy *self, const layout_dims *d, int G, layout_choice *out, int max)
{
    layout_choice c = {.seq = LAYOUT_RING, .ring_degree = (int)(d->N / G), .variant = NULL, .groups = G};
    return put(out, 0, max, c);
}

static int hybrid_cands(const layout_strategy *self, const layout_dims *d, int G, layout_choice *out, int max)
{
    int n = 0, K = (int)(d->N / G);
    for (int R = 2; R < K; R++)
        if (K % R == 0)
            n = put(out, n, max, (layout_choice){.seq = LAYOUT_HYBRID, .ring_degree = R, .groups = G});
    return n;
}

/* ---- the registry ---------------------------------------------------------------- */
/* The families' own rows, then the variants in registration order.  A
 * fixed array: rows never move, so a layout_choice may point at one. */
static layout_strategy registry[LAYOUT_MAX_STRATEGIES] = {
    {.name = "ulysses", .seq = LAYOUT_ULYSSES, .legal = ulysses_legal, .candidates = ulysses_cands,
     .passes = "ulysses", .owner = "built in"},
    {.name = "ring", .seq = LAYOUT_RING, .legal = ring_legal, .candidates = ring_cands,
     .passes = "ring", .owner = "built in"},
    {.name = "hybrid", .seq = LAYOUT_HYBRID, .legal = hybrid_legal, .candidates = hybrid_cands, .passes = "ring",
     .owner = "built in"},
};
enum { NFAMILIES = 3 };
static int nregistry = NFAMILIES;

const layout_strategy *layout_strategies(int *n)
{
    if (n)
        *n = nregistry;
    return registry;
}

bool layout_variant_key(const char *key) { return key && !strcmp(key, "a2a"); }

const layout_strategy *layout_strategy_of(const layout_choice *c)
{
    if (c->variant)
        return c->variant;
    return (unsigned)c->seq < NFAMILIES ? &registry[c->seq] : NULL;
}

const layout_strategy *layout_variant_find(const char *key, const char *word)
{
    for (int i = NFAMILIES; i < nregistry && key && word; i++)
        if (!strcmp(registry[i].key, key) && !strcmp(registry[i].word, word))
            return &registry[i];
    return NULL;
}

const layout_strategy *layout_strategy_named(const char *name)
{
    for (int i = 0; i < nregistry && name; i++)
        if (!strcmp(registry[i].name, name))
            return &registry[i];
    return NULL;
}

static bool bad_row(char *err, size_t nerr, const char *fmt, const char *what)
{
    snprintf(err, nerr, fmt, what);
    return false;
}

bool layout_strategy_register(const layout_strategy *s, char *err, size_t nerr)
{
    char tmp[8];
    if (!err)
        err = tmp, nerr = sizeof tmp;
    if (!s || !s->name || !*s->name || !s->legal || !s->candidates || !s->passes || !*s->passes)
        return bad_row(err, nerr, "strategy '%s': name, legal, candidates and passes are required",
                       s && s->name ? s->name : "");
    if ((unsigned)s->seq >= NFAMILIES)
        return bad_row(err, nerr, "strategy '%s': seq must be ulysses, ring or hybrid", s->name);
    if (!s->key || !s->word || !*s->word)
        return bad_row(err, nerr, "strategy '%s': a variant needs the spec words (key and word) that select it",
                       s->name);
    if (!layout_variant_key(s->key))
        return bad_row(err, nerr, "strategy '%s': a variant is selected by the spec key a2a", s->name);
    if (strlen(s->word) >= 32 || strlen(s->name) >= 48)
        return bad_row(err, nerr, "strategy '%s': the name is at most 47 characters, the word 31", s->name);
    for (const char *t = s->title; t && *t; t++)
        if (*t < 32 || *t > 126 || *t == '"' || *t == '\\')
            return bad_row(err, nerr, "strategy '%s': the title is printable ASCII without quotes or backslashes",
                           s->name);
    if (!strcmp(s->word, "flat") || !strcmp(s->word, "auto"))
        return bad_row(err, nerr, "strategy '%s': the words flat and auto are the spec's own", s->name);
    if (layout_strategy_named(s->name))
        return bad_row(err, nerr, "a strategy named '%s' is already registered", s->name);
    for (int i = NFAMILIES; i < nregistry; i++)
        if (!strcmp(registry[i].key, s->key) && !strcmp(registry[i].word, s->word)) {
            snprintf(err, nerr, "strategy '%s': '%s %s' already selects strategy '%s'", s->name, s->key, s->word,
                     registry[i].name);
            return false;
        }
    if (nregistry >= LAYOUT_MAX_STRATEGIES)
        return bad_row(err, nerr, "strategy '%s': the registry is full", s->name);
    registry[nregistry] = *s;
    if (!registry[nregistry].owner)
        registry[nregistry].owner = "built in";
    nregistry++;
    return true;
}

const char *layout_family_legal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix)
{
    return (unsigned)c->seq < NFAMILIES ? registry[c->seq].legal(d, c, fix, nfix)
                                        : layout_reason(fix, nfix, NULL, "no such layout");
}

/* The rules every layout shares: whole groups of ranks, whole sequences
 * per group. */
static const char *common_illegal(const layout_dims *d, int64_t G, char *fix, size_t nfix)
{
    char hint[160];
    if (G < 1) {
        snprintf(hint, sizeof hint, "G = 1 is plain Ulysses; larger G must divide N=%" PRId64, d->N);
        return layout_reason(fix, nfix, hint, "the number of groups must be at least 1, not %" PRId64, G);
    }
    if (d->N % G)
        return layout_reason(fix, nfix, "G must divide the world size N = nodes*devices_per_node",
                             "N=%" PRId64 " not divisible by G=%" PRId64, d->N, G);
    if (d->B % G) {
        snprintf(hint, sizeof hint, "each group needs whole sequences: make micro_batch a multiple of %" PRId64, G);
        return layout_reason(fix, nfix, hint, "micro_batch (%" PRId64 ") not divisible by G=%" PRId64, d->B, G);
    }
    return NULL;
}

const char *layout_illegal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix)
{
    const char *bad = common_illegal(d, c->groups, fix, nfix);
    if (bad)
        return bad;
    const layout_strategy *s = layout_strategy_of(c);
    if (!s)
        return layout_reason(fix, nfix, NULL, "no such layout");
    if (c->variant)
        return s->legal(d, c, fix, nfix);
    if (c->seq == LAYOUT_ULYSSES && c->ring_degree > 1)
        return layout_reason(fix, nfix, "ring_degree applies to sequence hybrid only",
                             "ring_degree %d with sequence ulysses", c->ring_degree);
    return s->legal(d, c, fix, nfix);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Divisors of N ascending (N <= 2^24 has fewer than 1024). */
static int divisors(int64_t N, int64_t *out, int max)
{
    int n = 0;
    for (int64_t k = 1; k * k <= N && n + 2 <= max; k++) {
        if (N % k)
            continue;
        out[n++] = k;
        if (k != N / k)
            out[n++] = N / k;
    }
    qsort(out, (size_t)n, sizeof *out, cmp_i64);
    return n;
}

int layout_candidates(const layout_dims *d, layout_choice *out, int max)
{
    int64_t g[1024];
    int ng = divisors(d->N, g, 1024), n = 0;
    for (int i = 0; i < ng; i++) {
        if (common_illegal(d, g[i], NULL, 0))
            continue;
        /* each family, then its variants: the order of the planner's table */
        for (int f = 0; f < NFAMILIES; f++)
            for (int s = 0; s < nregistry; s++) {
                if (s != f && (s < NFAMILIES || registry[s].seq != (layout_seq)f))
                    continue;
                layout_choice cs[1024];
                int nc = registry[s].candidates(&registry[s], d, (int)g[i], cs, 1024);
                for (int k = 0; k < nc && k < 1024; k++)
                    if (!layout_illegal(d, &cs[k], NULL, 0))
                        n = put(out, n, max, cs[k]);
            }
    }
    return n;
}

int layout_legal_groups(const layout_dims *d, const layout_choice *like, int64_t *out, int max)
{
    int64_t g[1024];
    int ng = divisors(d->N, g, 1024), n = 0;
    for (int i = 0; i < ng; i++) {
        layout_choice c = *like;
        c.groups = (int)g[i];
        if (c.seq == LAYOUT_RING)
            c.ring_degree = (int)(d->N / g[i]);
        if (layout_illegal(d, &c, NULL, 0))
            continue;
        if (n < max)
            out[n] = g[i];
        n++;
    }
    return n;
}

/* ---- names -------------------------------------------------------------------- */
static const char *const seq_names[] = {"ulysses", "ring", "hybrid"};

const char *layout_seq_name(layout_seq s) { return (unsigned)s < 3 ? seq_names[s] : "?"; }

bool layout_seq_parse(const char *name, layout_seq *out)
{
    for (int i = 0; i < 3; i++)
        if (name && !strcmp(name, seq_names[i])) {
            *out = (layout_seq)i;
            return true;
        }
    return false;
}

void layout_choice_name(const layout_choice *c, char *buf, size_t n)
{
    char base[64]; /* "hybrid R=" + 11 digits + tl */
    char tl[40] = "";
    if (c->variant)
        snprintf(tl, sizeof tl, "+%s", c->variant->word);
    if (c->seq == LAYOUT_HYBRID)
        snprintf(base, sizeof base, "hybrid R=%d%s", c->ring_degree, tl);
    else if (c->seq == LAYOUT_RING)
        snprintf(base, sizeof base, "ring%s", tl);
    else
        snprintf(base, sizeof base, "ulysses%s", tl);
    if (c->groups <= 1)
        snprintf(buf, n, "%s", base);
    else if (c->seq == LAYOUT_ULYSSES && !c->variant)
        snprintf(buf, n, "batch-aware G=%d", c->groups);
    else
        snprintf(buf, n, "batch-aware G=%d %s", c->groups, base);
}
