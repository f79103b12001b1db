/* two_level.c — the two-level all-to-all (layout { a2a two_level }), a
 * strategy on top of the Ulysses family: its pass, its rules and its
 * registration, written against api/basp_pass.h only, as a plugin is
 * (examples/hpz/ is one built outside the tree).  basp registers it when
 * the library starts; its pass's place in the pipeline and its summary
 * are its row in passes/passes.def.
 *
 * Input: the Ulysses step whose groups of K ranks span Nn = K/L whole nodes
 * of L = devices_per_node ranks.  A flat all-to-all over such a group sends
 * every rank's piece for every peer over whichever link joins them; with
 * GQA fan-out the same kv head crosses the node link once per rank that
 * shares it.  The pass makes each Ulysses exchange two:
 *
 *   @inter  the Nn ranks of an @sp set with the same local rank (one per node)
 *   @node   the L ranks of an @sp set on one node
 *   @spt    the @sp set in node-transposed order: position l*Nn + n
 *
 * so that @sp = @inter x @node and @spt = @node x @inter
 * (basp_ir_group_nested).  The sequence is sharded over @spt instead of
 * @sp (which token slice a rank holds changes; nothing else does), and
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
#include "strategies.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tl_groups {
    int sp, spt, node, inter;
    int Nn, L;
} tl_groups;

/* The three groups over the sets of @sp (each K = Nn*L consecutive ranks
 * starting on a node boundary). */
static tl_groups tl_add_groups(basp_module *m, int sp, int L) {
    int K = basp_ir_group_set_size(m, sp), nsets = basp_ir_group_sets(m, sp), N = K * nsets, Nn = K / L;
    int *node = malloc(sizeof(int) * (size_t)N * 3), *inter = node + N, *spt = inter + N;
    int a = 0, b = 0, c = 0;
    for (int s = 0; s < nsets; s++) {
        for (int n = 0; n < Nn; n++)
            for (int l = 0; l < L; l++) node[a++] = basp_ir_group_rank(m, sp, s, n * L + l);
        for (int l = 0; l < L; l++)
            for (int n = 0; n < Nn; n++) inter[b++] = spt[c++] = basp_ir_group_rank(m, sp, s, n * L + l);
    }
    tl_groups t = {.sp = sp, .Nn = Nn, .L = L};
    t.node = basp_ir_group_add(m, "node", N / L, L, node);
    t.inter = basp_ir_group_add(m, "inter", N / Nn, Nn, inter);
    t.spt = basp_ir_group_add(m, "spt", nsets, K, spt);
    free(node);
    return t;
}

/* The all_to_all at index i (over @sp) becomes two, recorded before it and
 * it removed; the intermediate [B, S@node, H@inter, Dh] values are named
 * "<result>.mid". */
static void tl_split(basp_module *m, const tl_groups *t, basp_edits *e, int i) {
    enum { MAX = 8 };
    bool to_heads = basp_ir_op_attr_int(m, i, "split", 0) == 2;
    int64_t fan = basp_ir_op_attr_int(m, i, to_heads ? "fanout" : "fanin", 1);
    int n = basp_ir_op_num_outputs(m, i), in[MAX], out[MAX], mid[MAX];
    for (int k = 0; k < n && k < MAX; k++) {
        in[k] = basp_ir_op_input(m, i, k);
        out[k] = basp_ir_op_output(m, i, k);
        mid[k] = basp_ir_value_derived(m, out[k], ".mid", to_heads ? in[k] : out[k]); /* the sequence side */
        basp_ir_value_set_shard(m, mid[k], 1, t->node);
        basp_ir_value_set_shard(m, mid[k], 2, t->inter);
    }
    n = n < MAX ? n : MAX;
    /* to heads: across nodes first, then inside; back: inside first */
    basp_edits_exchange_before(e, i, to_heads ? t->inter : t->node, n, in, mid, to_heads, to_heads ? 1 : fan, i);
    basp_edits_exchange_before(e, i, to_heads ? t->node : t->inter, n, mid, out, to_heads, to_heads ? fan : 1, i);
    basp_edits_remove(e, i);
}

/* ---- the strategy: its rules (the registry's row) ----------------------------------- */
/* Two-level: the first exchange crosses the group's Nn = K/dpn nodes
 * (heads split Nn ways), the second stays in a node (the node's heads split
 * over its L = dpn devices).  Even splits only.  The Ulysses family's rules
 * apply after these. */
static const char *tl_legal(const basp_layout_dims *d, const basp_layout_choice *c, char *fix, size_t nfix) {
    int64_t K = c->groups >= 1 && d->N % c->groups == 0 ? d->N / c->groups : 0;
    int64_t L = d->dpn, H = d->H, Hk = d->Hk > 0 ? d->Hk : d->H;
    const char *family = basp_layout_family(c);
    if (family && strcmp(family, "ulysses"))
        return basp_layout_reason(fix, nfix, "use 'a2a flat' with sequence ring or hybrid",
                                  "two-level applies to the flat Ulysses exchange, not to sequence %s", family);
    if (L < 1 || K <= L)
        return basp_layout_reason(fix, nfix, "use 'a2a flat', or fewer batch-aware groups so that a group spans nodes",
                                  "the group of K=%" PRId64 " ranks fits in one node (devices_per_node %" PRId64
                                  "); two-level needs K > devices_per_node",
                                  K, L);
    if (K % L)
        return basp_layout_reason(fix, nfix, "a group must be whole nodes: K a multiple of devices_per_node",
                                  "the group of K=%" PRId64 " ranks is not whole nodes (devices_per_node %" PRId64 ")",
                                  K, L);
    int64_t Nn = K / L;
    if (H % Nn || Hk % Nn)
        return basp_layout_reason(fix, nfix, "the first exchange gives each node of the group heads/Nn q and kv heads",
                                  "heads (%" PRId64 ") and kv_heads (%" PRId64 ") must split over the %" PRId64
                                  " nodes of a group (two-level first exchange)",
                                  H, Hk, Nn);
    int64_t Hn = H / Nn, Hkn = Hk / Nn;
    if (Hn % L)
        return basp_layout_reason(fix, nfix, "the second exchange splits a node's q heads over its devices",
                                  "a node's %" PRId64 " heads not divisible by devices_per_node %" PRId64
                                  " (two-level second exchange)",
                                  Hn, L);
    if (Hkn % L && L % Hkn)
        return basp_layout_reason(fix, nfix, "a node's kv heads must be a multiple or a divisor of devices_per_node",
                                  "a node's %" PRId64 " kv heads cannot be split over devices_per_node %" PRId64
                                  " (two-level second exchange)",
                                  Hkn, L);
    return NULL;
}

/* ---- the pass ---------------------------------------------------------------------- */
/* NULL when the layout's rules allow the two-level exchange for the @sp
 * groups here, else the rule that fails. */
static const char *tl_illegal(const basp_module *m, int sp) {
    int L = basp_ir_devices_per_node(m);
    if (L < 1 || basp_ir_group_rank(m, sp, 0, 0) % L) return "the @sp sets must start on a node boundary";
    return basp_ir_layout_illegal(m, basp_ir_world(m) / basp_ir_group_set_size(m, sp));
}

static bool tl_pass(basp_module *m) {
    const char *a2a = basp_module_config(m, "a2a");
    if (!a2a || !*a2a) a2a = "flat";
    if (strcmp(a2a, "two_level")) {
        basp_pass_remark("two-level: layout a2a is '%s'; skipped", a2a);
        return true;
    }
    int sp = basp_ir_group_find(m, "sp");
    if (sp < 0 || basp_ir_group_find(m, "spt") >= 0) {
        basp_pass_remark("two-level: %s; skipped", sp < 0 ? "no Ulysses group @sp" : "already applied (@spt exists)");
        return true;
    }
    const char *why = tl_illegal(m, sp);
    if (why) {
        basp_pass_error("two-level: %s", why);
        return false;
    }
    tl_groups t = tl_add_groups(m, sp, basp_ir_devices_per_node(m));
    for (int v = 0; v < basp_ir_value_count(m); v++)
        if (basp_ir_value_rank(m, v) >= 2 && basp_ir_value_shard(m, v, 1) == sp)
            basp_ir_value_set_shard(m, v, 1, t.spt);
    basp_edits *e = basp_edits_new();
    int n = 0;
    for (int i = 0; i < basp_ir_op_count(m); i++)
        if (!strcmp(basp_ir_op_name(m, i), "all_to_all") && basp_ir_op_group(m, i) == sp) tl_split(m, &t, e, i), n++;
    basp_edits_apply(m, e);
    basp_pass_remark("two-level: %d all-to-all(s) over @sp split into @inter (%d nodes) then @node (%d ranks)", n, t.Nn,
                     t.L);
    return true;
}

/* ---- registration ------------------------------------------------------------------ */
static bool two_level_register(void) {
    static const basp_strategy strategy = {.name = "ulysses+two_level",
                                           .family = "ulysses",
                                           .key = "a2a",
                                           .word = "two_level",
                                           .title = "Ulysses, two-level all-to-all",
                                           .legal = tl_legal,
                                           .passes = "ulysses,two-level"};
    /* NULL summary: passes.def's row gives it, with the pass's place */
    return basp_register_pass("two-level", NULL, tl_pass) && basp_register_strategy(&strategy);
}

basp_plugin_info basp_strategies_two_level(void) {
    return (basp_plugin_info){BASP_PASS_API_VERSION, "two-level", BASP_VERSION, two_level_register};
}
