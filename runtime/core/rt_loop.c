/* rt_loop.c — the training loop: start-up banner, one step per iteration
 * (load the batch, run the generated schedule, log), metrics as JSON lines,
 * then the end of the run: the report and --profile (obs/rt_profile.c),
 * the final checkpoint and the optional tensor dumps. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/rt_ckpt.h"
#include "../data/rt_data.h"
#include "../obs/rt_obs.h"
#include "rt_backend.h"
#include "rt_core.h"

static const char *rt_layout_name(const rt_program *p) {
    if (p->sp_size <= 0) return "layout";
    if (p->sp_size == 1) return "data parallel";
    if (p->layout) return p->layout;
    if (p->batch_groups <= 1) return "Ulysses";
    return "batch-aware";
}

static void rt_print_group(const rt_group_desc *g) {
    printf("  @%-8s %d set(s) of %d  %s{", g->name, g->nsets, g->set_size,
           g->block ? "in a block of consecutive ranks chosen per micro-step: positions " : "");
    for (int s = 0; s < g->nsets && s < 8; s++) {
        printf("%s[", s ? " " : "");
        for (int i = 0; i < g->set_size && i < 16; i++) printf("%s%d", i ? "," : "", g->ranks[s * g->set_size + i]);
        printf("%s]", g->set_size > 16 ? ",..." : "");
    }
    printf("%s}\n", g->nsets > 8 ? " ..." : "");
}

/* Tokens of one optimizer step: every micro-step's. */
static double rt_step_tokens(const rt_ctx *rt) {
    return (double)rt_accum(rt) * (double)(rt->p->micro_batch * rt->p->seq_len);
}

/* "data PATH (N tokens)" or, for shards, their count and the first and
 * last; with the tokens the run reads, how many passes over the corpus. */
static void rt_print_corpus(const char *what, const rt_corpus *c, double reads) {
    const char *kind = c->width == 1 ? "bytes" : c->width == 2 ? "uint16" : "uint32";
    if (c->nshards == 1)
        printf("%s %s (%lld tokens, %s)", what, c->shard[0].path, (long long)c->ntokens, kind);
    else
        printf("%s %d shards, %s .. %s (%lld tokens, %s)", what, c->nshards, c->shard[0].path,
               c->shard[c->nshards - 1].path, (long long)c->ntokens, kind);
    if (reads > 0) printf(": the run reads %.0f tokens = %.3g epoch(s)", reads, reads / (double)c->ntokens);
    printf("\n");
}

static void rt_banner(rt_ctx *rt) {
    const rt_program *p = rt->p;
    int64_t nparams = 0;
    for (int v = 0; v < p->nvalues; v++) {
        if (p->values[v].kind != RT_PARAM) continue;
        int64_t n = 1;
        for (int i = 0; i < p->values[v].rank; i++) n *= p->values[v].dims[i];
        nparams += n;
    }
    printf("basp: model %s (%s), %.3fM parameters, vocab %lld\n", p->model, p->spec ? p->spec : "?",
           (double)nparams / 1e6, (long long)p->vocab);
    if (p->nvariants > 0) {
        printf("world %d = %d node(s) × %d | batch-aware dynamic: groups of", p->world, p->nodes, p->devices_per_node);
        for (int k = 0; k < p->nvariants; k++) printf("%s %d", k ? "," : "", p->variants[k].size);
        printf(" rank(s) chosen per micro-step, %lld tokens per rank | zero %d\n", (long long)p->dyn_tokens, p->zero);
    } else
        printf("world %d = %d node(s) × %d | %s: G=%d group(s) × K=%d rank(s) | zero %d\n", p->world, p->nodes,
               p->devices_per_node, rt_layout_name(p), p->batch_groups, p->sp_size, p->zero);
    char blas[192], blas_warn[640];
    if (!rt_blas_describe(blas, sizeof blas, blas_warn, sizeof blas_warn)) fprintf(stderr, "warning: %s\n", blas_warn);
    printf("%s\n", blas);
    if (p->started) printf("overlap: %d collective(s) started per step; %s\n", p->started, rt->progress_note);
    printf("groups:\n");
    for (int g = 0; g < p->ngroups; g++) rt_print_group(&p->groups[g]);
    if (rt_accum(rt) > 1)
        printf("batch %lld × %lld = %lld tokens/micro-step, %lld micro-steps: global batch %lld sequences = %lld "
               "tokens/step | steps %lld | seed %lld\n",
               (long long)p->micro_batch, (long long)p->seq_len, (long long)(p->micro_batch * p->seq_len),
               (long long)rt_accum(rt), (long long)(rt_accum(rt) * p->micro_batch), (long long)rt_step_tokens(rt),
               (long long)rt->opt.steps, (long long)rt->opt.seed);
    else
        printf("batch %lld × %lld = %lld tokens/step | steps %lld | seed %lld\n", (long long)p->micro_batch,
               (long long)p->seq_len, (long long)(p->micro_batch * p->seq_len), (long long)rt->opt.steps,
               (long long)rt->opt.seed);
    rt_print_corpus("data", &rt->train, (double)rt->opt.steps * rt_step_tokens(rt));
    if (rt->val_batches) {
        rt_print_corpus("validation data", &rt->val, 0);
        printf("validation: %lld batch(es) of %lld × %lld = %lld tokens, the forward-only program, after ",
               (long long)rt->val_batches, (long long)p->micro_batch, (long long)p->seq_len,
               (long long)(rt->val_batches * p->micro_batch * p->seq_len));
        if (rt->opt.val_every) printf("every %lld steps and ", (long long)rt->opt.val_every);
        printf("the last\n");
        rt_val_note(rt);
    }
    if (rt->opt.epoch) {
        int64_t nwin = (rt->data->ntokens - 1) / p->seq_len;
        printf("sampler epoch: %lld window(s) of %lld tokens, each once per epoch; %lld steps cover %.3f epoch(s)\n",
               (long long)nwin, (long long)p->seq_len, (long long)rt->opt.steps,
               (double)rt->opt.steps * (double)(rt_accum(rt) * p->micro_batch) / (double)nwin);
    }
    const rt_optim_desc *o = &rt->opt.optim;
    printf("adamw: lr %.2e, schedule %s", rt->opt.lr, rt_schedule_name(o->schedule));
    if (o->warmup) printf(" after %lld warmup step(s)", (long long)o->warmup);
    if (o->schedule == RT_SCHED_WSD)
        printf(", the last %lld step(s) decaying", (long long)rt_wsd_decay_steps(o, rt->opt.steps));
    if (o->schedule != RT_SCHED_CONSTANT) printf(" to min_lr %.2e", o->min_lr);
    printf(" | betas %g, %g | eps %g | weight_decay %g | grad_clip %s%g\n", o->beta1, o->beta2, o->eps, o->weight_decay,
           o->grad_clip > 0 ? "" : "off ", o->grad_clip);
    if (rt->docs) {
        rt_docs_info di;
        rt_docs_stats(rt, &di);
        printf("documents: end-of-text token %lld, %lld document(s) of at most %lld tokens (%lld longer ones cut, "
               "%lld empty skipped) | packing %s over %d group(s)\n",
               (long long)p->eot_token, (long long)di.ndocs, (long long)p->seq_len, (long long)di.nsplit,
               (long long)di.nskipped, p->packing == RT_PACK_BALANCED ? "balanced" : "sequential", p->batch_groups);
    }
    rt_arena_report(rt, stdout);
    fflush(stdout);
}

typedef struct rt_step_stats {
    double loss, grad_norm, sec, a2a_sec, a2a_wait_sec;
    int64_t bytes;
    rt_docs_info docs; /* packed documents: this step's counts and balance */
    bool untimed;      /* the backend could not time the collectives (rt->step_untimed) */
    bool val;          /* a validation ran after the step: its loss and time */
    double val_loss, val_ms;
} rt_step_stats;

/* Zeroes every gradient accumulator (before a step's first micro-step),
 * from one host buffer of zeros made on the first call. */
static void rt_accum_zero(rt_ctx *rt) {
    const rt_program *p = rt->p;
    if (!rt->accum_zeros) {
        int64_t most = 1;
        for (int v = 0; v < p->nvalues; v++)
            if (p->values[v].kind == RT_ACCUM && p->values[v].local_elems > most) most = p->values[v].local_elems;
        rt->accum_zeros = calloc((size_t)most, sizeof *rt->accum_zeros);
        RT_CHECK(rt->accum_zeros, "out of memory for %lld zeros", (long long)most);
    }
    for (int v = 0; v < p->nvalues; v++)
        if (p->values[v].kind == RT_ACCUM) rt_host_write(rt, v, rt->accum_zeros);
}

/* One optimizer step: accum micro-steps (each its own micro-batch: the
 * forward, the backward, the gradients into the accumulators), then the
 * apply phase.  Without accumulation, the one step() holds all. */
static rt_step_stats rt_run_step(rt_ctx *rt, int64_t t) {
    const rt_program *p = rt->p;
    int64_t A = rt_accum(rt);
    rt->step = t;
    rt->lr = rt_lr_at(&rt->opt.optim, rt->opt.lr, t, rt->opt.steps);
    rt->step_a2a_sec = rt->step_a2a_wait_sec = 0;
    rt->step_untimed = false;
    rt->step_bytes = 0;
    rt_mem_begin_step(rt);
    rt_opt_begin_step(rt);
    if (rt_split_step(rt)) rt_accum_zero(rt);
    rt->step_counted = rt->docs ? rt_docs_step_counted(rt, t) : A * p->micro_batch * p->seq_len;
    rt_step_stats s = {0};
    double loss_sum = 0, t0 = 0;
    for (int64_t m = 0; m < A; m++) {
        rt->micro = m;
        if (m > 0) rt_mem_begin_step(rt);            /* the last micro-step's activations are dead */
        if (rt->dyn) rt_dyn_begin(rt, t, t * A + m); /* rt->p: this rank's variant */
        rt_data_fill(rt, t);
        if (m == 0) t0 = rt_now();
        rt_backend_run(rt, rt->p->step);
        float part;
        rt_host_read(rt, rt->p->loss, &part);
        if (rt->dyn) { /* the plan ends the variant's loss with its micro-step (ir_mem_live) */
            rt_mem_release(rt, rt->p->loss);
            rt_dyn_end(rt);
        }
        loss_sum += part;
        if (rt->docs) {
            rt_docs_info d;
            rt_docs_stats(rt, &d);
            s.docs.ndocs = d.ndocs, s.docs.nsplit = d.nsplit, s.docs.nskipped = d.nskipped;
            s.docs.step_docs += d.step_docs;
            s.docs.counted += d.counted;
            s.docs.imbalance = d.imbalance > s.docs.imbalance ? d.imbalance : s.docs.imbalance;
        }
    }
    rt->micro = 0;
    if (rt_split_step(rt)) {
        rt_backend_run(rt, p->apply);
    }
    s.sec = rt_now() - t0, s.a2a_sec = rt->step_a2a_sec, s.a2a_wait_sec = rt->step_a2a_wait_sec;
    s.untimed = rt->step_untimed;
    s.bytes = rt->step_bytes;
    if (!rt->norm_done && p->nopt > 0) rt_grad_norm(rt); /* a schedule without adamw still reports its norm */
    s.grad_norm = rt->norm_done ? rt->grad_norm : 0.0;
    /* The mean over every micro-step's tokens (the counted targets). */
    s.loss = loss_sum / (double)(rt->step_counted > 0 ? rt->step_counted : 1);
    return s;
}

static void rt_log_step(const rt_ctx *rt, int64_t t, const rt_step_stats *s) {
    double tps = rt_step_tokens(rt) / (s->sec > 0 ? s->sec : 1e-9);
    printf("step %4lld/%lld | loss %.6f | grad_norm %.4f | lr %.2e | %.1f ms | %.0f tok/s", (long long)t + 1,
           (long long)rt->opt.steps, s->loss, s->grad_norm, rt->lr, s->sec * 1e3, tps);
    if (s->untimed)
        printf(" | a2a not timed (CUDA graph)");
    else
        printf(" | a2a %.1f ms (%.1f%%)", s->a2a_sec * 1e3, s->sec > 0 ? 100.0 * s->a2a_sec / s->sec : 0.0);
    if (rt->docs)
        printf(" | %lld docs, %lld targets, imbalance %.3f", (long long)s->docs.step_docs, (long long)s->docs.counted,
               s->docs.imbalance);
    printf("\n");
    fflush(stdout);
}

static void rt_metrics_line(const rt_ctx *rt, FILE *f, int64_t t, const rt_step_stats *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step", (double)(t + 1));
    cJSON_AddNumberToObject(o, "loss", s->loss);
    cJSON_AddNumberToObject(o, "grad_norm", s->grad_norm);
    cJSON_AddNumberToObject(o, "lr", rt->lr);
    cJSON_AddNumberToObject(o, "step_ms", s->sec * 1e3);
    if (s->untimed)
        cJSON_AddNullToObject(o, "a2a_ms");
    else
        cJSON_AddNumberToObject(o, "a2a_ms", s->a2a_sec * 1e3);
    if (rt->opt.split_wait) cJSON_AddNumberToObject(o, "a2a_wait_ms", s->a2a_wait_sec * 1e3);
    cJSON_AddNumberToObject(o, "comm_bytes", (double)s->bytes);
    if (s->val) {
        cJSON_AddNumberToObject(o, "val_loss", s->val_loss);
        cJSON_AddNumberToObject(o, "val_ms", s->val_ms);
    }
    if (rt->docs) {
        cJSON_AddNumberToObject(o, "documents", (double)s->docs.step_docs);
        cJSON_AddNumberToObject(o, "counted_tokens", (double)s->docs.counted);
        cJSON_AddNumberToObject(o, "imbalance", s->docs.imbalance);
    }
    size_t ws = rt_backend_workspace_bytes(rt);
    cJSON_AddNumberToObject(o, "mem_peak_bytes", (double)(rt->mem_hw + ws));
    cJSON_AddNumberToObject(o, "mem_arena_bytes", (double)rt->arena_bytes);
    cJSON_AddNumberToObject(o, "mem_arena_peak_bytes", (double)rt->mem_hw);
    rt_dyn_metrics(rt, o);
    cJSON_AddNumberToObject(o, "mem_workspace_bytes", (double)ws);
    if (rt->host_bytes) {
        cJSON_AddNumberToObject(o, "mem_host_bytes", (double)rt->host_bytes);
        cJSON_AddNumberToObject(o, "mem_host_peak_bytes", (double)rt->host_hw);
    }
    cJSON_AddNumberToObject(o, "rss_peak_bytes", (double)rt_rss_peak_bytes());
    cJSON_AddNumberToObject(o, "tokens_per_s", rt_step_tokens(rt) / (s->sec > 0 ? s->sec : 1e-9));
    rt_metrics_write(f, o);
}

/* One run's loop state, shared by the phases below. */
typedef struct rt_run {
    FILE *metrics;      /* rank 0: --metrics */
    double *secs, *a2a; /* per step */
    int64_t t0, steps;  /* the first step of this run; the end (earlier after a stop) */
    int status;
    bool grads_saved, save_lost; /* a --save-* file not written */
    bool trace_lost;             /* every rank: --trace-run not written */
} rt_run;

/* Between a step's compute and the next step, and around the final
 * checkpoint, rank 0 writes alone (checkpoints, best.json, the metrics
 * line) while the other ranks wait in the next collective: their watchdog
 * leaves the verdict to rank 0's, which beats while it writes. */
static void rt_hold_others(const rt_ctx *rt, bool on) {
    if (rt->rank != 0) rt_watchdog_hold(on);
}

/* The checkpoint of step `step` when --save-every asks for one, so that a
 * watchdog message names it. */
static void rt_beat_if_saving(const rt_ctx *rt, int64_t step) {
    if (rt->opt.ckpt_dir && rt->opt.save_every > 0 && step % rt->opt.save_every == 0)
        rt_watchdog_beat("saving a checkpoint", step);
}

/* Step t's work after its compute: checkpoint, the last step's gradients,
 * validation, the step line, the metrics record, a signal's stop.  False
 * when the run stops here (r->status says why). */
static bool rt_after_step(rt_ctx *rt, rt_run *r, int64_t t, rt_step_stats *s) {
    r->secs[t] = s->sec;
    r->a2a[t] = s->a2a_sec;
    /* The loss is all-reduced and the norm global, so every rank sees
     * the same values and stops (or skips, or saves) at the same step. */
    rt_beat_if_saving(rt, t + 1);
    rt_hold_others(rt, true);
    int bad = rt_guard_after_step(rt, t, s->loss, s->grad_norm);
    rt_hold_others(rt, false);
    if (bad) {
        r->status = 1;
        r->steps = t + 1;
        return false;
    }
    /* The last step's gradients before a validation reuses their buffers. */
    if (t + 1 == r->steps && rt->opt.save_grads) {
        r->save_lost |= !rt_save_tensors(rt, rt->opt.save_grads, true, t + 1);
        r->grads_saved = true;
    }
    if ((s->val = rt_val_due(rt, t, r->steps))) s->val_loss = rt_validate(rt, &s->val_ms);
    rt_hold_others(rt, true);
    bool show = (t + 1) % rt->opt.log_every == 0 || t == r->t0 || t + 1 == r->steps;
    if (rt->rank == 0 && show && !rt->opt.quiet) rt_log_step(rt, t, s);
    if (s->val) rt_val_record(rt, t, s->val_loss, s->val_ms);
    rt_val_saved(rt); /* a checkpoint of this step came before its validation */
    if (r->metrics) {
        rt_watchdog_beat_on("writing --metrics", rt->opt.metrics, t + 1);
        rt_metrics_line(rt, r->metrics, t, s);
    }
    int stop = rt_guard_stop(rt, t, r->metrics); /* SIGTERM / SIGINT: collective */
    rt_hold_others(rt, false);
    if (!stop) return true;
    rt_val_saved(rt); /* the stop's checkpoint */
    r->status = stop;
    r->steps = t + 1;
    return false;
}

/* Rank 0: closes --metrics.  A full disk must not pass for a complete
 * metrics file (the first failure was said when it happened; the run went
 * on without metrics).  True when records are missing. */
static bool rt_metrics_close(rt_ctx *rt, FILE *metrics, int64_t step) {
    if (!metrics) return false;
    rt_watchdog_beat_on("closing --metrics", rt->opt.metrics, step);
    int werr = ferror(metrics) ? EIO : 0;
    errno = 0;
    if (fclose(metrics) != 0 && !werr) werr = errno ? errno : EIO;
    int64_t lost = rt_metrics_lost_from();
    if (lost >= 0)
        fprintf(stderr,
                "error: --metrics %s is incomplete: the records from step %lld on are missing (exit "
                "status 1)\n",
                rt->opt.metrics, (long long)lost);
    else if (werr)
        fprintf(stderr, "error: --metrics %s: closing it failed: %s (exit status 1)\n", rt->opt.metrics,
                strerror(werr));
    return lost >= 0 || werr;
}

/* After the loop: the metrics file, the profile and the report (rank 0),
 * the final checkpoint and the --save-* files (collective).  Only rank 0
 * knows of a lost metrics or profile file, so the exit status changes
 * after the collective saves. */
static int rt_finish_run(rt_ctx *rt, rt_run *r) {
    bool r0 = rt->rank == 0;
    int64_t steps = r->steps, t0 = r->t0;
    bool lost = rt_metrics_close(rt, r->metrics, steps);
    if (r0 && r->status == 0 && rt->opt.profile) { /* before rt_profile_report, which sorts secs */
        rt_watchdog_beat_on("writing --profile", rt->opt.profile, steps);
        double *copy = RT_MALLOC(sizeof(double) * (size_t)(steps + 1));
        memcpy(copy, r->secs + t0, sizeof(double) * (size_t)(steps - t0));
        lost |= !rt_profile_write(rt, rt->opt.profile, copy, r->a2a + t0, steps - t0);
        free(copy);
    }
    if (r0 && r->status == 0) rt_profile_report(rt, r->secs + t0, steps - t0, rt_step_tokens(rt));
    int status = r->status;
    if (status == 0) {
        if (rt->opt.ckpt_dir && steps > rt->start_step && rt->saved_step != steps)
            rt_watchdog_beat("saving a checkpoint", steps);
        rt_hold_others(rt, true);
        status = rt_guard_after_run(rt, steps);
        rt_hold_others(rt, false);
        rt_val_saved(rt);
    }
    rt_val_summary(rt);
    if (status == 0 && rt->opt.save_weights) r->save_lost |= !rt_save_tensors(rt, rt->opt.save_weights, false, steps);
    if (status == 0 && rt->opt.save_grads && steps > 0 && !r->grads_saved)
        r->save_lost |= !rt_save_tensors(rt, rt->opt.save_grads, true, steps);
    if (status == 0 && rt->opt.save_grads && steps == 0 && r0)
        fprintf(stderr, "warning: --steps 0 computes no gradients: %s not written\n", rt->opt.save_grads);
    if (r0 && rt->opt.trace_run && !rt->trace_written && !r->trace_lost) { /* resumed past it, or stopped before */
        int64_t want = rt->opt.trace_step > 0 ? rt->opt.trace_step : rt->opt.steps;
        if (t0 >= steps)
            fprintf(stderr, "warning: --trace-run %s: no step ran: no trace written\n", rt->opt.trace_run);
        else
            fprintf(stderr,
                    "warning: --trace-run %s: step %lld is not among the steps that ran (%lld..%lld): no "
                    "trace written\n",
                    rt->opt.trace_run, (long long)want, (long long)t0 + 1, (long long)steps);
    }
    return status ? status : (lost || r->save_lost || r->trace_lost);
}

int rt_train(rt_ctx *rt) {
    const rt_program *p = rt->p;
    RT_CHECK(p->step, "program has no step function");
    RT_CHECK(p->loss >= 0 && p->values[p->loss].dtype == RT_F32 && p->values[p->loss].local_elems == 1,
             "program has no f32 scalar loss value");
    bool r0 = rt->rank == 0;
    rt_run r = {.steps = rt->opt.steps};
    rt_hold_others(rt, true); /* rank 0 may trim a long metrics file (--resume) */
    if (r0) {
        rt_banner(rt);
        if (rt->opt.metrics) {
            rt_watchdog_beat_on("opening --metrics", rt->opt.metrics, rt->start_step);
            r.metrics = rt_metrics_open(rt); /* says why on failure */
        }
    }
    int ok_metrics = !rt->opt.metrics || r.metrics || !r0;
    RT_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok_metrics, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    rt_hold_others(rt, false);
    if (!ok_metrics) return 1;
    r.secs = RT_MALLOC(sizeof(double) * (size_t)(r.steps + 1));
    r.a2a = RT_MALLOC(sizeof(double) * (size_t)(r.steps + 1));
    r.t0 = rt->start_step < r.steps ? rt->start_step : r.steps; /* > 0 after --resume */
    if (r0 && rt->start_step >= r.steps && rt->start_step > 0)
        printf("the checkpoint is at step %lld: nothing to train for --steps %lld\n", (long long)rt->start_step,
               (long long)r.steps);
    int64_t trace_at = rt->opt.trace_step > 0 ? rt->opt.trace_step : rt->opt.steps;
    rt_signal_training_started(); /* from here a signal stops after a step, with a checkpoint */
    for (int64_t t = r.t0; t < r.steps; t++) {
        rt_watchdog_beat("running a step", t + 1);
        rt_guard_test_poison(rt, t, true);
        rt_trace_begin(rt, t);
        rt_step_stats s = rt_run_step(rt, t);
        if (rt->opt.trace_run && t + 1 == trace_at)
            rt_watchdog_beat_on("writing --trace-run", rt->opt.trace_run, t + 1);
        r.trace_lost |= !rt_trace_end(rt, t); /* before a validation's kernels */
        rt_guard_test_poison(rt, t, false);
        if (!rt_after_step(rt, &r, t, &s)) break;
    }
    int status = rt_finish_run(rt, &r);
    free(r.secs);
    free(r.a2a);
    return status;
}
