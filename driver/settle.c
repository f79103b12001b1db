/* settle.c — what a spec leaves to `auto`, settled the way the compile
 * builds it: the head chunks (train.attention_chunks auto), the MLP
 * (train.mlp_chunk auto) and the layout (pass_layout_resolve: batch_aware
 * auto|on, sequence auto, a2a auto), each by building the step with the
 * candidates (drv_build_choice) and reading its memory plan or its
 * predicted time.  The planner's table (plan.c) builds its candidates the
 * same way. */
#include "driver.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* train.mlp_chunk auto: the MLP unfused when the step, built with it, fits
 * device_mem and the host's memory (and, with recompute auto, fits with
 * recompute none: the tiled MLP recomputes two GEMMs, cheaper than
 * selective recomputation),
 * else DeepSpeed ALST's tiling.  The unfused MLP keeps g, u and s ([tokens,
 * ffn] each) for its backward; the tiled one recomputes g and u there,
 * which cost 9% of Llama-3.2-1B's step at 8K tokens on an H200 and about
 * 10% of a small CPU model's (bench/README.md).  `why` (may be NULL) says
 * which and why.  When it settles on the unfused MLP and `unfused` is not
 * NULL, *unfused receives the step it built to decide (else NULL). */
static int64_t mlp_auto(const fe_spec *spec, const layout_choice *c, bool cuda, const char *pipeline, char *why,
                        size_t nwhy, ir_module **unfused) {
    if (unfused) *unfused = NULL;
    int64_t alst = fe_mlp_chunk_alst(spec);
    if (spec->train.mlp_chunk != FE_MLP_AUTO || alst == 0)
        return spec->train.mlp_chunk == FE_MLP_AUTO ? 0 : spec->train.mlp_chunk;
    const fe_spec_patch flat = {.set_mlp_chunk = true, .mlp_chunk = 0};
    sup_diag_saved saved = sup_diag_silence(); /* the spec's warnings were said once */
    fe_spec *s0 = fe_spec_patched(spec, &flat);
    ir_module *m = s0 ? drv_build_choice(s0, c, cuda, pipeline) : NULL;
    sup_diag_restore(saved);
    pass_mem_report r;
    bool planned = m && pass_memory_report(m, &r);
    const char *chosen = m ? ir_config_get(m, "recompute.chosen") : NULL;
    /* The host too: offloaded, the unfused MLP's saved g, u, s are host memory. */
    bool host_ok = !planned || r.host_fits;
    bool fits = planned && r.fits && host_ok && (!chosen || strcmp(chosen, "none") == 0);
    if (why) {
        char pb[32], cb[32];
        sup_fmt_bytes(planned ? (double)r.peak_bytes : 0, pb, sizeof pb);
        sup_fmt_bytes(planned ? r.device_mem : 0, cb, sizeof cb);
        if (!planned)
            snprintf(why, nwhy, "tiled, %lld tokens per chunk (the unfused step has no memory plan to judge)",
                     (long long)alst);
        else if (fits && r.device_mem <= 0)
            snprintf(why, nwhy, "unfused: device memory unknown");
        else if (fits)
            snprintf(why, nwhy, "unfused: %s per rank fits %s", pb, cb);
        else if (r.fits && !host_ok)
            snprintf(why, nwhy, "tiled, %lld tokens per chunk: unfused does not fit the host's memory",
                     (long long)alst);
        else if (r.fits)
            snprintf(why, nwhy, "tiled, %lld tokens per chunk: unfused fits %s only with recompute %s", (long long)alst,
                     cb, chosen);
        else
            snprintf(why, nwhy, "tiled, %lld tokens per chunk: unfused needs %s per rank of %s", (long long)alst, pb,
                     cb);
    }
    if (fits && unfused)
        *unfused = m;
    else
        ir_module_free(m);
    fe_spec_free(s0);
    return fits ? 0 : alst;
}

int64_t pass_mlp_chunk_auto(const fe_spec *spec, const layout_choice *c, bool cuda, const char *pipeline, char *why,
                            size_t nwhy) {
    return mlp_auto(spec, c, cuda, pipeline, why, nwhy, NULL);
}

/* train.attention_chunks auto: the fewest head chunks (1, 2, 4, 8: those
 * dividing the heads and the kv heads, whose chunk the layout can split)
 * whose step, built with them, fits the device and the host; when none
 * fits, the most of them (the least memory).  More chunks cost more exchange calls, smaller messages and the
 * backward's second exchange of q, k, v and o, so the fewest that fit are
 * the fastest that fit.  `why` (may be NULL) says which and why. */
int64_t pass_chunks_auto(const fe_spec *spec, const layout_choice *c, bool cuda, const char *pipeline, char *why,
                         size_t nwhy) {
    if (spec->train.attention_chunks != FE_CHUNKS_AUTO) return spec->train.attention_chunks;
    int64_t Hk = spec->model.kv_heads > 0 ? spec->model.kv_heads : spec->model.heads, chosen = 1, legal = 1;
    bool fits = false;
    sup_buf b = {0};
    for (int64_t C = 1; C <= FE_MAX_ATTENTION_CHUNKS && !fits; C *= 2) {
        if (spec->model.heads % C || Hk % C) break;
        sup_diag_saved saved = sup_diag_silence();
        fe_spec *s = fe_spec_patched(spec, &(fe_spec_patch){.attention_chunks = C});
        layout_dims d = s ? fe_layout_dims(s) : (layout_dims){0};
        ir_module *m = s && (!c || !layout_illegal(&d, c, NULL, 0)) ? drv_build_choice(s, c, cuda, pipeline) : NULL;
        sup_diag_restore(saved);
        pass_mem_report r;
        bool planned = m && pass_memory_report(m, &r);
        ir_module_free(m);
        fe_spec_free(s);
        if (!planned) break; /* this many chunks cannot split (nor can more) */
        legal = C;
        fits = r.fits && r.host_fits;
        char pb[32];
        sup_buf_printf(&b, "%s%lld: %s", b.len ? ", " : "", (long long)C,
                       sup_fmt_bytes((double)r.peak_bytes, pb, sizeof pb));
        if (fits) chosen = C;
    }
    if (!fits) chosen = legal;
    if (why)
        snprintf(why, nwhy, "%lld head chunk(s): %s (peak per rank by chunks: %s)", (long long)chosen,
                 fits ? "the fewest whose step fits" : "none fits; the most that split", b.len ? b.data : "none built");
    sup_buf_free(&b);
    return chosen;
}

fe_spec *drv_chunks_settled(const fe_spec *spec, const layout_choice *c, bool cuda, const char *pipeline, char *why,
                            size_t nwhy, int64_t *chunks) {
    *chunks = pass_chunks_auto(spec, c, cuda, pipeline, why, nwhy);
    sup_diag_saved saved = sup_diag_silence();
    fe_spec *s = fe_spec_patched(spec, &(fe_spec_patch){.attention_chunks = *chunks});
    sup_diag_restore(saved);
    return s;
}

/* The lowered module for the target, run through `pipeline` (NULL: its
 * strategy's, which ends with memplan: the cost model then reads the
 * candidate's memory plan).  Auto head chunks, then an auto MLP, are
 * chosen first. */
ir_module *drv_build_choice(const fe_spec *s, const layout_choice *c, bool cuda, const char *pipeline) {
    fe_spec *mine = NULL, *chunked = NULL;
    if (s->train.attention_chunks == FE_CHUNKS_AUTO) {
        int64_t C;
        chunked = drv_chunks_settled(s, c, cuda, pipeline, NULL, 0, &C);
        if (!chunked) return NULL;
        s = chunked;
    }
    if (s->train.mlp_chunk == FE_MLP_AUTO) {
        int64_t chunk;
        mine = drv_mlp_settled(s, c, cuda, pipeline, NULL, 0, &chunk);
        if (!mine) {
            fe_spec_free(chunked);
            return NULL;
        }
        s = mine;
    }
    ir_module *m = c ? pass_lower_with(s, c) : pass_lower(s);
    fe_spec_free(mine);
    fe_spec_free(chunked);
    if (!m) return NULL;
    ir_config_set(m, "mem.target", cuda ? "cuda" : "cpu");
    /* A trial verifies the finished step once, not after every pass as the
     * compile does: a pass that breaks the IR still fails the trial, and
     * --max-seq-len, a search of trial builds, runs 1.3-1.4x faster at 1024
     * layers (bench/results/compile/). */
    pass_options o = pass_default_options();
    o.quiet = true;
    o.verify = false;
    char own[512];
    if (!pipeline && !pass_pipeline_of(m, own, sizeof own)) {
        ir_module_free(m);
        return NULL;
    }
    if (!pass_run_pipeline(m, pipeline ? pipeline : own, &o) || !ir_verify(m, "after a trial build's pipeline")) {
        ir_module_free(m);
        return NULL;
    }
    return m;
}

fe_spec *drv_mlp_settled(const fe_spec *spec, const layout_choice *c, bool cuda, const char *pipeline, char *why,
                         size_t nwhy, int64_t *chunk) {
    *chunk = pass_mlp_chunk_auto(spec, c, cuda, pipeline, why, nwhy);
    return drv_mlp_patched(spec, *chunk);
}

fe_spec *drv_mlp_patched(const fe_spec *spec, int64_t chunk) {
    const fe_spec_patch p = {.set_mlp_chunk = true, .mlp_chunk = chunk};
    sup_diag_saved saved = sup_diag_silence(); /* the spec's warnings were said once */
    fe_spec *s = fe_spec_patched(spec, &p);
    sup_diag_restore(saved);
    return s;
}

ir_module *drv_build(const fe_spec *spec, const fe_spec_patch *patch, bool cuda) {
    fe_spec *s = fe_spec_patched(spec, patch);
    ir_module *m = s ? drv_build_choice(s, NULL, cuda, NULL) : NULL;
    fe_spec_free(s);
    return m;
}

/* ---- resolving auto ----------------------------------------------------------- */
/* True when the memory-only passes (recompute, offload) left m's ops as
 * they were: recompute none (or auto's none) and offload none.  memplan
 * then only placed them, so m's ops are those the pipeline without the
 * memory passes builds, and the cost model, which reads ops and config but
 * no plan, times both the same. */
static bool memory_passes_idle(const ir_module *m) {
    const char *rc = ir_config_get(m, "recompute.chosen"), *off = ir_config_get(m, "offload");
    if (!rc) rc = ir_config_get(m, "recompute");
    return (!rc || !strcmp(rc, "none")) && (!off || !strcmp(off, "none"));
}

/* Choice c's step as the cost model times it, built without recompute and
 * memplan (they change memory, not which layout is faster).  An auto MLP is
 * settled first as the compile settles it (mlp_auto with the full pipeline
 * and the spec's memory target, into *mlp), so that the step timed is the
 * one the compile builds and the compile can take the decision.  The
 * unfused step that decision built is timed as it is when the memory passes
 * left its ops alone and it was planned for the cpu target, as the timed
 * build is (the same ops, the same times: one build fewer). */
static double predict_step(const fe_spec *spec, const layout_choice *c, bool cuda, drv_mlp_choice *mlp) {
    char pipe[512];
    pass_pipeline(layout_strategy_of(c), false, pipe, sizeof pipe);
    fe_spec *settled = NULL;
    ir_module *m = NULL;
    mlp->known = false;
    if (spec->train.mlp_chunk == FE_MLP_AUTO && spec->train.attention_chunks != FE_CHUNKS_AUTO) {
        mlp->chunk = mlp_auto(spec, c, cuda, NULL, mlp->why, sizeof mlp->why, cuda ? NULL : &m);
        settled = drv_mlp_patched(spec, mlp->chunk);
        if (!settled) {
            ir_module_free(m);
            return INFINITY;
        }
        mlp->known = true;
        if (m && !memory_passes_idle(m)) {
            ir_module_free(m);
            m = NULL;
        }
    }
    if (!m) m = drv_build_choice(settled ? settled : spec, c, false, pipe);
    double t = INFINITY;
    if (m) {
        pass_cost_params p = pass_cost_default_params(m);
        t = pass_cost_estimate_time(m, &p).step_s;
    }
    ir_module_free(m);
    fe_spec_free(settled);
    return t;
}

/* The allowed, legal, buildable choices of the spec (malloc'd). */
static int allowed_choices(const fe_spec *spec, layout_choice **out) {
    layout_dims d = fe_layout_dims(spec);
    int cap = 4096, n = 0;
    layout_choice *all = malloc(sizeof *all * (size_t)cap);
    int total = layout_candidates(&d, all, cap);
    for (int i = 0; i < total && i < cap; i++)
        if (fe_layout_allows(spec, &all[i]) && pass_layout_available(&all[i])) all[n++] = all[i];
    *out = all;
    return n;
}

/* How much of a layout the cost model takes on trust: 0 Ulysses, with its
 * all-to-all variants (two-level, a plugin's): an exchange around cuDNN's
 * attention on CUDA, the layouts the model is best measured on; 1 Ulysses
 * x Ring; 2 ring (basp's per-block kernels, and hops whose overlap with
 * the blocks depends on the backend). */
static int simplicity(const layout_choice *c) {
    switch (c->seq) {
    case LAYOUT_RING: return 2;
    case LAYOUT_HYBRID: return 1;
    default: return 0;
    }
}

/* The choice among n with predicted times t (INFINITY: unusable): of those
 * within the model's error `err` of the fastest, which it cannot tell
 * apart, the simplest (simplicity); of those the fastest, the larger G
 * within 1%.  -1 when none is usable. */
int drv_prefer(const layout_choice *c, const double *t, int n, double err) {
    double best = INFINITY;
    for (int i = 0; i < n; i++) best = fmin(best, t[i]);
    if (!isfinite(best)) return -1;
    int rank = 3;
    for (int i = 0; i < n; i++)
        if (t[i] <= best * (1 + err) && simplicity(&c[i]) < rank) rank = simplicity(&c[i]);
    double fast = INFINITY;
    for (int i = 0; i < n; i++)
        if (t[i] <= best * (1 + err) && simplicity(&c[i]) == rank) fast = fmin(fast, t[i]);
    int pick = -1;
    for (int i = 0; i < n; i++)
        if (simplicity(&c[i]) == rank && t[i] <= fast * 1.01 &&
            (pick < 0 || c[i].groups > c[pick].groups || (c[i].groups == c[pick].groups && t[i] < t[pick])))
            pick = i;
    return pick;
}

/* The model's measured error for the spec's device (layout/presets.c). */
double drv_model_error(const fe_spec *spec) {
    const layout_device_preset *dev = layout_device_lookup(spec->mesh.device[0] ? spec->mesh.device : "cpu");
    return dev ? dev->model_error : 0;
}

/* drv_prefer(), and why in `why`. */
static int fastest(const fe_spec *spec, const layout_choice *c, const double *t, int n, char *why, size_t nwhy) {
    int pick = drv_prefer(c, t, n, drv_model_error(spec));
    if (pick < 0 || !why) return pick;
    char name[64];
    layout_choice_name(&c[pick], name, sizeof name);
    int len = snprintf(why, nwhy, "cost model: %s predicted %.1f ms/step", name, t[pick] * 1e3);
    const char *sep = " vs ";
    for (int i = 0; i < n && len > 0 && (size_t)len < nwhy; i++) {
        if (i == pick || !isfinite(t[i])) continue;
        layout_choice_name(&c[i], name, sizeof name);
        len += snprintf(why + len, nwhy - (size_t)len, "%s%s %.1f", sep, name, t[i] * 1e3);
        sep = ", ";
    }
    return pick;
}

bool pass_layout_resolve(const fe_spec *spec, bool cuda, layout_choice *out, char *why, size_t nwhy,
                         drv_mlp_choice *mlp) {
    layout_choice *c;
    int n = allowed_choices(spec, &c), pick = -1;
    char buf[512];
    drv_mlp_choice *settled = sup_xcalloc((size_t)n + 1, sizeof *settled);
    bool links = spec->mesh.intra.bandwidth > 0 && (spec->mesh.nodes <= 1 || spec->mesh.inter.bandwidth > 0);
    if (n == 1) {
        pick = 0;
        snprintf(buf, sizeof buf, "the only legal layout the spec allows");
    } else if (n > 1 && !links) {
        pick = n - 1;
        while (pick > 0 && c[pick - 1].groups == c[pick].groups) pick--;
        snprintf(buf, sizeof buf, "largest legal G; no link bandwidths for the cost model");
    } else if (n > 1) {
        double *t = malloc(sizeof *t * (size_t)n);
        sup_diag_saved saved = sup_diag_silence();
        for (int i = 0; i < n; i++) t[i] = predict_step(spec, &c[i], cuda, &settled[i]);
        sup_diag_restore(saved);
        pick = fastest(spec, c, t, n, buf, sizeof buf);
        if (pick >= 0 && !isfinite(t[pick])) pick = -1;
        free(t);
    }
    if (pick >= 0) {
        *out = c[pick];
        if (why) snprintf(why, nwhy, "%s", buf);
        if (mlp) *mlp = settled[pick];
    }
    free(settled);
    free(c);
    return pick >= 0;
}

/* Lowering with a layout still to choose is the planner's business: lower.c
 * only builds a given layout (pass_lower_with), so that lowering never
 * calls back into the planner that lowers every candidate. */
ir_module *pass_lower(const fe_spec *spec) {
    if (!spec) return NULL;
    layout_choice c;
    if (!fe_layout_concrete(spec, &c) && !pass_layout_resolve(spec, false, &c, NULL, 0, NULL)) return NULL;
    return pass_lower_with(spec, &c);
}
