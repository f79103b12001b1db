/* pass_util.c — helpers shared by the passes (see pass_util.h). */
#include "pass_util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int pass_value_derived(ir_module *m, int v, const char *suffix, ir_type t) {
    char base[IR_NAME_MAX + 8];
    snprintf(base, sizeof base, "%s%s", m->values[v].name, suffix);
    return ir_value_add_fresh(m, base, t);
}

ir_op pass_exchange(int g, int n, const int *ins, const int *outs, bool to_heads, int64_t fan, const ir_op *like) {
    ir_op op = ir_op_make(IR_ALL_TO_ALL);
    for (int k = 0; k < n; k++) {
        ir_op_add_input(&op, ins[k]);
        ir_op_add_output(&op, outs[k]);
    }
    /* this attribute order is what the printed IR shows */
    ir_attr_set_group(&op, "group", g);
    ir_attr_set_int(&op, "split", to_heads ? 2 : 1);
    ir_attr_set_int(&op, "concat", to_heads ? 1 : 2);
    if (fan > 1) ir_attr_set_int(&op, to_heads ? "fanout" : "fanin", fan);
    if (like) pu_tag_like(&op, like);
    return op;
}

void pass_shard_sequence(ir_module *m, int sp) {
    bool *weight = ir_weight_flags(m);
    for (int v = 0; v < m->nvalues; v++)
        if (pu_is_activation(m, weight, v)) m->values[v].type.shard[1] = sp;
    free(weight);
}

int pu_sequence_group(ir_module *m, int G) {
    int dp = ir_group_find(m, "dp"), sp = ir_group_add_contiguous(m, "sp", G);
    if (dp >= 0 && dp < sp) {
        pu_group_swap(m, sp, dp);
        sp = dp;
    }
    pass_shard_sequence(m, sp);
    return sp;
}

int pu_batch_groups(const ir_module *m, const pass_options *opt, const char *pass) {
    int dp = ir_group_find(m, "dp"), N = ir_seq_world(m);
    if (dp < 0 && pass_layout_of(m).groups > 1)
        pu_remark(opt, "%s: config groups = %d but no @dp (batch-aware has not run); one group of %d ranks", pass,
                  pass_layout_of(m).groups, N);
    return dp >= 0 ? m->groups[dp].set_size : 1;
}

const char *pass_layout_illegal(const ir_module *m, int groups, int ring_degree) {
    layout_dims d = pass_layout_dims(m);
    layout_choice c = pass_layout_of(m);
    c.groups = groups;
    if (ring_degree > 0) c.ring_degree = ring_degree;
    return layout_illegal(&d, &c, NULL, 0);
}

void pu_tag_like(ir_op *op, const ir_op *from) {
    const char *ph = ir_op_phase(from);
    ir_op_tag(op, ir_op_layer(from), *ph ? ph : "fwd");
}

bool pu_is_activation(const ir_module *m, const bool *weight, int v) {
    return !weight[v] && m->values[v].type.rank >= 2;
}

const char *pu_cfg(const ir_module *m, const char *key, const char *def) {
    const char *s = ir_config_get(m, key);
    return s && *s ? s : def;
}

int pu_count_ops(const ir_module *m, ir_opcode code) {
    int n = 0;
    for (int i = 0; i < m->nops; i++) n += m->ops[i].code == code;
    return n;
}

bool pu_reads(const ir_op *op, int v) {
    for (int k = 0; k < op->nin; k++)
        if (op->in[k] == v) return true;
    return false;
}

pu_uses pu_uses_of(const ir_module *m) {
    size_t n = (size_t)m->nvalues + 1;
    pu_uses u = {sup_xcalloc(n, sizeof(int)), sup_xmalloc(sizeof(int) * n), sup_xmalloc(sizeof(int) * n),
                 sup_xmalloc(sizeof(int) * n)};
    for (int v = 0; v < m->nvalues; v++) u.reader[v] = u.freed[v] = u.def[v] = -1;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        for (int k = 0; k < op->nout; k++)
            if (op->out[k] >= 0 && op->out[k] < m->nvalues) u.def[op->out[k]] = i;
        for (int k = 0; k < op->nin; k++) {
            int v = op->in[k];
            if (v < 0 || v >= m->nvalues || (k > 0 && v == op->in[k - 1])) continue;
            if (op->code == IR_FREE) {
                u.freed[v] = i;
            } else {
                u.nread[v]++;
                u.reader[v] = i;
            }
        }
    }
    return u;
}

void pu_uses_free(pu_uses *u) { free(u->nread), free(u->reader), free(u->freed), free(u->def); }

int pu_first_use(const ir_module *m, int v, int start) {
    for (int i = start; i < m->nops; i++)
        if (pu_reads(&m->ops[i], v)) return i;
    return -1;
}

bool pu_heads_uneven(const ir_module *m, int K) {
    layout_dims d = pass_layout_dims(m);
    return layout_heads_uneven(&d, K);
}

/* With head-chunked attention (config attention_chunks) the heads of one
 * chunk: what each exchange splits over the group. */
layout_dims pass_layout_dims(const ir_module *m) {
    pu_dims d = pu_model_dims(m);
    int64_t Hk = d.Hk > 0 ? d.Hk : d.H, C = pu_attention_chunks(m);
    if (d.H % C || Hk % C) C = 1; /* the ulysses pass refuses such chunks */
    return (layout_dims){.N = ir_seq_world(m),
                         .nodes = m->mesh.nodes,
                         .dpn = m->mesh.devices_per_node,
                         .B = d.B,
                         .S = d.S,
                         .H = d.H / C,
                         .Hk = Hk / C};
}

ir_type pu_chunk_type(const ir_module *m, int v, int C) {
    ir_type t = m->values[v].type;
    t.dims[2] /= C;
    return t;
}

ir_type pu_lse_type(const ir_type *q) {
    ir_type t = ir_type_make(IR_F32, 3, q->dims);
    for (int d = 0; d < 3; d++) t.shard[d] = q->shard[d], t.unit[d] = q->unit[d];
    return t;
}

ir_op pu_head_slice_op(const int *ins, const int *outs, int n, int c, int C, const ir_op *like) {
    ir_op op = ir_op_make(IR_HEAD_SLICE);
    for (int k = 0; k < n; k++) {
        ir_op_add_input(&op, ins[k]);
        ir_op_add_output(&op, outs[k]);
    }
    ir_attr_set_int(&op, "chunk", c);
    ir_attr_set_int(&op, "chunks", C);
    pu_tag_like(&op, like);
    return op;
}

ir_op pu_head_concat_op(const int *ins, int C, int out, const ir_op *like) {
    ir_op op = ir_op_make(IR_HEAD_CONCAT);
    for (int k = 0; k < C; k++) ir_op_add_input(&op, ins[k]);
    ir_op_add_output(&op, out);
    ir_attr_set_int(&op, "chunks", C);
    pu_tag_like(&op, like);
    return op;
}

bool pu_check_chunks(const ir_module *m, int C, const char *pass) {
    if (C <= 1) return true;
    pu_dims d = pu_model_dims(m);
    int64_t Hk = d.Hk > 0 ? d.Hk : d.H;
    if (C <= PU_MAX_CHUNKS && d.H % C == 0 && Hk % C == 0) return true;
    sup_error(sup_noloc(), "%s: attention_chunks = %d must be at most %d and divide heads (%lld) and kv_heads (%lld)",
              pass, C, PU_MAX_CHUNKS, (long long)d.H, (long long)Hk);
    return false;
}

bool pu_wrap_chunked(ir_module *m, const pu_chunker *k, int C) {
    int natt = pu_count_ops(m, IR_ATTENTION), n = 0;
    pu_chunked *rec = sup_xcalloc((size_t)(natt > 0 ? natt : 1), sizeof *rec);
    pass_edits edits = {0};
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == IR_ATTENTION && n < natt) k->fwd(m, k->ctx, &edits, i, C, &rec[n++]);
    pass_edits_apply(m, &edits);
    /* by_q[v]: the record of the forward whose q is value v, -1 if none */
    int *by_q = sup_xmalloc((size_t)(m->nvalues > 0 ? m->nvalues : 1) * sizeof *by_q);
    for (int v = 0; v < m->nvalues; v++) by_q[v] = -1;
    for (int r = n - 1; r >= 0; r--) by_q[rec[r].qr] = r; /* the first forward wins */
    bool ok = true;
    for (int i = 0; i < m->nops && ok; i++) {
        if (m->ops[i].code != IR_ATTENTION_BWD) continue;
        int q = m->ops[i].in[1], r = q >= 0 && q < m->nvalues ? by_q[q] : -1;
        if (r < 0) {
            sup_error(sup_noloc(), "%s: attention_bwd %%%s reads a q that no attention forward read; cannot chunk it",
                      k->pass, m->values[m->ops[i].out[0]].name);
            ok = false;
        } else {
            k->bwd(m, k->ctx, &edits, i, C, &rec[r]);
        }
    }
    pass_edits_apply(m, &edits); /* on failure too: the pass fails with the module */
    free(by_q);
    free(rec);
    return ok;
}

int64_t pu_attention_chunks(const ir_module *m) {
    int64_t C = ir_config_int(m, "attention_chunks", 1);
    return C > 1 ? C : 1;
}

layout_choice pass_layout_of(const ir_module *m) {
    layout_choice c = layout_ulysses((int)ir_config_int(m, "groups", 1));
    if (c.groups < 1) c.groups = 1; /* lowered specs before layout/ wrote groups = 0 for "not chosen" */
    layout_seq_parse(pu_cfg(m, "sequence", "ulysses"), &c.seq);
    c.variant = layout_variant_find("a2a", pu_cfg(m, "a2a", "flat"));
    int64_t K = ir_seq_world(m) / c.groups;
    c.ring_degree = (int)ir_config_int(m, "ring_degree", c.seq == LAYOUT_RING ? K : 1);
    return c;
}

bool pass_layout_strategy(const ir_module *m, const layout_strategy **out) {
    layout_choice c = pass_layout_of(m);
    const char *word = pu_cfg(m, "a2a", "flat");
    if (!c.variant && strcmp(word, "flat")) {
        char known[256] = "flat";
        int n;
        const layout_strategy *all = layout_strategies(&n);
        for (int i = 0; i < n; i++)
            if (all[i].key && !strcmp(all[i].key, "a2a"))
                snprintf(known + strlen(known), sizeof known - strlen(known), ", %s", all[i].word);
        sup_error(sup_noloc(),
                  "config a2a = %s: no registered strategy has that word (registered: %s); load the "
                  "plugin that provides it (--load-pass-plugin)",
                  word, known);
        return false;
    }
    *out = layout_strategy_of(&c);
    return true;
}

void pu_remark(const pass_options *opt, const char *fmt, ...) {
    if (opt && opt->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    sup_vdiag(SUP_REMARK, sup_noloc(), fmt, ap);
    va_end(ap);
}

/* The first op with this opcode, or NULL. */
static const ir_op *first_op(const ir_module *m, ir_opcode code) {
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == code) return &m->ops[i];
    return NULL;
}

pu_dims pu_model_dims(const ir_module *m) {
    pu_dims d = {0, 0, 0, 0};
    int tok = ir_value_find(m, "tokens");
    if (tok >= 0 && m->values[tok].type.rank >= 2) {
        d.B = m->values[tok].type.dims[0];
        d.S = m->values[tok].type.dims[1];
    }
    const ir_op *att = first_op(m, IR_ATTENTION);
    if (att && att->nin == 3 && m->values[att->in[0]].type.rank == 4) {
        d.B = m->values[att->in[0]].type.dims[0];
        d.S = m->values[att->in[0]].type.dims[1];
        d.H = m->values[att->in[0]].type.dims[2];
        /* k may already carry virtual heads; the config has the real count. */
        d.Hk = m->values[att->in[1]].type.dims[2];
    }
    d.B = ir_config_int(m, "micro_batch", d.B);
    d.S = ir_config_int(m, "seq_len", d.S);
    d.H = ir_config_int(m, "heads", d.H);
    d.Hk = ir_config_int(m, "kv_heads", d.Hk ? d.Hk : d.H);
    return d;
}

ir_type pass_heads_type(ir_type t, int sp, int64_t fanout) {
    t.shard[1] = -1;
    t.shard[2] = sp;
    t.dims[2] *= fanout;
    return t;
}

/* Ulysses exchanges: split=2 trades sequence for heads (the receiving side
 * holds the heads, `fanout` replicates a shared KV head to the F ranks that
 * need it); split=1 trades back (`fanin` sums the F partial gradients). */
static void fix_exchange(ir_module *m, ir_op *op, int K, int64_t Hk, bool uneven) {
    bool to_heads = ir_attr_int(op, "split", 0) == 2;
    int64_t F = 1;
    for (int k = 0; k < op->nin && k < op->nout; k++) {
        int seq_side = to_heads ? op->in[k] : op->out[k];
        int head_side = to_heads ? op->out[k] : op->in[k];
        int64_t real = m->values[seq_side].type.dims[2];
        int64_t f = real > 0 && K > real && !uneven ? K / real : 1;
        m->values[head_side].type.dims[2] = real * f;
        /* Uneven: split in whole kv groups (q's unit = its heads per kv head). */
        m->values[head_side].type.unit[2] = uneven && Hk > 0 && real % Hk == 0 ? real / Hk : 0;
        if (f > F) F = f;
    }
    const char *key = to_heads ? "fanout" : "fanin";
    ir_attr_remove(op, key);
    if (F > 1) {
        /* layer and phase stay last so the op reads like every other one */
        int layer = ir_op_layer(op);
        char phase[IR_NAME_MAX];
        snprintf(phase, sizeof phase, "%s", ir_op_phase(op));
        ir_attr_remove(op, "layer");
        ir_attr_remove(op, "phase");
        ir_attr_set_int(op, key, F);
        ir_op_tag(op, layer, phase[0] ? phase : "fwd");
    }
}

/* The kv heads are those of one head chunk (pass_layout_dims), which is
 * what each exchange of head-chunked attention splits. */
void pass_fix_virtual_heads(ir_module *m, int sp) {
    int K = m->groups[sp].set_size;
    layout_dims d = pass_layout_dims(m);
    bool uneven = pu_heads_uneven(m, K);
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == IR_ALL_TO_ALL && ir_op_group(&m->ops[i]) == sp)
            fix_exchange(m, &m->ops[i], K, d.Hk, uneven);
}

void pass_shard_batch(ir_module *m, int sp, int dp) {
    for (int v = 0; v < m->nvalues; v++) {
        ir_type *t = &m->values[v].type;
        bool on_sp = false;
        for (int k = 0; k < t->rank; k++) on_sp |= t->shard[k] == sp;
        if (on_sp && t->rank >= 2) t->shard[0] = dp;
    }
}

static int swapped(int g, int a, int b) { return g == a ? b : g == b ? a : g; }

void pu_group_swap(ir_module *m, int a, int b) {
    ir_group t = m->groups[a];
    m->groups[a] = m->groups[b];
    m->groups[b] = t;
    for (int v = 0; v < m->nvalues; v++)
        for (int k = 0; k < m->values[v].type.rank; k++)
            m->values[v].type.shard[k] = swapped(m->values[v].type.shard[k], a, b);
    for (int i = 0; i < m->nops; i++)
        for (int k = 0; k < m->ops[i].nattrs; k++)
            if (m->ops[i].attrs[k].kind == IR_A_GROUP) m->ops[i].attrs[k].i = swapped((int)m->ops[i].attrs[k].i, a, b);
}

/* The head-sharded twin of v made by the forward exchanges: the output of
 * an all_to_all on sp reading v, or the input of one producing v. */
int pass_heads_twin(const ir_module *m, int sp, int v) {
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if (op->code != IR_ALL_TO_ALL || ir_op_group(op) != sp) continue;
        for (int k = 0; k < op->nin && k < op->nout; k++) {
            if (op->in[k] == v && ir_attr_int(op, "split", 0) == 2) return op->out[k];
            if (op->out[k] == v && ir_attr_int(op, "split", 0) == 1) return op->in[k];
        }
    }
    return v;
}

/* pass_heads_twin for every value at once (a malloc'd array of m->nvalues):
 * the first matching exchange in schedule order wins, as in the scan, so a
 * pass wrapping every backward looks each twin up instead of rescanning. */
int *pass_heads_twins(const ir_module *m, int sp) {
    int n = m->nvalues;
    int *twin = sup_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *twin);
    bool *set = sup_xcalloc((size_t)(n > 0 ? n : 1), sizeof *set);
    for (int v = 0; v < n; v++) twin[v] = v;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if (op->code != IR_ALL_TO_ALL || ir_op_group(op) != sp) continue;
        int64_t split = ir_attr_int(op, "split", 0);
        for (int k = 0; k < op->nin && k < op->nout; k++) {
            int from = split == 2 ? op->in[k] : split == 1 ? op->out[k] : -1;
            int to = split == 2 ? op->out[k] : op->in[k];
            if (from < 0 || from >= n || set[from]) continue;
            twin[from] = to;
            set[from] = true;
        }
    }
    free(set);
    return twin;
}

/* ---- deferred insertion ---------------------------------------------------- */
static void pass_edit_add(pass_edits *e, int gap, int after, const ir_op *op) {
    SUP_GROW(e->items, e->n, e->cap);
    e->items[e->n] = (struct pass_edit){.gap = gap, .after = after, .seq = e->n, .op = *op};
    e->n++;
}

void pass_insert_before(pass_edits *e, int pos, const ir_op *op) { pass_edit_add(e, pos, 0, op); }

void pass_insert_after(pass_edits *e, int pos, const ir_op *op) { pass_edit_add(e, pos + 1, 1, op); }

/* By gap; inside a gap the "after" ops latest first, then the "before" ops
 * in recording order. */
static int pass_edit_cmp(const void *pa, const void *pb) {
    const struct pass_edit *a = pa, *b = pb;
    if (a->gap != b->gap) return a->gap < b->gap ? -1 : 1;
    if (a->after != b->after) return a->after ? -1 : 1;
    return a->after ? (a->seq < b->seq) - (a->seq > b->seq) : (a->seq > b->seq) - (a->seq < b->seq);
}

void pass_edits_remove(pass_edits *e, int pos) {
    SUP_GROW(e->removed, e->nremoved, e->capremoved);
    e->removed[e->nremoved++] = pos;
}

void pass_edits_apply(ir_module *m, pass_edits *e) {
    if (e->n > 0 || e->nremoved > 0) {
        qsort(e->items, (size_t)e->n, sizeof *e->items, pass_edit_cmp);
        bool *drop = sup_xcalloc((size_t)m->nops + 1, sizeof *drop);
        int ndrop = 0;
        for (int k = 0; k < e->nremoved; k++)
            if (e->removed[k] >= 0 && e->removed[k] < m->nops && !drop[e->removed[k]])
                drop[e->removed[k]] = true, ndrop++;
        int total = m->nops + e->n - ndrop;
        ir_op *ops = sup_xmalloc((size_t)(total > 0 ? total : 1) * sizeof *ops);
        int k = 0, j = 0;
        for (int i = 0; i <= m->nops; i++) {
            for (; j < e->n && e->items[j].gap <= i; j++) ops[k++] = e->items[j].op;
            if (i < m->nops && !drop[i]) ops[k++] = m->ops[i];
        }
        free(drop);
        free(m->ops);
        m->ops = ops;
        m->nops = m->capops = total;
    }
    free(e->items);
    free(e->removed);
    memset(e, 0, sizeof *e);
    ir_renumber(m);
}
