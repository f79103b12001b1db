/* cm_json.c — the repeated-key rule every JSON reader of basp applies
 * after parsing (common.h says why).  One implementation for the compiler
 * (frontend/hfjson.c), the runtime (rt_ckpt_load.c, rt_val.c) and the
 * safetensors reader (rt_safetensors.c, linked with this file alone by its
 * fuzz target and unit test). */
#include "common.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* v as compact JSON into out (at most n bytes, "..." when cut). */
static void json_show(const cJSON *v, char *out, size_t n) {
    char *text = cJSON_PrintUnformatted(v);
    snprintf(out, n, "%s", text ? text : "?");
    if (text && strlen(text) >= n && n > 4) memcpy(out + n - 4, "...", 4);
    cJSON_free(text);
}

/* path + one step: ".key" (or "key" at the root) for a plain name,
 * ["key"] for one with dots, brackets or other characters, [i] for an
 * array element. */
static void json_step(char *path, size_t n, const char *key, int index) {
    size_t k = strlen(path);
    if (k >= n - 1) return;
    if (!key) {
        snprintf(path + k, n - k, "[%d]", index);
        return;
    }
    bool plain = *key != '\0';
    for (const char *c = key; *c && plain; c++)
        plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_';
    if (plain)
        snprintf(path + k, n - k, "%s%s", k ? "." : "", key);
    else
        snprintf(path + k, n - k, "[\"%.80s\"]", key);
}

static int json_key_cmp(const void *a, const void *b) {
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    int c = strcmp(x->string, y->string);
    return c ? c : (x < y ? -1 : x > y); /* ties: any fixed order; both are reported */
}

/* The first and a later member of object o with the same key, or false.
 * Sorting the members keeps this O(n log n): a safetensors header has one
 * member per tensor, tens of thousands in a large shard. */
static bool json_dup_in(const cJSON *o, const cJSON **a, const cJSON **b) {
    int n = 0;
    for (const cJSON *e = o->child; e; e = e->next) n++;
    if (n < 2) return false;
    const cJSON **m = malloc(sizeof *m * (size_t)n);
    if (!m) { /* no memory for the sort: the pairwise comparison */
        for (const cJSON *x = o->child; x; x = x->next)
            for (const cJSON *y = x->next; y; y = y->next)
                if (x->string && y->string && !strcmp(x->string, y->string)) return *a = x, *b = y, true;
        return false;
    }
    int k = 0;
    for (const cJSON *e = o->child; e; e = e->next)
        if (e->string) m[k++] = e;
    qsort(m, (size_t)k, sizeof *m, json_key_cmp);
    bool found = false;
    for (int i = 1; i < k && !found; i++)
        if (!strcmp(m[i - 1]->string, m[i]->string)) {
            found = true;
            *a = m[i - 1], *b = m[i];
        }
    free(m);
    if (!found) return false;
    for (const cJSON *e = o->child; e; e = e->next) /* the one written first goes first */
        if (e == *b) {
            const cJSON *t = *a;
            *a = *b, *b = t;
            break;
        } else if (e == *a) {
            break;
        }
    return true;
}

/* Depth-first: a repeated key in j or below it (path: j's own path). */
static bool json_dup_walk(const cJSON *j, char *path, size_t n, rt_json_dup *out) {
    const cJSON *a, *b;
    if (cJSON_IsObject(j) && json_dup_in(j, &a, &b)) {
        json_step(path, n, a->string, 0);
        snprintf(out->path, sizeof out->path, "%s", path);
        json_show(a, out->first, sizeof out->first);
        json_show(b, out->second, sizeof out->second);
        return true;
    }
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j)) return false;
    size_t k = strlen(path);
    int i = 0;
    for (const cJSON *e = j->child; e; e = e->next, i++) {
        json_step(path, n, cJSON_IsObject(j) ? e->string : NULL, i);
        if (json_dup_walk(e, path, n, out)) return true;
        path[k] = '\0';
    }
    return false;
}

/* A repeated key anywhere in root: depth first, in each object the one of
 * the smallest name, its two values in file order. */
bool rt_json_find_dup(const cJSON *root, rt_json_dup *out) {
    char path[sizeof out->path] = "";
    memset(out, 0, sizeof *out);
    return root && json_dup_walk(root, path, sizeof path, out);
}

/* The message every reader gives (after its file name); n >= 768 holds
 * it whole. */
void rt_json_dup_text(const rt_json_dup *d, char *out, size_t n) {
    snprintf(out, n,
             "key %s is repeated (first %s, then %s): Python's json, and so transformers, would silently "
             "take the last; remove one",
             d->path, d->first, d->second);
}
