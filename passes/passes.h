/* passes.h — lowering (spec → IR), the pass registry and the schedule report.
 * The only header of passes/.
 *
 * Pipeline (explicit, in this order; see passes/README.md):
 *     lower  →  ulysses → batch-aware → place → zero
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

#endif
