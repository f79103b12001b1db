/* cg_ops.c — the `step` function: one runtime call per IR op, in schedule
 * order.  Each op's descriptor (ir/ir_op_*.c) names its runtime function
 * and writes the arguments through the emitter interface implemented here
 * (ir.h, ir_emit): it derives the kernel's local sizes from the global
 * shapes and the sharding groups, and refuses (with an error at the op) any
 * shape the runtime call cannot express, so that the generated program is
 * never silently wrong.  This file owns the C syntax and the names.  The
 * mapping is documented in codegen/README.md. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

typedef struct cg_op_ctx {
    const cg_names *n;
    const ir_module *m;
    int index; /* op index, for messages */
    const ir_op *op;
    sup_buf *b;
    bool ok;
    bool forward_only; /* the validation program (ir_emit.forward_only) */
} cg_op_ctx;

/* ---- diagnostics and operand access ---------------------------------------- */

static void cg_fail(cg_op_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cg_fail(cg_op_ctx *c, const char *fmt, ...) {
    char what[160], msg[512];
    if (!c->ok) return; /* one error per op: the first is the cause */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sup_error(c->op->loc, "codegen: %s: %s", ir_op_str(c->m, c->index, what, sizeof what), msg);
    c->ok = false;
}

static const char *cg_group_of(const cg_op_ctx *c, int g) { return g >= 0 && g < c->m->ngroups ? c->n->group[g] : "?"; }

/* ---- the emitter (ir.h): each op's descriptor writes its call through it ----------- */

static cg_op_ctx *cg_ctx(ir_emit *e) { return e->ctx; }

static void cg_e_call(ir_emit *e, const char *fn) { sup_buf_printf(cg_ctx(e)->b, "    %s(rt", fn); }
static void cg_e_end(ir_emit *e) { sup_buf_puts(cg_ctx(e)->b, ");\n"); }
static void cg_e_i64(ir_emit *e, int64_t v) { sup_buf_printf(cg_ctx(e)->b, ", %" PRId64, v); }

static void cg_e_f64(ir_emit *e, double v) {
    char num[48];
    sup_buf_printf(cg_ctx(e)->b, ", %s", cg_fmt_double(v, num, sizeof num));
}

/* A value's buffer; the runtime keeps every float value in fp32 and every
 * integer value in int32, so the accessor follows the IR dtype. */
static void cg_e_buf(ir_emit *e, int v, bool want_int) {
    cg_op_ctx *c = cg_ctx(e);
    const ir_value *val = &c->m->values[v];
    bool is_int = val->type.dtype == IR_I32;
    if (is_int != want_int)
        cg_fail(c, "%%%s is %s, but the kernel reads it as %s", val->name, ir_dtype_name(val->type.dtype),
                want_int ? "i32" : "a float (f32 on the CPU)");
    sup_buf_printf(c->b, ", rt_%s(rt, %s)", want_int ? "i32" : "f32", c->n->value[v]);
}

/* A value index (collectives, optimizer, free). */
static void cg_e_value(ir_emit *e, int v) { sup_buf_printf(cg_ctx(e)->b, ", %s", cg_ctx(e)->n->value[v]); }

static void cg_e_values(ir_emit *e, const int *vals, int n) {
    cg_op_ctx *c = cg_ctx(e);
    sup_buf_puts(c->b, ", (const int[]){");
    for (int i = 0; i < n; i++) sup_buf_printf(c->b, "%s%s", i ? ", " : "", c->n->value[vals[i]]);
    sup_buf_puts(c->b, "}");
}

static void cg_e_group(ir_emit *e, int g) { sup_buf_printf(cg_ctx(e)->b, ", %s", cg_group_of(cg_ctx(e), g)); }

static void cg_e_group_pos(ir_emit *e, int g, int64_t stride) {
    sup_buf_printf(cg_ctx(e)->b, ", rt_group_pos(rt, %s) * %" PRId64, cg_group_of(cg_ctx(e), g), stride);
}

/* The local size the runtime computes (uneven splits differ by rank). */
static void cg_e_local_dim(ir_emit *e, int v, int d) {
    sup_buf_printf(cg_ctx(e)->b, ", rt_local_dim(rt, %s, %d)", cg_ctx(e)->n->value[v], d);
}

static void cg_e_loss_scale(ir_emit *e, int64_t n) {
    if (n == 0)
        sup_buf_puts(cg_ctx(e)->b, ", rt_loss_scale(rt)");
    else
        sup_buf_printf(cg_ctx(e)->b, ", 1.0 / %" PRId64, n);
}

static double cg_e_config_double(ir_emit *e, const char *key) { return cg_config_double(e->m, key); }
static int64_t cg_e_config_int(ir_emit *e, const char *key) { return cg_config_int(e->m, key); }
static void cg_e_fail(ir_emit *e, const char *msg) { cg_fail(cg_ctx(e), "%s", msg); }

/* One runtime call: the op's descriptor names the function and writes the
 * arguments. */
static void cg_op(cg_op_ctx *c) {
    const ir_op_desc *d = ir_op_desc_of(c->op->code);
    if (!d || !d->emit) {
        cg_fail(c, "the CPU runtime has no call for this op");
        return;
    }
    ir_emit e = {
        .m = c->m,
        .op = c->op,
        .ctx = c,
        .call = cg_e_call,
        .end = cg_e_end,
        .i64 = cg_e_i64,
        .f64 = cg_e_f64,
        .buf = cg_e_buf,
        .value = cg_e_value,
        .values = cg_e_values,
        .group = cg_e_group,
        .group_pos = cg_e_group_pos,
        .local_dim = cg_e_local_dim,
        .loss_scale = cg_e_loss_scale,
        .config_double = cg_e_config_double,
        .config_int = cg_e_config_int,
        .fail = cg_e_fail,
        .forward_only = c->forward_only,
    };
    d->emit(&e);
}

/* ---- the step function ---------------------------------------------------------------- */

/* The printer's line for every op: the module prints its ops last, one line
 * each and in schedule order, so the last nops lines are the ops.  Reusing
 * the printer keeps the comments byte-identical to `--emit=ir`. */
static char **cg_op_lines(const ir_module *m, char **text) {
    *text = ir_print_to_string(m);
    char **lines = sup_xcalloc((size_t)m->nops + 1, sizeof *lines);
    size_t len = strlen(*text);
    char *end = *text + len;
    if (len && end[-1] == '\n') *--end = '\0';
    for (int i = m->nops - 1; i >= 0; i--) {
        char *nl = end;
        while (nl > *text && nl[-1] != '\n') nl--;
        lines[i] = nl;
        if (nl == *text) break;
        nl[-1] = '\0';
        end = nl - 1;
    }
    return lines;
}

/* A comment must not end early: "*" + "/" cannot occur in IR names, but a
 * config string could reach a line, so break the pair anyway. */
static void cg_comment(sup_buf *b, const char *indent, const char *text) {
    sup_buf_printf(b, "%s/* ", indent);
    for (const char *p = text; *p; p++) {
        sup_buf_printf(b, "%c", *p);
        if (*p == '*' && p[1] == '/') sup_buf_puts(b, " ");
    }
    sup_buf_puts(b, " */\n");
}

/* A banner each time the layer or the phase changes, to keep the long
 * schedule navigable; the forward-only program is all forward (the ops
 * the loss comes from included, whatever their phase). */
static void cg_banner(sup_buf *b, const ir_op *op, int *layer, const char **phase, bool fwd_only) {
    int l = ir_op_layer(op);
    const char *p = fwd_only && *ir_op_phase(op) ? "fwd" : ir_op_phase(op);
    /* An untagged op (hand-written IR) stays in the current section. */
    if (!ir_attr_get(op, "layer") && !*p && *layer != -2) return;
    if (l == *layer && !strcmp(p, *phase)) return;
    bool first = *layer == -2;
    *layer = l;
    *phase = p;
    if (!first) sup_buf_puts(b, "\n");
    if (l >= 0)
        sup_buf_printf(b, "    /* ---- layer %d%s%s ---- */\n", l, *p ? ", " : "", p);
    else
        sup_buf_printf(b, "    /* ---- %s ---- */\n", *p ? p : "outside the layers");
}

/* The buffers whose live range ends at this op, released right after it
 * (the memory plan may give their bytes to a later value).  A `free` op
 * releases its operand itself; a `wait` also ends the ranges of the
 * operands of the collectives it completes (ir_mem_live). */
static void cg_frees(cg_op_ctx *c, const int *start, const int *end) {
    if (c->op->code == IR_FREE) return;
    enum { CAND_MAX = IR_MAX_IN + IR_MAX_OUT + IR_MAX_IN * IR_MAX_IN };
    int cand[CAND_MAX], nc = 0, seen[CAND_MAX], ns = 0;
    for (int k = 0; k < c->op->nin; k++) cand[nc++] = c->op->in[k];
    for (int k = 0; k < c->op->nout; k++) cand[nc++] = c->op->out[k];
    if (c->op->code == IR_WAIT)
        for (int k = 0; k < c->op->nin; k++) {
            int d = c->m->values[c->op->in[k]].def;
            for (int j = 0; d >= 0 && j < c->m->ops[d].nin; j++) cand[nc++] = c->m->ops[d].in[j];
        }
    for (int k = 0; k < nc; k++) {
        int v = cand[k];
        bool dup = false;
        for (int j = 0; j < ns; j++) dup |= seen[j] == v;
        if (dup || start[v] < 0 || end[v] != c->index) continue;
        seen[ns++] = v;
        sup_buf_printf(c->b, "    rt_free(rt, %s);\n", c->n->value[v]);
    }
}

/* One C function: the ops with keep[i] (all when keep is NULL) in schedule
 * order, each under its IR line, with the frees of the step's live ranges;
 * an op not kept whose frees[i] is set emits its frees alone.  fwd_only: the
 * forward-only program (cg_emit_eval). */
static bool cg_emit_fn(const cg_names *n, sup_buf *b, const char *fn, const bool *keep, const bool *frees,
                       bool fwd_only) {
    const ir_module *m = n->m;
    char *text;
    char **lines = cg_op_lines(m, &text);
    bool ok = true;
    int layer = -2;
    const char *phase = "\1";
    sup_buf_printf(b, "static void %s(rt_ctx *rt) {\n", fn);
    int *start = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    int *end = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    ir_mem_live(m, start, end);
    for (int i = 0; i < m->nops; i++) {
        cg_op_ctx c = {n, m, i, &m->ops[i], b, true, fwd_only};
        if (keep && !keep[i]) {
            if (frees && frees[i]) cg_frees(&c, start, end);
            continue;
        }
        cg_banner(b, c.op, &layer, &phase, fwd_only);
        cg_comment(b, "    ", lines[i] ? lines[i] : "?");
        cg_op(&c);
        cg_frees(&c, start, end);
        ok &= c.ok;
    }
    sup_buf_puts(b, "}\n");
    free(start);
    free(end);
    free(lines);
    free(text);
    return ok;
}

int cg_dyn_sizes(const ir_module *m, int *sizes, int max) {
    const char *s = ir_config_get(m, "dyn_sizes");
    int n = 0;
    while (s && *s) {
        char *end;
        long k = strtol(s, &end, 10);
        if (end == s) {
            s++;
            continue;
        }
        if (sizes && n < max) sizes[n] = (int)k;
        n++;
        s = end;
    }
    return n;
}

int cg_dyn_first(const ir_module *m) {
    int k = 0;
    cg_dyn_sizes(m, &k, 1);
    return k;
}

/* batch_aware dynamic: one function per variant (its ops), the apply phase. */
static bool cg_emit_dynamic(const cg_names *n, sup_buf *b) {
    const ir_module *m = n->m;
    int sizes[64], ns = cg_dyn_sizes(m, sizes, 64);
    bool *keep = sup_xcalloc((size_t)m->nops + 1, sizeof(bool)), ok = true;
    for (int k = 0; k < ns; k++) {
        for (int i = 0; i < m->nops; i++) keep[i] = ir_attr_int(&m->ops[i], "variant", 0) == sizes[k];
        sup_buf_printf(b,
                       "/* The micro-step of a group of %d rank(s): its forward and backward, the gradients added\n"
                       " * to the accumulators every variant shares (the ops of variant %d). */\n",
                       sizes[k], sizes[k]);
        char fn[32];
        snprintf(fn, sizeof fn, "step_v%d", sizes[k]);
        ok &= cg_emit_fn(n, b, fn, keep, NULL, false);
        sup_buf_puts(b, "\n");
    }
    for (int i = 0; i < m->nops; i++) keep[i] = !strcmp(ir_op_phase(&m->ops[i]), "opt");
    sup_buf_puts(b, "/* The apply phase, once per optimizer step after the micro-steps (the ops of phase opt). */\n");
    ok &= cg_emit_fn(n, b, "apply_step", keep, NULL, false);
    free(keep);
    return ok;
}

bool cg_emit_step(const cg_names *n, sup_buf *b) {
    const ir_module *m = n->m;
    if (cg_dyn_sizes(m, NULL, 0) > 0) return cg_emit_dynamic(n, b);
    int64_t accum = ir_config_int(m, "accum", 1);
    if (accum <= 1) {
        sup_buf_puts(b, "/* One training step: one runtime call per IR op, in schedule order. */\n");
        return cg_emit_fn(n, b, "step", NULL, NULL, false);
    }
    /* Gradient accumulation: the runtime runs step() once per micro-step
     * (its inputs filled with that micro-batch, the accumulators zeroed
     * before the first), then apply_step() once. */
    bool *micro = sup_xcalloc((size_t)m->nops + 1, sizeof(bool)),
         *apply = sup_xcalloc((size_t)m->nops + 1, sizeof(bool));
    for (int i = 0; i < m->nops; i++) apply[i] = !(micro[i] = strcmp(ir_op_phase(&m->ops[i]), "opt") != 0);
    sup_buf_printf(b,
                   "/* One micro-step of %lld per optimizer step: the forward and backward, the gradients\n"
                   " * accumulated (the ops of phases fwd and bwd, in schedule order). */\n",
                   (long long)accum);
    bool ok = cg_emit_fn(n, b, "step", micro, NULL, false);
    sup_buf_puts(b, "\n/* The apply phase, once per optimizer step after the micro-steps: the accumulated\n"
                    " * gradients reduced and the update (the ops of phase opt). */\n");
    ok &= cg_emit_fn(n, b, "apply_step", apply, NULL, false);
    free(micro);
    free(apply);
    return ok;
}

/* The forward-only program (ir_forward_program): the step's forward ops
 * with the step's frees, for validation.  Values the step keeps for its
 * backward stay live to the end; the runtime releases them (as after a
 * step).  No program when the forward is not closed (a hand-written
 * module): `.eval = 0`, and the runtime refuses --val-data. */
bool cg_emit_eval(const cg_names *n, int loss, sup_buf *b) {
    const ir_module *m = n->m;
    bool *keep = sup_xcalloc((size_t)m->nops + 1, sizeof *keep);
    char why[400];
    if (!ir_forward_program(m, loss, keep, why, sizeof why)) {
        sup_buf_printf(b, "/* No forward-only program (validation): %s. */\n", why);
        free(keep);
        return false;
    }
    /* batch_aware dynamic: the loss's own variant alone (the others' forward
     * ops are no part of this program) */
    int64_t variant = m->values[loss].def >= 0 ? ir_attr_int(&m->ops[m->values[loss].def], "variant", 0) : 0;
    for (int i = 0; variant > 0 && i < m->nops; i++) keep[i] &= ir_attr_int(&m->ops[i], "variant", 0) == variant;
    /* An offload left out still ends the lives of the values it read last. */
    bool *frees = sup_xcalloc((size_t)m->nops + 1, sizeof *frees);
    int nkept = 0;
    for (int i = 0; i < m->nops; i++) nkept += keep[i], frees[i] = m->ops[i].code == IR_OFFLOAD;
    sup_buf_printf(b,
                   "/* The forward-only program (validation), derived from step: its %d forward op(s) of %d,\n"
                   " * no backward, optimizer, gradient reduction or offload; the step's buffers. */\n",
                   nkept, m->nops);
    bool ok = cg_emit_fn(n, b, "eval_step", keep, frees, true);
    free(keep);
    free(frees);
    return ok;
}
