/* test_chunk.c — the chunking of whole-tensor gathers and scatters
 * (runtime/ckpt/rt_chunk.h) in 64 bits: a tensor of 3e9 elements (over 2^31)
 * splits into chunks that cover it exactly, each count fitting an int. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "../unit/check.h"
#include "ckpt/rt_chunk.h"

/* The chunks of n cover [0, n) in order, each 1..chunk <= INT_MAX elements. */
static void cover(int64_t n, int64_t chunk) {
    int64_t k = rt_chunk_count(n, chunk), next = 0;
    CHECK(k == (n + chunk - 1) / chunk);
    for (int64_t i = 0; i < k; i++) {
        int64_t s;
        int len = rt_chunk_at(n, chunk, i, &s);
        CHECK(s == next);
        CHECK(len >= 1 && len <= chunk && len <= INT_MAX);
        next = s + len;
    }
    CHECK(next == n);
}

int main(void) {
    const int64_t big = 3000000000LL; /* 3e9 > 2^31 - 1 */
    /* Llama-3.1-8B's embedding, ZeRO-0 on 8 ranks: 8 x 525M elements. */
    const int64_t embed = 128256LL * 4096, world = 8;
    CHECK(embed * world > INT_MAX);
    for (int w = 1; w <= 1024; w *= 2) {
        int64_t c = rt_chunk_per_rank(w, 0);
        CHECK(c >= 1 && c <= RT_GATHER_CHUNK_MAX);
        CHECK(c * w <= RT_GATHER_CHUNK_TOTAL); /* the receive buffer stays bounded */
        cover(big, c);
        cover(embed, c);
    }
    CHECK(rt_chunk_per_rank(8, 5) == 5);                     /* the test override */
    CHECK(rt_chunk_per_rank(1, big) == RT_GATHER_CHUNK_MAX); /* capped: never an int overflow */
    cover(big, RT_GATHER_CHUNK_MAX);
    CHECK(rt_chunk_count(big, RT_GATHER_CHUNK_MAX) == 3);
    int64_t s;
    CHECK(rt_chunk_at(big, RT_GATHER_CHUNK_MAX, 2, &s) == (int)(big - 2 * RT_GATHER_CHUNK_MAX) &&
          s == 2 * RT_GATHER_CHUNK_MAX);
    cover(7, 3);
    cover(1, 1);
    CHECK(rt_chunk_count(0, 4) == 0);
    if (failures) return 1;
    printf("chunking: 3e9 elements and an 8-rank Llama-3.1-8B embedding split in 64 bits, every count an int\n");
    return 0;
}
