/* replay — runs a fuzz target without libFuzzer: every file of the given
 * corpus directories (or files) once, then --mutations N seeded random
 * mutations of them (byte flips, insertions, deletions, splices, token-ish
 * edits).  Deterministic for a given --seed, so a failure reproduces; the
 * input under test is written to ./fuzz-current-input before each run, so a
 * crash leaves it behind for the regression corpus. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    uint8_t *data;
    size_t size;
} input;
static input *inputs;
static int ninputs, capinputs;
static uint64_t rng_state;

static uint64_t rng(void) { /* xorshift64*: small, seedable, good enough */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

static void add_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (1 << 20)) {
        fclose(f);
        return;
    }
    uint8_t *d = malloc((size_t)n + 1);
    size_t got = fread(d, 1, (size_t)n, f);
    fclose(f);
    if (ninputs == capinputs) {
        capinputs = capinputs ? 2 * capinputs : 64;
        inputs = realloc(inputs, (size_t)capinputs * sizeof *inputs);
    }
    inputs[ninputs++] = (input){d, got};
}

static void add_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        add_file(path);
        return;
    }
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) add_file(p);
    }
    if (d) closedir(d);
}

static const char *tokens[] = {"{",      "}",
                               "\"",     "#",
                               "import", "model",
                               "mesh",   "train",
                               "layout", "groups",
                               "link",   "from",
                               "16K",    "1e309",
                               "-1",     "0",
                               "GB/s",   "@",
                               "%",      "[",
                               "]",      ",",
                               "=",      ":",
                               "\n",     "99999999999999999999"};

/* One random edit of (d, n) into a fresh buffer. */
static uint8_t *mutate(const input *in, size_t *n_out) {
    size_t n = in->size, cap = n + 64;
    uint8_t *d = malloc(cap);
    memcpy(d, in->data, n);
    int edits = 1 + (int)(rng() % 4);
    for (int e = 0; e < edits; e++) {
        size_t pos = n ? rng() % (n + 1) : 0;
        switch (rng() % 5) {
        case 0:
            if (pos < n) d[pos] = (uint8_t)rng();
            break; /* flip */
        case 1:
            if (pos < n) {
                memmove(d + pos, d + pos + 1, n - pos - 1);
                n--;
            }
            break;
        case 2: { /* token */
            const char *t = tokens[rng() % (sizeof tokens / sizeof *tokens)];
            size_t tl = strlen(t);
            if (n + tl > cap) d = realloc(d, cap = n + tl + 64);
            memmove(d + pos + tl, d + pos, n - pos);
            memcpy(d + pos, t, tl);
            n += tl;
            break;
        }
        case 3:
            if (pos < n) n = pos;
            break; /* truncate */
        default: { /* splice */
            const input *o = &inputs[rng() % ninputs];
            if (!o->size) break;
            size_t from = rng() % o->size, len = 1 + rng() % 32;
            if (from + len > o->size) len = o->size - from;
            if (n + len > cap) d = realloc(d, cap = n + len + 64);
            memmove(d + pos + len, d + pos, n - pos);
            memcpy(d + pos, o->data + from, len);
            n += len;
        }
        }
    }
    *n_out = n;
    return d;
}

static void save_current(const uint8_t *d, size_t n) {
    FILE *f = fopen("fuzz-current-input", "wb");
    if (f) {
        fwrite(d, 1, n, f);
        fclose(f);
    }
}

int main(int argc, char **argv) {
    long mutations = 1000;
    rng_state = 0x9e3779b97f4a7c15ULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mutations") && i + 1 < argc)
            mutations = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            rng_state ^= strtoull(argv[++i], NULL, 10) * 0x2545F4914F6CDD1DULL;
        else
            add_path(argv[i]);
    }
    if (ninputs == 0) {
        fprintf(stderr, "replay: no inputs\n");
        return 2;
    }
    for (int i = 0; i < ninputs; i++) {
        save_current(inputs[i].data, inputs[i].size);
        LLVMFuzzerTestOneInput(inputs[i].data, inputs[i].size);
    }
    for (long k = 0; k < mutations; k++) {
        size_t n;
        uint8_t *d = mutate(&inputs[rng() % ninputs], &n);
        save_current(d, n);
        LLVMFuzzerTestOneInput(d, n);
        free(d);
    }
    remove("fuzz-current-input");
    printf("replay: %d corpus inputs and %ld mutations ran without a crash\n", ninputs, mutations);
    for (int i = 0; i < ninputs; i++) free(inputs[i].data);
    free(inputs);
    return 0;
}
