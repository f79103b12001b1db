/* pass_ulysses.c — DeepSpeed-Ulysses sequence parallelism.
 *
 * Input: the lowered step (nothing sharded).  Output: every activation's
 * sequence dimension (dim 1) sharded over @sp = all N ranks, and around each
 * attention the all-to-alls that trade the sequence shard for a head shard:
 *
 *   %qr.heads, %kr.heads, %v.heads = all_to_all %qr, %kr, %v {split = 2, concat = 1}
 *   %o.heads = attention %qr.heads, %kr.heads, %v.heads       (all S, H/N heads)
 *   %o = all_to_all %o.heads {split = 1, concat = 2}           (back to S/N)
 *
 * and in the backward the mirror image: d_o is exchanged seq→heads,
 * attention_bwd reads the head-sharded q, k, v, o saved by the forward, and
 * dq, dk, dv are exchanged back in one call.
 *
 * GQA: with K ranks and Hk KV heads, K > Hk means each KV head serves
 * F = K/Hk ranks.  The KV heads are never replicated to H before the send
 * (that would move H/Hk times more data): the k,v exchange carries
 * `fanout = F`, its result has Hk*F "virtual" heads (one per rank), and
 * attention's GQA broadcast fans each out to the rank's local q heads.  The
 * dk,dv exchange carries `fanin = F` and sums the F partial gradients.  q
 * shares the fused call: a pair whose head count does not grow (q's H >= K)
 * is a plain split under the same attribute (see ir/README.md).
 *
 * The ranks: @sp = G contiguous groups of K = N/G, G = the set size of the
 * @dp batch-aware made (1 without it).  The pass never splits the batch
 * itself: when K ranks cannot split the heads, KV heads or the sequence
 * (layout_illegal), it is an error that names the rule and the batch-aware
 * group counts that would be legal.
 * K = 1 is pure data parallelism: the exchanges are identities and are
 * removed.  Config `sequence = ring|hybrid`: not this pass's layout; skipped. */
#include "pass_util.h"

#include <stdlib.h>
#include <string.h>

/* Wraps the attention at index i: records the exchanges before and after it
 * and rewires it to the head-sharded values. */
static void wrap_attention(ir_module *m, pass_edits *e, int i, int sp) {
    ir_op att = m->ops[i];
    int ins[3], outs[3];
    for (int k = 0; k < 3; k++) {
        ins[k] = att.in[k];
        outs[k] = pass_value_derived(m, ins[k], ".heads", pass_heads_type(m->values[ins[k]].type, sp, 1));
    }
    ir_op before = pass_exchange(sp, 3, ins, outs, true, 1, &att);
    pass_insert_before(e, i, &before);
    int o = att.out[0];
    int oh = pass_value_derived(m, o, ".heads", pass_heads_type(m->values[o].type, sp, 1));
    for (int k = 0; k < 3; k++) m->ops[i].in[k] = outs[k];
    m->ops[i].out[0] = oh;
    ir_op after = pass_exchange(sp, 1, &oh, &o, false, 1, &att);
    pass_insert_after(e, i, &after);
}

/* Wraps the attention_bwd at index i; twin: pass_heads_twins of the
 * schedule with the forward exchanges in it. */
static void wrap_attention_bwd(ir_module *m, pass_edits *e, int i, int sp, const int *twin) {
    ir_op ab = m->ops[i];
    int d_o = ab.in[0];
    int doh = pass_value_derived(m, d_o, ".heads", pass_heads_type(m->values[d_o].type, sp, 1));
    ir_op before = pass_exchange(sp, 1, &d_o, &doh, true, 1, &ab);
    pass_insert_before(e, i, &before);
    ir_op *op = &m->ops[i];
    op->in[0] = doh;
    for (int k = 1; k < 5; k++) op->in[k] = twin[ab.in[k]];
    int hs[3];
    for (int k = 0; k < 3; k++) {
        hs[k] = pass_value_derived(m, ab.out[k], ".heads", pass_heads_type(m->values[ab.out[k]].type, sp, 1));
        m->ops[i].out[k] = hs[k];
    }
    ir_op after = pass_exchange(sp, 3, hs, ab.out, false, 1, &ab);
    pass_insert_after(e, i, &after);
}

/* ---- head-chunked attention (config attention_chunks = C > 1) -------------------
 * The exchange, the attention and the exchange back run once per chunk of
 * H/C heads (Hk/C kv heads: whole kv groups), one chunk after the other,
 * so only one chunk's full-sequence tensors are alive at a time:
 *
 *   %qr.c1, %kr.c1, %v.c1 = head_slice %qr, %kr, %v {chunk = 1, chunks = C}
 *   %qr.c1.heads, ... = all_to_all %qr.c1, %kr.c1, %v.c1 {split = 2, concat = 1}
 *   %o.c1.heads, %o.c1.lse = attention %qr.c1.heads, %kr.c1.heads, %v.c1.heads
 *   %o.c1 = all_to_all %o.c1.heads {split = 1, concat = 2}
 *   ...
 *   %o = head_concat %o.c0, ..., %o.c{C-1} {chunks = C}
 *
 * The backward keeps nothing in the head layout: per chunk it slices and
 * exchanges q, k, v, o and d_o again (two calls: q, k, v with the kv
 * fan-out; o and d_o), runs attention_bwd with the forward's row
 * statistics (%o.cN.lse, a value of the step, so the memory plan and the
 * offload pass see them), exchanges dq, dk, dv back and concatenates. */

/* Chunk c of each of vals[0..n): sliced values (suffix .c<c>) and their
 * head-layout twins; records the slice and the exchange before op i. */
static void slice_and_exchange(ir_module *m, pass_edits *e, int i, int sp, const int *vals, int n, int c, int C,
                               int *heads, const ir_op *like) {
    int sl[4];
    char suffix[16];
    snprintf(suffix, sizeof suffix, ".c%d", c);
    for (int k = 0; k < n; k++) {
        sl[k] = pass_value_derived(m, vals[k], suffix, pu_chunk_type(m, vals[k], C));
        heads[k] = pass_value_derived(m, sl[k], ".heads", pass_heads_type(m->values[sl[k]].type, sp, 1));
    }
    ir_op s = pu_head_slice_op(vals, sl, n, c, C, like);
    pass_insert_before(e, i, &s);
    ir_op x = pass_exchange(sp, n, sl, heads, true, 1, like);
    pass_insert_before(e, i, &x);
}

static void wrap_attention_chunked(ir_module *m, const void *ctx, pass_edits *e, int i, int C, pu_chunked *rec) {
    int sp = *(const int *)ctx;
    ir_op att = m->ops[i];
    int oc[PU_MAX_CHUNKS];
    rec->qr = att.in[0];
    for (int c = 0; c < C; c++) {
        int h[3];
        slice_and_exchange(m, e, i, sp, att.in, 3, c, C, h, &att);
        char suffix[16];
        snprintf(suffix, sizeof suffix, ".c%d", c);
        oc[c] = pass_value_derived(m, att.out[0], suffix, pu_chunk_type(m, att.out[0], C));
        int oh = pass_value_derived(m, oc[c], ".heads", pass_heads_type(m->values[oc[c]].type, sp, 1));
        rec->lse[c] = pass_value_derived(m, oc[c], ".lse", pu_lse_type(&m->values[h[0]].type));
        ir_op a = att; /* its attributes (causal, layer, phase) */
        a.nin = a.nout = 0;
        for (int k = 0; k < 3; k++) ir_op_add_input(&a, h[k]);
        ir_op_add_output(&a, oh);
        ir_op_add_output(&a, rec->lse[c]);
        pass_insert_before(e, i, &a);
        ir_op back = pass_exchange(sp, 1, &oh, &oc[c], false, 1, &att);
        pass_insert_before(e, i, &back);
    }
    ir_op cat = pu_head_concat_op(oc, C, att.out[0], &att);
    pass_insert_before(e, i, &cat);
    pass_edits_remove(e, i);
}

static void wrap_attention_bwd_chunked(ir_module *m, const void *ctx, pass_edits *e, int i, int C,
                                       const pu_chunked *rec) {
    int sp = *(const int *)ctx;
    ir_op ab = m->ops[i];
    int d[3][PU_MAX_CHUNKS]; /* dq, dk, dv chunks */
    for (int c = 0; c < C; c++) {
        int qkv[3] = {ab.in[1], ab.in[2], ab.in[3]}, od[2] = {ab.in[4], ab.in[0]}, hq[3], ho[2], dh[3];
        slice_and_exchange(m, e, i, sp, qkv, 3, c, C, hq, &ab);
        slice_and_exchange(m, e, i, sp, od, 2, c, C, ho, &ab);
        char suffix[16];
        snprintf(suffix, sizeof suffix, ".c%d", c);
        ir_op b = ab;
        b.nin = b.nout = 0;
        int ins[6] = {ho[1], hq[0], hq[1], hq[2], ho[0], rec->lse[c]};
        for (int k = 0; k < 6; k++) ir_op_add_input(&b, ins[k]);
        for (int k = 0; k < 3; k++) {
            d[k][c] = pass_value_derived(m, ab.out[k], suffix, pu_chunk_type(m, ab.out[k], C));
            dh[k] = pass_value_derived(m, d[k][c], ".heads", pass_heads_type(m->values[d[k][c]].type, sp, 1));
            ir_op_add_output(&b, dh[k]);
        }
        pass_insert_before(e, i, &b);
        int dc[3] = {d[0][c], d[1][c], d[2][c]};
        ir_op back = pass_exchange(sp, 3, dh, dc, false, 1, &ab);
        pass_insert_before(e, i, &back);
    }
    for (int k = 0; k < 3; k++) {
        ir_op cat = pu_head_concat_op(d[k], C, ab.out[k], &ab);
        pass_insert_before(e, i, &cat);
    }
    pass_edits_remove(e, i);
}

/* After the exchanges got their fan-outs and units: each lse is laid out
 * like its chunk's q in the head layout. */
static void fix_lse(ir_module *m) {
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if (op->code != IR_ATTENTION || op->nout != 2) continue;
        const ir_type *q = &m->values[op->in[0]].type;
        ir_type *l = &m->values[op->out[1]].type;
        l->dims[2] = q->dims[2];
        l->unit[2] = q->unit[2];
    }
}

/* K = 1: every all-to-all on @sp is an identity.  The surviving value takes
 * the removed one's name when it was its ".heads" twin, so the IR keeps the
 * names of the unsharded step. */
static int remove_exchanges(ir_module *m, int sp) {
    /* rep[v]: the value that stands for v once the exchanges are gone.  An
     * exchange's output is read only after it, so resolving every read
     * through rep (chains included: an output's input was resolved first)
     * rewires what replacing the uses after each exchange would, in one
     * sweep instead of one per exchange. */
    int *rep = sup_xmalloc((size_t)(m->nvalues > 0 ? m->nvalues : 1) * sizeof *rep);
    bool *drop = sup_xcalloc((size_t)m->nops + 1, sizeof *drop);
    for (int v = 0; v < m->nvalues; v++) rep[v] = v;
    int removed = 0;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if (op->code != IR_ALL_TO_ALL || ir_op_group(op) != sp) continue;
        for (int k = 0; k < op->nin && k < op->nout; k++) rep[op->out[k]] = rep[op->in[k]];
        drop[i] = true;
        removed++;
    }
    /* Renaming runs latest exchange first, as the names were always traded. */
    for (int i = m->nops - 1; i >= 0; i--) {
        if (!drop[i]) continue;
        const ir_op *op = &m->ops[i];
        for (int k = 0; k < op->nin && k < op->nout; k++) {
            const char *in = m->values[op->in[k]].name, *out = m->values[op->out[k]].name;
            size_t n = strlen(out);
            if (strncmp(in, out, n) == 0 && strcmp(in + n, ".heads") == 0)
                ir_value_swap_names(m, op->in[k], op->out[k]);
        }
    }
    int kept = 0;
    for (int i = 0; i < m->nops; i++) {
        if (drop[i]) continue;
        ir_op *op = &m->ops[i];
        for (int k = 0; k < op->nin; k++)
            if (op->in[k] >= 0 && op->in[k] < m->nvalues) op->in[k] = rep[op->in[k]];
        if (kept != i) m->ops[kept] = *op;
        kept++;
    }
    m->nops = kept;
    free(rep);
    free(drop);
    for (int v = 0; v < m->nvalues; v++)
        for (int k = 0; k < m->values[v].type.rank; k++)
            if (m->values[v].type.shard[k] == sp) m->values[v].type.shard[k] = -1;
    ir_renumber(m);
    return removed;
}

/* An error naming why K ranks cannot split, and the G that would be legal. */
static bool check_split(ir_module *m, int G) {
    layout_dims d = pass_layout_dims(m);
    layout_choice c = pass_layout_of(m);
    c.groups = G;
    const char *reason = layout_illegal(&d, &c, NULL, 0);
    if (!reason) return true;
    char why[256], gs[192] = "";
    snprintf(why, sizeof why, "%s", reason); /* the enumeration below reuses the reason's buffer */
    int64_t g[64];
    int n = layout_legal_groups(&d, &c, g, 64);
    for (int i = 0; i < n && i < 64; i++) {
        size_t len = strlen(gs);
        snprintf(gs + len, sizeof gs - len, "%s%lld", len ? ", " : "", (long long)g[i]);
    }
    int N = ir_seq_world(m);
    if (G == 1)
        sup_error(sup_noloc(), "ulysses: cannot shard over all %d ranks: %s", N, why);
    else
        sup_error(sup_noloc(), "ulysses: cannot shard over groups of %d ranks (G=%d): %s", N / G, G, why);
    if (gs[0])
        sup_note(sup_noloc(),
                 "batch-aware groups shrink the split to K = %d/G; legal: `batch_aware groups G` "
                 "with G in {%s}",
                 N, gs);
    else
        sup_note(sup_noloc(), "no batch-aware group count makes the split legal either; change heads, "
                              "kv_heads, seq_len or the mesh");
    return false;
}

bool pass_ulysses(ir_module *m, const pass_options *opt) {
    const char *seq = pu_cfg(m, "sequence", "ulysses");
    if (strcmp(seq, "ulysses") != 0) {
        pu_remark(opt, "ulysses: layout sequence is '%s'; skipped", seq);
        return true;
    }
    int sp = ir_group_find(m, "sp");
    if (sp >= 0) {
        pu_remark(opt, "ulysses: already applied (group @sp exists); skipped");
        return true;
    }
    int natt = pu_count_ops(m, IR_ATTENTION);
    if (natt == 0) {
        pu_remark(opt, "ulysses: no attention in the module; skipped");
        return true;
    }
    int N = ir_seq_world(m), G = pu_batch_groups(m, opt, "ulysses"), K = N / G;
    if (!check_split(m, G)) return false;
    int C = (int)pu_attention_chunks(m);
    if (!pu_check_chunks(m, C, "ulysses")) return false;
    sp = pu_sequence_group(m, G);
    if (C > 1) {
        const pu_chunker k = {"ulysses", &sp, wrap_attention_chunked, wrap_attention_bwd_chunked};
        if (!pu_wrap_chunked(m, &k, C)) return false;
    } else {
        pass_edits edits = {0};
        for (int i = 0; i < m->nops; i++)
            if (m->ops[i].code == IR_ATTENTION) wrap_attention(m, &edits, i, sp);
        pass_edits_apply(m, &edits);
        int *twin = pass_heads_twins(m, sp);
        for (int i = 0; i < m->nops; i++)
            if (m->ops[i].code == IR_ATTENTION_BWD) wrap_attention_bwd(m, &edits, i, sp, twin);
        free(twin);
        pass_edits_apply(m, &edits); /* renumbers */
    }
    pass_fix_virtual_heads(m, sp);
    if (C > 1) fix_lse(m);
    ir_config_set_int(m, "sp_size", K);
    ir_config_set_int(m, "batch_groups", G);
    pu_remark(opt, "ulysses: sequence sharded over @sp (%d ranks); %d attention(s) wrapped in all-to-alls", K, natt);
    if (C > 1)
        pu_remark(opt, "ulysses: attention in %d head chunks of %lld heads (%lld kv) each, one after another", C,
                  (long long)(pu_model_dims(m).H / C), (long long)(pass_layout_dims(m).Hk));
    if (K == 1)
        pu_remark(opt, "ulysses: K=1 is pure data parallelism; removed %d all-to-all(s) (identities)",
                  remove_exchanges(m, sp));
    return true;
}
