/* rt_corpus.c — a token corpus: one or more shards (llm.c token files, or
 * one raw-text file with byte-level tokens), each mapped read-only, read as
 * one stream, the shards concatenated in the order given (a directory's
 * and a glob's files sorted by name).  Nothing is copied, so a rank's
 * memory does not grow with the corpus; a window of seq_len tokens may run
 * from one shard into the next, as if the files were one (llm.c and
 * Megatron write one stream of documents, separated by end-of-text tokens,
 * cut into shards).
 *
 * Every shard is checked before step 1: a regular file (a FIFO or device is
 * refused before open() could wait on it: rt_open_input), an llm.c header
 * whose count matches its size, at least one token, the same token size as
 * the first shard, and every id inside the vocabulary (named by file and
 * token index). */
#define _DEFAULT_SOURCE /* madvise, MADV_DONTNEED */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "rt_data.h"

static void corpus_add_path(rt_corpus *c, int *cap, const char *path) {
    if (c->nshards == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        rt_shard *grown = RT_MALLOC(sizeof *grown * (size_t)*cap);
        if (c->nshards) memcpy(grown, c->shard, sizeof *grown * (size_t)c->nshards);
        free(c->shard);
        c->shard = grown;
    }
    rt_shard *s = &c->shard[c->nshards++];
    memset(s, 0, sizeof *s);
    size_t n = strlen(path) + 1;
    s->path = RT_MALLOC(n);
    memcpy(s->path, path, n);
}

static int corpus_name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A directory's *.bin files, sorted by name. */
static bool corpus_add_dir(rt_corpus *c, int *cap, const char *dir, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: cannot open the directory: %s", dir, strerror(errno));
        return false;
    }
    int n = 0, ncap = 16;
    char **names = RT_MALLOC(sizeof *names * (size_t)ncap);
    for (struct dirent *e; (e = readdir(d));) {
        size_t k = strlen(e->d_name);
        if (e->d_name[0] == '.' || k < 5 || strcmp(e->d_name + k - 4, ".bin")) continue;
        if (n == ncap) {
            char **grown = RT_MALLOC(sizeof *grown * (size_t)(ncap *= 2));
            memcpy(grown, names, sizeof *names * (size_t)n);
            free(names);
            names = grown;
        }
        size_t len = strlen(dir) + k + 2;
        names[n] = RT_MALLOC(len);
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, corpus_name_cmp);
    for (int i = 0; i < n; i++) corpus_add_path(c, cap, names[i]), free(names[i]);
    free(names);
    if (n == 0) snprintf(err, errlen, "%s: a directory without *.bin token files", dir);
    return n > 0;
}

/* One --data argument: a file, a directory, or a glob pattern. */
static bool corpus_add_arg(rt_corpus *c, int *cap, const char *arg, char *err, size_t errlen) {
    struct stat st;
    bool exists = stat(arg, &st) == 0; /* a name that exists is itself, brackets or not */
    if (exists && S_ISDIR(st.st_mode)) return corpus_add_dir(c, cap, arg, err, errlen);
    if (exists || !strpbrk(arg, "*?[")) {
        corpus_add_path(c, cap, arg); /* opened (and any error said) below */
        return true;
    }
    glob_t g;
    int rc = glob(arg, 0, NULL, &g); /* sorted by name */
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        snprintf(err, errlen, "%s: no file matches the pattern", arg);
        if (rc == 0) globfree(&g);
        return false;
    }
    if (rc != 0) {
        snprintf(err, errlen, "%s: cannot expand the pattern (%s)", arg,
                 rc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read");
        return false;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) corpus_add_path(c, cap, g.gl_pathv[i]);
    globfree(&g);
    return true;
}

/* Opens and maps a regular file read-only (an empty file maps nothing);
 * opt names the option in messages. */
static bool corpus_map(rt_shard *s, const char *opt, char *err, size_t errlen) {
    struct stat st;
    int fd = rt_open_input(opt, s->path, &st, err, errlen);
    if (fd < 0) return false;
    s->map_len = (size_t)st.st_size;
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            snprintf(err, errlen, "%s: cannot map: %s", s->path, strerror(errno));
            close(fd);
            return false;
        }
        s->map = m;
    }
    close(fd); /* the mapping stays valid */
    return true;
}

void rt_corpus_release(const rt_corpus *c, int64_t from, int64_t to) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int k = 0; k < c->nshards; k++) {
        const rt_shard *s = &c->shard[k];
        int64_t lo_t = from > s->first ? from : s->first,
                hi_t = to < s->first + s->ntokens ? to : s->first + s->ntokens;
        if (!s->map || hi_t <= lo_t) continue;
        size_t head = (size_t)(s->base - (const uint8_t *)s->map);
        size_t lo = head + (size_t)(lo_t - s->first) * (size_t)c->width;
        size_t hi = head + (size_t)(hi_t - s->first) * (size_t)c->width;
        lo -= lo % page;
        if (hi > s->map_len) hi = s->map_len;
        /* A read-only private mapping of a file: dropped pages are read
         * again from the page cache on the next access; no data changes. */
        if (hi > lo) madvise((uint8_t *)s->map + lo, hi - lo, MADV_DONTNEED);
    }
}

void rt_corpus_free(rt_corpus *c) {
    for (int k = 0; k < c->nshards; k++) {
        if (c->shard[k].map) munmap(c->shard[k].map, c->shard[k].map_len);
        free(c->shard[k].path);
    }
    free(c->shard);
    memset(c, 0, sizeof *c);
}

/* The ids against the vocabulary, in chunks whose pages are handed back. */
static bool corpus_check_ids(const rt_corpus *c, const rt_shard *s, int64_t vocab, char *err, size_t errlen) {
    const int64_t chunk = INT64_C(1) << 20; /* 1M tokens: at most 4 MiB resident at a time */
    for (int64_t i = 0; i < s->ntokens; i += chunk) {
        int64_t n = s->ntokens - i < chunk ? s->ntokens - i : chunk;
        bool ok = rt_tokens_check_ids(s->base + i * c->width, c->width, n, i, vocab, s->path, err, errlen);
        rt_corpus_release(c, s->first + i, s->first + i + n);
        if (!ok) return false;
    }
    return true;
}

/* Maps and checks shard k; text = raw bytes (one file, --text). */
static bool corpus_open_shard(rt_corpus *c, const char *opt, int k, bool text, int64_t vocab, char *err,
                              size_t errlen) {
    rt_shard *s = &c->shard[k];
    if (!corpus_map(s, opt, err, errlen)) return false;
    static const uint8_t none[1];
    const uint8_t *b = s->map ? s->map : none;
    int width = 1;
    if (text) {
        s->base = b;
        s->ntokens = (int64_t)s->map_len;
    } else {
        if (!rt_tokens_header(b, s->map_len, s->path, &width, &s->ntokens, err, errlen)) return false;
        s->base = b + 1024;
    }
    if (s->ntokens == 0) {
        snprintf(err, errlen, "%s: holds no tokens (%s)", s->path,
                 s->map_len ? "a header with count 0" : "an empty file");
        return false;
    }
    if (k > 0 && width != c->width) {
        snprintf(err, errlen,
                 "%s: %d-byte tokens, but %s holds %d-byte tokens: every shard needs the same token size "
                 "(rewrite one with data/basp_prep.py)",
                 s->path, width, c->shard[0].path, c->width);
        return false;
    }
    c->width = width;
    s->first = c->ntokens;
    c->ntokens += s->ntokens;
    return text || corpus_check_ids(c, s, vocab, err, errlen);
}

bool rt_corpus_open(rt_corpus *c, const char *const *args, int nargs, bool text, int64_t vocab, char *err,
                    size_t errlen) {
    return rt_corpus_open_as(c, text ? "--text" : "--data", args, nargs, text, vocab, err, errlen);
}

bool rt_corpus_open_as(rt_corpus *c, const char *opt, const char *const *args, int nargs, bool text, int64_t vocab,
                       char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    int cap = 0;
    for (int i = 0; i < nargs; i++)
        if (!corpus_add_arg(c, &cap, args[i], err, errlen)) {
            rt_corpus_free(c);
            return false;
        }
    if (text && c->nshards != 1) {
        snprintf(err, errlen, "--text takes one file (%d matched): for shards, make token files with data/basp_prep.py",
                 c->nshards);
        rt_corpus_free(c);
        return false;
    }
    for (int k = 0; k < c->nshards; k++)
        if (!corpus_open_shard(c, opt, k, text, vocab, err, errlen)) {
            rt_corpus_free(c);
            return false;
        }
    return true;
}

const rt_shard *rt_corpus_shard_of(const rt_corpus *c, int64_t i) {
    int lo = 0, hi = c->nshards - 1; /* the last shard with first <= i */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (c->shard[mid].first <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &c->shard[lo];
}
