/* rt_chunk.h — the chunking of gathers and scatters of whole tensors
 * (rt_save.c): every count is 64-bit until one chunk's, which is at most
 * RT_GATHER_CHUNK_MAX elements and so fits the int of an MPI call.  Pure
 * arithmetic, no MPI: tests/ckpt/test_chunk.c checks it at 3e9 elements. */
#ifndef RT_CHUNK_H
#define RT_CHUNK_H

#include <stdint.h>
#include <stdlib.h>

/* The elements all ranks together send in one collective (default): 2^26
 * floats, 256 MiB of receive buffer on rank 0. */
#define RT_GATHER_CHUNK_TOTAL ((int64_t)1 << 26)
/* No rank ever sends more than this in one call (< 2^31 - 1). */
#define RT_GATHER_CHUNK_MAX ((int64_t)1 << 30)

/* Elements each rank sends per collective for `world` ranks; `test` > 0
 * (BASP_TEST_GATHER_CHUNK) replaces the default, for tests that need many
 * chunks from a tiny model. */
static inline int64_t rt_chunk_per_rank(int world, int64_t test) {
    int64_t c = test > 0 ? test : RT_GATHER_CHUNK_TOTAL / (world > 0 ? world : 1);
    if (c < 1) c = 1;
    if (c > RT_GATHER_CHUNK_MAX) c = RT_GATHER_CHUNK_MAX;
    return c;
}

/* The number of chunks of n elements (0 for n <= 0). */
static inline int64_t rt_chunk_count(int64_t n, int64_t chunk) { return n <= 0 ? 0 : (n - 1) / chunk + 1; }

/* Chunk i of n: its first element (64-bit) and its length (an int, <= chunk). */
static inline int rt_chunk_at(int64_t n, int64_t chunk, int64_t i, int64_t *start) {
    int64_t s = i * chunk, len = n - s < chunk ? n - s : chunk;
    *start = s;
    return len > 0 ? (int)len : 0;
}

/* The test override from the environment (0 when unset or invalid). */
static inline int64_t rt_chunk_test_override(void) {
    const char *s = getenv("BASP_TEST_GATHER_CHUNK");
    long long v = s ? atoll(s) : 0;
    return v > 0 ? (int64_t)v : 0;
}

#endif
