/* kern_docattn.c — causal attention within the documents of packed rows.
 *
 * A row of S tokens holds several documents back to back; a query attends
 * only to the keys of its own document, causally.  This is the ring block
 * kernel (kern_ring.c) called once over the whole row with positions
 * 0..S-1 on both sides and the document ids as the second mask condition:
 * its tiles (64 queries x 64 keys) are skipped when their keys all come after
 * their queries or all lie in other documents, and masked only where a
 * document boundary or the diagonal crosses them.  So the masking, the
 * skipping, the online softmax and the SIMD steps exist once, and the work
 * follows the visible pairs: about sum_i l_i^2 / 2 per row, not S^2 / 2.
 *
 * The forward starts the ring's running result at (o = 0, lse = -inf) and
 * folds in the one block; the backward reruns the statistics (lse only, no
 * P V product), forms D = rowsum(dO o O) and runs the ring backward into
 * zeroed gradients, as kern_attention_bwd recomputes its lse. */
#include "rt_host.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* pos [S] = 0..S-1: the token index is its position within the row.  The
 * scratch is kern_scratch's, so the runtime's workspace figure counts it. */
static const int64_t *row_positions(int64_t S) {
    int64_t *pos = (int64_t *)(void *)kern_scratch(CM_WS_CPU_DPOS, 2 * S, "document attention");
    for (int64_t i = 0; i < S; i++) pos[i] = i; /* O(S): nothing next to the attention */
    return pos;
}

static float *stats_scratch(int64_t nfloats) { return kern_scratch(CM_WS_CPU_DSTATS, nfloats, "document attention"); }

/* lse [n] = -inf: the ring's "nothing seen yet". */
static void lse_empty(float *lse, int64_t n) {
    for (int64_t i = 0; i < n; i++) lse[i] = -INFINITY;
}

void kern_docattn_fwd(float *o, float *lse, const float *q, const float *k, const float *v, const int32_t *doc,
                      int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh) {
    if (b <= 0 || S <= 0) return;
    const int64_t *pos = row_positions(S);
    float *l = lse ? lse : stats_scratch(b * S * H);
    memset(o, 0, (size_t)(b * S * H * Dh) * sizeof(float));
    lse_empty(l, b * S * H);
    kern_ring_block_fwd_doc(o, l, q, k, v, b, S, S, H, Hk, Dh, pos, pos, doc, doc);
}

void kern_docattn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *o, const int32_t *doc, int64_t b, int64_t S, int64_t H, int64_t Hk,
                      int64_t Dh) {
    /* The ring backward accumulates (beta = 1) into the outputs. */
    memset(dq, 0, (size_t)(b * S * H * Dh) * sizeof(float));
    memset(dk, 0, (size_t)(b * S * Hk * Dh) * sizeof(float));
    memset(dv, 0, (size_t)(b * S * Hk * Dh) * sizeof(float));
    if (b <= 0 || S <= 0) return;
    const int64_t *pos = row_positions(S);
    int64_t nl = b * S * H;
    float *lse = stats_scratch(2 * nl), *D = lse + nl;
    lse_empty(lse, nl);
    kern_ring_block_fwd_doc(NULL, lse, q, k, v, b, S, S, H, Hk, Dh, pos, pos, doc, doc);
    kern_ring_rowdot(D, dout, o, b, S, H, Dh);
    kern_ring_block_bwd_doc(dq, dk, dv, dout, q, k, v, lse, D, b, S, S, H, Hk, Dh, pos, pos, doc, doc);
}
