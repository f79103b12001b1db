/* hpz.c — hierarchical ZeRO-3 partitioning (ZeRO++'s hpZ) as a basp pass
 * plugin, built outside the compiler's tree against the installed package.
 *
 * ZeRO-3 keeps 1/N of every weight on each of the N ranks and gathers the
 * whole weight over all N ranks twice per step: before its forward use and
 * again before its backward use.  On a mesh of several nodes both gathers
 * cross the node links.  hpZ keeps a second, node-local shard: the forward
 * gather runs in two steps, first across nodes (which leaves each rank the
 * 1/L of the weight its node position owns: the secondary shard), then
 * inside the node; the secondary shard stays until the backward, whose
 * gather then runs inside the node only.  The price is the secondary
 * shards' memory: 1/L of the weights per rank (L devices per node) from the
 * forward to the backward.
 *
 * In the IR, after the zero pass (ZeRO stage 3):
 *
 *   %w.full     = all_gather %w {group = @world}                  forward
 *   %w.full.bwd = all_gather %w {group = @world}                  backward
 *   %d.w.shard  = reduce_scatter %d.w {group = @world}
 *
 * becomes, with three groups over the mesh of Nn nodes x L devices,
 *
 *   @hpz_node   the L ranks of a node               (Nn sets)
 *   @hpz_inter  the Nn ranks of one local rank      (L sets)
 *   @hpz_world  all ranks, local-rank major: position l*Nn + n holds rank
 *               n*L + l, so that @hpz_world = @hpz_node x @hpz_inter
 *
 *   %w.sec      = all_gather %w {group = @hpz_inter}   : [..@hpz_node..]  (across nodes)
 *   %w.full     = all_gather %w.sec {group = @hpz_node}                   (inside)
 *   %w.full.bwd = all_gather %w.sec {group = @hpz_node}                   (inside)
 *   free %w.sec
 *   %d.w.shard  = reduce_scatter %d.w {group = @hpz_world}
 *
 * with every weight shard (parameters, their gradient shards and
 * accumulators) sharded over @hpz_world instead of @world: the same 1/N per
 * rank, in an order where a rank's node-local slice is whole after the
 * gather across nodes.  The first gather is nested (sharded by @hpz_world
 * in, by @hpz_node out: ir/README.md). */
#include <basp/basp_pass.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The three groups; returns false (with a remark) when the mesh has no
 * two levels. */
static bool hpz_groups(basp_module *m, int *node, int *inter, int *world) {
    int Nn = basp_ir_nodes(m), L = basp_ir_devices_per_node(m), N = Nn * L;
    int *r = malloc(sizeof *r * (size_t)N);
    for (int k = 0; k < N; k++) /* node n: ranks n*L .. n*L+L-1 */
        r[k] = k;
    *node = basp_ir_group_add(m, "hpz_node", Nn, L, r);
    for (int l = 0; l < L; l++) /* local rank l: l, l+L, ... */
        for (int n = 0; n < Nn; n++) r[l * Nn + n] = n * L + l;
    *inter = basp_ir_group_add(m, "hpz_inter", L, Nn, r);
    *world = basp_ir_group_add(m, "hpz_world", 1, N, r); /* the same order, one set */
    free(r);
    if (!basp_ir_group_nested(m, *world, *node, *inter)) {
        basp_pass_error("hpz: @hpz_world is not @hpz_node x @hpz_inter");
        return false;
    }
    return true;
}

static bool is(const basp_module *m, int op, const char *name) { return !strcmp(basp_ir_op_name(m, op), name); }

/* Every ZeRO shard over @world moves to @hpz_world, with the gathers and
 * reductions that make or read it. */
static void hpz_reorder(basp_module *m, int world, int hw) {
    for (int v = 0; v < basp_ir_value_count(m); v++)
        for (int d = 0; d < basp_ir_value_rank(m, v); d++)
            if (basp_ir_value_shard(m, v, d) == world) basp_ir_value_set_shard(m, v, d, hw);
    for (int i = 0; i < basp_ir_op_count(m); i++)
        if ((is(m, i, "all_gather") || is(m, i, "reduce_scatter")) && basp_ir_op_group(m, i) == world)
            basp_ir_op_set_attr_group(m, i, "group", hw);
}

/* The forward gather of a parameter becomes the gather across nodes (into
 * its secondary shard) then the one inside; a later gather of the same
 * parameter (the backward's, or a recomputation's) reads the secondary
 * shard inside the node.  Each secondary shard is freed after its last
 * gather.  Returns the number of gathers changed. */
static int hpz_gathers(basp_module *m, int node, int inter, int hw) {
    int nv = basp_ir_value_count(m), nops = basp_ir_op_count(m), changed = 0, nsec = 0;
    int *sec = malloc(sizeof *sec * (size_t)nv);     /* parameter -> its current secondary shard */
    int *last = malloc(sizeof *last * (size_t)nops); /* k-th secondary shard -> its last gather */
    int *secv = malloc(sizeof *secv * (size_t)nops); /* k-th secondary shard -> its value */
    for (int v = 0; v < nv; v++) sec[v] = -1;
    basp_edits *e = basp_edits_new();
    for (int i = 0; i < nops; i++) {
        if (!is(m, i, "all_gather") || basp_ir_op_group(m, i) != hw) continue;
        int w = basp_ir_op_input(m, i, 0), d = (int)basp_ir_op_attr_int(m, i, "dim", 0);
        if (basp_ir_value_kind(m, w) != BASP_V_PARAM) continue;
        if (!strcmp(basp_ir_op_phase(m, i), "fwd")) {
            char base[128];
            snprintf(base, sizeof base, "%s.sec", basp_ir_value_name(m, w));
            int s = basp_ir_value_like(m, base, w);
            basp_ir_value_set_shard(m, s, d, node);
            int h = basp_edits_insert_before(e, i, "all_gather", &w, 1, &s, 1, i);
            basp_edits_attr_group(e, h, "group", inter);
            basp_edits_attr_int(e, h, "dim", d);
            sec[w] = nsec++;
            secv[sec[w]] = s;
        } else if (sec[w] < 0) {
            continue; /* no forward gather before it: stays over @hpz_world */
        }
        basp_ir_op_set_input(m, i, 0, secv[sec[w]]);
        basp_ir_op_set_attr_group(m, i, "group", node);
        last[sec[w]] = i;
        changed++;
    }
    for (int k = 0; k < nsec; k++) basp_edits_insert_after(e, last[k], "free", &secv[k], 1, NULL, 0, last[k]);
    basp_edits_apply(m, e);
    free(sec);
    free(last);
    free(secv);
    return changed;
}

static bool hpz_pass(basp_module *m) {
    const char *word = basp_module_config(m, "a2a");
    if (!word || strcmp(word, "hpz")) {
        basp_pass_remark("hpz: layout a2a is '%s'; skipped", word ? word : "flat");
        return true;
    }
    if (basp_ir_config_int(m, "zero", 0) != 3) { /* the layout asks for it: not a skip */
        basp_pass_error("hpz: a2a hpz needs ZeRO stage 3 (train { zero 3 }): stage %lld gathers no weights in the "
                        "backward, so there is nothing to keep inside a node",
                        (long long)basp_ir_config_int(m, "zero", 0));
        return false;
    }
    int world = basp_ir_group_find(m, "world"), node, inter, hw;
    if (world < 0 || basp_ir_group_find(m, "hpz_world") >= 0) {
        basp_pass_remark("hpz: %s; skipped", world < 0 ? "no group @world" : "already applied");
        return true;
    }
    if (!hpz_groups(m, &node, &inter, &hw)) return false;
    hpz_reorder(m, world, hw);
    int n = hpz_gathers(m, node, inter, hw);
    basp_pass_remark("hpz: %d weight gathers made hierarchical: forward across @hpz_inter (%d nodes) then inside "
                     "@hpz_node (%d ranks), backward inside the node from the secondary shard",
                     n, basp_ir_nodes(m), basp_ir_devices_per_node(m));
    return true;
}

/* hpZ needs two levels: several nodes, each of several devices (Ulysses'
 * own rules apply after this). */
static const char *hpz_legal(const basp_layout_dims *d, const basp_layout_choice *c, char *fix, size_t nfix) {
    (void)c;
    if (d->nodes < 2 || d->dpn < 2) {
        snprintf(fix, nfix,
                 "hpZ keeps the backward gathers inside a node: use a mesh of several nodes, each of "
                 "several devices, or 'a2a flat'");
        return "hpz needs nodes >= 2 and devices_per_node >= 2";
    }
    return NULL;
}

static bool hpz_register(void) {
    static const basp_strategy strategy = {.name = "ulysses+hpz",
                                           .family = "ulysses",
                                           .key = "a2a",
                                           .word = "hpz",
                                           .title = "Ulysses, hierarchical ZeRO-3 (hpZ)",
                                           .legal = hpz_legal,
                                           .passes = "ulysses",
                                           .after_zero = "hpz"};
    return basp_register_pass("hpz",
                              "ZeRO++ hpZ: node-local secondary weight shards, backward gathers inside "
                              "a node (a2a hpz, ZeRO 3)",
                              hpz_pass) &&
           basp_register_strategy(&strategy);
}

BASP_PLUGIN_EXPORT basp_plugin_info basp_pass_plugin_info(void) {
    return (basp_plugin_info){BASP_PASS_API_VERSION, "hpz", "1.0", hpz_register};
}
