/* rt_val.c — validation: the loss on held-out data with the forward-only
 * program the compiler derives from the step (program->eval: the step's
 * forward ops, no backward, no optimizer, no gradient reduction, the
 * step's arena and buffers).
 *
 * The validation set is fixed: batch j's row b is the window of seq_len
 * tokens at ((j * B) + b) * seq_len of the --val-data corpus (targets the
 * next tokens), in order, for --val-tokens / (B * S) batches; with packed
 * documents, the corpus's documents in file order packed into the rows as
 * training packs them.  Every layout and world size reads the same rows,
 * and the loss is the all-reduced sum of the cross-entropy over them
 * divided by the number of counted targets, so it is the one-rank value up
 * to summation order (train.* compares it within 1e-6). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../core/rt_backend.h"
#include "../obs/rt_obs.h"
#include "rt_data.h"

enum { RT_VAL_DEFAULT_BATCHES = 16 };

/* The val docs table: rt_docs_load over the validation corpus. */
static bool val_docs(rt_ctx *rt, char *err, size_t errlen) {
    rt_docs *train = rt->docs;
    rt->data = &rt->val;
    rt->docs = NULL;
    bool ok = rt_docs_load(rt, rt->val.shard[0].path, err, errlen);
    rt->val_docs = rt->docs;
    rt->docs = train;
    rt->data = &rt->train;
    if (!ok) {
        rt_docs_free(rt->val_docs);
        rt->val_docs = NULL;
    }
    return ok;
}

/* Packed documents fill fewer batches than the token count says: each
 * batch's last document is cut to fit and its rest is not read.  The
 * default count shrinks to what the table fills; an explicit --val-tokens
 * that it cannot fill, or a table that fills no batch, is refused here
 * rather than at the first validation. */
static bool val_docs_fill(rt_ctx *rt, const char *path, int64_t batch, char *err, size_t errlen) {
    int64_t ndocs, fill = rt_docs_val_batches(rt->val_docs, batch, &ndocs);
    if (fill >= rt->val_batches) return true;
    if (fill > 0 && !rt->opt.val_tokens) {
        rt->val_batches = fill;
        return true;
    }
    char want[96];
    if (rt->opt.val_tokens)
        snprintf(want, sizeof want, "--val-tokens %lld asks for %lld", (long long)rt->opt.val_tokens,
                 (long long)rt->val_batches);
    else
        snprintf(want, sizeof want, "validation needs at least 1");
    snprintf(err, errlen,
             "--val-data %s%s (the spec's documents on): its %lld document(s) fill %lld whole batch(es) of %lld x "
             "%lld = %lld tokens in file order (each batch's last document is cut to fit and the rest of it is not "
             "read), but %s; %s",
             path, rt->val.nshards > 1 ? " and the other shards" : "", (long long)ndocs, (long long)fill,
             (long long)rt->p->micro_batch, (long long)rt->p->seq_len, (long long)batch, want,
             fill > 0 ? "pass a smaller --val-tokens or more validation data" : "pass more validation data");
    return false;
}

bool rt_val_load(rt_ctx *rt, char *err, size_t errlen) {
    const rt_options *o = &rt->opt;
    const rt_program *p = rt->p;
    rt->val_batch = -1;
    rt->val_best_step = rt->val_last_step = rt->val_saved_step = -1;
    if (!o->nval) return true;
    if (!p->eval && p->nvariants > 0) {
        snprintf(err, errlen,
                 "--val-data: batch_aware dynamic validates as one group of all %d ranks, which its group_sizes do "
                 "not allow (add %d, or validate with a static layout's binary from this run's checkpoint)",
                 p->world, p->world);
        return false;
    }
    if (!p->eval) {
        snprintf(err, errlen,
                 "--val-data: this program has no forward-only program to validate with (built by a "
                 "baspc without validation, or from IR whose forward ops do not compute the loss)");
        return false;
    }
    if (!rt_corpus_open_as(&rt->val, "--val-data", o->val_data, o->nval, false, p->vocab, err, errlen)) return false;
    int64_t batch = p->micro_batch * p->seq_len, have = (rt->val.ntokens - 1) / batch;
    const char *path = rt->val.shard[0].path;
    if (o->val_tokens && o->val_tokens < batch) {
        snprintf(err, errlen, "--val-tokens %lld is less than one batch of %lld x %lld = %lld tokens",
                 (long long)o->val_tokens, (long long)p->micro_batch, (long long)p->seq_len, (long long)batch);
        return false;
    }
    int64_t want =
        o->val_tokens ? o->val_tokens / batch : (have < RT_VAL_DEFAULT_BATCHES ? have : RT_VAL_DEFAULT_BATCHES);
    if (want < 1 || want > have) {
        snprintf(err, errlen, "%s%s: %lld tokens, fewer than %s%lld + 1 (%lld batch(es) of %lld)", path,
                 rt->val.nshards > 1 ? " and the other shards" : "", (long long)rt->val.ntokens,
                 o->val_tokens ? "--val-tokens " : "one batch, ", (long long)(want < 1 ? batch : o->val_tokens),
                 (long long)(want < 1 ? 1 : want), (long long)batch);
        return false;
    }
    rt->val_batches = want;
    return !p->documents || (val_docs(rt, err, errlen) && val_docs_fill(rt, path, batch, err, errlen));
}

bool rt_val_due(const rt_ctx *rt, int64_t t, int64_t steps) {
    if (!rt->val_batches) return false;
    return t + 1 == steps || (rt->opt.val_every > 0 && (t + 1) % rt->opt.val_every == 0);
}

double rt_validate(rt_ctx *rt, double *ms) {
    if (rt->dyn) rt_dyn_eval_begin(rt); /* batch_aware dynamic: the variant of all ranks */
    const rt_program *p = rt->p;
    /* The step's counters stay the step's: the profile and the step line
     * count training alone. */
    rt_counters total = rt->total;
    double a2a = rt->step_a2a_sec, a2a_wait = rt->step_a2a_wait_sec;
    int64_t bytes = rt->step_bytes;
    rt_docs *train_docs = rt->docs;
    rt->data = &rt->val;
    rt->docs = rt->val_docs;
    /* BASP_TEST_VAL_BUG=group plants the bug peer systems have shipped (the
     * loss divided by the sequence-parallel degree), for the tests that
     * must catch it (train.val_planted_group_scale). */
    const char *bug = getenv("BASP_TEST_VAL_BUG");
    double scale = bug && !strcmp(bug, "group") ? 1.0 / (double)p->sp_size : 1.0;
    double t0 = rt_now(), sum = 0;
    int64_t counted = 0, next = 0;
    for (int64_t j = 0; j < rt->val_batches; j++) {
        rt_watchdog_beat("validating", rt->step + 1);
        rt_mem_begin_step(rt);
        rt->val_batch = j;
        if (rt->docs) next = rt_docs_val_batch(rt, next);
        rt_data_fill(rt, -1);
        p->eval(rt);
        rt_comm_finish_step(rt);
        float loss_sum;
        rt_host_read(rt, p->loss, &loss_sum);
        sum += loss_sum * scale;
        if (rt->docs) {
            rt_docs_info info;
            rt_docs_stats(rt, &info);
            counted += info.counted;
        } else {
            counted += p->micro_batch * p->seq_len;
        }
    }
    rt->val_batch = -1;
    rt->data = &rt->train;
    rt->docs = train_docs;
    rt_mem_begin_step(rt);
    if (rt->dyn) rt_dyn_end(rt);
    rt->total = total;
    rt->step_a2a_sec = a2a, rt->step_a2a_wait_sec = a2a_wait;
    rt->step_bytes = bytes;
    *ms = (rt_now() - t0) * 1e3;
    return sum / (double)(counted > 0 ? counted : 1);
}

/* DIR/best.json (the best saved checkpoint), written next to it and renamed:
 * a crash leaves the old. */
static void val_write_best(const rt_ctx *rt) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/best.json", rt->opt.ckpt_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "val_loss", rt->val_saved);
    cJSON_AddNumberToObject(o, "step", (double)rt->val_saved_step);
    char *text = cJSON_Print(o);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    bool ok = f && fprintf(f, "%s\n", text) > 0;
    ok = f && fclose(f) == 0 && ok && rename(tmp, path) == 0;
    if (!ok) fprintf(stderr, "warning: cannot write %s: %s\n", path, strerror(errno));
    cJSON_free(text);
    cJSON_Delete(o);
}

/* On --resume: the best saved checkpoint so far, from DIR/best.json when it
 * is there and not from after the resumed step; it is also the best
 * validation known (the interrupted run's others are not recorded). */
static void val_read_best(rt_ctx *rt) {
    char path[4200];
    snprintf(path, sizeof path, "%s/best.json", rt->opt.ckpt_dir);
    unsigned char *buf;
    int64_t len;
    char err[256];
    if (!rt_read_file(path, &buf, &len, err, sizeof err)) return;
    cJSON *o = cJSON_ParseWithLength((const char *)buf, (size_t)len);
    rt_json_dup dup;
    if (rt_json_find_dup(o, &dup)) { /* which record is meant is unknown: none is taken */
        char why[768];
        rt_json_dup_text(&dup, why, sizeof why);
        fprintf(stderr, "warning: %s: %s; the best validation so far is not read from it\n", path, why);
        cJSON_Delete(o);
        o = NULL;
    }
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "val_loss"), *s = cJSON_GetObjectItemCaseSensitive(o, "step");
    if (cJSON_IsNumber(l) && cJSON_IsNumber(s) && s->valuedouble <= (double)rt->start_step) {
        rt->val_best = rt->val_saved = l->valuedouble;
        rt->val_best_step = rt->val_saved_step = (int64_t)s->valuedouble;
    }
    cJSON_Delete(o);
    free(buf);
}

/* Once, before the first comparison: rt->start_step is known by then. */
static void val_resume_best(rt_ctx *rt) {
    static bool read;
    if (!read && rt->opt.ckpt_dir && rt->start_step > 0) val_read_best(rt);
    read = true;
}

void rt_val_record(rt_ctx *rt, int64_t t, double loss, double ms) {
    if (rt->rank != 0) return;
    val_resume_best(rt);
    bool best = rt->val_best_step < 0 || loss < rt->val_best;
    if (best) {
        rt->val_best = loss;
        rt->val_best_step = t + 1;
    }
    rt->val_last = loss;
    rt->val_last_step = t + 1;
    if (!rt->opt.quiet)
        printf("validation after step %lld: val_loss %.6f (%lld batch(es), %lld tokens, %.1f ms)%s\n", (long long)t + 1,
               loss, (long long)rt->val_batches, (long long)(rt->val_batches * rt->p->micro_batch * rt->p->seq_len), ms,
               best ? ", best so far" : "");
    fflush(stdout);
}

void rt_val_saved(rt_ctx *rt) {
    if (rt->rank != 0 || !rt->opt.ckpt_dir || rt->val_last_step <= 0) return;
    val_resume_best(rt);
    if (rt->saved_step != rt->val_last_step || rt->val_saved_step == rt->val_last_step) return;
    if (rt->val_saved_step >= 0 && !(rt->val_last < rt->val_saved)) return;
    rt->val_saved = rt->val_last;
    rt->val_saved_step = rt->val_last_step;
    val_write_best(rt);
}

static int64_t val_gcd(int64_t a, int64_t b) { return b ? val_gcd(b, a % b) : a; }

void rt_val_note(const rt_ctx *rt) {
    const rt_options *o = &rt->opt;
    int64_t v = o->val_every, s = o->save_every;
    if (!rt->val_batches || !o->ckpt_dir || v <= 0 || v >= o->steps || (s > 0 && v % s == 0)) return;
    printf("note: best.json names the best validation among the steps saved as checkpoints: ");
    if (s <= 0) {
        printf("without --save-every only the last step is saved");
    } else {
        int64_t g = val_gcd(v, s);
        if (v / g > o->steps / s) /* lcm(v, s) past the run, without overflowing */
            printf("with --val-every %lld and --save-every %lld only the last step is both", (long long)v,
                   (long long)s);
        else
            printf("with --val-every %lld and --save-every %lld those are every %lld steps and the last", (long long)v,
                   (long long)s, (long long)(v / g * s));
    }
    printf(" (a --val-every that is a multiple of --save-every makes every validated step one)\n");
}

void rt_val_summary(const rt_ctx *rt) {
    if (rt->rank != 0 || rt->val_best_step < 0) return;
    printf("validation: best val_loss %.6f after step %lld", rt->val_best, (long long)rt->val_best_step);
    if (!rt->opt.ckpt_dir)
        printf("\n");
    else if (rt->val_saved_step == rt->val_best_step)
        printf(" (recorded in --checkpoint-dir's best.json)\n");
    else if (rt->val_saved_step >= 0)
        printf("; best.json names step %lld (val_loss %.6f), the best validated step saved as a checkpoint\n",
               (long long)rt->val_saved_step, rt->val_saved);
    else
        printf("; no validated step was saved as a checkpoint: best.json not written\n");
    fflush(stdout);
}
