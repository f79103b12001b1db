/* test_passes.c — unit tests of passes/: lowering a tiny spec, the
 * Ulysses and batch-aware rewrites (groups, layouts, GQA fanout), ZeRO, and
 * the traffic numbers of the schedule report against hand-computed values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

#include "check.h"

/* Relative to the expected value, with an absolute floor of 1. */
#define CHECK_NEAR(a, b) CHECK_NEAR_FLOOR(a, b, 1)

/* hidden 64, 2 layers, 4 heads (2 KV heads), head_dim 16, on 2 nodes x 4. */
static fe_spec tiny_spec(int64_t micro_batch, int64_t kv_heads, fe_batch_aware ba)
{
    fe_spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.model.name, sizeof s.model.name, "tiny");
    s.model.hidden = 64;
    s.model.layers = 2;
    s.model.heads = 8;
    s.model.kv_heads = kv_heads;
    s.model.head_dim = 8;
    s.model.ffn = 128;
    s.model.vocab = 256;
    s.model.rope_theta = 10000;
    s.model.norm_eps = 1e-5;
    s.mesh.nodes = 2;
    s.mesh.devices_per_node = 4;
    snprintf(s.mesh.device, sizeof s.mesh.device, "cpu");
    snprintf(s.mesh.intra.kind, sizeof s.mesh.intra.kind, "shm");
    snprintf(s.mesh.inter.kind, sizeof s.mesh.inter.kind, "tcp");
    s.mesh.intra.bandwidth = 1e10;
    s.mesh.inter.bandwidth = 1e9;
    s.train.micro_batch = micro_batch;
    s.train.seq_len = 64;
    snprintf(s.train.precision, sizeof s.train.precision, "bf16");
    snprintf(s.train.optimizer, sizeof s.train.optimizer, "adamw");
    s.train.lr = 3e-4;
    s.train.steps = 10;
    s.train.seed = 1;
    snprintf(s.layout.sequence, sizeof s.layout.sequence, "ulysses");
    s.layout.batch_aware = ba;
    return s;
}

static const ir_op *find_op(const ir_module *m, ir_opcode code, int nth)
{
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == code && nth-- == 0)
            return &m->ops[i];
    return NULL;
}

static const ir_type *vtype(const ir_module *m, const char *name)
{
    int v = ir_value_find(m, name);
    return v >= 0 ? &m->values[v].type : NULL;
}

static void test_lower(void)
{
    fe_spec s = tiny_spec(2, 2, FE_BA_AUTO);
    ir_module *m = pass_lower(&s);
    CHECK(m && ir_verify(m, "lower"));
    CHECK(ir_group_find(m, "world") == 0 && m->groups[0].set_size == 8);
    CHECK(ir_config_int(m, "heads", 0) == 8 && ir_config_int(m, "micro_batch", 0) == 2);
    CHECK(vtype(m, "l1.wq") && vtype(m, "l1.wq")->dims[1] == 8);
    CHECK(pass_op_traffic(m, find_op(m, IR_ADD, 0)).bytes_sent == 0); /* not a collective */
    int adamw = 0;
    for (int i = 0; i < m->nops; i++)
        adamw += m->ops[i].code == IR_ADAMW;
    CHECK(adamw == 1 + 2 * 9 + 2); /* embed, 9 per layer, final_norm, lm_head */
    ir_module_free(m);
}

/* Ulysses on 8 ranks, then batch-aware with B=2: @sp = {[0-3] [4-7]}. */
static void test_ulysses_batch_aware(void)
{
    fe_spec s = tiny_spec(2, 2, FE_BA_AUTO);
    ir_module *m = pass_lower(&s);
    pass_options o = pass_default_options();
    o.quiet = true;
    CHECK(pass_run(m, "ulysses", &o));
    int sp = ir_group_find(m, "sp");
    CHECK(sp >= 0 && m->groups[sp].nsets == 1 && m->groups[sp].set_size == 8);
    const ir_op *a2a = find_op(m, IR_ALL_TO_ALL, 0);
    CHECK(a2a && a2a->nin == 3 && ir_attr_int(a2a, "fanout", 1) == 4); /* K=8 > Hk=2 */
    CHECK(vtype(m, "l0.kr.heads")->dims[2] == 8);                       /* 2 real x 4 virtual */
    /* q: bf16 [2,64,8,8] / 8 ranks = 2048 B per rank.  k, v: the larger,
     * virtual-head side [2,64,8@sp,8] = 2048 B too.  chunk = 3*2048/8. */
    pass_traffic t = pass_op_traffic(m, a2a);
    CHECK_NEAR(t.bytes_sent, 3 * 2048.0 / 8 * 7);
    CHECK(t.peers == 7);
    CHECK_NEAR(t.inter_bytes, 3 * 2048.0 / 8 * 4); /* 4 of the 7 peers are on the other node */

    CHECK(pass_run(m, "batch-aware", &o));
    sp = ir_group_find(m, "sp");
    int dp = ir_group_find(m, "dp");
    CHECK(m->groups[sp].nsets == 2 && m->groups[sp].set_size == 4);
    CHECK(m->groups[sp].ranks[4] == 4 && m->groups[sp].ranks[7] == 7);
    CHECK(dp >= 0 && m->groups[dp].nsets == 4 && m->groups[dp].ranks[1] == 4);
    CHECK(ir_config_int(m, "batch_groups", 0) == 2 && ir_config_int(m, "sp_size", 0) == 4);
    CHECK(vtype(m, "tokens")->shard[0] == dp && vtype(m, "tokens")->shard[1] == sp);
    a2a = find_op(m, IR_ALL_TO_ALL, 0);
    CHECK(ir_attr_int(a2a, "fanout", 1) == 2 && vtype(m, "l0.kr.heads")->dims[2] == 4);
    t = pass_op_traffic(m, a2a);
    CHECK(t.peers == 3);
    /* q [2@dp,64@sp,8,8] = 2048 B; k, v [2@dp,64,4@sp,8] = 1024 B each. */
    CHECK_NEAR(t.bytes_sent, (2048.0 + 2 * 1024.0) / 4 * 3);
    CHECK(t.inter_bytes == 0);
    CHECK(ir_verify(m, "test"));
    ir_module_free(m);
}

/* Ring models on @world of 8 over 2 nodes. */
static void test_ring_traffic(void)
{
    fe_spec s = tiny_spec(2, 2, FE_BA_AUTO);
    s.train.zero = 3;
    ir_module *m = pass_lower(&s);
    pass_options o = pass_default_options();
    o.quiet = true;
    CHECK(pass_run_pipeline(m, pass_default_pipeline(), &o));
    const ir_op *ag = find_op(m, IR_ALL_GATHER, 0); /* embed f32[256,64] sharded 8 ways */
    CHECK(ag && m->values[ag->in[0]].type.shard[0] >= 0);
    pass_traffic t = pass_op_traffic(m, ag);
    CHECK_NEAR(t.bytes_sent, 256 * 64 * 4 / 8 * 7.0);
    CHECK(t.peers == 2);
    CHECK_NEAR(t.inter_bytes, t.bytes_sent);
    const ir_op *rs = find_op(m, IR_REDUCE_SCATTER, 0);
    CHECK(rs);
    double full = (double)ir_type_global_elems(&m->values[rs->in[0]].type) * 4;
    CHECK_NEAR(pass_op_traffic(m, rs).bytes_sent, full * 7 / 8);
    const ir_op *ar = find_op(m, IR_ALL_REDUCE, 0); /* the loss: f32[] */
    CHECK_NEAR(pass_op_traffic(m, ar).bytes_sent, 2.0 * 7 / 8 * 4);
    CHECK(ir_verify(m, "test"));
    ir_module_free(m);
}

/* B=8 on 8 ranks: K=1, no all-to-all left. */
static void test_pure_data_parallel(void)
{
    fe_spec s = tiny_spec(8, 8, FE_BA_AUTO);
    ir_module *m = pass_lower(&s);
    pass_options o = pass_default_options();
    o.quiet = true;
    CHECK(pass_run_pipeline(m, "ulysses,batch-aware", &o));
    CHECK(find_op(m, IR_ALL_TO_ALL, 0) == NULL);
    CHECK(ir_config_int(m, "sp_size", 0) == 1);
    CHECK(vtype(m, "l0.o") && vtype(m, "l0.o")->shard[1] == -1);
    ir_module_free(m);
}

/* The layout rules exist twice: fe_groups_illegal (frontend, on the spec)
 * and pass_batch_aware_illegal (passes, on the IR alone, so that hand-written
 * IR is judged the same way).  They must agree on every combination, both on
 * a lowered module and on a bare one that has only the config keys. */
static void test_legality_agrees(void)
{
    static const int64_t Ns[][2] = {{1, 1}, {1, 2}, {1, 3}, {2, 2}, {1, 6}, {2, 4}, {3, 4}, {2, 8}, {4, 8}};
    static const int64_t Bs[] = {1, 2, 3, 4, 6, 8, 16};
    static const int64_t Hs[] = {1, 2, 3, 4, 6, 8, 12, 32};
    static const int64_t Ss[] = {1, 2, 3, 8, 12, 64};
    int combos = 0, disagree = 0, lowered = 0;
    for (size_t n = 0; n < sizeof Ns / sizeof Ns[0]; n++)
        for (size_t b = 0; b < sizeof Bs / sizeof Bs[0]; b++)
            for (size_t h = 0; h < sizeof Hs / sizeof Hs[0]; h++)
                for (int64_t hk = 1; hk <= Hs[h]; hk++) {
                    if (Hs[h] % hk)
                        continue;
                    for (size_t si = 0; si < sizeof Ss / sizeof Ss[0]; si++) {
                        fe_spec s = tiny_spec(Bs[b], hk, FE_BA_AUTO);
                        s.mesh.nodes = Ns[n][0];
                        s.mesh.devices_per_node = Ns[n][1];
                        s.model.heads = Hs[h];
                        s.model.head_dim = 2;
                        s.model.hidden = 2 * Hs[h];
                        s.model.layers = 1;
                        s.train.seq_len = Ss[si];
                        ir_module *bare = ir_module_new("bare");
                        bare->mesh.nodes = (int)Ns[n][0];
                        bare->mesh.devices_per_node = (int)Ns[n][1];
                        ir_config_set_int(bare, "micro_batch", Bs[b]);
                        ir_config_set_int(bare, "seq_len", Ss[si]);
                        ir_config_set_int(bare, "heads", Hs[h]);
                        ir_config_set_int(bare, "kv_heads", hk);
                        /* Lowering is slower: a sample of the combinations. */
                        ir_module *low = (combos % 7 == 0) ? pass_lower(&s) : NULL;
                        lowered += low != NULL;
                        int N = (int)(Ns[n][0] * Ns[n][1]);
                        for (int G = 0; G <= N + 1; G++) {
                            bool fe = fe_groups_illegal(&s, G, NULL) == NULL;
                            bool ir = pass_batch_aware_illegal(bare, G) == NULL;
                            bool lw = low ? pass_batch_aware_illegal(low, G) == NULL : ir;
                            if (fe != ir || fe != lw) {
                                if (disagree++ < 5)
                                    fprintf(stderr, "legality differs: N=%d B=%lld H=%lld Hk=%lld S=%lld G=%d: "
                                                    "frontend %d, passes %d, lowered %d\n", N, (long long)Bs[b],
                                            (long long)Hs[h], (long long)hk, (long long)Ss[si], G, fe, ir, lw);
                            }
                        }
                        combos++;
                        ir_module_free(bare);
                        ir_module_free(low);
                    }
                }
    CHECK(disagree == 0);
    CHECK(combos > 1000 && lowered > 100);
    /* The uneven rule itself (N=4 ranks, Ulysses, G=1): legal when the kv
     * heads are at least K (and heads a multiple of them), not otherwise. */
    static const struct { int64_t H, Hk; bool legal; } uneven[] = {
        {6, 6, true}, {5, 5, true}, {12, 6, true}, {10, 5, true}, /* uneven */
        {3, 3, false}, {2, 2, false}, {6, 3, false}, {6, 2, false}, /* too few (kv) heads */
        {8, 2, true}, {8, 4, true},                                 /* even / fan-out, as before */
    };
    for (size_t i = 0; i < sizeof uneven / sizeof uneven[0]; i++) {
        fe_spec s = tiny_spec(2, uneven[i].Hk, FE_BA_AUTO);
        s.mesh.nodes = 1;
        s.mesh.devices_per_node = 4;
        s.model.heads = uneven[i].H;
        s.train.seq_len = 64;
        ir_module *bare = ir_module_new("bare");
        bare->mesh.devices_per_node = 4;
        ir_config_set_int(bare, "micro_batch", 2);
        ir_config_set_int(bare, "seq_len", 64);
        ir_config_set_int(bare, "heads", uneven[i].H);
        ir_config_set_int(bare, "kv_heads", uneven[i].Hk);
        CHECK((fe_groups_illegal(&s, 1, NULL) == NULL) == uneven[i].legal);
        CHECK((pass_batch_aware_illegal(bare, 1) == NULL) == uneven[i].legal);
        ir_module_free(bare);
    }
}

int main(void)
{
    sup_diag_set_quiet(true);
    test_legality_agrees();
    test_lower();
    test_ulysses_batch_aware();
    test_ring_traffic();
    test_pure_data_parallel();
    if (failures) {
        fprintf(stderr, "test_passes: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_passes: all checks passed\n");
    return 0;
}
