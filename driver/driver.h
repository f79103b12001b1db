/* driver.h — what works from the spec: lowering it to IR, choosing a
 * layout the spec leaves open, the planner (--plan, --doc-lengths), the
 * longest sequence that fits (--max-seq-len) and the memory report's
 * suggestions and fit diagnostic.  The only header of driver/.
 *
 * driver/ sits above passes/ (IR → IR) and below api/: every candidate it
 * weighs is the checked spec with a typed change (fe_spec_patch) applied,
 * lowered and run through passes/'s pipeline.  See driver/README.md. */
#ifndef BASP_DRIVER_H
#define BASP_DRIVER_H

#include <stdbool.h>
#include <stdio.h>

#include "../frontend/frontend.h"
#include "../passes/passes.h"

/* Lowers a checked spec to the single-device training step: global shapes,
 * nothing sharded, group @world only, forward, backward and optimizer ops
 * (each op carries layer = L (or -1) and phase = fwd|bwd|opt).  Every
 * spec field the passes need is copied into the module config, so passes
 * work from textual IR alone. */
ir_module *pass_lower(const fe_spec *spec);
/* Lowers with this layout (config sequence, ring_degree, a2a, groups;
 * lower.c).  pass_lower (settle.c) uses the spec's
 * own layout, or the planner's choice (pass_layout_resolve) when the spec
 * leaves something to choose. */
ir_module *pass_lower_with(const fe_spec *spec, const layout_choice *choice);

/* batch_aware dynamic (dynamic.c): one variant per group size, each built
 * through its pipeline, merged into one module (the variants' micro-step
 * ops tagged `variant = K`, one apply phase) and memory planned for target
 * ("cpu" or "cuda"; NULL: the module's own rule, ir_mem_target_of); NULL
 * after diagnostics. */
ir_module *drv_dynamic_compile(const fe_spec *spec, const char *target, const pass_options *po);

/* ---- planner (plan.c) -------------------------------------------------------
 * Enumerates every legal layout of a spec (layout_candidates: each G
 * dividing N and B times Ulysses, two-level Ulysses, ring and hybrid R),
 * builds each (pass_lower_with the typed choice, the default pipeline),
 * costs it with pass_cost_estimate and picks the fastest that fits and
 * keeps the global batch.  See driver/README.md. */
typedef struct pass_plan_candidate {
    char name[64];        /* "ulysses", "batch-aware G=2", "ulysses+two_level", "ring", "hybrid R=2",
                             "batch-aware G=2 ring", "ulysses-sp=4" */
    layout_choice choice; /* the layout (ulysses-sp: G = B groups) */
    int groups, group_size;
    int64_t micro_batch; /* of the candidate: B, or B*B for ulysses-sp */
    double tokens_per_rank;
    int peers;
    double a2a_ms, step_ms, a2a_fraction, mem_bytes_per_rank;
    double attn_ms;   /* of step_ms: attention, forward and backward */
    double comm_ms;   /* of step_ms: collectives and point-to-point */
    double host_ms;   /* of comm_ms: copies over the host link (train.offload) */
    char offload[16]; /* train.offload as built (auto: what it chose) */
    /* With --doc-lengths (pass_plan_apply_docs): the dense step, and the
     * step and group imbalance with sequential [0] and balanced [1]
     * packing; step_ms is then the one of the spec's packing.  NaN where
     * not predicted. */
    double dense_step_ms, docs_ms[2], imbalance[2];
    bool legal, fits;
    bool keeps_batch;  /* same global batch as the spec (false: ulysses-sp) */
    bool available;    /* the passes that build it exist in this compiler */
    bool within_error; /* predicted within the model's error of the chosen one */
    bool dynamic;      /* batch_aware dynamic with the group sizes in name (plan_dynamic) */
    char reason[256];  /* why it was not chosen (illegal, not available, does not fit,
                             changes the global batch, slower); "" for the chosen one */
} pass_plan_candidate;

/* Packed documents in the plan (--doc-lengths). */
typedef struct pass_plan_docs_summary {
    bool on;
    bool spec_documents; /* the spec packs documents (train.documents on) */
    int n, steps;        /* documents read; sampled steps */
    double mean_len, max_len;
    layout_packing packing; /* the spec's: what step_ms predicts */
    char source[256];
} pass_plan_docs_summary;

typedef struct pass_plan_result {
    char model[64];
    int world, nodes, devices_per_node;
    int64_t micro_batch, seq_len;
    int64_t accum;             /* micro-steps per optimizer step (train.global_batch / micro_batch) */
    double device_mem;         /* bytes per rank, 0 if unknown */
    bool cuda;                 /* memory planned for the cuda target (else cpu) */
    bool offload;              /* the spec's train.offload is not none: offload columns */
    double model_error;        /* the device preset's measured error of a predicted step (fraction) */
    pass_plan_candidate *cand; /* malloc'd */
    int n;
    int chosen;           /* index into cand, -1 when no legal candidate fits */
    char why[280];        /* why the chosen one */
    char suggestion[480]; /* when nothing fits: the cheapest change that makes one fit */
    pass_plan_docs_summary docs;
} pass_plan_result;

/* Document lengths for the planner: an llm.c token file split at the
 * spec's eot_token (as the runtime splits it; needs documents on), or text
 * holding one length per word ('#' comments).  Errors go to sup_error. */
typedef struct pass_doc_lengths {
    int64_t *len;
    int n;
    char source[256];
} pass_doc_lengths;
bool pass_doc_lengths_read(const char *path, const fe_spec *spec, pass_doc_lengths *out);
/* The same from a buffer (path names it in messages); the fuzz target's. */
bool pass_doc_lengths_parse(const char *path, const unsigned char *buf, size_t n, const fe_spec *spec,
                            pass_doc_lengths *out);
void pass_doc_lengths_free(pass_doc_lengths *d);
/* Sampled step t's documents as the runtime draws them (lengths with
 * replacement, cut into pieces of at most S, the last one cut so that the
 * step holds B*S tokens) into out (room for B*S); their count.  The planner
 * predicts with DRV_PLAN_STEPS of them. */
enum { DRV_PLAN_STEPS = 64 };
int pass_doc_draw(const pass_doc_lengths *d, int t, int64_t B, int64_t S, layout_doc *out);
/* The share of one row's dense causal attention that the document-masked
 * kernels do for the documents at slots s[0..ns) of that row (their col and
 * len; row is not read), a row of S tokens: the 64 x 64 tiles they visit
 * over the dense row's (docplan.c). */
double drv_doc_tile_share(const layout_slot *s, int ns, int64_t S);
/* The share by the kernels that run the row: with padded (cudnn-docs: the
 * cuda target without a ring) cuDNN's zero-padded batches, the sum of the
 * padded lengths' squares over S^2 less the padding allowance of the rate
 * (LAYOUT_DOCS_PADDING); else drv_doc_tile_share. */
double drv_doc_attn_share(const layout_slot *s, int ns, int64_t S, bool padded);

/* batch_aware dynamic's predicted step (dynamic.c) for a checked dynamic
 * spec: built (drv_dynamic_compile) and costed per variant; with docs, the
 * expectation over DRV_PLAN_STEPS sampled micro-steps assigned as the
 * runtime assigns them, else B documents of seq_len tokens.  False when it
 * does not build. */
typedef struct drv_dyn_estimate {
    double step_ms, dense_ms, a2a_ms, attn_ms, comm_ms, imbalance, mem_bytes;
    bool fits;
    char sizes[48]; /* the variants' group sizes, "1 2 4" */
} drv_dyn_estimate;
bool drv_dynamic_estimate(const fe_spec *spec, bool cuda, const pass_doc_lengths *docs, drv_dyn_estimate *out);
/* --plan's rows of batch_aware dynamic (packed documents):
 * the spec's group sizes, or every legal size and the powers of two, each
 * predicted; added after the static choice, which they do not change; a
 * dynamic spec then takes the fastest of them (r->chosen, r->why). */
void drv_plan_dynamic(const fe_spec *spec, bool cuda, const pass_doc_lengths *docs, pass_plan_result *r, int *cap);
/* Appends a candidate for `choice` to r (cap: its room), filled as the
 * planner fills one before building it. */
pass_plan_candidate *drv_plan_add(pass_plan_result *r, int *cap, const layout_choice *choice);
/* Predicts each measured candidate's step with rows packed from documents
 * of these lengths, sequential and balanced (docplan.c). */
void pass_plan_apply_docs(pass_plan_result *r, const fe_spec *spec, const pass_doc_lengths *d);
/* pass_plan_target with packed documents of the given lengths (NULL: none);
 * the choice then goes by the step of the spec's packing. */
bool pass_plan_docs(const fe_spec *spec, bool cuda, const pass_doc_lengths *docs, pass_plan_result *out);

/* Plans a checked spec (its own layout block is ignored: every layout is
 * tried).  Diagnostics of the trial builds are silenced.  Returns false
 * when no legal layout fits (out->suggestion then says what would).
 * Memory is planned for the cpu target (pass_plan) or the one named
 * (pass_plan_target: cuda = bf16 buffers, as --target=cuda builds). */
bool pass_plan(const fe_spec *spec, pass_plan_result *out);
/* Chooses what the spec leaves open (batch_aware auto|on, sequence auto,
 * a2a auto) among the legal layouts it allows whose passes exist: the
 * lowest predicted step time (lower, the pipeline up to zero, the cost
 * model's times), the larger G within 1% (fewer peers at equal cost).  A
 * mesh without link bandwidths has nothing to cost: the largest legal G.
 * `why` (may be NULL) receives the explanation.  False when no allowed
 * layout is legal and buildable.  Diagnostics of the trials are silenced. */
/* With train.mlp_chunk auto, each candidate's step is timed with the MLP
 * the compile would settle for it (drv_mlp_settled, the full pipeline, the
 * spec's memory target), and `mlp` (may be NULL) receives that decision for
 * the layout chosen, so that the compile takes it without building the step
 * once more; mlp->known is false where no decision was made (one legal
 * layout, no link bandwidths, attention_chunks auto: the compile settles). */
typedef struct drv_mlp_choice {
    bool known;
    int64_t chunk;
    char why[256];
} drv_mlp_choice;
bool pass_layout_resolve(const fe_spec *spec, bool cuda, layout_choice *out, char *why, size_t nwhy,
                         drv_mlp_choice *mlp);
bool pass_plan_target(const fe_spec *spec, bool cuda, pass_plan_result *out);
/* The lowered module of spec with layout c (NULL: the spec's) for the
 * target, run through `pipeline` (NULL: its strategy's, which ends with
 * memplan); auto head chunks, then an auto MLP, settled first; verified once
 * at the end.  Diagnostics as they are (settle.c; the planner's table and
 * the auto settings build their trials with it). */
ir_module *drv_build_choice(const fe_spec *s, const layout_choice *c, bool cuda, const char *pipeline);
/* The choice among n layouts with predicted times t (INFINITY: unusable):
 * of those within the model's error `err` of the fastest the simplest
 * (Ulysses, then Ulysses x Ring, then ring), of those the fastest, the
 * larger G within 1%; -1 when none is usable.  drv_model_error: the
 * device preset's measured error of the cost model (0 when unknown). */
int drv_prefer(const layout_choice *c, const double *t, int n, double err);
double drv_model_error(const fe_spec *spec);
/* The module the compiler builds for `spec` with the typed change `patch`
 * applied (NULL: none; fe_spec_patched, which checks it again),
 * pass_lower, config mem.target (cuda or cpu), the default pipeline, with
 * diagnostics left as they are (silence them around the call for trial
 * builds).  NULL when a step fails. */
ir_module *drv_build(const fe_spec *spec, const fe_spec_patch *patch, bool cuda);
/* train.attention_chunks auto (FE_CHUNKS_AUTO): the fewest head chunks whose
 * step fits the device and the host (driver/settle.c); a concrete value is
 * returned as it is.  drv_chunks_settled: spec with it settled. */
int64_t pass_chunks_auto(const fe_spec *spec, const layout_choice *c, bool cuda, const char *pipeline, char *why,
                         size_t nwhy);
fe_spec *drv_chunks_settled(const fe_spec *spec, const layout_choice *c, bool cuda, const char *pipeline, char *why,
                            size_t nwhy, int64_t *chunks);
/* The tokens per MLP chunk to build spec with (layout c, NULL: the spec's;
 * pipeline NULL: the default): spec's own train.mlp_chunk, or for auto 0
 * (unfused) when the step fits with it, else ALST's tiling; `why` says so. */
int64_t pass_mlp_chunk_auto(const fe_spec *spec, const layout_choice *c, bool cuda, const char *pipeline, char *why,
                            size_t nwhy);
/* spec with train.mlp_chunk settled: a copy with pass_mlp_chunk_auto's
 * choice (*chunk) applied and checked again, quietly (the spec's warnings
 * were said once); NULL when that does not check.  The one rule by which
 * both the planner's builds and the compiler's lowering settle auto. */
fe_spec *drv_mlp_settled(const fe_spec *spec, const layout_choice *c, bool cuda, const char *pipeline, char *why,
                         size_t nwhy, int64_t *chunk);
/* spec with train.mlp_chunk = chunk, checked again quietly (a decision
 * drv_mlp_settled made earlier); NULL when that does not check. */
fe_spec *drv_mlp_patched(const fe_spec *spec, int64_t chunk);
void pass_plan_free(pass_plan_result *r);
/* A table, a "chosen: NAME (why)" line, and the suggestion when nothing fits. */
void pass_plan_print(const pass_plan_result *r, FILE *out);
/* {"world", "micro_batch", "candidates": [{"name", "groups", "group_size",
 *  "tokens_per_rank", "peers", "a2a_ms", "step_ms", "a2a_fraction",
 *  "mem_bytes_per_rank", "fits", "legal", "keeps_batch", "available", "reason"}],
 *  "chosen": NAME|null, ...} */
void pass_plan_json(const pass_plan_result *r, FILE *out);

/* ---- the longest sequence that fits (maxseq.c, baspc --max-seq-len) ---- */
enum { PASS_MAXSEQ_ROWS = 6 * 64 };
typedef struct pass_maxseq_row {
    char layout[48];         /* "ulysses", "batch-aware G=2", "ring" (layout_choice_name) */
    layout_choice choice;    /* the layout the row builds */
    char recompute[16];      /* none, selective, full */
    char offload[16];        /* none, activations */
    int64_t host_bytes;      /* the plan's host arena per rank at seq_len (offload), 0 without */
    int64_t seq_len;         /* the longest that fits; 0: none (or an illegal layout) */
    int64_t tokens_per_rank; /* micro_batch * seq_len / world */
    int64_t peak_bytes;      /* the plan's peak per rank at seq_len, -1 when none */
    int64_t step;            /* the seq_len granularity searched */
    int builds;              /* candidate builds the search made */
    bool at_cap;             /* the longest length tried (2^24 tokens) fits */
    char illegal[160];       /* why the layout is illegal ("" when legal) */
} pass_maxseq_row;
typedef struct pass_maxseq_result {
    char model[IR_NAME_MAX], device[FE_NAME_MAX];
    int world;
    int64_t micro_batch;
    int64_t attention_chunks; /* the spec's train.attention_chunks, every row's */
    double device_mem;
    bool cuda;
    /* The spec offloads (train.offload): each recompute setting gets a row
     * with offload none and one with the spec's setting, and a row fits
     * only when its host arena fits the node's host memory too. */
    bool offload;
    double host_mem;
    int n;
    pass_maxseq_row rows[PASS_MAXSEQ_ROWS];
} pass_maxseq_result;
bool pass_max_seq_len(const fe_spec *spec, bool cuda, pass_maxseq_result *r);
void pass_maxseq_print(const pass_maxseq_result *r, FILE *out);
void pass_maxseq_json(const pass_maxseq_result *r, FILE *out);

/* maxseq.c (it builds; the report, passes.h, only reads a module).
 * When r does not fit: rebuilds `spec` with one change at a time and
 * records each one's peak in r->suggest: the memory plan (a report without
 * it, r->no_reuse), the cuda target (when the plan is
 * for cpu, the precision bf16 and the device not a cpu), ZeRO 3, recompute
 * selective and full, twice the nodes, half the seq_len, half the
 * micro-batch.  Diagnostics of the trial
 * builds are silenced. */
void pass_memory_suggest(const fe_spec *spec, pass_mem_report *r);
/* The fit diagnostic at `loc` (the spec's train block): severity SUP_ERROR
 * (--memory) or SUP_WARNING (every other action), naming the peak op, the
 * largest buffers and what would make it fit. */
void pass_memory_diagnose(const pass_mem_report *r, const fe_spec *spec, sup_severity sev);

#endif
