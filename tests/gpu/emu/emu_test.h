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
#endif
