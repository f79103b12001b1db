/* codegen.h — the code generator: lowered IR -> a C host program for the
 * CPU/MPI backend, and the build of that program into a training binary.
 * The only header of codegen/; the contract (IR op -> runtime call, how each
 * size is derived) is codegen/README.md.
 *
 *     ir_module *m = ...;                       // after the pass pipeline
 *     const sup_context *ctx = sup_ctx();       // target, memory plan, verbosity
 *     cg_emit_c(m, ctx, "model.basp", stdout);        // the readable C program
 *     cg_build(m, ctx, "model.basp", "train", false)  // ./train, linked to basp_rt
 *
 * Both verify the module first.  An op the runtime cannot execute, or a
 * value whose shape the mapping cannot express, is reported as an error at
 * the op (its location when the IR was read from text, else named with
 * ir_op_str) and nothing is written. */
#ifndef BASP_CODEGEN_H
#define BASP_CODEGEN_H

#include <stdbool.h>
#include <stdio.h>

#include "../ir/ir.h"
#include "../support/support.h"

/* Writes the C program for `m` to `out`.  `spec_path` names the spec the
 * module came from (for the header comment and the runtime's messages);
 * NULL = the module name.  Returns false (after reporting) on any error;
 * nothing is written then. */
bool cg_emit_c(const ir_module *m, const sup_context *ctx, const char *spec_path, FILE *out);

/* Emits the program, then compiles and links it with the MPI C compiler
 * against the runtime (paths recorded at configure time; env BASP_CC,
 * BASP_RUNTIME_DIR, BASP_CFLAGS, BASP_LDFLAGS override them).  The C file is
 * out_exe + ".c" when keep_c, else a temporary file removed afterwards.
 * Progress goes to stderr.  Returns false (after reporting) on any error,
 * including a runtime library that was not built. */
bool cg_build(const ir_module *m, const sup_context *ctx, const char *spec_path, const char *out_exe, bool keep_c);

/* The context (support.h) says the backend: SUP_TARGET_CPU (fp32, MPI,
 * OpenBLAS; libbasp_rt.a) or SUP_TARGET_CUDA (bf16 on the GPUs, NCCL,
 * cuBLAS; libbasp_rt_cuda.a) -- the runtime API is the same, so the step
 * is the same; the header comment and the link line differ.  Its
 * memory_plan false gives programs no memory plan (no offsets,
 * mem_arena_bytes 0), so the runtime gives every value its own buffer.  Its
 * verbosity is what cg_build prints on stderr: 0 nothing but errors, 1 one
 * progress line ("baspc: compiling train.c → train"), 2 also the
 * compiler command line. */

/* ---- pieces shared by codegen's own files (cg_emit.c, cg_ops.c) -----------
 * Not for callers outside codegen/. */

/* Names given to values and groups in the generated C, plus the module. */
enum { CG_IDENT_MAX = IR_NAME_MAX + 16 }; /* prefix + IR name + clash suffix */
typedef struct cg_names {
    const ir_module *m;
    const sup_context *ctx;      /* the target and memory-plan switch emitted for */
    char (*value)[CG_IDENT_MAX]; /* "V_l0_q" per IR value; "" = not emitted */
    char (*group)[CG_IDENT_MAX]; /* "G_sp" per group */
} cg_names;

/* Builds unique C identifiers for every live value and every group
 * (sanitised: '.' and '-' become '_', clashes get a numeric suffix). */
void cg_names_init(cg_names *n, const ir_module *m);
void cg_names_free(cg_names *n);

/* Appends `step` — one runtime call per op, in schedule order, each after
 * its IR line as a comment — to `b`.  Reports every op it cannot map and
 * returns false if there was any. */
bool cg_emit_step(const cg_names *n, sup_buf *b);
/* batch_aware dynamic: the variants' sizes (config dyn_sizes) into sizes
 * (may be NULL), their count (0: a static step); the first size. */
int cg_dyn_sizes(const ir_module *m, int *sizes, int max);
int cg_dyn_first(const ir_module *m);
/* The forward-only program `eval_step` (validation); false (and a comment
 * saying why) when the module's forward ops do not compute the loss alone. */
bool cg_emit_eval(const cg_names *n, int loss, sup_buf *b);

/* Local size of dim d of `t` (global size / set size of its sharding group). */
int64_t cg_local_dim(const ir_module *m, const ir_type *t, int d);

/* Config values the generated code needs.  A key the module lacks gets the
 * layout language's default (rope_theta 10000, norm_eps 1e-5, lr 3e-4,
 * steps 10, seed 1234, zero 0, batch_groups 1, sp_size = world,
 * rope_factor 8, rope_low_freq_factor 1, rope_high_freq_factor 4,
 * rope_original_max_pos 8192); micro_batch
 * and seq_len fall back to the dims of input %tokens, other model sizes to 0.
 * A value that is not a number is reported as an error. */
double cg_config_double(const ir_module *m, const char *key);
int64_t cg_config_int(const ir_module *m, const char *key);

/* A double as a C literal that reads back exactly ("1e-05", "10000.0"). */
const char *cg_fmt_double(double v, char *buf, size_t n);

#endif
