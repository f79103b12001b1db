/* rt_ckpt.c — writing checkpoints (--checkpoint-dir, --save-every).
 *
 * A checkpoint is a directory DIR/step-NNNNNNNN (NNNNNNNN = completed steps):
 *   model.safetensors      every parameter, full fp32, Hugging Face names and
 *                          layout (linear weights [out, in], rt_hf.c)
 *   optimizer.safetensors  AdamW moments, "exp_avg.<name>" / "exp_avg_sq.<name>",
 *                          full fp32, the same names and layout
 *   config.json            a Hugging Face config of the model (Llama, Qwen2 with
 *                          q/k/v biases, Qwen3 with q/k norms), so that the
 *                          directory loads in transformers and with --init-from
 *   state.json             step, seed, learning rate, the data's fingerprint,
 *                          the layout that wrote it, and the size and FNV-1a-64
 *                          checksum of each file above (verified on load)
 *   lineage                the id of the training run that wrote it
 *                          (rt_ckpt_dir.c: what pruning may remove)
 * and DIR/latest holds the name of the newest complete one.
 *
 * Tensors are consolidated (gathered to rank 0 from the shards of any ZeRO
 * stage), so a checkpoint is independent of the layout: a run of another
 * world size, ZeRO stage or batch-aware grouping re-shards it on load.
 *
 * Atomicity: everything is written into step-NNNNNNNN.tmp, each file is
 * fsynced, the directory is fsynced, then renamed to step-NNNNNNNN and the
 * parent fsynced; only then is `latest` replaced (latest.tmp, fsync,
 * rename, fsync the parent).  A crash at any point leaves either the new
 * complete checkpoint or the previous one reachable, never a half-written
 * one under a final name.  The reader (rt_ckpt_load.c) also falls back to
 * the newest complete step-* directory when `latest` is missing or points
 * nowhere.
 *
 * A failure after the rename (syncing the parent, `latest`) withdraws the
 * new directory again: a save is reported as done exactly when `latest`
 * names it, so the run's report, `latest` and what --resume takes agree
 * (ck_withdraw).
 *
 * Ownership: rank 0 alone writes, holding DIR/lock for the run (rt_paths.c);
 * the temporary directory is step-NNNNNNNN.<host-pid>.tmp, and a save
 * removes only its own and those of gone processes of this host. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/rt_backend.h"
#include "../data/rt_data.h"
#include "../obs/rt_obs.h"
#include "rt_chunk.h"
#include "rt_ckpt.h"
#include "rt_safetensors.h"

enum { CK_PATH = 4096 };

/* One output file of rank 0: checksum and size as written, the first error. */
typedef struct ck_out {
    FILE *f;
    char path[CK_PATH];
    uint64_t fnv, bytes;
    int err; /* errno of the first failure, 0 if none */
} ck_out;

static void ck_open(ck_out *o, const char *dir, const char *name) {
    RT_CHECK(snprintf(o->path, sizeof o->path, "%s/%s", dir, name) < (int)sizeof o->path, "path too long: %s", dir);
    o->fnv = RT_FNV64_INIT;
    o->bytes = 0;
    o->f = fopen(o->path, "wb");
    o->err = o->f ? 0 : errno;
}

static void ck_write(ck_out *o, const void *p, size_t n) {
    if (o->err || !n) return;
    if (fwrite(p, 1, n, o->f) != n) {
        o->err = errno ? errno : EIO;
        return;
    }
    o->fnv = rt_fnv64(o->fnv, p, n);
    o->bytes += n;
    rt_watchdog_pulse(); /* each piece (at most a chunk): a large tensor on a slow disk */
}

/* The step being saved, for the heartbeats of rank 0's file work: a sync
 * or a slow disk must not look like a hung step to the watchdog. */
static int64_t ck_saving_step;

static void ck_beat(void) { rt_watchdog_beat("saving a checkpoint", ck_saving_step); }

/* Flush, fsync and close: only a file whose data reached the disk counts. */
static bool ck_close(ck_out *o) {
    if (o->f) {
        rt_watchdog_pulse();
        if (!o->err && (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0)) o->err = errno ? errno : EIO;
        if (fclose(o->f) != 0 && !o->err) o->err = errno ? errno : EIO;
        o->f = NULL;
        ck_beat();
    }
    return !o->err;
}

static bool ck_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return false;
    bool ok = fsync(fd) == 0;
    close(fd);
    ck_beat();
    return ok;
}

/* Removes a checkpoint directory (its files, then itself); best effort,
 * never following a link (rt_ckpt_dir.c). */
static void ck_remove_tree(const char *dir) { rt_ckpt_remove_tree(dir); }

static bool ck_mkdirs(const char *dir) {
    char p[CK_PATH];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST) return false;
            *s = '/';
        }
    return mkdir(p, 0777) == 0 || errno == EEXIST;
}

/* BASP_TEST_SAVE_DELAY=MS: rank 0 sleeps this long after each file of a
 * save, so that the crash tests can kill a run in the middle of one. */
static void ck_test_delay(void) {
    const char *s = getenv("BASP_TEST_SAVE_DELAY");
    long ms = s ? atol(s) : 0;
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    ck_beat();
}

static int64_t ck_elems(const rt_value_desc *d) {
    int64_t n = 1;
    for (int k = 0; k < d->rank; k++) n *= d->dims[k];
    return n;
}

/* The safetensors header of `n` tensors: values vals[i] under prefix + their
 * Hugging Face names, each listed `per` times with the prefixes in pfx. */
static uint8_t *ck_header(const rt_program *p, const int *vals, int n, const char *const *pfx, int per,
                          const char *meta, size_t *len) {
    int total = n * per;
    char **names = RT_MALLOC(sizeof(char *) * (size_t)(total ? total : 1));
    int *nd = RT_MALLOC(sizeof(int) * (size_t)(total ? total : 1));
    int64_t(*shape)[RT_ST_MAX_DIMS] = RT_MALLOC(sizeof *shape * (size_t)(total ? total : 1));
    for (int i = 0; i < n; i++) {
        const rt_value_desc *d = &p->values[vals[i]];
        rt_hf_map m = rt_hf_name(d->name);
        for (int k = 0; k < per; k++) {
            int j = i * per + k;
            names[j] = RT_MALLOC(strlen(pfx[k]) + strlen(m.name) + 1);
            sprintf(names[j], "%s%s", pfx[k], m.name);
            nd[j] = rt_hf_shape(&m, d->dims, d->rank, shape[j]);
        }
    }
    uint8_t *h =
        rt_st_header_f32(total, (const char *const *)names, nd, (const int64_t(*)[RT_ST_MAX_DIMS])shape, meta, len);
    RT_CHECK(h, "checkpoint header: tensor names too long");
    for (int j = 0; j < total; j++) free(names[j]);
    free(names);
    free(nd);
    free(shape);
    return h;
}

/* Collective: gathers `mine` (value v's layout) and, on rank 0, writes it
 * in Hugging Face layout.  The gather is chunked (rt_gather_local); the
 * export is written in pieces of at most one chunk of rows, so rank 0 holds
 * the tensor once plus one piece, never a second copy or the whole file. */
static void ck_put(rt_ctx *rt, ck_out *o, int v, const float *mine) {
    const rt_value_desc *d = &rt->p->values[v];
    int64_t n = ck_elems(d);
    float *full = rt->rank == 0 ? RT_MALLOC((size_t)n * 4) : NULL;
    rt_gather_local(rt, v, mine, full);
    if (rt->rank == 0) {
        rt_hf_map m = rt_hf_name(d->name);
        int64_t chunk = rt_chunk_per_rank(1, rt_chunk_test_override());
        int64_t hrows = 0, hcols = 0; /* HF layout [hrows, hcols] = transpose of ours */
        bool tr = rt_hf_export_dims(&m, d->dims, d->rank, &hrows, &hcols);
        if (!tr) {
            for (int64_t s = 0; s < n; s += chunk) /* little-endian hosts only, as everywhere in the runtime */
                ck_write(o, full + s, (size_t)(n - s < chunk ? n - s : chunk) * 4);
        } else {
            int64_t rows_per = hcols > 0 && chunk / hcols > 0 ? chunk / hcols : 1;
            if (rows_per > hrows)
                rows_per = hrows > 0 ? hrows : 1; /* a small tensor: a piece its size, not a chunk's */
            float *piece = RT_MALLOC((size_t)(rows_per * hcols > 0 ? rows_per * hcols : 1) * 4);
            for (int64_t r0 = 0; r0 < hrows; r0 += rows_per) {
                int64_t nr = hrows - r0 < rows_per ? hrows - r0 : rows_per;
                for (int64_t i = 0; i < nr; i++) /* HF row r0 + i is our column r0 + i */
                    for (int64_t j = 0; j < hcols; j++) piece[i * hcols + j] = full[j * hrows + r0 + i];
                ck_write(o, piece, (size_t)(nr * hcols) * 4);
            }
            free(piece);
        }
    }
    free(full);
}

/* Collective: model.safetensors (params) or optimizer.safetensors (moments). */
static void ck_write_tensors(rt_ctx *rt, ck_out *o, bool moments, int64_t step) {
    const rt_program *p = rt->p;
    int *vals = RT_MALLOC(sizeof(int) * (size_t)(p->nvalues + p->nopt + 1));
    int n = 0;
    if (moments)
        for (int i = 0; i < p->nopt; i++) vals[n++] = p->opt[i].param;
    else
        for (int v = 0; v < p->nvalues; v++)
            if (p->values[v].kind == RT_PARAM) vals[n++] = v;
    if (rt->rank == 0) {
        static const char *const none[] = {""}, *const mv[] = {"exp_avg.", "exp_avg_sq."};
        /* No step here: state.json has it, and equal tensors give equal files. */
        const char *meta = "{\"format\":\"pt\",\"producer\":\"basp\"}";
        size_t len;
        uint8_t *h = ck_header(p, vals, n, moments ? mv : none, moments ? 2 : 1, meta, &len);
        ck_write(o, h, len);
        free(h);
    }
    for (int i = 0; i < n; i++) {
        int64_t le = p->values[vals[i]].local_elems;
        float *a = RT_MALLOC((size_t)le * 4), *b = moments ? RT_MALLOC((size_t)le * 4) : NULL;
        rt_watchdog_beat("saving a checkpoint", step);
        if (moments)
            rt_host_read_opt(rt, i, a, b);
        else
            rt_host_read(rt, vals[i], a);
        ck_put(rt, o, vals[i], a);
        if (moments) ck_put(rt, o, vals[i], b);
        free(a);
        free(b);
    }
    free(vals);
}

/* The Hugging Face config of the model: a LlamaConfig, or a Qwen2Config
 * (q/k/v biases) or Qwen3Config (q/k norms), with every field the reader
 * (rt_ckpt_load.c) compares, so that transformers loads the directory as the
 * same model and --resume / --init-from can check it.  RoPE is written both
 * ways: rope_theta + rope_scaling (transformers 4, which 5 still converts)
 * and rope_parameters (transformers 5's own); they agree.
 *
 * qkv_bias with qk_norm has no transformers architecture of its own: it is
 * written as Qwen3 with attention_bias true, whose o_proj bias is then
 * missing from model.safetensors (transformers initialises a missing bias
 * to zero, which is this model, with a warning). */
static cJSON *ck_hf_config(const rt_program *p) {
    const char *type = p->qk_norm ? "qwen3" : p->qkv_bias ? "qwen2" : "llama";
    const char *arch = p->qk_norm ? "Qwen3ForCausalLM" : p->qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(c, "architectures"), cJSON_CreateString(arch));
    cJSON_AddStringToObject(c, "model_type", type);
    cJSON_AddNumberToObject(c, "hidden_size", (double)p->hidden);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)p->ffn);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)p->layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)p->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)p->kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", (double)p->head_dim);
    cJSON_AddNumberToObject(c, "vocab_size", (double)p->vocab);
    cJSON_AddNumberToObject(c, "max_position_embeddings", (double)p->seq_len);
    cJSON_AddNumberToObject(c, "rms_norm_eps", p->norm_eps);
    bool tied = true;
    for (int v = 0; v < p->nvalues; v++)
        if (p->values[v].kind == RT_PARAM && !strcmp(p->values[v].name, "lm_head")) tied = false;
    cJSON_AddBoolToObject(c, "tie_word_embeddings", tied);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "attention_dropout", 0);
    if (!p->qk_norm && !p->qkv_bias) { /* Qwen2Config and Qwen3Config have no mlp_bias */
        cJSON_AddBoolToObject(c, "attention_bias", false);
        cJSON_AddBoolToObject(c, "mlp_bias", false);
    } else if (p->qk_norm) {
        cJSON_AddBoolToObject(c, "attention_bias", p->qkv_bias != 0);
    }
    if (p->qk_norm || p->qkv_bias) { /* Qwen: full attention in every layer */
        cJSON_AddBoolToObject(c, "use_sliding_window", false);
        cJSON_AddNullToObject(c, "sliding_window");
        cJSON_AddNumberToObject(c, "max_window_layers", (double)p->layers);
    }
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    cJSON_AddNumberToObject(c, "rope_theta", p->rope_theta);
    cJSON *rp = cJSON_CreateObject();
    cJSON_AddStringToObject(rp, "rope_type", p->rope_scaling == RT_ROPE_LLAMA3 ? "llama3" : "default");
    cJSON_AddNumberToObject(rp, "rope_theta", p->rope_theta);
    if (p->rope_scaling == RT_ROPE_LLAMA3) {
        cJSON_AddNumberToObject(rp, "factor", p->rope_factor);
        cJSON_AddNumberToObject(rp, "low_freq_factor", p->rope_low_freq_factor);
        cJSON_AddNumberToObject(rp, "high_freq_factor", p->rope_high_freq_factor);
        cJSON_AddNumberToObject(rp, "original_max_position_embeddings", (double)p->rope_original_max_pos);
        cJSON *r = cJSON_Duplicate(rp, true);
        cJSON_DeleteItemFromObjectCaseSensitive(r, "rope_theta");
        cJSON_AddItemToObject(c, "rope_scaling", r);
    } else {
        cJSON_AddNullToObject(c, "rope_scaling");
    }
    cJSON_AddItemToObject(c, "rope_parameters", rp);
    return c;
}

/* FNV-1a-64 of the tokens as little-endian int32 (whatever width the file
 * stores): a resumed run checks it reads the same data.  In chunks, handing
 * each chunk's pages back, so that hashing a large corpus keeps the
 * resident set small. */
uint64_t rt_ckpt_data_fnv(const rt_ctx *rt) {
    static const void *done_for;
    static uint64_t h;
    if (done_for == rt->train.shard && done_for) return h;
    enum { CHUNK = 1 << 16 };
    static uint8_t le[4 * CHUNK];
    h = RT_FNV64_INIT;
    for (int64_t i = 0; i < rt->train.ntokens; i += CHUNK) {
        int64_t n = rt->train.ntokens - i < CHUNK ? rt->train.ntokens - i : CHUNK;
        for (int64_t j = 0; j < n; j++) {
            uint32_t v = (uint32_t)rt_corpus_token(&rt->train, i + j);
            le[4 * j] = (uint8_t)v, le[4 * j + 1] = (uint8_t)(v >> 8), le[4 * j + 2] = (uint8_t)(v >> 16),
                   le[4 * j + 3] = (uint8_t)(v >> 24);
        }
        h = rt_fnv64(h, le, (size_t)n * 4);
        rt_watchdog_pulse(); /* a large corpus takes a while, on save and on resume */
        if ((i / CHUNK) % 16 == 15) rt_corpus_release(&rt->train, i - 15 * (int64_t)CHUNK, i + n);
    }
    rt_corpus_release(&rt->train, 0, rt->train.ntokens);
    done_for = rt->train.shard;
    return h;
}

static void ck_hex(char *out, uint64_t x) { sprintf(out, "%016llx", (unsigned long long)x); }

static void ck_add_file(cJSON *files, const ck_out *o, const char *name) {
    char hex[17];
    ck_hex(hex, o->fnv);
    cJSON *e = cJSON_AddObjectToObject(files, name);
    cJSON_AddNumberToObject(e, "bytes", (double)o->bytes);
    cJSON_AddStringToObject(e, "fnv64", hex);
}

/* state.json: what a resume needs besides the tensors, and the checksums. */
static cJSON *ck_state(const rt_ctx *rt, int64_t step, const ck_out *outs, int nout) {
    const rt_program *p = rt->p;
    char buf[32];
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "format", "basp-checkpoint");
    cJSON_AddNumberToObject(s, "version", RT_CKPT_VERSION);
    cJSON_AddStringToObject(s, "model", p->model);
    cJSON_AddNumberToObject(s, "step", (double)step);
    snprintf(buf, sizeof buf, "%lld", (long long)rt->opt.seed); /* int64: exact as a string */
    cJSON_AddStringToObject(s, "seed", buf);
    cJSON_AddNumberToObject(s, "lr", rt->opt.lr); /* the base rate; the schedule gives each step's */
    const rt_optim_desc *o = &rt->opt.optim;
    cJSON *opt = cJSON_AddObjectToObject(s, "optimizer");
    cJSON_AddStringToObject(opt, "name", "adamw");
    cJSON_AddStringToObject(opt, "schedule", rt_schedule_name(o->schedule));
    /* The run's length shapes a decaying schedule only (a constant rate's
     * checkpoint must not depend on --steps: the 3-step run's step 3 equals
     * the 6-step run's byte for byte). */
    if (o->schedule != RT_SCHED_CONSTANT) cJSON_AddNumberToObject(opt, "steps", (double)rt->opt.steps);
    for (int i = 0; i < RT_NOPTIM_FIELDS; i++)
        cJSON_AddNumberToObject(opt, rt_optim_fields[i].key, rt_optim_get(o, &rt_optim_fields[i]));
    rt_ckpt_state_data(rt, cJSON_AddObjectToObject(s, "data")); /* rt_ckpt_state.c */
    cJSON *by = cJSON_AddObjectToObject(s, "saved_by");
    cJSON_AddNumberToObject(by, "world", p->world);
    cJSON_AddNumberToObject(by, "zero", p->zero);
    cJSON_AddNumberToObject(by, "batch_groups", p->batch_groups);
    cJSON_AddNumberToObject(by, "sp_size", p->sp_size);
    cJSON *files = cJSON_AddObjectToObject(s, "files");
    for (int i = 0; i < nout; i++) ck_add_file(files, &outs[i], strrchr(outs[i].path, '/') + 1);
    return s;
}

static void ck_write_json(ck_out *o, const char *dir, const char *name, cJSON *j) {
    ck_open(o, dir, name);
    char *text = cJSON_Print(j);
    RT_CHECK(text, "out of memory formatting %s", name);
    ck_write(o, text, strlen(text));
    ck_write(o, "\n", 1);
    cJSON_free(text);
    ck_close(o);
}

/* Rank 0: the name of the step directory and of its temporary twin, which
 * carries this run's identity (step-N.<host-pid>.tmp): the cleanup of a
 * save touches no other run's. */
static void ck_names(const rt_ctx *rt, int64_t step, char *fin, char *tmp) {
    int n = snprintf(fin, CK_PATH, "%s/step-%08lld", rt->opt.ckpt_dir, (long long)step);
    RT_CHECK(n < CK_PATH - 8 && snprintf(tmp, CK_PATH, "%s.%s.tmp", fin, rt_paths_run_tag()) < CK_PATH,
             "path too long: %s", fin);
}

/* Rank 0: the first failed file as a message; false. */
static bool ck_failed(const ck_out *outs, int n, char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        if (outs[i].err) {
            snprintf(err, errlen, "cannot write %s: %s", outs[i].path, strerror(outs[i].err));
            return false;
        }
    return true;
}

/* Rank 0: `latest` := name, atomically (write latest.tmp, fsync, rename). */
static bool ck_set_latest(const char *dir, const char *name, int64_t step, char *err, size_t errlen) {
    ck_out o;
    ck_open(&o, dir, "latest.tmp");
    ck_write(&o, name, strlen(name));
    ck_write(&o, "\n", 1);
    if (!o.err && rt_test_fail_at("latest", step)) o.err = ENOSPC;
    char to[CK_PATH];
    snprintf(to, sizeof to, "%s/latest", dir);
    if (!ck_close(&o) || rename(o.path, to) != 0 || !ck_fsync_dir(dir)) {
        snprintf(err, errlen, "cannot update %s: %s", to, strerror(o.err ? o.err : errno));
        unlink(o.path);
        return false;
    }
    return true;
}

/* Rank 0: tmp → fin.  A checkpoint of the same step may exist (a run that
 * resumed from an earlier one); it is replaced only once tmp is complete,
 * and kept as `old` (*had) until `latest` names the new one. */
static bool ck_publish(const char *tmp, const char *fin, const char *old, bool *had, char *err, size_t errlen) {
    struct stat st;
    *had = lstat(fin, &st) == 0; /* a link is moved aside (and later removed) as a link */
    if (*had) {
        ck_remove_tree(old);
        if (rename(fin, old) != 0) {
            snprintf(err, errlen, "cannot replace %s: %s", fin, strerror(errno));
            return false;
        }
    }
    if (rename(tmp, fin) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, fin, strerror(errno));
        if (*had) rename(old, fin); /* the previous checkpoint back under its name */
        return false;
    }
    return true;
}

int rt_ckpt_latest_name(const char *dir, char *name, size_t n, char *err, size_t errlen) {
    char p[CK_PATH];
    struct stat st;
    name[0] = 0;
    snprintf(p, sizeof p, "%s/latest", dir);
    if (stat(p, &st) != 0) return 0;
    unsigned char *b;
    int64_t len;
    if (!rt_read_file(p, &b, &len, err, errlen)) return -1; /* a FIFO is refused, not waited on */
    snprintf(name, n, "%.*s", (int)((size_t)len < n ? (size_t)len : n - 1), (const char *)b);
    free(b);
    name[strcspn(name, "\r\n/")] = 0;
    return 1;
}

/* Rank 0: fin was published but `latest` could not follow (err says why).
 * The run reports the save as failed, so fin goes back to tmp (removed by
 * the caller) and a replaced checkpoint of the same step returns: what the
 * run said, what `latest` names and what --resume takes agree.  When the
 * rename back fails, fin is removed, state.json first (--resume's fallback
 * takes only a step-* with a state.json). */
static void ck_withdraw(const rt_ctx *rt, const char *tmp, const char *fin, const char *old, bool had, char *err,
                        size_t errlen) {
    if (rename(fin, tmp) != 0) ck_remove_tree(fin);
    if (had && rename(old, fin) != 0) ck_remove_tree(old);
    ck_fsync_dir(rt->opt.ckpt_dir);
    char name[256], why[256];
    rt_ckpt_latest_name(rt->opt.ckpt_dir, name, sizeof name, why, sizeof why);
    size_t k = strlen(err);
    if (name[0])
        snprintf(err + k, errlen - k, " (%s withdrawn: `latest` still names %s, which --resume takes)",
                 strrchr(fin, '/') + 1, name);
    else
        snprintf(err + k, errlen - k, " (%s withdrawn: no `latest` yet, --resume starts from step 0)",
                 strrchr(fin, '/') + 1);
}

/* Rank 0: removes this run's step-*.tmp directories, and those of a run of
 * this host that is gone (a run that died while saving step N and was
 * resumed with another --save-every never writes N again), with a note.
 * Another run's, or one without an identity, is left alone (said once). */
static void ck_remove_stale(const char *dir) {
    static bool told;
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[CK_PATH], who[CK_PATH];
    while (d && (e = readdir(d))) {
        rt_tmp_owner own = rt_paths_tmp_owner(e->d_name, who, sizeof who);
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (own == RT_TMP_MINE || own == RT_TMP_STALE) ck_remove_tree(p);
        if (own == RT_TMP_STALE) printf("checkpoint: removed %s, left by %s, which is no longer running\n", p, who);
        if (own == RT_TMP_OTHER && !told)
            printf("checkpoint: note: %s is not this run's (its writer may still be running): left alone\n", p);
        told |= own == RT_TMP_OTHER;
    }
    if (d) closedir(d);
}

/* Rank 0, before the collective part: a fresh .tmp directory. */
static bool ck_begin(const rt_ctx *rt, const char *tmp, char *err, size_t errlen) {
    if (!ck_mkdirs(rt->opt.ckpt_dir)) {
        snprintf(err, errlen, "cannot create checkpoint directory %s: %s", rt->opt.ckpt_dir, strerror(errno));
        return false;
    }
    ck_remove_stale(rt->opt.ckpt_dir); /* left by a run that died while saving */
    if (mkdir(tmp, 0777) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return false;
    }
    return true;
}

/* Rank 0, after the tensors: the JSON files, then publish and `latest`. */
static bool ck_finish(rt_ctx *rt, int64_t step, ck_out *outs, const char *tmp, const char *fin, char *err,
                      size_t errlen) {
    cJSON *cfg = ck_hf_config(rt->p);
    ck_write_json(&outs[2], tmp, "config.json", cfg);
    cJSON_Delete(cfg);
    /* The run's lineage (rt_ckpt_dir.c): not listed in state.json, so that
     * equal training gives byte-identical checkpoint files. */
    const char *id = rt_ckpt_lineage();
    ck_open(&outs[3], tmp, "lineage");
    ck_write(&outs[3], id, strlen(id));
    ck_write(&outs[3], "\n", 1);
    ck_close(&outs[3]);
    if (!ck_failed(outs, 4, err, errlen)) return false;
    cJSON *st = ck_state(rt, step, outs, 3);
    ck_write_json(&outs[4], tmp, "state.json", st);
    cJSON_Delete(st);
    if (!ck_failed(outs, 5, err, errlen)) return false;
    ck_test_delay();
    if (!ck_fsync_dir(tmp)) {
        snprintf(err, errlen, "cannot sync %s: %s", tmp, strerror(errno));
        return false;
    }
    char old[CK_PATH + 8];
    bool had;
    snprintf(old, sizeof old, "%s.old", fin);
    if (!ck_publish(tmp, fin, old, &had, err, errlen)) return false;
    int why = rt_test_fail_at("publish", step) ? EIO : ck_fsync_dir(rt->opt.ckpt_dir) ? 0 : errno ? errno : EIO;
    bool ok = why == 0;
    if (!ok) snprintf(err, errlen, "cannot sync %s: %s", rt->opt.ckpt_dir, strerror(why));
    if (ok) ck_test_delay();
    ok = ok && ck_set_latest(rt->opt.ckpt_dir, strrchr(fin, '/') + 1, step, err, errlen);
    if (!ok)
        ck_withdraw(rt, tmp, fin, old, had, err, errlen);
    else if (had)
        ck_remove_tree(old);
    return ok;
}

bool rt_ckpt_save(rt_ctx *rt, int64_t step, char *err, size_t errlen) {
    char fin[CK_PATH], tmp[CK_PATH];
    ck_out outs[5] = {{0}};
    int ok = 1;
    double t0 = rt_now();
    ck_saving_step = step;
    if (rt->rank == 0) {
        ck_names(rt, step, fin, tmp);
        ok = ck_begin(rt, tmp, err, errlen);
        if (ok) ck_open(&outs[0], tmp, "model.safetensors");
    }
    /* The collective part runs on every rank even after rank 0 failed, so
     * that no rank is left waiting; rank 0 just stops writing. */
    RT_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (ok) {
        ck_write_tensors(rt, &outs[0], false, step);
        if (rt->rank == 0) {
            ck_close(&outs[0]);
            ck_test_delay();
            ck_open(&outs[1], tmp, "optimizer.safetensors");
        }
        ck_write_tensors(rt, &outs[1], true, step);
        if (rt->rank == 0) {
            ck_close(&outs[1]);
            ok = ck_finish(rt, step, outs, tmp, fin, err, errlen);
        }
    }
    if (rt->rank == 0 && !ok) {
        ck_remove_tree(tmp);
        size_t k = strlen(err);
        if (rt->saved_step > 0)
            snprintf(err + k, errlen - k, "; the previous checkpoint %s/step-%08lld is intact", rt->opt.ckpt_dir,
                     (long long)rt->saved_step);
    }
    RT_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (!ok) RT_MPI(MPI_Bcast(err, (int)errlen, MPI_CHAR, 0, MPI_COMM_WORLD));
    if (ok) {
        rt->saved_step = step;
        if (rt->rank == 0) {
            /* The checkpoint just written (`latest` names it) and the N-1 newest
             * others of this run's lineage; never another run's, a link, or
             * the one best.json names.  The one just written is not
             * necessarily the highest step: a run resumed from an earlier
             * checkpoint finds the later ones of the interrupted run. */
            rt_ckpt_prune(rt->opt.ckpt_dir, rt->opt.keep, step);
            printf("checkpoint: step %lld saved to %s (%.2f s)\n", (long long)step, fin, rt_now() - t0);
            fflush(stdout);
        }
    }
    return ok;
}
