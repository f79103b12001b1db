/* emu_test.h — what the hand-built programs of the emulated backend's
 * tests share (test_a2a_rope_emu.c, test_ring_split_emu.c). */
#ifndef BASP_EMU_TEST_H
#define BASP_EMU_TEST_H
#include "rt_cuda.h"

/* cuemu_sub_ops.c: basp's kernels as the split attentions' sub-block
 * attention, and the same with full and causal swapped (a planted fault). */
extern const cuda_sub_ops cuemu_sub_ops, cuemu_sub_ops_flipped;

/* Value v of vals: rank dims, sharded over group 0's 2 ranks along dim
 * sdim (-1: replicated). */
static inline void emu_def(rt_value_desc *vals, int v, const char *name, rt_value_kind kind, rt_dtype dt, int rank,
                           const int64_t *dims, int sdim) {
    rt_value_desc *d = &vals[v];
    d->name = name, d->kind = kind, d->dtype = dt, d->rank = rank;
    d->local_elems = 1;
    for (int i = 0; i < rank; i++) {
        d->dims[i] = dims[i], d->shard[i] = i == sdim ? 0 : -1;
        d->local_elems *= i == sdim ? dims[i] / 2 : dims[i];
    }
}

/* The world of 2 ranks both tests run on, one group over it (group 0). */
static const int emu_world_ranks[] = {0, 1};
static const rt_group_desc emu_groups[] = {{"world", 1, 2, emu_world_ranks, 0}};
/* The first three values of every test program. */
enum { EMU_TOK, EMU_TGT, EMU_LOSS };

/* A 2-rank, 1-layer program over vals[0..nv) (values 0, 1, 2: tokens,
 * targets, loss, defined here as [b, S] sharded on S and a scalar),
 * sequence-parallel over the world, the ring's order when seq_ring is 2. */
static inline rt_program emu_program(const char *model, const char *spec, rt_value_desc *vals, int nv, int64_t b,
                                     int64_t S, int64_t seq_ring) {
    const int64_t tok[2] = {b, S}, one[1] = {1};
    emu_def(vals, EMU_TOK, "tok", RT_INPUT, RT_I32, 2, tok, 1);
    emu_def(vals, EMU_TGT, "tgt", RT_INPUT, RT_I32, 2, tok, 1);
    emu_def(vals, EMU_LOSS, "loss", RT_ACT, RT_F32, 1, one, -1);
    return (rt_program){.model = model,
                        .spec = spec,
                        .world = 2,
                        .nodes = 1,
                        .devices_per_node = 2,
                        .ngroups = 1,
                        .groups = emu_groups,
                        .nvalues = nv,
                        .values = vals,
                        .tokens = EMU_TOK,
                        .targets = EMU_TGT,
                        .loss = EMU_LOSS,
                        .micro_batch = b,
                        .seq_len = S,
                        .vocab = 256,
                        .layers = 1,
                        .lr = 1e-3,
                        .steps = 1,
                        .seed = 7,
                        .batch_groups = 1,
                        .sp_size = 2,
                        .seq_ring = seq_ring};
}
#endif
