/* rt_core.h — the core room of the runtime: the context every other room
 * works on (struct rt_ctx), its options and counters, the checks that end a
 * job, start-up (rt_main.c), the arena's shapes and report (rt_arena.c),
 * the memory plan at run time (rt_mem.c), host threads (rt_threads.c), the
 * training loop (rt_loop.c) and its guards and signals (rt_guard.c,
 * rt_signal.c), what a run may write (rt_paths.c), the optimizer step and
 * its schedule (rt_optim.c, rt_sched.c), the counters and the collectives'
 * shared geometry (rt_coll.c) and the host BLAS (rt_blas.c).
 *
 * Core may use every room: it orchestrates data/, ckpt/ and obs/, and
 * reaches a backend only through rt_backend.h.  The other rooms include this
 * header through their own; generated programs see only include/basp_rt.h. */
#ifndef BASP_RT_CORE_H
#define BASP_RT_CORE_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "basp_rt.h"
#include "../../common/common.h"

/* ---- checks -----------------------------------------------------------------
 * A failed check on any rank must end the whole job, never leave the other
 * ranks waiting in a collective: print where it happened and MPI_Abort. */
void rt_die(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
#define RT_CHECK(cond, ...)                                                                                            \
    do {                                                                                                               \
        if (!(cond)) rt_die(__FILE__, __LINE__, __VA_ARGS__);                                                          \
    } while (0)
#define RT_MPI(call)                                                                                                   \
    do {                                                                                                               \
        int rt_mpi_rc_ = (call);                                                                                       \
        if (rt_mpi_rc_ != MPI_SUCCESS) rt_mpi_die(__FILE__, __LINE__, #call, rt_mpi_rc_);                              \
    } while (0)
void rt_mpi_die(const char *file, int line, const char *call, int rc) __attribute__((noreturn));
void *rt_xmalloc(size_t n, const char *file, int line);
#define RT_MALLOC(n) rt_xmalloc((n), __FILE__, __LINE__)

/* ---- options (command line, defaults from the program) ----------------------- */
enum { RT_MAX_DATA_ARGS = 64 };
typedef struct rt_options {
    const char *data[RT_MAX_DATA_ARGS]; /* --data (repeatable): token files, directories, globs */
    int ndata;
    const char *text; /* --text: raw text, byte-level tokens */
    int64_t steps, seed;
    double lr;             /* --lr: the base (peak) rate */
    rt_optim_desc optim;   /* the program's, then --min-lr, --warmup, --schedule ... */
    const char *metrics;   /* --metrics: JSON lines */
    const char *profile;   /* --profile: end-of-run per-op counters, JSON */
    const char *trace_run; /* --trace-run: one step's measured timeline, Chrome trace (obs/rt_trace.c) */
    int64_t trace_step;    /* --trace-step: the 1-based step it traces; 0 = the last */
    int64_t log_every;
    const char *save_weights; /* --save-weights */
    const char *save_grads;   /* --save-grads */
    const char *init_from;    /* --init-from: parameters from a --save-weights file */
    bool quiet;               /* --quiet: no per-step lines */
    /* Checkpoints and failure handling (ckpt/, obs/rt_watchdog.c). */
    const char *ckpt_dir;          /* --checkpoint-dir */
    int64_t save_every;            /* --save-every N (0: only at the end) */
    const char *resume;            /* --resume [DIR]: "" = the latest in ckpt_dir */
    int64_t keep;                  /* --keep-checkpoints N (0: keep all) */
    bool skip_nonfinite;           /* --skip-nonfinite: skip a step whose gradient is NaN/Inf */
    bool allow_placement_mismatch; /* --allow-placement-mismatch: run where ranks are, warned */
    double timeout;                /* --timeout SEC: watchdog (0: off) */
    bool split_wait;               /* --split-wait: time a collective's wait for its set apart */
    bool epoch;                    /* --sampler epoch: every window once per epoch (default random) */
    /* Validation (data/rt_val.c). */
    const char *val_data[RT_MAX_DATA_ARGS]; /* --val-data (repeatable) */
    int nval;
    int64_t val_every;  /* --val-every N (0: after the last step only) */
    int64_t val_tokens; /* --val-tokens T (0: the default, up to 16 batches) */
    /* batch_aware dynamic (core/rt_dyn.c, data/rt_docs.c). */
    const char *assignments; /* --assignments FILE: every micro-step's groups and documents, JSON lines */
    const char *pieces;      /* --pieces FILE: train on the documents such a file lists (packed documents) */
} rt_options;

/* ---- token corpora: what the context holds (data/ reads them) ---------------- */
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

/* ---- counters ------------------------------------------------------------------ */
typedef enum {
    RT_C_ALL_TO_ALL,
    RT_C_ALL_GATHER,
    RT_C_REDUCE_SCATTER,
    RT_C_ALL_REDUCE,
    RT_C_SEND,
    RT_C_RECV,
    RT_C_OFFLOAD,
    RT_C_FETCH, /* train.offload's copies over the host link (not counted as sent bytes) */
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

typedef struct rt_docs rt_docs; /* data/rt_docs.c */

/* The backend's own state, opaque here: each backend defines it (the CPU's
 * rt_cpu_state in cpu/rt_cpu.h, the CUDA backend's rt_cuda_state in
 * cuda/rt_cuda.h); a library holds exactly one backend. */
struct rt_backend_state;

struct rt_ctx {
    /* The program running: the compiled one (base), or during a micro-step
     * of batch_aware dynamic the variant this rank's group runs. */
    const rt_program *p;
    const rt_program *base;
    struct rt_dyn *dyn; /* batch_aware dynamic's state (rt_dyn.c), NULL for a static layout */
    rt_options opt;
    int rank, world;
    /* Per group: the communicator of this rank's set, the set and position. */
    MPI_Comm *comm;
    int *gset, *gpos;
    /* The arena and what lives in it (laid out by the backend's
     * rt_arena_build). */
    char *arena;
    size_t arena_bytes, cat_bytes[RT_MEM_NCATS];
    void **buf;             /* per value */
    float **opt_m, **opt_v; /* per rt_opt_pair */
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
    char progress_note[160]; /* for the banner: how started collectives progress (the backend says) */
    /* Threads for host work (drawing the initial weights; the CUDA
     * backend's host update with the optimizer offloaded): this rank's
     * CPUs over the node's ranks, at most RT_MAX_HOST_THREADS;
     * BASP_HOST_THREADS overrides (rt_threads.c). */
    int host_threads;
    /* Step state. */
    int64_t step; /* 0-based index of the running step */
    /* Gradient accumulation: the running micro-step (0 .. accum-1), and
     * the step's loss denominator over all its micro-steps (A·B·S, or the
     * counted targets of its packed documents), set before the first. */
    int64_t micro, step_counted;
    bool norm_done; /* the first rt_adamw of the step computed it */
    double grad_norm, clip_scale, lr;
    /* Counters: whole run, and the all-to-all time / bytes of this step. */
    rt_counters total;
    double step_a2a_sec, step_a2a_wait_sec;
    bool step_untimed; /* the backend could not time this step's collectives (a CUDA graph ran them) */
    /* --trace-run (obs/rt_trace.c): recording the traced step's calls. */
    bool tracing, trace_written;
    double trace_origin, *trace_ev;
    int64_t trace_n, trace_cap;
    int64_t step_bytes;
    /* Data (data/rt_corpus.c): the training corpus and the validation
     * corpus, each one or more shards mapped read-only; rt_token reads
     * *data (&train, or &val while a validation runs).  Nothing is copied,
     * so a rank's memory does not grow with the corpus. */
    rt_corpus train, val;
    const rt_corpus *data;
    float *accum_zeros; /* zeros the size of the largest accumulator (rt_loop.c), once */
    /* Validation (data/rt_val.c): val_batches batches of the validation
     * corpus (its documents: val_docs); val_batch >= 0 while one is being
     * filled; the best loss so far and its step (-1: none yet); the last
     * validation; the best among the steps saved as checkpoints (best.json;
     * rank 0). */
    struct rt_docs *val_docs;
    int64_t val_batches, val_batch, val_best_step, val_last_step, val_saved_step;
    double val_best, val_last, val_saved;
    /* Packed documents (data/rt_docs.c); NULL without program->documents. */
    rt_docs *docs;
    /* Checkpoints: the step a resumed run starts at, the last saved one. */
    int64_t start_step, saved_step;
    /* The backend's state (CPU: staging areas, sends and started
     * collectives in flight, the attention's kept statistics; CUDA: the
     * device, streams, communicators, workspaces), made by rt_backend_init
     * and freed by rt_backend_fini. */
    struct rt_backend_state *be;
};

/* ---- placement (rt_placement.c) ------------------------------------------------ */
/* Collective, before anything is allocated: every rank's host name against
 * the compiled placement; false (after rank 0 said what to change) when a
 * set the compiler kept on one node runs on several hosts, unless allow. */
bool rt_placement_check(const rt_program *p, int rank, bool allow, const char *prog);

/* ---- context (rt_main.c) ------------------------------------------------------- */
/* Builds groups, the arena and the initial parameters; MPI must be running
 * with p->world ranks. */
rt_ctx *rt_ctx_create(const rt_program *p, const rt_options *o);
void rt_ctx_destroy(rt_ctx *rt);
double rt_now(void);
/* Whether option NAME was on the command line. */
bool rt_option_given(const char *name);
/* The thread support MPI_Init_thread granted (MPI_THREAD_SINGLE when the
 * step starts no collective and MPI_Init ran). */
extern int rt_mpi_threads;

/* ---- the memory plan at run time (rt_mem.c) ----------------------------------------
 * rt_mem_init takes every value's slot (offset and bytes in the arena) once
 * the backend has laid the arena out; parameters and inputs are live from
 * then on.  rt_mem_touch makes a value live (checking, under a plan, that no
 * live slot shares its bytes: rt_f32/rt_i32 reach it through the backend),
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
/* How many ranks hold each element of v; the optimizer entry of (param, grad). */
int64_t rt_replication(const rt_ctx *rt, int v);
int rt_opt_index(const rt_ctx *rt, int param, int grad);

/* ---- counters (rt_coll.c) ------------------------------------------------------
 * Every kernel call and collective is counted here, whichever backend ran
 * it; while --trace-run records, the call also goes into the trace
 * (obs/rt_trace.c). */
void rt_coll_count(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double sec);
/* A started collective, counted at its wait: `exposed` seconds the rank
 * spent in its start and wait calls (the counters' time), and in the trace
 * one event from its start to when the rank saw it complete (a progress
 * poll or the wait). */
void rt_coll_count_async(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double exposed, double t_start, double t_done);
/* A kernel call that started at t0 and ends now: the counters, the trace
 * while --trace-run records, and then the backend's progress on its started
 * collectives (rt_comm_progress: between kernels). */
void rt_kern_count(rt_ctx *rt, cm_kernel_kind k, double t0);
/* The same without counting a call: one block of a call that runs in
 * several (ring attention's, between its hand-overs). */
void rt_kern_time(rt_ctx *rt, cm_kernel_kind k, double t0);

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

/* ---- the optimizer step (rt_optim.c; the backends' primitives: rt_backend.h) ----- */
void rt_opt_begin_step(rt_ctx *rt);
/* The step's global gradient norm over every opt pair (collective over
 * the world): each gradient's local sum of squares (the backend's),
 * replicated gradients counted once, sharded ones summed over the world;
 * sets grad_norm, the clip factor and norm_done, and returns the norm.
 * rt_grad_norm_set does the same from sums already taken: the CUDA
 * backend's graph launches call it between the graph that ends at the norm
 * and the updates'. */
double rt_grad_norm(rt_ctx *rt);
void rt_grad_norm_set(rt_ctx *rt, const double *sumsq);
/* Micro-steps per optimizer step (1 without accumulation). */
static inline int64_t rt_accum(const rt_ctx *rt) { return rt->p->accum > 1 ? rt->p->accum : 1; }
/* The step has an apply phase of its own (accumulation, or dynamic variants). */
static inline bool rt_split_step(const rt_ctx *rt) { return rt_accum(rt) > 1 || rt->base->nvariants > 0; }

/* ---- batch_aware dynamic (rt_dyn.c) ---------------------------------------------------
 * rt_dyn_init (collective, after the arena) makes each variant's program
 * (the base with the variant's row, groups, inputs, loss and step);
 * rt_dyn_begin before micro-step j (0-based over the run: t * A + m) packs
 * its documents into the groups (rt_docs_step), checks that every rank
 * computed the same assignment, binds the block groups of this rank's
 * variant to its group's ranks and makes rt->p that variant; rt_dyn_end
 * returns to the base.  Rank 0 logs each micro-step to --assignments. */
void rt_dyn_init(rt_ctx *rt);
void rt_dyn_begin(rt_ctx *rt, int64_t t, int64_t j);
void rt_dyn_end(rt_ctx *rt);
/* A validation: the variant of all N ranks (program->eval_variant) on the
 * block from rank 0, until rt_dyn_end. */
void rt_dyn_eval_begin(rt_ctx *rt);
/* --metrics: the arena high-water mark each variant's micro-steps reached
 * (variant_arena_peak_bytes, by group size). */
struct cJSON;
void rt_dyn_metrics(const rt_ctx *rt, struct cJSON *o);
void rt_dyn_fini(rt_ctx *rt);
/* Block group gd's set holding block position pos, and pos's place in it
 * (shared by core's MPI binding and a backend's own communicators). */
void rt_dyn_block_pos(const rt_group_desc *gd, int pos, int *set, int *at);

/* ---- training loop (rt_loop.c) ------------------------------------------------------ */
/* Banner, the steps, logging and metrics, the final report and saves;
 * returns the exit status. */
int rt_train(rt_ctx *rt);

/* ---- between steps (rt_guard.c) ------------------------------------------------------
 * The loop's hooks: after step t (0-based), NaN/Inf handling and the
 * periodic checkpoint; after the run, the final checkpoint.  Both
 * collective; 0 to go on, 1 to stop (the message is printed). */
int rt_guard_after_step(rt_ctx *rt, int64_t t, double loss, double gnorm);
int rt_guard_after_run(rt_ctx *rt, int64_t steps);
void rt_guard_test_poison(rt_ctx *rt, int64_t t, bool before);
/* After step t, all ranks agree whether a stop signal arrived; if so,
 * writes a checkpoint (--checkpoint-dir) and returns the exit status
 * (128 + signal), else 0. */
int rt_guard_stop(rt_ctx *rt, int64_t t, FILE *metrics);
/* The index of the first non-finite of n floats, or -1. */
int64_t rt_first_nonfinite(const float *x, int64_t n);
/* Collective: after a non-finite step, the first optimizer pair (in table
 * order) whose gradient holds a NaN or Inf on some rank; -1 if none. */
int rt_first_nonfinite_grad(rt_ctx *rt);

/* ---- signals (rt_signal.c) -------------------------------------------------------------
 * SIGTERM / SIGINT.  Before rt_signal_training_started the first signal
 * ends the job at once (rank 0 says so); after it, the first asks for a
 * stop after the current step (rt_stop_signal: that signal, 0 if none) and
 * makes stdout/stderr non-blocking until rt_signal_restore_output; a second
 * one ends the job at once. */
void rt_signal_install(int rank);
void rt_signal_training_started(void);
int rt_stop_signal(void);
void rt_signal_restore_output(void);
void rt_signal_test_startup_delay(void);

/* ---- what a run writes (rt_paths.c) ------------------------------------------------- */
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
