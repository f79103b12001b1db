/* pass_place.c — check where each group lies on the nodes and record it; changes no op.
 *
 * Rank r lives on node ir_node_of(r): r / devices_per_node under the
 * default consecutive placement, else what the mesh's placement says.  The
 * partitioning passes build contiguous groups (set g = ranks g*K ..
 * g*K+K-1); under consecutive placement a set stays on one node exactly
 * when it does not straddle a node boundary, which holds for every set when
 * K divides devices_per_node.  Under another placement (round-robin) the
 * same sets cross nodes, and this pass says so; the cost model charges the
 * crossing, so the planner prefers a layout that suffers less from it.  So
 * this pass changes no op; it records, for every group, whether each of its
 * sets lies on one node (config `place.<group> = aligned|straddles`), and
 * remarks on the groups whose all-to-alls would cross nodes.  Ring
 * collectives (@world, @dp) span nodes by nature and get no remark. */
#include "pass_util.h"

#include <string.h>

/* True when set s of group g lies on one node. */
static bool set_aligned(const ir_module *m, const ir_group *g, int s) {
    const int *r = &g->ranks[s * g->set_size];
    for (int j = 1; j < g->set_size; j++)
        if (ir_node_of(m, r[j]) != ir_node_of(m, r[0])) return false;
    return true;
}

/* True when every set of g holds one rank per node, all of the same local
 * rank (devices_per_node > 1): an exchange between nodes by design (e.g.
 * the across-nodes half of a two-level all-to-all), which no placement of
 * the set inside a node could keep local. */
static bool across_by_design(const ir_module *m, const ir_group *g) {
    int dpn = m->mesh.devices_per_node;
    if (dpn < 2) return false;
    for (int k = 0; k < g->nsets * g->set_size; k++)
        if (ir_local_of(m, g->ranks[k]) != ir_local_of(m, g->ranks[k - k % g->set_size])) return false;
    return true;
}

static bool used_by_all_to_all(const ir_module *m, int g) {
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == IR_ALL_TO_ALL && ir_op_group(&m->ops[i]) == g) return true;
    return false;
}

/* "[3,4,5] spans nodes 0,1" for set s. */
static void describe_set(const ir_module *m, const ir_group *g, int s, char *buf, size_t n) {
    const int *r = &g->ranks[s * g->set_size];
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int j = 0; j < g->set_size && len < n; j++)
        len += (size_t)snprintf(buf + len, n - len, "%s%d", j ? "," : "", r[j]);
    if (len < n) len += (size_t)snprintf(buf + len, n - len, "] spans nodes ");
    int last = -1;
    for (int j = 0; j < g->set_size && len < n; j++) {
        int node = ir_node_of(m, r[j]);
        if (node != last) len += (size_t)snprintf(buf + len, n - len, "%s%d", last >= 0 ? "," : "", node);
        last = node;
    }
}

static void remark_straddle(const ir_module *m, const ir_group *g, int first, int count, const pass_options *opt) {
    char set[256];
    describe_set(m, g, first, set, sizeof set);
    int dpn = m->mesh.devices_per_node;
    char more[64] = "";
    if (count > 1) snprintf(more, sizeof more, " (%d of %d sets straddle nodes)", count, g->nsets);
    if (m->mesh.node_of && g->set_size <= dpn)
        pu_remark(opt,
                  "place: group @%s set %s%s: the mesh's placement puts its ranks on different nodes, so its "
                  "all-to-alls cross nodes; consecutive placement ('placement consecutive', mpirun --map-by "
                  "slot, srun --distribution=block) keeps them inside one",
                  g->name, set, more);
    else if (g->set_size > dpn)
        pu_remark(opt,
                  "place: group @%s set %s%s: its all-to-alls cross nodes; a group size that divides "
                  "devices_per_node (%d) keeps them inside a node",
                  g->name, set, more, dpn);
    else
        pu_remark(opt, "place: group @%s set %s%s; choose a group size that divides devices_per_node (%d)", g->name,
                  set, more, dpn);
}

bool pass_place(ir_module *m, const pass_options *opt) {
    for (int gi = 0; gi < m->ngroups; gi++) {
        const ir_group *g = &m->groups[gi];
        int first = -1, count = 0;
        for (int s = 0; s < g->nsets; s++) {
            if (!set_aligned(m, g, s)) {
                if (first < 0) first = s;
                count++;
            }
        }
        char key[IR_NAME_MAX + 8];
        snprintf(key, sizeof key, "place.%s", g->name);
        ir_config_set(m, key, count ? "straddles" : "aligned");
        if (count && used_by_all_to_all(m, gi) && !across_by_design(m, g)) remark_straddle(m, g, first, count, opt);
    }
    return true;
}
