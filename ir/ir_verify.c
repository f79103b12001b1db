/* ir_verify.c — the structural half of the verifier (rules 1-4 of
 * ir/README.md): mesh, groups, values, definitions and uses, attributes.
 * Every violation is reported; nothing stops at the first one. */
#define _GNU_SOURCE /* qsort_r: a sort with a context argument */
#include "ir_verify.h"

#include <stdlib.h>
#include <string.h>

void ir_verr(ir_vctx *c, sup_loc loc, const char *fmt, ...) {
    char msg[1024], where[160] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->op >= 0) {
        char d[140];
        snprintf(where, sizeof where, "%s: ", ir_op_str(c->m, c->op, d, sizeof d));
        if (c->m->ops[c->op].loc.file) loc = c->m->ops[c->op].loc;
    }
    bool ctx = c->context && *c->context;
    sup_error(loc, "%s%s%s%s", ctx ? c->context : "", ctx ? ": " : "", where, msg);
    c->errors++;
}

/* ---- 1. mesh ---------------------------------------------------------------- */
static void ir_verify_mesh(ir_vctx *c) {
    const ir_mesh *mesh = &c->m->mesh;
    if (!ir_is_name(c->m->name)) ir_verr(c, sup_noloc(), "module name '%s' is not a valid name", c->m->name);
    if (mesh->nodes < 1) ir_verr(c, sup_noloc(), "mesh: nodes must be at least 1, found %d", mesh->nodes);
    if (mesh->devices_per_node < 1)
        ir_verr(c, sup_noloc(), "mesh: devices_per_node must be at least 1, found %d", mesh->devices_per_node);
    if (!ir_is_ident(mesh->intra.kind))
        ir_verr(c, sup_noloc(), "mesh: intra link kind '%s' is not an identifier", mesh->intra.kind);
    if (!ir_is_ident(mesh->inter.kind))
        ir_verr(c, sup_noloc(), "mesh: inter link kind '%s' is not an identifier", mesh->inter.kind);
    for (int i = 0; i < c->m->nconfig; i++)
        if (!ir_is_ident(c->m->config[i].key))
            ir_verr(c, sup_noloc(), "config key '%s' is not an identifier", c->m->config[i].key);
}

/* ---- 2. groups ---------------------------------------------------------------- */
static void ir_verify_group_ranks(ir_vctx *c, const ir_group *g, int world) {
    int *seen = sup_xcalloc((size_t)world, sizeof *seen);
    int n = g->nsets * g->set_size;
    for (int i = 0; i < n; i++) {
        int r = g->ranks[i];
        if (r < 0 || r >= world) {
            ir_verr(c, g->loc, "group @%s: rank %d is outside the world (ranks 0..%d)", g->name, r, world - 1);
        } else if (seen[r]++) {
            ir_verr(c, g->loc, "group @%s: rank %d appears in more than one place (the sets must be disjoint)", g->name,
                    r);
        }
    }
    for (int r = 0; r < world; r++) {
        if (!seen[r]) {
            ir_verr(c, g->loc, "group @%s: rank %d is in no set (the sets must cover all %d ranks)", g->name, r, world);
            break;
        }
    }
    free(seen);
}

static void ir_verify_groups(ir_vctx *c) {
    const ir_module *m = c->m;
    int world = m->mesh.nodes >= 1 && m->mesh.devices_per_node >= 1 ? ir_world(m) : 0;
    for (int i = 0; i < m->ngroups; i++) {
        const ir_group *g = &m->groups[i];
        if (!ir_is_name(g->name)) ir_verr(c, g->loc, "group name '%s' is not a valid name", g->name);
        for (int j = 0; j < i; j++)
            if (strcmp(m->groups[j].name, g->name) == 0)
                ir_verr(c, g->loc, "group @%s is defined twice (groups %d and %d)", g->name, j, i);
        if (g->nsets < 1 || g->set_size < 1) {
            ir_verr(c, g->loc, "group @%s: needs at least one set of at least one rank", g->name);
            continue;
        }
        if (world < 1) continue;
        if (g->block > 0) { /* a dynamic variant's group: over the positions of its block */
            if (g->block > world || (int64_t)g->nsets * g->set_size != g->block)
                ir_verr(c, g->loc,
                        "group @%s: %d sets of %d ranks do not cover its block of %d (at most the world's %d)", g->name,
                        g->nsets, g->set_size, g->block, world);
            else
                ir_verify_group_ranks(c, g, g->block);
            continue;
        }
        if ((int64_t)g->nsets * g->set_size != world) {
            ir_verr(c, g->loc, "group @%s: %d sets of %d ranks do not cover the world of %d ranks", g->name, g->nsets,
                    g->set_size, world);
            continue;
        }
        ir_verify_group_ranks(c, g, world);
    }
}

/* ---- 3. values ------------------------------------------------------------------ */
/* qsort_r, with the module as its context argument: the same sort as
 * qsort, so duplicates are found, and reported, in the same order. */
static int ir_cmp_names(const void *a, const void *b, void *module) {
    const ir_value *v = ((const ir_module *)module)->values;
    return strcmp(v[*(const int *)a].name, v[*(const int *)b].name);
}

/* True when two values share a name: one pass over a hash table of the
 * names (FNV-1a, open addressing), so that the sort below, which orders the
 * reports, runs only for a module that has something to report. */
static bool ir_any_duplicate_name(const ir_module *m) {
    uint32_t cap = 64;
    while (cap < 2u * (uint32_t)m->nvalues) cap *= 2;
    int *slot = sup_xmalloc(cap * sizeof *slot);
    memset(slot, 0xff, cap * sizeof *slot);
    bool dup = false;
    for (int v = 0; v < m->nvalues && !dup; v++) {
        uint32_t h = 2166136261u;
        for (const char *s = m->values[v].name; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
        for (h &= cap - 1; slot[h] >= 0 && !dup; h = (h + 1) & (cap - 1))
            dup = strcmp(m->values[slot[h]].name, m->values[v].name) == 0;
        if (!dup) slot[h] = v;
    }
    free(slot);
    return dup;
}

static void ir_verify_value_names(ir_vctx *c) {
    const ir_module *m = c->m;
    if (m->nvalues < 2 || !ir_any_duplicate_name(m)) return;
    int *idx = sup_xmalloc((size_t)m->nvalues * sizeof *idx);
    for (int v = 0; v < m->nvalues; v++) idx[v] = v;
    qsort_r(idx, (size_t)m->nvalues, sizeof *idx, ir_cmp_names, (void *)m);
    for (int i = 1; i < m->nvalues; i++)
        if (strcmp(m->values[idx[i]].name, m->values[idx[i - 1]].name) == 0)
            ir_verr(c, m->values[idx[i]].loc, "value %%%s is defined twice", m->values[idx[i]].name);
    free(idx);
}

static void ir_verify_value_type(ir_vctx *c, const ir_value *val) {
    const ir_module *m = c->m;
    const ir_type *t = &val->type;
    if ((int)t->dtype < 0 || (int)t->dtype > IR_I32)
        ir_verr(c, val->loc, "value %%%s: invalid element type %d", val->name, (int)t->dtype);
    if (t->rank < 0 || t->rank > IR_MAX_RANK) {
        ir_verr(c, val->loc, "value %%%s: rank %d is outside 0..%d", val->name, t->rank, IR_MAX_RANK);
        return;
    }
    int64_t elems = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->unit[d] == 0) continue;
        if (t->shard[d] == -1)
            ir_verr(c, val->loc, "value %%%s: dim %d has a split unit (:%lld) but is whole", val->name, d,
                    (long long)t->unit[d]);
        if (val->kind != IR_V_RESULT || (t->rank != 4 && t->rank != 3) || d != 2)
            ir_verr(c, val->loc,
                    "value %%%s: only the head dim (dim 2) of a rank-4 attention exchange result (or of "
                    "attention's rank-3 row statistics) may be split unevenly (:%lld on dim %d)",
                    val->name, (long long)t->unit[d], d);
    }
    for (int d = 0; d < t->rank; d++) {
        int64_t n = t->dims[d];
        int g = t->shard[d];
        if (n < 1) {
            ir_verr(c, val->loc, "value %%%s: dim %d has size %lld (must be at least 1)", val->name, d, (long long)n);
            continue;
        }
        int64_t more; /* no division: this runs for every dim of every value after every pass */
        if (elems < 0 || __builtin_mul_overflow(elems, n, &more)) {
            ir_verr(c, val->loc, "value %%%s: element count overflows", val->name);
            elems = -1;
        } else
            elems = more;
        if (g == -1) continue;
        if (g < 0 || g >= m->ngroups) {
            ir_verr(c, val->loc, "value %%%s: dim %d is sharded by a group that does not exist (index %d)", val->name,
                    d, g);
            continue;
        }
        for (int e = 0; e < d; e++)
            if (t->shard[e] == g)
                ir_verr(c, val->loc, "value %%%s: group @%s shards both dim %d and dim %d (at most one dim per group)",
                        val->name, m->groups[g].name, e, d);
        int k = m->groups[g].set_size;
        if (t->unit[d] != 0) {
            int64_t u = t->unit[d];
            if (u < 1 || n % u || (k >= 1 && n / u < k))
                ir_verr(c, val->loc,
                        "value %%%s: dim %d of size %lld cannot be split in units of %lld over the %d "
                        "ranks of each set of @%s (the size must be a multiple of the unit and every rank needs "
                        "at least one unit)",
                        val->name, d, (long long)n, (long long)u, k, m->groups[g].name);
            continue;
        }
        if (k >= 1 && n % k)
            ir_verr(c, val->loc, "value %%%s: dim %d of size %lld is not divisible by the %d ranks of each set of @%s",
                    val->name, d, (long long)n, k, m->groups[g].name);
    }
}

/* Bytes of one tensor, counted at 4 bytes per element (fp32 master
 * weights, gradients and optimizer state are kept at 4 bytes whatever the
 * dtype): at most 2^46 (64 TiB), so that the sums the memory plan and the
 * generated program form over every value (arena, optimizer state, per
 * rank and over the world) stay far from 64-bit overflow. */
#define IR_MAX_TENSOR_BYTES ((int64_t)1 << 46)

static void ir_verify_value_bytes(ir_vctx *c, const ir_value *val) {
    const ir_type *t = &val->type;
    if (t->rank < 0 || t->rank > IR_MAX_RANK) return;
    int64_t elems = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->dims[d] < 1) return;
        if (__builtin_mul_overflow(elems, t->dims[d], &elems)) return; /* reported as an element count overflow */
    }
    int64_t bytes;
    if (__builtin_mul_overflow(elems, (int64_t)4, &bytes) || bytes > IR_MAX_TENSOR_BYTES)
        ir_verr(c, val->loc,
                "value %%%s: size overflows: %lld elements of 4 bytes exceed the %lld-byte limit "
                "per tensor (2^46, so that sums of sizes fit in 64 bits)",
                val->name, (long long)elems, (long long)IR_MAX_TENSOR_BYTES);
}

static void ir_verify_values(ir_vctx *c) {
    ir_verify_value_names(c);
    for (int v = 0; v < c->m->nvalues; v++) {
        const ir_value *val = &c->m->values[v];
        if (!ir_is_name(val->name)) ir_verr(c, val->loc, "value name '%s' is not a valid name", val->name);
        if ((int)val->kind < IR_V_PARAM || val->kind > IR_V_RESULT)
            ir_verr(c, val->loc, "value %%%s: invalid kind %d", val->name, (int)val->kind);
        ir_verify_value_type(c, val);
        ir_verify_value_bytes(c, val);
    }
}

/* ---- 4. ops ------------------------------------------------------------------------ */
typedef struct ir_vstate {
    int *defined_at; /* op index that defined each value so far, -1 = not yet */
    int *freed_at;   /* op index that freed it, -1 = live */
} ir_vstate;

static void ir_verify_attrs(ir_vctx *c, const ir_op *op) {
    for (int a = 0; a < op->nattrs; a++) {
        const ir_attr *at = &op->attrs[a];
        /* keys and identifier values are interned (ir_intern): equal text,
         * equal pointers */
        if (!ir_interned_is_ident(at->key))
            ir_verr(c, sup_noloc(), "attribute name '%s' is not an identifier", at->key);
        for (int b = 0; b < a; b++)
            if (op->attrs[b].key == at->key) ir_verr(c, sup_noloc(), "attribute '%s' is given twice", at->key);
        if (at->kind == IR_A_IDENT && (!ir_interned_is_ident(at->s) || !strcmp(at->s, "inf") || !strcmp(at->s, "nan")))
            ir_verr(c, sup_noloc(), "attribute '%s': '%s' is not a valid identifier value", at->key, at->s);
        if (at->kind == IR_A_GROUP && (at->i < 0 || at->i >= c->m->ngroups))
            ir_verr(c, sup_noloc(), "attribute '%s' names a group that does not exist (index %lld)", at->key,
                    (long long)at->i);
        if ((int)at->kind < IR_A_INT || at->kind > IR_A_GROUP)
            ir_verr(c, sup_noloc(), "attribute '%s' has an invalid kind %d", at->key, (int)at->kind);
    }
}

/* Operand and result counts and indices; false when the op is too broken
 * to look at its types. */
static bool ir_verify_arity(ir_vctx *c, const ir_op *op, const ir_op_desc *info) {
    bool ok = true;
    if (op->nin < info->min_in || op->nin > info->max_in || op->nin > IR_MAX_IN) {
        ir_verr(c, sup_noloc(), "has %d operands; '%s' takes %d to %d", op->nin, info->name, info->min_in,
                info->max_in);
        ok = false;
    }
    if (op->nout < info->min_out || op->nout > info->max_out || op->nout > IR_MAX_OUT) {
        ir_verr(c, sup_noloc(), "has %d results; '%s' produces %d to %d", op->nout, info->name, info->min_out,
                info->max_out);
        ok = false;
    }
    if (!ok) return false;
    for (int k = 0; k < op->nin; k++)
        if (op->in[k] < 0 || op->in[k] >= c->m->nvalues)
            ir_verr(c, sup_noloc(), "operand %d is not a value (index %d)", k, op->in[k]), ok = false;
    for (int k = 0; k < op->nout; k++)
        if (op->out[k] < 0 || op->out[k] >= c->m->nvalues)
            ir_verr(c, sup_noloc(), "result %d is not a value (index %d)", k, op->out[k]), ok = false;
    return ok;
}

static void ir_verify_uses(ir_vctx *c, const ir_op *op, ir_vstate *st) {
    const ir_module *m = c->m;
    for (int k = 0; k < op->nin; k++) {
        int v = op->in[k];
        const ir_value *val = &m->values[v];
        bool repeated = false; /* report each value once per op */
        for (int j = 0; j < k; j++) repeated |= op->in[j] == v;
        if (repeated) continue;
        if (val->kind == IR_V_RESULT && st->defined_at[v] < 0) {
            if (val->def > c->op && val->def < m->nops)
                ir_verr(c, sup_noloc(), "uses %%%s before its definition by op %d", val->name, val->def);
            else
                ir_verr(c, sup_noloc(), "uses %%%s, which no earlier op defines", val->name);
        }
        if (st->freed_at[v] >= 0 && op->code == IR_FREE)
            ir_verr(c, sup_noloc(), "frees %%%s twice (op %d freed it already)", val->name, st->freed_at[v]);
        else if (st->freed_at[v] >= 0)
            ir_verr(c, sup_noloc(), "uses %%%s after it was freed by op %d", val->name, st->freed_at[v]);
    }
}

/* Results: each is a result value defined by exactly this op, once. */
static void ir_verify_defs(ir_vctx *c, const ir_op *op, ir_vstate *st) {
    const ir_module *m = c->m;
    for (int k = 0; k < op->nout; k++) {
        int v = op->out[k];
        const ir_value *val = &m->values[v];
        if (val->kind != IR_V_RESULT)
            ir_verr(c, sup_noloc(), "result %%%s is a%s %s, not an op result", val->name,
                    val->kind == IR_V_INPUT || val->kind == IR_V_ACCUM ? "n" : "", ir_value_kind_name(val->kind));
        else if (st->defined_at[v] >= 0)
            ir_verr(c, sup_noloc(), "result %%%s is already defined by op %d", val->name, st->defined_at[v]);
        else if (val->def != c->op)
            ir_verr(c, sup_noloc(), "result %%%s records op %d as its definition (run ir_renumber after editing ops)",
                    val->name, val->def);
        st->defined_at[v] = c->op;
    }
}

static void ir_verify_free(ir_vctx *c, const ir_op *op, ir_vstate *st) {
    int v = op->in[0];
    if (st->freed_at[v] >= 0) return; /* already reported as a use after free */
    st->freed_at[v] = c->op;
}

/* Kind-specific rules that do not depend on shapes. */
static void ir_verify_kind(ir_vctx *c, const ir_op *op, const ir_op_desc *info) {
    const ir_module *m = c->m;
    if (info->kind == IR_K_COLL) {
        const ir_attr *g = ir_attr_get(op, "group");
        if (!g)
            ir_verr(c, sup_noloc(), "collective without a 'group = @G' attribute");
        else if (g->kind != IR_A_GROUP)
            ir_verr(c, sup_noloc(), "attribute 'group' must name a group ('@G')");
    }
    if (info->kind == IR_K_COMPUTE) {
        for (int k = 0; k < op->nin; k++) {
            const ir_value *val = &m->values[op->in[k]];
            if (val->kind != IR_V_PARAM) continue;
            for (int d = 0; d < val->type.rank && d < IR_MAX_RANK; d++) {
                if (val->type.shard[d] == -1) continue;
                int g = val->type.shard[d];
                ir_verr(c, sup_noloc(),
                        "param %%%s is sharded on dim %d by @%s; a compute op needs the whole "
                        "param (all_gather it first)",
                        val->name, d, g >= 0 && g < m->ngroups ? m->groups[g].name : "?");
                break;
            }
        }
    }
    if (info->kind == IR_K_P2P) {
        const ir_attr *peer = ir_attr_get(op, "peer");
        if (!peer || peer->kind != IR_A_INT) ir_verr(c, sup_noloc(), "needs an integer 'peer' attribute");
    }
}

/* Type rules index dims by rank: skip ops whose values have a bad rank
 * (already reported with the values). */
static bool ir_types_sane(const ir_module *m, const ir_op *op) {
    for (int k = 0; k < op->nin + op->nout; k++) {
        int v = k < op->nin ? op->in[k] : op->out[k - op->nin];
        if (m->values[v].type.rank < 0 || m->values[v].type.rank > IR_MAX_RANK) return false;
    }
    return true;
}

/* Values with a split unit (uneven head dims) live only between the
 * all_to_alls around attention: only all_to_all, attention, attention_bwd
 * and free may read or define them. */
static bool ir_has_unit(const ir_type *t) {
    for (int d = 0; d < t->rank && d < IR_MAX_RANK; d++)
        if (t->unit[d] != 0) return true;
    return false;
}

static void ir_verify_uneven_uses(ir_vctx *c, const ir_op *op) {
    if (op->code == IR_ALL_TO_ALL || op->code == IR_ATTENTION || op->code == IR_ATTENTION_BWD || op->code == IR_FREE ||
        op->code == IR_WAIT || op->code == IR_OFFLOAD || op->code == IR_FETCH)
        return;
    const ir_module *m = c->m;
    for (int k = 0; k < op->nin + op->nout; k++) {
        int v = k < op->nin ? op->in[k] : op->out[k - op->nin];
        if (v >= 0 && v < m->nvalues && ir_has_unit(&m->values[v].type))
            ir_verr(c, sup_noloc(),
                    "%s %%%s is split unevenly; only all_to_all, attention, attention_bwd, free, "
                    "wait, offload and fetch may use such a value",
                    k < op->nin ? "reads" : "defines", m->values[v].name);
    }
}

/* Host memory is read only by the ops made for it (fetch) and released by
 * free: a kernel or a collective cannot read it on the device.  With the
 * optimizer offloaded (ir_mem_opt_on_host) the update runs on the host, so
 * adamw may take its gradient, and its parameter, from there. */
static void ir_verify_host_reads(ir_vctx *c, const ir_op *op, const ir_op_desc *info) {
    if (info->reads_host || op->code == IR_FREE) return;
    bool host_update = op->code == IR_ADAMW && ir_mem_opt_on_host(c->m);
    for (int k = 0; k < op->nin; k++)
        if (!(host_update && k <= 1) && op->in[k] >= 0 && op->in[k] < c->m->nvalues && ir_mem_on_host(c->m, op->in[k]))
            ir_verr(c, sup_noloc(), "reads %%%s, which lives in host memory (%s): fetch it to the device first",
                    c->m->values[op->in[k]].name,
                    c->m->values[op->in[k]].kind == IR_V_PARAM ? "an offloaded parameter" : "an offload's result");
}

static void ir_verify_ops(ir_vctx *c) {
    const ir_module *m = c->m;
    ir_vstate st;
    st.defined_at = sup_xmalloc((size_t)(m->nvalues + 1) * sizeof(int));
    st.freed_at = sup_xmalloc((size_t)(m->nvalues + 1) * sizeof(int));
    for (int v = 0; v < m->nvalues; v++) st.defined_at[v] = st.freed_at[v] = -1;
    int first_adamw = -1;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        c->op = i;
        const ir_op_desc *info = ir_op_desc_of(op->code);
        if (!info) {
            ir_verr(c, sup_noloc(), "invalid opcode %d", (int)op->code);
            continue;
        }
        ir_verify_attrs(c, op);
        if (!ir_verify_arity(c, op, info)) continue;
        ir_verify_uses(c, op, &st);
        ir_verify_defs(c, op, &st);
        ir_verify_kind(c, op, info);
        ir_verify_uneven_uses(c, op);
        ir_verify_accum_reads(c, op);
        ir_verify_host_reads(c, op, info);
        if (op->code == IR_ADAMW && op->nin == 2) {
            /* The first adamw computes the global gradient norm (clipping)
             * over every adamw's gradient: all must exist by then. */
            if (first_adamw < 0) first_adamw = i;
            int d = m->values[op->in[1]].def;
            if (d >= first_adamw)
                ir_verr(c, sup_noloc(),
                        "gradient %%%s is computed by op %d, after the first adamw (op %d), which "
                        "takes the global norm of every adamw's gradient",
                        m->values[op->in[1]].name, d, first_adamw);
        }
        if (ir_types_sane(m, op)) ir_verify_op_types(c, op);
        if (op->code == IR_FREE) ir_verify_free(c, op, &st);
    }
    c->op = -1;
    free(st.defined_at);
    free(st.freed_at);
}

/* Offloaded parameters (config offload.params) are updated where they live:
 * on the host, by the optimizer's host update. */
static void ir_verify_param_offload(ir_vctx *c) {
    const char *s = ir_config_get(c->m, "offload.params");
    if (!s) return;
    if (strcmp(s, "0") != 0 && strcmp(s, "1") != 0)
        ir_verr(c, sup_noloc(), "config offload.params must be 0 or 1, found '%s'", s);
    else if (ir_mem_params_on_host(c->m) && !ir_mem_opt_on_host(c->m))
        ir_verr(c, sup_noloc(),
                "config offload.params = 1 puts the parameters in host memory, where only the optimizer's host "
                "update can write them: it needs config offload optimizer or all");
}

bool ir_verify(const ir_module *m, const char *context) {
    ir_vctx c = {m, context, 0, -1};
    ir_verify_mesh(&c);
    ir_verify_param_offload(&c);
    ir_verify_groups(&c);
    ir_verify_values(&c);
    ir_verify_ops(&c);
    if (c.errors == 0) /* blocks are positions in valid groups */
        ir_verify_groups_joint(&c);
    if (c.errors == 0) ir_verify_seq_order(&c);
    if (c.errors == 0) ir_verify_variants(&c);
    if (c.errors == 0) ir_verify_async(&c);
    if (c.errors == 0) /* liveness needs valid defs and uses */
        ir_verify_mem(&c);
    return c.errors == 0;
}
