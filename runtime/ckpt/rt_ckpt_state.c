/* rt_ckpt_state.c — what state.json records of the way a run draws its
 * batches and of its optimizer, and the checks of a --resume against it.
 *
 * A resume may change the data, the sampler, the schedule or the optimizer
 * settings (fine-tuning on new data or with a new schedule is common), but
 * the run then no longer continues the interrupted one: each change is
 * named (a warning for what changes the batches, a note for the optimizer)
 * and the run goes on.  What the program fixes (documents, eot_token,
 * packing, seq_len, micro_batch, global_batch) is compiled in, so a change
 * there means another binary resumed the checkpoint: said the same way.
 * Every field is compared only when the checkpoint has it (an older basp
 * wrote fewer). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "rt_ckpt.h"

/* The sampler that draws this run's batches, as state.json names it. */
static const char *cs_sampler(const rt_ctx *rt) {
    if (rt->p->documents) return "documents: splitmix64(seed, step, document)"; /* rt_docs.c */
    return rt->opt.epoch ? "epoch: feistel(seed, epoch, window)" : "splitmix64(seed, step, sequence)";
}

static const char *cs_packing(rt_packing k) { return k == RT_PACK_BALANCED ? "balanced" : "sequential"; }

void rt_ckpt_state_data(const rt_ctx *rt, cJSON *data) {
    const rt_program *p = rt->p;
    char buf[32];
    cJSON_AddStringToObject(data, "sampler", cs_sampler(rt));
    cJSON_AddNumberToObject(data, "tokens", (double)rt->train.ntokens);
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)rt_ckpt_data_fnv(rt));
    cJSON_AddStringToObject(data, "fnv64", buf);
    cJSON_AddNumberToObject(data, "seq_len", (double)p->seq_len);
    /* What a step draws: its micro-steps' sequences (gradient accumulation). */
    cJSON_AddNumberToObject(data, "micro_batch", (double)p->micro_batch);
    cJSON_AddNumberToObject(data, "global_batch", (double)(rt_accum(rt) * p->micro_batch));
    cJSON_AddBoolToObject(data, "documents", p->documents != 0);
    if (p->documents) {
        cJSON_AddNumberToObject(data, "eot_token", (double)p->eot_token);
        cJSON_AddStringToObject(data, "packing", cs_packing(p->packing));
    }
}

/* Rank 0: the optimizer settings of the checkpoint against this run's. */
static void cs_check_optim(const rt_ctx *rt, const cJSON *st) {
    const rt_optim_desc *o = &rt->opt.optim;
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(st, "optimizer");
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(st, "lr");
    if (cJSON_IsNumber(lr) && lr->valuedouble != rt->opt.lr)
        fprintf(stderr, "note: the checkpoint was trained with lr %g; this run uses %g\n", lr->valuedouble, rt->opt.lr);
    if (!cJSON_IsObject(opt)) {
        fprintf(stderr, "note: the checkpoint records no optimizer settings (an older basp): this run uses its own\n");
        return;
    }
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(opt, "schedule");
    if (cJSON_IsString(sc) && strcmp(sc->valuestring, rt_schedule_name(o->schedule)))
        fprintf(stderr, "note: the checkpoint was trained with schedule %s; this run uses %s\n", sc->valuestring,
                rt_schedule_name(o->schedule));
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(opt, "steps"); /* decaying schedules only */
    if (cJSON_IsNumber(steps) && steps->valuedouble != (double)rt->opt.steps)
        fprintf(stderr,
                "note: the checkpoint was trained with steps %g; this run uses %lld (the schedule is "
                "stretched to the new length)\n",
                steps->valuedouble, (long long)rt->opt.steps);
    for (int i = 0; i < RT_NOPTIM_FIELDS; i++) {
        const rt_optim_field *f = &rt_optim_fields[i];
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(opt, f->key);
        double now = rt_optim_get(o, f);
        if (cJSON_IsNumber(x) && x->valuedouble != now)
            fprintf(stderr, "note: the checkpoint was trained with %s %g; this run uses %g\n", f->key, x->valuedouble,
                    now);
    }
}

/* A number field of the checkpoint's data that differs from `now`. */
static void cs_check_number(const cJSON *d, const char *key, double now, const char *what) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(d, key);
    if (cJSON_IsNumber(x) && x->valuedouble != now)
        fprintf(stderr,
                "warning: the checkpoint was trained with %s %.0f; this program has %.0f (%s): the batches "
                "will not continue the interrupted run's\n",
                key, x->valuedouble, now, what);
}

/* The program settings that shape a batch: compiled in, so a change means
 * another binary (another spec or --set) resumed the checkpoint. */
static void cs_check_program(const rt_ctx *rt, const cJSON *d) {
    const rt_program *p = rt->p;
    cs_check_number(d, "seq_len", (double)p->seq_len, "train.seq_len");
    cs_check_number(d, "micro_batch", (double)p->micro_batch, "train.micro_batch");
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(d, "documents");
    if (cJSON_IsBool(docs) && cJSON_IsTrue(docs) != (p->documents != 0)) {
        fprintf(stderr,
                "warning: the checkpoint was trained %s packed documents; this program %s (train.documents): "
                "the batches will not continue the interrupted run's\n",
                cJSON_IsTrue(docs) ? "with" : "without", p->documents ? "packs them" : "reads one token stream");
        return;
    }
    if (!p->documents) return;
    cs_check_number(d, "eot_token", (double)p->eot_token, "train.eot_token");
    const cJSON *pk = cJSON_GetObjectItemCaseSensitive(d, "packing");
    if (cJSON_IsString(pk) && strcmp(pk->valuestring, cs_packing(p->packing)))
        fprintf(stderr,
                "warning: the checkpoint was trained with packing %s; this program has %s (train.packing): "
                "the batches will not continue the interrupted run's\n",
                pk->valuestring, cs_packing(p->packing));
}

void rt_ckpt_check_data(const rt_ctx *rt, const cJSON *st) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(st, "data");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(d, "tokens");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(d, "fnv64");
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)rt_ckpt_data_fnv(rt));
    if (!cJSON_IsNumber(n) || !cJSON_IsString(h) || n->valuedouble != (double)rt->train.ntokens ||
        strcmp(h->valuestring, hex))
        fprintf(stderr,
                "warning: the checkpoint was trained on other data (%.0f tokens, FNV-1a-64 %s; this run's "
                "data: %lld tokens, %s): the batches will not continue the interrupted run's\n",
                cJSON_IsNumber(n) ? n->valuedouble : -1.0, cJSON_IsString(h) ? h->valuestring : "?",
                (long long)rt->train.ntokens, hex);
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(d, "sampler");
    /* Packed documents have one sampler; a change to or from them is
     * cs_check_program's (an older basp named the token stream's sampler
     * in a documents run's checkpoint, which is not a change). */
    bool docs = rt->p->documents || (cJSON_IsString(sm) && !strncmp(sm->valuestring, "documents", 9));
    if (cJSON_IsString(sm) && !docs) {
        bool was_epoch = !strncmp(sm->valuestring, "epoch", 5);
        if (was_epoch != rt->opt.epoch)
            fprintf(stderr,
                    "warning: the checkpoint drew its batches with --sampler %s; this run uses %s: the "
                    "batches will not continue the interrupted run's\n",
                    was_epoch ? "epoch" : "random", rt->opt.epoch ? "epoch" : "random");
    }
    cs_check_program(rt, d);
    const cJSON *gb = cJSON_GetObjectItemCaseSensitive(d, "global_batch");
    double per_step = (double)(rt_accum(rt) * rt->p->micro_batch);
    if (cJSON_IsNumber(gb) && gb->valuedouble != per_step)
        fprintf(stderr,
                "warning: the checkpoint was trained with a global batch of %.0f sequences per step; this "
                "program takes %.0f (train.global_batch): the batches will not continue the interrupted run's, "
                "and every step from here averages %.0f\n",
                gb->valuedouble, per_step, per_step);
    cs_check_optim(rt, st);
}
