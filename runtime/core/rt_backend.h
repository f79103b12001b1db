/* rt_backend.h — the backend interface: what a backend (cpu/, cuda/)
 * implements, and what core gives the backends to implement it with.
 *
 * A runtime library holds core, data/, ckpt/, obs/ and exactly one
 * backend.  Core owns the orchestration (start-up, the loop, checks,
 * counting, the optimizer's norm, clipping and non-finite skip); a backend
 * owns its buffers and does the device work, and has its own state
 * (struct rt_backend_state, rt_ctx.be) and its own prefix for everything
 * internal (cpu_, cuda_).  A backend implements:
 *
 *   - the primitives declared below;
 *   - the entry points of include/basp_rt.h that are device work, with
 *     their names and signatures unchanged (generated code calls them):
 *     the kernels rt_embedding(_bwd), rt_rmsnorm(_bwd), rt_linear(_bwd),
 *     rt_rope(_bwd), rt_attention(_bwd), rt_ring_attention(_bwd),
 *     rt_swiglu(_bwd), rt_mlp(_bwd), rt_bias_add(_bwd), rt_add,
 *     rt_lm_head_loss(_bwd), each counted with rt_kern_count; the
 *     collectives rt_all_to_all, rt_all_to_all_rope, rt_all_gather, rt_reduce_scatter,
 *     rt_all_reduce (each also as _start), rt_wait, rt_send, rt_recv, each
 *     counted with rt_coll_count; the copies rt_offload, rt_fetch.
 *
 * Core implements the rest of basp_rt.h (rt_main, rt_f32, rt_i32, rt_free,
 * rt_adamw, the shapes) on these primitives.  runtime/README.md, "The
 * backend interface", has the list with what each must do. */
#ifndef BASP_RT_BACKEND_H
#define BASP_RT_BACKEND_H

#include "rt_core.h"

/* ==== what a backend implements =========================================== */

/* ---- start-up and tear-down ---------------------------------------------------
 * rt_backend_preinit: before MPI_Init (the CPU: one BLAS thread per rank).
 * rt_backend_init: once the groups exist; makes rt->be (the device and its
 * communicators, the backend's state) and, when the program starts
 * collectives (rt_program.started), fills rt->progress_note.
 * rt_arena_build: lays out and allocates the arena (the plan's, or one slot
 * per value), sets rt->buf, opt_m, opt_v, arena_bytes, host_bytes,
 * cat_bytes and calls rt_mem_init.  rt_backend_fini: frees all of it and
 * rt->be (after rt_comm_finish_step). */
void rt_backend_preinit(void);
void rt_backend_init(rt_ctx *rt);
void rt_arena_build(rt_ctx *rt);
void rt_backend_fini(rt_ctx *rt);
/* Bytes the backend holds outside the arena for kernels and collectives
 * now (grow-only, so also their high-water mark): CPU, the kernels' scratch
 * and RoPE table; CUDA, the device workspaces and send copies. */
size_t rt_backend_workspace_bytes(const rt_ctx *rt);
/* What the end-of-run time-by-kind table measures, when that is not each
 * kind's own work (CUDA without --profile: the host's launch times); NULL
 * otherwise. */
const char *rt_backend_timing_note(const rt_ctx *rt);
/* The implementation this backend runs attention with (ring blocks when
 * ring): common.h's cm_attention_impl applied to this run, the rule the
 * cost model prices; --trace-run names it on every attention event. */
cm_attn_impl rt_backend_attention_impl(rt_ctx *rt, bool ring);

/* ---- batch_aware dynamic (core/rt_dyn.c) -----------------------------------------
 * rt_backend_dyn_groups: on every rank, before a micro-step (or a
 * validation) binds its groups gs, which are the same on every rank: the
 * backend readies its own communicators for the block groups placed there
 * (CUDA: NCCL's, one per placed set, made the first time a placement occurs
 * by ncclCommSplit over the world, which every rank calls in the same
 * order; the CPU: nothing, core's MPI communicators serve).
 * rt_backend_dyn_bind: block group g now runs on the ranks from `first`
 * (core has set rt->comm[g], gset[g] and gpos[g]). */
void rt_backend_dyn_groups(rt_ctx *rt, const layout_dyn_group *gs, int ng);
void rt_backend_dyn_bind(rt_ctx *rt, int g, int first);

/* ---- buffers --------------------------------------------------------------------
 * rt_backend_buffer: value v's buffer for the op about to use it (rt_f32 and
 * rt_i32 have checked v); makes it live (rt_mem_touch) and orders it after
 * whatever wrote it.  rt_backend_free: v, live until now, dies (rt_free
 * then releases it from the plan); the device backend fences its bytes. */
void *rt_backend_buffer(rt_ctx *rt, int v);
void rt_backend_free(rt_ctx *rt, int v);

/* ---- host access to local buffers -------------------------------------------------
 * Everything outside the kernels, the collectives and the optimizer (init,
 * data, the loss, saving, loading, checkpoints) reads and writes value and
 * optimizer-state buffers only through these, so that a device backend can
 * keep its buffers on the device and copy here.  Sizes: local_elems × 4
 * bytes (fp32 or int32); optimizer state: the param's local_elems floats
 * each of m and v.  CPU backend: memcpy.  CUDA backend: a synchronous copy
 * with bf16 <-> fp32 conversion (a parameter reads and writes its fp32
 * master copy). */
void rt_host_read(rt_ctx *rt, int v, void *dst);
void rt_host_write(rt_ctx *rt, int v, const void *src);
void rt_host_read_opt(rt_ctx *rt, int pair, float *m, float *v);
void rt_host_write_opt(rt_ctx *rt, int pair, const float *m, const float *v);

/* ---- the step's communication ----------------------------------------------------
 * rt_comm_progress: between kernels (rt_kern_count), lets the started
 * collectives in flight move.  rt_comm_finish_step: at the end of a step,
 * completes pending sends (CUDA: and the step's device work) and checks
 * that every started collective had its wait. */
void rt_comm_progress(rt_ctx *rt);
void rt_comm_finish_step(rt_ctx *rt);

/* ---- running the step's functions (core/rt_loop.c) --------------------------------
 * rt_backend_run: one call of a step function of the program (step: the
 * whole step or one micro-step; apply: the apply phase), then
 * rt_comm_finish_step.  The CPU backend calls them; the CUDA backend may
 * capture fn's device work as a CUDA graph on its second call and launch
 * that instead of calling fn later (rt_graph_cuda.c, BASP_CUDA_GRAPH).  A
 * backend that launches a graph counts the calls and bytes its capture
 * counted, and sets rt->step_untimed when it cannot time the collectives. */
void rt_backend_run(rt_ctx *rt, void (*fn)(rt_ctx *rt));

/* ---- the optimizer's device work (core's rt_adamw and rt_grad_norm call them) ----
 * rt_backend_grad_sumsq: sumsq[i] = the sum of squares (in double) of opt
 * pair i's local gradient, for every pair.  rt_backend_adamw: one AdamW
 * step of pair i (param, grad) with weight decay wd, at rt->lr, the clip
 * factor rt->clip_scale and step rt->step + 1; a gradient whole where the
 * parameter is sharded (rt_grad_like_param false) is sliced at the shard's
 * offset first. */
void rt_backend_grad_sumsq(rt_ctx *rt, double *sumsq);
void rt_backend_adamw(rt_ctx *rt, int i, int param, int grad, double wd);

/* ==== what core gives the backends =========================================== */

/* ---- collectives: checks and shapes (rt_coll.c) ----------------------------------- */
/* The start of a collective of kind k on group g; returns the time its
 * exchange starts.  With --split-wait the rank's set first meets at a
 * barrier whose time is counted as waiting (for the set's slowest rank),
 * so that the collective's own time is the exchange alone. */
double rt_coll_begin(rt_ctx *rt, int g, rt_coll_kind k);
const rt_value_desc *rt_coll_val(rt_ctx *rt, int v);
int rt_coll_set_size(rt_ctx *rt, int g);
/* Products of the local dims before and after `dim`. */
void rt_outer_inner(const int64_t *ld, int nd, int dim, int64_t *outer, int64_t *inner);
/* Only all_to_all handles uneven splits; the others refuse them. */
void rt_check_even(rt_ctx *rt, const char *op, int v);
void rt_check_dim_coll(rt_ctx *rt, const char *op, int g, int dim, int sharded, int whole);
/* Position inside the rank's set of g at offset `peer` (ring arithmetic). */
int rt_coll_peer(rt_ctx *rt, int g, int peer);
/* rt_offload (to_host) and rt_fetch: src and dst are values of one size, on
 * the device and in host memory (the other way round for a fetch), whose
 * elements `same` says the backend stores alike; returns src's descriptor. */
typedef bool (*rt_same_elems_fn)(const rt_value_desc *a, const rt_value_desc *b);
const rt_value_desc *rt_check_copy(rt_ctx *rt, int src, int dst, bool to_host, rt_same_elems_fn same);

/* What a gather or reduce-scatter along `dim` checks and needs, on every
 * backend: the set size K, the elements n of one rank's block (`block`: the
 * gather's input, the reduce-scatter's output), the count O of the dims
 * before `dim` and the run of one block per outer index (blocks interleave
 * along an inner dim).  A reduce-scatter's values must be f32. */
typedef struct rt_dimcoll {
    int K;
    int64_t n, O, run;
    const rt_value_desc *d; /* the block's value */
} rt_dimcoll;
rt_dimcoll rt_dimcoll_plan(rt_ctx *rt, rt_coll_kind kind, const char *op, int g, int dim, int block, int whole);

/* all_to_all geometry: both buffers are viewed as 5-d [O, A, M, B, I] with
 * A, B the split and concat dims in dim order.  A chunk (what one rank
 * sends one peer) has the peer's range of the split dim and all local
 * entries of the concat dim; with an uneven split the ranges differ by
 * peer.  Both backends pack and unpack with exactly this geometry. */
typedef struct rt_a2a_geom {
    const rt_program *p;
    const rt_value_desc *xd, *yd;
    int split, concat;
    int64_t O, M, I;
    int64_t xa, xb, ya, yb; /* local sizes of dims a, b in x and y */
    int64_t nvy, lxc;       /* y-local split size, x-local concat size */
    int64_t fo, fi;         /* this pair's fanout / fanin ratio (1 or F) */
    bool a_split;           /* dim a is the split dim */
    /* Nested groups (ir_group_nested): y's split dim sharded by hx x g and
     * x's concat dim by gy x g.  Peer q's position in those product groups
     * is spos0 + q / cpos0 + q; xs0 and yc0 are the global starts of this
     * rank's own x split range and y concat range (all 0 when flat). */
    int64_t spos0, cpos0, xs0, yc0;
} rt_a2a_geom;
enum { RT_A2A_MAX = 8 };
rt_a2a_geom rt_a2a_plan(rt_ctx *rt, int g, int split, int concat, int x, int y);
/* Elements this rank sends the peer at position q / receives from p. */
int64_t rt_a2a_send_count(const rt_a2a_geom *G, int q);
int64_t rt_a2a_recv_count(const rt_a2a_geom *G, int p);
/* Global start of peer q's split range in y (virtual entries under fanout) /
 * of peer p's concat range in x. */
int64_t rt_a2a_send_base(const rt_a2a_geom *G, int q);
int64_t rt_a2a_recv_base(const rt_a2a_geom *G, int p);
/* Checks the fused exchange (n pairs, fanout/fanin) and plans each pair. */
void rt_a2a_plan_all(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                     const int *outs, rt_a2a_geom *G);
/* Checks the pairs an exchange rotates (rt_all_to_all_rope: bit k of rope,
 * rope_bwd) and returns the rotated side's local batch, sequence and head
 * sizes (-1 when none is rotated). */
void rt_a2a_rope_check(rt_ctx *rt, const rt_a2a_geom *G, int n, int rope, int rope_bwd, int64_t *b, int64_t *s,
                       int64_t *Dh);
/* The per-peer counts and displacements (elements) of the fused exchange
 * of the n pairs G over a set of K ranks, this one at position me: chunk q
 * holds the n pairs' pieces for peer q one after the other.  cnt (4K
 * entries): send counts, send displacements, receive counts, receive
 * displacements.  Totals, the elements sent to other ranks, and whether
 * every chunk both ways has one size. */
typedef struct rt_a2a_sizes {
    int64_t stot, rtot, sent;
    bool same;
} rt_a2a_sizes;
rt_a2a_sizes rt_a2a_counts(const rt_a2a_geom *G, int n, int K, int me, int64_t *cnt);

/* ---- the optimizer (rt_optim.c) --------------------------------------------------
 * Whether a gradient is laid out like its parameter (true) or whole where
 * the parameter is sharded (ZeRO-1: false, the caller slices it at the
 * shard's global offset); anything else stops the job. */
bool rt_grad_like_param(rt_ctx *rt, int param, int grad);

#endif
