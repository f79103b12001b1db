/* dynamic.c — batch_aware dynamic: the step as a family of variants, one
 * per group size, merged into one module.
 *
 * Why one module.  Every rank runs, in each micro-step, the variant of the
 * group it was given (a group of K ranks, one row of K * T tokens), and
 * ranks of different groups run different variants at the same time.  They
 * must share one parameter, gradient and optimizer layout, and ZeRO's
 * collectives over all N ranks must meet in the same order whatever each
 * rank runs.  Built as one module — the variants' micro-step ops one after
 * another, each tagged `variant = K`, then one apply phase — the module
 * has one set of parameters, accumulators and optimizer state by
 * construction, the verifier checks the world collectives against each
 * other (ir/ir_verify_variants.c), and the memory plan sizes the arena for
 * the worst variant by itself: no two variants' ops are live at once, so
 * their buffers share bytes.  `--memory`, `--schedule` and `--emit=ir` show
 * every variant; codegen writes one step function per variant.
 *
 * Each variant is the spec's step on one row of K * T tokens (micro_batch
 * 1, seq_len K * T, the accumulation form even without accumulation),
 * lowered with config dyn_block = K so that the sequence passes build their
 * groups over a block of K ranks (ir_seq_world), run through the strategy's
 * pipeline up to memplan, then renamed: its groups and its per-micro-step
 * values get the prefix "vK.", its config keys that differ between the
 * variants too.  The parameters, the accumulators and the apply phase come
 * from the first variant, after checking the others have the same. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* Variant K's module through the pipeline, memplan left out; NULL after
 * diagnostics. */
static ir_module *dyn_variant(const fe_spec *spec, int K, const char *target, const pass_options *po) {
    fe_spec s = *spec; /* read only by lowering: a shallow copy with the row's shape */
    int64_t T = fe_dynamic_tokens(spec);
    int64_t A = spec->train.global_batch > spec->train.micro_batch && spec->train.micro_batch > 0
                    ? spec->train.global_batch / spec->train.micro_batch
                    : 1;
    s.train.micro_batch = 1;
    s.train.seq_len = K * T;
    s.train.global_batch = A;
    layout_choice c = fe_dynamic_choice(spec, K);
    ir_module *m = pass_lower_with(&s, &c);
    if (!m) return NULL;
    ir_config_set_int(m, "dyn_block", K);
    if (target) ir_config_set(m, "mem.target", target); /* an explicit --target, as basp_run_pipeline sets it */
    char pipe[512];
    bool ok = pass_pipeline_of(m, pipe, sizeof pipe);
    char *mp = ok ? strstr(pipe, ",memplan") : NULL;
    if (mp) *mp = '\0';
    /* one remark per variant (below) rather than every pass's, once per size */
    pass_options quiet = *po;
    quiet.print_after_all = false;
    quiet.quiet = true;
    if (ok) ok = pass_run_pipeline(m, pipe, &quiet);
    if (!ok) {
        sup_error(sup_noloc(), "batch_aware dynamic: the variant for groups of %d ranks could not be built", K);
        ir_module_free(m);
        return NULL;
    }
    sup_remark(sup_noloc(), "batch-aware: dynamic: groups of %d: one row of %lld tokens, %s", K, (long long)(K * T),
               K == 1                 ? "no exchange (data parallel)"
               : c.seq == LAYOUT_RING ? "a ring of K ranks"
                                      : "Ulysses over K ranks");
    return m;
}

/* Shared by every variant: parameters, accumulators and what only the
 * apply phase defines. */
static bool dyn_shared(const ir_module *m, int v) {
    const ir_value *val = &m->values[v];
    if (val->kind == IR_V_PARAM || val->kind == IR_V_ACCUM) return true;
    return val->kind == IR_V_RESULT && val->def >= 0 && !strcmp(ir_op_phase(&m->ops[val->def]), "opt");
}

typedef struct dyn_merge {
    ir_module *out;
    int *gmap, *vmap; /* the variant's group and value indices in out */
} dyn_merge;

/* "vK.name"; a name too long for the prefix keeps its tail (names are
 * checked unique where they are added). */
static void dyn_prefixed(char *buf, size_t n, int K, const char *name) {
    char pre[16];
    int np = snprintf(pre, sizeof pre, "v%d.", K);
    size_t len = strlen(name), room = n - 1 - (size_t)np;
    snprintf(buf, n, "%s%s", pre, len > room ? name + (len - room) : name);
}

/* The variant's groups into out: @world shared, the others renamed. */
static void dyn_groups(dyn_merge *x, const ir_module *m, int K) {
    for (int g = 0; g < m->ngroups; g++) {
        const ir_group *gr = &m->groups[g];
        char name[IR_NAME_MAX];
        if (gr->block == 0) {
            x->gmap[g] = ir_group_find(x->out, gr->name);
            if (x->gmap[g] < 0) x->gmap[g] = ir_group_add(x->out, gr->name, gr->nsets, gr->set_size, gr->ranks);
            continue;
        }
        dyn_prefixed(name, sizeof name, K, gr->name);
        x->gmap[g] = ir_group_add(x->out, name, gr->nsets, gr->set_size, gr->ranks);
        x->out->groups[x->gmap[g]].block = gr->block;
    }
}

static ir_type dyn_type(const dyn_merge *x, ir_type t) {
    for (int d = 0; d < t.rank; d++)
        if (t.shard[d] >= 0) t.shard[d] = x->gmap[t.shard[d]];
    return t;
}

/* The variant's values into out; a shared one must exist there already
 * (from the first variant) with the same kind and type. */
static bool dyn_values(dyn_merge *x, const ir_module *m, int K, bool first) {
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = &m->values[v];
        ir_type t = dyn_type(x, val->type);
        char name[IR_NAME_MAX];
        if (dyn_shared(m, v)) {
            int o = ir_value_find(x->out, val->name);
            if (first && o < 0) o = ir_value_add(x->out, val->name, val->kind, t);
            if (o < 0 || x->out->values[o].kind != val->kind || memcmp(&x->out->values[o].type, &t, sizeof t)) {
                sup_error(sup_noloc(),
                          "batch_aware dynamic: the variant for groups of %d ranks has %%%s unlike the others'", K,
                          val->name);
                return false;
            }
            x->vmap[v] = o;
            continue;
        }
        dyn_prefixed(name, sizeof name, K, val->name);
        x->vmap[v] = ir_value_add(x->out, name, val->kind, t);
        if (x->vmap[v] < 0) {
            sup_error(sup_noloc(), "batch_aware dynamic: value %%%s is defined twice", name);
            return false;
        }
    }
    return true;
}

/* Op i of m remapped into out (phase opt: as is; else tagged variant K). */
static void dyn_op(const dyn_merge *x, const ir_module *m, int i, int K) {
    ir_op op = m->ops[i];
    for (int k = 0; k < op.nin; k++)
        if (op.in[k] >= 0) op.in[k] = x->vmap[op.in[k]];
    for (int k = 0; k < op.nout; k++)
        if (op.out[k] >= 0) op.out[k] = x->vmap[op.out[k]];
    for (int a = 0; a < op.nattrs; a++)
        if (op.attrs[a].kind == IR_A_GROUP && op.attrs[a].i >= 0) op.attrs[a].i = x->gmap[op.attrs[a].i];
    if (K > 0) ir_attr_set_int(&op, "variant", K);
    ir_op_append(x->out, &op);
}

/* Whether a variant before j has `key` (it was merged then). */
static bool dyn_config_seen(ir_module *const *vs, int j, const char *key) {
    for (int i = 0; i < j; i++)
        if (ir_config_get(vs[i], key)) return true;
    return false;
}

/* One key: as is when every variant has the same value, else vK.key. */
static void dyn_config_key(ir_module *out, ir_module *const *vs, const int *sizes, int n, const char *key) {
    const char *v0 = ir_config_get(vs[0], key);
    bool same = v0 && strcmp(key, "dyn_block") != 0;
    for (int i = 1; i < n && same; i++) {
        const char *o = ir_config_get(vs[i], key);
        same = o && !strcmp(o, v0);
    }
    if (same) {
        ir_config_set(out, key, v0);
        return;
    }
    for (int i = 0; i < n; i++) {
        char k[64];
        const char *o = ir_config_get(vs[i], key);
        snprintf(k, sizeof k, "v%d.%s", sizes[i], key);
        if (o && strlen(k) < sizeof out->config[0].key) ir_config_set(out, k, o);
    }
}

/* Config: every variant's keys, what they all agree on as is, what
 * differs (or only some have) as vK.key for each that has it; then the
 * dynamic layout's own keys. */
static void dyn_config(ir_module *out, ir_module *const *vs, const int *sizes, int n, const fe_spec *spec) {
    for (int j = 0; j < n; j++)
        for (int c = 0; c < vs[j]->nconfig; c++)
            if (!dyn_config_seen(vs, j, vs[j]->config[c].key)) dyn_config_key(out, vs, sizes, n, vs[j]->config[c].key);
    ir_config_set_int(out, "micro_batch", spec->train.micro_batch);
    ir_config_set_int(out, "seq_len", spec->train.seq_len);
    ir_config_set(out, "batch_aware", "dynamic");
    ir_config_set_int(out, "dyn_tokens", fe_dynamic_tokens(spec));
    char list[96] = "";
    for (int i = 0; i < n; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%d", i ? " " : "", sizes[i]);
    }
    ir_config_set(out, "dyn_sizes", list);
}

/* The variants merged: the first's mesh, each variant's micro-step ops in
 * turn, then the apply phase once (the first variant's: dyn_values checked
 * that they all share what it reads). */
static ir_module *dyn_merged(ir_module *const *vs, const int *sizes, int n, const fe_spec *spec) {
    dyn_merge x = {.out = ir_module_new(vs[0]->name)}, first = {0};
    dyn_config(x.out, vs, sizes, n, spec);
    x.out->mesh = vs[0]->mesh;
    if (vs[0]->mesh.node_of) {
        x.out->mesh.node_of = NULL;
        ir_mesh_set_placement(x.out, vs[0]->mesh.node_of);
    }
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        const ir_module *m = vs[i];
        x.gmap = sup_xmalloc(sizeof(int) * (size_t)(m->ngroups + 1));
        x.vmap = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
        dyn_groups(&x, m, sizes[i]);
        ok = dyn_values(&x, m, sizes[i], i == 0);
        for (int op = 0; ok && op < m->nops; op++)
            if (strcmp(ir_op_phase(&m->ops[op]), "opt")) dyn_op(&x, m, op, sizes[i]);
        if (i == 0) {
            first = x;
        } else {
            free(x.gmap);
            free(x.vmap);
        }
    }
    for (int op = 0; ok && op < vs[0]->nops; op++)
        if (!strcmp(ir_op_phase(&vs[0]->ops[op]), "opt")) dyn_op(&first, vs[0], op, 0);
    free(first.gmap);
    free(first.vmap);
    if (!ok) {
        ir_module_free(x.out);
        return NULL;
    }
    return x.out;
}

/* ---- the planner's estimate ------------------------------------------------------
 * From the merged module's per-op costs (pass cost): per variant, its
 * micro-step's time and the part that is attention (dense causal over its
 * row), and the apply phase.  A group holding documents of lengths l_i
 * takes rest_K + attn_K * sum(l_i^2) / (K T)^2, the micro-step the slowest
 * group's time, the step A micro-steps and the apply phase. */
typedef struct dyn_costs {
    int n, size[FE_DYN_MAX_SIZES];
    double micro_ms[FE_DYN_MAX_SIZES], attn_ms[FE_DYN_MAX_SIZES], a2a_ms[FE_DYN_MAX_SIZES], comm_ms[FE_DYN_MAX_SIZES];
    double apply_ms, apply_comm_ms;
    double comm[FE_DYN_MAX_SIZES]; /* the module's dyn_comm (layout_dyn_shape.size_comm) */
    double linear;                 /* the module's dyn_linear (layout_dyn_shape.linear) */
} dyn_costs;

static bool dyn_costs_of(const ir_module *merged, dyn_costs *c) {
    ir_module *m = ir_module_clone(merged);
    pass_options po = pass_default_options();
    po.quiet = true;
    bool ok = pass_run(m, "cost", &po);
    memset(c, 0, sizeof *c);
    int sizes[FE_DYN_MAX_SIZES];
    const char *list = ir_config_get(m, "dyn_sizes");
    for (const char *s = list; ok && s && *s && c->n < FE_DYN_MAX_SIZES;) {
        char *end;
        long k = strtol(s, &end, 10);
        if (end == s) break;
        sizes[c->n] = c->size[c->n] = (int)k, c->n++;
        s = end;
    }
    for (int i = 0; ok && i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        double ms = 1e-3 * (ir_attr_get(op, "cost_us") ? ir_attr_get(op, "cost_us")->f : 0);
        int K = (int)ir_attr_int(op, "variant", 0), k = 0;
        bool coll = ir_op_desc_of(op->code)->kind == IR_K_COLL, a2a = op->code == IR_ALL_TO_ALL;
        bool attn = op->code == IR_ATTENTION || op->code == IR_ATTENTION_BWD || op->code == IR_RING_ATTENTION ||
                    op->code == IR_RING_ATTENTION_BWD;
        if (K == 0) {
            c->apply_ms += ms;
            if (coll) c->apply_comm_ms += ms;
            continue;
        }
        while (k < c->n && sizes[k] != K) k++;
        if (k == c->n) continue;
        c->micro_ms[k] += ms;
        if (attn) c->attn_ms[k] += ms;
        if (a2a) c->a2a_ms[k] += ms;
        if (coll) c->comm_ms[k] += ms;
    }
    ir_module_free(m);
    return ok && c->n > 0;
}

/* The assignment's cost model (layout_dyn_shape) from the cost model's
 * times, so that the groups it balances are the groups the planner
 * predicts: its unit is the time of one l^2 of attention work, taken from
 * the one-rank variant's attention over a row of T (T^2 units) or, without
 * one, from the largest group's ((K T)^2 / K per rank); `linear` is then
 * the time of everything else a token costs (the micro-step less its
 * attention and exchange, per token) in that unit, and each size's
 * exchange its all-to-all time per token a rank holds.  Size by size, so
 * that a group across nodes pays its slower link. */
static void dyn_units(const fe_spec *spec, const dyn_costs *c, double *linear, double *x) {
    double T = (double)fe_dynamic_tokens(spec);
    int k = c->size[0] == 1 && c->attn_ms[0] > 0 ? 0 : c->n - 1;
    double unit = c->attn_ms[k] / ((double)c->size[k] * T * T);
    double rest = (c->micro_ms[k] - c->attn_ms[k] - c->a2a_ms[k]) / T;
    *linear = unit > 0 && rest > 0 ? rest / unit : 0;
    for (int i = 0; i < c->n; i++) x[i] = unit > 0 ? c->a2a_ms[i] / T / unit : 0;
}

/* The assignment's units as the module carries them (config dyn_linear,
 * dyn_comm: rounded as written, so that the planner assigns exactly as the
 * runtime will). */
static void dyn_units_of(const ir_module *m, dyn_costs *c) {
    const char *x = ir_config_get(m, "dyn_comm"), *lin = ir_config_get(m, "dyn_linear");
    c->linear = lin ? atof(lin) : 0;
    for (int k = 0; k < c->n; k++) {
        char *end;
        c->comm[k] = x ? strtod(x, &end) : 0;
        if (x) x = end;
    }
}

/* One micro-step's groups for pieces (assigned as the runtime does): the
 * slowest group's time, its variant index, and the imbalance. */
static double dyn_micro(const fe_spec *spec, const dyn_costs *c, bool padded, const layout_doc *pieces, int n,
                        int *slow, double *imbalance) {
    int64_t N = fe_world(spec), T = fe_dynamic_tokens(spec);
    layout_dyn_shape sh = {.world = (int)N,
                           .node_size = (int)spec->mesh.devices_per_node,
                           .T = T,
                           .sizes = c->size,
                           .nsizes = c->n,
                           .linear = c->linear,
                           .size_comm = c->comm};
    layout_dyn_group *g = sup_xmalloc(sizeof *g * (size_t)N);
    layout_slot *sl = sup_xmalloc(sizeof *sl * (size_t)(n + N));
    int ns = 0, ng = layout_dyn_assign(&sh, pieces, n, g, sl, &ns);
    double worst = ng > 0 ? 0 : INFINITY;
    for (int i = 0; i < ng; i++) {
        int k = 0;
        while (k < c->n && c->size[k] != g[i].size) k++;
        /* the group's row of size x T tokens, by the kernels that run it
         * (drv_doc_attn_share: cuDNN's padded batches or the masked tiles) */
        double w = drv_doc_attn_share(sl + g[i].slot0, g[i].nslots, (int64_t)g[i].size * T, padded);
        double t = c->micro_ms[k] - c->attn_ms[k] + c->attn_ms[k] * w;
        if (t > worst) worst = t, *slow = k;
    }
    *imbalance = ng > 0 ? layout_dyn_imbalance(g, ng) : 1;
    free(g);
    free(sl);
    return worst;
}

static ir_module *dyn_compile(const fe_spec *spec, const char *target, const pass_options *po, dyn_costs *c);

bool drv_dynamic_estimate(const fe_spec *spec, bool cuda, const pass_doc_lengths *docs, drv_dyn_estimate *out) {
    memset(out, 0, sizeof *out);
    pass_options po = pass_default_options();
    po.quiet = true;
    dyn_costs c;
    ir_module *m = dyn_compile(spec, cuda ? "cuda" : "cpu", &po, &c);
    if (!m || c.n == 0) {
        ir_module_free(m);
        return false;
    }
    pass_mem_report mr;
    if (pass_memory_report(m, &mr)) out->mem_bytes = (double)mr.peak_bytes, out->fits = mr.fits;
    snprintf(out->sizes, sizeof out->sizes, "%s", ir_config_get(m, "dyn_sizes"));
    ir_module_free(m);
    int64_t B = spec->train.micro_batch, S = spec->train.seq_len;
    int64_t A = spec->train.global_batch > B && B > 0 ? spec->train.global_batch / B : 1;
    /* cuDNN's padded batches run the documents on the cuda target, except
     * in ring groups (cm_attention_impl) */
    bool padded = cuda && strcmp(spec->layout.sequence, "ring") != 0 && strcmp(spec->layout.sequence, "hybrid") != 0;
    layout_doc *p = sup_xmalloc(sizeof *p * (size_t)(B * S + 1));
    /* dense: B documents of S tokens each */
    for (int64_t i = 0; i < B; i++) p[i] = (layout_doc){i * S, S};
    int slow = 0;
    double imb;
    out->dense_ms = (double)A * dyn_micro(spec, &c, padded, p, (int)B, &slow, &imb) + c.apply_ms;
    out->step_ms = out->dense_ms;
    out->imbalance = imb;
    double a2a = c.a2a_ms[slow], attn = c.attn_ms[slow], comm = c.comm_ms[slow];
    if (docs) {
        double t = 0, im = 0;
        a2a = attn = comm = 0;
        for (int s = 0; s < DRV_PLAN_STEPS; s++) {
            int n = pass_doc_draw(docs, s, B, S, p);
            t += dyn_micro(spec, &c, padded, p, n, &slow, &imb);
            im += imb;
            a2a += c.a2a_ms[slow], attn += c.attn_ms[slow], comm += c.comm_ms[slow];
        }
        out->step_ms = (double)A * t / DRV_PLAN_STEPS + c.apply_ms;
        out->imbalance = im / DRV_PLAN_STEPS;
        a2a /= DRV_PLAN_STEPS, attn /= DRV_PLAN_STEPS, comm /= DRV_PLAN_STEPS;
    }
    out->a2a_ms = (double)A * a2a;
    out->attn_ms = (double)A * attn;
    out->comm_ms = (double)A * comm + c.apply_comm_ms;
    free(p);
    return true;
}

/* drv_dynamic_compile, and the per-variant costs it took the assignment's
 * units from (*c; the planner's estimate reuses them). */
static ir_module *dyn_compile(const fe_spec *spec, const char *target, const pass_options *po, dyn_costs *c) {
    int sizes[FE_DYN_MAX_SIZES];
    int n = fe_dynamic_sizes(spec, sizes);
    if (n < 1) return NULL;
    ir_module *vs[FE_DYN_MAX_SIZES] = {0};
    bool ok = true;
    for (int i = 0; i < n && ok; i++) ok = (vs[i] = dyn_variant(spec, sizes[i], target, po)) != NULL;
    ir_module *m = ok ? dyn_merged(vs, sizes, n, spec) : NULL;
    for (int i = 0; i < n; i++) ir_module_free(vs[i]);
    if (!m) return NULL;
    char list[96];
    snprintf(list, sizeof list, "%s", ir_config_get(m, "dyn_sizes"));
    sup_remark(sup_noloc(), "batch-aware: dynamic: %d variant(s), groups of %s rank(s), %lld tokens per rank", n, list,
               (long long)fe_dynamic_tokens(spec));
    if (!ir_verify(m, "after merging the dynamic variants") || !pass_run_pipeline(m, "memplan", po)) {
        ir_module_free(m);
        return NULL;
    }
    if (dyn_costs_of(m, c)) {
        double x[FE_DYN_MAX_SIZES], linear;
        char costs[sizeof m->config[0].value] = "", num[40];
        dyn_units(spec, c, &linear, x);
        ir_config_set(m, "dyn_linear", sup_fmt_double(linear, num, sizeof num));
        for (int k = 0; k < c->n; k++) { /* 5 digits: 16 sizes fit the config's value */
            size_t len = strlen(costs);
            snprintf(costs + len, sizeof costs - len, "%s%.5g", k ? " " : "", x[k]);
        }
        ir_config_set(m, "dyn_comm", costs);
        dyn_units_of(m, c);
    } else {
        c->n = 0;
    }
    return m;
}

ir_module *drv_dynamic_compile(const fe_spec *spec, const char *target, const pass_options *po) {
    dyn_costs c;
    return dyn_compile(spec, target, po, &c);
}

/* ---- --plan's rows -------------------------------------------------------- */
typedef struct dyn_plan {
    const fe_spec *spec;
    const pass_doc_lengths *docs;
    pass_plan_result *r;
    int *cap;
    bool cuda;
} dyn_plan;

/* As the planner's: legal, fits, predicted. */
static bool dyn_usable(const pass_plan_candidate *c) { return c->legal && c->fits && isfinite(c->step_ms); }

/* One row of batch_aware dynamic with group sizes `sizes` ("" = every
 * legal size), predicted by drv_dynamic_estimate. */
static void plan_dynamic_row(const dyn_plan *x, const char *sizes) {
    layout_choice none = layout_ulysses(0);
    pass_plan_candidate *c = drv_plan_add(x->r, x->cap, &none);
    c->dynamic = true;
    c->available = true;
    fe_spec *s = fe_spec_copy(x->spec);
    s->layout.batch_aware = FE_BA_DYNAMIC;
    snprintf(s->layout.group_sizes, sizeof s->layout.group_sizes, "%s", sizes);
    drv_dyn_estimate e;
    if (!fe_check(s)) {
        snprintf(c->name, sizeof c->name, "batch-aware dynamic %s", sizes[0] ? sizes : "");
        snprintf(c->reason, sizeof c->reason, "illegal: batch_aware dynamic's rules (baspc --check with it says why)");
    } else if (!drv_dynamic_estimate(s, x->cuda, x->docs, &e)) {
        snprintf(c->reason, sizeof c->reason, "the compiler rejects this layout");
    } else {
        snprintf(c->name, sizeof c->name, "batch-aware dynamic %.40s", e.sizes);
        c->legal = true, c->fits = e.fits;
        c->groups = 0;
        c->group_size = atoi(strrchr(e.sizes, ' ') ? strrchr(e.sizes, ' ') + 1 : e.sizes);
        c->peers = c->group_size - 1;
        c->step_ms = e.step_ms, c->a2a_ms = e.a2a_ms, c->attn_ms = e.attn_ms, c->comm_ms = e.comm_ms;
        c->a2a_fraction = e.step_ms > 0 ? e.a2a_ms / e.step_ms : 0;
        c->mem_bytes_per_rank = e.mem_bytes;
        c->dense_step_ms = x->docs ? e.dense_ms : NAN;
        c->docs_ms[0] = c->docs_ms[1] = x->docs ? e.step_ms : NAN;
        c->imbalance[0] = c->imbalance[1] = x->docs ? e.imbalance : NAN;
        snprintf(c->offload, sizeof c->offload, "none");
    }
    fe_spec_free(s);
}

/* batch_aware dynamic (packed documents): the spec's sizes,
 * or every legal size and the powers of two among them.  Added after the
 * static choice, which they do not change; a dynamic spec then takes the
 * fastest of them. */
void drv_plan_dynamic(const fe_spec *spec, bool cuda, const pass_doc_lengths *docs, pass_plan_result *r, int *cap) {
    if (!spec->train.documents || r->world < 2) return;
    const dyn_plan x = {spec, docs, r, cap, cuda};
    int first = r->n;
    if (spec->layout.group_sizes[0]) {
        plan_dynamic_row(&x, spec->layout.group_sizes);
    } else {
        plan_dynamic_row(&x, "");
        char pow2[64] = "";
        for (int K = 1; K <= r->world; K *= 2) {
            size_t len = strlen(pow2);
            snprintf(pow2 + len, sizeof pow2 - len, "%s%d", len ? " " : "", K);
        }
        if (strcmp(pow2, r->cand[first].name + strlen("batch-aware dynamic "))) plan_dynamic_row(&x, pow2);
    }
    int best = -1;
    for (int i = first; i < r->n; i++)
        if (dyn_usable(&r->cand[i]) && (best < 0 || r->cand[i].step_ms < r->cand[best].step_ms)) best = i;
    const pass_plan_candidate *st = r->chosen >= 0 ? &r->cand[r->chosen] : NULL;
    bool dyn = spec->layout.batch_aware == FE_BA_DYNAMIC;
    for (int i = first; i < r->n; i++) {
        pass_plan_candidate *c = &r->cand[i];
        if (!dyn_usable(c) || (dyn && i == best)) continue;
        if (dyn)
            snprintf(c->reason, sizeof c->reason, "slower: %.1f ms/step, +%.1f%% over %s", c->step_ms,
                     100.0 * (c->step_ms / r->cand[best].step_ms - 1.0), r->cand[best].name);
        else
            snprintf(c->reason, sizeof c->reason,
                     "not the spec's layout: %.2fx %s's speed; --set layout.batch_aware=dynamic (and its group_sizes) "
                     "uses it",
                     st ? st->step_ms / c->step_ms : 0, st ? st->name : "the static choice");
    }
    if (!dyn || best < 0) return;
    for (int i = 0; i < first; i++) { /* the static rows: for comparison */
        pass_plan_candidate *c = &r->cand[i];
        char old[sizeof c->reason];
        snprintf(old, sizeof old, "%s", c->reason);
        snprintf(c->reason, sizeof c->reason, "the spec asks for batch_aware dynamic%s%.200s", old[0] ? "; " : "", old);
        c->within_error = false;
    }
    if (st)
        snprintf(r->why, sizeof r->why,
                 "the spec's batch_aware dynamic, the fastest of its group-size sets: %.1f ms/step, %.2fx the best "
                 "static layout (%s, %.1f ms/step)",
                 r->cand[best].step_ms, st->step_ms / r->cand[best].step_ms, st->name, st->step_ms);
    else
        snprintf(r->why, sizeof r->why, "the spec's batch_aware dynamic: %.1f ms/step", r->cand[best].step_ms);
    r->chosen = best;
}
