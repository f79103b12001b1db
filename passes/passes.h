/* passes.h — lowering (spec → IR), the pass registry, the schedule report,
 * the cost model and the planner.  The only header of passes/.
 *
 * Pipeline (explicit, in this order; see passes/README.md):
 *     lower  →  ulysses → batch-aware → place → zero     (+ cost, on request)
 * The verifier runs after every pass.  A pass is one file (passes/pass_*.c)
 * plus one line in the registry table (passes/registry.c). */
#ifndef BASP_PASSES_H
#define BASP_PASSES_H

#include <stdbool.h>
#include <stdio.h>

#include "../frontend/frontend.h"
#include "../ir/ir.h"

/* Lowers a checked spec to the single-device training step: global shapes,
 * nothing sharded, group @world only, forward, backward and optimizer ops
 * (each op carries layer = L (or -1) and phase = fwd|bwd|opt).  Every
 * spec field the passes need is copied into the module config, so passes
 * work from textual IR alone. */
ir_module *pass_lower(const fe_spec *spec);

/* Options shared by every pass. */
typedef struct pass_options {
    bool print_after_all;       /* print IR after each pass */
    const char *print_after;    /* comma-separated pass names, or NULL */
    bool verify;                /* run the verifier after each pass (default true) */
    FILE *print_out;            /* where printed IR goes (default stdout) */
    bool quiet;                 /* no remarks */
} pass_options;
pass_options pass_default_options(void);

/* A pass returns false on an internal failure (it has reported why).  "Not
 * applicable" is not a failure: the pass leaves the IR unchanged and emits a
 * remark saying why. */
typedef bool (*pass_fn)(ir_module *m, const pass_options *opt);

typedef struct pass_info {
    const char *name;
    const char *summary;
    pass_fn run;
} pass_info;

const pass_info *pass_registry(int *n);
const pass_info *pass_lookup(const char *name); /* NULL if unknown */
/* The default pipeline as a comma-separated list: "ulysses,batch-aware,place,zero". */
const char *pass_default_pipeline(void);

/* Runs one pass (then the verifier, then printing if asked). */
bool pass_run(ir_module *m, const char *name, const pass_options *opt);
/* Runs a comma-separated list of passes in order; stops at the first failure
 * (unknown names are reported with a "did you mean").  Returns success. */
bool pass_run_pipeline(ir_module *m, const char *names, const pass_options *opt);

/* ---- the passes (registered in registry.c) ------------------------------- */
bool pass_ulysses(ir_module *m, const pass_options *opt);
bool pass_batch_aware(ir_module *m, const pass_options *opt);
bool pass_place(ir_module *m, const pass_options *opt);
bool pass_zero(ir_module *m, const pass_options *opt);

/* Batch-aware legality, shared by the pass and the planner: NULL when G
 * groups are legal for the module's config and world, else a reason. */
const char *pass_batch_aware_illegal(const ir_module *m, int G);

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
} pass_traffic;
pass_traffic pass_op_traffic(const ir_module *m, const ir_op *op);

/* ---- cost model (cost.c, pass_cost.c) ------------------------------------
 * Predicted time of every op and memory per rank, from the module's mesh
 * (links, device preset), config and shapes.  See passes/README.md. */
typedef struct pass_cost_params {
    double compute_fraction; /* achievable fraction of peak FLOP/s (default 0.5) */
    double attention_fraction; /* the same for attention (default compute_fraction) */
    double mem_bw_fraction;  /* achievable fraction of memory bandwidth (default 0.7) */
    double op_overhead;      /* fixed seconds per compute op: launch, call, timers (default 0) */
    bool hierarchical_a2a;   /* two-level all-to-all when a group spans nodes */
    bool recompute;          /* activations recomputed in backward (memory model) */
} pass_cost_params;
pass_cost_params pass_cost_default_params(const ir_module *m); /* reads config cost.* keys */

typedef struct pass_op_cost {
    double seconds;  /* predicted time of the op on the slowest rank */
    double flops;    /* per rank (compute ops) */
    double bytes;    /* bytes moved per rank (memory traffic or bytes sent) */
    double exps;     /* exponentials evaluated per rank (compute ops) */
    bool comm;       /* a collective or point-to-point op */
} pass_op_cost;
pass_op_cost pass_op_cost_of(const ir_module *m, const ir_op *op, const pass_cost_params *p);

typedef struct pass_cost_report {
    double step_s, compute_s, comm_s, a2a_s; /* per step, ops serialised on one stream */
    double a2a_fraction;                      /* a2a_s / step_s */
    /* memory per rank, bytes */
    double mem_params, mem_grads, mem_optim, mem_acts, mem_comm, mem_peak;
    double device_mem; /* capacity from the config (device_mem), 0 if unknown */
    bool fits;
} pass_cost_report;
pass_cost_report pass_cost_estimate(const ir_module *m, const pass_cost_params *p);
/* The `cost` pass: annotates every op with `cost_us` and sets module config
 * keys cost.step_ms, cost.a2a_ms, cost.mem_peak_bytes, cost.fits. */
bool pass_cost(ir_module *m, const pass_options *opt);
/* Predicted one-step timeline, Chrome trace JSON (pid = rank, tid = stream). */
void pass_trace_json(const ir_module *m, const pass_cost_params *p, FILE *out);

/* ---- planner (plan.c) ------------------------------------------------------
 * Enumerates the layouts of a spec's world N and micro-batch B, builds each
 * (spec copy + override, lower, default pipeline), costs it with
 * pass_cost_estimate and picks the fastest legal one that fits and keeps the
 * global batch.  See passes/README.md, "Planner". */
typedef struct pass_plan_candidate {
    char name[64];        /* "ulysses", "ulysses-sp=4", "batch-aware G=2", "ulysses-hier" */
    int groups, group_size;
    int64_t micro_batch;  /* of the candidate: B, or B*B for ulysses-sp */
    double tokens_per_rank;
    int peers;
    double a2a_ms, step_ms, a2a_fraction, mem_bytes_per_rank;
    bool legal, fits;
    bool keeps_batch;     /* same global batch as the spec (false: ulysses-sp) */
    bool estimate_only;   /* costed, but no pass builds it yet (ulysses-hier) */
    char reason[160];     /* why it was not chosen (illegal, does not fit, changes
                             the global batch, slower); "" for the chosen one */
} pass_plan_candidate;

typedef struct pass_plan_result {
    char model[64];
    int world, nodes, devices_per_node;
    int64_t micro_batch, seq_len;
    double device_mem;         /* bytes per rank, 0 if unknown */
    pass_plan_candidate *cand; /* malloc'd */
    int n;
    int chosen;                /* index into cand, -1 when no legal candidate fits */
    char why[200];             /* why the chosen one */
    char suggestion[480];      /* when nothing fits: the cheapest change that makes one fit */
} pass_plan_result;

/* Plans a checked spec (its own layout block is ignored: every layout is
 * tried).  Diagnostics of the trial builds are silenced.  Returns false
 * when not even the spec itself lowers. */
bool pass_plan(const fe_spec *spec, pass_plan_result *out);
void pass_plan_free(pass_plan_result *r);
/* A table, a "chosen: NAME (why)" line, and the suggestion when nothing fits. */
void pass_plan_print(const pass_plan_result *r, FILE *out);
/* {"world", "micro_batch", "candidates": [{"name", "groups", "group_size",
 *  "tokens_per_rank", "peers", "a2a_ms", "step_ms", "a2a_fraction",
 *  "mem_bytes_per_rank", "fits", "legal", "reason"}], "chosen": NAME|null, ...} */
void pass_plan_json(const pass_plan_result *r, FILE *out);

#endif
