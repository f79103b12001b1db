/* ir_mem_work.c — the kernels' workspace outside the arena, per target:
 * each slot's size (the largest request of any op, ir_op_desc.ws_cpu /
 * ws_cuda) and, on CUDA, where each slot lies in the one device region the
 * backend allocates for them (runtime/cuda/rt_buf_cuda.c cuda_ws).
 *
 * Why one region: with an allocation per slot, the step's workspace is the
 * sum of every slot's largest request (19.2 GiB for Llama-3.1-8B at 6.5M
 * tokens on 8 x H100, where the op at the peak uses 6.4 of them).  Most
 * slots are the scratch of one kind of op: the all-to-alls' staging,
 * cuDNN's dQ accumulator, the LM head's logits.  Two slots that are never
 * in use at the same time may share bytes, so the region is sized by the
 * slots in use together.
 *
 * When a slot is in use: at each op whose descriptor asks for it; for a
 * collective, which runs on the communication stream behind the compute
 * work issued before it, from the op until the compute stream waits for it
 * or for any later collective (the communication stream runs them in
 * order): up to, not including, the first op that reads a result of it or
 * of a later collective and makes the compute stream wait (a kernel, an
 * optimizer update or a wait: cuda_use, before the op's own work), or to
 * the end of the step when none does.  Slots whose
 * contents outlive an op never share: the RoPE table and the sequence
 * positions (cached across calls), the LM head's row statistics (kept from
 * its forward to its backward), ZeRO-1's gradient slice (the host update
 * may read it after the op) and the ring's blocks (its hops run on the
 * communication stream).  They, and the SUMS rows (cuDNN's softmax
 * statistics), keep allocations of their own.
 *
 * Placement: the shared slots largest first, each at the lowest aligned
 * offset where it overlaps no placed slot it is ever in use with. */
#include "ir_internal.h"
#include "ir_op.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A CUDA slot that keeps its contents across ops: never shared. */
static bool work_cuda_own(int k) {
    return k == CM_WS_CUDA_ROPE || k == CM_WS_CUDA_POS || k == CM_WS_CUDA_LSE || k == CM_WS_CUDA_SLICE ||
           k == CM_WS_CUDA_RING;
}

/* Per value, the first op that makes the compute stream wait for it (a
 * kernel, an optimizer update, a wait); m->nops when none does. */
static int *work_first_wait(const ir_module *m) {
    int *first = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    for (int v = 0; v < m->nvalues; v++) first[v] = m->nops;
    for (int i = m->nops - 1; i >= 0; i--) {
        const ir_op *op = &m->ops[i];
        ir_op_kind kind = ir_op_desc_of(op->code)->kind;
        if (kind != IR_K_COMPUTE && kind != IR_K_OPT && op->code != IR_WAIT) continue;
        for (int k = 0; k < op->nin; k++)
            if (op->in[k] >= 0 && op->in[k] < m->nvalues) first[op->in[k]] = i;
    }
    return first;
}

/* Per op, the first op at which the compute stream has waited for it or
 * for a later collective (m->nops: never): for a collective the earliest
 * waiting reader of its results or of any later collective's, for any
 * other op -1. */
static int *work_waited(const ir_module *m) {
    int *first = work_first_wait(m), *waited = sup_xmalloc(sizeof(int) * (size_t)(m->nops + 1));
    int later = m->nops; /* the earliest wait for a collective at or after i */
    for (int i = m->nops - 1; i >= 0; i--) {
        const ir_op *op = &m->ops[i];
        waited[i] = -1;
        if (ir_op_desc_of(op->code)->kind != IR_K_COLL) continue;
        for (int k = 0; k < op->nout; k++)
            if (op->out[k] >= 0 && op->out[k] < m->nvalues && first[op->out[k]] < later) later = first[op->out[k]];
        waited[i] = later;
    }
    free(first);
    return waited;
}

/* The last op at which op i's workspace is in use (see the top). */
static int work_until(const ir_module *m, int i, const int *waited) {
    if (waited[i] < 0) return i;
    int until = waited[i] - 1; /* the waiting op runs after the collective */
    return until < i ? i : until < m->nops ? until : m->nops - 1;
}

/* Sets bits [a, b] of a bitset. */
static void bits_set(uint64_t *w, int a, int b) {
    for (int i = a; i <= b;) {
        if (i % 64 == 0 && i + 63 <= b) {
            w[i / 64] = ~UINT64_C(0);
            i += 64;
        } else {
            w[i / 64] |= UINT64_C(1) << (i % 64);
            i++;
        }
    }
}

static bool bits_meet(const uint64_t *a, const uint64_t *b, int nw) {
    for (int i = 0; i < nw; i++)
        if (a[i] & b[i]) return true;
    return false;
}

/* Offsets in the shared region for the slots with live sets in use[]:
 * largest first, each at the lowest aligned offset clear of every placed
 * slot it meets. */
static void work_place(ir_mem_work_slot *slot, int n, uint64_t *const *use, int nw, int64_t align) {
    int order[IR_MEM_WORK_MAX], no = 0;
    for (int k = 0; k < n; k++)
        if (use[k] && slot[k].bytes > 0) order[no++] = k;
    for (int a = 1; a < no; a++) /* by size, largest first; ties in row order */
        for (int b = a; b > 0 && slot[order[b]].bytes > slot[order[b - 1]].bytes; b--) {
            int t = order[b];
            order[b] = order[b - 1], order[b - 1] = t;
        }
    for (int a = 0; a < no; a++) {
        int k = order[a];
        int64_t off = 0;
        for (bool moved = true; moved;) {
            moved = false;
            for (int b = 0; b < a; b++) {
                int j = order[b];
                if (off < slot[j].off + slot[j].bytes && slot[j].off < off + slot[k].bytes &&
                    bits_meet(use[j], use[k], nw)) {
                    off = (slot[j].off + slot[j].bytes + align - 1) / align * align;
                    moved = true;
                }
            }
        }
        slot[k].off = off;
    }
}

/* Kernel workspace outside the arena by slot (ir_op.h): each slot grown to
 * the largest request of the step's ops (their descriptors' ws_cpu /
 * ws_cuda say what they ask for and why), each SUMS row the sum of its
 * ops' requests.  Every op asks into an array of its own, so that the op
 * behind each slot's size can be named.  CPU: the kernels' own grow-only
 * buffers (runtime/host/kern_*.c), off -1.  CUDA: the device workspaces
 * (runtime/cuda/rt_cuda.h), which also hold the collectives' staging (the
 * cuda plan has no staging region in the arena): the shared ones placed in
 * one region (see the top), the others off -1. */
int ir_mem_work_slots(const ir_module *m, ir_mem_target t, ir_mem_work_slot *slot) {
    int n = t.cuda ? CM_WS_CUDA_N : CM_WS_CPU_N, sums = t.cuda ? CM_WS_CUDA_NSLOTS : CM_WS_CPU_NSLOTS;
    for (int k = 0; k < n; k++)
        slot[k] = (ir_mem_work_slot){.name = t.cuda ? cm_ws_cuda_names[k] : cm_ws_cpu_names[k],
                                     .what = t.cuda ? cm_ws_cuda_what[k] : cm_ws_cpu_what[k],
                                     .sum = k >= sums,
                                     .op = -1,
                                     .off = -1};
    int nw = (m->nops + 63) / 64;
    uint64_t *use[IR_MEM_WORK_MAX] = {0};
    int *waited = t.cuda ? work_waited(m) : NULL;
    for (int i = 0; i < m->nops; i++) {
        const ir_op_desc *d = ir_op_desc_of(m->ops[i].code);
        void (*ws)(const ir_module *, const ir_op *, int64_t *) = t.cuda ? d->ws_cuda : d->ws_cpu;
        if (!ws) continue;
        int64_t req[IR_MEM_WORK_MAX] = {0};
        ws(m, &m->ops[i], req);
        for (int k = 0; k < n; k++) {
            if (req[k] <= 0) continue;
            if (slot[k].sum) {
                slot[k].bytes += req[k];
                if (slot[k].nops++ == 0) slot[k].op = i;
                continue;
            }
            if (req[k] > slot[k].bytes) slot[k].bytes = req[k], slot[k].op = i;
            if (t.cuda && !work_cuda_own(k)) {
                if (!use[k]) use[k] = sup_xcalloc((size_t)nw + 1, sizeof(uint64_t));
                bits_set(use[k], i, work_until(m, i, waited));
            }
        }
    }
    if (t.cuda) work_place(slot, n, use, nw, t.align);
    for (int k = 0; k < n; k++) free(use[k]);
    free(waited);
    return n;
}

int64_t ir_mem_work_region(const ir_mem_work_slot *slot, int n) {
    int64_t end = 0;
    for (int k = 0; k < n; k++)
        if (slot[k].off >= 0 && slot[k].off + slot[k].bytes > end) end = slot[k].off + slot[k].bytes;
    return end;
}

int64_t ir_mem_work_bytes(const ir_module *m, ir_mem_target t) {
    ir_mem_work_slot slot[IR_MEM_WORK_MAX];
    int n = ir_mem_work_slots(m, t, slot);
    int64_t total = ir_mem_work_region(slot, n);
    for (int k = 0; k < n; k++)
        if (slot[k].off < 0) total += slot[k].bytes;
    return total;
}
