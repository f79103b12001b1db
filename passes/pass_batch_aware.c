/* pass_batch_aware.c — batch-aware sequence parallelism (BASP): the data
 * partitioning.
 *
 * Input: the lowered step (nothing sharded), config `groups = G` (chosen
 * before the pipeline: the spec's `batch_aware groups G`, or the planner's
 * choice for auto/on; absent or 0 = 1).  With a micro-batch of B sequences
 * and N = G*K ranks, the N ranks split into G contiguous groups of K; group
 * g takes sequences [g*B/G, (g+1)*B/G) and the sequence pass that follows
 * (ulysses, ring) shards them over its K ranks.  Every rank still holds
 * B*S/N tokens, but each collective of the sequence pass runs inside a
 * group of K: K-1 peers instead of N-1, and on one node whenever K divides
 * devices_per_node.
 *
 * Output: @dp = K strided sets of G ranks (set i = {i, i+K, ...}: the ranks
 * holding the same sequence slice of different sequences) and the batch
 * dimension of every activation sharded over @dp.  The sequence pass then
 * makes @sp = G contiguous sets of K ranks (the ranks sharing a sequence)
 * from @dp's set size.  G = 1 leaves the module unchanged.
 *
 * The pass never chooses: an illegal G is an error naming the rule
 * (layout_illegal) and the legal G. */
#include "pass_util.h"

#include <stdlib.h>
#include <string.h>

/* Shards dim 0 (batch) of every activation over @dp. */
static void shard_batch(ir_module *m, int dp) {
    bool *weight = ir_weight_flags(m);
    for (int v = 0; v < m->nvalues; v++)
        if (pu_is_activation(m, weight, v)) m->values[v].type.shard[0] = dp;
    free(weight);
}

/* G = 1: nothing to partition.  Says why, in the words of the config. */
static void keep_one_group(const ir_module *m, const pass_options *opt) {
    int N = ir_seq_world(m);
    pu_dims d = pu_model_dims(m);
    const char *what = strcmp(pu_cfg(m, "sequence", "ulysses"), "ulysses") ? "one sequence-parallel group" : "Ulysses";
    if (!strcmp(pu_cfg(m, "batch_aware", "auto"), "off"))
        pu_remark(opt, "batch-aware: disabled (batch_aware off); keeping %s over %d ranks", what, N);
    else if (d.B == 1)
        pu_remark(opt, "batch-aware: micro_batch 1 cannot be split over groups; keeping %s over %d ranks", what, N);
    else
        pu_remark(opt, "batch-aware: groups = 1; keeping %s over %d ranks", what, N);
}

/* "2, 4 and 8": the G for which the module's layout would be legal. */
static void legal_groups(const ir_module *m, const layout_choice *c, char *buf, size_t n) {
    layout_dims d = pass_layout_dims(m);
    int64_t g[64];
    int k = layout_legal_groups(&d, c, g, 64);
    buf[0] = '\0';
    for (int i = 0; i < k && i < 64; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%lld", len ? ", " : "", (long long)g[i]);
    }
}

bool pass_batch_aware(ir_module *m, const pass_options *opt) {
    layout_choice c = pass_layout_of(m);
    int N = ir_seq_world(m), G = c.groups;
    if (ir_group_find(m, "sp") >= 0 || ir_group_find(m, "dp") >= 0) {
        pu_remark(opt, "batch-aware: the module already has @sp or @dp (batch-aware runs before the sequence "
                       "pass); unchanged");
        return true;
    }
    if (G == 1) {
        keep_one_group(m, opt);
        return true;
    }
    layout_dims d = pass_layout_dims(m);
    char fix[256], why[256], legal[192];
    const char *bad = layout_illegal(&d, &c, fix, sizeof fix);
    if (bad) {
        snprintf(why, sizeof why, "%s", bad);
        legal_groups(m, &c, legal, sizeof legal);
        sup_error(sup_noloc(), "batch-aware: groups %d is not legal: %s", G, why);
        if (legal[0])
            sup_note(sup_noloc(), "legal here: groups %s", legal);
        else if (fix[0])
            sup_note(sup_noloc(), "%s", fix);
        return false;
    }
    int K = N / G;
    int dp = ir_group_add_strided(m, "dp", K);
    shard_batch(m, dp);
    pu_dims md = pu_model_dims(m);
    pu_remark(opt, "batch-aware: G=%d groups of K=%d ranks, %lld sequence(s) per group (config groups)", G, K,
              (long long)(md.B / G));
    return true;
}
