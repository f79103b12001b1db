/* ir_verify_groups.c — the groups checked together (after rule 2 of
 * ir/README.md, which checks each group alone; docs/writing-a-pass.md,
 * "Rewriting groups").
 *
 * Each group on its own partitions the world (ir_verify.c), but a rank's
 * block of a value sharded by several groups is its position in each of
 * them: `[B@dp, S@sp]` puts rank r at batch block pos_dp(r) and sequence
 * block pos_sp(r).  Two valid groups can still give two ranks the same
 * block and no rank another one (a strategy that rebuilds @sp but not @dp),
 * and the step then trains on the wrong tokens without any op's types being
 * wrong.  So, once every group is valid:
 *   - every value sharded by groups g1..gk is covered evenly: each block
 *     (pos_g1, ..., pos_gk) is held by the same number of ranks (one when
 *     the set sizes multiply to the world);
 *   - a collective over g reads and writes, on every dim it does not
 *     exchange, blocks that all ranks of each set of g agree on: the
 *     position in the group sharding that dim is the same across the set.
 * A dynamic variant's block groups (ir_group.block = K) relate to each
 * other over the positions of their block, never to world groups: the
 * checks pair only groups of the same span. */
#include "ir_verify.h"

#include <stdlib.h>
#include <string.h>

typedef struct ir_gctx {
    ir_vctx *c;
    int world;
    int *pos;           /* pos[g * world + r]: rank r's position in its set of group g */
    signed char *agree; /* agree[g * ngroups + h]: 1 when h's position is constant on g's sets, 0 not, -1 unknown */
    bool *told;         /* told[g * ngroups + h]: a disagreement of this pair was reported */
} ir_gctx;

/* The ranks group g's sets cover: its block, or the world. */
static int ir_span(const ir_gctx *x, int g) {
    int b = x->c->m->groups[g].block;
    return b > 0 ? b : x->world;
}

/* Position of every rank in every group (the groups are valid here). */
static void ir_group_positions(ir_gctx *x) {
    const ir_module *m = x->c->m;
    for (int g = 0; g < m->ngroups; g++) {
        const ir_group *gr = &m->groups[g];
        for (int i = 0; i < gr->nsets * gr->set_size; i++)
            x->pos[(size_t)g * (size_t)x->world + (size_t)gr->ranks[i]] = i % gr->set_size;
    }
}

/* "(@dp 0, @sp 1)": the block whose mixed-radix index over gs is `idx`. */
static void ir_block_str(const ir_module *m, const int *gs, int k, int64_t idx, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "(");
    int64_t digit[IR_MAX_RANK];
    for (int i = k - 1; i >= 0; i--) { /* the last group is the fastest digit */
        digit[i] = idx % m->groups[gs[i]].set_size;
        idx /= m->groups[gs[i]].set_size;
    }
    for (int i = 0; i < k && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s@%s %lld", i ? ", " : "", m->groups[gs[i]].name,
                                (long long)digit[i]);
    if (len < n) snprintf(buf + len, n - len, ")");
}

/* "@dp and @sp", "@a, @b and @c". */
static void ir_groups_str(const ir_module *m, const int *gs, int k, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < k && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s@%s",
                                i == 0       ? ""
                                : i == k - 1 ? " and "
                                             : ", ",
                                m->groups[gs[i]].name);
}

/* Each block of a value sharded by gs (k >= 2 distinct groups) is held by
 * world / prod(set sizes) ranks; else one error at the value. */
static void ir_check_cover(ir_gctx *x, const ir_value *val, const int *gs, int k) {
    const ir_module *m = x->c->m;
    char names[160], a[96], b[96];
    ir_groups_str(m, gs, k, names, sizeof names);
    int span = ir_span(x, gs[0]);
    for (int i = 1; i < k; i++)
        if (ir_span(x, gs[i]) != span) return; /* a block group beside a world group: not related */
    int64_t blocks = 1;
    for (int i = 0; i < k; i++) blocks *= m->groups[gs[i]].set_size;
    if (blocks > span || span % blocks) {
        ir_verr(x->c, val->loc,
                "value %%%s is sharded by %s, whose set sizes multiply to %lld blocks: the %d "
                "ranks cannot hold them evenly",
                val->name, names, (long long)blocks, span);
        return;
    }
    int *holder = sup_xmalloc((size_t)blocks * sizeof *holder), *count = sup_xcalloc((size_t)blocks, sizeof *count);
    int dup = -1, dup_rank = -1;
    for (int r = 0; r < span; r++) {
        int64_t idx = 0;
        for (int i = 0; i < k; i++)
            idx = idx * m->groups[gs[i]].set_size + x->pos[(size_t)gs[i] * (size_t)x->world + (size_t)r];
        if (count[idx]++ == 0)
            holder[idx] = r;
        else if (count[idx] > span / blocks && dup < 0)
            dup = (int)idx, dup_rank = r;
    }
    if (dup >= 0) {
        int64_t missing = 0;
        while (missing < blocks && count[missing] >= span / blocks) missing++;
        ir_block_str(m, gs, k, dup, a, sizeof a);
        ir_block_str(m, gs, k, missing, b, sizeof b);
        if (span == blocks)
            ir_verr(x->c, val->loc,
                    "value %%%s is sharded by %s, but together they do not give every rank its own "
                    "block: ranks %d and %d both hold block %s and no rank holds block %s (each rank's positions in "
                    "%s, taken together, must differ from every other rank's: rebuild the groups together)",
                    val->name, names, holder[dup], dup_rank, a, b, names);
        else
            ir_verr(x->c, val->loc,
                    "value %%%s is sharded by %s, but together they do not cover it evenly: more "
                    "than %d ranks hold block %s (ranks %d and %d among them) and fewer hold block %s (rebuild the "
                    "groups together)",
                    val->name, names, span / (int)blocks, a, holder[dup], dup_rank, b);
    }
    free(holder);
    free(count);
}

/* Every distinct set of sharding groups is checked once (at its first value). */
static void ir_verify_covers(ir_gctx *x) {
    const ir_module *m = x->c->m;
    enum { MAX_SEEN = 64 };
    int seen[MAX_SEEN][IR_MAX_RANK + 1], nseen = 0;
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = &m->values[v];
        int gs[IR_MAX_RANK], k = 0;
        for (int d = 0; d < val->type.rank; d++)
            if (val->type.shard[d] >= 0) gs[k++] = val->type.shard[d]; /* in dim order: the message follows the type */
        if (k < 2) continue; /* one valid group covers each value evenly by itself */
        bool known = false;
        for (int s = 0; s < nseen && !known; s++)
            known = seen[s][0] == k && !memcmp(&seen[s][1], gs, (size_t)k * sizeof *gs);
        if (known) continue;
        if (nseen < MAX_SEEN) {
            seen[nseen][0] = k;
            memcpy(&seen[nseen++][1], gs, (size_t)k * sizeof *gs);
        }
        ir_check_cover(x, val, gs, k);
    }
}

/* True when h's position is the same for all ranks of each set of g; else
 * the first set that disagrees in *set. */
static bool ir_sets_agree(ir_gctx *x, int g, int h, int *set) {
    const ir_group *gr = &x->c->m->groups[g];
    const int *ph = &x->pos[(size_t)h * (size_t)x->world];
    for (int s = 0; s < gr->nsets; s++)
        for (int i = 1; i < gr->set_size; i++)
            if (ph[gr->ranks[s * gr->set_size + i]] != ph[gr->ranks[s * gr->set_size]]) {
                *set = s;
                return false;
            }
    return true;
}

/* Dim d of value v, read or written by collective `op` over g, is not one
 * the collective exchanges: its sharding group must agree across g's sets. */
static void ir_check_kept_dim(ir_gctx *x, const ir_op *op, int g, const ir_value *val, int d) {
    const ir_module *m = x->c->m;
    int h = val->type.shard[d], set = 0;
    size_t key = (size_t)g * (size_t)m->ngroups + (size_t)h;
    if (h < 0 || h == g || x->agree[key] == 1 || ir_span(x, g) != ir_span(x, h)) return;
    if (x->agree[key] < 0) x->agree[key] = ir_sets_agree(x, g, h, &set) ? 1 : 0;
    if (x->agree[key] == 1 || x->told[key]) return;
    x->told[key] = true;
    ir_sets_agree(x, g, h, &set);
    const ir_group *gr = &m->groups[g];
    int r0 = gr->ranks[set * gr->set_size], p0 = x->pos[(size_t)h * (size_t)x->world + (size_t)r0], r1 = r0, p1 = p0;
    for (int i = 1; i < gr->set_size && p1 == p0; i++) {
        r1 = gr->ranks[set * gr->set_size + i];
        p1 = x->pos[(size_t)h * (size_t)x->world + (size_t)r1];
    }
    ir_verr(x->c, sup_noloc(),
            "'%s' over @%s keeps dim %d of %%%s sharded by @%s, but ranks %d and %d of one @%s "
            "set hold different @%s blocks (%d and %d): the ranks of a collective must share the blocks it does "
            "not exchange",
            ir_op_desc_of(op->code)->name, m->groups[g].name, d, val->name, m->groups[h].name, r0, r1,
            m->groups[g].name, m->groups[h].name, p0, p1);
}

/* The dims a collective exchanges: gather/scatter `dim`, all_to_all
 * `split` and `concat`; all_reduce none. */
static bool ir_exchanged(const ir_op *op, int d) {
    return ir_attr_int(op, "dim", -1) == d || ir_attr_int(op, "split", -1) == d || ir_attr_int(op, "concat", -1) == d;
}

static void ir_verify_coll_sets(ir_gctx *x) {
    const ir_module *m = x->c->m;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        const ir_op_desc *info = ir_op_desc_of(op->code);
        if (!info || info->kind != IR_K_COLL) continue;
        const ir_attr *ga = ir_attr_get(op, "group");
        if (!ga || ga->kind != IR_A_GROUP) continue;
        x->c->op = i;
        for (int k = 0; k < op->nin + op->nout; k++) {
            const ir_value *val = &m->values[k < op->nin ? op->in[k] : op->out[k - op->nin]];
            for (int d = 0; d < val->type.rank; d++)
                if (!ir_exchanged(op, d)) ir_check_kept_dim(x, op, (int)ga->i, val, d);
        }
    }
    x->c->op = -1;
}

void ir_verify_groups_joint(ir_vctx *c) {
    const ir_module *m = c->m;
    int world = ir_world(m);
    if (m->ngroups < 2 || world < 2) return;
    size_t ng = (size_t)m->ngroups;
    ir_gctx x = {.c = c, .world = world};
    x.pos = sup_xcalloc(ng * (size_t)world, sizeof *x.pos);
    x.agree = sup_xmalloc(ng * ng);
    x.told = sup_xcalloc(ng * ng, sizeof *x.told);
    memset(x.agree, -1, ng * ng);
    ir_group_positions(&x);
    ir_verify_covers(&x);
    ir_verify_coll_sets(&x);
    free(x.pos);
    free(x.agree);
    free(x.told);
}
