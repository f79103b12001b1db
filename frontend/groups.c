/* groups.c — the spec's layout block against the layout rules.
 *
 * The rules themselves live in layout/ (layout_illegal, one copy for the
 * frontend, the passes and the planner); here they are applied to the
 * spec's dimensions and reported at the key that chose the layout, with a
 * note naming the fix and one listing what would be legal.  Whether a
 * layout fits the device is not judged here: the memory plan does it after
 * the pipeline (api/basp.c, passes/memreport.c, driver/memdiag.c). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

/* An empty field (a spec built in code, not parsed) means the default. */
static const char *seq_text(const fe_layout *l) { return l->sequence[0] ? l->sequence : "ulysses"; }
static const char *a2a_text(const fe_layout *l) { return l->a2a[0] ? l->a2a : "flat"; }

/* With head-chunked attention the heads one chunk exchanges are what the
 * layout rules split over a group (train.attention_chunks). */
layout_dims fe_layout_dims(const fe_spec *spec) {
    int64_t C = spec->train.attention_chunks > 1 ? spec->train.attention_chunks : 1;
    int64_t Hk = spec->model.kv_heads ? spec->model.kv_heads : spec->model.heads;
    if (spec->model.heads % C || Hk % C) C = 1; /* reported by sema (chunk_rules) */
    return (layout_dims){.N = fe_world(spec),
                         .nodes = spec->mesh.nodes,
                         .dpn = spec->mesh.devices_per_node,
                         .B = spec->train.micro_batch,
                         .S = spec->train.seq_len,
                         .H = spec->model.heads / C,
                         .Hk = Hk / C};
}

bool fe_layout_allows(const fe_spec *spec, const layout_choice *c) {
    const fe_layout *l = &spec->layout;
    switch (l->batch_aware) {
    case FE_BA_OFF:
        if (c->groups != 1) return false;
        break;
    case FE_BA_GROUPS:
        if (c->groups != l->groups) return false;
        break;
    case FE_BA_ON:
        if (c->groups < 2) return false;
        break;
    case FE_BA_AUTO: break;
    case FE_BA_DYNAMIC: return false; /* no static layout: the variants are built by driver/dynamic.c */
    }
    layout_seq seq;
    if (strcmp(seq_text(l), "auto") && (!layout_seq_parse(seq_text(l), &seq) || seq != c->seq)) return false;
    if (c->seq == LAYOUT_HYBRID && l->ring_degree > 0 && c->ring_degree != l->ring_degree) return false;
    if (strcmp(a2a_text(l), "auto") && layout_variant_find("a2a", a2a_text(l)) != c->variant) return false;
    return true;
}

bool fe_layout_concrete(const fe_spec *spec, layout_choice *out) {
    const fe_layout *l = &spec->layout;
    layout_choice c = {.ring_degree = 1};
    if (!layout_seq_parse(seq_text(l), &c.seq) || !strcmp(a2a_text(l), "auto")) return false;
    c.variant = layout_variant_find("a2a", a2a_text(l));
    if (l->batch_aware == FE_BA_OFF)
        c.groups = 1;
    else if (l->batch_aware == FE_BA_GROUPS)
        c.groups = (int)l->groups;
    else
        return false;
    if (c.seq == LAYOUT_HYBRID) {
        if (l->ring_degree < 1) return false;
        c.ring_degree = (int)l->ring_degree;
    } else if (c.seq == LAYOUT_RING) {
        c.ring_degree = (int)layout_group_size(&(layout_dims){.N = fe_world(spec)}, &c);
    }
    *out = c;
    return true;
}

/* "2, 4 and 8" for the legal G >= min_g of `like`, or NULL when none. */
static const char *legal_text(const fe_spec *spec, const layout_choice *like, int64_t min_g, sup_buf *b) {
    int64_t g[64];
    layout_dims d = fe_layout_dims(spec);
    int n = layout_legal_groups(&d, like, g, 64), k = 0, shown = n < 64 ? n : 64;
    for (int i = 0; i < shown; i++) k += g[i] >= min_g;
    int seen = 0;
    for (int i = 0; i < shown; i++) {
        if (g[i] < min_g) continue;
        seen++;
        sup_buf_printf(b, "%s%" PRId64, seen == 1 ? "" : seen == k ? " and " : ", ", g[i]);
    }
    return k ? b->data : NULL;
}

/* The layout the spec names, with auto read as Ulysses and flat. */
static layout_choice spec_like(const fe_spec *spec) {
    layout_choice c = layout_ulysses(1);
    layout_seq_parse(seq_text(&spec->layout), &c.seq);
    c.variant = layout_variant_find("a2a", a2a_text(&spec->layout));
    if (c.seq == LAYOUT_HYBRID) c.ring_degree = (int)spec->layout.ring_degree;
    return c;
}

/* One note per candidate G (divisors of N from min_g) of the layout the
 * spec names, saying why it fails. */
static void why_each(const fe_spec *spec, int64_t min_g, sup_loc loc) {
    layout_dims d = fe_layout_dims(spec);
    int shown = 0;
    for (int64_t G = min_g; G <= d.N && shown < 4; G++) {
        if (d.N % G) continue;
        layout_choice c = spec_like(spec);
        c.groups = (int)G;
        if (c.seq == LAYOUT_RING) c.ring_degree = (int)(d.N / G);
        const char *why = layout_illegal(&d, &c, NULL, 0);
        if (why) {
            sup_note(loc, "G=%" PRId64 ": %s", G, why);
            shown++;
        }
    }
}

/* Legal but uneven: say so, and what the slowest rank holds. */
static void warn_uneven(const fe_spec *spec, int64_t K, sup_loc loc) {
    layout_dims d = fe_layout_dims(spec);
    if (!layout_heads_uneven(&d, K)) return;
    int64_t H = d.H, Hkv = d.Hk, most = (Hkv + K - 1) / K, least = Hkv / K;
    sup_warning(loc,
                "uneven head split: %" PRId64 " heads (%" PRId64 " kv heads) over %" PRId64
                " ranks; the slowest rank holds %" PRId64 " heads (%" PRId64 " kv), the fastest %" PRId64,
                H, Hkv, K, most * (H / Hkv), most, least * (H / Hkv));
}

/* "2 and 4": the ring degrees legal for hybrid with c's groups, or NULL. */
static const char *legal_degrees(const fe_spec *spec, const layout_choice *c, sup_buf *b) {
    layout_dims d = fe_layout_dims(spec);
    int64_t K = layout_group_size(&d, c);
    int R[64], n = 0;
    for (int64_t r = 2; r < K && n < 64; r++) {
        layout_choice h = *c;
        h.ring_degree = (int)r;
        if (!layout_illegal(&d, &h, NULL, 0)) R[n++] = (int)r;
    }
    for (int i = 0; i < n; i++) sup_buf_printf(b, "%s%d", i == 0 ? "" : i == n - 1 ? " and " : ", ", R[i]);
    return n ? b->data : NULL;
}

/* The key a diagnostic about choice c points at: the one that chose what
 * broke (groups for the common rules, else the strategy's own key). */
static sup_loc choice_loc(const fe_spec *spec, const layout_choice *c, bool common) {
    const char *key = "layout.batch_aware";
    char vkey[48];
    if (!common && c->variant) {
        snprintf(vkey, sizeof vkey, "layout.%s", c->variant->key);
        key = vkey;
    } else if (!common && c->seq == LAYOUT_HYBRID && fe_given(spec, "layout.ring_degree"))
        key = "layout.ring_degree";
    else if (!common && c->seq != LAYOUT_ULYSSES)
        key = "layout.sequence";
    sup_loc loc = fe_spec_loc(spec, key);
    if (!loc.file) loc = fe_spec_loc(spec, "layout.batch_aware");
    if (!loc.file) loc = fe_spec_loc(spec, "train");
    return loc;
}

/* With head chunks the rules judge one chunk's heads: say so, where the
 * chunk count is given. */
static void chunk_note(const fe_spec *spec, const layout_dims *d) {
    int64_t C = spec->train.attention_chunks;
    if (C <= 1 || !fe_given(spec, "train.attention_chunks")) return;
    sup_note(fe_spec_loc(spec, "train.attention_chunks"),
             "with attention_chunks %" PRId64 " each exchange splits one chunk's %" PRId64 " heads (%" PRId64
             " kv heads); fewer chunks split more heads",
             C, d->H, d->Hk);
}

/* An exactly named layout: legal, or one error with the fix and the legal G. */
static bool check_concrete(const fe_spec *spec, const layout_choice *c) {
    layout_dims d = fe_layout_dims(spec);
    char fix[256], name[64];
    const char *why = layout_illegal(&d, c, fix, sizeof fix);
    bool common = why && (c->groups < 1 || d.N % c->groups || d.B % c->groups);
    sup_loc loc = choice_loc(spec, c, common);
    if (!why) {
        if (c->seq == LAYOUT_ULYSSES && !c->variant) warn_uneven(spec, d.N / c->groups, loc);
        return true;
    }
    layout_choice_name(c, name, sizeof name);
    bool plain = c->seq == LAYOUT_ULYSSES && !c->variant;
    if (plain && spec->layout.batch_aware == FE_BA_OFF)
        sup_error(loc, "batch_aware off (plain Ulysses over all ranks): %s", why);
    else if (plain)
        sup_error(loc, "illegal batch_aware groups %d: %s", c->groups, why);
    else
        sup_error(loc, "illegal layout '%s': %s", name, why);
    if (fix[0]) sup_note(loc, "%s", fix);
    chunk_note(spec, &d);
    sup_buf b = {0};
    if (legal_text(spec, c, plain && spec->layout.batch_aware == FE_BA_OFF ? 2 : 1, &b))
        sup_note(loc, "legal here: batch_aware groups %s", b.data);
    else if (c->seq == LAYOUT_HYBRID && legal_degrees(spec, c, &b))
        sup_note(loc, "legal here: ring_degree %s", b.data);
    else
        sup_note(loc, "no number of groups is legal for this model, batch and mesh");
    sup_buf_free(&b);
    return false;
}

/* A layout with something left to choose: at least one allowed choice
 * must be legal. */
static bool check_open(const fe_spec *spec) {
    layout_dims d = fe_layout_dims(spec);
    layout_choice *all = malloc(sizeof *all * 4096);
    int n = layout_candidates(&d, all, 4096), ok = 0;
    for (int i = 0; i < n && i < 4096; i++) ok += fe_layout_allows(spec, &all[i]);
    free(all);
    if (ok) return true;
    const fe_layout *l = &spec->layout;
    bool plain = !strcmp(seq_text(l), "ulysses") && !strcmp(a2a_text(l), "flat");
    layout_choice u = layout_ulysses(1), like = spec_like(spec);
    sup_loc loc = choice_loc(spec, &like, l->batch_aware == FE_BA_ON);
    if (l->batch_aware == FE_BA_ON)
        sup_error(loc, "batch_aware on, but no number of groups G > 1 is legal for N=%" PRId64, d.N);
    else if (plain)
        sup_error(loc, "no legal sequence-parallel layout for N=%" PRId64 " ranks", d.N);
    else
        sup_error(loc, "no legal layout with sequence %s and a2a %s for N=%" PRId64 " ranks", seq_text(l), a2a_text(l),
                  d.N);
    why_each(spec, l->batch_aware == FE_BA_ON ? 2 : 1, loc);
    chunk_note(spec, &d);
    if (l->batch_aware == FE_BA_ON && !layout_illegal(&d, &u, NULL, 0))
        sup_note(loc, "use 'batch_aware off' (plain Ulysses) or 'auto', or raise micro_batch");
    else
        sup_note(loc, "change the model's heads, seq_len, micro_batch or the mesh");
    return false;
}

/* ring_degree belongs to sequence hybrid, which needs it (with sequence
 * auto it narrows the hybrid candidates). */
static bool check_ring_degree(const fe_spec *spec) {
    const fe_layout *l = &spec->layout;
    bool hybrid = !strcmp(seq_text(l), "hybrid"), open = !strcmp(seq_text(l), "auto");
    if (fe_given(spec, "layout.ring_degree") && !hybrid && !open) {
        sup_loc loc = fe_spec_loc(spec, "layout.ring_degree");
        sup_error(loc, "ring_degree applies to sequence hybrid only (sequence is %s)", seq_text(l));
        sup_note(loc, "write 'sequence hybrid ring_degree %" PRId64 "', or drop ring_degree", l->ring_degree);
        return false;
    }
    if (hybrid && l->ring_degree < 1) {
        sup_loc loc = fe_spec_loc(spec, "layout.sequence");
        sup_error(loc, "sequence hybrid needs a ring_degree");
        sup_note(loc, "add 'ring_degree R' (R ring ranks times K/R Ulysses ranks), e.g. 'ring_degree 2'");
        return false;
    }
    return true;
}

bool fe_check_layout(const fe_spec *spec, int *nerr) {
    layout_choice c;
    if (spec->layout.batch_aware == FE_BA_DYNAMIC || fe_given(spec, "layout.group_sizes")) {
        bool ok = fe_check_dynamic(spec);
        if (!ok) (*nerr)++;
        return ok;
    }
    bool ok = check_ring_degree(spec);
    if (ok) ok = fe_layout_concrete(spec, &c) ? check_concrete(spec, &c) : check_open(spec);
    if (!ok) (*nerr)++;
    return ok;
}
