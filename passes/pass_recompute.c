/* pass_recompute.c — activation recomputation (config `recompute`:
 * none | selective | full | auto; spec key train.recompute).
 *
 * Without it every forward value the backward reads stays live from the
 * forward to the backward (the memory plan keeps a buffer from its defining
 * op to its last reader).  This pass cuts those ranges: for each decoder
 * layer l it keeps a small set of the layer's forward values, and right
 * before the first backward op of layer l it re-emits clones of the forward
 * ops that produce the rest (fresh names `<value>.rc`, the same attributes,
 * `phase = bwd`, `recompute = 1`) and rewires every backward use of layer
 * l to the clones.  The clones run the same kernels on bit-identical inputs,
 * so losses, gradients and weights do not change.
 *
 *   full       keeps only what enters the layer (the residual stream x0 /
 *              l<i-1>.x2) and what leaves it (l<i>.x2, the next layer's
 *              input): every other value the backward reads is recomputed,
 *              the sequence<->heads all-to-alls around attention included.
 *   selective  also keeps the attention core's operands and result in the
 *              layout attention_bwd reads (qr.heads, kr.heads, v.heads,
 *              o.heads): the norms, the projections, the o exchange back to
 *              the sequence layout, the residual add and the MLP (gate, up,
 *              SwiGLU) are recomputed; the attention itself and the q,k,v
 *              exchange are not.
 *   auto       the first of none, selective, full whose memory plan (arena
 *              + kernel workspace, planned on a clone) fits config
 *              device_mem; full when none fits.
 *
 * Only ops of layer l's forward that compute (IR_K_COMPUTE) or exchange
 * activations (all_to_all) are cloned, and only those the backward needs
 * (x2's add and the w_down linear are not: nothing in the backward reads
 * their results).  A value read by a clone that ZeRO-3 has freed by then
 * (`%w.full`) is replaced by the backward's gathered copy (`%w.full.bwd`),
 * whose all_gather moves to just before the first clone reading it; ZeRO
 * 1/2 copies live the whole step and are read as they are.  Values outside
 * layers (embedding, final norm, LM head) are never recomputed.
 *
 * Run before memplan; on a module that already has a memory plan the plan
 * is redone.  Applied once: a module with `recompute` ops is left alone. */
#include "pass_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef enum { RC_NONE, RC_SELECTIVE, RC_FULL, RC_AUTO } rc_mode;
static const char *const rc_names[] = {"none", "selective", "full", "auto"};

typedef struct rc_stats {
    int layers;               /* layers with clones */
    int ops, colls;           /* clones in all; all_to_all clones */
    int min_ops, max_ops;     /* clones per layer */
    int min_colls, max_colls; /* all_to_all clones per layer */
    int min_kept, max_kept;   /* layer values kept from the forward for the layer's backward */
    int moved, added;         /* ZeRO-3 backward gathers moved / added */
} rc_stats;

/* A growable list of ops (one layer's recompute block). */
typedef struct rc_block {
    ir_op *ops;
    int n, cap;
} rc_block;

static void block_push(rc_block *b, const ir_op *op) {
    SUP_GROW(b->ops, b->n, b->cap);
    b->ops[b->n++] = *op;
}

/* Ops the pass may re-run: computations and the activation exchanges.
 * Parameter gathers, frees and anything else are never cloned (their
 * results, when a clone reads them, are used as they are). */
static bool cloneable(const ir_op *op) {
    return ir_op_desc_of(op->code)->kind == IR_K_COMPUTE || op->code == IR_ALL_TO_ALL;
}

/* Marks a clone: recompute = 1, then layer and phase last like every op. */
static void tag_clone(ir_op *op, int layer) {
    ir_attr_remove(op, "layer");
    ir_attr_remove(op, "phase");
    ir_attr_set_int(op, "recompute", 1);
    ir_op_tag(op, layer, "bwd");
}

static bool same_gather(const ir_module *m, const ir_op *a, const ir_op *b, int out_a) {
    return a->code == IR_ALL_GATHER && b->code == IR_ALL_GATHER && a->nin == 1 && b->nin == 1 && a->nout == 1 &&
           b->nout == 1 && a->in[0] == b->in[0] && ir_op_group(a) == ir_op_group(b) &&
           ir_attr_int(a, "dim", -1) == ir_attr_int(b, "dim", -1) &&
           ir_type_equal(&m->values[out_a].type, &m->values[b->out[0]].type);
}

/* Index lists in CSR form: the items of key k are idx[at[k] .. at[k+1]). */
typedef struct rc_lists {
    int *at, *idx;
} rc_lists;

enum { RC_PH_OTHER, RC_PH_FWD, RC_PH_BWD };

typedef struct rc_ctx {
    ir_module *m;
    rc_mode mode;
    int n, nv; /* ops and values before the rewrite */
    int L;     /* layers */
    /* Each layer is handled by looking at its own ops and at the readers of
     * its own values only: scanning every op and value per layer would make
     * the pass quadratic in the layers. */
    int *layer_of;     /* per op: its layer attribute (-1 none) */
    signed char *ph;   /* per op: RC_PH_* of its phase */
    rc_lists by_layer; /* per layer: its ops, in schedule order */
    rc_lists readers;  /* per value: the ops reading it (one entry per operand), in order */
    int *touched;      /* values whose per-layer entries the current layer set */
    int ntouched;
    bool *is_touched; /* per value: listed in touched */
    int *first_bwd;   /* per layer: first backward op, -1 if none */
    int *freed_at;    /* per value: the op freeing it, -1 if none */
    int *prod;        /* per value: producing op in the current layer's clone candidates, -1 */
    bool *kept;       /* per value: kept from the forward (current layer) */
    bool *demand;     /* per value: the backward needs it recomputed */
    bool *counted;    /* per value: counted as kept for the backward */
    bool *clone;      /* per op: cloned for the current layer */
    bool *moved;      /* per op: a backward gather moved into a block */
    int *map;         /* per value: its clone (or the backward copy of a freed gather), -1 */
    rc_block *blocks;
    int *block_at; /* per op: the layer whose block goes right before it, -1 */
    rc_stats st;
} rc_ctx;

/* The producing clone candidate of v (-1: none, or a value added by the pass). */
static int prod_of(const rc_ctx *c, int v) { return v >= 0 && v < c->nv ? c->prod[v] : -1; }

/* Records that the current layer sets v's entries (prod, kept, demand,
 * counted, map), so that the next layer resets exactly those. */
static void rc_touch(rc_ctx *c, int v) {
    if (v < 0 || v >= c->nv || c->is_touched[v]) return;
    c->is_touched[v] = true;
    c->touched[c->ntouched++] = v;
}

/* Groups the keys key[0..n) (each in [0, nkeys) or negative: left out) into
 * CSR lists of the indices 0..n-1, in increasing order. */
static rc_lists rc_lists_make(const int *key, int n, int nkeys) {
    rc_lists l = {sup_xcalloc((size_t)nkeys + 1, sizeof(int)), sup_xmalloc(sizeof(int) * (size_t)(n + 1))};
    for (int i = 0; i < n; i++)
        if (key[i] >= 0 && key[i] < nkeys) l.at[key[i] + 1]++;
    for (int k = 0; k < nkeys; k++) l.at[k + 1] += l.at[k];
    int *fill = sup_xmalloc(sizeof(int) * (size_t)(nkeys + 1));
    memcpy(fill, l.at, sizeof(int) * (size_t)(nkeys + 1));
    for (int i = 0; i < n; i++)
        if (key[i] >= 0 && key[i] < nkeys) l.idx[fill[key[i]]++] = i;
    free(fill);
    return l;
}

static void rc_lists_free(rc_lists *l) {
    free(l->at);
    free(l->idx);
}

/* The op lists by layer and the reader lists by value, from the schedule
 * before the rewrite.  A layer's rewrite only makes its own backward read
 * new values (clones), so the lists stay exact for the layers after it. */
static void rc_index(rc_ctx *c) {
    ir_module *m = c->m;
    c->by_layer = rc_lists_make(c->layer_of, c->n, c->L);
    int nuse = 0;
    for (int i = 0; i < c->n; i++) nuse += m->ops[i].nin;
    int *val = sup_xmalloc(sizeof(int) * (size_t)(nuse + 1)), *op = sup_xmalloc(sizeof(int) * (size_t)(nuse + 1));
    nuse = 0;
    for (int i = 0; i < c->n; i++)
        for (int k = 0; k < m->ops[i].nin; k++) val[nuse] = m->ops[i].in[k], op[nuse++] = i;
    c->readers = rc_lists_make(val, nuse, c->nv);
    for (int u = 0; u < c->readers.at[c->nv]; u++)
        c->readers.idx[u] = op[c->readers.idx[u]]; /* use index -> op index */
    free(val);
    free(op);
}

/* A value a clone reads that is freed before the layer's backward (a ZeRO-3
 * forward parameter copy): the backward's own copy, its gather moved into
 * the block; or, when the backward gathers none, a new gather in the block
 * (freed at the block's end, recorded in *frees). */
static int freed_substitute(rc_ctx *c, int l, int v, rc_block *blk, rc_block *frees) {
    ir_module *m = c->m;
    if (c->map[v] >= 0) return c->map[v];
    int def = m->values[v].def;
    if (def < 0 || m->ops[def].code != IR_ALL_GATHER) {
        char buf[96];
        sup_error(sup_noloc(),
                  "recompute: layer %d: %%%s is freed before the layer's backward and is not a "
                  "parameter gather (%s); cannot recompute from it",
                  l, m->values[v].name, def >= 0 ? ir_op_str(m, def, buf, sizeof buf) : "no defining op");
        return -1;
    }
    for (int u = c->by_layer.at[l]; u < c->by_layer.at[l + 1]; u++) {
        int j = c->by_layer.idx[u];
        const ir_op *g = &m->ops[j];
        if (j < c->first_bwd[l] || c->ph[j] != RC_PH_BWD || c->moved[j] || !same_gather(m, &m->ops[def], g, v))
            continue;
        c->moved[j] = true;
        block_push(blk, g);
        c->st.moved++;
        rc_touch(c, v);
        return c->map[v] = g->out[0];
    }
    ir_op g = m->ops[def];
    char base[IR_NAME_MAX + 4];
    snprintf(base, sizeof base, "%s.rc", m->values[v].name);
    int copy = ir_value_add_fresh(m, base, m->values[v].type);
    g.out[0] = copy;
    tag_clone(&g, l);
    block_push(blk, &g);
    ir_op fr = ir_op_make(IR_FREE);
    ir_op_add_input(&fr, copy);
    ir_op_tag(&fr, l, "bwd");
    block_push(frees, &fr);
    c->st.added++;
    rc_touch(c, v);
    return c->map[v] = copy;
}

/* Layer l's clone candidates (prod[]) over forward ops [*lo, *hi], what is
 * kept (kept[]) and what the backward needs recomputed (demand[], clone[]);
 * *nkept counts the kept values the backward reads.  False when the layer
 * has no forward op to clone. */
static bool rc_select(rc_ctx *c, int l, int *lo_out, int *hi_out, int *nkept) {
    ir_module *m = c->m;
    int b = c->first_bwd[l];
    const int *ops = c->by_layer.idx + c->by_layer.at[l], nl = c->by_layer.at[l + 1] - c->by_layer.at[l];
    for (int t = 0; t < c->ntouched; t++) { /* what the previous layer set */
        int v = c->touched[t];
        c->prod[v] = -1;
        c->kept[v] = c->demand[v] = c->counted[v] = false;
        c->map[v] = -1;
        c->is_touched[v] = false;
    }
    c->ntouched = 0;
    int lo = c->n, hi = -1;
    *nkept = 0;
    for (int u = 0; u < nl && ops[u] < b; u++) {
        int i = ops[u];
        const ir_op *op = &m->ops[i];
        if (c->ph[i] != RC_PH_FWD || !cloneable(op)) continue;
        for (int k = 0; k < op->nout; k++) {
            rc_touch(c, op->out[k]);
            c->prod[op->out[k]] = i;
        }
        if (i < lo) lo = i;
        hi = i;
    }
    if (hi < 0) return false;
    /* Kept: what ops outside this layer's forward and backward read (the
     * layer's output), and with selective the attention core's values. */
    for (int u = 0; u < nl && ops[u] < b; u++) {
        const ir_op *op = &m->ops[ops[u]];
        for (int k = 0; k < op->nout; k++) {
            int v = op->out[k];
            if (prod_of(c, v) != ops[u]) continue;
            for (int r = c->readers.at[v]; r < c->readers.at[v + 1] && !c->kept[v]; r++) {
                int j = c->readers.idx[r];
                c->kept[v] = c->layer_of[j] != l || c->ph[j] == RC_PH_OTHER;
            }
        }
    }
    for (int u = 0; u < nl && c->mode == RC_SELECTIVE; u++) {
        const ir_op *op = &m->ops[ops[u]];
        if ((op->code != IR_ATTENTION && op->code != IR_RING_ATTENTION) || c->ph[ops[u]] != RC_PH_FWD) continue;
        for (int k = 0; k < op->nin; k++)
            if (prod_of(c, op->in[k]) >= 0) c->kept[op->in[k]] = true;
        for (int k = 0; k < op->nout; k++) {
            rc_touch(c, op->out[k]);
            c->kept[op->out[k]] = true;
        }
    }
    /* Demanded: what the layer's backward reads and is not kept, and,
     * going backwards over the forward, whatever a clone needs. */
    for (int u = 0; u < nl; u++) {
        const ir_op *op = &m->ops[ops[u]];
        if (ops[u] < b || c->ph[ops[u]] != RC_PH_BWD) continue;
        for (int k = 0; k < op->nin; k++) {
            int v = op->in[k];
            if (prod_of(c, v) < 0) continue;
            if (!c->kept[v])
                c->demand[v] = true;
            else if (!c->counted[v]) /* kept for this backward: counted once */
                c->counted[v] = true, (*nkept)++;
        }
    }
    for (int i = hi; i >= lo; i--) {
        const ir_op *op = &m->ops[i];
        bool need = false;
        for (int k = 0; k < op->nout && !need; k++) need = c->prod[op->out[k]] == i && c->demand[op->out[k]];
        c->clone[i] = need;
        if (!need) continue;
        for (int k = 0; k < op->nin; k++)
            if (prod_of(c, op->in[k]) >= 0 && !c->kept[op->in[k]]) c->demand[op->in[k]] = true;
    }
    *lo_out = lo, *hi_out = hi;
    return true;
}

/* Layer l's block: the clones in forward order, each preceded by the
 * backward gathers it is the first to read, then the frees of gathers the
 * block added.  False on an error (reported). */
static bool rc_block_build(rc_ctx *c, int l, int lo, int hi, int *nclones, int *ncolls) {
    ir_module *m = c->m;
    int nv = c->nv, b = c->first_bwd[l];
    rc_block *blk = &c->blocks[l], frees = {0};
    *nclones = *ncolls = 0;
    for (int i = lo; i <= hi; i++) {
        if (!c->clone[i]) continue;
        ir_op op = m->ops[i];
        for (int k = 0; k < op.nin; k++) {
            int v = op.in[k];
            if (prod_of(c, v) >= 0 && c->clone[c->prod[v]])
                op.in[k] = c->map[v];
            else if (v < nv && c->freed_at[v] >= 0 && c->freed_at[v] < b) {
                int s = freed_substitute(c, l, v, blk, &frees);
                if (s < 0) {
                    free(frees.ops);
                    return false;
                }
                op.in[k] = s;
            }
        }
        for (int k = 0; k < op.nout; k++) {
            char base[IR_NAME_MAX + 4];
            snprintf(base, sizeof base, "%s.rc", m->values[op.out[k]].name);
            int r = ir_value_add_fresh(m, base, m->values[op.out[k]].type);
            rc_touch(c, op.out[k]);
            c->map[op.out[k]] = r;
            op.out[k] = r;
        }
        tag_clone(&op, l);
        block_push(blk, &op);
        (*nclones)++;
        *ncolls += op.code == IR_ALL_TO_ALL;
    }
    for (int k = 0; k < frees.n; k++) block_push(blk, &frees.ops[k]);
    free(frees.ops);
    return true;
}

static void rc_count(rc_stats *st, int nclones, int ncolls, int nkept) {
    if (st->layers == 0) {
        st->min_ops = st->max_ops = nclones;
        st->min_colls = st->max_colls = ncolls;
        st->min_kept = st->max_kept = nkept;
    }
    st->layers++;
    st->ops += nclones;
    st->colls += ncolls;
    st->min_ops = nclones < st->min_ops ? nclones : st->min_ops;
    st->max_ops = nclones > st->max_ops ? nclones : st->max_ops;
    st->min_colls = ncolls < st->min_colls ? ncolls : st->min_colls;
    st->max_colls = ncolls > st->max_colls ? ncolls : st->max_colls;
    st->min_kept = nkept < st->min_kept ? nkept : st->min_kept;
    st->max_kept = nkept > st->max_kept ? nkept : st->max_kept;
}

/* Layer l: decides what is kept and what is cloned, builds the block and
 * rewires the layer's backward.  False on an error (reported). */
static bool rc_layer(rc_ctx *c, int l) {
    ir_module *m = c->m;
    int lo, hi, nkept, nclones, ncolls, b = c->first_bwd[l];
    if (!rc_select(c, l, &lo, &hi, &nkept)) return true;
    if (!rc_block_build(c, l, lo, hi, &nclones, &ncolls)) return false;
    /* Rewire the layer's backward to the clones. */
    for (int u = c->by_layer.at[l]; u < c->by_layer.at[l + 1]; u++) {
        ir_op *op = &m->ops[c->by_layer.idx[u]];
        if (c->by_layer.idx[u] < b || c->ph[c->by_layer.idx[u]] != RC_PH_BWD) continue;
        for (int k = 0; k < op->nin; k++) {
            int v = op->in[k];
            if (prod_of(c, v) >= 0 && !c->kept[v] && c->map[v] >= 0) op->in[k] = c->map[v];
        }
    }
    if (nclones == 0) return true;
    rc_count(&c->st, nclones, ncolls, nkept);
    c->block_at[b] = l;
    return true;
}

/* Applies `mode` (selective or full) to m.  False on an error (reported). */
static bool rc_apply(ir_module *m, rc_mode mode, rc_stats *out) {
    rc_ctx c = {.m = m, .mode = mode, .n = m->nops, .nv = m->nvalues};
    size_t nops = (size_t)c.n + 1, nvals = (size_t)c.nv + 1;
    c.layer_of = sup_xmalloc(nops * sizeof *c.layer_of);
    c.ph = sup_xmalloc(nops * sizeof *c.ph);
    for (int i = 0; i < c.n; i++) {
        const char *ph = ir_op_phase(&m->ops[i]);
        c.layer_of[i] = ir_op_layer(&m->ops[i]);
        c.ph[i] = !strcmp(ph, "fwd") ? RC_PH_FWD : !strcmp(ph, "bwd") ? RC_PH_BWD : RC_PH_OTHER;
        if (c.layer_of[i] >= c.L) c.L = c.layer_of[i] + 1;
    }
    size_t nl = (size_t)c.L + 1;
    rc_index(&c);
    c.touched = sup_xmalloc(nvals * sizeof *c.touched);
    c.is_touched = sup_xcalloc(nvals, sizeof *c.is_touched);
    c.first_bwd = sup_xmalloc(nl * sizeof *c.first_bwd);
    c.freed_at = sup_xmalloc(nvals * sizeof *c.freed_at);
    c.prod = sup_xmalloc(nvals * sizeof *c.prod);
    c.map = sup_xmalloc(nvals * sizeof *c.map);
    c.kept = sup_xcalloc(nvals, sizeof *c.kept);
    c.demand = sup_xcalloc(nvals, sizeof *c.demand);
    c.counted = sup_xcalloc(nvals, sizeof *c.counted);
    c.clone = sup_xcalloc(nops, sizeof *c.clone);
    c.moved = sup_xcalloc(nops, sizeof *c.moved);
    c.block_at = sup_xmalloc(nops * sizeof *c.block_at);
    c.blocks = sup_xcalloc(nl, sizeof *c.blocks);
    for (int l = 0; l < c.L; l++) c.first_bwd[l] = -1;
    for (int v = 0; v < c.nv; v++) c.freed_at[v] = c.prod[v] = c.map[v] = -1;
    for (int i = 0; i < c.n; i++) {
        const ir_op *op = &m->ops[i];
        c.block_at[i] = -1;
        int l = c.layer_of[i];
        if (l >= 0 && c.first_bwd[l] < 0 && c.ph[i] == RC_PH_BWD) c.first_bwd[l] = i;
        if (op->code == IR_FREE && op->nin == 1) c.freed_at[op->in[0]] = i;
    }
    bool ok = true;
    for (int l = 0; l < c.L && ok; l++)
        if (c.first_bwd[l] >= 0) ok = rc_layer(&c, l);
    if (ok) {
        int total = c.n;
        for (int l = 0; l < c.L; l++) total += c.blocks[l].n;
        for (int i = 0; i < c.n; i++) total -= c.moved[i];
        ir_op *ops = sup_xmalloc((size_t)(total > 0 ? total : 1) * sizeof *ops);
        int k = 0;
        for (int i = 0; i < c.n; i++) {
            if (c.block_at[i] >= 0) {
                const rc_block *bl = &c.blocks[c.block_at[i]];
                memcpy(ops + k, bl->ops, (size_t)bl->n * sizeof *ops);
                k += bl->n;
            }
            if (!c.moved[i]) ops[k++] = m->ops[i];
        }
        free(m->ops);
        m->ops = ops;
        m->nops = m->capops = total;
        ir_renumber(m);
    }
    for (int l = 0; l < c.L; l++) free(c.blocks[l].ops);
    free(c.blocks);
    free(c.layer_of);
    free(c.ph);
    rc_lists_free(&c.by_layer);
    rc_lists_free(&c.readers);
    free(c.touched);
    free(c.is_touched);
    free(c.first_bwd);
    free(c.freed_at);
    free(c.prod);
    free(c.map);
    free(c.kept);
    free(c.demand);
    free(c.counted);
    free(c.clone);
    free(c.moved);
    free(c.block_at);
    if (out) *out = c.st;
    return ok;
}

/* ---- auto ------------------------------------------------------------------- */

/* Peak bytes per rank (arena + kernel workspace) of m with `mode` applied,
 * planned on a clone; -1 when it cannot be built or planned. */
static int64_t rc_trial_peak(const ir_module *m, rc_mode mode, ir_mem_target t) {
    ir_module *c = ir_module_clone(m);
    ir_mem_stats ms;
    int64_t peak = -1;
    if ((mode == RC_NONE || rc_apply(c, mode, NULL)) && ir_mem_plan(c, t, &ms)) {
        int64_t w = ir_mem_work_bytes(c, t);
        peak = w >= 0 && ms.arena <= INT64_MAX - w ? ms.arena + w : -1;
    }
    ir_module_free(c);
    return peak;
}

static double cfg_double(const ir_module *m, const char *key) {
    const char *s = ir_config_get(m, key);
    if (!s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    return end == s || *end || errno ? 0 : v;
}

/* The setting auto picks; says why in a remark. */
static rc_mode rc_choose(const ir_module *m, ir_mem_target t, const pass_options *opt) {
    double cap = cfg_double(m, "device_mem");
    if (cap <= 0) {
        pu_remark(opt, "recompute: auto: device_mem unknown; none (every activation kept)");
        return RC_NONE;
    }
    static const rc_mode order[3] = {RC_NONE, RC_SELECTIVE, RC_FULL};
    int64_t peak[3];
    char cb[32], pb[3][32];
    sup_fmt_bytes(cap, cb, sizeof cb);
    for (int k = 0; k < 3; k++) {
        peak[k] = rc_trial_peak(m, order[k], t);
        if (peak[k] < 0)
            snprintf(pb[k], sizeof pb[k], "?");
        else
            sup_fmt_bytes((double)peak[k], pb[k], sizeof pb[k]);
        if (peak[k] >= 0 && (double)peak[k] <= cap) {
            if (k == 0)
                pu_remark(opt, "recompute: auto: none: %s per rank fits %s", pb[0], cb);
            else if (k == 1)
                pu_remark(opt, "recompute: auto: selective: %s per rank fits %s (none needs %s)", pb[1], cb, pb[0]);
            else
                pu_remark(opt, "recompute: auto: full: %s per rank fits %s (none needs %s, selective %s)", pb[2], cb,
                          pb[0], pb[1]);
            return order[k];
        }
    }
    pu_remark(opt, "recompute: auto: full, but %s per rank does not fit %s (none needs %s, selective %s)", pb[2], cb,
              pb[0], pb[1]);
    return RC_FULL;
}

/* ---- the pass ----------------------------------------------------------------- */

static void rc_range(char *buf, size_t n, int lo, int hi) {
    if (lo == hi)
        snprintf(buf, n, "%d", lo);
    else
        snprintf(buf, n, "%d-%d", lo, hi);
}

bool pass_recompute(ir_module *m, const pass_options *opt) {
    const char *s = pu_cfg(m, "recompute", "none");
    int mode = -1;
    for (int k = 0; k < 4; k++)
        if (strcmp(s, rc_names[k]) == 0) mode = k;
    if (mode < 0) {
        sup_error(sup_noloc(), "recompute: config recompute must be none, selective, full or auto, found '%s'", s);
        return false;
    }
    for (int i = 0; i < m->nops; i++)
        if (ir_attr_get(&m->ops[i], "recompute")) {
            pu_remark(opt, "recompute: the backward already recomputes activations; skipped");
            return true;
        }
    ir_mem_target t;
    if (!ir_mem_target_of(m, &t)) {
        sup_error(sup_noloc(), "recompute: config mem.target must be cpu or cuda, found '%s'",
                  ir_config_get(m, "mem.target"));
        return false;
    }
    if (mode == RC_AUTO) {
        mode = rc_choose(m, t, opt); /* remarks why */
        ir_config_set(m, "recompute.chosen", rc_names[mode]);
        if (mode == RC_NONE) return true;
    }
    if (mode == RC_NONE) {
        pu_remark(opt, "recompute: none: every activation the backward reads is kept from the forward");
        return true;
    }
    bool planned = ir_mem_planned(m);
    rc_stats st;
    if (!rc_apply(m, (rc_mode)mode, &st)) return false;
    if (st.layers == 0) {
        pu_remark(opt, "recompute: %s: no decoder layer forward is read by a backward; nothing recomputed",
                  rc_names[mode]);
        return true;
    }
    if (planned && !ir_mem_plan(m, t, NULL)) /* the old plan no longer matches the ops */
        return false;
    char ops[24], colls[24], kept[24], zero[96] = "";
    rc_range(ops, sizeof ops, st.min_ops, st.max_ops);
    rc_range(colls, sizeof colls, st.min_colls, st.max_colls);
    rc_range(kept, sizeof kept, st.min_kept, st.max_kept);
    if (st.moved || st.added)
        snprintf(zero, sizeof zero, "; %d backward parameter gather(s) moved before the recomputed ops%s", st.moved,
                 st.added ? ", some added" : "");
    pu_remark(opt,
              "recompute: %s: %d layer(s), %s op(s) re-emitted per layer (%d in all), %s all-to-all(s) re-run "
              "per layer (%d in all); per layer the backward reads its input and %s kept value(s)%s",
              rc_names[mode], st.layers, ops, st.ops, colls, st.colls, kept, zero);
    return true;
}
