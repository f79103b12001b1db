/* ir_verify_ops.c — per-op type and layout rules (rule 5 of ir/README.md).
 *
 * Shapes are global; a layout is the group sharding each dim (or whole).
 * Each check reports what it found and what the op needs, naming the value
 * and the dim, and the caller keeps going so every violation is listed. */
#include "ir_verify.h"

#include <string.h>

const ir_value *ir_vv(ir_vctx *c, int idx) { return &c->m->values[idx]; }

const char *ir_vgname(ir_vctx *c, int g)
{
    return g >= 0 && g < c->m->ngroups ? c->m->groups[g].name : "?";
}

/* "input %x" or "result %y" for messages. */
const char *ir_vdesc(ir_vctx *c, const ir_value *v, char *buf, size_t n)
{
    snprintf(buf, n, "%s %%%s", v->kind == IR_V_RESULT && v->def == c->op ? "result" : "input", v->name);
    return buf;
}

const char *ir_vtstr(ir_vctx *c, const ir_value *v, char *buf)
{
    return ir_type_str(c->m, &v->type, buf, IR_TYPE_STR_MAX);
}

/* "sharded by @sp" or "whole" */
const char *ir_vshard_str(ir_vctx *c, int g, char *buf, size_t n)
{
    if (g == -1)
        snprintf(buf, n, "whole");
    else
        snprintf(buf, n, "sharded by @%s", ir_vgname(c, g));
    return buf;
}

bool ir_vsame_type(ir_vctx *c, const ir_value *a, const ir_value *b)
{
    if (ir_type_equal(&a->type, &b->type))
        return true;
    char da[96], db[96], ta[IR_TYPE_STR_MAX], tb[IR_TYPE_STR_MAX];
    ir_verr(c, sup_noloc(), "%s has type %s, but must have the type of %s (%s)", ir_vdesc(c, b, db, sizeof db),
            ir_vtstr(c, b, tb), ir_vdesc(c, a, da, sizeof da), ir_vtstr(c, a, ta));
    return false;
}

static bool want_rank(ir_vctx *c, const ir_value *v, int rank, const char *shape)
{
    if (v->type.rank == rank)
        return true;
    char d[96], t[IR_TYPE_STR_MAX];
    ir_verr(c, sup_noloc(), "%s must have rank %d %s, found %s", ir_vdesc(c, v, d, sizeof d), rank, shape, ir_vtstr(c, v, t));
    return false;
}

static bool want_dtype(ir_vctx *c, const ir_value *v, ir_dtype dt)
{
    if (v->type.dtype == dt)
        return true;
    char d[96];
    ir_verr(c, sup_noloc(), "%s must have element type %s, found %s", ir_vdesc(c, v, d, sizeof d), ir_dtype_name(dt),
            ir_dtype_name(v->type.dtype));
    return false;
}

/* v.dims[d] == size, where `what` names the expected size */
bool ir_vwant_dim(ir_vctx *c, const ir_value *v, int d, int64_t size, const char *what)
{
    if (v->type.dims[d] == size)
        return true;
    char ds[96];
    ir_verr(c, sup_noloc(), "%s dim %d has size %lld, but must equal %s (%lld)", ir_vdesc(c, v, ds, sizeof ds), d,
            (long long)v->type.dims[d], what, (long long)size);
    return false;
}

/* v.shard[d] == g, where `why` explains the rule (may be "") */
bool ir_vwant_shard(ir_vctx *c, const ir_value *v, int d, int g, const char *why)
{
    if (v->type.shard[d] == g)
        return true;
    char ds[96], want[80], got[80];
    ir_vshard_str(c, g, want, sizeof want);
    if (g == -1)
        snprintf(want, sizeof want, "whole (unsharded)");
    ir_verr(c, sup_noloc(), "%s dim %d must be %s, but is %s%s", ir_vdesc(c, v, ds, sizeof ds), d, want,
            ir_vshard_str(c, v->type.shard[d], got, sizeof got), why);
    return false;
}

/* dims [from, to) of a and b agree in size and layout */
static void want_same_dims(ir_vctx *c, const ir_value *a, int from, int to, const ir_value *b, const char *why)
{
    char what[160], da[96];
    for (int d = from; d < to; d++) {
        snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, a, da, sizeof da), d);
        ir_vwant_dim(c, b, d, a->type.dims[d], what);
        ir_vwant_shard(c, b, d, a->type.shard[d], why);
    }
}

/* Same rank and sizes, layouts may differ (gradients of params). */
static void want_same_shape(ir_vctx *c, const ir_value *a, const ir_value *b)
{
    if (a->type.rank != b->type.rank) {
        char da[96], db[96], ta[IR_TYPE_STR_MAX], tb[IR_TYPE_STR_MAX];
        ir_verr(c, sup_noloc(), "%s has type %s, but must have the shape of %s (%s)", ir_vdesc(c, b, db, sizeof db),
                ir_vtstr(c, b, tb), ir_vdesc(c, a, da, sizeof da), ir_vtstr(c, a, ta));
        return;
    }
    char what[160], da[96];
    for (int d = 0; d < a->type.rank; d++) {
        snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, a, da, sizeof da), d);
        ir_vwant_dim(c, b, d, a->type.dims[d], what);
    }
}

/* ---- compute ops ------------------------------------------------------------ */

/* add, swiglu, swiglu_bwd, rope, rope_bwd: every operand and result has the
 * type of the first operand. */
static void check_elementwise(ir_vctx *c, const ir_op *op, int rank)
{
    const ir_value *a = ir_vv(c, op->in[0]);
    if (rank >= 0)
        want_rank(c, a, rank, "[B,S,H,Dh]");
    for (int k = 1; k < op->nin; k++)
        ir_vsame_type(c, a, ir_vv(c, op->in[k]));
    for (int k = 0; k < op->nout; k++)
        ir_vsame_type(c, a, ir_vv(c, op->out[k]));
}

/* rmsnorm(x, w): w[D] with D = x's last dim, which must be whole. */
static bool check_rmsnorm_in(ir_vctx *c, const ir_value *x, const ir_value *w)
{
    int r = x->type.rank;
    if (r < 1) {
        char d[96];
        ir_verr(c, sup_noloc(), "%s must have rank at least 1", ir_vdesc(c, x, d, sizeof d));
        return false;
    }
    if (want_rank(c, w, 1, "[D]")) {
        char what[128], d[96];
        snprintf(what, sizeof what, "the last dim of %s", ir_vdesc(c, x, d, sizeof d));
        ir_vwant_dim(c, w, 0, x->type.dims[r - 1], what);
    }
    ir_vwant_shard(c, x, r - 1, -1, " (rmsnorm normalizes over the whole last dim)");
    return true;
}

static void check_rmsnorm(ir_vctx *c, const ir_op *op)
{
    const ir_value *x = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]);
    if (op->code == IR_RMSNORM) {
        check_rmsnorm_in(c, x, w);
        ir_vsame_type(c, x, ir_vv(c, op->out[0]));
        return;
    }
    /* rmsnorm_bwd(dy, x, w) -> (dx, dw) */
    x = ir_vv(c, op->in[1]);
    w = ir_vv(c, op->in[2]);
    check_rmsnorm_in(c, x, w);
    ir_vsame_type(c, x, ir_vv(c, op->in[0]));
    ir_vsame_type(c, x, ir_vv(c, op->out[0]));
    want_same_shape(c, w, ir_vv(c, op->out[1]));
}

/* mlp(x, wg, wu, wd) -> y and mlp_bwd(dy, x, wg, wu, wd) -> (dx, dwg, dwu,
 * dwd): x [..., D] with D whole; wg, wu [D, F]; wd [F, D]; y, dy, dx have
 * x's type; each weight gradient the shape of its weight; attr chunk >= 1
 * when present. */
static void check_mlp(ir_vctx *c, const ir_op *op)
{
    bool bwd = op->code == IR_MLP_BWD;
    const ir_value *x = ir_vv(c, op->in[bwd]);
    const ir_value *w[3] = {ir_vv(c, op->in[bwd + 1]), ir_vv(c, op->in[bwd + 2]), ir_vv(c, op->in[bwd + 3])};
    int r = x->type.rank;
    if (r < 1) {
        char d[96];
        ir_verr(c, sup_noloc(), "%s must have rank at least 1", ir_vdesc(c, x, d, sizeof d));
        return;
    }
    ir_vwant_shard(c, x, r - 1, -1, " (the MLP contracts the whole hidden dim)");
    bool ok = want_rank(c, w[0], 2, "[D,F]") & want_rank(c, w[1], 2, "[D,F]") & want_rank(c, w[2], 2, "[F,D]");
    if (ok) {
        char what[128], d[96];
        snprintf(what, sizeof what, "the last dim of %s", ir_vdesc(c, x, d, sizeof d));
        ir_vwant_dim(c, w[0], 0, x->type.dims[r - 1], what);
        ir_vwant_dim(c, w[2], 1, x->type.dims[r - 1], what);
        want_same_shape(c, w[0], w[1]);
        snprintf(what, sizeof what, "dim 1 of %s", ir_vdesc(c, w[0], d, sizeof d));
        ir_vwant_dim(c, w[2], 0, w[0]->type.dims[1], what);
    }
    const ir_attr *ch = ir_attr_get(op, "chunk");
    if (ch && (ch->kind != IR_A_INT || ch->i < 1))
        ir_verr(c, sup_noloc(), "attribute chunk must be an integer >= 1 (tokens per chunk)");
    ir_vsame_type(c, x, ir_vv(c, op->out[0]));
    if (!bwd)
        return;
    ir_vsame_type(c, x, ir_vv(c, op->in[0]));
    for (int k = 0; k < 3; k++)
        want_same_shape(c, w[k], ir_vv(c, op->out[k + 1]));
}

/* bias_add(x, b) -> y: b's dims are x's trailing dims, whole (the bias is
 * added where every rank holds them); y has x's type.
 * bias_add_bwd(dy) -> db: the same rule between dy and db. */
static void check_bias_add(ir_vctx *c, const ir_op *op)
{
    bool bwd = op->code == IR_BIAS_ADD_BWD;
    const ir_value *x = ir_vv(c, op->in[0]), *y = ir_vv(c, op->out[0]);
    const ir_value *b = bwd ? y : ir_vv(c, op->in[1]);
    int r = x->type.rank, rb = b->type.rank;
    if (rb < 1 || rb > r) {
        char d[96], t[IR_TYPE_STR_MAX];
        ir_verr(c, sup_noloc(), "%s (%s) must have between 1 and %d dims: the trailing dims of the first operand",
                ir_vdesc(c, b, d, sizeof d), ir_vtstr(c, b, t), r);
        return;
    }
    char what[160], d[96];
    for (int k = 0; k < rb; k++) {
        snprintf(what, sizeof what, "dim %d of %s", r - rb + k, ir_vdesc(c, x, d, sizeof d));
        ir_vwant_dim(c, b, k, x->type.dims[r - rb + k], what);
        ir_vwant_shard(c, x, r - rb + k, -1, " (a bias is added over whole trailing dims)");
        ir_vwant_shard(c, b, k, -1, " (a bias is used whole)");
    }
    if (!bwd)
        ir_vsame_type(c, x, y);
}

/* tok i32[B,S] with y/dy [B,S,D] laid out like tok on B and S. */
static bool check_tokens(ir_vctx *c, const ir_value *tok, const ir_value *y)
{
    if (!want_rank(c, tok, 2, "[B,S]") || !want_rank(c, y, 3, "[B,S,D]"))
        return false;
    want_dtype(c, tok, IR_I32);
    want_same_dims(c, tok, 0, 2, y, "");
    return true;
}

static void check_embedding(ir_vctx *c, const ir_op *op)
{
    if (op->code == IR_EMBEDDING) {
        const ir_value *tok = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]), *y = ir_vv(c, op->out[0]);
        if (!check_tokens(c, tok, y) || !want_rank(c, w, 2, "[V,D]"))
            return;
        char what[128], d[96];
        snprintf(what, sizeof what, "dim 1 of %s", ir_vdesc(c, w, d, sizeof d));
        ir_vwant_dim(c, y, 2, w->type.dims[1], what);
        ir_vwant_shard(c, y, 2, -1, "");
        return;
    }
    /* embedding_bwd(dy, tok) -> dw[V,D] */
    const ir_value *dy = ir_vv(c, op->in[0]), *tok = ir_vv(c, op->in[1]), *dw = ir_vv(c, op->out[0]);
    if (!check_tokens(c, tok, dy) || !want_rank(c, dw, 2, "[V,D]"))
        return;
    char what[128], d[96];
    snprintf(what, sizeof what, "dim 2 of %s", ir_vdesc(c, dy, d, sizeof d));
    ir_vwant_dim(c, dw, 1, dy->type.dims[2], what);
}

/* linear(x, w) -> y with `contract` trailing dims of x against leading dims of w. */
static void check_linear_fwd(ir_vctx *c, const ir_op *op, const ir_value *x, const ir_value *w, const ir_value *y)
{
    int64_t cn = ir_attr_int(op, "contract", 1);
    int r = x->type.rank, rw = w->type.rank;
    if (cn < 1 || cn > r || cn > rw) {
        ir_verr(c, sup_noloc(), "contract = %lld is outside 1..min(rank of %%%s, rank of %%%s) = %d", (long long)cn,
                x->name, w->name, r < rw ? r : rw);
        return;
    }
    int lead = r - (int)cn, trail = rw - (int)cn;
    char what[160], d[96];
    for (int j = 0; j < cn; j++) {
        snprintf(what, sizeof what, "%s dim %d (contracted)", ir_vdesc(c, x, d, sizeof d), lead + j);
        ir_vwant_dim(c, w, j, x->type.dims[lead + j], what);
        ir_vwant_shard(c, x, lead + j, -1, " (contracted dims must be whole)");
    }
    if (y->type.rank != lead + trail) {
        char ty[IR_TYPE_STR_MAX];
        ir_verr(c, sup_noloc(), "%s must have rank %d (%d leading dims of %%%s and %d trailing dims of %%%s), found %s",
                ir_vdesc(c, y, d, sizeof d), lead + trail, lead, x->name, trail, w->name, ir_vtstr(c, y, ty));
        return;
    }
    want_same_dims(c, x, 0, lead, y, "");
    for (int j = 0; j < trail; j++) {
        snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, w, d, sizeof d), (int)cn + j);
        ir_vwant_dim(c, y, lead + j, w->type.dims[cn + j], what);
        ir_vwant_shard(c, y, lead + j, -1, "");
    }
}

static void check_linear(ir_vctx *c, const ir_op *op)
{
    if (op->code == IR_LINEAR) {
        check_linear_fwd(c, op, ir_vv(c, op->in[0]), ir_vv(c, op->in[1]), ir_vv(c, op->out[0]));
        return;
    }
    /* linear_bwd(dy, x, w) -> (dx, dw) */
    const ir_value *x = ir_vv(c, op->in[1]), *w = ir_vv(c, op->in[2]);
    check_linear_fwd(c, op, x, w, ir_vv(c, op->in[0]));
    const ir_value *dx = ir_vv(c, op->out[0]);
    want_same_shape(c, x, dx);
    if (dx->type.rank == x->type.rank)
        want_same_dims(c, x, 0, x->type.rank, dx, "");
    want_same_shape(c, w, ir_vv(c, op->out[1]));
}

/* q [B,S,H,Dh], k and v [B,S,Hk,Dh] alike: rank 4, dims 0, 1, 3 equal and
 * H a multiple of Hk (attention and ring_attention).  False when a rank is
 * wrong (reported). */
static bool check_qkv_shapes(ir_vctx *c, const ir_value *q, const ir_value *k, const ir_value *v)
{
    if (!want_rank(c, q, 4, "[B,S,H,Dh]") || !want_rank(c, k, 4, "[B,S,Hk,Dh]"))
        return false;
    ir_vsame_type(c, k, v);
    char what[128], d[96];
    static const int same_dims[] = {0, 1, 3};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, q, d, sizeof d), same_dims[i]);
        ir_vwant_dim(c, k, same_dims[i], q->type.dims[same_dims[i]], what);
    }
    if (k->type.dims[2] > 0 && q->type.dims[2] % k->type.dims[2])
        ir_verr(c, sup_noloc(), "%%%s has %lld heads, not a multiple of the %lld heads of %%%s", q->name,
                (long long)q->type.dims[2], (long long)k->type.dims[2], k->name);
    return true;
}

/* attention(q, k, v): [B,S,H,Dh] / [B,S,Hk,Dh], whole sequence, H % Hk == 0. */
static void check_attention_in(ir_vctx *c, const ir_value *q, const ir_value *k, const ir_value *v)
{
    if (!check_qkv_shapes(c, q, k, v))
        return;
    const char *why = " (attention needs the whole sequence: an all_to_all must trade the sequence shard for "
                      "a head shard first)";
    ir_vwant_shard(c, q, 1, -1, why);
    ir_vwant_shard(c, k, 1, -1, why);
    if (v->type.rank == 4 && v != k) /* k == v in tests and fused kv: report once */
        ir_vwant_shard(c, v, 1, -1, why);
    ir_vwant_shard(c, k, 0, q->type.shard[0], " (q and k must split the batch alike)");
    ir_vwant_shard(c, k, 2, q->type.shard[2], " (q and k must split the heads alike)");
    /* Uneven head splits: q's unit spans exactly the q heads of k's unit, so
     * every rank's q heads read only its own kv heads. */
    int64_t uq = q->type.unit[2], uk = k->type.unit[2];
    if ((uq != 0) != (uk != 0))
        ir_verr(c, sup_noloc(), "%%%s and %%%s must both split the heads evenly or both unevenly (units %lld and %lld)",
                q->name, k->name, (long long)uq, (long long)uk);
    else if (uq != 0 && uq * k->type.dims[2] != uk * q->type.dims[2])
        ir_verr(c, sup_noloc(), "%%%s splits its %lld heads in units of %lld, but %%%s splits its %lld heads in units "
                "of %lld: the units must hold matching q and kv heads (unit ratio = head ratio)", q->name,
                (long long)q->type.dims[2], (long long)uq, k->name, (long long)k->type.dims[2], (long long)uk);
}

static void check_attention(ir_vctx *c, const ir_op *op)
{
    if (op->code == IR_ATTENTION) {
        const ir_value *q = ir_vv(c, op->in[0]);
        check_attention_in(c, q, ir_vv(c, op->in[1]), ir_vv(c, op->in[2]));
        ir_vsame_type(c, q, ir_vv(c, op->out[0]));
        return;
    }
    /* attention_bwd(do, q, k, v, o) -> (dq, dk, dv) */
    const ir_value *q = ir_vv(c, op->in[1]), *k = ir_vv(c, op->in[2]), *v = ir_vv(c, op->in[3]);
    check_attention_in(c, q, k, v);
    ir_vsame_type(c, q, ir_vv(c, op->in[0]));
    ir_vsame_type(c, q, ir_vv(c, op->in[4]));
    ir_vsame_type(c, q, ir_vv(c, op->out[0]));
    ir_vsame_type(c, k, ir_vv(c, op->out[1]));
    ir_vsame_type(c, v, ir_vv(c, op->out[2]));
}

/* ring_attention(q, k, v) -> (o, lse): attention's shapes, but the sequence
 * dim of every operand is sharded by the op's group (the ring), and the
 * heads split evenly. */
static bool check_ring_in(ir_vctx *c, const ir_op *op, const ir_value *q, const ir_value *k, const ir_value *v)
{
    int g = ir_op_group(op);
    if (g < 0 || g >= c->m->ngroups) {
        ir_verr(c, sup_noloc(), "needs a 'group = @G' attribute naming the ring");
        return false;
    }
    if (!check_qkv_shapes(c, q, k, v))
        return false;
    const char *why = " (ring attention: each rank holds its slice of the sequence)";
    ir_vwant_shard(c, q, 1, g, why);
    ir_vwant_shard(c, k, 1, g, why);
    ir_vwant_shard(c, k, 0, q->type.shard[0], " (q and k must split the batch alike)");
    ir_vwant_shard(c, k, 2, q->type.shard[2], " (q and k must split the heads alike)");
    if (q->type.unit[2] || k->type.unit[2])
        ir_verr(c, sup_noloc(), "ring attention needs an even head split (%%%s, %%%s)", q->name, k->name);
    return true;
}

/* lse f32 [B,S,H], laid out like q's first three dims. */
static void check_lse(ir_vctx *c, const ir_value *q, const ir_value *lse)
{
    if (!want_rank(c, lse, 3, "[B,S,H]"))
        return;
    want_dtype(c, lse, IR_F32);
    char what[128], d[96];
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, q, d, sizeof d), i);
        ir_vwant_dim(c, lse, i, q->type.dims[i], what);
        ir_vwant_shard(c, lse, i, q->type.shard[i], " (lse is laid out like q)");
    }
}

static void check_ring_attention(ir_vctx *c, const ir_op *op)
{
    bool bwd = op->code == IR_RING_ATTENTION_BWD;
    const ir_value *q = ir_vv(c, op->in[bwd]), *k = ir_vv(c, op->in[bwd + 1]), *v = ir_vv(c, op->in[bwd + 2]);
    if (!check_ring_in(c, op, q, k, v))
        return;
    if (!bwd) {
        ir_vsame_type(c, q, ir_vv(c, op->out[0]));
        check_lse(c, q, ir_vv(c, op->out[1]));
        return;
    }
    /* ring_attention_bwd(do, q, k, v, o, lse) -> (dq, dk, dv) */
    ir_vsame_type(c, q, ir_vv(c, op->in[0]));
    ir_vsame_type(c, q, ir_vv(c, op->in[4]));
    check_lse(c, q, ir_vv(c, op->in[5]));
    ir_vsame_type(c, q, ir_vv(c, op->out[0]));
    ir_vsame_type(c, k, ir_vv(c, op->out[1]));
    ir_vsame_type(c, v, ir_vv(c, op->out[2]));
}

void ir_verify_seq_order(ir_vctx *c)
{
    const ir_module *m = c->m;
    int64_t R = ir_config_int(m, "seq_ring", 0), S = ir_config_int(m, "seq_len", 0);
    if (R <= 1)
        return;
    c->op = -1;
    if (S > 0 && S % (2 * R))
        ir_verr(c, sup_noloc(), "config seq_ring = %lld: seq_len %lld does not divide into 2R = %lld zig-zag chunks",
                (long long)R, (long long)S, (long long)(2 * R));
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        c->op = i;
        int g = ir_op_group(op);
        if ((op->code == IR_RING_ATTENTION || op->code == IR_RING_ATTENTION_BWD) && g >= 0 && g < m->ngroups &&
            m->groups[g].set_size != R)
            ir_verr(c, sup_noloc(), "runs over a ring of %d ranks, but config seq_ring = %lld orders the sequence "
                    "for a ring of %lld", m->groups[g].set_size, (long long)R, (long long)R);
        if (op->code == IR_ATTENTION || op->code == IR_ATTENTION_BWD)
            ir_verr(c, sup_noloc(), "masks by sequence index, but config seq_ring = %lld keeps the sequence in the "
                    "ring's zig-zag order (only ring_attention masks by position)", (long long)R);
    }
    c->op = -1;
}

/* lm_head_loss(x[B,S,D], w[V,D], tgt i32[B,S]) */
static bool check_lm_head_in(ir_vctx *c, const ir_value *x, const ir_value *w, const ir_value *tgt)
{
    if (!want_rank(c, x, 3, "[B,S,D]") || !want_rank(c, w, 2, "[V,D]"))
        return false;
    char what[128], d[96];
    snprintf(what, sizeof what, "%s dim 2", ir_vdesc(c, x, d, sizeof d));
    ir_vwant_dim(c, w, 1, x->type.dims[2], what);
    ir_vwant_shard(c, x, 2, -1, "");
    check_tokens(c, tgt, x);
    return true;
}

static void check_lm_head(ir_vctx *c, const ir_op *op)
{
    const ir_value *x = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]);
    if (!check_lm_head_in(c, x, w, ir_vv(c, op->in[2])))
        return;
    if (op->code == IR_LM_HEAD_LOSS) {
        const ir_value *loss = ir_vv(c, op->out[0]);
        want_rank(c, loss, 0, "(a scalar)");
        want_dtype(c, loss, IR_F32);
        return;
    }
    ir_vsame_type(c, x, ir_vv(c, op->out[0]));
    want_same_shape(c, w, ir_vv(c, op->out[1]));
}

/* accumulate(acc, g): acc an accum value of g's type (shape and sharding),
 * added to once per micro-step; an accum value is written by nothing else,
 * and read otherwise only by the apply phase (`phase = opt`), after the
 * micro-steps. */
static void check_accumulate(ir_vctx *c, const ir_op *op)
{
    const ir_value *acc = ir_vv(c, op->in[0]), *g = ir_vv(c, op->in[1]);
    if (acc->kind != IR_V_ACCUM)
        ir_verr(c, sup_noloc(), "%%%s is a%s %s, not an accum value (accumulate adds into a gradient accumulator)",
                acc->name, acc->kind == IR_V_INPUT ? "n" : "", ir_value_kind_name(acc->kind));
    if (g->kind == IR_V_ACCUM)
        ir_verr(c, sup_noloc(), "accumulate adds a micro-step's gradient, not the accumulator %%%s", g->name);
    ir_vsame_type(c, acc, g);
}

void ir_verify_accum_reads(ir_vctx *c, const ir_op *op)
{
    for (int k = 0; k < op->nin; k++) {
        const ir_value *v = ir_vv(c, op->in[k]);
        if (v->kind != IR_V_ACCUM || (op->code == IR_ACCUMULATE && k == 0) || !strcmp(ir_op_phase(op), "opt"))
            continue;
        ir_verr(c, sup_noloc(), "reads the accumulator %%%s in phase '%s': it holds the whole step's gradient only "
                "in the apply phase ('phase = opt'), after every micro-step", v->name, ir_op_phase(op));
    }
}

/* adamw(w, dw): same shape; dw laid out like w, or whole where w is sharded
 * (ZeRO-1: each rank updates the slice of w it owns from the full gradient). */
static void check_adamw(ir_vctx *c, const ir_op *op)
{
    const ir_value *w = ir_vv(c, op->in[0]), *dw = ir_vv(c, op->in[1]);
    if (w->kind != IR_V_PARAM)
        ir_verr(c, sup_noloc(), "%%%s is not a param (adamw updates a param in place)", w->name);
    want_same_shape(c, w, dw);
    if (w->type.rank != dw->type.rank)
        return;
    for (int d = 0; d < w->type.rank; d++) {
        int gw = w->type.shard[d], gd = dw->type.shard[d];
        if (gw == gd || (gd == -1 && gw >= 0))
            continue;
        char a[80], b[80];
        ir_verr(c, sup_noloc(), "gradient %%%s dim %d is %s but param %%%s dim %d is %s (the gradient must be laid "
                "out like the param, or whole where the param is sharded)", dw->name, d,
                ir_vshard_str(c, gd, a, sizeof a), w->name, d, ir_vshard_str(c, gw, b, sizeof b));
    }
}

void ir_verify_op_types(ir_vctx *c, const ir_op *op)
{
    switch (op->code) {
    case IR_ADD:
    case IR_SWIGLU:
    case IR_SWIGLU_BWD: check_elementwise(c, op, -1); break;
    case IR_ROPE:
    case IR_ROPE_BWD: check_elementwise(c, op, 4); break;
    case IR_RMSNORM:
    case IR_RMSNORM_BWD: check_rmsnorm(c, op); break;
    case IR_EMBEDDING:
    case IR_EMBEDDING_BWD: check_embedding(c, op); break;
    case IR_LINEAR:
    case IR_LINEAR_BWD: check_linear(c, op); break;
    case IR_ATTENTION:
    case IR_ATTENTION_BWD: check_attention(c, op); break;
    case IR_RING_ATTENTION:
    case IR_RING_ATTENTION_BWD: check_ring_attention(c, op); break;
    case IR_LM_HEAD_LOSS:
    case IR_LM_HEAD_LOSS_BWD: check_lm_head(c, op); break;
    case IR_ADAMW: check_adamw(c, op); break;
    case IR_ACCUMULATE: check_accumulate(c, op); break;
    case IR_MLP:
    case IR_MLP_BWD: check_mlp(c, op); break;
    case IR_BIAS_ADD:
    case IR_BIAS_ADD_BWD: check_bias_add(c, op); break;
    default: ir_verify_coll_types(c, op); break;
    }
}
