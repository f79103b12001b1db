/* layout.c — the strategy registry, the rules every layout shares and the
 * enumeration of legal choices (see layout.h and layout/README.md).  Each
 * strategy's own rules come with its row: the built-in ones from
 * api/strategies/, a plugin's from the plugin. */
#include "layout.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/support.h"

/* The registry, in the compilation context (support.h): the families' own
 * rows first, in layout_seq's order, then the variants in registration
 * order.  A fixed array: rows never move, so a layout_choice may point at
 * one. */
struct layout_registry {
    layout_strategy rows[LAYOUT_MAX_STRATEGIES];
    int n;         /* rows registered */
    int nfamilies; /* of them the families': rows [0, nfamilies) */
    char why[224]; /* the last reason (layout_reason), until the next */
    /* Devices added at run time (layout_device_add: baspc --device-file),
     * each with its own copy of its name. */
    layout_device_preset dev[LAYOUT_MAX_DEVICES];
    char dev_name[LAYOUT_MAX_DEVICES][LAYOUT_DEVICE_NAME_MAX];
    int ndev;
};
enum { NFAMILIES = 3 };

static struct layout_registry *registry(void) {
    sup_context *ctx = sup_ctx();
    if (!ctx->layouts) ctx->layouts = sup_xcalloc(1, sizeof *ctx->layouts);
    return ctx->layouts;
}

const char *layout_reason(char *fix, size_t nfix, const char *hint, const char *fmt, ...) {
    char *why = registry()->why;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof registry()->why, fmt, ap);
    va_end(ap);
    if (fix && nfix) snprintf(fix, nfix, "%s", hint ? hint : "");
    return why;
}

static int64_t kv_heads(const layout_dims *d) { return d->Hk > 0 ? d->Hk : d->H; }

int64_t layout_group_size(const layout_dims *d, const layout_choice *c) {
    return c->groups >= 1 && d->N % c->groups == 0 ? d->N / c->groups : 0;
}

layout_choice layout_ulysses(int groups) {
    return (layout_choice){.seq = LAYOUT_ULYSSES, .ring_degree = 1, .variant = NULL, .groups = groups};
}

bool layout_heads_uneven(const layout_dims *d, int64_t K) {
    int64_t H = d->H, Hk = kv_heads(d);
    return K >= 1 && Hk >= K && Hk % K != 0 && Hk > 0 && H % Hk == 0;
}

/* ---- the registry ---------------------------------------------------------------- */
const layout_strategy *layout_strategies(int *n) {
    struct layout_registry *r = registry();
    if (n) *n = r->n;
    return r->rows;
}

bool layout_variant_key(const char *key) { return key && !strcmp(key, "a2a"); }

const layout_strategy *layout_strategy_of(const layout_choice *c) {
    if (c->variant) return c->variant;
    struct layout_registry *r = registry();
    return (unsigned)c->seq < (unsigned)r->nfamilies ? &r->rows[c->seq] : NULL;
}

const layout_strategy *layout_variant_find(const char *key, const char *word) {
    struct layout_registry *r = registry();
    for (int i = r->nfamilies; i < r->n && key && word; i++)
        if (!strcmp(r->rows[i].key, key) && !strcmp(r->rows[i].word, word)) return &r->rows[i];
    return NULL;
}

const layout_strategy *layout_strategy_named(const char *name) {
    struct layout_registry *r = registry();
    for (int i = 0; i < r->n && name; i++)
        if (!strcmp(r->rows[i].name, name)) return &r->rows[i];
    return NULL;
}

static bool bad_row(char *err, size_t nerr, const char *fmt, const char *what) {
    snprintf(err, nerr, fmt, what);
    return false;
}

/* A family's own row: the next family in layout_seq's order, before any
 * variant, named after the family. */
static bool family_row_ok(const struct layout_registry *r, const layout_strategy *s, char *err, size_t nerr) {
    if ((int)s->seq != r->nfamilies || r->n != r->nfamilies)
        return bad_row(err, nerr,
                       "strategy '%s': a family's own row (no key) is registered once per family, in the "
                       "order ulysses, ring, hybrid, before any variant",
                       s->name);
    if (strcmp(s->name, layout_seq_name(s->seq)))
        return bad_row(err, nerr, "strategy '%s': a family's own row is named after its family", s->name);
    return true;
}

/* A variant: the spec words that select it, on a family that has its row. */
static bool variant_row_ok(const struct layout_registry *r, const layout_strategy *s, char *err, size_t nerr) {
    if (!s->word || !*s->word)
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
    if ((int)s->seq >= r->nfamilies) return bad_row(err, nerr, "strategy '%s': its family has no row yet", s->name);
    return true;
}

bool layout_strategy_register(const layout_strategy *s, char *err, size_t nerr) {
    struct layout_registry *r = registry();
    char tmp[8];
    if (!err) err = tmp, nerr = sizeof tmp;
    if (!s || !s->name || !*s->name || !s->legal || !s->candidates || !s->passes || !*s->passes)
        return bad_row(err, nerr, "strategy '%s': name, legal, candidates and passes are required",
                       s && s->name ? s->name : "");
    if ((unsigned)s->seq >= NFAMILIES)
        return bad_row(err, nerr, "strategy '%s': seq must be ulysses, ring or hybrid", s->name);
    if (!(s->key ? variant_row_ok(r, s, err, nerr) : family_row_ok(r, s, err, nerr))) return false;
    if (layout_strategy_named(s->name))
        return bad_row(err, nerr, "a strategy named '%s' is already registered", s->name);
    for (int i = r->nfamilies; i < r->n && s->key; i++)
        if (!strcmp(r->rows[i].key, s->key) && !strcmp(r->rows[i].word, s->word)) {
            snprintf(err, nerr, "strategy '%s': '%s %s' already selects strategy '%s'", s->name, s->key, s->word,
                     r->rows[i].name);
            return false;
        }
    if (r->n >= LAYOUT_MAX_STRATEGIES) return bad_row(err, nerr, "strategy '%s': the registry is full", s->name);
    r->rows[r->n] = *s;
    if (!r->rows[r->n].owner) r->rows[r->n].owner = "built in";
    r->n++;
    if (!s->key) r->nfamilies++;
    return true;
}

const char *layout_family_legal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix) {
    struct layout_registry *r = registry();
    const layout_strategy *family = (unsigned)c->seq < (unsigned)r->nfamilies ? &r->rows[c->seq] : NULL;
    return family ? family->legal(family, d, c, fix, nfix) : layout_reason(fix, nfix, NULL, "no such layout");
}

/* The rules every layout shares: whole groups of ranks, whole sequences
 * per group. */
static const char *common_illegal(const layout_dims *d, int64_t G, char *fix, size_t nfix) {
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

const char *layout_illegal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix) {
    const char *bad = common_illegal(d, c->groups, fix, nfix);
    if (bad) return bad;
    const layout_strategy *s = layout_strategy_of(c);
    if (!s) return layout_reason(fix, nfix, NULL, "no such layout");
    if (c->variant) return s->legal(s, d, c, fix, nfix);
    if (c->seq == LAYOUT_ULYSSES && c->ring_degree > 1)
        return layout_reason(fix, nfix, "ring_degree applies to sequence hybrid only",
                             "ring_degree %d with sequence ulysses", c->ring_degree);
    return s->legal(s, d, c, fix, nfix);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Divisors of N ascending (N <= 2^24 has fewer than 1024). */
static int divisors(int64_t N, int64_t *out, int max) {
    int n = 0;
    for (int64_t k = 1; k * k <= N && n + 2 <= max; k++) {
        if (N % k) continue;
        out[n++] = k;
        if (k != N / k) out[n++] = N / k;
    }
    qsort(out, (size_t)n, sizeof *out, cmp_i64);
    return n;
}

static int put(layout_choice *out, int n, int max, layout_choice c) {
    if (n < max) out[n] = c;
    return n + 1;
}

int layout_candidates(const layout_dims *d, layout_choice *out, int max) {
    const struct layout_registry *r = registry();
    int64_t g[1024];
    int ng = divisors(d->N, g, 1024), n = 0;
    for (int i = 0; i < ng; i++) {
        if (common_illegal(d, g[i], NULL, 0)) continue;
        /* each family, then its variants: the order of the planner's table */
        for (int f = 0; f < r->nfamilies; f++)
            for (int s = 0; s < r->n; s++) {
                if (s != f && (s < r->nfamilies || r->rows[s].seq != (layout_seq)f)) continue;
                layout_choice cs[LAYOUT_MAX_CHOICES];
                int nc = r->rows[s].candidates(&r->rows[s], d, (int)g[i], cs, LAYOUT_MAX_CHOICES);
                for (int k = 0; k < nc && k < LAYOUT_MAX_CHOICES; k++)
                    if (!layout_illegal(d, &cs[k], NULL, 0)) n = put(out, n, max, cs[k]);
            }
    }
    return n;
}

int layout_legal_groups(const layout_dims *d, const layout_choice *like, int64_t *out, int max) {
    int64_t g[1024];
    int ng = divisors(d->N, g, 1024), n = 0;
    for (int i = 0; i < ng; i++) {
        layout_choice c = *like;
        c.groups = (int)g[i];
        if (c.seq == LAYOUT_RING) c.ring_degree = (int)(d->N / g[i]);
        if (layout_illegal(d, &c, NULL, 0)) continue;
        if (n < max) out[n] = g[i];
        n++;
    }
    return n;
}

/* ---- names -------------------------------------------------------------------- */
static const char *const seq_names[] = {"ulysses", "ring", "hybrid"};

const char *layout_seq_name(layout_seq s) { return (unsigned)s < 3 ? seq_names[s] : "?"; }

bool layout_seq_parse(const char *name, layout_seq *out) {
    for (int i = 0; i < 3; i++)
        if (name && !strcmp(name, seq_names[i])) {
            *out = (layout_seq)i;
            return true;
        }
    return false;
}

int layout_choice_sets(const layout_choice *c, char out[][LAYOUT_SET_MAX], int max) {
    int n = 0;
    if (n < max) snprintf(out[n++], LAYOUT_SET_MAX, "layout.sequence=%s", layout_seq_name(c->seq));
    if (c->seq == LAYOUT_HYBRID && n < max) snprintf(out[n++], LAYOUT_SET_MAX, "layout.ring_degree=%d", c->ring_degree);
    if (n < max) snprintf(out[n++], LAYOUT_SET_MAX, "layout.a2a=%s", c->variant ? c->variant->word : "flat");
    if (n < max && c->groups > 1)
        snprintf(out[n++], LAYOUT_SET_MAX, "layout.batch_aware=groups %d", c->groups);
    else if (n < max)
        snprintf(out[n++], LAYOUT_SET_MAX, "layout.batch_aware=off");
    return n;
}

void layout_choice_name(const layout_choice *c, char *buf, size_t n) {
    char base[64]; /* "hybrid R=" + 11 digits + tl */
    char tl[40] = "";
    if (c->variant) snprintf(tl, sizeof tl, "+%s", c->variant->word);
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

/* ---- devices added at run time ------------------------------------------------------ */
const layout_device_preset *layout_device_lookup(const char *name) {
    struct layout_registry *r = registry();
    for (int i = 0; i < r->ndev && name; i++)
        if (!strcmp(r->dev[i].name, name)) return &r->dev[i];
    int n;
    const layout_device_preset *p = layout_device_presets(&n);
    for (int i = 0; i < n && name; i++)
        if (!strcmp(p[i].name, name)) return &p[i];
    return NULL;
}

const layout_device_preset *layout_devices_added(int *n) {
    struct layout_registry *r = registry();
    if (n) *n = r->ndev;
    return r->dev;
}

void layout_devices_reset(void) { registry()->ndev = 0; }

bool layout_device_add(const layout_device_preset *d, char *err, size_t nerr) {
    struct layout_registry *r = registry();
    size_t len = d->name ? strlen(d->name) : 0;
    if (len == 0 || len >= LAYOUT_DEVICE_NAME_MAX || strspn(d->name, "abcdefghijklmnopqrstuvwxyz0123456789_") != len ||
        d->name[0] < 'a' || d->name[0] > 'z')
        return bad_row(err, nerr,
                       "device name '%s': a lower-case letter, then lower-case letters, digits and '_' (at most "
                       "63 characters)",
                       d->name ? d->name : "");
    if (layout_device_lookup(d->name))
        return bad_row(err, nerr, "device '%s' is already defined (each name once, built-in presets included)",
                       d->name);
    if (r->ndev == LAYOUT_MAX_DEVICES) {
        snprintf(err, nerr, "device '%s': too many devices defined (at most %d)", d->name, LAYOUT_MAX_DEVICES);
        return false;
    }
    memcpy(r->dev_name[r->ndev], d->name, len + 1);
    r->dev[r->ndev] = *d;
    r->dev[r->ndev].name = r->dev_name[r->ndev];
    r->ndev++;
    return true;
}
