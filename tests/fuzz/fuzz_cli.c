/* fuzz_cli — the training binary's command line and the files it reads
 * (token files, --save-weights files, checkpoint directories), end to end.
 *
 * An input is an argv, one argument per line, with placeholders for files
 * of a scratch directory made fresh for every input:
 *   @DATA@  an llm.c token file          @TEXT@  a raw text file
 *   @CKPT@  a checkpoint directory        @STEP@  @CKPT@/step-00000001
 *   @W@     a --save-weights file         @OUT@   an empty directory
 * The files are copies of ones a first run of the binary wrote; from a hash
 * of the input, up to three of them are damaged (bytes flipped, inserted or
 * removed, truncated, JSON values swapped), and a damaged safetensors file
 * gets, half of the time, state.json's size and checksum fixed up so that
 * the damage reaches the parsers behind the checksum.
 *
 * The binary (BASP_FUZZ_CLI_BIN, a 1-rank training binary from baspc) runs
 * as an MPI singleton in the scratch directory.  It must end by itself
 * within BASP_FUZZ_CLI_TIMEOUT seconds (default 30) with status 0 or a clean
 * error (a non-zero exit status below 128 with a message on stderr): a
 * signal, a sanitizer report (exit status 86) or a timeout aborts this
 * process, which libFuzzer and the replay driver report as a crash with the
 * input kept.  BASP_FUZZ_CLI_VARIANTS=K runs every argv K times, each with
 * other damage to the files (the seeds' argv reach the file readers; byte
 * mutations of an argv mostly end at the option parser).  --steps is capped at 3 and paths outside the scratch
 * directory are replaced, so that an input neither runs long nor writes
 * elsewhere.  Work directory: BASP_FUZZ_CLI_WORK (default ./fuzz-cli-work).
 *
 * Built with replay.c (ctest fuzz.cli, no clang) or with libFuzzer
 * (scripts/fuzz). */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_ARGS = 64, MAX_ARG = 4096 };

static char work[2048], base[2300], cased[2300];
static const char *bin;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t rs;
static uint64_t rnd(void) {
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 2685821657736338717ULL;
}

static void die(const char *what) {
    fprintf(stderr, "fuzz_cli: %s: %s\n", what, strerror(errno));
    exit(2);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)(len > 0 ? len : 0) + 1);
    *n = len > 0 ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    b[*n] = 0;
    return b;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0) die(path);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(p);
    return 0;
}
static void rm_tree(const char *p) { nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void copy_file(const char *from, const char *to) {
    size_t n;
    unsigned char *b = slurp(from, &n);
    if (!b) die(from);
    spit(to, b, n);
    free(b);
}

/* Runs argv in dir; the exit status, or -1 (timeout) / -2 - signal. */
static int run(char **argv, const char *dir, int timeout_s, char *errtext, size_t errlen) {
    char errpath[2400];
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", dir);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        setpgid(0, 0);
        if (chdir(dir) != 0) _exit(120);
        FILE *in = freopen("/dev/null", "r", stdin), *out = freopen("/dev/null", "w", stdout);
        FILE *err = freopen("stderr.txt", "w", stderr);
        (void)in, (void)out, (void)err;
        setenv("ASAN_OPTIONS", "exitcode=86:detect_leaks=0", 0);
        setenv("UBSAN_OPTIONS", "halt_on_error=1:exitcode=86", 0);
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
        execv(argv[0], argv);
        _exit(121);
    }
    setpgid(pid, pid);
    int status = 0;
    struct timespec t = {0, 5 * 1000 * 1000};
    for (long waited = 0;; waited += 5) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) die("waitpid");
        if (waited >= 1000L * timeout_s) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        nanosleep(&t, NULL);
    }
    kill(-pid, SIGKILL); /* helpers an MPI singleton may have left */
    size_t n = 0;
    unsigned char *e = slurp(errpath, &n);
    snprintf(errtext, errlen, "%s", e ? (char *)e : "");
    free(e);
    if (WIFSIGNALED(status)) return -2 - WTERMSIG(status);
    return WEXITSTATUS(status);
}

/* The token file: the llm.c header (magic 20240520, version 1 = uint16),
 * then 4096 tokens below 256. */
static void write_tokens(const char *path) {
    enum { N = 4096 };
    unsigned char *b = calloc(1, 1024 + 2 * N);
    int32_t h[3] = {20240520, 1, N};
    memcpy(b, h, sizeof h);
    uint64_t x = 7;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        uint16_t t = (uint16_t)((x >> 33) % 200 + 32);
        memcpy(b + 1024 + 2 * i, &t, 2);
    }
    spit(path, b, 1024 + 2 * N);
    free(b);
}

static void setup(void) {
    bin = getenv("BASP_FUZZ_CLI_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        fprintf(stderr, "fuzz_cli: set BASP_FUZZ_CLI_BIN to a 1-rank training binary (baspc -o)\n");
        exit(2);
    }
    const char *w = getenv("BASP_FUZZ_CLI_WORK");
    if (!w || !*w) w = "fuzz-cli-work";
    char cwd[1024];
    if (w[0] == '/')
        snprintf(work, sizeof work, "%s", w);
    else if (getcwd(cwd, sizeof cwd))
        snprintf(work, sizeof work, "%s/%s", cwd, w);
    else
        die("getcwd");
    mkdir(work, 0777);
    snprintf(base, sizeof base, "%s/base", work);
    snprintf(cased, sizeof cased, "%s/case", work);
    rm_tree(base);
    if (mkdir(base, 0777) != 0) die(base);
    char p[2400], q[2400], err[4096];
    snprintf(p, sizeof p, "%s/tok.bin", base);
    write_tokens(p);
    snprintf(p, sizeof p, "%s/text.txt", base);
    const char *text = "The quick brown fox jumps over the lazy dog. ";
    FILE *f = fopen(p, "w");
    if (!f) die(p);
    for (int i = 0; i < 100; i++) fputs(text, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/ckpt", base);
    snprintf(q, sizeof q, "%s/w.bin", base);
    char *argv[] = {(char *)bin,        "--data", "tok.bin",        "--steps", "1", "--quiet",
                    "--checkpoint-dir", p,        "--save-weights", q,         NULL};
    int rc = run(argv, base, 60, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "fuzz_cli: the first run of %s failed (status %d): %s\n", bin, rc, err);
        exit(2);
    }
}

static const char *const ckpt_files[] = {"state.json", "config.json", "model.safetensors", "optimizer.safetensors"};

/* state.json's entry for `name` (a file of the same directory) rewritten to
 * the file's present size and FNV-1a-64: text surgery, no JSON library. */
static void fix_checksum(const char *dir, const char *name) {
    char p[4096];
    size_t n, sn;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unsigned char *b = slurp(p, &n);
    snprintf(p, sizeof p, "%s/state.json", dir);
    char *s = (char *)slurp(p, &sn);
    if (!b || !s) {
        free(b);
        free(s);
        return;
    }
    char key[128];
    snprintf(key, sizeof key, "\"%s\":", name);
    char *at = strstr(s, key), *end = at ? strchr(at, '}') : NULL;
    if (at && end) {
        char entry[256];
        int k = snprintf(entry, sizeof entry, "\"%s\": {\"bytes\": %zu, \"fnv64\": \"%016llx\"", name, n,
                         (unsigned long long)fnv(0xcbf29ce484222325ULL, b, n));
        FILE *f = fopen(p, "wb");
        if (f) {
            fwrite(s, 1, (size_t)(at - s), f);
            fwrite(entry, 1, (size_t)k, f);
            fwrite(end, 1, strlen(end), f);
            fclose(f);
        }
    }
    free(b);
    free(s);
}

static const char *const json_tokens[] = {"-1",
                                          "0",
                                          "1e309",
                                          "null",
                                          "true",
                                          "\"\"",
                                          "[]",
                                          "{}",
                                          "99999999999999999999",
                                          "\"llama\"",
                                          "\"qwen3\"",
                                          "1.5",
                                          "2147483648",
                                          "-9223372036854775808"};

/* One random damage of the file at path. */
static void damage(const char *path) {
    size_t n;
    unsigned char *b = slurp(path, &n);
    if (!b) return;
    size_t cap = n + 256;
    b = realloc(b, cap);
    int edits = 1 + (int)(rnd() % 3);
    for (int e = 0; e < edits; e++) {
        size_t pos = n ? rnd() % n : 0;
        switch (rnd() % 6) {
        case 0: /* flip a byte */
            if (n) b[pos] ^= (unsigned char)(1 + rnd() % 255);
            break;
        case 1: /* truncate */ n = n ? rnd() % n : 0; break;
        case 2: /* remove a run */
            if (n) {
                size_t k = 1 + rnd() % 16;
                if (k > n - pos) k = n - pos;
                memmove(b + pos, b + pos + k, n - pos - k);
                n -= k;
            }
            break;
        case 3: { /* a JSON value where a number or string was */
            const char *t = json_tokens[rnd() % (sizeof json_tokens / sizeof *json_tokens)];
            size_t tl = strlen(t), k = 0;
            while (pos + k < n && k < 24 && strchr("0123456789.-+eE\"abcdefghijklmnopqrstuvwxyz_", b[pos + k])) k++;
            if (n - k + tl > cap) b = realloc(b, cap = n - k + tl + 256);
            memmove(b + pos + tl, b + pos + k, n - pos - k);
            memcpy(b + pos, t, tl);
            n = n - k + tl;
            break;
        }
        case 4: /* a header-length-ish integer at the start (safetensors: u64 length) */
            if (n >= 8) {
                uint64_t v = rnd() % 4 ? rnd() % (n + 64) : rnd();
                memcpy(b, &v, 8);
            }
            break;
        default: /* insert random bytes */
            if (n + 16 <= cap) {
                size_t k = 1 + rnd() % 16;
                memmove(b + pos + k, b + pos, n - pos);
                for (size_t i = 0; i < k; i++) b[pos + i] = (unsigned char)rnd();
                n += k;
            }
        }
    }
    spit(path, b, n);
    free(b);
}

/* The scratch directory of one input: fresh copies, some damaged. */
static void make_case(uint64_t h) {
    char p[2600], q[2600];
    rm_tree(cased);
    if (mkdir(cased, 0777) != 0) die(cased);
    snprintf(p, sizeof p, "%s/out", cased);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/ckpt", cased);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/ckpt/step-00000001", cased);
    mkdir(p, 0777);
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/ckpt/step-00000001/%s", base, ckpt_files[i]);
        snprintf(q, sizeof q, "%s/ckpt/step-00000001/%s", cased, ckpt_files[i]);
        copy_file(p, q);
    }
    static const char *const flat[][2] = {
        {"ckpt/latest", "ckpt/latest"}, {"w.bin", "w.bin"}, {"tok.bin", "tok.bin"}, {"text.txt", "text.txt"}};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", base, flat[i][0]);
        snprintf(q, sizeof q, "%s/%s", cased, flat[i][1]);
        copy_file(p, q);
    }
    rs = h | 1;
    int k = (int)(rnd() % 4); /* 0..3 files damaged */
    for (int i = 0; i < k; i++) {
        int which = (int)(rnd() % 7);
        if (which < 4) {
            snprintf(q, sizeof q, "%s/ckpt/step-00000001/%s", cased, ckpt_files[which]);
            damage(q);
            if (which >= 1 && rnd() % 2) {
                snprintf(p, sizeof p, "%s/ckpt/step-00000001", cased);
                fix_checksum(p, ckpt_files[which]);
            }
        } else {
            static const char *const other[] = {"ckpt/latest", "w.bin", "tok.bin"};
            snprintf(q, sizeof q, "%s/%s", cased, other[which - 4]);
            damage(q);
        }
    }
}

/* An argument with its placeholders replaced; a path outside the scratch
 * directory (absolute, or with "..") becomes "x". */
static void expand(const char *a, char *out, size_t n) {
    static const char *const ph[][2] = {{"@DATA@", "tok.bin"}, {"@TEXT@", "text.txt"}, {"@STEP@", "ckpt/step-00000001"},
                                        {"@CKPT@", "ckpt"},    {"@W@", "w.bin"},       {"@OUT@", "out"}};
    size_t k = 0;
    out[0] = 0;
    while (*a && k + 1 < n) {
        size_t i;
        for (i = 0; i < sizeof ph / sizeof *ph; i++)
            if (!strncmp(a, ph[i][0], strlen(ph[i][0]))) break;
        if (i < sizeof ph / sizeof *ph) {
            k += (size_t)snprintf(out + k, n - k, "%s/%s", cased, ph[i][1]);
            if (k >= n) k = n - 1;
            a += strlen(ph[i][0]);
        } else {
            out[k++] = *a++;
            out[k] = 0;
        }
    }
    const char *v = strchr(out, '=');
    v = v && out[0] == '-' ? v + 1 : out;
    if (strstr(out, "..") || (v[0] == '/' && strncmp(v, cased, strlen(cased)) != 0) || v[0] == '~')
        snprintf(out, n, "x");
}

/* --steps N with N > 3 (or not a number): 3. */
static void cap_steps(char **args, int n) {
    for (int i = 0; i < n; i++) {
        char *v = NULL;
        if (!strcmp(args[i], "--steps") && i + 1 < n)
            v = args[i + 1];
        else if (!strncmp(args[i], "--steps=", 8))
            v = args[i] + 8;
        if (!v) continue;
        char *end;
        long long s = strtoll(v, &end, 10);
        if (*v && !*end && s <= 3) continue;
        if (*v && !*end) strcpy(v, "3"); /* shorter: fits */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        setup();
        ready = 1;
    }
    if (size > 16384) return 0;
    char *args[MAX_ARGS + 2];
    int n = 0;
    args[n++] = (char *)bin;
    const char *p = (const char *)data, *end = p + size;
    while (p < end && n < MAX_ARGS) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl : end) - p);
        char raw[MAX_ARG];
        if (len >= sizeof raw) len = sizeof raw - 1;
        memcpy(raw, p, len);
        raw[len] = 0;
        p = nl ? nl + 1 : end;
        if (raw[0] == '#' || memchr(raw, 0, len)) continue; /* comments; a NUL cannot be in argv */
        args[n] = malloc(MAX_ARG + 2400);
        expand(raw, args[n], MAX_ARG + 2400);
        n++;
    }
    args[n] = NULL;
    cap_steps(args + 1, n - 1);
    const char *t = getenv("BASP_FUZZ_CLI_TIMEOUT"), *vs = getenv("BASP_FUZZ_CLI_VARIANTS");
    int timeout = t && atoi(t) > 0 ? atoi(t) : 30, variants = vs && atoi(vs) > 0 ? atoi(vs) : 1;
    uint64_t h = fnv(0xcbf29ce484222325ULL, data, size);
    for (int k = 0; k < variants; k++) { /* the same argv with other damage to the files */
        make_case(h + (uint64_t)k * 0x9e3779b97f4a7c15ULL);
        char err[8192];
        int rc = run(args, cased, timeout, err, sizeof err);
        if (getenv("BASP_FUZZ_CLI_VERBOSE")) {
            char *nl = strchr(err, '\n');
            fprintf(stderr, "fuzz_cli: status %d: %.*s\n", rc, nl ? (int)(nl - err) : (int)strlen(err), err);
        }
        const char *why = rc == -1             ? "did not end (timeout)"
                          : rc <= -2           ? "was killed by a signal"
                          : rc == 86           ? "reported a sanitizer error"
                          : rc >= 120          ? "exited with a status >= 120"
                          : rc != 0 && !err[0] ? "failed without a message"
                                               : NULL;
        if (why) {
            fprintf(stderr, "fuzz_cli: the training binary %s (status %d; signal %d); argv:\n", why, rc,
                    rc <= -2 ? -2 - rc : 0);
            for (int i = 0; i < n; i++) fprintf(stderr, "  [%d] %s\n", i, args[i]);
            fprintf(stderr, "files: %s (kept; variant %d)\nstderr:\n%s\n", cased, k, err);
            abort();
        }
    }
    for (int i = 1; i < n; i++) free(args[i]);
    return 0;
}
