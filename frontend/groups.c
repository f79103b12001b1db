/* groups.c — legality of sequence-parallel layouts (Ulysses and
 * batch-aware groups).  Whether a layout fits the device is not judged
 * here: the memory plan does it after the pipeline (api/basp.c,
 * passes/memreport.c), with the numbers of `baspc --memory`.
 *
 * fe_groups_illegal holds the layout rules on the spec: fe_check uses it for
 * every batch_aware mode.  The passes judge the IR alone (hand-written IR has
 * no spec), so pass_batch_aware_illegal restates the same rules; the unit
 * test test_legality_agrees (tests/unit/test_passes.c) checks that the two
 * agree over a sweep of N, B, heads, kv_heads, seq_len and G. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

/* An uneven head split over K ranks (ir/README.md, "uneven splits"): the
 * kv heads do not divide K but every rank gets at least one (Hkv >= K), and
 * each rank's q heads are whole kv groups (heads % Hkv == 0).  Rank p holds
 * Hkv/K + (p < Hkv%K) kv heads and heads/Hkv q heads per kv head. */
bool fe_heads_uneven(const fe_spec *spec, int64_t K) {
    int64_t H = spec->model.heads, Hkv = spec->model.kv_heads ? spec->model.kv_heads : H;
    return K >= 1 && Hkv >= K && Hkv % K != 0 && Hkv > 0 && H % Hkv == 0;
}

/* With N = G*K ranks, group g holds sequences [g*B/G, (g+1)*B/G) sharded
 * over its K ranks: G | N, G | B, and the per-group head split needs
 * K | heads, K | seq_len and KV heads that split (Hkv % K == 0) or are shared
 * evenly (K % Hkv == 0), or an uneven head split (fe_heads_uneven).  G = 1 is
 * plain Ulysses over all N ranks. */
const char *fe_groups_illegal(const fe_spec *spec, int64_t G, const char **fix) {
    static char msg[192], fixmsg[224];
    int64_t N = fe_world(spec), B = spec->train.micro_batch, H = spec->model.heads;
    int64_t Hkv = spec->model.kv_heads ? spec->model.kv_heads : H, S = spec->train.seq_len;
    int64_t K = G >= 1 ? N / G : 0;
    char what[64];
    if (G == 1) snprintf(what, sizeof what, "N=%" PRId64, N);
    else snprintf(what, sizeof what, "group size K=N/G=%" PRId64, K);
    if (fix) *fix = NULL;
    if (G < 1) {
        snprintf(msg, sizeof msg, "the number of groups must be at least 1, not %" PRId64, G);
        snprintf(fixmsg, sizeof fixmsg, "G = 1 is plain Ulysses; larger G must divide N=%" PRId64, N);
    } else if (N % G) {
        snprintf(msg, sizeof msg, "N=%" PRId64 " not divisible by G=%" PRId64, N, G);
        snprintf(fixmsg, sizeof fixmsg, "G must divide the world size N = nodes*devices_per_node");
    } else if (B % G) {
        snprintf(msg, sizeof msg, "micro_batch (%" PRId64 ") not divisible by G=%" PRId64, B, G);
        snprintf(fixmsg, sizeof fixmsg, "each group needs whole sequences: make micro_batch a "
                 "multiple of %" PRId64, G);
    } else if (H % K && !fe_heads_uneven(spec, K)) {
        snprintf(msg, sizeof msg, "heads (%" PRId64 ") not divisible by %s", H, what);
        snprintf(fixmsg, sizeof fixmsg, "each of the %" PRId64 " ranks sharing a sequence holds "
                 "whole heads: heads must be a multiple of %" PRId64 ", or kv_heads at least %" PRId64
                 " for an uneven split", K, K, K);
    } else if (Hkv % K && K % Hkv && !fe_heads_uneven(spec, K)) {
        snprintf(msg, sizeof msg, "kv_heads (%" PRId64 ") cannot be split over %s", Hkv, what);
        snprintf(fixmsg, sizeof fixmsg, "KV heads are split when kv_heads is a multiple of "
                 "%" PRId64 " or at least %" PRId64 " (uneven), or shared when kv_heads divides %" PRId64, K, K, K);
    } else if (S % K) {
        snprintf(msg, sizeof msg, "seq_len (%" PRId64 ") not divisible by %s", S, what);
        snprintf(fixmsg, sizeof fixmsg, "each rank holds seq_len/%" PRId64 " tokens of a "
                 "sequence: make seq_len a multiple of %" PRId64, K, K);
    } else {
        return NULL;
    }
    if (fix) *fix = fixmsg;
    return msg;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Divisors of N, ascending; N <= 2^24 has fewer than 1024 of them. */
static int divisors(int64_t N, int64_t *out, int max) {
    int n = 0;
    for (int64_t d = 1; d * d <= N && n + 2 <= max; d++) {
        if (N % d) continue;
        out[n++] = d;
        if (d != N / d) out[n++] = N / d;
    }
    qsort(out, (size_t)n, sizeof *out, cmp_i64);
    return n;
}

int fe_groups_legal(const fe_spec *spec, int64_t *out, int max) {
    int64_t d[1024];
    int nd = divisors(fe_world(spec), d, 1024), n = 0;
    for (int i = 0; i < nd; i++) {
        if (fe_groups_illegal(spec, d[i], NULL)) continue;
        if (n < max) out[n] = d[i];
        n++;
    }
    return n;
}

/* "2, 4 and 8" for the legal G >= min_g, or NULL when there are none. */
static const char *legal_text(const fe_spec *spec, int64_t min_g, sup_buf *b) {
    int64_t g[64];
    int n = fe_groups_legal(spec, g, 64), k = 0, shown = n < 64 ? n : 64;
    for (int i = 0; i < shown; i++) if (g[i] >= min_g) k++;
    int seen = 0;
    for (int i = 0; i < shown; i++) {
        if (g[i] < min_g) continue;
        seen++;
        sup_buf_printf(b, "%s%" PRId64, seen == 1 ? "" : seen == k ? " and " : ", ", g[i]);
    }
    return k ? b->data : NULL;
}

/* One note per candidate G (divisors of N from min_g), saying why it fails. */
static void why_each(const fe_spec *spec, int64_t min_g, sup_loc loc) {
    int64_t d[1024];
    int nd = divisors(fe_world(spec), d, 1024), shown = 0;
    for (int i = 0; i < nd && shown < 4; i++) {
        if (d[i] < min_g) continue;
        const char *why = fe_groups_illegal(spec, d[i], NULL);
        if (why) { sup_note(loc, "G=%" PRId64 ": %s", d[i], why); shown++; }
    }
}

/* Legal but uneven: say so, and what the slowest rank holds. */
static void fe_warn_uneven(const fe_spec *spec, int64_t K, sup_loc loc) {
    if (!fe_heads_uneven(spec, K)) return;
    int64_t H = spec->model.heads, Hkv = spec->model.kv_heads ? spec->model.kv_heads : H;
    int64_t most = (Hkv + K - 1) / K, least = Hkv / K;
    sup_warning(loc, "uneven head split: %" PRId64 " heads (%" PRId64 " kv heads) over %" PRId64
                " ranks; the slowest rank holds %" PRId64 " heads (%" PRId64 " kv), the fastest %" PRId64,
                H, Hkv, K, most * (H / Hkv), most, least * (H / Hkv));
}

bool fe_check_layout(const fe_spec *spec, int *nerr) {
    const fe_layout *l = &spec->layout;
    sup_loc loc = fe_spec_loc(spec, "layout.batch_aware");
    if (!loc.file) loc = fe_spec_loc(spec, "train");
    int64_t N = fe_world(spec), G = l->batch_aware == FE_BA_GROUPS ? l->groups : 1;
    const char *fix, *why;
    sup_buf b = {0};
    bool ok = true;
    switch (l->batch_aware) {
    case FE_BA_OFF:
    case FE_BA_GROUPS:
        if (!(why = fe_groups_illegal(spec, G, &fix))) {
            fe_warn_uneven(spec, N / G, loc);
            break;
        }
        if (l->batch_aware == FE_BA_OFF)
            sup_error(loc, "batch_aware off (plain Ulysses over all ranks): %s", why);
        else
            sup_error(loc, "illegal batch_aware groups %" PRId64 ": %s", G, why);
        sup_note(loc, "%s", fix);
        if (legal_text(spec, l->batch_aware == FE_BA_OFF ? 2 : 1, &b))
            sup_note(loc, "legal here: batch_aware groups %s", b.data);
        else
            sup_note(loc, "no number of groups is legal for this model, batch and mesh");
        ok = false;
        break;
    case FE_BA_ON:
        if (legal_text(spec, 2, &b)) break;
        sup_error(loc, "batch_aware on, but no number of groups G > 1 is legal for N=%" PRId64, N);
        why_each(spec, 2, loc);
        if (!fe_groups_illegal(spec, 1, NULL))
            sup_note(loc, "use 'batch_aware off' (plain Ulysses) or 'auto', or raise micro_batch");
        else
            sup_note(loc, "change the model's heads, seq_len, micro_batch or the mesh");
        ok = false;
        break;
    case FE_BA_AUTO:
        if (legal_text(spec, 1, &b)) break;
        sup_error(loc, "no legal sequence-parallel layout for N=%" PRId64 " ranks", N);
        why_each(spec, 1, loc);
        sup_note(loc, "change the model's heads, seq_len, micro_batch or the mesh");
        ok = false;
        break;
    }
    sup_buf_free(&b);
    if (!ok) (*nerr)++;
    return ok;
}
