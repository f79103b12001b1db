/* test_passes.c — unit tests of passes/: lowering a tiny spec, the
 * Ulysses and batch-aware rewrites (groups, layouts, GQA fanout), ZeRO, and
 * the traffic numbers of the schedule report against hand-computed values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/basp_context.h"
#include "driver/driver.h"
#include "passes/passes.h"

#include "check.h"

/* Relative to the expected value, with an absolute floor of 1. */
#define CHECK_NEAR(a, b) CHECK_NEAR_FLOOR(a, b, 1)

/* hidden 64, 2 layers, 4 heads (2 KV heads), head_dim 16, on 2 nodes x 4. */
static fe_spec tiny_spec(int64_t micro_batch, int64_t kv_heads, fe_batch_aware ba) {
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

static const ir_op *find_op(const ir_module *m, ir_opcode code, int nth) {
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == code && nth-- == 0) return &m->ops[i];
    return NULL;
}

static const ir_type *vtype(const ir_module *m, const char *name) {
    int v = ir_value_find(m, name);
    return v >= 0 ? &m->values[v].type : NULL;
}

static void test_lower(void) {
    fe_spec s = tiny_spec(2, 2, FE_BA_AUTO);
    ir_module *m = pass_lower(&s);
    CHECK(m && ir_verify(m, "lower"));
    CHECK(ir_group_find(m, "world") == 0 && m->groups[0].set_size == 8);
    CHECK(ir_config_int(m, "heads", 0) == 8 && ir_config_int(m, "micro_batch", 0) == 2);
    CHECK(vtype(m, "l1.wq") && vtype(m, "l1.wq")->dims[1] == 8);
    CHECK(pass_op_traffic(m, find_op(m, IR_ADD, 0)).bytes_sent == 0); /* not a collective */
    int adamw = 0;
    for (int i = 0; i < m->nops; i++) adamw += m->ops[i].code == IR_ADAMW;
    CHECK(adamw == 1 + 2 * 9 + 2); /* embed, 9 per layer, final_norm, lm_head */
    /* batch_aware auto is resolved before lowering: a concrete layout in the config */
    layout_choice c = pass_layout_of(m);
    CHECK(c.seq == LAYOUT_ULYSSES && !c.variant && (c.groups == 1 || c.groups == 2));
    CHECK(!strcmp(ir_config_get(m, "sequence"), "ulysses") && !strcmp(ir_config_get(m, "a2a"), "flat"));
    layout_dims d = pass_layout_dims(m);
    CHECK(d.N == 8 && d.nodes == 2 && d.dpn == 4 && d.B == 2 && d.S == 64 && d.H == 8 && d.Hk == 2);
    CHECK(pass_layout_available(&c));
    ir_module_free(m);
    /* the typed choice goes into the config as written */
    layout_choice h = {.seq = LAYOUT_HYBRID, .ring_degree = 2, .variant = NULL, .groups = 2};
    m = pass_lower_with(&s, &h);
    CHECK(m && ir_config_int(m, "groups", 0) == 2 && ir_config_int(m, "ring_degree", 0) == 2 &&
          !strcmp(ir_config_get(m, "sequence"), "hybrid"));
    ir_module_free(m);
}

/* Ulysses on 8 ranks; then batch-aware G=2 before Ulysses: @sp = {[0-3] [4-7]}. */
static void test_ulysses_batch_aware(void) {
    fe_spec s = tiny_spec(2, 2, FE_BA_AUTO);
    layout_choice g1 = layout_ulysses(1), g2 = layout_ulysses(2);
    ir_module *m = pass_lower_with(&s, &g1);
    pass_options o = pass_default_options();
    o.quiet = true;
    CHECK(pass_run(m, "ulysses", &o));
    int sp = ir_group_find(m, "sp");
    CHECK(sp >= 0 && m->groups[sp].nsets == 1 && m->groups[sp].set_size == 8);
    const ir_op *a2a = find_op(m, IR_ALL_TO_ALL, 0);
    CHECK(a2a && a2a->nin == 3 && ir_attr_int(a2a, "fanout", 1) == 4); /* K=8 > Hk=2 */
    CHECK(vtype(m, "l0.kr.heads")->dims[2] == 8);                      /* 2 real x 4 virtual */
    /* q: bf16 [2,64,8,8] / 8 ranks = 2048 B per rank.  k, v: the larger,
     * virtual-head side [2,64,8@sp,8] = 2048 B too.  chunk = 3*2048/8. */
    pass_traffic t = pass_op_traffic(m, a2a);
    CHECK_NEAR(t.bytes_sent, 3 * 2048.0 / 8 * 7);
    CHECK(t.peers == 7);
    CHECK_NEAR(t.inter_bytes, 3 * 2048.0 / 8 * 4); /* 4 of the 7 peers are on the other node */

    ir_module_free(m);
    m = pass_lower_with(&s, &g2);
    CHECK(ir_config_int(m, "groups", 0) == 2);
    CHECK(pass_run(m, "batch-aware", &o) && ir_group_find(m, "sp") < 0);
    CHECK(pass_run(m, "ulysses", &o));
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
static void test_ring_traffic(void) {
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
static void test_pure_data_parallel(void) {
    fe_spec s = tiny_spec(8, 8, FE_BA_AUTO);
    layout_choice g8 = layout_ulysses(8);
    ir_module *m = pass_lower_with(&s, &g8);
    pass_options o = pass_default_options();
    o.quiet = true;
    CHECK(pass_run_pipeline(m, "batch-aware,ulysses", &o));
    CHECK(find_op(m, IR_ALL_TO_ALL, 0) == NULL);
    CHECK(ir_config_int(m, "sp_size", 0) == 1);
    CHECK(vtype(m, "l0.o") && vtype(m, "l0.o")->shard[1] == -1);
    ir_module_free(m);
}

/* Every rule of layout/, on hand-picked dimensions, with its reason. */
static bool says(const layout_dims *d, layout_choice c, const char *want) {
    const char *why = layout_illegal(d, &c, NULL, 0);
    if (!want) return why == NULL;
    if (why && strstr(why, want)) return true;
    fprintf(stderr, "layout_illegal: want '%s', got '%s'\n", want, why ? why : "(legal)");
    return false;
}

/* The variants by their spec words (registered when the library starts). */
#define LAYOUT_A2A_FLAT      NULL
#define LAYOUT_A2A_TWO_LEVEL layout_variant_find("a2a", "two_level")

static layout_choice choice(layout_seq seq, int R, const layout_strategy *variant, int G) {
    return (layout_choice){.seq = seq, .ring_degree = R, .variant = variant, .groups = G};
}

static void test_layout_rules(void) {
    /* 2 nodes x 4, B=4, S=64, 8 heads, 2 kv heads */
    layout_dims d = {.N = 8, .nodes = 2, .dpn = 4, .B = 4, .S = 64, .H = 8, .Hk = 2};
    layout_choice u1 = layout_ulysses(1);
    CHECK(says(&d, u1, NULL));
    CHECK(says(&d, layout_ulysses(0), "the number of groups must be at least 1, not 0"));
    CHECK(says(&d, layout_ulysses(3), "N=8 not divisible by G=3"));
    CHECK(says(&d, layout_ulysses(8), "micro_batch (4) not divisible by G=8"));
    layout_dims h = d;
    h.H = 12, h.Hk = 4;
    CHECK(says(&h, u1, "heads (12) not divisible by N=8"));
    CHECK(says(&h, layout_ulysses(2), NULL));
    h.H = 8, h.Hk = 3;
    CHECK(says(&h, u1, "kv_heads (3) cannot be split over N=8"));
    h = d, h.S = 60;
    CHECK(says(&h, u1, "seq_len (60) not divisible by N=8"));
    h.S = 62;
    CHECK(says(&h, layout_ulysses(2), "seq_len (62) not divisible by group size K=N/G=4"));
    /* uneven: 6 heads = 6 kv heads over 4 ranks; too few kv heads is not */
    layout_dims un = {.N = 4, .nodes = 1, .dpn = 4, .B = 2, .S = 64, .H = 6, .Hk = 6};
    CHECK(layout_heads_uneven(&un, 4) && says(&un, u1, NULL));
    un.Hk = 3;
    CHECK(!layout_heads_uneven(&un, 4) && says(&un, u1, "heads (6) not divisible by N=4"));
    un.H = 8, un.Hk = 2;
    CHECK(!layout_heads_uneven(&un, 4) && says(&un, u1, NULL)); /* fan-out */
    /* K = 1: pure data parallelism */
    layout_dims dp = d;
    dp.B = 8;
    CHECK(says(&dp, layout_ulysses(8), NULL));

    /* two-level */
    layout_choice t1 = choice(LAYOUT_ULYSSES, 1, LAYOUT_A2A_TWO_LEVEL, 1);
    layout_dims tl = {.N = 8, .nodes = 2, .dpn = 4, .B = 4, .S = 64, .H = 16, .Hk = 8};
    CHECK(says(&tl, t1, NULL));
    CHECK(says(&tl, choice(LAYOUT_ULYSSES, 1, LAYOUT_A2A_TWO_LEVEL, 2),
               "the group of K=4 ranks fits in one node (devices_per_node 4); two-level needs K > devices_per_node"));
    layout_dims t6 = tl;
    t6.N = 12, t6.nodes = 3, t6.B = 4;
    CHECK(says(&t6, choice(LAYOUT_ULYSSES, 1, LAYOUT_A2A_TWO_LEVEL, 2), "is not whole nodes"));
    tl.H = 15, tl.Hk = 5;
    CHECK(says(&tl, t1, "must split over the 2 nodes of a group"));
    tl.H = 4, tl.Hk = 2;
    CHECK(says(&tl, t1, "a node's 2 heads not divisible by devices_per_node 4"));
    tl.H = 24, tl.Hk = 6;
    CHECK(says(&tl, t1, "a node's 3 kv heads cannot be split over devices_per_node 4"));
    tl.H = 16, tl.Hk = 2; /* a node's 1 kv head shared by its 4 devices */
    CHECK(says(&tl, t1, NULL));
    CHECK(says(&d, choice(LAYOUT_RING, 8, LAYOUT_A2A_TWO_LEVEL, 1), "two-level applies to the flat Ulysses exchange"));

    /* ring */
    CHECK(says(&d, choice(LAYOUT_RING, 8, LAYOUT_A2A_FLAT, 1), NULL));
    CHECK(says(&dp, choice(LAYOUT_RING, 1, LAYOUT_A2A_FLAT, 8), "ring attention needs K >= 2 ranks per group"));
    CHECK(says(&d, choice(LAYOUT_RING, 4, LAYOUT_A2A_FLAT, 1), "ring_degree 4 is not the group size K=8"));
    layout_dims rs = d;
    rs.S = 72;
    CHECK(says(&rs, choice(LAYOUT_RING, 8, LAYOUT_A2A_FLAT, 1), "seq_len (72) not divisible by 2*R=16"));
    rs.S = 60;
    CHECK(says(&rs, choice(LAYOUT_RING, 8, LAYOUT_A2A_FLAT, 1), "seq_len (60) not divisible by K=8"));
    rs.H = 3, rs.Hk = 1, rs.S = 64; /* no head constraint */
    CHECK(says(&rs, choice(LAYOUT_RING, 8, LAYOUT_A2A_FLAT, 1), NULL));

    /* hybrid */
    CHECK(says(&d, choice(LAYOUT_HYBRID, 2, LAYOUT_A2A_FLAT, 1), NULL));
    CHECK(says(&d, choice(LAYOUT_HYBRID, 8, LAYOUT_A2A_FLAT, 1), "ring_degree 8 must satisfy 2 <= R < K=8"));
    CHECK(says(&d, choice(LAYOUT_HYBRID, 1, LAYOUT_A2A_FLAT, 1), "must satisfy 2 <= R < K=8"));
    CHECK(says(&d, choice(LAYOUT_HYBRID, 3, LAYOUT_A2A_FLAT, 1), "ring_degree 3 does not divide the group size K=8"));
    layout_dims hy = d;
    hy.H = 6, hy.Hk = 6;
    CHECK(says(&hy, choice(LAYOUT_HYBRID, 2, LAYOUT_A2A_FLAT, 1),
               "heads (6) not divisible by the U=K/R=4 Ulysses ranks"));
    hy.H = 12, hy.Hk = 3;
    CHECK(says(&hy, choice(LAYOUT_HYBRID, 2, LAYOUT_A2A_FLAT, 1), "kv_heads (3) cannot be split over the U=K/R=4"));
    hy = d, hy.S = 36;
    CHECK(says(&hy, choice(LAYOUT_HYBRID, 2, LAYOUT_A2A_FLAT, 1), "seq_len (36) not divisible by K=8"));
    /* K=12, R=4, U=3: seq_len 36 splits 12 ways but not into 2R=8 chunks */
    layout_dims h12 = {.N = 12, .nodes = 3, .dpn = 4, .B = 1, .S = 36, .H = 12, .Hk = 12};
    CHECK(says(&h12, choice(LAYOUT_HYBRID, 4, LAYOUT_A2A_FLAT, 1), "seq_len (36) not divisible by 2*R=8"));
    CHECK(
        says(&d, choice(LAYOUT_HYBRID, 2, LAYOUT_A2A_TWO_LEVEL, 1), "two-level applies to the flat Ulysses exchange"));

    /* the enumeration: every legal choice, G ascending, in table order */
    layout_choice all[64];
    int n = layout_candidates(&d, all, 64);
    char names[64][64];
    for (int i = 0; i < n && i < 64; i++) layout_choice_name(&all[i], names[i], sizeof names[i]);
    /* G=1: ulysses, two-level (a node's 4 heads over its 4 devices, its one
     * kv head shared), ring, hybrid R=2 and R=4; G=2 (K=4, one node):
     * ulysses, ring, hybrid R=2; G=4: ulysses, ring; G=8 does not divide B */
    CHECK(n == 10);
    CHECK(n >= 10 && !strcmp(names[0], "ulysses") && !strcmp(names[1], "ulysses+two_level") &&
          !strcmp(names[2], "ring") && !strcmp(names[3], "hybrid R=2") && !strcmp(names[4], "hybrid R=4") &&
          !strcmp(names[5], "batch-aware G=2") && !strcmp(names[6], "batch-aware G=2 ring") &&
          !strcmp(names[7], "batch-aware G=2 hybrid R=2") && !strcmp(names[8], "batch-aware G=4") &&
          !strcmp(names[9], "batch-aware G=4 ring"));
    for (int i = 0; i < n && i < 64; i++) CHECK(layout_illegal(&d, &all[i], NULL, 0) == NULL);
    int64_t g[8];
    CHECK(layout_legal_groups(&d, &u1, g, 8) == 3 && g[0] == 1 && g[1] == 2 && g[2] == 4);
    layout_seq sq;
    CHECK(layout_seq_parse("hybrid", &sq) && sq == LAYOUT_HYBRID && !layout_seq_parse("auto", &sq));
    CHECK(LAYOUT_A2A_TWO_LEVEL && !strcmp(LAYOUT_A2A_TWO_LEVEL->name, "ulysses+two_level"));
    CHECK(!layout_variant_find("a2a", "flat") && !layout_variant_find("a2a", "nope"));
    CHECK(!strcmp(layout_seq_name(LAYOUT_RING), "ring"));
    char fix[256];
    CHECK(layout_illegal(&d, &(layout_choice){.seq = LAYOUT_ULYSSES, .ring_degree = 1, .groups = 8}, fix, sizeof fix) &&
          strstr(fix, "multiple of 8"));
    CHECK(layout_device_lookup("h100_sxm") && layout_link_lookup("ib_ndr") && !layout_device_lookup("nope"));
}

static bool always(ir_module *m, const pass_options *o) {
    (void)m, (void)o;
    return true;
}

static const char *no_rule(const layout_strategy *self, const layout_dims *d, const layout_choice *c, char *fix,
                           size_t nfix) {
    return layout_family_legal(d, c, fix, nfix);
}

static int one_cand(const layout_strategy *self, const layout_dims *d, int G, layout_choice *out, int max) {
    (void)d;
    if (max > 0) out[0] = layout_ulysses(G), out[0].variant = self;
    return 1;
}

/* Position of `name` in the comma-separated `list`, -1 when absent. */
static int list_pos(const char *list, const char *name) {
    size_t n = strlen(name);
    int i = 0;
    for (const char *p = list; p && *p; i++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return i;
        p = e ? e + 1 : NULL;
    }
    return -1;
}

/* Every pass of `pipe` has what its row requires ahead of it: each named
 * pass, and for "partitioned" every partitioning pass the pipeline holds. */
static bool requirements_kept(const char *pipe) {
    int n;
    const pass_info *all = pass_registry(&n);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        int at = list_pos(pipe, all[i].name);
        char req[256];
        snprintf(req, sizeof req, "%s", all[i].require ? all[i].require : "");
        for (char *save, *r = strtok_r(req, ",", &save); at >= 0 && r; r = strtok_r(NULL, ",", &save)) {
            bool before = true;
            if (!strcmp(r, "partitioned")) {
                for (int k = 0; k < n; k++)
                    if (all[k].slot == PASS_SLOT_PARTITION && list_pos(pipe, all[k].name) > at) before = false;
            } else {
                int rat = list_pos(pipe, r);
                before = rat >= 0 && rat < at;
            }
            if (!before) fprintf(stderr, "pipeline %s: '%s' requires '%s' before it\n", pipe, all[i].name, r);
            ok &= before;
        }
    }
    return ok;
}

/* The whole of a text file, NUL-terminated (malloc'd), or NULL. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 4096 + 1 > cap) buf = realloc(buf, cap = 2 * cap + 4096 + 1);
        got = fread(buf + n, 1, 4096, f);
        n += got;
    } while (got > 0);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* passes.def's rows as the registry holds them: every pipeline runs what
 * each pass requires before it, each slot's passes are where the slot
 * says, and the docs spell the skeleton as the slots make it. */
static void test_pass_table(void) {
    int n, ns;
    const pass_info *all = pass_registry(&n);
    const layout_strategy *st = layout_strategies(&ns);
    char pipe[512];
    CHECK(requirements_kept(pass_default_pipeline()));
    for (int i = 0; i < ns; i++)
        for (int memory = 0; memory < 2; memory++) {
            pass_pipeline(&st[i], memory, pipe, sizeof pipe);
            CHECK(requirements_kept(pipe));
        }
    /* FIRST, SHARD and FINISH passes in every pipeline; ANALYSIS in none;
     * a PARTITION pass in some strategy's; the MEMORY ones only in the full one */
    char skeleton[512] = "", timing[512];
    const char *sep = "";
    pass_pipeline(&st[0], false, timing, sizeof timing);
    for (pass_slot slot = PASS_SLOT_FIRST; slot <= PASS_SLOT_ANALYSIS; slot++) {
        if (slot == PASS_SLOT_PARTITION || slot == PASS_SLOT_FINISH) {
            snprintf(skeleton + strlen(skeleton), sizeof skeleton - strlen(skeleton), "%s%s", sep,
                     slot == PASS_SLOT_PARTITION ? "<its passes>" : "<its after-zero passes>");
            sep = ", ";
        }
        for (int i = 0; i < n; i++) {
            if (all[i].slot != slot) continue;
            bool full = list_pos(pass_default_pipeline(), all[i].name) >= 0;
            CHECK(slot == PASS_SLOT_ANALYSIS ? !full : full);
            if (slot == PASS_SLOT_FIRST || slot == PASS_SLOT_SHARD || slot == PASS_SLOT_FINISH) {
                CHECK((list_pos(timing, all[i].name) >= 0) == (all[i].effect == PASS_EFFECT_TIME));
                snprintf(skeleton + strlen(skeleton), sizeof skeleton - strlen(skeleton), "%s%s", sep, all[i].name);
                sep = ", ";
            }
        }
    }
    CHECK(!strcmp(skeleton,
                  "batch-aware, <its passes>, place, zero, <its after-zero passes>, fuse-loss, fuse-elem, fuse-rope, "
                  "attention-lse, recompute, "
                  "offload, overlap, memplan"));
    const char *docs[] = {"passes/README.md", "docs/ARCHITECTURE.md", "docs/writing-a-pass.md"};
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", BASP_SOURCE_DIR, docs[i]);
        char *text = slurp(path);
        if (!text || !strstr(text, skeleton))
            fprintf(stderr, "%s: does not give the pipeline's skeleton as \"%s\"\n", path, skeleton);
        CHECK(text && strstr(text, skeleton));
        free(text);
    }
}

/* One way in: every strategy row came through basp_register_strategy (its
 * public row is the user, asked through the same functions), basp's own
 * first and built in, the families in layout_seq's order; the two-level
 * pass is passes.def's row, given its function by its registration. */
static void test_one_registration(void) {
    int ns;
    const layout_strategy *st = layout_strategies(&ns);
    CHECK(ns == 4);
    for (int i = 0; i < ns; i++)
        CHECK(st[i].user && st[i].legal == st[0].legal && st[i].candidates == st[0].candidates &&
              !strcmp(st[i].owner, "built in"));
    CHECK(!strcmp(st[0].name, "ulysses") && !strcmp(st[1].name, "ring") && !strcmp(st[2].name, "hybrid"));
    CHECK(!st[2].key && !strcmp(st[3].name, "ulysses+two_level") && !strcmp(st[3].word, "two_level"));
    const pass_info *tl = pass_lookup("two-level");
    CHECK(tl && !tl->owner && tl->run_module && !tl->run && tl->slot == PASS_SLOT_PARTITION);
    CHECK(tl && !strncmp(tl->summary, "split each Ulysses all-to-all", 29));
    /* the families' rows are basp's: a second one is refused */
    char err[256];
    layout_strategy again = st[0];
    CHECK(!layout_strategy_register(&again, err, sizeof err) && strstr(err, "once per family"));
}

/* Registering passes and strategies: the refusals, then a variant that the
 * planner's enumeration and the pipeline pick up. */
static void test_registry(void) {
    char err[256];
    pass_info dup = {.name = "zero", .summary = "again", .run = always, .owner = "x.so"};
    CHECK(!pass_register(&dup, err, sizeof err) && strstr(err, "already registered"));
    pass_info bad = {.name = "a,b", .summary = "", .run = always};
    CHECK(!pass_register(&bad, err, sizeof err) && strstr(err, "no commas or spaces"));
    layout_strategy s = {.name = "ulysses+two_level",
                         .seq = LAYOUT_ULYSSES,
                         .key = "a2a",
                         .word = "mine",
                         .legal = no_rule,
                         .candidates = one_cand,
                         .passes = "ulysses,mine"};
    CHECK(!layout_strategy_register(&s, err, sizeof err) && strstr(err, "already registered"));
    s.name = "ulysses+mine", s.word = "two_level";
    CHECK(!layout_strategy_register(&s, err, sizeof err) &&
          strstr(err, "already selects strategy 'ulysses+two_level'"));
    s.word = "flat";
    CHECK(!layout_strategy_register(&s, err, sizeof err) && strstr(err, "the spec's own"));
    s.word = "mine", s.key = "sequence";
    CHECK(!layout_strategy_register(&s, err, sizeof err) && strstr(err, "spec key a2a"));
    s.key = "a2a", s.title = "bad \"title\"";
    CHECK(!layout_strategy_register(&s, err, sizeof err) && strstr(err, "title"));
    s.title = NULL;
    /* the pipeline names the strategy's passes; until they are registered it
     * is not available */
    CHECK(layout_strategy_register(&s, err, sizeof err));
    const layout_strategy *mine = layout_variant_find("a2a", "mine");
    char pipe[512];
    pass_pipeline(mine, true, pipe, sizeof pipe);
    CHECK(!strcmp(pipe, "batch-aware,ulysses,mine,place,zero,fuse-loss,fuse-elem,fuse-rope,attention-lse,recompute,"
                        "offload,overlap,memplan"));
    pass_pipeline(mine, false, pipe, sizeof pipe);
    CHECK(!strcmp(pipe, "batch-aware,ulysses,mine,place,zero,fuse-loss,fuse-elem,fuse-rope,attention-lse,overlap"));
    layout_choice c = layout_ulysses(1);
    c.variant = mine;
    CHECK(!pass_layout_available(&c));
    pass_info p = {.name = "mine", .summary = "a test pass", .run = always};
    CHECK(pass_register(&p, err, sizeof err) && pass_layout_available(&c));
    /* the enumeration: after Ulysses and two-level, before ring */
    layout_dims d = {.N = 8, .nodes = 2, .dpn = 4, .B = 4, .S = 64, .H = 16, .Hk = 8};
    layout_choice all[64];
    int n = layout_candidates(&d, all, 64);
    CHECK(n > 3 && !all[0].variant && all[1].variant == LAYOUT_A2A_TWO_LEVEL && all[2].variant == mine &&
          all[3].seq == LAYOUT_RING);
    char name[64];
    layout_choice_name(&all[2], name, sizeof name);
    CHECK(!strcmp(name, "ulysses+mine"));
    CHECK(!strcmp(pass_default_pipeline(),
                  "batch-aware,ulysses,ring,two-level,mine,place,zero,fuse-loss,fuse-elem,fuse-rope,"
                  "attention-lse,recompute,offload,overlap,memplan"));
    /* a module's pipeline comes from its config; a word nobody registered
     * (its plugin not loaded) is an error, not the flat pipeline */
    ir_module *m = ir_module_new("cfg");
    ir_config_set(m, "sequence", "ulysses");
    ir_config_set(m, "a2a", "mine");
    CHECK(pass_pipeline_of(m, pipe, sizeof pipe) &&
          !strcmp(pipe, "batch-aware,ulysses,mine,place,zero,fuse-loss,fuse-elem,fuse-rope,attention-lse,recompute,"
                        "offload,overlap,memplan"));
    ir_config_set(m, "a2a", "two_level");
    CHECK(pass_pipeline_of(m, pipe, sizeof pipe) &&
          !strcmp(
              pipe,
              "batch-aware,ulysses,two-level,place,zero,fuse-loss,fuse-elem,fuse-rope,attention-lse,recompute,offload,"
              "overlap,memplan"));
    ir_config_set(m, "sequence", "hybrid");
    ir_config_set(m, "a2a", "flat");
    CHECK(pass_pipeline_of(m, pipe, sizeof pipe) &&
          !strcmp(pipe, "batch-aware,ring,place,zero,fuse-loss,fuse-elem,fuse-rope,attention-lse,recompute,offload,"
                        "overlap,memplan"));
    ir_config_set(m, "a2a", "hpz");
    CHECK(!pass_pipeline_of(m, pipe, sizeof pipe));
    ir_module_free(m);
}

int main(void) {
    sup_diag_set_quiet(true);
    basp_ctx(); /* the library started: the passes and basp's own strategies (api/strategies/) */
    test_layout_rules();
    test_lower();
    test_ulysses_batch_aware();
    test_ring_traffic();
    test_pure_data_parallel();
    test_pass_table();
    test_one_registration();
    test_registry(); /* last: it registers a strategy the others would see */
    if (failures) {
        fprintf(stderr, "test_passes: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_passes: all checks passed\n");
    return 0;
}
