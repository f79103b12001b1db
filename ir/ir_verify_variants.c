/* ir_verify_variants.c — the rules of a module holding the variants of
 * batch_aware dynamic (driver/dynamic.c): ops tagged `variant = K`, one
 * variant per group size, each run by the ranks of a K-rank group while
 * ranks of other groups run theirs.
 *
 *   1. each variant's ops are one contiguous run, and every op outside the
 *      runs is of the apply phase (phase opt), after them;
 *   2. a value an op of variant K defines is read only by ops of variant K
 *      (the accumulators, written by `accumulate`, carry what a micro-step
 *      leaves to the apply phase);
 *   3. an op of variant K names only world groups and block groups of
 *      block K, in its group attribute and in its values' shardings;
 *   4. every variant meets the same collectives over world groups, in the
 *      same order, with the same element counts: ranks in different groups
 *      run different variants at once, and a world collective that one
 *      variant has and another lacks (or runs in another order) would pair
 *      the wrong calls or hang. */
#include "ir_verify.h"

#include <stdlib.h>
#include <string.h>

/* The world collective `k`-th of variant run [lo, hi), or -1. */
static int ir_vv_world_coll(const ir_module *m, int lo, int hi, int k) {
    for (int i = lo; i < hi; i++) {
        const ir_op *op = &m->ops[i];
        int g = ir_op_group(op);
        if (ir_op_desc_of(op->code)->kind != IR_K_COLL || g < 0 || g >= m->ngroups || m->groups[g].block) continue;
        if (k-- == 0) return i;
    }
    return -1;
}

static int64_t ir_vv_elems(const ir_module *m, const ir_op *op) {
    return op->nin > 0 && op->in[0] >= 0 ? ir_type_global_elems(&m->values[op->in[0]].type) : 0;
}

/* Rule 4: run [lo, hi) against the first run [lo0, hi0). */
static void ir_vv_same_colls(ir_vctx *c, int lo0, int hi0, int lo, int hi) {
    const ir_module *m = c->m;
    int K0 = (int)ir_attr_int(&m->ops[lo0], "variant", 0), K = (int)ir_attr_int(&m->ops[lo], "variant", 0);
    for (int k = 0;; k++) {
        int a = ir_vv_world_coll(m, lo0, hi0, k), b = ir_vv_world_coll(m, lo, hi, k);
        if (a < 0 && b < 0) return;
        char sa[160], sb[160];
        if (a < 0 || b < 0 || m->ops[a].code != m->ops[b].code || ir_op_group(&m->ops[a]) != ir_op_group(&m->ops[b]) ||
            ir_vv_elems(m, &m->ops[a]) != ir_vv_elems(m, &m->ops[b])) {
            c->op = b >= 0 ? b : -1;
            ir_verr(c, sup_noloc(),
                    "variant %d's world collective %d is %s, but variant %d's is %s: every variant must meet the "
                    "same collectives over world groups in the same order",
                    K, k, b >= 0 ? ir_op_str(m, b, sb, sizeof sb) : "missing", K0,
                    a >= 0 ? ir_op_str(m, a, sa, sizeof sa) : "missing");
            c->op = -1;
            return;
        }
    }
}

/* Rule 3 for one group index used by op i of variant K. */
static void ir_vv_group(ir_vctx *c, int g, int K) {
    const ir_module *m = c->m;
    if (g < 0 || g >= m->ngroups || m->groups[g].block == 0 || m->groups[g].block == K) return;
    ir_verr(c, sup_noloc(), "an op of variant %d uses @%s, a block group of variant %d", K, m->groups[g].name,
            m->groups[g].block);
}

/* Rules 2 and 3 for op i of variant K (variant[] of every op). */
static void ir_vv_op(ir_vctx *c, int i, int K, const int *variant) {
    const ir_module *m = c->m;
    const ir_op *op = &m->ops[i];
    c->op = i;
    ir_vv_group(c, ir_op_group(op), K);
    for (int k = 0; k < op->nin + op->nout; k++) {
        int v = k < op->nin ? op->in[k] : op->out[k - op->nin];
        if (v < 0 || v >= m->nvalues) continue;
        const ir_value *val = &m->values[v];
        for (int d = 0; d < val->type.rank; d++) ir_vv_group(c, val->type.shard[d], K);
        if (k < op->nin && val->kind == IR_V_RESULT && val->def >= 0 && variant[val->def] != K) {
            ir_verr(c, sup_noloc(), "reads %%%s, which variant %d defines (a variant reads only its own values)",
                    val->name, variant[val->def]);
            break; /* once per op */
        }
    }
    c->op = -1;
}

void ir_verify_variants(ir_vctx *c) {
    const ir_module *m = c->m;
    int *variant = sup_xmalloc(sizeof(int) * (size_t)(m->nops + 1));
    bool any = false;
    for (int i = 0; i < m->nops; i++) any |= (variant[i] = (int)ir_attr_int(&m->ops[i], "variant", 0)) > 0;
    if (!any) {
        free(variant);
        return;
    }
    int lo0 = -1, hi0 = -1;
    for (int i = 0; i < m->nops;) {
        int K = variant[i], j = i;
        while (j < m->nops && variant[j] == K) j++;
        if (K == 0) {
            for (int k = i; k < j; k++)
                if (strcmp(ir_op_phase(&m->ops[k]), "opt") || j < m->nops) {
                    c->op = k;
                    ir_verr(c, sup_noloc(),
                            "in a module of variants every op outside them is of the apply phase, "
                            "after them");
                    c->op = -1;
                    break;
                }
        } else {
            for (int k = 0; k < i; k++)
                if (variant[k] == K) {
                    c->op = i;
                    ir_verr(c, sup_noloc(), "variant %d's ops are not one contiguous run", K);
                    c->op = -1;
                    break;
                }
            for (int k = i; k < j; k++) ir_vv_op(c, k, K, variant);
            if (lo0 < 0)
                lo0 = i, hi0 = j;
            else
                ir_vv_same_colls(c, lo0, hi0, i, j);
        }
        i = j;
    }
    free(variant);
}
