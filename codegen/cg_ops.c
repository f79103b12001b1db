/* cg_ops.c — the `step` function: one runtime call per IR op, in schedule
 * order.  One emitter per op family; each derives the kernel's local sizes
 * from the global shapes and the sharding groups, and refuses (with an error
 * at the op) any shape the runtime call cannot express, so that the
 * generated program is never silently wrong.  The mapping is documented in
 * codegen/README.md. */
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

static const ir_value *cg_in(const cg_op_ctx *c, int k) { return &c->m->values[c->op->in[k]]; }
static const ir_value *cg_out(const cg_op_ctx *c, int k) { return &c->m->values[c->op->out[k]]; }

static const char *cg_group_of(const cg_op_ctx *c, int g) {
    return g >= 0 && g < c->m->ngroups ? c->n->group[g] : "?";
}

/* The row0 argument: the first global row (batch index) of this rank's
 * slice of v's dim 0, for the runtime's per-row document tables. */
static void cg_row0(cg_op_ctx *c, const ir_value *v) {
    int g = v->type.shard[0];
    if (g >= 0)
        sup_buf_printf(c->b, ", rt_group_pos(rt, %s) * %" PRId64, cg_group_of(c, g), cg_local_dim(c->m, &v->type, 0));
    else
        sup_buf_puts(c->b, ", 0");
}

/* Product of the local sizes of dims [from, to) of v. */
static int64_t cg_lprod(const cg_op_ctx *c, const ir_value *v, int from, int to) {
    int64_t p = 1;
    for (int d = from; d < to; d++) p *= cg_local_dim(c->m, &v->type, d);
    return p;
}

/* Kernels index these dims as full rows or full weight matrices: a shard
 * there would need a different kernel, so refuse it. */
static bool cg_whole(cg_op_ctx *c, const ir_value *v, int from, int to, const char *why) {
    for (int d = from; d < to && d < v->type.rank; d++) {
        int g = v->type.shard[d];
        if (g < 0) continue;
        cg_fail(c, "dim %d of %%%s is sharded by @%s, but %s must be whole on every rank", d, v->name,
                c->m->groups[g].name, why);
        return false;
    }
    return true;
}

static bool cg_rank(cg_op_ctx *c, const ir_value *v, int want) {
    if (v->type.rank == want) return true;
    cg_fail(c, "%%%s has rank %d; the runtime call expects rank %d", v->name, v->type.rank, want);
    return false;
}

/* ---- argument emission ----------------------------------------------------------- */

static void cg_call(cg_op_ctx *c, const char *fn) { sup_buf_printf(c->b, "    %s(rt", fn); }
static void cg_end(cg_op_ctx *c) { sup_buf_puts(c->b, ");\n"); }
static void cg_int(cg_op_ctx *c, int64_t v) { sup_buf_printf(c->b, ", %" PRId64, v); }
static void cg_str(cg_op_ctx *c, const char *s) { sup_buf_printf(c->b, ", %s", s); }

static void cg_dbl(cg_op_ctx *c, double v) {
    char num[48];
    sup_buf_printf(c->b, ", %s", cg_fmt_double(v, num, sizeof num));
}

/* A value index (collectives, optimizer, free). */
static void cg_val(cg_op_ctx *c, const ir_value *v) {
    sup_buf_printf(c->b, ", %s", c->n->value[v - c->m->values]);
}

/* A value's buffer; the runtime keeps every float value in fp32 and every
 * integer value in int32, so the accessor follows the IR dtype. */
static void cg_buf(cg_op_ctx *c, const ir_value *v, bool want_int) {
    bool is_int = v->type.dtype == IR_I32;
    if (is_int != want_int)
        cg_fail(c, "%%%s is %s, but the kernel reads it as %s", v->name, ir_dtype_name(v->type.dtype),
                want_int ? "i32" : "a float (f32 on the CPU)");
    sup_buf_printf(c->b, ", rt_%s(rt, %s)", want_int ? "i32" : "f32", c->n->value[v - c->m->values]);
}
static void cg_f32(cg_op_ctx *c, const ir_value *v) { cg_buf(c, v, false); }
static void cg_i32(cg_op_ctx *c, const ir_value *v) { cg_buf(c, v, true); }

/* A float attribute (int accepted), else the module config (with the
 * language's default). */
static double cg_attr_or_config(const cg_op_ctx *c, const char *attr, const char *key) {
    const ir_attr *a = ir_attr_get(c->op, attr);
    if (a && a->kind == IR_A_FLOAT) return a->f;
    if (a && a->kind == IR_A_INT) return (double)a->i;
    return cg_config_double(c->m, key);
}

/* ---- compute ops -------------------------------------------------------------------- */

/* embedding(tok, w) -> y ; embedding_bwd(dy, tok) -> dw.  N = local tokens. */
static void cg_embedding(cg_op_ctx *c) {
    bool bwd = c->op->code == IR_EMBEDDING_BWD;
    const ir_value *tok = cg_in(c, bwd ? 1 : 0);
    const ir_value *w = bwd ? cg_out(c, 0) : cg_in(c, 1);
    if (!cg_rank(c, w, 2) || !cg_whole(c, w, 0, 2, "the embedding table")) return;
    cg_call(c, bwd ? "rt_embedding_bwd" : "rt_embedding");
    if (bwd) {
        cg_f32(c, w);
        cg_f32(c, cg_in(c, 0));
        cg_i32(c, tok);
    } else {
        cg_f32(c, cg_out(c, 0));
        cg_i32(c, tok);
        cg_f32(c, w);
    }
    cg_int(c, cg_lprod(c, tok, 0, tok->type.rank));
    cg_int(c, w->type.dims[0]);
    cg_int(c, w->type.dims[1]);
    cg_end(c);
}

/* The pointer arguments shared by rmsnorm and linear: y, x, w forward;
 * dx, dw, dy, x, w backward (the runtime's argument order). */
static void cg_args_x_w(cg_op_ctx *c, bool bwd, const ir_value *x, const ir_value *w) {
    cg_f32(c, cg_out(c, 0));
    if (bwd) {
        cg_f32(c, cg_out(c, 1));
        cg_f32(c, cg_in(c, 0));
    }
    cg_f32(c, x);
    cg_f32(c, w);
}

/* rmsnorm(x, w) -> y ; rmsnorm_bwd(dy, x, w) -> dx, dw.  D = x's last dim. */
static void cg_rmsnorm(cg_op_ctx *c) {
    bool bwd = c->op->code == IR_RMSNORM_BWD;
    const ir_value *x = cg_in(c, bwd ? 1 : 0), *w = cg_in(c, bwd ? 2 : 1);
    int r = x->type.rank;
    if (r < 1) { /* never silently drop the op */
        cg_fail(c, "%%%s is a scalar; rmsnorm normalises a last dim", x->name);
        return;
    }
    if (!cg_whole(c, x, r - 1, r, "the normalised dim") || !cg_whole(c, w, 0, 1, "the norm weight")) return;
    cg_call(c, bwd ? "rt_rmsnorm_bwd" : "rt_rmsnorm");
    cg_args_x_w(c, bwd, x, w);
    cg_int(c, cg_lprod(c, x, 0, r - 1));
    cg_int(c, x->type.dims[r - 1]);
    cg_dbl(c, cg_attr_or_config(c, "eps", "norm_eps"));
    cg_end(c);
}

/* linear(x, w) -> y ; linear_bwd(dy, x, w) -> dx, dw ; attr contract = c:
 * N = leading rank-c local dims of x, I = x's trailing c dims, O = w's dims
 * after the first c. */
static void cg_linear(cg_op_ctx *c) {
    bool bwd = c->op->code == IR_LINEAR_BWD;
    const ir_value *x = cg_in(c, bwd ? 1 : 0), *w = cg_in(c, bwd ? 2 : 1);
    int64_t k = ir_attr_int(c->op, "contract", 1);
    int r = x->type.rank;
    if (k < 1 || k > r || k > w->type.rank) {
        cg_fail(c, "contract = %" PRId64 " does not fit %%%s (rank %d) and %%%s (rank %d)", k, x->name, r,
                w->name, w->type.rank);
        return;
    }
    if (!cg_whole(c, x, r - (int)k, r, "a contracted dim") || !cg_whole(c, w, 0, w->type.rank, "the weight"))
        return;
    int64_t N = cg_lprod(c, x, 0, r - (int)k), I = cg_lprod(c, x, r - (int)k, r);
    int64_t O = cg_lprod(c, w, (int)k, w->type.rank);
    const ir_value *y = bwd ? cg_in(c, 0) : cg_out(c, 0);
    if (ir_type_local_elems(c->m, &y->type) != N * O) {
        cg_fail(c, "%%%s holds %" PRId64 " local elements, not N*O = %" PRId64 "*%" PRId64, y->name,
                ir_type_local_elems(c->m, &y->type), N, O);
        return;
    }
    cg_call(c, bwd ? "rt_linear_bwd" : "rt_linear");
    cg_args_x_w(c, bwd, x, w);
    cg_int(c, N);
    cg_int(c, I);
    cg_int(c, O);
    cg_end(c);
}

/* rope(x) -> y ; rope_bwd(dy) -> dx.  x [b,s,H,Dh] local; a rank holding a
 * slice of the sequence starts at its position in the sharding set times
 * the local sequence length. */
static void cg_rope(cg_op_ctx *c) {
    const ir_value *x = cg_in(c, 0);
    if (!cg_rank(c, x, 4) || !cg_whole(c, x, 3, 4, "the head dim")) return;
    int64_t b = cg_local_dim(c->m, &x->type, 0), s = cg_local_dim(c->m, &x->type, 1);
    int64_t H = cg_local_dim(c->m, &x->type, 2), Dh = x->type.dims[3];
    if (Dh % 2) {
        cg_fail(c, "head dim %" PRId64 " of %%%s is odd; rope rotates pairs (i, i + Dh/2)", Dh, x->name);
        return;
    }
    cg_call(c, c->op->code == IR_ROPE_BWD ? "rt_rope_bwd" : "rt_rope");
    cg_f32(c, cg_out(c, 0));
    cg_f32(c, x);
    cg_row0(c, x);
    cg_int(c, b);
    cg_int(c, s);
    cg_int(c, H);
    cg_int(c, Dh);
    if (x->type.shard[1] >= 0)
        sup_buf_printf(c->b, ", rt_group_pos(rt, %s) * %" PRId64, cg_group_of(c, x->type.shard[1]), s);
    else
        cg_int(c, 0);
    cg_dbl(c, cg_attr_or_config(c, "theta", "rope_theta"));
    cg_end(c);
}

/* attention(q, k, v) -> o ; attention_bwd(do, q, k, v, o) -> dq, dk, dv.
 * The kernel is causal over the whole sequence: dim 1 must be whole. */
static void cg_attention(cg_op_ctx *c) {
    bool bwd = c->op->code == IR_ATTENTION_BWD;
    const ir_value *q = cg_in(c, bwd ? 1 : 0), *k = cg_in(c, bwd ? 2 : 1);
    if (ir_attr_int(c->op, "causal", 1) != 1) {
        cg_fail(c, "only causal attention (causal = 1) has a runtime kernel");
        return;
    }
    if (!cg_rank(c, q, 4) || !cg_rank(c, k, 4)) return;
    if (!cg_whole(c, q, 1, 2, "the attention sequence") || !cg_whole(c, q, 3, 4, "the head dim")) return;
    int64_t H = cg_local_dim(c->m, &q->type, 2), Hkv = cg_local_dim(c->m, &k->type, 2);
    /* Uneven head split: the local head counts differ by rank, so the
     * program asks the runtime; the units keep the q/kv ratio uq/uk. */
    bool uneven = q->type.unit[2] != 0 || k->type.unit[2] != 0;
    if (uneven && (q->type.unit[2] < 1 || k->type.unit[2] < 1 || q->type.unit[2] % k->type.unit[2])) {
        cg_fail(c, "uneven head units %" PRId64 " (q) and %" PRId64 " (kv) do not group q heads by kv head",
                q->type.unit[2], k->type.unit[2]);
        return;
    }
    if (!uneven && H % Hkv) {
        cg_fail(c, "%" PRId64 " local q heads do not share %" PRId64 " local kv heads evenly", H, Hkv);
        return;
    }
    cg_call(c, bwd ? "rt_attention_bwd" : "rt_attention");
    for (int o = 0; o < c->op->nout; o++) cg_f32(c, cg_out(c, o));
    for (int i = 0; i < c->op->nin; i++) cg_f32(c, cg_in(c, i));
    cg_row0(c, q);
    cg_int(c, cg_local_dim(c->m, &q->type, 0));
    cg_int(c, q->type.dims[1]);
    if (uneven) {
        sup_buf_printf(c->b, ", rt_local_dim(rt, %s, 2)", c->n->value[q - c->m->values]);
        sup_buf_printf(c->b, ", rt_local_dim(rt, %s, 2)", c->n->value[k - c->m->values]);
    } else {
        cg_int(c, H);
        cg_int(c, Hkv);
    }
    cg_int(c, q->type.dims[3]);
    cg_end(c);
}

/* ring_attention(q, k, v) -> o, lse ; ring_attention_bwd(do, q, k, v, o,
 * lse) -> dq, dk, dv.  Local sizes: this rank's slice of the sequence. */
static void cg_ring_attention(cg_op_ctx *c) {
    bool bwd = c->op->code == IR_RING_ATTENTION_BWD;
    const ir_value *q = cg_in(c, bwd ? 1 : 0), *k = cg_in(c, bwd ? 2 : 1);
    int g = ir_op_group(c->op);
    if (g < 0 || !cg_rank(c, q, 4) || !cg_rank(c, k, 4) || !cg_whole(c, q, 3, 4, "the head dim")) return;
    if (q->type.shard[1] != g) {
        cg_fail(c, "the sequence of %%%s must be sharded by the ring group", q->name);
        return;
    }
    int64_t H = cg_local_dim(c->m, &q->type, 2), Hkv = cg_local_dim(c->m, &k->type, 2);
    if (Hkv < 1 || H % Hkv) {
        cg_fail(c, "%" PRId64 " local q heads do not share %" PRId64 " local kv heads evenly", H, Hkv);
        return;
    }
    cg_call(c, bwd ? "rt_ring_attention_bwd" : "rt_ring_attention");
    sup_buf_printf(c->b, ", %s", cg_group_of(c, g));
    for (int o = 0; o < c->op->nout; o++) cg_f32(c, cg_out(c, o));
    for (int i = 0; i < c->op->nin; i++) cg_f32(c, cg_in(c, i));
    cg_row0(c, q);
    cg_int(c, cg_local_dim(c->m, &q->type, 0));
    cg_int(c, cg_local_dim(c->m, &q->type, 1));
    cg_int(c, H);
    cg_int(c, Hkv);
    cg_int(c, q->type.dims[3]);
    cg_end(c);
}

/* accumulate acc, g: acc += g, an in-place add (elementwise: y may be a). */
static void cg_accumulate(cg_op_ctx *c) {
    cg_call(c, "rt_add");
    cg_f32(c, cg_in(c, 0));
    cg_f32(c, cg_in(c, 0));
    cg_f32(c, cg_in(c, 1));
    cg_int(c, ir_type_local_elems(c->m, &cg_in(c, 0)->type));
    cg_end(c);
}

/* add, swiglu, swiglu_bwd: n = local elements (operands share one type). */
static void cg_elementwise(cg_op_ctx *c) {
    const char *fn = c->op->code == IR_ADD ? "rt_add" : c->op->code == IR_SWIGLU ? "rt_swiglu" : "rt_swiglu_bwd";
    cg_call(c, fn);
    for (int o = 0; o < c->op->nout; o++) cg_f32(c, cg_out(c, o));
    for (int i = 0; i < c->op->nin; i++) cg_f32(c, cg_in(c, i));
    cg_int(c, ir_type_local_elems(c->m, &cg_out(c, 0)->type));
    cg_end(c);
}

/* 1/(A*B*S): the backward seeds the gradient of the mean loss over the
 * optimizer step's A micro-steps (config accum, default 1).  With packed
 * documents the number of counted targets changes by step (the last token
 * of each document has none): the runtime's count over the micro-steps. */
static void cg_loss_scale(cg_op_ctx *c) {
    if (cg_config_int(c->m, "documents")) {
        sup_buf_puts(c->b, ", rt_loss_scale(rt)");
        return;
    }
    int64_t B = cg_config_int(c->m, "micro_batch"), S = cg_config_int(c->m, "seq_len");
    if (B <= 0 || S <= 0) {
        cg_fail(c, "the loss scale 1/(micro_batch*seq_len) needs config micro_batch and seq_len (or an "
                   "input %%tokens [B,S])");
        return;
    }
    int64_t A = ir_config_int(c->m, "accum", 1);
    sup_buf_printf(c->b, ", 1.0 / %" PRId64, (A > 1 ? A : 1) * B * S);
}

/* lm_head_loss(x, w, tgt) -> loss ; lm_head_loss_bwd(x, w, tgt) -> dx, dw. */
static void cg_lm_head(cg_op_ctx *c) {
    bool bwd = c->op->code == IR_LM_HEAD_LOSS_BWD;
    const ir_value *x = cg_in(c, 0), *w = cg_in(c, 1), *tgt = cg_in(c, 2);
    if (!cg_rank(c, w, 2) || !cg_whole(c, w, 0, 2, "the head weight")) return;
    int64_t N = cg_lprod(c, tgt, 0, tgt->type.rank);
    if (ir_type_local_elems(c->m, &x->type) != N * w->type.dims[1]) {
        cg_fail(c, "%%%s does not hold one row of %" PRId64 " per local target", x->name, w->type.dims[1]);
        return;
    }
    cg_call(c, bwd ? "rt_lm_head_loss_bwd" : "rt_lm_head_loss");
    for (int o = 0; o < c->op->nout; o++) cg_f32(c, cg_out(c, o));
    cg_f32(c, x);
    cg_f32(c, w);
    cg_i32(c, tgt);
    cg_int(c, N);
    cg_int(c, w->type.dims[0]);
    cg_int(c, w->type.dims[1]);
    if (bwd) cg_loss_scale(c);
    cg_end(c);
}

/* mlp(x, wg, wu, wd) -> y ; mlp_bwd(dy, x, wg, wu, wd) -> dx, dwg, dwu, dwd:
 * N = local rows of x (all dims but the last), D its last dim, F = dim 1 of
 * wg, chunk = attr chunk (0: one chunk). */
static void cg_mlp(cg_op_ctx *c) {
    bool bwd = c->op->code == IR_MLP_BWD;
    const ir_value *x = cg_in(c, bwd), *wg = cg_in(c, bwd + 1);
    for (int k = 1; k <= 3; k++)
        if (!cg_rank(c, cg_in(c, bwd + k), 2) || !cg_whole(c, cg_in(c, bwd + k), 0, 2, "an MLP weight")) return;
    int r = x->type.rank;
    if (!cg_whole(c, x, r - 1, r, "the hidden dim")) return;
    cg_call(c, bwd ? "rt_mlp_bwd" : "rt_mlp");
    for (int o = 0; o < c->op->nout; o++) cg_f32(c, cg_out(c, o));
    for (int i = 0; i < c->op->nin; i++) cg_f32(c, cg_in(c, i));
    cg_int(c, cg_lprod(c, x, 0, r - 1));
    cg_int(c, x->type.dims[r - 1]);
    cg_int(c, wg->type.dims[1]);
    cg_int(c, ir_attr_int(c->op, "chunk", 0));
    cg_end(c);
}

/* bias_add(x, b) -> y ; bias_add_bwd(dy) -> db: M = the bias's elements
 * (whole), N = the local elements of x (dy) / M. */
static void cg_bias_add(cg_op_ctx *c) {
    bool bwd = c->op->code == IR_BIAS_ADD_BWD;
    const ir_value *x = cg_in(c, 0), *b = bwd ? cg_out(c, 0) : cg_in(c, 1);
    int r = x->type.rank, rb = b->type.rank;
    if (rb < 1 || rb > r || !cg_whole(c, b, 0, rb, "a bias") || !cg_whole(c, x, r - rb, r, "the biased dims")) return;
    int64_t M = cg_lprod(c, b, 0, rb);
    cg_call(c, bwd ? "rt_bias_add_bwd" : "rt_bias_add");
    cg_f32(c, cg_out(c, 0));
    cg_f32(c, x);
    if (!bwd) cg_f32(c, b);
    cg_int(c, cg_lprod(c, x, 0, r - rb));
    cg_int(c, M);
    cg_end(c);
}

/* ---- optimizer, collectives, memory ---------------------------------------------- */

static void cg_adamw(cg_op_ctx *c) {
    cg_call(c, "rt_adamw");
    cg_val(c, cg_in(c, 0));
    cg_val(c, cg_in(c, 1));
    cg_end(c);
}

/* The group attr as a G_ constant; false (reported) when absent. */
static bool cg_group_arg(cg_op_ctx *c) {
    int g = ir_op_group(c->op);
    if (g < 0 || g >= c->m->ngroups) {
        cg_fail(c, "no 'group = @G' attribute naming the process group");
        return false;
    }
    cg_str(c, c->n->group[g]);
    return true;
}

static bool cg_int_attr(cg_op_ctx *c, const char *key, int64_t *v) {
    const ir_attr *a = ir_attr_get(c->op, key);
    if (a && a->kind == IR_A_INT) { *v = a->i; return true; }
    cg_fail(c, "needs an integer '%s' attribute", key);
    return false;
}

static void cg_value_list(cg_op_ctx *c, const int *vals, int n) {
    sup_buf_puts(c->b, ", (const int[]){");
    for (int i = 0; i < n; i++) sup_buf_printf(c->b, "%s%s", i ? ", " : "", c->n->value[vals[i]]);
    sup_buf_puts(c->b, "}");
}

static void cg_all_to_all(cg_op_ctx *c) {
    int64_t split, concat;
    cg_call(c, "rt_all_to_all");
    if (!cg_group_arg(c) || !cg_int_attr(c, "split", &split) || !cg_int_attr(c, "concat", &concat)) return;
    cg_int(c, split);
    cg_int(c, concat);
    cg_int(c, ir_attr_int(c->op, "fanout", 1));
    cg_int(c, ir_attr_int(c->op, "fanin", 1));
    cg_int(c, c->op->nin);
    cg_value_list(c, c->op->in, c->op->nin);
    cg_value_list(c, c->op->out, c->op->nout);
    cg_end(c);
}

/* all_gather / reduce_scatter (attr dim), all_reduce. */
static void cg_collective(cg_op_ctx *c) {
    ir_opcode code = c->op->code;
    cg_call(c, code == IR_ALL_GATHER ? "rt_all_gather" : code == IR_REDUCE_SCATTER ? "rt_reduce_scatter"
                                                                                   : "rt_all_reduce");
    if (!cg_group_arg(c)) return;
    int64_t dim;
    if (code != IR_ALL_REDUCE) {
        if (!cg_int_attr(c, "dim", &dim)) return;
        cg_int(c, dim);
    }
    cg_val(c, cg_in(c, 0));
    cg_val(c, cg_out(c, 0));
    cg_end(c);
}

static void cg_p2p(cg_op_ctx *c) {
    bool send = c->op->code == IR_SEND;
    int64_t peer;
    cg_call(c, send ? "rt_send" : "rt_recv");
    if (!cg_group_arg(c) || !cg_int_attr(c, "peer", &peer)) return;
    cg_int(c, peer);
    cg_val(c, send ? cg_in(c, 0) : cg_out(c, 0));
    cg_end(c);
}

static void cg_free_op(cg_op_ctx *c) {
    cg_call(c, "rt_free");
    cg_val(c, cg_in(c, 0));
    cg_end(c);
}

static void cg_op(cg_op_ctx *c) {
    switch (c->op->code) {
    case IR_EMBEDDING: case IR_EMBEDDING_BWD: cg_embedding(c); break;
    case IR_RMSNORM: case IR_RMSNORM_BWD: cg_rmsnorm(c); break;
    case IR_LINEAR: case IR_LINEAR_BWD: cg_linear(c); break;
    case IR_ROPE: case IR_ROPE_BWD: cg_rope(c); break;
    case IR_ATTENTION: case IR_ATTENTION_BWD: cg_attention(c); break;
    case IR_RING_ATTENTION: case IR_RING_ATTENTION_BWD: cg_ring_attention(c); break;
    case IR_ADD: case IR_SWIGLU: case IR_SWIGLU_BWD: cg_elementwise(c); break;
    case IR_MLP: case IR_MLP_BWD: cg_mlp(c); break;
    case IR_BIAS_ADD: case IR_BIAS_ADD_BWD: cg_bias_add(c); break;
    case IR_LM_HEAD_LOSS: case IR_LM_HEAD_LOSS_BWD: cg_lm_head(c); break;
    case IR_ADAMW: cg_adamw(c); break;
    case IR_ACCUMULATE: cg_accumulate(c); break;
    case IR_ALL_TO_ALL: cg_all_to_all(c); break;
    case IR_ALL_GATHER: case IR_REDUCE_SCATTER: case IR_ALL_REDUCE: cg_collective(c); break;
    case IR_SEND: case IR_RECV: cg_p2p(c); break;
    case IR_FREE: cg_free_op(c); break;
    default: cg_fail(c, "the CPU runtime has no call for this op"); break;
    }
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
 * schedule navigable. */
static void cg_banner(sup_buf *b, const ir_op *op, int *layer, const char **phase) {
    int l = ir_op_layer(op);
    const char *p = ir_op_phase(op);
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
 * releases its operand itself. */
static void cg_frees(cg_op_ctx *c, const int *start, const int *end) {
    if (c->op->code == IR_FREE) return;
    int seen[IR_MAX_IN + IR_MAX_OUT], ns = 0;
    for (int k = 0; k < c->op->nin + c->op->nout; k++) {
        int v = k < c->op->nin ? c->op->in[k] : c->op->out[k - c->op->nin];
        bool dup = false;
        for (int j = 0; j < ns; j++) dup |= seen[j] == v;
        if (dup || start[v] < 0 || end[v] != c->index) continue;
        seen[ns++] = v;
        sup_buf_printf(c->b, "    rt_free(rt, %s);\n", c->n->value[v]);
    }
}

/* One C function: the ops with keep[i] (all when keep is NULL) in schedule
 * order, each under its IR line, with the frees of the step's live ranges. */
static bool cg_emit_fn(const cg_names *n, sup_buf *b, const char *fn, const bool *keep) {
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
        if (keep && !keep[i]) continue;
        cg_op_ctx c = {n, m, i, &m->ops[i], b, true};
        cg_banner(b, c.op, &layer, &phase);
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

bool cg_emit_step(const cg_names *n, sup_buf *b) {
    const ir_module *m = n->m;
    int64_t accum = ir_config_int(m, "accum", 1);
    if (accum <= 1) {
        sup_buf_puts(b, "/* One training step: one runtime call per IR op, in schedule order. */\n");
        return cg_emit_fn(n, b, "step", NULL);
    }
    /* Gradient accumulation: the runtime runs step() once per micro-step
     * (its inputs filled with that micro-batch, the accumulators zeroed
     * before the first), then apply_step() once. */
    bool *micro = sup_xcalloc((size_t)m->nops + 1, sizeof(bool)), *apply = sup_xcalloc((size_t)m->nops + 1, sizeof(bool));
    for (int i = 0; i < m->nops; i++) apply[i] = !(micro[i] = strcmp(ir_op_phase(&m->ops[i]), "opt") != 0);
    sup_buf_printf(b, "/* One micro-step of %lld per optimizer step: the forward and backward, the gradients\n"
                      " * accumulated (the ops of phases fwd and bwd, in schedule order). */\n", (long long)accum);
    bool ok = cg_emit_fn(n, b, "step", micro);
    sup_buf_puts(b, "\n/* The apply phase, once per optimizer step after the micro-steps: the accumulated\n"
                    " * gradients reduced and the update (the ops of phase opt). */\n");
    ok &= cg_emit_fn(n, b, "apply_step", apply);
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
    int nkept = 0;
    for (int i = 0; i < m->nops; i++) nkept += keep[i];
    sup_buf_printf(b, "/* The forward-only program (validation), derived from step: its %d forward op(s) of %d,\n"
                      " * no backward, optimizer or gradient reduction; the step's buffers. */\n", nkept, m->nops);
    bool ok = cg_emit_fn(n, b, "eval_step", keep);
    free(keep);
    return ok;
}
