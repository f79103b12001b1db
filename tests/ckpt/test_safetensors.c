/* test_safetensors — the MPI-free readers and writers behind checkpoints:
 * the safetensors header writer and reader (every byte of a written file
 * read back), the committed hand-made file (tests/ckpt/handmade.safetensors,
 * written by make_hf.py), dtype conversions, the Hugging Face name and
 * layout mapping, damaged files, the llm.c token file reader, and the
 * repeated-key rule of every JSON reader (common/common.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../unit/check.h"
#include "ckpt/rt_safetensors.h"

static char err[512];

/* A file of header + data; the caller frees. */
static uint8_t *make_file(const uint8_t *hdr, size_t hlen, const void *data, size_t dlen, size_t *len) {
    uint8_t *f = malloc(hlen + dlen);
    memcpy(f, hdr, hlen);
    memcpy(f + hlen, data, dlen);
    *len = hlen + dlen;
    return f;
}

static void test_roundtrip(void) {
    const char *names[] = {"model.embed_tokens.weight", "odd \"name\"\\", "empty"};
    int nd[] = {2, 1, 2};
    int64_t shape[3][RT_ST_MAX_DIMS] = {{2, 3}, {1}, {0, 5}};
    size_t hlen;
    uint8_t *h = rt_st_header_f32(3, names, nd, (const int64_t(*)[RT_ST_MAX_DIMS])shape, "{\"format\":\"pt\"}", &hlen);
    CHECK(h && hlen % 8 == 0);
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},\"model.embed_tokens.weight\":{\"dtype\":\"F32\","
                       "\"shape\":[2,3],\"data_offsets\":[0,24]},\"odd \\\"name\\\"\\\\\":{\"dtype\":\"F32\","
                       "\"shape\":[1],\"data_offsets\":[24,28]},\"empty\":{\"dtype\":\"F32\",\"shape\":[0,5],"
                       "\"data_offsets\":[28,28]}}";
    CHECK(memcmp(h + 8, want, strlen(want)) == 0);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | h[i];
    CHECK(n == hlen - 8);
    for (size_t i = 8 + strlen(want); i < hlen; i++) CHECK(h[i] == ' ');
    float data[7] = {1, 2, 3, 4, 5, 6, -7.5f};
    size_t len;
    uint8_t *file = make_file(h, hlen, data, sizeof data, &len);
    rt_st_file f;
    CHECK(rt_st_parse(file, len, "rt.safetensors", &f, err, sizeof err));
    CHECK(f.n == 3 && f.data_off == hlen && f.data_len == sizeof data);
    const rt_st_tensor *t = rt_st_find(&f, "odd \"name\"\\");
    CHECK(t && t->dtype == RT_ST_F32 && t->nd == 1 && t->shape[0] == 1 && t->begin == 24 && t->end == 28);
    /* every data byte back */
    CHECK(memcmp(file + f.data_off, data, sizeof data) == 0);
    float back[6];
    t = rt_st_find(&f, "model.embed_tokens.weight");
    CHECK(t && rt_st_to_f32(t, file + f.data_off + t->begin, back) && memcmp(back, data, 24) == 0);
    CHECK(rt_st_find(&f, "empty")->elems == 0);
    rt_st_free(&f);
    free(file);
    free(h);
}

static void test_handmade(const char *path) {
    FILE *fp = fopen(path, "rb");
    CHECK(fp);
    if (!fp) return;
    uint8_t buf[4096];
    size_t len = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    rt_st_file f;
    CHECK(rt_st_parse(buf, len, path, &f, err, sizeof err));
    if (!f.n) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    const float a[] = {1.0f, -2.0f, 0.5f, 3.25f, -0.125f, 100.0f}, c[] = {1.0f, -2.0f, 0.5f, 65504.0f};
    float out[6];
    const rt_st_tensor *t = rt_st_find(&f, "a.f32");
    CHECK(t && t->nd == 2 && t->shape[0] == 2 && t->shape[1] == 3);
    CHECK(t && rt_st_to_f32(t, buf + f.data_off + t->begin, out) && memcmp(out, a, sizeof a) == 0);
    t = rt_st_find(&f, "b.bf16");
    CHECK(t && t->dtype == RT_ST_BF16 && rt_st_to_f32(t, buf + f.data_off + t->begin, out) &&
          memcmp(out, a, 4 * sizeof *a) == 0);
    t = rt_st_find(&f, "c.f16");
    CHECK(t && t->dtype == RT_ST_F16 && rt_st_to_f32(t, buf + f.data_off + t->begin, out) &&
          memcmp(out, c, sizeof c) == 0);
    CHECK(f.n == 3 && !rt_st_find(&f, "__metadata__"));
    rt_st_free(&f);
}

static void test_half(void) {
    /* 0x0001: smallest subnormal 2^-24; 0x7c00: inf; 0xfc00: -inf; 0x7e00: NaN */
    const uint8_t b[] = {0x01, 0x00, 0x00, 0x7c, 0x00, 0xfc, 0x00, 0x7e, 0x00, 0x80};
    rt_st_tensor t = {.dtype = RT_ST_F16, .elem_size = 2, .elems = 5};
    float o[5];
    CHECK(rt_st_to_f32(&t, b, o));
    CHECK(o[0] == ldexpf(1, -24) && isinf(o[1]) && o[1] > 0 && isinf(o[2]) && o[2] < 0 && isnan(o[3]));
    CHECK(o[4] == 0 && signbit(o[4]));
    rt_st_tensor u = {.dtype = RT_ST_OTHER, .elem_size = 1, .elems = 1};
    CHECK(!rt_st_to_f32(&u, b, o));
}

static void test_hf_names(void) {
    rt_hf_map m = rt_hf_name("l12.wq");
    CHECK(!strcmp(m.name, "model.layers.12.self_attn.q_proj.weight") && m.split == 1);
    CHECK(!strcmp(rt_hf_name("l0.wo").name, "model.layers.0.self_attn.o_proj.weight") &&
          rt_hf_name("l0.wo").split == 2);
    CHECK(!strcmp(rt_hf_name("l1.mlp_norm").name, "model.layers.1.post_attention_layernorm.weight"));
    CHECK(!strcmp(rt_hf_name("l1.w_down").name, "model.layers.1.mlp.down_proj.weight"));
    CHECK(!strcmp(rt_hf_name("embed").name, "model.embed_tokens.weight") && rt_hf_name("embed").split == 0);
    CHECK(!strcmp(rt_hf_name("final_norm").name, "model.norm.weight"));
    CHECK(!strcmp(rt_hf_name("lm_head").name, "lm_head.weight"));
    CHECK(!strcmp(rt_hf_name("l0.unknown").name, "basp.l0.unknown"));
    /* wq [D=2, H=2, Dh=3] (y = x @ w) is q_proj [H*Dh=6, D=2]: hf[o][i] = ours[i][o] */
    int64_t dims[3] = {2, 2, 3}, hs[RT_ST_MAX_DIMS];
    CHECK(rt_hf_shape(&m, dims, 3, hs) == 2 && hs[0] == 6 && hs[1] == 2);
    float ours[12], hf[12], back[12];
    for (int i = 0; i < 12; i++) ours[i] = (float)i;
    rt_hf_export(&m, dims, 3, ours, hf);
    for (int i = 0; i < 2; i++)
        for (int o = 0; o < 6; o++) CHECK(hf[o * 2 + i] == ours[i * 6 + o]);
    rt_hf_import(&m, dims, 3, hf, back);
    CHECK(memcmp(back, ours, sizeof ours) == 0);
    /* wo [H=2, Dh=3, D=2] is o_proj [D=2, H*Dh=6] */
    rt_hf_map wo = rt_hf_name("l0.wo");
    int64_t od[3] = {2, 3, 2};
    CHECK(rt_hf_shape(&wo, od, 3, hs) == 2 && hs[0] == 2 && hs[1] == 6);
    rt_hf_export(&wo, od, 3, ours, hf);
    for (int i = 0; i < 6; i++)
        for (int o = 0; o < 2; o++) CHECK(hf[o * 6 + i] == ours[i * 2 + o]);
    /* Qwen's q/k/v biases: bq [H=2, Dh=3] is q_proj.bias [6], same order */
    rt_hf_map bq = rt_hf_name("l3.bq");
    CHECK(!strcmp(bq.name, "model.layers.3.self_attn.q_proj.bias"));
    CHECK(!strcmp(rt_hf_name("l0.bk").name, "model.layers.0.self_attn.k_proj.bias"));
    CHECK(!strcmp(rt_hf_name("l0.bv").name, "model.layers.0.self_attn.v_proj.bias"));
    int64_t bd[2] = {2, 3};
    CHECK(rt_hf_shape(&bq, bd, 2, hs) == 1 && hs[0] == 6);
    rt_hf_export(&bq, bd, 2, ours, hf);
    CHECK(memcmp(hf, ours, 6 * sizeof *ours) == 0);
    rt_hf_import(&bq, bd, 2, hf, back);
    CHECK(memcmp(back, ours, 6 * sizeof *ours) == 0);
    /* Qwen3's q/k norms: [Dh] both sides */
    rt_hf_map qn = rt_hf_name("l1.q_norm");
    CHECK(!strcmp(qn.name, "model.layers.1.self_attn.q_norm.weight") && qn.split == 0);
    CHECK(!strcmp(rt_hf_name("l1.k_norm").name, "model.layers.1.self_attn.k_norm.weight"));
    CHECK(rt_hf_shape(&qn, bd + 1, 1, hs) == 1 && hs[0] == 3);
}

/* rt_st_parse(header text + data of dlen zero bytes) must fail with `want` in the message. */
static void expect_bad(const char *json, size_t dlen, const char *want) {
    size_t n = strlen(json), len = 8 + n + dlen;
    uint8_t *b = calloc(1, len);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    rt_st_file f;
    bool ok = rt_st_parse(b, len, "x.safetensors", &f, err, sizeof err);
    CHECK(!ok);
    if (ok || !strstr(err, want)) fprintf(stderr, "  header %s: got '%s', want '%s'\n", json, ok ? "(ok)" : err, want);
    free(b);
}

static void test_bad(void) {
    rt_st_file f;
    CHECK(!rt_st_parse((const uint8_t *)"abc", 3, "x.safetensors", &f, err, sizeof err) &&
          strstr(err, "x.safetensors: not a safetensors file: 3 bytes"));
    const uint8_t big[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    CHECK(!rt_st_parse(big, 16, "x.safetensors", &f, err, sizeof err) && strstr(err, "over the"));
    const uint8_t trunc[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    CHECK(!rt_st_parse(trunc, 16, "x.safetensors", &f, err, sizeof err) &&
          strstr(err, "truncated: the header length says 100 bytes, the file holds 8"));
    expect_bad("[1,2]", 0, "does not start with '{'");
    expect_bad("{\"a\":", 0, "not a JSON object");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
               "truncated: tensor 'a' ends at byte 8 of the data section, which holds 4 bytes");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9, "1 bytes of trailing garbage");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "4 bytes instead of 8");
    expect_bad("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype 'Q4'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "not a non-negative integer");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
               6, "(overlap)");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "(gap)");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8,
               "corrupt header: key a is repeated (first {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}, "
               "then {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}): Python's json");
    expect_bad("{\"m.x\":{\"dtype\":\"F32\",\"shape\":[1],\"dtype\":\"F16\",\"data_offsets\":[0,4]}}", 4,
               "key [\"m.x\"].dtype is repeated (first \"F32\", then \"F16\")");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
               "too large");
    expect_bad("{\"__metadata__\":3}", 0, "__metadata__ is not an object");
}

static void test_tokens(void) {
    uint8_t b[1024 + 8] = {0};
    int32_t h[3] = {20240520, 1, 4};
    memcpy(b, h, sizeof h);
    const uint16_t toks[4] = {1, 2, 255, 0};
    memcpy(b + 1024, toks, sizeof toks);
    int32_t *t;
    int64_t n;
    CHECK(rt_tokens_parse(b, sizeof b, "t.bin", 256, &t, &n, err, sizeof err) && n == 4 && t[2] == 255);
    free(t);
    CHECK(!rt_tokens_parse(b, sizeof b, "t.bin", 255, &t, &n, err, sizeof err) &&
          strstr(err, "t.bin: token 2 has id 255, outside the model's vocabulary of 255"));
    CHECK(!rt_tokens_parse(b, sizeof b - 2, "t.bin", 256, &t, &n, err, sizeof err) &&
          strstr(err, "truncated: header says 4 tokens, file holds 3"));
    b[0] = 0;
    CHECK(!rt_tokens_parse(b, sizeof b, "t.bin", 256, &t, &n, err, sizeof err) && strstr(err, "magic"));
    CHECK(!rt_tokens_parse(b, 10, "t.bin", 256, &t, &n, err, sizeof err) && strstr(err, "shorter than"));
}

/* json: the repeated key rt_json_find_dup reports (path, both values), or
 * NULL for none. */
static void expect_dup(const char *json, const char *path, const char *first, const char *second) {
    cJSON *j = cJSON_Parse(json);
    rt_json_dup d;
    bool found = rt_json_find_dup(j, &d);
    CHECK(j && found == (path != NULL));
    if (found && path) CHECK(!strcmp(d.path, path) && !strcmp(d.first, first) && !strcmp(d.second, second));
    if (found != (path != NULL) || (found && path && (strcmp(d.path, path) || strcmp(d.first, first))))
        fprintf(stderr, "  %s: got %s (%s, %s), want %s\n", json, found ? d.path : "none", d.first, d.second,
                path ? path : "none");
    cJSON_Delete(j);
}

static void test_json_dup(void) {
    expect_dup("{\"hidden_size\":64,\"hidden_size\":128}", "hidden_size", "64", "128");
    expect_dup("{\"a\":1,\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"llama3\",\"factor\":16}}",
               "rope_scaling.factor", "8", "16");
    expect_dup("{\"weight_map\":{\"model.norm.weight\":\"a\",\"lm_head.weight\":\"a\",\"model.norm.weight\":\"b\"}}",
               "weight_map[\"model.norm.weight\"]", "\"a\"", "\"b\"");
    expect_dup("{\"l\":[{\"x\":1},{\"y\":1,\"y\":[2]}]}", "l[1].y", "1", "[2]");
    /* the same key in different objects, and values equal twice, are fine */
    expect_dup("{\"a\":{\"k\":1},\"b\":{\"k\":1},\"k\":[{\"k\":1},{\"k\":1}]}", NULL, NULL, NULL);
    /* a long value is cut; many members are sorted, not compared pairwise */
    char big[200000];
    size_t k = (size_t)snprintf(big, sizeof big, "{");
    for (int i = 0; i < 5000; i++) k += (size_t)snprintf(big + k, sizeof big - k, "\"t%d\":%d,", i, i);
    snprintf(big + k, sizeof big - k, "\"t77\":\"%0100d\"}", 0);
    cJSON *j = cJSON_Parse(big);
    rt_json_dup d;
    CHECK(rt_json_find_dup(j, &d) && !strcmp(d.path, "t77") && !strcmp(d.first, "77") &&
          strlen(d.second) == sizeof d.second - 1 && strstr(d.second, "..."));
    cJSON_Delete(j);
    char msg[768];
    rt_json_dup_text(&(rt_json_dup){"rms_norm_eps", "1e-05", "1e-06"}, msg, sizeof msg);
    CHECK(strstr(msg, "key rms_norm_eps is repeated (first 1e-05, then 1e-06): Python's json, and so transformers, "
                      "would silently take the last"));
}

int main(int argc, char **argv) {
    test_roundtrip();
    test_handmade(argc > 1 ? argv[1] : "handmade.safetensors");
    test_half();
    test_hf_names();
    test_bad();
    test_tokens();
    test_json_dup();
    if (failures)
        fprintf(stderr, "test_safetensors: %d check(s) failed\n", failures);
    else
        printf("test_safetensors: all checks passed\n");
    return failures != 0;
}
