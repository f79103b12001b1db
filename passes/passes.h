/* passes.h — the pass registry, the passes (IR → IR), the schedule report,
 * the cost model and the memory report.  The only header of passes/.
 * Everything here reads IR alone: lowering a spec, the planner and the
 * other spec-level work are driver/'s (driver/driver.h).
 *
 * Pipeline (explicit, in this order; see passes/README.md):
 *     (driver: resolve auto, lower) → batch-aware → the strategy's passes
 *         (ulysses | ring | ulysses, two-level | a plugin's)
 *         → place → zero → (its after-zero passes) → recompute → offload
 *         → overlap → memplan      (+ cost, on request)
 * The verifier runs after every pass.  A pass is one file (passes/pass_*.c,
 * or api/strategies/ for one written against the pass-writer API) plus one
 * row in passes/passes.def, which gives its name, its place in the
 * pipeline, what it requires and its summary.  The strategies that name
 * the passes are registered through api/basp_pass.h. */
#ifndef BASP_PASSES_H
#define BASP_PASSES_H

#include <stdbool.h>
#include <stdio.h>

#include "../ir/ir.h"
#include "../layout/layout.h"

/* Options shared by every pass. */
typedef struct pass_options {
    bool print_after_all;    /* print IR after each pass */
    const char *print_after; /* comma-separated pass names, or NULL */
    bool verify;             /* run the verifier after each pass (default true) */
    FILE *print_out;         /* where printed IR goes (default stdout) */
    bool quiet;              /* no remarks */
} pass_options;
pass_options pass_default_options(void);

/* A pass returns false on an internal failure (it has reported why).  "Not
 * applicable" is not a failure: the pass leaves the IR unchanged and emits a
 * remark saying why. */
typedef bool (*pass_fn)(ir_module *m, const pass_options *opt);

/* Where the pipeline puts a pass (passes.def, "SLOT"). */
typedef enum pass_slot {
    PASS_SLOT_NONE,      /* a plugin's pass: in a pipeline when its strategy names it */
    PASS_SLOT_FIRST,     /* first in every pipeline (batch-aware) */
    PASS_SLOT_PARTITION, /* in the pipeline of a strategy whose passes name it */
    PASS_SLOT_SHARD,     /* after the strategy's passes, before its after-zero ones */
    PASS_SLOT_FINISH,    /* last: they read the finished step */
    PASS_SLOT_ANALYSIS,  /* in no pipeline: run on request */
} pass_slot;

/* What a pass changes, as the planner's trial builds see it (passes.def,
 * "EFFECT"): they run the TIME passes only. */
typedef enum pass_effect { PASS_EFFECT_NONE, PASS_EFFECT_TIME, PASS_EFFECT_MEMORY } pass_effect;

typedef struct pass_info {
    const char *name;
    const char *summary;
    pass_fn run;
    const char *owner; /* NULL: built in; else the plugin's path (named in the verifier's errors) */
    /* A pass written against api/basp_pass.h (run NULL): it reads its
     * options through pass_current_options.  Neither function: a PASS_API
     * row of passes.def before its registration. */
    bool (*run_module)(ir_module *m);
    pass_slot slot; /* PASS_SLOT_NONE for a plugin's pass */
    pass_effect effect;
    const char *require; /* comma-separated pass names or "partitioned"; NULL or "": nothing */
} pass_info;

enum { PASS_MAX = 128 };
/* Puts passes.def's rows into the context's registry (once; every lookup
 * and registration calls it first).  The strategies, and the functions of
 * its PASS_API rows, come from the library's initialisation (api/). */
void pass_init(void);
/* Adds a pass (copied; its strings must outlive the registry), or gives a
 * PASS_API row its function (no owner; a NULL summary keeps passes.def's).
 * False, with the reason in err, for a missing name or function, a name
 * with a comma or a space, or one already registered. */
bool pass_register(const pass_info *p, char *err, size_t nerr);
const pass_info *pass_registry(int *n);
const pass_info *pass_lookup(const char *name); /* NULL if unknown (or not yet given its function) */
/* The options of the pass running now (pass_run), NULL outside one. */
const pass_options *pass_current_options(void);
/* The pass running now (pass_run), NULL outside one: what the pass-writer
 * API's errors name. */
const pass_info *pass_current(void);
/* The pipeline of strategy s (registry.c), from passes.def's slots: the
 * FIRST pass (batch-aware), the strategy's passes, the SHARD passes (place,
 * zero), its after-zero passes, the FINISH passes (recompute, offload,
 * overlap, memplan); with memory false only the passes whose effect is
 * TIME.  s NULL: every registered strategy's passes
 * (pass_default_pipeline). */
void pass_pipeline(const layout_strategy *s, bool memory, char *buf, size_t n);
/* The pipeline of the module's strategy (config sequence and the variant's
 * key); false, after an error, when the config names an unregistered one. */
bool pass_pipeline_of(const ir_module *m, char *buf, size_t n);
/* Every registered strategy's passes as a comma-separated list, today
 * "batch-aware,ulysses,ring,two-level,place,zero,recompute,offload,overlap,memplan":
 * what runs on a module whose strategy is not known yet. */
const char *pass_default_pipeline(void);

/* Runs one pass (then the verifier, then printing if asked).  A pass that
 * fails without an error, or a registered (plugin) pass that reports an
 * error, fails with one naming the pass and its owner. */
bool pass_run(ir_module *m, const char *name, const pass_options *opt);
/* Runs a comma-separated list of passes in order; stops at the first failure
 * (unknown names are reported with a "did you mean").  When the list holds
 * every pass of the module's strategy, the IR must then hold the layout the
 * config names (G groups of K ranks: @dp, @sp, batch_groups, sp_size), else
 * an error naming the strategy and its owner.  Returns success. */
bool pass_run_pipeline(ir_module *m, const char *names, const pass_options *opt);

/* ---- deferred insertion (pass_util.c) ---------------------------------- */
/* Deferred insertion: a pass that adds many ops records them against the
 * indices of the schedule it reads, then applies them in one O(n) merge
 * (inserting one at a time moves the whole tail each time: quadratic in
 * deep models).  In the gap between original ops i-1 and i the result is the
 * "after i-1" ops, latest recorded first, then the "before i" ops in the
 * order recorded: what the same calls to ir_op_insert, made one by one at
 * the current positions, would give. */
typedef struct pass_edits {
    struct pass_edit {
        int gap;   /* insert before original op `gap` (0..nops) */
        int after; /* 1: recorded as "after op gap-1" */
        int seq;   /* recording order */
        ir_op op;
    } * items;
    int n, cap;
    int *removed; /* original ops to leave out (pass_edits_remove) */
    int nremoved, capremoved;
} pass_edits;
void pass_insert_before(pass_edits *e, int pos, const ir_op *op);
void pass_insert_after(pass_edits *e, int pos, const ir_op *op);
/* Leaves original op pos out when the edits are applied (the ops recorded
 * around it stay where they are): with an insertion before it, what
 * replacing the op in place gives. */
void pass_edits_remove(pass_edits *e, int pos);
/* Applies and frees the edits, then renumbers the value defs. */
void pass_edits_apply(ir_module *m, pass_edits *e);

/* ---- what the partitioning passes share (pass_util.c) ----------------------
 * Written once here, used by ulysses and ring, and reached by strategies
 * written against api/basp_pass.h (two-level, plugins) through it. */
/* Adds "<name of v><suffix>" (".heads", ".mid") with type t, numbered as
 * ir_value_add_fresh numbers a name already taken. */
int pass_value_derived(ir_module *m, int v, const char *suffix, ir_type t);
/* The all_to_all over group g exchanging ins[k] into outs[k] (k < n) that
 * the partitioning passes insert: sequence to heads (split 2, concat 1,
 * fanout = fan) or back (split 1, concat 2, fanin = fan), fan written only
 * when above 1; then, when like is not NULL, the layer and phase of like. */
ir_op pass_exchange(int g, int n, const int *ins, const int *outs, bool to_heads, int64_t fan, const ir_op *like);
/* Shards the sequence dim (1) of every activation (not weight-like, rank
 * >= 2) over group sp. */
void pass_shard_sequence(ir_module *m, int sp);
/* The rule the module's layout (config sequence, ring_degree, a2a) breaks
 * with G = groups (and ring degree R, 0: the config's) on its dimensions,
 * NULL when legal (layout_illegal's buffer). */
const char *pass_layout_illegal(const ir_module *m, int groups, int ring_degree);
/* Turns a sequence-sharded [B,S@sp,H,Dh] type into the head-sharded
 * [B,S,H*F@sp,Dh] one (F = fanout, 1 for a plain split). */
ir_type pass_heads_type(ir_type t, int sp, int64_t fanout);
/* The head-sharded twin of v made by the forward exchanges over group sp:
 * the output of an all_to_all reading v (split 2), or the input of one
 * producing v (split 1); v itself when there is none. */
int pass_heads_twin(const ir_module *m, int sp, int v);
/* The same for every value: a malloc'd array of m->nvalues twins. */
int *pass_heads_twins(const ir_module *m, int sp);
/* Recomputes, for every all_to_all on group `sp`, the virtual-head sizes and
 * the fanout/fanin attributes for the group's current set size (see
 * pass_ulysses.c for the GQA scheme). */
void pass_fix_virtual_heads(ir_module *m, int sp);
/* Shards dim 0 (batch) over @dp of every value of rank >= 2 that carries an
 * @sp shard: the batch-aware data partitioning. */
void pass_shard_batch(ir_module *m, int sp, int dp);

/* ---- the passes (passes.def; registered in registry.c) ------------------ */
/* Each pass's contract is in passes/README.md.  memplan places every
 * buffer (ir/ir.h "memory plan") for ir_mem_target_of's target (config
 * mem.target, else the spec's own: a bf16 step on GPUs is cuda); it runs
 * last, since a pass that adds or moves ops afterwards invalidates the
 * plan (the verifier says where). */
#define PASS(name, fn, slot, effect, require, summary) bool fn(ir_module *m, const pass_options *opt);
#define PASS_API(name, slot, effect, require, summary)
#include "passes.def"
#undef PASS
#undef PASS_API

/* The layout the module's config names (sequence, ring_degree, a2a,
 * groups; groups 0 or absent = 1) and the dimensions layout/'s rules read
 * (config, else the IR itself): how the passes and the cost model see the
 * layout of textual IR. */
layout_choice pass_layout_of(const ir_module *m);
/* The strategy row of the module's layout (config sequence, and the key of
 * every variant: a2a); false, after an error naming the registered words,
 * when the config selects a variant nobody registered (its plugin not
 * loaded). */
bool pass_layout_strategy(const ir_module *m, const layout_strategy **out);
layout_dims pass_layout_dims(const ir_module *m);
/* True when every pass of the layout's pipeline is registered. */
bool pass_layout_available(const layout_choice *c);

/* ---- schedule report ---------------------------------------------------- */
/* One line per collective: layer, phase, op, group with its rank lists,
 * bytes sent per rank, peers per rank, bytes per rank that cross nodes;
 * totals per step.  The JSON form (cJSON) has the same content. */
void pass_schedule_print(const ir_module *m, FILE *out);
void pass_schedule_json(const ir_module *m, FILE *out);

/* Per-collective traffic of one op, as the report computes it. */
typedef struct pass_traffic {
    double bytes_sent;  /* per rank (max over ranks) */
    int peers;          /* distinct peers per rank */
    double inter_bytes; /* of bytes_sent, crossing nodes (max over ranks) */
    int inter_peers;    /* of peers, on other nodes (max over ranks) */
} pass_traffic;
/* Collectives, and ring_attention / ring_attention_bwd (whose kv blocks
 * travel around the ring inside the op); zeros for any other op. */
pass_traffic pass_op_traffic(const ir_module *m, const ir_op *op);

/* ---- cost model (cost.c, pass_cost.c) ------------------------------------
 * Predicted time of every op and memory per rank, from the module's mesh
 * (links, device preset), config and shapes.  See passes/README.md. */
typedef struct pass_cost_params {
    double compute_fraction;   /* achievable fraction of peak FLOP/s (default 0.5) */
    double attention_fraction; /* the same for attention (default compute_fraction) */
    /* Attention at the measured rate of the kernel that runs it
     * (pass_attention_impl, layout_attention_fraction) where the device has
     * figures for it; false when config cost.attention_fraction is given,
     * which then prices every attention op alike. */
    bool attention_rates;
    double mem_bw_fraction; /* achievable fraction of memory bandwidth (default 0.7) */
    double op_overhead;     /* fixed seconds per compute op: launch, call, timers (default 0) */
    bool hierarchical_a2a;  /* two-level all-to-all when a group spans nodes */
    /* of the time a rank sharing its core waits on the inter-node network,
     * the share the core's other ranks fill (cpu target, cores_per_node;
     * config cost.shared_core_overlap; default -1: (r - 1) / (2r) for r
     * ranks per core) */
    double shared_core_overlap;
    double host_update_s; /* seconds per parameter element of the CUDA backend's host AdamW
                                (train.offload optimizer/all; default 1.35e-9) */
} pass_cost_params;
pass_cost_params pass_cost_default_params(const ir_module *m); /* reads config cost.* keys */
/* The kernel that will run attention op `op` (attention, ring_attention or
 * their backwards) on the module's target: cm_attention_impl, the rule
 * the runtime applies, with packed documents from config documents and
 * cuDNN assumed usable on the CUDA target unless config
 * cost.attention_impl = own (a run with BASP_ATTENTION=own). */
cm_attn_impl pass_attention_impl(const ir_module *m, const ir_op *op);
/* The fraction of peak FLOP/s the cost model gives attention op `op`. */
double pass_attention_fraction(const ir_module *m, const ir_op *op, const pass_cost_params *p);

typedef struct pass_op_cost {
    double seconds; /* predicted time of the op on the slowest rank */
    double flops;   /* per rank (compute ops) */
    double bytes;   /* bytes moved per rank (memory traffic or bytes sent) */
    double exps;    /* exponentials evaluated per rank (compute ops) */
    bool comm;      /* a collective or point-to-point op */
    /* Seconds the other ranks sharing this rank's core fill with compute
     * while it waits on the network in this collective (0 unless ranks
     * share cores); pass_streams_place takes them off the compute after it. */
    double shared;
} pass_op_cost;
pass_op_cost pass_op_cost_of(const ir_module *m, const ir_op *op, const pass_cost_params *p);

typedef struct pass_cost_report {
    double step_s;                   /* per step: the two-stream model's critical path */
    double compute_s, comm_s, a2a_s; /* per step: the sums of the ops' times */
    double hidden_s;                 /* of comm_s: under compute (compute_s + comm_s - step_s) */
    double attn_s;                   /* of step_s: attention and ring attention, forward and backward */
    double a2a_fraction;             /* a2a_s / step_s */
    double host_s;                   /* of comm_s: copies over the host link (offload, fetch) */
    /* memory per rank, bytes */
    double mem_params, mem_grads, mem_optim, mem_acts, mem_comm, mem_peak;
    double device_mem; /* capacity from the config (device_mem), 0 if unknown */
    bool fits;
    /* From the memory plan (pass_memory_report): the categories above are
     * the bytes live at the plan's peak op, mem_work the kernel workspace
     * outside the arena, mem_unused the arena's bytes not live at the peak;
     * mem_peak = all seven = the plan's peak_bytes_per_rank (infinite when
     * a size overflows). */
    double mem_work, mem_unused;
} pass_cost_report;
pass_cost_report pass_cost_estimate(const ir_module *m, const pass_cost_params *p);
/* The two-stream model of one rank's step: compute and communication are
 * two resources, each taking its ops in schedule order.  A blocking
 * collective waits for both and holds both until it ends; a started one
 * (async = 1) queues on the communication stream only, and its wait holds
 * the compute stream until it ends.  Collectives in flight share the
 * rank's links by running one after another on the one communication
 * stream (a started gather delays the all-to-all behind it).  For the cuda
 * target the host link's copies (offload, fetch) are started too, as the
 * CUDA backend runs them, and the first op reading a copy waits for it.
 * Without started ops every op starts when the one before it ends: the
 * serial sum, to the bit. */
typedef struct pass_streams {
    double compute, comm; /* when each stream is next free */
    double since_comm;    /* compute seconds placed since the last collective */
    double credit;        /* of the collectives before: wait that the core's other ranks filled */
    double *ready;        /* per value: when a started op's result is complete */
    bool host_started;    /* the cuda target: host copies are started ops */
} pass_streams;
void pass_streams_init(pass_streams *s, const ir_module *m);
void pass_streams_free(pass_streams *s);
/* Places op (its cost c from pass_op_cost_of) and returns its start; it
 * ends c->seconds later on its stream (a wait: when the compute stream
 * resumes).  Ranks sharing a core (cost.c, shared_core_hidden): the
 * c->shared seconds of a collective are taken off the compute ops after
 * it, as far as they reach before the next collective. */
double pass_streams_place(pass_streams *s, const ir_op *op, pass_op_cost *c);
static inline double pass_streams_end(const pass_streams *s) { return s->compute > s->comm ? s->compute : s->comm; }
/* The times of pass_cost_estimate only (memory fields 0, fits true): no
 * memory plan is made, which is most of the work on an unplanned module.
 * For callers that compare step times alone (batch-aware's choice of G). */
pass_cost_report pass_cost_estimate_time(const ir_module *m, const pass_cost_params *p);
/* The `cost` pass: annotates every op with `cost_us` and sets module config
 * keys cost.step_ms, cost.a2a_ms, cost.mem_peak_bytes, cost.fits. */
bool pass_cost(ir_module *m, const pass_options *opt);
/* Predicted one-step timeline, Chrome trace JSON (pid = rank, tid = stream). */
void pass_trace_json(const ir_module *m, const pass_cost_params *p, FILE *out);

/* ---- memory report (memreport.c; passes/README.md "memory report") --------
 * One rank's memory at the peak of the module's memory plan (pass_memplan;
 * an unplanned module is planned on a clone, quietly).  Every number comes
 * from the plan and ir/ir_mem.c, so --memory, --plan's mem column, the cost
 * pass and the compiler's fit warning agree. */
enum { PASS_MEM_TOP = 5, PASS_MEM_SUGGEST = 9 };
typedef struct pass_mem_value {
    char name[IR_NAME_MAX];
    ir_mem_cat cat;
    int64_t bytes;
} pass_mem_value;

typedef struct pass_mem_suggestion {
    char change[112];   /* as an option: "--set train.zero=3", "--target=cuda" */
    int64_t peak_bytes; /* peak_bytes_per_rank with it; -1 when it does not build */
    bool fits;
} pass_mem_suggestion;

/* One slot of the kernel workspace (ir_mem_work_slots), and the op that
 * raised it to its size. */
typedef struct pass_mem_work {
    const char *slot, *what; /* the row of common/common.h: name, what it holds */
    int64_t bytes;
    bool sum; /* a SUMS row: the sum over nops ops (the first is op) */
    int nops;
    int op;                              /* a slot: the first op whose request is bytes; -1: none */
    char opcode[32], value[IR_NAME_MAX]; /* op's opcode and first output */
    int64_t off;                         /* in the shared region (CUDA), -1: an allocation of its own */
} pass_mem_work;

typedef struct pass_mem_report {
    char module[IR_NAME_MAX];
    bool cuda; /* the plan's target */
    int world;
    int64_t arena_bytes; /* config mem.peak */
    int64_t work_bytes;  /* ir_mem_work_bytes: kernel workspace outside the arena */
    int64_t peak_bytes;  /* per rank: arena + workspace */
    int peak_op;         /* op with the most bytes live (-1: the module has no ops) */
    char peak_opcode[32], peak_value[IR_NAME_MAX], peak_phase[16];
    int peak_layer;
    /* Bytes live at the peak op per category (IR_MEM_OPTIM: the optimizer
     * state region, IR_MEM_COMM: the collectives' staging region,
     * IR_MEM_WORK: work_bytes). */
    int64_t live[IR_MEM_NCATS];
    int64_t live_bytes;     /* the arena categories' sum */
    int64_t unused_bytes;   /* arena - live_bytes: fragmentation, usually 0 */
    int64_t no_reuse_bytes; /* the arena with one buffer per value, no reuse */
    /* Without reuse (the context's memory_plan false, baspc --no-memory-plan)
     * the report is what that program allocates: arena_bytes = one slot per
     * value plus the optimizer state, stage_bytes the collectives' staging
     * outside it, live[] every buffer; planned_arena_bytes is the plan's. */
    bool no_reuse;
    int64_t planned_arena_bytes, stage_bytes;
    double device_mem; /* config device_mem, 0 if unknown */
    bool fits;         /* peak_bytes <= device_mem (true when unknown) */
    /* Host memory (offload): the host arena per rank (config mem.host_peak,
     * 0 without offload), the ranks of a node that share the node's
     * host_mem (config host_mem, 0 if unknown), and whether it fits. */
    int64_t host_bytes;
    int64_t host_opt, host_stage; /* of host_bytes: the optimizer state, the update's staging */
    int64_t host_params;          /* of host_bytes: the parameters (offload.params) */
    int ranks_per_node;
    double host_mem;
    bool host_fits;
    int ntop;
    pass_mem_value top[PASS_MEM_TOP]; /* the largest buffers live at the peak op */
    int nwork;
    pass_mem_work work[IR_MEM_WORK_MAX]; /* work_bytes by slot: the nonzero ones, largest first */
    /* CUDA: the region the shared slots are placed in, and their sum (what
     * an allocation per slot would take); 0 without shared slots. */
    int64_t work_region, work_shared_sum;
    int nsuggest; /* filled by pass_memory_suggest (driver/) */
    pass_mem_suggestion suggest[PASS_MEM_SUGGEST];
    /* batch_aware dynamic: per variant (group size), the highest arena byte
     * its micro-step reaches: the whole-step buffers' and the tops of the
     * values its ops define.  The arena is the largest of them. */
    int nvariants;
    int variant_size[16];
    int64_t variant_top[16];
} pass_mem_report;

/* False when the module cannot be planned (the reason was reported). */
bool pass_memory_report(const ir_module *m, pass_mem_report *r);
/* The context's memory_plan false (programs built without the memory plan,
 * every value its own buffer) makes every report say what they allocate. */
/* A table (MiB/GiB) with the breakdown at the peak op and the largest buffers. */
void pass_memory_print(const pass_mem_report *r, FILE *out);
/* {"module", "target", "world", "peak_bytes_per_rank", "arena_bytes",
 *  "peak_op": {"index", "op", "value", "layer", "phase"},
 *  "breakdown": {"params", "grads", "optimizer", "activations", "comm",
 *                "workspace"}, "unused_bytes", "no_reuse_bytes",
 *  "device_mem", "fits", "top": [{"name", "category", "bytes"}],
 *  "workspace": [{"slot", "bytes", "what", "op": {"index", "op", "value"}
 *                 or, for a SUMS row, {"sum_over", "op"}}],
 *  "suggestions": [{"change", "peak_bytes_per_rank", "fits"}] (when computed),
 *  "memory_plan", and without it "planned_arena_bytes", "staging_bytes"} */
void pass_memory_json(const pass_mem_report *r, FILE *out);

#endif
