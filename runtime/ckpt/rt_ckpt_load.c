/* rt_ckpt_load.c — reading checkpoints back (--resume) and Hugging Face
 * model directories (--init-from DIR).  Formats in rt_ckpt.c.
 *
 * Rank 0 alone reads the files and checks all of them — state.json, the size
 * and checksum of every file it lists, config.json against the compiled
 * model (rt_ckpt_config.c: every field that gives a shape or changes the
 * math, all differing ones listed), every safetensors header, and that the tensors are exactly
 * this program's parameters (and moments) with the right shapes — before any
 * buffer changes; then it broadcasts its verdict, so every rank fails or
 * proceeds together.  Tensors reach the ranks as in rt_load.c: rank 0 holds
 * the full tensor and scatters each rank's box, which re-shards a checkpoint
 * written by any layout for this one. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/rt_backend.h"
#include "../data/rt_data.h"
#include "../obs/rt_obs.h"
#include "rt_ckpt.h"
#include "rt_safetensors.h"

enum { CK_PATH = 4096, CK_MAX_FILES = 256 };

/* The safetensors files a load reads (rank 0): whole files in memory. */
typedef struct ck_src {
    int n;
    char path[CK_MAX_FILES][CK_PATH];
    unsigned char *buf[CK_MAX_FILES];
    int64_t len[CK_MAX_FILES];
    rt_st_file st[CK_MAX_FILES];
} ck_src;

static void ck_src_free(ck_src *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->buf[i]);
        rt_st_free(&s->st[i]);
    }
    free(s);
}

/* A file's length and FNV-1a-64 against its state.json entry `want`. */
static bool ck_verify(const char *path, const unsigned char *buf, int64_t len, const cJSON *want, char *err,
                      size_t errlen) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(want, "bytes");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(want, "fnv64");
    if (!cJSON_IsNumber(b) || !cJSON_IsString(h))
        return rt_fail(err, errlen, "%s: state.json lists no size and checksum for it", path);
    if ((double)len != b->valuedouble)
        return rt_fail(err, errlen, "%s: truncated or damaged: %lld bytes, state.json says %.0f", path, (long long)len,
                       b->valuedouble);
    uint64_t fnv = RT_FNV64_INIT;
    for (int64_t at = 0, piece = (int64_t)1 << 28; at < len; at += piece) { /* beating between pieces */
        fnv = rt_fnv64(fnv, buf + at, (size_t)(len - at < piece ? len - at : piece));
        rt_watchdog_pulse();
    }
    char hex[17];
    sprintf(hex, "%016llx", (unsigned long long)fnv);
    if (strcmp(hex, h->valuestring))
        return rt_fail(err, errlen,
                       "%s: checksum mismatch: the file's FNV-1a-64 is %s, state.json says %.16s: the "
                       "file is corrupt",
                       path, hex, h->valuestring);
    return true;
}

/* Reads and parses one safetensors file; `want` (or NULL): its size and
 * checksum from state.json, checked before the file is parsed. */
static bool ck_src_add(ck_src *s, const char *path, const cJSON *want, char *err, size_t errlen) {
    if (s->n == CK_MAX_FILES) return rt_fail(err, errlen, "%s: more than %d weight files", path, CK_MAX_FILES);
    int i = s->n;
    snprintf(s->path[i], CK_PATH, "%s", path);
    if (!rt_read_file(path, &s->buf[i], &s->len[i], err, errlen)) return false;
    s->n++;
    if (want && !ck_verify(path, s->buf[i], s->len[i], want, err, errlen)) return false;
    return rt_st_parse(s->buf[i], (size_t)s->len[i], path, &s->st[i], err, errlen);
}

static const rt_st_tensor *ck_src_find(const ck_src *s, const char *name, int *file) {
    for (int i = 0; i < s->n; i++) {
        const rt_st_tensor *t = rt_st_find(&s->st[i], name);
        if (t) {
            *file = i;
            return t;
        }
    }
    return NULL;
}

/* No key of j repeated at any depth (common/common.h); else false naming it. */
static bool ck_json_unique(const char *path, const cJSON *j, char *err, size_t errlen) {
    rt_json_dup dup;
    if (!rt_json_find_dup(j, &dup)) return true;
    char why[768];
    rt_json_dup_text(&dup, why, sizeof why);
    return rt_fail(err, errlen, "%s: %s", path, why);
}

static cJSON *ck_read_json(const char *path, char *err, size_t errlen) {
    unsigned char *b;
    int64_t len;
    if (!rt_read_file(path, &b, &len, err, errlen)) return NULL;
    cJSON *j = cJSON_ParseWithLength((const char *)b, (size_t)len);
    free(b);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        rt_fail(err, errlen, "%s: not a JSON object (damaged?)", path);
        return NULL;
    }
    if (!ck_json_unique(path, j, err, errlen)) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* Where parameter (or moment) tensors come from: file and tensor per value. */
typedef struct ck_pick {
    int file;
    const rt_st_tensor *t;
} ck_pick;

/* Finds prefix + HF name of value v with the HF shape and a readable dtype. */
static bool ck_pick_one(const rt_program *p, const ck_src *s, int v, const char *prefix, ck_pick *out, char *err,
                        size_t errlen) {
    const rt_value_desc *d = &p->values[v];
    rt_hf_map m = rt_hf_name(d->name);
    char name[256], a[160], b[160];
    snprintf(name, sizeof name, "%s%s", prefix, m.name);
    int64_t want[RT_ST_MAX_DIMS];
    int nd = rt_hf_shape(&m, d->dims, d->rank, want);
    rt_st_fmt_shape(b, sizeof b, want, nd);
    const char *spec = p->spec ? p->spec : "its spec";
    out->t = ck_src_find(s, name, &out->file);
    if (!out->t)
        return s->n == 1 ? rt_fail(err, errlen,
                                   "checkpoint is of a different model: this program (compiled from %s) "
                                   "has parameter %s (%s %s), which %s does not hold",
                                   spec, d->name, name, b, s->path[0])
                         : rt_fail(err, errlen,
                                   "checkpoint is of a different model: this program (compiled from %s) "
                                   "has parameter %s (%s %s), which none of the %d weight files (%s, ...) holds",
                                   spec, d->name, name, b, s->n, s->path[0]);
    const rt_st_tensor *t = out->t;
    rt_st_fmt_shape(a, sizeof a, t->shape, t->nd);
    if (t->nd != nd || memcmp(t->shape, want, sizeof(int64_t) * (size_t)nd) != 0)
        return rt_fail(err, errlen,
                       "checkpoint is of a different model: %s is %s in %s but this program (compiled "
                       "from %s) needs %s (parameter %s)",
                       name, a, s->path[out->file], spec, b, d->name);
    if (t->dtype == RT_ST_OTHER)
        return rt_fail(err, errlen, "%s: tensor %s has dtype %s; F32, BF16, F16 and F64 can be loaded",
                       s->path[out->file], name, t->dtype_name);
    return true;
}

/* lm_head.weight of file f equals the embedding (after conversion): what a
 * tied model may store.  An untied model's head differs, and dropping it
 * would load a different model without a word. */
static bool ck_head_is_embed(const ck_src *s, int f, const rt_st_tensor *head) {
    int ef;
    const rt_st_tensor *emb = ck_src_find(s, "model.embed_tokens.weight", &ef);
    if (!emb || emb->nd != head->nd || memcmp(emb->shape, head->shape, sizeof(int64_t) * (size_t)head->nd) ||
        head->dtype == RT_ST_OTHER || emb->dtype == RT_ST_OTHER)
        return false;
    float *a = RT_MALLOC((size_t)head->elems * 4 + 4), *b = RT_MALLOC((size_t)head->elems * 4 + 4);
    rt_st_to_f32(head, s->buf[f] + s->st[f].data_off + head->begin, a);
    rt_st_to_f32(emb, s->buf[ef] + s->st[ef].data_off + emb->begin, b);
    bool same = memcmp(a, b, (size_t)head->elems * 4) == 0;
    free(a);
    free(b);
    return same;
}

/* A tensor of the files that no parameter claims is an error (a model with
 * biases or extra norms would otherwise load silently wrong), except
 * rotary buffers and, for a tied program, an lm_head.weight equal to the
 * embedding (transformers too ignores it then). */
static bool ck_check_extra(const rt_program *p, const ck_src *s, const ck_pick *picks, int npicks, char *err,
                           size_t errlen) {
    bool tied = rt_ckpt_tied(p);
    for (int f = 0; f < s->n; f++)
        for (int i = 0; i < s->st[f].n; i++) {
            const rt_st_tensor *t = &s->st[f].t[i];
            bool used = false;
            for (int k = 0; k < npicks && !used; k++) used = picks[k].t == t;
            size_t nl = strlen(t->name);
            bool head = tied && !strcmp(t->name, "lm_head.weight");
            bool skip = (nl >= 19 && !strcmp(t->name + nl - 19, "rotary_emb.inv_freq"));
            if (!used && head && !ck_head_is_embed(s, f, t))
                return rt_fail(err, errlen,
                               "checkpoint is of a different model: %s holds an lm_head.weight that "
                               "differs from model.embed_tokens.weight (untied embeddings), but this program "
                               "(compiled from %s) ties the output head to the embedding",
                               s->path[f], p->spec ? p->spec : "its spec");
            int first = -1;
            for (int g = 0; g < f && first < 0; g++)
                if (rt_st_find(&s->st[g], t->name)) first = g;
            if (first >= 0) /* the loader would take the first copy and never look at this one */
                return rt_fail(err, errlen,
                               "tensor %s is in two weight files, %s and %s: each tensor must be in "
                               "exactly one (a damaged or hand-edited shard set?)",
                               t->name, s->path[first], s->path[f]);
            if (!used && !skip && !head)
                return rt_fail(err, errlen,
                               "checkpoint is of a different model: %s holds tensor %s, which is not a "
                               "parameter of this program (compiled from %s)",
                               s->path[f], t->name, p->spec ? p->spec : "its spec");
        }
    return true;
}

/* Element i of F64 tensor pick->t as stored (little-endian). */
static double ck_f64_at(const ck_src *s, const ck_pick *pick, int64_t i) {
    const unsigned char *b = s->buf[pick->file] + s->st[pick->file].data_off + pick->t->begin + 8 * i;
    uint64_t u = 0;
    for (int k = 7; k >= 0; k--) u = u << 8 | b[k];
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Rank 0: no NaN or Inf in any picked tensor (weights, and moments on
 * --resume): training from one would only fail later, or silently.  The
 * values are checked after conversion to f32, as they would be loaded. */
static bool ck_check_finite(const ck_src *s, const ck_pick *picks, int n, char *err, size_t errlen) {
    for (int k = 0; k < n; k++) {
        const rt_st_tensor *t = picks[k].t;
        float *x = RT_MALLOC((size_t)t->elems * 4 + 4);
        rt_st_to_f32(t, s->buf[picks[k].file] + s->st[picks[k].file].data_off + t->begin, x);
        int64_t i = rt_first_nonfinite(x, t->elems);
        float bad = i >= 0 ? x[i] : 0;
        free(x);
        double was = i >= 0 && t->dtype == RT_ST_F64 ? ck_f64_at(s, &picks[k], i) : NAN;
        if (i >= 0 && isfinite(was)) /* finite in the file, but no float32 holds it */
            return rt_fail(err, errlen,
                           "%s: tensor %s holds %g at element %lld, outside the float32 range "
                           "(|x| <= 3.4e38) that basp trains in: refusing to train from it",
                           s->path[picks[k].file], t->name, was, (long long)i);
        if (i >= 0)
            return rt_fail(err, errlen,
                           "%s: tensor %s holds a non-finite value (%s at element %lld): refusing to "
                           "train from it",
                           s->path[picks[k].file], t->name,
                           isnan(bad) ? "nan"
                           : bad > 0  ? "inf"
                                      : "-inf",
                           (long long)i);
    }
    return true;
}

/* Rank 0: picks for every parameter (program order), then, with moments,
 * for every optimizer pair's exp_avg and exp_avg_sq (table order). */
static bool ck_match(const rt_program *p, const ck_src *s, bool moments, ck_pick *picks, int *npicks, char *err,
                     size_t errlen) {
    int n = 0;
    for (int v = 0; v < p->nvalues; v++)
        if (p->values[v].kind == RT_PARAM && !ck_pick_one(p, s, v, "", &picks[n++], err, errlen)) return false;
    for (int i = 0; moments && i < p->nopt; i++) {
        if (!ck_pick_one(p, s, p->opt[i].param, "exp_avg.", &picks[n++], err, errlen)) return false;
        if (!ck_pick_one(p, s, p->opt[i].param, "exp_avg_sq.", &picks[n++], err, errlen)) return false;
    }
    *npicks = n;
    return ck_check_extra(p, s, picks, n, err, errlen) && ck_check_finite(s, picks, n, err, errlen);
}

/* Collective: value v's layout of the picked tensor into `mine`. */
static void ck_scatter_pick(rt_ctx *rt, const ck_src *s, const ck_pick *pk, int v, float *mine) {
    const rt_value_desc *d = &rt->p->values[v];
    float *full = NULL;
    if (rt->rank == 0) {
        float *hf = RT_MALLOC((size_t)pk->t->elems * 4 + 4);
        full = RT_MALLOC((size_t)pk->t->elems * 4 + 4);
        rt_st_to_f32(pk->t, s->buf[pk->file] + s->st[pk->file].data_off + pk->t->begin, hf);
        rt_hf_map m = rt_hf_name(d->name);
        rt_hf_import(&m, d->dims, d->rank, hf, full);
        free(hf);
    }
    rt_scatter_local(rt, v, full, mine);
    free(full);
}

/* Collective: parameters (and moments) from the picks into the buffers. */
static void ck_scatter_all(rt_ctx *rt, const ck_src *s, const ck_pick *picks, bool moments) {
    const rt_program *p = rt->p;
    int k = 0;
    for (int v = 0; v < p->nvalues; v++) {
        if (p->values[v].kind != RT_PARAM) continue;
        float *mine = RT_MALLOC((size_t)p->values[v].local_elems * 4);
        ck_scatter_pick(rt, s, rt->rank == 0 ? &picks[k] : NULL, v, mine);
        rt_host_write(rt, v, mine);
        rt_watchdog_pulse();
        free(mine);
        k++;
    }
    for (int i = 0; moments && i < p->nopt; i++) {
        int v = p->opt[i].param;
        int64_t n = p->values[v].local_elems;
        float *m = RT_MALLOC((size_t)n * 4), *q = RT_MALLOC((size_t)n * 4);
        ck_scatter_pick(rt, s, rt->rank == 0 ? &picks[k] : NULL, v, m);
        ck_scatter_pick(rt, s, rt->rank == 0 ? &picks[k + 1] : NULL, v, q);
        rt_host_write_opt(rt, i, m, q);
        rt_watchdog_pulse();
        free(m);
        free(q);
        k += 2;
    }
}

/* Rank 0's verdict (and message) to every rank. */
static bool ck_verdict(rt_ctx *rt, bool ok0, char *err, size_t errlen) {
    int ok = ok0;
    RT_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
    RT_CHECK(errlen <= 0x7fffffff, "error buffer too large");
    if (!ok) RT_MPI(MPI_Bcast(err, (int)errlen, MPI_CHAR, 0, MPI_COMM_WORLD));
    return ok;
}

static int ck_npicks_max(const rt_program *p) { return p->nvalues + 2 * p->nopt + 1; }

/* ---- --init-from DIR: a Hugging Face model directory ------------------------------ */

/* Rank 0: model.safetensors, or the shards model.safetensors.index.json
 * names in its weight_map (each file once; names must stay inside dir). */
static bool ck_hf_files(const char *dir, ck_src *s, char *err, size_t errlen) {
    char p[CK_PATH], f[CK_PATH];
    struct stat st;
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    if (stat(p, &st) != 0) {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        return ck_src_add(s, p, NULL, err, errlen);
    }
    cJSON *idx = ck_read_json(p, err, errlen);
    if (!idx) return false;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    bool ok = cJSON_IsObject(wm) || rt_fail(err, errlen, "%s: no \"weight_map\" object", p);
    for (const cJSON *e = ok ? wm->child : NULL; e && ok; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !strcmp(e->valuestring, ".."))
            ok = rt_fail(err, errlen, "%s: weight_map entry %.80s is not a file name in the directory", p, e->string);
        if (!ok) break;
        snprintf(f, sizeof f, "%s/%s", dir, e->valuestring);
        int k = 0;
        while (k < s->n && strcmp(s->path[k], f)) k++;
        if (k == s->n) ok = ck_src_add(s, f, NULL, err, errlen);
        if (ok && !rt_st_find(&s->st[k], e->string))
            ok = rt_fail(err, errlen, "%s: weight_map puts %.80s in %s, which does not hold it", p, e->string, f);
    }
    cJSON_Delete(idx);
    return ok;
}

static const char *ck_dtypes(const ck_src *s, char *out, size_t n) {
    out[0] = 0;
    for (int f = 0; f < s->n; f++)
        for (int i = 0; i < s->st[f].n; i++) {
            const char *d = s->st[f].t[i].dtype_name;
            char key[16];
            snprintf(key, sizeof key, "%s ", d);
            if (!strstr(out, key) && strlen(out) + strlen(key) < n) strcat(out, key);
        }
    if (out[0]) out[strlen(out) - 1] = 0;
    return out;
}

static bool ck_resolve(const char *arg, char *out, bool *none, char *err, size_t errlen);
static bool ck_has_state(const char *dir);

/* Rank 0: --init-from dir is not a --checkpoint-dir (latest, step-*, no
 * config.json of its own), which holds checkpoints, not one model: else
 * false, naming the checkpoint to pass instead. */
static bool ck_not_root(const char *dir, char *err, size_t errlen) {
    char p[CK_PATH], step[CK_PATH], why[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (stat(p, &st) == 0 || ck_has_state(dir)) return true; /* a model, or one (damaged) checkpoint */
    bool none = true;
    if (!ck_resolve(dir, step, &none, why, sizeof why)) {
        snprintf(p, sizeof p, "%s/latest", dir);
        if (stat(p, &st) != 0) return true; /* not a checkpoint root: config.json's own error follows */
        return rt_fail(err, errlen,
                       "--init-from %s is a checkpoint directory (it holds `latest`, no config.json) "
                       "without a complete checkpoint: %s",
                       dir, why);
    }
    return rt_fail(err, errlen,
                   "--init-from %s is a checkpoint directory (latest, step-*), not one model: pass one of "
                   "its checkpoints, --init-from %s (the newest; weights only, the optimizer starts fresh), or "
                   "--resume %s to continue that run exactly",
                   dir, step, dir);
}

bool rt_hf_load_dir(rt_ctx *rt, const char *dir, char *err, size_t errlen) {
    const rt_program *p = rt->p;
    ck_src *s = rt->rank == 0 ? calloc(1, sizeof *s) : NULL;
    ck_pick *picks = RT_MALLOC(sizeof *picks * (size_t)ck_npicks_max(p));
    int npicks = 0;
    bool ok = true;
    if (rt->rank == 0) {
        RT_CHECK(s, "out of memory");
        char cfg[CK_PATH];
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        /* config.json first: it names every field that differs (shapes,
         * RoPE, norm eps, biases, q/k norms), and tells apart what the
         * tensors cannot (4 heads of 16 against 8 of 8, RoPE); then the
         * tensors, the first one that differs named. */
        cJSON *c = ck_not_root(dir, err, errlen) ? ck_read_json(cfg, err, errlen) : NULL;
        ok = c && rt_ckpt_check_config(p, cfg, c, err, errlen) && ck_hf_files(dir, s, err, errlen) &&
             ck_match(p, s, false, picks, &npicks, err, errlen);
        cJSON_Delete(c);
    }
    if (ck_verdict(rt, ok, err, errlen)) {
        ck_scatter_all(rt, s, picks, false);
        if (rt->rank == 0) {
            char dt[64];
            printf("loaded %d parameters from %s (Hugging Face safetensors, %d file(s), %s; the optimizer state "
                   "starts fresh)\n",
                   npicks, dir, s->n, ck_dtypes(s, dt, sizeof dt));
            fflush(stdout);
        }
    } else {
        ok = false;
    }
    if (s) ck_src_free(s);
    free(picks);
    return ok;
}

/* ---- --resume ------------------------------------------------------------------------ */

static bool ck_has_state(const char *dir) {
    char p[CK_PATH];
    struct stat st;
    return snprintf(p, sizeof p, "%s/state.json", dir) < (int)sizeof p && stat(p, &st) == 0;
}

/* Rank 0: the newest step-N directory of dir holding a state.json (-1: none). */
static long long ck_newest(const char *dir) {
    DIR *d = opendir(dir);
    long long best = -1, s;
    char p[CK_PATH];
    struct dirent *e;
    while (d && (e = readdir(d)))
        if ((s = rt_ckpt_step_of(e->d_name)) > best) { /* exactly step-%08lld, as the writer names them */
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (ck_has_state(p)) best = s;
        }
    if (d) closedir(d);
    return best;
}

/* Rank 0: the step directory `arg` names — itself when it holds a
 * state.json, else the one its `latest` names, else its newest complete
 * step-* (a crash between publishing a step and updating `latest`).
 * *none: there is no checkpoint at all. */
static bool ck_resolve(const char *arg, char *out, bool *none, char *err, size_t errlen) {
    *none = false;
    if (ck_has_state(arg)) {
        snprintf(out, CK_PATH, "%s", arg);
        return true;
    }
    char name[256] = "";
    int got = rt_ckpt_latest_name(arg, name, sizeof name, err, errlen);
    if (got < 0) return false;
    if (got > 0) {
        snprintf(out, CK_PATH, "%s/%s", arg, name);
        if (name[0] && ck_has_state(out)) return true;
    }
    long long s = ck_newest(arg);
    if (s >= 0) {
        snprintf(out, CK_PATH, "%s/step-%08lld", arg, s);
        return true;
    }
    *none = true;
    return rt_fail(err, errlen,
                   "%s: no checkpoint to resume from (no state.json, no `latest`, no step-* directory "
                   "with a state.json)",
                   arg);
}

/* Rank 0: step directory dir is undamaged: its state.json parses and
 * every file it lists has the recorded size and checksum. */
static bool ck_intact(const char *dir) {
    char p[CK_PATH], err[512];
    if (snprintf(p, sizeof p, "%s/state.json", dir) >= (int)sizeof p) return false;
    cJSON *st = ck_read_json(p, err, sizeof err);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(st, "files");
    bool ok = cJSON_IsObject(files) && files->child;
    for (const cJSON *e = ok ? files->child : NULL; ok && e; e = e->next) {
        unsigned char *b = NULL;
        int64_t len = 0;
        ok = snprintf(p, sizeof p, "%s/%s", dir, e->string) < (int)sizeof p && !strchr(e->string, '/') &&
             rt_read_file(p, &b, &len, err, sizeof err) && ck_verify(p, b, len, e, err, sizeof err);
        free(b);
    }
    cJSON_Delete(st);
    return ok;
}

/* Rank 0: --resume DIR took the checkpoint `bad` and found it damaged:
 * err gets the newest older step-* of DIR that is intact, which the user
 * can pass instead (never taken silently: the run would train again the
 * steps after it). */
static int ck_newest_first(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x < y) - (x > y);
}

static void ck_point_older(const char *where, const char *bad, char *err, size_t errlen) {
    long long from = -1, s;
    const char *tail = strrchr(bad, '/');
    if (!tail || sscanf(tail + 1, "step-%lld", &from) != 1) return;
    DIR *d = opendir(where);
    long long *steps = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if ((s = rt_ckpt_step_of(e->d_name)) >= 0 && s < from) {
            if (n == cap) steps = realloc(steps, sizeof *steps * (size_t)(cap = cap ? 2 * cap : 16));
            RT_CHECK(steps, "out of memory");
            steps[n++] = s;
        }
    if (d) closedir(d);
    size_t k = strlen(err);
    if (n) qsort(steps, (size_t)n, sizeof *steps, ck_newest_first);
    for (int i = 0; i < n; i++) {
        char p[CK_PATH];
        snprintf(p, sizeof p, "%s/step-%08lld", where, steps[i]);
        if (ck_has_state(p) && ck_intact(p)) {
            snprintf(err + k, errlen - k, "; the older checkpoint %s is intact: --resume %s continues from it", p, p);
            free(steps);
            return;
        }
    }
    snprintf(err + k, errlen - k, "; %s holds no older intact checkpoint", where);
    free(steps);
}

/* Rank 0: state.json's own fields; step and seed out. */
static bool ck_state_fields(const char *path, const cJSON *st, int64_t *step, int64_t *seed, char *err, size_t errlen) {
    const cJSON *fm = cJSON_GetObjectItemCaseSensitive(st, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(st, "version");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(st, "step");
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(st, "seed");
    if (!cJSON_IsString(fm) || strcmp(fm->valuestring, "basp-checkpoint"))
        return rt_fail(err, errlen, "%s: not a basp checkpoint (no \"format\": \"basp-checkpoint\")", path);
    if (!cJSON_IsNumber(ver) || ver->valuedouble != RT_CKPT_VERSION)
        return rt_fail(err, errlen, "%s: checkpoint version %g; this program reads version %d", path,
                       cJSON_IsNumber(ver) ? ver->valuedouble : -1.0, RT_CKPT_VERSION);
    char *end = NULL;
    if (cJSON_IsString(sd)) *seed = strtoll(sd->valuestring, &end, 10);
    if (!cJSON_IsNumber(sp) || !(sp->valuedouble >= 0 && sp->valuedouble <= 1e9) ||
        sp->valuedouble != floor(sp->valuedouble) || !end || end == sd->valuestring || *end)
        return rt_fail(err, errlen, "%s: damaged: no valid step or seed", path);
    *step = (int64_t)sp->valuedouble;
    return true;
}

/* Rank 0: everything about checkpoint `dir`, before any buffer changes. */
static bool ck_resume_check(rt_ctx *rt, const char *dir, ck_src *s, ck_pick *picks, int *npicks, int64_t ss[2],
                            char *err, size_t errlen) {
    char p[CK_PATH];
    snprintf(p, sizeof p, "%s/state.json", dir);
    cJSON *st = ck_read_json(p, err, errlen);
    bool ok = st && ck_state_fields(p, st, &ss[0], &ss[1], err, errlen);
    const cJSON *files = ok ? cJSON_GetObjectItemCaseSensitive(st, "files") : NULL;
    const char *names[3] = {"config.json", "model.safetensors", "optimizer.safetensors"};
    for (int i = 0; ok && i < 3; i++)
        if (!cJSON_GetObjectItemCaseSensitive(files, names[i]))
            ok = rt_fail(err, errlen, "%s: damaged: lists no %s", p, names[i]);
    if (ok) { /* config.json: checksum, then every field against the program (see rt_hf_load_dir) */
        unsigned char *b = NULL;
        int64_t len = 0;
        snprintf(p, sizeof p, "%s/config.json", dir);
        ok = rt_read_file(p, &b, &len, err, errlen) &&
             ck_verify(p, b, len, cJSON_GetObjectItemCaseSensitive(files, names[0]), err, errlen);
        cJSON *c = ok ? cJSON_ParseWithLength((const char *)b, (size_t)len) : NULL;
        if (ok && !cJSON_IsObject(c)) ok = rt_fail(err, errlen, "%s: not a JSON object (damaged?)", p);
        ok = ok && ck_json_unique(p, c, err, errlen) && rt_ckpt_check_config(rt->p, p, c, err, errlen);
        cJSON_Delete(c);
        free(b);
    }
    for (int i = 1; ok && i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        ok = ck_src_add(s, p, cJSON_GetObjectItemCaseSensitive(files, names[i]), err, errlen);
    }
    ok = ok && ck_match(rt->p, s, true, picks, npicks, err, errlen);
    if (ok) rt_ckpt_check_data(rt, st);
    cJSON_Delete(st);
    return ok;
}

/* Rank 0: checkpoint `dir` is step `step` of --checkpoint-dir, so that the
 * messages naming "the last good checkpoint" there name a real directory
 * (a run may resume from one directory and save into another). */
static bool ck_is_own(const rt_ctx *rt, const char *dir, int64_t step) {
    char own[CK_PATH];
    struct stat a, b;
    return rt->opt.ckpt_dir &&
           snprintf(own, sizeof own, "%s/step-%08lld", rt->opt.ckpt_dir, (long long)step) < (int)sizeof own &&
           stat(own, &a) == 0 && stat(dir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Rank 0: --resume found nothing saved in `where`: what the run starts from. */
static void ck_say_fresh(const char *where, const char *init_from) {
    if (init_from)
        printf("resume: no checkpoint in %s yet: starting from the weights of --init-from %s (step 0)\n", where,
               init_from);
    else
        printf("resume: no checkpoint in %s yet: starting from step 0\n", where);
    fflush(stdout);
}

bool rt_ckpt_resume(rt_ctx *rt, const char *arg, char *err, size_t errlen) {
    const rt_program *p = rt->p;
    const char *where = *arg ? arg : rt->opt.ckpt_dir;
    char dir[CK_PATH] = "";
    ck_src *s = rt->rank == 0 ? calloc(1, sizeof *s) : NULL;
    ck_pick *picks = RT_MALLOC(sizeof *picks * (size_t)ck_npicks_max(p));
    int npicks = 0, fresh = 0;
    int64_t ss[3] = {0, 0, 0}; /* step, seed, checkpoint in --checkpoint-dir */
    bool ok = true;
    if (rt->rank == 0) {
        RT_CHECK(s, "out of memory");
        bool none;
        ok = ck_resolve(where, dir, &none, err, errlen);
        /* `--resume` alone in a job that may be the first of a series:
         * nothing saved yet means start from the beginning. */
        fresh = !ok && none && !*arg;
        if (fresh) ck_say_fresh(where, rt->opt.init_from);
        if (ok) ok = ck_resume_check(rt, dir, s, picks, &npicks, ss, err, errlen);
        if (!ok && !fresh && dir[0] && strcmp(dir, where)) ck_point_older(where, dir, err, errlen);
        if (ok) ok = rt_ckpt_dir_adopt(rt->opt.ckpt_dir, dir, err, errlen);
        if (ok) ss[2] = ck_is_own(rt, dir, ss[0]);
        if (ok && rt->opt.init_from)
            printf("resume: %s holds a checkpoint: continuing from it; --init-from %s is not used\n", where,
                   rt->opt.init_from);
    }
    RT_MPI(MPI_Bcast(&fresh, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (fresh) {
        /* --init-from with --resume: those weights, unless a checkpoint exists. */
        if (rt->opt.init_from)
            ok = rt_load_params(rt, rt->opt.init_from, err, errlen);
        else
            rt_init_params(rt, (uint64_t)rt->opt.seed), ok = true;
    } else if (ck_verdict(rt, ok, err, errlen)) {
        RT_MPI(MPI_Bcast(ss, 3, MPI_INT64_T, 0, MPI_COMM_WORLD));
        ck_scatter_all(rt, s, picks, true);
        rt->start_step = ss[0];
        rt->saved_step = ss[2] ? ss[0] : 0;
        /* The checkpoint's seed wins (the batch sampler must continue the
         * interrupted run's sequence): say so when --seed asked otherwise. */
        if (rt->rank == 0 && rt_option_given("--seed") && rt->opt.seed != ss[1])
            fprintf(stderr,
                    "note: --seed %lld is ignored: the checkpoint's seed %lld wins (it continues the "
                    "interrupted run's batches)\n",
                    (long long)rt->opt.seed, (long long)ss[1]);
        rt->opt.seed = ss[1];
        if (rt->rank == 0) {
            printf("resumed from %s: step %lld, seed %lld (%d parameters and the moments of %d)\n", dir,
                   (long long)ss[0], (long long)ss[1], npicks - 2 * p->nopt, p->nopt);
            fflush(stdout);
        }
    } else {
        ok = false;
    }
    if (s) ck_src_free(s);
    free(picks);
    return ok;
}
