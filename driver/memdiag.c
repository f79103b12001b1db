/* memdiag.c — the compiler's fit diagnostic: a memory report (passes/,
 * pass_memory_report) said against the spec it was built from, at the
 * spec's own lines, with what to change there.  Here rather than next to
 * the report because it reads the spec: passes/ only sees IR. */
#include "driver.h"

#include <string.h>

static const char *fmt_b(int64_t b, char *buf, size_t n) { return sup_fmt_bytes((double)b, buf, n); }

/* ---- the fit diagnostics ----------------------------------------------------- */
/* The host arena of the node's ranks against mesh host_memory, at
 * train.offload: what it needs, what one rank may have, and what would
 * shrink it. */
static void diagnose_host(const pass_mem_report *r, const fe_spec *spec, sup_severity sev) {
    sup_loc loc = spec ? fe_spec_loc(spec, "train.offload") : sup_noloc();
    char a[32], b[32], c[32], d[32];
    sup_diag(sev, loc,
             "offload: %s per rank of host memory, %s for the %d rank(s) of a node, exceeds the node's "
             "host memory of %s",
             fmt_b(r->host_bytes, a, sizeof a), fmt_b(r->host_bytes * r->ranks_per_node, b, sizeof b),
             r->ranks_per_node, sup_fmt_bytes(r->host_mem, c, sizeof c));
    sup_note(loc, "a rank may offload at most %s (host_memory / %d ranks)",
             sup_fmt_bytes(r->host_mem / r->ranks_per_node, d, sizeof d), r->ranks_per_node);
    if (spec && strcmp(spec->train.recompute, "full") != 0)
        sup_note(loc,
                 "with 'recompute full' only each layer's input moves (now recompute %s); or raise "
                 "'host_memory', add ranks or shorten seq_len (now %lld)",
                 spec->train.recompute, (long long)spec->train.seq_len);
    else
        sup_note(loc, "raise 'host_memory' in the mesh, add ranks or shorten seq_len%s",
                 spec ? "" : " (the module's config host_mem)");
}

void pass_memory_diagnose(const pass_mem_report *r, const fe_spec *spec, sup_severity sev) {
    if (!r->host_fits) diagnose_host(r, spec, sev);
    if (r->fits) return;
    sup_loc loc = spec ? fe_spec_loc(spec, "train.micro_batch") : sup_noloc();
    if (spec && !loc.file) loc = fe_spec_loc(spec, "train");
    char a[32], b[32], dev[FE_NAME_MAX + 8] = "the device";
    if (spec && spec->mesh.device[0]) snprintf(dev, sizeof dev, "'%s'", spec->mesh.device);
    sup_diag(sev, loc, "%s: %s per rank (%s target) exceeds the %s of %s",
             r->no_reuse ? "without the memory plan" : "memory plan", fmt_b(r->peak_bytes, a, sizeof a),
             r->cuda ? "cuda" : "cpu", sup_fmt_bytes(r->device_mem, b, sizeof b), dev);
    sup_buf nb = {0};
    for (int k = 0; k < IR_MEM_NCATS; k++)
        sup_buf_printf(&nb, "%s%s %s", k ? ", " : "", ir_mem_cat_name((ir_mem_cat)k), fmt_b(r->live[k], a, sizeof a));
    if (r->no_reuse)
        sup_note(loc,
                 "without the memory plan (--no-memory-plan) every buffer has its own slot: %s; the plan "
                 "needs an arena of %s",
                 nb.data, fmt_b(r->planned_arena_bytes, a, sizeof a));
    else if (r->peak_op >= 0)
        sup_note(loc, "the peak is at op %d '%s' (%%%s, layer %d, %s): %s", r->peak_op, r->peak_opcode, r->peak_value,
                 r->peak_layer, r->peak_phase[0] ? r->peak_phase : "-", nb.data);
    else
        sup_note(loc, "at the peak: %s", nb.data);
    sup_buf_free(&nb);
    sup_buf tb = {0};
    for (int i = 0; i < r->ntop; i++)
        sup_buf_printf(&tb, "%s%%%s (%s, %s)", i ? ", " : "", r->top[i].name, ir_mem_cat_name(r->top[i].cat),
                       fmt_b(r->top[i].bytes, a, sizeof a));
    if (r->ntop > 0) sup_note(loc, "largest buffers%s: %s", r->no_reuse ? "" : " there", tb.data);
    sup_buf_free(&tb);
    if (r->nsuggest > 0) {
        sup_buf fit = {0}, other = {0};
        for (int i = 0; i < r->nsuggest; i++) {
            const pass_mem_suggestion *s = &r->suggest[i];
            if (s->peak_bytes < 0) continue;
            sup_buf *w = s->fits ? &fit : &other;
            sup_buf_printf(w, "%s%s (%s per rank)", w->len ? ", " : "", s->change, fmt_b(s->peak_bytes, a, sizeof a));
        }
        if (fit.len)
            sup_note(loc, "it fits with %s", fit.data);
        else
            sup_note(loc, "no single change fits: %s", other.len ? other.data : "none of the changes tried builds");
        sup_buf_free(&fit);
        sup_buf_free(&other);
    } else if (spec) {
        sup_buf fix = {0};
        if (spec->train.zero < 3) sup_buf_printf(&fix, "raise 'zero' (now %d) to 3, ", spec->train.zero);
        if (strcmp(spec->train.recompute, "full") != 0)
            sup_buf_printf(&fix, "set 'recompute' (now %s) to full, ", spec->train.recompute);
        sup_note(loc, "%sadd ranks (now %lld) or shorten seq_len (now %lld); 'baspc --memory' shows what fits",
                 fix.len ? fix.data : "", (long long)fe_world(spec), (long long)spec->train.seq_len);
        sup_buf_free(&fix);
    }
    if (spec && !r->cuda && !strcmp(spec->train.precision, "bf16"))
        sup_note(loc, "the cpu target keeps every element in 4 bytes; --target=cuda plans bf16 buffers");
}
