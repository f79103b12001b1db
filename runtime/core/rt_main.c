/* rt_main.c — process start-up, the command line, the runtime context and
 * the error helpers.  The training loop and its logging are in rt_loop.c. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ckpt/rt_ckpt.h"
#include "../data/rt_data.h"
#include "../obs/rt_obs.h"
#include "rt_backend.h"
#include "rt_core.h"

/* ---- errors -------------------------------------------------------------------- */
static int rt_world_rank(void) {
    int init = 0, r = -1;
    MPI_Initialized(&init);
    if (init) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

void rt_die(const char *file, int line, const char *fmt, ...) {
    fflush(stdout);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: %s:%d: error: %s\n", rt_world_rank(), file, line, msg);
    fflush(stderr);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void rt_mpi_die(const char *file, int line, const char *call, int rc) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    rt_die(file, line, "%s failed: %s", call, s);
}

void *rt_xmalloc(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) rt_die(file, line, "out of memory allocating %zu bytes", n);
    return p;
}

double rt_now(void) { return MPI_Wtime(); }

/* ---- command line ------------------------------------------------------------------ */
static void rt_usage(FILE *f, const char *prog, const rt_program *p) {
    const rt_optim_desc *o = p->optim ? p->optim : &rt_optim_defaults;
    fprintf(f,
            "usage: mpirun -np %d %s (--data PATH... | --text FILE) [options]\n"
            "Trains model %s (compiled from %s) on %d ranks.\n"
            "  --data PATH          llm.c token file(s) (int32 header magic 20240520; uint16 or uint32 tokens):\n"
            "                       a file, a directory (its *.bin) or a quoted glob ('shards/train_*.bin');\n"
            "                       repeatable; the shards are read as one stream, in order (sorted by name)\n"
            "  --text FILE          raw text, one token per byte (needs vocab >= 256)\n"
            "  --steps N            training steps (default %lld; 0: only initialise or load, then save)\n"
            "  --lr X               AdamW's base (peak) learning rate (default %g)\n"
            "  --schedule NAME      constant, cosine, linear or wsd (default %s; formulas: runtime/README.md)\n"
            "  --warmup N           steps of linear warmup from 0 (default %lld)\n"
            "  --min-lr X           the rate the decay ends at (default %g)\n"
            "  --wsd-decay F        wsd: the fraction of the post-warmup steps that decay (default %g)\n"
            "  --weight-decay X     AdamW's decoupled weight decay on matrices (default %g)\n"
            "  --beta1 X, --beta2 X, --eps X   AdamW's moments and epsilon (default %g, %g, %g)\n"
            "  --grad-clip X        clip the global gradient norm to X; 0 = off (default %g)\n"
            "  --val-data PATH      validate on these token file(s) (as --data) with the forward-only program:\n"
            "                       the same fixed windows in order on every layout; val_loss in the log and JSONL\n"
            "  --val-every N        validate every N steps (default: after the last step only)\n"
            "  --val-tokens T       tokens to validate on, whole batches (default: up to 16 batches)\n"
            "  --seed N             seed of the initial weights and the batch sampler (default %lld)\n"
            "  --sampler KIND       random: each sequence drawn with replacement (default); epoch: every\n"
            "                       window of seq_len tokens once per epoch, in a seeded order\n"
            "  --init-from FILE|DIR start from the parameters in FILE, written by --save-weights from this\n"
            "                       model (any layout or world size), or in a Hugging Face model directory\n"
            "                       (config.json, safetensors); the optimizer state starts fresh; with --resume\n"
            "                       (no DIR): only while --checkpoint-dir holds no checkpoint\n"
            "  --log-every N        print every N-th step (default 1; first and last always)\n"
            "  --metrics FILE       one JSON object per step (step, loss, grad_norm, lr, step_ms, a2a_ms,\n"
            "                       comm_bytes, tokens_per_s)\n"
            "  --assignments FILE   batch_aware dynamic: every micro-step's groups and their documents, JSON\n"
            "                       lines (scripts/plot_assignments.py draws them)\n"
            "  --pieces FILE        packed documents: train on the documents such a file lists, micro-step by\n"
            "                       micro-step, instead of drawing them\n"
            "  --profile FILE       after training, rank 0's counters as JSON (per kernel and collective\n"
            "                       kind: calls, seconds, bytes; median step and all-to-all ms)\n"
            "  --trace-run FILE     the measured timeline of one step as a Chrome trace (per rank: every\n"
            "                       kernel and collective), the form of baspc --trace's predicted one\n"
            "  --trace-step N       the step --trace-run records (default: the last)\n"
            "  --save-weights FILE  after training, write every parameter as a full fp32 tensor\n"
            "  --save-grads FILE    after training, write the reduced gradients of the last step\n"
            "  --checkpoint-dir DIR save checkpoints (safetensors, Hugging Face names) into DIR/step-N, atomically\n"
            "  --save-every N       a checkpoint every N steps (default: only after the last step)\n"
            "  --resume [DIR]       continue exactly from a checkpoint: DIR/step-N, or the latest in DIR\n"
            "                       (default DIR: --checkpoint-dir; none there yet: start from step 0)\n"
            "  --keep-checkpoints N keep the checkpoint just written, the N-1 newest others of this run and the\n"
            "                       one best.json names (default: all)\n"
            "  --skip-nonfinite     skip a step whose gradient is NaN/Inf instead of stopping\n"
            "  --allow-placement-mismatch\n"
            "                       run even when ranks the compiler kept on one node run on several hosts\n"
            "  --timeout SEC        end the job when a rank makes no progress for SEC seconds\n"
            "  --split-wait         before each collective, a barrier of its set; the time there counts as waiting\n"
            "                       for the slowest rank (--metrics a2a_wait_ms, --profile wait_seconds), the\n"
            "                       collective's own time is the exchange alone (CPU backend)\n"
            "  --quiet              no per-step lines\n"
            "  --help               this text\n"
            "Output paths are checked before step 1: none may name an input or another output, and a\n"
            "--checkpoint-dir is held (DIR/lock) by one run at a time.  SIGTERM/SIGINT: the ranks\n"
            "finish the step, write a checkpoint (--checkpoint-dir) and exit 143/130; a second signal,\n"
            "or one during start-up (before step 1), stops at once.\n"
            "A demo corpus: build/data/mkcorpus corpus.bin corpus.txt, then --data corpus.bin.\n",
            p->world, prog, p->model, p->spec ? p->spec : "?", p->world, (long long)p->steps, p->lr,
            rt_schedule_name(o->schedule), (long long)o->warmup, o->min_lr, o->wsd_decay, o->weight_decay, o->beta1,
            o->beta2, o->eps, o->grad_clip, (long long)p->seed);
}

static bool rt_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool rt_parse_f64(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0) || v > 1e9) return false;
    *out = v;
    return true;
}

/* Reads the value of option `name` (either `--name V` or `--name=V`). */
static const char *rt_opt_value(int argc, char **argv, int *i, const char *name, char *err, size_t errlen) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (a[n] == '=') return a + n + 1;
    if (*i + 1 >= argc) {
        snprintf(err, errlen, "option %s needs a value", name);
        return NULL;
    }
    return argv[++*i];
}

static bool rt_opt_is(const char *a, const char *name) {
    size_t n = strlen(name);
    return strncmp(a, name, n) == 0 && (a[n] == 0 || a[n] == '=');
}

/* The options whose value names a file or directory: an empty one is refused. */
static bool rt_path_option(const char *name) {
    static const char *const paths[] = {"--data",    "--text",        "--val-data",       "--init-from",
                                        "--metrics", "--profile",     "--save-weights",   "--save-grads",
                                        "--pieces",  "--assignments", "--checkpoint-dir", "--trace-run"};
    for (size_t k = 0; k < sizeof paths / sizeof *paths; k++)
        if (!strcmp(name, paths[k])) return true;
    return false;
}

/* The loop keeps one step time per step (for the median): a bound keeps
 * that allocation's size from overflowing. */
#define RT_MAX_STEPS INT64_C(1000000000)

/* The optimizer's options (--schedule, --warmup, --min-lr, ...): false on a
 * value that does not parse; ranges are rt_optim_check's. */
static bool rt_parse_optim_opt(const char *name, const char *v, rt_optim_desc *o) {
    if (!strcmp(name, "--schedule")) return rt_schedule_parse(v, &o->schedule);
    for (int i = 0; i < RT_NOPTIM_FIELDS; i++) {
        const rt_optim_field *f = &rt_optim_fields[i];
        char opt[32];
        snprintf(opt, sizeof opt, "--%s", f->key);
        for (char *c = opt + 2; *c; c++)
            if (*c == '_') *c = '-';
        if (strcmp(name, opt)) continue;
        char *p = (char *)o + f->off;
        return f->is_int ? rt_parse_i64(v, 0, RT_MAX_STEPS, (int64_t *)p) : rt_parse_f64(v, (double *)p);
    }
    return false;
}

/* The options against each other and the optimizer's ranges: 0, or 2 with
 * the reason in err. */
static int rt_check_options(const rt_options *o, char *err, size_t errlen) {
    if (o->steps < 0 || o->steps > RT_MAX_STEPS) { /* the spec's default */
        snprintf(err, errlen, "%lld steps: pass --steps between 0 and %lld", (long long)o->steps,
                 (long long)RT_MAX_STEPS);
        return 2;
    }
    if (!(o->lr > 0 && o->lr <= 1)) { /* baspc's bounds for train.lr; 0 would train nothing */
        snprintf(err, errlen,
                 "lr %g: must lie in (0, 1]; AdamW's rates are about 1e-5 to 1e-2 (train.lr in the spec, "
                 "--lr on the command line)",
                 o->lr);
        return 2;
    }
    char why[160], opt[32];
    const char *key = rt_optim_check(&o->optim, o->lr, o->steps, why, sizeof why);
    if (key) { /* the spec's values, or the options' */
        snprintf(opt, sizeof opt, "--%s", key);
        for (char *c = opt; *c; c++)
            if (*c == '_') *c = '-';
        snprintf(err, errlen, "%s %s (train.%s in the spec, %s on the command line)", key, why, key, opt);
        return 2;
    }
    if (o->trace_step && !o->trace_run) {
        snprintf(err, errlen, "--trace-step needs --trace-run FILE");
        return 2;
    }
    if (o->trace_step > o->steps) {
        snprintf(err, errlen, "--trace-step %lld is past the last step (--steps %lld)", (long long)o->trace_step,
                 (long long)o->steps);
        return 2;
    }
    if ((o->save_every || (o->resume && !*o->resume)) && !o->ckpt_dir) {
        snprintf(err, errlen, "%s needs --checkpoint-dir DIR", o->save_every ? "--save-every" : "--resume without DIR");
        return 2;
    }
    if (o->keep && !o->ckpt_dir) {
        snprintf(err, errlen, "--keep-checkpoints needs --checkpoint-dir DIR (it prunes the checkpoints saved there)");
        return 2;
    }
    /* --resume (the --checkpoint-dir) with --init-from: those weights unless
     * a checkpoint exists, so a requeued fine-tune continues its own. */
    if (o->resume && *o->resume && o->init_from) {
        snprintf(err, errlen,
                 "--resume %s and --init-from are exclusive: --resume DIR restores the weights too; "
                 "--resume without DIR and --init-from start from --init-from's weights only while "
                 "--checkpoint-dir holds no checkpoint",
                 o->resume);
        return 2;
    }
    if ((o->val_every || o->val_tokens) && !o->nval) {
        snprintf(err, errlen, "%s needs --val-data FILE (the held-out tokens to validate on)",
                 o->val_every ? "--val-every" : "--val-tokens");
        return 2;
    }
    if (o->ndata && o->text) {
        snprintf(err, errlen, "--data and --text are exclusive: pass one");
        return 2;
    }
    if (!o->ndata && !o->text) {
        snprintf(err, errlen,
                 "no training data: pass --data FILE (llm.c token file) or --text FILE (raw text, byte-level "
                 "tokens); a demo corpus: build/data/mkcorpus corpus.bin corpus.txt");
        return 2;
    }
    return 0;
}

/* Returns 0 to run, 1 after --help, 2 on an error (written to err). */
static int rt_parse_args(int argc, char **argv, const rt_program *p, rt_options *o, char *err, size_t errlen) {
    *o = (rt_options){.steps = p->steps,
                      .seed = p->seed,
                      .lr = p->lr,
                      .log_every = 1,
                      .optim = p->optim ? *p->optim : rt_optim_defaults};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        bool *flag = !strcmp(a, "--quiet")                      ? &o->quiet
                     : !strcmp(a, "--skip-nonfinite")           ? &o->skip_nonfinite
                     : !strcmp(a, "--split-wait")               ? &o->split_wait
                     : !strcmp(a, "--allow-placement-mismatch") ? &o->allow_placement_mismatch
                                                                : NULL;
        if (flag) {
            *flag = true;
            continue;
        }
        if (rt_opt_is(a, "--resume")) { /* optional value: --resume, --resume DIR, --resume=DIR */
            o->resume = a[8] == '=' ? a + 9 : i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : "";
            continue;
        }
        static const char *const with_value[] = {"--data",        "--text",
                                                 "--steps",       "--lr",
                                                 "--seed",        "--metrics",
                                                 "--log-every",   "--save-weights",
                                                 "--save-grads",  "--init-from",
                                                 "--profile",     "--checkpoint-dir",
                                                 "--save-every",  "--keep-checkpoints",
                                                 "--timeout",     "--schedule",
                                                 "--warmup",      "--min-lr",
                                                 "--wsd-decay",   "--weight-decay",
                                                 "--beta1",       "--beta2",
                                                 "--eps",         "--grad-clip",
                                                 "--sampler",     "--val-data",
                                                 "--val-every",   "--val-tokens",
                                                 "--trace-run",   "--trace-step",
                                                 "--assignments", "--pieces"};
        const char *name = NULL;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            if (rt_opt_is(a, with_value[k])) name = with_value[k];
        if (!name) {
            snprintf(err, errlen, "unknown option '%s'", a);
            return 2;
        }
        if (!(v = rt_opt_value(argc, argv, &i, name, err, errlen))) return 2;
        if (!*v && rt_path_option(name)) {
            snprintf(err, errlen, "%s '': empty path: pass a %s name", name,
                     !strcmp(name, "--checkpoint-dir") ? "directory" : "file");
            return 2;
        }
        bool ok = true;
        bool val = !strcmp(name, "--val-data");
        if ((val || !strcmp(name, "--data")) && (val ? o->nval : o->ndata) == RT_MAX_DATA_ARGS) {
            snprintf(err, errlen, "more than %d %s arguments: pass a directory or a glob pattern ('shards/*.bin')",
                     RT_MAX_DATA_ARGS, name);
            return 2;
        }
        if (val)
            o->val_data[o->nval++] = v;
        else if (!strcmp(name, "--val-every"))
            ok = rt_parse_i64(v, 1, RT_MAX_STEPS, &o->val_every);
        else if (!strcmp(name, "--val-tokens"))
            ok = rt_parse_i64(v, 1, INT64_MAX, &o->val_tokens);
        else if (!strcmp(name, "--data"))
            o->data[o->ndata++] = v;
        else if (!strcmp(name, "--text"))
            o->text = v;
        else if (!strcmp(name, "--metrics"))
            o->metrics = v;
        else if (!strcmp(name, "--assignments"))
            o->assignments = v;
        else if (!strcmp(name, "--pieces"))
            o->pieces = v;
        else if (!strcmp(name, "--profile"))
            o->profile = v;
        else if (!strcmp(name, "--trace-run"))
            o->trace_run = v;
        else if (!strcmp(name, "--trace-step"))
            ok = rt_parse_i64(v, 1, RT_MAX_STEPS, &o->trace_step);
        else if (!strcmp(name, "--save-weights"))
            o->save_weights = v;
        else if (!strcmp(name, "--save-grads"))
            o->save_grads = v;
        else if (!strcmp(name, "--init-from"))
            o->init_from = v;
        else if (!strcmp(name, "--steps"))
            ok = rt_parse_i64(v, 0, RT_MAX_STEPS, &o->steps);
        else if (!strcmp(name, "--seed"))
            ok = rt_parse_i64(v, 0, INT64_MAX, &o->seed);
        else if (!strcmp(name, "--log-every"))
            ok = rt_parse_i64(v, 1, INT64_MAX, &o->log_every);
        else if (!strcmp(name, "--lr"))
            ok = rt_parse_f64(v, &o->lr);
        else if (!strcmp(name, "--checkpoint-dir"))
            o->ckpt_dir = v;
        else if (!strcmp(name, "--save-every"))
            ok = rt_parse_i64(v, 1, RT_MAX_STEPS, &o->save_every);
        else if (!strcmp(name, "--keep-checkpoints"))
            ok = rt_parse_i64(v, 1, INT64_MAX, &o->keep);
        else if (!strcmp(name, "--timeout"))
            ok = rt_parse_f64(v, &o->timeout) && o->timeout > 0;
        else if (!strcmp(name, "--sampler"))
            ok = (o->epoch = !strcmp(v, "epoch")) || !strcmp(v, "random");
        else
            ok = rt_parse_optim_opt(name, v, &o->optim);
        if (!ok && !strcmp(name, "--schedule")) {
            snprintf(err, errlen, "bad value '%s' for --schedule: use constant, cosine, linear or wsd", v);
            return 2;
        }
        if (!ok) {
            snprintf(err, errlen, "bad value '%s' for %s", v, name);
            return 2;
        }
    }
    if (o->assignments && p->nvariants == 0) {
        snprintf(err, errlen,
                 "--assignments logs the groups of batch_aware dynamic; this program was compiled with a static "
                 "layout (its groups are in the banner)");
        return 2;
    }
    if (o->pieces && !p->documents) {
        snprintf(err, errlen,
                 "--pieces replays packed documents; this program was compiled without 'documents on' (one token "
                 "stream)");
        return 2;
    }
    if (o->epoch && p->documents) {
        snprintf(err, errlen,
                 "--sampler epoch visits the windows of one token stream; packed documents (compiled "
                 "with documents on) are drawn with replacement: use --sampler random");
        return 2;
    }
    return rt_check_options(o, err, errlen);
}

/* ---- context ---------------------------------------------------------------------- */
static void rt_check_tables(const rt_program *p) {
    RT_CHECK(p->ngroups >= 1 && p->groups, "program has no process groups");
    for (int g = 0; g < p->ngroups; g++) {
        const rt_group_desc *gd = &p->groups[g];
        if (gd->block > 0) { /* a dynamic variant's: positions of a block, bound per micro-step */
            RT_CHECK(gd->block <= p->world && gd->nsets >= 1 && gd->set_size >= 1 &&
                         gd->nsets * gd->set_size == gd->block,
                     "group %s: %d sets of %d do not partition its block of %d", gd->name, gd->nsets, gd->set_size,
                     gd->block);
            continue;
        }
        RT_CHECK(gd->nsets >= 1 && gd->set_size >= 1 && gd->nsets * gd->set_size == p->world,
                 "group %s: %d sets of %d do not partition %d ranks", gd->name, gd->nsets, gd->set_size, p->world);
        for (int r = 0; r < p->world; r++) rt_pos_of_rank(p, g, r); /* dies when r is missing */
    }
    for (int v = 0; v < p->nvalues; v++) {
        const rt_value_desc *d = &p->values[v];
        RT_CHECK(d->rank >= 0 && d->rank <= RT_MAX_RANK, "value %s: rank %d", d->name, d->rank);
        int64_t n = 1;
        for (int i = 0; i < d->rank; i++) {
            int g = d->shard[i];
            RT_CHECK(g >= -1 && g < p->ngroups, "value %s: dim %d sharded by group index %d", d->name, i, g);
            int64_t k = g < 0 ? 1 : p->groups[g].set_size, u = d->unit[i];
            if (u != 0) { /* uneven: whole units, at least one per rank, on a sharded dim */
                RT_CHECK(g >= 0 && u >= 1 && d->dims[i] % u == 0 && d->dims[i] / u >= k && d->kind == RT_ACT,
                         "value %s: dim %d (%lld) cannot be split in units of %lld over %lld ranks", d->name, i,
                         (long long)d->dims[i], (long long)u, (long long)k);
                n *= rt_dim_len(p, d, i, 0); /* position 0 holds the most */
                continue;
            }
            RT_CHECK(d->dims[i] >= 1 && d->dims[i] % k == 0, "value %s: dim %d (%lld) not divisible by %lld", d->name,
                     i, (long long)d->dims[i], (long long)k);
            n *= d->dims[i] / k;
        }
        RT_CHECK(n == d->local_elems, "value %s: local_elems %lld, its dims give %lld", d->name,
                 (long long)d->local_elems, (long long)n);
    }
    for (int i = 0; i < p->nopt; i++)
        RT_CHECK(p->opt[i].param >= 0 && p->opt[i].param < p->nvalues && p->opt[i].grad >= 0 &&
                     p->opt[i].grad < p->nvalues && p->values[p->opt[i].param].kind == RT_PARAM,
                 "optimizer entry %d is not a (param, grad) pair", i);
}

/* This rank's share of its node's CPUs: the CPUs it may run on (mpirun
 * may bind it to one core) over the ranks of its node (all of whom may
 * share them).  Collective over MPI_COMM_WORLD. */
static int rt_host_threads(const rt_ctx *rt) {
    MPI_Comm node;
    int local = 1, cpus = 1;
    RT_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rt->rank, MPI_INFO_NULL, &node));
    RT_MPI(MPI_Comm_size(node, &local));
    MPI_Comm_free(&node);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
    int n = cpus / local, env;
    char err[256];
    if (rt_host_threads_env(&env, err, sizeof err) && env > 0) n = env; /* checked by rt_main */
    return n < 1 ? 1 : n > RT_MAX_HOST_THREADS ? RT_MAX_HOST_THREADS : n;
}

rt_ctx *rt_ctx_create(const rt_program *p, const rt_options *o) {
    rt_ctx *rt = RT_MALLOC(sizeof *rt);
    memset(rt, 0, sizeof *rt);
    rt->p = rt->base = p;
    rt->opt = *o;
    rt->lr = rt_lr_at(&o->optim, o->lr, 0, o->steps);
    rt->val_batch = rt->val_best_step = -1;
    RT_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rt->rank));
    RT_MPI(MPI_Comm_size(MPI_COMM_WORLD, &rt->world));
    RT_CHECK(rt->world == p->world, "launched with %d ranks, compiled for %d", rt->world, p->world);
    rt_check_tables(p);
    rt->host_threads = rt_host_threads(rt);
    rt->comm = RT_MALLOC(sizeof(MPI_Comm) * (size_t)p->ngroups);
    rt->gset = RT_MALLOC(sizeof(int) * (size_t)p->ngroups);
    rt->gpos = RT_MALLOC(sizeof(int) * (size_t)p->ngroups);
    for (int g = 0; g < p->ngroups; g++) {
        const rt_group_desc *gd = &p->groups[g];
        if (gd->block > 0) { /* bound by rt_dyn_begin */
            rt->comm[g] = MPI_COMM_NULL, rt->gset[g] = rt->gpos[g] = 0;
            continue;
        }
        for (int i = 0; i < gd->nsets * gd->set_size; i++)
            if (gd->ranks[i] == rt->rank) rt->gset[g] = i / gd->set_size, rt->gpos[g] = i % gd->set_size;
        RT_MPI(MPI_Comm_split(MPI_COMM_WORLD, rt->gset[g], rt->gpos[g], &rt->comm[g]));
    }
    rt_backend_init(rt);
    rt_arena_build(rt);
    rt_dyn_init(rt);
    /* --init-from overwrites every parameter (the loader demands all of
     * them), so drawing the initial weights would be wasted work. */
    if (!o->init_from && !o->resume) rt_init_params(rt, (uint64_t)o->seed);
    return rt;
}

void rt_ctx_destroy(rt_ctx *rt) {
    if (!rt) return;
    rt_comm_finish_step(rt);
    rt_dyn_fini(rt); /* frees the block groups' communicators */
    for (int g = 0; g < rt->p->ngroups; g++)
        if (rt->p->groups[g].block == 0) MPI_Comm_free(&rt->comm[g]);
    free(rt->comm);
    free(rt->gset);
    free(rt->gpos);
    rt_backend_fini(rt); /* the arena, the device and its communicators, the backend's state */
    rt_data_unmap(rt);
    rt_docs_free(rt->docs);
    rt_docs_free(rt->val_docs);
    free(rt->accum_zeros);
    free(rt);
}

/* ---- options given on the command line ------------------------------------------------ */
int rt_mpi_threads = MPI_THREAD_SINGLE;
static int rt_argc;
static char **rt_argv;

bool rt_option_given(const char *name) {
    for (int i = 1; i < rt_argc; i++) {
        size_t n = strlen(name);
        if (strncmp(rt_argv[i], name, n) == 0 && (rt_argv[i][n] == 0 || rt_argv[i][n] == '=')) return true;
    }
    return false;
}

/* ---- output paths, checked before step 1 ----------------------------------------------- */
/* Creates and removes a probe file in directory `dir`. */
static bool rt_probe_dir(const char *opt, const char *path, const char *dir, char *err, size_t errlen) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(err, errlen, "%s %s: directory %s: %s", opt, path, dir, strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s %s: %s is not a directory", opt, path, dir);
        return false;
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.basp-probe-%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: cannot write in directory %s: %s", opt, path, dir, strerror(errno));
        return false;
    }
    close(fd);
    unlink(probe);
    return true;
}

/* An output file: its directory exists and is writable; the file itself,
 * when it exists, is a writable regular file. */
static bool rt_check_out_file(const char *opt, const char *path, char *err, size_t errlen) {
    if (!path) return true;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    if (path[strlen(path) - 1] == '/') { /* an empty path was refused with the options */
        snprintf(err, errlen, "%s '%s': names a directory, not a file", opt, path);
        return false;
    }
    if (!rt_probe_dir(opt, path, dir, err, errlen)) return false;
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s %s: is a directory", opt, path);
            return false;
        }
        if (access(path, W_OK) != 0) {
            snprintf(err, errlen, "%s %s: cannot write: %s", opt, path, strerror(errno));
            return false;
        }
    }
    return true;
}

/* Creates --checkpoint-dir (and its parents) as a save would. */
static bool rt_check_ckpt_dir(const char *dir, char *err, size_t errlen) {
    if (!dir) return true;
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *c = p + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST) break; /* reported below */
            *c = '/';
        }
    struct stat st;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "--checkpoint-dir %s: cannot create: %s", dir, strerror(errno));
        return false;
    }
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--checkpoint-dir %s: exists and is not a directory", dir);
        return false;
    }
    return rt_probe_dir("--checkpoint-dir", dir, dir, err, errlen) &&
           rt_paths_lock_ckpt(dir, rt_argc, rt_argv, err, errlen);
}

/* Rank 0 (the only writer of these files): every output path, before any
 * work, so that a typo does not cost a whole run. */
static bool rt_check_outputs(const rt_options *o, char *err, size_t errlen) {
    /* The checkpoint directory first: the files may lie in it. */
    return rt_check_ckpt_dir(o->ckpt_dir, err, errlen) &&
           (o->resume || !o->ckpt_dir || rt_ckpt_dir_fresh(o->ckpt_dir, err, errlen)) && /* another run's? */
           rt_check_out_file("--save-weights", o->save_weights, err, errlen) &&
           rt_check_out_file("--save-grads", o->save_grads, err, errlen) &&
           rt_check_out_file("--metrics", o->metrics, err, errlen) &&
           rt_check_out_file("--assignments", o->assignments, err, errlen) &&
           rt_check_out_file("--profile", o->profile, err, errlen) &&
           rt_check_out_file("--trace-run", o->trace_run, err, errlen);
}

/* ---- entry point ---------------------------------------------------------------- */
static int rt_finish(int status) {
    rt_signal_restore_output();
    fflush(stdout);
    fflush(stderr);
    MPI_Finalize();
    return status;
}

/* Collective: the environment (BASP_HOST_THREADS) reaches each rank on its
 * own (mpirun -x), so the ranks agree on its verdict and the lowest bad one
 * says why; false when any rank's is bad. */
static bool rt_env_agree(int rank, int world, const char *prog) {
    char err[256];
    int threads, bad = rt_host_threads_env(&threads, err, sizeof err) ? world : rank;
    RT_MPI(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (bad < world && rank == bad) fprintf(stderr, "%s: error: %s\n", prog, err);
    return bad == world;
}

int rt_main(int argc, char **argv, const rt_program *p) {
    rt_blas_autoselect(argv); /* may re-execute the program with the right BLAS kernels */
    rt_backend_preinit();     /* CPU: one OpenBLAS thread per rank */
    /* A step with started collectives wants a progress thread beside the
     * main one (cpu/rt_async.c): MPI must allow calls from both. */
    int threads = MPI_THREAD_SINGLE;
    if (p->started)
        RT_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &threads));
    else
        RT_MPI(MPI_Init(&argc, &argv));
    rt_mpi_threads = threads;
    int rank = 0, world = 0;
    RT_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    RT_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
    const char *prog = argc > 0 ? argv[0] : "train";
    rt_argc = argc;
    rt_argv = argv;
    rt_signal_install(rank);
    rt_options o;
    char err[1024] = "";
    /* Every rank parses the same command line and reaches the same verdict,
     * so each exits on its own without waiting for the others. */
    int rc = rt_parse_args(argc, argv, p, &o, err, sizeof err);
    if (rc == 1) {
        if (rank == 0) rt_usage(stdout, prog, p);
        return rt_finish(0);
    }
    if (rc == 2) {
        if (rank == 0) fprintf(stderr, "%s: error: %s\n(run %s --help for the options)\n", prog, err, prog);
        return rt_finish(2);
    }
    if (world != p->world) {
        if (rank == 0)
            fprintf(stderr,
                    "%s: error: this program was compiled for %d ranks (%d nodes × %d) from %s; launched with %d: "
                    "run mpirun -np %d %s ... or recompile with --set mesh.nodes=... --set "
                    "mesh.devices_per_node=...\n",
                    prog, p->world, p->nodes, p->devices_per_node, p->spec ? p->spec : "its spec", world, p->world,
                    prog);
        return rt_finish(2);
    }
    if (!rt_env_agree(rank, world, prog)) return rt_finish(2);
    if (!rt_placement_check(p, rank, o.allow_placement_mismatch, prog)) return rt_finish(2);
    int out_ok = rank != 0 || rt_check_outputs(&o, err, sizeof err);
    RT_MPI(MPI_Bcast(&out_ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (!out_ok) {
        if (rank == 0) fprintf(stderr, "%s: error: %s (nothing was trained)\n", prog, err);
        return rt_finish(1);
    }
    rt_ctx *rt = rt_ctx_create(p, &o);
    rt_watchdog_start(rt, o.timeout);
    rt_watchdog_beat("loading the data and weights", 0);
    rt_signal_test_startup_delay();
    /* Every rank reads the data itself, and a path can fail on some ranks
     * only (another working directory or file system, a file still being
     * written): the ranks agree on the verdict, so none goes on to wait in a
     * collective that the others have left.  The lowest failing rank says
     * why.  The weights' verdict is rank 0's, broadcast by rt_load_params. */
    bool data_ok = rt_data_load(rt, &o, err, sizeof err) && rt_val_load(rt, err, sizeof err);
    int first_bad = data_ok ? world : rank;
    RT_MPI(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    /* The outputs against the inputs once the shards are known (rank 0). */
    int paths_ok = first_bad < world || rank != 0 || rt_paths_check(rt, &o, err, sizeof err);
    RT_MPI(MPI_Bcast(&paths_ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
    /* With --resume, --init-from is read only when there is no checkpoint. */
    if (first_bad < world || !paths_ok ||
        (o.init_from && !o.resume && !rt_load_params(rt, o.init_from, err, sizeof err)) ||
        (o.resume && !rt_ckpt_resume(rt, o.resume, err, sizeof err))) {
        if (first_bad == world ? rank == 0 : rank == first_bad) {
            if (rank == 0)
                fprintf(stderr, "%s: error: %s\n", prog, err);
            else
                fprintf(stderr, "%s: error: rank %d: %s\n", prog, rank, err);
        }
        rt_watchdog_stop();
        rt_ctx_destroy(rt);
        return rt_finish(1);
    }
    rc = rt_train(rt);
    rt_watchdog_stop();
    rt_ctx_destroy(rt);
    return rt_finish(rc);
}
