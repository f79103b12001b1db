/* memreport.c — `baspc --memory`: one rank's memory at the peak of the
 * module's memory plan, where it goes, and whether it fits the device.
 *
 * Nothing here estimates: sizes, live ranges and the whole-step regions
 * (optimizer state, collective staging) are ir/ir_mem.c's, the offsets and
 * the arena size are pass_memplan's.  The cost model (pass_cost_estimate),
 * the planner's mem column and the compiler's fit warning read this report,
 * so every memory number the compiler prints is the plan's.
 *
 *   peak_bytes_per_rank = arena (mem.peak) + kernel workspace outside it
 *   arena              >= bytes live at the peak op (the difference is the
 *                         packing's fragmentation, reported as `unused`)
 *
 * See passes/README.md, "memory report". */
#include "pass_util.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int64_t cfg_i64(const ir_module *m, const char *key, int64_t def) { return ir_config_int(m, key, def); }

static double cfg_double(const ir_module *m, const char *key) {
    const char *s = ir_config_get(m, key);
    if (!s) return 0;
    char *end;
    double v = strtod(s, &end);
    return end != s && *end == '\0' && v > 0 ? v : 0;
}

/* The op with the most bytes live (the first of equals, as memplan picks
 * it); -1 when there are no ops. */
static int find_peak_op(const ir_module *m, const int64_t *bytes, const int *start, const int *end) {
    int best = -1;
    int64_t best_sum = -1;
    int64_t *delta = sup_xcalloc((size_t)m->nops + 3, sizeof *delta);
    for (int v = 0; v < m->nvalues; v++) {
        if (start[v] == -2) continue;
        delta[start[v] + 1] += bytes[v];
        delta[end[v] + 2] -= bytes[v];
    }
    int64_t live = 0;
    for (int i = -1; i < m->nops; i++) {
        live += delta[i + 1];
        if (i >= 0 && live > best_sum) best_sum = live, best = i;
    }
    free(delta);
    return best;
}

typedef struct live_value {
    int v;
    int64_t bytes;
} live_value;

/* Largest first; equal sizes in value order, so the list is deterministic. */
static int top_cmp(const void *a, const void *b) {
    const live_value *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return (x->v > y->v) - (x->v < y->v);
}

/* The workspace by slot: the nonzero rows, each with the op that raised it
 * to its size, largest first (equal sizes in row order); and the whole
 * workspace, ir_mem_work_bytes, from the same slots. */
static void report_work(const ir_module *m, ir_mem_target t, pass_mem_report *r) {
    ir_mem_work_slot slot[IR_MEM_WORK_MAX];
    int n = ir_mem_work_slots(m, t, slot);
    r->nwork = 0;
    r->work_region = ir_mem_work_region(slot, n);
    r->work_shared_sum = 0;
    r->work_bytes = r->work_region; /* ir_mem_work_bytes, from these slots */
    for (int k = 0; k < n; k++) {
        if (slot[k].bytes <= 0) continue;
        if (slot[k].off >= 0)
            r->work_shared_sum += slot[k].bytes;
        else
            r->work_bytes += slot[k].bytes;
        pass_mem_work w = {.slot = slot[k].name,
                           .what = slot[k].what,
                           .bytes = slot[k].bytes,
                           .sum = slot[k].sum,
                           .nops = slot[k].nops,
                           .op = slot[k].op,
                           .off = slot[k].off};
        if (w.op >= 0) {
            const ir_op *op = &m->ops[w.op];
            snprintf(w.opcode, sizeof w.opcode, "%s", ir_op_desc_of(op->code)->name);
            snprintf(w.value, sizeof w.value, "%s", op->nout > 0 ? m->values[op->out[0]].name : "");
        }
        int i = r->nwork++;
        for (; i > 0 && r->work[i - 1].bytes < w.bytes; i--) r->work[i] = r->work[i - 1];
        r->work[i] = w;
    }
}

/* The report of a planned module. */
static void report_planned(const ir_module *m, pass_mem_report *r) {
    ir_mem_target t;
    ir_mem_target_of(m, &t);
    r->cuda = t.cuda;
    r->world = ir_world(m);
    snprintf(r->module, sizeof r->module, "%s", m->name);
    r->arena_bytes = cfg_i64(m, "mem.peak", 0);
    report_work(m, t, r); /* and r->work_bytes, from the same slots */
    r->peak_bytes = r->arena_bytes + r->work_bytes;

    int64_t comm[2];
    ir_mem_comm_bytes(m, t, comm);
    int64_t opt = cfg_i64(m, "mem.opt_bytes", ir_mem_opt_bytes(m, t));
    int64_t stage = cfg_i64(m, "mem.comm_bytes0", comm[0]) + cfg_i64(m, "mem.comm_bytes1", comm[1]);

    int *start = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    int *end = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    int64_t *bytes = sup_xcalloc((size_t)m->nvalues + 1, sizeof *bytes);
    ir_mem_live(m, start, end);
    r->no_reuse_bytes = opt + stage;
    for (int v = 0; v < m->nvalues; v++) {
        /* The device's report: offloaded values are the host arena's
         * (host_bytes below), not bytes of the device at any op. */
        if (start[v] == -2 || ir_mem_on_host(m, v)) continue;
        bytes[v] = ir_mem_value_bytes(m, v, t);
        r->no_reuse_bytes += bytes[v];
    }

    int p = (int)cfg_i64(m, "mem.peak_op", -2);
    if (p < -1 || p >= m->nops || (p == -1 && m->nops > 0)) p = find_peak_op(m, bytes, start, end);
    r->peak_op = p;
    r->peak_layer = -1;
    if (p >= 0) {
        const ir_op *op = &m->ops[p];
        int v = op->nout > 0 ? op->out[0] : op->nin > 0 ? op->in[0] : -1;
        snprintf(r->peak_opcode, sizeof r->peak_opcode, "%s", ir_op_desc_of(op->code)->name);
        snprintf(r->peak_value, sizeof r->peak_value, "%s", v >= 0 ? m->values[v].name : "");
        snprintf(r->peak_phase, sizeof r->peak_phase, "%s", ir_op_phase(op));
        r->peak_layer = ir_op_layer(op);
    }

    /* What is live at the peak op (before the first op when there are none). */
    int at = p >= 0 ? p : -1;
    live_value *live = sup_xmalloc(sizeof *live * (size_t)(m->nvalues + 1));
    ir_mem_cat *cat = ir_mem_value_cats(m);
    int nlive = 0;
    /* Offloaded optimizer state lives in the host arena (host_opt below). */
    r->live[IR_MEM_OPTIM] = ir_mem_opt_on_host(m) ? 0 : opt;
    r->live[IR_MEM_COMM] = stage;
    for (int v = 0; v < m->nvalues; v++) {
        if (start[v] == -2 || start[v] > at || at > end[v] || bytes[v] <= 0) continue;
        r->live[cat[v]] += bytes[v];
        live[nlive++] = (live_value){v, bytes[v]};
    }
    r->live[IR_MEM_WORK] = r->work_bytes;
    for (int c = 0; c < IR_MEM_NCATS; c++)
        if (c != IR_MEM_WORK) r->live_bytes += r->live[c];
    r->unused_bytes = r->arena_bytes - r->live_bytes;
    qsort(live, (size_t)nlive, sizeof *live, top_cmp);
    r->ntop = nlive < PASS_MEM_TOP ? nlive : PASS_MEM_TOP;
    for (int i = 0; i < r->ntop; i++) {
        snprintf(r->top[i].name, sizeof r->top[i].name, "%s", m->values[live[i].v].name);
        r->top[i].cat = cat[live[i].v];
        r->top[i].bytes = live[i].bytes;
    }

    r->device_mem = cfg_double(m, "device_mem");
    r->fits = r->device_mem <= 0 || (double)r->peak_bytes <= r->device_mem;
    r->host_bytes = cfg_i64(m, "mem.host_peak", 0);
    r->host_opt = ir_mem_opt_on_host(m) ? opt : 0;
    r->host_stage = cfg_i64(m, "mem.host_stage_bytes", 0);
    r->host_params = 0;
    bool params_on_host = ir_mem_params_on_host(m); /* a config lookup: once, not per value */
    for (int v = 0; v < m->nvalues && params_on_host; v++)
        if (m->values[v].kind == IR_V_PARAM) r->host_params += ir_mem_value_bytes(m, v, t);
    r->ranks_per_node = m->mesh.devices_per_node > 0 ? m->mesh.devices_per_node : 1;
    r->host_mem = cfg_double(m, "host_mem");
    r->host_fits = r->host_mem <= 0 || (double)r->host_bytes * r->ranks_per_node <= r->host_mem;
    free(live);
    free(cat);
    free(bytes);
    free(start);
    free(end);
}

/* Without the memory plan (--no-memory-plan) the runtime gives every value
 * its own slot of one arena, the optimizer state after them, and stages the
 * collectives in buffers of its own (runtime/cpu/rt_buf_cpu.c,
 * rt_layout_slots; the CUDA backend stages in its workspaces, and its
 * staging here is 0): nothing is ever freed, so every buffer counts, and
 * the peak is the whole allocation.  The compilation context (sup_ctx) says which. */

/* Turns the planned report of m into the one of its unplanned program. */
static void report_slots(const ir_module *m, pass_mem_report *r) {
    ir_mem_target t;
    ir_mem_target_of(m, &t);
    r->no_reuse = true;
    r->peak_op = -1; /* every buffer is live the whole run: no op is the peak */
    r->peak_layer = -1;
    r->planned_arena_bytes = r->arena_bytes;
    r->stage_bytes = r->live[IR_MEM_COMM];
    int64_t opt = r->live[IR_MEM_OPTIM];
    memset(r->live, 0, sizeof r->live);
    r->live[IR_MEM_OPTIM] = opt;
    r->live[IR_MEM_COMM] = r->stage_bytes;
    r->live[IR_MEM_WORK] = r->work_bytes;
    live_value *all = sup_xmalloc(sizeof *all * (size_t)(m->nvalues + 1));
    ir_mem_cat *cat = ir_mem_value_cats(m);
    int n = 0;
    for (int v = 0; v < m->nvalues; v++) {
        int64_t b = ir_mem_value_bytes(m, v, t);
        if (b <= 0) continue;
        r->live[cat[v]] += b;
        all[n++] = (live_value){v, b};
    }
    r->live_bytes = r->no_reuse_bytes;
    r->unused_bytes = 0;
    r->arena_bytes = r->no_reuse_bytes - r->stage_bytes;
    r->peak_bytes = r->no_reuse_bytes + r->work_bytes;
    qsort(all, (size_t)n, sizeof *all, top_cmp);
    r->ntop = n < PASS_MEM_TOP ? n : PASS_MEM_TOP;
    for (int i = 0; i < r->ntop; i++) {
        snprintf(r->top[i].name, sizeof r->top[i].name, "%s", m->values[all[i].v].name);
        r->top[i].cat = cat[all[i].v];
        r->top[i].bytes = all[i].bytes;
    }
    r->fits = r->device_mem <= 0 || (double)r->peak_bytes <= r->device_mem;
    free(all);
    free(cat);
}

/* batch_aware dynamic: each variant's arena top (pass_mem_report). */
static void report_variants(const ir_module *m, pass_mem_report *r) {
    ir_mem_target t;
    if (!ir_mem_target_of(m, &t)) return;
    int64_t base = 0;
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = &m->values[v];
        if (val->kind != IR_V_RESULT && val->mem_off >= 0 && !ir_mem_on_host(m, v))
            base =
                base > val->mem_off + ir_mem_value_bytes(m, v, t) ? base : val->mem_off + ir_mem_value_bytes(m, v, t);
    }
    for (int i = 0; i < m->nops; i++) {
        int K = (int)ir_attr_int(&m->ops[i], "variant", 0), k = 0;
        if (K <= 0) continue;
        while (k < r->nvariants && r->variant_size[k] != K) k++;
        if (k == r->nvariants) {
            if (k == 16) continue;
            r->variant_size[r->nvariants] = K, r->variant_top[r->nvariants++] = base;
        }
        const ir_op *op = &m->ops[i];
        for (int o = 0; o < op->nout; o++) {
            int v = op->out[o];
            if (v < 0 || m->values[v].mem_off < 0 || ir_mem_on_host(m, v)) continue;
            int64_t top = m->values[v].mem_off + ir_mem_value_bytes(m, v, t);
            if (top > r->variant_top[k]) r->variant_top[k] = top;
        }
    }
}

static void report_of(const ir_module *m, pass_mem_report *r) {
    report_planned(m, r);
    if (!sup_ctx()->memory_plan)
        report_slots(m, r);
    else
        report_variants(m, r);
}

bool pass_memory_report(const ir_module *m, pass_mem_report *r) {
    memset(r, 0, sizeof *r);
    r->peak_op = -1;
    r->peak_layer = -1;
    if (ir_mem_planned(m)) {
        report_of(m, r);
        return true;
    }
    ir_module *c = ir_module_clone(m);
    pass_options o = pass_default_options();
    o.quiet = true;
    bool ok = pass_memplan(c, &o);
    if (ok) report_of(c, r);
    ir_module_free(c);
    return ok;
}

/* ---- printing -------------------------------------------------------------- */
static const char *fmt_b(int64_t b, char *buf, size_t n) { return sup_fmt_bytes((double)b, buf, n); }

static void print_row(FILE *out, const char *name, int64_t b, int64_t total) {
    char f[32];
    fprintf(out, "  %-14s %16" PRId64 " %11s %6.1f%%\n", name, b, fmt_b(b, f, sizeof f),
            total > 0 ? 100.0 * (double)b / (double)total : 0.0);
}

/* The lines after the table: where the peak is and how the arena is laid out. */
static void print_arena(const pass_mem_report *r, FILE *out) {
    char a[32], b[32], c[32], d[32];
    if (r->no_reuse) {
        fprintf(out, "no memory plan (--no-memory-plan): every buffer has its own slot for the whole run\n");
        fprintf(out,
                "arena: %s, one slot per value (the memory plan's: %s); staging outside the arena: %s; "
                "workspace outside the arena: %s\n",
                fmt_b(r->arena_bytes, a, sizeof a), fmt_b(r->planned_arena_bytes, b, sizeof b),
                fmt_b(r->stage_bytes, c, sizeof c), fmt_b(r->work_bytes, d, sizeof d));
        return;
    }
    if (r->peak_op >= 0)
        fprintf(out, "peak op: %d %s (%%%s), layer %d, %s\n", r->peak_op, r->peak_opcode, r->peak_value, r->peak_layer,
                r->peak_phase[0] ? r->peak_phase : "-");
    else
        fprintf(out, "peak op: none (the module has no ops)\n");
    fprintf(out, "arena: %s (one buffer per value, no reuse: %s); workspace outside the arena: %s\n",
            fmt_b(r->arena_bytes, a, sizeof a), fmt_b(r->no_reuse_bytes, b, sizeof b),
            fmt_b(r->work_bytes, c, sizeof c));
    if (r->nvariants > 0) { /* the arena is the largest variant's; each is laid over the same bytes */
        fprintf(out, "variants (batch_aware dynamic), the arena each micro-step reaches:");
        for (int k = 0; k < r->nvariants; k++)
            fprintf(out, "%s groups of %d: %s", k ? "," : "", r->variant_size[k],
                    fmt_b(r->variant_top[k], a, sizeof a));
        fprintf(out, "\n");
    }
}

/* Which op made a workspace slot its size: "op 812 attention_bwd (%dq)",
 * or for a SUMS row "sum over 32 attention forwards". */
static const char *work_source(const pass_mem_work *w, char *buf, size_t n) {
    if (w->sum)
        snprintf(buf, n, "sum over %d %s forward%s", w->nops, w->opcode, w->nops == 1 ? "" : "s");
    else
        snprintf(buf, n, "op %d %s (%%%s)", w->op, w->opcode, w->value);
    return buf;
}

/* The workspace outside the arena by slot, after the arena line. */
static void print_work(const pass_mem_report *r, FILE *out) {
    if (r->nwork == 0) return;
    fprintf(out, "workspace outside the arena, by slot:\n");
    if (r->work_region > 0) {
        char a[32], b[32];
        fprintf(out,
                "  (the slots with an offset share one region of %s, where slots never in use at once overlap; "
                "their sum is %s)\n",
                fmt_b(r->work_region, a, sizeof a), fmt_b(r->work_shared_sum, b, sizeof b));
    }
    for (int i = 0; i < r->nwork; i++) {
        const pass_mem_work *w = &r->work[i];
        char f[32], src[IR_NAME_MAX + 80], at[48] = "";
        if (w->off >= 0) snprintf(at, sizeof at, "; at offset %" PRId64, w->off);
        fprintf(out, "  %-14s %16" PRId64 " %11s %6.1f%%  %s; %s%s\n", w->slot, w->bytes, fmt_b(w->bytes, f, sizeof f),
                r->peak_bytes > 0 ? 100.0 * (double)w->bytes / (double)r->peak_bytes : 0.0, w->what,
                work_source(w, src, sizeof src), at);
    }
}

void pass_memory_print(const pass_mem_report *r, FILE *out) {
    char a[32], b[32];
    fprintf(out, "memory: %s on %d rank(s), %s target%s: %s per rank", r->module, r->world, r->cuda ? "cuda" : "cpu",
            r->no_reuse ? ", no memory plan" : "", fmt_b(r->peak_bytes, a, sizeof a));
    if (r->device_mem > 0)
        fprintf(out, " of %s: %s\n", sup_fmt_bytes(r->device_mem, b, sizeof b), r->fits ? "fits" : "does not fit");
    else
        fprintf(out, ": fits (device memory unknown)\n");
    if (r->host_bytes > 0) {
        char parts[200], c[32], d[32], e[32];
        int64_t acts = r->host_bytes - r->host_opt - r->host_stage - r->host_params;
        snprintf(parts, sizeof parts, "%s%s%s%s%s%s%s%s", acts > 0 ? "offloaded values " : "",
                 acts > 0 ? fmt_b(acts, c, sizeof c) : "",
                 r->host_params > 0 ? (acts > 0 ? ", parameters " : "parameters ") : "",
                 r->host_params > 0 ? fmt_b(r->host_params, e, sizeof e) : "",
                 r->host_opt > 0 ? (acts > 0 || r->host_params > 0 ? ", optimizer state " : "optimizer state ") : "",
                 r->host_opt > 0 ? fmt_b(r->host_opt, d, sizeof d) : "", r->host_stage > 0 ? ", staging " : "",
                 r->host_stage > 0 ? fmt_b(r->host_stage, b, sizeof b) : "");
        fprintf(out, "host memory: %s per rank (%s), ", fmt_b(r->host_bytes, a, sizeof a), parts);
        fprintf(out, "%s per node (%d rank(s))", fmt_b(r->host_bytes * r->ranks_per_node, b, sizeof b),
                r->ranks_per_node);
        if (r->host_mem > 0)
            fprintf(out, " of %s: %s\n", sup_fmt_bytes(r->host_mem, a, sizeof a),
                    r->host_fits ? "fits" : "does not fit");
        else
            fprintf(out, ": fits (host memory unknown)\n");
    }
    fprintf(out, "\n  %-14s %16s %11s %7s\n", r->no_reuse ? "allocated" : "at the peak op", "bytes", "size", "share");
    for (int k = 0; k < IR_MEM_NCATS; k++) print_row(out, ir_mem_cat_name((ir_mem_cat)k), r->live[k], r->peak_bytes);
    print_row(out, "unused", r->unused_bytes, r->peak_bytes);
    print_row(out, "peak", r->peak_bytes, r->peak_bytes);
    fputc('\n', out);
    print_arena(r, out);
    print_work(r, out);
    if (r->ntop > 0) {
        fprintf(out, "\nlargest buffers%s:\n", r->no_reuse ? "" : " at the peak op");
        for (int i = 0; i < r->ntop; i++)
            fprintf(out, "  %%%-30s %-12s %11s\n", r->top[i].name, ir_mem_cat_name(r->top[i].cat),
                    fmt_b(r->top[i].bytes, a, sizeof a));
    }
    if (r->nsuggest > 0) {
        fprintf(out, "\none change at a time:\n");
        for (int i = 0; i < r->nsuggest; i++) {
            const pass_mem_suggestion *s = &r->suggest[i];
            if (s->peak_bytes < 0)
                fprintf(out, "  %-32s the compiler rejects this layout\n", s->change);
            else
                fprintf(out, "  %-32s %11s per rank: %s\n", s->change, fmt_b(s->peak_bytes, a, sizeof a),
                        s->fits ? "fits" : "does not fit");
        }
    }
}

void pass_memory_json(const pass_mem_report *r, FILE *out) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "module", r->module);
    cJSON_AddStringToObject(o, "target", r->cuda ? "cuda" : "cpu");
    cJSON_AddNumberToObject(o, "world", r->world);
    cJSON_AddNumberToObject(o, "peak_bytes_per_rank", (double)r->peak_bytes);
    cJSON_AddNumberToObject(o, "arena_bytes", (double)r->arena_bytes);
    if (r->nvariants > 0) {
        cJSON *vs = cJSON_AddArrayToObject(o, "variants");
        for (int k = 0; k < r->nvariants; k++) {
            cJSON *v = cJSON_CreateObject();
            cJSON_AddNumberToObject(v, "size", r->variant_size[k]);
            cJSON_AddNumberToObject(v, "arena_top_bytes", (double)r->variant_top[k]);
            cJSON_AddItemToArray(vs, v);
        }
    }
    cJSON *p = cJSON_AddObjectToObject(o, "peak_op");
    if (r->peak_op >= 0) {
        cJSON_AddNumberToObject(p, "index", r->peak_op);
        cJSON_AddStringToObject(p, "op", r->peak_opcode);
        cJSON_AddStringToObject(p, "value", r->peak_value);
        cJSON_AddNumberToObject(p, "layer", r->peak_layer);
        cJSON_AddStringToObject(p, "phase", r->peak_phase);
    }
    cJSON *b = cJSON_AddObjectToObject(o, "breakdown");
    for (int k = 0; k < IR_MEM_NCATS; k++)
        cJSON_AddNumberToObject(b, ir_mem_cat_name((ir_mem_cat)k), (double)r->live[k]);
    cJSON_AddNumberToObject(o, "unused_bytes", (double)r->unused_bytes);
    cJSON_AddNumberToObject(o, "no_reuse_bytes", (double)r->no_reuse_bytes);
    cJSON_AddNumberToObject(o, "device_mem", r->device_mem);
    cJSON_AddBoolToObject(o, "fits", r->fits);
    cJSON *top = cJSON_AddArrayToObject(o, "top");
    for (int i = 0; i < r->ntop; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "name", r->top[i].name);
        cJSON_AddStringToObject(t, "category", ir_mem_cat_name(r->top[i].cat));
        cJSON_AddNumberToObject(t, "bytes", (double)r->top[i].bytes);
        cJSON_AddItemToArray(top, t);
    }
    if (r->work_region > 0) {
        cJSON_AddNumberToObject(o, "workspace_region_bytes", (double)r->work_region);
        cJSON_AddNumberToObject(o, "workspace_shared_sum_bytes", (double)r->work_shared_sum);
    }
    cJSON *work = cJSON_AddArrayToObject(o, "workspace");
    for (int i = 0; i < r->nwork; i++) {
        const pass_mem_work *w = &r->work[i];
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "slot", w->slot);
        cJSON_AddNumberToObject(t, "bytes", (double)w->bytes);
        if (w->off >= 0) cJSON_AddNumberToObject(t, "offset", (double)w->off);
        cJSON_AddStringToObject(t, "what", w->what);
        cJSON *op = cJSON_AddObjectToObject(t, "op");
        if (w->sum) {
            cJSON_AddNumberToObject(op, "sum_over", w->nops);
            cJSON_AddStringToObject(op, "op", w->opcode);
        } else if (w->op >= 0) {
            cJSON_AddNumberToObject(op, "index", w->op);
            cJSON_AddStringToObject(op, "op", w->opcode);
            cJSON_AddStringToObject(op, "value", w->value);
        }
        cJSON_AddItemToArray(work, t);
    }
    if (r->nsuggest > 0) {
        cJSON *sg = cJSON_AddArrayToObject(o, "suggestions");
        for (int i = 0; i < r->nsuggest; i++) {
            cJSON *t = cJSON_CreateObject();
            cJSON_AddStringToObject(t, "change", r->suggest[i].change);
            if (r->suggest[i].peak_bytes >= 0)
                cJSON_AddNumberToObject(t, "peak_bytes_per_rank", (double)r->suggest[i].peak_bytes);
            else
                cJSON_AddNullToObject(t, "peak_bytes_per_rank");
            cJSON_AddBoolToObject(t, "fits", r->suggest[i].fits);
            cJSON_AddItemToArray(sg, t);
        }
    }
    if (r->host_bytes > 0) {
        cJSON_AddNumberToObject(o, "host_bytes_per_rank", (double)r->host_bytes);
        cJSON_AddNumberToObject(o, "host_bytes_per_node", (double)r->host_bytes * r->ranks_per_node);
        cJSON_AddNumberToObject(o, "host_optimizer_bytes", (double)r->host_opt);
        cJSON_AddNumberToObject(o, "host_staging_bytes", (double)r->host_stage);
        if (r->host_params > 0) cJSON_AddNumberToObject(o, "host_param_bytes", (double)r->host_params);
        cJSON_AddNumberToObject(o, "host_mem", r->host_mem);
        cJSON_AddBoolToObject(o, "host_fits", r->host_fits);
    }
    /* Last, so that readers of the planned report see it unchanged. */
    cJSON_AddBoolToObject(o, "memory_plan", !r->no_reuse);
    if (r->no_reuse) {
        cJSON_AddNumberToObject(o, "planned_arena_bytes", (double)r->planned_arena_bytes);
        cJSON_AddNumberToObject(o, "staging_bytes", (double)r->stage_bytes);
    }
    char *text = cJSON_Print(o);
    if (text) fprintf(out, "%s\n", text);
    free(text);
    cJSON_Delete(o);
}
