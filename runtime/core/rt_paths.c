/* rt_paths.c — what a run writes against what it reads, checked by rank 0
 * before step 1, and the ownership of --checkpoint-dir.
 *
 * Aliasing: every output file (--save-weights, --save-grads, --metrics,
 * --profile, and the PATH.tmp that the first three write first) against
 * every input file (each --data / --val-data shard as expanded, --text,
 * --init-from FILE or the files of --init-from DIR, what --resume reads:
 * the files of a checkpoint, or of a checkpoint directory its latest,
 * best.json and the files of its step-* directories) and against every
 * other output.  Two
 * paths are the same file when both exist with one device and inode (hard
 * and symbolic links included), or, when one does not exist yet, when their
 * parent directories resolve to one device and inode and the names agree.
 * --checkpoint-dir DIR owns DIR/latest, latest.tmp, best.json, best.json.tmp,
 * lock and every DIR/step-*: no output file and no input other than --resume
 * (which a run continues in place) may be one of them.
 *
 * Ownership: rank 0 holds an flock on DIR/lock for the whole run, and writes
 * its identity there (host, pid, start time, command); a second run on DIR
 * is refused naming the first.  The kernel drops the lock when the process
 * dies, so --resume after a crash (kill -9) finds the directory free. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rt_core.h"

enum { PT_PATH = 4096, PT_MAX = 4096 };

/* One named file: the option it came from and its path. */
typedef struct pt_file {
    const char *opt;
    char path[PT_PATH];
} pt_file;

typedef struct pt_list {
    pt_file *f;
    int n, cap;
} pt_list;

static void pt_add(pt_list *l, const char *opt, const char *fmt, const char *a, const char *b) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->f = realloc(l->f, sizeof *l->f * (size_t)l->cap);
        RT_CHECK(l->f, "out of memory");
    }
    l->f[l->n].opt = opt;
    snprintf(l->f[l->n].path, PT_PATH, fmt, a, b);
    l->n++;
}

/* The directory holding `path` (it need not exist) and its last name. */
static bool pt_parent(const char *path, struct stat *dir, const char **base) {
    char d[PT_PATH];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (!slash)
        snprintf(d, sizeof d, ".");
    else if (slash == d)
        d[1] = 0;
    else
        *slash = 0;
    return stat(d, dir) == 0;
}

static bool pt_same_inode(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Paths a and b name one file (see the header).  When only one exists they
 * cannot: the other's name would resolve to it. */
static bool pt_same(const char *a, const char *b) {
    struct stat sa, sb, pa, pb;
    bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea || eb) return ea && eb && pt_same_inode(&sa, &sb);
    const char *na, *nb;
    return pt_parent(a, &pa, &na) && pt_parent(b, &pb, &nb) && pt_same_inode(&pa, &pb) && !strcmp(na, nb);
}

/* The name of an entry that --checkpoint-dir writes directly in DIR. */
static bool pt_ckpt_name(const char *name) {
    static const char *const own[] = {"latest", "latest.tmp", "best.json", "best.json.tmp", "lock"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (!strcmp(name, own[i])) return true;
    return !strncmp(name, "step-", 5);
}

/* `path` is DIR/<a name the checkpoints write> or DIR/step-*\/<anything>. */
static bool pt_in_ckpt(const struct stat *ck, const char *path) {
    struct stat pd;
    const char *name;
    if (!pt_parent(path, &pd, &name)) return false;
    if (pt_same_inode(&pd, ck)) return pt_ckpt_name(name);
    char up[PT_PATH];
    snprintf(up, sizeof up, "%.*s", (int)(name - path > 0 ? name - path - 1 : 0), path);
    if (!*up) return false;
    struct stat gd;
    const char *sub;
    return pt_parent(up, &gd, &sub) && pt_same_inode(&gd, ck) && !strncmp(sub, "step-", 5);
}

/* The regular files of directory dir (one level), as inputs of opt.  With
 * ckpt_root, dir is a --checkpoint-dir that --resume reads: only what its
 * checkpoints consist of counts (latest, best.json and the files of every
 * step-* directory), not the other files that live beside them (a
 * --metrics file kept there continues across requeued runs). */
static void pt_add_dir(pt_list *l, const char *opt, const char *dir, bool ckpt_root) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && l->n < PT_MAX) {
        if (e->d_name[0] == '.') continue;
        char p[PT_PATH];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &st) != 0) continue;
        bool step = !strncmp(e->d_name, "step-", 5);
        bool own = !strcmp(e->d_name, "latest") || !strcmp(e->d_name, "best.json");
        if (S_ISREG(st.st_mode) && (!ckpt_root || own))
            pt_add(l, opt, "%s/%s", dir, e->d_name);
        else if (S_ISDIR(st.st_mode) && ckpt_root && step)
            pt_add_dir(l, opt, p, false);
    }
    if (d) closedir(d);
}

/* dir is one checkpoint (it holds state.json), not a directory of them. */
static bool pt_is_step(const char *dir) {
    char p[PT_PATH];
    struct stat st;
    snprintf(p, sizeof p, "%s/state.json", dir);
    return stat(p, &st) == 0;
}

static void pt_inputs(const rt_ctx *rt, const rt_options *o, pt_list *in, pt_list *kept) {
    for (int i = 0; i < rt->train.nshards; i++)
        pt_add(in, o->text ? "--text" : "--data", "%s%s", rt->train.shard[i].path, "");
    for (int i = 0; i < rt->val.nshards; i++) pt_add(in, "--val-data", "%s%s", rt->val.shard[i].path, "");
    struct stat st;
    if (o->init_from && stat(o->init_from, &st) == 0 && S_ISDIR(st.st_mode))
        pt_add_dir(in, "--init-from", o->init_from, false);
    else if (o->init_from)
        pt_add(in, "--init-from", "%s%s", o->init_from, "");
    /* --resume's files may lie in --checkpoint-dir (continuing in place):
     * checked against the output files only. */
    const char *res = o->resume && *o->resume ? o->resume : o->resume ? o->ckpt_dir : NULL;
    if (res) pt_add_dir(kept, "--resume", res, !pt_is_step(res));
}

static void pt_outputs(const rt_options *o, pt_list *out) {
    const char *const opt[] = {"--save-weights", "--save-grads", "--metrics", "--trace-run", "--profile"};
    const char *const path[] = {o->save_weights, o->save_grads, o->metrics, o->trace_run, o->profile};
    for (int i = 0; i < 5; i++) {
        if (!path[i]) continue;
        pt_add(out, opt[i], "%s%s", path[i], "");
        if (i < 4) pt_add(out, opt[i], "%s%s", path[i], ".tmp"); /* written first, then renamed */
    }
}

/* The path option opt was given (an output's own name, not its .tmp). */
static const char *pt_given(const rt_options *o, const char *opt) {
    return !strcmp(opt, "--save-weights") ? o->save_weights
           : !strcmp(opt, "--save-grads") ? o->save_grads
           : !strcmp(opt, "--metrics")    ? o->metrics
                                          : o->profile;
}

/* Output w and file r are one file: the message; false. */
static bool pt_clash(const pt_file *w, const pt_file *r, const char *what, const rt_options *o, char *err,
                     size_t errlen) {
    const char *given = pt_given(o, w->opt);
    char via[PT_PATH + 32] = "";
    if (strcmp(given, w->path)) snprintf(via, sizeof via, " (written first as %s)", w->path);
    snprintf(err, errlen, "%s %s%s is the file of %s %s: %s; pass another path (nothing was trained)", w->opt, given,
             via, r->opt, r->path, what);
    return false;
}

bool rt_paths_check(const rt_ctx *rt, const rt_options *o, char *err, size_t errlen) {
    pt_list in = {0}, kept = {0}, out = {0};
    pt_inputs(rt, o, &in, &kept);
    pt_outputs(o, &out);
    bool ok = true;
    for (int i = 0; ok && i < out.n; i++) {
        for (int j = 0; ok && j < in.n; j++)
            if (pt_same(out.f[i].path, in.f[j].path))
                ok = pt_clash(&out.f[i], &in.f[j], "writing it destroys the input", o, err, errlen);
        for (int j = 0; ok && j < kept.n; j++)
            if (pt_same(out.f[i].path, kept.f[j].path))
                ok = pt_clash(&out.f[i], &kept.f[j], "writing it destroys the checkpoint", o, err, errlen);
        for (int j = 0; ok && j < out.n; j++)
            if (strcmp(out.f[i].opt, out.f[j].opt) && pt_same(out.f[i].path, out.f[j].path))
                ok = pt_clash(&out.f[i], &out.f[j], "one output would overwrite the other", o, err, errlen);
    }
    struct stat ck;
    if (ok && o->ckpt_dir && stat(o->ckpt_dir, &ck) == 0) {
        for (int i = 0; ok && i < out.n; i++)
            if (pt_in_ckpt(&ck, out.f[i].path)) {
                snprintf(err, errlen,
                         "%s %s lies where --checkpoint-dir %s writes its checkpoints (latest, best.json, "
                         "lock, step-*): pass another path (nothing was trained)",
                         out.f[i].opt, out.f[i].path, o->ckpt_dir);
                ok = false;
            }
        for (int j = 0; ok && j < in.n; j++)
            if (pt_in_ckpt(&ck, in.f[j].path)) {
                snprintf(
                    err, errlen,
                    "%s %s lies where --checkpoint-dir %s writes its checkpoints (latest, best.json, "
                    "lock, step-*), so a save could replace it: copy it elsewhere or pass another --checkpoint-dir "
                    "(nothing was trained)",
                    in.f[j].opt, in.f[j].path, o->ckpt_dir);
                ok = false;
            }
    }
    free(in.f);
    free(kept.f);
    free(out.f);
    return ok;
}

/* ---- ownership of --checkpoint-dir ---------------------------------------------- */
/* "host-pid": the identity in the names of this run's temporary files. */
const char *rt_paths_run_tag(void) {
    static char tag[300];
    if (!tag[0]) {
        char host[256] = "";
        if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "unknown");
        for (char *c = host; *c; c++)
            if (*c == '/' || *c <= ' ') *c = '_';
        snprintf(tag, sizeof tag, "%s-%ld", host, (long)getpid());
    }
    return tag;
}

rt_tmp_owner rt_paths_tmp_owner(const char *name, char *who, size_t n) {
    long long step;
    int at = 0;
    size_t len = strlen(name);
    if (sscanf(name, "step-%lld%n", &step, &at) != 1 || len < 4 || strcmp(name + len - 4, ".tmp")) return RT_TMP_NONE;
    if ((size_t)at + 4 == len) return RT_TMP_OTHER; /* step-N.tmp: no identity, a writer of old */
    if (name[at] != '.') return RT_TMP_NONE;
    snprintf(who, n, "%.*s", (int)(len - 4 - (size_t)at - 1), name + at + 1);
    if (!strcmp(who, rt_paths_run_tag())) return RT_TMP_MINE;
    char *dash = strrchr(who, '-');
    const char *me = rt_paths_run_tag(), *mydash = strrchr(me, '-');
    long pid = dash ? atol(dash + 1) : 0;
    /* Stale: left by a process of this host that is gone.  Another host's
     * (a shared file system) or a live process's is left alone. */
    if (!dash || pid <= 0 || dash - who != mydash - me || strncmp(who, me, (size_t)(dash - who))) return RT_TMP_OTHER;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH ? RT_TMP_STALE : RT_TMP_OTHER;
}

/* The command line, quoted loosely, for the lock file. */
static void pt_command(int argc, char **argv, char *out, size_t n) {
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < argc && k + 1 < n; i++) {
        int w = snprintf(out + k, n - k, "%s%s", i ? " " : "", argv[i]);
        k += w > 0 ? (size_t)w : 0;
    }
    for (char *c = out; *c; c++)
        if (*c == '\n') *c = ' ';
}

bool rt_paths_lock_ckpt(const char *dir, int argc, char **argv, char *err, size_t errlen) {
    static int held = -1; /* open for the whole run: closing it would drop the lock */
    char path[PT_PATH];
    snprintf(path, sizeof path, "%s/lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "--checkpoint-dir %s: cannot open %s: %s", dir, path, strerror(errno));
        return false;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            char who[1500] = "";
            ssize_t got = pread(fd, who, sizeof who - 1, 0);
            who[got > 0 ? got : 0] = 0;
            who[strcspn(who, "\n")] = 0;
            snprintf(err, errlen,
                     "--checkpoint-dir %s is in use by another run (%s: %s): wait for it to end or "
                     "pass another --checkpoint-dir",
                     dir, path, who[0] ? who : "no identity written yet");
            close(fd);
            return false;
        }
        /* A file system without flock: the run goes on unguarded. */
        fprintf(stderr, "warning: --checkpoint-dir %s: cannot lock %s (%s): another run could share it\n", dir, path,
                strerror(errno));
    }
    char cmd[1024], when[64], line[1500];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %z", localtime(&now));
    pt_command(argc, argv, cmd, sizeof cmd);
    const char *tag = rt_paths_run_tag(), *dash = strrchr(tag, '-');
    int len = snprintf(line, sizeof line, "host %.*s, pid %ld, started %s, command %s\n", (int)(dash - tag), tag,
                       (long)getpid(), when, cmd);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len)
        fprintf(stderr, "warning: cannot write this run's identity to %s: %s\n", path, strerror(errno));
    if (held >= 0) close(held); /* a second directory in one process: tests only */
    held = fd;
    return true;
}

bool rt_test_fail_at(const char *point, int64_t step) {
    const char *s = getenv("BASP_TEST_FAIL_AT");
    size_t n = strlen(point);
    return s && !strncmp(s, point, n) && s[n] == ':' && atoll(s + n + 1) == step;
}
