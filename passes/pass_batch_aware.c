/* pass_batch_aware.c — batch-aware sequence parallelism (BASP).
 *
 * Input: the Ulysses step (@sp = one set of all N ranks).  With a micro-batch
 * of B sequences and N = G*K ranks, the N ranks split into G contiguous
 * groups of K; group g takes sequences [g*B/G, (g+1)*B/G) and shards them
 * over its K ranks.  Every rank still holds B*S/N tokens, but each
 * all-to-all runs inside a group of K: K-1 peers instead of N-1, and on one
 * node whenever K divides devices_per_node.
 *
 * Output: @sp = G contiguous sets of K ranks; @dp = K strided sets of G ranks
 * (set i = {i, i+K, ...}: the ranks holding the same sequence slice of
 * different sequences), the batch dimension of every activation sharded over
 * @dp, and the GQA fanout/fanin of the k,v exchanges recomputed for K.  K = 1
 * is pure data parallelism: the all-to-alls are identities and are removed.
 *
 * G comes from the config `batch_aware`: `groups G` (with `groups = G`),
 * `auto` (the G with the lowest step time the cost model predicts; the
 * largest legal G when the module has no link bandwidths), `on` (like auto,
 * but an error when only G = 1 is legal), `off` (unchanged).  An
 * unusable G leaves the IR unchanged with a remark saying why. */
#include "pass_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *pass_batch_aware_illegal(const ir_module *m, int G)
{
    static char why[200];
    int N = ir_world(m);
    pu_dims d = pu_model_dims(m);
    if (G < 1) {
        snprintf(why, sizeof why, "the number of groups must be at least 1 (got %d)", G);
        return why;
    }
    if (N % G) {
        snprintf(why, sizeof why, "G=%d does not divide the world size N=%d", G, N);
        return why;
    }
    if (d.B % G) {
        snprintf(why, sizeof why, "micro_batch (%lld) not divisible by G=%d", (long long)d.B, G);
        return why;
    }
    return pu_sp_illegal(m, N / G);
}

/* K = 1: every all-to-all on @sp is an identity.  The surviving value takes
 * the removed one's name when it was its ".heads" twin, so the IR keeps the
 * names of the unsharded step. */
static int remove_exchanges(ir_module *m, int sp)
{
    int removed = 0;
    for (int i = m->nops - 1; i >= 0; i--) {
        ir_op op = m->ops[i];
        if (op.code != IR_ALL_TO_ALL || ir_op_group(&op) != sp)
            continue;
        for (int k = 0; k < op.nin && k < op.nout; k++) {
            ir_replace_uses(m, op.out[k], op.in[k], i);
            const char *in = m->values[op.in[k]].name, *out = m->values[op.out[k]].name;
            size_t n = strlen(out);
            if (strncmp(in, out, n) == 0 && strcmp(in + n, ".heads") == 0)
                ir_value_swap_names(m, op.in[k], op.out[k]);
        }
        ir_op_remove(m, i);
        removed++;
    }
    for (int v = 0; v < m->nvalues; v++)
        for (int k = 0; k < m->values[v].type.rank; k++)
            if (m->values[v].type.shard[k] == sp)
                m->values[v].type.shard[k] = -1;
    return removed;
}

static void apply(ir_module *m, int G, const char *why, const pass_options *opt)
{
    int N = ir_world(m), K = N / G;
    int sp = ir_group_add_contiguous(m, "sp", G);
    int dp = ir_group_add_strided(m, "dp", K);
    pu_shard_batch(m, sp, dp);
    pu_fix_virtual_heads(m, sp);
    ir_config_set_int(m, "batch_groups", G);
    ir_config_set_int(m, "sp_size", K);
    pu_dims d = pu_model_dims(m);
    pu_remark(opt, "batch-aware: G=%d groups of K=%d ranks, %lld sequence(s) per group [chosen: %s]", G, K,
              (long long)(d.B / G), why);
    if (K == 1) {
        int n = remove_exchanges(m, sp);
        pu_remark(opt, "batch-aware: K=1 is pure data parallelism; removed %d all-to-all(s) (identities)", n);
    }
    ir_renumber(m);
}

static int largest_legal(const ir_module *m)
{
    for (int G = ir_world(m); G > 1; G--)
        if (!pass_batch_aware_illegal(m, G))
            return G;
    return 1;
}

/* Predicted step seconds with G groups: the rewrite on a clone, then the
 * rest of the default pipeline (ZeRO's gathers and reductions are part of
 * the step), costed.  Diagnostics of the trial are silenced. */
static double predict_step(const ir_module *m, int G, int cur)
{
    sup_diag_saved saved = sup_diag_silence();
    ir_module *c = ir_module_clone(m);
    pass_options q = pass_default_options();
    q.quiet = true;
    if (G != cur)
        apply(c, G, "", &q);
    double t = INFINITY;
    if (pass_run_pipeline(c, "place,zero", &q)) {
        pass_cost_params p = pass_cost_default_params(c);
        t = pass_cost_estimate_time(c, &p).step_s; /* times only: no memory plan per candidate */
    }
    ir_module_free(c);
    sup_diag_restore(saved);
    return t;
}

/* The automatic choice: the legal G (>= the current split) with the lowest
 * predicted step time, the larger G within 1% (fewer peers at equal cost).
 * Hand-written IR without link bandwidths has nothing to cost: the largest
 * legal G.  `why` receives the explanation for the remark. */
static int choose_groups(const ir_module *m, char *why, size_t n)
{
    int N = ir_world(m), cur = m->groups[ir_group_find(m, "sp")].nsets;
    bool links = m->mesh.intra.bandwidth > 0 && (m->mesh.nodes <= 1 || m->mesh.inter.bandwidth > 0);
    if (!links) {
        snprintf(why, n, "largest legal G; no link bandwidths in the module for the cost model");
        return largest_legal(m);
    }
    double *t = malloc(sizeof *t * (size_t)(N + 1)), best = INFINITY;
    for (int G = 1; G <= N; G++) {
        bool legal = G == cur || (G > cur && !pass_batch_aware_illegal(m, G));
        t[G] = legal ? predict_step(m, G, cur) : INFINITY;
        if (t[G] < best)
            best = t[G];
    }
    if (!isfinite(best)) {
        free(t);
        snprintf(why, n, "largest legal G; the cost model could not cost any G");
        return largest_legal(m);
    }
    int pick = 1;
    for (int G = N; G >= 1; G--)
        if (t[G] <= best * 1.01) {
            pick = G;
            break;
        }
    int len = snprintf(why, n, "cost model: G=%d predicted %.1f ms/step", pick, t[pick] * 1e3);
    const char *sep = " vs ";
    for (int G = 1; G <= N && len > 0 && (size_t)len < n; G++)
        if (G != pick && isfinite(t[G])) {
            len += snprintf(why + len, n - (size_t)len, "%sG=%d %.1f", sep, G, t[G] * 1e3);
            sep = ", ";
        }
    free(t);
    return pick;
}

/* G = 1 is not a failure: Ulysses over all N ranks stays.  Says why. */
static void keep_ulysses(ir_module *m, const pass_options *opt)
{
    int N = ir_world(m);
    pu_dims d = pu_model_dims(m);
    if (d.B == 1)
        pu_remark(opt, "batch-aware: micro_batch 1 cannot be split over groups; keeping Ulysses over %d ranks",
                  N);
    else
        pu_remark(opt, "batch-aware: no legal G > 1 (G=2: %s); keeping Ulysses over %d ranks",
                  pass_batch_aware_illegal(m, 2), N);
}

/* The G the config asks for: 0 when the pass should leave the IR as it is
 * (after saying why), -1 on an error. */
static int target_groups(ir_module *m, const char *mode, const char **why)
{
    if (strcmp(mode, "groups") == 0) {
        int G = (int)ir_config_int(m, "groups", 1);
        const char *bad = pass_batch_aware_illegal(m, G);
        if (bad) {
            /* An explicit request that cannot be honoured deserves more than a remark. */
            int sp = ir_group_find(m, "sp");
            sup_warning(sup_noloc(), "batch-aware: groups %d is not legal: %s; keeping @sp as %d group(s) of %d ranks",
                        G, bad, m->groups[sp].nsets, m->groups[sp].set_size);
            return 0;
        }
        *why = "layout groups";
        return G;
    }
    static char chosen[400];
    int G = choose_groups(m, chosen, sizeof chosen);
    if (G == 1 && strcmp(mode, "on") == 0) {
        sup_error(sup_noloc(), "batch-aware: batch_aware on, but no G > 1 is legal (G=2: %s)",
                  pass_batch_aware_illegal(m, 2));
        return -1;
    }
    *why = chosen;
    return G;
}

bool pass_batch_aware(ir_module *m, const pass_options *opt)
{
    const char *mode = pu_cfg(m, "batch_aware", "auto");
    int N = ir_world(m);
    if (strcmp(mode, "off") == 0) {
        pu_remark(opt, "batch-aware: disabled (batch_aware off); keeping Ulysses over %d ranks", N);
        return true;
    }
    int sp = ir_group_find(m, "sp");
    if (sp < 0) {
        pu_remark(opt, "batch-aware: no sequence-parallel group @sp (run ulysses first); unchanged");
        return true;
    }
    const char *why = "";
    int G = target_groups(m, mode, &why);
    if (G < 0)
        return false;
    int cur = m->groups[sp].nsets;
    if (G == 0)
        return true;
    if (G == 1 && cur == 1) {
        keep_ulysses(m, opt);
        return true;
    }
    /* Ulysses may already have split the batch (when N itself could not
     * split the heads); the sets only ever get finer, never merged. */
    if (G == cur) {
        pu_remark(opt, "batch-aware: G=%d groups of K=%d ranks [chosen: %s]; already in place", G, N / G, why);
        return true;
    }
    if (G < cur) {
        pu_remark(opt, "batch-aware: @sp already has %d groups, finer than G=%d; unchanged", cur, G);
        return true;
    }
    apply(m, G, why, opt);
    return true;
}
