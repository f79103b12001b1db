/* rt_cuda.h — the CUDA backend (basp_rt_cuda): bf16 parameters and
 * activations with fp32 master weights on the device, cuBLAS GEMMs, its own
 * kernels (kcu.h, kcu_*.cu), cuDNN attention where available
 * (rt_attn_cudnn.h), NCCL collectives.  Its state (rt_cuda_state,
 * rt_ctx.be), the check macros and the helpers its files share; everything
 * here is prefixed cuda_.  The backend implements the primitives of
 * core/rt_backend.h: device, arena, buffers and host access in
 * rt_buf_cuda.c, kernel calls in rt_kernels_cuda.c, collectives in
 * rt_comm_cuda.c, ring attention in rt_ring_cuda.c, the optimizer's sums of
 * squares and update in rt_opt_cuda.c.
 *
 * The CUDA backend uses core (rt_backend.h, rt_core.h), the host kernels
 * (host/rt_host.h: the RoPE table, the host AdamW of the offloaded
 * optimizer) and data/ for the positions and document ids the kernels read;
 * nothing of the CPU backend.
 *
 * Streams: kernels run on the compute stream `cs`, collectives (and their
 * pack/unpack kernels) on the communication stream `ms`.  A collective
 * first makes `ms` wait for everything issued on `cs` so far (its inputs),
 * then records a per-value event on each output; the value is "pending"
 * until rt_f32/rt_i32 hands its pointer to a kernel, which makes `cs` wait
 * for that event.  Independent compute issued between the collective and
 * the first use of its output therefore overlaps with the communication.
 *
 * Under the compiler's memory plan buffers that are never live at the same
 * time share bytes, so a buffer's bytes may be written again only after its
 * last reader on either stream is done: rt_buf_cuda.c ("Buffer reuse across
 * the two streams") fences that with the same per-value events. */
#ifndef BASP_RT_CUDA_H
#define BASP_RT_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "../core/rt_backend.h"
#include "../host/rt_host.h"
#include "kcu.h"

/* ---- checks: every CUDA, cuBLAS and NCCL call, with file and line -------------- */
#define CU_CHECK(call)                                                                                                 \
    do {                                                                                                               \
        cudaError_t cuda_e_ = (call);                                                                                  \
        if (cuda_e_ != cudaSuccess) rt_die(__FILE__, __LINE__, "%s failed: %s", #call, cudaGetErrorString(cuda_e_));   \
    } while (0)
#define CUBLAS_CHECK(call)                                                                                             \
    do {                                                                                                               \
        cublasStatus_t rt_cb_s_ = (call);                                                                              \
        if (rt_cb_s_ != CUBLAS_STATUS_SUCCESS)                                                                         \
            rt_die(__FILE__, __LINE__, "%s failed: %s", #call, cublasGetStatusString(rt_cb_s_));                       \
    } while (0)
#define NCCL_CHECK(call)                                                                                               \
    do {                                                                                                               \
        ncclResult_t rt_nc_r_ = (call);                                                                                \
        if (rt_nc_r_ != ncclSuccess) rt_die(__FILE__, __LINE__, "%s failed: %s", #call, ncclGetErrorString(rt_nc_r_)); \
    } while (0)

/* Grow-only device workspaces, one per purpose: the rows of
 * common/common.h CM_WS_CUDA_SLOTS (the compiler sizes the same slots). */

/* The attention implementation (BASP_ATTENTION, resolved on first use in
 * rt_kernels_cuda.c): AUTO uses cuDNN's fused graphs for the shapes where
 * they build and pass a one-time check against the basp kernels, CUDNN
 * requires them, OWN is the basp kernels (kcu_attention*.cu). */
typedef enum { CUDA_ATTN_UNSET, CUDA_ATTN_AUTO, CUDA_ATTN_CUDNN, CUDA_ATTN_OWN } cuda_attn_mode;
struct cuda_dnn;              /* rt_attn_cudnn_rt.c: handle, per-shape verdicts, softmax statistics */
struct cuda_ring_split_state; /* rt_ring_split.c: per-shape verdicts, the blocks' runs */
struct cuda_doc_split_state;  /* rt_doc_split.c: per-shape verdicts, the batch shapes checked */
struct cuda_graphs;           /* rt_graph_cuda.c: the step functions' CUDA graphs */
typedef struct cuda_sub_ops cuda_sub_ops;

/* The streams, as bits of the per-value masks below. */
enum { CUDA_CS = 1, CUDA_MS = 2 };

/* Per value: what the reuse fences of rt_buf_cuda.c know about it. */
typedef struct cuda_life {
    uint8_t acc;        /* streams that accessed it since it came to life (or the device last synchronised) */
    uint8_t scanned;    /* streams that checked its overlapping slots in this life */
    uint8_t dirty;      /* dead: streams whose accesses the other stream is not yet known to follow */
    int nsend;          /* deferred sends (rt_send) not yet handed to NCCL that read its bytes */
    uint64_t ready_seq; /* ms_recs when ready[v] was last recorded */
    uint64_t mark_cs;   /* dead: cs_fences when it was freed */
    uint64_t mark_ms;   /* dead: ms_fences when it was freed */
} cuda_life;

/* A collective's timing events on the communication stream. */
typedef struct cuda_timer {
    cudaEvent_t start, stop;
    rt_coll_kind kind;
} cuda_timer;

/* The CUDA backend's state: rt_ctx.be (core declares the struct opaque). */
typedef struct rt_backend_state rt_cuda_state;
struct rt_backend_state {
    int device, local_rank, ndevices;
    cudaStream_t cs, ms;
    cublasHandle_t blas;
    ncclComm_t world;
    ncclComm_t *comm; /* per group: this rank's set (a block group's: the bound placement's) */
    /* batch_aware dynamic: the block groups' communicators, one per placed
     * set this rank is in (rt_comm_cuda.c), and which placements (block
     * group g at first rank f: dyn_seen[g * world + f]) have been made:
     * the same on every rank, since every rank sees every micro-step's groups. */
    struct cuda_dyn_comm *dyn;
    int ndyn, cap_dyn;
    unsigned char *dyn_seen;
    cudaEvent_t issued;     /* recorded on cs when a collective starts */
    cudaEvent_t comm_done;  /* recorded on ms after each collective */
    cudaEvent_t ring_ev[2]; /* ring attention: its kv and accumulator exchanges done (made on first use) */
    cudaEvent_t *ready;     /* per value: the last collective that read or wrote it finished */
    bool *pending;          /* per value: a collective wrote it, cs has not waited for ready since */
    /* Buffer reuse (rt_buf_cuda.c): per value its life, and the values whose
     * planned bytes overlap it (itself included): over[over_at[v] ..
     * over_at[v+1]).  Counters: events recorded on ms; times ms was made to
     * follow everything issued on cs (cs_fences) and cs everything on ms
     * (ms_fences); waits the reuse fences added, per waiting stream. */
    cuda_life *life;
    int *over_at, *over;
    uint64_t ms_recs, cs_fences, ms_fences;
    int64_t reuse_waits[2];
    float **master; /* per opt pair: the fp32 master weights */
    /* Optimizer offload (rt_program.opt_on_host): the master weights and
     * moments are in the pinned host arena, and each update goes through
     * this staging area there (at host_stage_off). */
    char *host_stage;
    size_t host_stage_off;
    int *opt_of;        /* per value: its opt pair (a param), else -1 */
    size_t *slot_bytes; /* per value */
    void *ws[CM_WS_CUDA_NSLOTS];
    size_t ws_bytes[CM_WS_CUDA_NSLOTS];
    /* The program's shared workspace region (rt_program.ws_region_bytes),
     * and the slots placed in it; a slot a kernel outgrows leaves it. */
    char *ws_region;
    bool ws_in_region[CM_WS_CUDA_NSLOTS];
    int *d_err;     /* device flag: a token or target outside the vocabulary */
    double *d_norm; /* per opt pair: sum of squares of the gradient */
    double *h_norm; /* the same come back to pinned host memory */
    /* The optimizer's per-step scalars (kcu_adamw_step): the host fills the
     * pinned copy once the step's norm is known, and a copy on cs takes it
     * to the device before the step's first update (rt_opt_cuda.c). */
    kcu_adamw_step *h_step, *d_step;
    bool step_stale; /* a norm was taken: the next update uploads the scalars first */
    /* The rotation table's key (as the CPU kernel caches it). */
    int64_t rope_S, rope_Dh, rope_pos0;
    double rope_theta;
    kern_rope_scaling rope_sc;
    bool rope_scaled, rope_valid;
    int64_t pos_S, pos_ring; /* what the position table (cuda_seq_pos) holds: 0 = nothing */
    /* Workspace slots read on ms (an exchange with RoPE fused in reads the
     * rotation table and the positions there): the event after the last
     * such read, which cs waits for before it writes the slot again. */
    cudaEvent_t ws_ms_ev[CM_WS_CUDA_NSLOTS];
    bool ws_ms_read[CM_WS_CUDA_NSLOTS];
    /* This step's collective timers and deferred sends. */
    cuda_timer *timers;
    int ntimers, cap_timers;
    int *send_val, *send_g, *send_peer;
    void **send_ptr; /* what each deferred send reads: the value, or its copy in stage[i] */
    void **stage;    /* per deferred send: a copy of a value freed before the send went out */
    size_t *stage_bytes;
    int nsends, cap_sends;
    bool sync_timing; /* --profile: synchronise after each kernel */
    /* The LM head's row statistics in CM_WS_CUDA_LSE: which forward left them
     * (its x, N, V, D), consumed by the next backward of the same x. */
    const void *lse_x;
    int64_t lse_n, lse_v, lse_d;
    bool lse_valid;
    cuda_attn_mode attn_mode;
    struct cuda_dnn *dnn; /* cuDNN attention state (NULL: not used) */
    /* Ring attention's sub-blocks and packed documents on another
     * attention (rt_ring_split.c, rt_doc_split.c): that attention when set
     * (a test's), else cuDNN's where it runs; their verdicts and runs. */
    const cuda_sub_ops *sub_ops;
    struct cuda_ring_split_state *ring_split;
    struct cuda_doc_split_state *doc_split;
    struct cuda_graphs *graphs; /* BASP_CUDA_GRAPH (rt_graph_cuda.c) */
    uint64_t ws_gen;            /* bumped whenever a backend buffer a graph may use moves */
};

static inline rt_cuda_state *cuda_state(const rt_ctx *rt) { return rt->be; }

/* Bytes per element of a value on the device: bf16 for floating tensors,
 * fp32 for floating scalars (the loss), int32 for integers. */
int cuda_esize(const rt_value_desc *d);
void *cuda_ws(rt_ctx *rt, cm_ws_cuda_slot slot, size_t bytes);
/* n rounded up to the device arena's 256-byte alignment (which also meets
 * cuDNN's 16-byte tensors): offsets inside a workspace. */
size_t cuda_align(size_t n);
/* The one-time checks of cuDNN against basp's kernels (rt_attn_cudnn_rt.c,
 * rt_ring_split.c, rt_doc_split.c): device scratch, or NULL when it cannot
 * be had (the error cleared: the check is then skipped for basp's
 * kernels); and max |a - ref| <= 5e-2 max |ref| over n device bf16
 * elements (*rel: the ratio), NaN or Inf failing (bf16 P and dS: both
 * sides are within 3e-2 of an fp32 reference). */
void *cuda_try_malloc(size_t bytes);
bool cuda_close_bf16(rt_ctx *rt, const kcu_bf16 *a, const kcu_bf16 *ref, int64_t n, double *rel);
/* Copies `bytes` of host memory into workspace `slot` on cs and returns
 * the device copy: ordered after the kernels on cs that still read the
 * slot's old contents (and after a read of them on ms: cuda_ws_write_cs),
 * and before those queued after it; the host bytes
 * are read at the call (staged), so the caller may free them at once. */
void *cuda_upload(rt_ctx *rt, cm_ws_cuda_slot slot, const void *host, size_t bytes);
/* Workspace read on the communication stream: the kernels on cs use the
 * slots, so cs must not overwrite a slot that ms still reads.
 * cuda_ws_read_ms records, after the work just queued on ms, that it
 * reads `slot`; cuda_ws_write_cs, called before cs writes the slot
 * (cuda_upload, the cached RoPE table), makes cs wait for
 * that read. */
void cuda_ws_read_ms(rt_ctx *rt, cm_ws_cuda_slot slot);
void cuda_ws_write_cs(rt_ctx *rt, cm_ws_cuda_slot slot);
/* cs waits for every collective issued so far. */
void cuda_wait_comm(rt_ctx *rt);
/* Device pointer of value v for a kernel on cs (waits for its collective,
 * and, when v comes to life, for the last users of the bytes it reuses). */
void *cuda_use(rt_ctx *rt, int v);
/* Device pointer of value v for a collective on ms (its input or output):
 * the same, for the communication stream.  Call after ms has been made to
 * wait for cs (cuda_follow_cs), before queueing work that touches v. */
void *cuda_coll_use(rt_ctx *rt, int v);
/* ms waits for everything issued on cs so far. */
void cuda_follow_cs(rt_ctx *rt);
/* Records ready[v] on ms after the work just queued there that reads or
 * writes v; an output also becomes pending. */
void cuda_coll_done(rt_ctx *rt, int v, bool output);
/* v is freed while deferred sends still read its bytes: they read a copy
 * made now on ms instead (rt_comm_cuda.c). */
void cuda_stage_sends(rt_ctx *rt, int v);
/* batch_aware dynamic: frees the block groups' communicators (rt_comm_cuda.c). */
void cuda_dyn_fini(rt_ctx *rt);
/* The original position of every sequence index (rt_seq_positions) as a
 * device int64 [seq_len] table, uploaded again only when the row or the
 * ring changes (batch_aware dynamic's variants). */
const int64_t *cuda_seq_pos(rt_ctx *rt);
/* The RoPE rotation table cs, sn [S, Dh/2] of positions pos0 .. pos0+S-1
 * (kern_rope_table with the program's scaling) on the device, in
 * CM_WS_CUDA_ROPE: uploaded again only when the key changes. */
const float *cuda_rope_table(rt_ctx *rt, int64_t S, int64_t Dh, int64_t pos0, double theta);
/* The device has finished all work: every fence is satisfied. */
void cuda_synced(rt_ctx *rt);
/* The deferred sends (rt_send) handed to NCCL (rt_comm_finish_step's first part). */
void cuda_finish_sends(rt_ctx *rt);

/* ---- CUDA graphs (rt_graph_cuda.c) ---------------------------------------------------
 * cuda_graph_capturing: a stream capture is under way on cs (collectives
 * record no timers).  cuda_graph_cut: where the gradient norm is taken
 * (rt_backend_grad_sumsq, after queueing the sums' copy to h_norm, only
 * while capturing): the capture ends there, its graph runs and the device
 * drains, so h_norm holds the sums.  cuda_graph_resume: before the step's
 * first update, the capture goes on (nothing when none was cut).
 * cuda_graph_fini: frees the graphs. */
bool cuda_graph_capturing(const rt_ctx *rt);
void cuda_graph_cut(rt_ctx *rt);
void cuda_graph_resume(rt_ctx *rt);
void cuda_graph_fini(rt_ctx *rt);
/* A device buffer of the backend's is about to move (a workspace, a send
 * copy, the softmax statistics grow) or a cached table to be rewritten
 * (RoPE's, the positions'): refused while a step is being captured (a clear
 * error rather than CUDA's), and the graphs made before run eagerly once
 * and are captured again (cu->ws_gen). */
void cuda_graph_invalidate(rt_ctx *rt, const char *what);
/* The optimizer's scalars of this step into the pinned h_step (rt_opt_cuda.c). */
void cuda_opt_fill(rt_ctx *rt);

/* ---- host update helpers (rt_opt_cuda.c), on rt->host_threads threads ------------
 * cuda_host_sumsq: the sum of squares of n bf16 values in double, the same
 * bits for any thread count (fixed chunks).  cuda_host_widen: n bf16
 * values at the start of buf (4n bytes) widened to fp32 in place. */
double cuda_host_sumsq(const rt_ctx *rt, const kcu_bf16 *h, int64_t n);
void cuda_host_widen(const rt_ctx *rt, void *buf, int64_t n);

/* ---- attention on sub-blocks (rt_ring_split.c, rt_doc_split.c) -------------------
 * The ring's blocks and packed documents run as plain attentions of
 * another implementation (cuDNN's fused graphs) on parts of the op.  A
 * sub-block: b sequences of L queries against L keys, each L rows of
 * buffers [b, ld, heads, Dh] (the ring's windows: ld its S; the documents'
 * padded copies: ld = L); full: every key visible, else causal.  The ops
 * get pointers already at the windows' first rows.  fwd: o (bf16, q's
 * layout) and st [b,H,L] (fp32 softmax statistics, natural log); bwd: dq,
 * dk, dv (bf16, overwritten) against the final o and its statistics st.  A
 * failed fwd/bwd ends the run (prepare said it could); prepare returns
 * false with why when the shape cannot run.  The attention is
 * cuda_state(rt)->sub_ops when set (a test's), else cuDNN's where
 * cm_attention_impl says it runs. */
typedef struct cuda_sub {
    int64_t b, L, ld, H, Hkv, Dh;
    bool full;
} cuda_sub;

struct cuda_sub_ops {
    bool (*prepare)(rt_ctx *rt, const cuda_sub *sb, char *why, size_t nwhy);
    void (*fwd)(rt_ctx *rt, const cuda_sub *sb, kcu_bf16 *o, float *st, const kcu_bf16 *q, const kcu_bf16 *k,
                const kcu_bf16 *v);
    void (*bwd)(rt_ctx *rt, const cuda_sub *sb, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout,
                const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, const float *st);
};

/* A split attention's verdict per op shape: untried, checked (forward /
 * backward) or refused (rt_ring_split.c, rt_doc_split.c). */
enum { CUDA_SPLIT_NEW, CUDA_SPLIT_OK, CUDA_SPLIT_OWN };
typedef struct cuda_split_shape {
    int64_t b, S, H, Hkv, Dh;
    int state;
    bool fwd_checked, bwd_checked;
} cuda_split_shape;
typedef struct cuda_split_shapes {
    cuda_split_shape *sh;
    int n, cap;
} cuda_split_shapes;
/* The shape's entry in t, made (untried) on first use. */
cuda_split_shape *cuda_split_shape_of(cuda_split_shapes *t, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh);

/* One ring op's use of them: cuda_ring_split_begin decides (no packed
 * documents, sub-block attention available, the blocks split into full
 * and causal sub-blocks, the shape not refused) and fills sp; the op then
 * takes cuda_ring_split_ws more bytes of its workspace, handed over with
 * cuda_ring_split_bind, and runs each block through cuda_ring_split_fwd /
 * _bwd instead of kcu_ring_block_fwd / _bwd (qpos, kpos: the block's
 * device positions, for the check and a fallback); the forward ends with
 * cuda_ring_split_fwd_end. */
typedef struct cuda_ring_split {
    const cuda_sub_ops *ops;
    cuda_split_shape *shape;
    int R, me, nrun;
    int64_t b, S, H, Hkv, Dh, L;
    bool check, failed;        /* this op checks against the basp kernels; they took over */
    kcu_bf16 *t_q, *t_k, *t_v; /* one sub-block's o (forward) or dq, dk, dv */
    float *t_st;               /* its statistics */
    float *ref_o, *ref_lse;    /* the forward's check: the basp kernels' running state */
} cuda_ring_split;

bool cuda_ring_split_begin(rt_ctx *rt, cuda_ring_split *sp, int g, int64_t b, int64_t S, int64_t H, int64_t Hkv,
                           int64_t Dh, bool bwd);
size_t cuda_ring_split_ws(const cuda_ring_split *sp, bool bwd);
void cuda_ring_split_bind(cuda_ring_split *sp, void *ws, bool bwd);
void cuda_ring_split_fwd(rt_ctx *rt, cuda_ring_split *sp, int src, float *o, float *lse, const kcu_bf16 *q,
                         const kcu_bf16 *k, const kcu_bf16 *v, const int64_t *qpos, const int64_t *kpos);
void cuda_ring_split_fwd_end(rt_ctx *rt, cuda_ring_split *sp, float *o, float *lse);
void cuda_ring_split_bwd(rt_ctx *rt, cuda_ring_split *sp, int src, float *dq, float *dk, float *dv,
                         const kcu_bf16 *dout, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                         const kcu_bf16 *o, const float *lse, const float *D, const int64_t *qpos, const int64_t *kpos);
void cuda_ring_split_fini(rt_ctx *rt);
/* The sub-block attention of this run, or NULL (rt_ring_split.c): the
 * test's, else cuDNN's when cm_attention_impl gives `want` for the op. */
const cuda_sub_ops *cuda_sub_ops_for(rt_ctx *rt, cm_attn_impl want);

/* Packed documents (rt_doc_split.c): attention over the rows' documents as
 * plain causal attention of each document, documents of one padded length
 * in one call.  true when done; false when the caller runs basp's document
 * kernels (no sub-block attention, a document layout it does not take, or
 * the shape refused by its one-time check).  The forward's statistics are
 * not kept: the backward recomputes them with a forward of its own (o is
 * read only by the one-time check). */
bool cuda_doc_split_fwd(rt_ctx *rt, kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, int64_t row0,
                        int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh);
bool cuda_doc_split_bwd(rt_ctx *rt, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                        const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, int64_t row0, int64_t b, int64_t S,
                        int64_t H, int64_t Hkv, int64_t Dh);
void cuda_doc_split_fini(rt_ctx *rt);
/* basp's document kernels (rt_kernels_cuda.c): the reference of the check. */
cudaError_t cuda_docattn_fwd(rt_ctx *rt, kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                             int64_t row0, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh);
cudaError_t cuda_docattn_bwd(rt_ctx *rt, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout,
                             const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, int64_t row0,
                             int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh);

#ifdef BASP_HAVE_CUDNN
/* cuDNN's fused graphs as the split attentions' sub-block attention (rt_attn_cudnn_rt.c). */
extern const cuda_sub_ops cuda_dnn_sub_ops;
/* ---- cuDNN attention in the runtime (rt_attn_cudnn_rt.c) -------------------------
 * cuda_dnn_init creates the handle on the compute stream: false with why
 * when cuDNN cannot be used.  cuda_dnn_fwd / _bwd run the call through
 * cuDNN and return true, or return false when the caller must run the basp
 * kernels instead (this shape was refused or failed its check; in
 * CUDA_ATTN_CUDNN mode a refusal ends the job instead).  The forward saves
 * its softmax statistics keyed by o for the backward, which consumes them;
 * cuda_dnn_forget(o) drops them when another kernel writes o, and
 * cuda_dnn_moved(o, to) makes them follow a copy of o (offload, fetch). */
bool cuda_dnn_init(rt_ctx *rt, char *why, size_t nwhy);
bool cuda_dnn_fwd(rt_ctx *rt, kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, int64_t b,
                  int64_t S, int64_t H, int64_t Hkv, int64_t Dh);
bool cuda_dnn_bwd(rt_ctx *rt, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                  const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, int64_t b, int64_t S, int64_t H, int64_t Hkv,
                  int64_t Dh);
/* The same with the statistics in the step's lse value (rt_attention_lse),
 * not the table: nothing is keyed or consumed. */
bool cuda_dnn_fwd_lse(rt_ctx *rt, kcu_bf16 *o, float *lse, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                      int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh);
bool cuda_dnn_bwd_lse(rt_ctx *rt, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                      const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, const float *lse, int64_t b, int64_t S,
                      int64_t H, int64_t Hkv, int64_t Dh);
void cuda_dnn_forget(rt_ctx *rt, const void *o);
void cuda_dnn_moved(rt_ctx *rt, const void *o, const void *to);
/* Device bytes the statistics hold (counted as workspace, like RT_WS_*). */
size_t cuda_dnn_bytes(const rt_ctx *rt);
/* "9.19.0" */
void cuda_dnn_version(char *buf, size_t n);
void cuda_dnn_fini(rt_ctx *rt);
#endif

#endif
