/* rt_internal.h — private to runtime/: the runtime context, options,
 * counters and the helpers the runtime's files share.  Generated programs
 * see only include/basp_rt.h. */
#ifndef BASP_RT_INTERNAL_H
#define BASP_RT_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "basp_rt.h"
#include "../common/common.h"

/* ---- checks -----------------------------------------------------------------
 * A failed check on any rank must end the whole job, never leave the other
 * ranks waiting in a collective: print where it happened and MPI_Abort. */
void rt_die(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
#define RT_CHECK(cond, ...)                                                                                          \
    do {                                                                                                             \
        if (!(cond)) rt_die(__FILE__, __LINE__, __VA_ARGS__);                                                        \
    } while (0)
#define RT_MPI(call)                                                                                                 \
    do {                                                                                                             \
        int rt_mpi_rc_ = (call);                                                                                     \
        if (rt_mpi_rc_ != MPI_SUCCESS) rt_mpi_die(__FILE__, __LINE__, #call, rt_mpi_rc_);                            \
    } while (0)
void rt_mpi_die(const char *file, int line, const char *call, int rc) __attribute__((noreturn));
void *rt_xmalloc(size_t n, const char *file, int line);
#define RT_MALLOC(n) rt_xmalloc((n), __FILE__, __LINE__)

/* ---- options (command line, defaults from the program) ----------------------- */
enum { RT_MAX_DATA_ARGS = 64 };
typedef struct rt_options {
    const char *data[RT_MAX_DATA_ARGS]; /* --data (repeatable): token files, directories, globs */
    int ndata;
    const char *text;         /* --text: raw text, byte-level tokens */
    int64_t steps, seed;
    double lr;                /* --lr: the base (peak) rate */
    rt_optim_desc optim;      /* the program's, then --min-lr, --warmup, --schedule ... */
    const char *metrics;      /* --metrics: JSON lines */
    const char *profile;      /* --profile: end-of-run per-op counters, JSON */
    const char *trace_run;    /* --trace-run: one step's measured timeline, Chrome trace (rt_trace.c) */
    int64_t trace_step;       /* --trace-step: the 1-based step it traces; 0 = the last */
    int64_t log_every;
    const char *save_weights; /* --save-weights */
    const char *save_grads;   /* --save-grads */
    const char *init_from;    /* --init-from: parameters from a --save-weights file */
    bool quiet;               /* --quiet: no per-step lines */
    /* Checkpoints and failure handling (rt_ckpt*.c, rt_watchdog.c). */
    const char *ckpt_dir;     /* --checkpoint-dir */
    int64_t save_every;       /* --save-every N (0: only at the end) */
    const char *resume;       /* --resume [DIR]: "" = the latest in ckpt_dir */
    int64_t keep;             /* --keep-checkpoints N (0: keep all) */
    bool skip_nonfinite;      /* --skip-nonfinite: skip a step whose gradient is NaN/Inf */
    double timeout;           /* --timeout SEC: watchdog (0: off) */
    bool split_wait;          /* --split-wait: time a collective's wait for its set apart */
    bool epoch;               /* --sampler epoch: every window once per epoch (default random) */
    /* Validation (rt_val.c). */
    const char *val_data[RT_MAX_DATA_ARGS]; /* --val-data (repeatable) */
    int nval;
    int64_t val_every;        /* --val-every N (0: after the last step only) */
    int64_t val_tokens;       /* --val-tokens T (0: the default, up to 16 batches) */
} rt_options;

/* ---- token corpora (rt_corpus.c) ---------------------------------------------- */
/* One shard: a file mapped read-only; its tokens are the corpus's tokens
 * [first, first + ntokens), width bytes each from base. */
typedef struct rt_shard {
    char *path;
    void *map;
    size_t map_len;
    const uint8_t *base;
    int64_t first, ntokens;
} rt_shard;
/* The shards of one --data (or --val-data) list, read as one stream. */
typedef struct rt_corpus {
    rt_shard *shard;
    int nshards;
    int width;       /* bytes per token: 1 raw text, 2 or 4 llm.c */
    int64_t ntokens; /* all shards together */
} rt_corpus;
/* args: files, directories (their *.bin, by name) or glob patterns, in
 * order; text: one raw-text file, byte-level tokens.  Every shard mapped and
 * checked (header, size, token size, ids < vocab); false with the reason,
 * naming the file. */
/* The open file fd is a regular file (*st: its status); else false with the
 * reason (a directory, a device, a failed fstat) naming path (rt_data.c). */
struct stat;
bool rt_regular_file(int fd, const char *path, struct stat *st, char *err, size_t errlen);
bool rt_corpus_open(rt_corpus *c, const char *const *args, int nargs, bool text, int64_t vocab, char *err,
                    size_t errlen);
void rt_corpus_free(rt_corpus *c);
void rt_corpus_release(const rt_corpus *c, int64_t from, int64_t to);
const rt_shard *rt_corpus_shard_of(const rt_corpus *c, int64_t i);

/* ---- counters ------------------------------------------------------------------ */
typedef enum {
    RT_C_ALL_TO_ALL, RT_C_ALL_GATHER, RT_C_REDUCE_SCATTER, RT_C_ALL_REDUCE, RT_C_SEND, RT_C_RECV,
    RT_C_OFFLOAD, RT_C_FETCH, /* train.offload's copies over the host link (not counted as sent bytes) */
    RT_C_NKINDS
} rt_coll_kind;

/* The kernel kinds: common/common.h's CM_KERNEL_KINDS (cm_kernel_kind,
 * named by cm_kernel_names), the rows ir/ and both backends share. */

extern const char *const rt_coll_names[RT_C_NKINDS];

typedef struct rt_counters {
    int64_t coll_calls[RT_C_NKINDS];
    int64_t coll_bytes[RT_C_NKINDS]; /* bytes this rank sent */
    double coll_sec[RT_C_NKINDS];
    double coll_wait_sec[RT_C_NKINDS]; /* --split-wait: at the barrier before the collective */
    int64_t kern_calls[CM_K_N];
    double kern_sec[CM_K_N];
} rt_counters;

/* Arena categories, for the start-up report. */
typedef enum { RT_MEM_PARAM, RT_MEM_GRAD, RT_MEM_OPT, RT_MEM_INPUT, RT_MEM_ACT, RT_MEM_NCATS } rt_mem_cat;

/* A send whose buffer must stay alive until the request completes. */
typedef struct rt_pending_send {
    MPI_Request req;
    void *buf;
} rt_pending_send;

typedef struct rt_docs rt_docs; /* rt_docs.c */

struct rt_ctx {
    const rt_program *p;
    rt_options opt;
    int rank, world;
    /* Per group: the communicator of this rank's set, the set and position. */
    MPI_Comm *comm;
    int *gset, *gpos;
    /* The arena and what lives in it. */
    char *arena;
    size_t arena_bytes, cat_bytes[RT_MEM_NCATS];
    void **buf;                /* per value */
    float **opt_m, **opt_v;    /* per rt_opt_pair */
    /* The memory plan at run time (rt_mem.c): each value's slot, which
     * slots are live (live_list holds the nlive live values, live_pos each
     * one's index there), and the highest arena byte reached. */
    bool planned;
    size_t *slot_off, *slot_bytes;
    bool *live;
    int *live_list, *live_pos, nlive;
    size_t live_bytes, mem_hw;
    /* The host arena (offload): its bytes, and the highest byte a live
     * host buffer reached (rt_mem.c keeps the two spaces apart). */
    char *host_arena;
    size_t host_bytes, host_hw;
    /* Scratch for collectives (grow-only). */
    void *scratch[2];
    bool scratch_held; /* a started all_to_all holds the staging areas until its wait */
    size_t scratch_bytes[2];
    rt_pending_send *sends;
    int nsends, cap_sends;
    /* Started collectives in flight (cpu/rt_async.c), and its progress
     * thread: running, asked to stop, requests in flight (read by it). */
    struct rt_async *async;
    int nasync, cap_async;
    pthread_t progress;
    bool progress_ok, progress_running;
    int progress_stop, progress_want;
    char progress_note[160]; /* for the banner: how started collectives progress */
    /* CPU attention: each forward's logsumexp for its backward
     * (cpu/rt_kernels.c); BASP_ATTN_LSE=0 recomputes it instead. */
    struct rt_attn_lse *lse;
    int nlse, cap_lse;
    size_t lse_bytes;
    bool lse_off;
    /* Threads for host work (drawing the initial weights; the CUDA
     * backend's host update with the optimizer offloaded): this rank's
     * CPUs over the node's ranks, at most RT_MAX_HOST_THREADS;
     * BASP_HOST_THREADS overrides (rt_threads.c). */
    int host_threads;
    /* Step state. */
    int64_t step;              /* 0-based index of the running step */
    /* Gradient accumulation: the running micro-step (0 .. accum-1), and
     * the step's loss denominator over all its micro-steps (A·B·S, or the
     * counted targets of its packed documents), set before the first. */
    int64_t micro, step_counted;
    bool norm_done;            /* the first rt_adamw of the step computed it */
    double grad_norm, clip_scale, lr;
    /* Counters: whole run, and the all-to-all time / bytes of this step. */
    rt_counters total;
    double step_a2a_sec, step_a2a_wait_sec;
    /* --trace-run (rt_trace.c): recording the traced step's calls. */
    bool tracing, trace_written;
    double trace_origin, *trace_ev;
    int64_t trace_n, trace_cap;
    int64_t step_bytes;
    /* Data (rt_corpus.c): the training corpus and the validation corpus,
     * each one or more shards mapped read-only; rt_token reads *data
     * (&train, or &val while a validation runs).  Nothing is copied, so a
     * rank's memory does not grow with the corpus. */
    rt_corpus train, val;
    const rt_corpus *data;
    float *accum_zeros; /* zeros the size of the largest accumulator (rt_loop.c), once */
    /* Validation (rt_val.c): val_batches batches of the validation corpus
     * (its documents: val_docs); val_batch >= 0 while one is being filled;
     * the best loss so far and its step (-1: none yet); the last
     * validation; the best among the steps saved as checkpoints (best.json;
     * rank 0). */
    struct rt_docs *val_docs;
    int64_t val_batches, val_batch, val_best_step, val_last_step, val_saved_step;
    double val_best, val_last, val_saved;
    /* Packed documents (rt_docs.c); NULL without program->documents. */
    rt_docs *docs;
    /* Checkpoints: the step a resumed run starts at, the last saved one. */
    int64_t start_step, saved_step;
    /* Backend state (CUDA: devices, streams, communicators, workspaces;
     * unused on the CPU). */
    void *dev;
};

/* ---- context (rt_main.c) ------------------------------------------------------- */
/* Builds groups, the arena and the initial parameters; MPI must be running
 * with p->world ranks. */
rt_ctx *rt_ctx_create(const rt_program *p, const rt_options *o);
void rt_ctx_destroy(rt_ctx *rt);
double rt_now(void);

/* ---- backend (cpu/rt_buf_cpu.c or cuda/rt_buf_cuda.c) ----------------------------
 * What differs between the CPU and the CUDA library besides kernels,
 * collectives and the optimizer: set-up before MPI_Init, the device and its
 * communicators once the groups exist, the arena, and tearing both down. */
void rt_backend_preinit(void);
void rt_backend_init(rt_ctx *rt);
void rt_backend_fini(rt_ctx *rt);
void rt_lse_fini(rt_ctx *rt); /* cpu/rt_kernels.c: the attention forwards' kept statistics */
/* cpu/rt_kernels.c: rank 0 names the CPU attention kernels, once (also from cpu/rt_ring.c) */
void rt_attention_say(rt_ctx *rt, int64_t Dh);
void rt_arena_build(rt_ctx *rt);
/* Bytes the backend holds outside the arena for kernels and collectives
 * now (grow-only, so also their high-water mark): CPU, the kernels' scratch
 * and RoPE table; CUDA, the device workspaces and send copies. */
size_t rt_backend_workspace_bytes(const rt_ctx *rt);
/* What the end-of-run time-by-kind table measures, when that is not each
 * kind's own work (CUDA without --profile: the host's launch times); NULL
 * otherwise. */
const char *rt_backend_timing_note(const rt_ctx *rt);

/* ---- the memory plan at run time (rt_mem.c) ----------------------------------------
 * rt_mem_init takes every value's slot (offset and bytes in the arena) once
 * the backend has laid the arena out; parameters and inputs are live from
 * then on.  rt_mem_touch makes a value live (checking, under a plan, that no
 * live slot shares its bytes: the backend's rt_f32/rt_i32 call it),
 * rt_mem_release (rt_free) makes it dead, rt_mem_begin_step releases every
 * op result, rt_mem_reach records arena bytes used outside value slots
 * (optimizer state, staging areas). */
void rt_mem_init(rt_ctx *rt, const size_t *off, const size_t *bytes);
void rt_mem_fini(rt_ctx *rt);
/* The host arena's high-water mark reaches `end` (whole-step regions there). */
void rt_mem_reach_host(rt_ctx *rt, size_t end);
void rt_mem_touch(rt_ctx *rt, int v);
void rt_mem_release(rt_ctx *rt, int v);
void rt_mem_begin_step(rt_ctx *rt);
void rt_mem_reach(rt_ctx *rt, size_t end);
/* The process's peak resident set so far (getrusage), bytes. */
size_t rt_rss_peak_bytes(void);

/* ---- arena report, init, shapes (rt_arena.c) ------------------------------------ */
rt_mem_cat rt_value_cat(const rt_value_desc *d);
/* "params", "grads", "optimizer", "inputs", "activations" (the report's and
 * --profile's names). */
extern const char *const rt_mem_names[RT_MEM_NCATS];
void rt_arena_report(rt_ctx *rt, FILE *f);
#define RT_MAX_HOST_THREADS 64
/* rt_threads.c: fn(ctx, a, b) over contiguous ranges covering [0, n), on
 * up to rt->host_threads threads with at least min_per_thread items each
 * (the calling thread runs the first range). */
typedef void (*rt_range_fn)(void *ctx, int64_t a, int64_t b);
void rt_parallel_for(const rt_ctx *rt, int64_t n, int64_t min_per_thread, rt_range_fn fn, void *ctx);
/* BASP_HOST_THREADS: *n its value, 0 when unset; false with the reason in
 * err when it is not a count from 1 to RT_MAX_HOST_THREADS. */
bool rt_host_threads_env(int *n, char *err, size_t errlen);
void rt_init_params(rt_ctx *rt, uint64_t seed);
/* Local dims of value v on this rank; returns its rank (number of dims). */
int rt_local_dims(const rt_ctx *rt, int v, int64_t ldims[RT_MAX_RANK]);
/* Local size and first global index of dim i of value d at position pos of
 * the set of the group sharding it (even, or uneven by d->unit[i]). */
int64_t rt_dim_len(const rt_program *p, const rt_value_desc *d, int i, int pos);
int64_t rt_dim_start(const rt_program *p, const rt_value_desc *d, int i, int pos);
/* True when some dim of d has an uneven split unit. */
bool rt_value_uneven(const rt_value_desc *d);
/* Position of world rank r in its set of group g. */
int rt_pos_of_rank(const rt_program *p, int g, int r);
/* Global coordinate of this (or world rank r's) first local element per dim. */
void rt_global_offset(const rt_program *p, int v, int r, int64_t off[RT_MAX_RANK]);
/* Copy a box of `box` elements per dim from src (dims sdims, starting at soff)
 * to dst (dims ddims, at doff); 4-byte elements. */
void rt_copy_box(void *dst, const int64_t *ddims, const int64_t *doff, const void *src, const int64_t *sdims,
                 const int64_t *soff, const int64_t *box, int nd);
uint64_t rt_splitmix64(uint64_t x);
uint64_t rt_hash_str(const char *s);
void *rt_scratch(rt_ctx *rt, int which, size_t bytes);

/* ---- host access to local buffers (the backend's buffer file) -------------------
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

/* ---- collectives (cpu/rt_comm.c; shapes and checks shared in rt_coll.c) --------- */
void rt_comm_finish_step(rt_ctx *rt); /* completes pending sends (CUDA: and the step's device work) */
void rt_coll_count(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double sec);
/* A started collective (rt_async.c), counted at its wait: `exposed`
 * seconds the rank spent in its start and wait calls (the counters' time),
 * and in the trace one event from its start to when the rank saw it
 * complete (a progress poll or the wait). */
void rt_coll_count_async(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double exposed, double t_start, double t_done);
void rt_trace_span(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double t0, double t1);
/* Started collectives (cpu/rt_async.c; the CUDA backend's run on its
 * communication stream): lets MPI move the ones in flight (a test of
 * their requests), between kernels; and at the end of a step, checks that
 * none is left (every start has its wait). */
void rt_comm_progress(rt_ctx *rt);
/* A collective just started (cpu/rt_comm.c) with request req (null when it
 * completed at once), whose results are outs[0..nouts): in flight until a
 * wait names them.  finish(rt, arg), when given, runs at the wait once the
 * request is complete (an exchange's unpack). */
typedef void (*rt_async_finish_fn)(rt_ctx *rt, void *arg);
void rt_async_add(rt_ctx *rt, MPI_Request req, int nouts, const int *outs, rt_coll_kind kind, int64_t bytes,
                  double t_start, rt_async_finish_fn finish, void *arg);
void rt_async_finish_step(rt_ctx *rt);
/* Decides (collectively, at start-up, when the program starts collectives)
 * whether the progress thread may run, and says why in progress_note. */
void rt_async_init(rt_ctx *rt);
/* Stops the progress thread, if one runs (before MPI_Finalize). */
void rt_async_shutdown(rt_ctx *rt);
/* The thread support MPI_Init_thread granted (MPI_THREAD_SINGLE when the
 * step starts no collective and MPI_Init ran). */
extern int rt_mpi_threads;
/* A kernel call that started at t0 and ends now: the counters, and the
 * trace while --trace-run records (rt_trace.c). */
void rt_kern_count(rt_ctx *rt, cm_kernel_kind k, double t0);
/* The same without counting a call: one block of a call that runs in
 * several (ring attention's, between its hand-overs). */
void rt_kern_time(rt_ctx *rt, cm_kernel_kind k, double t0);
/* A collective of sec seconds ending now, into the trace while it records. */
void rt_trace_coll(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double sec);
/* Around step t (0-based): start recording when it is the traced step
 * (a barrier of all ranks is its time origin); write the trace after it
 * (rank 0; false on every rank when the file could not be written). */
void rt_trace_begin(rt_ctx *rt, int64_t t);
bool rt_trace_end(rt_ctx *rt, int64_t t);
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

/* ---- data (rt_data.c) ----------------------------------------------------------- */
/* The magic of an llm.c token file's header. */
enum { RT_DATA_MAGIC = 20240520 };
/* Reads a whole file into *out (malloc'ed, caller frees); false with a
 * message naming the file and the reason on failure. */
bool rt_read_file(const char *path, unsigned char **out, int64_t *len, char *err, size_t errlen);
/* Maps the data file and checks it (header, size, every id against the
 * vocabulary); errors are reported on rank 0 and return false on every rank
 * (every rank reads the same file and reaches the same verdict). */
bool rt_data_load(rt_ctx *rt, const rt_options *o, char *err, size_t errlen);
void rt_data_unmap(rt_ctx *rt);
/* Token i of corpus c (0 <= i < c->ntokens); rt_token: of the corpus being
 * read (rt->data). */
static inline int32_t rt_corpus_token(const rt_corpus *c, int64_t i) {
    const rt_shard *s = c->nshards == 1 ? c->shard : rt_corpus_shard_of(c, i);
    const uint8_t *b = s->base + (i - s->first) * c->width;
    if (c->width == 1) return b[0];
    if (c->width == 2) return (int32_t)(b[0] | b[1] << 8);
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}
static inline int32_t rt_token(const rt_ctx *rt, int64_t i) { return rt_corpus_token(rt->data, i); }
/* After a pass over tokens [from, to): hands their pages back to the page
 * cache (madvise), so that scanning a large corpus leaves the resident set
 * as it was. */
static inline void rt_data_release(const rt_ctx *rt, int64_t from, int64_t to) {
    rt_corpus_release(rt->data, from, to);
}
/* The module's sequence order: the original positions of the n tokens at
 * indices start .. start+n-1 of a sequence (identity, or with
 * p->seq_ring = R > 1 the ring's zig-zag order, kern_zigzag_pos). */
void rt_seq_positions(const rt_ctx *rt, int64_t start, int64_t n, int64_t *pos);
/* Start of sequence b of step t in a corpus of ntokens tokens (--sampler
 * random: drawn with replacement). */
int64_t rt_data_position(uint64_t seed, int64_t t, int64_t b, int64_t ntokens, int64_t seq_len);
/* --sampler epoch: the corpus is cut into nwin = (ntokens - 1) / seq_len
 * windows of seq_len inputs and their targets; sequence number i = t * B + b
 * of the run reads window rt_epoch_window(seed, i, nwin): epoch i / nwin
 * visits every window exactly once, in an order shuffled from (seed,
 * epoch) by a keyed bijection (no table, so a resume needs only the step). */
int64_t rt_epoch_window(uint64_t seed, int64_t i, int64_t nwin);
/* Fills this rank's slice of the tokens/targets inputs for step t,
 * micro-step rt->micro: the micro-batch's sequences are the step's
 * sequences rt->micro·B .. rt->micro·B + B-1 (so A micro-steps of B equal
 * one step of A·B sequences on any layout). */
void rt_data_fill(rt_ctx *rt, int64_t t);
/* Micro-steps per optimizer step (1 without accumulation). */
static inline int64_t rt_accum(const rt_ctx *rt) { return rt->p->accum > 1 ? rt->p->accum : 1; }

/* ---- validation (rt_val.c) ------------------------------------------------------ */
/* Maps the --val-data corpus and fixes the batches (after rt_data_load);
 * false with the reason. */
bool rt_val_load(rt_ctx *rt, char *err, size_t errlen);
/* Whether a validation runs after step t (0-based) of a run of steps. */
bool rt_val_due(const rt_ctx *rt, int64_t t, int64_t steps);
/* The validation loss (the mean over its counted targets) with the forward
 * program; leaves the training state as it was.  *ms: its wall time. */
double rt_validate(rt_ctx *rt, double *ms);
/* Says the result after step t and keeps the best (rank 0). */
void rt_val_record(rt_ctx *rt, int64_t t, double loss, double ms);
/* After a checkpoint may have been saved: when it is of the last validated
 * step and that validation beats the best saved one, DIR/best.json names it
 * (rank 0).  best.json names only checkpoints that exist. */
void rt_val_saved(rt_ctx *rt);
/* The banner's note on which steps best.json can name (rank 0). */
void rt_val_note(const rt_ctx *rt);
/* The end-of-run line: the best validation and best.json's step (rank 0). */
void rt_val_summary(const rt_ctx *rt);

/* ---- packed documents (rt_docs.c) ----------------------------------------------- */
/* Builds the document table of rt->tokens (split at p->eot_token); false
 * with a message when the data holds no end-of-text token. */
bool rt_docs_load(rt_ctx *rt, const char *path, char *err, size_t errlen);
void rt_docs_free(rt_docs *d);
/* Draws and packs step t's documents (once per step; every rank the same). */
void rt_docs_step(rt_ctx *rt, int64_t t);
/* Packs validation batch from document index next on (file order) into
 * rt->docs (the validation table while a validation runs); returns where
 * the next batch starts. */
int64_t rt_docs_val_batch(rt_ctx *rt, int64_t next);
/* How many whole validation batches of `need` tokens table d fills in file
 * order (each batch's cut document is not continued by the next); *ndocs:
 * the table's documents. */
int64_t rt_docs_val_batches(const rt_docs *d, int64_t need, int64_t *ndocs);
/* The counted targets of all micro-steps of step t (packs each once; the
 * loss scale needs them before the first backward). */
int64_t rt_docs_step_counted(rt_ctx *rt, int64_t t);
/* For rows row0 .. row0+b-1 and the module-order sequence indices start ..
 * start+s-1: doc [b,s] the document number within the row, pos [b,s] the
 * position within the document (either may be NULL). */
void rt_doc_slice(const rt_ctx *rt, int64_t row0, int64_t b, int64_t start, int64_t s, int32_t *doc,
                  int64_t *pos);
/* The token (shift 0) or target (shift 1; -1 = not counted) at natural
 * position i of row `row` of this step. */
int32_t rt_docs_token(const rt_ctx *rt, int64_t row, int64_t i, int shift);
typedef struct rt_docs_info {
    int64_t ndocs, nsplit, nskipped; /* the table: pieces, documents cut, lone end-of-text tokens */
    int64_t step_docs, counted;      /* this step: documents (pieces) placed, targets counted */
    double imbalance;                /* this step: max over mean cost of the batch-aware groups */
} rt_docs_info;
void rt_docs_stats(const rt_ctx *rt, rt_docs_info *out);

/* ---- optimizer (cpu/rt_opt.c; the CUDA backend's cuda/rt_opt_cuda.c) -------------------- */
/* ---- AdamW's settings and the learning-rate schedule (rt_sched.c) --------------- */
extern const rt_optim_desc rt_optim_defaults;
/* The numeric settings by name (the spec's train.KEY, state.json's key; the
 * option is --KEY with '-' for '_'), in state.json's order: warmup is an
 * int64, the rest doubles.  The command line, the checkpoint and the
 * resume check all walk this one table. */
typedef struct rt_optim_field {
    const char *key;
    size_t off;
    bool is_int;
} rt_optim_field;
enum { RT_NOPTIM_FIELDS = 8 };
extern const rt_optim_field rt_optim_fields[RT_NOPTIM_FIELDS];
double rt_optim_get(const rt_optim_desc *o, const rt_optim_field *f);
const char *rt_schedule_name(rt_schedule_kind k);
bool rt_schedule_parse(const char *s, rt_schedule_kind *out);
/* The learning rate of 0-based step t of a run of `total` steps with base
 * rate lr (the formulas are at the top of rt_sched.c). */
double rt_lr_at(const rt_optim_desc *o, double lr, int64_t t, int64_t total);
/* wsd: the number of decaying steps at the end of a run of `total` steps. */
int64_t rt_wsd_decay_steps(const rt_optim_desc *o, int64_t total);
/* NULL when every setting is in range, else the first bad one's key
 * ("min_lr") with "VALUE: why" in err (steps 0: the warmup is not checked
 * against the run). */
const char *rt_optim_check(const rt_optim_desc *o, double lr, int64_t steps, char *err, size_t errlen);
/* Shared by the backends' rt_grad_norm and rt_adamw (rt_coll.c):
 * the global gradient norm from every opt pair's local sum of squares
 * (collective: a replicated gradient counts once, a sharded one its local
 * squares divided by its replication, summed over the world); and whether
 * a gradient is laid out like its parameter (true) or whole where the
 * parameter is sharded (ZeRO-1: false, the caller slices it at the shard's
 * global offset) — anything else stops the job. */
double rt_grad_norm_combine(rt_ctx *rt, const double *sumsq);
bool rt_grad_like_param(rt_ctx *rt, int param, int grad);
/* The weight decay of a parameter: opt.optim.weight_decay on matrices (rank >= 2) but not on
 * norm weights (rank 1) or the q/k/v biases (l<i>.bq/bk/bv, [heads, Dh]
 * though they are vectors), as common practice and Hugging Face's
 * recipes exempt biases and norms. */
double rt_weight_decay(const rt_ctx *rt, const rt_value_desc *d);
/* The clipping factor for the step's global norm (1 when grad_clip is 0). */
double rt_clip_scale(const rt_ctx *rt, double norm);
void rt_opt_begin_step(rt_ctx *rt);
/* Global gradient norm over every opt pair (collective over the world). */
double rt_grad_norm(rt_ctx *rt);
/* How many ranks hold each element of v; the optimizer entry of (param, grad). */
int64_t rt_replication(const rt_ctx *rt, int v);
int rt_opt_index(const rt_ctx *rt, int param, int grad);

/* ---- training loop (rt_loop.c) ------------------------------------------------------ */
/* Banner, the steps, logging and metrics, the final report and saves;
 * returns the exit status. */
int rt_train(rt_ctx *rt);

/* ---- saving and loading (rt_save.c, rt_load.c) --------------------------------------- */
/* The tensor file's magic ("BSPT" little-endian) and format version. */
/* A gradients file (--save-grads) has its own magic ("BSPG"), so that it
 * cannot be loaded as weights by mistake. */
enum { RT_SAVE_MAGIC = 0x54505342, RT_GRADS_MAGIC = 0x47505342, RT_SAVE_VERSION = 1 };
/* Collective: rank 0 writes every parameter (grads = false) or the gradient
 * of every opt pair (grads = true) as full fp32 tensors, after step `step`
 * (the watchdog's label).  Every rank returns false after a failed write
 * (rank 0's message names the file and the reason). */
bool rt_save_tensors(rt_ctx *rt, const char *path, bool grads, int64_t step);
/* Collective: rank 0 reads and checks a --save-weights file against the
 * program's parameters, then every rank receives the slice of each parameter
 * it holds.  Returns the same verdict on every rank; on false, err (on every
 * rank) says why and no parameter has been touched. */
bool rt_load_params(rt_ctx *rt, const char *path, char *err, size_t errlen);

/* ---- checkpoints, Hugging Face import, watchdog (rt_ckpt.c, rt_ckpt_load.c,
 * rt_watchdog.c; the pure readers are in rt_safetensors.h) ------------------------ */
#include "rt_safetensors.h"

/* state.json's format version. */
enum { RT_CKPT_VERSION = 1 };
/* FNV-1a-64 of the loaded token array (cached), recorded in state.json. */
uint64_t rt_ckpt_data_fnv(const rt_ctx *rt);

/* Collective: writes checkpoint `step` (the number of completed steps) into
 * --checkpoint-dir atomically and moves `latest` to it.  On failure every
 * rank gets false, err says why, and the previous checkpoint is untouched. */
bool rt_ckpt_save(rt_ctx *rt, int64_t step, char *err, size_t errlen);
/* Collective: --resume: restores parameters, optimizer moments, step and
 * seed from a checkpoint, re-sharding for this layout.  Same verdict on
 * every rank; nothing is touched on false. */
bool rt_ckpt_resume(rt_ctx *rt, const char *arg, char *err, size_t errlen);
/* Rank 0, what --checkpoint-dir holds and whose it is (rt_ckpt_dir.c).  The
 * step of an entry named exactly step-NNNNNNNN, else -1. */
long long rt_ckpt_step_of(const char *name);
/* This run's lineage (32 hex digits), drawn on first use unless inherited. */
const char *rt_ckpt_lineage(void);
/* A run starting from step 0: dir holds no step-* checkpoint, else false
 * with a message naming what is there and what to pass. */
bool rt_ckpt_dir_fresh(const char *dir, char *err, size_t errlen);
/* A run resumed from checkpoint `from`: inherits its lineage; ckdir (NULL:
 * none) holds no checkpoint of another lineage, else false with a message. */
bool rt_ckpt_dir_adopt(const char *ckdir, const char *from, char *err, size_t errlen);
/* --keep-checkpoints: removes this run's checkpoints beyond the one just
 * saved and the keep-1 newest others, except the one best.json names. */
void rt_ckpt_prune(const char *dir, int64_t keep, int64_t just_saved);
/* Removes a checkpoint directory's files and itself; a link only unlinked. */
void rt_ckpt_remove_tree(const char *dir);
/* Collective: --init-from DIR, a Hugging Face model directory (config.json,
 * model.safetensors or model.safetensors.index.json and its shards). */
bool rt_hf_load_dir(rt_ctx *rt, const char *dir, char *err, size_t errlen);
/* Collective: after a non-finite step, the first optimizer pair (in table
 * order) whose gradient holds a NaN or Inf on some rank; -1 if none. */
int rt_first_nonfinite_grad(rt_ctx *rt);
/* Shared by the checkpoint files: gathers value v's layout of `mine` (this
 * rank's local elements) into the full tensor on rank 0 / scatters rank 0's
 * full tensor into every rank's `mine`. */
void rt_gather_local(rt_ctx *rt, int v, const float *mine, float *full);
void rt_scatter_local(rt_ctx *rt, int v, const float *full, float *mine);
/* The loop's hooks (rt_guard.c): after step t (0-based), NaN/Inf handling
 * and the periodic checkpoint; after the run, the final checkpoint.  Both
 * collective; 0 to go on, 1 to stop (the message is printed). */
int rt_guard_after_step(rt_ctx *rt, int64_t t, double loss, double gnorm);
int rt_guard_after_run(rt_ctx *rt, int64_t steps);
void rt_guard_test_poison(rt_ctx *rt, int64_t t, bool before);
/* Watchdog: --timeout starts a thread that ends the process (exit status
 * RT_WATCHDOG_STATUS, a message naming the rank and what it was doing) when no heartbeat
 * came for that long.  rt_watchdog_beat records progress. */
enum { RT_WATCHDOG_STATUS = 3 };
void rt_watchdog_start(rt_ctx *rt, double seconds);
void rt_watchdog_beat(const char *what, int64_t step);
/* A beat whose activity names a file or option too ("writing --save-weights"
 * and its path); object must outlive the run (NULL: none). */
void rt_watchdog_beat_on(const char *what, const char *object, int64_t step);
/* Progress within the activity the last beat named: for the long loops of
 * helpers shared by several activities (reading a file, hashing the data). */
void rt_watchdog_pulse(void);
/* On: this rank waits for rank 0 to write (rank 0 beats meanwhile, and its
 * watchdog notices any rank that hangs), so its own verdict is suspended;
 * off: the wait is over and counts as progress. */
void rt_watchdog_hold(bool on);
void rt_watchdog_stop(void);

/* rt_main.c: whether option NAME was on the command line. */
bool rt_option_given(const char *name);
/* rt_signal.c: SIGTERM / SIGINT.  Before rt_signal_training_started the
 * first signal ends the job at once (rank 0 says so); after it, the first
 * asks for a stop after the current step (rt_stop_signal: that signal, 0
 * if none) and makes stdout/stderr non-blocking until
 * rt_signal_restore_output; a second one ends the job at once. */
void rt_signal_install(int rank);
void rt_signal_training_started(void);
int rt_stop_signal(void);
void rt_signal_restore_output(void);
void rt_signal_test_startup_delay(void);
/* rt_guard.c: after step t, all ranks agree whether a stop signal arrived;
 * if so, writes a checkpoint (--checkpoint-dir) and returns the exit status
 * (128 + signal), else 0. */
int rt_guard_stop(rt_ctx *rt, int64_t t, FILE *metrics);
/* One record of the metrics file (a cJSON object, consumed): printed on
 * one line and flushed. */
struct cJSON;
void rt_metrics_write(FILE *f, struct cJSON *o);
/* rt_guard.c: the index of the first non-finite of n floats, or -1. */
int64_t rt_first_nonfinite(const float *x, int64_t n);

/* ---- what a run writes (rt_paths.c, rt_metrics.c) ------------------------------------ */
/* Rank 0, before step 1: no output file is an input file or another output,
 * and no path lies among --checkpoint-dir's own names (rt_paths.c's header);
 * false with both options and the path in err. */
bool rt_paths_check(const rt_ctx *rt, const rt_options *o, char *err, size_t errlen);
/* Rank 0: holds DIR/lock (flock) for the run and writes this run's identity
 * there; false, naming the other run, when one holds it. */
bool rt_paths_lock_ckpt(const char *dir, int argc, char **argv, char *err, size_t errlen);
/* "host-pid": this run's identity in its temporary file names. */
const char *rt_paths_run_tag(void);
/* Who made a directory entry named step-N.<host-pid>.tmp (*who: host-pid):
 * this run, a gone process of this host (stale), or someone else (another
 * host, a live process, or step-N.tmp without an identity). */
typedef enum rt_tmp_owner { RT_TMP_NONE, RT_TMP_MINE, RT_TMP_STALE, RT_TMP_OTHER } rt_tmp_owner;
rt_tmp_owner rt_paths_tmp_owner(const char *name, char *who, size_t n);
/* Rank 0: opens --metrics for the run.  After --resume onto an existing
 * file, first drops the records past the resumed step (rewritten to
 * PATH.tmp and renamed over it); NULL with a message on failure. */
FILE *rt_metrics_open(const rt_ctx *rt);
/* Rank 0: after a failed metrics write (said at once on stderr), the step of
 * the first record lost; -1 when every write succeeded. */
int64_t rt_metrics_lost_from(void);
/* BASP_TEST_FAIL_AT=POINT:STEP: the write at POINT ("latest", "publish") of
 * checkpoint STEP fails as on a full disk, for the tests. */
bool rt_test_fail_at(const char *point, int64_t step);

/* ---- the host BLAS (rt_blas.c) ---------------------------------------------- */
/* First thing in main: when OpenBLAS picked a generic kernel set on a CPU
 * with AVX2 or AVX-512 and OPENBLAS_CORETYPE is unset, re-executes the
 * program with OPENBLAS_CORETYPE naming the right set (BASP_BLAS_AUTO=0:
 * never).  Returns when nothing is to be done or the exec failed. */
void rt_blas_autoselect(char **argv);
/* The banner's line naming the BLAS and its kernel set ("blas: OpenBLAS
 * 0.3.21 (DYNAMIC_ARCH), SkylakeX kernels, 1 thread(s)", with who chose it
 * when it was basp).  False when it runs a generic kernel set on a CPU with
 * AVX2 or AVX-512 (the user's OPENBLAS_CORETYPE, or a failed exec): warn
 * then says so and names the fix. */
bool rt_blas_describe(char *line, size_t n, char *warn, size_t nw);

#endif
