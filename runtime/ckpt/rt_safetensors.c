/* rt_safetensors.c — the safetensors reader and header writer (format in
 * rt_safetensors.h).  Pure functions over memory buffers: no MPI, no file
 * system, so the fuzz target (tests/fuzz/fuzz_safetensors.c) links this
 * file alone.  A file that passes rt_st_parse can be read tensor by tensor
 * with nothing but offset arithmetic: every check that could fail later is
 * made here. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_safetensors.h"

static bool st_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool st_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

uint64_t rt_fnv64(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

void rt_st_fmt_shape(char *out, size_t n, const int64_t *shape, int nd) {
    size_t k = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < n) snprintf(out + k, n - k, "]");
}

static const struct {
    const char *name;
    int size;
    rt_st_dtype dtype;
} st_dtypes[] = {
    {"F32", 4, RT_ST_F32},       {"F16", 2, RT_ST_F16},   {"BF16", 2, RT_ST_BF16}, {"F64", 8, RT_ST_F64},
    {"BOOL", 1, RT_ST_OTHER},    {"U8", 1, RT_ST_OTHER},  {"I8", 1, RT_ST_OTHER},  {"F8_E4M3", 1, RT_ST_OTHER},
    {"F8_E5M2", 1, RT_ST_OTHER}, {"I16", 2, RT_ST_OTHER}, {"U16", 2, RT_ST_OTHER}, {"I32", 4, RT_ST_OTHER},
    {"U32", 4, RT_ST_OTHER},     {"I64", 8, RT_ST_OTHER}, {"U64", 8, RT_ST_OTHER},
};

/* A JSON number that is an integer in [0, 2^53] (exact in a double). */
static bool st_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || floor(d) != d) return false;
    *out = (uint64_t)d;
    return true;
}

/* entry := {"dtype": STRING, "shape": [UINT*], "data_offsets": [UINT, UINT]} */
static bool st_entry(const cJSON *e, const char *path, rt_st_tensor *t, char *err, size_t errlen) {
    const char *nm = t->name;
    if (!cJSON_IsObject(e)) return st_fail(err, errlen, "%s: corrupt header: entry '%.64s' is not an object", path, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of))
        return st_fail(err, errlen, "%s: corrupt header: tensor '%.64s' lacks dtype, shape or data_offsets", path, nm);
    t->elem_size = 0;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof *st_dtypes; i++)
        if (!strcmp(dt->valuestring, st_dtypes[i].name)) {
            t->elem_size = st_dtypes[i].size;
            t->dtype = st_dtypes[i].dtype;
            snprintf(t->dtype_name, sizeof t->dtype_name, "%s", st_dtypes[i].name);
        }
    if (!t->elem_size)
        return st_fail(err, errlen, "%s: corrupt header: tensor '%.64s' has unknown dtype '%.16s'", path, nm,
                       dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > RT_ST_MAX_DIMS)
        return st_fail(err, errlen, "%s: tensor '%.64s' has %d dims (at most %d)", path, nm, nd, RT_ST_MAX_DIMS);
    t->nd = nd;
    /* elems × elem_size must not overflow: each factor is bounded by 2^53
     * and the running product by 2^62 / elem_size. */
    uint64_t elems = 1, d;
    int k = 0;
    for (const cJSON *x = sh->child; x; x = x->next, k++) {
        if (!st_uint(x, &d))
            return st_fail(err, errlen,
                           "%s: corrupt header: tensor '%.64s' has a shape entry that is not a "
                           "non-negative integer",
                           path, nm);
        t->shape[k] = (int64_t)d;
        if (d && elems > (UINT64_C(1) << 62) / (uint64_t)t->elem_size / d)
            return st_fail(err, errlen, "%s: corrupt header: tensor '%.64s' is too large", path, nm);
        elems *= d;
    }
    t->elems = (int64_t)elems;
    if (cJSON_GetArraySize(of) != 2 || !st_uint(of->child, &t->begin) || !st_uint(of->child->next, &t->end) ||
        t->end < t->begin)
        return st_fail(err, errlen, "%s: corrupt header: tensor '%.64s' has bad data_offsets", path, nm);
    if (t->end - t->begin != elems * (uint64_t)t->elem_size)
        return st_fail(err, errlen,
                       "%s: corrupt header: tensor '%.64s' (%s, %llu elements) has data_offsets "
                       "[%llu, %llu], %llu bytes instead of %llu",
                       path, nm, t->dtype_name, (unsigned long long)elems, (unsigned long long)t->begin,
                       (unsigned long long)t->end, (unsigned long long)(t->end - t->begin),
                       (unsigned long long)(elems * (uint64_t)t->elem_size));
    return true;
}

static int st_cmp_begin(const void *a, const void *b) {
    const rt_st_tensor *x = *(const rt_st_tensor *const *)a, *y = *(const rt_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* The tensors tile [0, data_len) exactly: sorted by offset, each starts
 * where the previous one ends.  A gap, an overlap or bytes past the last
 * tensor mean a damaged (or deliberately ambiguous) file. */
static bool st_check_cover(rt_st_file *f, const char *path, char *err, size_t errlen) {
    const rt_st_tensor **s = malloc(sizeof *s * (f->n > 0 ? (size_t)f->n : 1));
    if (!s) return st_fail(err, errlen, "%s: out of memory", path);
    for (int i = 0; i < f->n; i++) s[i] = &f->t[i];
    qsort(s, (size_t)f->n, sizeof *s, st_cmp_begin);
    uint64_t at = 0;
    bool ok = true;
    for (int i = 0; i < f->n && ok; i++) {
        if (s[i]->end > f->data_len)
            ok = st_fail(err, errlen,
                         "%s: truncated: tensor '%.64s' ends at byte %llu of the data section, which "
                         "holds %llu bytes",
                         path, s[i]->name, (unsigned long long)s[i]->end, (unsigned long long)f->data_len);
        else if (s[i]->begin != at)
            ok = st_fail(err, errlen,
                         "%s: corrupt header: tensor '%.64s' starts at byte %llu of the data section, "
                         "expected %llu (%s)",
                         path, s[i]->name, (unsigned long long)s[i]->begin, (unsigned long long)at,
                         s[i]->begin < at ? "overlap" : "gap");
        at = s[i]->end;
    }
    if (ok && at != f->data_len)
        ok = st_fail(err, errlen,
                     "%s: %llu bytes of trailing garbage after the last tensor (the header describes "
                     "%llu bytes of data, the file holds %llu)",
                     path, (unsigned long long)(f->data_len - at), (unsigned long long)at,
                     (unsigned long long)f->data_len);
    free(s);
    return ok;
}

/* file := u64le N, header[N] (a JSON object), data */
static bool st_parse_header(const uint8_t *buf, size_t len, const char *path, rt_st_file *f, cJSON **root, char *err,
                            size_t errlen) {
    if (len < 8)
        return st_fail(err, errlen, "%s: not a safetensors file: %zu bytes, shorter than the 8-byte header length",
                       path, len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    if (n > RT_ST_MAX_HEADER)
        return st_fail(err, errlen, "%s: not a safetensors file: header length %llu is over the %u-byte limit", path,
                       (unsigned long long)n, RT_ST_MAX_HEADER);
    if (n > len - 8)
        return st_fail(err, errlen, "%s: truncated: the header length says %llu bytes, the file holds %zu after it",
                       path, (unsigned long long)n, len - 8);
    if (n < 2 || buf[8] != '{')
        return st_fail(err, errlen, "%s: not a safetensors file: the header does not start with '{'", path);
    *root = cJSON_ParseWithLength((const char *)buf + 8, (size_t)n);
    if (!cJSON_IsObject(*root)) return st_fail(err, errlen, "%s: corrupt header: not a JSON object", path);
    rt_json_dup dup; /* a tensor named twice, or a field twice in an entry */
    if (rt_json_find_dup(*root, &dup)) {
        char why[768];
        rt_json_dup_text(&dup, why, sizeof why);
        return st_fail(err, errlen, "%s: corrupt header: %s", path, why);
    }
    f->data_off = 8 + n;
    f->data_len = len - 8 - n;
    return true;
}

bool rt_st_parse(const uint8_t *buf, size_t len, const char *path, rt_st_file *out, char *err, size_t errlen) {
    rt_st_file f = {0};
    cJSON *root = NULL;
    bool ok = st_parse_header(buf, len, path, &f, &root, err, errlen);
    int cap = ok ? cJSON_GetArraySize(root) : 0;
    f.t = calloc((size_t)(cap ? cap : 1), sizeof *f.t);
    if (!f.t) ok = st_fail(err, errlen, "%s: out of memory", path);
    for (const cJSON *e = ok ? root->child : NULL; e && ok; e = e->next) {
        if (!e->string)
            ok = st_fail(err, errlen, "%s: corrupt header: an entry has no name", path);
        else if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e))
                ok = st_fail(err, errlen, "%s: corrupt header: __metadata__ is not an object", path);
            continue;
        }
        if (!ok) break;
        rt_st_tensor *t = &f.t[f.n++];
        t->name = strdup(e->string);
        if (!t->name)
            ok = st_fail(err, errlen, "%s: out of memory", path);
        else
            ok = st_entry(e, path, t, err, errlen);
    }
    if (ok) ok = st_check_cover(&f, path, err, errlen);
    cJSON_Delete(root);
    if (!ok) {
        rt_st_free(&f);
        f = (rt_st_file){0};
    }
    *out = f;
    return ok;
}

void rt_st_free(rt_st_file *f) {
    for (int i = 0; f->t && i < f->n; i++) free(f->t[i].name);
    free(f->t);
    f->t = NULL;
    f->n = 0;
}

const rt_st_tensor *rt_st_find(const rt_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

/* IEEE half → float, subnormals and specials included. */
static float st_half(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, ex = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (ex == 0x1f)
        bits = sign | 0x7f800000u | man << 13;
    else if (ex)
        bits = sign | (ex + 112) << 23 | man << 13;
    else {
        float f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

bool rt_st_to_f32(const rt_st_tensor *t, const uint8_t *data, float *out) {
    for (int64_t i = 0; i < t->elems; i++) {
        const uint8_t *b = data + i * t->elem_size;
        uint32_t u32;
        switch (t->dtype) {
        case RT_ST_F32:
            u32 = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
            memcpy(&out[i], &u32, 4);
            break;
        case RT_ST_BF16: /* the upper half of an fp32 */
            u32 = ((uint32_t)b[0] | (uint32_t)b[1] << 8) << 16;
            memcpy(&out[i], &u32, 4);
            break;
        case RT_ST_F16: out[i] = st_half((uint16_t)(b[0] | b[1] << 8)); break;
        case RT_ST_F64: {
            uint64_t u = 0;
            double d;
            for (int k = 7; k >= 0; k--) u = u << 8 | b[k];
            memcpy(&d, &u, 8);
            out[i] = (float)d;
            break;
        }
        default: return false;
        }
    }
    return true;
}

/* Appends s as a JSON string; false when it does not fit. */
static bool st_put_str(char *buf, size_t cap, size_t *k, const char *s) {
    if (*k + 1 >= cap) return false;
    buf[(*k)++] = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int w = c == '"' || c == '\\' ? snprintf(buf + *k, cap - *k, "\\%c", c)
                : c < 0x20            ? snprintf(buf + *k, cap - *k, "\\u%04x", c)
                                      : snprintf(buf + *k, cap - *k, "%c", c);
        if (w < 0 || (size_t)w >= cap - *k) return false;
        *k += (size_t)w;
    }
    if (*k + 1 >= cap) return false;
    buf[(*k)++] = '"';
    return true;
}

uint8_t *rt_st_header_f32(int n, const char *const *names, const int *nd, const int64_t (*shape)[RT_ST_MAX_DIMS],
                          const char *metadata, size_t *len) {
    size_t cap = 64 + (metadata ? strlen(metadata) : 0);
    for (int i = 0; i < n; i++) cap += 6 * strlen(names[i]) + 96 + 21 * (size_t)nd[i];
    uint8_t *out = malloc(8 + cap + 8);
    if (!out) return NULL;
    char *h = (char *)out + 8;
    size_t k = 0;
    uint64_t off = 0;
    bool ok = true;
    k += (size_t)snprintf(h, cap, "{");
    if (metadata) k += (size_t)snprintf(h + k, cap - k, "\"__metadata__\":%s%s", metadata, n ? "," : "");
    for (int i = 0; ok && i < n; i++) {
        uint64_t elems = 1;
        ok = st_put_str(h, cap, &k, names[i]);
        if (ok) k += (size_t)snprintf(h + k, cap - k, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; ok && d < nd[i]; d++) {
            k += (size_t)snprintf(h + k, cap - k, "%s%lld", d ? "," : "", (long long)shape[i][d]);
            elems *= (uint64_t)shape[i][d];
        }
        if (ok)
            k += (size_t)snprintf(h + k, cap - k, "],\"data_offsets\":[%llu,%llu]}%s", (unsigned long long)off,
                                  (unsigned long long)(off + 4 * elems), i + 1 < n ? "," : "");
        off += 4 * elems;
        ok = ok && k < cap;
    }
    ok = ok && k + 1 < cap;
    if (!ok) {
        free(out);
        return NULL;
    }
    h[k++] = '}';
    while ((8 + k) % 8) h[k++] = ' '; /* the padding the format allows, for aligned data */
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)k >> (8 * i));
    *len = 8 + k;
    return out;
}
