/* pass_zero.c — ZeRO sharding of optimizer state, gradients and parameters
 * over @world (stage from config `zero`, 0..3).
 *
 * Every rank computes a partial gradient for every parameter (its tokens
 * only), so some reduction over all ranks is always needed:
 *   stage 0: %d.w.sum = all_reduce %d.w            adamw(w, d.w.sum)
 *   stage 1: w stored sharded on its first dimension divisible by N;
 *            %w.full = all_gather %w before its first use (the working
 *            copy for the whole step); gradients all_reduce'd as in stage 0;
 *            adamw(w shard, d.w.sum full) updates the rank's slice.
 *   stage 2: as 1, but %d.w.shard = reduce_scatter %d.w {dim = d}.
 *   stage 3: as 2, but the full copy lives only while it is used: one
 *            all_gather before the first forward use and a `free` after the
 *            last, and again around the backward uses.
 * A parameter with no dimension divisible by N stays replicated (remark).
 * Each gradient collective sits right after the op completing the gradient,
 * so it can overlap the rest of the backward.
 *
 * Gradient accumulation (config accum = A > 1: A micro-steps of the forward
 * and backward, then the apply phase, `phase = opt`): each gradient goes
 * into an accumulator (`accum %d.w.acc`, zero at the start of the step)
 *   reduce-scattered (stage 2-3, w sharded): every micro-step
 *            %d.w.shard = reduce_scatter %d.w; accumulate %d.w.acc, %d.w.shard
 *            (the accumulator is the rank's shard: 1/N of the gradient)
 *            apply: adamw(w, d.w.acc)
 *   otherwise (stage 0-1, replicated): every micro-step accumulate %d.w.acc,
 *            %d.w (the rank's partial gradient, full size)
 *            apply: %d.w.sum = all_reduce %d.w.acc; adamw(w, d.w.sum)
 * as DeepSpeed does: stages 0-1 keep a full gradient buffer anyway, so one
 * reduction per step moves A times fewer bytes; stages 2-3 exist so that no
 * rank holds the full gradient across micro-steps, which costs a
 * reduce-scatter per micro-step.  ZeRO-3's gathers stay in the forward and
 * backward, so they run every micro-step. */
#include "pass_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct zctx {
    ir_module *m;
    int world, N, stage, accum;
    bool dynamic;
    int first_adamw; /* index of the first adamw op (the apply phase's reductions go before it) */
    int gathers, reductions, sharded, replicated;
    pass_edits edits; /* inserted ops, applied at the end: indices below are
                       those of the unchanged schedule */
    /* Per value of the unchanged module: the ops reading it, in order
     * (readers[at[v] .. at[v+1])), so that each parameter's uses cost its
     * own readers, not a scan of the whole step (quadratic in the layers).
     * The rewrites only replace reads with new values, so a listed op may
     * no longer read v (checked) but no op starts reading it. */
    int *at, *readers, nv;
} zctx;

static void zero_index(zctx *z) {
    const ir_module *m = z->m;
    z->nv = m->nvalues;
    z->at = sup_xcalloc((size_t)z->nv + 2, sizeof *z->at);
    for (int i = 0; i < m->nops; i++)
        for (int k = 0; k < m->ops[i].nin; k++)
            if (k == 0 || m->ops[i].in[k] != m->ops[i].in[k - 1]) /* adjacent repeats: one entry */
                z->at[m->ops[i].in[k] + 2]++;
    for (int v = 0; v < z->nv; v++) z->at[v + 2] += z->at[v + 1];
    z->readers = sup_xmalloc(sizeof *z->readers * (size_t)(z->at[z->nv + 1] + 1));
    for (int i = 0; i < m->nops; i++)
        for (int k = 0; k < m->ops[i].nin; k++)
            if (k == 0 || m->ops[i].in[k] != m->ops[i].in[k - 1]) z->readers[z->at[m->ops[i].in[k] + 1]++] = i;
}

/* Ops listed as reading v: op indices readers[*lo .. *hi) (maybe repeated). */
static void zero_uses(const zctx *z, int v, int *lo, int *hi) {
    *lo = v >= 0 && v < z->nv ? z->at[v] : 0;
    *hi = v >= 0 && v < z->nv ? z->at[v + 1] : 0;
}

/* First dimension divisible by N, -1 if none. */
static int shard_dim(const ir_module *m, int w, int N) {
    const ir_type *t = &m->values[w].type;
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d] % N == 0) return d;
    return -1;
}

static ir_op collective(ir_opcode code, int group, int in, int out, int dim, const ir_op *like) {
    ir_op op = ir_op_make(code);
    ir_op_add_input(&op, in);
    if (out >= 0) ir_op_add_output(&op, out);
    if (group >= 0) ir_attr_set_group(&op, "group", group);
    if (dim >= 0) ir_attr_set_int(&op, "dim", dim);
    pu_tag_like(&op, like);
    return op;
}

/* Inserts `%<w><suffix> = all_gather %w` before op `first` and makes the ops
 * in [first, last] that read w read the copy instead (adamw keeps the
 * shard).  Returns the copy's value index. */
static int gather(zctx *z, int w, int d, const char *suffix, int first, int last, ir_type full) {
    ir_module *m = z->m;
    char base[IR_NAME_MAX + 16];
    snprintf(base, sizeof base, "%s%s", m->values[w].name, suffix);
    int copy = ir_value_add_fresh(m, base, full);
    ir_op op = collective(IR_ALL_GATHER, z->world, w, copy, d, &m->ops[first]);
    pass_insert_before(&z->edits, first, &op);
    int lo, hi;
    zero_uses(z, w, &lo, &hi);
    for (int u = lo; u < hi; u++) {
        int i = z->readers[u];
        if (i >= first && i <= last && m->ops[i].code != IR_ADAMW)
            for (int k = 0; k < m->ops[i].nin; k++)
                if (m->ops[i].in[k] == w) m->ops[i].in[k] = copy;
    }
    z->gathers++;
    return copy;
}

/* First and last op of `phase` (or of any compute phase when NULL) reading w. */
static bool use_range(const zctx *z, int w, const char *phase, int *first, int *last) {
    const ir_module *m = z->m;
    int lo, hi;
    zero_uses(z, w, &lo, &hi);
    *first = *last = -1;
    for (int u = lo; u < hi; u++) {
        int i = z->readers[u];
        const ir_op *op = &m->ops[i];
        if (op->code == IR_ADAMW || !pu_reads(op, w)) continue;
        bool bwd = strcmp(ir_op_phase(op), "bwd") == 0;
        if (phase && bwd != (strcmp(phase, "bwd") == 0)) continue;
        if (*first < 0) *first = i;
        *last = i;
    }
    return *first >= 0;
}

/* Stage 3: gather, use, free — once for the forward, once for the backward. */
static void gather_per_phase(zctx *z, int w, int d, ir_type full) {
    static const char *const phases[2] = {"fwd", "bwd"};
    static const char *const suffix[2] = {".full", ".full.bwd"};
    for (int p = 0; p < 2; p++) {
        int first, last;
        if (!use_range(z, w, phases[p], &first, &last)) continue;
        int copy = gather(z, w, d, suffix[p], first, last, full);
        ir_op fr = collective(IR_FREE, -1, copy, -1, -1, &z->m->ops[last]);
        pass_insert_after(&z->edits, last, &fr);
    }
}

/* `accumulate %acc, %g` right after op p (before the op after it, so after
 * any collective inserted after p); returns acc, an accumulator of g's type. */
static int accumulate_after(zctx *z, int g, int p) {
    ir_module *m = z->m;
    char base[IR_NAME_MAX + 8], name[IR_NAME_MAX];
    snprintf(base, sizeof base, "%s.acc", m->values[g].name);
    ir_value_fresh_name(m, base, name);
    int acc = ir_value_add(m, name, IR_V_ACCUM, m->values[g].type);
    ir_op op = ir_op_make(IR_ACCUMULATE);
    ir_op_add_input(&op, acc);
    ir_op_add_input(&op, g);
    pu_tag_like(&op, &m->ops[p]);
    pass_insert_before(&z->edits, p + 1, &op);
    return acc;
}

/* With accumulation: the gradient dw (completed by op p) into an
 * accumulator every micro-step; the apply phase reduces it once (stage 0-1,
 * replicated) or updates from the accumulated shard (stage 2-3). */
static void accumulate_grad(zctx *z, int dw, int d, int p, int adamw) {
    ir_module *m = z->m;
    bool scatter = z->stage >= 2 && d >= 0;
    int g = dw;
    if (scatter) {
        ir_type t = m->values[dw].type;
        t.shard[d] = z->world;
        char base[IR_NAME_MAX + 8];
        snprintf(base, sizeof base, "%s.shard", m->values[dw].name);
        g = ir_value_add_fresh(m, base, t);
        ir_op op = collective(IR_REDUCE_SCATTER, z->world, dw, g, d, &m->ops[p]);
        pass_insert_after(&z->edits, p, &op);
    }
    int acc = accumulate_after(z, g, p);
    int upd = acc;
    if (!scatter) {
        char base[IR_NAME_MAX + 8];
        snprintf(base, sizeof base, "%s.sum", m->values[dw].name);
        upd = ir_value_add_fresh(m, base, m->values[dw].type);
        /* Before the first adamw: the first one computes the global
         * gradient norm over every gradient (clipping), so all must be
         * reduced by then. */
        ir_op op = collective(IR_ALL_REDUCE, z->world, acc, upd, -1, &m->ops[adamw]);
        pass_insert_before(&z->edits, z->first_adamw, &op);
    }
    m->ops[adamw].in[1] = upd;
    z->reductions++;
}

/* Reduces the gradient dw right after the op completing it. */
static void reduce_grad(zctx *z, int dw, int d, int adamw) {
    ir_module *m = z->m;
    int p = m->values[dw].def;
    if (p < 0) return; /* not computed in this step: nothing to reduce */
    if (z->accum > 1 || z->dynamic) {
        accumulate_grad(z, dw, d, p, adamw);
        return;
    }
    bool scatter = z->stage >= 2 && d >= 0;
    ir_type t = m->values[dw].type;
    if (scatter) t.shard[d] = z->world;
    char base[IR_NAME_MAX + 8];
    snprintf(base, sizeof base, "%s%s", m->values[dw].name, scatter ? ".shard" : ".sum");
    int red = ir_value_add_fresh(m, base, t);
    ir_op op = collective(scatter ? IR_REDUCE_SCATTER : IR_ALL_REDUCE, z->world, dw, red, scatter ? d : -1, &m->ops[p]);
    pass_insert_after(&z->edits, p, &op);
    int lo, hi; /* ir_replace_uses(m, dw, red, p + 1) over dw's readers */
    zero_uses(z, dw, &lo, &hi);
    for (int u = lo; u < hi; u++)
        if (z->readers[u] > p)
            for (int k = 0; k < m->ops[z->readers[u]].nin; k++)
                if (m->ops[z->readers[u]].in[k] == dw) m->ops[z->readers[u]].in[k] = red;
    z->reductions++;
}

static void zero_param(zctx *z, int w, int dw, int adamw, const pass_options *opt) {
    ir_module *m = z->m;
    int d = z->stage >= 1 ? shard_dim(m, w, z->N) : -1;
    if (z->stage >= 1 && d < 0 && z->N > 1) {
        char ty[IR_TYPE_STR_MAX];
        pu_remark(opt, "zero: %%%s : %s has no dimension divisible by %d ranks; kept replicated", m->values[w].name,
                  ir_type_str(m, &m->values[w].type, ty, sizeof ty), z->N);
        z->replicated++;
    }
    if (d >= 0) {
        ir_type full = m->values[w].type;
        m->values[w].type.shard[d] = z->world;
        z->sharded++;
        int first, last;
        if (z->stage <= 2 && use_range(z, w, NULL, &first, &last))
            gather(z, w, d, ".full", first, last, full);
        else if (z->stage == 3)
            gather_per_phase(z, w, d, full);
    }
    reduce_grad(z, dw, d, adamw);
}

/* True once gradients already flow through a reduction into adamw. */
static bool already_applied(const ir_module *m) {
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if (op->code != IR_ADAMW || op->nin < 2) continue;
        if (m->values[op->in[1]].kind == IR_V_ACCUM) /* accumulated: applied with accumulation */
            return true;
        int def = m->values[op->in[1]].def;
        if (def >= 0 && ir_op_desc_of(m->ops[def].code)->kind == IR_K_COLL) return true;
    }
    return false;
}

bool pass_zero(ir_module *m, const pass_options *opt) {
    zctx z = {.m = m,
              .stage = (int)ir_config_int(m, "zero", 0),
              .N = ir_world(m),
              .accum = (int)ir_config_int(m, "accum", 1),
              /* a dynamic variant always has the micro-step / apply form:
               * every variant's micro-step adds into the same accumulators */
              .dynamic = ir_config_int(m, "dyn_block", 0) > 0};
    if (z.stage < 0 || z.stage > 3) {
        sup_error(sup_noloc(), "zero: stage %d is not one of 0, 1, 2, 3", z.stage);
        return false;
    }
    if (already_applied(m)) {
        pu_remark(opt, "zero: gradients are already reduced; skipped");
        return true;
    }
    z.world = ir_group_find(m, "world");
    if (z.world < 0) z.world = ir_group_add_contiguous(m, "world", 1);
    /* Collect (w, dw) first: the rewrites below move ops around. */
    int n = 0, *pairs = sup_xmalloc(sizeof(int) * 3 * (size_t)(m->nops + 1));
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == IR_ADAMW && m->ops[i].nin == 2) {
            pairs[3 * n] = m->ops[i].in[0];
            pairs[3 * n + 1] = m->ops[i].in[1];
            pairs[3 * n + 2] = i; /* indices of the unchanged schedule, as the edits' */
            n++;
        }
    z.first_adamw = n > 0 ? pairs[2] : 0;
    zero_index(&z);
    for (int k = 0; k < n; k++) zero_param(&z, pairs[3 * k], pairs[3 * k + 1], pairs[3 * k + 2], opt);
    free(pairs);
    free(z.at);
    free(z.readers);
    pass_edits_apply(m, &z.edits); /* renumbers */
    pu_remark(opt,
              "zero: stage %d over @world (%d ranks): %d parameter(s) sharded, %d replicated; %d all-gather(s), "
              "%d gradient reduction(s)",
              z.stage, z.N, z.sharded, z.replicated, z.gathers, z.reductions);
    if (z.accum > 1 || z.dynamic)
        pu_remark(opt, "zero: %d micro-steps per optimizer step: gradients accumulated, %s", z.accum,
                  z.stage >= 2 ? "reduce-scattered into the shard every micro-step (replicated ones reduced once "
                                 "per step)"
                               : "reduced once per step in the apply phase");
    return true;
}
