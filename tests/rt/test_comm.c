/* test_comm.c — the runtime's collectives, data sharding, sharding-independent
 * initialisation, the ZeRO-1 optimizer slice and the gradient norm, on 4 MPI
 * ranks with a hand-built program table:
 *   @world {[0,1,2,3]}   @sp {[0,1],[2,3]}   @dp {[0,2],[1,3]}
 * Every tensor is filled from a function of its GLOBAL index, so each check
 * compares a rank's local buffer with what a single rank would hold. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rt_backend.h"
#include "data/rt_data.h"

enum { W = 0, SP = 1, DP = 2 };
static const int r_world[] = {0, 1, 2, 3}, r_sp[] = {0, 1, 2, 3}, r_dp[] = {0, 2, 1, 3};
static const rt_group_desc groups[] = {{"world", 1, 4, r_world, 0}, {"sp", 2, 2, r_sp, 0}, {"dp", 2, 2, r_dp, 0}};

enum {
    X,
    Y,
    Z,
    Q,
    K,
    V,
    QH,
    KH,
    VH,
    DQ,
    DK,
    DV,
    AG0I,
    AG0O,
    AG1I,
    AG1O,
    RS0I,
    RS0O,
    RS1I,
    RS1O,
    ARI,
    ARO,
    RGI,
    RGO,
    TOK,
    TGT,
    PW,
    PWH,
    GW,
    LOSS,
    UXQ,
    UXK,
    UQ,
    UK,
    UZQ,
    UZK,
    NV
};
static rt_value_desc vals[NV];
static int failures, rank_;

#define EXPECT(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            failures++;                                                                                                \
            fprintf(stderr, "rank %d: %s:%d: FAILED: ", rank_, __FILE__, __LINE__);                                    \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
        }                                                                                                              \
    } while (0)

static void def(int i, const char *name, rt_value_kind kind, rt_dtype dt, int rank, const int64_t *dims,
                const int *shard) {
    rt_value_desc *d = &vals[i];
    d->name = name, d->kind = kind, d->dtype = dt, d->rank = rank, d->local_elems = 1;
    for (int k = 0; k < rank; k++) {
        d->dims[k] = dims[k];
        d->shard[k] = shard[k];
        d->local_elems *= dims[k] / (shard[k] < 0 ? 1 : groups[shard[k]].set_size);
    }
}
#define DEF(i, kind, dt, rank, D, S) def(i, #i, kind, dt, rank, (const int64_t[])D, (const int[])S)
#define A(...)                                                                                                         \
    { __VA_ARGS__ }

static void define_values(void) {
    DEF(X, RT_ACT, RT_F32, 4, A(2, 8, 4, 3), A(DP, SP, -1, -1));
    DEF(Y, RT_ACT, RT_F32, 4, A(2, 8, 4, 3), A(DP, -1, SP, -1));
    DEF(Z, RT_ACT, RT_F32, 4, A(2, 8, 4, 3), A(DP, SP, -1, -1));
    DEF(Q, RT_ACT, RT_F32, 4, A(1, 8, 4, 2), A(-1, W, -1, -1));
    DEF(K, RT_ACT, RT_F32, 4, A(1, 8, 2, 2), A(-1, W, -1, -1));
    DEF(V, RT_ACT, RT_F32, 4, A(1, 8, 2, 2), A(-1, W, -1, -1));
    DEF(QH, RT_ACT, RT_F32, 4, A(1, 8, 4, 2), A(-1, -1, W, -1));
    DEF(KH, RT_ACT, RT_F32, 4, A(1, 8, 4, 2), A(-1, -1, W, -1));
    DEF(VH, RT_ACT, RT_F32, 4, A(1, 8, 4, 2), A(-1, -1, W, -1));
    DEF(DQ, RT_ACT, RT_F32, 4, A(1, 8, 4, 2), A(-1, W, -1, -1));
    DEF(DK, RT_ACT, RT_F32, 4, A(1, 8, 2, 2), A(-1, W, -1, -1));
    DEF(DV, RT_ACT, RT_F32, 4, A(1, 8, 2, 2), A(-1, W, -1, -1));
    DEF(AG0I, RT_ACT, RT_F32, 2, A(8, 3), A(W, -1));
    DEF(AG0O, RT_ACT, RT_F32, 2, A(8, 3), A(-1, -1));
    DEF(AG1I, RT_ACT, RT_F32, 3, A(2, 8, 3), A(-1, SP, -1));
    DEF(AG1O, RT_ACT, RT_F32, 3, A(2, 8, 3), A(-1, -1, -1));
    DEF(RS0I, RT_ACT, RT_F32, 2, A(8, 3), A(-1, -1));
    DEF(RS0O, RT_ACT, RT_F32, 2, A(8, 3), A(W, -1));
    DEF(RS1I, RT_ACT, RT_F32, 3, A(2, 8, 3), A(-1, -1, -1));
    DEF(RS1O, RT_ACT, RT_F32, 3, A(2, 8, 3), A(-1, SP, -1));
    DEF(ARI, RT_ACT, RT_F32, 1, A(5), A(-1));
    DEF(ARO, RT_ACT, RT_F32, 1, A(5), A(-1));
    DEF(RGI, RT_ACT, RT_F32, 1, A(4), A(-1));
    DEF(RGO, RT_ACT, RT_F32, 1, A(4), A(-1));
    DEF(TOK, RT_INPUT, RT_I32, 2, A(2, 8), A(DP, SP));
    DEF(TGT, RT_INPUT, RT_I32, 2, A(2, 8), A(DP, SP));
    /* The same parameter twice: ZeRO-sharded on dim 1 and whole. */
    def(PW, "l0.wq", RT_PARAM, RT_F32, 2, (const int64_t[]){6, 8}, (const int[]){-1, W});
    def(PWH, "l0.wq", RT_PARAM, RT_F32, 2, (const int64_t[]){6, 8}, (const int[]){-1, -1});
    DEF(GW, RT_ACT, RT_F32, 2, A(6, 8), A(-1, -1));
    def(LOSS, "loss", RT_ACT, RT_F32, 0, NULL, NULL);
    /* Uneven (split-size) all_to_all over the 4 ranks of @world: 12 q heads in
     * units of 2 and 6 kv heads in units of 1; ranks hold kv 2,2,1,1 and q
     * 4,4,2,2.  local_elems is the largest rank's. */
    DEF(UXQ, RT_ACT, RT_F32, 4, A(1, 8, 12, 2), A(-1, W, -1, -1));
    DEF(UXK, RT_ACT, RT_F32, 4, A(1, 8, 6, 2), A(-1, W, -1, -1));
    DEF(UQ, RT_ACT, RT_F32, 4, A(1, 8, 12, 2), A(-1, -1, W, -1));
    DEF(UK, RT_ACT, RT_F32, 4, A(1, 8, 6, 2), A(-1, -1, W, -1));
    DEF(UZQ, RT_ACT, RT_F32, 4, A(1, 8, 12, 2), A(-1, W, -1, -1));
    DEF(UZK, RT_ACT, RT_F32, 4, A(1, 8, 6, 2), A(-1, W, -1, -1));
    vals[UQ].unit[2] = 2, vals[UQ].local_elems = 1 * 8 * 4 * 2;
    vals[UK].unit[2] = 1, vals[UK].local_elems = 1 * 8 * 2 * 2;
}

static const rt_opt_pair opt[] = {{PW, GW}};
static rt_program prog = {.model = "test_comm",
                          .spec = "tests/rt/test_comm.c",
                          .world = 4,
                          .nodes = 2,
                          .devices_per_node = 2,
                          .ngroups = 3,
                          .groups = groups,
                          .nvalues = NV,
                          .values = vals,
                          .nopt = 1,
                          .opt = opt,
                          .tokens = TOK,
                          .targets = TGT,
                          .loss = LOSS,
                          .micro_batch = 2,
                          .seq_len = 8,
                          .vocab = 256,
                          .layers = 2,
                          .lr = 1e-3,
                          .steps = 1,
                          .seed = 7,
                          .batch_groups = 2,
                          .sp_size = 2};

/* Visits every local element of v with its local and global flat index. */
typedef double (*gfn)(int v, int64_t gidx, const int64_t *gc);
static void visit(rt_ctx *rt, int v, gfn f, bool check, const char *what) {
    const rt_value_desc *d = &vals[v];
    int64_t ld[RT_MAX_RANK], off[RT_MAX_RANK], c[RT_MAX_RANK] = {0}, gc[RT_MAX_RANK];
    int nd = rt_local_dims(rt, v, ld);
    rt_global_offset(&prog, v, rt->rank, off);
    float *b = rt->buf[v];
    int64_t n = 1; /* this rank's elements (an uneven value's differ by rank) */
    for (int k = 0; k < nd; k++) n *= ld[k];
    for (int64_t i = 0; i < n; i++) {
        int64_t g = 0;
        for (int k = 0; k < nd; k++) gc[k] = off[k] + c[k], g = g * d->dims[k] + gc[k];
        double want = f(v, g, gc);
        if (check)
            EXPECT(fabs(b[i] - want) < 1e-4, "%s: %s local %lld (global %lld) = %g, want %g", what, d->name,
                   (long long)i, (long long)g, b[i], want);
        else
            b[i] = (float)want;
        for (int k = nd - 1; k >= 0 && ++c[k] == ld[k]; k--) c[k] = 0;
    }
}

static double f_id(int v, int64_t g, const int64_t *gc) { return v * 1000 + g; }
static double f_x(int v, int64_t g, const int64_t *gc) { return X * 1000 + g; }
/* [1,8,H,2] flat index of (s, h, d) in a tensor with H heads */
static int64_t flat(const int64_t *gc, int64_t h, int64_t H) { return (gc[1] * H + h) * 2 + gc[3]; }
static double f_qh(int v, int64_t g, const int64_t *gc) {
    if (v == QH) return Q * 1000 + g;
    return (v == KH ? K : V) * 1000 + flat(gc, gc[2] / 2, 2); /* virtual head h holds real h / F */
}
static double f_dkv(int v, int64_t g, const int64_t *gc) {
    if (v == DQ) return QH * 1000 + g;
    int src = v == DK ? KH : VH; /* the two virtual copies summed */
    return 2 * src * 1000 + flat(gc, 2 * gc[2], 4) + flat(gc, 2 * gc[2] + 1, 4);
}
/* reduce_scatter input: each rank holds its own copy scaled by rank + 1 */
static int rs_rank;
static double f_rs_in(int v, int64_t g, const int64_t *gc) { return (rs_rank + 1) * (v * 100 + g); }
static double f_rs0_out(int v, int64_t g, const int64_t *gc) { return 10 * (RS0I * 100 + g); } /* 1+2+3+4 */
static double f_rs1_out_sp(int v, int64_t g, const int64_t *gc) {
    return (rs_rank < 2 ? 3 : 7) * (RS1I * 100 + g); /* set {0,1}: 1+2, set {2,3}: 3+4 */
}
static double f_ag0(int v, int64_t g, const int64_t *gc) { return AG0I * 1000 + g; }
static double f_ag1(int v, int64_t g, const int64_t *gc) { return AG1I * 1000 + g; }

static double f_uq(int v, int64_t g, const int64_t *gc) { return (v == UQ ? UXQ : UXK) * 1000 + g; }
static double f_uz(int v, int64_t g, const int64_t *gc) { return (v == UZQ ? UXQ : UXK) * 1000 + g; }

static void test_all_to_all(rt_ctx *rt) {
    visit(rt, X, f_id, false, "");
    rt_all_to_all(rt, SP, 2, 1, 1, 1, 1, (int[]){X}, (int[]){Y});
    visit(rt, Y, f_x, true, "plain all_to_all seq->heads");
    rt_all_to_all(rt, SP, 1, 2, 1, 1, 1, (int[]){Y}, (int[]){Z});
    visit(rt, Z, f_x, true, "plain all_to_all heads->seq");
    visit(rt, Q, f_id, false, "");
    visit(rt, K, f_id, false, "");
    visit(rt, V, f_id, false, "");
    rt_all_to_all(rt, W, 2, 1, 2, 1, 3, (int[]){Q, K, V}, (int[]){QH, KH, VH});
    for (int v = QH; v <= VH; v++) visit(rt, v, f_qh, true, "fused fanout all_to_all");
    visit(rt, QH, f_id, false, "");
    visit(rt, KH, f_id, false, "");
    visit(rt, VH, f_id, false, "");
    rt_all_to_all(rt, W, 1, 2, 1, 2, 3, (int[]){QH, KH, VH}, (int[]){DQ, DK, DV});
    for (int v = DQ; v <= DV; v++) visit(rt, v, f_dkv, true, "fused fanin all_to_all");
    /* split-size all_to_all (MPI_Alltoallv): uneven heads there and back */
    int64_t want_q[] = {4, 4, 2, 2}, want_k[] = {2, 2, 1, 1};
    EXPECT(rt_local_dim(rt, UQ, 2) == want_q[rt->rank] && rt_local_dim(rt, UK, 2) == want_k[rt->rank],
           "uneven local heads %lld, %lld", (long long)rt_local_dim(rt, UQ, 2), (long long)rt_local_dim(rt, UK, 2));
    visit(rt, UXQ, f_id, false, "");
    visit(rt, UXK, f_id, false, "");
    rt_all_to_all(rt, W, 2, 1, 1, 1, 2, (int[]){UXQ, UXK}, (int[]){UQ, UK});
    visit(rt, UQ, f_uq, true, "uneven all_to_all seq->heads");
    visit(rt, UK, f_uq, true, "uneven all_to_all seq->heads");
    rt_all_to_all(rt, W, 1, 2, 1, 1, 2, (int[]){UQ, UK}, (int[]){UZQ, UZK});
    visit(rt, UZQ, f_uz, true, "uneven all_to_all heads->seq");
    visit(rt, UZK, f_uz, true, "uneven all_to_all heads->seq");
}

static void test_gather_scatter(rt_ctx *rt) {
    visit(rt, AG0I, f_id, false, "");
    rt_all_gather(rt, W, 0, AG0I, AG0O);
    visit(rt, AG0O, f_ag0, true, "all_gather dim 0");
    visit(rt, AG1I, f_id, false, "");
    rt_all_gather(rt, SP, 1, AG1I, AG1O);
    visit(rt, AG1O, f_ag1, true, "all_gather dim 1");
    rs_rank = rt->rank;
    visit(rt, RS0I, f_rs_in, false, "");
    rt_reduce_scatter(rt, W, 0, RS0I, RS0O);
    visit(rt, RS0O, f_rs0_out, true, "reduce_scatter dim 0");
    visit(rt, RS1I, f_rs_in, false, "");
    rt_reduce_scatter(rt, SP, 1, RS1I, RS1O);
    visit(rt, RS1O, f_rs1_out_sp, true, "reduce_scatter dim 1");
    float *a = rt_f32(rt, ARI);
    for (int i = 0; i < 5; i++) a[i] = (float)(rt->rank * 10 + i);
    rt_all_reduce(rt, DP, ARI, ARO); /* dp sets {0,2}, {1,3} */
    for (int i = 0; i < 5; i++)
        EXPECT(rt_f32(rt, ARO)[i] == (float)((rt->rank % 2) * 20 + 20 + 2 * i), "all_reduce [%d] = %g", i,
               rt_f32(rt, ARO)[i]);
    for (int i = 0; i < 4; i++) rt_f32(rt, RGI)[i] = (float)(rt->rank * 4 + i);
    rt_send(rt, SP, +1, RGI);
    rt_recv(rt, SP, -1, RGO);
    rt_comm_finish_step(rt);
    int from = (rt->rank / 2) * 2 + (rt->rank + 1) % 2;
    EXPECT(rt_f32(rt, RGO)[3] == (float)(from * 4 + 3), "recv from the set neighbour: got %g", rt_f32(rt, RGO)[3]);
}

/* Each rank's slice of tokens/targets equals the slice of the batch a single
 * rank would load: [2@dp, 8@sp] -> rank r holds sequence r/2 (its @dp
 * position) and half r%2 of it (its @sp position). */
static void test_data(rt_ctx *rt) {
    /* The loader's view of uint16 llm.c shards' tokens (rt_token). */
    static uint8_t tok[2000];
    for (int i = 0; i < 1000; i++) tok[2 * i] = (uint8_t)((i * 7) % 251), tok[2 * i + 1] = 0;
    /* Two shards split at token 600: windows across the border read on. */
    static uint8_t tok_b[800]; /* shard b apart from a, a's tail poisoned */
    memcpy(tok_b, tok + 1200, sizeof tok_b);
    memset(tok + 1200, 0xee, 800);
    static rt_shard sh[2];
    sh[0] = (rt_shard){.path = "a.bin", .base = tok, .first = 0, .ntokens = 600};
    sh[1] = (rt_shard){.path = "b.bin", .base = tok_b, .first = 600, .ntokens = 400};
    rt->train = (rt_corpus){.shard = sh, .nshards = 2, .width = 2, .ntokens = 1000};
    rt->data = &rt->train;
    for (int64_t i = 0; i < 1000; i++) /* every token, the borders included */
        EXPECT(rt_token(rt, i) == i * 7 % 251, "token %lld across two shards: %d", (long long)i, rt_token(rt, i));
    for (int64_t t = 0; t < 6; t++) {
        rt->opt.epoch = t >= 3; /* steps 3-5: --sampler epoch, 124 windows of 8 */
        rt_data_fill(rt, t);
        int b = rt->rank / 2;        /* position in @dp: sets {0,2} {1,3} */
        int s0 = (rt->rank % 2) * 4; /* position in @sp: sets {0,1} {2,3} */
        int64_t pos = rt->opt.epoch ? rt_epoch_window(7, t * 2 + b, 999 / 8) * 8 : rt_data_position(7, t, b, 1000, 8);
        EXPECT(pos >= 0 && pos <= 1000 - 8 - 2, "position %lld out of range", (long long)pos);
        for (int s = 0; s < 4; s++) {
            EXPECT(rt_i32(rt, TOK)[s] == (pos + s0 + s) * 7 % 251, "step %lld tokens[%d]", (long long)t, s);
            EXPECT(rt_i32(rt, TGT)[s] == (pos + s0 + s + 1) * 7 % 251, "step %lld targets[%d]", (long long)t, s);
        }
    }
    rt->opt.epoch = false;
    rt->train = (rt_corpus){0}; /* static: not the loader's to free */
    rt->data = NULL;
}

/* The sharded parameter equals its slice of the whole one; the norm weight
 * rule and the ZeRO-1 optimizer slice. */
static void test_init_opt(rt_ctx *rt) {
    const float *sh = rt_f32(rt, PW), *wh = rt_f32(rt, PWH);
    double sum2 = 0;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 2; j++) {
            EXPECT(sh[i * 2 + j] == wh[i * 8 + rt->rank * 2 + j], "init of shard (%d,%d) differs", i, j);
            sum2 += wh[i * 8 + rt->rank * 2 + j] * (double)wh[i * 8 + rt->rank * 2 + j];
        }
    EXPECT(sum2 > 0 && sum2 < 48 * 0.01, "init std looks wrong: sum of squares %g", sum2);
    float *g = rt_f32(rt, GW);
    for (int i = 0; i < 48; i++) g[i] = (float)(i % 8) * 0.01f;
    float before[12];
    memcpy(before, sh, sizeof before);
    rt_opt_begin_step(rt);
    rt->step = 0;
    rt_adamw(rt, PW, GW); /* first step of Adam moves each element by -lr*sign(g) (+ decay) */
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 2; j++) {
            int col = rt->rank * 2 + j;
            double d = sh[i * 2 + j] - before[i * 2 + j] * (1 - 1e-3 * 0.1);
            double want = col == 0 ? 0.0 : -1e-3;
            EXPECT(fabs(d - want) < 2e-5, "adamw slice (%d,%d) col %d moved %g, want %g", i, j, col, d, want);
        }
    /* replicated grad of norm sqrt(sum over 6 rows of sum_c (0.01 c)^2) */
    double want = sqrt(6 * 0.0001 * 140);
    EXPECT(fabs(rt->grad_norm - want) < 1e-5, "grad norm %g, want %g", rt->grad_norm, want);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world != 4) {
        if (rank_ == 0) fprintf(stderr, "test_comm needs 4 ranks, got %d\n", world);
        MPI_Finalize();
        return 1;
    }
    define_values();
    rt_options o = {.steps = 1, .seed = 7, .lr = 1e-3, .log_every = 1, .optim = rt_optim_defaults};
    rt_ctx *rt = rt_ctx_create(&prog, &o);
    test_all_to_all(rt);
    test_gather_scatter(rt);
    test_data(rt);
    test_init_opt(rt);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) printf("test_comm: %s (%d failure(s))\n", total ? "FAILED" : "ok", total);
    rt_ctx_destroy(rt);
    MPI_Finalize();
    return total ? 1 : 0;
}
