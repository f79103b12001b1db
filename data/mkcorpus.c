/* mkcorpus — a deterministic English-like demo corpus for the CPU runtime.
 *
 *   mkcorpus [--bytes N] [--seed S] OUT.bin [OUT.txt]
 *
 * Sentences come from a small probabilistic grammar over a fixed word list
 * (subject, verb, object, optional place and time phrases, a few sentence
 * shapes), so a byte-level model visibly learns it in a few hundred steps:
 * spelling first, then frequent words, then word order.  OUT.bin is an
 * llm.c token file (header of 256 int32: magic 20240520, version 1, token
 * count; then one uint16 per byte); OUT.txt, when named, is the same text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) { /* xorshift64*, uniform enough for a grammar */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ULL) >> 33) % n;
}

#define PICK(a) (a)[rnd(sizeof(a) / sizeof *(a))]
static const char *const adj[] = {"small", "old",   "quiet",   "bright", "green",
                                  "tired", "happy", "careful", "young",  "clever"};
static const char *const noun[] = {"cat", "dog",    "bird", "farmer", "teacher", "child", "river", "baker",
                                   "fox", "sailor", "girl", "boy",    "horse",   "king",  "miller"};
static const char *const verb_t[] = {"sees",  "finds",   "follows", "helps", "likes",
                                     "calls", "watches", "carries", "feeds", "meets"};
static const char *const verb_i[] = {"sleeps", "sings", "runs", "waits", "laughs", "walks", "rests", "dreams"};
static const char *const place[] = {"near the river", "in the garden", "under the old tree", "at the market",
                                    "by the mill",    "on the hill",   "in the small house", "across the field"};
static const char *const when[] = {"in the morning", "at night",      "every day", "after the rain",
                                   "before dinner",  "in the spring", "on sunday"};
static const char *const conjunction[] = {"and", "but", "because", "while"};

typedef struct {
    char *s;
    size_t n, cap;
} buf;
static void put(buf *b, const char *s) {
    size_t m = strlen(s);
    if (b->n + m + 1 > b->cap) {
        b->cap = (b->n + m + 1) * 2;
        b->s = realloc(b->s, b->cap);
        if (!b->s) {
            fprintf(stderr, "mkcorpus: out of memory\n");
            exit(1);
        }
    }
    memcpy(b->s + b->n, s, m + 1);
    b->n += m;
}

static void noun_phrase(buf *b) {
    put(b, rnd(4) == 0 ? "a " : "the ");
    if (rnd(2)) {
        put(b, PICK(adj));
        put(b, " ");
    }
    put(b, PICK(noun));
}

static void clause(buf *b) {
    noun_phrase(b);
    put(b, " ");
    if (rnd(3)) {
        put(b, PICK(verb_t));
        put(b, " ");
        noun_phrase(b);
    } else
        put(b, PICK(verb_i));
    if (rnd(2)) {
        put(b, " ");
        put(b, PICK(place));
    }
    if (rnd(3) == 0) {
        put(b, " ");
        put(b, PICK(when));
    }
}

static void sentence(buf *b) {
    size_t start = b->n;
    clause(b);
    if (rnd(4) == 0) {
        put(b, " ");
        put(b, PICK(conjunction));
        put(b, " ");
        clause(b);
    }
    b->s[start] = (char)(b->s[start] - 'a' + 'A');
    put(b, rnd(8) == 0 ? "!" : ".");
    put(b, rnd(6) == 0 ? "\n" : " ");
}

static int write_bin(const char *path, const buf *b) {
    int32_t h[256] = {20240520, 1, (int32_t)b->n};
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(h, sizeof h, 1, f) == 1;
    for (size_t i = 0; ok && i < b->n; i++) {
        uint16_t t = (unsigned char)b->s[i];
        ok = fwrite(&t, 2, 1, f) == 1;
    }
    return fclose(f) == 0 && ok;
}

int main(int argc, char **argv) {
    long long bytes = 2 << 20, seed = 1;
    const char *out[2] = {NULL, NULL};
    int nout = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
            bytes = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = atoll(argv[++i]);
        else if (argv[i][0] != '-' && nout < 2)
            out[nout++] = argv[i];
        else {
            fprintf(stderr, "usage: mkcorpus [--bytes N] [--seed S] OUT.bin [OUT.txt]\n");
            return 2;
        }
    }
    if (!out[0] || bytes < 1 || bytes > 1000000000) {
        fprintf(stderr, "usage: mkcorpus [--bytes N] [--seed S] OUT.bin [OUT.txt]\n");
        return 2;
    }
    rng_state = 0x9e3779b97f4a7c15ULL ^ (uint64_t)seed;
    if (!rng_state) rng_state = 1;
    buf b = {0};
    while ((long long)b.n < bytes) sentence(&b);
    b.n = (size_t)bytes;
    if (!write_bin(out[0], &b)) {
        perror(out[0]);
        return 1;
    }
    if (out[1]) {
        FILE *f = fopen(out[1], "wb");
        if (!f || fwrite(b.s, 1, b.n, f) != b.n || fclose(f) != 0) {
            perror(out[1]);
            return 1;
        }
    }
    printf("mkcorpus: %lld bytes -> %s%s%s\n", bytes, out[0], out[1] ? ", " : "", out[1] ? out[1] : "");
    free(b.s);
    return 0;
}
