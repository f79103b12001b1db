/* pass_two_level.c — the two-level all-to-all (config a2a = two_level).
 *
 * Input: the Ulysses step whose groups of K ranks span Nn = K/L whole nodes
 * of L = devices_per_node ranks.  A flat all-to-all over such a group sends
 * every rank's piece for every peer over whichever link joins them; with
 * GQA fan-out the same kv head crosses the node link once per rank that
 * shares it.  This pass makes each Ulysses exchange two:
 *
 *   @inter  the Nn ranks of an @sp set with the same local rank (one per node)
 *   @node   the L ranks of an @sp set on one node
 *   @spt    the @sp set in node-transposed order: position l*Nn + n
 *
 * so that @sp = @inter x @node and @spt = @node x @inter
 * (ir_group_nested).  The sequence is sharded over @spt instead of @sp
 * (which token slice a rank holds changes; nothing else does), and
 *
 *   y[B,S,H@sp] = all_to_all x[B,S@spt,H] {group = @sp, split = 2, concat = 1, fanout = F}
 *
 * becomes an exchange across nodes that gathers the node's share of the
 * sequence and splits the heads by node, then one inside the node:
 *
 *   t[B,S@node,H@inter] = all_to_all x {group = @inter, split = 2, concat = 1}
 *   y[B,S,H@sp]         = all_to_all t {group = @node, split = 2, concat = 1, fanout = F}
 *
 * Only the node-level step fans out, so each kv head crosses the node link
 * once (flat: F times).  The way back (split = 1) is the mirror image:
 * @node first (summing the fan-in partial gradients inside the node), then
 * @inter.  Needs K > L, K % L == 0, heads and kv heads divisible by Nn and
 * the node's share splitting over L (even splits only). */
#include "pass_util.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct tl_ctx {
    int sp, spt, node, inter;
    int Nn, L;
} tl_ctx;

/* The three groups over the sets of @sp (each K = Nn*L consecutive ranks
 * starting on a node boundary). */
static tl_ctx tl_groups(ir_module *m, int sp, int L)
{
    const ir_group *g = &m->groups[sp];
    int K = g->set_size, nsets = g->nsets, N = K * nsets, Nn = K / L;
    int *node = sup_xmalloc(sizeof(int) * (size_t)N * 3), *inter = node + N, *spt = inter + N;
    int a = 0, b = 0, c = 0;
    for (int s = 0; s < nsets; s++) {
        const int *r = &m->groups[sp].ranks[s * K];
        for (int n = 0; n < Nn; n++)
            for (int l = 0; l < L; l++)
                node[a++] = r[n * L + l];
        for (int l = 0; l < L; l++)
            for (int n = 0; n < Nn; n++)
                inter[b++] = r[n * L + l], spt[c++] = r[n * L + l];
    }
    tl_ctx t = {.sp = sp, .Nn = Nn, .L = L};
    t.node = ir_group_add(m, "node", N / L, L, node);
    t.inter = ir_group_add(m, "inter", N / Nn, Nn, inter);
    t.spt = ir_group_add(m, "spt", nsets, K, spt);
    free(node);
    return t;
}

/* The all_to_all at index i (over @sp) becomes two; the intermediate
 * [B, S@node, H@inter, Dh] values are named "<result>.mid". */
static void tl_split(ir_module *m, const tl_ctx *t, pass_edits *e, int i)
{
    ir_op op = m->ops[i];
    bool to_heads = ir_attr_int(&op, "split", 0) == 2;
    int64_t fan = ir_attr_int(&op, to_heads ? "fanout" : "fanin", 1);
    int mid[IR_MAX_OUT];
    for (int k = 0; k < op.nout; k++) {
        const ir_type *seq_side = &m->values[to_heads ? op.in[k] : op.out[k]].type;
        ir_type mt = *seq_side;
        mt.shard[1] = t->node;
        mt.shard[2] = t->inter;
        mid[k] = pu_derived(m, op.out[k], ".mid", mt);
    }
    /* to heads: across nodes first, then inside; back: inside first */
    ir_op first = pu_exchange(to_heads ? t->inter : t->node, op.nin, op.in, mid, to_heads, to_heads ? 1 : fan, &op);
    ir_op second = pu_exchange(to_heads ? t->node : t->inter, op.nout, mid, op.out, to_heads, to_heads ? fan : 1, &op);
    pass_insert_before(e, i, &first);
    m->ops[i] = second;
}

/* ---- the strategy: its rules and candidates (layout/'s registry) ------------ */
/* Two-level: the first exchange crosses the group's Nn = K/dpn nodes
 * (heads split Nn ways), the second stays in a node (the node's heads split
 * over its L = dpn devices).  Even splits only. */
static const char *tl_legal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix)
{
    int64_t K = layout_group_size(d, c), L = d->dpn, H = d->H, Hk = d->Hk > 0 ? d->Hk : d->H;
    if (c->seq != LAYOUT_ULYSSES)
        return layout_reason(fix, nfix, "use 'a2a flat' with sequence ring or hybrid",
                             "two-level applies to the flat Ulysses exchange, not to sequence %s",
                             layout_seq_name(c->seq));
    if (L < 1 || K <= L)
        return layout_reason(fix, nfix, "use 'a2a flat', or fewer batch-aware groups so that a group spans nodes",
                             "the group of K=%" PRId64 " ranks fits in one node (devices_per_node %" PRId64
                             "); two-level needs K > devices_per_node", K, L);
    if (K % L)
        return layout_reason(fix, nfix, "a group must be whole nodes: K a multiple of devices_per_node",
                             "the group of K=%" PRId64 " ranks is not whole nodes (devices_per_node %" PRId64 ")",
                             K, L);
    int64_t Nn = K / L;
    if (H % Nn || Hk % Nn)
        return layout_reason(fix, nfix, "the first exchange gives each node of the group heads/Nn q and kv heads",
                             "heads (%" PRId64 ") and kv_heads (%" PRId64 ") must split over the %" PRId64
                             " nodes of a group (two-level first exchange)", H, Hk, Nn);
    int64_t Hn = H / Nn, Hkn = Hk / Nn;
    if (Hn % L)
        return layout_reason(fix, nfix, "the second exchange splits a node's q heads over its devices",
                             "a node's %" PRId64 " heads not divisible by devices_per_node %" PRId64
                             " (two-level second exchange)", Hn, L);
    if (Hkn % L && L % Hkn)
        return layout_reason(fix, nfix, "a node's kv heads must be a multiple or a divisor of devices_per_node",
                             "a node's %" PRId64 " kv heads cannot be split over devices_per_node %" PRId64
                             " (two-level second exchange)", Hkn, L);
    return layout_family_legal(d, c, fix, nfix);
}

static int tl_candidates(const layout_strategy *self, const layout_dims *d, int G, layout_choice *out, int max)
{
    (void)d;
    if (max < 1)
        return 1;
    out[0] = layout_ulysses(G);
    out[0].variant = self;
    return 1;
}

/* NULL when the layout's table (layout/) allows the two-level exchange for
 * the @sp groups here, else the rule that fails. */
static const char *tl_illegal(const ir_module *m, int sp)
{
    static char why[200];
    layout_dims d = pass_layout_dims(m);
    layout_choice c = pass_layout_of(m);
    c.groups = ir_world(m) / m->groups[sp].set_size;
    int L = m->mesh.devices_per_node;
    if (L < 1 || m->groups[sp].ranks[0] % L) {
        snprintf(why, sizeof why, "the @sp sets must start on a node boundary");
        return why;
    }
    return layout_illegal(&d, &c, NULL, 0);
}

bool pass_two_level(ir_module *m, const pass_options *opt)
{
    const char *a2a = pu_cfg(m, "a2a", "flat");
    if (strcmp(a2a, "two_level")) {
        pu_remark(opt, "two-level: layout a2a is '%s'; skipped", a2a);
        return true;
    }
    int sp = ir_group_find(m, "sp");
    if (sp < 0 || ir_group_find(m, "spt") >= 0) {
        pu_remark(opt, "two-level: %s; skipped", sp < 0 ? "no Ulysses group @sp" : "already applied (@spt exists)");
        return true;
    }
    int L = m->mesh.devices_per_node;
    const char *why = tl_illegal(m, sp);
    if (why) {
        sup_error(sup_noloc(), "two-level: %s", why);
        return false;
    }
    tl_ctx t = tl_groups(m, sp, L);
    for (int v = 0; v < m->nvalues; v++)
        if (m->values[v].type.rank >= 2 && m->values[v].type.shard[1] == sp)
            m->values[v].type.shard[1] = t.spt;
    pass_edits edits = {0};
    int n = 0;
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == IR_ALL_TO_ALL && ir_op_group(&m->ops[i]) == sp)
            tl_split(m, &t, &edits, i), n++;
    pass_edits_apply(m, &edits);
    pu_remark(opt, "two-level: %d all-to-all(s) over @sp split into @inter (%d nodes) then @node (%d ranks)", n,
              t.Nn, t.L);
    return true;
}

/* The strategy `layout { a2a two_level }` selects, registered with the
 * pass (its row in passes.def names this function). */
const layout_strategy *pass_two_level_strategy(void)
{
    static const layout_strategy strategy = {
        .name = "ulysses+two_level", .seq = LAYOUT_ULYSSES, .key = "a2a", .word = "two_level",
        .title = "Ulysses, two-level all-to-all", .legal = tl_legal, .candidates = tl_candidates,
        .passes = "ulysses,two-level"};
    return &strategy;
}
