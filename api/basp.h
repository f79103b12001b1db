/* basp.h — the basp compiler as a library.  The only header of api/.
 *
 * Each stage is one call:
 *
 *     basp_spec *s = basp_spec_parse_file("model.basp");     // or _string
 *     basp_spec_set(s, "train.micro_batch=4");               // optional overrides
 *     if (!s || !basp_spec_check(s)) ... diagnostics were printed ...
 *     basp_module *m = basp_lower(s);
 *     basp_run_pipeline(m, NULL, NULL);                      // default pipeline
 *     basp_print_ir(m, stdout);  basp_print_schedule(m, stdout, false);
 *     basp_module_free(m); basp_spec_free(s);
 *
 * Diagnostics (errors with file:line:col and a caret, warnings, remarks) go to
 * stderr unless redirected with basp_set_diagnostics.  Functions that can fail
 * return NULL / false after reporting why.  The functions take no context:
 * they share the process's one compilation context (the settings below,
 * the diagnostics, the registered passes and strategies), set up by the
 * first call (docs/ARCHITECTURE.md, Invariants). */
#ifndef BASP_API_H
#define BASP_API_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fe_spec basp_spec;     /* opaque: a parsed layout spec */
typedef struct ir_module basp_module; /* opaque: an IR module */

#define BASP_VERSION "0.1.0"

/* ---- diagnostics ---- */
void basp_set_diagnostics(FILE *sink, bool quiet); /* sink NULL = stderr; quiet drops remarks */
int basp_error_count(void);

/* ---- specs ---- */
/* Adds the devices of a device file (JSON, frontend/devfile.c; written by
 * bench/calibrate.py --device-file) to the presets that specs name with
 * `device NAME`; before the spec is checked.  False after errors. */
bool basp_load_device_file(const char *path);
basp_spec *basp_spec_parse_file(const char *path); /* parse, not yet checked */
basp_spec *basp_spec_parse_string(const char *name, const char *text);
bool basp_spec_set(basp_spec *spec, const char *assignment); /* "block.key=value" */
bool basp_spec_check(basp_spec *spec);                       /* defaults + every rule */
void basp_spec_print(const basp_spec *spec, FILE *out);
void basp_spec_free(basp_spec *spec);

/* Calls fn(path, ud) for every file the spec parser reads (the spec, each
 * import, each config.json), before reading it; NULL stops it. */
void basp_set_input_hook(void (*fn)(const char *path, void *ud), void *ud);

/* ---- IR ---- */
/* Checked spec -> IR.  The layout is concrete before lowering: the spec's
 * own when it names one, else the planner's choice among those its layout
 * block allows (batch_aware auto|on, sequence auto, a2a auto), said in a
 * remark "layout: NAME: G group(s) of K ranks [chosen: ...]".  The module
 * config carries it (sequence, groups, ring_degree, a2a). */
basp_module *basp_lower(const basp_spec *spec);
basp_module *basp_module_parse_file(const char *path); /* textual IR ("-" = stdin) */
basp_module *basp_module_parse_string(const char *name, const char *text);
bool basp_module_verify(const basp_module *m);
void basp_print_ir(const basp_module *m, FILE *out);
void basp_module_free(basp_module *m);
/* A module config value, e.g. "batch_groups" or "sp_size" after the
 * pipeline; NULL when absent. */
const char *basp_module_config(const basp_module *m, const char *key);

/* ---- passes ---- */
typedef struct basp_pass_options {
    bool print_after_all;    /* print the IR after every pass */
    const char *print_after; /* comma-separated pass names, or NULL */
    FILE *print_out;         /* NULL = stdout */
} basp_pass_options;

/* Every registered strategy's passes in the pipeline's skeleton, today
 * "batch-aware,ulysses,ring,two-level,place,zero,recompute,offload,overlap,
 * memplan" (each pass skips, with a remark, a layout not its own;
 * passes/passes.def declares them). */
const char *basp_default_pipeline(void);
/* Comma-separated pass names (NULL = the pipeline of the module's strategy:
 * batch-aware, the strategy's passes, place, zero, recompute, offload,
 * overlap, memplan);
 * the verifier runs after each pass.  opt may be NULL.  After basp_set_target an
 * unplanned module gets config mem.target = that target first, so that
 * memplan sizes that backend's buffers; without it the module's own rule
 * holds (a bf16 spec on GPUs: cuda, else cpu). */
bool basp_run_pipeline(basp_module *m, const char *passes, const basp_pass_options *opt);
/* basp_lower + basp_run_pipeline.  When the module then carries a memory
 * plan whose peak per rank exceeds the device's memory: BASP_FIT_WARN warns,
 * located at the spec's train block, with the numbers of basp_memory (the
 * peak op, the largest buffers); BASP_FIT_ERROR reports it as an error,
 * with the single changes that would fit, and returns NULL (a training
 * binary that cannot fit is not built); BASP_FIT_QUIET says nothing. */
typedef enum { BASP_FIT_QUIET, BASP_FIT_WARN, BASP_FIT_ERROR } basp_fit;
basp_module *basp_compile(const basp_spec *spec, const char *passes, const basp_pass_options *opt, basp_fit fit);
bool basp_run_pass(basp_module *m, const char *name);
/* Lists the registered passes, one "name  summary" per line. */
void basp_list_passes(FILE *out);

/* ---- inspection ---- */
/* Every collective per layer and phase with its groups, bytes, peers and
 * inter-node bytes, plus totals per step; JSON when json is true. */
void basp_print_schedule(const basp_module *m, FILE *out, bool json);
/* Writes the predicted one-step timeline as Chrome trace JSON (open it in
 * chrome://tracing or Perfetto): one process per rank (at most 64), compute
 * on thread 0 and collectives on thread 1, ops serialised in schedule order
 * with the cost model's times (config cost.* keys set its parameters).
 * Returns false when m or out is NULL or the write failed. */
bool basp_write_trace(const basp_module *m, FILE *out);
/* Compares the candidate layouts of a checked spec (Ulysses, Ulysses over
 * N/B ranks, batch-aware for every G, hierarchical all-to-all) with the cost
 * model and names the fastest that fits; a table, or JSON when json is
 * true.  Memory per rank is each candidate's memory plan for the target of
 * basp_set_target (what basp_memory reports for that layout).  Returns
 * false when no layout fits (a suggestion is printed). */
bool basp_plan(const basp_spec *spec, FILE *out, bool json);
/* basp_plan with rows packed from documents whose lengths doc_lengths
 * holds (an llm.c token file, split at the spec's eot_token, or a text
 * list of lengths): each layout's step with sequential and balanced
 * packing, the choice by the spec's packing.  False also when the file
 * cannot be read (an error was reported). */
bool basp_plan_docs(const basp_spec *spec, const char *doc_lengths, FILE *out, bool json);
/* The longest seq_len (in steps of 1024 tokens, a multiple of the group
 * size) whose memory plan fits the device, for Ulysses and every legal
 * batch-aware G, each with recompute none, selective and full; a table, or
 * JSON.  The target is basp_set_target's, else the spec's own (bf16 on GPUs:
 * cuda).  Returns false when no row fits at all. */
bool basp_max_seq_len(const basp_spec *spec, FILE *out, bool json);
/* One rank's memory at the peak of the module's memory plan (a clone is
 * planned when the module has none): arena, workspace, the bytes live at
 * the peak op per category, the largest buffers, whether it fits the
 * device; a table, or JSON when json is true.  Returns false when it does
 * not fit: an error then names the peak op and the largest buffers,
 * located at the spec's train block (spec may be NULL, e.g. for textual
 * IR), and, with a spec, the single changes (ZeRO 3, recompute selective or
 * full, more nodes, a shorter seq_len, a smaller micro-batch) with their
 * peaks. */
bool basp_memory(const basp_spec *spec, const basp_module *m, FILE *out, bool json);

/* ---- code generation (codegen/) ---- */
/* Writes the C host program for a lowered module (after the pipeline): the
 * group and value tables, one runtime call per op in `step`, and main.
 * spec_path names the spec it came from (NULL = the module name).  Nothing
 * is written when an op or a shape cannot be mapped to the runtime. */
bool basp_emit_c(const basp_module *m, const char *spec_path, FILE *out);
/* Emits the program and compiles it with the MPI C compiler against the
 * runtime library into the executable out_exe; keeps the C file as
 * out_exe + ".c" when keep_c.  Fails with a message when the runtime library
 * was not built.  Environment: BASP_CC, BASP_RUNTIME_DIR, BASP_CFLAGS,
 * BASP_LDFLAGS (codegen/README.md). */
bool basp_build(const basp_module *m, const char *spec_path, const char *out_exe, bool keep_c);
/* What basp_build prints on stderr: 0 only errors, 1 (default) a progress
 * line, 2 also the compiler command line. */
void basp_set_verbosity(int level);
/* The backend basp_emit_c / basp_build generate for: "cpu" (default) or
 * "cuda" (GPUs: bf16, NCCL, cuBLAS; needs the CUDA backend library).
 * Returns false, changing nothing, for any other name. */
bool basp_set_target(const char *name);
/* false: the generated program ignores the memory plan and gives every
 * value its own buffer (baspc --no-memory-plan): the reference that a
 * planned program's numbers are compared with.  Default true. */
void basp_set_memory_plan(bool on);

#ifdef __cplusplus
}
#endif
#endif
