/* basp.c — the embedding API: thin wrappers that keep frontend/, ir/,
 * passes/ and driver/ behind one small header.  Its functions take no
 * context: every one reaches the process's compilation context
 * (basp_ctx), whose settings (target, memory plan, verbosity, the input
 * hook, the diagnostics) they make and whose registries they read. */
#include "basp.h"

#include <stdlib.h>

#include "../codegen/codegen.h"
#include "../frontend/frontend.h"
#include "../ir/ir.h"
#include "../driver/driver.h"
#include "../passes/passes.h"
#include "basp_context.h"

void basp_set_diagnostics(FILE *sink, bool quiet) {
    basp_ctx();
    sup_diag_set_sink(sink);
    sup_diag_set_quiet(quiet);
}

int basp_error_count(void) { return sup_error_count(); }

/* Devices live in the registry (layout/) too, so the library is started
 * before they are added. */
bool basp_load_device_file(const char *path) {
    basp_ctx();
    return fe_device_file_load(path);
}

/* The spec's words for strategies come from the registry (layout/), so the
 * library is started (basp's own strategies registered) before the first
 * spec is read. */
basp_spec *basp_spec_parse_file(const char *path) {
    basp_ctx();
    return fe_parse_file_unchecked(path);
}

basp_spec *basp_spec_parse_string(const char *name, const char *text) {
    basp_ctx();
    return fe_parse_string_unchecked(name, text);
}

void basp_set_input_hook(void (*fn)(const char *path, void *ud), void *ud) {
    basp_ctx();
    fe_set_input_hook(fn, ud);
}

bool basp_spec_set(basp_spec *spec, const char *assignment) {
    basp_ctx();
    return spec && fe_override(spec, assignment);
}

bool basp_spec_check(basp_spec *spec) {
    basp_ctx();
    return spec && fe_check(spec);
}

void basp_spec_print(const basp_spec *spec, FILE *out) { fe_spec_print(spec, out); }

void basp_spec_free(basp_spec *spec) {
    if (spec) fe_spec_free(spec);
}

static bool plan_for_cuda(const basp_spec *spec);

/* The layout is resolved before lowering: a spec that names one exactly is
 * lowered with it; one that leaves something open (batch_aware auto|on,
 * sequence auto, a2a auto) gets the planner's choice, said in a remark.
 * The passes then only rewrite (config groups, sequence, ring_degree, a2a). */
basp_module *basp_lower(const basp_spec *spec) {
    basp_ctx();
    if (!spec) return NULL;
    if (spec->layout.batch_aware == FE_BA_DYNAMIC) {
        sup_error(fe_spec_loc(spec, "layout.batch_aware"),
                  "batch_aware dynamic has no single lowered step: it is a family of variants, one per group size");
        sup_note(fe_spec_loc(spec, "layout.batch_aware"), "use --emit=ir to see every variant after its passes");
        return NULL;
    }
    layout_choice c;
    drv_mlp_choice mlp = {0}; /* the MLP the layout's choice settled, if it did */
    if (!fe_layout_concrete(spec, &c)) {
        char why[512], name[64];
        if (!pass_layout_resolve(spec, plan_for_cuda(spec), &c, why, sizeof why, &mlp)) {
            sup_error(fe_spec_loc(spec, "layout"), "no legal layout of those the layout block allows can be built");
            return NULL;
        }
        layout_choice_name(&c, name, sizeof name);
        int64_t K = fe_world(spec) / c.groups;
        sup_remark(sup_noloc(), "layout: %s: %d group(s) of K=%lld ranks [chosen: %s]", name, c.groups, (long long)K,
                   why);
    }
    basp_spec *chunked = NULL;
    if (spec->train.attention_chunks == FE_CHUNKS_AUTO) {
        /* The head chunks, by building the step with each count (driver/settle.c). */
        char cwhy[320];
        int64_t C;
        chunked = drv_chunks_settled(spec, &c, plan_for_cuda(spec), NULL, cwhy, sizeof cwhy, &C);
        sup_remark(sup_noloc(), "attention: auto: %s", cwhy);
        if (!chunked) {
            sup_error(sup_noloc(), "attention: auto: the spec with train.attention_chunks=%lld does not check",
                      (long long)C);
            return NULL;
        }
        spec = chunked;
    }
    if (spec->train.mlp_chunk != FE_MLP_AUTO) {
        basp_module *m = pass_lower_with(spec, &c);
        fe_spec_free(chunked);
        return m;
    }
    /* The MLP, by building the step with it unfused (driver/settle.c), unless
     * the layout's choice did so for the chosen layout already. */
    char why[256];
    int64_t chunk = mlp.chunk;
    basp_spec *own;
    if (mlp.known && !chunked) {
        snprintf(why, sizeof why, "%s", mlp.why);
        own = drv_mlp_patched(spec, chunk);
    } else {
        own = drv_mlp_settled(spec, &c, plan_for_cuda(spec), NULL, why, sizeof why, &chunk);
    }
    sup_remark(sup_noloc(), "mlp: auto: %s", why);
    basp_module *m = own ? pass_lower_with(own, &c) : NULL;
    if (!own) sup_error(sup_noloc(), "mlp: auto: the spec with train.mlp_chunk=%lld does not check", (long long)chunk);
    fe_spec_free(own);
    fe_spec_free(chunked);
    return m;
}

basp_module *basp_module_parse_file(const char *path) {
    basp_ctx();
    return ir_parse_file(path);
}

basp_module *basp_module_parse_string(const char *name, const char *text) {
    basp_ctx();
    return ir_parse_string(name, text);
}

bool basp_module_verify(const basp_module *m) {
    basp_ctx();
    return ir_verify(m, "input");
}

void basp_print_ir(const basp_module *m, FILE *out) { ir_print(m, out); }

void basp_module_free(basp_module *m) {
    if (m) ir_module_free(m);
}

const char *basp_module_config(const basp_module *m, const char *key) { return ir_config_get(m, key); }

const char *basp_default_pipeline(void) {
    basp_ctx();
    return pass_default_pipeline();
}

static pass_options to_pass_options(const basp_pass_options *opt) {
    pass_options po = pass_default_options();
    if (opt) {
        po.print_after_all = opt->print_after_all;
        po.print_after = opt->print_after;
        if (opt->print_out) po.print_out = opt->print_out;
    }
    return po;
}

/* The memory plan follows the backend: the CUDA one keeps floating tensors
 * in bf16 with 256-byte alignment (ir/ir.h "memory plan").  An explicit
 * --target decides; without one the module's own rule does (a bf16 spec on
 * GPUs is planned for cuda, ir_mem_target_of).  A module that already
 * carries a plan keeps its target. */
static void set_mem_target(basp_module *m) {
    const sup_context *ctx = basp_ctx();
    if (ctx->target_explicit && !ir_mem_planned(m))
        ir_config_set(m, "mem.target", ctx->target == SUP_TARGET_CUDA ? "cuda" : "cpu");
}

static bool plan_for_cuda(const basp_spec *spec) {
    const sup_context *ctx = basp_ctx();
    if (ctx->target_explicit) return ctx->target == SUP_TARGET_CUDA;
    return ir_mem_default_cuda(spec->mesh.device, spec->train.precision);
}

bool basp_run_pipeline(basp_module *m, const char *passes, const basp_pass_options *opt) {
    basp_ctx();
    if (!m) return false;
    set_mem_target(m);
    pass_options po = to_pass_options(opt);
    char own[512];
    if (!passes && !pass_pipeline_of(m, own, sizeof own)) return false;
    return pass_run_pipeline(m, passes ? passes : own, &po);
}

/* batch_aware dynamic: built by the driver, variant by variant. */
static basp_module *compile_dynamic(const basp_spec *spec, const char *passes, const basp_pass_options *opt) {
    if (passes) {
        sup_error(sup_noloc(), "--passes: batch_aware dynamic runs each variant's own pipeline; leave --passes out");
        return NULL;
    }
    pass_options po = to_pass_options(opt);
    const sup_context *ctx = basp_ctx();
    return drv_dynamic_compile(spec, ctx->target_explicit ? (ctx->target == SUP_TARGET_CUDA ? "cuda" : "cpu") : NULL,
                               &po);
}

basp_module *basp_compile(const basp_spec *spec, const char *passes, const basp_pass_options *opt, basp_fit fit) {
    basp_module *m =
        spec && spec->layout.batch_aware == FE_BA_DYNAMIC ? compile_dynamic(spec, passes, opt) : basp_lower(spec);
    if (!m) return NULL;
    if (spec->layout.batch_aware != FE_BA_DYNAMIC && !basp_run_pipeline(m, passes, opt)) {
        ir_module_free(m);
        return NULL;
    }
    /* The fit warning comes from the plan the pipeline made (memplan), so
     * that it says what --memory says; a pipeline without memplan has no
     * plan to judge and gets none. */
    pass_mem_report r;
    if (fit == BASP_FIT_QUIET || !ir_mem_planned(m) || !pass_memory_report(m, &r) || (r.fits && r.host_fits)) return m;
    if (fit == BASP_FIT_WARN) {
        pass_memory_diagnose(&r, spec, SUP_WARNING);
        return m;
    }
    if (!r.fits) pass_memory_suggest(spec, &r);
    pass_memory_diagnose(&r, spec, SUP_ERROR);
    ir_module_free(m);
    return NULL;
}

bool basp_memory(const basp_spec *spec, const basp_module *m, FILE *out, bool json) {
    basp_ctx();
    pass_mem_report r;
    if (!m || !pass_memory_report(m, &r)) return false;
    pass_memory_suggest(spec, &r);
    if (json)
        pass_memory_json(&r, out);
    else
        pass_memory_print(&r, out);
    pass_memory_diagnose(&r, spec, SUP_ERROR);
    return r.fits && r.host_fits;
}

bool basp_run_pass(basp_module *m, const char *name) {
    basp_ctx();
    pass_options po = pass_default_options();
    return pass_run(m, name, &po);
}

void basp_list_passes(FILE *out) {
    basp_ctx();
    int n = 0;
    const pass_info *p = pass_registry(&n);
    for (int i = 0; i < n; i++) fprintf(out, "  %-14s %s\n", p[i].name, p[i].summary);
}

void basp_print_schedule(const basp_module *m, FILE *out, bool json) {
    basp_ctx();
    if (json)
        pass_schedule_json(m, out);
    else
        pass_schedule_print(m, out);
}

bool basp_max_seq_len(const basp_spec *spec, FILE *out, bool json) {
    basp_ctx();
    pass_maxseq_result *r = malloc(sizeof *r);
    if (!r || !pass_max_seq_len(spec, plan_for_cuda(spec), r)) {
        free(r);
        return false;
    }
    if (json)
        pass_maxseq_json(r, out);
    else
        pass_maxseq_print(r, out);
    bool any = false;
    for (int i = 0; i < r->n; i++) any |= r->rows[i].seq_len > 0;
    free(r);
    return any;
}

bool basp_plan(const basp_spec *spec, FILE *out, bool json) { return basp_plan_docs(spec, NULL, out, json); }

bool basp_plan_docs(const basp_spec *spec, const char *doc_lengths, FILE *out, bool json) {
    basp_ctx();
    pass_doc_lengths docs;
    if (doc_lengths && !pass_doc_lengths_read(doc_lengths, spec, &docs)) return false;
    pass_plan_result r;
    bool ok = pass_plan_docs(spec, plan_for_cuda(spec), doc_lengths ? &docs : NULL, &r);
    if (doc_lengths) pass_doc_lengths_free(&docs);
    if (json)
        pass_plan_json(&r, out);
    else
        pass_plan_print(&r, out);
    pass_plan_free(&r);
    return ok;
}

bool basp_write_trace(const basp_module *m, FILE *out) {
    basp_ctx();
    if (!m || !out) return false;
    pass_cost_params p = pass_cost_default_params(m);
    pass_trace_json(m, &p, out);
    return !ferror(out);
}

bool basp_emit_c(const basp_module *m, const char *spec_path, FILE *out) {
    const sup_context *ctx = basp_ctx();
    return m && out && cg_emit_c(m, ctx, spec_path, out);
}

bool basp_build(const basp_module *m, const char *spec_path, const char *out_exe, bool keep_c) {
    const sup_context *ctx = basp_ctx();
    return m && out_exe && cg_build(m, ctx, spec_path, out_exe, keep_c);
}

void basp_set_verbosity(int level) { basp_ctx()->verbosity = level; }

bool basp_set_target(const char *name) { return name && sup_context_set_target(basp_ctx(), name); }
/* The memory report follows: without the plan it says what the program
 * allocates (one slot per value). */
void basp_set_memory_plan(bool on) { basp_ctx()->memory_plan = on; }
