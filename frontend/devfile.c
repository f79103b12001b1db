/* devfile.c — device files: measured machines described in JSON, added to
 * the device presets at run time (baspc --device-file FILE).
 *
 * A preset in layout/presets.c describes the machine it was measured on; a
 * fitted CPU preset describes it on the day it was fitted (the development
 * container's rates moved by 10-20% between days).  bench/calibrate.py
 * --device-file writes what it fits on this machine now, and a spec names
 * it like any preset (`device NAME`, `--set mesh.device=NAME`), so the
 * planner and the cost model use measured figures without a rebuilt
 * compiler.  The format:
 *
 *     {"devices": [{"name": "xeon_today", "like": "cpu_calibrated",
 *                   "compute_fraction": 1.37, "attention_fraction": 1.45,
 *                   "mem_bw_fraction": 1.92, "op_overhead": 1.28e-6,
 *                   "exp_rate": 1.93e9, "shared_core_efficiency": 0.9,
 *                   "intra": {"kind": "shm", "bandwidth": 6e9, "latency": 0}}]}
 *
 * Every field but name is optional and defaults to the `like` preset's
 * (default "cpu"); unknown fields are errors (a misspelt figure would
 * otherwise be ignored silently).  Units are SI: bytes, bytes per second,
 * FLOP/s, seconds. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

typedef struct devfile {
    const char *path; /* the registered source name */
    const char *text;
    bool failed;
} devfile;

/* The location of byte `at` of the text, `len` bytes long. */
static sup_loc loc_at(const devfile *f, const char *at, int len) {
    return fe_text_loc(f->path, f->text, (size_t)(at - f->text), len);
}

/* The location of the first "key" in the text at or after byte `from` (the
 * byte `from` when absent): cJSON keeps no positions, and a key's first
 * occurrence after its device's start is where the reader looks. */
static sup_loc key_loc(const devfile *f, size_t from, const char *key) {
    char quoted[80];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *at = strstr(f->text + from, quoted);
    return at ? loc_at(f, at, (int)strlen(quoted)) : loc_at(f, f->text + from, 1);
}

static void dev_error(devfile *f, sup_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void dev_error(devfile *f, sup_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sup_vdiag(SUP_ERROR, loc, fmt, ap);
    va_end(ap);
    f->failed = true;
}

/* A number field within [lo, hi] (lo = 0: zero allowed; else > 0 is the
 * least), else an error.  The ranges are the spec's for the same
 * quantities (frontend/README.md), and generous ones for the rest: a
 * figure beyond them is a unit mistake, not a machine. */
static void number(devfile *f, const cJSON *obj, size_t from, const char *pfx, const char *key, double *out, double lo,
                   double hi) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j) return;
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= lo && j->valuedouble <= hi) || (lo > 0 && j->valuedouble <= 0)) {
        dev_error(f, key_loc(f, from, key), "'%s%s' must be a number in [%g, %g]", pfx, key, lo, hi);
        return;
    }
    *out = j->valuedouble;
}

/* Fields not in `known` (NULL-terminated) are errors, with the closest. */
static void only_known(devfile *f, const cJSON *obj, size_t from, const char *pfx, const char *const *known) {
    int n = 0;
    while (known[n]) n++;
    for (const cJSON *c = obj->child; c; c = c->next) {
        bool ok = false;
        for (int i = 0; i < n && !ok; i++) ok = !strcmp(c->string, known[i]);
        if (ok) continue;
        sup_loc loc = key_loc(f, from, c->string);
        char what[128];
        snprintf(what, sizeof what, "%s%s", pfx, c->string);
        dev_error(f, loc, "unknown field '%s'", what);
        const char *near = sup_closest(c->string, known, n);
        if (near) sup_note(loc, "did you mean '%s'?", near);
    }
}

/* "intra", "inter" or "host": {kind, bandwidth, latency, efficiency}. */
static void link(devfile *f, const cJSON *dev, size_t from, const char *which, layout_link *l) {
    static const char *const known[] = {"kind", "bandwidth", "latency", "efficiency", NULL};
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(dev, which);
    if (!j) return;
    if (!cJSON_IsObject(j)) {
        dev_error(f, key_loc(f, from, which), "'%s' must be an object {kind, bandwidth, latency, efficiency}", which);
        return;
    }
    char pfx[32];
    snprintf(pfx, sizeof pfx, "%s.", which);
    only_known(f, j, from, pfx, known);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kind");
    if (k) {
        if (!cJSON_IsString(k) || !k->valuestring[0] || strlen(k->valuestring) >= sizeof l->kind)
            dev_error(f, key_loc(f, from, "kind"), "'%skind' must be a non-empty string (at most 63 bytes)", pfx);
        else
            snprintf(l->kind, sizeof l->kind, "%s", k->valuestring);
    }
    number(f, j, from, pfx, "bandwidth", &l->bandwidth, 1e6, 1e15);
    number(f, j, from, pfx, "latency", &l->latency, 0, 1);
    number(f, j, from, pfx, "efficiency", &l->efficiency, 1e-6, 1);
}

/* One device object: its fields over the `like` preset's, then added
 * when they are all good. */
static void device_fields(devfile *f, const cJSON *dev, int index) {
    static const char *const known[] = {"name",
                                        "like",
                                        "memory",
                                        "peak_flops_bf16",
                                        "peak_flops_fp32",
                                        "mem_bw",
                                        "compute_fraction",
                                        "attention_fraction",
                                        "mem_bw_fraction",
                                        "op_overhead",
                                        "exp_rate",
                                        "host_memory",
                                        "model_error",
                                        "shared_core_efficiency",
                                        "intra",
                                        "inter",
                                        "host",
                                        NULL};
    char at[32];
    snprintf(at, sizeof at, "devices[%d]", index);
    if (!cJSON_IsObject(dev)) {
        dev_error(f, key_loc(f, 0, "devices"), "'%s' must be an object", at);
        return;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(dev, "name");
    if (!cJSON_IsString(name)) {
        dev_error(f, key_loc(f, 0, "devices"), "'%s' has no \"name\" string (the name a spec's `device` uses)", at);
        return;
    }
    /* where this device's fields are looked for: its name's value */
    char qname[96];
    snprintf(qname, sizeof qname, "\"%.80s\"", name->valuestring);
    const char *p = strstr(f->text, qname);
    size_t from = p ? (size_t)(p - f->text) : 0;
    while (from > 0 && f->text[from] != '{') from--;
    only_known(f, dev, from, "", known);
    const cJSON *like = cJSON_GetObjectItemCaseSensitive(dev, "like");
    const char *base = cJSON_IsString(like) ? like->valuestring : "cpu";
    if (like && !cJSON_IsString(like)) {
        dev_error(f, key_loc(f, from, "like"), "'like' must be a string naming a device preset");
        return;
    }
    const layout_device_preset *b = layout_device_lookup(base);
    if (!b) {
        dev_error(f, key_loc(f, from, "like"), "unknown device '%s' in 'like'", base);
        return;
    }
    layout_device_preset d = *b;
    d.name = name->valuestring;
    const double MiB = 1024.0 * 1024, TiB = MiB * MiB;
    number(f, dev, from, "", "memory", &d.mem_bytes, MiB, 1024 * TiB);
    number(f, dev, from, "", "host_memory", &d.host_mem_bytes, MiB, 1024 * TiB);
    number(f, dev, from, "", "peak_flops_bf16", &d.peak_flops_bf16, 1e6, 1e18);
    number(f, dev, from, "", "peak_flops_fp32", &d.peak_flops_fp32, 1e6, 1e18);
    number(f, dev, from, "", "mem_bw", &d.mem_bw, 1e6, 1e15);
    number(f, dev, from, "", "compute_fraction", &d.compute_fraction, 1e-6, 1e3);
    number(f, dev, from, "", "attention_fraction", &d.attention_fraction, 1e-6, 1e3);
    number(f, dev, from, "", "mem_bw_fraction", &d.mem_bw_fraction, 1e-6, 1e3);
    number(f, dev, from, "", "op_overhead", &d.op_overhead, 0, 1);
    number(f, dev, from, "", "exp_rate", &d.exp_rate, 0, 1e15);
    number(f, dev, from, "", "model_error", &d.model_error, 0, 0.99);
    number(f, dev, from, "", "shared_core_efficiency", &d.shared_core_efficiency, 0.01, 1);
    link(f, dev, from, "intra", &d.intra);
    link(f, dev, from, "inter", &d.inter);
    link(f, dev, from, "host", &d.host);
    if (f->failed) return;
    char why[256];
    if (!layout_device_add(&d, why, sizeof why)) dev_error(f, key_loc(f, from, "name"), "%s", why);
}

/* Each device is judged alone: one device's errors do not hide the next's. */
static void device(devfile *f, const cJSON *dev, int index) {
    bool before = f->failed;
    f->failed = false;
    device_fields(f, dev, index);
    f->failed |= before;
}

bool fe_device_file_load(const char *path) {
    size_t len;
    char *text = sup_read_file(path, &len);
    if (!text) {
        sup_error(sup_noloc(), "--device-file %s: cannot read: %s", path, sup_read_why(errno));
        return false;
    }
    bool ok = fe_device_text_load(path, text, len);
    free(text);
    return ok;
}

bool fe_device_text_load(const char *name, const char *text, size_t len) {
    devfile f = {sup_source_add(name, text, len), NULL, false};
    f.text = sup_source_text(f.path);
    /* the registered copy (a name registered before keeps its first text) */
    len = strnlen(f.text, len);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(f.text, len, &end, false);
    if (!root) {
        sup_error(loc_at(&f, end ? end : f.text, 1), "malformed JSON in device file");
        return false;
    }
    rt_json_dup dup;
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive(root, "devices");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(devs) || cJSON_GetArraySize(devs) == 0) {
        dev_error(&f, key_loc(&f, 0, "devices"),
                  "a device file is an object {\"devices\": [...]} with at least one "
                  "device");
    } else if (rt_json_find_dup(root, &dup)) {
        char why[768];
        rt_json_dup_text(&dup, why, sizeof why);
        dev_error(&f, key_loc(&f, 0, "devices"), "%s", why);
    } else {
        static const char *const top[] = {"devices", NULL};
        only_known(&f, root, 0, "", top);
        int i = 0;
        for (const cJSON *d = devs->child; d; d = d->next) device(&f, d, i++);
    }
    cJSON_Delete(root);
    return !f.failed;
}
