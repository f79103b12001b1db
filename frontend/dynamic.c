/* dynamic.c — batch_aware dynamic: the rules of a spec whose groups are
 * chosen per micro-step.
 *
 * Every micro-step the runtime splits the N ranks into groups of sizes K_i
 * (sum N, not necessarily equal nor dividing N) and gives each group one
 * row of K_i * T tokens of whole documents (common/cm_assign.c), where
 * T = micro_batch * seq_len / N is what every rank holds: the same number
 * of tokens per micro-step as the static layouts, and the same memory per
 * rank in every variant.  The compiler builds one variant per group size
 * (driver/dynamic.c); this file decides which sizes and checks that each is
 * a legal layout of one block of K ranks.  What is refused here is what the
 * variants cannot share or the runtime cannot rebind per micro-step:
 * packed documents are required (the assignment works on their lengths),
 * the two-level exchange (it needs groups over whole nodes), hybrid rings,
 * overlap and offload are not built for dynamic groups. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

int64_t fe_dynamic_tokens(const fe_spec *spec) {
    int64_t N = fe_world(spec);
    return N > 0 ? spec->train.micro_batch * spec->train.seq_len / N : 0;
}

static bool dyn_ring(const fe_spec *spec) { return !strcmp(spec->layout.sequence, "ring"); }

layout_choice fe_dynamic_choice(const fe_spec *spec, int K) {
    layout_choice c = layout_ulysses(1);
    if (K > 1 && dyn_ring(spec)) {
        c.seq = LAYOUT_RING;
        c.ring_degree = K;
    }
    return c;
}

layout_dims fe_dynamic_dims(const fe_spec *spec, int K) {
    layout_dims d = fe_layout_dims(spec);
    d.N = K;
    d.B = 1;
    d.S = K * fe_dynamic_tokens(spec);
    return d;
}

/* Parses "1 2 4" / "1,2,4" into sizes (ascending, distinct, in 1..N);
 * false after a located error. */
static bool dyn_parse_sizes(const fe_spec *spec, int *sizes, int *n) {
    sup_loc loc = fe_spec_loc(spec, "layout.group_sizes");
    const char *s = spec->layout.group_sizes;
    int64_t N = fe_world(spec);
    *n = 0;
    while (*s) {
        if (*s == ' ' || *s == ',' || *s == '\t') {
            s++;
            continue;
        }
        char *end;
        long long k = strtoll(s, &end, 10);
        if (end == s || k < 1 || k > N) {
            sup_error(loc, "group_sizes: '%.*s' is not a group size from 1 to the world's %" PRId64 " ranks",
                      (int)(end > s ? end - s : 1), s, N);
            sup_note(loc, "write it like 'group_sizes \"1 2 4\"'");
            return false;
        }
        if (*n > 0 && k <= sizes[*n - 1]) {
            sup_error(loc, "group_sizes: %lld after %d; list the sizes once each, ascending", k, sizes[*n - 1]);
            return false;
        }
        if (*n == FE_DYN_MAX_SIZES) {
            sup_error(loc, "group_sizes: more than %d sizes (each one is a variant of the step)", FE_DYN_MAX_SIZES);
            return false;
        }
        sizes[(*n)++] = (int)k;
        s = end;
    }
    if (*n == 0) {
        sup_error(loc, "group_sizes: no size given");
        return false;
    }
    return true;
}

int fe_dynamic_sizes(const fe_spec *spec, int *sizes) {
    int n = 0;
    if (spec->layout.group_sizes[0]) return dyn_parse_sizes(spec, sizes, &n) ? n : 0;
    /* Every legal size; at most FE_DYN_MAX_SIZES, the largest kept (they
     * hold the longest documents), then the smallest. */
    int all[1024], na = 0;
    int64_t N = fe_world(spec);
    for (int K = 1; K <= N && na < 1024; K++) {
        layout_dims d = fe_dynamic_dims(spec, K);
        layout_choice c = fe_dynamic_choice(spec, K);
        if (!layout_illegal(&d, &c, NULL, 0)) all[na++] = K;
    }
    int keep_small = na > FE_DYN_MAX_SIZES ? FE_DYN_MAX_SIZES / 2 : na;
    for (int i = 0; i < na; i++)
        if (i < keep_small || i >= na - (FE_DYN_MAX_SIZES - keep_small)) sizes[n++] = all[i];
    return n;
}

/* What the variants cannot share: one error each, at the key. */
static bool dyn_refuse(const fe_spec *spec) {
    const char *seq = spec->layout.sequence;
    bool ok = true;
    sup_loc at = fe_spec_loc(spec, "layout.batch_aware");
    if (spec->layout.batch_aware != FE_BA_DYNAMIC) {
        sup_loc loc = fe_spec_loc(spec, "layout.group_sizes");
        sup_error(loc, "group_sizes belongs to batch_aware dynamic");
        sup_note(loc, "write 'batch_aware dynamic', or drop group_sizes");
        return false;
    }
    if (!spec->train.documents) {
        sup_error(at, "batch_aware dynamic assigns documents to groups by their length, but documents are off");
        sup_note(fe_spec_loc(spec, "train"), "add 'documents on  eot_token N' to the train block");
        ok = false;
    }
    if (strcmp(seq, "ulysses") && strcmp(seq, "ring")) {
        sup_error(fe_spec_loc(spec, "layout.sequence"),
                  "batch_aware dynamic builds Ulysses or ring groups, not sequence %s", seq);
        ok = false;
    }
    if (spec->layout.a2a[0] && strcmp(spec->layout.a2a, "flat")) {
        sup_error(fe_spec_loc(spec, "layout.a2a"), "batch_aware dynamic exchanges flat inside each group, not a2a %s",
                  spec->layout.a2a);
        ok = false;
    }
    if (spec->train.overlap) {
        sup_error(fe_spec_loc(spec, "train.overlap"), "overlap is not built for batch_aware dynamic");
        ok = false;
    }
    if (spec->train.offload[0] && strcmp(spec->train.offload, "none")) {
        sup_error(fe_spec_loc(spec, "train.offload"), "offload %s is not built for batch_aware dynamic",
                  spec->train.offload);
        ok = false;
    }
    if (spec->train.attention_chunks == FE_CHUNKS_AUTO) {
        sup_error(fe_spec_loc(spec, "train.attention_chunks"),
                  "attention_chunks auto is not settled for batch_aware dynamic; give a number");
        ok = false;
    }
    return ok;
}

/* T = B*S/N whole (and even for ring's zig-zag halves); the largest group
 * holds the longest document. */
static bool dyn_tokens(const fe_spec *spec, const int *sizes, int n) {
    int64_t N = fe_world(spec), B = spec->train.micro_batch, S = spec->train.seq_len, T = fe_dynamic_tokens(spec);
    sup_loc at = fe_spec_loc(spec, "layout.batch_aware");
    if ((B * S) % N || T < 1) {
        sup_error(fe_spec_loc(spec, "train.seq_len"),
                  "batch_aware dynamic gives every rank micro_batch * seq_len / N tokens, but %" PRId64 " * %" PRId64
                  " does not divide by %" PRId64 " ranks",
                  B, S, N);
        return false;
    }
    if (dyn_ring(spec) && T % 2) {
        sup_error(fe_spec_loc(spec, "train.seq_len"),
                  "batch_aware dynamic with ring groups needs an even number of tokens per rank (zig-zag halves), not "
                  "%" PRId64,
                  T);
        return false;
    }
    if ((int64_t)sizes[n - 1] * T < S) {
        int64_t need = (S + T - 1) / T;
        sup_error(at,
                  "a document of seq_len %" PRId64 " tokens needs a group of %" PRId64 " ranks (%" PRId64
                  " tokens each), but the largest group size is %d",
                  S, need, T, sizes[n - 1]);
        sup_note(at, "allow a group size of at least %" PRId64 ", or lower seq_len", need);
        return false;
    }
    return true;
}

bool fe_check_dynamic(const fe_spec *spec) {
    if (!dyn_refuse(spec)) return false;
    int sizes[FE_DYN_MAX_SIZES], n = 0;
    if (spec->layout.group_sizes[0]) {
        if (!dyn_parse_sizes(spec, sizes, &n)) return false;
    } else {
        n = fe_dynamic_sizes(spec, sizes);
    }
    if (n == 0) {
        sup_error(fe_spec_loc(spec, "layout.batch_aware"), "batch_aware dynamic: no group size is legal here");
        return false;
    }
    if (!dyn_tokens(spec, sizes, n)) return false;
    sup_loc loc = fe_spec_loc(spec, "layout.group_sizes");
    if (!loc.file) loc = fe_spec_loc(spec, "layout.batch_aware");
    for (int i = 0; i < n; i++) {
        layout_dims d = fe_dynamic_dims(spec, sizes[i]);
        layout_choice c = fe_dynamic_choice(spec, sizes[i]);
        char fix[256];
        const char *why = layout_illegal(&d, &c, fix, sizeof fix);
        if (why) {
            sup_error(loc, "batch_aware dynamic: a group of %d ranks (one row of %" PRId64 " tokens) is not legal: %s",
                      sizes[i], d.S, why);
            if (fix[0]) sup_note(loc, "%s", fix);
            return false;
        }
    }
    return true;
}
