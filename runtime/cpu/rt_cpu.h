/* rt_cpu.h — the CPU backend (basp_rt): fp32 buffers in host memory, the
 * host kernels (host/rt_host.h) for the ops, MPI for the collectives.  Its
 * state (rt_cpu_state, rt_ctx.be) and what its files share; everything here
 * is prefixed cpu_.  The backend implements the primitives of
 * core/rt_backend.h: buffers, host access and the hooks in rt_buf_cpu.c,
 * kernel calls in rt_kernels.c, collectives in rt_comm.c (started ones in
 * rt_async.c), ring attention in rt_ring.c, the optimizer's sums of squares
 * and update in rt_opt.c.
 *
 * The CPU backend uses core (rt_backend.h, rt_core.h), the host kernels,
 * and data/ for the positions and document ids the kernels read; nothing of
 * the CUDA backend. */
#ifndef BASP_RT_CPU_H
#define BASP_RT_CPU_H

#include <mpi.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/rt_backend.h"

/* A send whose buffer must stay alive until the request completes. */
typedef struct cpu_pending_send {
    MPI_Request req;
    void *buf;
} cpu_pending_send;

struct cpu_async;    /* rt_async.c: a started collective in flight */
struct cpu_attn_lse; /* rt_kernels.c: an attention forward's kept statistics */

/* The CPU backend's state: rt_ctx.be (core declares the struct opaque). */
typedef struct rt_backend_state rt_cpu_state;
struct rt_backend_state {
    /* Scratch for collectives: with a plan the two staging areas it
     * reserved in the arena, else grow-only heap buffers (cpu_scratch). */
    void *scratch[2];
    bool scratch_held; /* a started all_to_all holds the staging areas until its wait */
    size_t scratch_bytes[2];
    cpu_pending_send *sends;
    int nsends, cap_sends;
    /* Started collectives in flight (rt_async.c), and its progress
     * thread: running, asked to stop, requests in flight (read by it). */
    struct cpu_async *async;
    int nasync, cap_async;
    pthread_t progress;
    bool progress_ok, progress_running;
    int progress_stop, progress_want;
    /* Attention: each forward's logsumexp for its backward (rt_kernels.c);
     * BASP_ATTN_LSE=0 recomputes it instead. */
    struct cpu_attn_lse *lse;
    int nlse, cap_lse;
    size_t lse_bytes;
    bool lse_off;
};

static inline rt_cpu_state *cpu_state(const rt_ctx *rt) { return rt->be; }

/* ---- staging areas (rt_buf_cpu.c) ------------------------------------------------
 * Staging area `which` (0 or 1) of at least `bytes`: the plan's (a request
 * beyond it stops the run: the compiler's model of the collectives,
 * ir/ir_mem.c, and this backend's disagree), or a grow-only buffer. */
void *cpu_scratch(rt_ctx *rt, int which, size_t bytes);

/* ---- kernels (rt_kernels.c) ------------------------------------------------------
 * The program's RoPE scaling for the host kernels: buf filled, or NULL for
 * none (the exchange's fused rotation uses it too, rt_comm.c). */
struct kern_rope_scaling;
const struct kern_rope_scaling *cpu_rope_scaling_of(const rt_program *p, struct kern_rope_scaling *buf);

/* ---- started collectives (rt_async.c) ----------------------------------------------
 * A collective just started (rt_comm.c) with request req (null when it
 * completed at once), whose results are outs[0..nouts): in flight until a
 * wait names them.  finish(rt, arg), when given, runs at the wait once the
 * request is complete (an exchange's unpack). */
typedef void (*cpu_async_finish_fn)(rt_ctx *rt, void *arg);
void cpu_async_add(rt_ctx *rt, MPI_Request req, int nouts, const int *outs, rt_coll_kind kind, int64_t bytes,
                   double t_start, cpu_async_finish_fn finish, void *arg);
/* At the end of a step: none may be left (every start has its wait). */
void cpu_async_finish_step(rt_ctx *rt);
/* Decides (collectively, at start-up, when the program starts collectives)
 * whether the progress thread may run, and says why in rt->progress_note. */
void cpu_async_init(rt_ctx *rt);
/* Stops the progress thread, if one runs (before MPI_Finalize). */
void cpu_async_shutdown(rt_ctx *rt);

/* ---- attention (rt_kernels.c) ------------------------------------------------------- */
/* The attention forwards' kept statistics, freed. */
void cpu_lse_fini(rt_ctx *rt);
/* An offload or fetch copied o to `to`: its statistics follow the copy. */
void cpu_lse_moved(rt_ctx *rt, const float *o, const float *to);
/* Rank 0 names the CPU attention kernels, once (dense, packed documents
 * and ring attention alike). */
void cpu_attention_say(rt_ctx *rt, int64_t Dh);

#endif
