/* basp_ir.c — the IR half of the pass-writer API (basp_pass.h): handles are
 * the compiler's own indices, each call one line over ir/ and passes/.
 * Out-of-range handles are a plugin's bug: they are reported and answered
 * with a neutral value instead of touching memory that is not there. */
#include "basp_pass.h"

#include <stdlib.h>
#include <string.h>

#include "../ir/ir.h"
#include "../passes/passes.h"
#include "basp_context.h"

/* "in pass 'NAME' (from plugin P (FILE)): " while a pass runs, else "",
 * into the caller's buf (IN_PASS bytes). */
enum { IN_PASS = 384 };
static const char *in_pass(char *buf) {
    const pass_info *p = pass_current();
    buf[0] = '\0';
    if (p && p->owner)
        snprintf(buf, IN_PASS, "in pass '%s' (from %s): ", p->name, p->owner);
    else if (p)
        snprintf(buf, IN_PASS, "in pass '%s': ", p->name);
    return buf;
}

static bool bad(const char *what, int i, int n) {
    if (i >= 0 && i < n) return false;
    char where[IN_PASS];
    sup_error(sup_noloc(), "pass API: %s%s %d is not in 0..%d", in_pass(where), what, i, n - 1);
    return true;
}
#define BAD_V(m, v)  bad("value", (v), (m)->nvalues)
#define BAD_OP(m, i) bad("op", (i), (m)->nops)
#define BAD_G(m, g)  bad("group", (g), (m)->ngroups)

/* ---- the module ------------------------------------------------------------------ */
int basp_ir_world(const basp_module *m) { return ir_world(m); }
int basp_ir_nodes(const basp_module *m) { return m->mesh.nodes; }
int basp_ir_devices_per_node(const basp_module *m) { return m->mesh.devices_per_node; }
int basp_ir_node_of(const basp_module *m, int rank) { return ir_node_of(m, rank); }
void basp_ir_config_set(basp_module *m, const char *key, const char *value) { ir_config_set(m, key, value); }
int64_t basp_ir_config_int(const basp_module *m, const char *key, int64_t def) { return ir_config_int(m, key, def); }

basp_layout_dims basp_ir_layout_dims(const basp_module *m) {
    layout_dims d = pass_layout_dims(m);
    return (basp_layout_dims){.N = d.N, .nodes = d.nodes, .dpn = d.dpn, .B = d.B, .S = d.S, .H = d.H, .Hk = d.Hk};
}

/* ---- groups -------------------------------------------------------------------------- */
int basp_ir_group_count(const basp_module *m) { return m->ngroups; }
int basp_ir_group_find(const basp_module *m, const char *name) { return ir_group_find(m, name); }
const char *basp_ir_group_name(const basp_module *m, int g) { return BAD_G(m, g) ? "" : m->groups[g].name; }
int basp_ir_group_sets(const basp_module *m, int g) { return BAD_G(m, g) ? 0 : m->groups[g].nsets; }
int basp_ir_group_set_size(const basp_module *m, int g) { return BAD_G(m, g) ? 0 : m->groups[g].set_size; }

int basp_ir_group_rank(const basp_module *m, int g, int set, int pos) {
    if (BAD_G(m, g) || bad("set", set, m->groups[g].nsets) || bad("position", pos, m->groups[g].set_size)) return -1;
    return m->groups[g].ranks[set * m->groups[g].set_size + pos];
}

int basp_ir_group_add(basp_module *m, const char *name, int nsets, int set_size, const int *ranks) {
    if (!name || !ir_is_name(name) || nsets < 1 || set_size < 1 || !ranks) {
        char where[IN_PASS];
        sup_error(sup_noloc(),
                  "pass API: %sgroup '%s': a valid name, nsets >= 1, set_size >= 1 and ranks are "
                  "needed",
                  in_pass(where), name ? name : "");
        return -1;
    }
    return ir_group_add(m, name, nsets, set_size, ranks);
}

bool basp_ir_group_nested(const basp_module *m, int whole, int outer, int inner) {
    return !BAD_G(m, whole) && !BAD_G(m, inner) && (outer == -1 || !BAD_G(m, outer)) &&
           ir_group_nested(m, whole, outer, inner);
}

/* ---- values ------------------------------------------------------------------------- */
int basp_ir_value_count(const basp_module *m) { return m->nvalues; }
int basp_ir_value_find(const basp_module *m, const char *name) { return ir_value_find(m, name); }
const char *basp_ir_value_name(const basp_module *m, int v) { return BAD_V(m, v) ? "" : m->values[v].name; }
basp_value_kind basp_ir_value_kind(const basp_module *m, int v) {
    return BAD_V(m, v) ? BASP_V_RESULT : (basp_value_kind)m->values[v].kind;
}
int basp_ir_value_def(const basp_module *m, int v) { return BAD_V(m, v) ? -1 : m->values[v].def; }
const char *basp_ir_value_dtype(const basp_module *m, int v) {
    return BAD_V(m, v) ? "" : ir_dtype_name(m->values[v].type.dtype);
}
int basp_ir_value_rank(const basp_module *m, int v) { return BAD_V(m, v) ? 0 : m->values[v].type.rank; }

int64_t basp_ir_value_dim(const basp_module *m, int v, int d) {
    return BAD_V(m, v) || bad("dim", d, m->values[v].type.rank) ? 0 : m->values[v].type.dims[d];
}

int basp_ir_value_shard(const basp_module *m, int v, int d) {
    return BAD_V(m, v) || bad("dim", d, m->values[v].type.rank) ? -1 : m->values[v].type.shard[d];
}

void basp_ir_value_set_shard(basp_module *m, int v, int d, int group) {
    if (BAD_V(m, v) || bad("dim", d, m->values[v].type.rank) || (group != -1 && BAD_G(m, group))) return;
    m->values[v].type.shard[d] = group;
    m->values[v].type.unit[d] = 0;
}

int basp_ir_value_like(basp_module *m, const char *base, int like) {
    if (BAD_V(m, like)) return -1;
    /* a long base is cut to fit (ir_value_fresh_name); other characters
     * would not read back from the printed IR */
    char name[IR_NAME_MAX];
    ir_value_fresh_name(m, base, name);
    if (!base || !*base || !ir_is_name(name)) {
        char where[IN_PASS];
        sup_error(sup_noloc(), "pass API: %svalue name '%s': letters, digits, '_', '.' and '-' only", in_pass(where),
                  base ? base : "");
        return -1;
    }
    return ir_value_add(m, name, IR_V_RESULT, m->values[like].type);
}

int basp_ir_value_derived(basp_module *m, int v, const char *suffix, int like) {
    if (BAD_V(m, v) || BAD_V(m, like)) return -1;
    if (!suffix || !ir_is_name(suffix)) {
        char where[IN_PASS];
        sup_error(sup_noloc(), "pass API: %svalue suffix '%s': letters, digits, '_', '.' and '-' only", in_pass(where),
                  suffix ? suffix : "");
        return -1;
    }
    return pass_value_derived(m, v, suffix, m->values[like].type);
}

bool *basp_ir_weight_flags(const basp_module *m) { return ir_weight_flags(m); }

/* ---- splitting heads and batches --------------------------------------------------- */
void basp_ir_value_split_heads(basp_module *m, int v, int group, int64_t fanout) {
    if (BAD_V(m, v) || BAD_G(m, group)) return;
    if (m->values[v].type.rank < 3 || fanout < 1) {
        char where[IN_PASS];
        sup_error(sup_noloc(), "pass API: %s%%%s: heads split on [B,S,H,...] values with fanout >= 1 only",
                  in_pass(where), m->values[v].name);
        return;
    }
    m->values[v].type = pass_heads_type(m->values[v].type, group, fanout);
}

int basp_ir_heads_twin(const basp_module *m, int group, int v) {
    return BAD_V(m, v) || BAD_G(m, group) ? -1 : pass_heads_twin(m, group, v);
}

void basp_ir_fix_virtual_heads(basp_module *m, int group) {
    if (!BAD_G(m, group)) pass_fix_virtual_heads(m, group);
}

void basp_ir_shard_batch(basp_module *m, int sp, int dp) {
    if (!BAD_G(m, sp) && !BAD_G(m, dp)) pass_shard_batch(m, sp, dp);
}

void basp_ir_shard_sequence(basp_module *m, int group) {
    if (!BAD_G(m, group)) pass_shard_sequence(m, group);
}

const char *basp_ir_layout_illegal(const basp_module *m, int groups) {
    basp_ctx(); /* the strategies' rules */
    return pass_layout_illegal(m, groups, 0);
}

/* ---- ops ----------------------------------------------------------------------------- */
int basp_ir_op_count(const basp_module *m) { return m->nops; }
const char *basp_ir_op_name(const basp_module *m, int i) {
    return BAD_OP(m, i) ? "" : ir_op_desc_of(m->ops[i].code)->name;
}
int basp_ir_op_num_inputs(const basp_module *m, int i) { return BAD_OP(m, i) ? 0 : m->ops[i].nin; }
int basp_ir_op_num_outputs(const basp_module *m, int i) { return BAD_OP(m, i) ? 0 : m->ops[i].nout; }
int basp_ir_op_input(const basp_module *m, int i, int k) {
    return BAD_OP(m, i) || bad("input", k, m->ops[i].nin) ? -1 : m->ops[i].in[k];
}
int basp_ir_op_output(const basp_module *m, int i, int k) {
    return BAD_OP(m, i) || bad("output", k, m->ops[i].nout) ? -1 : m->ops[i].out[k];
}

void basp_ir_op_set_input(basp_module *m, int i, int k, int value) {
    if (!BAD_OP(m, i) && !bad("input", k, m->ops[i].nin) && !BAD_V(m, value)) m->ops[i].in[k] = value;
}

bool basp_ir_op_has_attr(const basp_module *m, int i, const char *key) {
    return !BAD_OP(m, i) && ir_attr_get(&m->ops[i], key);
}
int64_t basp_ir_op_attr_int(const basp_module *m, int i, const char *key, int64_t def) {
    return BAD_OP(m, i) ? def : ir_attr_int(&m->ops[i], key, def);
}
int basp_ir_op_group(const basp_module *m, int i) { return BAD_OP(m, i) ? -1 : ir_op_group(&m->ops[i]); }
int basp_ir_op_layer(const basp_module *m, int i) { return BAD_OP(m, i) ? -1 : ir_op_layer(&m->ops[i]); }
const char *basp_ir_op_phase(const basp_module *m, int i) { return BAD_OP(m, i) ? "" : ir_op_phase(&m->ops[i]); }

void basp_ir_op_set_attr_int(basp_module *m, int i, const char *key, int64_t v) {
    if (!BAD_OP(m, i)) ir_attr_set_int(&m->ops[i], key, v);
}

void basp_ir_op_set_attr_group(basp_module *m, int i, const char *key, int group) {
    if (!BAD_OP(m, i) && !BAD_G(m, group)) ir_attr_set_group(&m->ops[i], key, group);
}

void basp_ir_replace_uses(basp_module *m, int from, int to, int start) {
    if (!BAD_V(m, from) && !BAD_V(m, to)) ir_replace_uses(m, from, to, start < 0 ? 0 : start);
}

/* ---- inserting ops in one batch ---------------------------------------------------- */
/* The ops are kept apart from pass_edits until apply, so that the layer and
 * phase attributes can go last (where every pass puts them) whatever order
 * the plugin sets the others in. */
struct basp_edits {
    struct pending {
        int pos, after, like;
        ir_op op;
    } * items;
    int n, cap;
    int *removed; /* basp_edits_remove's ops */
    int nremoved, capremoved;
};

basp_edits *basp_edits_new(void) { return sup_xcalloc(1, sizeof(basp_edits)); }

static void bad_op(const char *name, int nin, int nout) {
    char where[IN_PASS];
    sup_error(sup_noloc(), "pass API: %scannot insert op '%s' with %d input(s) and %d output(s)", in_pass(where),
              name ? name : "", nin, nout);
}

/* Adds op (its layer and phase from op `like` when applied); its handle. */
static int pending(basp_edits *e, int pos, int after, int like, const ir_op *op) {
    SUP_GROW(e->items, e->n, e->cap);
    e->items[e->n] = (struct pending){.pos = pos, .after = after, .like = like, .op = *op};
    return e->n++;
}

static int record(basp_edits *e, int pos, int after, const char *name, const int *ins, int nin, const int *outs,
                  int nout, int like) {
    int code = name ? ir_opcode_lookup(name) : -1;
    if (!e || code < 0 || nin < 0 || nin > IR_MAX_IN || nout < 0 || nout > IR_MAX_OUT) {
        bad_op(name, nin, nout);
        return -1;
    }
    ir_op op = ir_op_make((ir_opcode)code);
    for (int k = 0; k < nin; k++) ir_op_add_input(&op, ins[k]);
    for (int k = 0; k < nout; k++) ir_op_add_output(&op, outs[k]);
    return pending(e, pos, after, like, &op);
}

int basp_edits_insert_before(basp_edits *e, int pos, const char *name, const int *ins, int nin, const int *outs,
                             int nout, int like) {
    return record(e, pos, 0, name, ins, nin, outs, nout, like);
}

int basp_edits_insert_after(basp_edits *e, int pos, const char *name, const int *ins, int nin, const int *outs,
                            int nout, int like) {
    return record(e, pos, 1, name, ins, nin, outs, nout, like);
}

/* The exchange of the built-in passes (pass_exchange), untagged: apply
 * tags it like every recorded op. */
static int exchange(basp_edits *e, int pos, int after, int group, int n, const int *ins, const int *outs, bool to_heads,
                    int64_t fan, int like) {
    if (!e || n < 1 || n > IR_MAX_IN || n > IR_MAX_OUT || !ins || !outs || group < 0) {
        bad_op("all_to_all", n, n);
        return -1;
    }
    ir_op op = pass_exchange(group, n, ins, outs, to_heads, fan, NULL);
    return pending(e, pos, after, like, &op);
}

int basp_edits_exchange_before(basp_edits *e, int pos, int group, int n, const int *ins, const int *outs, bool to_heads,
                               int64_t fan, int like) {
    return exchange(e, pos, 0, group, n, ins, outs, to_heads, fan, like);
}

int basp_edits_exchange_after(basp_edits *e, int pos, int group, int n, const int *ins, const int *outs, bool to_heads,
                              int64_t fan, int like) {
    return exchange(e, pos, 1, group, n, ins, outs, to_heads, fan, like);
}

void basp_edits_remove(basp_edits *e, int op) {
    if (!e) return;
    SUP_GROW(e->removed, e->nremoved, e->capremoved);
    e->removed[e->nremoved++] = op;
}

void basp_edits_attr_int(basp_edits *e, int h, const char *key, int64_t v) {
    if (e && !bad("edit", h, e->n)) ir_attr_set_int(&e->items[h].op, key, v);
}

void basp_edits_attr_group(basp_edits *e, int h, const char *key, int group) {
    if (e && !bad("edit", h, e->n)) ir_attr_set_group(&e->items[h].op, key, group);
}

void basp_edits_apply(basp_module *m, basp_edits *e) {
    if (!e) return;
    pass_edits pe = {0};
    for (int i = 0; i < e->n; i++) {
        struct pending *p = &e->items[i];
        if (p->like >= 0 && p->like < m->nops) { /* as the built-in passes tag theirs */
            const char *ph = ir_op_phase(&m->ops[p->like]);
            ir_attr_set_int(&p->op, "layer", ir_op_layer(&m->ops[p->like]));
            ir_attr_set_ident(&p->op, "phase", *ph ? ph : "fwd");
        }
        if (p->after)
            pass_insert_after(&pe, p->pos, &p->op);
        else
            pass_insert_before(&pe, p->pos, &p->op);
    }
    for (int i = 0; i < e->nremoved; i++)
        if (!BAD_OP(m, e->removed[i])) pass_edits_remove(&pe, e->removed[i]);
    pass_edits_apply(m, &pe);
    free(e->items);
    free(e->removed);
    free(e);
}
