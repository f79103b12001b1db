/* schedule.c — the communication schedule: every collective in schedule
 * order with its group, and what it costs each rank on the wire.
 *
 * Traffic models (bytes = ir_type_local_elems * dtype size; P = ranks in each
 * set of the op's group; node of rank r = r / devices_per_node):
 *   all_to_all      pairwise: each rank keeps 1/P of its data and sends a
 *                   chunk to each of the P-1 others.  chunk = sum over the
 *                   fused pairs of max(local in, local out) / P — the larger
 *                   side, so a GQA fanout (output has the virtual heads) or
 *                   fanin (input has them) counts the data actually moved.
 *                   sent = chunk*(P-1), peers = P-1, inter-node = chunk times
 *                   the peers in the rank's set on another node (max over
 *                   ranks).  An uneven split (ir/README.md) sends chunks
 *                   of different sizes: sent and inter-node are computed per
 *                   rank and the max over ranks is reported.
 *   all_gather      ring: sent = local in * (P-1)
 *   reduce_scatter  ring: sent = local in * (P-1)/P
 *   all_reduce      ring (reduce-scatter + all-gather): sent = 2*(P-1)/P*local
 *                   ring collectives: peers = min(2, P-1) (both ring
 *                   neighbours); inter-node = the rank's sent bytes when its
 *                   ring successor (next rank of its set) is on another
 *                   node, max over ranks.
 *   ring_attention  R-1 steps, each sending this rank's (k, v) block to its
 *                   ring successor: sent = (k + v) * (R-1); the backward
 *                   also hands the (dk, dv) accumulators on at each of its R
 *                   steps: + (dk + dv) * R.  peers = min(2, R-1) (the two
 *                   ring neighbours); inter-node as for ring collectives.
 * A set of one rank moves nothing.  The totals split every op's bytes and
 * peers by link class: intra-node and inter-node. */
#include "pass_util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static double local_bytes(const ir_module *m, int v) {
    const ir_type *t = &m->values[v].type;
    return (double)ir_type_local_elems(m, t) * ir_dtype_size(t->dtype);
}

static int max_remote_peers(const ir_module *m, const ir_group *g);

/* An all_to_all with an uneven split (ir/README.md): chunks differ by peer,
 * so bytes and inter-node bytes are computed per rank, and the report takes
 * the max over ranks.  Rank p sends peer q, per pair, the other dims times
 * p's local concat entries times q's split entries.  False when no value of
 * the op is uneven (the even model above applies). */
static bool uneven_all_to_all(const ir_module *m, const ir_op *op, const ir_group *g, pass_traffic *t) {
    bool any = false;
    for (int k = 0; k < op->nin + op->nout; k++)
        any |= ir_type_uneven(m, &m->values[k < op->nin ? op->in[k] : op->out[k - op->nin]].type);
    int split = (int)ir_attr_int(op, "split", -1), concat = (int)ir_attr_int(op, "concat", -1);
    if (!any || split < 0 || concat < 0) return false;
    int P = g->set_size;
    double best = 0, best_inter = 0;
    for (int s = 0; s < g->nsets; s++)
        for (int p = 0; p < P; p++) {
            double sent = 0, inter = 0;
            for (int q = 0; q < P; q++) {
                if (q == p) continue;
                double bytes = 0;
                for (int k = 0; k < op->nin && k < op->nout; k++) {
                    const ir_type *x = &m->values[op->in[k]].type, *y = &m->values[op->out[k]].type;
                    double e = (double)ir_type_local_dim(m, x, concat, p) * (double)ir_type_local_dim(m, y, split, q);
                    for (int d = 0; d < x->rank; d++)
                        if (d != split && d != concat) e *= (double)ir_type_max_local_dim(m, x, d);
                    bytes += e * ir_dtype_size(x->dtype);
                }
                sent += bytes;
                if (ir_node_of(m, g->ranks[s * P + p]) != ir_node_of(m, g->ranks[s * P + q])) inter += bytes;
            }
            best = sent > best ? sent : best;
            best_inter = inter > best_inter ? inter : best_inter;
        }
    t->bytes_sent = best;
    t->peers = P - 1;
    t->inter_bytes = best_inter;
    t->inter_peers = max_remote_peers(m, g);
    return true;
}

/* Most peers a rank of group g has on other nodes. */
static int max_remote_peers(const ir_module *m, const ir_group *g) {
    int best = 0;
    for (int s = 0; s < g->nsets; s++) {
        const int *set = &g->ranks[s * g->set_size];
        for (int a = 0; a < g->set_size; a++) {
            int n = 0;
            for (int b = 0; b < g->set_size; b++) n += ir_node_of(m, set[b]) != ir_node_of(m, set[a]);
            if (n > best) best = n;
        }
    }
    return best;
}

/* True when some rank's ring successor is on another node. */
static bool ring_crosses(const ir_module *m, const ir_group *g) {
    for (int s = 0; s < g->nsets; s++) {
        const int *set = &g->ranks[s * g->set_size];
        for (int a = 0; a < g->set_size; a++)
            if (ir_node_of(m, set[a]) != ir_node_of(m, set[(a + 1) % g->set_size])) return true;
    }
    return false;
}

/* A compute op overlapped with a ring (ring_attention and its backward):
 * the blocks it passes one hop per step (its work's hop_bytes: k and v),
 * and, when it hands results on after each block (tail_hops: the
 * backward's dk, dv accumulators, its outputs 1 and 2), those too. */
static pass_traffic ring_traffic(const ir_module *m, const ir_op *op, const ir_group *g) {
    pass_traffic t = {0, 0, 0, 0};
    int P = g->set_size;
    ir_op_work w = ir_op_work_of(m, op);
    t.bytes_sent = w.hop_bytes * (P - 1);
    if (w.tail_hops && op->nout >= 3) t.bytes_sent += (local_bytes(m, op->out[1]) + local_bytes(m, op->out[2])) * P;
    t.peers = P - 1 < 2 ? P - 1 : 2;
    t.inter_bytes = ring_crosses(m, g) ? t.bytes_sent : 0;
    t.inter_peers = ring_crosses(m, g) ? (P > 2 ? 2 : 1) : 0;
    return t;
}

pass_traffic pass_op_traffic(const ir_module *m, const ir_op *op) {
    pass_traffic t = {0, 0, 0, 0};
    int gi = ir_op_group(op);
    const ir_op_desc *d = ir_op_desc_of(op->code);
    bool ring = d->comm == IR_COMM_RING_OVERLAP;
    if (gi < 0 || gi >= m->ngroups || (d->kind != IR_K_COLL && !ring)) return t;
    const ir_group *g = &m->groups[gi];
    int P = g->set_size;
    if (P <= 1 || op->nin < 1) return t;
    if (ring) return ring_traffic(m, op, g);
    if (d->comm == IR_COMM_ALL_TO_ALL) {
        if (uneven_all_to_all(m, op, g, &t)) return t;
        double chunk = 0;
        for (int k = 0; k < op->nin && k < op->nout; k++) {
            double a = local_bytes(m, op->in[k]), b = local_bytes(m, op->out[k]);
            chunk += (a > b ? a : b) / P;
        }
        t.bytes_sent = chunk * (P - 1);
        t.peers = P - 1;
        t.inter_bytes = chunk * max_remote_peers(m, g);
        t.inter_peers = max_remote_peers(m, g);
        return t;
    }
    if (d->comm != IR_COMM_RING || !d->ring_sent) return t;
    t.bytes_sent = d->ring_sent(local_bytes(m, op->in[0]), P);
    t.peers = P - 1 < 2 ? P - 1 : 2;
    t.inter_bytes = ring_crosses(m, g) ? t.bytes_sent : 0;
    t.inter_peers = ring_crosses(m, g) ? (P > 2 ? 2 : 1) : 0;
    return t;
}

/* ---- shared by both reports ------------------------------------------- */
enum { NKINDS = 5 };
static const ir_opcode kinds[NKINDS] = {IR_ALL_TO_ALL, IR_ALL_GATHER, IR_REDUCE_SCATTER, IR_ALL_REDUCE,
                                        IR_RING_ATTENTION};

typedef struct totals {
    int count[NKINDS];
    double bytes[NKINDS], inter[NKINDS];
    int a2a_peers;                /* most peers of any all-to-all */
    int intra_peers, inter_peers; /* most peers per link class, any op */
} totals;

/* ring_attention_bwd counts with ring_attention: one kind, "ring". */
static int kind_index(ir_opcode code) {
    if (code == IR_RING_ATTENTION_BWD) code = IR_RING_ATTENTION;
    for (int k = 0; k < NKINDS; k++)
        if (kinds[k] == code) return k;
    return -1;
}

/* Times op runs per optimizer step: accum (config, gradient accumulation)
 * for the micro-step's ops, once for the apply phase's (`phase = opt`). */
static int runs_per_step(const ir_module *m, const ir_op *op) {
    int a = (int)ir_config_int(m, "accum", 1);
    return a > 1 && strcmp(ir_op_phase(op), "opt") != 0 ? a : 1;
}

static totals sum_traffic(const ir_module *m) {
    totals t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < m->nops; i++) {
        int k = kind_index(m->ops[i].code);
        if (k < 0) continue;
        pass_traffic tr = pass_op_traffic(m, &m->ops[i]);
        int n = runs_per_step(m, &m->ops[i]);
        t.count[k] += n;
        t.bytes[k] += n * tr.bytes_sent;
        t.inter[k] += n * tr.inter_bytes;
        if (m->ops[i].code == IR_ALL_TO_ALL && tr.peers > t.a2a_peers) t.a2a_peers = tr.peers;
        if (tr.peers - tr.inter_peers > t.intra_peers) t.intra_peers = tr.peers - tr.inter_peers;
        if (tr.inter_peers > t.inter_peers) t.inter_peers = tr.inter_peers;
    }
    return t;
}

static const char *kind_name(int k) { return kinds[k] == IR_RING_ATTENTION ? "ring" : ir_op_desc_of(kinds[k])->name; }

/* ---- text ---------------------------------------------------------------- */
enum { MAX_SHOWN_SETS = 8, MAX_SHOWN_ITEMS = 8, MIN_STRIDED = 5 };

/* "[0-3]" for runs of consecutive ranks, "[0,8,...,56]" for a longer
 * strided stretch, "[0,4]" otherwise; after MAX_SHOWN_ITEMS such items the
 * rest is elided ("... 500 more"), so one line stays short on any mesh. */
static void fmt_set(sup_buf *b, const int *r, int n) {
    sup_buf_puts(b, "[");
    int items = 0;
    for (int i = 0; i < n; items++) {
        if (items == MAX_SHOWN_ITEMS) {
            sup_buf_printf(b, ",... %d more", n - i);
            break;
        }
        int j = i;
        while (j + 1 < n && r[j + 1] == r[j] + 1) j++;
        sup_buf_printf(b, "%s%d", i ? "," : "", r[i]);
        if (j > i) {
            sup_buf_printf(b, "-%d", r[j]);
        } else if (i + 1 < n && r[i + 1] - r[i] > 1) {
            int d = r[i + 1] - r[i];
            while (j + 1 < n && r[j + 1] == r[j] + d) j++;
            if (j - i + 1 >= MIN_STRIDED)
                sup_buf_printf(b, ",%d,...,%d", r[i] + d, r[j]);
            else
                j = i;
        }
        i = j + 1;
    }
    sup_buf_puts(b, "]");
}

/* "{[0-3] [4-7]}", eliding sets past MAX_SHOWN_SETS. */
static void fmt_group(sup_buf *b, const ir_group *g) {
    sup_buf_puts(b, "{");
    for (int s = 0; s < g->nsets && s < MAX_SHOWN_SETS; s++) {
        if (s) sup_buf_puts(b, " ");
        fmt_set(b, &g->ranks[s * g->set_size], g->set_size);
    }
    if (g->nsets > MAX_SHOWN_SETS) sup_buf_printf(b, " ... %d more", g->nsets - MAX_SHOWN_SETS);
    sup_buf_puts(b, "}");
}

static void fmt_values(sup_buf *b, const ir_module *m, const ir_op *op) {
    for (int k = 0; k < op->nin; k++) sup_buf_printf(b, "%s%s", k ? "," : "", m->values[op->in[k]].name);
}

static void print_header(const ir_module *m, FILE *out) {
    fprintf(out, "schedule of module @%s: world %d = %d nodes x %d devices per node\n", m->name, ir_world(m),
            m->mesh.nodes, m->mesh.devices_per_node);
    fprintf(out, "groups:\n");
    for (int gi = 0; gi < m->ngroups; gi++) {
        const ir_group *g = &m->groups[gi];
        sup_buf b = {0};
        fmt_group(&b, g);
        fprintf(out, "  @%-8s %3d set(s) of %-3d %s%s\n", g->name, g->nsets, g->set_size, b.data,
                g->block ? "  positions in a block of consecutive ranks placed per micro-step (shown at rank 0)" : "");
        sup_buf_free(&b);
    }
    const char *dyn = ir_config_get(m, "dyn_sizes");
    if (dyn)
        fprintf(out,
                "batch_aware dynamic: variants for groups of %s rank(s); in each micro-step a rank runs the rows of "
                "its group's variant (the values named vK.), then the opt rows once a step; the totals add every "
                "variant once\n",
                dyn);
    int a = (int)ir_config_int(m, "accum", 1);
    if (a > 1)
        fprintf(out,
                "gradient accumulation: %d micro-steps per optimizer step: the fwd and bwd rows run %d times a "
                "step, the opt rows (the apply phase) once; the totals count every run\n",
                a, a);
}

static int values_width(const ir_module *m) {
    int w = 6;
    for (int i = 0; i < m->nops; i++) {
        if (kind_index(m->ops[i].code) < 0) continue;
        sup_buf b = {0};
        fmt_values(&b, m, &m->ops[i]);
        if (b.data && (int)b.len > w) w = (int)b.len;
        sup_buf_free(&b);
    }
    return w;
}

/* Per value: the index of the op waiting for it, -1 if none (one pass, so
 * that the report stays linear in the step's length). */
static int *wait_index(const ir_module *m) {
    int *at = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    for (int v = 0; v < m->nvalues; v++) at[v] = -1;
    for (int j = 0; j < m->nops; j++)
        if (m->ops[j].code == IR_WAIT)
            for (int k = 0; k < m->ops[j].nin; k++) at[m->ops[j].in[k]] = j;
    return at;
}

/* For a started collective at op index i (async = 1): how many ops later
 * its wait comes; -1 for a blocking one. */
static int ops_to_wait(const ir_module *m, const int *wait_at, int i) {
    const ir_op *op = &m->ops[i];
    if (!ir_op_async(op) || op->nout < 1 || wait_at[op->out[0]] < i) return -1;
    return wait_at[op->out[0]] - i;
}

static bool has_started(const ir_module *m) {
    for (int i = 0; i < m->nops; i++)
        if (ir_op_async(&m->ops[i])) return true;
    return false;
}

static void print_row(const ir_module *m, FILE *out, int n, int i, int vw, const int *wait_at) {
    bool started = wait_at != NULL;
    const ir_op *op = &m->ops[i];
    pass_traffic t = pass_op_traffic(m, op);
    int gi = ir_op_group(op);
    const ir_group *g = gi >= 0 && gi < m->ngroups ? &m->groups[gi] : NULL;
    char gname[IR_NAME_MAX + 1], sent[32], inter[32];
    snprintf(gname, sizeof gname, "@%s", g ? g->name : "?");
    sup_buf vals = {0};
    fmt_values(&vals, m, op);
    fprintf(out, "%4d %5d  %-5s  %-14s  %-*s  %-8s %4d %4d  %12s %5d  %15s%s", n, ir_op_layer(op),
            *ir_op_phase(op) ? ir_op_phase(op) : "-", ir_op_desc_of(op->code)->name, vw, vals.data ? vals.data : "",
            gname, g ? g->nsets : 0, g ? g->set_size : 0, sup_fmt_bytes(t.bytes_sent, sent, sizeof sent), t.peers,
            sup_fmt_bytes(t.inter_bytes, inter, sizeof inter), started ? "" : "\n");
    if (started) { /* the overlap column: how far its wait is */
        int w = ops_to_wait(m, wait_at, i);
        if (w >= 0)
            fprintf(out, "  started, wait %d op(s) later\n", w);
        else
            fprintf(out, "  -\n");
    }
    sup_buf_free(&vals);
}

static void print_totals(const ir_module *m, FILE *out) {
    totals t = sum_traffic(m);
    char b1[32], b2[32];
    fprintf(out, "totals per step:\n");
    for (int k = 0; k < NKINDS; k++) {
        if (!t.count[k]) continue;
        fprintf(out, "  %-14s %4d op(s)  %12s/rank  %12s/rank inter-node\n", kind_name(k), t.count[k],
                sup_fmt_bytes(t.bytes[k], b1, sizeof b1), sup_fmt_bytes(t.inter[k], b2, sizeof b2));
    }
    double all = 0, inter = 0;
    for (int k = 0; k < NKINDS; k++) all += t.bytes[k], inter += t.inter[k];
    fprintf(out, "by link class: intra-node %s/rank (up to %d peers), inter-node %s/rank (up to %d peers)\n",
            sup_fmt_bytes(all - inter, b1, sizeof b1), t.intra_peers, sup_fmt_bytes(inter, b2, sizeof b2),
            t.inter_peers);
    int a = kind_index(IR_ALL_TO_ALL);
    if (!t.count[a]) {
        fprintf(out, "all-to-all: none\n");
        return;
    }
    fprintf(out, "all-to-all: %d per step, %d peer(s) per rank, %s sent per rank, %s per rank across nodes%s\n",
            t.count[a], t.a2a_peers, sup_fmt_bytes(t.bytes[a], b1, sizeof b1), sup_fmt_bytes(t.inter[a], b2, sizeof b2),
            t.inter[a] > 0 ? "" : " (intra-node only)");
}

void pass_schedule_print(const ir_module *m, FILE *out) {
    print_header(m, out);
    int vw = values_width(m);
    /* The overlap column only when the step has started collectives (pass
     * overlap), so that a blocking schedule's report stays as it was. */
    bool started = has_started(m);
    int *wait_at = started ? wait_index(m) : NULL;
    fprintf(out, "\n%4s %5s  %-5s  %-14s  %-*s  %-8s %4s %4s  %12s %5s  %15s%s\n", "#", "layer", "phase", "op", vw,
            "values", "group", "sets", "size", "bytes/rank", "peers", "inter-node/rank", started ? "  overlap" : "");
    int n = 0;
    for (int i = 0; i < m->nops; i++)
        if (kind_index(m->ops[i].code) >= 0) print_row(m, out, n++, i, vw, wait_at);
    free(wait_at);
    if (!n) fprintf(out, "  (no collectives)\n");
    fprintf(out, "\n");
    print_totals(m, out);
}

/* ---- JSON ------------------------------------------------------------------ */
static cJSON *json_groups(const ir_module *m) {
    cJSON *arr = cJSON_CreateArray();
    for (int gi = 0; gi < m->ngroups; gi++) {
        const ir_group *g = &m->groups[gi];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", g->name);
        cJSON *sets = cJSON_AddArrayToObject(o, "sets");
        for (int s = 0; s < g->nsets; s++)
            cJSON_AddItemToArray(sets, cJSON_CreateIntArray(&g->ranks[s * g->set_size], g->set_size));
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static cJSON *json_collective(const ir_module *m, int n, int i, const int *wait_at) {
    const ir_op *op = &m->ops[i];
    pass_traffic t = pass_op_traffic(m, op);
    int gi = ir_op_group(op);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", n);
    cJSON_AddNumberToObject(o, "layer", ir_op_layer(op));
    cJSON_AddStringToObject(o, "phase", ir_op_phase(op));
    cJSON_AddStringToObject(o, "op", ir_op_desc_of(op->code)->name);
    cJSON *vals = cJSON_AddArrayToObject(o, "values");
    for (int k = 0; k < op->nin; k++) cJSON_AddItemToArray(vals, cJSON_CreateString(m->values[op->in[k]].name));
    cJSON_AddStringToObject(o, "group", gi >= 0 && gi < m->ngroups ? m->groups[gi].name : "");
    cJSON_AddNumberToObject(o, "set_size", gi >= 0 && gi < m->ngroups ? m->groups[gi].set_size : 0);
    cJSON_AddNumberToObject(o, "bytes_per_rank", t.bytes_sent);
    cJSON_AddNumberToObject(o, "peers", t.peers);
    cJSON_AddNumberToObject(o, "inter_node_bytes_per_rank", t.inter_bytes);
    cJSON_AddNumberToObject(o, "inter_node_peers", t.inter_peers);
    cJSON_AddNumberToObject(o, "runs_per_step", runs_per_step(m, op));
    if (ir_op_async(op)) { /* started (pass overlap): how far its wait is */
        cJSON_AddBoolToObject(o, "started", true);
        cJSON_AddNumberToObject(o, "ops_to_wait", ops_to_wait(m, wait_at, i));
    }
    return o;
}

static void json_totals(const ir_module *m, cJSON *root) {
    totals t = sum_traffic(m);
    cJSON *tot = cJSON_AddObjectToObject(root, "totals");
    for (int k = 0; k < NKINDS; k++) {
        if (!t.count[k]) continue;
        cJSON *o = cJSON_AddObjectToObject(tot, kind_name(k));
        cJSON_AddNumberToObject(o, "count", t.count[k]);
        cJSON_AddNumberToObject(o, "bytes_per_rank", t.bytes[k]);
        cJSON_AddNumberToObject(o, "inter_node_bytes_per_rank", t.inter[k]);
    }
    double all = 0, inter = 0;
    for (int k = 0; k < NKINDS; k++) all += t.bytes[k], inter += t.inter[k];
    cJSON *lc = cJSON_AddObjectToObject(root, "link_classes");
    cJSON *li = cJSON_AddObjectToObject(lc, "intra");
    cJSON_AddNumberToObject(li, "bytes_per_rank", all - inter);
    cJSON_AddNumberToObject(li, "peers", t.intra_peers);
    cJSON *le = cJSON_AddObjectToObject(lc, "inter");
    cJSON_AddNumberToObject(le, "bytes_per_rank", inter);
    cJSON_AddNumberToObject(le, "peers", t.inter_peers);
    int a = kind_index(IR_ALL_TO_ALL);
    cJSON *o = cJSON_AddObjectToObject(root, "all_to_all");
    cJSON_AddNumberToObject(o, "count", t.count[a]);
    cJSON_AddNumberToObject(o, "bytes_per_rank", t.bytes[a]);
    cJSON_AddNumberToObject(o, "inter_node_bytes_per_rank", t.inter[a]);
    cJSON_AddNumberToObject(o, "peers", t.a2a_peers);
}

void pass_schedule_json(const ir_module *m, FILE *out) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "module", m->name);
    cJSON_AddNumberToObject(root, "world", ir_world(m));
    cJSON_AddNumberToObject(root, "nodes", m->mesh.nodes);
    cJSON_AddNumberToObject(root, "devices_per_node", m->mesh.devices_per_node);
    cJSON_AddNumberToObject(root, "micro_steps", (double)ir_config_int(m, "accum", 1));
    cJSON_AddItemToObject(root, "groups", json_groups(m));
    cJSON *colls = cJSON_AddArrayToObject(root, "collectives");
    int n = 0, *wait_at = has_started(m) ? wait_index(m) : NULL;
    for (int i = 0; i < m->nops; i++)
        if (kind_index(m->ops[i].code) >= 0) cJSON_AddItemToArray(colls, json_collective(m, n++, i, wait_at));
    free(wait_at);
    json_totals(m, root);
    char *s = cJSON_Print(root);
    fputs(s, out);
    fputc('\n', out);
    free(s);
    cJSON_Delete(root);
}
