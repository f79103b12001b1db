/* test_main.c — rt_main end to end with a hand-written schedule (what a
 * generated program looks like, without the compiler): a tied
 * embedding/LM-head model, data parallel over 4 ranks.
 *   x = embedding(tokens, w); loss = all_reduce(lm_head_loss(x, w, targets))
 *   backward, gradient all_reduce, adamw.
 * CTest runs it for the step lines and metrics, and for the command-line and
 * world-size errors. */
#include "basp_rt.h"

enum { B = 4, S = 16, V = 256, D = 8 };
enum { TOK, TGT, W, X, LP, LOSS, DX, DWH, DWT, DW, DWS, NV };

static const int ranks[] = {0, 1, 2, 3};
static const rt_group_desc groups[] = {{"world", 1, 4, ranks, 0}};
#define ACT(name, r, d0, d1, s0, n)                                                                                    \
    { name, RT_ACT, RT_F32, r, {d0, d1, D}, {s0, -1, -1}, n }
static const rt_value_desc values[NV] = {
    [TOK] = {"tokens", RT_INPUT, RT_I32, 2, {B, S}, {0, -1}, S},
    [TGT] = {"targets", RT_INPUT, RT_I32, 2, {B, S}, {0, -1}, S},
    [W] = {"embed", RT_PARAM, RT_F32, 2, {V, D}, {-1, -1}, V *D},
    [X] = {"x0", RT_ACT, RT_F32, 3, {B, S, D}, {0, -1, -1}, S *D},
    [LP] = {"loss.part", RT_ACT, RT_F32, 0, {0}, {0}, 1},
    [LOSS] = {"loss", RT_ACT, RT_F32, 0, {0}, {0}, 1},
    [DX] = {"d.x0", RT_ACT, RT_F32, 3, {B, S, D}, {0, -1, -1}, S *D},
    [DWH] = {"d.embed.head", RT_ACT, RT_F32, 2, {V, D}, {-1, -1}, V *D},
    [DWT] = {"d.embed.tok", RT_ACT, RT_F32, 2, {V, D}, {-1, -1}, V *D},
    [DW] = {"d.embed", RT_ACT, RT_F32, 2, {V, D}, {-1, -1}, V *D},
    [DWS] = {"d.embed.sum", RT_ACT, RT_F32, 2, {V, D}, {-1, -1}, V *D},
};
static const rt_opt_pair opt[] = {{W, DWS}};

static void step(rt_ctx *rt) {
    rt_embedding(rt, rt_f32(rt, X), rt_i32(rt, TOK), rt_f32(rt, W), S, V, D);
    rt_lm_head_loss(rt, rt_f32(rt, LP), rt_f32(rt, X), rt_f32(rt, W), rt_i32(rt, TGT), S, V, D);
    rt_all_reduce(rt, 0, LP, LOSS);
    rt_lm_head_loss_bwd(rt, rt_f32(rt, DX), rt_f32(rt, DWH), rt_f32(rt, X), rt_f32(rt, W), rt_i32(rt, TGT), S, V, D,
                        1.0 / (B * S));
    rt_free(rt, X);
    rt_embedding_bwd(rt, rt_f32(rt, DWT), rt_f32(rt, DX), rt_i32(rt, TOK), S, V, D);
    rt_add(rt, rt_f32(rt, DW), rt_f32(rt, DWT), rt_f32(rt, DWH), V * D);
    rt_all_reduce(rt, 0, DW, DWS);
    rt_adamw(rt, W, DWS);
}

static const rt_program program = {.model = "handmade",
                                   .spec = "tests/rt/test_main.c",
                                   .world = 4,
                                   .nodes = 2,
                                   .devices_per_node = 2,
                                   .ngroups = 1,
                                   .groups = groups,
                                   .nvalues = NV,
                                   .values = values,
                                   .nopt = 1,
                                   .opt = opt,
                                   .tokens = TOK,
                                   .targets = TGT,
                                   .loss = LOSS,
                                   .micro_batch = B,
                                   .seq_len = S,
                                   .vocab = V,
                                   .hidden = D,
                                   .layers = 0,
                                   .lr = 1e-2,
                                   .steps = 3,
                                   .seed = 1,
                                   .zero = 0,
                                   .batch_groups = 4,
                                   .sp_size = 1,
                                   .step = step};

int main(int argc, char **argv) { return rt_main(argc, argv, &program); }
