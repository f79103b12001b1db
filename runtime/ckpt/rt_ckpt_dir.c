/* rt_ckpt_dir.c — what a --checkpoint-dir holds and whose it is: the run's
 * lineage, the start-up check, pruning (--keep-checkpoints) and removal.
 * Rank 0 only: it alone writes checkpoints.
 *
 * Lineage.  Every checkpoint directory step-NNNNNNNN carries a file
 * `lineage`: one line of 32 hex digits naming the training run that wrote
 * it.  A run that starts from step 0 (no --resume, or --resume with nothing
 * saved yet) draws a new lineage; a run resumed from a checkpoint continues
 * that checkpoint's lineage (a checkpoint without the file, written before
 * lineages existed, gets a new one).  The file is not listed in state.json,
 * so an uninterrupted run and a resumed one still write byte-identical
 * checkpoint files.  "What this run wrote" is the checkpoints of its lineage
 * that are real directories of DIR: only those are ever pruned.
 *
 * Start-up.  A run that starts from step 0 refuses a DIR holding a complete
 * checkpoint (a step-NNNNNNNN with a state.json, also behind a link): its
 * saves would replace same-step checkpoints, its pruning and `latest` would
 * take over the rest.  A resumed run refuses a
 * DIR holding a checkpoint of another lineage; checkpoints without a
 * lineage are accepted only when the run resumes from DIR itself (a
 * directory written before lineages existed, continued in place).
 *
 * Removal never follows a symbolic link: a step-* entry that is a link is
 * never pruned, and replacing one (a same-step save) removes the link, never
 * the files it points to. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../data/rt_data.h"
#include "rt_ckpt.h"

enum { CD_PATH = 4096, CD_ID = 33 };

static char cd_lineage[CD_ID]; /* this run's; "" until drawn or inherited */

long long rt_ckpt_step_of(const char *name) {
    long long s;
    char tail[8], canon[32];
    if (sscanf(name, "step-%lld%7s", &s, tail) != 1 || s < 0) return -1;
    snprintf(canon, sizeof canon, "step-%08lld", s);
    return strcmp(canon, name) ? -1 : s;
}

/* A new lineage: 16 bytes of /dev/urandom, or the clock and pid when it
 * cannot be read (unique enough: it only tells runs of one DIR apart). */
static void cd_draw(void) {
    unsigned char b[16] = {0};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    bool got = fd >= 0 && read(fd, b, sizeof b) == (ssize_t)sizeof b;
    if (fd >= 0) close(fd);
    if (!got) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 40;
        for (int i = 0; i < 16; i++, x = x * 6364136223846793005u + 1442695040888963407u) b[i] = (uint8_t)(x >> 56);
    }
    for (int i = 0; i < 16; i++) snprintf(cd_lineage + 2 * i, 3, "%02x", b[i]);
}

const char *rt_ckpt_lineage(void) {
    if (!cd_lineage[0]) cd_draw();
    return cd_lineage;
}

/* The lineage recorded in checkpoint directory dir (following a link), or
 * "" when it has none. */
static void cd_read_lineage(const char *dir, char out[CD_ID]) {
    char p[CD_PATH], buf[64] = "";
    out[0] = 0;
    snprintf(p, sizeof p, "%s/lineage", dir);
    int fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, buf, sizeof buf - 1) : -1;
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    size_t len = strspn(buf, "0123456789abcdef");
    if (len == CD_ID - 1) snprintf(out, CD_ID, "%.*s", (int)len, buf);
}

static bool cd_has_state(const char *dir) {
    char p[CD_PATH];
    struct stat st;
    return snprintf(p, sizeof p, "%s/state.json", dir) < (int)sizeof p && stat(p, &st) == 0;
}

/* The "model" of dir/state.json into out ("" when unreadable). */
static void cd_model(const char *dir, char *out, size_t n) {
    char p[CD_PATH], why[256];
    unsigned char *b = NULL;
    int64_t len = 0;
    out[0] = 0;
    snprintf(p, sizeof p, "%s/state.json", dir);
    if (!rt_read_file(p, &b, &len, why, sizeof why)) return;
    cJSON *j = cJSON_ParseWithLength((const char *)b, (size_t)len);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (cJSON_IsString(m)) snprintf(out, n, "%s", m->valuestring);
    cJSON_Delete(j);
    free(b);
}

/* The step-NNNNNNNN entries of dir that `pick` accepts, ascending. */
typedef bool cd_pick(const char *dir, const char *name, void *arg);

static long long *cd_steps(const char *dir, cd_pick *pick, void *arg, size_t *n) {
    DIR *d = opendir(dir);
    long long *s = NULL;
    size_t cap = 0;
    struct dirent *e;
    *n = 0;
    while (d && (e = readdir(d))) {
        long long k = rt_ckpt_step_of(e->d_name);
        if (k < 0 || (pick && !pick(dir, e->d_name, arg))) continue;
        if (*n == cap) s = realloc(s, (cap = cap ? 2 * cap : 16) * sizeof *s);
        RT_CHECK(s, "out of memory");
        size_t i = (*n)++;
        for (; i > 0 && s[i - 1] > k; i--) s[i] = s[i - 1];
        s[i] = k;
    }
    if (d) closedir(d);
    return s;
}

/* "step-A, step-B, ..., step-Z (N in all)" of sorted steps. */
static void cd_list(const long long *s, size_t n, char *out, size_t len) {
    if (n <= 3) {
        size_t k = 0;
        out[0] = 0;
        for (size_t i = 0; i < n && k < len; i++)
            k += (size_t)snprintf(out + k, len - k, "%sstep-%08lld", i ? ", " : "", s[i]);
    } else {
        snprintf(out, len, "step-%08lld, step-%08lld ... step-%08lld (%zu in all)", s[0], s[1], s[n - 1], n);
    }
}

/* A complete checkpoint (a state.json, also behind a link). */
static bool cd_complete(const char *dir, const char *name, void *arg) {
    (void)arg;
    char p[CD_PATH];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return cd_has_state(p);
}

bool rt_ckpt_dir_fresh(const char *dir, char *err, size_t errlen) {
    size_t n;
    long long *s = cd_steps(dir, cd_complete, NULL, &n);
    if (!n) {
        free(s);
        return true;
    }
    char list[160], p[CD_PATH], model[128], latest[256] = "", why[256];
    cd_list(s, n, list, sizeof list);
    snprintf(p, sizeof p, "%s/step-%08lld", dir, s[n - 1]);
    cd_model(p, model, sizeof model);
    rt_ckpt_latest_name(dir, latest, sizeof latest, why, sizeof why);
    snprintf(err, errlen,
             "--checkpoint-dir %s already holds checkpoints: %s%s%s%s%s; a run that starts from "
             "step 0 would replace and prune them: pass --resume to continue from them, or another "
             "--checkpoint-dir",
             dir, list, model[0] ? " of model " : "", model, latest[0] ? "; `latest` names " : "", latest);
    free(s);
    return false;
}

/* dir (which need not exist) is the directory `path` lies in. */
static bool cd_parent_is(const char *path, const char *dir) {
    char up[CD_PATH];
    snprintf(up, sizeof up, "%s", path);
    size_t k = strlen(up);
    while (k > 1 && up[k - 1] == '/') up[--k] = 0;
    char *slash = strrchr(up, '/');
    if (!slash)
        snprintf(up, sizeof up, ".");
    else if (slash == up)
        up[1] = 0;
    else
        *slash = 0;
    struct stat a, b;
    return stat(up, &a) == 0 && stat(dir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

typedef struct cd_claim {
    bool legacy_ok; /* checkpoints without a lineage are this run's history */
} cd_claim;

/* A complete checkpoint of dir that this run must not touch. */
static bool cd_foreign(const char *dir, const char *name, void *arg) {
    const cd_claim *c = arg;
    char p[CD_PATH], id[CD_ID];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (!cd_has_state(p)) return false; /* not a checkpoint (a removal cut short) */
    cd_read_lineage(p, id);
    return id[0] ? strcmp(id, cd_lineage) != 0 : !c->legacy_ok;
}

bool rt_ckpt_dir_adopt(const char *ckdir, const char *from, char *err, size_t errlen) {
    char id[CD_ID];
    cd_read_lineage(from, id);
    if (id[0])
        snprintf(cd_lineage, sizeof cd_lineage, "%s", id);
    else
        cd_draw();
    if (!ckdir) return true;
    cd_claim c = {.legacy_ok = cd_parent_is(from, ckdir)};
    size_t n;
    long long *s = cd_steps(ckdir, cd_foreign, &c, &n);
    if (n) {
        char list[160], p[CD_PATH], model[128], other[CD_ID];
        cd_list(s, n, list, sizeof list);
        snprintf(p, sizeof p, "%s/step-%08lld", ckdir, s[n - 1]);
        cd_model(p, model, sizeof model);
        cd_read_lineage(p, other);
        snprintf(err, errlen,
                 "--checkpoint-dir %s holds checkpoints of another run: %s (model %s, %s%s); this run "
                 "continues %s%s%s: its saves would replace or prune them: pass another --checkpoint-dir, or "
                 "--resume %s to continue that run",
                 ckdir, list, model[0] ? model : "?", other[0] ? "lineage " : "no lineage", other, from,
                 id[0] ? ", lineage " : "", id, ckdir);
    }
    free(s);
    return n == 0;
}

void rt_ckpt_remove_tree(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) { /* a symbolic link (or nothing): the link alone goes */
        struct stat st;
        if (lstat(dir, &st) == 0 && S_ISLNK(st.st_mode)) unlink(dir);
        return;
    }
    /* state.json first: a removal cut short by a crash must not leave a
     * directory that --resume's fallback (newest step-* with a state.json)
     * takes for complete.  unlinkat removes a link, never its target. */
    unlinkat(fd, "state.json", 0);
    int fd2 = dup(fd);
    DIR *d = fd2 >= 0 ? fdopendir(fd2) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(fd, e->d_name, 0);
    if (d)
        closedir(d);
    else if (fd2 >= 0)
        close(fd2);
    close(fd);
    rmdir(dir);
}

/* The step that DIR/best.json names, or -1. */
static long long cd_best_step(const char *dir) {
    char p[CD_PATH], why[256];
    unsigned char *b = NULL;
    int64_t len = 0;
    snprintf(p, sizeof p, "%s/best.json", dir);
    struct stat st;
    if (stat(p, &st) != 0 || !rt_read_file(p, &b, &len, why, sizeof why)) return -1;
    cJSON *j = cJSON_ParseWithLength((const char *)b, (size_t)len);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
    /* A damaged file may hold any number: only a whole step a checkpoint
     * name can carry converts (a double past LLONG_MAX would not). */
    double v = cJSON_IsNumber(s) ? s->valuedouble : -1;
    long long step = v >= 0 && v <= 1e15 && v == (double)(long long)v ? (long long)v : -1;
    cJSON_Delete(j);
    free(b);
    return step;
}

/* A checkpoint this run may prune: a real directory (not a link) of its
 * lineage. */
static bool cd_prunable(const char *dir, const char *name, void *arg) {
    (void)arg;
    char p[CD_PATH], id[CD_ID];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    cd_read_lineage(p, id);
    return id[0] && !strcmp(id, rt_ckpt_lineage());
}

void rt_ckpt_prune(const char *dir, int64_t keep, int64_t just_saved) {
    if (keep <= 0) return;
    static bool told;
    size_t n;
    long long *s = cd_steps(dir, cd_prunable, NULL, &n), best = cd_best_step(dir);
    size_t others = 0; /* kept so far besides just_saved, newest first */
    for (size_t i = n; i-- > 0;) {
        if (s[i] == just_saved) continue;
        if (others + 1 < (size_t)keep) {
            others++;
            continue;
        }
        if (s[i] == best) {
            if (!told)
                printf("checkpoint: kept step-%08lld beyond --keep-checkpoints %lld: best.json names it (the "
                       "best val_loss)\n",
                       s[i], (long long)keep);
            told = true;
            continue;
        }
        char p[CD_PATH];
        snprintf(p, sizeof p, "%s/step-%08lld", dir, s[i]);
        rt_ckpt_remove_tree(p);
    }
    free(s);
}
