/* pass_ring.c — Ulysses x Ring (config sequence = ring | hybrid).
 *
 * Input: the unsharded step (with @dp when batch-aware split the batch
 * first).  With N = G*K ranks (G from config `groups`, 1 by default) and a
 * ring degree R (config `ring_degree`; `sequence ring` is R = K), each
 * batch group's K ranks form R Ulysses groups of U = K/R ranks:
 *
 *   @sp    G contiguous sets of K ranks: the sequence shard of every activation
 *   @ul    sets of U consecutive ranks inside an @sp set (one ring position)
 *   @ring  sets of R ranks, the ones with the same position inside their @ul set
 *
 * so @sp = @ring x @ul (position r*U + u; ir_group_nested).  Around each
 * attention the Ulysses exchange runs inside @ul only: it gathers the
 * sequence from @sp to @ring (this ring position's share) and scatters the
 * heads over @ul; ring attention then passes the kv blocks around @ring:
 *
 *   %qr.heads, %kr.heads, %v.heads = all_to_all %qr, %kr, %v {group = @ul, split = 2, concat = 1}
 *   %o.heads, %o.lse = ring_attention %qr.heads, %kr.heads, %v.heads {group = @ring}
 *   %o = all_to_all %o.heads {group = @ul, split = 1, concat = 2}
 *
 * and the mirror image in the backward, where ring_attention_bwd reads the
 * forward's lse.  U = 1 (`sequence ring`): no exchange, ring attention over
 * @sp itself.  GQA: with U > kv heads the kv exchange fans out as Ulysses
 * does (pass_ulysses.c).
 *
 * The causal mask makes a plain ring unbalanced (position 0 only has the
 * first block to attend to), so the sequence is kept in the zig-zag order
 * of config `seq_ring = R`: each sequence is cut into 2R chunks and ring
 * position r holds chunks r and 2R-1-r (the runtime's loader, RoPE and the
 * masks read the original positions; runtime/include/basp_rt.h). */
#include "pass_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct ring_ctx {
    int sp, ul, ring; /* ul = -1 for sequence ring */
    int64_t F;        /* kv fan-out inside @ul */
    int *twin, ntwin; /* pass_heads_twins over @ul once the forward is wrapped (NULL when ul = -1) */
} ring_ctx;

/* @ring: set (s, u) = {base + r*U + u : r = 0..R-1} for sp set s. */
static int add_ring_group(ir_module *m, int N, int K, int U) {
    int R = K / U, *ranks = sup_xmalloc(sizeof(int) * (size_t)N), n = 0;
    for (int base = 0; base < N; base += K)
        for (int u = 0; u < U; u++)
            for (int r = 0; r < R; r++) ranks[n++] = base + r * U + u;
    int g = ir_group_add(m, "ring", N / R, R, ranks);
    free(ranks);
    return g;
}

/* The head-sharded type inside a ring position: [B, S@ring, H@ul, Dh]. */
static ir_type heads_type(const ring_ctx *c, ir_type t, bool kv) {
    ir_type h = pass_heads_type(t, c->ul, kv ? c->F : 1);
    h.shard[1] = c->ring;
    return h;
}

/* attention(q, k, v) -> o at index i becomes ring_attention (-> o, lse),
 * wrapped in the @ul exchanges when U > 1. */
static void wrap_attention(ir_module *m, const ring_ctx *c, pass_edits *e, int i) {
    ir_op att = m->ops[i];
    int ins[3], outs[3], o = att.out[0], oh = o;
    for (int k = 0; k < 3; k++) ins[k] = outs[k] = att.in[k];
    if (c->ul >= 0) {
        for (int k = 0; k < 3; k++)
            outs[k] = pass_value_derived(m, ins[k], ".heads", heads_type(c, m->values[ins[k]].type, k > 0));
        ir_op before = pass_exchange(c->ul, 3, ins, outs, true, c->F, &att);
        pass_insert_before(e, i, &before);
        oh = pass_value_derived(m, o, ".heads", heads_type(c, m->values[o].type, false));
        ir_op after = pass_exchange(c->ul, 1, &oh, &o, false, 1, &att);
        pass_insert_after(e, i, &after);
    }
    int lse = pass_value_derived(m, o, ".lse", pu_lse_type(&m->values[oh].type));
    ir_op ra = ir_op_make(IR_RING_ATTENTION);
    for (int k = 0; k < 3; k++) ir_op_add_input(&ra, outs[k]);
    ir_op_add_output(&ra, oh);
    ir_op_add_output(&ra, lse);
    ir_attr_set_group(&ra, "group", c->ring);
    pu_tag_like(&ra, &att);
    m->ops[i] = ra;
}

/* The forward twin of a value the backward reads: its ".heads" exchange
 * result over @ul (U > 1), else the value itself. */
static int heads_twin(const ring_ctx *c, int v) { return c->twin && v >= 0 && v < c->ntwin ? c->twin[v] : v; }

/* attention_bwd(do, q, k, v, o) -> dq, dk, dv at index i becomes
 * ring_attention_bwd(do, q, k, v, o, lse), wrapped when U > 1. */
static void wrap_attention_bwd(ir_module *m, const ring_ctx *c, pass_edits *e, int i, int lse) {
    ir_op ab = m->ops[i];
    ir_op rb = ir_op_make(IR_RING_ATTENTION_BWD);
    int d_o = ab.in[0], hs[3];
    if (c->ul >= 0) {
        int doh = pass_value_derived(m, d_o, ".heads", heads_type(c, m->values[d_o].type, false));
        ir_op before = pass_exchange(c->ul, 1, &d_o, &doh, true, 1, &ab);
        pass_insert_before(e, i, &before);
        d_o = doh;
    }
    ir_op_add_input(&rb, d_o);
    for (int k = 1; k < 5; k++) ir_op_add_input(&rb, heads_twin(c, ab.in[k]));
    ir_op_add_input(&rb, lse);
    for (int k = 0; k < 3; k++) {
        hs[k] = ab.out[k];
        if (c->ul >= 0)
            hs[k] = pass_value_derived(m, ab.out[k], ".heads", heads_type(c, m->values[ab.out[k]].type, k > 0));
        ir_op_add_output(&rb, hs[k]);
    }
    ir_attr_set_group(&rb, "group", c->ring);
    pu_tag_like(&rb, &ab);
    m->ops[i] = rb;
    if (c->ul >= 0) {
        ir_op after = pass_exchange(c->ul, 3, hs, ab.out, false, c->F, &ab);
        pass_insert_after(e, i, &after);
    }
}

/* ---- head chunks (config attention_chunks = C > 1) --------------------------
 * As in pass_ulysses.c: the ring attention of each chunk of H/C heads (Hk/C
 * kv heads) runs in turn, wrapped in its @ul exchanges when U > 1, and the
 * chunks are concatenated; the backward slices (and exchanges) q, k, v, o
 * and d_o again per chunk and reads that chunk's lse. */

/* Chunk ch of vals[0..n) (kv[k]: a kv operand, fanned out inside @ul):
 * sliced, and with U > 1 exchanged into @ul's head layout; heads[k] is
 * what the ring op reads.  Records the ops before op i. */
static void ring_slice(ir_module *m, const ring_ctx *c, pass_edits *e, int i, const int *vals, const bool *kv, int n,
                       int ch, int C, int *heads, const ir_op *like) {
    int sl[4];
    bool fan = false;
    char suffix[16];
    snprintf(suffix, sizeof suffix, ".c%d", ch);
    for (int k = 0; k < n; k++) {
        sl[k] = pass_value_derived(m, vals[k], suffix, pu_chunk_type(m, vals[k], C));
        heads[k] =
            c->ul < 0 ? sl[k] : pass_value_derived(m, sl[k], ".heads", heads_type(c, m->values[sl[k]].type, kv[k]));
        fan |= kv[k];
    }
    ir_op s = pu_head_slice_op(vals, sl, n, ch, C, like);
    pass_insert_before(e, i, &s);
    if (c->ul < 0) return;
    ir_op x = pass_exchange(c->ul, n, sl, heads, true, fan ? c->F : 1, like);
    pass_insert_before(e, i, &x);
}

static void wrap_attention_chunked(ir_module *m, const void *ctx, pass_edits *e, int i, int C, pu_chunked *rec) {
    const ring_ctx *c = ctx;
    ir_op att = m->ops[i];
    int oc[PU_MAX_CHUNKS];
    static const bool kv[3] = {false, true, true};
    rec->qr = att.in[0];
    for (int ch = 0; ch < C; ch++) {
        int h[3];
        ring_slice(m, c, e, i, att.in, kv, 3, ch, C, h, &att);
        char suffix[16];
        snprintf(suffix, sizeof suffix, ".c%d", ch);
        oc[ch] = pass_value_derived(m, att.out[0], suffix, pu_chunk_type(m, att.out[0], C));
        int oh =
            c->ul < 0 ? oc[ch] : pass_value_derived(m, oc[ch], ".heads", heads_type(c, m->values[oc[ch]].type, false));
        rec->lse[ch] = pass_value_derived(m, oc[ch], ".lse", pu_lse_type(&m->values[oh].type));
        ir_op ra = ir_op_make(IR_RING_ATTENTION);
        for (int k = 0; k < 3; k++) ir_op_add_input(&ra, h[k]);
        ir_op_add_output(&ra, oh);
        ir_op_add_output(&ra, rec->lse[ch]);
        ir_attr_set_group(&ra, "group", c->ring);
        pu_tag_like(&ra, &att);
        pass_insert_before(e, i, &ra);
        if (c->ul >= 0) {
            ir_op back = pass_exchange(c->ul, 1, &oh, &oc[ch], false, 1, &att);
            pass_insert_before(e, i, &back);
        }
    }
    ir_op cat = pu_head_concat_op(oc, C, att.out[0], &att);
    pass_insert_before(e, i, &cat);
    pass_edits_remove(e, i);
}

static void wrap_attention_bwd_chunked(ir_module *m, const void *ctx, pass_edits *e, int i, int C,
                                       const pu_chunked *rec) {
    const ring_ctx *c = ctx;
    ir_op ab = m->ops[i];
    int d[3][PU_MAX_CHUNKS];
    static const bool kv3[3] = {false, true, true}, kv2[2] = {false, false};
    for (int ch = 0; ch < C; ch++) {
        int qkv[3] = {ab.in[1], ab.in[2], ab.in[3]}, od[2] = {ab.in[4], ab.in[0]}, hq[3], ho[2], dh[3];
        ring_slice(m, c, e, i, qkv, kv3, 3, ch, C, hq, &ab);
        ring_slice(m, c, e, i, od, kv2, 2, ch, C, ho, &ab);
        char suffix[16];
        snprintf(suffix, sizeof suffix, ".c%d", ch);
        ir_op rb = ir_op_make(IR_RING_ATTENTION_BWD);
        int ins[6] = {ho[1], hq[0], hq[1], hq[2], ho[0], rec->lse[ch]};
        for (int k = 0; k < 6; k++) ir_op_add_input(&rb, ins[k]);
        for (int k = 0; k < 3; k++) {
            d[k][ch] = pass_value_derived(m, ab.out[k], suffix, pu_chunk_type(m, ab.out[k], C));
            dh[k] = c->ul < 0
                        ? d[k][ch]
                        : pass_value_derived(m, d[k][ch], ".heads", heads_type(c, m->values[d[k][ch]].type, k > 0));
            ir_op_add_output(&rb, dh[k]);
        }
        ir_attr_set_group(&rb, "group", c->ring);
        pu_tag_like(&rb, &ab);
        pass_insert_before(e, i, &rb);
        if (c->ul >= 0) {
            int dc[3] = {d[0][ch], d[1][ch], d[2][ch]};
            ir_op back = pass_exchange(c->ul, 3, dh, dc, false, c->F, &ab);
            pass_insert_before(e, i, &back);
        }
    }
    for (int k = 0; k < 3; k++) {
        ir_op cat = pu_head_concat_op(d[k], C, ab.out[k], &ab);
        pass_insert_before(e, i, &cat);
    }
    pass_edits_remove(e, i);
}

/* lse[o]: the lse made by the first ring_attention whose output is o (the
 * forward's), -1 when none; one array so the backward finds each at once. */
static int *lse_by_output(const ir_module *m) {
    int *lse = sup_xmalloc((size_t)(m->nvalues > 0 ? m->nvalues : 1) * sizeof *lse);
    for (int v = 0; v < m->nvalues; v++) lse[v] = -1;
    for (int i = m->nops - 1; i >= 0; i--) /* latest first: the first op's lse is written last */
        if (m->ops[i].code == IR_RING_ATTENTION && m->ops[i].out[0] >= 0 && m->ops[i].out[0] < m->nvalues)
            lse[m->ops[i].out[0]] = m->ops[i].out[1];
    return lse;
}

/* Builds @sp (and @ul, @ring when U > 1) and shards the sequence; @sp is
 * listed before batch-aware's @dp, as in Ulysses (pu_sequence_group). */
static ring_ctx ring_layout(ir_module *m, int N, int G, int K, int R) {
    ring_ctx c = {.ul = -1, .F = 1};
    int U = K / R;
    c.sp = pu_sequence_group(m, G);
    c.ring = c.sp;
    if (U > 1) {
        c.ul = ir_group_add_contiguous(m, "ul", N / U);
        c.ring = add_ring_group(m, N, K, U);
        int64_t Hk = pass_layout_dims(m).Hk;
        c.F = Hk > 0 && U > Hk ? U / Hk : 1;
    }
    return c;
}

/* The config the ring layout leaves, and its remark. */
static bool ring_finish(ir_module *m, const pass_options *opt, const ring_ctx *c, int natt, int G, int K, int R) {
    ir_config_set_int(m, "sp_size", K);
    ir_config_set_int(m, "batch_groups", G);
    ir_config_set_int(m, "ring_size", R);
    ir_config_set_int(m, "seq_ring", R);
    int C = (int)pu_attention_chunks(m);
    pu_remark(opt, "ring: sequence sharded over @sp (%d ranks) in zig-zag order; %d attention(s) as a ring of %d%s%s",
              K, natt, R, c->ul >= 0 ? " with Ulysses inside @ul" : "", C > 1 ? ", in head chunks" : "");
    return true;
}

bool pass_ring(ir_module *m, const pass_options *opt) {
    const char *seq = pu_cfg(m, "sequence", "ulysses");
    if (strcmp(seq, "ring") && strcmp(seq, "hybrid")) {
        pu_remark(opt, "ring: layout sequence is '%s'; skipped", seq);
        return true;
    }
    if (ir_group_find(m, "sp") >= 0 || pu_count_ops(m, IR_RING_ATTENTION)) {
        pu_remark(opt, "ring: the sequence is already sharded (group @sp exists); skipped");
        return true;
    }
    int natt = pu_count_ops(m, IR_ATTENTION);
    if (natt == 0) {
        pu_remark(opt, "ring: no attention in the module; skipped");
        return true;
    }
    int N = ir_seq_world(m), G = pu_batch_groups(m, opt, "ring"), K = N / G;
    int R = strcmp(seq, "ring") == 0 ? K : pass_layout_of(m).ring_degree;
    const char *why = pass_layout_illegal(m, G, R);
    if (why) {
        sup_error(sup_noloc(), "ring: cannot build %s with G=%d groups of K=%d ranks and ring degree %d: %s", seq, G, K,
                  R, why);
        return false;
    }
    ring_ctx c = ring_layout(m, N, G, K, R);
    int C = (int)pu_attention_chunks(m);
    if (C > 1) {
        const pu_chunker k = {"ring", &c, wrap_attention_chunked, wrap_attention_bwd_chunked};
        if (!pu_check_chunks(m, C, "ring") || !pu_wrap_chunked(m, &k, C)) return false;
        return ring_finish(m, opt, &c, natt, G, K, R);
    }
    pass_edits edits = {0};
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == IR_ATTENTION) wrap_attention(m, &c, &edits, i);
    pass_edits_apply(m, &edits);
    c.twin = c.ul >= 0 ? pass_heads_twins(m, c.ul) : NULL;
    c.ntwin = m->nvalues;
    int *lse_of = lse_by_output(m), nv = m->nvalues;
    bool ok = true;
    for (int i = 0; i < m->nops; i++) {
        if (m->ops[i].code != IR_ATTENTION_BWD) continue;
        int o = heads_twin(&c, m->ops[i].in[4]);
        int lse = o >= 0 && o < nv ? lse_of[o] : -1;
        if (lse < 0) {
            sup_error(sup_noloc(), "ring: attention_bwd reads %%%s, which no ring_attention produced",
                      m->values[m->ops[i].in[4]].name);
            ok = false;
            break;
        }
        wrap_attention_bwd(m, &c, &edits, i, lse);
    }
    free(c.twin);
    free(lse_of);
    if (!ok) {
        free(edits.items);
        return false;
    }
    pass_edits_apply(m, &edits);
    return ring_finish(m, opt, &c, natt, G, K, R);
}
