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

/* Wraps the attention_bwd at index i (the forward exchanges must be in the
 * schedule already: pass_heads_twin finds them there). */
static void wrap_attention_bwd(ir_module *m, pass_edits *e, int i, int sp) {
    ir_op ab = m->ops[i];
    int d_o = ab.in[0];
    int doh = pass_value_derived(m, d_o, ".heads", pass_heads_type(m->values[d_o].type, sp, 1));
    ir_op before = pass_exchange(sp, 1, &d_o, &doh, true, 1, &ab);
    pass_insert_before(e, i, &before);
    ir_op *op = &m->ops[i];
    op->in[0] = doh;
    for (int k = 1; k < 5; k++) op->in[k] = pass_heads_twin(m, sp, ab.in[k]);
    int hs[3];
    for (int k = 0; k < 3; k++) {
        hs[k] = pass_value_derived(m, ab.out[k], ".heads", pass_heads_type(m->values[ab.out[k]].type, sp, 1));
        m->ops[i].out[k] = hs[k];
    }
    ir_op after = pass_exchange(sp, 3, hs, ab.out, false, 1, &ab);
    pass_insert_after(e, i, &after);
}

/* K = 1: every all-to-all on @sp is an identity.  The surviving value takes
 * the removed one's name when it was its ".heads" twin, so the IR keeps the
 * names of the unsharded step. */
static int remove_exchanges(ir_module *m, int sp) {
    int removed = 0;
    for (int i = m->nops - 1; i >= 0; i--) {
        ir_op op = m->ops[i];
        if (op.code != IR_ALL_TO_ALL || ir_op_group(&op) != sp) continue;
        for (int k = 0; k < op.nin && k < op.nout; k++) {
            ir_replace_uses(m, op.out[k], op.in[k], i);
            const char *in = m->values[op.in[k]].name, *out = m->values[op.out[k]].name;
            size_t n = strlen(out);
            if (strncmp(in, out, n) == 0 && strcmp(in + n, ".heads") == 0) ir_value_swap_names(m, op.in[k], op.out[k]);
        }
        ir_op_remove(m, i);
        removed++;
    }
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
    int N = ir_world(m);
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
    int N = ir_world(m), G = pu_batch_groups(m, opt, "ulysses"), K = N / G;
    if (!check_split(m, G)) return false;
    sp = pu_sequence_group(m, G);
    pass_edits edits = {0};
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == IR_ATTENTION) wrap_attention(m, &edits, i, sp);
    pass_edits_apply(m, &edits);
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == IR_ATTENTION_BWD) wrap_attention_bwd(m, &edits, i, sp);
    pass_edits_apply(m, &edits); /* renumbers */
    pass_fix_virtual_heads(m, sp);
    ir_config_set_int(m, "sp_size", K);
    ir_config_set_int(m, "batch_groups", G);
    pu_remark(opt, "ulysses: sequence sharded over @sp (%d ranks); %d attention(s) wrapped in all-to-alls", K, natt);
    if (K == 1)
        pu_remark(opt, "ulysses: K=1 is pure data parallelism; removed %d all-to-all(s) (identities)",
                  remove_exchanges(m, sp));
    return true;
}
