/* lower.c — spec → IR: the single-device training step.
 *
 * Global shapes, nothing sharded, one group @world.  Forward, backward and
 * optimizer ops in schedule order; every op carries `layer` (-1 outside the
 * decoder layers) and `phase` (fwd|bwd|opt).  The passes then shard this
 * step; they read everything they need from the module config, so a
 * hand-written .bir file drives them exactly like a spec does.
 *
 * Shapes (B micro_batch, S seq_len, D hidden, H heads, Hk kv_heads,
 * Dh head_dim, F ffn, V vocab):
 *   x0 = embedding(tokens[B,S], embed[V,D])                 [B,S,D]
 *   per layer:  h = rmsnorm(x)  q,k,v = linear(h)           [B,S,H|Hk,Dh]
 *               qr,kr = rope   o = attention(qr,kr,v)       [B,S,H,Dh]
 *               attn = linear(o, wo; contract 2)  x1 = x + attn
 *               h2 = rmsnorm(x1)  g,u = linear  s = swiglu  [B,S,F]
 *               mlp = linear(s, w_down)  x2 = x1 + mlp      [B,S,D]
 *   xf = rmsnorm(x_L)   loss.part = lm_head_loss   loss = all_reduce @world */
#include "driver.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct lw {
    ir_module *m;
    ir_dtype act;
    int64_t B, S, D, H, Hk, Dh, F, V;
    bool tied;
    double theta;
    int64_t mlp_chunk;      /* > 0: the fused, tiled mlp op with this many tokens per chunk */
    bool qkv_bias, qk_norm; /* Qwen's attention features */
    int layer;              /* current layer, -1 outside */
    const char *phase;      /* current phase */
    char name[IR_NAME_MAX]; /* vname's result, until the next vname */
} lw;

static ir_type ty(ir_dtype dt, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    int64_t dims[4] = {d0, d1, d2, d3};
    return ir_type_make(dt, rank, dims);
}

/* "l<i>.<suffix>" inside a layer, "<suffix>" outside; `d` prefixes "d.". */
static const char *vname(lw *c, bool d, const char *suffix) {
    if (c->layer >= 0)
        snprintf(c->name, sizeof c->name, "%sl%d.%s", d ? "d." : "", c->layer, suffix);
    else
        snprintf(c->name, sizeof c->name, "%s%s", d ? "d." : "", suffix);
    return c->name;
}

static int act(lw *c, const char *suffix, ir_type t) { return ir_value_add_fresh(c->m, vname(c, false, suffix), t); }
static int dact(lw *c, const char *suffix, ir_type t) { return ir_value_add_fresh(c->m, vname(c, true, suffix), t); }
static int val(lw *c, const char *suffix) { return ir_value_find(c->m, vname(c, false, suffix)); }

/* The gradient of a parameter has the parameter's type. */
static int dparam(lw *c, int w) {
    char name[IR_NAME_MAX + 2];
    snprintf(name, sizeof name, "d.%s", c->m->values[w].name);
    return ir_value_add_fresh(c->m, name, c->m->values[w].type);
}

static int param(lw *c, const char *suffix, int rank, int64_t d0, int64_t d1, int64_t d2) {
    return ir_value_add(c->m, vname(c, false, suffix), IR_V_PARAM, ty(IR_F32, rank, d0, d1, d2, 0));
}

/* Appends op(ins...) -> outs... with the current layer/phase; `key`/`iv`/`fv`
 * is one optional op-specific attribute (iv for ints, fv for floats). */
static void emit(lw *c, ir_opcode code, int nin, const int *in, int nout, const int *out, const char *key, int64_t iv,
                 double fv) {
    ir_op op = ir_op_make(code);
    for (int k = 0; k < nin; k++) ir_op_add_input(&op, in[k]);
    for (int k = 0; k < nout; k++) ir_op_add_output(&op, out[k]);
    if (key && strcmp(key, "theta") == 0)
        ir_attr_set_float(&op, key, fv);
    else if (key)
        ir_attr_set_int(&op, key, iv);
    ir_op_tag(&op, c->layer, c->phase);
    ir_op_append(c->m, &op);
}

static int op1(lw *c, ir_opcode code, int a, int b, int out) {
    emit(c, code, b >= 0 ? 2 : 1, (int[]){a, b}, 1, &out, NULL, 0, 0);
    return out;
}

static int linear(lw *c, int x, int w, int contract, int out) {
    emit(c, IR_LINEAR, 2, (int[]){x, w}, 1, &out, "contract", contract, 0);
    return out;
}

/* dx, dw = linear_bwd(dy, x, w): returns dx. */
static int linear_bwd(lw *c, int dy, int x, int w, int contract, int dx) {
    emit(c, IR_LINEAR_BWD, 3, (int[]){dy, x, w}, 2, (int[]){dx, dparam(c, w)}, "contract", contract, 0);
    return dx;
}

static int rmsnorm_bwd(lw *c, int dy, int x, int w, int dx) {
    emit(c, IR_RMSNORM_BWD, 3, (int[]){dy, x, w}, 2, (int[]){dx, dparam(c, w)}, NULL, 0, 0);
    return dx;
}

static void add_layer_params(lw *c) {
    param(c, "attn_norm", 1, c->D, 0, 0);
    param(c, "wq", 3, c->D, c->H, c->Dh);
    param(c, "wk", 3, c->D, c->Hk, c->Dh);
    param(c, "wv", 3, c->D, c->Hk, c->Dh);
    param(c, "wo", 3, c->H, c->Dh, c->D);
    if (c->qkv_bias) {
        param(c, "bq", 2, c->H, c->Dh, 0);
        param(c, "bk", 2, c->Hk, c->Dh, 0);
        param(c, "bv", 2, c->Hk, c->Dh, 0);
    }
    if (c->qk_norm) {
        param(c, "q_norm", 1, c->Dh, 0, 0);
        param(c, "k_norm", 1, c->Dh, 0, 0);
    }
    param(c, "mlp_norm", 1, c->D, 0, 0);
    param(c, "w_gate", 2, c->D, c->F, 0);
    param(c, "w_up", 2, c->D, c->F, 0);
    param(c, "w_down", 2, c->F, c->D, 0);
}

/* q, k or v from h: the projection, then (qkv_bias) its bias, then
 * (qk_norm; q and k, `norm` != NULL) RMSNorm over head_dim, as Qwen2 and
 * Qwen3 do.  The chain ends in the value `name` (l<i>.q); the steps before
 * it are `name`.p (the projection) and `name`.b (biased, when a norm
 * follows).  All of it runs on the sequence-sharded side, before the
 * all-to-all, where every rank holds every head: the biases and norm
 * weights are used whole and add nothing to the exchanges. */
static bool qkv_step(const lw *c, const char *norm, int k) /* k: 0 proj, 1 bias, 2 norm */
{
    return k == 0 || (k == 1 && c->qkv_bias) || (k == 2 && c->qk_norm && norm);
}

/* The name of step k's result (the last step's is `name` itself). */
static void qkv_name(const lw *c, const char *name, const char *norm, int k, char out[32]) {
    static const char *const suffix[] = {".p", ".b", ""};
    int last = qkv_step(c, norm, 2) ? 2 : qkv_step(c, norm, 1) ? 1 : 0;
    snprintf(out, 32, "%s%s", name, k == last ? "" : suffix[k]);
}

static int qkv_fwd(lw *c, int h, const char *name, const char *w, const char *bias, const char *norm, ir_type t) {
    char nm[32];
    qkv_name(c, name, norm, 0, nm);
    int y = linear(c, h, val(c, w), 1, act(c, nm, t));
    if (qkv_step(c, norm, 1)) {
        qkv_name(c, name, norm, 1, nm);
        y = op1(c, IR_BIAS_ADD, y, val(c, bias), act(c, nm, t));
    }
    if (qkv_step(c, norm, 2)) y = op1(c, IR_RMSNORM, y, val(c, norm), act(c, name, t));
    return y;
}

/* The reverse of qkv_fwd: dy is the gradient of `name`; returns the
 * gradient of h through this projection (named d.<dh_name>).  A bias passes
 * the gradient through unchanged (d of the projection is dy itself) and
 * gets the sum of dy over the tokens. */
static int qkv_bwd(lw *c, int dy, const char *name, const char *w, const char *bias, const char *norm, ir_type t,
                   const char *dh_name, ir_type tD) {
    char nm[32];
    if (qkv_step(c, norm, 2)) {
        qkv_name(c, name, norm, qkv_step(c, norm, 1) ? 1 : 0, nm);
        dy = rmsnorm_bwd(c, dy, val(c, nm), val(c, norm), dact(c, nm, t));
    }
    if (qkv_step(c, norm, 1)) {
        int db = dparam(c, val(c, bias));
        emit(c, IR_BIAS_ADD_BWD, 1, &dy, 1, &db, NULL, 0, 0);
    }
    return linear_bwd(c, dy, val(c, "h"), val(c, w), 1, dact(c, dh_name, tD));
}

/* One decoder layer forward; x is the residual stream in, returns x2. */
static int layer_fwd(lw *c, int x) {
    ir_type tD = ty(c->act, 3, c->B, c->S, c->D, 0), tF = ty(c->act, 3, c->B, c->S, c->F, 0);
    ir_type tQ = ty(c->act, 4, c->B, c->S, c->H, c->Dh), tK = ty(c->act, 4, c->B, c->S, c->Hk, c->Dh);
    int h = op1(c, IR_RMSNORM, x, val(c, "attn_norm"), act(c, "h", tD));
    int q = qkv_fwd(c, h, "q", "wq", "bq", "q_norm", tQ);
    int k = qkv_fwd(c, h, "k", "wk", "bk", "k_norm", tK);
    int v = qkv_fwd(c, h, "v", "wv", "bv", NULL, tK);
    int qr = act(c, "qr", tQ), kr = act(c, "kr", tK);
    emit(c, IR_ROPE, 1, &q, 1, &qr, "theta", 0, c->theta);
    emit(c, IR_ROPE, 1, &k, 1, &kr, "theta", 0, c->theta);
    int o = act(c, "o", tQ);
    emit(c, IR_ATTENTION, 3, (int[]){qr, kr, v}, 1, &o, "causal", 1, 0);
    int attn = linear(c, o, val(c, "wo"), 2, act(c, "attn", tD));
    int x1 = op1(c, IR_ADD, x, attn, act(c, "x1", tD));
    int h2 = op1(c, IR_RMSNORM, x1, val(c, "mlp_norm"), act(c, "h2", tD));
    if (c->mlp_chunk > 0) {
        int y = act(c, "mlp", tD);
        emit(c, IR_MLP, 4, (int[]){h2, val(c, "w_gate"), val(c, "w_up"), val(c, "w_down")}, 1, &y, "chunk",
             c->mlp_chunk, 0);
        return op1(c, IR_ADD, x1, y, act(c, "x2", tD));
    }
    int g = linear(c, h2, val(c, "w_gate"), 1, act(c, "g", tF));
    int u = linear(c, h2, val(c, "w_up"), 1, act(c, "u", tF));
    int s = op1(c, IR_SWIGLU, g, u, act(c, "s", tF));
    int mlp = linear(c, s, val(c, "w_down"), 1, act(c, "mlp", tD));
    return op1(c, IR_ADD, x1, mlp, act(c, "x2", tD));
}

/* The MLP half of a layer backward: from d.x2 to d.x1 (residual included). */
static int mlp_bwd(lw *c, int dx2) {
    ir_type tD = ty(c->act, 3, c->B, c->S, c->D, 0), tF = ty(c->act, 3, c->B, c->S, c->F, 0);
    if (c->mlp_chunk > 0) {
        int wg = val(c, "w_gate"), wu = val(c, "w_up"), wd = val(c, "w_down"), dh2 = dact(c, "h2", tD);
        emit(c, IR_MLP_BWD, 5, (int[]){dx2, val(c, "h2"), wg, wu, wd}, 4,
             (int[]){dh2, dparam(c, wg), dparam(c, wu), dparam(c, wd)}, "chunk", c->mlp_chunk, 0);
        int dn = rmsnorm_bwd(c, dh2, val(c, "x1"), val(c, "mlp_norm"), dact(c, "x1.n", tD));
        return op1(c, IR_ADD, dx2, dn, dact(c, "x1", tD));
    }
    int ds = linear_bwd(c, dx2, val(c, "s"), val(c, "w_down"), 1, dact(c, "s", tF));
    int dg = dact(c, "g", tF), du = dact(c, "u", tF);
    emit(c, IR_SWIGLU_BWD, 3, (int[]){ds, val(c, "g"), val(c, "u")}, 2, (int[]){dg, du}, NULL, 0, 0);
    int dhu = linear_bwd(c, du, val(c, "h2"), val(c, "w_up"), 1, dact(c, "h2.u", tD));
    int dhg = linear_bwd(c, dg, val(c, "h2"), val(c, "w_gate"), 1, dact(c, "h2.g", tD));
    int dh2 = op1(c, IR_ADD, dhg, dhu, dact(c, "h2", tD));
    int dn = rmsnorm_bwd(c, dh2, val(c, "x1"), val(c, "mlp_norm"), dact(c, "x1.n", tD));
    return op1(c, IR_ADD, dx2, dn, dact(c, "x1", tD));
}

/* The attention half: from d.x1 to the gradient of the layer input x. */
static int attn_bwd(lw *c, int dx1, int x, const char *dx_name) {
    ir_type tD = ty(c->act, 3, c->B, c->S, c->D, 0);
    ir_type tQ = ty(c->act, 4, c->B, c->S, c->H, c->Dh), tK = ty(c->act, 4, c->B, c->S, c->Hk, c->Dh);
    int d_o = linear_bwd(c, dx1, val(c, "o"), val(c, "wo"), 2, dact(c, "o", tQ));
    int dqr = dact(c, "qr", tQ), dkr = dact(c, "kr", tK), dv = dact(c, "v", tK);
    emit(c, IR_ATTENTION_BWD, 5, (int[]){d_o, val(c, "qr"), val(c, "kr"), val(c, "v"), val(c, "o")}, 3,
         (int[]){dqr, dkr, dv}, "causal", 1, 0);
    int dq = dact(c, "q", tQ), dk = dact(c, "k", tK);
    emit(c, IR_ROPE_BWD, 1, &dqr, 1, &dq, "theta", 0, c->theta);
    emit(c, IR_ROPE_BWD, 1, &dkr, 1, &dk, "theta", 0, c->theta);
    int dhv = qkv_bwd(c, dv, "v", "wv", "bv", NULL, tK, "h.v", tD);
    int dhk = qkv_bwd(c, dk, "k", "wk", "bk", "k_norm", tK, "h.k", tD);
    int dhq = qkv_bwd(c, dq, "q", "wq", "bq", "q_norm", tQ, "h.q", tD);
    int dqk = op1(c, IR_ADD, dhq, dhk, dact(c, "h.qk", tD));
    int dh = op1(c, IR_ADD, dqk, dhv, dact(c, "h", tD));
    int dn = rmsnorm_bwd(c, dh, x, val(c, "attn_norm"), dact(c, "x.n", tD));
    return op1(c, IR_ADD, dx1, dn, ir_value_add_fresh(c->m, dx_name, tD));
}

/* Name of layer i's input: x0 for the first layer, else l<i-1>.x2. */
static void layer_input_name(int i, char out[IR_NAME_MAX]) {
    if (i == 0)
        snprintf(out, IR_NAME_MAX, "x0");
    else
        snprintf(out, IR_NAME_MAX, "l%d.x2", i - 1);
}

static void forward(lw *c, int layers) {
    c->phase = "fwd";
    c->layer = -1;
    int tokens = ir_value_find(c->m, "tokens"), targets = ir_value_find(c->m, "targets");
    int embed = ir_value_find(c->m, "embed");
    ir_type tD = ty(c->act, 3, c->B, c->S, c->D, 0);
    int x = op1(c, IR_EMBEDDING, tokens, embed, act(c, "x0", tD));
    for (int i = 0; i < layers; i++) {
        c->layer = i;
        x = layer_fwd(c, x);
    }
    c->layer = -1;
    int xf = op1(c, IR_RMSNORM, x, ir_value_find(c->m, "final_norm"), act(c, "xf", tD));
    int head = ir_value_find(c->m, c->tied ? "embed" : "lm_head");
    ir_type tl = ty(IR_F32, 0, 0, 0, 0, 0);
    int part = ir_value_add_fresh(c->m, "loss.part", tl);
    emit(c, IR_LM_HEAD_LOSS, 3, (int[]){xf, head, targets}, 1, &part, NULL, 0, 0);
    int loss = ir_value_add_fresh(c->m, "loss", tl);
    ir_op op = ir_op_make(IR_ALL_REDUCE);
    ir_op_add_input(&op, part);
    ir_op_add_output(&op, loss);
    ir_attr_set_group(&op, "group", ir_group_find(c->m, "world"));
    ir_op_tag(&op, -1, "fwd");
    ir_op_append(c->m, &op);
}

static void backward(lw *c, int layers) {
    c->phase = "bwd";
    c->layer = -1;
    ir_module *m = c->m;
    ir_type tD = ty(c->act, 3, c->B, c->S, c->D, 0);
    int embed = ir_value_find(m, "embed"), xf = ir_value_find(m, "xf");
    int head = c->tied ? embed : ir_value_find(m, "lm_head");
    int dxf = act(c, "d.xf", tD);
    int dhead = ir_value_add_fresh(m, c->tied ? "d.embed.head" : "d.lm_head", m->values[head].type);
    emit(c, IR_LM_HEAD_LOSS_BWD, 3, (int[]){xf, head, ir_value_find(m, "targets")}, 2, (int[]){dxf, dhead}, NULL, 0, 0);
    char xname[IR_NAME_MAX], dname[IR_NAME_MAX + 2];
    layer_input_name(layers, xname);
    snprintf(dname, sizeof dname, "d.%s", xname);
    int dx =
        rmsnorm_bwd(c, dxf, ir_value_find(m, xname), ir_value_find(m, "final_norm"), ir_value_add_fresh(m, dname, tD));
    for (int i = layers - 1; i >= 0; i--) {
        c->layer = i;
        layer_input_name(i, xname);
        snprintf(dname, sizeof dname, "d.%s", xname);
        dx = attn_bwd(c, mlp_bwd(c, dx), ir_value_find(m, xname), dname);
    }
    c->layer = -1;
    int dtok = ir_value_add_fresh(m, c->tied ? "d.embed.tok" : "d.embed", m->values[embed].type);
    op1(c, IR_EMBEDDING_BWD, dx, ir_value_find(m, "tokens"), dtok);
    if (c->tied) /* the tied matrix gets both contributions */
        op1(c, IR_ADD, dtok, dhead, ir_value_add_fresh(m, "d.embed", m->values[embed].type));
}

static void optimizer(lw *c) {
    ir_module *m = c->m;
    int nv = m->nvalues;
    for (int w = 0; w < nv; w++) {
        if (m->values[w].kind != IR_V_PARAM) continue;
        char name[IR_NAME_MAX + 2];
        snprintf(name, sizeof name, "d.%s", m->values[w].name);
        ir_op op = ir_op_make(IR_ADAMW);
        ir_op_add_input(&op, w);
        ir_op_add_input(&op, ir_value_find(m, name));
        ir_op_tag(&op, -1, "opt");
        ir_op_append(m, &op);
    }
}

static void cfg_double(ir_module *m, const char *key, double v) {
    char buf[40];
    ir_config_set(m, key, sup_fmt_double(v, buf, sizeof buf));
}

static const char *batch_aware_name(fe_batch_aware ba) {
    switch (ba) {
    case FE_BA_ON: return "on";
    case FE_BA_OFF: return "off";
    case FE_BA_GROUPS: return "groups";
    case FE_BA_DYNAMIC: return "dynamic";
    default: return "auto";
    }
}

/* The llama3 parameters are written only with llama3 scaling, as in the
 * printed spec: under none they would be config keys that nothing reads. */
static void copy_rope_scaling(ir_module *m, const fe_model *md) {
    bool llama3 = !strcmp(md->rope_scaling, "llama3");
    ir_config_set(m, "rope_scaling", llama3 ? "llama3" : "none");
    if (!llama3) return;
    cfg_double(m, "rope_factor", md->rope_factor);
    cfg_double(m, "rope_low_freq_factor", md->rope_low_freq_factor);
    cfg_double(m, "rope_high_freq_factor", md->rope_high_freq_factor);
    ir_config_set_int(m, "rope_original_max_pos", md->rope_original_max_pos);
}

/* The device's datasheet peaks, for the cost model: FLOP/s at the step's
 * precision (bf16 tensor cores, or fp32) and memory bandwidth.  Nothing
 * when the device names no preset (hand-built specs). */
static void copy_device_peaks(ir_module *m, const fe_spec *s) {
    const layout_device_preset *p = layout_device_lookup(s->mesh.device[0] ? s->mesh.device : "cpu");
    if (!p) return;
    bool fp32 = !strcmp(s->train.precision, "fp32");
    cfg_double(m, "device_peak_flops", fp32 ? p->peak_flops_fp32 : p->peak_flops_bf16);
    cfg_double(m, "device_mem_bw", p->mem_bw);
    if (p->compute_fraction > 0) cfg_double(m, "cost.compute_fraction", p->compute_fraction);
    if (p->attention_fraction > 0) cfg_double(m, "cost.attention_fraction", p->attention_fraction);
    if (p->mem_bw_fraction > 0) cfg_double(m, "cost.mem_bw_fraction", p->mem_bw_fraction);
    if (p->exp_rate > 0) cfg_double(m, "device_exp_rate", p->exp_rate);
    if (p->op_overhead > 0) cfg_double(m, "cost.op_overhead", p->op_overhead);
    if (p->shared_core_efficiency > 0) cfg_double(m, "cost.shared_core_efficiency", p->shared_core_efficiency);
}

/* The resolved layout: concrete keys only (the planner has chosen for any
 * `auto` before lowering), so the passes rewrite without choosing.
 * batch_aware keeps the mode as written, for the reader. */
static void copy_layout(ir_module *m, const fe_spec *s, const layout_choice *c) {
    ir_config_set(m, "sequence", layout_seq_name(c->seq));
    ir_config_set(m, "batch_aware", batch_aware_name(s->layout.batch_aware));
    ir_config_set_int(m, "groups", c->groups);
    ir_config_set_int(m, "ring_degree", c->ring_degree);
    /* a variant's spec words (a2a two_level); the families' own: a2a flat */
    ir_config_set(m, "a2a", c->variant ? c->variant->word : "flat");
}

/* Every spec field a pass reads, so textual IR is self-contained. */
static void copy_config(ir_module *m, const fe_spec *s, const layout_choice *c) {
    const fe_model *md = &s->model;
    ir_config_set_int(m, "hidden", md->hidden);
    ir_config_set_int(m, "layers", md->layers);
    ir_config_set_int(m, "heads", md->heads);
    ir_config_set_int(m, "kv_heads", md->kv_heads);
    ir_config_set_int(m, "head_dim", md->head_dim);
    ir_config_set_int(m, "ffn", md->ffn);
    ir_config_set_int(m, "vocab", md->vocab);
    cfg_double(m, "rope_theta", md->rope_theta);
    copy_rope_scaling(m, md);
    cfg_double(m, "norm_eps", md->norm_eps);
    ir_config_set(m, "tie_embeddings", md->tie_embeddings ? "true" : "false");
    ir_config_set(m, "qkv_bias", md->qkv_bias ? "true" : "false");
    ir_config_set(m, "qk_norm", md->qk_norm ? "true" : "false");
    ir_config_set_int(m, "micro_batch", s->train.micro_batch);
    ir_config_set_int(m, "seq_len", s->train.seq_len);
    /* Gradient accumulation: micro-steps per optimizer step (the zero pass
     * builds the micro-step / apply structure; absent = 1). */
    int64_t gb = s->train.global_batch, mb = s->train.micro_batch;
    if (mb > 0 && gb > mb && gb % mb == 0) ir_config_set_int(m, "accum", gb / mb);
    ir_config_set(m, "precision", s->train.precision[0] ? s->train.precision : "bf16");
    ir_config_set_int(m, "zero", s->train.zero);
    ir_config_set(m, "recompute", s->train.recompute[0] ? s->train.recompute : "none");
    ir_config_set(m, "optimizer", s->train.optimizer[0] ? s->train.optimizer : "adamw");
    cfg_double(m, "lr", s->train.lr);
    ir_config_set(m, "schedule", s->train.schedule[0] ? s->train.schedule : "constant");
    ir_config_set_int(m, "warmup", s->train.warmup);
    cfg_double(m, "min_lr", s->train.min_lr);
    cfg_double(m, "wsd_decay", s->train.wsd_decay);
    cfg_double(m, "weight_decay", s->train.weight_decay);
    cfg_double(m, "beta1", s->train.beta1);
    cfg_double(m, "beta2", s->train.beta2);
    cfg_double(m, "eps", s->train.eps);
    cfg_double(m, "grad_clip", s->train.grad_clip);
    ir_config_set_int(m, "steps", s->train.steps);
    ir_config_set_int(m, "seed", s->train.seed);
    /* auto lowered as it is (by a caller that did not choose: tests, the
     * fuzzer) takes ALST's tiling, the setting that uses less memory */
    ir_config_set_int(m, "mlp_chunk", s->train.mlp_chunk == FE_MLP_AUTO ? fe_mlp_chunk_alst(s) : s->train.mlp_chunk);
    if (s->train.overlap) ir_config_set_int(m, "overlap", 1);
    if (!s->train.fuse_loss) ir_config_set_int(m, "fuse_loss", 0); /* absent: on */
    if (!s->train.fuse_elem) ir_config_set_int(m, "fuse_elem", 0);
    if (!s->train.fuse_rope) ir_config_set_int(m, "fuse_rope", 0);
    if (!s->train.attention_lse) ir_config_set_int(m, "attention_lse", 0);
    if (s->train.attention_chunks > 1) ir_config_set_int(m, "attention_chunks", s->train.attention_chunks);
    if (s->train.documents) { /* absent: one token stream, no document masks */
        ir_config_set_int(m, "documents", 1);
        ir_config_set_int(m, "eot_token", s->train.eot_token);
        ir_config_set(m, "packing", s->train.packing[0] ? s->train.packing : "balanced");
    }
    copy_layout(m, s, c);
    ir_config_set(m, "device", s->mesh.device[0] ? s->mesh.device : "cpu");
    cfg_double(m, "device_mem", s->mesh.device_mem);
    ir_config_set_int(m, "nics_per_node", s->mesh.nics_per_node);
    if (s->mesh.cores_per_node > 0) ir_config_set_int(m, "cores_per_node", s->mesh.cores_per_node);
    copy_device_peaks(m, s);
    /* Host memory and its link, only for a step that uses them (pass
     * offload), so that other steps print as they always did.  Link kind
     * none: no host link (host_bw 0), which the pass refuses. */
    const char *off = s->train.offload;
    if (off[0] && strcmp(off, "none") != 0) {
        const fe_link *h = &s->mesh.host;
        bool none = !h->kind[0] || !strcmp(h->kind, "none");
        ir_config_set(m, "offload", off);
        cfg_double(m, "host_mem", s->mesh.host_mem);
        ir_config_set(m, "host_link", none ? "none" : h->kind);
        cfg_double(m, "host_bw", none ? 0 : h->bandwidth);
        cfg_double(m, "host_latency", none ? 0 : h->latency);
        cfg_double(m, "host_efficiency", h->efficiency > 0 ? h->efficiency : 1);
    }
}

static void copy_link(ir_link *dst, const fe_link *src) {
    snprintf(dst->kind, sizeof dst->kind, "%s", src->kind[0] ? src->kind : "none");
    dst->bandwidth = src->bandwidth;
    dst->latency = src->latency;
    dst->efficiency = src->efficiency > 0 ? src->efficiency : 1;
}

static void add_params_and_inputs(lw *c, int layers) {
    c->layer = -1;
    param(c, "embed", 2, c->V, c->D, 0);
    for (int i = 0; i < layers; i++) {
        c->layer = i;
        add_layer_params(c);
    }
    c->layer = -1;
    param(c, "final_norm", 1, c->D, 0, 0);
    if (!c->tied) param(c, "lm_head", 2, c->V, c->D, 0);
    ir_type tok = ty(IR_I32, 2, c->B, c->S, 0, 0);
    ir_value_add(c->m, "tokens", IR_V_INPUT, tok);
    ir_value_add(c->m, "targets", IR_V_INPUT, tok);
}

ir_module *pass_lower_with(const fe_spec *spec, const layout_choice *choice) {
    if (!spec || !choice) return NULL;
    const fe_model *md = &spec->model;
    ir_module *m = ir_module_new(md->name[0] ? md->name : "model");
    copy_config(m, spec, choice);
    m->mesh.nodes = (int)spec->mesh.nodes;
    m->mesh.devices_per_node = (int)spec->mesh.devices_per_node;
    if (!fe_placement_consecutive(&spec->mesh)) {
        int *node_of = sup_xmalloc(sizeof(int) * (size_t)ir_world(m));
        char why[256];
        if (fe_placement_nodes(&spec->mesh, node_of, why, sizeof why)) /* fe_check diagnosed a bad one */
            ir_mesh_set_placement(m, node_of);
        free(node_of);
    }
    copy_link(&m->mesh.intra, &spec->mesh.intra);
    copy_link(&m->mesh.inter, &spec->mesh.inter);
    ir_group_add_contiguous(m, "world", 1);

    lw c = {.m = m,
            .act = strcmp(spec->train.precision, "fp32") == 0 ? IR_F32 : IR_BF16,
            .B = spec->train.micro_batch,
            .S = spec->train.seq_len,
            .D = md->hidden,
            .H = md->heads,
            .Hk = md->kv_heads > 0 ? md->kv_heads : md->heads,
            .Dh = md->head_dim,
            .F = md->ffn,
            .V = md->vocab,
            .tied = md->tie_embeddings,
            .theta = md->rope_theta,
            .mlp_chunk = ir_config_int(m, "mlp_chunk", 0),
            .qkv_bias = md->qkv_bias,
            .qk_norm = md->qk_norm,
            .layer = -1,
            .phase = "fwd"};
    int layers = (int)md->layers;
    add_params_and_inputs(&c, layers);
    forward(&c, layers);
    backward(&c, layers);
    optimizer(&c);
    return m;
}
